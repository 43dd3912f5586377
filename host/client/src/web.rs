//! HTTP to servers other than the API server: OCI registries and their token services.
//!
//! Why here: a registry pull needs what the API client already has (TLS with the system's roots,
//! `HTTPS_PROXY`/`NO_PROXY`, connect timeouts, hyper's pool), and nothing of its Kubernetes
//! layer (credentials, `Status` errors, watches). One connection pool per origin, because the
//! proxy choice is per origin and a blob download is often redirected to another host.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, PROXY_AUTHORIZATION, USER_AGENT};
use http::{Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use parking_lot::Mutex;

use crate::client::{classify, pool, read_body, Http};
use crate::config::Config;
use crate::error::Error;
use crate::proxy::{Proxy, ProxySetting};
use crate::tls::{Connector, TlsState};

/// A client for plain web servers, with the API client's TLS and proxy rules.
pub struct WebClient {
    tls: Arc<TlsState>,
    connect_timeout: Duration,
    timeout: Duration,
    user_agent: HeaderValue,
    /// `scheme://authority` → its pool and the proxy credentials a plain-http request carries.
    pools: Mutex<HashMap<String, (Http, Option<HeaderValue>)>>,
}

impl std::fmt::Debug for WebClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebClient").finish_non_exhaustive()
    }
}

impl WebClient {
    /// Servers are checked against `root_ca_pem` when given, else the system's roots (the
    /// bundled Mozilla roots where the system has none); `timeout` bounds each response head.
    pub fn new(root_ca_pem: Option<Vec<u8>>, timeout: Duration) -> Result<Self, Error> {
        let mut config = Config::new(Uri::from_static("https://localhost"));
        config.root_ca_pem = root_ca_pem;
        let user_agent = HeaderValue::from_str(&config.user_agent)
            .map_err(|_| Error::Config("user agent is not a valid header value".into()))?;
        Ok(WebClient {
            tls: Arc::new(TlsState::new(&config)?),
            connect_timeout: config.connect_timeout,
            timeout,
            user_agent,
            pools: Mutex::new(HashMap::new()),
        })
    }

    fn pool(&self, uri: &Uri) -> Result<(Http, Option<HeaderValue>), Error> {
        let origin = format!(
            "{}://{}",
            uri.scheme_str().unwrap_or("https"),
            uri.authority().map_or("", |a| a.as_str())
        );
        let mut pools = self.pools.lock();
        if let Some(p) = pools.get(&origin) {
            return Ok(p.clone());
        }
        let proxy = Proxy::select(&ProxySetting::FromEnvironment, uri, |k| {
            std::env::var(k).ok()
        })?
        .map(Arc::new);
        let proxy_authorization = proxy
            .as_ref()
            .filter(|_| uri.scheme_str() == Some("http"))
            .and_then(|p| p.authorization().cloned());
        let connector = Connector {
            tls: self.tls.clone(),
            server_name: None,
            connect_timeout: self.connect_timeout,
            proxy,
            dialer: None,
        };
        let entry = (pool(connector, Some(4)), proxy_authorization);
        pools.insert(origin, entry.clone());
        Ok(entry)
    }

    /// Sends `req` (absolute URI) and returns the response head, whatever its status.
    pub async fn send(&self, mut req: Request<Full<Bytes>>) -> Result<Response<Incoming>, Error> {
        let uri = req.uri().clone();
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(Error::Config(format!(
                "URL {uri} must be http:// or https:// with a host"
            )));
        }
        let (http, proxy_authorization) = self.pool(&uri)?;
        let headers = req.headers_mut();
        headers
            .entry(USER_AGENT)
            .or_insert_with(|| self.user_agent.clone());
        if let Some(p) = proxy_authorization {
            headers.insert(PROXY_AUTHORIZATION, p);
        }
        let origin = format!(
            "{}://{}",
            uri.scheme_str().unwrap_or("https"),
            uri.host().unwrap_or("")
        );
        match tokio::time::timeout(self.timeout, http.request(req)).await {
            Err(_) => Err(Error::Timeout(self.timeout)),
            Ok(Err(e)) => Err(classify(&origin, e)),
            Ok(Ok(r)) => Ok(r),
        }
    }

    /// The whole body of `resp`, at most `max` bytes, read within the client's timeout.
    pub async fn body(&self, resp: Response<Incoming>, max: usize) -> Result<Bytes, Error> {
        match tokio::time::timeout(self.timeout, read_body(resp.into_body(), max)).await {
            Err(_) => Err(Error::Timeout(self.timeout)),
            Ok(r) => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_urls_without_a_web_scheme() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let c = WebClient::new(None, Duration::from_secs(1)).expect("client");
        let req = Request::get("ftp://example.com/x")
            .body(Full::new(Bytes::new()))
            .expect("request");
        let err = rt.block_on(c.send(req)).expect_err("refused");
        assert!(err.to_string().contains("must be http"), "{err}");
    }
}
