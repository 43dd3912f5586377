//! Handlers handed over to the host (`queue.enqueue-own-keys`): the SDK's default handlers say
//! on their first call that they only enqueue the object's key, and the dispatcher does that
//! itself from then on, for each kind of change separately; a guest with handlers of its own
//! keeps every call. Every key is reconciled either way.

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use kwh_plugin::RuntimeOptions;
use serde_json::json;
use support::cluster::{cm, emulator, eventually, runtime_with, start};

const WAIT: Duration = Duration::from_secs(30);
const N: u64 = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_handlers_hand_over_after_their_first_call_and_every_key_is_still_reconciled() {
    let em = emulator().await;
    let mut rt = runtime_with(&em, RuntimeOptions::default());
    // The SDK's bench guest: default handlers, a reconcile that reads the object and is done.
    start(&mut rt, &["bench-sdk"]).await;
    let p = &rt.plugins()[0];
    let d = p.dispatcher_handle();
    let reconciles = || p.reconcile_stats().total.load(Ordering::Relaxed);
    let (delivered, by_host) = (
        || d.delivered.load(Ordering::Relaxed),
        || d.enqueued_by_host.load(Ordering::Relaxed),
    );
    assert!(eventually(WAIT, || rt.is_ready()).await, "synced");

    // Adds, one at a time (each delivered before the next is made, so the count is exact): the
    // first reaches the guest, which hands adds over; the host enqueues the other four keys.
    for i in 0..N {
        em.create(cm(&format!("c-{i}"), json!({"v": "1"})))
            .expect("create");
        assert!(eventually(WAIT, || delivered() == i + 1).await, "add {i}");
    }
    assert_eq!(by_host(), N - 1, "every add after the first by the host");
    assert!(
        eventually(WAIT, || reconciles() >= N).await,
        "every added key reconciled: {} of {N}",
        reconciles()
    );

    // Updates are handed over on their own first call: adds being handed over says nothing
    // about the guest's on-update.
    for i in 0..N {
        em.update(cm(&format!("c-{i}"), json!({"v": "2"})))
            .expect("update");
        assert!(
            eventually(WAIT, || delivered() == N + i + 1).await,
            "update {i}"
        );
    }
    assert_eq!(
        by_host(),
        2 * (N - 1),
        "every update after the first by the host"
    );
    assert!(
        eventually(WAIT, || reconciles() >= 2 * N).await,
        "every updated key reconciled: {} of {}",
        reconciles(),
        2 * N
    );

    for i in 0..N {
        em.delete("v1", "ConfigMap", Some("default"), &format!("c-{i}"))
            .expect("delete");
        assert!(
            eventually(WAIT, || delivered() == 2 * N + i + 1).await,
            "delete {i}"
        );
    }
    assert_eq!(
        by_host(),
        3 * (N - 1),
        "every delete after the first by the host"
    );
    assert!(
        eventually(WAIT, || reconciles() >= 3 * N).await,
        "every deleted key reconciled: {} of {}",
        reconciles(),
        3 * N
    );
    assert_eq!(d.failures.load(Ordering::Relaxed), 0);
    assert!(rt.shutdown(WAIT).await, "clean stop");
    em.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_with_handlers_of_its_own_gets_every_notification() {
    let em = emulator().await;
    let mut rt = runtime_with(&em, RuntimeOptions::default());
    // Raw bindings, handlers that do their own thing: nothing is ever handed over.
    start(&mut rt, &["noop"]).await;
    let d = rt.plugins()[0].dispatcher_handle();
    assert!(eventually(WAIT, || rt.is_ready()).await, "synced");
    for i in 0..N {
        em.create(cm(&format!("o-{i}"), json!({}))).expect("create");
        em.update(cm(&format!("o-{i}"), json!({"v": "2"})))
            .expect("update");
        em.delete("v1", "ConfigMap", Some("default"), &format!("o-{i}"))
            .expect("delete");
    }
    assert!(
        eventually(WAIT, || d.delivered.load(Ordering::Relaxed) == 3 * N).await,
        "all {} notifications delivered: {}",
        3 * N,
        d.delivered.load(Ordering::Relaxed)
    );
    assert_eq!(d.enqueued_by_host.load(Ordering::Relaxed), 0);
    assert!(rt.shutdown(WAIT).await, "clean stop");
    em.shutdown().await;
}
