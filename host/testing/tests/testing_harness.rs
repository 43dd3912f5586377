//! The guest unit-test harness (`kwh_testing`) against the real test guests: every assertion
//! kind (outcomes, queue adds, writes with bodies and results, logs), the virtual clock as the
//! guest sees it, handler and reconcile traps, and manifest permission checks.

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use kwh_plugin::backend::{PatchKind, WriteOp};
use kwh_plugin::{GuestError, Limits};
use kwh_testing::{
    Harness, HarnessError, LogLevel, LogLine, LogSource, Origin, ReconcileOutcome, WriteVerb,
};
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
        let patched = w[0].result.clone().expect("patched").expect("object");
        let uid = patched["metadata"]["uid"]
            .as_str()
            .expect("uid")
            .to_string();
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
        // The delete carried the uid precondition the guest set, as DeleteOptions.
        let del = w.last().expect("delete");
        assert_eq!(del.body["kind"], "DeleteOptions");
        assert_eq!(
            del.body["preconditions"]["uid"].as_str(),
            Some(uid.as_str())
        );
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

/// Spec 5.6: the worker's retry delay is the default controller rate limiter's, MaxOf(per-key
/// exponential 5 ms…1000 s, Bucket(10 qps, burst 100)); the harness runs the bucket on the
/// virtual clock.
#[tokio::test]
async fn spec_5_6_failures_beyond_the_burst_wait_for_the_overall_bucket() {
    bounded(async {
        let mut h = harness("ttl").await;
        let fail = |i: usize| format!("enqueue/k{i}"); // a malformed key: the guest errors
        let delays = |h: &mut Harness| -> Vec<Duration> {
            h.take_enqueued()
                .into_iter()
                .map(|e| {
                    assert_eq!(e.origin, Origin::Backoff);
                    e.delay.expect("a backoff has a delay")
                })
                .collect()
        };
        // The burst: 100 failures at one virtual instant wait only their own 5 ms.
        for i in 0..100 {
            let out = h.reconcile(&fail(i)).await;
            assert!(matches!(out, ReconcileOutcome::Error(_)), "{out:?}");
        }
        assert_eq!(delays(&mut h), vec![Duration::from_millis(5); 100]);
        // The bucket is empty: the next ones are spaced at 10 per second.
        h.reconcile(&fail(100)).await;
        h.reconcile(&fail(101)).await;
        assert_eq!(
            delays(&mut h),
            [Duration::from_millis(100), Duration::from_millis(200)]
        );
        // A virtual second refills ten tokens, two of them already promised.
        h.advance(Duration::from_secs(1));
        for i in 102..110 {
            h.reconcile(&fail(i)).await;
        }
        assert_eq!(delays(&mut h), vec![Duration::from_millis(5); 8]);
        // A key's own back-off still applies when it is the longer wait.
        h.advance(Duration::from_secs(10));
        for _ in 0..6 {
            h.reconcile(&fail(0)).await;
        }
        assert_eq!(
            delays(&mut h),
            [10, 20, 40, 80, 160, 320].map(Duration::from_millis)
        );
        // Success forgets the key's count; the bucket keeps its tokens.
        assert_eq!(h.reconcile("default/none").await, ReconcileOutcome::Done);
    })
    .await;
}

