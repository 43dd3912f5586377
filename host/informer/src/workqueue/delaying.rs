//! The delaying queue: `add_after` parks an item until its ready time (spec 5.5).
//!
//! As in client-go, one background task per queue owns the timer set; `add_after` only sends it
//! the item and its ready time, so callers never contend on the timers. The task starts on the
//! first delayed add, ends on shutdown or when the last handle is dropped, and never sleeps longer
//! than a 10 s heartbeat, so a missed timer can delay an item by at most that much.

use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument as _;

use super::metrics::{MetricsError, QueuesCollector};
use super::queue::Queue;
use super::sharded::ShardedMap;
use super::Key;

/// The longest the timer task sleeps without re-checking its timers (client-go's `maxWait`).
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// A ready time that cannot overflow `Instant` arithmetic, for absurdly long delays.
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A [`Queue`] with [`add_after`](Self::add_after). Derefs to the underlying `Queue`, so `get`,
/// `done`, `add`, `shutdown`… are called on it directly. Cloning yields another handle.
///
/// Dropping every handle discards items still waiting for their ready time.
pub struct DelayingQueue<T: Key> {
    queue: Queue<T>,
    timer: Arc<TimerHandle<T>>,
}

impl<T: Key> Clone for DelayingQueue<T> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            timer: Arc::clone(&self.timer),
        }
    }
}

impl<T: Key> std::fmt::Debug for DelayingQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelayingQueue")
            .field("queue", &self.queue)
            .field("waiting", &self.waiting_len())
            .finish()
    }
}

impl<T: Key> Deref for DelayingQueue<T> {
    type Target = Queue<T>;

    fn deref(&self) -> &Queue<T> {
        &self.queue
    }
}

struct TimerHandle<T> {
    tx: mpsc::UnboundedSender<Waiting<T>>,
    /// Taken by the first delayed add, which spawns the timer task.
    rx: Mutex<Option<mpsc::UnboundedReceiver<Waiting<T>>>>,
    started: AtomicBool,
    stats: Arc<LoopStats>,
}

/// Observations of the timer task, for `Debug` and tests.
#[derive(Default)]
struct LoopStats {
    /// Items in the timer set.
    waiting: AtomicUsize,
    /// Items sent to the timer task and not yet taken in: a caller adding in a loop (a guest
    /// in one call, on the thread the task would run on) is seen at once, not at the task's
    /// next turn.
    in_flight: AtomicUsize,
    /// Times the task woke because its sleep ended (a ready time or the heartbeat).
    timer_wakeups: AtomicU64,
}

struct Waiting<T> {
    item: T,
    ready_at: Instant,
}

impl<T: Key> Default for DelayingQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Key> DelayingQueue<T> {
    /// An unnamed delaying queue (no metrics).
    pub fn new() -> Self {
        Self::wrap(Queue::new())
    }

    /// A delaying queue with metrics labelled `name` in `registry`.
    pub fn named(name: &str, registry: &QueuesCollector) -> Result<Self, MetricsError> {
        Ok(Self::wrap(Queue::named(name, registry)?))
    }

