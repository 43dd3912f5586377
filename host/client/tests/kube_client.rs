//! The API client against small in-test hyper servers (plain and TLS) on loopback: auth
//! headers, token rotation, exec plugins, TLS options, HTTP/1.1 and h2, timeouts, Status
//! decoding, watch streams, the lister-watcher and discovery.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderMap, Method, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;

use kwh_client::client::{Client, DeleteParams, Deleted, Patch, ResourceClient, WriteParams};
use kwh_client::config::{AuthSource, Config, Identity, KubeconfigOptions};
use kwh_client::discovery::Discovery;
use kwh_client::params::{ListParams, WatchParams};
use kwh_client::resource::ApiResource;
use kwh_client::watch::WatchEvent;
use kwh_client::Error;

const SAMPLES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/apiserver-samples"
);
const LIMIT: Duration = Duration::from_secs(20);

fn sample(name: &str) -> Bytes {
    Bytes::from(std::fs::read(format!("{SAMPLES}/{name}")).unwrap())
}

/// What the server saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    uri: String,
    headers: HeaderMap,
    body: Bytes,
    alpn: Option<String>,
    client_cert: bool,
    /// The DER of the client certificate the connection was opened with.
    client_cert_der: Option<Vec<u8>>,
    version: http::Version,
    /// Which connection it came over, numbered in the order they were accepted.
    conn: usize,
}

impl Seen {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

enum Reply {
    Full(StatusCode, Bytes),
    Chunks(StatusCode, Vec<Bytes>),
    /// Send each chunk after its delay, then end the body.
    Paced(Vec<(Duration, Bytes)>),
    /// Send these chunks, then keep the body open without sending anything.
    Stall(Vec<Bytes>),
    /// 200, `head`, then `filler` over and over for as long as the client reads; `sent`
    /// counts the bytes handed to the connection.
    Endless {
        head: Bytes,
        filler: Bytes,
        sent: Arc<AtomicU64>,
    },
    Hang,
    /// 200 with this body once the barrier's every party has arrived (requests in flight at
    /// once, each on a connection of its own over HTTP/1.1).
    Gate(Arc<tokio::sync::Barrier>, Bytes),
}

type Handler = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

struct Server {
    addr: SocketAddr,
    log: Arc<Mutex<Vec<Seen>>>,
    /// Connections the client has closed (or the server ended).
    closed: Arc<std::sync::atomic::AtomicUsize>,
}

impl Server {
    fn url(&self, scheme: &str) -> String {
        format!("{scheme}://{}", self.addr)
    }
    fn seen(&self) -> Vec<Seen> {
        self.log.lock().clone()
    }
}

async fn serve(tls: Option<Arc<rustls::ServerConfig>>, handler: Handler) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let log2 = log.clone();
    let closed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let closed2 = closed.clone();
    tokio::spawn(async move {
        for n in 0.. {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (handler, log, tls) = (handler.clone(), log2.clone(), tls.clone());
            let closed = closed2.clone();
            tokio::spawn(async move {
                match tls {
                    None => conn(TokioIo::new(tcp), n, None, None, handler, log).await,
                    Some(cfg) => {
                        let Ok(s) = tokio_rustls::TlsAcceptor::from(cfg).accept(tcp).await else {
                            return;
                        };
                        let (_, session) = s.get_ref();
                        let alpn = session
                            .alpn_protocol()
                            .map(|a| String::from_utf8_lossy(a).into_owned());
                        let cert = session
                            .peer_certificates()
                            .and_then(|c| c.first())
                            .map(|c| c.as_ref().to_vec());
                        conn(TokioIo::new(s), n, alpn, cert, handler, log).await
                    }
                }
                closed.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    Server { addr, log, closed }
}

async fn conn<I>(
    io: I,
    number: usize,
    alpn: Option<String>,
    client_cert_der: Option<Vec<u8>>,
    handler: Handler,
    log: Arc<Mutex<Vec<Seen>>>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let (handler, log, alpn) = (handler.clone(), log.clone(), alpn.clone());
        let client_cert_der = client_cert_der.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = body
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            let seen = Seen {
                method: parts.method,
                uri: parts
                    .uri
                    .path_and_query()
                    .map(|p| p.to_string())
                    .unwrap_or_default(),
                headers: parts.headers,
                body,
                alpn,
                client_cert: client_cert_der.is_some(),
                client_cert_der,
                version: parts.version,
                conn: number,
            };
            let reply = handler(&seen);
            log.lock().push(seen);
            // A gate only holds the answer back; then it is a full answer like any other.
            let reply = match reply {
                Reply::Gate(barrier, b) => {
                    barrier.wait().await;
                    Reply::Full(StatusCode::OK, b)
                }
                r => r,
            };
            let resp: Response<BoxBody<Bytes, Infallible>> = match reply {
                Reply::Full(code, b) => Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Full::new(b).boxed())
                    .unwrap(),
                Reply::Chunks(code, chunks) => {
                    let frames = chunks.into_iter().map(|c| Ok(Frame::data(c)));
                    Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(BodyExt::boxed(StreamBody::new(futures_util::stream::iter(
                            frames,
                        ))))
                        .unwrap()
                }
                Reply::Stall(chunks) => {
                    let frames =
                        futures_util::stream::iter(chunks.into_iter().map(|c| Ok(Frame::data(c))))
                            .chain(futures_util::stream::pending());
                    Response::builder()
                        .status(StatusCode::OK)
                        .body(BodyExt::boxed(StreamBody::new(frames)))
                        .unwrap()
                }
                Reply::Paced(chunks) => {
                    let frames = futures_util::stream::iter(chunks).then(|(d, c)| async move {
                        tokio::time::sleep(d).await;
                        Ok(Frame::data(c))
                    });
                    Response::builder()
                        .status(StatusCode::OK)
                        .body(BodyExt::boxed(StreamBody::new(frames)))
                        .unwrap()
                }
                Reply::Endless { head, filler, sent } => {
                    let frames = futures_util::stream::iter(
                        std::iter::once(head).chain(std::iter::repeat(filler)),
                    )
                    .map(move |c| {
                        sent.fetch_add(c.len() as u64, Ordering::Relaxed);
                        Ok(Frame::data(c))
                    });
                    Response::builder()
                        .status(StatusCode::OK)
                        .body(BodyExt::boxed(StreamBody::new(frames)))
                        .unwrap()
                }
                Reply::Hang => std::future::pending().await,
                Reply::Gate(..) => unreachable!("answered above"),
            };
            Ok::<_, Infallible>(resp)
        }
    });
    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
        .serve_connection(io, svc)
        .await;
}

fn ok(body: &'static [u8]) -> Reply {
    Reply::Full(StatusCode::OK, Bytes::from_static(body))
}

const CM: &[u8] = br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","uid":"u","resourceVersion":"5","managedFields":[{"manager":"x"}]},"data":{"k":"v"}}"#;

fn cm_res() -> ApiResource {
    ApiResource::new("v1", "ConfigMap", "configmaps", true)
}

fn plain_config(s: &Server) -> Config {
    let mut c = Config::new(s.url("http").parse().unwrap());
    c.request_timeout = Duration::from_secs(5);
    c
}

fn tmpdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "kube-client-{}-{}",
        std::process::id(),
        rand::random::<u64>()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

async fn bounded<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f).await.expect("test deadline")
}

