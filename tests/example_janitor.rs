//! The janitor example (examples/janitor):
//! - end to end, in the real plugin runtime against the emulator over HTTP: expired objects
//!   disappear when their TTL runs out (within a tolerance), not before; a Job takes its Pods
//!   along; a dry run only reports; no polling; the real `kubectl events` lists the `Expired`
//!   Event of a deleted object;
//! - the `host` binary with a plugins file: a configured prefix takes effect, and a configuration
//!   the janitor refuses stops it alone, in one line, while the other plugin runs;
//! - unit tests through the guest harness (`kwh_testing`) on a virtual clock: the exact
//!   requeue delays, the delete request, the dry-run patch, what is not touched, the Events of
//!   each action, the settings;
//! - the example's scenario files, run by `host test`.

mod support;

use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kwh_emulator::EmulatorHandle;
use kwh_plugin::backend::{DeleteParams, Propagation, WriteOp};
use kwh_plugin::PluginRuntime;
use kwh_testing::{Harness, HarnessError, LogLevel, Origin, ReconcileOutcome, WriteVerb};
use serde_json::{json, Value};
use support::cluster::{emulator, eventually, running};
use support::guests::example;
use support::kubectl::{kubectl, kubectl_until};
use support::process::HostProcess;

/// Bound for loading the plugin (the first test run compiles the component).
const LOAD: Duration = Duration::from_secs(120);
/// Bound for any single expected change.
const WAIT: Duration = Duration::from_secs(20);
/// How late after its expiry an object may still be seen: the requeue timer, one reconcile, the
/// DELETE and this test's 10 ms polling, with room for a busy 2-core CI machine (never early is
/// checked exactly).
const LATE: Duration = Duration::from_millis(2500);

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Seconds since the epoch of a `YYYY-MM-DDTHH:MM:SSZ` timestamp (what the emulator writes).
fn parse_ts(s: &str) -> i64 {
    let n = |r: std::ops::Range<usize>| -> i64 { s[r].parse().expect("timestamp digits") };
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let doy = (153 * m + 2) / 5 + d - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    days * 86_400 + n(11..13) * 3600 + n(14..16) * 60 + n(17..19)
}

async fn setup() -> (EmulatorHandle, PluginRuntime) {
    let em = emulator().await;
    let rt = running(&em, &[example("janitor")]).await;
    (em, rt)
}

fn cm(name: &str, annotations: Value, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default",
            "annotations": annotations, "labels": labels},
        "data": {"k": "v"}})
}

/// When the janitor should delete `obj` (ms since the epoch): creation + `ttl_s`.
fn expiry_of(obj: &Value, ttl_s: i64) -> i64 {
    let created = obj["metadata"]["creationTimestamp"]
        .as_str()
        .expect("creationTimestamp");
    (parse_ts(created) + ttl_s) * 1000
}

