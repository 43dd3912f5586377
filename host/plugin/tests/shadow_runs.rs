//! Shadow revisions in the runtime (issue "Shadow runs"): a shadow beside the live `reviser`
//! (which annotates each ConfigMap it reconciles with its revision) gets the same notifications
//! on the same shared informers, reconciles each key on its own queue only after the live
//! revision is done with it, and its writes are dry runs: an identical shadow agrees every time,
//! one that would annotate differently is a difference with its patch, and nothing it does
//! reaches the store. Over loopback HTTP against the emulator.

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use kwh_emulator::EmulatorHandle;
use kwh_plugin::backend::shadow::{Outcome, ShadowLedger};
use kwh_plugin::{Limits, PluginRuntime, PluginSpec, RuntimeOptions, UpgradeError};
use serde_json::json;
use support::cluster::{cm, emulator, eventually, get_cm, runtime_with};
use support::logs::Captured;

const WAIT: Duration = Duration::from_secs(60);
const GRACE: Duration = Duration::from_secs(10);
const KEYS: usize = 5;

fn options() -> RuntimeOptions {
    RuntimeOptions {
        limits: Limits {
            log_lines_per_second: 0,
            ..Limits::default()
        },
        ..RuntimeOptions::default()
    }
}

/// The `reviser` guest as `name`, revision `revision`, annotating what it reconciles.
fn spec(opts: &RuntimeOptions, name: &str, revision: &str) -> PluginSpec {
    PluginSpec {
        config: Arc::new(json!({"revision": revision, "name": name, "annotate": true})),
        ..PluginSpec::with_defaults(support::guests::guest("reviser"), opts)
    }
}

/// The order of `REV <rev> reconcile <key>` lines of plugin `name` and of its shadow (whose
/// lines are tagged `<name> (shadow)`) for `key`: the revisions.
fn reconciles_of(logs: &Captured, name: &str, key: &str) -> Vec<String> {
    let shadow = format!("{name} (shadow)");
    logs.lines()
        .into_iter()
        .filter(|l| l.plugin.as_deref() == Some(name) || l.plugin.as_deref() == Some(&shadow))
        .filter_map(|l| {
            let mut f = l.message.strip_prefix("REV ")?.split(' ');
            let (rev, what, k) = (f.next()?, f.next()?, f.next()?);
            (what == "reconcile" && k == key).then(|| rev.to_owned())
        })
        .collect()
}

fn annotation(em: &kwh_emulator::EmulatorHandle, name: &str) -> Option<String> {
    get_cm(em, name)?["metadata"]["annotations"]["reviser/revision"]
        .as_str()
        .map(str::to_owned)
}

/// An identical shadow of plugin `name`: every write agrees, none differs or is refused;
/// stopped again at the end.
async fn an_identical_shadow_agrees_every_time(
    rt: &PluginRuntime,
    em: &EmulatorHandle,
    opts: &RuntimeOptions,
    name: &str,
) {
    let ledger = rt
        .start_shadow(name, spec(opts, name, "a"))
        .await
        .expect("shadow starts");
    for i in 0..KEYS {
        em.create(cm(&format!("s-{i}"), json!({}))).expect("create");
    }
    assert!(
        eventually(WAIT, || (0..KEYS).all(|i| annotation(
            em,
            &format!("s-{i}")
        )
        .as_deref()
            == Some("a"))
            && ledger.agreements.load(Ordering::Relaxed) >= KEYS as u64)
        .await,
        "the live revision annotated every object and the shadow agreed: {:?}",
        ledger.differences()
    );
    assert_eq!(
        ledger.differences.load(Ordering::Relaxed),
        0,
        "{:?}",
        ledger.differences()
    );
    assert_eq!(ledger.refusals.load(Ordering::Relaxed), 0);
    assert!(rt.stop_shadow(name, GRACE).await);
    assert!(rt.shadow_ledger(name).is_none());
}

/// The shadow of plugin `name` acted on the state the live revision left: each of its
/// reconciles of t-0 read the object at `live_write`, never before it; its lines are tagged
/// as the shadow's and none is untagged.
fn assert_the_shadow_read_the_live_write(logs: &Captured, name: &str, live_write: &str) {
    let shadow_reads: Vec<String> = logs
        .lines()
        .into_iter()
        .filter(|l| l.plugin.as_deref() == Some(&format!("{name} (shadow)")))
        .filter_map(|l| {
            let rest = l.message.strip_prefix("REV b reconcile default/t-0 ")?;
            Some(rest.to_owned())
        })
        .collect();
    assert!(!shadow_reads.is_empty());
    assert!(
        shadow_reads.iter().all(|rv| *rv == live_write),
        "the shadow read {shadow_reads:?}, the live revision wrote {live_write}"
    );
    // The shadow's lines are tagged as such.
    assert!(
        logs.lines()
            .iter()
            .any(|l| l.plugin.as_deref() == Some(&format!("{name} (shadow)"))
                && l.message.starts_with("REV b ")),
        "shadow lines tagged"
    );
    assert!(
        !logs
            .lines()
            .iter()
            .any(|l| l.plugin.as_deref() == Some(name) && l.message.starts_with("REV b ")),
        "no untagged shadow line"
    );
}

