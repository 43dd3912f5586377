//! Helpers shared by the emulator integration tests: a small hyper client and a watch-stream
//! reader with deadlines.
#![allow(dead_code)]

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// Bound for any single request in these tests.
pub const STEP: Duration = Duration::from_secs(10);

/// The repository's root: the nearest ancestor of the including crate that holds the directory `wit/` (this
/// module is compiled into tests of several crates, each at its own depth).
pub fn repo_root() -> std::path::PathBuf {
    let mut dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    // A real directory: the crates that package the contract hold a link to it (`wit`).
    while !std::fs::symlink_metadata(dir.join("wit")).is_ok_and(|m| m.is_dir()) {
        dir = dir.parent().expect("the crate lies inside the repository");
    }
    dir.to_path_buf()
}

pub fn sample(name: &str) -> String {
    let path = repo_root().join("../shared/apiserver-samples").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

pub fn sample_json(name: &str) -> Value {
    serde_json::from_str(&sample(name)).unwrap()
}

pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

#[derive(Clone)]
pub struct Http {
    client: Client<HttpConnector, Full<Bytes>>,
    pub base: String,
    pub token: Option<String>,
}

impl Http {
    pub fn new(base: String) -> Self {
        Http {
            client: Client::builder(TokioExecutor::new()).build_http(),
            base,
            token: None,
        }
    }

    /// A client speaking HTTP/2 (prior knowledge), as the recorded samples were captured: their
    /// headers can then be compared as they are, with no HTTP/1.1 framing headers.
    pub fn h2(base: String) -> Self {
        Http {
            client: Client::builder(TokioExecutor::new())
                .http2_only(true)
                .build_http(),
            base,
            token: None,
        }
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        ct: Option<&str>,
        body: &[u8],
    ) -> Request<Full<Bytes>> {
        let mut b = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("accept", "application/json");
        if let Some(ct) = ct {
            b = b.header("content-type", ct);
        }
        if let Some(t) = &self.token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        b.body(Full::new(Bytes::copy_from_slice(body))).unwrap()
    }

    pub async fn send_req(&self, req: Request<Full<Bytes>>) -> Resp {
        let r = tokio::time::timeout(STEP, async {
            let r = self.client.request(req).await.expect("request failed");
            let (parts, body) = r.into_parts();
            let body = body.collect().await.expect("body").to_bytes();
            Resp {
                status: parts.status,
                headers: parts.headers,
                body,
            }
        })
        .await;
        r.expect("request timed out")
    }

    pub async fn send(&self, method: Method, path: &str, ct: Option<&str>, body: &[u8]) -> Resp {
        self.send_req(self.request(method, path, ct, body)).await
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.send(Method::GET, path, None, b"").await
    }

    pub async fn get_with_accept(&self, path: &str, accept: &str) -> Resp {
        let mut req = self.request(Method::GET, path, None, b"");
        req.headers_mut().insert("accept", accept.parse().unwrap());
        self.send_req(req).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Resp {
        self.send(
            Method::POST,
            path,
            Some("application/json"),
            body.to_string().as_bytes(),
        )
        .await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Resp {
        self.send(
            Method::PUT,
            path,
            Some("application/json"),
            body.to_string().as_bytes(),
        )
        .await
    }

    pub async fn patch(&self, path: &str, ct: &str, body: &str) -> Resp {
        self.send(Method::PATCH, path, Some(ct), body.as_bytes())
            .await
    }

    pub async fn delete(&self, path: &str) -> Resp {
        self.send(Method::DELETE, path, None, b"").await
    }

    /// Open a watch; the response head is returned with a reader for the events.
    pub async fn watch(&self, path: &str) -> (StatusCode, HeaderMap, Events) {
        self.watch_with_accept(path, "application/json").await
    }

    pub async fn watch_with_accept(
        &self,
        path: &str,
        accept: &str,
    ) -> (StatusCode, HeaderMap, Events) {
        let mut req = self.request(Method::GET, path, None, b"");
        req.headers_mut().insert("accept", accept.parse().unwrap());
        let r = tokio::time::timeout(STEP, self.client.request(req))
            .await
            .expect("watch head timed out")
            .expect("watch failed");
        let (parts, body) = r.into_parts();
        (
            parts.status,
            parts.headers,
            Events {
                body,
                buf: Vec::new(),
                ended: false,
            },
        )
    }
}

/// Newline-delimited JSON events of a watch response.
pub struct Events {
    body: Incoming,
    buf: Vec<u8>,
    ended: bool,
}

impl Events {
    /// The next event; `None` when the stream ended. Panics when nothing arrives within `within`.
    pub async fn next_within(&mut self, within: Duration) -> Option<Value> {
        tokio::time::timeout(within, self.next())
            .await
            .expect("no watch event in time")
    }

    /// The next event, or `None` at end of stream (or on a broken connection).
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Some(
                    serde_json::from_slice(&line[..line.len() - 1]).expect("event is JSON"),
                );
            }
            if self.ended {
                assert!(self.buf.is_empty(), "trailing bytes without newline");
                return None;
            }
            self.read_more().await;
        }
    }

    /// Appends the body's next chunk to the buffer, or marks the end.
    async fn read_more(&mut self) {
        match self.body.frame().await {
            Some(Ok(f)) => {
                if let Some(d) = f.data_ref() {
                    self.buf.extend_from_slice(d);
                }
            }
            Some(Err(_)) | None => self.ended = true,
        }
    }

    /// The next frame of a protobuf watch (a 4-byte big-endian length, then that many bytes);
    /// `None` at end of stream. Panics when none arrives within `within`.
    pub async fn next_frame_within(&mut self, within: Duration) -> Option<Vec<u8>> {
        tokio::time::timeout(within, async {
            loop {
                if self.buf.len() >= 4 {
                    let n = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]])
                        as usize;
                    if self.buf.len() >= 4 + n {
                        let frame: Vec<u8> = self.buf.drain(..4 + n).skip(4).collect();
                        return Some(frame);
                    }
                }
                if self.ended {
                    assert!(self.buf.is_empty(), "a truncated frame at the end");
                    return None;
                }
                self.read_more().await;
            }
        })
        .await
        .expect("no watch frame in time")
    }

    /// Whether the stream stays quiet (no event, not ended) for `d`.
    pub async fn quiet_for(&mut self, d: Duration) -> bool {
        tokio::time::timeout(d, self.next()).await.is_err()
    }
}