#[tokio::test]
async fn get_sends_token_and_user_agent_and_strips_managed_fields() {
    bounded(async {
        let s = serve(None, Arc::new(|_: &Seen| ok(CM))).await;
        let mut cfg = plain_config(&s);
        cfg.auth = AuthSource::Token("abc".into());
        let c = Client::new(cfg).unwrap();
        let o = c.get(&cm_res(), Some("ns"), "a").await.unwrap();
        assert_eq!(o.key(), "ns/a");
        assert!(!o.as_str().contains("managedFields"));
        let seen = s.seen();
        assert_eq!(seen[0].uri, "/api/v1/namespaces/ns/configmaps/a");
        assert_eq!(seen[0].header("authorization"), "Bearer abc");
        assert_eq!(seen[0].header("user-agent"), "host/0.1.0");
        assert_eq!(seen[0].header("accept"), "application/json");
    })
    .await
}

#[tokio::test]
async fn api_errors_are_decoded_from_status_bodies_spec_6_5() {
    bounded(async {
        let s = serve(
            None,
            Arc::new(|r: &Seen| match r.uri.as_str() {
                u if u.ends_with("/conflict") => Reply::Full(
                    StatusCode::CONFLICT,
                    sample("error-409-conflict-stale-rv.json"),
                ),
                u if u.contains("continue=") => {
                    Reply::Full(StatusCode::GONE, sample("list-410-expired-continue.json"))
                }
                _ => Reply::Full(
                    StatusCode::SERVICE_UNAVAILABLE,
                    Bytes::from_static(b"<html>no backend</html>"),
                ),
            }),
        )
        .await;
        let c = Client::new(plain_config(&s)).unwrap();
        let e = c
            .replace(
                &cm_res(),
                Some("ns"),
                "conflict",
                Bytes::from_static(CM),
                &WriteParams::default(),
            )
            .await
            .unwrap_err();
        let st = e.status().unwrap();
        assert_eq!((st.code, st.reason.as_str()), (409, "Conflict"));
        assert!(st.message.contains("the object has been modified"));

        let e = c
            .list(
                &cm_res(),
                Some("ns"),
                &ListParams::default().continue_from("old"),
            )
            .await
            .unwrap_err();
        assert!(e.is_expired());
        assert!(e.status().unwrap().metadata.continue_.is_some());

        let e = c.get(&cm_res(), None, "x").await.unwrap_err();
        let st = e.status().unwrap();
        assert_eq!((st.code, st.reason.as_str()), (503, "ServiceUnavailable"));
        assert!(st.message.contains("no backend"));
    })
    .await
}

#[tokio::test]
async fn connection_refused_is_a_connect_error() {
    bounded(async {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let c = Client::new(Config::new(format!("http://{addr}").parse().unwrap())).unwrap();
        let e = c.get(&cm_res(), None, "x").await.unwrap_err();
        assert!(e.is_connect(), "{e}");
        // What the reflector retries in place at watch start (spec 1.8).
        assert!(e.is_connection_refused(), "{e}");
        let e = Client::new(Config::new(addr.to_string().parse().unwrap())).unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{e}");
    })
    .await
}

#[tokio::test]
async fn per_request_timeout_but_not_for_a_live_watch() {
    bounded(async {
        let s = serve(
            None,
            Arc::new(|r: &Seen| {
                if r.uri.contains("watch=true") {
                    // Head at once; the second event comes well after the request timeout.
                    Reply::Paced(vec![
                        (Duration::ZERO, Bytes::from_static(BOOKMARK_9)),
                        (Duration::from_millis(1500), Bytes::from_static(BOOKMARK_9)),
                    ])
                } else {
                    Reply::Hang
                }
            }),
        )
        .await;
        let mut cfg = plain_config(&s);
        cfg.request_timeout = Duration::from_millis(500);
        let c = Client::new(cfg).unwrap();
        let e = c.get(&cm_res(), None, "x").await.unwrap_err();
        assert!(
            matches!(e, Error::Timeout(d) if d == Duration::from_millis(500)),
            "{e}"
        );
        let mut w = c
            .watch(&cm_res(), None, &WatchParams::default().timeout(5))
            .await
            .unwrap();
        for _ in 0..2 {
            assert!(matches!(
                w.next().await,
                Some(Ok(WatchEvent::Bookmark { ref resource_version, .. })) if resource_version == "9"
            ));
        }
        assert!(w.next().await.is_none());
    })
    .await
}

const BOOKMARK_9: &[u8] =
    b"{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"9\"}}}\n";

const EMPTY_LIST: &[u8] =
    br#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[]}"#;

