use std::time::Duration;

use tokio::time::{timeout, Instant};

use super::*;
use crate::workqueue::rate_limiter::{default_controller_rate_limiter, ItemExponential};

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

#[tokio::test(start_paused = true)]
async fn spec_5_6_add_rate_limited_is_add_after_when() {
    let q = RateLimitingQueue::new(ItemExponential::new(ms(10), Duration::from_secs(1)));
    let k = "ns/a".to_owned();
    for (failure, want) in [10u64, 20, 40].into_iter().enumerate() {
        let start = Instant::now();
        q.add_rate_limited(k.clone());
        assert_eq!(q.len(), 0, "delayed, not queued");
        let got = timeout(Duration::from_secs(60), q.get())
            .await
            .expect("ready in time")
            .expect("not shut down");
        assert_eq!(got, k);
        assert_eq!(start.elapsed(), ms(want), "failure {failure}");
        q.done(&got);
        assert_eq!(q.num_requeues(&k), failure as u32 + 1);
    }
}

#[tokio::test(start_paused = true)]
async fn spec_5_6_forget_only_clears_the_counter_and_done_is_still_required() {
    let q = RateLimitingQueue::new(default_controller_rate_limiter::<String>());
    let k = "ns/a".to_owned();
    q.add_rate_limited(k.clone());
    q.add_rate_limited(k.clone());
    assert_eq!(q.num_requeues(&k), 2);
    let got = timeout(Duration::from_secs(60), q.get())
        .await
        .expect("ready")
        .expect("open");
    q.forget(&got);
    assert_eq!(q.num_requeues(&k), 0);
    // Forget did not release the item: an add while held is only parked until done.
    q.add(k.clone());
    assert_eq!(q.len(), 0);
    q.done(&got);
    assert_eq!(q.len(), 1);
    // The back-off restarted at the base delay.
    q.done(&q.get().await.expect("requeued"));
    let start = Instant::now();
    q.add_rate_limited(k.clone());
    let _ = timeout(Duration::from_secs(60), q.get())
        .await
        .expect("ready")
        .expect("open");
    assert_eq!(start.elapsed(), ms(5));
}

#[tokio::test(start_paused = true)]
async fn spec_5_6_metrics_count_rate_limited_adds_as_retries() {
    let registry = QueuesCollector::new();
    let q = RateLimitingQueue::named("ctrl", &registry, default_controller_rate_limiter())
        .expect("registered");
    q.add_rate_limited("a".to_owned());
    q.add_rate_limited("b".to_owned());
    q.add_after("c".to_owned(), Duration::ZERO);
    let text = crate::workqueue::metrics::exposition(&registry);
    assert!(
        text.contains("workqueue_retries_total{name=\"ctrl\"} 3\n"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_workers_with_retries_never_share_a_key() {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    const KEYS: usize = 8;
    const WORKERS: usize = 6;
    const FAILURES_PER_KEY: u32 = 3;

    let q: RateLimitingQueue<usize> = RateLimitingQueue::new(ItemExponential::new(ms(1), ms(8)));
    let holders: Arc<Vec<AtomicUsize>> = Arc::new((0..KEYS).map(|_| AtomicUsize::new(0)).collect());
    let successes = Arc::new(AtomicUsize::new(0));
    let attempts = Arc::new(parking_lot::Mutex::new(HashMap::<usize, u32>::new()));

    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (q, holders, successes, attempts) = (
                q.clone(),
                holders.clone(),
                successes.clone(),
                attempts.clone(),
            );
            tokio::spawn(async move {
                while let Some(k) = q.get().await {
                    assert_eq!(
                        holders[k].fetch_add(1, Ordering::SeqCst),
                        0,
                        "key {k} held twice"
                    );
                    tokio::task::yield_now().await;
                    let n = {
                        let mut a = attempts.lock();
                        let n = a.entry(k).or_default();
                        *n += 1;
                        *n
                    };
                    holders[k].fetch_sub(1, Ordering::SeqCst);
                    if n <= FAILURES_PER_KEY {
                        q.add_rate_limited(k);
                    } else {
                        q.forget(&k);
                        successes.fetch_add(1, Ordering::SeqCst);
                    }
                    q.done(&k);
                }
            })
        })
        .collect();
    for k in 0..KEYS {
        q.add(k);
    }
    timeout(Duration::from_secs(10), async {
        while successes.load(Ordering::SeqCst) < KEYS {
            tokio::time::sleep(ms(1)).await;
        }
    })
    .await
    .expect("every key succeeds after its retries");
    q.shutdown();
    for w in workers {
        timeout(Duration::from_secs(10), w)
            .await
            .expect("worker exits")
            .expect("worker did not panic");
    }
    let attempts = attempts.lock();
    for k in 0..KEYS {
        assert_eq!(attempts[&k], FAILURES_PER_KEY + 1, "key {k}");
        assert_eq!(q.num_requeues(&k), 0, "forgotten");
    }
}
