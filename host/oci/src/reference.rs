//! `oci://registry/repository:tag` and `…@sha256:…` references.
//!
//! Why the scheme is required: a plugin's module is a path or a reference, and a bare
//! `registry/repo:tag` is also a valid relative path. The registry is always named (no implied
//! Docker Hub), except that `docker.io` is served by `registry-1.docker.io`, as every client does.

use std::fmt;

use crate::error::OciError;

/// A parsed reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    /// `host[:port]`, as written.
    pub registry: String,
    /// `path/to/repo`, lower case.
    pub repository: String,
    pub tag: Option<String>,
    /// `sha256:<64 hex>`.
    pub digest: Option<String>,
}

/// The prefix every reference starts with.
pub const SCHEME: &str = "oci://";

impl Reference {
    /// Parses `oci://…`; a reference with neither tag nor digest means `:latest`.
    pub fn parse(s: &str) -> Result<Self, OciError> {
        let bad = |why: &str| OciError::Reference(format!("{s:?}: {why}"));
        let rest = s
            .strip_prefix(SCHEME)
            .ok_or_else(|| bad("must start with oci://"))?;
        let (name, digest) = match rest.split_once('@') {
            Some((n, d)) => (n, Some(d)),
            None => (rest, None),
        };
        let (registry, path) = name
            .split_once('/')
            .ok_or_else(|| bad("expected registry/repository"))?;
        if registry.is_empty()
            || !registry
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-:[]_".contains(c))
        {
            return Err(bad("the registry is not a host[:port]"));
        }
        // The tag is after the last colon that follows the last slash.
        let (repository, tag) = match path.rfind(':') {
            Some(i) if !path[i..].contains('/') => (&path[..i], Some(&path[i + 1..])),
            _ => (path, None),
        };
        let component_ok = |c: &str| {
            !c.is_empty()
                && c.chars()
                    .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || "._-".contains(ch))
                && c.starts_with(|ch: char| ch.is_ascii_alphanumeric())
        };
        if !repository.split('/').all(component_ok) {
            return Err(bad("the repository must be lower-case path components"));
        }
        if let Some(t) = tag {
            if t.is_empty()
                || t.len() > 128
                || !t
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            {
                return Err(bad("the tag must be 1 to 128 of [A-Za-z0-9._-]"));
            }
        }
        if let Some(d) = digest {
            check_digest(d).map_err(|e| bad(&e))?;
        }
        Ok(Reference {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            tag: match (tag, digest) {
                (None, None) => Some("latest".to_owned()),
                (t, _) => t.map(str::to_owned),
            },
            digest: digest.map(str::to_owned),
        })
    }

    /// Whether `s` is written as a reference (rather than a file path).
    pub fn is_reference(s: &str) -> bool {
        s.starts_with(SCHEME)
    }

    /// The same repository at `digest`.
    pub fn at(&self, digest: &str) -> Reference {
        Reference {
            digest: Some(digest.to_owned()),
            ..self.clone()
        }
    }

    /// What the manifest is asked for by: the digest when pinned, else the tag.
    pub fn manifest_ref(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest")
    }

    /// The registry's base URL: `http://` for loopback registries (as Docker allows them without
    /// TLS), `https://` otherwise; Docker Hub's API host for `docker.io`.
    pub fn base_url(&self) -> String {
        let host = self.host();
        let loopback =
            host == "localhost" || host.starts_with("127.") || host == "[::1]" || host == "::1";
        let registry = if self.registry == "docker.io" {
            "registry-1.docker.io"
        } else {
            &self.registry
        };
        format!("{}://{registry}", if loopback { "http" } else { "https" })
    }

    /// The registry's host without its port.
    pub fn host(&self) -> &str {
        if self.registry.starts_with('[') {
            return self.registry.split(']').next().map_or("", |h| h);
        }
        self.registry.split(':').next().unwrap_or(&self.registry)
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// `sha256:` and 64 lower-case hex digits (the only algorithm accepted: every blob is verified).
pub fn check_digest(d: &str) -> Result<&str, String> {
    let hex = d
        .strip_prefix("sha256:")
        .ok_or_else(|| format!("digest {d:?} is not sha256:<hex>"))?;
    if hex.len() != 64
        || !hex
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    {
        return Err(format!(
            "digest {d:?} is not sha256: and 64 lower-case hex digits"
        ));
    }
    Ok(hex)
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn parses_tags_digests_and_ports() {
        let r = Reference::parse("oci://127.0.0.1:5000/team/ctl:v1").expect("ok");
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "team/ctl");
        assert_eq!(r.tag.as_deref(), Some("v1"));
        assert_eq!(r.base_url(), "http://127.0.0.1:5000");
        assert_eq!(r.to_string(), "oci://127.0.0.1:5000/team/ctl:v1");

        let r = Reference::parse(&format!("oci://ghcr.io/org/ctl@{D}")).expect("ok");
        assert_eq!((r.tag.as_deref(), r.digest.as_deref()), (None, Some(D)));
        assert_eq!(r.manifest_ref(), D);
        assert_eq!(r.base_url(), "https://ghcr.io");

        let r = Reference::parse("oci://docker.io/library/x").expect("ok");
        assert_eq!(r.tag.as_deref(), Some("latest"));
        assert_eq!(r.base_url(), "https://registry-1.docker.io");
        let r = Reference::parse(&format!("oci://r.example:443/a:v2@{D}")).expect("ok");
        assert_eq!((r.tag.as_deref(), r.manifest_ref()), (Some("v2"), D));
    }

    #[test]
    fn refuses_what_is_not_a_reference_with_the_reason() {
        for (s, why) in [
            ("ghcr.io/a/b", "must start with oci://"),
            ("oci://ghcr.io", "expected registry/repository"),
            ("oci://ghcr.io/Upper/b", "lower-case"),
            ("oci://ghcr.io/a/b:", "the tag must be"),
            ("oci://ghcr.io/a/b@sha256:abc", "64 lower-case hex"),
            ("oci://ghcr.io/a/b@md5:abc", "not sha256"),
            ("oci://gh cr.io/a/b", "host[:port]"),
        ] {
            let e = Reference::parse(s).expect_err(s).to_string();
            assert!(e.contains(why), "{s}: {e}");
        }
    }
}