pub fn cm(ns: &str, name: &str, labels: Value) -> Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "data": {"k": name}
    })
}

pub fn ns(name: &str) -> Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// Keys of a JSON object, sorted.
pub fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    k.sort();
    k
}

/// Headers that differ per request or per server by nature, never compared.
const VARYING_HEADERS: [&str; 4] = [
    "date",
    "audit-id",
    "x-kubernetes-pf-flowschema-uid",
    "x-kubernetes-pf-prioritylevel-uid",
];

/// The response head agrees with the recorded `{name}.headers.txt` (spec 6.3/6.5): the status
/// code, the same header names (less those that vary per request), the same `content-type`,
/// `cache-control` and `x-content-type-options` values, and `content-length` present exactly
/// where the real server sent one (a full body, not a stream).
pub fn assert_head_matches(name: &str, status: StatusCode, headers: &HeaderMap) {
    assert_head_matches_text(
        name,
        &sample(&format!("{name}.headers.txt")),
        status,
        headers,
    );
}

/// [`assert_head_matches`] against a recorded head given as text (a fixture of the crate).
pub fn assert_head_matches_text(name: &str, text: &str, status: StatusCode, headers: &HeaderMap) {
    let mut lines = text.lines();
    let code: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("{name}: no status line"));
    assert_eq!(status.as_u16(), code, "{name}: status");
    let recorded: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_owned()))
        .filter(|(k, _)| !VARYING_HEADERS.contains(&k.as_str()))
        .collect();
    let mut ours: Vec<String> = headers
        .keys()
        .map(|k| k.as_str().to_owned())
        .filter(|k| !VARYING_HEADERS.contains(&k.as_str()))
        .collect();
    ours.sort();
    let mut theirs: Vec<String> = recorded.iter().map(|(k, _)| k.clone()).collect();
    theirs.sort();
    assert_eq!(ours, theirs, "{name}: header names");
    for (k, v) in &recorded {
        if matches!(
            k.as_str(),
            "content-type" | "cache-control" | "x-content-type-options"
        ) {
            assert_eq!(headers[k.as_str()], v.as_str(), "{name}: {k}");
        }
    }
}

/// The real `kubectl` with `kubeconfig`, its own cache and home under `dir`, a request timeout
/// and no stdin; run it with [`run`].
pub fn kubectl(
    dir: &std::path::Path,
    kubeconfig: &std::path::Path,
    args: &[&str],
) -> tokio::process::Command {
    let mut c = tokio::process::Command::new("kubectl");
    c.env("KUBECONFIG", kubeconfig)
        .env("HOME", dir)
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .arg("--request-timeout=20s")
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    c
}

/// Runs a [`kubectl`] command within a minute: success, stdout, stderr.
pub async fn run(c: &mut tokio::process::Command) -> (bool, String, String) {
    let out = tokio::time::timeout(Duration::from_secs(60), c.output())
        .await
        .expect("kubectl in time")
        .expect("kubectl runs (it is installed here and on CI)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
