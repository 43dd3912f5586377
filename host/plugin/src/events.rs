//! Kubernetes Events (`events.k8s.io/v1`) recorded from code that must never wait on the API.
//!
//! Why this shape: a plugin's reconcile records Events from inside a guest call, where an await
//! (or a blocked thread) would stall that plugin's worker and, under API trouble, every worker.
//! So [`EventRecorder::record`] only takes a short lock, updates memory and queues a write; one
//! [`EventWriter`] task does all the HTTP. The aggregation follows client-go's
//! `tools/events` broadcaster, so the API sees what it sees from any Kubernetes controller:
//!
//! - isomorphic events (same reporting controller, regarding object, type, reason and action;
//!   the note is not part of the identity and the Event keeps the first one) form a *series*:
//!   the first creates an Event, the second patches `series` onto it at once, later ones only
//!   count in memory and are written every [`RecorderConfig::series_flush`];
//! - a series idle for [`RecorderConfig::series_expiry`] is finished (its last count written)
//!   and forgotten, so the next isomorphic event starts a new Event;
//! - new series are rate-limited per regarding object with a token bucket, as client-go's spam
//!   filter does (burst 25, one token per 5 minutes), so a hot loop cannot flood the API;
//! - a series patch answered 404 (Events expire, an hour by default) creates the Event again
//!   with its series.
//!
//! Where this differs from client-go, on purpose: nothing ever waits for the API. The queue is
//! bounded; a full queue drops the new series (counted) instead of blocking; a series patch
//! carries the count current when it is written, not when it was queued, so a burst of
//! identical events costs one create and one patch, plus one patch per flush interval while it
//! lasts.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tracing::Instrument;

use kwh_client::client::{Client, Patch, WriteParams};
use kwh_client::resource::ApiResource;
use kwh_client::Error;

mod model;
mod series;

use model::truncate_note;
pub use model::{EventType, NewEvent, ObjectRef, UnknownEventType, FIELD_LIMIT, NOTE_LIMIT};
use series::{event_body, event_name, series_patch, unix_nanos, Series, SeriesKey};

/// Where Events of cluster-scoped objects go, as client-go puts them.
const CLUSTER_SCOPED_NAMESPACE: &str = "default";

/// Tries of one write (the first and three retries): enough to ride out a restarting API server
/// or a burst of 429s, few enough that one failing write holds the queue about a second.
const MAX_ATTEMPTS: u32 = 4;
/// First retry delay; doubles per retry, with up to 25% jitter as client-go adds.
const RETRY_BASE: Duration = Duration::from_millis(200);
/// A server's `Retry-After` is honoured up to this; longer would hold every other Event.
const RETRY_AFTER_CAP: Duration = Duration::from_secs(5);
/// Lower bound of the flush interval: a zero interval would make the writer spin.
const MIN_FLUSH: Duration = Duration::from_millis(10);

/// How the recorder aggregates, limits and writes.
#[derive(Debug, Clone)]
pub struct RecorderConfig {
    /// The Events' `reportingInstance`: which replica of the host wrote them.
    pub reporting_instance: String,
    /// Writes waiting for the writer; when full, new series are dropped (client-go: 1000).
    pub queue_capacity: usize,
    /// New series per regarding object allowed at once (client-go's spam filter: 25).
    pub burst: u32,
    /// One more new series is allowed per object after this (client-go: 1 per 300 s); zero
    /// means no limit.
    pub refill: Duration,
    /// How often counts of running series are written.
    pub series_flush: Duration,
    /// A series idle this long is finished; the next isomorphic event starts a new Event
    /// (client-go: 6 minutes).
    pub series_expiry: Duration,
    /// How long [`EventWriter::run`] keeps writing after its shutdown signal.
    pub shutdown_grace: Duration,
    /// While closed, nothing is written (a standby, or a leader whose lease may have passed
    /// to another replica): the write is given up and counted as a failure.
    pub fence: Option<kwh_coordination::leader_election::Fence>,
}

impl RecorderConfig {
    /// client-go's limits; the instance name has no sensible default.
    pub fn new(reporting_instance: impl Into<String>) -> Self {
        RecorderConfig {
            reporting_instance: reporting_instance.into(),
            queue_capacity: 1000,
            burst: 25,
            refill: Duration::from_secs(300),
            series_flush: Duration::from_secs(30),
            series_expiry: Duration::from_secs(360),
            shutdown_grace: Duration::from_secs(5),
            fence: None,
        }
    }
}

