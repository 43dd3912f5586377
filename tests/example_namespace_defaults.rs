//! The namespace-defaults example (examples/namespace-defaults):
//! - end to end, in the real plugin runtime against the emulator over HTTP, seeded with the
//!   example's own `crd.yaml` and `example.yaml`: selected namespaces get the defaults (also ones
//!   created later), a changed spec updates them, a terminating namespace is left alone, a
//!   namespace that stops matching is pruned, drift is repaired, and deleting the owner cleans
//!   up through its finalizer;
//! - unit tests through the guest harness (`kwh_testing`): the exact writes of a first
//!   reconcile, none in the steady state, namespace events, finalization, a bad spec;
//! - the example's scenario files, run by `host test`.

mod support;

use std::time::Duration;

use kwh_emulator::EmulatorHandle;
use kwh_plugin::PluginRuntime;
use kwh_testing::{Harness, ReconcileOutcome, WriteVerb};
use serde_json::{json, Value};
use support::cluster::{emulator, eventually, running};
use support::guests::example;

const LOAD: Duration = Duration::from_secs(120);
const WAIT: Duration = Duration::from_secs(20);

const API: &str = "defaults.kube-wasm.dev/v1alpha1";
const KIND: &str = "NamespaceDefaults";
const FINALIZER: &str = "defaults.kube-wasm.dev/cleanup";

fn example_file(name: &str) -> String {
    let path = format!(
        "{}/../examples/namespace-defaults/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

/// The emulator with the CRD and the example applied, and the plugin running against it.
async fn setup() -> (EmulatorHandle, PluginRuntime) {
    let em = emulator().await;
    em.seed_yaml(&example_file("crd.yaml"))
        .expect("the CRD is accepted");
    em.seed_yaml(&example_file("example.yaml"))
        .expect("the example is accepted");
    em.create(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "unselected"}}))
        .expect("namespace");
    let rt = running(&em, &[example("namespace-defaults")]).await;
    (em, rt)
}

fn owner(em: &EmulatorHandle) -> Option<Value> {
    em.get(API, KIND, None, "team-defaults")
}

fn settings(em: &EmulatorHandle, ns: &str) -> Option<Value> {
    em.get("v1", "ConfigMap", Some(ns), "team-settings")
}

fn quota(em: &EmulatorHandle, ns: &str) -> Option<Value> {
    em.get("v1", "ResourceQuota", Some(ns), "team-quota")
}

