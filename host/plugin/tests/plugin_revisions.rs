//! Plugins changed while the host runs (issue "Plugins as managed workloads"): a running plugin
//! upgraded to a new revision, a broken revision refused while the running one carries on, a
//! plugin removed. Over loopback HTTP against the emulator, with the `reviser` test guest, whose
//! every handler call and reconcile prints which revision took it.
//!
//! What an upgrade must keep (spec 4.1, 4.5: one reflector per informer, handlers registered on
//! a running informer see its cache, not a relist): no relist, every notification delivered to
//! exactly one revision, pending keys reconciled.

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kwh_informer::factory::InformerKey;
use kwh_plugin::{PluginRuntime, PluginSpec, RuntimeOptions, UpgradeError};
use serde_json::json;
use support::cluster::{cm, emulator, eventually, every_line, runtime_with};
use support::logs::Captured;

const WAIT: Duration = Duration::from_secs(60);
const GRACE: Duration = Duration::from_secs(10);

/// Every line counts here: no log budget.
fn options() -> RuntimeOptions {
    every_line()
}

/// The `reviser` guest as revision `revision`, with `config` merged in.
fn spec(rt_opts: &RuntimeOptions, revision: &str, config: serde_json::Value) -> PluginSpec {
    let mut c = json!({"revision": revision});
    if let (Some(c), Some(extra)) = (c.as_object_mut(), config.as_object()) {
        c.extend(extra.clone());
    }
    PluginSpec {
        config: Arc::new(c),
        ..PluginSpec::with_defaults(support::guests::guest("reviser"), rt_opts)
    }
}

/// `(revision, what, key, rv)` of every `REV` line of the plugin named `name`, in order.
fn rev_lines(logs: &Captured, name: &str) -> Vec<(String, String, String, String)> {
    logs.lines()
        .into_iter()
        .filter(|l| l.plugin.as_deref() == Some(name))
        .filter_map(|l| {
            let mut f = l.message.strip_prefix("REV ")?.split(' ');
            let t = (f.next()?, f.next()?, f.next()?, f.next()?);
            Some((t.0.into(), t.1.into(), t.2.into(), t.3.into()))
        })
        .collect()
}

/// Whether revision `rev` of plugin `name` printed `what` for `key` (any resourceVersion).
fn said(logs: &Captured, name: &str, rev: &str, what: &str, key: &str) -> bool {
    rev_lines(logs, name)
        .iter()
        .any(|l| (rev.is_empty() || l.0 == rev) && l.1 == what && l.2 == key)
}

fn relists(rt: &PluginRuntime, resource: &str) -> Option<u64> {
    let key = InformerKey::new(resource, None, None, None);
    Some(
        rt.factory()
            .informer(&key)?
            .lister_watcher()
            .counters()
            .relists(),
    )
}

/// A plugin with its own name, so that tests sharing the process's log capture tell their
/// lines apart.
fn named(name: &str) -> serde_json::Value {
    json!({ "name": name })
}