    fn wrap(queue: Queue<T>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            queue,
            timer: Arc::new(TimerHandle {
                tx,
                rx: Mutex::new(Some(rx)),
                started: AtomicBool::new(false),
                stats: Arc::default(),
            }),
        }
    }

    /// Adds `item` once `delay` has passed (spec 5.5). A zero delay (Go's `d <= 0`) is a plain
    /// [`add`](Queue::add). Of several pending delays for one item the earliest ready time wins.
    /// Ignored while shutting down; otherwise counted in `workqueue_retries_total`.
    ///
    /// # Panics
    /// When a positive delay is first used outside a Tokio runtime (the timer task is spawned
    /// then).
    pub fn add_after(&self, item: T, delay: Duration) {
        if self.queue.shutting_down() {
            return;
        }
        self.queue.record_retry();
        if delay.is_zero() {
            self.queue.add(item);
            return;
        }
        let now = Instant::now();
        let ready_at = now.checked_add(delay).unwrap_or_else(|| now + FAR_FUTURE);
        self.ensure_timer_task();
        // A send fails only when the task has ended, i.e. after shutdown: dropping is right.
        // Counted before the send, so the task never takes in more than was counted.
        let in_flight = &self.timer.stats.in_flight;
        in_flight.fetch_add(1, Ordering::Relaxed);
        if self.timer.tx.send(Waiting { item, ready_at }).is_err() {
            in_flight.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Adds `item` through the timer task (which adds it as soon as it runs) instead of taking
    /// the queue's lock here: for a producer that must never wait for the queue's consumers,
    /// such as a live plugin's worker handing keys on to a shadow whose threads run at a lower
    /// priority (one of them preempted while holding the lock would hold the producer up).
    /// Not counted as a retry. Ignored while shutting down.
    ///
    /// # Panics
    /// When first used outside a Tokio runtime and no timer task was started
    /// ([`start_timers_on`](Self::start_timers_on)).
    pub fn add_soon(&self, item: T) {
        if self.queue.shutting_down() {
            return;
        }
        self.ensure_timer_task();
        let in_flight = &self.timer.stats.in_flight;
        in_flight.fetch_add(1, Ordering::Relaxed);
        let ready_at = Instant::now();
        if self.timer.tx.send(Waiting { item, ready_at }).is_err() {
            in_flight.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Items parked in the timer set (not yet ready, or ready but not yet moved to the queue),
    /// counting those on their way to it.
    pub fn waiting_len(&self) -> usize {
        let s = &self.timer.stats;
        s.waiting.load(Ordering::Relaxed) + s.in_flight.load(Ordering::Relaxed)
    }

    #[cfg(test)]
    fn timer_wakeups(&self) -> u64 {
        self.timer.stats.timer_wakeups.load(Ordering::Relaxed)
    }

    fn ensure_timer_task(&self) {
        if self.timer.started.load(Ordering::Acquire) {
            return;
        }
        self.start_timers_on(&tokio::runtime::Handle::current());
    }

    /// Starts the timer task (which moves delayed items into the queue once ready) on
    /// `runtime` now, rather than on the runtime of the first [`add_after`](Self::add_after):
    /// for a queue whose delayed adds come from tasks of another runtime than its consumers'.
    /// Nothing when it runs already.
    pub fn start_timers_on(&self, runtime: &tokio::runtime::Handle) {
        let Some(rx) = self.timer.rx.lock().take() else {
            return;
        };
        self.timer.started.store(true, Ordering::Release);
        let span =
            tracing::debug_span!("workqueue_timers", queue = self.queue.name().unwrap_or(""));
        runtime.spawn(
            timer_loop(self.queue.clone(), rx, Arc::clone(&self.timer.stats)).instrument(span),
        );
    }
}

/// Pending items ordered by ready time (then arrival, so equal times stay FIFO), with an index by
/// item so a duplicate only ever moves its entry earlier.
struct Timers<T> {
    by_time: BTreeMap<(Instant, u64), T>,
    /// In shards: a guest may ask for a million delayed keys (see [`ShardedMap`]).
    by_item: ShardedMap<T, (Instant, u64)>,
    seq: u64,
}

impl<T: Key> Timers<T> {
    fn new() -> Self {
        Self {
            by_time: BTreeMap::new(),
            by_item: ShardedMap::default(),
            seq: 0,
        }
    }

    fn len(&self) -> usize {
        self.by_item.len()
    }

    fn insert(&mut self, item: T, ready_at: Instant) {
        if let Some(existing) = self.by_item.get_mut(&item) {
            if existing.0 <= ready_at {
                return;
            }
            if let Some(moved) = self.by_time.remove(existing) {
                self.seq += 1;
                *existing = (ready_at, self.seq);
                self.by_time.insert(*existing, moved);
            }
            return;
        }
        self.seq += 1;
        let key = (ready_at, self.seq);
        self.by_time.insert(key, item.clone());
        self.by_item.insert(item, key);
    }

    fn next_ready_at(&self) -> Option<Instant> {
        self.by_time.first_key_value().map(|(k, _)| k.0)
    }

    /// Moves every item whose time has come into `out`, earliest first.
    fn pop_ready(&mut self, now: Instant, out: &mut Vec<T>) {
        while let Some(entry) = self.by_time.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let item = entry.remove();
            self.by_item.remove(&item);
            out.push(item);
        }
    }
}

async fn timer_loop<T: Key>(
    queue: Queue<T>,
    mut rx: mpsc::UnboundedReceiver<Waiting<T>>,
    stats: Arc<LoopStats>,
) {
    let mut timers = Timers::new();
    let mut ready = Vec::new();
    let closed = queue.closed();
    tokio::pin!(closed);
    loop {
        if queue.shutting_down() {
            break;
        }
        let now = Instant::now();
        timers.pop_ready(now, &mut ready);
        for item in ready.drain(..) {
            queue.add(item);
        }
        stats.waiting.store(timers.len(), Ordering::Relaxed);
        let heartbeat = now + HEARTBEAT;
        let wake_at = timers
            .next_ready_at()
            .map_or(heartbeat, |t| t.min(heartbeat));
        tokio::select! {
            () = &mut closed => break,
            () = tokio::time::sleep_until(wake_at) => {
                stats.timer_wakeups.fetch_add(1, Ordering::Relaxed);
            }
            msg = rx.recv() => {
                let Some(first) = msg else {
                    break; // every handle is gone
                };
                let now = Instant::now();
                let mut next = Some(first);
                while let Some(w) = next {
                    stats.in_flight.fetch_sub(1, Ordering::Relaxed);
                    if w.ready_at <= now {
                        queue.add(w.item);
                    } else {
                        timers.insert(w.item, w.ready_at);
                    }
                    next = rx.try_recv().ok();
                }
            }
        }
    }
    stats.waiting.store(0, Ordering::Relaxed);
    tracing::debug!("workqueue timer task stopped");
}

#[cfg(test)]
mod tests;
