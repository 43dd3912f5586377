//! The config-reloader example: unit tests through the guest harness (`kwh_testing`), its
//! scenario files through `host test`, and end to end with the real plugin runtime against the
//! emulator over HTTP. A Deployment that opts in and references a ConfigMap and a Secret gets its
//! baseline recorded, then rolls (a new pod-template hash annotation) on every change of either;
//! an unreferenced Deployment and one that did not opt in are left alone.

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use kwh_emulator::EmulatorHandle;
use kwh_testing::{Harness, ReconcileOutcome, WriteVerb};
use serde_json::{json, Value};
use support::cluster::{emulator, eventually, running};
use support::guests::example;

const T: Duration = Duration::from_secs(120);
const WAIT: Duration = Duration::from_secs(20);

const ENABLED: &str = "config-reloader/enabled";
const CONFIG_HASH: &str = "config-reloader/config-hash";
const OBSERVED_HASH: &str = "config-reloader/observed-hash";

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

/// The ConfigMap `app-config` and the Secret `app-secret` that [`deployment`]s reference.
fn seed_app_config(em: &EmulatorHandle) {
    em.create(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "app-config", "namespace": "default"}, "data": {"level": "info"}}))
        .expect("configmap");
    em.create(
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "app-secret", "namespace": "default"},
        "data": {"password": "czNjcjN0"}}),
    )
    .expect("secret");
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
    let em = emulator().await;
    seed_app_config(&em);
    em.create(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "other-config", "namespace": "default"}, "data": {"x": "1"}}))
        .expect("configmap");

    let rt = running(&em, &[example("config-reloader")]).await;

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

/// A restart of the host while one of the reloader's informers is slow to list (the
/// ConfigMap LIST is held, as 10,000 ConfigMaps make it on a real cluster) rolls nothing: the
/// Deployment's key is queued as its informer syncs, but no reconcile runs before every
/// informer of the plugin has synced, so the guest never hashes "ConfigMap absent".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_a_slow_configmap_list_rolls_nothing() {
    let em = emulator().await;
    seed_app_config(&em);
    em.create(deployment("web", true, "app-config", true))
        .expect("web");

    // A first run records the baseline and rolls once for a change.
    let rt = running(&em, &[example("config-reloader")]).await;
    assert!(eventually(WAIT, || observed_hash(&get_deploy(&em, "web")).is_some()).await);
    set_data(&em, "ConfigMap", "app-config", "level", "debug");
    assert!(eventually(WAIT, || template_hash(&get_deploy(&em, "web")).is_some()).await);
    assert!(
        tokio::time::timeout(T, rt.shutdown(Duration::from_secs(10)))
            .await
            .expect("in time")
    );
    let before = get_deploy(&em, "web");
    let generation = before["metadata"]["generation"].clone();
    let hash = template_hash(&before).expect("rolled once");

    // The restart, with the ConfigMap LIST held.
    em.faults().hold_lists("/configmaps");
    let mut rt = support::cluster::runtime(&em, kwh_plugin::Limits::default(), true);
    tokio::time::timeout(T, rt.start_all(&[example("config-reloader")]))
        .await
        .expect("in time")
        .expect("starts");
    let reloader = rt.plugins()[0].clone();
    assert!(
        eventually(WAIT, || em.faults().held_list_count() >= 1
            && reloader.dispatcher().delivered.load(Ordering::Relaxed) >= 2)
        .await,
        "the ConfigMap LIST is held while the Deployment and the Secret are delivered"
    );
    // A reconcile now would read a cache without the ConfigMap. Give one every chance to
    // happen (a worker takes a queued key within milliseconds), and see none does.
    let reconciled = || reloader.reconcile_stats().total.load(Ordering::Relaxed);
    assert!(
        !eventually(Duration::from_secs(1), || reconciled() > 0).await,
        "no reconcile before every informer synced"
    );
    assert!(!reloader.workers_started());
    assert_eq!(reloader.queue().len(), 1, "web's key waits in the queue");
    assert!(!rt.is_ready());

    em.faults().release_lists("/configmaps");
    assert!(
        eventually(WAIT, || rt.is_ready()).await,
        "synced after the release"
    );
    assert!(
        eventually(WAIT, || reconciled() >= 1).await,
        "the queued key is reconciled"
    );
    assert!(
        tokio::time::timeout(T, rt.shutdown(Duration::from_secs(10)))
            .await
            .expect("in time")
    );
    let after = get_deploy(&em, "web");
    assert_eq!(
        after["metadata"]["generation"], generation,
        "no roll on restart: {after}"
    );
    assert_eq!(template_hash(&after).as_deref(), Some(hash.as_str()));
    em.shutdown().await;
}

// ----- unit tests through the harness -----

fn configmap(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"}, "data": data})
}

async fn harness() -> Harness {
    Harness::builder(example("config-reloader"))
        .engine(support::engine())
        .seed(configmap("app-config", json!({"level": "info"})))
        .seed(configmap("other-config", json!({"x": "1"})))
        .seed(
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "app-secret", "namespace": "default"},
            "data": {"password": "czNjcjN0"}}),
        )
        .build()
        .await
        .expect("harness")
}

/// Runs `f` under an overall deadline so a wedged guest fails the test instead of hanging it.
async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(T, f).await.expect("test deadline")
}

fn keys(h: &Harness) -> Vec<String> {
    h.take_enqueued().into_iter().map(|e| e.key).collect()
}

