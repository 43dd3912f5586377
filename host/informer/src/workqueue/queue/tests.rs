use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Barrier;
use tokio::time::timeout;

use super::*;

const DEADLINE: Duration = Duration::from_secs(10);

/// Runs `fut` under a deadline so a hang fails the test instead of wedging it.
async fn within<F: std::future::Future>(what: &str, fut: F) -> F::Output {
    match timeout(DEADLINE, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: did not complete within {DEADLINE:?}"),
    }
}

/// Polls `fut` once and asserts it is waiting: a task blocked on it now is really blocked,
/// rather than not yet scheduled.
fn assert_pending<F: std::future::Future + Unpin>(what: &str, fut: &mut F) {
    let waker = futures_util::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(
        std::pin::Pin::new(fut).poll(&mut cx).is_pending(),
        "{what} should be waiting"
    );
}

/// Asserts that `get` is pending right now (polls once; no waiting on time).
async fn assert_get_pending(q: &Queue<String>) {
    let fut = q.get();
    tokio::pin!(fut);
    assert!(
        futures_util::FutureExt::now_or_never(fut.as_mut()).is_none(),
        "get should have nothing to return"
    );
}

fn s(v: &str) -> String {
    v.to_owned()
}

#[tokio::test]
async fn spec_5_1_add_dedups_dirty_items_and_keeps_fifo_order() {
    let q = Queue::new();
    q.add(s("a"));
    q.add(s("b"));
    q.add(s("a"));
    q.add(s("c"));
    q.add(s("b"));
    assert_eq!(q.len(), 3);
    assert_eq!(q.get().await.as_deref(), Some("a"));
    assert_eq!(q.get().await.as_deref(), Some("b"));
    assert_eq!(q.get().await.as_deref(), Some("c"));
    assert!(q.is_empty());
    assert_get_pending(&q).await;
}

#[tokio::test]
async fn spec_5_1_add_is_ignored_while_shutting_down() {
    let q = Queue::new();
    q.add(s("a"));
    q.shutdown();
    q.add(s("b"));
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await.as_deref(), Some("a"));
    q.done(&s("a"));
    assert_eq!(q.get().await, None);
}

#[tokio::test]
async fn spec_5_1_add_while_processing_marks_dirty_without_queueing() {
    let q = Queue::new();
    q.add(s("a"));
    let a = q.get().await.expect("queued");
    q.add(s("a"));
    assert_eq!(q.len(), 0, "held item must not be queued a second time");
    q.add(s("a"));
    assert_get_pending(&q).await;
    q.done(&a);
    assert_eq!(q.len(), 1, "done re-queues the dirty item exactly once");
    assert_eq!(q.get().await.as_deref(), Some("a"));
    q.done(&a);
    assert!(q.is_empty());
}

/// `add_borrowed` keeps `add`'s rules (spec 5.1, 5.3) and makes one item per admitted add: the
/// dirty entry and the queued one are the same allocation, and an add of a dirty key makes none.
#[tokio::test]
async fn spec_5_1_add_borrowed_dedups_and_shares_one_item() {
    let q: Queue<Arc<str>> = Queue::new();
    q.add_borrowed("a");
    q.add_borrowed("b");
    q.add_borrowed("a");
    assert_eq!(q.len(), 2, "a dirty key is not queued twice");
    {
        let st = q.shared.state.lock();
        let (dirty, _) = st.dirty.get_key_value("a").expect("a is dirty");
        let queued = st.queue.iter().find(|k| &***k == "a").expect("a is queued");
        assert!(Arc::ptr_eq(dirty, queued), "one allocation for both");
        assert_eq!(Arc::strong_count(dirty), 2, "and no other copy made");
    }
    let a = q.get().await.expect("queued");
    assert_eq!(&*a, "a");
    // Held by a worker: only marked dirty, queued again by done (spec 5.3).
    q.add_borrowed("a");
    assert_eq!(q.len(), 1, "b only");
    q.done(&a);
    assert_eq!(q.len(), 2, "done re-queues the dirty key once");
    q.shutdown();
    q.add_borrowed("c");
    assert_eq!(q.len(), 2, "ignored while shutting down");
    let mut rest = Vec::new();
    while let Some(k) = within("drain", q.get()).await {
        q.done(&k);
        rest.push(k.to_string());
    }
    assert_eq!(rest, ["b", "a"]);
}