/// Watches have connections of their own, and a burst of requests leaves only a few idle.
/// Over HTTP/1.1 a connection keeps the read buffer of the largest response it read (a LIST
/// page, up to ~400 KiB); a watch that took over a LIST's connection held that buffer while it
/// streamed, and 200 informers relisted six times grew the host by 6 MiB, still growing.
#[tokio::test]
async fn watches_have_connections_of_their_own_and_a_burst_of_lists_leaves_few_idle() {
    use kwh_client::client::IDLE_REQUEST_CONNECTIONS;
    bounded(async {
        const LISTS: usize = 20;
        let barrier = Arc::new(tokio::sync::Barrier::new(LISTS));
        let s = serve(
            None,
            Arc::new(move |r: &Seen| {
                if r.uri.contains("watch=true") {
                    Reply::Chunks(StatusCode::OK, vec![Bytes::from_static(BOOKMARK_9)])
                } else if r.uri.ends_with("/configmaps/a") {
                    ok(CM)
                } else {
                    Reply::Gate(barrier.clone(), Bytes::from_static(EMPTY_LIST))
                }
            }),
        )
        .await;
        let c = Client::new(plain_config(&s)).unwrap();
        // Twenty LISTs at once (none is answered before all have arrived): twenty connections.
        let (res, params) = (cm_res(), ListParams::default());
        let lists = (0..LISTS).map(|_| c.list(&res, None, &params));
        for r in futures_util::future::join_all(lists).await {
            r.unwrap();
        }
        // Back in the pool, all but the few it keeps idle are closed.
        let closes = LISTS - IDLE_REQUEST_CONNECTIONS;
        while s.closed.load(Ordering::SeqCst) < closes {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for _ in 0..2 {
            let events: Vec<_> = c
                .watch(&cm_res(), None, &WatchParams::default().timeout(5))
                .await
                .unwrap()
                .collect()
                .await;
            assert_eq!(events.len(), 1, "{events:?}");
        }
        // A GET finds one of the request connections kept idle.
        c.get(&cm_res(), None, "a").await.unwrap();
        let seen = s.seen();
        let is_watch = |r: &&Seen| r.uri.contains("watch=true");
        let list_conns: std::collections::BTreeSet<usize> = seen
            .iter()
            .filter(|r| !is_watch(r) && !r.uri.ends_with("/configmaps/a"))
            .map(|r| r.conn)
            .collect();
        let watch_conns: Vec<usize> = seen.iter().filter(is_watch).map(|r| r.conn).collect();
        let get_conn = seen.last().map(|r| r.conn);
        // Which connection each request came over, for the failure messages.
        let trail: Vec<(&str, usize)> = seen.iter().map(|r| (r.uri.as_str(), r.conn)).collect();
        assert_eq!(list_conns.len(), LISTS, "{trail:?}");
        assert!(
            get_conn.is_some_and(|g| list_conns.contains(&g)),
            "{trail:?}"
        );
        assert_eq!(watch_conns.len(), 2);
        assert_eq!(
            watch_conns[0], watch_conns[1],
            "the second watch reuses the first one's connection"
        );
        assert!(
            !list_conns.contains(&watch_conns[0]),
            "a watch took over a LIST's connection: {trail:?}"
        );
        assert_eq!(s.closed.load(Ordering::SeqCst), closes);
    })
    .await
}

#[tokio::test]
async fn a_silent_watch_ends_after_its_timeout_plus_the_idle_margin() {
    bounded(async {
        let s = serve(
            None,
            Arc::new(|_: &Seen| {
                Reply::Stall(vec![Bytes::from_static(
                    br#"{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"1"}}}"#,
                )])
            }),
        )
        .await;
        let mut cfg = plain_config(&s);
        cfg.watch_idle_margin = Duration::from_secs(1);
        let c = Client::new(cfg).unwrap();
        let mut w = c
            .watch(&cm_res(), None, &WatchParams::default().timeout(0))
            .await
            .unwrap();
        assert!(matches!(w.next().await, Some(Ok(WatchEvent::Added(_)))));
        assert!(matches!(w.next().await, Some(Err(Error::Timeout(_)))));
        assert!(w.next().await.is_none());
    })
    .await
}

#[tokio::test]
async fn token_file_is_reread_after_refresh_and_after_401() {
    bounded(async {
        let s = serve(
            None,
            Arc::new(|r: &Seen| {
                if r.header("authorization") == "Bearer stale" {
                    Reply::Full(
                        StatusCode::UNAUTHORIZED,
                        sample("error-401-unauthorized.json"),
                    )
                } else {
                    ok(CM)
                }
            }),
        )
        .await;
        let d = tmpdir();
        let tok = d.join("token");
        std::fs::write(&tok, "t1\n").unwrap();
        let mut cfg = plain_config(&s);
        cfg.auth = AuthSource::TokenFile(tok.clone());
        cfg.token_file_refresh = Duration::ZERO;
        let c = Client::new(cfg.clone()).unwrap();
        c.get(&cm_res(), None, "a").await.unwrap();
        std::fs::write(&tok, "t2").unwrap();
        c.get(&cm_res(), None, "a").await.unwrap();
        let auths: Vec<_> = s
            .seen()
            .iter()
            .map(|r| r.header("authorization").to_owned())
            .collect();
        assert_eq!(auths, ["Bearer t1", "Bearer t2"]);

        // With a long refresh period the cached token is used until the server rejects it.
        std::fs::write(&tok, "stale").unwrap();
        cfg.token_file_refresh = Duration::from_secs(3600);
        let c = Client::new(cfg).unwrap();
        let e = c.get(&cm_res(), None, "a").await.unwrap_err();
        assert_eq!(e.code(), Some(401));
        std::fs::write(&tok, "rotated").unwrap();
        c.get(&cm_res(), None, "a").await.unwrap();
        assert_eq!(
            s.seen().last().unwrap().header("authorization"),
            "Bearer rotated"
        );
        std::fs::remove_dir_all(d).unwrap();
    })
    .await
}

fn exec_kubeconfig(server: &str, dir: &std::path::Path, exp: &str) -> String {
    let script = dir.join("cred.sh");
    std::fs::write(
        &script,
        r#"#!/bin/sh
n=$(cat "$STATE/count" 2>/dev/null || echo 0)
n=$((n+1))
echo $n > "$STATE/count"
printf '%s' "$KUBERNETES_EXEC_INFO" > "$STATE/info"
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s-%s","expirationTimestamp":"%s"}}' "$PREFIX" "$n" "$EXP"
"#,
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!(
        r#"
apiVersion: v1
kind: Config
current-context: x
clusters: [{{name: c, cluster: {{server: "{server}"}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u, namespace: team}}}}]
users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ./cred.sh
      provideClusterInfo: true
      env:
      - {{name: STATE, value: "{state}"}}
      - {{name: PREFIX, value: tok}}
      - {{name: EXP, value: "{exp}"}}
"#,
        state = dir.display()
    )
}

#[tokio::test]
async fn exec_plugin_token_is_cached_until_expiry() {
    bounded(async {
        let s = serve(None, Arc::new(|_: &Seen| ok(CM))).await;
        let d = tmpdir();
        let yaml = exec_kubeconfig(&s.url("http"), &d, "2099-01-01T00:00:00Z");
        let cfg = Config::from_kubeconfig_str(&yaml, &d, &KubeconfigOptions::default()).unwrap();
        let c = Client::new(cfg).unwrap();
        assert_eq!(c.default_namespace(), "team");
        let r = cm_res();
        let (a, b) = tokio::join!(c.get(&r, None, "a"), c.get(&r, None, "b"));
        a.unwrap();
        b.unwrap();
        c.get(&cm_res(), None, "c").await.unwrap();
        let auths: Vec<_> = s
            .seen()
            .iter()
            .map(|r| r.header("authorization").to_owned())
            .collect();
        assert_eq!(auths, ["Bearer tok-1"; 3]);
        assert_eq!(
            std::fs::read_to_string(d.join("count")).unwrap().trim(),
            "1"
        );
        let info: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("info")).unwrap()).unwrap();
        assert_eq!(info["kind"], "ExecCredential");
        assert_eq!(info["apiVersion"], "client.authentication.k8s.io/v1");
        assert_eq!(info["spec"]["cluster"]["server"], s.url("http"));

        // An expired credential runs the plugin again for every request.
        let d2 = tmpdir();
        let yaml = exec_kubeconfig(&s.url("http"), &d2, "2000-01-01T00:00:00Z");
        let cfg = Config::from_kubeconfig_str(&yaml, &d2, &KubeconfigOptions::default()).unwrap();
        let c = Client::new(cfg).unwrap();
        c.get(&cm_res(), None, "a").await.unwrap();
        c.get(&cm_res(), None, "a").await.unwrap();
        let seen = s.seen();
        assert_eq!(seen[seen.len() - 2].header("authorization"), "Bearer tok-1");
        assert_eq!(seen[seen.len() - 1].header("authorization"), "Bearer tok-2");
        std::fs::remove_dir_all(d).unwrap();
        std::fs::remove_dir_all(d2).unwrap();
    })
    .await
}

