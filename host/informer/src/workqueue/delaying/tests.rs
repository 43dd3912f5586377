use std::time::Duration;

use tokio::time::{timeout, Instant};

use super::*;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// With the clock paused, Tokio jumps time straight to the next timer whenever every task is
/// idle, so `elapsed()` measured around a `get` is exactly the delay the queue applied.
async fn get_at(q: &DelayingQueue<&'static str>, start: Instant) -> (&'static str, Duration) {
    let item = timeout(Duration::from_secs(3600), q.get())
        .await
        .expect("an item within the hour")
        .expect("queue not shut down");
    (item, start.elapsed())
}

#[tokio::test(start_paused = true)]
async fn spec_5_5_zero_delay_is_a_plain_add() {
    let q = DelayingQueue::new();
    q.add_after("a", Duration::ZERO);
    assert_eq!(q.len(), 1, "queued synchronously, no timer involved");
    assert_eq!(q.waiting_len(), 0);
    assert!(
        !q.timer.started.load(Ordering::Relaxed),
        "no task for zero delays"
    );
}

#[tokio::test(start_paused = true)]
async fn spec_5_5_item_becomes_ready_exactly_at_its_delay() {
    let q = DelayingQueue::new();
    let start = Instant::now();
    q.add_after("a", ms(250));
    assert_eq!(q.len(), 0);
    assert_eq!(get_at(&q, start).await, ("a", ms(250)));
}

#[tokio::test(start_paused = true)]
async fn spec_5_5_items_come_out_in_ready_time_order() {
    let q = DelayingQueue::new();
    let start = Instant::now();
    q.add_after("c", ms(300));
    q.add_after("a", ms(100));
    q.add_after("b", ms(200));
    for (want, at) in [("a", 100), ("b", 200), ("c", 300)] {
        let (item, elapsed) = get_at(&q, start).await;
        assert_eq!((item, elapsed), (want, ms(at)));
        q.done(&item);
    }
}

#[tokio::test(start_paused = true)]
async fn spec_5_5_equal_ready_times_keep_arrival_order() {
    let q = DelayingQueue::new();
    let start = Instant::now();
    for k in ["x", "y", "z"] {
        q.add_after(k, ms(50));
    }
    for want in ["x", "y", "z"] {
        assert_eq!(get_at(&q, start).await, (want, ms(50)));
    }
}

#[tokio::test(start_paused = true)]
async fn spec_5_5_duplicate_with_earlier_time_moves_the_entry_earlier() {
    let q = DelayingQueue::new();
    let start = Instant::now();
    q.add_after("a", Duration::from_secs(10));
    q.add_after("a", ms(100));
    let (item, at) = get_at(&q, start).await;
    assert_eq!((item, at), ("a", ms(100)));
    q.done(&item);
    // The later entry was replaced, not kept: nothing comes at 10 s.
    assert!(timeout(Duration::from_secs(60), q.get()).await.is_err());
    assert_eq!(q.waiting_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn spec_5_5_duplicate_with_later_time_keeps_the_earliest() {
    let q = DelayingQueue::new();
    let start = Instant::now();
    q.add_after("a", ms(100));
    q.add_after("a", Duration::from_secs(10));
    let (item, at) = get_at(&q, start).await;
    assert_eq!((item, at), ("a", ms(100)));
    q.done(&item);
    assert!(timeout(Duration::from_secs(60), q.get()).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn spec_5_5_ready_item_that_is_already_dirty_is_deduplicated() {
    let q = DelayingQueue::new();
    let start = Instant::now();
    q.add("a");
    q.add_after("a", ms(100));
    tokio::time::sleep(ms(200)).await;
    assert_eq!(q.len(), 1, "the delayed add merged into the dirty item");
    assert_eq!(get_at(&q, start).await.0, "a");
}

#[tokio::test(start_paused = true)]
async fn spec_5_5_heartbeat_wakes_the_timer_task_every_10s() {
    let q = DelayingQueue::new();
    let start = Instant::now();
    q.add_after("late", Duration::from_secs(35));
    assert_eq!(get_at(&q, start).await, ("late", Duration::from_secs(35)));
    // Woke at 10, 20 and 30 s on the heartbeat, then at 35 s for the item.
    assert_eq!(q.timer_wakeups(), 4);
}

#[tokio::test(start_paused = true)]
async fn spec_5_5_timer_task_stops_on_shutdown_and_drops_waiting_items() {
    let q = DelayingQueue::new();
    q.add_after("a", Duration::from_secs(5));
    tokio::task::yield_now().await;
    assert_eq!(q.waiting_len(), 1);
    q.shutdown();
    // The task noticed: it cleared its timers and will add nothing.
    timeout(Duration::from_secs(1), async {
        while q.waiting_len() != 0 {
            tokio::time::sleep(ms(1)).await;
        }
    })
    .await
    .expect("timer task stops");
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(q.get().await, None);
    // And add_after after shutdown does nothing.
    q.add_after("b", ms(1));
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn timer_task_ends_when_every_handle_is_dropped() {
    let q: DelayingQueue<&'static str> = DelayingQueue::new();
    q.add_after("a", Duration::from_secs(5));
    let inner = q.queue.clone();
    let weak = Arc::downgrade(&q.timer.stats);
    drop(q);
    timeout(Duration::from_secs(1), async {
        while weak.strong_count() > 0 {
            tokio::time::sleep(ms(1)).await;
        }
    })
    .await
    .expect("timer task ends and releases its state");
    drop(inner);
}

#[tokio::test(start_paused = true)]
async fn huge_delays_do_not_overflow() {
    let q = DelayingQueue::new();
    q.add_after("never", Duration::MAX);
    assert!(timeout(Duration::from_secs(3600), q.get()).await.is_err());
    assert_eq!(q.waiting_len(), 1);
}

#[test]
fn timers_keep_one_entry_per_item_at_its_earliest_time() {
    let t0 = Instant::now();
    let mut t = Timers::new();
    t.insert("a", t0 + ms(30));
    t.insert("b", t0 + ms(20));
    t.insert("a", t0 + ms(10));
    t.insert("a", t0 + ms(40));
    assert_eq!(t.len(), 2);
    assert_eq!(t.by_time.len(), 2);
    assert_eq!(t.next_ready_at(), Some(t0 + ms(10)));
    let mut out = Vec::new();
    t.pop_ready(t0 + ms(15), &mut out);
    assert_eq!(out, ["a"]);
    t.pop_ready(t0 + ms(20), &mut out);
    assert_eq!(out, ["a", "b"]);
    assert_eq!(t.len(), 0);
    assert_eq!(t.next_ready_at(), None);
}

#[tokio::test(start_paused = true)]
async fn add_soon_goes_through_the_timer_task_at_once_and_is_no_retry() {
    let q = DelayingQueue::new();
    let start = Instant::now();
    q.add_soon("a");
    assert_eq!(q.len(), 0, "not added by the caller");
    assert!(
        q.timer.started.load(Ordering::Relaxed),
        "the timer task adds it"
    );
    assert_eq!(
        get_at(&q, start).await,
        ("a", Duration::ZERO),
        "without a wait"
    );
    q.done(&"a");
    assert_eq!(q.waiting_len(), 0);
}