#[tokio::test]
async fn spec_5_2_get_waits_for_an_add() {
    let q: Queue<String> = Queue::new();
    let mut get = Box::pin(q.get());
    assert_pending("get on an empty queue", &mut get);
    q.add(s("x"));
    // The add wakes the waiting get (a lost wake-up would hang here, bounded).
    let got = within("get", get).await;
    assert_eq!(got.as_deref(), Some("x"));
}

#[tokio::test]
async fn spec_5_2_get_moves_the_item_from_dirty_to_processing() {
    let q = Queue::new();
    q.add(s("a"));
    let a = q.get().await.expect("queued");
    {
        let st = q.shared.state.lock();
        assert!(!st.dirty.contains_key(&a));
        assert!(st.processing.contains_key(&a));
    }
    // No longer dirty: a new add is accepted (and parked until done).
    q.add(s("a"));
    assert!(q.shared.state.lock().dirty.contains_key(&a));
}

#[tokio::test]
async fn spec_5_2_regression_7_9_workers_drain_the_queue_after_shutdown() {
    // k/k#131200: Get keeps returning queued items after ShutDown; only an empty queue ends it.
    let q = Queue::new();
    for k in ["a", "b", "c"] {
        q.add(s(k));
    }
    q.shutdown();
    assert!(q.shutting_down());
    let mut seen = Vec::new();
    while let Some(k) = within("drain", q.get()).await {
        q.done(&k);
        seen.push(k);
    }
    assert_eq!(seen, ["a", "b", "c"]);
    assert_eq!(q.get().await, None, "stays shut down");
}

#[tokio::test]
async fn spec_5_2_shutdown_wakes_every_blocked_worker() {
    let q: Queue<String> = Queue::new();
    let mut workers: Vec<_> = (0..4).map(|_| Box::pin(q.get())).collect();
    for w in &mut workers {
        assert_pending("a worker's get", w);
    }
    q.shutdown();
    for w in workers {
        assert_eq!(within("worker", w).await, None);
    }
}

#[tokio::test]
async fn spec_5_3_done_requeues_an_item_dirtied_during_processing() {
    let q = Queue::new();
    q.add(s("a"));
    q.add(s("b"));
    let a = q.get().await.expect("a");
    q.add(s("a"));
    q.done(&a);
    // Re-queued at the back, behind b.
    assert_eq!(q.get().await.as_deref(), Some("b"));
    assert_eq!(q.get().await.as_deref(), Some("a"));
}

#[tokio::test]
async fn spec_5_3_done_without_a_dirty_add_does_not_requeue() {
    let q = Queue::new();
    q.add(s("a"));
    let a = q.get().await.expect("a");
    q.done(&a);
    assert!(q.is_empty());
    assert!(q.shared.state.lock().processing.is_empty());
}

#[tokio::test]
async fn spec_5_3_regression_7_9_spurious_done_cannot_queue_an_item_twice() {
    // k/k#141079: a Done for an item no worker holds used to push a dirty item a second time.
    let q = Queue::new();
    q.add(s("a"));
    q.done(&s("a"));
    q.done(&s("a"));
    assert_eq!(q.len(), 1);
    let a = q.get().await.expect("a");
    assert!(q.is_empty());
    q.done(&a);
}

#[tokio::test]
async fn spec_5_3_done_wakes_a_waiting_worker_for_the_requeued_item() {
    let q = Queue::new();
    q.add(s("a"));
    let a = q.get().await.expect("a");
    q.add(s("a"));
    let mut worker = Box::pin(q.get());
    assert_pending("the worker's get, while a is processed", &mut worker);
    q.done(&a);
    assert_eq!(within("worker", worker).await.as_deref(), Some("a"));
}

#[tokio::test]
async fn spec_5_4_shutdown_with_drain_waits_for_processing_only() {
    let q = Queue::new();
    q.add(s("held"));
    q.add(s("queued"));
    let held = q.get().await.expect("held");

    let mut drain = Box::pin(q.shutdown_with_drain());
    assert_pending("the drain, while an item is processed", &mut drain);
    assert!(q.shutting_down());
    q.done(&held);
    within("drain", drain).await;
    // Regression 7.9 (k/k#141079): the drain returned although "queued" was never processed.
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await.as_deref(), Some("queued"));
}