#[tokio::test]
async fn failing_exec_plugin_is_a_config_error() {
    bounded(async {
        let s = serve(None, Arc::new(|_: &Seen| ok(CM))).await;
        let d = tmpdir();
        let script = d.join("fail.sh");
        std::fs::write(&script, "#!/bin/sh\necho 'login required' >&2\nexit 3\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut cfg = plain_config(&s);
        cfg.auth = AuthSource::Exec(kwh_client::config::ExecConfig {
            command: script.display().to_string(),
            api_version: "client.authentication.k8s.io/v1".into(),
            ..Default::default()
        });
        let c = Client::new(cfg).unwrap();
        let e = c.get(&cm_res(), None, "a").await.unwrap_err();
        assert!(
            matches!(&e, Error::Config(m) if m.contains("login required")),
            "{e}"
        );
        assert!(s.seen().is_empty());
        std::fs::remove_dir_all(d).unwrap();
    })
    .await
}

// ---- TLS ----

struct Pki {
    ca_pem: String,
    ca_cert: rcgen::Certificate,
    ca_key: rcgen::KeyPair,
}

impl Pki {
    fn new() -> Self {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "test-ca");
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca_cert = p.self_signed(&ca_key).unwrap();
        Pki {
            ca_pem: ca_cert.pem(),
            ca_cert,
            ca_key,
        }
    }
    /// (cert PEM, key PEM) signed by the CA.
    fn issue(&self, names: &[&str], client: bool) -> (String, String) {
        let mut p =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, names[0]);
        if client {
            p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        }
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.ca_cert, &self.ca_key).unwrap();
        (cert.pem(), key.serialize_pem())
    }
    fn server_config(
        &self,
        names: &[&str],
        require_client_cert: bool,
    ) -> Arc<rustls::ServerConfig> {
        let (cert, key) = self.issue(names, false);
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let b = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let b = if require_client_cert {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(self.ca_cert.der().clone()).unwrap();
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            b.with_client_cert_verifier(v)
        } else {
            b.with_no_client_auth()
        };
        let mut cfg = b.with_single_cert(certs, key).unwrap();
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(cfg)
    }
}

fn tls_config(s: &Server, pki: &Pki) -> Config {
    let mut c = Config::new(s.url("https").parse().unwrap());
    c.root_ca_pem = Some(pki.ca_pem.clone().into_bytes());
    c.request_timeout = Duration::from_secs(5);
    c
}

#[tokio::test]
async fn tls_with_custom_ca_negotiates_h2_or_http1() {
    bounded(async {
        let pki = Pki::new();
        let s = serve(
            Some(pki.server_config(&["localhost", "127.0.0.1"], false)),
            Arc::new(|_: &Seen| ok(CM)),
        )
        .await;
        let c = Client::new(tls_config(&s, &pki)).unwrap();
        c.get(&cm_res(), None, "a").await.unwrap();
        let mut cfg = tls_config(&s, &pki);
        cfg.http1_only = true;
        let c1 = Client::new(cfg).unwrap();
        c1.get(&cm_res(), None, "a").await.unwrap();
        let seen = s.seen();
        assert_eq!(seen[0].alpn.as_deref(), Some("h2"));
        assert_eq!(seen[0].version, http::Version::HTTP_2);
        assert_eq!(seen[1].alpn.as_deref(), Some("http/1.1"));
        assert_eq!(seen[1].version, http::Version::HTTP_11);

        // A CA that did not sign the server certificate is refused at connect.
        let other = Pki::new();
        let c = Client::new(tls_config(&s, &other)).unwrap();
        let e = c.get(&cm_res(), None, "a").await.unwrap_err();
        assert!(e.is_connect(), "{e}");
        // Not a refusal: the reflector relists after a backoff instead (spec 1.8).
        assert!(!e.is_connection_refused(), "{e}");
    })
    .await
}

#[tokio::test]
async fn tls_server_name_override_and_insecure_skip_verify() {
    bounded(async {
        let pki = Pki::new();
        // The certificate does not name 127.0.0.1.
        let s = serve(
            Some(pki.server_config(&["kubernetes.default.svc"], false)),
            Arc::new(|_: &Seen| ok(CM)),
        )
        .await;
        let c = Client::new(tls_config(&s, &pki)).unwrap();
        assert!(c.get(&cm_res(), None, "a").await.unwrap_err().is_connect());

        let mut cfg = tls_config(&s, &pki);
        cfg.tls_server_name = Some("kubernetes.default.svc".into());
        Client::new(cfg)
            .unwrap()
            .get(&cm_res(), None, "a")
            .await
            .unwrap();

        let mut cfg = tls_config(&s, &pki);
        cfg.root_ca_pem = None;
        cfg.insecure_skip_tls_verify = true;
        Client::new(cfg)
            .unwrap()
            .get(&cm_res(), None, "a")
            .await
            .unwrap();
        assert_eq!(s.seen().len(), 2);
    })
    .await
}

