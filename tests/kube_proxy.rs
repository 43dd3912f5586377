//! The client through an HTTP proxy, as kubectl goes through one: the kubeconfig's `proxy-url`
//! with an `https://` emulator (a `CONNECT` tunnel, TLS and h2 inside it, Basic credentials on
//! the `CONNECT`) and with a plain `http://` emulator (absolute-form requests carrying
//! `Proxy-Authorization`); a watch event arrives through the tunnel; a proxy that refuses the
//! tunnel is a clear error; the real `kubectl` with the same kubeconfig takes the same route.
//! The proxy is a small one in this file, on loopback.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use parking_lot::Mutex;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use kwh_client::config::{Config, KubeconfigOptions};
use kwh_client::params::{ListParams, WatchParams};
use kwh_client::resource::ApiResource;
use kwh_client::watch::WatchEvent;
use kwh_client::{Client, Error};
use kwh_emulator::{Emulator, EmulatorHandle};

const T: Duration = Duration::from_secs(30);

/// What the proxy was asked: each request's first line and its `Proxy-Authorization`.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A minimal forward proxy: `CONNECT host:port` opens a tunnel (or is refused with 403 when
/// `refuse` is set); any other request must be in absolute form and is forwarded, head and all,
/// to the host it names, after which bytes are copied both ways.
async fn proxy(refuse: bool) -> (String, Seen) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr").to_string();
    let seen: Seen = Arc::default();
    let s = seen.clone();
    tokio::spawn(async move {
        while let Ok((c, _)) = l.accept().await {
            tokio::spawn(serve(c, s.clone(), refuse));
        }
    });
    (addr, seen)
}

async fn serve(mut c: TcpStream, seen: Seen, refuse: bool) {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        match c.read_u8().await {
            Ok(b) => head.push(b),
            Err(_) => return,
        }
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let first = text.lines().next().unwrap_or_default().to_string();
    // Header names are case-insensitive (hyper sends them in lower case).
    let auth = text.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("proxy-authorization")
            .then(|| value.trim().to_string())
    });
    seen.lock().push((first.clone(), auth));
    let mut parts = first.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let upstream = if method == "CONNECT" {
        if refuse {
            let _ = c
                .write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                .await;
            return;
        }
        let Ok(u) = TcpStream::connect(target).await else {
            return;
        };
        if c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .is_err()
        {
            return;
        }
        u
    } else {
        let Some(authority) = target
            .strip_prefix("http://")
            .and_then(|r| r.split('/').next())
        else {
            let _ = c.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
            return;
        };
        let Ok(mut u) = TcpStream::connect(authority).await else {
            return;
        };
        if u.write_all(&head).await.is_err() {
            return;
        }
        u
    };
    let mut u = upstream;
    let _ = tokio::io::copy_bidirectional(&mut c, &mut u).await;
}

/// The emulator's kubeconfig with `proxy-url` added to its cluster.
fn kubeconfig_via(em: &EmulatorHandle, proxy_url: &str) -> String {
    let kc = em.kubeconfig();
    let server_line = format!("    server: {}\n", em.base_url());
    assert!(kc.contains(&server_line), "{kc}");
    kc.replace(
        &server_line,
        &format!("{server_line}    proxy-url: {proxy_url}\n"),
    )
}

fn client(kubeconfig: &str) -> Result<Client, Error> {
    let cfg = Config::from_kubeconfig_str(
        kubeconfig,
        &std::env::temp_dir(),
        &KubeconfigOptions::default(),
    )?;
    Client::new(cfg)
}

fn cms() -> ApiResource {
    ApiResource::new("v1", "ConfigMap", "configmaps", true)
}

/// An HTTPS emulator (self-signed: its kubeconfig skips verification), with a bearer token when
/// given one (kubectl asks for credentials when a kubeconfig user has none).
async fn tls_emulator(token: Option<&str>) -> EmulatorHandle {
    Emulator::builder()
        .tls(true)
        .token(token.map(str::to_owned))
        .start()
        .await
        .expect("emulator")
}

fn cm(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"}, "data": {"k": "v"}})
}

