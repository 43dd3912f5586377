//! The API client: authenticated requests over hyper (HTTP/1.1 or h2), responses decoded into
//! [`Object`]s, LIST pages, watch streams or [`Error`]s.
//!
//! Why this shape: every caller (reflector, plugin client import, discovery) needs the same
//! error classification and the same ingest rules, so the client returns pipeline types, not
//! HTTP responses. [`Client::request_raw`] remains for anything else.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{
    HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, PROXY_AUTHORIZATION, RETRY_AFTER, USER_AGENT,
};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use parking_lot::RwLock;
use tracing::Instrument;

use super::auth::Auth;
use super::clip::clip;
use super::config::Config;
use super::decode::{error_from_response, ListDecoder, ObjectPool};
use super::error::{Error, Status};
use super::object::{IngestOptions, Object};
use super::params::{and_selectors, ListParams, Query, WatchParams};
use super::proxy::Proxy;
use super::resource::ApiResource;
use super::tls::{Connector, TlsState};
use super::watch::{event_stream, ObjectList, WatchStream};

/// Content type of whole-object write bodies.
const JSON: &str = "application/json";

/// A PATCH body and its type (spec 6.11).
#[derive(Debug, Clone)]
pub enum Patch {
    /// RFC 6902, `application/json-patch+json`.
    Json(Bytes),
    /// RFC 7386, `application/merge-patch+json`.
    Merge(Bytes),
    /// `application/strategic-merge-patch+json` (built-in types only).
    Strategic(Bytes),
    /// Server-side apply, `application/apply-patch+yaml` (JSON is valid YAML).
    Apply(Bytes),
}

impl Patch {
    pub fn content_type(&self) -> &'static str {
        match self {
            Patch::Json(_) => "application/json-patch+json",
            Patch::Merge(_) => "application/merge-patch+json",
            Patch::Strategic(_) => "application/strategic-merge-patch+json",
            Patch::Apply(_) => "application/apply-patch+yaml",
        }
    }
    fn body(&self) -> &Bytes {
        match self {
            Patch::Json(b) | Patch::Merge(b) | Patch::Strategic(b) | Patch::Apply(b) => b,
        }
    }
}

/// Options of a write.
#[derive(Debug, Clone, Default)]
pub struct WriteParams {
    /// Required for server-side apply.
    pub field_manager: Option<String>,
    /// Apply only: take ownership of conflicting fields.
    pub force: bool,
    pub dry_run: bool,
}

impl WriteParams {
    fn to_query(&self) -> String {
        let mut q = Query::default();
        q.opt("fieldManager", self.field_manager.as_deref());
        if self.force {
            q.pair("force", "true");
        }
        if self.dry_run {
            q.pair("dryRun", "All");
        }
        q.0
    }
}

/// `DeleteOptions`.
#[derive(Debug, Clone, Default)]
pub struct DeleteParams {
    /// `Orphan`, `Background` or `Foreground`.
    pub propagation_policy: Option<String>,
    pub grace_period_seconds: Option<u32>,
    /// Delete only if the object still has this UID…
    pub precondition_uid: Option<String>,
    /// …and this resourceVersion.
    pub precondition_resource_version: Option<String>,
    pub dry_run: bool,
}

impl DeleteParams {
    fn body(&self) -> Bytes {
        let mut v = serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1"});
        if let Some(p) = &self.propagation_policy {
            v["propagationPolicy"] = p.clone().into();
        }
        if let Some(g) = self.grace_period_seconds {
            v["gracePeriodSeconds"] = g.into();
        }
        if self.precondition_uid.is_some() || self.precondition_resource_version.is_some() {
            let mut pre = serde_json::Map::new();
            if let Some(u) = &self.precondition_uid {
                pre.insert("uid".into(), u.clone().into());
            }
            if let Some(r) = &self.precondition_resource_version {
                pre.insert("resourceVersion".into(), r.clone().into());
            }
            v["preconditions"] = pre.into();
        }
        if self.dry_run {
            v["dryRun"] = serde_json::json!(["All"]);
        }
        Bytes::from(v.to_string())
    }
}