#[tokio::test]
async fn client_certificates_from_config_and_from_exec() {
    bounded(async {
        let pki = Pki::new();
        let s = serve(
            Some(pki.server_config(&["localhost", "127.0.0.1"], true)),
            Arc::new(|_: &Seen| ok(CM)),
        )
        .await;
        let c = Client::new(tls_config(&s, &pki)).unwrap();
        assert!(c.get(&cm_res(), None, "a").await.is_err());

        let (cert, key) = pki.issue(&["alice"], true);
        let mut cfg = tls_config(&s, &pki);
        cfg.client_identity = Some(Identity {
            cert_pem: cert.clone().into_bytes(),
            key_pem: key.clone().into_bytes(),
        });
        Client::new(cfg)
            .unwrap()
            .get(&cm_res(), None, "a")
            .await
            .unwrap();
        assert!(s.seen()[0].client_cert);

        // An exec plugin may hand out the client certificate instead of a token.
        let d = tmpdir();
        let cred = serde_json::json!({
            "apiVersion": "client.authentication.k8s.io/v1",
            "kind": "ExecCredential",
            "status": {"clientCertificateData": cert, "clientKeyData": key},
        });
        std::fs::write(d.join("cred.json"), cred.to_string()).unwrap();
        let mut cfg = tls_config(&s, &pki);
        cfg.auth = AuthSource::Exec(kwh_client::config::ExecConfig {
            command: "cat".into(),
            args: vec![d.join("cred.json").display().to_string()],
            api_version: "client.authentication.k8s.io/v1".into(),
            ..Default::default()
        });
        Client::new(cfg)
            .unwrap()
            .get(&cm_res(), None, "b")
            .await
            .unwrap();
        let seen = s.seen();
        assert!(seen[1].client_cert);
        assert_eq!(seen[1].header("authorization"), "");
        std::fs::remove_dir_all(d).unwrap();
    })
    .await
}

/// The kubeconfig fields the other tests set on `Config` directly, read from a kubeconfig as
/// kubectl reads them: `certificate-authority-data`, `client-certificate`/`client-key` as
/// paths relative to the kubeconfig's folder, and a static `token`.
#[tokio::test]
async fn kubeconfig_ca_data_client_cert_files_and_static_token() {
    use base64::Engine as _;
    bounded(async {
        let pki = Pki::new();
        let s = serve(
            Some(pki.server_config(&["localhost", "127.0.0.1"], true)),
            Arc::new(|_: &Seen| ok(CM)),
        )
        .await;
        let d = tmpdir();
        let (cert, key) = pki.issue(&["alice"], true);
        std::fs::create_dir_all(d.join("pki")).unwrap();
        std::fs::write(d.join("pki/alice.crt"), &cert).unwrap();
        std::fs::write(d.join("pki/alice.key"), &key).unwrap();
        let ca = base64::engine::general_purpose::STANDARD.encode(&pki.ca_pem);
        let yaml = format!(
            r#"apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "{server}", certificate-authority-data: "{ca}"}}
users:
- name: files
  user: {{client-certificate: pki/alice.crt, client-key: pki/alice.key}}
- name: token
  user: {{client-certificate: pki/alice.crt, client-key: pki/alice.key, token: s3cret}}
contexts:
- name: files
  context: {{cluster: c, user: files}}
- name: token
  context: {{cluster: c, user: token}}
current-context: files
"#,
            server = s.url("https")
        );
        let load = |context: Option<&str>| {
            Config::from_kubeconfig_str(
                &yaml,
                &d,
                &KubeconfigOptions {
                    context: context.map(str::to_owned),
                    ..Default::default()
                },
            )
            .unwrap()
        };
        Client::new(load(None))
            .unwrap()
            .get(&cm_res(), None, "a")
            .await
            .unwrap();
        Client::new(load(Some("token")))
            .unwrap()
            .get(&cm_res(), None, "b")
            .await
            .unwrap();
        let seen = s.seen();
        assert!(seen[0].client_cert && seen[1].client_cert);
        assert_eq!(seen[0].header("authorization"), "");
        assert_eq!(seen[1].header("authorization"), "Bearer s3cret");

        // A CA that is not base64 is a configuration error naming the field.
        let bad = yaml.replace(&ca, "not base64!");
        let e = Config::from_kubeconfig_str(&bad, &d, &KubeconfigOptions::default()).unwrap_err();
        assert!(e.to_string().contains("certificate-authority-data"), "{e}");
        std::fs::remove_dir_all(d).unwrap();
    })
    .await
}

/// The DER of a PEM certificate.
fn der(pem: &str) -> Vec<u8> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .expect("a certificate")
        .expect("PEM")
        .as_ref()
        .to_vec()
}

/// An exec plugin that hands out a new client certificate (after the old one is refused) is
/// followed on new connections: pooled connections opened with the old certificate are not
/// reused, as client-go closes its connections when the certificate rotates.
#[tokio::test]
async fn a_rotated_exec_client_certificate_is_used_on_new_connections() {
    bounded(async {
        let pki = Pki::new();
        let (old_cert, old_key) = pki.issue(&["alice"], true);
        let (new_cert, new_key) = pki.issue(&["alice"], true);
        let (old_der, new_der) = (der(&old_cert), der(&new_cert));
        // The server refuses the old certificate once `revoked` is set.
        let revoked = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (r, od) = (revoked.clone(), old_der.clone());
        let s = serve(
            Some(pki.server_config(&["localhost", "127.0.0.1"], true)),
            Arc::new(move |seen: &Seen| {
                let old = seen.client_cert_der.as_deref() == Some(&od[..]);
                if old && r.load(std::sync::atomic::Ordering::SeqCst) {
                    Reply::Full(StatusCode::UNAUTHORIZED, Bytes::from_static(b"{}"))
                } else {
                    ok(CM)
                }
            }),
        )
        .await;
        let d = tmpdir();
        let write_cred = |cert: &str, key: &str| {
            let cred = serde_json::json!({
                "apiVersion": "client.authentication.k8s.io/v1",
                "kind": "ExecCredential",
                "status": {"clientCertificateData": cert, "clientKeyData": key},
            });
            std::fs::write(d.join("cred.json"), cred.to_string()).unwrap();
        };
        write_cred(&old_cert, &old_key);
        let mut cfg = tls_config(&s, &pki);
        cfg.http1_only = true;
        cfg.auth = AuthSource::Exec(kwh_client::config::ExecConfig {
            command: "cat".into(),
            args: vec![d.join("cred.json").display().to_string()],
            api_version: "client.authentication.k8s.io/v1".into(),
            ..Default::default()
        });
        let c = Client::new(cfg).unwrap();
        c.get(&cm_res(), None, "a").await.unwrap();
        c.get(&cm_res(), None, "a").await.unwrap();

        // The plugin now hands out a new certificate and the old one is refused: the refused
        // request fails, the next one runs the plugin again and presents the new certificate.
        write_cred(&new_cert, &new_key);
        revoked.store(true, std::sync::atomic::Ordering::SeqCst);
        let e = c
            .get(&cm_res(), None, "a")
            .await
            .expect_err("old cert refused");
        assert!(matches!(&e, Error::Api(st) if st.code == 401), "{e:?}");
        c.get(&cm_res(), None, "a").await.unwrap();
        c.get(&cm_res(), None, "a").await.unwrap();

        let certs: Vec<bool> = s
            .seen()
            .iter()
            .map(|x| x.client_cert_der.as_deref() == Some(&new_der[..]))
            .collect();
        assert_eq!(certs, [false, false, false, true, true]);
        assert!(s.seen()[..3]
            .iter()
            .all(|x| x.client_cert_der.as_deref() == Some(&old_der[..])));
        std::fs::remove_dir_all(d).unwrap();
    })
    .await
}

