//! The fake workqueue: records every add a guest (or the harness's worker logic) makes, and
//! holds keys as client-go's delaying queue would, against the virtual clock.
//!
//! A key is ready at most once (adds of a ready key fold into it, as the workqueue's dirty set
//! does); a delayed key waiting twice keeps the earlier due time, as the delaying queue does.

use std::collections::VecDeque;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::clock::VirtualClock;
use kwh_informer::workqueue::rate_limiter::{
    Bucket, ItemExponential, RateLimiter, CONTROLLER_BASE_DELAY, CONTROLLER_BURST,
    CONTROLLER_MAX_DELAY, CONTROLLER_QPS,
};
use kwh_plugin::QueueBackend;

/// Who put a key on the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The guest, through the `queue` import (`add` / `add-after`).
    Guest,
    /// The reconcile worker after a `requeue-after` outcome (what production does).
    Requeue,
    /// The reconcile worker after an error or trap: the delay of client-go's default
    /// controller rate limiter ([`ControllerRateLimiter`]).
    Backoff,
}

/// What the host's reconcile worker uses after an error or a trap, on the virtual clock:
/// client-go's default controller rate limiter, the larger of a per-key back-off (5 ms ·
/// 2^failures, at most 1000 s) and the wait for a token of an overall 10 qps bucket holding at
/// most 100 (spec 5.6). So a test that fails more than 100 reconciles within a virtual second
/// sees the later ones spaced 100 ms apart, as production would.
pub struct ControllerRateLimiter {
    per_key: ItemExponential<String>,
    bucket: Bucket,
    clock: VirtualClock,
    /// The real instant that stands for virtual time zero (the bucket counts in `Instant`s).
    epoch: Instant,
}

impl ControllerRateLimiter {
    /// A limiter whose bucket is full at `clock`'s current time.
    pub fn new(clock: VirtualClock) -> Self {
        let epoch = Instant::now();
        let bucket = Bucket::full_at(CONTROLLER_QPS, CONTROLLER_BURST, epoch + clock.elapsed());
        ControllerRateLimiter {
            per_key: ItemExponential::new(CONTROLLER_BASE_DELAY, CONTROLLER_MAX_DELAY),
            bucket,
            clock,
            epoch,
        }
    }

    /// The delay before `key`'s next attempt; counts one more failure of it and takes a token.
    pub fn when(&self, key: &String) -> Duration {
        let per_key = self.per_key.when(key);
        let overall = self.bucket.reserve_at(self.epoch + self.clock.elapsed());
        per_key.max(overall)
    }

    /// `key` succeeded: its back-off starts over (the bucket is shared and keeps its state).
    pub fn forget(&self, key: &String) {
        self.per_key.forget(key);
    }

    /// Failures of `key` since it last succeeded.
    pub fn num_requeues(&self, key: &String) -> u32 {
        self.per_key.num_requeues(key)
    }
}

/// One recorded add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    /// The key.
    pub key: String,
    /// `None` for `add`, the delay for `add-after` (and for requeues and backoffs).
    pub delay: Option<Duration>,
    /// Who added it.
    pub origin: Origin,
    /// Virtual time (since the harness started) of the add.
    pub at: Duration,
}

#[derive(Default)]
struct State {
    log: Vec<Enqueued>,
    ready: VecDeque<String>,
    /// (due time since start, key), unordered: test queues are small.
    waiting: Vec<(Duration, String)>,
}

/// The queue behind a harnessed plugin's `queue` import.
pub struct FakeQueue {
    clock: VirtualClock,
    state: Mutex<State>,
}

impl FakeQueue {
    /// An empty queue on `clock`.
    pub fn new(clock: VirtualClock) -> Self {
        FakeQueue {
            clock,
            state: Mutex::new(State::default()),
        }
    }