/// A snapshot of the recorder's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventStats {
    /// Calls of [`EventRecorder::record`].
    pub recorded: u64,
    /// Occurrences counted into an existing series.
    pub aggregated: u64,
    /// Events created on the API server (including re-creations after a 404).
    pub created: u64,
    /// Series patches the API server accepted.
    pub patched: u64,
    /// New series dropped because the write queue was full.
    pub dropped_queue_full: u64,
    /// New series dropped because their object had no token left.
    pub dropped_rate_limited: u64,
    /// Writes given up on (each logged once).
    pub write_failures: u64,
}

#[derive(Default)]
struct Counters {
    recorded: AtomicU64,
    aggregated: AtomicU64,
    created: AtomicU64,
    patched: AtomicU64,
    dropped_queue_full: AtomicU64,
    dropped_rate_limited: AtomicU64,
    write_failures: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A queued write; the series is looked up when it is written, so it carries current counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Write {
    Create(u64),
    Patch(u64),
}

/// client-go's spam filter: a token bucket per regarding object.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: u32,
    stamp: Instant,
}

impl Bucket {
    fn full(burst: u32, now: Instant) -> Self {
        Bucket {
            tokens: burst,
            stamp: now,
        }
    }

    /// Whole tokens earned since `stamp`; a full bucket earns nothing, so that a burst after a
    /// quiet spell gets exactly `burst`.
    fn refill(&mut self, burst: u32, every: Duration, now: Instant) {
        if self.tokens >= burst || every.is_zero() {
            self.tokens = burst;
            self.stamp = now;
            return;
        }
        let earned = now.saturating_duration_since(self.stamp).as_nanos() / every.as_nanos();
        if earned == 0 {
            return;
        }
        let earned = u32::try_from(earned).unwrap_or(u32::MAX);
        self.tokens = self.tokens.saturating_add(earned).min(burst);
        self.stamp = match every.checked_mul(earned) {
            Some(d) if self.tokens < burst => self.stamp + d,
            _ => now,
        };
    }

    fn take(&mut self, burst: u32, every: Duration, now: Instant) -> bool {
        self.refill(burst, every, now);
        if every.is_zero() {
            return true;
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }

    fn is_full(&mut self, burst: u32, every: Duration, now: Instant) -> bool {
        self.refill(burst, every, now);
        self.tokens >= burst
    }
}

/// What one `record` call did, for the counters and logs outside the lock.
enum Outcome {
    Queued,
    Aggregated {
        queued: bool,
    },
    /// The key comes back for the log line.
    QueueFull {
        first: bool,
        key: SeriesKey,
    },
    RateLimited {
        key: SeriesKey,
    },
}

#[derive(Default)]
struct State {
    /// Live series by identity.
    index: HashMap<Arc<SeriesKey>, u64>,
    /// Live series and finished ones still waiting for a write.
    series: HashMap<u64, Series>,
    buckets: HashMap<ObjectRef, Bucket>,
    queue: VecDeque<Write>,
    next_id: u64,
    /// Event names are `<object>.<hex nanos>`; kept increasing so that two Events about one
    /// object in the same clock tick cannot collide (the second would be lost as 409).
    last_name_nanos: u64,
    /// A full queue is logged once per episode, not per dropped event.
    full_logged: bool,
}

impl State {
    fn record(
        &mut self,
        config: &RecorderConfig,
        key: SeriesKey,
        note: Option<String>,
        wall: SystemTime,
        now: Instant,
    ) -> Outcome {
        if let Some(&id) = self.index.get(&key) {
            if let Some(s) = self.series.get_mut(&id) {
                if now.saturating_duration_since(s.last_seen) <= config.series_expiry {
                    s.count += 1;
                    s.last_observed = wall;
                    s.last_seen = now;
                    // client-go writes the second occurrence at once, so that a series is
                    // visible quickly; later ones wait for the flush.
                    let queued = s.count == 2 && self.queue.len() < config.queue_capacity;
                    if queued {
                        self.queue.push_back(Write::Patch(id));
                    }
                    return Outcome::Aggregated { queued };
                }
            }
            self.retire(id, config.queue_capacity);
        }

        if self.queue.len() >= config.queue_capacity {
            let first = !self.full_logged;
            self.full_logged = true;
            return Outcome::QueueFull { first, key };
        }
        let allowed = match self.buckets.get_mut(&key.regarding) {
            Some(b) => b.take(config.burst, config.refill, now),
            None => {
                let mut b = Bucket::full(config.burst, now);
                let ok = b.take(config.burst, config.refill, now);
                self.buckets.insert(key.regarding.clone(), b);
                ok
            }
        };
        if !allowed {
            return Outcome::RateLimited { key };
        }

        let id = self.next_id;
        self.next_id += 1;
        let nanos = unix_nanos(wall).max(self.last_name_nanos.saturating_add(1));
        self.last_name_nanos = nanos;
        let name = event_name(&key.regarding.name, nanos);
        let namespace = key
            .regarding
            .namespace
            .clone()
            .unwrap_or_else(|| CLUSTER_SCOPED_NAMESPACE.to_owned());
        let key = Arc::new(key);
        self.series.insert(
            id,
            Series {
                key: key.clone(),
                name,
                namespace,
                event_time: wall,
                note,
                count: 1,
                sent: 1,
                last_observed: wall,
                last_seen: now,
                created: false,
                live: true,
            },
        );
        self.index.insert(key, id);
        self.queue.push_back(Write::Create(id));
        Outcome::Queued
    }