#[tokio::test]
async fn in_cluster_config_trusts_the_service_account_ca_and_follows_token_rotation() {
    bounded(async {
        let pki = Pki::new();
        let s = serve(
            Some(pki.server_config(&["127.0.0.1"], false)),
            Arc::new(|_: &Seen| ok(CM)),
        )
        .await;
        let d = tmpdir();
        std::fs::write(d.join("token"), "sa-1").unwrap();
        std::fs::write(d.join("ca.crt"), &pki.ca_pem).unwrap();
        std::fs::write(d.join("namespace"), "apps").unwrap();
        let env = kwh_client::config::InClusterEnv {
            host: Some("127.0.0.1".into()),
            port: Some(s.addr.port().to_string()),
            dir: d.clone(),
        };
        let mut cfg = Config::in_cluster_with(&env).unwrap();
        cfg.token_file_refresh = Duration::ZERO;
        let c = Client::new(cfg).unwrap();
        assert_eq!(c.default_namespace(), "apps");
        c.get(&cm_res(), Some("apps"), "a").await.unwrap();
        // The kubelet rotates projected tokens by swapping the file.
        std::fs::write(d.join("token.new"), "sa-2").unwrap();
        std::fs::rename(d.join("token.new"), d.join("token")).unwrap();
        c.get(&cm_res(), Some("apps"), "a").await.unwrap();
        let auths: Vec<_> = s
            .seen()
            .iter()
            .map(|r| r.header("authorization").to_owned())
            .collect();
        assert_eq!(auths, ["Bearer sa-1", "Bearer sa-2"]);
        std::fs::remove_dir_all(d).unwrap();
    })
    .await
}

// ---- watch, list, writes ----

#[tokio::test]
async fn watch_stream_in_odd_chunks_over_h2_spec_6_3() {
    bounded(async {
        let pki = Pki::new();
        let raw = sample("watch-stream.jsonl");
        let chunks: Vec<Bytes> = raw.chunks(97).map(Bytes::copy_from_slice).collect();
        let s = serve(
            Some(pki.server_config(&["127.0.0.1"], false)),
            Arc::new(move |_: &Seen| Reply::Chunks(StatusCode::OK, chunks.clone())),
        )
        .await;
        let c = Client::new(tls_config(&s, &pki)).unwrap();
        let rc = ResourceClient::new(c, cm_res(), Some("samples".into())).labels("sample=yes");
        let params = WatchParams::default().bookmarks(true).timeout(15).labels("x");
        let evs: Vec<_> = rc.watch(&params).await.unwrap().collect().await;
        let evs: Vec<WatchEvent> = evs.into_iter().map(Result::unwrap).collect();
        let want = raw.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count();
        assert_eq!(evs.len(), want);
        assert!(matches!(&evs[0], WatchEvent::Added(o) if o.name() == "pre-5"));
        assert!(matches!(evs.last().unwrap(), WatchEvent::Bookmark { .. }));
        let seen = s.seen();
        assert_eq!(seen[0].version, http::Version::HTTP_2);
        assert_eq!(
            seen[0].uri,
            "/api/v1/namespaces/samples/configmaps?watch=true&labelSelector=sample%3Dyes%2Cx&allowWatchBookmarks=true&timeoutSeconds=15"
        );
    })
    .await
}

#[tokio::test]
async fn watch_410_error_event_and_truncated_stream_spec_6_6() {
    bounded(async {
        let s = serve(
            None,
            Arc::new(|r: &Seen| {
                if r.uri.contains("resourceVersion=1&") {
                    Reply::Full(StatusCode::OK, sample("watch-410-old-rv.jsonl"))
                } else {
                    Reply::Chunks(
                        StatusCode::OK,
                        vec![Bytes::from_static(
                            b"{\"type\":\"ADDED\",\"object\":{\"metadata\"",
                        )],
                    )
                }
            }),
        )
        .await;
        let rc = ResourceClient::new(Client::new(plain_config(&s)).unwrap(), cm_res(), None);
        let evs: Vec<_> = rc
            .watch(&WatchParams::default().at("1").timeout(10))
            .await
            .unwrap()
            .collect()
            .await;
        assert_eq!(evs.len(), 1);
        assert!(matches!(&evs[0], Ok(WatchEvent::Error(st)) if st.code == 410 && st.is_expired()));
        let evs: Vec<_> = rc
            .watch(&WatchParams::default().at("2").timeout(10))
            .await
            .unwrap()
            .collect()
            .await;
        assert_eq!(evs.len(), 1);
        assert!(matches!(&evs[0], Err(Error::Decode(_))));
    })
    .await
}