#[tokio::test]
async fn https_goes_through_a_connect_tunnel_with_basic_credentials_and_watches_stream() {
    tokio::time::timeout(T, async {
        let em = tls_emulator(None).await;
        em.create(cm("before")).expect("seed");
        let (addr, seen) = proxy(false).await;
        let c =
            client(&kubeconfig_via(&em, &format!("http://ops:s%3Acret@{addr}"))).expect("client");

        let list = c
            .list(&cms(), Some("default"), &ListParams::default())
            .await
            .expect("list through the tunnel");
        assert_eq!(list.items.len(), 1);
        let rv = list.resource_version.clone();
        let mut w = c
            .watch(&cms(), Some("default"), &WatchParams::default().at(rv))
            .await
            .expect("watch through the tunnel");
        em.create(cm("after")).expect("create");
        loop {
            match w.next().await {
                Some(Ok(WatchEvent::Added(o))) => {
                    assert_eq!(o.name(), "after");
                    break;
                }
                Some(Ok(WatchEvent::Bookmark { .. })) => continue,
                other => panic!("expected the ADDED event, got {other:?}"),
            }
        }

        let host_port = em.base_url().trim_start_matches("https://").to_string();
        let seen = seen.lock().clone();
        assert!(!seen.is_empty());
        for (line, auth) in &seen {
            // Every connection is a tunnel to the server (TLS inside it, so the proxy sees no
            // request path), authenticated as ops:s:cret.
            assert_eq!(line, &format!("CONNECT {host_port} HTTP/1.1"));
            assert_eq!(auth.as_deref(), Some("Basic b3BzOnM6Y3JldA=="));
        }
    })
    .await
    .expect("in time");
}

#[tokio::test]
async fn plain_http_sends_absolute_form_requests_to_the_proxy() {
    tokio::time::timeout(T, async {
        let em = Emulator::builder().start().await.expect("emulator");
        em.create(cm("one")).expect("seed");
        let (addr, seen) = proxy(false).await;
        let c = client(&kubeconfig_via(&em, &format!("http://u:p@{addr}"))).expect("client");
        let list = c
            .list(&cms(), Some("default"), &ListParams::default())
            .await
            .expect("list through the proxy");
        assert_eq!(list.items.len(), 1);
        let seen = seen.lock().clone();
        let want = format!(
            "GET {}/api/v1/namespaces/default/configmaps HTTP/1.1",
            em.base_url()
        );
        assert_eq!(
            seen.first().map(|s| s.0.as_str()),
            Some(want.as_str()),
            "{seen:?}"
        );
        assert_eq!(seen[0].1.as_deref(), Some("Basic dTpw"));
    })
    .await
    .expect("in time");
}

#[tokio::test]
async fn a_refused_tunnel_and_a_bad_proxy_url_are_clear_errors() {
    tokio::time::timeout(T, async {
        let em = tls_emulator(None).await;
        let (addr, _) = proxy(true).await;
        let c = client(&kubeconfig_via(&em, &format!("http://{addr}"))).expect("client");
        let e = c
            .list(&cms(), Some("default"), &ListParams::default())
            .await
            .expect_err("the proxy refuses");
        let msg = format!("{e:#}");
        assert!(msg.contains("proxy refused CONNECT"), "{msg}");
        assert!(msg.contains("403 Forbidden"), "{msg}");

        // Other schemes are refused when the kubeconfig is read, naming the cluster, rather
        // than silently connecting directly.
        let e = client(&kubeconfig_via(&em, "socks5://127.0.0.1:1080"))
            .expect_err("socks5 is not supported");
        let msg = e.to_string();
        assert!(msg.contains("cluster \"emulator\": proxy-url"), "{msg}");
        assert!(msg.contains("\"socks5\" is not supported"), "{msg}");
        assert_eq!(msg.matches("configuration error").count(), 1, "{msg}");
    })
    .await
    .expect("in time");
}

/// kubectl reads the same kubeconfig and goes through the same proxy: the host does what the
/// operator's own tool does.
#[tokio::test]
#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
async fn kubectl_takes_the_same_route() {
    tokio::time::timeout(T, async {
        let em = tls_emulator(Some("proxy-test-token")).await;
        em.create(cm("seen-by-kubectl")).expect("seed");
        let (addr, seen) = proxy(false).await;
        let dir = std::env::temp_dir().join(format!("kube-proxy-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("kubeconfig");
        std::fs::write(&path, kubeconfig_via(&em, &format!("http://{addr}"))).expect("write");
        let out = tokio::process::Command::new("kubectl")
            .args(["get", "configmaps", "-o", "name"])
            .env("KUBECONFIG", &path)
            .env("HOME", &dir)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .expect("kubectl runs");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "configmap/seen-by-kubectl"
        );
        let host_port = em.base_url().trim_start_matches("https://").to_string();
        let seen = seen.lock().clone();
        assert!(
            seen.iter()
                .any(|(l, _)| l == &format!("CONNECT {host_port} HTTP/1.1")),
            "{seen:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("in time");
}