    /// Records and enqueues `key` (ready now when `delay` is none or zero).
    pub fn push(&self, key: String, delay: Option<Duration>, origin: Origin) {
        let now = self.clock.elapsed();
        let mut st = self.state.lock();
        st.log.push(Enqueued {
            key: key.clone(),
            delay,
            origin,
            at: now,
        });
        match delay.filter(|d| !d.is_zero()) {
            None => make_ready(&mut st, key),
            Some(d) => {
                let due = now.saturating_add(d);
                match st.waiting.iter_mut().find(|(_, k)| *k == key) {
                    Some(w) => w.0 = w.0.min(due),
                    None => st.waiting.push((due, key)),
                }
            }
        }
    }

    /// Moves every waiting key due by now to the ready list, earliest first; returns them.
    pub fn promote(&self) -> Vec<String> {
        let now = self.clock.elapsed();
        let mut st = self.state.lock();
        let mut due: Vec<(Duration, String)> = Vec::new();
        st.waiting.retain(|(t, k)| {
            if *t <= now {
                due.push((*t, k.clone()));
                false
            } else {
                true
            }
        });
        due.sort();
        let keys: Vec<String> = due.into_iter().map(|(_, k)| k).collect();
        for k in &keys {
            make_ready(&mut st, k.clone());
        }
        keys
    }

    /// Empties the queue (not the record of adds): a restarted process starts with none.
    pub fn clear(&self) {
        let mut st = self.state.lock();
        st.ready.clear();
        st.waiting.clear();
    }

    /// Takes `key` off the ready list if it is there (a worker took it).
    pub fn remove_ready(&self, key: &str) {
        self.state.lock().ready.retain(|k| k != key);
    }

    /// Takes the next ready key.
    pub fn pop(&self) -> Option<String> {
        self.state.lock().ready.pop_front()
    }

    /// The keys ready now, in order.
    pub fn ready(&self) -> Vec<String> {
        self.state.lock().ready.iter().cloned().collect()
    }

    /// The keys waiting for their delay, with the virtual time left until each is due, soonest
    /// first.
    pub fn waiting(&self) -> Vec<(String, Duration)> {
        let now = self.clock.elapsed();
        let mut w: Vec<(Duration, String)> = self.state.lock().waiting.clone();
        w.sort();
        w.into_iter()
            .map(|(t, k)| (k, t.saturating_sub(now)))
            .collect()
    }

    /// Every add recorded so far.
    pub fn log(&self) -> Vec<Enqueued> {
        self.state.lock().log.clone()
    }

    /// Every add recorded so far, clearing the record (not the queue).
    pub fn take_log(&self) -> Vec<Enqueued> {
        std::mem::take(&mut self.state.lock().log)
    }
}

fn make_ready(st: &mut State, key: String) {
    if !st.ready.contains(&key) {
        st.ready.push_back(key);
    }
}

impl QueueBackend for FakeQueue {
    fn add(&self, key: &str) {
        self.push(key.to_owned(), None, Origin::Guest);
    }

    fn add_after(&self, key: &str, delay: Duration) {
        self.push(key.to_owned(), Some(delay), Origin::Guest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_keys_fold_and_delayed_keys_wait_for_the_virtual_clock() {
        let clock = VirtualClock::default();
        let q = FakeQueue::new(clock.clone());
        q.add("a");
        q.add("a");
        q.add_after("b", Duration::from_secs(10));
        q.add_after("b", Duration::from_secs(5));
        q.add_after("c", Duration::ZERO);
        assert_eq!(q.ready(), ["a", "c"]);
        assert_eq!(q.waiting(), [("b".to_string(), Duration::from_secs(5))]);
        clock.advance(Duration::from_secs(4));
        assert!(q.promote().is_empty());
        clock.advance(Duration::from_secs(1));
        assert_eq!(q.promote(), ["b"]);
        assert_eq!(q.pop().as_deref(), Some("a"));
        assert_eq!(q.ready(), ["c", "b"]);
        assert_eq!(q.log().len(), 5);
        assert_eq!(q.take_log()[2].delay, Some(Duration::from_secs(10)));
        assert!(q.log().is_empty());
    }
}