#[tokio::test]
async fn every_write_kind_is_recorded_with_its_result_and_applied_as_the_api_server_would() {
    bounded(async {
        let mut h = harness("ttl").await;
        h.seed_yaml(
            "apiVersion: v1\nkind: Service\nmetadata: {name: svc, namespace: default}\nspec: {ports: [{port: 80}]}\n",
        )
        .expect("seed service");

        // create: uid, creationTimestamp (virtual), resourceVersion; again → 409 AlreadyExists.
        assert_eq!(h.reconcile("create/default/made").await, ReconcileOutcome::Done);
        let w = h.take_writes().remove(0);
        assert_eq!((w.verb, w.key().as_str()), (WriteVerb::Create, "default/made"));
        assert_eq!(w.body["data"]["made"], "yes");
        let stored = w.result.expect("created").expect("object");
        assert!(stored["metadata"]["uid"].as_str().is_some_and(|u| !u.is_empty()));
        assert_eq!(stored["metadata"]["creationTimestamp"], "2025-01-01T00:00:00Z");
        match h.reconcile("create/default/made").await {
            ReconcileOutcome::Error(e) => assert!(e.starts_with("409 AlreadyExists"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(h.take_writes()[0].result.as_ref().unwrap_err().reason, "AlreadyExists");

        // replace from the cache: ok; after a change the cache has not seen, 409 Conflict.
        assert_eq!(h.reconcile("replace/default/made").await, ReconcileOutcome::Done);
        let w = h.take_writes().remove(0);
        assert_eq!(w.verb, WriteVerb::Replace);
        let rv1 = w.result.expect("ok").expect("object")["metadata"]["resourceVersion"].clone();
        assert_ne!(rv1, stored["metadata"]["resourceVersion"], "resourceVersion bumps");
        h.cluster()
            .replace(cm("default", "made", json!({"by": "someone else"})))
            .expect("out-of-band write");
        match h.reconcile("replace/default/made").await {
            ReconcileOutcome::Error(e) => assert!(e.starts_with("409 Conflict"), "{e}"),
            other => panic!("{other:?}"),
        }
        h.take_writes();

        // json and strategic-merge patches.
        assert_eq!(h.reconcile("json-patch/default/made").await, ReconcileOutcome::Done);
        assert_eq!(h.reconcile("sm-patch/default/made").await, ReconcileOutcome::Done);
        let w = h.take_writes();
        assert_eq!(w.iter().map(|w| w.verb).collect::<Vec<_>>(), [WriteVerb::JsonPatch, WriteVerb::StrategicMergePatch]);
        let made = h.get("v1", "ConfigMap", Some("default"), "made").expect("made");
        assert_eq!(made["data"], json!({"patched": "json"}));
        assert_eq!(made["metadata"]["labels"]["patched"], "strategic");
        // Both patches reached the guest's cache too.
        let cached = h.cached(0, "default/made").expect("cached").to_value().expect("json");
        assert_eq!(cached["metadata"]["labels"]["patched"], "strategic");

        // replace-status changes only the status subresource.
        assert_eq!(h.reconcile("status/default/svc").await, ReconcileOutcome::Done);
        let w = h.take_writes().remove(0);
        assert_eq!((w.verb, w.request.kind.as_str()), (WriteVerb::ReplaceStatus, "Service"));
        let svc = h.get("v1", "Service", Some("default"), "svc").expect("svc");
        assert_eq!(svc["status"]["loadBalancer"]["ingress"][0]["ip"], "10.0.0.7");
        assert_eq!(svc["spec"]["ports"][0]["port"], 80);
    })
    .await;
}

#[tokio::test]
async fn queue_adds_keep_their_delays_and_come_due_on_the_virtual_clock() {
    bounded(async {
        let mut h = harness("ttl").await;
        assert_eq!(
            h.reconcile("enqueue/1500/default/k").await,
            ReconcileOutcome::Done
        );
        let q = h.take_enqueued();
        let got: Vec<_> = q
            .iter()
            .map(|e| (e.key.as_str(), e.delay, e.origin))
            .collect();
        assert_eq!(
            got,
            [
                ("default/k", None, Origin::Guest),
                (
                    "default/k",
                    Some(Duration::from_millis(1500)),
                    Origin::Guest
                )
            ]
        );
        assert_eq!(h.ready_keys(), ["default/k"]);
        assert_eq!(
            h.waiting_keys(),
            [("default/k".to_string(), Duration::from_millis(1500))]
        );
        let out = h.run_queue().await;
        assert_eq!(out, [("default/k".to_string(), ReconcileOutcome::Done)]);
        assert!(
            h.run_queue().await.is_empty(),
            "the delayed add is not due yet"
        );
        assert!(h.advance(Duration::from_millis(1499)).is_empty());
        assert_eq!(h.advance(Duration::from_millis(1)), ["default/k"]);
        assert_eq!(h.run_queue().await.len(), 1);
    })
    .await;
}

#[tokio::test]
async fn finalizers_defer_deletion_and_missed_deletes_arrive_as_tombstones() {
    bounded(async {
        let mut h = harness("copier").await;
        let mut held = cm("default", "held", json!({"v": "1"}));
        held["metadata"]["finalizers"] = json!(["example.com/keep"]);
        h.add(held).await.expect("add");
        h.take_logs();
        h.delete("v1", "ConfigMap", Some("default"), "held")
            .await
            .expect("delete");
        // Still there, with deletionTimestamp: the informer delivers an update, not a delete.
        let logs: Vec<String> = h.take_logs().into_iter().map(|l| l.message).collect();
        assert_eq!(logs, ["event update default/held v=1->1"]);
        let o = h
            .get("v1", "ConfigMap", Some("default"), "held")
            .expect("held");
        assert_eq!(o["metadata"]["deletionTimestamp"], "2025-01-01T00:00:00Z");
        // Removing the finalizer completes the delete.
        let mut done = o.clone();
        done["metadata"]["finalizers"] = json!([]);
        h.update(done).await.expect("update");
        let logs: Vec<String> = h.take_logs().into_iter().map(|l| l.message).collect();
        assert_eq!(logs, ["event delete default/held v=1 tombstone=false"]);

        h.add(cm("default", "missed", json!({"v": "9"})))
            .await
            .expect("add");
        h.take_logs();
        h.delete_missed("v1", "ConfigMap", Some("default"), "missed")
            .await
            .expect("delete");
        let logs: Vec<String> = h.take_logs().into_iter().map(|l| l.message).collect();
        assert_eq!(logs, ["event delete default/missed v=9 tombstone=true"]);
    })
    .await;
}

#[tokio::test]
async fn handler_trap_is_reported_and_the_dispatch_instance_replaced() {
    bounded(async {
        let mut h = harness("copier").await;
        let err = h
            .add(cm("default", "handler-panic", json!({})))
            .await
            .unwrap_err();
        match err {
            HarnessError::Handler(f) => {
                assert_eq!(
                    (f.call, f.watch, f.key.as_str()),
                    ("on-add", 0, "default/handler-panic")
                );
                assert!(matches!(f.error, GuestError::Trap(_)), "{:?}", f.error);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(h.handler_failures().len(), 1);
        // The panic message reached stderr, captured as a log line.
        assert!(
            h.logs()
                .iter()
                .any(|l| l.source == LogSource::Stderr && l.message.contains("copier refuses")),
            "{:?}",
            h.logs()
        );
        h.add(cm("default", "fine", json!({"v": "1"})))
            .await
            .expect("next event works");
        assert_eq!(h.ready_keys(), ["default/fine"]);
    })
    .await;
}

#[tokio::test]
async fn status_patch_and_status_apply_change_only_status_and_need_update_status() {
    bounded(async {
        let mut h = harness("ttl").await;
        for name in ["patched", "applied"] {
            h.seed_yaml(&format!(
                "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default, labels: {{app: web}}}}\nspec: {{ports: [{{port: 80}}]}}\n"
            ))
            .expect("seed service");
        }

        // A merge patch of the status: its spec and labels are dropped, its status stored.
        assert_eq!(h.reconcile("patch-status/default/patched").await, ReconcileOutcome::Done);
        let w = h.take_writes().remove(0);
        assert_eq!((w.verb, w.key().as_str()), (WriteVerb::MergePatchStatus, "default/patched"));
        assert!(w.verb.matches("patch-status") && !w.verb.matches("patch"));
        assert!(matches!(w.request.op, WriteOp::PatchStatus(PatchKind::Merge)));
        assert_eq!(w.body["spec"]["sessionAffinity"], "ClientIP", "the request asked for it");
        let svc = h.get("v1", "Service", Some("default"), "patched").expect("svc");
        assert_eq!(svc["status"]["loadBalancer"]["ingress"][0]["ip"], "10.0.0.8");
        assert_ne!(svc["spec"]["sessionAffinity"], "ClientIP", "spec is not the status's");
        assert_eq!(svc["metadata"]["labels"], json!({"app": "web"}), "nor are labels");
        assert_eq!(svc["spec"]["ports"][0]["port"], 80);
        let cached = h.cached(1, "default/patched").expect("cached").to_value().expect("json");
        assert_eq!(cached["status"]["loadBalancer"]["ingress"][0]["ip"], "10.0.0.8");

        // A server-side apply of the status: the plugin is its field manager, for status only.
        assert_eq!(h.reconcile("apply-status/default/applied").await, ReconcileOutcome::Done);
        let w = h.take_writes().remove(0);
        assert_eq!(w.verb, WriteVerb::ApplyStatus);
        assert!(matches!(w.request.op,
            WriteOp::ApplyStatus { force: false, ref field_manager } if &**field_manager == "ttl"));
        let svc = h.get("v1", "Service", Some("default"), "applied").expect("svc");
        assert_eq!(svc["status"]["loadBalancer"]["ingress"][0]["ip"], "10.0.0.9");
        assert_ne!(svc["spec"]["sessionAffinity"], "ClientIP");
        assert!(svc["metadata"]["labels"].get("applied").is_none(), "{svc}");
        let owned = svc["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["manager"] == "ttl" && e["operation"] == "Apply")
            .cloned()
            .expect("ttl's apply entry");
        assert_eq!(owned["subresource"], "status");

        // The manifest declares ConfigMap writes, but not update-status: refused before sending.
        h.take_logs();
        match h.reconcile("cm-patch-status/default/made").await {
            ReconcileOutcome::Error(e) => {
                assert!(e.starts_with("403 Forbidden: "), "{e}");
                assert!(e.contains("may not patch ConfigMap/status (v1)"), "{e}");
                assert!(e.contains("needs verb update-status"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        assert!(h.take_writes().is_empty(), "a refused write never reaches the cluster");
        let refusals: Vec<LogLine> = h
            .take_logs()
            .into_iter()
            .filter(|l| l.source == LogSource::Host && l.message.contains("client write refused"))
            .collect();
        assert_eq!(refusals.len(), 1, "{refusals:?}");
    })
    .await;
}

#[tokio::test]
async fn manifest_permission_checks_are_production_ones() {
    bounded(async {
        let mut h = harness("rogue").await;
        for key in ["create-secret", "delete-configmap", "read-secret"] {
            match h.reconcile(key).await {
                ReconcileOutcome::Error(e) => assert!(e.starts_with("403 Forbidden"), "{key}: {e}"),
                other => panic!("{key}: {other:?}"),
            }
        }
        assert!(
            h.writes().is_empty(),
            "refused writes never reach the cluster"
        );
        let refusals: Vec<LogLine> = h
            .take_logs()
            .into_iter()
            .filter(|l| l.source == LogSource::Host)
            .collect();
        assert_eq!(refusals.len(), 3, "{refusals:?}");
        assert!(
            refusals[0].message.contains("client write refused"),
            "{:?}",
            refusals[0]
        );
        assert!(
            refusals[2].message.contains("lister read refused"),
            "{:?}",
            refusals[2]
        );
        // The declared verb works and the object lands in the cluster.
        assert_eq!(
            h.reconcile("create-configmap").await,
            ReconcileOutcome::Done
        );
        assert_eq!(h.writes().len(), 1);
        assert!(h.get("v1", "ConfigMap", Some("default"), "ok").is_some());
    })
    .await;
}

#[tokio::test]
async fn stdout_stderr_and_log_lines_are_captured_with_source_and_level() {
    bounded(async {
        let mut h = harness("getter").await;
        h.seed(cm("default", "x", json!({}))).expect("seed");
        let out = h.reconcile("default/x").await;
        assert!(matches!(out, ReconcileOutcome::RequeueAfter(_)), "{out:?}");
        let logs = h.take_logs();
        let got: Vec<(LogSource, LogLevel, &str)> = logs
            .iter()
            .map(|l| (l.source, l.level, l.message.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (LogSource::Stdout, LogLevel::Info, "reconciling default/x"),
                (
                    LogSource::Stderr,
                    LogLevel::Warn,
                    "stderr line for default/x"
                ),
                (LogSource::Log, LogLevel::Info, "looking up default/x"),
            ]
        );
        // Nothing ambient in the sandbox, exactly as in production.
        match h.reconcile("ambient").await {
            ReconcileOutcome::Error(e) => {
                assert_eq!(e, "env=0 args=0 root=false cwd=false udp=false")
            }
            other => panic!("{other:?}"),
        }
    })
    .await;
}

/// `lister.get-by-key` reads the cache of the watch it names, and finds what `get` finds for
/// the same key; a watch number the manifest lacks is a 400 the guest can read.
#[tokio::test]
async fn get_by_key_reads_the_named_watch_like_get() {
    bounded(async {
        let mut h = harness("getter").await;
        h.seed(cm("default", "x", json!({"k": "some value"})))
            .expect("seed");
        let by_get = h.reconcile("default/x").await;
        let ReconcileOutcome::RequeueAfter(len) = by_get else {
            panic!("get found nothing: {by_get:?}");
        };
        assert!(len.as_millis() > 0);
        assert_eq!(h.reconcile("by-key/0/default/x").await, by_get);
        assert_eq!(
            h.reconcile("by-key/0/default/absent").await,
            ReconcileOutcome::Done
        );
        assert_eq!(
            h.reconcile("by-key/0/other/x").await,
            ReconcileOutcome::Done
        );
        match h.reconcile("by-key/1/default/x").await {
            ReconcileOutcome::Error(e) => assert_eq!(
                e,
                "400 BadRequest: plugin \"getter\" has no watch 1: its manifest declares 1"
            ),
            other => panic!("{other:?}"),
        }
        // Changes reach it as they reach the cache.
        h.delete("v1", "ConfigMap", Some("default"), "x")
            .await
            .expect("delete");
        assert_eq!(
            h.reconcile("by-key/0/default/x").await,
            ReconcileOutcome::Done
        );
    })
    .await;
}

#[tokio::test]
async fn custom_indexes_serve_lister_reads() {
    bounded(async {
        let mut h = harness("indexer").await;
        h.seed_yaml(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: default}\ndata: {ref: t}\n---\n\
             apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: default}\ndata: {ref: t}\n---\n\
             apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: other}\ndata: {ref: t}\n",
        )
        .expect("seed");
        assert_eq!(h.reconcile("default/t").await, ReconcileOutcome::Done);
        let report = h.get("v1", "ConfigMap", Some("default"), "t-refs").expect("report");
        assert_eq!(report["data"]["keys"], "default/a,default/b");
        assert_eq!(report["data"]["objects"], "2");
        assert_eq!(report["data"]["unknown"], "400 BadRequest");
        // An event that moves a reference is seen by the index at once.
        h.update(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "b", "namespace": "default"}, "data": {"ref": "u"}}))
            .await
            .expect("update");
        assert_eq!(h.ready_keys(), ["default/t", "default/u"]);
        h.run_queue().await;
        let report = h.get("v1", "ConfigMap", Some("default"), "t-refs").expect("report");
        assert_eq!(report["data"]["keys"], "default/a");
    })
    .await;
}

#[tokio::test]
async fn a_spinning_reconcile_hits_its_deadline_and_is_reported_as_a_trap() {
    bounded(async {
        let mut h = Harness::builder(guest("spin"))
            .engine(support::engine())
            .limits(Limits {
                reconcile_deadline: Duration::from_millis(200),
                ..Limits::default()
            })
            .build()
            .await
            .expect("harness");
        match h.reconcile("forever").await {
            ReconcileOutcome::Trap(GuestError::DeadlineExceeded(d)) => {
                assert_eq!(d, Duration::from_millis(200))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(h.reconcile("ok").await, ReconcileOutcome::Done);
    })
    .await;
}

#[tokio::test]
async fn unserved_kinds_and_bad_seeds_fail_the_build_clearly() {
    bounded(async {
        let err = Harness::builder(guest("badkind"))
            .engine(support::engine())
            .build()
            .await
            .err()
            .expect("badkind must not build");
        assert!(matches!(err, HarnessError::UnservedKind(_)), "{err:?}");
        assert_eq!(
            err.to_string(),
            "watch 0: kind Widget (example.com/v1) is not served by the fake cluster"
        );
        let err = Harness::builder(guest("copier"))
            .engine(support::engine())
            .seed_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: x}\n")
            .build()
            .await
            .err()
            .expect("a nameless seed must be refused");
        assert!(matches!(err, HarnessError::Seed(_)), "{err:?}");
        assert!(
            err.to_string().contains("name or generateName is required"),
            "{err}"
        );
    })
    .await;
}

#[tokio::test]
async fn initial_list_and_resync_replay_the_caches_to_the_handlers() {
    bounded(async {
        let mut h = Harness::builder(guest("copier"))
            .engine(support::engine())
            .seed(cm("a", "one", json!({"v": "1"})))
            .seed_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: two, namespace: b}\ndata: {v: '2'}\n")
            .build()
            .await
            .expect("harness");
        assert!(h.logs().is_empty());
        // The default namespaces hold no ConfigMaps; only the two seeds are delivered.
        assert_eq!(h.deliver_initial_list().await.expect("initial list"), 2);
        let msgs: Vec<String> = h.take_logs().into_iter().map(|l| l.message).collect();
        assert_eq!(msgs, ["event add a/one v=1", "event add b/two v=2"]);
        assert_eq!(h.ready_keys(), ["a/one", "b/two"]);
        assert_eq!(h.resync().await.expect("resync"), 2);
        let msgs: Vec<String> = h.take_logs().into_iter().map(|l| l.message).collect();
        assert_eq!(msgs, ["event update a/one v=1->1", "event update b/two v=2->2"]);
    })
    .await;
}

#[tokio::test]
async fn a_scenario_step_reports_every_expectation_that_did_not_hold() {
    bounded(async {
        use kwh_testing::scenario;
        let s = scenario::parse(
            std::path::Path::new("inline.yaml"),
            r#"
steps:
  - add: {apiVersion: v1, kind: ConfigMap, metadata: {name: web, namespace: default}, data: {v: "1"}}
  - reconcile: default/web
    expect:
      outcome: done
      writes: [{verb: create, body: {data: {v: "2"}}}]
      logs: ["never logged"]
      objects: [{apiVersion: v1, kind: ConfigMap, metadata: {name: web-copy, namespace: default}, data: {v: "1"}}]
  - reconcile: default/web
"#,
        )
        .expect("parses");
        let r = scenario::run(&s, &guest("copier"), &support::engine()).await;
        assert!(!r.passed());
        assert_eq!((r.steps, r.passed_steps), (3, 1));
        let f = r.failure.expect("failure");
        assert_eq!((f.step, f.action.as_str()), (Some(2), "reconcile default/web"));
        assert_eq!(f.problems.len(), 2, "{:?}", f.problems);
        assert!(
            f.problems[0].starts_with("writes[0] (apply ConfigMap default/web-copy → ok): verb: expected create, got apply, body data.v: expected \"2\", got \"1\""),
            "{}",
            f.problems[0]
        );
        assert!(f.problems[1].starts_with("logs[0]: no line containing \"never logged\""), "{}", f.problems[1]);
        assert!(f.logs.is_empty(), "copier's reconcile logs nothing: {:?}", f.logs);

        // A failing event step keeps what the handler logged, for `--show-logs`.
        let s = scenario::parse(
            std::path::Path::new("inline.yaml"),
            "steps:\n  - add: {apiVersion: v1, kind: ConfigMap, metadata: {name: web, namespace: default}, data: {v: '1'}}\n    expect: {enqueued: []}\n",
        )
        .expect("parses");
        let r = scenario::run(&s, &guest("copier"), &support::engine()).await;
        let f = r.failure.expect("failure");
        assert_eq!(f.problems, [r#"enqueued: expected [], got ["default/web"]"#]);
        assert_eq!(f.logs, ["[info log] event add default/web v=1"]);
    })
    .await;
}

fn messages(h: &Harness) -> Vec<String> {
    h.take_logs().into_iter().map(|l| l.message).collect()
}

/// Held notifications: another object's change overtakes one (its cache already updated, as
/// an informer's store is before its listeners are told); one object's order is kept.
#[tokio::test]
async fn a_held_change_is_delivered_after_the_next_one_keeping_each_objects_order() {
    bounded(async {
        let mut h = harness("copier").await;
        h.hold_next_event();
        h.add(cm("a", "one", json!({"v": "1"}))).await.expect("add");
        assert!(messages(&h).is_empty(), "held");
        assert!(
            h.cached(0, "a/one").is_some(),
            "the cache is ahead of the handlers"
        );
        h.add(cm("b", "two", json!({"v": "2"}))).await.expect("add");
        assert_eq!(messages(&h), ["event add b/two v=2", "event add a/one v=1"]);
        h.hold_next_event();
        h.update(cm("a", "one", json!({"v": "2"})))
            .await
            .expect("update");
        h.update(cm("a", "one", json!({"v": "3"})))
            .await
            .expect("update");
        assert_eq!(
            messages(&h),
            ["event update a/one v=1->2", "event update a/one v=2->3"]
        );
        // What is still held at the end is delivered by `deliver: pending`.
        h.hold_next_event();
        h.update(cm("b", "two", json!({"v": "3"})))
            .await
            .expect("update");
        assert_eq!(h.deliver_pending().await.expect("deliver"), 1);
        assert_eq!(messages(&h), ["event update b/two v=2->3"]);
    })
    .await;
}

/// A restart against a lagging replica: new instances and queue, the cache listed behind the
/// cluster until the next change catches it up through the changes it missed.
#[tokio::test]
async fn a_restart_can_list_a_lagging_cache_which_catches_up_later() {
    bounded(async {
        let mut h = harness("copier").await;
        h.add(cm("a", "one", json!({"v": "1"}))).await.expect("add");
        h.update(cm("a", "one", json!({"v": "2"})))
            .await
            .expect("update");
        messages(&h);
        assert_eq!(h.restart_lagging(0, 1).await.expect("restart"), 1);
        assert_eq!(
            messages(&h),
            ["event add a/one v=1"],
            "listed one change behind"
        );
        assert_eq!(h.ready_keys(), ["a/one"], "the queue rebuilt from on-add");
        // Writes do not move a lagging cache: a reconcile still reads v=1.
        h.run_queue().await;
        let copy = h
            .get("v1", "ConfigMap", Some("a"), "one-copy")
            .expect("copy");
        assert_eq!(copy["data"]["v"], "1", "copied from the stale cache");
        assert_eq!(
            h.cached(0, "a/one")
                .expect("cached")
                .to_value()
                .expect("json")["data"]["v"],
            "1"
        );
        h.deliver_pending().await.expect("catch up");
        assert_eq!(messages(&h), ["event update a/one v=1->2"]);
        h.run_queue().await;
        let copy = h
            .get("v1", "ConfigMap", Some("a"), "one-copy")
            .expect("copy");
        assert_eq!(copy["data"]["v"], "2");
    })
    .await;
}

/// A crash after a write: the rest of the call's writes reach nothing, the queue stops, and a
/// restart lists again and rebuilds the queue.
#[tokio::test]
async fn a_crash_after_a_write_stops_the_process_until_a_restart() {
    bounded(async {
        let mut h = harness("copier").await;
        h.add(cm("a", "one", json!({"v": "1"}))).await.expect("add");
        h.add(cm("a", "two", json!({"v": "2"}))).await.expect("add");
        h.crash_after_writes(1);
        let done = h.run_queue().await;
        assert_eq!(done.len(), 1, "the queue stops with the process: {done:?}");
        assert!(h.crashed());
        assert!(h.get("v1", "ConfigMap", Some("a"), "one-copy").is_some());
        assert!(h.get("v1", "ConfigMap", Some("a"), "two-copy").is_none());
        messages(&h);
        // Both sources and the copy made before the crash are listed again.
        assert_eq!(h.restart().await.expect("restart"), 3);
        assert!(!h.crashed());
        assert_eq!(h.ready_keys(), ["a/one", "a/two"]);
        h.run_queue().await;
        assert!(h.get("v1", "ConfigMap", Some("a"), "two-copy").is_some());
    })
    .await;
}