/// What a DELETE answered.
#[derive(Debug, Clone)]
pub enum Deleted {
    /// The object: its final state, or still present with a deletionTimestamp (finalizers).
    Object(Object),
    /// A `Success` Status (some resources answer with one).
    Status(Box<Status>),
}

pub(crate) type Http = HyperClient<Connector, Full<Bytes>>;

/// Which connections a request goes over.
///
/// Watches have connections of their own. Over HTTP/1.1 hyper's adaptive read buffer grows
/// while a large response is read (a LIST page) and keeps that size, up to about 400 KiB, for
/// the connection's life; a watch that took over a LIST's connection held that buffer for as
/// long as it streamed, so every relist left more of the host's watches holding one (200
/// relisted informers: +6 MiB after six relists, still growing). Watches read small events
/// and keep small buffers on their own connections; request/response traffic keeps a few
/// idle connections ([`IDLE_REQUEST_CONNECTIONS`]) and closes the rest, so a relist storm's
/// connections do not linger. Over h2 (TLS to a real kube-apiserver) this is two connections
/// where it was one, and a LIST's flow control no longer shares one with the watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lane {
    Requests,
    Watches,
}

/// Idle connections kept for requests other than watches: enough for a plugin's writes and
/// the leader's renewals to find one, few enough that a relist storm (one LIST per informer
/// at once) leaves no more than this many read buffers behind.
pub const IDLE_REQUEST_CONNECTIONS: usize = 8;

/// The two pools of one TLS identity.
struct Pools {
    requests: Http,
    watches: Http,
}

impl Pools {
    fn new(connector: &Connector) -> Self {
        Pools {
            requests: pool(connector.clone(), Some(IDLE_REQUEST_CONNECTIONS)),
            watches: pool(connector.clone(), None),
        }
    }

    fn lane(&self, lane: Lane) -> &Http {
        match lane {
            Lane::Requests => &self.requests,
            Lane::Watches => &self.watches,
        }
    }
}

struct Inner {
    /// The connection pools, with the TLS identity generation their connections were opened
    /// with. Why swapped rather than kept: an exec plugin may hand out a new client
    /// certificate, and pooled connections would keep presenting the old one (the API server
    /// authenticates each request by the connection's certificate), so a rotation starts a
    /// fresh pool, as client-go closes its connections then. Streams already open on the old
    /// pool (watches) run to their natural end; they were authenticated when they started.
    http: RwLock<(u64, Arc<Pools>)>,
    connector: Connector,
    tls: Arc<TlsState>,
    /// `scheme://authority` plus any path prefix, without a trailing slash.
    base: String,
    auth: Arc<Auth>,
    user_agent: HeaderValue,
    proxy_authorization: Option<HeaderValue>,
    request_timeout: Duration,
    watch_idle_margin: Duration,
    watch_idle_default: Duration,
    ingest: IngestOptions,
    default_namespace: String,
}

/// A cheap-to-clone handle on one API server.
#[derive(Clone)]

pub struct Client(Arc<Inner>);

/// A connection pool: HTTP/1.1 or h2 as ALPN decides, idle connections kept 90 s (at most
/// `max_idle` of them), h2 pings every 30 s while streams are open.
///
/// HTTP/1.1 connections keep hyper's adaptive read buffer (see [`Lane`] for where it is kept
/// small): a fixed 32 KiB buffer cost 17 to 27 % more CPU per event in released bursts and a
/// 4 KB-Pod sync (docs/benchmarks-history.md, "Safe under faults: the soak's shards").
pub(crate) fn pool(connector: Connector, max_idle: Option<usize>) -> Http {
    let mut b = HyperClient::builder(TokioExecutor::new());
    b.timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .http2_keep_alive_interval(Duration::from_secs(30))
        .http2_keep_alive_while_idle(false);
    if let Some(n) = max_idle {
        b.pool_max_idle_per_host(n);
    }
    b.build(connector)
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.0.base)
            .finish()
    }
}