#[tokio::test]
async fn lister_lists_pages_with_scope_selectors_spec_6_2() {
    bounded(async {
        let s = serve(
            None,
            Arc::new(|r: &Seen| {
                if r.uri.contains("continue=") {
                    Reply::Full(StatusCode::OK, sample("list-page2.json"))
                } else {
                    Reply::Full(StatusCode::OK, sample("list-page1.json"))
                }
            }),
        )
        .await;
        let rc = ResourceClient::new(Client::new(plain_config(&s)).unwrap(), cm_res(), None)
            .fields("metadata.namespace=samples");
        // The reflector lists from spawned tasks: the futures must be Send.
        let rc2 = rc.clone();
        let p1 = tokio::spawn(async move { rc2.list(&ListParams::default().limit(2)).await })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(p1.items.len(), 2);
        assert_eq!(p1.resource_version, "50478");
        let tok = p1.continue_token.clone().unwrap();
        let p2 = rc
            .list(&ListParams::default().limit(2).continue_from(tok.clone()))
            .await
            .unwrap();
        assert_eq!(p2.items[0].name(), "pre-3");
        let seen = s.seen();
        assert_eq!(
            seen[0].uri,
            "/api/v1/configmaps?fieldSelector=metadata.namespace%3Dsamples&limit=2"
        );
        assert!(seen[1].uri.ends_with(&format!("limit=2&continue={tok}")));
    })
    .await
}

#[tokio::test]
async fn a_large_list_decodes_every_item_into_its_own_allocation() {
    bounded(async {
        let n = 6000;
        let pad = "x".repeat(900);
        let items: Vec<String> = (0..n)
            .map(|i| {
                format!(
                    r#"{{"metadata":{{"name":"cm-{i}","namespace":"ns","resourceVersion":"{i}","managedFields":[{{"manager":"m"}}]}},"data":{{"k":"{pad}"}}}}"#
                )
            })
            .collect();
        let body = Bytes::from(format!(
            r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"99"}},"items":[{}]}}"#,
            items.join(",")
        ));
        assert!(body.len() > 4 << 20);
        let s = serve(None, Arc::new(move |_: &Seen| Reply::Full(StatusCode::OK, body.clone()))).await;
        let c = Client::new(plain_config(&s)).unwrap();
        let l = c.list(&cm_res(), Some("ns"), &ListParams::default()).await.unwrap();
        assert_eq!(l.items.len(), n);
        assert_eq!(l.resource_version, "99");
        for (i, o) in l.items.iter().enumerate() {
            assert_eq!(o.name(), format!("cm-{i}"));
            assert!(o.raw().len() < 1100, "item {i} holds {} bytes", o.raw().len());
            assert!(o.as_str().starts_with(r#"{"kind":"ConfigMap","apiVersion":"v1","#));
        }
    })
    .await
}

