//! Registry credentials: a Docker config file (`~/.docker/config.json`) or a pull secret's
//! `.dockerconfigjson`, which have the same shape.
//!
//! Credential helpers (`credsStore`, `credHelpers`) are programs on a workstation; a host in a
//! cluster has none, so they are not run, and a registry they cover is pulled anonymously.

use std::collections::HashMap;
use std::path::Path;

use base64::Engine as _;
use serde::Deserialize;

use crate::error::OciError;

/// What a registry is sent.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    Basic {
        username: String,
        password: String,
    },
    /// An OAuth2 refresh token, exchanged at the token service (`identitytoken`).
    IdentityToken(String),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Basic { username, .. } => write!(f, "Basic({username}, ***)"),
            Credential::IdentityToken(_) => write!(f, "IdentityToken(***)"),
        }
    }
}

/// Credentials by registry host (`host[:port]`).
#[derive(Debug, Clone, Default)]
pub struct Credentials(HashMap<String, Credential>);

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: HashMap<String, AuthEntry>,
}

#[derive(Deserialize)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    identitytoken: Option<String>,
}

impl Credentials {
    /// None at all: every registry is asked anonymously.
    pub fn none() -> Self {
        Credentials::default()
    }

    /// Reads a Docker config file; a file that does not exist means no credentials.
    pub fn from_file(path: &Path) -> Result<Self, OciError> {
        match std::fs::read(path) {
            Ok(b) => Self::from_docker_config(&b)
                .map_err(|e| OciError::Credentials(format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::none()),
            Err(e) => Err(OciError::Credentials(format!(
                "{}: cannot read it: {e}",
                path.display()
            ))),
        }
    }

    /// Parses the JSON of a Docker config file or of a `.dockerconfigjson` secret key.
    pub fn from_docker_config(json: &[u8]) -> Result<Self, String> {
        let cfg: DockerConfig = serde_json::from_slice(json).map_err(|e| e.to_string())?;
        let mut out = HashMap::new();
        for (key, e) in cfg.auths {
            let cred = if let Some(t) = e.identitytoken.filter(|t| !t.is_empty()) {
                Credential::IdentityToken(t)
            } else if let (Some(u), Some(p)) = (&e.username, &e.password) {
                Credential::Basic {
                    username: u.clone(),
                    password: p.clone(),
                }
            } else if let Some(a) = e.auth.filter(|a| !a.is_empty()) {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(a.trim())
                    .map_err(|_| format!("auths.{key}.auth is not base64"))?;
                let text =
                    String::from_utf8(raw).map_err(|_| format!("auths.{key}.auth is not UTF-8"))?;
                let (u, p) = text
                    .split_once(':')
                    .ok_or_else(|| format!("auths.{key}.auth is not username:password"))?;
                Credential::Basic {
                    username: u.to_owned(),
                    password: p.to_owned(),
                }
            } else {
                continue;
            };
            out.insert(registry_key(&key), cred);
        }
        Ok(Credentials(out))
    }

    /// Adds `other`'s entries over these (a pull secret's over the host's file).
    pub fn overlaid(mut self, other: &Credentials) -> Self {
        self.0
            .extend(other.0.iter().map(|(k, v)| (k.clone(), v.clone())));
        self
    }

    /// The credential for `registry` (`host[:port]`).
    pub fn get(&self, registry: &str) -> Option<&Credential> {
        self.0.get(&registry_key(registry))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `https://index.docker.io/v1/` → `docker.io`; `https://host:port/path` → `host:port`.
fn registry_key(key: &str) -> String {
    let k = key
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let host = k.split('/').next().unwrap_or(k);
    match host {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            "docker.io".to_owned()
        }
        h => h.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_form_docker_writes() {
        let json = br#"{"auths": {
            "https://index.docker.io/v1/": {"auth": "dXNlcjpwYXNz"},
            "127.0.0.1:5000": {"username": "a", "password": "b:c"},
            "ghcr.io": {"identitytoken": "tok"},
            "empty.example": {}
        }, "credsStore": "desktop"}"#;
        let c = Credentials::from_docker_config(json).expect("parses");
        let basic = |u: &str, p: &str| Credential::Basic {
            username: u.into(),
            password: p.into(),
        };
        assert_eq!(c.get("docker.io"), Some(&basic("user", "pass")));
        assert_eq!(c.get("127.0.0.1:5000"), Some(&basic("a", "b:c")));
        assert_eq!(
            c.get("ghcr.io"),
            Some(&Credential::IdentityToken("tok".into()))
        );
        assert_eq!(c.get("empty.example"), None);
        assert!(!format!("{:?}", c.get("docker.io")).contains("pass"));
    }

    #[test]
    fn says_which_entry_is_broken() {
        let e = Credentials::from_docker_config(br#"{"auths": {"r.io": {"auth": "%%%"}}}"#)
            .expect_err("bad");
        assert!(e.contains("auths.r.io.auth is not base64"), "{e}");
        let e = Credentials::from_docker_config(b"{").expect_err("bad");
        assert!(e.contains("EOF"), "{e}");
    }
}