impl Client {
    /// Build a client; fails on unusable TLS material or credentials.
    pub fn new(config: Config) -> Result<Self, Error> {
        let url = &config.cluster_url;
        if !matches!(url.scheme_str(), Some("http" | "https")) || url.host().is_none() {
            return Err(Error::Config(format!(
                "server URL {url} must be http:// or https:// with a host"
            )));
        }
        let tls = Arc::new(TlsState::new(&config)?);
        let proxy = Proxy::select(&config.proxy, url, |k| std::env::var(k).ok())?.map(Arc::new);
        // Through a proxy, a plain-http request carries the proxy's credentials itself (an
        // https one gives them in its CONNECT).
        let proxy_authorization = proxy
            .as_ref()
            .filter(|_| url.scheme_str() == Some("http"))
            .and_then(|p| p.authorization().cloned());
        if let Some(p) = &proxy {
            tracing::debug!(proxy = ?p, server = %url, "connecting through an HTTP proxy");
        }
        let connector = Connector {
            tls: tls.clone(),
            server_name: config.tls_server_name.clone(),
            connect_timeout: config.connect_timeout,
            proxy,
            dialer: config.dialer.clone(),
        };
        let http = RwLock::new((tls.generation(), Arc::new(Pools::new(&connector))));
        let auth = Arc::new(Auth::new(
            config.auth.clone(),
            config.token_file_refresh,
            config.request_timeout.max(Duration::from_secs(10)),
            tls.clone(),
        )?);
        let base = config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_owned();
        let user_agent = HeaderValue::from_str(&config.user_agent)
            .map_err(|_| Error::Config("user agent is not a valid header value".into()))?;
        Ok(Client(Arc::new(Inner {
            http,
            connector,
            tls,
            base,
            auth,
            user_agent,
            proxy_authorization,
            request_timeout: config.request_timeout,
            watch_idle_margin: config.watch_idle_margin,
            watch_idle_default: config.watch_idle_default,
            ingest: config.ingest,
            default_namespace: config.default_namespace,
        })))
    }

    /// A client of the same server, with the same credentials and settings, on connections of
    /// its own. Why: a pooled connection is driven by a task on the runtime whose request
    /// opened it, and every client sharing the pool may ride on it; work kept on a runtime of
    /// lower priority (shadow revisions) must not carry the other requests' connections.
    pub fn with_own_connections(&self) -> Client {
        let i = &self.0;
        Client(Arc::new(Inner {
            http: RwLock::new((i.tls.generation(), Arc::new(Pools::new(&i.connector)))),
            connector: i.connector.clone(),
            tls: i.tls.clone(),
            base: i.base.clone(),
            auth: i.auth.clone(),
            user_agent: i.user_agent.clone(),
            proxy_authorization: i.proxy_authorization.clone(),
            request_timeout: i.request_timeout,
            watch_idle_margin: i.watch_idle_margin,
            watch_idle_default: i.watch_idle_default,
            ingest: i.ingest,
            default_namespace: i.default_namespace.clone(),
        }))
    }

    /// The connection pools for the current TLS identity (see `Inner::http`).
    fn http(&self) -> Arc<Pools> {
        let generation = self.0.tls.generation();
        {
            let cur = self.0.http.read();
            if cur.0 == generation {
                return cur.1.clone();
            }
        }
        let mut cur = self.0.http.write();
        if cur.0 != generation {
            tracing::info!(server = %self.0.base, "client certificate rotated; opening new connections");
            *cur = (generation, Arc::new(Pools::new(&self.0.connector)));
        }
        cur.1.clone()
    }

    /// A client from kubeconfig or the in-cluster environment ([`Config::infer`]).
    pub fn try_default() -> Result<Self, Error> {
        Self::new(Config::infer(None)?)
    }

    /// The namespace of the kubeconfig context or service account.
    pub fn default_namespace(&self) -> &str {
        &self.0.default_namespace
    }

    /// The server URL this client talks to.
    pub fn base_url(&self) -> &str {
        &self.0.base
    }