/// `status.managed` as `Kind ns/name` strings.
fn managed(em: &EmulatorHandle) -> Vec<String> {
    owner(em)
        .and_then(|o| o["status"]["managed"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|m| format!("{} {}/{}", m["kind"], m["namespace"], m["name"]).replace('"', ""))
        .collect()
}

fn ready(em: &EmulatorHandle) -> Option<(String, i64)> {
    let o = owner(em)?;
    let c = o["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?
        .clone();
    Some((
        c["status"].as_str()?.to_owned(),
        c["observedGeneration"].as_i64()?,
    ))
}

fn namespace(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": labels}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defaults_follow_namespaces_and_spec_and_the_finalizer_cleans_up() {
    let (em, rt) = setup().await;
    the_example_namespace_gets_owned_defaults(&em).await;
    a_later_namespace_and_a_spec_change_are_followed(&em).await;
    a_terminating_namespace_is_left_alone(&em).await;
    drift_is_repaired_and_an_unmatched_namespace_is_pruned(&em).await;
    the_finalizer_cleans_up(&em).await;
    assert!(rt.shutdown(Duration::from_secs(5)).await);
    em.shutdown().await;
}

/// The end-to-end test's first step, split out to keep it short: team-a gets its defaults.
async fn the_example_namespace_gets_owned_defaults(em: &EmulatorHandle) {
    // The example's namespace gets both objects, owned by the NamespaceDefaults.
    assert!(
        eventually(WAIT, || settings(em, "team-a").is_some()
            && quota(em, "team-a").is_some())
        .await,
        "team-a gets its defaults"
    );
    let o = owner(em).expect("owner");
    let uid = o["metadata"]["uid"].clone();
    assert!(o["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == FINALIZER)));
    let cm = settings(em, "team-a").expect("cm");
    assert_eq!(
        cm["data"],
        json!({"LOG_LEVEL": "info", "REGION": "eu-west-1"})
    );
    assert_eq!(cm["metadata"]["ownerReferences"][0]["uid"], uid);
    assert_eq!(cm["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(
        cm["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "namespace-defaults"
    );
    assert_eq!(
        quota(em, "team-a").expect("quota")["spec"]["hard"],
        json!({"pods": "20", "requests.cpu": "8", "requests.memory": "16Gi"})
    );
    assert!(settings(em, "unselected").is_none() && quota(em, "unselected").is_none());
    assert!(
        eventually(WAIT, || managed(em)
            == [
                "ConfigMap team-a/team-settings",
                "ResourceQuota team-a/team-quota"
            ]
            && ready(em) == Some(("True".into(), 1)))
        .await,
        "status lists what it manages: {:?}",
        owner(em).map(|o| o["status"].clone())
    );
}

/// The end-to-end test's second step, split out to keep it short: team-b and a new spec.
async fn a_later_namespace_and_a_spec_change_are_followed(em: &EmulatorHandle) {
    // A namespace created later gets its defaults.
    em.create(namespace("team-b", json!({"team": "b"})))
        .expect("namespace");
    assert!(
        eventually(WAIT, || settings(em, "team-b").is_some()
            && quota(em, "team-b").is_some())
        .await,
        "team-b, created later, gets its defaults"
    );
    assert!(eventually(WAIT, || managed(em).len() == 4).await);

    // A changed spec updates every managed object; a field dropped from the spec goes.
    let mut o = owner(em).expect("owner");
    o["spec"]["configMap"]["data"]["LOG_LEVEL"] = "debug".into();
    o["spec"]["resourceQuota"]["hard"] = json!({"pods": 30});
    em.update(o).expect("spec update");
    for ns in ["team-a", "team-b"] {
        assert!(
            eventually(WAIT, || settings(em, ns)
                .is_some_and(|c| c["data"]["LOG_LEVEL"] == "debug")
                && quota(em, ns)
                    .is_some_and(|q| q["spec"]["hard"] == json!({"pods": "30"})))
            .await,
            "{ns} follows the new spec: {:?}",
            quota(em, ns)
        );
    }
    assert!(
        eventually(WAIT, || ready(em) == Some(("True".into(), 2))).await,
        "the condition observes the new generation"
    );
}

/// The end-to-end test's third step, split out to keep it short: team-c terminates.
async fn a_terminating_namespace_is_left_alone(em: &EmulatorHandle) {
    // A terminating namespace is left to its end: no applies into it (they would be refused),
    // and it drops out of the status.
    em.create(namespace("team-c", json!({"team": "c"})))
        .expect("namespace");
    assert!(eventually(WAIT, || settings(em, "team-c").is_some()).await);
    assert!(eventually(WAIT, || managed(em).len() == 6).await);
    em.create(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "pinned", "namespace": "team-c",
            "finalizers": ["test.kube-wasm.dev/hold"]}}))
        .expect("pinned");
    em.delete("v1", "Namespace", None, "team-c")
        .expect("delete namespace");
    assert_eq!(
        em.get("v1", "Namespace", None, "team-c")
            .expect("terminating")["status"]["phase"],
        "Terminating"
    );
    assert!(
        eventually(WAIT, || managed(em).len() == 4
            && !managed(em).iter().any(|m| m.contains("team-c/"))
            && ready(em) == Some(("True".into(), 2)))
        .await,
        "the terminating namespace leaves the status, without apply failures: {:?}",
        owner(em).map(|o| o["status"].clone())
    );
    assert!(settings(em, "team-c").is_none() && quota(em, "team-c").is_none());
    let mut pinned = em
        .get("v1", "ConfigMap", Some("team-c"), "pinned")
        .expect("held by its finalizer");
    pinned["metadata"]["finalizers"] = json!([]);
    em.update(pinned).expect("release");
    assert!(em.get("v1", "Namespace", None, "team-c").is_none());
}

/// The end-to-end test's fourth step, split out to keep it short: drift and pruning.
async fn drift_is_repaired_and_an_unmatched_namespace_is_pruned(em: &EmulatorHandle) {
    // Drift is repaired: a managed object deleted by hand comes back.
    em.delete("v1", "ConfigMap", Some("team-b"), "team-settings")
        .expect("delete");
    assert!(
        eventually(WAIT, || settings(em, "team-b").is_some()).await,
        "the deleted ConfigMap is recreated"
    );

    // A namespace that stops matching loses its defaults.
    let mut a = em.get("v1", "Namespace", None, "team-a").expect("ns");
    a["metadata"]["labels"]
        .as_object_mut()
        .expect("labels")
        .remove("team");
    em.update(a).expect("relabel");
    assert!(
        eventually(WAIT, || settings(em, "team-a").is_none()
            && quota(em, "team-a").is_none())
        .await,
        "team-a no longer matches and is pruned"
    );
    assert!(
        eventually(WAIT, || managed(em)
            == [
                "ConfigMap team-b/team-settings",
                "ResourceQuota team-b/team-quota"
            ])
        .await
    );
}

/// The end-to-end test's last step, split out to keep it short: the owner is deleted.
async fn the_finalizer_cleans_up(em: &EmulatorHandle) {
    // Deleting the owner: a second finalizer (this test's) holds it after the controller is
    // done, which shows the cleanup came from the controller's finalizer, not the collector.
    let mut o = owner(em).expect("owner");
    o["metadata"]["finalizers"] = json!([FINALIZER, "test.kube-wasm.dev/hold"]);
    em.update(o).expect("hold");
    em.delete(API, KIND, None, "team-defaults").expect("delete");
    assert!(
        eventually(WAIT, || owner(em).is_some_and(|o| o["metadata"]
            ["finalizers"]
            == json!(["test.kube-wasm.dev/hold"])))
        .await,
        "the controller removes its finalizer: {:?}",
        owner(em).map(|o| o["metadata"].clone())
    );
    assert!(
        owner(em).is_some_and(|o| o["metadata"]["deletionTimestamp"].is_string()),
        "the owner is still there, held by the test's finalizer"
    );
    assert!(
        settings(em, "team-b").is_none() && quota(em, "team-b").is_none(),
        "the finalizer deleted the managed objects before letting go"
    );
    let mut o = owner(em).expect("owner");
    o["metadata"]["finalizers"] = json!([]);
    em.update(o).expect("release");
    assert!(owner(em).is_none());
}

// ---- unit tests through the harness --------------------------------------------------------

fn owner_json(hard: Value) -> Value {
    json!({"apiVersion": API, "kind": KIND, "metadata": {"name": "team-defaults"},
        "spec": {"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]},
            "configMap": {"name": "team-settings", "data": {"LOG_LEVEL": "info"}},
            "resourceQuota": {"name": "team-quota", "hard": hard}}})
}

/// A harness with the CRD, a selected and an unselected namespace.
async fn harness() -> Harness {
    tokio::time::timeout(
        LOAD,
        Harness::builder(example("namespace-defaults"))
            .engine(support::engine())
            .seed_yaml(example_file("crd.yaml"))
            .seed(namespace("team-a", json!({"team": "a"})))
            .seed(namespace("unselected", json!({})))
            .build(),
    )
    .await
    .expect("loads in time")
    .expect("harness")
}

/// (verb, kind, key) of each write.
fn writes(h: &Harness) -> Vec<(WriteVerb, String, String)> {
    h.take_writes()
        .iter()
        .map(|w| (w.verb, w.request.kind.clone(), w.key()))
        .collect()
}

fn w(verb: WriteVerb, kind: &str, key: &str) -> (WriteVerb, String, String) {
    (verb, kind.to_string(), key.to_string())
}

#[tokio::test]
async fn harness_first_reconcile_writes_finalizer_objects_status_then_steady_state_writes_nothing()
{
    let mut h = harness().await;
    h.add(owner_json(json!({"pods": 10}))).await.expect("add");
    assert_eq!(h.ready_keys(), ["team-defaults"]);
    assert_eq!(
        h.run_queue().await,
        [("team-defaults".to_string(), ReconcileOutcome::Done)]
    );
    let recorded = h.writes();
    assert_eq!(
        writes(&h),
        [
            w(WriteVerb::MergePatch, KIND, "team-defaults"),
            w(WriteVerb::Apply, "ConfigMap", "team-a/team-settings"),
            w(WriteVerb::Apply, "ResourceQuota", "team-a/team-quota"),
            w(WriteVerb::ApplyStatus, KIND, "team-defaults"),
        ]
    );
    assert_eq!(
        recorded[0].body["metadata"]["finalizers"],
        json!([FINALIZER])
    );
    assert_eq!(recorded[2].body["spec"]["hard"], json!({"pods": "10"}));
    let status = &recorded[3].body["status"];
    assert_eq!(
        status["managed"],
        json!([{"kind": "ConfigMap", "namespace": "team-a", "name": "team-settings"},
               {"kind": "ResourceQuota", "namespace": "team-a", "name": "team-quota"}])
    );
    assert_eq!(status["conditions"][0]["status"], "True");
    assert_eq!(status["conditions"][0]["observedGeneration"], 1);
    assert!(h
        .get("v1", "ConfigMap", Some("unselected"), "team-settings")
        .is_none());

    // Its own writes come back as events; the reconcile they cause changes nothing.
    h.deliver_pending().await.expect("deliver");
    let out = h.run_queue().await;
    assert!(!out.is_empty() && out.iter().all(|(_, o)| *o == ReconcileOutcome::Done));
    assert_eq!(writes(&h), [], "the steady state makes no API calls");
}

#[tokio::test]
async fn harness_the_status_is_applied_even_when_the_owner_changed_since_the_cache_read() {
    let mut h = harness().await;
    h.add(owner_json(json!({"pods": 10}))).await.expect("add");
    h.run_queue().await;
    h.deliver_pending().await.expect("deliver");
    h.run_queue().await;
    h.clear_records();

    // A new namespace makes the status change; before the reconcile runs, someone labels the
    // owner, so the owner the reconcile reads from the cache is one resourceVersion behind.
    h.add(namespace("team-b", json!({"team": "b"})))
        .await
        .expect("namespace");
    let mut current = h.get(API, KIND, None, "team-defaults").expect("owner");
    current["metadata"]["labels"] = json!({"edited-by": "someone-else"});
    h.cluster().replace(current).expect("out-of-band edit");

    // A replace of the status would carry the stale resourceVersion and fail with 409; the
    // status apply carries none and goes through, stating only the status fields it owns.
    assert_eq!(h.reconcile("team-defaults").await, ReconcileOutcome::Done);
    let recorded = h.writes();
    let status_write = recorded
        .iter()
        .find(|w| w.verb == WriteVerb::ApplyStatus)
        .expect("a status apply");
    assert!(status_write.result.is_ok(), "{:?}", status_write.result);
    assert!(
        status_write.body["metadata"]
            .get("resourceVersion")
            .is_none(),
        "{}",
        status_write.body
    );
    let mut keys: Vec<&String> = status_write.body["status"]
        .as_object()
        .expect("status")
        .keys()
        .collect();
    keys.sort();
    assert_eq!(keys, ["conditions", "managed", "observedGeneration"]);
    let stored = h.get(API, KIND, None, "team-defaults").expect("owner");
    assert_eq!(stored["metadata"]["labels"]["edited-by"], "someone-else");
    assert_eq!(
        stored["status"]["managed"].as_array().map(Vec::len),
        Some(4)
    );
    let entry = stored["metadata"]["managedFields"]
        .as_array()
        .and_then(|m| {
            m.iter()
                .find(|e| e["manager"] == "namespace-defaults" && e["operation"] == "Apply")
        })
        .cloned()
        .expect("the controller owns the status it applied");
    assert_eq!(entry["subresource"], "status");
}

#[tokio::test]
async fn harness_new_namespaces_enqueue_owners_and_deletion_runs_the_finalizer() {
    let mut h = harness().await;
    h.add(owner_json(json!({"pods": 10}))).await.expect("add");
    h.run_queue().await;
    h.deliver_pending().await.expect("deliver");
    h.run_queue().await;
    h.clear_records();

    h.add(namespace("team-b", json!({"team": "b"})))
        .await
        .expect("namespace");
    assert_eq!(h.ready_keys(), ["team-defaults"]);
    h.run_queue().await;
    assert_eq!(
        writes(&h),
        [
            w(WriteVerb::Apply, "ConfigMap", "team-b/team-settings"),
            w(WriteVerb::Apply, "ResourceQuota", "team-b/team-quota"),
            w(WriteVerb::ApplyStatus, KIND, "team-defaults"),
        ]
    );
    h.deliver_pending().await.expect("deliver");
    h.run_queue().await;
    h.clear_records();

    // Deleting: the finalizer holds the owner; the reconcile deletes what it manages, then
    // removes the finalizer, and the owner is gone.
    h.delete(API, KIND, None, "team-defaults")
        .await
        .expect("delete");
    assert_eq!(h.ready_keys(), ["team-defaults"]);
    assert!(h.get(API, KIND, None, "team-defaults").is_some());
    h.run_queue().await;
    let mut got = writes(&h);
    let last = got.pop().expect("writes");
    assert_eq!(last, w(WriteVerb::MergePatch, KIND, "team-defaults"));
    got.sort_by(|a, b| (&a.1, &a.2).cmp(&(&b.1, &b.2)));
    assert_eq!(
        got,
        [
            w(WriteVerb::Delete, "ConfigMap", "team-a/team-settings"),
            w(WriteVerb::Delete, "ConfigMap", "team-b/team-settings"),
            w(WriteVerb::Delete, "ResourceQuota", "team-a/team-quota"),
            w(WriteVerb::Delete, "ResourceQuota", "team-b/team-quota"),
        ]
    );
    assert!(h.get(API, KIND, None, "team-defaults").is_none());
    for ns in ["team-a", "team-b"] {
        assert!(h
            .get("v1", "ConfigMap", Some(ns), "team-settings")
            .is_none());
    }
}

#[tokio::test]
async fn harness_a_bad_spec_is_reported_in_status_and_nothing_is_applied() {
    let mut h = harness().await;
    h.add(owner_json(json!({"pods": true}))).await.expect("add");
    assert_eq!(
        h.run_queue().await,
        [("team-defaults".to_string(), ReconcileOutcome::Done)],
        "retrying cannot fix a spec"
    );
    let recorded = h.writes();
    assert_eq!(
        writes(&h),
        [
            w(WriteVerb::MergePatch, KIND, "team-defaults"),
            w(WriteVerb::ApplyStatus, KIND, "team-defaults"),
        ]
    );
    let cond = &recorded[1].body["status"]["conditions"][0];
    assert_eq!(
        (&cond["status"], &cond["reason"]),
        (&json!("False"), &json!("InvalidSpec"))
    );
    assert!(cond["message"]
        .as_str()
        .is_some_and(|m| m.contains("spec.resourceQuota.hard.pods")));
}

// ---- scenario files through `host test` ------------------------------------------------------

#[tokio::test]
async fn scenario_files_pass_under_host_test() {
    support::scenarios::assert_example_scenarios_pass("namespace-defaults").await;
}
