//! Request credentials: static tokens, token files that rotate, and exec credential plugins.
//!
//! Why cached: reading a file or running a plugin per request would dominate small requests.
//! A token file is re-read after `token_file_refresh`; an exec credential is kept until its
//! `expirationTimestamp`. A 401 drops the cache so the next request fetches anew.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
            let exp =
                parse_rfc3339(ts).ok_or_else(|| fail(format!("bad expirationTimestamp {ts:?}")))?;
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

/// Parse an RFC 3339 timestamp (`2026-11-22T03:04:17Z`, fractions and offsets allowed).
pub(crate) fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    let num = |a: usize, e: usize| -> Option<i64> { s.get(a..e)?.parse().ok() };
    let (y, mo, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (h, mi, sec) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if b[13] != b':' || b[16] != b':' || !(1..=12).contains(&mo) || !(1..=31).contains(&d) {
        return None;
    }
    if h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut nanos = 0u32;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        let frac = s.get(start..i)?;
        if frac.is_empty() {
            return None;
        }
        let digits: String = frac.chars().chain(std::iter::repeat('0')).take(9).collect();
        nanos = digits.parse().ok()?;
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        c @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let o = num(i + 1, i + 3)? * 3600 + num(i + 4, i + 6)? * 60;
            if *c == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return None,
    };
    // Days from the civil date (proleptic Gregorian), after Howard Hinnant's algorithm.
    let (y, m) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset;
    let secs = u64::try_from(secs).ok()?;
    Some(UNIX_EPOCH + Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339() {
        let t = |s| parse_rfc3339(s).map(|t| t.duration_since(UNIX_EPOCH).unwrap().as_secs_f64());
        assert_eq!(t("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(t("2026-11-22T03:04:17Z"), Some(1_795_316_657.0));
        assert_eq!(t("2026-11-22T04:04:17+01:00"), Some(1_795_316_657.0));
        assert_eq!(t("2000-02-29T12:00:00.5Z"), Some(951_825_600.5));
        for bad in [
            "",
            "2026-11-22",
            "2026-13-01T00:00:00Z",
            "2026-11-22T03:04:17",
            "2026-11-22T03:04:17+0100",
        ] {
            assert_eq!(t(bad), None, "{bad}");
        }
    }
}
