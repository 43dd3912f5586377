//! The janitor's settings: the `config:` of its entry in the host's plugins file.
//!
//! ```yaml
//! - module: janitor.wasm
//!   config:
//!     prefix: janitor.example.com   # default: janitor
//!     dryRun: true                  # default: false
//! ```
//!
//! Without a `config:` the janitor behaves as it always did: the `janitor/…` annotations and
//! label, and deletion of what expired. Unknown keys are refused at load, so a typo never
//! silently leaves the defaults in force.

use serde::Deserialize;

/// The prefix of the janitor's annotations and label when none is configured.
pub const DEFAULT_PREFIX: &str = "janitor";

/// What the operator may set.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Settings {
    /// The prefix of every key the janitor reads or writes on objects: the annotations
    /// `<prefix>/ttl`, `<prefix>/expires` and `<prefix>/would-delete-at`, and the label
    /// `<prefix>/dry-run`. A DNS subdomain (lowercase letters, digits, `-` and `.`, at most 253
    /// characters), as the prefix of an annotation key must be. Default `janitor`.
    pub prefix: String,
    /// Report every expired object as the dry-run label does (a log line, the
    /// `<prefix>/would-delete-at` annotation and an Event), deleting none: for trying the janitor
    /// out on a cluster before letting it delete. Default `false`.
    pub dry_run: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            prefix: DEFAULT_PREFIX.to_string(),
            dry_run: false,
        }
    }
}

impl Settings {
    /// Checks what parsing does not: the prefix is one the API server accepts in a key.
    pub fn validate(&self) -> Result<(), String> {
        check_prefix(&self.prefix).map_err(|why| format!("prefix {:?}: {why}", self.prefix))
    }
}

/// Whether `p` is a DNS-1123 subdomain, the rule for the prefix of a label or annotation key.
fn check_prefix(p: &str) -> Result<(), String> {
    if p.is_empty() {
        return Err("must not be empty".into());
    }
    if p.len() > 253 {
        return Err(format!("must be at most 253 characters, not {}", p.len()));
    }
    for part in p.split('.') {
        let ok = !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !part.starts_with('-')
            && !part.ends_with('-');
        if !ok {
            return Err(
                "must be a DNS subdomain: lowercase letters, digits, '-' and '.', starting and \
                 ending each part with a letter or digit"
                    .into(),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_guest::config::parse;

    #[test]
    fn no_configuration_is_today_s_behaviour() {
        let s: Settings = parse(b"null").unwrap();
        assert_eq!(s, Settings::default());
        assert_eq!(s.prefix, "janitor");
        assert!(!s.dry_run);
        assert_eq!(parse::<Settings>(b"{}").unwrap(), Settings::default());
        assert_eq!(s.validate(), Ok(()));
    }

    #[test]
    fn keys_are_camel_case_and_unknown_ones_refused() {
        let s: Settings = parse(br#"{"prefix": "cleanup.example.com", "dryRun": true}"#).unwrap();
        assert_eq!(s.prefix, "cleanup.example.com");
        assert!(s.dry_run);
        assert_eq!(s.validate(), Ok(()));
        let e = parse::<Settings>(br#"{"ttl": "10m"}"#).unwrap_err();
        assert!(e.contains("unknown field `ttl`"), "{e}");
        let e = parse::<Settings>(br#"{"dry_run": true}"#).unwrap_err();
        assert!(e.contains("unknown field `dry_run`"), "{e}");
        assert!(parse::<Settings>(br#"{"dryRun": "yes"}"#).is_err());
    }

    #[test]
    fn prefixes_must_be_dns_subdomains() {
        for good in [
            "janitor",
            "a",
            "cleanup.example.com",
            "x-1.y2",
            &"a".repeat(253),
        ] {
            let s = Settings {
                prefix: good.to_string(),
                ..Settings::default()
            };
            assert_eq!(s.validate(), Ok(()), "{good}");
        }
        for bad in [
            "",
            "Janitor",
            "janitor/",
            "-x",
            "x-",
            "a..b",
            ".a",
            "a_b",
            &"a".repeat(254),
        ] {
            let s = Settings {
                prefix: bad.to_string(),
                ..Settings::default()
            };
            let e = s.validate().unwrap_err();
            assert!(e.starts_with(&format!("prefix {bad:?}: ")), "{e}");
        }
        let long = Settings {
            prefix: "a".repeat(300),
            ..Settings::default()
        };
        assert!(long
            .validate()
            .unwrap_err()
            .ends_with("must be at most 253 characters, not 300"));
    }
}
