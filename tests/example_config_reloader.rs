//! The config-reloader example: unit tests through the guest harness (`kwh_testing`), its
//! scenario files through `host test`, and end to end with the real plugin runtime against the
//! emulator over HTTP. A Deployment that opts in and references a ConfigMap and a Secret gets its
//! baseline recorded, then rolls (a new pod-template hash annotation) on every change of either;
//! an unreferenced Deployment and one that did not opt in are left alone. Each roll is a
//! `ConfigChanged` Event naming what changed, which the real `kubectl describe deployment` and
//! `kubectl events` show. Its settings: a configured prefix takes effect, and one out of range
//! stops the reloader alone (through the `host` binary and a plugins file).

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use kwh_emulator::EmulatorHandle;
use kwh_testing::{Harness, HarnessError, ReconcileOutcome, WriteVerb};
use serde_json::{json, Value};
use support::cluster::{emulator, eventually, running};
use support::guests::example;
use support::kubectl::kubectl_until;
use support::process::HostProcess;

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

/// The baseline the reloader's own cache holds for Deployment `name`. A test that changes a
/// ConfigMap right after the baseline reached the API server can beat the baseline's watch event
/// to the reloader, which then takes the change for first sight (the example's known narrow
/// race, see its docs): such a test waits for this first.
fn cached_observed_hash(rt: &kwh_plugin::PluginRuntime, name: &str) -> Option<String> {
    let key = kwh_informer::factory::InformerKey::new("apps/v1/deployments", None, None, None);
    let informer = rt.factory().informer(&key)?;
    let cached = informer.indexer().get_by_key(&format!("default/{name}"))?;
    observed_hash(&cached.to_value().ok()?)
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
    assert!(
        eventually(WAIT, || cached_observed_hash(&rt, "web").as_ref()
            == Some(&baseline))
        .await,
        "the reloader's cache holds web's baseline"
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
    let baseline = observed_hash(&get_deploy(&em, "web"));
    assert!(
        eventually(WAIT, || cached_observed_hash(&rt, "web") == baseline).await,
        "the reloader's cache holds web's baseline"
    );
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
    harness_with(Value::Null).await.expect("harness")
}

/// The reloader in the harness with `config` as its plugins-file `config:`.
async fn harness_with(config: Value) -> Result<Harness, HarnessError> {
    Harness::builder(example("config-reloader"))
        .engine(support::engine())
        .config(config)
        .seed(configmap("app-config", json!({"level": "info"})))
        .seed(configmap("other-config", json!({"x": "1"})))
        .seed(
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "app-secret", "namespace": "default"},
            "data": {"password": "czNjcjN0"}}),
        )
        .build()
        .await
}