#[tokio::test]
async fn spec_5_4_shutdown_with_drain_returns_at_once_when_nothing_is_processing() {
    let q = Queue::new();
    q.add(s("queued"));
    within("drain", q.shutdown_with_drain()).await;
    assert_eq!(q.len(), 1);
}

#[tokio::test]
async fn regression_7_9_shutdown_cancels_a_pending_drain() {
    // k/k#119554: ShutDown while ShutDownWithDrain waits must release it (drain flag cleared
    // under the same lock as the wait condition).
    let q = Queue::new();
    q.add(s("stuck"));
    let _stuck = q.get().await.expect("stuck");
    let mut drain = Box::pin(q.shutdown_with_drain());
    assert_pending("the drain", &mut drain);
    q.shutdown();
    within("drain", drain).await;
}

#[tokio::test]
async fn regression_7_9_every_drain_waiter_is_released() {
    // k/k#141079: a single Signal woke only one of several waiters.
    let q = Queue::new();
    q.add(s("a"));
    let a = q.get().await.expect("a");
    let mut waiters: Vec<_> = (0..3).map(|_| Box::pin(q.shutdown_with_drain())).collect();
    for w in &mut waiters {
        assert_pending("a drain waiter", w);
    }
    q.done(&a);
    for w in waiters {
        within("drain waiter", w).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_7_9_drain_never_misses_the_last_done() {
    // k/k#119554: the drain's check and wait were not atomic, so a Done in between was lost and
    // the drain hung. Race them many times; each round is bounded.
    for round in 0..500 {
        let q = Queue::new();
        q.add(round);
        let item = q.get().await.expect("item");
        let barrier = Arc::new(Barrier::new(2));
        let doer = tokio::spawn({
            let (q, barrier) = (q.clone(), barrier.clone());
            async move {
                barrier.wait().await;
                q.done(&item);
            }
        });
        barrier.wait().await;
        within("drain", q.shutdown_with_drain()).await;
        within("doer", doer).await.expect("task");
    }
}

#[tokio::test]
async fn get_is_cancel_safe() {
    let q = Queue::new();
    // A get that times out must not swallow a later item.
    assert!(timeout(Duration::from_millis(1), q.get()).await.is_err());
    q.add(s("a"));
    assert_eq!(within("get", q.get()).await.as_deref(), Some("a"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_workers_never_hold_one_key_twice_and_see_every_last_add() {
    const KEYS: usize = 16;
    const ADDS: usize = 4_000;
    const WORKERS: usize = 8;

    let q: Queue<usize> = Queue::new();
    let holders: Arc<Vec<AtomicUsize>> = Arc::new((0..KEYS).map(|_| AtomicUsize::new(0)).collect());
    // Per key: the add sequence number most recently seen by a worker at get time.
    let adds_done = Arc::new(AtomicUsize::new(0));
    let processed = Arc::new(parking_lot::Mutex::new(HashMap::<usize, usize>::new()));

    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (q, holders, processed) = (q.clone(), holders.clone(), processed.clone());
            tokio::spawn(async move {
                let mut handled = 0usize;
                while let Some(k) = q.get().await {
                    let before = holders[k].fetch_add(1, Ordering::SeqCst);
                    assert_eq!(before, 0, "key {k} handed to two workers at once");
                    // Hold it across a scheduling point so overlaps would show.
                    tokio::task::yield_now().await;
                    *processed.lock().entry(k).or_default() += 1;
                    holders[k].fetch_sub(1, Ordering::SeqCst);
                    q.done(&k);
                    handled += 1;
                }
                handled
            })
        })
        .collect();

    let producer = tokio::spawn({
        let (q, adds_done) = (q.clone(), adds_done.clone());
        async move {
            for i in 0..ADDS {
                q.add((i * 7) % KEYS);
                adds_done.fetch_add(1, Ordering::SeqCst);
                if i % 64 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }
    });
    within("producer", producer).await.expect("producer");
    // All adds happened before the shutdown: workers must drain every dirty key.
    q.shutdown();
    let mut total = 0;
    for w in workers {
        total += within("worker", w).await.expect("worker");
    }
    assert_eq!(adds_done.load(Ordering::SeqCst), ADDS);
    assert!(total <= ADDS, "dedup: never more gets than adds");
    let processed = processed.lock();
    assert_eq!(processed.len(), KEYS, "every key processed at least once");
    let st = q.shared.state.lock();
    assert!(st.queue.is_empty() && st.dirty.is_empty() && st.processing.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_add_during_processing_is_processed_after_it() {
    // The contract that makes dirty-while-processing safe: an add that happens while a worker
    // holds the key leads to one more get of that key after the current holder's done.
    let q: Queue<&'static str> = Queue::new();
    q.add("k");
    let k = q.get().await.expect("k");
    let mut second = Box::pin(q.get());
    q.add("k");
    assert_pending("a get of the held key", &mut second);
    q.done(&k);
    assert_eq!(within("second get", second).await, Some("k"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_wakeup_is_lost_between_producers_and_waiting_workers() {
    // Without a shutdown to wake everyone at the end, a lost notification would leave an item
    // queued while a worker sleeps; the deadline turns that into a failure.
    const ITEMS: usize = 20_000;
    const WORKERS: usize = 4;
    const PRODUCERS: usize = 4;
    let q: Queue<usize> = Queue::new();
    let handled = Arc::new(AtomicUsize::new(0));
    let all_handled = Arc::new(tokio::sync::Notify::new());
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (q, handled, all_handled) = (q.clone(), handled.clone(), all_handled.clone());
            tokio::spawn(async move {
                while let Some(k) = q.get().await {
                    q.done(&k);
                    if handled.fetch_add(1, Ordering::SeqCst) + 1 == ITEMS {
                        all_handled.notify_one();
                    }
                }
            })
        })
        .collect();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let q = q.clone();
            tokio::spawn(async move {
                for i in (p..ITEMS).step_by(PRODUCERS) {
                    q.add(i); // distinct items: every add must be handled exactly once
                    if i % 16 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for p in producers {
        within("producer", p).await.expect("producer");
    }
    within(
        "all items handled before any shutdown",
        all_handled.notified(),
    )
    .await;
    assert_eq!(handled.load(Ordering::SeqCst), ITEMS);
    q.shutdown();
    for w in workers {
        within("worker", w).await.expect("worker");
    }
}

/// An initial list queues one key per object; once the workers have drained it, the queue's
/// three structures keep at most their spare room, not the backlog's (many plugins on one large
/// informer would otherwise each hold it for good).
#[tokio::test]
async fn drained_queue_gives_back_the_room_a_backlog_grew() {
    let q: Queue<String> = Queue::new();
    for i in 0..5000 {
        q.add(format!("ns/o{i}"));
    }
    {
        let st = q.shared.state.lock();
        assert!(st.queue.capacity() >= 5000 && st.dirty.capacity() >= 5000);
    }
    // Hold half of them at once, so `processing` grows as large too.
    let mut held = Vec::new();
    for _ in 0..2500 {
        held.push(within("get", q.get()).await.expect("an item"));
    }
    assert!(q.shared.state.lock().processing.capacity() >= 2500);
    for k in held.drain(..) {
        q.done(&k);
    }
    while !q.is_empty() {
        let k = within("get", q.get()).await.expect("an item");
        q.done(&k);
    }
    let st = q.shared.state.lock();
    assert!(st.queue.is_empty() && st.dirty.is_empty() && st.processing.is_empty());
    for (what, cap) in [
        ("queue", st.queue.capacity()),
        ("dirty", st.dirty.capacity()),
        ("processing", st.processing.capacity()),
    ] {
        assert!(cap <= 2 * SPARE_CAPACITY, "{what} kept {cap} slots");
    }
}

#[tokio::test]
async fn a_key_is_pending_while_queued_or_held_by_a_worker() {
    let q: Queue<String> = Queue::new();
    assert!(!q.is_pending("a"));
    q.add("a".to_string());
    assert!(q.is_pending("a"), "queued");
    let got = within("get", q.get()).await.expect("an item");
    assert!(q.is_pending("a"), "held by a worker");
    q.done(&got);
    assert!(!q.is_pending("a"), "done");
    q.add("a".to_string());
    let got = within("get", q.get()).await.expect("an item");
    q.add("a".to_string());
    q.done(&got);
    assert!(
        q.is_pending("a"),
        "re-added while held: queued again at done"
    );
}
