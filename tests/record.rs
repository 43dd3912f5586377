//! `host record` against a cluster (the emulator over HTTP): what the config-reloader's
//! manifest watches is written as a scenario file (objects first, then each watch event with
//! the time between, Secret values redacted), which `host test` replays and which replays to
//! the same writes every time.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::cluster::emulator;
use support::guests::example;
use support::process::HostProcess;

const WAIT: Duration = Duration::from_secs(60);

fn deployment() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default",
            "annotations": {"config-reloader/enabled": "true"}},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "example.com/app:1",
                "envFrom": [{"configMapRef": {"name": "app-config"}}, {"secretRef": {"name": "app-secret"}}]}]}}}})
}

/// Spec: record, then replay; a Secret's value never reaches the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_trace_replays_under_host_test_and_to_the_same_writes_every_time() {
    let em = emulator().await;
    em.create(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "app-config", "namespace": "default"}, "data": {"level": "info"}}))
        .expect("created");
    em.create(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "app-secret", "namespace": "default"},
        "stringData": {"password": "hunter2"}}))
        .expect("created");
    let dir = support::temp_dir("record");
    let kubeconfig = dir.join("kubeconfig");
    em.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let trace = dir.join("trace.yaml");
    let plugin = example("config_reloader");
    let mut rec = HostProcess::spawn(
        [
            "record".as_ref(),
            "--kubeconfig".as_ref(),
            kubeconfig.as_os_str(),
            "--plugin".as_ref(),
            plugin.as_os_str(),
            "-o".as_ref(),
            trace.as_os_str(),
            "--events".as_ref(),
            "3".as_ref(),
        ],
        "info",
    );
    rec.line("recording").await;
    // Changes through the emulator's own handle: the watches see them as any write.
    em.create(deployment()).expect("created");
    let mut cm = em
        .get("v1", "ConfigMap", Some("default"), "app-config")
        .expect("exists");
    cm["data"]["level"] = "debug".into();
    em.update(cm).expect("updated");
    em.delete("v1", "Secret", Some("default"), "app-secret")
        .expect("deleted");
    let status = rec.exit(WAIT).await;
    assert!(status.success(), "{}", rec.log());
    assert!(
        rec.log().contains("recorded 2 objects and 3 events"),
        "{}",
        rec.log()
    );
    let text = std::fs::read_to_string(&trace).expect("trace");
    assert!(
        !text.contains("hunter2") && !text.contains("aHVudGVyMg=="),
        "{text}"
    );
    let v: Value = yaml_serde::from_str(&text).expect("YAML");
    let given: Vec<&str> = v["given"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    assert_eq!(given, ["app-config", "app-secret"]);
    let actions: Vec<&str> = v["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| {
            s.as_object()
                .and_then(|o| o.keys().next())
                .map(String::as_str)
        })
        .filter(|a| *a != "advance" && *a != "runQueue")
        .collect();
    assert_eq!(actions, ["add", "update", "delete"], "{text}");
    assert_eq!(v["steps"][0]["add"]["metadata"]["name"], "web");
    assert!(
        v["steps"][0]["add"]["metadata"].get("uid").is_none(),
        "server-set fields left out"
    );

    // Replayed by `host test`, and, in process, to the same writes twice.
    let mut replay = HostProcess::spawn(
        [
            "test".as_ref(),
            "--plugin".as_ref(),
            plugin.as_os_str(),
            trace.as_os_str(),
        ],
        "warn",
    );
    let status = replay.exit(WAIT).await;
    assert!(status.success(), "{}", replay.log());
    let scenario = kwh_testing::scenario::parse(&trace, &text).expect("parses");
    let engine = support::engine();
    let (first, a) = kwh_testing::scenario::run_traced(&scenario, &plugin, &engine).await;
    let (second, b) = kwh_testing::scenario::run_traced(&scenario, &plugin, &engine).await;
    assert!(first.passed() && second.passed());
    // What the guest asked for, in order (the answers carry uids the fake cluster draws).
    let asked = |t: &kwh_testing::scenario::Trace| -> Vec<String> {
        t.writes
            .iter()
            .map(|w| format!("{:?} {} {}", w.verb, w.name, w.body))
            .collect()
    };
    assert!(!a.writes.is_empty(), "the reloader wrote its baseline");
    assert_eq!(asked(&a), asked(&b));
    let _ = std::fs::remove_dir_all(dir);
    em.shutdown().await;
}
