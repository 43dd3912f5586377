//! The config-reloader example end to end: the real plugin runtime against the emulator over
//! HTTP. A Deployment that opts in and references a ConfigMap and a Secret gets its baseline
//! recorded, then rolls (a new pod-template hash annotation) on every change of either; an
//! unreferenced Deployment and one that did not opt in are left alone.

mod support;

use std::time::Duration;

use host::emulator::{Emulator, EmulatorHandle};
use host::kube::config::KubeconfigOptions;
use host::kube::{Client, Config};
use host::plugin::{Limits, PluginRuntime, RuntimeOptions};
use serde_json::{json, Value};
use support::guests::example;

const T: Duration = Duration::from_secs(120);
const WAIT: Duration = Duration::from_secs(20);

const ENABLED: &str = "config-reloader/enabled";
const CONFIG_HASH: &str = "config-reloader/config-hash";
const OBSERVED_HASH: &str = "config-reloader/observed-hash";

fn client(em: &EmulatorHandle) -> Client {
    let cfg = Config::from_kubeconfig_str(
        &em.kubeconfig(),
        &std::env::temp_dir(),
        &KubeconfigOptions::default(),
    )
    .expect("kubeconfig");
    Client::new(cfg).expect("client")
}

/// Polls `cond` every 10 ms until it holds; false if `within` passes first.
async fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    tokio::time::timeout(within, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .is_ok()
}

/// A Deployment mounting `configmap`; its container reads `app-secret` when `secret` is set.
fn deployment(name: &str, opt_in: bool, configmap: &str, secret: bool) -> Value {
    let annotations = if opt_in {
        json!({ENABLED: "true"})
    } else {
        json!({})
    };
    let env = if secret {
        json!([{"name": "PASSWORD", "valueFrom":
            {"secretKeyRef": {"name": "app-secret", "key": "password"}}}])
    } else {
        json!([])
    };
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "volumes": [{"name": "config", "configMap": {"name": configmap}}],
                    "containers": [{
                        "name": "app", "image": "example.com/app:1",
                        "env": env
                    }]
                }
            }
        }
    })
}

fn get_deploy(em: &EmulatorHandle, name: &str) -> Value {
    em.get("apps/v1", "Deployment", Some("default"), name)
        .expect("deployment exists")
}

fn template_hash(d: &Value) -> Option<String> {
    d["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH]
        .as_str()
        .map(str::to_string)
}

fn observed_hash(d: &Value) -> Option<String> {
    d["metadata"]["annotations"][OBSERVED_HASH]
        .as_str()
        .map(str::to_string)
}

/// Changes `data[key]` of a ConfigMap or Secret.
fn set_data(em: &EmulatorHandle, kind: &str, name: &str, key: &str, value: &str) {
    let mut o = em
        .get("v1", kind, Some("default"), name)
        .expect("object exists");
    o["data"][key] = value.into();
    em.update(o).expect("update");
}

#[tokio::test]
async fn referenced_config_changes_roll_opted_in_deployments_only() {
    let em = Emulator::builder().start().await.expect("emulator starts");
    em.create(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "app-config", "namespace": "default"}, "data": {"level": "info"}}))
        .expect("configmap");
    em.create(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "other-config", "namespace": "default"}, "data": {"x": "1"}}))
        .expect("configmap");
    em.create(
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "app-secret", "namespace": "default"},
        "data": {"password": "czNjcjN0"}}),
    )
    .expect("secret");

    let mut rt = PluginRuntime::new(
        support::engine(),
        client(&em),
        RuntimeOptions {
            limits: Limits::default(),
            namespace: None,
            fail_fast: true,
        },
    );
    tokio::time::timeout(T, rt.start(&example("config-reloader")))
        .await
        .expect("in time")
        .expect("config-reloader starts");
    assert!(eventually(WAIT, || rt.is_ready()).await, "informers sync");

    em.create(deployment("web", true, "app-config", true))
        .expect("web");
    em.create(deployment("unrelated", true, "other-config", false))
        .expect("unrelated");
    em.create(deployment("opted-out", false, "app-config", true))
        .expect("opted-out");
    let opted_out_rv = get_deploy(&em, "opted-out")["metadata"]["resourceVersion"].clone();

    // First sight: the baseline is recorded on the Deployment, the template is not touched.
    assert!(
        eventually(WAIT, || observed_hash(&get_deploy(&em, "web")).is_some()).await,
        "web's baseline is recorded"
    );
    assert!(
        eventually(WAIT, || observed_hash(&get_deploy(&em, "unrelated"))
            .is_some())
        .await
    );
    let baseline = observed_hash(&get_deploy(&em, "web")).expect("baseline");
    assert_eq!(
        template_hash(&get_deploy(&em, "web")),
        None,
        "no rollout on first sight"
    );

    // The ConfigMap changes: the template gets the new hash, and the Deployment rolls.
    set_data(&em, "ConfigMap", "app-config", "level", "debug");
    assert!(
        eventually(WAIT, || template_hash(&get_deploy(&em, "web")).is_some()).await,
        "a ConfigMap change rolls web"
    );
    let first = template_hash(&get_deploy(&em, "web")).expect("hash");
    assert_ne!(first, baseline);
    assert_eq!(
        observed_hash(&get_deploy(&em, "web")).as_ref(),
        Some(&first)
    );

    // Another change, then a Secret change: the hash follows each.
    set_data(&em, "ConfigMap", "app-config", "level", "warn");
    assert!(
        eventually(WAIT, || template_hash(&get_deploy(&em, "web"))
            .is_some_and(|h| h != first))
        .await,
        "a second ConfigMap change rolls web again"
    );
    let second = template_hash(&get_deploy(&em, "web")).expect("hash");
    set_data(&em, "Secret", "app-secret", "password", "bmV3LXMzY3IzdA==");
    assert!(
        eventually(WAIT, || template_hash(&get_deploy(&em, "web"))
            .is_some_and(|h| h != first && h != second))
        .await,
        "a Secret change rolls web"
    );

    // Draining the queue finishes every reconcile the changes above enqueued (the opted-out and
    // unrelated Deployments' keys were enqueued by the same handler calls as web's).
    assert!(
        tokio::time::timeout(T, rt.shutdown(Duration::from_secs(10)))
            .await
            .expect("in time")
    );
    let unrelated = get_deploy(&em, "unrelated");
    assert_eq!(
        template_hash(&unrelated),
        None,
        "neither other-config nor anything else it uses changed"
    );
    let opted_out = get_deploy(&em, "opted-out");
    assert_eq!(
        opted_out["metadata"]["resourceVersion"], opted_out_rv,
        "a Deployment without the opt-in annotation is never written: {opted_out}"
    );
}