    /// Send one request with credentials and User-Agent; returns the response head once it
    /// arrives (within `head_timeout`). Non-2xx answers become [`Error::Api`].
    async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<(Bytes, &str)>,
        head_timeout: Duration,
        lane: Lane,
    ) -> Result<Response<Incoming>, Error> {
        let url = format!("{}{}", self.0.base, path_and_query);
        let uri: Uri = url
            .parse()
            .map_err(|e| Error::Config(format!("bad request URL {:?}: {e}", clip(&url))))?;
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .header(USER_AGENT, self.0.user_agent.clone())
            .header(ACCEPT, "application/json");
        if let Some(auth) = self.0.auth.header().await? {
            req = req.header(AUTHORIZATION, auth);
        }
        if let Some(p) = &self.0.proxy_authorization {
            req = req.header(PROXY_AUTHORIZATION, p.clone());
        }
        let body = match body {
            Some((b, ct)) => {
                req = req.header(CONTENT_TYPE, ct);
                Full::new(b)
            }
            None => Full::new(Bytes::new()),
        };
        let req = req
            .body(body)
            .map_err(|e| Error::Http(format!("cannot build request: {e}")))?;
        let resp =
            match tokio::time::timeout(head_timeout, self.http().lane(lane).request(req)).await {
                Err(_) => return Err(Error::Timeout(head_timeout)),
                Ok(Err(e)) => return Err(classify(&self.0.base, e)),
                Ok(Ok(r)) => r,
            };
        if resp.status().is_success() {
            return Ok(resp);
        }
        let code = resp.status();
        if code == StatusCode::UNAUTHORIZED {
            self.0.auth.invalidate();
        }
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // An error body too large to read still answers with its code.
        let body = match read_body(resp.into_body(), self.0.ingest.max_object_bytes).await {
            Err(Error::Decode(_)) => Bytes::new(),
            other => other?,
        };
        Err(error_from_response(
            code.as_u16(),
            retry_after.as_deref(),
            &body,
        ))
    }

    /// A whole request with the per-request timeout: status check and the full body.
    async fn call(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<(Bytes, &str)>,
    ) -> Result<Bytes, Error> {
        let t = self.0.request_timeout;
        let span = tracing::debug_span!("kube request", %method, path = path_and_query);
        let fut = async {
            let resp = self
                .send(method, path_and_query, body, t, Lane::Requests)
                .await?;
            read_body(resp.into_body(), self.0.ingest.max_object_bytes).await
        };
        match tokio::time::timeout(t, fut.instrument(span)).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout(t)),
        }
    }

    /// Any request: the response body of a 2xx answer, or the decoded error.
    pub async fn request_raw(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<(Bytes, &str)>,
    ) -> Result<Bytes, Error> {
        self.call(method, path_and_query, body).await
    }

    fn object(&self, body: &[u8]) -> Result<Object, Error> {
        Object::ingest(body, &self.0.ingest)
            .map_err(|e| Error::Decode(format!("response object: {e}")))
    }

    pub async fn get(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Object, Error> {
        let body = self
            .call(Method::GET, &res.object_path(namespace, name), None)
            .await?;
        self.object(&body)
    }

    /// One LIST request (one page when `params.limit` is set).
    pub async fn list(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList, Error> {
        self.list_reusing(res, namespace, params, None).await
    }

    /// [`Client::list`], returning `pool`'s object for every item of the same version (see
    /// [`ObjectPool`]): what a relist uses so that unchanged objects are not held twice.
    pub async fn list_reusing(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
        pool: Option<Arc<dyn ObjectPool>>,
    ) -> Result<ObjectList, Error> {
        let path = with_query(res.collection_path(namespace), &params.to_query());
        let t = self.0.request_timeout;
        let span = tracing::debug_span!("kube list", path = %path);
        let fut = async {
            let resp = self
                .send(Method::GET, &path, None, t, Lane::Requests)
                .await?;
            // Items are decoded as the body arrives so that a relist never holds the whole
            // body next to the old cache and the new objects.
            let mut decoder = match pool {
                Some(p) => ListDecoder::with_pool(self.0.ingest, p),
                None => ListDecoder::new(self.0.ingest),
            };
            let mut body = resp.into_body();
            while let Some(frame) = body.frame().await {
                let frame =
                    frame.map_err(|e| Error::Http(format!("reading response body: {e}")))?;
                if let Ok(data) = frame.into_data() {
                    decoder.push(&data)?;
                }
            }
            decoder.finish()
        };
        match tokio::time::timeout(t, fut.instrument(span)).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout(t)),
        }
    }

    /// Start a WATCH. The response head must arrive within the request timeout; then the
    /// stream lives as long as the server keeps it (`timeoutSeconds`), and ends with
    /// [`Error::Timeout`] if no byte arrives for `timeoutSeconds` plus a margin.
    pub async fn watch(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        params: &WatchParams,
    ) -> Result<WatchStream, Error> {
        let path = with_query(res.collection_path(namespace), &params.to_query());
        let resp = self
            .send(
                Method::GET,
                &path,
                None,
                self.0.request_timeout,
                Lane::Watches,
            )
            .instrument(tracing::debug_span!("kube watch", path = %path))
            .await?;
        let idle = match params.timeout_seconds {
            Some(s) => Duration::from_secs(s.into()) + self.0.watch_idle_margin,
            None => self.0.watch_idle_default,
        };
        Ok(event_stream(resp.into_body(), self.0.ingest, idle))
    }

    /// POST to the collection.
    pub async fn create(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        body: Bytes,
        params: &WriteParams,
    ) -> Result<Object, Error> {
        self.send_object(
            Method::POST,
            res.collection_path(namespace),
            params,
            body,
            JSON,
        )
        .await
    }

    /// PUT the whole object; a stale `metadata.resourceVersion` gives 409 Conflict (spec 6.5).
    pub async fn replace(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        body: Bytes,
        params: &WriteParams,
    ) -> Result<Object, Error> {
        self.send_object(
            Method::PUT,
            res.object_path(namespace, name),
            params,
            body,
            JSON,
        )
        .await
    }

    /// PUT to the `status` subresource (spec 6.12).
    pub async fn replace_status(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        body: Bytes,
        params: &WriteParams,
    ) -> Result<Object, Error> {
        let path = res.subresource_path(namespace, name, "status");
        self.send_object(Method::PUT, path, params, body, JSON)
            .await
    }

    /// PATCH the object (or a subresource, e.g. `Some("status")`).
    pub async fn patch(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        patch: &Patch,
        params: &WriteParams,
    ) -> Result<Object, Error> {
        if matches!(patch, Patch::Apply(_)) && params.field_manager.is_none() {
            return Err(Error::Config(
                "server-side apply needs a field manager".into(),
            ));
        }
        let path = match subresource {
            Some(s) => res.subresource_path(namespace, name, s),
            None => res.object_path(namespace, name),
        };
        let (body, content_type) = (patch.body().clone(), patch.content_type());
        self.send_object(Method::PATCH, path, params, body, content_type)
            .await
    }

    /// One write: the path with the write parameters as query, the body, one object back.
    async fn send_object(
        &self,
        method: Method,
        path: String,
        params: &WriteParams,
        body: Bytes,
        content_type: &str,
    ) -> Result<Object, Error> {
        let path = with_query(path, &params.to_query());
        let answer = self.call(method, &path, Some((body, content_type))).await?;
        self.object(&answer)
    }

    /// DELETE with `DeleteOptions` (preconditions, propagation policy).
    pub async fn delete(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<Deleted, Error> {
        let path = res.object_path(namespace, name);
        let body = self
            .call(
                Method::DELETE,
                &path,
                Some((params.body(), "application/json")),
            )
            .await?;
        if let Ok(s) = serde_json::from_slice::<Status>(&body) {
            if s.kind == "Status" {
                return Ok(Deleted::Status(Box::new(s)));
            }
        }
        self.object(&body).map(Deleted::Object)
    }
}