    /// Finish a series: new occurrences start another. Its last count still gets written
    /// (queued now if there is room, else by the next flush); one not created yet waits for
    /// its create.
    fn retire(&mut self, id: u64, capacity: usize) {
        let Some(s) = self.series.get_mut(&id) else {
            return;
        };
        s.live = false;
        let key = s.key.clone();
        let (created, dirty) = (s.created, s.dirty());
        if self.index.get(&*key) == Some(&id) {
            self.index.remove(&*key);
        }
        if created && !dirty {
            self.series.remove(&id);
        } else if created && self.queue.len() < capacity {
            self.queue.push_back(Write::Patch(id));
        }
    }

    /// Drop a series entirely (its create failed, or its last write was tried).
    fn forget(&mut self, id: u64) {
        if let Some(s) = self.series.remove(&id) {
            if self.index.get(&*s.key) == Some(&id) {
                self.index.remove(&*s.key);
            }
        }
    }

    /// The periodic pass: finish idle series, forget finished clean ones, drop buckets that
    /// are full again (they would start full anyway), and return the series due a patch.
    fn sweep(&mut self, config: &RecorderConfig, now: Instant) -> Vec<u64> {
        let expired: Vec<u64> = self
            .series
            .iter()
            .filter(|(_, s)| {
                s.live && now.saturating_duration_since(s.last_seen) > config.series_expiry
            })
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            if let Some(s) = self.series.get_mut(&id) {
                s.live = false;
                let key = s.key.clone();
                if self.index.get(&*key) == Some(&id) {
                    self.index.remove(&*key);
                }
            }
        }
        self.series.retain(|_, s| s.live || !s.created || s.dirty());
        let (burst, refill) = (config.burst, config.refill);
        self.buckets.retain(|_, b| !b.is_full(burst, refill, now));
        let mut due: Vec<u64> = self
            .series
            .iter()
            .filter(|(_, s)| s.created && s.dirty())
            .map(|(id, _)| *id)
            .collect();
        due.sort_unstable();
        due
    }
}

struct Shared {
    config: RecorderConfig,
    state: Mutex<State>,
    /// Wakes the writer when a write is queued (a permit is kept if it is busy).
    wake: Notify,
    counters: Counters,
}

/// Records Events without waiting; cheap to clone and share between workers.
#[derive(Clone)]
pub struct EventRecorder(Arc<Shared>);

impl fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventRecorder")
            .field("reporting_instance", &self.0.config.reporting_instance)
            .finish_non_exhaustive()
    }
}

impl EventRecorder {
    /// Returns the recorder and the writer future's owner; the caller spawns
    /// `writer.run(shutdown)`. Until it runs, writes queue up to the capacity.
    pub fn new(client: Client, config: RecorderConfig) -> (EventRecorder, EventWriter) {
        let shared = Arc::new(Shared {
            config,
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            counters: Counters::default(),
        });
        let writer = EventWriter {
            shared: shared.clone(),
            client,
            resource: ApiResource::new("events.k8s.io/v1", "Event", "events", true),
        };
        (EventRecorder(shared), writer)
    }

