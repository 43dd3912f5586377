//! Request credentials: static tokens, token files that rotate, and exec credential plugins.
//!
//! Why cached: reading a file or running a plugin per request would dominate small requests.
//! A token file is re-read after `token_file_refresh`; an exec credential is kept until its
//! `expirationTimestamp`. A 401 drops the cache so the next request fetches anew.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::HeaderValue;
use parking_lot::Mutex;
use serde::Deserialize;
use tokio::time::Instant;

use super::config::{AuthSource, ExecConfig, Identity};
use super::error::Error;
use super::tls::TlsState;

struct Cached {
    header: Option<HeaderValue>,
    /// `None` = valid until invalidated.
    until: Option<Instant>,
}

pub(crate) struct Auth {
    source: AuthSource,
    refresh: Duration,
    exec_timeout: Duration,
    tls: Arc<TlsState>,
    cache: Mutex<Option<Cached>>,
    /// Single flight for slow refreshes (plugins), so concurrent requests run one plugin.
    refreshing: tokio::sync::Mutex<()>,
}

impl Auth {
    pub(crate) fn new(
        source: AuthSource,
        refresh: Duration,
        exec_timeout: Duration,
        tls: Arc<TlsState>,
    ) -> Result<Self, Error> {
        let cache = match &source {
            AuthSource::Token(t) => Some(Cached {
                header: Some(bearer(t)?),
                until: None,
            }),
            AuthSource::None => Some(Cached {
                header: None,
                until: None,
            }),
            _ => None,
        };
        Ok(Auth {
            source,
            refresh,
            exec_timeout,
            tls,
            cache: Mutex::new(cache),
            refreshing: tokio::sync::Mutex::new(()),
        })
    }

    fn cached(&self) -> Option<Option<HeaderValue>> {
        let c = self.cache.lock();
        let c = c.as_ref()?;
        match c.until {
            Some(t) if Instant::now() >= t => None,
            _ => Some(c.header.clone()),
        }
    }

    /// The `Authorization` header for the next request, if any.
    pub(crate) async fn header(&self) -> Result<Option<HeaderValue>, Error> {
        if let Some(h) = self.cached() {
            return Ok(h);
        }
        let _one = self.refreshing.lock().await;
        if let Some(h) = self.cached() {
            return Ok(h);
        }
        let fresh = match &self.source {
            AuthSource::None => Cached {
                header: None,
                until: None,
            },
            AuthSource::Token(t) => Cached {
                header: Some(bearer(t)?),
                until: None,
            },
            AuthSource::TokenFile(path) => Cached {
                header: Some(bearer(&read_token(path).await?)?),
                until: Some(Instant::now() + self.refresh),
            },
            AuthSource::Exec(exec) => {
                let cred = run_exec(exec, self.exec_timeout).await?;
                if let Some(id) = &cred.identity {
                    self.tls.set_identity(id)?;
                }
                Cached {
                    header: cred.token.as_deref().map(bearer).transpose()?,
                    until: cred.until,
                }
            }
        };
        let h = fresh.header.clone();
        *self.cache.lock() = Some(fresh);
        Ok(h)
    }

    /// The server rejected our credentials: fetch new ones for the next request.
    pub(crate) fn invalidate(&self) {
        if matches!(self.source, AuthSource::TokenFile(_) | AuthSource::Exec(_)) {
            *self.cache.lock() = None;
        }
    }
}

fn bearer(token: &str) -> Result<HeaderValue, Error> {
    let mut h = HeaderValue::from_str(&format!("Bearer {}", token.trim())).map_err(|_| {
        Error::Config("bearer token contains characters not allowed in a header".into())
    })?;
    h.set_sensitive(true);
    Ok(h)
}

async fn read_token(path: &PathBuf) -> Result<String, Error> {
    let t = tokio::fs::read_to_string(path)
        .await
        .map_err(|e| Error::Config(format!("token file {}: {e}", path.display())))?;
    let t = t.trim().to_owned();
    if t.is_empty() {
        return Err(Error::Config(format!(
            "token file {} is empty",
            path.display()
        )));
    }
    Ok(t)
}

/// What an exec plugin handed out.
struct ExecCredential {
    token: Option<String>,
    identity: Option<Identity>,
    until: Option<Instant>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecOutput {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    status: Option<ExecStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecStatus {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    client_certificate_data: Option<String>,
    #[serde(default)]
    client_key_data: Option<String>,
    #[serde(default)]
    expiration_timestamp: Option<String>,
}

async fn run_exec(exec: &ExecConfig, timeout: Duration) -> Result<ExecCredential, Error> {
    let fail = |m: String| Error::Config(format!("exec plugin {:?}: {m}", exec.command));
    let mut spec = serde_json::json!({ "interactive": false });
    if exec.provide_cluster_info {
        let mut cluster = serde_json::json!({ "server": exec.cluster_server });
        if let Some(ca) = &exec.cluster_ca_data {
            cluster["certificate-authority-data"] = ca.clone().into();
        }
        if exec.cluster_insecure {
            cluster["insecure-skip-tls-verify"] = true.into();
        }
        spec["cluster"] = cluster;
    }
    let info = serde_json::json!({
        "apiVersion": exec.api_version,
        "kind": "ExecCredential",
        "spec": spec,
    });
    let mut cmd = tokio::process::Command::new(&exec.command);
    cmd.args(&exec.args)
        .envs(exec.env.iter().map(|(k, v)| (k, v)))
        .env("KUBERNETES_EXEC_INFO", info.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().map_err(|e| {
        let hint = match (&exec.install_hint, e.kind()) {
            (Some(h), std::io::ErrorKind::NotFound) => format!(" ({})", h.trim()),
            _ => String::new(),
        };
        fail(format!("cannot run: {e}{hint}"))
    })?;
    let out = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .map_err(|_| fail(format!("did not finish within {timeout:?}")))?
        .map_err(|e| fail(e.to_string()))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stderr: String = stderr.split_whitespace().collect::<Vec<_>>().join(" ");
        return Err(fail(format!("{}: {stderr}", out.status)));
    }
    let parsed: ExecOutput = serde_json::from_slice(&out.stdout)
        .map_err(|e| fail(format!("output is not an ExecCredential: {e}")))?;
    if parsed.kind != "ExecCredential" || parsed.api_version != exec.api_version {
        return Err(fail(format!(
            "returned {} {}, want ExecCredential {}",
            parsed.api_version, parsed.kind, exec.api_version
        )));
    }
    let st = parsed
        .status
        .ok_or_else(|| fail("ExecCredential has no status".into()))?;
    let identity = match (st.client_certificate_data, st.client_key_data) {
        (Some(c), Some(k)) if !c.is_empty() && !k.is_empty() => Some(Identity {
            cert_pem: c.into_bytes(),
            key_pem: k.into_bytes(),
        }),
        (None, None) => None,
        _ => {
            return Err(fail(
                "clientCertificateData and clientKeyData must be given together".into(),
            ))
        }
    };
    let token = st.token.filter(|t| !t.is_empty());
    if token.is_none() && identity.is_none() {
        return Err(fail(
            "ExecCredential has neither a token nor a client certificate".into(),
        ));
    }
    let until = match st.expiration_timestamp.as_deref() {
        None | Some("") => None,
        Some(ts) => {
            let exp = crate::time::parse(ts)
                .ok_or_else(|| fail(format!("bad expirationTimestamp {ts:?}")))?;
            let left = exp
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO);
            Some(Instant::now() + left)
        }
    };
    Ok(ExecCredential {
        token,
        identity,
        until,
    })
}
