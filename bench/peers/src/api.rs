//! The driver's own requests to the API server (seeding, patches, namespaces), through kube's
//! client so that any kubeconfig works: the emulator's plain HTTP or a real cluster's TLS and
//! credentials. The driver's CPU is not measured, so its client need not be the cheapest.

use std::path::Path;

use anyhow::{bail, Context};
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use kube::client::Body;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::Value;

use crate::objects::Kind;

pub async fn connect(kubeconfig: &Path) -> anyhow::Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading kubeconfig {}", kubeconfig.display()))?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("kubeconfig {}", kubeconfig.display()))?;
    Ok(Client::try_from(config)?)
}

/// One request; the status and the whole body, whatever the status.
pub async fn send(
    client: &Client,
    method: Method,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> anyhow::Result<(StatusCode, Bytes)> {
    let req = Request::builder()
        .method(method.clone())
        .uri(path)
        .header("content-type", content_type)
        .header("accept", "application/json")
        .body(Body::from(body))?;
    let res = client
        .send(req)
        .await
        .with_context(|| format!("{method} {path}"))?;
    let status = res.status();
    let body = res
        .into_body()
        .collect()
        .await
        .with_context(|| format!("{method} {path}: reading the answer"))?
        .to_bytes();
    Ok((status, body))
}

/// Like [`send`], but a status outside 2xx is an error naming the request and the server's
/// message.
pub async fn call(
    client: &Client,
    method: Method,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> anyhow::Result<Bytes> {
    let (status, bytes) = send(client, method.clone(), path, content_type, body).await?;
    if !status.is_success() {
        bail!("{method} {path}: {status}: {}", message(&bytes));
    }
    Ok(bytes)
}

/// The `message` of a Status body, else the body's start.
pub fn message(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned())
}

/// Creates namespace `ns`; one that exists already is fine.
pub async fn create_namespace(client: &Client, ns: &str) -> anyhow::Result<()> {
    let body =
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    let (status, bytes) = send(
        client,
        Method::POST,
        "/api/v1/namespaces",
        "application/json",
        body.to_string().into_bytes(),
    )
    .await?;
    if !status.is_success() && status != StatusCode::CONFLICT {
        bail!("creating namespace {ns}: {status}: {}", message(&bytes));
    }
    Ok(())
}

pub async fn delete_namespace(client: &Client, ns: &str) -> anyhow::Result<()> {
    let (status, bytes) = send(
        client,
        Method::DELETE,
        &format!("/api/v1/namespaces/{ns}"),
        "application/json",
        Vec::new(),
    )
    .await?;
    if !status.is_success() && status != StatusCode::NOT_FOUND {
        bail!("deleting namespace {ns}: {status}: {}", message(&bytes));
    }
    Ok(())
}

/// Names of the objects of `kind` in `ns` (all namespaces: `None`), as `(namespace, name)`.
pub async fn list_names(
    client: &Client,
    kind: Kind,
    ns: Option<&str>,
) -> anyhow::Result<Vec<(String, String)>> {
    let base = match ns {
        Some(ns) => kind.collection(ns),
        None => format!("/api/v1/{}", kind.plural()),
    };
    let mut names = Vec::new();
    let mut cont = String::new();
    loop {
        let path = if cont.is_empty() {
            format!("{base}?limit=500")
        } else {
            format!("{base}?limit=500&continue={}", query_escape(&cont))
        };
        let body = call(client, Method::GET, &path, "application/json", Vec::new()).await?;
        let list: Value =
            serde_json::from_slice(&body).with_context(|| format!("GET {path}: not JSON"))?;
        let Some(items) = list["items"].as_array() else {
            bail!("GET {path}: no items in the answer");
        };
        for item in items {
            let meta = &item["metadata"];
            match (meta["namespace"].as_str(), meta["name"].as_str()) {
                (Some(ns), Some(name)) => names.push((ns.to_owned(), name.to_owned())),
                _ => bail!("GET {path}: an item without namespace or name"),
            }
        }
        match list["metadata"]["continue"].as_str() {
            Some(c) if !c.is_empty() => cont = c.to_owned(),
            _ => return Ok(names),
        }
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters (continue tokens are base64).
fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