/// Beside t-0's difference: the live revision's last write of the object (at `live_write`),
/// and the shadow's reconcile's log lines (attached once it has returned).
async fn assert_the_difference_carries_the_live_write_and_logs(
    ledger: &ShadowLedger,
    live_write: &str,
) {
    assert!(
        eventually(WAIT, || ledger
            .differences()
            .iter()
            .any(|d| d.name == "t-0" && d.logs.is_some()))
        .await,
        "logs attached"
    );
    let d = ledger
        .differences()
        .into_iter()
        .find(|d| d.name == "t-0")
        .expect("t-0");
    let live = d.live_write.as_ref().expect("the live revision's write");
    assert_eq!(live.op, "patch");
    assert!(live.body.contains(r#""reviser/revision":"a""#), "{live:?}");
    assert_eq!(live.resource_version, Some(live_write.to_owned()));
    assert_eq!(
        d.logs.as_deref(),
        Some(&["INFO reviser b: annotating default/t-0".to_owned()][..]),
        "{d:?}"
    );
}

/// Where people look: /statusz lists t-0's difference with its patch, live write and logs,
/// and /metrics counts the shadow's differing writes of plugin `name`.
fn assert_statusz_and_metrics_show_the_difference(rt: &PluginRuntime, name: &str) {
    let status: serde_json::Value =
        serde_json::from_str(&rt.status().render_status()).expect("statusz JSON");
    let shadow = status["plugins"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == name))
        .map(|p| p["shadow"].clone())
        .expect("the plugin");
    assert!(shadow["differences"].as_u64() >= Some(1), "{shadow}");
    let last = shadow["lastDifferences"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["name"] == "t-0"))
        .expect("t-0 listed");
    assert_eq!(last["outcome"], "changes");
    assert_eq!(last["patch"][0]["value"], "b");
    assert_eq!(last["liveWrite"]["op"], "patch", "{last}");
    assert_eq!(last["logs"][0], "INFO reviser b: annotating default/t-0");
    let metrics = rt.status().render_metrics().expect("metrics");
    assert!(
        metrics.lines().any(|l| l.starts_with(&format!(
            "plugin_shadow_writes_total{{plugin=\"{name}\",outcome=\"difference\"}}"
        ))),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_reconciles_after_the_live_revision_and_its_writes_are_only_compared() {
    let logs = support::logs::capture_global();
    let em = emulator().await;
    let opts = options();
    let mut rt = runtime_with(&em, opts.clone());
    let name = "reviser-shadowed";
    rt.start_spec(spec(&opts, name, "a"))
        .await
        .expect("live starts");
    assert!(eventually(WAIT, || rt.is_ready()).await, "ready");

    // A shadow must be of the plugin it shadows.
    let other = rt
        .start_shadow(name, spec(&opts, "someone-else", "a"))
        .await
        .expect_err("another plugin");
    assert!(matches!(other, UpgradeError::OtherPlugin { .. }), "{other}");

    // An identical shadow: every write agrees.
    an_identical_shadow_agrees_every_time(&rt, &em, &opts, name).await;

    // A shadow that would annotate with its own revision: differences, each with its patch,
    // after the live revision's reconcile of the key; nothing written.
    let ledger = rt
        .start_shadow(name, spec(&opts, name, "b"))
        .await
        .expect("shadow starts");
    let revision = em.current_resource_version();
    // The live revision's write of t-0 reaches the watches a second after its answer (a
    // lagging watch cache): the shadow must wait for it, not act on the state before it.
    em.faults()
        .lag_watches_after_next(1, Duration::from_secs(1), &["patch"])
        .expect("verb");
    em.create(cm("t-0", json!({}))).expect("create");
    assert!(
        eventually(WAIT, || ledger
            .differences()
            .iter()
            .any(|d| d.name == "t-0"))
        .await,
        "a difference for t-0"
    );
    let d = ledger
        .differences()
        .into_iter()
        .find(|d| d.name == "t-0")
        .expect("t-0");
    assert_eq!(d.op, "patch");
    assert_eq!(d.key.as_deref(), Some("default/t-0"));
    assert_eq!(
        d.outcome,
        Outcome::Changes(json!([
            {"op": "replace", "path": "/metadata/annotations/reviser~1revision", "value": "b"}
        ])),
        "{d:?}"
    );
    let order = reconciles_of(&logs, name, "default/t-0");
    assert_eq!(
        order.first().map(String::as_str),
        Some("a"),
        "live first: {order:?}"
    );
    assert!(order.iter().any(|r| r == "b"), "{order:?}");
    // The shadow acted on the state the live revision left: each of its reconciles read the
    // object at the live annotation's revision (the create's revision + 1), never before it.
    let live_write = (revision + 2).to_string();
    assert_the_shadow_read_the_live_write(&logs, name, &live_write);
    // The store holds the live revision's write and nothing of the shadow's: the create and
    // the live annotation are the object's only revisions (the store's next ones are the
    // shadow's Event about the difference, written by the host, not by the shadow).
    assert_eq!(annotation(&em, "t-0").as_deref(), Some("a"));
    let rv = get_cm(&em, "t-0").expect("t-0")["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse::<u64>().ok());
    assert_eq!(rv, Some(revision + 2));

    // Beside the difference: the live revision's last write of the object, and the shadow's
    // reconcile's log lines (attached once it has returned).
    assert_the_difference_carries_the_live_write_and_logs(&ledger, &live_write).await;

    // Where people look: /statusz and /metrics.
    assert_statusz_and_metrics_show_the_difference(&rt, name);

    // Removing the live plugin takes its shadow along.
    assert!(rt.remove(name, GRACE).await);
    assert!(rt.shadow_ledger(name).is_none());
    assert!(rt.shutdown(GRACE).await, "clean shutdown");
}

/// A plugin spec's shadow (`shadow:` of a plugins-file entry): started with the plugin, and
/// promoted without a hand once it has run `promoteAfter`'s reconciles and time with no
/// difference; a spec still naming the promoted shadow keeps it; a shadow that differs is never
/// promoted automatically.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_that_agrees_is_promoted_after_its_threshold_and_one_that_differs_is_not() {
    let logs = support::logs::capture_global();
    let em = emulator().await;
    let opts = options();
    let mut rt = runtime_with(&em, opts.clone());
    let name = "reviser-promoted";
    let with_shadow = |revision: &str, reconciles: u64| {
        let live = spec(&opts, name, "a");
        let shadow = spec(&opts, name, revision);
        PluginSpec {
            shadow: Some(Arc::new(kwh_plugin::ShadowSpec {
                path: shadow.path,
                config: shadow.config,
                promote_after: Some(kwh_plugin::PromoteAfter {
                    reconciles,
                    after: Duration::from_secs(1),
                }),
            })),
            ..live
        }
    };
    let (_, how) = rt.apply(with_shadow("a", 3), GRACE).await.expect("applied");
    assert!(matches!(how, kwh_plugin::Applied::Started(_)), "{how:?}");
    let ledger = rt.shadow_ledger(name).expect("its shadow runs");
    for i in 0..KEYS {
        em.create(cm(&format!("p-{i}"), json!({}))).expect("create");
    }
    assert!(
        eventually(WAIT, || ledger.agreements.load(Ordering::Relaxed) >= 3).await,
        "the shadow agreed"
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if rt.promote_due(GRACE).await == [name.to_owned()] {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never promoted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        rt.shadow_ledger(name).is_none(),
        "the shadow became the plugin"
    );
    let running = rt.plugin(name).expect("runs");
    assert_eq!(running.revisions(), 2, "promoted by an upgrade");
    assert!(running.spec().shadow.is_none());
    // The same spec again: the promotion holds, no shadow starts again.
    let (_, how) = rt.apply(with_shadow("a", 3), GRACE).await.expect("applied");
    assert_eq!(how, kwh_plugin::Applied::Kept);
    assert!(rt.shadow_ledger(name).is_none());

    // A shadow that differs: never promoted, and it says why.
    let (_, how) = rt.apply(with_shadow("b", 1), GRACE).await.expect("applied");
    assert_eq!(how, kwh_plugin::Applied::Kept, "only the shadow changed");
    let ledger = rt.shadow_ledger(name).expect("the new shadow runs");
    em.create(cm("q-0", json!({}))).expect("create");
    assert!(
        eventually(WAIT, || ledger.differences.load(Ordering::Relaxed) >= 1).await,
        "a difference"
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(rt.promote_due(GRACE).await.is_empty(), "not promoted");
    assert!(rt.shadow_ledger(name).is_some());
    assert!(
        logs.lines().iter().any(|l| l
            .message
            .contains("automatic promotion of the shadow stopped")),
        "said why"
    );
    assert!(rt.shutdown(GRACE).await, "clean shutdown");
}