fn with_query(mut path: String, query: &str) -> String {
    if !query.is_empty() {
        path.push('?');
        path.push_str(query);
    }
    path
}

/// Room reserved up front from a `Content-Length` (a relist of a large cache is hundreds of
/// MB); a bogus larger length is not trusted, the buffer then grows as bytes arrive.
const MAX_PREALLOCATED_BODY: u64 = 1 << 30;

/// Read a whole response body into one buffer, of at most `max` bytes (the ingest options'
/// `max_object_bytes`: these are single objects and Status errors, never lists). Why not
/// `collect().to_bytes()`: that keeps every received chunk until it has copied them all into
/// a new buffer, so a large body briefly costs twice its size. Here chunks are appended to a
/// buffer sized from `Content-Length` and dropped at once; a single chunk is returned as is.
pub(crate) async fn read_body(mut body: Incoming, max: usize) -> Result<Bytes, Error> {
    let too_large = || Error::Decode(format!("response body larger than {max} bytes"));
    let hint = hyper::body::Body::size_hint(&body);
    if hint.lower() > max as u64 {
        return Err(too_large());
    }
    let expected = hint
        .exact()
        .unwrap_or(hint.lower())
        .min(MAX_PREALLOCATED_BODY) as usize;
    let mut first: Option<Bytes> = None;
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Error::Http(format!("reading response body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let so_far = first.as_ref().map_or(0, Bytes::len) + buf.len();
        if so_far + data.len() > max {
            return Err(too_large());
        }
        if first.is_none() && buf.is_empty() {
            first = Some(data);
            continue;
        }
        if let Some(f) = first.take() {
            buf.reserve(expected.max(f.len() + data.len()));
            buf.extend_from_slice(&f);
        }
        buf.extend_from_slice(&data);
    }
    Ok(match first {
        Some(f) => f,
        None => buf.freeze(),
    })
}

/// Connection-level failures are [`Error::Connect`] (the reflector backs off and retries);
/// anything after the connection is [`Error::Http`].
pub(crate) fn classify(base: &str, e: hyper_util::client::legacy::Error) -> Error {
    let mut message = e.to_string();
    let mut refused = false;
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        message.push_str(": ");
        message.push_str(&s.to_string());
        refused |= s
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
        src = s.source();
    }
    if e.is_connect() {
        Error::Connect {
            url: base.to_owned(),
            message,
            refused,
        }
    } else {
        Error::Http(message)
    }
}

