//! The guest unit-test harness (`host::testing`) against the real test guests: every assertion
//! kind (outcomes, queue adds, writes with bodies and results, logs), the virtual clock as the
//! guest sees it, handler and reconcile traps, and manifest permission checks.

mod support;

use std::time::Duration;

use host::plugin::backend::WriteOp;
use host::plugin::GuestError;
use host::testing::{Harness, LogLevel, LogSource, Origin, ReconcileOutcome, WriteVerb};
use serde_json::{json, Value};
use support::guests::guest;

const DEADLINE: Duration = Duration::from_secs(120);

fn cm(ns: &str, name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns}, "data": data})
}

async fn harness(name: &str) -> Harness {
    Harness::builder(guest(name))
        .engine(support::engine())
        .build()
        .await
        .expect("harness")
}

/// Runs `f` under an overall deadline so a wedged guest fails the test instead of hanging it.
async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(DEADLINE, f)
        .await
        .expect("test deadline")
}

#[tokio::test]
async fn copier_add_reconcile_records_outcome_keys_writes_and_logs() {
    bounded(async {
        let mut h = harness("copier").await;
        assert_eq!(h.manifest().name, "copier");
        h.add(cm("apps", "web", json!({"v": "1"})))
            .await
            .expect("add");
        // on-add logged and enqueued the key.
        let logs = h.take_logs();
        assert_eq!(logs.len(), 1, "{logs:?}");
        assert_eq!(logs[0].source, LogSource::Log);
        assert_eq!(logs[0].level, LogLevel::Info);
        assert_eq!(logs[0].message, "event add apps/web v=1");
        let q = h.take_enqueued();
        assert_eq!(q.len(), 1);
        assert_eq!((q[0].key.as_str(), q[0].delay, q[0].origin), ("apps/web", None, Origin::Guest));
        assert_eq!(h.ready_keys(), ["apps/web"]);

        let out = h.run_queue().await;
        assert_eq!(out, [("apps/web".to_string(), ReconcileOutcome::Done)]);
        let writes = h.take_writes();
        assert_eq!(writes.len(), 1, "{writes:?}");
        let w = &writes[0];
        assert_eq!(w.verb, WriteVerb::Apply);
        assert!(matches!(w.request.op, WriteOp::Apply { force: true, ref field_manager } if &**field_manager == "copier"));
        assert_eq!(w.key(), "apps/web-copy");
        assert_eq!(w.body["data"], json!({"v": "1"}));
        let stored = w.result.clone().expect("ok").expect("object");
        assert_eq!(stored["metadata"]["resourceVersion"].as_str().map(|s| !s.is_empty()), Some(true));
        assert_eq!(stored["metadata"]["managedFields"][0]["manager"], "copier");
        // The cluster and the guest's cache see the copy.
        assert_eq!(h.get("v1", "ConfigMap", Some("apps"), "web-copy").expect("copy")["data"]["v"], "1");
        assert!(h.cached(0, "apps/web-copy").is_some());
        // The copy's own add is pending until delivered; copier ignores copies.
        assert_eq!(h.pending_notifications(), 1);
        assert_eq!(h.deliver_pending().await.expect("deliver"), 1);
        assert!(h.take_enqueued().is_empty());
    })
    .await;
}

#[tokio::test]
async fn update_and_delete_deliver_old_and_new_states() {
    bounded(async {
        let mut h = harness("copier").await;
        h.seed(cm("apps", "web", json!({"v": "1"}))).expect("seed");
        assert!(
            h.take_logs().is_empty(),
            "seeds are given state, not events"
        );
        h.update(cm("apps", "web", json!({"v": "2"})))
            .await
            .expect("update");
        h.delete("v1", "ConfigMap", Some("apps"), "web")
            .await
            .expect("delete");
        let msgs: Vec<String> = h.take_logs().into_iter().map(|l| l.message).collect();
        assert_eq!(
            msgs,
            [
                "event update apps/web v=1->2",
                "event delete apps/web v=2 tombstone=false"
            ]
        );
        // The key folded into one ready entry; reconcile deletes the (absent) copy: 404 is done.
        assert_eq!(h.ready_keys(), ["apps/web"]);
        assert_eq!(h.reconcile("apps/web").await, ReconcileOutcome::Done);
        let w = h.take_writes();
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].verb, WriteVerb::Delete);
        assert_eq!(w[0].result.as_ref().unwrap_err().code, 404);
        assert!(h.ready_keys().is_empty());
    })
    .await;
}

#[tokio::test]
async fn virtual_clock_drives_the_guests_wall_and_monotonic_clocks() {
    bounded(async {
        let mut h = harness("ttl").await;
        h.add(cm("default", "short", json!({"ttl-seconds": "90"})))
            .await
            .expect("add");
        assert_eq!(h.ready_keys(), ["default/short"]);
        let out = h.reconcile("default/short").await;
        assert_eq!(out, ReconcileOutcome::RequeueAfter(Duration::from_secs(90)));
        let w = h.take_writes();
        assert_eq!(w[0].verb, WriteVerb::MergePatch);
        let start = h.clock().unix_secs();
        assert_eq!(
            w[0].body["metadata"]["annotations"]["ttl.example.com/checked-at"],
            start.to_string()
        );
        assert_eq!(
            h.waiting_keys(),
            [("default/short".to_string(), Duration::from_secs(90))]
        );
        let q = h.take_enqueued();
        assert_eq!(
            q.last().map(|e| (e.origin, e.delay)),
            Some((Origin::Requeue, Some(Duration::from_secs(90))))
        );

        assert!(h.advance(Duration::from_secs(60)).is_empty());
        assert_eq!(
            h.reconcile("default/short").await,
            ReconcileOutcome::RequeueAfter(Duration::from_secs(30))
        );
        assert_eq!(h.advance(Duration::from_secs(30)), ["default/short"]);
        let out = h.run_queue().await;
        assert_eq!(out, [("default/short".to_string(), ReconcileOutcome::Done)]);
        let w = h.take_writes();
        assert_eq!(w.last().map(|w| w.verb), Some(WriteVerb::Delete));
        assert!(h.get("v1", "ConfigMap", Some("default"), "short").is_none());
        let logs: Vec<String> = h.take_logs().into_iter().map(|l| l.message).collect();
        assert!(
            logs.contains(&format!("expired short at {}", start + 90)),
            "{logs:?}"
        );
        // The instance's monotonic clock moved by exactly the virtual time.
        assert!(logs.contains(&"mono +60000ms".to_string()), "{logs:?}");
        assert!(logs.contains(&"mono +90000ms".to_string()), "{logs:?}");
    })
    .await;
}

#[tokio::test]
async fn reconcile_trap_is_reported_and_backs_off_exponentially() {
    bounded(async {
        let mut h = harness("ttl").await;
        for expect_ms in [5, 10, 20] {
            match h.reconcile("panic/x").await {
                ReconcileOutcome::Trap(GuestError::Trap(msg)) => assert!(!msg.is_empty()),
                other => panic!("expected a trap, got {other:?}"),
            }
            let q = h.take_enqueued();
            assert_eq!(q.len(), 1);
            assert_eq!(
                (q[0].origin, q[0].delay),
                (Origin::Backoff, Some(Duration::from_millis(expect_ms)))
            );
            h.advance(Duration::from_millis(expect_ms));
        }
        // The instance was replaced: the next call works.
        assert_eq!(h.reconcile("default/none").await, ReconcileOutcome::Done);
        let msg = h.reconcile("bogus/op/x").await;
        assert!(matches!(msg, ReconcileOutcome::Done), "{msg:?}");
    })
    .await;
}