/// The Events recorded since the last call, as (type, reason, action, regarding key, note),
/// each checked to be the reloader's and to name the regarding object's uid.
fn take_events(h: &Harness) -> Vec<(&'static str, String, String, String, String)> {
    h.take_events()
        .into_iter()
        .map(|e| {
            assert_eq!(e.reporting_controller, "config-reloader");
            let r = &e.event.regarding;
            assert_eq!(
                (r.api_version.as_str(), r.kind.as_str()),
                ("apps/v1", "Deployment")
            );
            assert!(r.uid.is_some(), "kubectl describe matches on the uid");
            (
                e.type_name(),
                e.event.reason.clone(),
                e.event.action.clone(),
                e.key(),
                e.event.note.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// The one `ConfigChanged` Event about `default/web` recorded since the last call: its note.
fn roll_note(h: &Harness) -> String {
    let events = take_events(h);
    assert_eq!(events.len(), 1, "{events:?}");
    let (type_, reason, action, key, note) = events.into_iter().next().expect("one");
    assert_eq!(
        (type_, reason.as_str(), action.as_str(), key.as_str()),
        ("Normal", "ConfigChanged", "Roll", "default/web")
    );
    note
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
    assert_eq!(
        d["metadata"]["annotations"]["config-reloader/observed-refs"]
            .as_str()
            .map(|v| v
                .split(',')
                .map(|p| p.split('=').next().unwrap_or(""))
                .collect::<Vec<_>>()),
        Some(vec!["ConfigMap/app-config", "Secret/app-secret"]),
        "a digest per reference is recorded with the baseline"
    );
    assert!(
        take_events(h).is_empty(),
        "a baseline rolls nothing: no Event"
    );
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
        // The roll is an Event on web, naming what changed (and only that).
        assert_eq!(
            roll_note(&h),
            format!(
                "ConfigMap app-config changed: rolling to config hash {}",
                &rolled[..12]
            )
        );

        // The template change wakes web once more; nothing left to do.
        h.deliver_pending().await.expect("deliver");
        assert_eq!(keys(&h), ["default/web"]);
        assert_eq!(h.run_queue().await.len(), 1);
        assert!(h.take_writes().is_empty(), "idempotent");
        assert!(take_events(&h).is_empty(), "no roll, no Event");

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

/// The race a cache opens: web's baseline has reached the API server but not yet the
/// reloader's cache when its ConfigMap changes. The reconcile of that change sees web as never
/// seen; were it to record the new configuration as web's baseline, the change would never
/// roll. Its first-sight patch is conditional on the version it read, so it is refused (409),
/// and once the cache has the baseline the change rolls.
#[tokio::test]
async fn harness_a_change_racing_the_baseline_into_the_cache_still_rolls() {
    bounded(async {
        let mut h = harness().await;
        h.add(deployment("web", true, "app-config", true))
            .await
            .expect("add web");
        assert_eq!(keys(&h), ["default/web"]);
        let mut cm = h
            .get("v1", "ConfigMap", Some("default"), "app-config")
            .expect("cm");
        cm["data"]["level"] = "debug".into();
        h.update(cm).await.expect("update cm");
        assert_eq!(keys(&h), ["default/web"], "the change's user");
        // The baseline an earlier reconcile recorded (for the configuration before the
        // change), written past the cache: the cluster has it, the lister not yet.
        let mut web = h
            .get("apps/v1", "Deployment", Some("default"), "web")
            .expect("web");
        web["metadata"]["annotations"]["config-reloader/observed-hash"] =
            "before-the-change".into();
        h.cluster().replace(web).expect("baseline past the cache");
        assert_eq!(
            h.cached(0, "default/web")
                .and_then(|d| d.to_value().ok())
                .and_then(|d| observed_hash(&d)),
            None,
            "the cache is behind"
        );

        let stale = h.reconcile("default/web").await;
        assert_eq!(
            stale,
            ReconcileOutcome::RequeueAfter(Duration::from_secs(1))
        );
        let refused = h.take_writes();
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(
            h.get("apps/v1", "Deployment", Some("default"), "web")
                .and_then(|d| observed_hash(&d))
                .as_deref(),
            Some("before-the-change"),
            "the baseline stands"
        );

        // The cache catches up; the recheck rolls to the configuration of now.
        h.deliver_pending().await.expect("deliver");
        h.advance(Duration::from_secs(1));
        let ran = h.run_queue().await;
        assert!(
            ran.iter().all(|(_, r)| *r == ReconcileOutcome::Done),
            "{ran:?}"
        );
        let d = h
            .get("apps/v1", "Deployment", Some("default"), "web")
            .expect("web");
        let rolled = template_hash(&d).expect("rolled");
        assert_eq!(observed_hash(&d).as_ref(), Some(&rolled));
        let note = roll_note(&h);
        assert!(
            note.ends_with(&format!("rolling to config hash {}", &rolled[..12])),
            "{note}"
        );
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
        assert!(
            roll_note(&h).starts_with("Secret app-secret changed: rolling to config hash "),
            "the note names the Secret, never its data"
        );
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
        assert!(
            roll_note(&h).starts_with("ConfigMap app-config deleted: rolling to config hash "),
            "a deletion is named as one"
        );

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

#[tokio::test]
async fn harness_a_configured_prefix_takes_effect_and_bad_ones_are_refused() {
    bounded(async {
        let mut h = harness_with(json!({"prefix": "reload.example.com"}))
            .await
            .expect("loads with the configuration");
        // The default opt-in means nothing under another prefix.
        h.add(deployment("web", true, "app-config", false))
            .await
            .expect("add web");
        assert!(keys(&h).is_empty());
        let mut opted_in = deployment("api", false, "app-config", false);
        opted_in["metadata"]["annotations"] = json!({"reload.example.com/enabled": "true"});
        h.add(opted_in).await.expect("add api");
        assert_eq!(keys(&h), ["default/api"]);
        h.run_queue().await;
        let writes = h.take_writes();
        assert_eq!(writes.len(), 1, "{writes:?}");
        let recorded = &writes[0].body["metadata"]["annotations"];
        assert!(
            recorded["reload.example.com/observed-hash"].is_string(),
            "{recorded}"
        );
        assert!(recorded.get(OBSERVED_HASH).is_none(), "{recorded}");
        h.deliver_pending().await.expect("deliver");
        keys(&h);

        let mut cm = h
            .get("v1", "ConfigMap", Some("default"), "app-config")
            .expect("cm");
        cm["data"]["level"] = "debug".into();
        h.update(cm).await.expect("update cm");
        assert_eq!(keys(&h), ["default/api", "default/web"]);
        h.run_queue().await;
        let writes = h.take_writes();
        assert_eq!(writes.len(), 1, "only api rolls: {writes:?}");
        assert_eq!(writes[0].key(), "default/api");
        assert!(
            writes[0].body["spec"]["template"]["metadata"]["annotations"]
                ["reload.example.com/config-hash"]
                .is_string(),
            "{}",
            writes[0].body
        );
    })
    .await;

    for (config, message) in [
        (
            json!({"prefix": "-reload"}),
            "configuration refused by the plugin: prefix \"-reload\": must be a DNS subdomain",
        ),
        (
            json!({"prefix": ""}),
            "configuration refused by the plugin: prefix \"\": must not be empty",
        ),
        (
            json!({"enabled": "x"}),
            "configuration refused by the plugin: invalid configuration: unknown field `enabled`, \
             expected `prefix`",
        ),
    ] {
        let Err(e) = bounded(harness_with(config.clone())).await else {
            panic!("{config} is accepted")
        };
        let e = e.to_string();
        assert!(
            e.contains("config_reloader.wasm: "),
            "names the plugin: {e}"
        );
        assert!(e.contains(message), "{config}: {e}");
    }
}

// ----- the real kubectl -----

/// A line of a kubectl table, split where two or more spaces are.
fn cells(line: &str) -> Vec<&str> {
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

/// After a roll, `kubectl describe deployment web` shows the reloader's Event in its Events
/// section (From: config-reloader; kubectl matches the Event to the Deployment by its uid), and
/// `kubectl events` lists it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
async fn kubectl_describe_and_events_show_the_roll() {
    let em = emulator().await;
    let dir = support::temp_dir("reloader-kubectl");
    em.write_kubeconfig(dir.join("kubeconfig"))
        .expect("kubeconfig");
    seed_app_config(&em);
    em.create(deployment("web", true, "app-config", true))
        .expect("web");
    let rt = running(&em, &[example("config-reloader")]).await;
    assert!(eventually(WAIT, || observed_hash(&get_deploy(&em, "web")).is_some()).await);
    set_data(&em, "ConfigMap", "app-config", "level", "debug");
    assert!(eventually(WAIT, || template_hash(&get_deploy(&em, "web")).is_some()).await);
    let hash = template_hash(&get_deploy(&em, "web")).expect("rolled");
    let note = format!(
        "ConfigMap app-config changed: rolling to config hash {}",
        &hash[..12]
    );

    let (line, out) = kubectl_until(&dir, &["describe", "deployment", "web"], WAIT, |l| {
        l.contains("ConfigChanged")
    })
    .await
    .unwrap_or_else(|out| panic!("kubectl describe shows no ConfigChanged event:\n{out}"));
    // Type, Reason, Age, From, Message: under the Events heading.
    let after_heading = out
        .split_once("\nEvents:")
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("no Events section:\n{out}"));
    assert!(after_heading.contains(&line), "{out}");
    let c = cells(&line);
    assert_eq!(c.len(), 5, "{line}");
    assert_eq!(
        (c[0], c[1], c[3], c[4]),
        ("Normal", "ConfigChanged", "config-reloader", note.as_str()),
        "{out}"
    );

    let (line, out) = kubectl_until(&dir, &["events", "-n", "default"], WAIT, |l| {
        l.contains("ConfigChanged")
    })
    .await
    .unwrap_or_else(|out| panic!("kubectl events lists no ConfigChanged event:\n{out}"));
    // LAST SEEN, TYPE, REASON, OBJECT, MESSAGE
    let c = cells(&line);
    assert_eq!(c.len(), 5, "{line}");
    assert_eq!(
        &c[1..],
        ["Normal", "ConfigChanged", "Deployment/web", note.as_str()],
        "{out}"
    );

    assert!(
        tokio::time::timeout(T, rt.shutdown(Duration::from_secs(10)))
            .await
            .expect("in time")
    );
    em.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

// ----- the host binary with a plugins file -----

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

/// A prefix the reloader refuses (out of what an annotation key allows) stops the reloader
/// alone, with one line naming its file and its own message; the janitor from the same file
/// starts and deletes what expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_out_of_range_prefix_stops_the_reloader_alone_in_one_line() {
    let dir = support::temp_dir("reloader-bad-config");
    let plugins = dir.join("plugins.yaml");
    std::fs::write(
        &plugins,
        format!(
            "- module: {}\n  config: {{prefix: Reload/Example}}\n- module: {}\n",
            example("config-reloader").display(),
            example("janitor").display()
        ),
    )
    .expect("plugins file");
    let seed = dir.join("seed.yaml");
    std::fs::write(
        &seed,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: expired, namespace: default, \
         annotations: {janitor/expires: '2000-01-01T00:00:00Z'}}\n",
    )
    .expect("seed");
    let mut host = HostProcess::spawn(
        [
            os("--plugins"),
            plugins.as_os_str(),
            os("--emulator"),
            seed.as_os_str(),
            os("--grace-period"),
            os("5"),
        ],
        "info",
    );
    let refused = host.line("configuration refused by the plugin").await;
    assert!(
        refused.contains(
            "config_reloader.wasm: configuration refused by the plugin: prefix \
             \"Reload/Example\": must be a DNS subdomain"
        ),
        "{refused}"
    );
    host.line("running; SIGINT or SIGTERM stops").await;
    // The janitor runs.
    host.line("deleted ConfigMap:default/expired").await;
    host.sigterm();
    let status = host.exit(support::process::WAIT).await;
    assert!(status.success(), "{}", host.log());
    let about = host.lines_mentioning(&["config_reloader.wasm", "plugin=config-reloader"]);
    assert_eq!(about, [refused.as_str()], "{}", host.log());
    let _ = std::fs::remove_dir_all(dir);
}

// ----- scenario files through `host test` -----

#[tokio::test]
async fn scenario_files_pass_under_host_test() {
    support::scenarios::assert_example_scenarios_pass("config-reloader").await;
}