    /// Never blocks and never awaits: one short lock (never held across an await), then at
    /// most a wake-up of the writer. Aggregates into a running series, rate-limits new ones,
    /// queues their writes; what cannot be queued is dropped and counted.
    pub fn record(&self, reporting_controller: &str, event: NewEvent) {
        let shared = &*self.0;
        bump(&shared.counters.recorded);
        let (wall, now) = (SystemTime::now(), Instant::now());
        let NewEvent {
            regarding,
            event_type,
            reason,
            action,
            mut note,
        } = event;
        if let Some(n) = note.as_mut() {
            truncate_note(n);
        }
        let key = SeriesKey {
            controller: reporting_controller.to_owned(),
            regarding: regarding.normalized(),
            event_type,
            reason,
            action,
        };
        let outcome = shared
            .state
            .lock()
            .record(&shared.config, key, note, wall, now);
        match outcome {
            Outcome::Queued => shared.wake.notify_one(),
            Outcome::Aggregated { queued } => {
                bump(&shared.counters.aggregated);
                if queued {
                    shared.wake.notify_one();
                }
            }
            Outcome::QueueFull { first, key } => {
                bump(&shared.counters.dropped_queue_full);
                if first {
                    tracing::warn!(
                        controller = reporting_controller,
                        regarding = %key.regarding,
                        reason = %key.reason,
                        capacity = shared.config.queue_capacity,
                        "event queue full; dropping new Events until the writer catches up"
                    );
                }
            }
            Outcome::RateLimited { key } => {
                bump(&shared.counters.dropped_rate_limited);
                tracing::debug!(
                    controller = reporting_controller,
                    regarding = %key.regarding,
                    reason = %key.reason,
                    "event dropped: too many new Events about this object"
                );
            }
        }
    }

    /// The counters, read without the lock.
    pub fn stats(&self) -> EventStats {
        let c = &self.0.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        EventStats {
            recorded: load(&c.recorded),
            aggregated: load(&c.aggregated),
            created: load(&c.created),
            patched: load(&c.patched),
            dropped_queue_full: load(&c.dropped_queue_full),
            dropped_rate_limited: load(&c.dropped_rate_limited),
            write_failures: load(&c.write_failures),
        }
    }
}

/// The one task that writes Events; see [`EventWriter::run`].
pub struct EventWriter {
    shared: Arc<Shared>,
    client: Client,
    resource: ApiResource,
}

impl fmt::Debug for EventWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventWriter")
            .field("reporting_instance", &self.shared.config.reporting_instance)
            .finish_non_exhaustive()
    }
}

