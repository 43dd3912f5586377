//! The basic work queue: FIFO order, dedup of items not yet taken, and a guarantee that one item
//! is never held by two workers at once (spec 5.1–5.4).
//!
//! Three structures, as in client-go: `dirty` (items that need processing), `processing` (items a
//! worker holds) and the FIFO `queue` (dirty items no worker holds). An item added while a worker
//! holds it only becomes dirty; `done` re-queues it, so the next worker sees the latest state once.

use std::borrow::Borrow;
use std::collections::VecDeque;
use std::hash::Hash;

use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::metrics::{InFlight, InFlightSource, MetricsError, QueueMetrics, QueuesCollector};
use super::sharded::ShardedMap;
use super::Key;

/// A deduplicating FIFO work queue shared by producers and worker tasks. Cloning is cheap and
/// yields another handle to the same queue.
///
/// A worker loop:
/// ```
/// # async fn worker(q: kwh_informer::workqueue::Queue<String>) {
/// while let Some(key) = q.get().await {
///     // reconcile `key` ...
///     q.done(&key);
/// }
/// # }
/// ```
pub struct Queue<T: Key> {
    shared: Arc<Shared<T>>,
}

impl<T: Key> Clone for Queue<T> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T: Key> std::fmt::Debug for Queue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.state.lock();
        f.debug_struct("Queue")
            .field("name", &self.name())
            .field("queued", &st.queue.len())
            .field("dirty", &st.dirty.len())
            .field("processing", &st.processing.len())
            .field("shutting_down", &st.shutting_down)
            .finish()
    }
}

struct Shared<T> {
    state: Mutex<State<T>>,
    /// One `notify_one` per item pushed onto the FIFO; `notify_waiters` on shutdown.
    item_ready: Notify,
    /// Broadcast when `processing` becomes empty or a drain is cancelled, for every
    /// `shutdown_with_drain` caller (k/k#141079: a single signal can wake the wrong waiter).
    idle: Notify,
    /// Broadcast on shutdown, for background tasks such as the delaying queue's timer loop.
    closed: Notify,
    metrics: Option<Arc<QueueMetrics>>,
}

struct State<T> {
    queue: VecDeque<T>,
    /// Value: when the item became dirty, recorded only for a queue with metrics. In shards,
    /// so that no single add rehashes a million keys (see [`ShardedMap`]).
    dirty: ShardedMap<T, Option<Instant>>,
    /// Value: when a worker took the item, recorded only for a queue with metrics.
    processing: ShardedMap<T, Option<Instant>>,
    shutting_down: bool,
    /// Set by `shutdown_with_drain`, cleared by `shutdown` to release drain waiters (k/k#119554).
    drain: bool,
}

/// Room each structure keeps once it has drained; more is given back to the allocator.
const SPARE_CAPACITY: usize = 1024;

impl<T: Key> State<T> {
    /// Give back the room a burst grew (the initial list queues one key per object): a drained
    /// queue would otherwise hold its largest backlog's slots for the life of the process, once
    /// per plugin, which for many plugins on one large informer outweighs the cache itself.
    fn release_spare(&mut self) {
        if self.queue.is_empty() && self.queue.capacity() > SPARE_CAPACITY {
            self.queue.shrink_to(SPARE_CAPACITY);
        }
        if self.dirty.is_empty() && self.dirty.capacity() > SPARE_CAPACITY {
            self.dirty.shrink_to(SPARE_CAPACITY);
        }
        if self.processing.is_empty() && self.processing.capacity() > SPARE_CAPACITY {
            self.processing.shrink_to(SPARE_CAPACITY);
        }
    }
}

impl<T: Key> Default for Queue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Key> Queue<T> {
    /// An unnamed queue; like client-go, it records no metrics (spec 5.7).
    pub fn new() -> Self {
        Self::build(None)
    }

    /// A queue whose metrics are labelled `name="<name>"` and rendered by `registry`. An empty
    /// name gives an unnamed queue that records nothing, as in client-go.
    pub fn named(name: &str, registry: &QueuesCollector) -> Result<Self, MetricsError> {
        if name.is_empty() {
            return Ok(Self::new());
        }
        let metrics = Arc::new(QueueMetrics::new(name));
        let q = Self::build(Some(Arc::clone(&metrics)));
        let shared: Arc<dyn InFlightSource> = q.shared.clone();
        registry.register(metrics, Arc::downgrade(&shared))?;
        Ok(q)
    }