/// Whether `cond` holds at every 10 ms poll until `until_ms` (ms since the epoch).
async fn holds_until(until_ms: i64, mut cond: impl FnMut() -> bool) -> bool {
    while now_ms() < until_ms {
        if !cond() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

/// Waits until `gone()` and asserts it happened in [expiry, expiry + LATE].
async fn assert_gone_on_time(what: &str, expiry_ms: i64, mut gone: impl FnMut() -> bool) {
    let deadline = Duration::from_millis((expiry_ms - now_ms()).max(0) as u64) + WAIT;
    assert!(
        eventually(deadline, &mut gone).await,
        "{what} is deleted eventually"
    );
    let at = now_ms();
    // Polling every 10 ms: the deletion happened at most that long before `at`.
    assert!(
        at + 20 >= expiry_ms,
        "{what} was deleted {} ms before its expiry",
        expiry_ms - at
    );
    assert!(
        at <= expiry_ms + LATE.as_millis() as i64,
        "{what} was deleted {} ms after its expiry",
        at - expiry_ms
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_objects_go_on_time_others_stay_and_dry_runs_only_report() {
    let (em, rt) = setup().await;
    let get = |kind: &str, api: &str, name: &str| em.get(api, kind, Some("default"), name);

    let soon = em
        .create(cm("soon", json!({"janitor/ttl": "3s"}), json!({})))
        .expect("create");
    let later = em
        .create(cm("later", json!({"janitor/ttl": "6s"}), json!({})))
        .expect("create");
    let dry = em
        .create(cm(
            "dry",
            json!({"janitor/ttl": "1s"}),
            json!({"janitor/dry-run": "true"}),
        ))
        .expect("create");
    em.create(cm("keep", json!({}), json!({}))).expect("create");
    em.create(cm("bad", json!({"janitor/ttl": "soon"}), json!({})))
        .expect("create");
    let job = em
        .create(json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "batch", "namespace": "default",
                "annotations": {"janitor/ttl": "2s"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox"}]}}}}))
        .expect("job");
    em.create(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "batch-pod", "namespace": "default",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "batch",
                "uid": job["metadata"]["uid"], "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))
        .expect("pod");

    // The dry run expires first: reported with its expiry time, never deleted.
    let dry_at = expiry_of(&dry, 1) / 1000;
    assert!(
        eventually(WAIT, || get("ConfigMap", "v1", "dry").is_some_and(|d| d
            ["metadata"]["annotations"]["janitor/would-delete-at"]
            .as_str()
            .is_some_and(|s| parse_ts(s) == dry_at)))
        .await,
        "the dry run records when the object expired"
    );

    // The Job expires at 2 s and its Pod goes with it (the janitor asks for Background).
    assert_gone_on_time("the job", expiry_of(&job, 2), || {
        get("Job", "batch/v1", "batch").is_none()
    })
    .await;
    assert!(
        eventually(WAIT, || get("Pod", "v1", "batch-pod").is_none()).await,
        "the job's pod is collected with it"
    );

    assert_gone_on_time("soon", expiry_of(&soon, 3), || {
        get("ConfigMap", "v1", "soon").is_none()
    })
    .await;
    let later_at = expiry_of(&later, 6);
    assert!(
        holds_until(later_at - 300, || get("ConfigMap", "v1", "later").is_some()).await,
        "not expired yet, so still there"
    );
    assert_gone_on_time("later", later_at, || {
        get("ConfigMap", "v1", "later").is_none()
    })
    .await;

    for name in ["dry", "keep", "bad"] {
        assert!(
            get("ConfigMap", "v1", name).is_some(),
            "{name} stays: dry run, no TTL, malformed TTL"
        );
    }
    // Requeue-after, not polling: a handful of reconciles per annotated object over 6+ seconds.
    let janitor = rt.plugins()[0].clone();
    let stats = janitor.reconcile_stats();
    let total = stats.total.load(Ordering::Relaxed);
    assert!(total <= 20, "{total} reconciles: the janitor must not poll");
    assert!(stats.requeue_after.load(Ordering::Relaxed) >= 3);
    assert_eq!(stats.errors.load(Ordering::Relaxed), 0);

    assert!(rt.shutdown(Duration::from_secs(5)).await);
    em.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extended_ttl_postpones_the_deletion() {
    let (em, rt) = setup().await;
    let get = || em.get("v1", "ConfigMap", Some("default"), "extended");
    let created = em
        .create(cm("extended", json!({"janitor/ttl": "2s"}), json!({})))
        .expect("create");
    // Extend it before it expires; the pending requeue finds the new TTL.
    let mut c = get().expect("exists");
    c["metadata"]["annotations"]["janitor/ttl"] = "4s".into();
    em.update(c).expect("update");
    let first = expiry_of(&created, 2);
    assert!(
        holds_until(first + 800, || get().is_some()).await,
        "it stays past the old expiry"
    );
    assert_gone_on_time("extended", expiry_of(&created, 4), || get().is_none()).await;
    assert!(rt.shutdown(Duration::from_secs(5)).await);
    em.shutdown().await;
}

// ---- unit tests through the harness, on a virtual clock -------------------------------------

/// Harness clock start (the harness default): 2025-01-01T00:00:00Z.
const START: &str = "2025-01-01T00:00:00Z";

async fn harness() -> Harness {
    harness_with(Value::Null).await.expect("harness")
}

/// The janitor in the harness with `config` as its plugins-file `config:`.
async fn harness_with(config: Value) -> Result<Harness, HarnessError> {
    tokio::time::timeout(
        LOAD,
        Harness::builder(example("janitor"))
            .engine(support::engine())
            .config(config)
            .build(),
    )
    .await
    .expect("loads in time")
}

/// One recorded Event: type, reason, action, the regarding object's key, its uid, and the note.
#[derive(Debug, PartialEq)]
struct Ev {
    type_: &'static str,
    reason: String,
    action: String,
    key: String,
    uid: Option<String>,
    note: String,
}

/// The Events the janitor recorded since the last call, each checked to be the janitor's.
fn take_events(h: &Harness) -> Vec<Ev> {
    h.take_events()
        .into_iter()
        .map(|e| {
            assert_eq!(e.reporting_controller, "janitor");
            Ev {
                type_: e.type_name(),
                key: e.key(),
                reason: e.event.reason,
                action: e.event.action,
                uid: e.event.regarding.uid,
                note: e.event.note.unwrap_or_default(),
            }
        })
        .collect()
}

#[tokio::test]
async fn harness_ttl_requeues_exactly_until_expiry_then_deletes_with_preconditions() {
    let mut h = harness().await;
    let c = h
        .add(cm("short", json!({"janitor/ttl": "5m"}), json!({})))
        .await
        .expect("add");
    let stored = h
        .get("v1", "ConfigMap", Some("default"), "short")
        .expect("stored");
    assert_eq!(stored["metadata"]["creationTimestamp"], START);
    let q = h.take_enqueued();
    assert_eq!(q.len(), 1);
    assert_eq!(
        (q[0].key.as_str(), q[0].origin),
        ("ConfigMap:default/short", Origin::Guest),
        "the key names the kind"
    );

    // Two minutes in, three minutes are left: one requeue for exactly that, no write.
    h.advance(Duration::from_secs(120));
    let out = h.run_queue().await;
    assert_eq!(
        out,
        [(
            "ConfigMap:default/short".to_string(),
            ReconcileOutcome::RequeueAfter(Duration::from_secs(180))
        )]
    );
    assert!(h.writes().is_empty());
    assert!(h.events().is_empty(), "waiting is not an action");
    assert!(
        h.advance(Duration::from_millis(179_999)).is_empty(),
        "not early"
    );
    assert_eq!(
        h.advance(Duration::from_millis(1)),
        ["ConfigMap:default/short"]
    );

    let out = h.run_queue().await;
    assert_eq!(out[0].1, ReconcileOutcome::Done);
    let w = h.take_writes();
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(
        (w[0].verb, w[0].key().as_str()),
        (WriteVerb::Delete, "default/short")
    );
    assert_eq!(
        w[0].request.op,
        WriteOp::Delete(DeleteParams {
            precondition_uid: Some(c.uid().to_string()),
            precondition_resource_version: Some(c.resource_version().to_string()),
            propagation: Some(Propagation::Background),
            grace_period_seconds: None,
        }),
        "exactly the object that was judged, dependents included"
    );
    assert!(h.get("v1", "ConfigMap", Some("default"), "short").is_none());
    assert!(h.logs().iter().any(|l| l.level == LogLevel::Info
        && l.message == "deleted ConfigMap:default/short: expired at 2025-01-01T00:05:00Z"));
    // One Event for the deletion, about the object (uid included) that is now gone.
    assert_eq!(
        take_events(&h),
        [Ev {
            type_: "Normal",
            reason: "Expired".into(),
            action: "Delete".into(),
            key: "default/short".into(),
            uid: Some(c.uid().to_string()),
            note: "deleted ConfigMap default/short: expired at 2025-01-01T00:05:00Z".into(),
        }]
    );
}

#[tokio::test]
async fn harness_absolute_expiry_and_jobs_take_their_pods() {
    let mut h = harness().await;
    let job = h
        .add(json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "nightly", "namespace": "default",
                "annotations": {"janitor/expires": "2025-01-01T01:00:00+01:00"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox"}]}}}}))
        .await
        .expect("job");
    h.seed(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "nightly-x", "namespace": "default",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "nightly",
                "uid": job.uid(), "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))
        .expect("pod");
    // 01:00+01:00 is the start itself: expired at once.
    let out = h.run_queue().await;
    assert_eq!(
        out,
        [("Job:default/nightly".to_string(), ReconcileOutcome::Done)]
    );
    assert!(h
        .get("batch/v1", "Job", Some("default"), "nightly")
        .is_none());
    assert!(
        h.get("v1", "Pod", Some("default"), "nightly-x").is_none(),
        "background propagation takes the pod too"
    );
}

#[tokio::test]
async fn harness_dry_run_reports_once_and_never_deletes() {
    let mut h = harness().await;
    h.add(cm(
        "report-only",
        json!({"janitor/ttl": "1m"}),
        json!({"janitor/dry-run": "true"}),
    ))
    .await
    .expect("add");
    assert_eq!(
        h.run_queue().await[0].1,
        ReconcileOutcome::RequeueAfter(Duration::from_secs(60))
    );
    h.advance(Duration::from_secs(60));
    assert_eq!(h.run_queue().await[0].1, ReconcileOutcome::Done);
    let w = h.take_writes();
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].verb, WriteVerb::MergePatch);
    assert_eq!(
        w[0].body,
        json!({"metadata": {"annotations": {"janitor/would-delete-at": "2025-01-01T00:01:00Z"}}})
    );
    assert!(h
        .logs()
        .iter()
        .any(|l| l.message == "dry run: would delete ConfigMap:default/report-only (expired at 2025-01-01T00:01:00Z)"));
    let events = take_events(&h);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (
            events[0].type_,
            events[0].reason.as_str(),
            events[0].action.as_str()
        ),
        ("Normal", "Expired", "DryRun")
    );
    assert_eq!(
        events[0].note,
        "dry run: would delete ConfigMap default/report-only (expired at 2025-01-01T00:01:00Z)"
    );

    // Its own patch comes back as an update; the report is not written again.
    h.deliver_pending().await.expect("deliver");
    h.advance(Duration::from_secs(3600));
    let out = h.run_queue().await;
    assert!(!out.is_empty(), "the update was enqueued");
    assert!(out.iter().all(|(_, o)| *o == ReconcileOutcome::Done));
    assert!(h.take_writes().is_empty(), "idempotent");
    assert!(take_events(&h).is_empty(), "reported once");
    assert!(h
        .get("v1", "ConfigMap", Some("default"), "report-only")
        .is_some());
}

#[tokio::test]
async fn harness_unannotated_objects_are_ignored_and_bad_annotations_only_warned_about() {
    let mut h = harness().await;
    h.add(cm("plain", json!({}), json!({}))).await.expect("add");
    h.add(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "s", "namespace": "default"}}))
        .await
        .expect("add");
    assert!(
        h.take_enqueued().is_empty(),
        "nothing to do, nothing enqueued"
    );

    h.add(cm("typo", json!({"janitor/ttl": "5 minutes"}), json!({})))
        .await
        .expect("add");
    let out = h.run_queue().await;
    assert_eq!(
        out,
        [("ConfigMap:default/typo".to_string(), ReconcileOutcome::Done)],
        "no retry storm for a typo"
    );
    assert!(h.writes().is_empty());
    let warn = h
        .logs()
        .into_iter()
        .find(|l| l.level == LogLevel::Warn)
        .expect("a warning");
    assert!(
        warn.message
            .starts_with("ConfigMap:default/typo: janitor/ttl: invalid duration"),
        "{}",
        warn.message
    );
    // ... and a Warning Event on the object, which `kubectl describe` shows its owner.
    let events = take_events(&h);
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(
        (
            e.type_,
            e.reason.as_str(),
            e.action.as_str(),
            e.key.as_str()
        ),
        ("Warning", "InvalidAnnotation", "Ignore", "default/typo")
    );
    assert!(e.uid.is_some());
    assert!(
        e.note
            .starts_with("janitor/ttl: invalid duration \"5 minutes\"")
            && e.note
                .ends_with("; not deleting it until the annotation is fixed"),
        "{}",
        e.note
    );

    // A reconcile for a key of an object that is gone is simply done.
    assert_eq!(
        h.reconcile("Pod:default/never-existed").await,
        ReconcileOutcome::Done
    );
    assert_eq!(h.reconcile("garbage").await, ReconcileOutcome::Done);
}

#[tokio::test]
async fn harness_a_configured_prefix_and_dry_run_take_effect() {
    let mut h = harness_with(json!({"prefix": "cleanup.example.com", "dryRun": true}))
        .await
        .expect("loads with the configuration");
    // The default annotation means nothing under another prefix: not even enqueued.
    h.add(cm("old-style", json!({"janitor/ttl": "1m"}), json!({})))
        .await
        .expect("add");
    assert!(h.take_enqueued().is_empty());
    let c = h
        .add(cm(
            "new-style",
            json!({"cleanup.example.com/ttl": "1m"}),
            json!({}),
        ))
        .await
        .expect("add");
    h.advance(Duration::from_secs(60));
    let out = h.run_queue().await;
    assert_eq!(
        out,
        [(
            "ConfigMap:default/new-style".to_string(),
            ReconcileOutcome::Done
        )]
    );
    // dryRun: reported under the configured prefix, not deleted, though not labelled.
    let w = h.take_writes();
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].verb, WriteVerb::MergePatch);
    assert_eq!(
        w[0].body,
        json!({"metadata": {"annotations":
            {"cleanup.example.com/would-delete-at": "2025-01-01T00:01:00Z"}}})
    );
    assert!(h
        .get("v1", "ConfigMap", Some("default"), "new-style")
        .is_some());
    let events = take_events(&h);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (events[0].reason.as_str(), events[0].action.as_str()),
        ("Expired", "DryRun")
    );
    assert_eq!(events[0].uid.as_deref(), Some(c.uid()));
}

#[tokio::test]
async fn harness_configurations_the_janitor_refuses_stop_it_loading() {
    for (config, message) in [
        (
            json!({"ttl": "10m"}),
            "configuration refused by the plugin: invalid configuration: unknown field `ttl`, \
             expected `prefix` or `dryRun`",
        ),
        (
            json!({"prefix": "Cleanup/"}),
            "configuration refused by the plugin: prefix \"Cleanup/\": must be a DNS subdomain",
        ),
        (
            json!({"prefix": "a".repeat(254)}),
            "must be at most 253 characters, not 254",
        ),
        (json!({"dryRun": "yes"}), "invalid type: string \"yes\""),
    ] {
        let Err(e) = harness_with(config.clone()).await else {
            panic!("{config} is accepted")
        };
        let e = e.to_string();
        assert!(e.contains("janitor.wasm: "), "names the plugin: {e}");
        assert!(e.contains(message), "{config}: {e}");
    }
}

// ---- the real kubectl ---------------------------------------------------------------------------

/// The Event of a deletion outlives the object: `kubectl describe` has nothing to describe any
/// more, but `kubectl events` lists the `Expired` Event the janitor recorded about it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(kubectl),
    ignore = "needs kubectl, not installed when this was built"
)]
async fn kubectl_events_lists_the_expired_event_of_a_deleted_object() {
    let (em, rt) = setup().await;
    let dir = support::temp_dir("janitor-kubectl");
    em.write_kubeconfig(dir.join("kubeconfig"))
        .expect("kubeconfig");
    em.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "scratch"}}))
        .expect("namespace");
    let mut obj = cm("short-lived", json!({"janitor/ttl": "1s"}), json!({}));
    obj["metadata"]["namespace"] = "scratch".into();
    let created = em.create(obj).expect("create");
    assert!(
        eventually(WAIT, || em
            .get("v1", "ConfigMap", Some("scratch"), "short-lived")
            .is_none())
        .await,
        "deleted once expired"
    );

    let (line, _) = kubectl_until(&dir, &["events", "-n", "scratch"], WAIT, |l| {
        l.contains("Expired")
    })
    .await
    .unwrap_or_else(|out| panic!("kubectl events shows no Expired event:\n{out}"));
    let cells: Vec<&str> = line
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    // LAST SEEN, TYPE, REASON, OBJECT, MESSAGE
    assert_eq!(cells.len(), 5, "{line}");
    assert_eq!(
        &cells[1..4],
        ["Normal", "Expired", "ConfigMap/short-lived"],
        "{line}"
    );
    assert!(
        cells[4].starts_with("deleted ConfigMap scratch/short-lived: expired at "),
        "{line}"
    );

    // The stored Event, as `kubectl events -o json` reads it: about the deleted object (its uid),
    // reported by the janitor.
    let (ok, out, err) = kubectl(&dir, &["events", "-n", "scratch", "-o", "json"]).await;
    assert!(ok, "{err}");
    let list: Value = serde_json::from_str(&out).expect("JSON");
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{out}");
    let ev = &items[0];
    assert_eq!(ev["involvedObject"]["uid"], created["metadata"]["uid"]);
    assert_eq!(ev["reportingComponent"], "janitor");
    assert_eq!(ev["action"], "Delete");
    assert_eq!(ev["type"], "Normal");

    assert!(rt.shutdown(Duration::from_secs(5)).await);
    em.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