#[tokio::test]
async fn writes_send_the_right_method_path_and_body() {
    bounded(async {
        let s = serve(
            None,
            Arc::new(|r: &Seen| {
                if r.method == Method::DELETE && r.uri.contains("/gone") {
                    ok(br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","code":200}"#)
                } else {
                    ok(CM)
                }
            }),
        )
        .await;
        let c = Client::new(plain_config(&s)).unwrap();
        let r = cm_res();
        let body = Bytes::from_static(CM);
        let wp = WriteParams::default();
        c.create(&r, Some("ns"), body.clone(), &wp).await.unwrap();
        c.replace_status(&r, Some("ns"), "a", body.clone(), &wp).await.unwrap();
        let patch = Patch::Merge(Bytes::from_static(br#"{"data":{"k":"w"}}"#));
        c.patch(&r, Some("ns"), "a", None, &patch, &wp).await.unwrap();
        let apply = Patch::Apply(body.clone());
        assert!(c.patch(&r, Some("ns"), "a", None, &apply, &wp).await.is_err());
        let wp_apply = WriteParams {
            field_manager: Some("ctl".into()),
            force: true,
            ..Default::default()
        };
        c.patch(&r, Some("ns"), "a", None, &apply, &wp_apply).await.unwrap();
        let dp = DeleteParams {
            propagation_policy: Some("Foreground".into()),
            precondition_uid: Some("u".into()),
            precondition_resource_version: Some("5".into()),
            ..Default::default()
        };
        assert!(matches!(c.delete(&r, Some("ns"), "a", &dp).await.unwrap(), Deleted::Object(o) if o.name() == "a"));
        assert!(matches!(
            c.delete(&r, Some("ns"), "gone", &DeleteParams::default()).await.unwrap(),
            Deleted::Status(st) if st.status == "Success"
        ));
        let seen = s.seen();
        let summary: Vec<_> = seen
            .iter()
            .map(|r| (r.method.as_str().to_owned(), r.uri.clone(), r.header("content-type").to_owned()))
            .collect();
        let want = [
            ("POST", "/api/v1/namespaces/ns/configmaps", "application/json"),
            ("PUT", "/api/v1/namespaces/ns/configmaps/a/status", "application/json"),
            ("PATCH", "/api/v1/namespaces/ns/configmaps/a", "application/merge-patch+json"),
            (
                "PATCH",
                "/api/v1/namespaces/ns/configmaps/a?fieldManager=ctl&force=true",
                "application/apply-patch+yaml",
            ),
            ("DELETE", "/api/v1/namespaces/ns/configmaps/a", "application/json"),
            ("DELETE", "/api/v1/namespaces/ns/configmaps/gone", "application/json"),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
            .collect();
        assert_eq!(summary, want);
        let del: serde_json::Value = serde_json::from_slice(&seen[4].body).unwrap();
        assert_eq!(del["propagationPolicy"], "Foreground");
        assert_eq!(del["preconditions"]["uid"], "u");
        assert_eq!(del["preconditions"]["resourceVersion"], "5");
        assert_eq!(seen[2].body, Bytes::from_static(br#"{"data":{"k":"w"}}"#));
    })
    .await
}

// ---- discovery ----

#[tokio::test]
async fn discovery_resolves_kinds_and_finds_crds_installed_later() {
    bounded(async {
        let crd_ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ready = crd_ready.clone();
        let apis = br#"{"kind":"APIGroupList","apiVersion":"v1","groups":[
            {"name":"apps","versions":[{"groupVersion":"apps/v1","version":"v1"}]},
            {"name":"metrics.k8s.io","versions":[{"groupVersion":"metrics.k8s.io/v1beta1","version":"v1beta1"}]}]}"#;
        let apps = br#"{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"apps/v1","resources":[
            {"name":"deployments","namespaced":true,"kind":"Deployment","verbs":["get","list","watch"]},
            {"name":"deployments/status","namespaced":true,"kind":"Deployment","verbs":["get"]}]}"#;
        let widgets = br#"{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"example.com/v1","resources":[
            {"name":"widgets","namespaced":false,"kind":"Widget","verbs":["list","watch"]}]}"#;
        let s = serve(
            None,
            Arc::new(move |r: &Seen| match r.uri.as_str() {
                "/api" => Reply::Full(StatusCode::OK, sample("discovery-api.json")),
                "/api/v1" => Reply::Full(StatusCode::OK, sample("discovery-api-v1.json")),
                "/apis" => ok(apis),
                "/apis/apps/v1" => ok(apps),
                "/apis/example.com/v1" if ready.load(std::sync::atomic::Ordering::SeqCst) => {
                    ok(widgets)
                }
                "/apis/metrics.k8s.io/v1beta1" => {
                    Reply::Full(StatusCode::SERVICE_UNAVAILABLE, Bytes::new())
                }
                _ => Reply::Full(StatusCode::NOT_FOUND, sample("error-404-notfound.json")),
            }),
        )
        .await;
        let d = Discovery::new(Client::new(plain_config(&s)).unwrap())
            .with_min_refresh_interval(Duration::from_secs(3600));
        // metrics.k8s.io is down: discovery still works for everything else.
        d.refresh().await.unwrap();
        let dep = d.resolve("apps/v1", "Deployment").await.unwrap();
        assert_eq!(dep.plural, "deployments");
        assert!(dep.has_subresource("status"));
        let cm = d.resolve("v1", "ConfigMap").await.unwrap();
        assert_eq!(cm.collection_path(Some("x")), "/api/v1/namespaces/x/configmaps");
        let before = s.seen().len();

        // Not installed yet: one targeted fetch, then rate-limited.
        let e = d.resolve("example.com/v1", "Widget").await.unwrap_err();
        assert_eq!(e.code(), Some(404), "{e}");
        let _ = d.resolve("example.com/v1", "Widget").await.unwrap_err();
        assert_eq!(s.seen().len(), before + 1);

        // Installed later: the same (warm) cache resolves it once a miss may fetch again.
        let d = Discovery::new(Client::new(plain_config(&s)).unwrap())
            .with_min_refresh_interval(Duration::from_millis(200));
        d.refresh().await.unwrap();
        assert!(d.resolve("example.com/v1", "Widget").await.is_err());
        crd_ready.store(true, std::sync::atomic::Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while d.resolve("example.com/v1", "Widget").await.is_err() {
            assert!(tokio::time::Instant::now() < deadline, "never resolved");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let w = d.cached("example.com/v1", "Widget").unwrap();
        assert!(!w.namespaced);
        assert_eq!(w.collection_path(Some("ignored")), "/apis/example.com/v1/widgets");
        let unknown = d.resolve("apps/v1", "Nope").await.unwrap_err();
        assert_eq!(unknown.code(), Some(404));
        // A full refresh forgets group-versions that /apis no longer lists.
        d.refresh().await.unwrap();
        assert!(d.cached("example.com/v1", "Widget").is_none());
        assert!(d.cached("apps/v1", "Deployment").is_some());
    })
    .await
}

/// A resolve given up while its fetch was in flight (a caller's timeout, an aborted task) is no
/// answer: the next caller fetches, instead of reading the miss as "the server doesn't have a
/// resource type" for the whole refresh interval. Found by the simulation: a replica started
/// while cut off from its API server reported a 404 for ConfigMaps once the link was back.
#[tokio::test]
async fn a_resolve_given_up_mid_fetch_leaves_the_next_caller_free_to_fetch() {
    bounded(async {
        let asked = Arc::new(AtomicUsize::new(0));
        let n = asked.clone();
        let s = serve(
            None,
            Arc::new(move |r: &Seen| match r.uri.as_str() {
                // The first request is never answered; the ones after are.
                "/api/v1" if n.fetch_add(1, Ordering::SeqCst) == 0 => Reply::Hang,
                "/api/v1" => Reply::Full(StatusCode::OK, sample("discovery-api-v1.json")),
                _ => Reply::Full(StatusCode::NOT_FOUND, sample("error-404-notfound.json")),
            }),
        )
        .await;
        let d = Arc::new(
            Discovery::new(Client::new(plain_config(&s)).unwrap())
                .with_min_refresh_interval(Duration::from_secs(3600)),
        );
        let first = tokio::spawn({
            let d = d.clone();
            async move { d.resolve("v1", "ConfigMap").await }
        });
        // Given up once the server holds its request.
        while asked.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        first.abort();
        assert!(first.await.is_err(), "aborted, not answered");
        let cm = d
            .resolve("v1", "ConfigMap")
            .await
            .expect("fetched again, not read as a miss");
        assert_eq!(cm.plural, "configmaps");
        assert_eq!(asked.load(Ordering::SeqCst), 2);
    })
    .await
}

/// Reported from outside: a LIST body holding a 300 MiB unterminated string was buffered whole
/// (1.2 GB at its peak) before its error, and an object with a 200 MiB name was accepted. A
/// value still arriving is buffered up to the bound only (here 1 MiB), then the list fails
/// with one error naming it; a single object's body the same.
#[tokio::test]
async fn a_list_item_or_body_over_the_bound_fails_after_reading_about_the_bound() {
    bounded(async {
        let sent = Arc::new(AtomicU64::new(0));
        let endless = {
            let sent = sent.clone();
            move |head: &'static [u8]| Reply::Endless {
                head: Bytes::from_static(head),
                filler: Bytes::from(vec![b'x'; 64 << 10]),
                sent: sent.clone(),
            }
        };
        let s = serve(
            None,
            Arc::new(move |r: &Seen| {
                if r.uri.ends_with("/configmaps/a") {
                    endless(br#"{"kind":"ConfigMap","metadata":{"name":""#)
                } else {
                    endless(br#"{"kind":"ConfigMapList","apiVersion":"v1","items":[{"metadata":{"name":""#)
                }
            }),
        )
        .await;
        let mut cfg = plain_config(&s);
        cfg.ingest.max_object_bytes = 1 << 20;
        cfg.request_timeout = Duration::from_secs(15);
        let c = Client::new(cfg).unwrap();
        let e = c
            .list(&cm_res(), Some("ns"), &ListParams::default())
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::Decode(m) if m.contains("an item larger than 1048576 bytes")),
            "{e}"
        );
        let e = c.get(&cm_res(), Some("ns"), "a").await.unwrap_err();
        assert!(
            matches!(&e, Error::Decode(m) if m.contains("larger than 1048576 bytes")),
            "{e}"
        );
        // What the server got out before the client let go: the bound, plus what the
        // connection's buffers held (not the unbounded body).
        let n = sent.load(Ordering::Relaxed);
        assert!(n < 32 << 20, "{n} bytes sent");
    })
    .await
}
