//! A real OCI registry on loopback (Debian's `docker-registry`, the distribution project's
//! server), and a gate in front of it that asks for Bearer tokens as ghcr.io and Docker Hub do.
//!
//! The tests that use them are built only where `docker-registry` runs (`cfg(docker_registry)`,
//! set by `host/build.rs`) and are reported as ignored, with the reason, elsewhere; `.ci/run`
//! installs it.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

/// `s3cret`, bcrypt at the lowest cost (the registry checks it on every request).
const HTPASSWD: &str = "tester:$2b$04$Cz/YJwLmsdpRBpcVCftVU.vfoBkCy/CNjlaVuCMg3uHRWq8Lhpgsu\n";
pub const USER: &str = "tester";
pub const PASSWORD: &str = "s3cret";

/// A `docker-registry serve` process with its storage in a directory of its own.
pub struct RegistryProcess {
    child: tokio::process::Child,
    addr: SocketAddr,
}

impl RegistryProcess {
    /// Starts one on a free loopback port; with `basic_auth`, it asks for `USER`/`PASSWORD`.
    pub async fn start(dir: &Path, basic_auth: bool) -> RegistryProcess {
        std::fs::create_dir_all(dir).expect("registry dir");
        // A port the kernel just gave out, released for the registry to bind (a race only
        // with another process binding the same port in between; the start is retried).
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("free port")
                .port();
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let mut config = format!(
                "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n",
                dir.join("data").display()
            );
            if basic_auth {
                std::fs::write(dir.join("htpasswd"), HTPASSWD).expect("htpasswd");
                config.push_str(&format!(
                    "auth:\n  htpasswd:\n    realm: test-realm\n    path: {}\n",
                    dir.join("htpasswd").display()
                ));
            }
            let cfg = dir.join("config.yml");
            std::fs::write(&cfg, config).expect("registry config");
            let child = tokio::process::Command::new("docker-registry")
                .arg("serve")
                .arg(&cfg)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .expect("docker-registry starts");
            let mut r = RegistryProcess { child, addr };
            if r.ready().await {
                return r;
            }
        }
        panic!("docker-registry did not start on a loopback port in five tries");
    }

    /// Waits (10 s at most) until `/v2/` answers; false when the process exited first.
    async fn ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Ok(s) = tokio::net::TcpStream::connect(self.addr).await {
                drop(s);
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// `host:port`, as a reference names it.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Requests the gate saw, by kind.
#[derive(Default)]
pub struct GateCounters {
    pub tokens: AtomicU64,
    pub manifests: AtomicU64,
    pub blobs: AtomicU64,
    pub refused: AtomicU64,
}

/// A loopback front for a registry: every request without a token it issued is answered 401
/// with a Bearer challenge naming its own token endpoint (anonymous: any GET of it gets a
/// token); the others are forwarded. It counts what it sees, and can corrupt blobs in flight.
pub struct TokenGate {
    addr: SocketAddr,
    pub counters: Arc<GateCounters>,
    corrupt: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TokenGate {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TokenGate {
    pub async fn start(upstream: SocketAddr) -> TokenGate {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind gate");
        let addr = listener.local_addr().expect("gate address");
        let counters = Arc::new(GateCounters::default());
        let corrupt = Arc::new(AtomicBool::new(false));
        let (c, k) = (counters.clone(), corrupt.clone());
        let task = tokio::spawn(async move {
            let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
                .build_http::<Full<Bytes>>();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (client, c, k) = (client.clone(), c.clone(), k.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        gate(req, addr, upstream, client.clone(), c.clone(), k.clone())
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        TokenGate {
            addr,
            counters,
            corrupt,
            task,
        }
    }

    /// `host:port`, as a reference names it.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// From now on, flip one byte of every blob answered.
    pub fn corrupt_blobs(&self, on: bool) {
        self.corrupt.store(on, Ordering::SeqCst);
    }
}

async fn gate(
    req: Request<Incoming>,
    me: SocketAddr,
    upstream: SocketAddr,
    client: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        Full<Bytes>,
    >,
    counters: Arc<GateCounters>,
    corrupt: Arc<AtomicBool>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let path = req.uri().path().to_owned();
    if path == "/token" {
        let n = counters.tokens.fetch_add(1, Ordering::SeqCst);
        let body = format!("{{\"token\": \"gate-{n}\", \"expires_in\": 300}}");
        return Ok(Response::new(Full::new(Bytes::from(body))));
    }
    let authorized = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("Bearer gate-"));
    if !authorized {
        counters.refused.fetch_add(1, Ordering::SeqCst);
        let challenge = format!(
            "Bearer realm=\"http://{me}/token\",service=\"gate\",scope=\"repository:x:pull\""
        );
        return Ok(Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header(http::header::WWW_AUTHENTICATE, challenge)
            .body(Full::new(Bytes::from_static(
                b"{\"errors\":[{\"code\":\"UNAUTHORIZED\",\"message\":\"token required\"}]}",
            )))
            .expect("response"));
    }
    if path.contains("/manifests/") {
        counters.manifests.fetch_add(1, Ordering::SeqCst);
    }
    let is_blob = path.contains("/blobs/sha256:");
    if is_blob {
        counters.blobs.fetch_add(1, Ordering::SeqCst);
    }
    let (mut parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let pq = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    parts.uri = format!("http://{upstream}{pq}")
        .parse()
        .expect("upstream URI");
    parts.headers.remove(http::header::AUTHORIZATION);
    let resp = match client
        .request(Request::from_parts(parts, Full::new(body)))
        .await
    {
        Ok(r) => r,
        Err(e) => {
            return Ok(Response::builder()
                .status(StatusCode::BAD_GATEWAY)
                .body(Full::new(Bytes::from(e.to_string())))
                .expect("response"))
        }
    };
    let (mut parts, body) = resp.into_parts();
    // Re-framed here: the body is whole now.
    parts.headers.remove(http::header::TRANSFER_ENCODING);
    let mut body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if is_blob && corrupt.load(Ordering::SeqCst) && !body.is_empty() {
        let mut v = body.to_vec();
        v[0] ^= 0xff;
        body = Bytes::from(v);
    }
    Ok(Response::from_parts(parts, Full::new(body)))
}