    fn build(metrics: Option<Arc<QueueMetrics>>) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    dirty: ShardedMap::default(),
                    processing: ShardedMap::default(),
                    shutting_down: false,
                    drain: false,
                }),
                item_ready: Notify::new(),
                idle: Notify::new(),
                closed: Notify::new(),
                metrics,
            }),
        }
    }

    /// The metrics name, if the queue has one.
    pub fn name(&self) -> Option<&str> {
        self.shared.metrics.as_deref().map(QueueMetrics::name)
    }

    fn stamp(&self) -> Option<Instant> {
        self.shared.metrics.as_ref().map(|_| Instant::now())
    }

    /// Marks `item` as needing processing (spec 5.1). Ignored while shutting down or when the
    /// item is already dirty; an item a worker holds is only marked dirty and is queued again by
    /// [`done`](Self::done).
    pub fn add(&self, item: T) {
        let stamp = self.stamp();
        let st = self.shared.state.lock();
        if let Some(held) = self.admits(&st, &item) {
            self.insert(st, item, held, stamp);
        }
    }

    /// [`add`](Self::add) by a borrowed key (a `&str` for a queue of `Arc<str>`): the item is
    /// made only when it is not dirty already. Every notification of an informer enqueues a
    /// key, and in a busy queue most are already waiting.
    pub fn add_borrowed<Q>(&self, key: &Q)
    where
        T: Borrow<Q> + for<'a> From<&'a Q>,
        Q: Hash + Eq + ?Sized,
    {
        let stamp = self.stamp();
        let st = self.shared.state.lock();
        if let Some(held) = self.admits(&st, key) {
            self.insert(st, T::from(key), held, stamp);
        }
    }

    /// Whether an add of `key` changes anything (not shutting down, not dirty already), and if
    /// so whether a worker holds the key.
    fn admits<Q>(&self, st: &State<T>, key: &Q) -> Option<bool>
    where
        T: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if st.shutting_down || st.dirty.contains_key(key) {
            return None;
        }
        if let Some(m) = &self.shared.metrics {
            m.adds.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Some(st.processing.contains_key(key))
    }

    /// Marks an admitted `item` dirty; one no worker holds is queued too.
    fn insert(
        &self,
        mut st: MutexGuard<'_, State<T>>,
        item: T,
        held: bool,
        stamp: Option<Instant>,
    ) {
        if held {
            st.dirty.insert(item, stamp);
            return;
        }
        st.dirty.insert(item.clone(), stamp);
        st.queue.push_back(item);
        drop(st);
        self.shared.item_ready.notify_one();
    }

    /// Waits for the next item and hands it to the caller, who must call [`done`](Self::done)
    /// with it (spec 5.2). Returns `None` only when the queue is empty *and* shutting down, so
    /// workers drain whatever was queued before a shutdown (k/k#131200).
    ///
    /// Cancel-safe: dropping the future never loses an item or a wake-up.
    pub async fn get(&self) -> Option<T> {
        // Fast path: an item is ready, no need to register as a waiter.
        if let Some(taken) = self.try_get() {
            return taken;
        }
        loop {
            let notified = self.shared.item_ready.notified();
            tokio::pin!(notified);
            // Registered before the state check, so an add between the check and the await
            // still wakes this waiter.
            notified.as_mut().enable();
            if let Some(taken) = self.try_get() {
                return taken;
            }
            notified.await;
        }
    }

    /// `Some(Some(item))`: taken; `Some(None)`: shut down and empty; `None`: must wait.
    fn try_get(&self) -> Option<Option<T>> {
        let mut st = self.shared.state.lock();
        let Some(item) = st.queue.pop_front() else {
            return st.shutting_down.then_some(None);
        };
        let now = self.stamp();
        // Reuse the dirty entry's key allocation for the processing entry.
        let (key, added) = match st.dirty.remove_entry(&item) {
            Some(entry) => entry,
            None => (item.clone(), None),
        };
        st.processing.insert(key, now);
        if st.queue.is_empty() {
            st.release_spare();
        }
        drop(st);
        if let (Some(m), Some(now), Some(added)) = (&self.shared.metrics, now, added) {
            m.queue_duration
                .observe(now.saturating_duration_since(added).as_secs_f64());
        }
        Some(Some(item))
    }

    /// Marks the worker's processing of `item` finished; if it was added again meanwhile it goes
    /// back on the queue (spec 5.3). A `done` for an item no worker holds is ignored, so a
    /// stray call can never queue an item twice (k/k#141079).
    pub fn done(&self, item: &T) {
        self.done_timed(item, None);
    }

    /// [`Self::done`] at `now`, a clock read the caller made as its work ended (a worker that
    /// times its work anyway), so the work-duration metric needs no second one.
    pub fn done_at(&self, item: &T, now: Instant) {
        self.done_timed(item, Some(now));
    }

    fn done_timed(&self, item: &T, now: Option<Instant>) {
        let mut st = self.shared.state.lock();
        let Some(started) = st.processing.remove(item) else {
            return;
        };
        let requeued = st.dirty.contains_key(item);
        if requeued {
            st.queue.push_back(item.clone());
        }
        if st.processing.is_empty() {
            st.release_spare();
        }
        // Only drain waiters listen for idleness, and they set `drain` under this lock before
        // checking `processing`, so skipping the broadcast when it is unset loses nothing.
        let idle = st.drain && st.processing.is_empty();
        drop(st);
        if let (Some(m), Some(started)) = (&self.shared.metrics, started) {
            let now = now.unwrap_or_else(Instant::now);
            m.work_duration
                .observe(now.saturating_duration_since(started).as_secs_f64());
        }
        if requeued {
            self.shared.item_ready.notify_one();
        }
        if idle {
            self.shared.idle.notify_waiters();
        }
    }

    /// Items waiting for a worker (not counting those held by workers, nor those re-added while
    /// held, until `done` re-queues them).
    pub fn len(&self) -> usize {
        self.shared.state.lock().queue.len()
    }

    /// `len() == 0`.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Items a worker holds (got, not yet `done`): after a shutdown whose workers were stopped
    /// mid-item, the work that was abandoned.
    pub fn processing(&self) -> Vec<T> {
        self.shared
            .state
            .lock()
            .processing
            .keys()
            .cloned()
            .collect()
    }

    /// Stops accepting adds. Workers keep getting the items already queued; `get` returns `None`
    /// once the queue is empty (k/k#131200). Also cancels a pending
    /// [`shutdown_with_drain`](Self::shutdown_with_drain) wait (k/k#119554).
    pub fn shutdown(&self) {
        {
            let mut st = self.shared.state.lock();
            st.drain = false;
            st.shutting_down = true;
        }
        tracing::debug!(queue = self.name().unwrap_or(""), "workqueue shutting down");
        self.wake_all();
    }

    /// Like [`shutdown`](Self::shutdown), then waits until no worker holds an item (spec 5.4).
    /// It waits only for the *processing* set, not for the queued items (the client-go
    /// behaviour; the change proposed in k/k#141079 is not merged). A concurrent `shutdown`
    /// ends the wait early.
    pub async fn shutdown_with_drain(&self) {
        {
            let mut st = self.shared.state.lock();
            st.drain = true;
            st.shutting_down = true;
        }
        tracing::debug!(
            queue = self.name().unwrap_or(""),
            "workqueue shutting down, draining"
        );
        self.wake_all();
        loop {
            let idle = self.shared.idle.notified();
            tokio::pin!(idle);
            // Registered before the check: a `done` emptying `processing` in between is not
            // missed (the lost wake-up of k/k#119554).
            idle.as_mut().enable();
            {
                let st = self.shared.state.lock();
                if st.processing.is_empty() || !st.drain {
                    return;
                }
            }
            idle.await;
        }
    }

    fn wake_all(&self) {
        self.shared.item_ready.notify_waiters();
        self.shared.idle.notify_waiters();
        self.shared.closed.notify_waiters();
    }

    /// Whether `key` waits in the queue or is held by a worker: work on it is still to come or
    /// under way (a key only scheduled with `add_after` is not, until its time comes). A
    /// shadow revision waits on this for the live revision's queue before it reconciles a key.
    pub fn is_pending<Q>(&self, key: &Q) -> bool
    where
        T: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        let st = self.shared.state.lock();
        st.dirty.contains_key(key) || st.processing.contains_key(key)
    }

    /// Whether `shutdown` or `shutdown_with_drain` has been called.
    pub fn shutting_down(&self) -> bool {
        self.shared.state.lock().shutting_down
    }

    /// Resolves once the queue is shutting down; for background tasks bound to the queue.
    pub(crate) async fn closed(&self) {
        let closed = self.shared.closed.notified();
        tokio::pin!(closed);
        closed.as_mut().enable();
        if self.shutting_down() {
            return;
        }
        closed.await;
    }

    /// Counts a delayed re-add (client-go's `retries` metric, bumped by AddAfter).
    pub(crate) fn record_retry(&self) {
        if let Some(m) = &self.shared.metrics {
            m.retries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl<T: Key> InFlightSource for Shared<T> {
    fn in_flight(&self, now: Instant) -> InFlight {
        let st = self.state.lock();
        let mut g = InFlight {
            depth: st.dirty.len() as u64,
            ..InFlight::default()
        };
        for started in st.processing.values().flatten() {
            let secs = now.saturating_duration_since(*started).as_secs_f64();
            g.unfinished_seconds += secs;
            g.longest_running_seconds = g.longest_running_seconds.max(secs);
        }
        g
    }

    fn is_shut_down(&self) -> bool {
        self.state.lock().shutting_down
    }
}

#[cfg(test)]
mod tests;
