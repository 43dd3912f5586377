//! End to end: the plugin runtime against the emulator over HTTP, with real test guests.

mod support;

use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kwh_plugin::{Limits, RuntimeOptions, StartError};
use serde_json::json;
use support::cluster::{
    cm, emulator, eventually, get_cm, http_get, quick_retries, runtime, runtime_with, start,
    widget_crd,
};
use support::guests::guest;
use tokio::io::{AsyncBufReadExt, BufReader};

const T: Duration = Duration::from_secs(120);
const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn handlers_see_changes_in_order_and_reconcile_writes_reach_the_emulator() {
    // Global: the lines are picked out by the object name only this test uses.
    let logs = support::logs::capture_global();
    let em = emulator().await;
    let mut rt = runtime(&em, Limits::default(), false);
    start(&mut rt, &["copier"]).await;
    assert!(em.wait_for_open_watches("/configmaps", 1, WAIT).await);

    em.create(cm("a", json!({"v": "1"}))).expect("create");
    assert!(
        eventually(WAIT, || get_cm(&em, "a-copy")
            .is_some_and(|c| c["data"]["v"] == "1"))
        .await,
        "the copy is created"
    );
    let mut a = get_cm(&em, "a").expect("a");
    a["data"]["v"] = "2".into();
    em.update(a).expect("update");
    assert!(
        eventually(WAIT, || get_cm(&em, "a-copy")
            .is_some_and(|c| c["data"]["v"] == "2"))
        .await,
        "the copy follows the update"
    );
    em.delete("v1", "ConfigMap", Some("default"), "a")
        .expect("delete");
    assert!(
        eventually(WAIT, || get_cm(&em, "a-copy").is_none()).await,
        "the copy is deleted with its source"
    );
    let reconciles = rt.plugins()[0]
        .reconcile_stats()
        .total
        .load(Ordering::Relaxed);
    assert!(
        reconciles >= 3,
        "one reconcile per change at least: {reconciles}"
    );

    let events: Vec<String> = logs
        .lines()
        .into_iter()
        .filter(|l| l.target == "plugin::guest" && l.plugin.as_deref() == Some("copier"))
        .map(|l| l.message)
        .filter(|m| m.starts_with("event ") && m.contains(" default/a "))
        .collect();
    assert_eq!(
        events,
        [
            "event add default/a v=1",
            "event update default/a v=1->2",
            "event delete default/a v=2 tombstone=false",
        ],
        "handlers see each change once, in order, with the right old and new objects"
    );
    assert!(rt.shutdown(Duration::from_secs(5)).await);
    em.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trapping_handler_is_logged_and_its_instance_replaced() {
    let em = emulator().await;
    let mut rt = runtime(&em, Limits::default(), false);
    start(&mut rt, &["copier"]).await;
    em.create(cm("handler-panic", json!({}))).expect("create");
    let copier = rt.plugins()[0].plugin().clone();
    let running = rt.plugins()[0].clone();
    let dispatcher = || running.dispatcher();
    // Every attempt (the first and two retries on fresh instances) traps; then it is dropped.
    assert!(eventually(WAIT, || dispatcher().dropped.load(Ordering::Relaxed) == 1).await);
    assert_eq!(dispatcher().failures.load(Ordering::Relaxed), 3);
    assert_eq!(dispatcher().retries.load(Ordering::Relaxed), 2);
    assert_eq!(copier.stats().traps.load(Ordering::Relaxed), 3);
    // The next notification reaches a fresh dispatch instance.
    em.create(cm("after", json!({"v": "1"}))).expect("create");
    assert!(eventually(WAIT, || get_cm(&em, "after-copy").is_some()).await);
    assert_eq!(dispatcher().failures.load(Ordering::Relaxed), 3);
    assert!(
        !rt.plugins()[0].health().is_quarantined(),
        "3 failures are below the default 5"
    );
    assert!(
        get_cm(&em, "handler-panic-copy").is_none(),
        "the failed add enqueued nothing"
    );
    assert!(
        rt.shutdown(Duration::from_secs(5)).await,
        "every reconcile finished within the grace period"
    );
    em.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_plugins_share_one_watch_a_looping_guest_hits_its_deadline_and_undeclared_writes_fail()
{
    let em = emulator().await;
    // Long enough that an attempt caught as it starts is still running 50 ms later.
    let limits = Limits {
        reconcile_deadline: Duration::from_millis(1000),
        ..Limits::default()
    };
    let mut rt = runtime(&em, limits, false);
    start(&mut rt, &["copier", "looper"]).await;
    assert!(em.wait_for_open_watches("/configmaps", 1, WAIT).await);
    assert_eq!(rt.factory().len(), 1, "one informer for both plugins");
    assert_eq!(em.stats().open_watches.get("/configmaps"), Some(&1));

    em.create(cm("b", json!({"v": "1", "secret": "yes"})))
        .expect("create");
    let looper = rt.plugins()[1].plugin().clone();
    assert_eq!(looper.name(), "looper");
    assert!(
        eventually(WAIT, || looper
            .stats()
            .deadline_hits
            .load(Ordering::Relaxed)
            >= 1)
        .await,
        "the looping reconcile is stopped at its deadline"
    );
    assert!(
        eventually(WAIT, || get_cm(&em, "b-copy").is_some()).await,
        "the other plugin carries on"
    );
    let copy = get_cm(&em, "b-copy").expect("copy");
    assert_eq!(
        copy["data"]["secretResult"], "403 Forbidden",
        "a write to an undeclared kind is refused with a 403 the guest sees"
    );
    assert!(em.get("v1", "Secret", Some("default"), "b").is_none());

    // After the deadline (and the replacement of the looper's instance) changes still flow.
    em.create(cm("c", json!({"v": "1"}))).expect("create");
    assert!(eventually(WAIT, || get_cm(&em, "c-copy").is_some()).await);
    assert_eq!(em.stats().open_watches.get("/configmaps"), Some(&1));
    // A shutdown whose grace period ends while the looper's key is in flight reports it. The
    // stop starts right after an attempt has begun (the previous one just hit its deadline, the
    // key is being processed again), so that attempt outlives a 50 ms grace period.
    let looper_queue = rt.plugins()[1].queue().clone();
    let hits = looper.stats().deadline_hits.load(Ordering::Relaxed);
    assert!(
        eventually(WAIT, || looper
            .stats()
            .deadline_hits
            .load(Ordering::Relaxed)
            > hits)
        .await
    );
    assert!(
        eventually(WAIT, || looper_queue.processing()
            == [std::sync::Arc::<str>::from("spin")])
        .await,
        "the looper's next attempt starts"
    );
    assert!(
        !rt.shutdown(Duration::from_millis(50)).await,
        "a reconcile still running when the grace period ends makes the stop unclean"
    );
    em.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_after_is_honoured_and_errors_back_off() {
    let em = emulator().await;
    let mut rt = runtime(&em, Limits::default(), false);
    start(&mut rt, &["copier"]).await;
    em.create(cm("r", json!({"requeue-ms": "400"})))
        .expect("create");
    let running = rt.plugins()[0].clone();
    let stats = || running.reconcile_stats();
    let n = || stats().requeue_after.load(Ordering::Relaxed);
    assert!(eventually(WAIT, || n() >= 1).await);
    let first = Instant::now();
    let seen = n();
    assert!(eventually(WAIT, || n() > seen).await);
    let gap = first.elapsed();
    // The delaying queue never hands the key out early (spec 5.5), and its timer fires when
    // due: the gap is the 400 ms, one reconcile (an apply over loopback) and this test's 10 ms
    // polling at each end, with room for a loaded 2-core machine; not a second more.
    assert!(
        gap >= Duration::from_millis(390) && gap < Duration::from_millis(1000),
        "requeued after {gap:?}, asked for 400ms"
    );

    em.create(cm("f", json!({"fail": "yes"}))).expect("create");
    let queue = rt.plugins()[0].queue().clone();
    let key: std::sync::Arc<str> = "default/f".into();
    assert!(
        eventually(WAIT, || queue.num_requeues(&key) >= 4).await,
        "a failing key is retried with backoff"
    );
    assert!(stats().errors.load(Ordering::Relaxed) >= 4);
    assert!(
        rt.shutdown(Duration::from_secs(5)).await,
        "every reconcile finished within the grace period"
    );
    em.shutdown().await;
}

/// A plugin started before its CRD is installed waits (unready, saying for what), the others
/// run; once the CRD is created it starts by itself and its handlers see widgets. With
/// fail-fast the unresolvable kind stops the start instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_whose_kind_is_not_served_yet_waits_and_starts_once_its_crd_is_installed() {
    let em = emulator().await;
    let mut rt = runtime_with(&em, quick_retries(RuntimeOptions::default()));
    let bad = guest("badkind");
    let failed = tokio::time::timeout(T, rt.start_all(&[bad.clone(), guest("copier")]))
        .await
        .expect("in time")
        .expect("not fail-fast");
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(rt.plugins().len(), 1, "the other plugin starts at once");
    let waiting = rt.waiting();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(waiting[0].0, "badkind");
    assert!(
        waiting[0]
            .1
            .starts_with("cannot resolve kind Widget (example.com/v1): 404"),
        "{waiting:?}"
    );
    let status = rt.status();
    let (ready, why) = status.readiness();
    assert!(!ready);
    assert!(
        why.contains("plugin badkind: not started: cannot resolve kind Widget (example.com/v1)"),
        "{why}"
    );
    // Several retries pass while the kind is not served; it keeps waiting.
    let attempts = || {
        let doc: serde_json::Value =
            serde_json::from_str(&status.render_status()).expect("statusz is JSON");
        doc["plugins"][0]["startAttempts"].as_u64().unwrap_or(0)
    };
    assert!(eventually(WAIT, || attempts() >= 3).await, "retried");
    let doc: serde_json::Value = serde_json::from_str(&status.render_status()).expect("JSON");
    assert_eq!(doc["plugins"][0]["name"], "badkind");
    assert_eq!(doc["plugins"][0]["state"], "waiting");
    assert!(
        doc["plugins"][0]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("cannot resolve kind Widget (example.com/v1): 404")),
        "{doc}"
    );
    assert_eq!(rt.waiting().len(), 1);

    em.create(widget_crd()).expect("CRD created");
    assert!(
        eventually(WAIT, || rt.plugins().len() == 2 && rt.is_ready()).await,
        "started by itself once discovery serves the kind: {}",
        status.readiness().1
    );
    assert!(rt.waiting().is_empty());
    assert_eq!(status.readiness(), (true, "ok\n".to_string()));
    let badkind = rt.plugins()[1].clone();
    assert_eq!(badkind.plugin().name(), "badkind");
    em.create(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w1", "namespace": "default"}}))
        .expect("widget");
    assert!(
        eventually(WAIT, || badkind
            .dispatcher()
            .delivered
            .load(Ordering::Relaxed)
            >= 1)
        .await,
        "its watch is live"
    );
    assert!(rt.shutdown(Duration::from_secs(5)).await, "clean stop");
    em.shutdown().await;

    // Fail-fast: the unresolvable kind is the start's error.
    let em = emulator().await;
    let mut rt = runtime(&em, Limits::default(), true);
    let r = tokio::time::timeout(T, rt.start_all(&[bad.clone(), guest("copier")]))
        .await
        .expect("in time");
    let Err(e) = r else {
        panic!("fail-fast returns the error")
    };
    assert!(matches!(e, StartError::Resolve { .. }), "{e}");
    assert!(
        e.to_string().starts_with(&format!(
            "plugin {}: cannot resolve kind Widget (example.com/v1)",
            bad.display()
        )),
        "{e}"
    );
    assert!(
        rt.plugins().is_empty() && rt.waiting().is_empty(),
        "fail-fast stops at the first failure"
    );
    assert!(rt.shutdown(Duration::from_secs(5)).await);
    em.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_metrics_and_readiness_and_drains_on_sigterm() {
    let copier = guest("copier");
    let seed = support::temp_dir("seed").join("seed.yaml");
    std::fs::write(
        &seed,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: seeded, namespace: default}\ndata: {v: '1'}\n",
    )
    .expect("seed");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_host"))
        .arg("--emulator")
        .arg(&seed)
        .arg("--plugin")
        .arg(&copier)
        .args(["--metrics-addr", "127.0.0.1:0", "--grace-period", "10"])
        .arg("--cache-dir")
        .arg(std::env::temp_dir().join("kube-wasm-host-test-cache"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn host");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut emulator_url = None;
    let mut metrics = None;
    tokio::time::timeout(T, async {
        while let Some(l) = lines.next_line().await.expect("read") {
            if let Some(u) = l.strip_prefix("emulator listening on http://") {
                emulator_url = Some(u.to_string());
            }
            if let Some(m) = l.strip_prefix("metrics on http://") {
                metrics = m.strip_suffix("/metrics").map(str::to_string);
                break;
            }
        }
    })
    .await
    .expect("the host prints its addresses");
    let metrics = metrics.expect("metrics address");
    assert!(emulator_url.is_some());
    assert_eq!(http_get(&metrics, "/healthz").await.0, 200);
    let ready = tokio::time::timeout(WAIT, async {
        while http_get(&metrics, "/readyz").await.0 != 200 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(ready.is_ok(), "ready once the informers synced");
    // The seeded object gets reconciled, and the `kube-root-ca.crt` ConfigMap of each of the
    // four namespaces a cluster starts with (the namespace controller's): the metrics show five.
    let body = tokio::time::timeout(WAIT, async {
        loop {
            let (_, body) = http_get(&metrics, "/metrics").await;
            if body.contains("plugin_reconcile_total{plugin=\"copier\"} 5") {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a reconcile is counted");
    assert!(
        body.contains("workqueue_adds_total{name=\"copier\"}"),
        "{body}"
    );
    assert!(body.contains("plugin_guest_deadline_hits_total{plugin=\"copier\"} 0"));
    assert!(body.contains("plugin_reconcile_duration_seconds_count{plugin=\"copier\"} 5"));
    assert!(body.contains("plugin_informers_synced{plugin=\"copier\"} 1"));
    assert!(
        body.contains("informer_relists_total{informer=\"v1/configmaps|||\"} 0"),
        "{body}"
    );

    let pid = child.id().expect("pid").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("exits within the grace period")
        .expect("wait");
    assert!(status.success(), "SIGTERM is a clean exit: {status:?}");
}

#[tokio::test]
async fn readiness_waits_for_plugins_and_unknown_paths_are_404() {
    let em = emulator().await;
    let rt = runtime(&em, Limits::default(), false);
    let (addr, task) = kwh_plugin::ops::serve("127.0.0.1:0".parse().expect("addr"), rt.status())
        .await
        .expect("serve");
    let addr = addr.to_string();
    assert_eq!(http_get(&addr, "/healthz").await.0, 200);
    assert_eq!(
        http_get(&addr, "/readyz").await.0,
        503,
        "not ready without a running plugin"
    );
    assert_eq!(http_get(&addr, "/nope").await.0, 404);
    let (code, body) = http_get(&addr, "/metrics").await;
    assert_eq!(code, 200);
    // OpenMetrics names the counter family without the `_total` of its sample.
    assert!(body.contains("# TYPE plugin_reconcile counter\n"), "{body}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    task.abort();
    assert!(
        rt.shutdown(Duration::from_secs(1)).await,
        "every reconcile finished within the grace period"
    );
    em.shutdown().await;
}