/// Updates ConfigMaps `u-<n % objects>` one at a time from another task, `updates` times
/// (yielding every 50), so that an upgrade happens among them; the `(key, rv)` of each.
fn spawn_updates(
    em: &kwh_emulator::EmulatorHandle,
    objects: usize,
    updates: usize,
) -> tokio::task::JoinHandle<Vec<(String, String)>> {
    let em = em.clone();
    tokio::spawn(async move {
        let mut made = Vec::with_capacity(updates);
        for n in 1..=updates {
            let i = n % objects;
            let o = em
                .update(cm(&format!("u-{i}"), json!({"n": n.to_string()})))
                .expect("update");
            let rv = o["metadata"]["resourceVersion"]
                .as_str()
                .expect("rv")
                .to_owned();
            made.push((format!("default/u-{i}"), rv));
            if n % 50 == 0 {
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        made
    })
}

/// Every update of `made` reached exactly one revision of plugin `name`, each revision saw
/// some, and once b took an update a took none.
fn assert_each_update_reached_exactly_one_revision(
    logs: &Captured,
    name: &str,
    made: &[(String, String)],
) {
    let mut by_update: HashMap<(String, String), Vec<String>> = HashMap::new();
    for (rev, what, key, rv) in rev_lines(logs, name) {
        if what == "update" {
            by_update.entry((key, rv)).or_default().push(rev);
        }
    }
    for (key, rv) in made {
        let got = by_update
            .get(&(key.clone(), rv.clone()))
            .cloned()
            .unwrap_or_default();
        assert_eq!(got.len(), 1, "update {key}@{rv} reached {got:?}");
    }
    assert_eq!(by_update.len(), made.len(), "no update delivered twice");
    let (a, b): (Vec<_>, Vec<_>) = by_update.values().partition(|r| r[0] == "a");
    assert!(
        !a.is_empty() && !b.is_empty(),
        "a: {}, b: {}",
        a.len(),
        b.len()
    );
    // Nothing after the switch reached a: once b took an update, a took none.
    let order: Vec<_> = rev_lines(logs, name)
        .into_iter()
        .filter(|l| l.1 == "update")
        .map(|l| l.0)
        .collect();
    let first_b = order.iter().position(|r| r == "b").expect("b took updates");
    assert!(
        order[first_b..].iter().all(|r| r == "b"),
        "a took an update after b"
    );
}

/// After b's first line, a finishes at most the reconciles its two workers held at the
/// switch, and takes no other key.
fn assert_a_only_finished_what_it_held(logs: &Captured, name: &str) {
    let lines = rev_lines(logs, name);
    let first_b = lines.iter().position(|l| l.0 == "b").expect("b ran");
    let a_after: Vec<_> = lines[first_b..].iter().filter(|l| l.0 == "a").collect();
    assert!(
        a_after.len() <= 2 && a_after.iter().all(|l| l.1 == "reconcile"),
        "a after the switch: {a_after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_under_updates_hands_every_notification_to_exactly_one_revision_without_a_relist(
) {
    let logs = support::logs::capture_global();
    let em = emulator().await;
    let opts = options();
    let mut rt = runtime_with(&em, opts.clone());
    let name = "reviser-upgrade";
    const OBJECTS: usize = 20;
    const UPDATES: usize = 600;
    for i in 0..OBJECTS {
        em.create(cm(&format!("u-{i}"), json!({"n": "0"})))
            .expect("create");
    }
    rt.start_spec(spec(&opts, "a", named(name)))
        .await
        .expect("starts");
    assert!(eventually(WAIT, || rt.is_ready()).await, "ready");
    let lists_before = relists(&rt, "v1/configmaps").expect("informer");

    // Updates one at a time from another task, while the plugin is upgraded from a to b.
    let writer = spawn_updates(&em, OBJECTS, UPDATES);
    // Upgraded once some of the updates have reached revision a.
    assert!(
        eventually(WAIT, || rev_lines(&logs, name)
            .iter()
            .filter(|l| l.1 == "update")
            .count()
            >= UPDATES / 4)
        .await,
        "revision a sees updates"
    );
    rt.upgrade(name, spec(&opts, "b", named(name)), GRACE)
        .await
        .expect("upgrade to b");
    let made = writer.await.expect("writer");

    // Every update reaches exactly one revision; each revision saw some.
    let seen_all = || {
        let seen: Vec<_> = rev_lines(&logs, name)
            .into_iter()
            .filter(|l| l.1 == "update")
            .collect();
        seen.len() >= made.len()
    };
    assert!(eventually(WAIT, seen_all).await, "every update delivered");
    assert_each_update_reached_exactly_one_revision(&logs, name, &made);

    // The last version of every object is reconciled by b; nothing was relisted.
    let last: HashMap<_, _> = made.iter().cloned().collect();
    assert!(
        eventually(WAIT, || {
            let lines = rev_lines(&logs, name);
            last.iter().all(|(k, rv)| {
                lines
                    .iter()
                    .any(|l| l.0 == "b" && l.1 == "reconcile" && &l.2 == k && &l.3 == rv)
            })
        })
        .await,
        "every object's last version reconciled by b"
    );
    // After b's first line, a finishes at most the reconciles its two workers held at the
    // switch, and takes no other key.
    assert_a_only_finished_what_it_held(&logs, name);
    assert_eq!(
        relists(&rt, "v1/configmaps"),
        Some(lists_before),
        "no relist"
    );
    let p = rt.plugin(name).expect("running");
    assert_eq!(p.revisions(), 2);
    assert_eq!(p.spec().config["revision"], "b");
    assert!(rt.is_ready(), "{}", rt.status().readiness().1);
    assert!(rt.shutdown(GRACE).await, "clean shutdown");
}

/// A reconcile that outlives the upgrade's grace period is abandoned (its worker aborted inside
/// the guest call); its key is not left "processing" in the workqueue, where no revision would
/// ever take it again, but queued for the new revision, which reconciles it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_that_outlives_the_grace_period_leaves_its_key_to_the_new_revision() {
    let logs = support::logs::capture_global();
    let em = emulator().await;
    let mut opts = options();
    // Far longer than the test: the reconcile ends only by being abandoned.
    opts.limits.reconcile_deadline = Duration::from_secs(3600);
    let mut rt = runtime_with(&em, opts.clone());
    let name = "reviser-stranded";
    em.create(cm("slow", json!({}))).expect("create");
    rt.start_spec(spec(
        &opts,
        "a",
        json!({"name": name, "slowKey": "default/slow", "slowMs": 3_600_000}),
    ))
    .await
    .expect("starts");
    // Its line comes first, then the reconcile runs on: a's worker holds the key from here.
    assert!(
        eventually(WAIT, || said(&logs, name, "a", "reconcile", "default/slow")).await,
        "a reconciles the slow key"
    );
    rt.upgrade(
        name,
        spec(&opts, "b", named(name)),
        Duration::from_millis(200),
    )
    .await
    .expect("upgrade to b");
    assert!(
        eventually(WAIT, || said(&logs, name, "b", "reconcile", "default/slow")).await,
        "the abandoned key is reconciled by b"
    );
    let p = rt.plugin(name).expect("running");
    assert!(
        eventually(WAIT, || p.queue().processing().is_empty()).await,
        "no key left processing: {:?}",
        p.queue().processing()
    );
    assert!(rt.shutdown(GRACE).await, "clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_revision_leaves_the_running_one_and_watches_come_and_go_with_the_manifest() {
    let logs = support::logs::capture_global();
    let em = emulator().await;
    let opts = options();
    let mut rt = runtime_with(&em, opts.clone());
    let name = "reviser-broken";
    rt.start_spec(spec(&opts, "a", named(name)))
        .await
        .expect("starts");
    assert!(eventually(WAIT, || rt.is_ready()).await, "ready");
    assert_eq!(rt.factory().len(), 1, "one informer: ConfigMaps");

    // A configuration its validate-config refuses: the upgrade fails, a runs on.
    let e = rt
        .upgrade(name, spec(&opts, "bad", named(name)), GRACE)
        .await
        .expect_err("refused");
    assert!(matches!(e, UpgradeError::Load(_)), "{e}");
    assert!(e.to_string().contains("revision bad is refused"), "{e}");
    // Not a component at all: likewise, one line naming the file.
    let garbage = std::env::temp_dir().join(format!("reviser-garbage-{}.wasm", std::process::id()));
    std::fs::write(&garbage, b"not wasm").expect("write");
    let e = rt
        .upgrade(name, PluginSpec::with_defaults(&garbage, &opts), GRACE)
        .await
        .expect_err("not a component");
    assert!(
        e.to_string().contains(&garbage.display().to_string()),
        "{e}"
    );
    assert!(!e.to_string().contains('\n'), "{e}");
    // Another plugin's module is not an upgrade of this one.
    let e = rt
        .upgrade(name, spec(&opts, "c", named("someone-else")), GRACE)
        .await
        .expect_err("other plugin");
    assert!(matches!(e, UpgradeError::OtherPlugin { .. }), "{e}");
    // /statusz: the running revision, its digest, and the last one that failed.
    let status: serde_json::Value =
        serde_json::from_str(&rt.status().render_status()).expect("statusz");
    let p = &status["plugins"][0];
    assert_eq!(p["revision"], 1, "{p}");
    assert!(
        p["digest"]
            .as_str()
            .is_some_and(|d| d.starts_with("sha256:") && d.len() == 71),
        "{p}"
    );
    let failed = p["failedRevision"]["error"].as_str().unwrap_or_default();
    assert!(
        failed.contains("its manifest names plugin someone-else"),
        "{p}"
    );
    em.create(cm("b-1", json!({}))).expect("create");
    assert!(
        eventually(WAIT, || said(&logs, name, "a", "reconcile", "default/b-1")).await,
        "revision a still reconciles"
    );
    assert_eq!(rt.plugin(name).expect("running").revisions(), 1);

    // A revision that also watches Secrets: a second informer starts, its cache reaches b.
    em.create(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "s-1", "namespace": "default"}}))
        .expect("secret");
    rt.upgrade(
        name,
        spec(&opts, "b", json!({"name": name, "secrets": true})),
        GRACE,
    )
    .await
    .expect("upgrade to b");
    assert_eq!(rt.factory().len(), 2, "a Secret informer joined");
    let status: serde_json::Value =
        serde_json::from_str(&rt.status().render_status()).expect("statusz");
    assert_eq!(status["plugins"][0]["revision"], 2, "{status}");
    assert!(
        status["plugins"][0]["failedRevision"].is_null(),
        "a success clears the failure: {status}"
    );
    assert!(
        eventually(WAIT, || said(&logs, name, "b", "add", "default/s-1")).await,
        "b sees the Secret informer's cache"
    );
    assert!(eventually(WAIT, || rt.is_ready()).await, "ready again");
    let cm_lists = relists(&rt, "v1/configmaps");

    // Back to ConfigMaps only: the Secret informer had no other user, it stops.
    rt.upgrade(name, spec(&opts, "c", named(name)), GRACE)
        .await
        .expect("upgrade to c");
    assert_eq!(rt.factory().len(), 1, "the Secret informer stopped");
    assert_eq!(
        relists(&rt, "v1/configmaps"),
        cm_lists,
        "no ConfigMap relist"
    );
    em.create(cm("c-1", json!({}))).expect("create");
    assert!(
        eventually(WAIT, || said(&logs, name, "c", "reconcile", "default/c-1")).await,
        "revision c reconciles"
    );
    assert_eq!(rt.plugin(name).expect("running").revisions(), 3);
    let _ = std::fs::remove_file(&garbage);
    assert!(rt.shutdown(GRACE).await, "clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_plugin_stops_the_informers_only_it_used_and_leaves_the_others() {
    let logs = support::logs::capture_global();
    let em = emulator().await;
    let opts = options();
    let mut rt = runtime_with(&em, opts.clone());
    let (one, two) = ("reviser-remove-1", "reviser-remove-2");
    rt.start_spec(spec(&opts, "a", json!({"name": one, "secrets": true})))
        .await
        .expect("starts");
    rt.start_spec(spec(&opts, "a", named(two)))
        .await
        .expect("starts");
    assert!(eventually(WAIT, || rt.is_ready()).await, "ready");
    assert_eq!(rt.factory().len(), 2, "ConfigMaps (shared) and Secrets");
    let cm_lists = relists(&rt, "v1/configmaps");

    assert!(rt.remove(one, GRACE).await, "removed cleanly");
    assert!(rt.plugin(one).is_none());
    assert_eq!(rt.factory().len(), 1, "the Secret informer stopped");
    assert!(
        relists(&rt, "v1/secrets").is_none(),
        "and is gone from the factory"
    );
    assert_eq!(relists(&rt, "v1/configmaps"), cm_lists, "ConfigMaps kept");
    assert!(!rt.remove(one, GRACE).await, "not running any more");
    assert!(
        !rt.status().render_status().contains(one),
        "gone from /statusz"
    );

    em.create(cm("r-1", json!({}))).expect("create");
    assert!(
        eventually(WAIT, || said(&logs, two, "", "reconcile", "default/r-1")).await,
        "the other plugin carries on"
    );
    assert!(
        !rev_lines(&logs, one).iter().any(|l| l.2 == "default/r-1"),
        "the removed one took nothing"
    );
    // The same plugin can be added again (its queue's metrics name is free).
    rt.start_spec(spec(&opts, "a", named(one)))
        .await
        .expect("added again");
    assert!(eventually(WAIT, || rt.is_ready()).await, "ready");
    // Removed and added again at once, many times: the removed revision's queue may still be
    // held for a moment (by a handler the informer's listener task has not let go of yet) and
    // gives its name over. Before, the `managed` benchmark's release build met a start refused
    // with `DuplicateName` about once in 60 such restarts; this debug-build loop did not
    // (`kwh-informer`'s metrics unit test holds the rule itself).
    for _ in 0..30 {
        assert!(rt.remove(one, GRACE).await, "removed");
        rt.start_spec(spec(&opts, "a", named(one)))
            .await
            .expect("added again at once");
    }
    // The same with the benchmark's SDK guest, whose handlers hand over.
    let sdk = PluginSpec::with_defaults(support::guests::guest("bench-sdk"), &opts);
    for _ in 0..30 {
        rt.start_spec(sdk.clone()).await.expect("added at once");
        assert!(rt.remove("bench-sdk-00", GRACE).await, "removed");
    }
    assert!(eventually(WAIT, || rt.is_ready()).await, "ready");
    assert!(rt.shutdown(GRACE).await, "clean shutdown");
}

/// A plugin waiting for a kind no server serves yet (its CRD not applied) is given up when it
/// is removed: it must not start later, after its entry is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_plugin_that_waits_for_its_kinds_gives_it_up() {
    let em = emulator().await;
    let rt = {
        let mut rt = runtime_with(&em, options());
        let started = rt
            .start(&support::guests::guest("badkind"))
            .await
            .expect("waits");
        assert!(
            matches!(started, kwh_plugin::Started::Waiting(_)),
            "{started:?}"
        );
        rt
    };
    assert_eq!(rt.waiting().len(), 1, "{:?}", rt.waiting());
    let name = rt.waiting()[0].0.clone();
    assert!(rt.remove(&name, GRACE).await, "a waiting plugin is removed");
    assert!(rt.waiting().is_empty(), "{:?}", rt.waiting());
    assert!(
        !rt.status().render_status().contains(&name),
        "gone from /statusz"
    );
    assert!(!rt.remove(&name, GRACE).await, "nothing left to remove");
    assert!(rt.shutdown(GRACE).await, "clean shutdown");
}