/// One resource scope (resource, namespace, selectors) as the reflector lists and watches it.
#[derive(Debug, Clone)]
pub struct ResourceClient {
    pub client: Client,
    pub resource: ApiResource,
    /// `None` = all namespaces (or a cluster-scoped resource).
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
}

impl ResourceClient {
    pub fn new(client: Client, resource: ApiResource, namespace: Option<String>) -> Self {
        ResourceClient {
            client,
            resource,
            namespace,
            label_selector: None,
            field_selector: None,
        }
    }
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into());
        self
    }
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.field_selector = Some(selector.into());
        self
    }
}

impl ResourceClient {
    /// `params` with this scope's selectors ANDed in: the reflector fills RV and paging, the
    /// scope contributes its selectors.
    pub fn scope_list(&self, params: &ListParams) -> ListParams {
        let mut p = params.clone();
        p.label_selector =
            and_selectors(self.label_selector.as_deref(), p.label_selector.as_deref());
        p.field_selector =
            and_selectors(self.field_selector.as_deref(), p.field_selector.as_deref());
        p
    }

    /// `params` with this scope's selectors ANDed in.
    pub fn scope_watch(&self, params: &WatchParams) -> WatchParams {
        let mut p = params.clone();
        p.label_selector =
            and_selectors(self.label_selector.as_deref(), p.label_selector.as_deref());
        p.field_selector =
            and_selectors(self.field_selector.as_deref(), p.field_selector.as_deref());
        p
    }

    /// A LIST of this scope (its selectors ANDed with `params`').
    pub async fn list(&self, params: &ListParams) -> Result<ObjectList, Error> {
        let p = self.scope_list(params);
        self.client
            .list(&self.resource, self.namespace.as_deref(), &p)
            .await
    }

    /// A LIST of this scope that may return `pool`'s object for an item of the same version
    /// (a relist: see [`ObjectPool`]).
    pub async fn list_reusing(
        &self,
        params: &ListParams,
        pool: Arc<dyn ObjectPool>,
    ) -> Result<ObjectList, Error> {
        let p = self.scope_list(params);
        self.client
            .list_reusing(&self.resource, self.namespace.as_deref(), &p, Some(pool))
            .await
    }

    /// A WATCH of this scope (its selectors ANDed with `params`').
    pub async fn watch(&self, params: &WatchParams) -> Result<WatchStream, Error> {
        let p = self.scope_watch(params);
        self.client
            .watch(&self.resource, self.namespace.as_deref(), &p)
            .await
    }
}
