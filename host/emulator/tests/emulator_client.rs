//! The host's own API client against the emulator, over TLS with a token, using the kubeconfig
//! the emulator writes: discovery, paginated LIST, WATCH from a list RV, error classification,
//! and the in-stream 410.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use kwh_client::client::{Client, WriteParams};
use kwh_client::config::{Config, KubeconfigOptions};
use kwh_client::discovery::Discovery;
use kwh_client::params::{ListParams, WatchParams};
use kwh_client::watch::WatchEvent;
use kwh_emulator::Emulator;
use serde_json::json;

const STEP: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_client_lists_watches_and_classifies_errors() {
    let h = Emulator::builder()
        .tls(true)
        .token(Some("t0k".into()))
        .start()
        .await
        .unwrap();
    let dir = std::env::temp_dir();
    let cfg =
        Config::from_kubeconfig_str(&h.kubeconfig(), &dir, &KubeconfigOptions::default()).unwrap();
    let client = Client::new(cfg).unwrap();
    let cm = Discovery::new(client.clone())
        .resolve("v1", "ConfigMap")
        .await
        .unwrap();
    assert!(cm.namespaced);
    for i in 0..5 {
        h.create(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{i}"), "namespace": "default"}}))
            .unwrap();
    }
    // Paginated list: one consistent snapshot.
    let mut names = Vec::new();
    let mut params = ListParams::default().limit(2);
    let mut rv = None;
    loop {
        let page = tokio::time::timeout(STEP, client.list(&cm, Some("default"), &params))
            .await
            .unwrap()
            .unwrap();
        names.extend(page.items.iter().map(|o| o.name().to_owned()));
        assert_eq!(
            *rv.get_or_insert(page.resource_version.clone()),
            page.resource_version
        );
        match page.continue_token {
            Some(t) => params = ListParams::default().limit(2).continue_from(t),
            None => break,
        }
    }
    assert_eq!(names, ["c0", "c1", "c2", "c3", "c4"]);
    // Watch from the list's RV sees only what follows.
    let wp = WatchParams {
        resource_version: rv.clone(),
        allow_watch_bookmarks: true,
        timeout_seconds: Some(30),
        ..Default::default()
    };
    let mut stream = tokio::time::timeout(STEP, client.watch(&cm, Some("default"), &wp))
        .await
        .unwrap()
        .unwrap();
    let body = Bytes::from(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "new"}}).to_string(),
    );
    client
        .create(&cm, Some("default"), body.clone(), &WriteParams::default())
        .await
        .unwrap();
    match tokio::time::timeout(STEP, stream.next()).await.unwrap() {
        Some(Ok(WatchEvent::Added(o))) => assert_eq!(o.name(), "new"),
        other => panic!("expected ADDED, got {other:?}"),
    }
    // Errors carry the API's code and reason.
    let e = client
        .create(&cm, Some("default"), body, &WriteParams::default())
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.status().map(|s| s.reason.as_str())),
        (Some(409), Some("AlreadyExists"))
    );
    let e = client
        .get(&cm, Some("default"), "missing")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(404));
    // A watch from an RV the watch cache no longer holds gets the in-stream 410.
    h.faults().expire_watch_history();
    let old = WatchParams {
        resource_version: rv,
        ..Default::default()
    };
    let mut stream = tokio::time::timeout(STEP, client.watch(&cm, Some("default"), &old))
        .await
        .unwrap()
        .unwrap();
    match tokio::time::timeout(STEP, stream.next()).await.unwrap() {
        Some(Ok(WatchEvent::Error(s))) => assert!(s.is_expired(), "{s:?}"),
        Some(Err(e)) => assert!(e.is_expired(), "{e:?}"),
        other => panic!("expected a 410, got {other:?}"),
    }
    h.shutdown().await;
}