/// Adds web (opted in, app-config + app-secret) and records its baseline; returns the hash.
async fn with_baseline(h: &mut Harness) -> String {
    h.add(deployment("web", true, "app-config", true))
        .await
        .expect("add web");
    assert_eq!(keys(h), ["default/web"]);
    assert_eq!(h.reconcile("default/web").await, ReconcileOutcome::Done);
    let writes = h.take_writes();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(writes[0].verb, WriteVerb::MergePatch);
    assert_eq!(writes[0].key(), "default/web");
    assert!(
        writes[0].body.get("spec").is_none(),
        "first sight does not touch the template: {}",
        writes[0].body
    );
    let d = h
        .get("apps/v1", "Deployment", Some("default"), "web")
        .expect("web");
    assert_eq!(template_hash(&d), None);
    // Its own metadata-only patch does not wake it again.
    h.deliver_pending().await.expect("deliver");
    assert!(keys(h).is_empty());
    observed_hash(&d).expect("baseline recorded")
}

#[tokio::test]
async fn harness_first_sight_records_a_baseline_and_a_configmap_change_rolls() {
    bounded(async {
        let mut h = harness().await;
        assert_eq!(h.manifest().name, "config-reloader");
        let baseline = with_baseline(&mut h).await;

        // The ConfigMap changes: the index finds web, reconcile patches the template.
        let mut cm = h
            .get("v1", "ConfigMap", Some("default"), "app-config")
            .expect("cm");
        cm["data"]["level"] = "debug".into();
        h.update(cm).await.expect("update cm");
        assert_eq!(keys(&h), ["default/web"]);
        assert_eq!(h.reconcile("default/web").await, ReconcileOutcome::Done);
        let writes = h.take_writes();
        assert_eq!(writes.len(), 1, "{writes:?}");
        let rolled = template_hash(&writes[0].body).expect("template hash in the patch");
        assert_ne!(rolled, baseline);
        let d = h
            .get("apps/v1", "Deployment", Some("default"), "web")
            .expect("web");
        assert_eq!(template_hash(&d).as_ref(), Some(&rolled));
        assert_eq!(observed_hash(&d).as_ref(), Some(&rolled));

        // The template change wakes web once more; nothing left to do.
        h.deliver_pending().await.expect("deliver");
        assert_eq!(keys(&h), ["default/web"]);
        assert_eq!(h.run_queue().await.len(), 1);
        assert!(h.take_writes().is_empty(), "idempotent");

        // Metadata-only ConfigMap changes are not configuration changes.
        let mut cm = h
            .get("v1", "ConfigMap", Some("default"), "app-config")
            .expect("cm");
        cm["metadata"]["labels"] = json!({"touched": "yes"});
        h.update(cm).await.expect("label cm");
        assert!(keys(&h).is_empty());
    })
    .await;
}

#[tokio::test]
async fn harness_secrets_and_deletions_count_and_only_users_are_enqueued() {
    bounded(async {
        let mut h = harness().await;
        with_baseline(&mut h).await;
        h.add(deployment("opted-out", false, "app-config", false))
            .await
            .expect("add opted-out");
        h.add(deployment("unrelated", true, "other-config", false))
            .await
            .expect("add unrelated");
        // Only the opted-in one is enqueued on add.
        assert_eq!(keys(&h), ["default/unrelated"]);
        h.run_queue().await;
        h.take_writes();
        h.deliver_pending().await.expect("deliver");
        keys(&h);

        // A Secret change reaches web only (the other two do not read it).
        let mut s = h
            .get("v1", "Secret", Some("default"), "app-secret")
            .expect("secret");
        s["data"]["password"] = "bmV3".into();
        h.update(s).await.expect("update secret");
        assert_eq!(keys(&h), ["default/web"]);
        h.run_queue().await;
        let writes = h.take_writes();
        assert_eq!(writes.len(), 1, "{writes:?}");
        let after_secret = template_hash(&writes[0].body).expect("rolled");
        h.deliver_pending().await.expect("deliver");
        h.run_queue().await;
        keys(&h);

        // app-config's users: web and opted-out (the index holds both); only web is written.
        h.delete("v1", "ConfigMap", Some("default"), "app-config")
            .await
            .expect("delete cm");
        let mut users = keys(&h);
        users.sort();
        assert_eq!(users, ["default/opted-out", "default/web"]);
        let out = h.run_queue().await;
        assert!(
            out.iter().all(|(_, o)| *o == ReconcileOutcome::Done),
            "{out:?}"
        );
        let writes = h.take_writes();
        assert_eq!(writes.len(), 1, "{writes:?}");
        assert_eq!(writes[0].key(), "default/web");
        assert_ne!(template_hash(&writes[0].body), Some(after_secret));

        // A status-only update of the Deployment (rollout progress) enqueues nothing.
        let mut d = h
            .get("apps/v1", "Deployment", Some("default"), "web")
            .expect("web");
        d["status"] = json!({"observedGeneration": 2, "replicas": 1});
        h.deliver_pending().await.expect("deliver");
        keys(&h);
        h.update_status(d).await.expect("status");
        assert!(keys(&h).is_empty());
    })
    .await;
}

// ----- scenario files through `host test` -----

#[tokio::test]
async fn scenario_files_pass_under_host_test() {
    support::scenarios::assert_example_scenarios_pass("config-reloader").await;
}