// ---- the host binary with a plugins file ------------------------------------------------------

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

/// The ConfigMap `default/<name>` through `client` (the emulator the host started), if any.
async fn get_cm_via(client: &kwh_client::Client, name: &str) -> Option<Value> {
    let cm = kwh_client::ApiResource::new("v1", "ConfigMap", "configmaps", true);
    match client.get(&cm, Some("default"), name).await {
        Ok(o) => Some(o.to_value().expect("JSON")),
        Err(e) if e.code() == Some(404) => None,
        Err(e) => panic!("get {name}: {e}"),
    }
}

/// A non-default `config:` in a plugins file takes effect: with `prefix: cleanup.example.com`
/// the janitor deletes what carries `cleanup.example.com/expires` and leaves `janitor/expires`
/// alone. One worker (set in the same file) reconciles in queue order, and `a-old` is listed,
/// so queued, before `z-new`: had the janitor honoured `janitor/expires`, `a-old` would be gone
/// by the time `z-new` is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_file_config_sets_the_janitor_s_prefix() {
    let dir = support::temp_dir("janitor-plugins-file");
    let plugins = dir.join("plugins.yaml");
    std::fs::write(
        &plugins,
        format!(
            "- module: {}\n  workers: 1\n  config: {{prefix: cleanup.example.com}}\n",
            example("janitor").display()
        ),
    )
    .expect("plugins file");
    let seed = dir.join("seed.yaml");
    std::fs::write(
        &seed,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a-old, namespace: default, \
         annotations: {janitor/expires: '2000-01-01T00:00:00Z'}}\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata: {name: z-new, namespace: default, \
         annotations: {cleanup.example.com/expires: '2000-01-01T00:00:00Z'}}\n",
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
    let (_, kubeconfig) = host.emulator().await;
    host.line("running; SIGINT or SIGTERM stops").await;
    host.line("deleted ConfigMap:default/z-new: expired at 2000-01-01T00:00:00Z")
        .await;
    let client = support::process::client(&kubeconfig);
    assert!(get_cm_via(&client, "z-new").await.is_none());
    assert!(
        get_cm_via(&client, "a-old").await.is_some(),
        "janitor/expires is not the configured prefix's: {}",
        host.log()
    );
    host.sigterm();
    let status = host.exit(support::process::WAIT).await;
    assert!(status.success(), "{}", host.log());
    assert!(
        !host.saw("a-old"),
        "a-old never reached the janitor's queue: {}",
        host.log()
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A configuration the janitor refuses (an unknown key: `ttl` is not one of its settings) stops
/// the janitor alone, with one line naming its file and the janitor's own message; the config
/// reloader from the same file starts and works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_config_stops_that_plugin_alone_in_one_line() {
    let dir = support::temp_dir("janitor-bad-config");
    let plugins = dir.join("plugins.yaml");
    std::fs::write(
        &plugins,
        format!(
            "- module: {}\n  config: {{ttl: 10m}}\n- module: {}\n",
            example("janitor").display(),
            example("config-reloader").display()
        ),
    )
    .expect("plugins file");
    let seed = dir.join("seed.yaml");
    std::fs::write(
        &seed,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: default, \
         annotations: {config-reloader/enabled: 'true'}}\nspec: {selector: {matchLabels: \
         {app: web}}, template: {metadata: {labels: {app: web}}, spec: {containers: \
         [{name: app, image: example.com/app:1}]}}}\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata: {name: expired, namespace: default, \
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
    let (_, kubeconfig) = host.emulator().await;
    let refused = host.line("configuration refused by the plugin").await;
    assert!(
        refused.contains(
            "janitor.wasm: configuration refused by the plugin: invalid \
             configuration: unknown field `ttl`, expected `prefix` or `dryRun`"
        ),
        "{refused}"
    );
    host.line("running; SIGINT or SIGTERM stops").await;
    // The reloader runs: it records the baseline of the opted-in Deployment.
    let client = support::process::client(&kubeconfig);
    let deploy = kwh_client::ApiResource::new("apps/v1", "Deployment", "deployments", true);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let d = client
            .get(&deploy, Some("default"), "web")
            .await
            .expect("web")
            .to_value()
            .expect("JSON");
        if d["metadata"]["annotations"]["config-reloader/observed-hash"].is_string() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the reloader records web's baseline: {}",
            host.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Nothing of the janitor runs: the expired ConfigMap stays.
    assert!(get_cm_via(&client, "expired").await.is_some());
    host.sigterm();
    let status = host.exit(support::process::WAIT).await;
    assert!(status.success(), "{}", host.log());
    // The refusal is the one line about the janitor.
    let about = host.lines_mentioning(&["janitor.wasm", "plugin=janitor"]);
    assert_eq!(about, [refused.as_str()], "{}", host.log());
    let _ = std::fs::remove_dir_all(dir);
}

// ---- scenario files through `host test` ------------------------------------------------------

#[tokio::test]
async fn scenario_files_pass_under_host_test() {
    support::scenarios::assert_example_scenarios_pass("janitor").await;
}
