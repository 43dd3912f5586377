//! The emulator side of end-to-end plugin tests: an emulator, a client for it, polling with a
//! deadline, and a bare HTTP GET for the ops endpoint.

use std::path::PathBuf;
use std::time::Duration;

use kwh_client::config::KubeconfigOptions;
use kwh_client::{Client, Config};
use kwh_emulator::{Emulator, EmulatorHandle};
use kwh_plugin::{Limits, PluginRuntime, RuntimeOptions};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub async fn emulator() -> EmulatorHandle {
    Emulator::builder().start().await.expect("emulator starts")
}

pub fn client(em: &EmulatorHandle) -> Client {
    let cfg = Config::from_kubeconfig_str(
        &em.kubeconfig(),
        &std::env::temp_dir(),
        &KubeconfigOptions::default(),
    )
    .expect("kubeconfig");
    Client::new(cfg).expect("client")
}

/// A runtime on `em` with the given options (limits and fail-fast are the common knobs).
pub fn runtime_with(em: &EmulatorHandle, opts: RuntimeOptions) -> PluginRuntime {
    PluginRuntime::new(super::engine(), client(em), opts)
}

pub fn runtime(em: &EmulatorHandle, limits: Limits, fail_fast: bool) -> PluginRuntime {
    runtime_with(
        em,
        RuntimeOptions {
            limits,
            fail_fast,
            ..RuntimeOptions::default()
        },
    )
}

/// Starts the named test guests on `rt` and waits until its informers have synced.
pub async fn start(rt: &mut PluginRuntime, names: &[&str]) {
    let paths: Vec<PathBuf> = names.iter().map(|n| super::guests::guest(n)).collect();
    start_paths(rt, &paths).await;
}

/// A runtime on `em` that stops at the first plugin failing to load, running the components at
/// `paths` with their informers synced (what the examples' end-to-end tests start from).
pub async fn running(em: &EmulatorHandle, paths: &[PathBuf]) -> PluginRuntime {
    let mut rt = runtime_with(
        em,
        RuntimeOptions {
            fail_fast: true,
            ..RuntimeOptions::default()
        },
    );
    start_paths(&mut rt, paths).await;
    rt
}

/// Starts the components at `paths` on `rt` (the first run compiles them, hence the long bound)
/// and waits until its informers have synced.
pub async fn start_paths(rt: &mut PluginRuntime, paths: &[PathBuf]) {
    let failed = tokio::time::timeout(Duration::from_secs(120), rt.start_all(paths))
        .await
        .expect("in time")
        .expect("not fail-fast");
    assert!(failed.is_empty(), "{failed:?}");
    assert!(
        eventually(Duration::from_secs(20), || rt.is_ready()).await,
        "informers sync"
    );
}

/// Polls `cond` every 10 ms until it holds; false if `within` passes first.
pub async fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    tokio::time::timeout(within, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .is_ok()
}

pub fn cm(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"}, "data": data})
}

pub fn get_cm(em: &EmulatorHandle, name: &str) -> Option<Value> {
    em.get("v1", "ConfigMap", Some("default"), name)
}

/// A minimal HTTP/1.1 GET over loopback: status code and body.
pub async fn http_get(addr: &str, path: &str) -> (u16, String) {
    let (code, _, body) = http_get_with_head(addr, path).await;
    (code, body)
}

/// [`http_get`] that also returns the response head (status line and headers, as received).
pub async fn http_get_with_head(addr: &str, path: &str) -> (u16, String, String) {
    try_http_get_with_head(addr, path)
        .await
        .unwrap_or_else(|e| panic!("GET {path} from {addr}: {e}"))
}

/// [`http_get`] that returns a failure to connect, write or read instead of panicking: for a
/// server that may be gone (a process killed meanwhile).
pub async fn try_http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let (code, _, body) = try_http_get_with_head(addr, path).await?;
    Ok((code, body))
}

async fn try_http_get_with_head(addr: &str, path: &str) -> std::io::Result<(u16, String, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await?;
    let code = buf
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (head, body) = buf.split_once("\r\n\r\n").unwrap_or((buf.as_str(), ""));
    Ok((code, head.to_string(), body.to_string()))
}

/// GETs `path` every 20 ms until `pred(code, body)` holds, within `within`; the last answer,
/// or `None` when the time passed first.
pub async fn get_until(
    addr: &str,
    path: &str,
    within: Duration,
    mut pred: impl FnMut(u16, &str) -> bool,
) -> Option<(u16, String)> {
    tokio::time::timeout(within, async {
        loop {
            let (code, body) = http_get(addr, path).await;
            if pred(code, &body) {
                return (code, body);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .ok()
}

/// The CustomResourceDefinition of the `Widget` kind (`example.com/v1`) the `badkind` guest
/// watches: a kind no server serves until it is created.
pub fn widget_crd() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}
    })
}

/// Runtime options whose plugins log every line (no log budget): for tests that read what the
/// guests print.
pub fn every_line() -> RuntimeOptions {
    RuntimeOptions {
        limits: Limits {
            log_lines_per_second: 0,
            ..Limits::default()
        },
        ..RuntimeOptions::default()
    }
}

/// `opts` with a plugin waiting for its kinds retried within 50-400 ms and discovery asked
/// again after 50 ms, so that a test does not sit out the production backoff (0.8 s doubling
/// to 30 s) and the 5 s refresh floor.
pub fn quick_retries(opts: RuntimeOptions) -> RuntimeOptions {
    RuntimeOptions {
        start_retry: kwh_informer::backoff::Backoff::new(
            Duration::from_millis(50),
            Duration::from_millis(400),
            2.0,
            0.0,
            Duration::from_secs(120),
        ),
        discovery_refresh: Duration::from_millis(50),
        ..opts
    }
}