/// Why one write failed.
#[derive(Debug, thiserror::Error)]
enum WriteError {
    #[error(transparent)]
    Api(#[from] Error),
    #[error("cannot encode the Event: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("this replica may not write now (not the leader, or its lease lapsed); refused or abandoned")]
    Fenced,
}

impl WriteError {
    fn code(&self) -> Option<u16> {
        match self {
            WriteError::Api(e) => e.code(),
            WriteError::Encode(_) | WriteError::Fenced => None,
        }
    }
}

impl EventWriter {
    /// Writes queued Events and flushes series counts until `shutdown` completes; then writes
    /// what is still queued or uncounted, for at most [`RecorderConfig::shutdown_grace`], and
    /// returns.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let span = tracing::info_span!(
            "event writer",
            instance = %self.shared.config.reporting_instance
        );
        async {
            let stopping = AtomicBool::new(false);
            let work = self.serve(&stopping);
            tokio::pin!(work);
            tokio::select! {
                () = shutdown => {}
                () = &mut work => return,
            }
            // A write in flight is let finish rather than cut short, so what it did is known
            // (a cut-short patch could not be told from a done one); the grace bounds it all.
            stopping.store(true, Ordering::Relaxed);
            self.shared.wake.notify_one();
            let grace = self.shared.config.shutdown_grace;
            if tokio::time::timeout(grace, work).await.is_err() {
                let (queued, dirty) = {
                    let st = self.shared.state.lock();
                    let dirty = st.series.values().filter(|s| s.dirty()).count();
                    (st.queue.len(), dirty)
                };
                tracing::warn!(
                    queued,
                    unwritten_series = dirty,
                    ?grace,
                    "event writer stopped before writing everything"
                );
            }
        }
        .instrument(span)
        .await
    }

    /// Writes and flushes until `stopping` is set, then writes what is left and returns.
    async fn serve(&self, stopping: &AtomicBool) {
        let flush = self.shared.config.series_flush.max(MIN_FLUSH);
        let mut next_sweep = tokio::time::Instant::now() + flush;
        while !stopping.load(Ordering::Relaxed) {
            if tokio::time::Instant::now() >= next_sweep {
                self.sweep().await;
                next_sweep = tokio::time::Instant::now() + flush;
            }
            if let Some(w) = self.front() {
                self.write_front(w).await;
                continue;
            }
            tokio::select! {
                () = self.shared.wake.notified() => {}
                () = tokio::time::sleep_until(next_sweep) => {}
            }
        }
        while let Some(w) = self.front() {
            self.write_front(w).await;
        }
        self.sweep().await;
    }

    fn front(&self) -> Option<Write> {
        self.shared.state.lock().queue.front().copied()
    }

    /// Write the front of the queue, then pop it: its place in the queue is held while it is
    /// written, and it is counted only once popped, so whoever sees the count can rely on the
    /// room being free again.
    async fn write_front(&self, w: Write) {
        let tally = match w {
            Write::Create(id) => self.create_series(id).await,
            Write::Patch(id) => self.patch_series(id).await,
        };
        {
            let mut st = self.shared.state.lock();
            st.queue.pop_front();
            if st.queue.is_empty() {
                st.full_logged = false;
            }
        }
        tally.add_to(&self.shared.counters);
    }

    async fn sweep(&self) {
        let due = self
            .shared
            .state
            .lock()
            .sweep(&self.shared.config, Instant::now());
        for id in due {
            self.patch_series(id).await.add_to(&self.shared.counters);
        }
    }

    async fn create_series(&self, id: u64) -> Tally {
        let mut tally = Tally::default();
        let prepared = {
            let st = self.shared.state.lock();
            st.series.get(&id).map(|s| {
                let body = event_body(s, &self.shared.config.reporting_instance, false);
                (s.key.clone(), s.namespace.clone(), body)
            })
        };
        let Some((key, namespace, body)) = prepared else {
            return tally;
        };
        let result = match body {
            Ok(body) => self.create(&namespace, body).await,
            Err(e) => Err(e.into()),
        };
        let mut st = self.shared.state.lock();
        match result {
            Ok(created) => {
                tally.created += u64::from(created);
                if let Some(s) = st.series.get_mut(&id) {
                    s.created = true;
                }
            }
            Err(e) => {
                tally.failures += 1;
                self.failed(&key, "create", &e);
                // Forgotten, so that the next isomorphic event tries again.
                st.forget(id);
            }
        }
        tally
    }

    /// Write a series' current count; a 404 (the Event expired) creates it again, series and
    /// all. A finished series gets this one try and is then forgotten.
    async fn patch_series(&self, id: u64) -> Tally {
        let mut tally = Tally::default();
        let prepared = {
            let mut st = self.shared.state.lock();
            match st.series.get_mut(&id) {
                Some(s) if s.created && s.dirty() => {
                    let before = s.sent;
                    s.sent = s.count;
                    let patch = series_patch(s.count, s.last_observed);
                    Some((
                        s.key.clone(),
                        s.namespace.clone(),
                        s.name.clone(),
                        before,
                        patch,
                    ))
                }
                Some(s) if !s.live && s.created => {
                    st.forget(id);
                    None
                }
                _ => None,
            }
        };
        let Some((key, namespace, name, before, patch)) = prepared else {
            return tally;
        };
        let mut what = "series patch";
        let mut result = match patch {
            Ok(patch) => self.patch(&namespace, &name, patch).await,
            Err(e) => Err(e.into()),
        };
        if result.as_ref().err().and_then(WriteError::code) == Some(404) {
            what = "re-create after 404";
            let body = {
                let st = self.shared.state.lock();
                st.series
                    .get(&id)
                    .map(|s| event_body(s, &self.shared.config.reporting_instance, true))
            };
            result = match body {
                Some(Ok(body)) => self.create(&namespace, body).await.map(|created| {
                    tally.created += u64::from(created);
                }),
                Some(Err(e)) => Err(e.into()),
                None => Ok(()),
            };
        } else if result.is_ok() {
            tally.patched += 1;
        }
        let mut st = self.shared.state.lock();
        if let Err(e) = &result {
            tally.failures += 1;
            self.failed(&key, what, e);
            if retryable_write(e) {
                // The next flush tries again (a live series only; see below).
                if let Some(s) = st.series.get_mut(&id) {
                    s.sent = s.sent.min(before);
                }
            }
        }
        if st.series.get(&id).is_some_and(|s| !s.live) {
            st.forget(id);
        }
        tally
    }

    /// POST with retries: `Ok(false)` when the Event was already there (409), which is what a
    /// retry after a lost answer finds, so it counts as done.
    async fn create(&self, namespace: &str, body: Bytes) -> Result<bool, WriteError> {
        let params = WriteParams::default();
        let r = self
            .fenced(retrying(|| {
                self.client
                    .create(&self.resource, Some(namespace), body.clone(), &params)
            }))
            .await?;
        match r {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some(409) => {
                tracing::debug!(namespace, error = %e, "Event already exists");
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn patch(&self, namespace: &str, name: &str, patch: Bytes) -> Result<(), WriteError> {
        let params = WriteParams::default();
        let patch = Patch::Merge(patch);
        self.fenced(retrying(|| {
            self.client
                .patch(&self.resource, Some(namespace), name, None, &patch, &params)
        }))
        .await?
        .map(drop)
        .map_err(WriteError::from)
    }

    /// Runs a write (its retries included) behind the configured fence: refused while it is
    /// closed, abandoned the moment it closes (see [`kwh_coordination::leader_election::Fence::guard`]).
    async fn fenced<T>(&self, write: impl Future<Output = T>) -> Result<T, WriteError> {
        match &self.shared.config.fence {
            Some(f) => f.guard(write).await.map_err(|_| WriteError::Fenced),
            None => Ok(write.await),
        }
    }

    /// The one log line of a write given up on.
    fn failed(&self, key: &SeriesKey, write: &str, e: &WriteError) {
        tracing::warn!(
            controller = %key.controller,
            regarding = %key.regarding,
            reason = %key.reason,
            write,
            error = %e,
            "cannot write Event"
        );
    }
}

/// What one write did, added to the counters once it is done.
#[derive(Debug, Default)]
struct Tally {
    created: u64,
    patched: u64,
    failures: u64,
}

impl Tally {
    fn add_to(&self, c: &Counters) {
        c.created.fetch_add(self.created, Ordering::Relaxed);
        c.patched.fetch_add(self.patched, Ordering::Relaxed);
        c.write_failures.fetch_add(self.failures, Ordering::Relaxed);
    }
}

/// Failures a later try may get past: the server busy or restarting, the connection lost.
fn retryable(e: &Error) -> bool {
    match e {
        Error::Api(s) => s.code == 429 || s.code >= 500,
        Error::Connect { .. } | Error::Http(_) | Error::Timeout(_) => true,
        Error::Decode(_) | Error::Config(_) => false,
    }
}

fn retryable_write(e: &WriteError) -> bool {
    match e {
        WriteError::Api(e) => retryable(e),
        WriteError::Encode(_) | WriteError::Fenced => false,
    }
}

/// One write with a few retries ([`MAX_ATTEMPTS`]), backing off and honouring a short
/// `Retry-After`.
async fn retrying<T, F, Fut>(mut call: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let mut delay = RETRY_BASE;
    let mut attempt = 1;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) if attempt < MAX_ATTEMPTS && retryable(&e) => {
                let asked = e
                    .status()
                    .and_then(|s| s.details.as_ref())
                    .and_then(|d| d.retry_after_seconds)
                    .map(|s| Duration::from_secs(s.into()).min(RETRY_AFTER_CAP));
                let jitter = delay.mul_f64(rand::random::<f64>() * 0.25);
                let wait = asked.unwrap_or_default().max(delay + jitter);
                tracing::debug!(attempt, ?wait, error = %e, "Event write failed; retrying");
                tokio::time::sleep(wait).await;
                delay = delay.saturating_mul(2);
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(name: &str) -> ObjectRef {
        ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("ns".into()),
            name: name.into(),
            uid: None,
        }
    }

    fn key(reason: &str) -> SeriesKey {
        SeriesKey {
            controller: "janitor".into(),
            regarding: cm("a"),
            event_type: EventType::Normal,
            reason: reason.into(),
            action: "Delete".into(),
        }
    }

    fn config() -> RecorderConfig {
        RecorderConfig::new("host-a")
    }

    #[test]
    fn names_are_object_dot_hex_nanos() {
        assert_eq!(
            event_name("exists", 0x17b0_c0ff_ee00_0001),
            "exists.17b0c0ffee000001"
        );
        let mut st = State::default();
        let (wall, now) = (SystemTime::now(), Instant::now());
        let c = config();
        // Two Events about one object in the same instant still get two names.
        st.record(&c, key("A"), None, wall, now);
        st.record(&c, key("B"), None, wall, now);
        let mut names: Vec<_> = st.series.values().map(|s| s.name.clone()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names.iter().all(|n| n.starts_with("a.")));
    }

    #[test]
    fn events_from_outside_are_cut_to_the_api_s_limits() {
        let regarding = ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: None,
            name: "a".into(),
            uid: None,
        };
        let e = NewEvent {
            regarding,
            event_type: EventType::Normal,
            reason: "R".repeat(200),
            action: format!("{}é", "A".repeat(FIELD_LIMIT - 1)),
            note: Some("n".repeat(2000)),
        }
        .within_api_limits();
        assert_eq!(e.reason.len(), FIELD_LIMIT);
        assert_eq!(
            e.action,
            "A".repeat(FIELD_LIMIT - 1),
            "not split inside a character"
        );
        assert_eq!(e.note.map(|n| n.len()), Some(NOTE_LIMIT));
    }

    #[test]
    fn notes_are_cut_at_a_char_boundary() {
        let mut short = "x".repeat(NOTE_LIMIT);
        truncate_note(&mut short);
        assert_eq!(short.len(), NOTE_LIMIT);
        let mut long = format!("{}é", "x".repeat(NOTE_LIMIT - 1));
        assert_eq!(long.len(), NOTE_LIMIT + 1);
        truncate_note(&mut long);
        assert_eq!(long, "x".repeat(NOTE_LIMIT - 1));
        let mut wide = "€".repeat(1000);
        truncate_note(&mut wide);
        assert_eq!(wide.len(), 1023);
        assert!(wide.chars().all(|c| c == '€'));
    }

    #[test]
    fn token_bucket_allows_a_burst_then_one_per_refill() {
        let t0 = Instant::now();
        let every = Duration::from_secs(300);
        let mut b = Bucket::full(25, t0);
        assert_eq!((0..30).filter(|_| b.take(25, every, t0)).count(), 25);
        assert!(!b.take(25, every, t0 + Duration::from_secs(299)));
        assert!(b.take(25, every, t0 + Duration::from_secs(300)));
        assert!(!b.take(25, every, t0 + Duration::from_secs(301)));
        // Tokens earned long after are capped at the burst.
        let later = t0 + Duration::from_secs(300 * 1000);
        assert_eq!((0..30).filter(|_| b.take(25, every, later)).count(), 25);
        assert!(!b.is_full(25, every, later));
        assert!(b.is_full(25, every, later + every * 25));
        // A zero refill never limits; a zero burst always does.
        let mut open = Bucket::full(1, t0);
        assert!((0..100).all(|_| open.take(1, Duration::ZERO, t0)));
        let mut shut = Bucket::full(0, t0);
        assert!(!shut.take(0, every, t0 + every * 10));
    }

    /// client-go's `getKey` (`tools/events/event_broadcaster.go`) leaves the note out of an
    /// Event's identity and puts the type, action, reason and reporting controller in it: two
    /// Events that differ only in their note are one series, which keeps the first note.
    #[test]
    fn identity_is_client_gos_get_key_without_the_note() {
        let mut st = State::default();
        let (wall, now) = (SystemTime::now(), Instant::now());
        let c = config();
        assert!(matches!(
            st.record(&c, key("A"), Some("first".into()), wall, now),
            Outcome::Queued
        ));
        assert!(matches!(
            st.record(&c, key("A"), Some("second".into()), wall, now),
            Outcome::Aggregated { queued: true }
        ));
        assert!(matches!(
            st.record(&c, key("A"), None, wall, now),
            Outcome::Aggregated { queued: false }
        ));
        let mut warning = key("A");
        warning.event_type = EventType::Warning;
        assert!(matches!(
            st.record(&c, warning, None, wall, now),
            Outcome::Queued
        ));
        let mut other_action = key("A");
        other_action.action = "Update".into();
        assert!(matches!(
            st.record(&c, other_action, None, wall, now),
            Outcome::Queued
        ));
        let mut other_controller = key("A");
        other_controller.controller = "other".into();
        assert!(matches!(
            st.record(&c, other_controller, None, wall, now),
            Outcome::Queued
        ));
        let first = &st.series[&0];
        assert_eq!((first.count, first.note.as_deref()), (3, Some("first")));
        assert_eq!(
            st.queue.iter().copied().collect::<Vec<_>>(),
            [
                Write::Create(0),
                Write::Patch(0),
                Write::Create(1),
                Write::Create(2),
                Write::Create(3)
            ]
        );
        // An empty namespace or uid is the same object as an absent one.
        let mut spelled = cm("a");
        spelled.uid = Some(String::new());
        assert_eq!(spelled.normalized(), cm("a"));
    }

    #[test]
    fn full_queue_and_rate_limit_drop_without_keeping_the_series() {
        let (wall, now) = (SystemTime::now(), Instant::now());
        let mut c = config();
        c.queue_capacity = 1;
        let mut st = State::default();
        assert!(matches!(
            st.record(&c, key("A"), None, wall, now),
            Outcome::Queued
        ));
        assert!(matches!(
            st.record(&c, key("B"), None, wall, now),
            Outcome::QueueFull { first: true, .. }
        ));
        assert!(matches!(
            st.record(&c, key("C"), None, wall, now),
            Outcome::QueueFull { first: false, .. }
        ));
        assert_eq!(st.index.len(), 1);
        // Room again: B starts its series.
        st.queue.clear();
        assert!(matches!(
            st.record(&c, key("B"), None, wall, now),
            Outcome::Queued
        ));

        let mut c = config();
        c.burst = 2;
        let mut st = State::default();
        let outcomes: Vec<bool> = ["A", "B", "C"]
            .iter()
            .map(|r| matches!(st.record(&c, key(r), None, wall, now), Outcome::Queued))
            .collect();
        assert_eq!(outcomes, [true, true, false]);
        assert!(matches!(
            st.record(&c, key("C"), None, wall, now),
            Outcome::RateLimited { .. }
        ));
        // Another object has its own bucket.
        let mut elsewhere = key("C");
        elsewhere.regarding = cm("b");
        assert!(matches!(
            st.record(&c, elsewhere, None, wall, now),
            Outcome::Queued
        ));
        // Occurrences of a running series take no token.
        assert!(matches!(
            st.record(&c, key("A"), None, wall, now),
            Outcome::Aggregated { .. }
        ));
    }

    #[test]
    fn idle_series_finish_with_their_last_count() {
        let (wall, t0) = (SystemTime::now(), Instant::now());
        let mut c = config();
        c.series_expiry = Duration::from_secs(10);
        let mut st = State::default();
        st.record(&c, key("A"), None, wall, t0);
        st.queue.clear();
        st.series.get_mut(&0).unwrap().created = true;
        st.record(&c, key("A"), None, wall, t0);
        st.record(&c, key("A"), None, wall, t0);
        st.queue.clear();
        // Not yet idle: the flush owes count 3.
        assert_eq!(st.sweep(&c, t0 + Duration::from_secs(5)), [0]);
        // Idle: the next occurrence starts series 1 and queues the last patch of series 0.
        let later = t0 + Duration::from_secs(11);
        assert!(matches!(
            st.record(&c, key("A"), None, wall, later),
            Outcome::Queued
        ));
        assert_eq!(
            st.queue.iter().copied().collect::<Vec<_>>(),
            [Write::Patch(0), Write::Create(1)]
        );
        assert!(!st.series[&0].live && st.series[&1].live);
        assert_eq!(st.index.values().copied().collect::<Vec<_>>(), [1]);
        // A finished series that is written is forgotten by the sweep.
        st.series.get_mut(&0).unwrap().sent = 3;
        st.sweep(&c, later);
        assert!(!st.series.contains_key(&0));
        // A sweep after the expiry finishes an idle clean series without an occurrence.
        st.series.get_mut(&1).unwrap().created = true;
        assert!(st.sweep(&c, later + Duration::from_secs(11)).is_empty());
        assert!(st.series.is_empty() && st.index.is_empty());
    }

    #[test]
    fn bodies_match_the_recorded_request() {
        let sample = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/apiserver-samples/rbac-leases-events/ev.request.json"
        ))
        .unwrap();
        let when = kwh_client::time::parse("2026-11-24T22:59:48.085870Z").unwrap();
        let s = Series {
            key: Arc::new(SeriesKey {
                controller: "janitor".into(),
                regarding: ObjectRef {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    namespace: Some("rbac-samples".into()),
                    name: "exists".into(),
                    uid: Some("00000000-0000-0000-0000-000000000000".into()),
                },
                event_type: EventType::Normal,
                reason: "Expired".into(),
                action: "Delete".into(),
            }),
            name: "exists.17b0c0ffee000001".into(),
            namespace: "rbac-samples".into(),
            event_time: when,
            note: Some("deleted ConfigMap rbac-samples/exists: ttl 20s expired".into()),
            count: 1,
            sent: 1,
            last_observed: when,
            last_seen: Instant::now(),
            created: false,
            live: true,
        };
        let body = event_body(&s, "host-a_1f2e", false).unwrap();
        assert_eq!(std::str::from_utf8(&body).unwrap(), sample.trim_end());

        let patch_sample = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/apiserver-samples/rbac-leases-events/evseries.request.json"
        ))
        .unwrap();
        let observed = kwh_client::time::parse("2026-11-24T22:59:48.420308Z").unwrap();
        let patch = series_patch(2, observed).unwrap();
        assert_eq!(
            std::str::from_utf8(&patch).unwrap(),
            patch_sample.trim_end()
        );

        // A re-creation carries the series after eventTime.
        let mut s = s;
        s.count = 7;
        s.last_observed = observed;
        let body: serde_json::Value =
            serde_json::from_slice(&event_body(&s, "host-a_1f2e", true).unwrap()).unwrap();
        assert_eq!(
            body["series"],
            serde_json::json!({"count": 7, "lastObservedTime": "2026-11-24T22:59:48.420308Z"})
        );
    }

    #[test]
    fn event_types_parse_exactly() {
        assert_eq!("Normal".parse(), Ok(EventType::Normal));
        assert_eq!("Warning".parse(), Ok(EventType::Warning));
        assert!("warning".parse::<EventType>().is_err());
        assert_eq!(cm("a").to_string(), "ConfigMap ns/a");
    }
}
