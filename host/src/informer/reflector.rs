//! The reflector: keeps a store in step with the API server by list + watch (spec §1).
//!
//! Why this shape: every branch of client-go's reflector (which RV to list at, when to page,
//! when to relist versus re-watch, when to back off) exists because of a past outage or a
//! cache going back in time. The state machine below keeps those rules in one place, generic
//! over [`ListerWatcher`] so scripted fakes can drive each branch under a paused clock.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use parking_lot::Mutex;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tracing::Instrument;

use super::delta_fifo::DeltaFifo;
use super::lister_watcher::{ListerWatcher, WatchStream};
use super::processor::SyncedFn;
use super::stop::StopSignal;
use super::store::Store;
use super::tombstone::ObjOrTombstone;
use crate::kube::error::Status;
use crate::kube::params::{ListParams, WatchParams};
use crate::kube::watch::WatchEvent;
use crate::kube::{Error, Object};

/// Where the reflector writes: the DeltaFIFO in an informer, a plain store elsewhere.
pub trait ReflectorStore: Send + Sync + 'static {
    fn add(&self, obj: Object);
    fn update(&self, obj: Object);
    /// `obj` is the object's last state as the DELETED event carried it.
    fn delete(&self, obj: Object);
    /// A full relist at `resource_version`.
    fn replace(&self, list: Vec<Object>, resource_version: &str);
    fn resync(&self);
}

impl ReflectorStore for DeltaFifo {
    fn add(&self, obj: Object) {
        DeltaFifo::add(self, obj)
    }
    fn update(&self, obj: Object) {
        DeltaFifo::update(self, obj)
    }
    fn delete(&self, obj: Object) {
        DeltaFifo::delete(self, ObjOrTombstone::Object(obj))
    }
    fn replace(&self, list: Vec<Object>, _resource_version: &str) {
        DeltaFifo::replace(self, list)
    }
    fn resync(&self) {
        DeltaFifo::resync(self)
    }
}

impl ReflectorStore for Store {
    fn add(&self, obj: Object) {
        Store::add(self, obj)
    }
    fn update(&self, obj: Object) {
        Store::update(self, obj)
    }
    fn delete(&self, obj: Object) {
        Store::delete_key(self, &obj.key())
    }
    fn replace(&self, list: Vec<Object>, _resource_version: &str) {
        Store::replace(self, list)
    }
    fn resync(&self) {}
}

/// Why a ListAndWatch round failed; what the watch-error handler receives (spec 1.9).
#[derive(Debug, thiserror::Error)]
pub enum ReflectorError {
    #[error("failed to list: {0}")]
    List(#[source] Error),
    #[error("failed to start watch: {0}")]
    WatchStart(#[source] Error),
    /// Only inside watch-list, which then falls back to list+watch (spec 1.12).
    #[error("watch-list failed: {0}")]
    WatchList(#[source] Error),
    #[error("very short watch: watch closed within a second with no events")]
    ShortWatch,
}

/// Called when ListAndWatch returns an error (spec 1.9).
pub type WatchErrorHandler = Arc<dyn Fn(&ReflectorError) + Send + Sync>;

/// A source of uniform numbers in [0, 1): jitter and watch timeouts; injectable for tests.
pub type RandFn = Box<dyn FnMut() -> f64 + Send>;

/// Exponential backoff with jitter and a periodic reset (spec 1.1).
#[derive(Debug, Clone)]
pub struct Backoff {
    pub initial: Duration,
    pub cap: Duration,
    pub factor: f64,
    pub jitter: f64,
    pub reset_after: Duration,
    current: Duration,
    last_reset: Option<Instant>,
}

impl Default for Backoff {
    /// client-go's reflector backoff: 800 ms, ×2, jitter 1.0, cap 30 s, reset after 2 min.
    fn default() -> Self {
        Backoff::new(
            Duration::from_millis(800),
            Duration::from_secs(30),
            2.0,
            1.0,
            Duration::from_secs(120),
        )
    }
}

impl Backoff {
    pub fn new(
        initial: Duration,
        cap: Duration,
        factor: f64,
        jitter: f64,
        reset_after: Duration,
    ) -> Self {
        Backoff {
            initial,
            cap,
            factor,
            jitter,
            reset_after,
            current: initial,
            last_reset: None,
        }
    }

    /// The next sleep: `d + r·jitter·d` for the current `d`, which then grows toward the cap.
    /// The sequence restarts at the first step more than `reset_after` after the previous
    /// restart; success does not postpone that (spec 1.1).
    pub fn step(&mut self, now: Instant, rand01: f64) -> Duration {
        let due = match self.last_reset {
            None => true,
            Some(t) => now.saturating_duration_since(t) > self.reset_after,
        };
        if due {
            self.current = self.initial;
            self.last_reset = Some(now);
        }
        let d = self.current;
        if self.factor != 0.0 {
            self.current = self.current.mul_f64(self.factor).min(self.cap);
        }
        if self.jitter > 0.0 {
            d + d.mul_f64(rand01.clamp(0.0, 1.0) * self.jitter)
        } else {
            d
        }
    }
}

/// Options of a [`Reflector`].
#[derive(Debug, Clone)]
pub struct ReflectorOptions {
    /// Shown in logs and spans.
    pub name: String,
    /// How often to ask `should_resync` while watching; zero disables (spec 1.11).
    pub resync_period: Duration,
    /// Try watch-list streaming first (spec 1.12).
    pub use_watch_list: bool,
    /// Explicit page size (client-go's `WatchListPageSize`); forces paging at any RV.
    pub page_size: Option<u32>,
    /// Re-watch after 500s for this long (client-go's `MaxInternalErrorRetryDuration`).
    pub max_internal_error_retry_duration: Duration,
    /// Watches time out uniformly in [min, 2·min) (spec 1.6).
    pub min_watch_timeout: Duration,
    pub backoff: Backoff,
}

impl Default for ReflectorOptions {
    fn default() -> Self {
        ReflectorOptions {
            name: "reflector".into(),
            resync_period: Duration::ZERO,
            use_watch_list: false,
            page_size: None,
            max_internal_error_retry_duration: Duration::ZERO,
            min_watch_timeout: Duration::from_secs(300),
            backoff: Backoff::default(),
        }
    }
}

/// The default page size of the pager (spec 1.3).
pub const DEFAULT_PAGE_SIZE: u32 = 500;
const SHORT_WATCH: Duration = Duration::from_secs(1);
const WATCH_LIST_WARN_EVERY: Duration = Duration::from_secs(10);

#[derive(Default)]
struct RvState {
    last_sync_rv: String,
    /// The last list or watch-list hit Expired or TooLargeRV (spec 1.2).
    unavailable: bool,
    /// An RV="0" list came back paginated: the server pages, so keep paging (spec 1.3).
    paginated_result: bool,
}

/// How one watch stream ended.
enum WatchEnd {
    Stopped,
    /// The server closed it normally.
    Closed,
    Short,
    Error(Error),
}

/// How a watch-list initial phase ended.
enum ListWatchEnd {
    Stopped,
    Done {
        stream: WatchStream,
        items: Vec<Object>,
        rv: String,
    },
    /// Closed before the end bookmark.
    Closed,
    Short,
    Error(Error),
}

/// Tracks 500s for `max_internal_error_retry_duration` (client-go's retry-with-deadline).
struct InternalErrorRetry {
    max: Duration,
    first: Option<Instant>,
}

impl InternalErrorRetry {
    fn after(&mut self, err: Option<&Error>) {
        if err.is_some_and(is_internal_error) {
            self.first.get_or_insert_with(Instant::now);
        } else {
            self.first = None;
        }
    }
    fn should_retry(&self) -> bool {
        !self.max.is_zero() && self.first.is_some_and(|t| t.elapsed() <= self.max)
    }
}

fn is_internal_error(e: &Error) -> bool {
    e.status()
        .is_some_and(|s| s.code == 500 || s.reason == "InternalError")
}

/// Watch-start errors retried in place: connection refused and 429 (spec 1.8).
fn is_watch_error_retriable(e: &Error) -> bool {
    e.is_connect() || e.is_too_many_requests()
}

fn opt_rv(rv: &str) -> Option<String> {
    (!rv.is_empty()).then(|| rv.to_owned())
}

/// Keeps a [`ReflectorStore`] in step with one list+watch scope.
pub struct Reflector<L, S> {
    lw: Arc<L>,
    store: Arc<S>,
    opts: ReflectorOptions,
    state: Mutex<RvState>,
    backoff: Mutex<Backoff>,
    rand: Mutex<RandFn>,
    should_resync: Option<SyncedFn>,
    watch_error_handler: Option<WatchErrorHandler>,
}

impl<L: ListerWatcher, S: ReflectorStore> Reflector<L, S> {
    pub fn new(lw: Arc<L>, store: Arc<S>, opts: ReflectorOptions) -> Self {
        let backoff = opts.backoff.clone();
        Reflector {
            lw,
            store,
            opts,
            state: Mutex::new(RvState::default()),
            backoff: Mutex::new(backoff),
            rand: Mutex::new(Box::new(rand::random::<f64>)),
            should_resync: None,
            watch_error_handler: None,
        }
    }

    /// Ask this before each periodic resync (the informer's processor decides, spec 1.11).
    pub fn with_should_resync(mut self, f: SyncedFn) -> Self {
        self.should_resync = Some(f);
        self
    }

    pub fn with_watch_error_handler(mut self, f: WatchErrorHandler) -> Self {
        self.watch_error_handler = Some(f);
        self
    }

    /// Replace the random source (tests pin jitter and timeouts with it).
    pub fn with_rand(self, f: RandFn) -> Self {
        *self.rand.lock() = f;
        self
    }

    /// The RV of the last list, watch event or bookmark applied.
    pub fn last_sync_resource_version(&self) -> String {
        self.state.lock().last_sync_rv.clone()
    }

    fn rand01(&self) -> f64 {
        (self.rand.lock())()
    }

    fn next_backoff(&self) -> Duration {
        let r = self.rand01();
        self.backoff.lock().step(Instant::now(), r)
    }

    /// Sleep one backoff step; false if stopped meanwhile.
    async fn backoff_sleep(&self, stop: &StopSignal) -> bool {
        let d = self.next_backoff();
        tracing::debug!(delay = ?d, "backing off");
        tokio::select! {
            _ = tokio::time::sleep(d) => true,
            _ = stop.stopped() => false,
        }
    }

    fn watch_timeout_seconds(&self) -> u32 {
        let min = self
            .opts
            .min_watch_timeout
            .as_secs()
            .min(u64::from(u32::MAX / 2)) as u32;
        let jitter = (f64::from(min) * self.rand01().clamp(0.0, 1.0)) as u32;
        // Strictly below 2·min even if the source returns 1.0.
        min + jitter.min(min.saturating_sub(1))
    }

    fn set_last_sync_rv(&self, rv: &str) {
        let mut s = self.state.lock();
        s.last_sync_rv.clear();
        s.last_sync_rv.push_str(rv);
    }

    /// spec 1.2: "" after Expired/TooLarge, "0" before any sync, else lastSyncRV.
    fn relist_resource_version(&self) -> String {
        let s = self.state.lock();
        if s.unavailable {
            String::new()
        } else if s.last_sync_rv.is_empty() {
            "0".to_owned()
        } else {
            s.last_sync_rv.clone()
        }
    }

    fn rewatch_resource_version(&self) -> String {
        let s = self.state.lock();
        if s.unavailable {
            String::new()
        } else {
            s.last_sync_rv.clone()
        }
    }

    fn set_unavailable(&self, v: bool) {
        self.state.lock().unavailable = v;
    }

    /// Run until stopped: ListAndWatch, then one backoff after every return (spec 1.1).
    pub async fn run(&self, stop: StopSignal) {
        let span = tracing::info_span!("reflector", name = %self.opts.name);
        async {
            while !stop.is_stopped() {
                if let Err(e) = self.list_and_watch(&stop).await {
                    self.on_watch_error(&e);
                }
                if stop.is_stopped() || !self.backoff_sleep(&stop).await {
                    break;
                }
            }
            tracing::debug!("reflector stopped");
        }
        .instrument(span)
        .await
    }

    fn on_watch_error(&self, e: &ReflectorError) {
        match &self.watch_error_handler {
            Some(h) => h(e),
            None => tracing::warn!(name = %self.opts.name, error = %e, "list and watch failed"),
        }
    }

    /// One round: (watch-list or list), then watch until the watch must be restarted by a
    /// relist. Returns Ok when stopped or when a relist is due.
    pub async fn list_and_watch(&self, stop: &StopSignal) -> Result<(), ReflectorError> {
        let mut stream = None;
        let mut fallback = !self.opts.use_watch_list;
        if self.opts.use_watch_list {
            match self.watch_list(stop).await {
                Ok(None) => return Ok(()),
                Ok(Some(s)) => stream = Some(s),
                Err(e) => {
                    tracing::warn!(error = %e, "watch-list failed; falling back to list+watch");
                    fallback = true;
                }
            }
        }
        if fallback {
            match or_stop(
                stop,
                self.list()
                    .instrument(tracing::info_span!("reflector.list")),
            )
            .await
            {
                None => return Ok(()),
                Some(r) => r?,
            }
        }
        self.watch_with_resync(stream, stop).await
    }

    /// Paginated list at the relist RV; Replace on success (spec 1.2–1.5).
    async fn list(&self) -> Result<(), ReflectorError> {
        let rv = self.relist_resource_version();
        let page_size = {
            let s = self.state.lock();
            match self.opts.page_size {
                Some(n) => Some(n),
                None if s.paginated_result => Some(DEFAULT_PAGE_SIZE),
                // limit + RV=N means Exact and bypasses the watch cache (spec 1.3).
                None if !rv.is_empty() && rv != "0" => None,
                None => Some(DEFAULT_PAGE_SIZE),
            }
        };
        let mut res = pager_list(&*self.lw, &rv, page_size).await;
        if matches!(&res, Err(e) if e.is_expired() || e.is_too_large_rv()) {
            self.set_unavailable(true);
            let retry_rv = self.relist_resource_version();
            tracing::info!(rv = %rv, "list RV unavailable; relisting at the most recent RV");
            res = pager_list(&*self.lw, &retry_rv, page_size).await;
        }
        let (items, list_rv, paginated) = res.map_err(ReflectorError::List)?;
        let mut s = self.state.lock();
        if rv == "0" && paginated {
            s.paginated_result = true;
        }
        s.unavailable = false;
        drop(s);
        tracing::debug!(items = items.len(), rv = %list_rv, "list done");
        self.store.replace(items, &list_rv);
        self.set_last_sync_rv(&list_rv);
        Ok(())
    }

    fn resync_interval(&self) -> Option<Interval> {
        let p = self.opts.resync_period;
        if p.is_zero() {
            return None;
        }
        let mut i = tokio::time::interval_at(Instant::now() + p, p);
        i.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Some(i)
    }

    fn maybe_resync(&self) {
        if self.should_resync.as_ref().is_none_or(|f| f()) {
            tracing::debug!("resync");
            self.store.resync();
        }
    }

    /// Watch from lastSyncRV, re-watching on normal closes, until a relist is needed
    /// (spec 1.6, 1.8). `stream` is a watch-list stream to continue, if any.
    async fn watch_with_resync(
        &self,
        mut stream: Option<WatchStream>,
        stop: &StopSignal,
    ) -> Result<(), ReflectorError> {
        let mut resync = self.resync_interval();
        let mut retry = InternalErrorRetry {
            max: self.opts.max_internal_error_retry_duration,
            first: None,
        };
        loop {
            if stop.is_stopped() {
                return Ok(());
            }
            let start = Instant::now();
            let start_rv = self.last_sync_resource_version();
            let s = match stream.take() {
                Some(s) => s,
                None => {
                    let params = WatchParams {
                        resource_version: opt_rv(&start_rv),
                        allow_watch_bookmarks: true,
                        timeout_seconds: Some(self.watch_timeout_seconds()).filter(|t| *t > 0),
                        ..Default::default()
                    };
                    match or_stop(stop, self.lw.watch(&params)).await {
                        None => return Ok(()),
                        Some(Ok(s)) => s,
                        Some(Err(e)) if is_watch_error_retriable(&e) => {
                            tracing::info!(error = %e, "watch start failed; backing off");
                            if !self.backoff_sleep(stop).await {
                                return Ok(());
                            }
                            continue;
                        }
                        Some(Err(e)) => return Err(ReflectorError::WatchStart(e)),
                    }
                }
            };
            let span = tracing::info_span!("reflector.watch", rv = %start_rv);
            let end = self
                .handle_watch(s, start, &start_rv, &mut resync, stop)
                .instrument(span)
                .await;
            retry.after(match &end {
                WatchEnd::Error(e) => Some(e),
                _ => None,
            });
            match end {
                WatchEnd::Stopped => return Ok(()),
                WatchEnd::Closed => continue,
                WatchEnd::Short => {
                    tracing::warn!("{}", ReflectorError::ShortWatch);
                    return Ok(());
                }
                WatchEnd::Error(e) if e.is_expired() => {
                    // Relist at lastSyncRV: "not older than" cannot go back in time, so the
                    // RV is not marked unavailable (spec 1.8).
                    tracing::info!(error = %e, "watch expired; relisting");
                    return Ok(());
                }
                WatchEnd::Error(e) if e.is_too_many_requests() => {
                    tracing::info!("watch returned 429; backing off");
                    if !self.backoff_sleep(stop).await {
                        return Ok(());
                    }
                }
                WatchEnd::Error(e) if is_internal_error(&e) && retry.should_retry() => {
                    tracing::info!(error = %e, "retrying watch after internal error");
                }
                WatchEnd::Error(e) => {
                    tracing::warn!(error = %e, "watch ended with an error; relisting");
                    return Ok(());
                }
            }
        }
    }

    /// Apply one watch stream's events until it ends (spec 1.7).
    async fn handle_watch(
        &self,
        mut s: WatchStream,
        start: Instant,
        start_rv: &str,
        resync: &mut Option<Interval>,
        stop: &StopSignal,
    ) -> WatchEnd {
        let mut count = 0usize;
        // Synthetic ADDEDs of a watch from ""/"0" come out of RV order (k/k#136583).
        let mut hold_rv = start_rv.is_empty() || start_rv == "0";
        loop {
            let ev = tokio::select! {
                _ = stop.stopped() => return WatchEnd::Stopped,
                _ = tick(resync) => {
                    self.maybe_resync();
                    continue;
                }
                ev = s.next() => ev,
            };
            let ev = match ev {
                None => break,
                Some(Ok(ev)) => ev,
                Some(Err(e)) => match stream_error(e) {
                    Some(e) => return WatchEnd::Error(e),
                    None => break,
                },
            };
            if let WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) = &ev {
                if o.name().is_empty() {
                    // Not an object of the watched kind (e.g. a Table): skip it, RV and all,
                    // rather than caching it under an empty key (spec 1.7).
                    tracing::warn!("skipping a watch event whose object has no metadata.name");
                    continue;
                }
            }
            let (obj, added) = match ev {
                WatchEvent::Added(o) => {
                    self.store.add(o.clone());
                    (o, true)
                }
                WatchEvent::Modified(o) => {
                    self.store.update(o.clone());
                    (o, false)
                }
                WatchEvent::Deleted(o) => {
                    self.store.delete(o.clone());
                    (o, false)
                }
                WatchEvent::Bookmark {
                    resource_version, ..
                } => {
                    hold_rv = false;
                    self.set_last_sync_rv(&resource_version);
                    count += 1;
                    continue;
                }
                WatchEvent::Error(st) => return WatchEnd::Error(st.into()),
            };
            if !(hold_rv && added) {
                hold_rv = false;
                self.set_last_sync_rv(obj.resource_version());
            }
            count += 1;
        }
        if count == 0 && start.elapsed() < SHORT_WATCH {
            return WatchEnd::Short;
        }
        WatchEnd::Closed
    }

    /// Watch-list (spec 1.12): stream the initial state, Replace at the end bookmark, and hand
    /// back the same stream to continue as the watch. `Ok(None)` = stopped.
    async fn watch_list(&self, stop: &StopSignal) -> Result<Option<WatchStream>, ReflectorError> {
        let span = tracing::info_span!("reflector.watch_list");
        async {
            let mut warn = tokio::time::interval_at(
                Instant::now() + WATCH_LIST_WARN_EVERY,
                WATCH_LIST_WARN_EVERY,
            );
            warn.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                if stop.is_stopped() {
                    return Ok(None);
                }
                let params = WatchParams {
                    resource_version: opt_rv(&self.rewatch_resource_version()),
                    resource_version_match: Some("NotOlderThan".into()),
                    send_initial_events: true,
                    allow_watch_bookmarks: true,
                    timeout_seconds: Some(self.watch_timeout_seconds()).filter(|t| *t > 0),
                    ..Default::default()
                };
                let start = Instant::now();
                let s = match or_stop(stop, self.lw.watch(&params)).await {
                    None => return Ok(None),
                    Some(Ok(s)) => s,
                    Some(Err(e)) => {
                        if self.watch_list_retriable(&e, stop).await {
                            continue;
                        }
                        return Err(ReflectorError::WatchList(e));
                    }
                };
                match self.handle_list_watch(s, start, &mut warn, stop).await {
                    ListWatchEnd::Stopped => return Ok(None),
                    ListWatchEnd::Done { stream, items, rv } => {
                        self.set_unavailable(false);
                        tracing::debug!(items = items.len(), rv = %rv, "watch-list initial events done");
                        self.store.replace(items, &rv);
                        self.set_last_sync_rv(&rv);
                        return Ok(Some(stream));
                    }
                    ListWatchEnd::Closed => {
                        // No end bookmark: retry, without an attempt limit (k/k#140890).
                        tracing::info!("watch-list closed before the initial-events-end bookmark; retrying");
                    }
                    ListWatchEnd::Short => return Err(ReflectorError::ShortWatch),
                    ListWatchEnd::Error(e) => {
                        if self.watch_list_retriable(&e, stop).await {
                            continue;
                        }
                        return Err(ReflectorError::WatchList(e));
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    /// 429 or refused: back off and retry; Expired or TooLarge: retry at RV "" (spec 1.12).
    async fn watch_list_retriable(&self, e: &Error, stop: &StopSignal) -> bool {
        if is_watch_error_retriable(e) {
            // A stop during the sleep is seen at the top of the retry loop.
            self.backoff_sleep(stop).await;
            return true;
        }
        if e.is_expired() || e.is_too_large_rv() {
            self.set_unavailable(true);
            return true;
        }
        false
    }

    async fn handle_list_watch(
        &self,
        mut s: WatchStream,
        start: Instant,
        warn: &mut Interval,
        stop: &StopSignal,
    ) -> ListWatchEnd {
        let mut temp: HashMap<String, Object> = HashMap::new();
        let mut count = 0usize;
        loop {
            let ev = tokio::select! {
                _ = stop.stopped() => return ListWatchEnd::Stopped,
                _ = warn.tick() => {
                    tracing::warn!(
                        objects = temp.len(),
                        "watch-list still waiting for the initial-events-end bookmark"
                    );
                    continue;
                }
                ev = s.next() => ev,
            };
            let ev = match ev {
                None => break,
                Some(Ok(ev)) => ev,
                Some(Err(e)) => match stream_error(e) {
                    Some(e) => return ListWatchEnd::Error(e),
                    None => break,
                },
            };
            count += 1;
            match ev {
                WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o)
                    if o.name().is_empty() =>
                {
                    tracing::warn!("skipping a watch event whose object has no metadata.name");
                }
                WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                    temp.insert(o.key(), o);
                }
                WatchEvent::Deleted(o) => {
                    temp.remove(&o.key());
                }
                WatchEvent::Bookmark {
                    resource_version,
                    initial_events_end: true,
                } => {
                    return ListWatchEnd::Done {
                        stream: s,
                        items: temp.into_values().collect(),
                        rv: resource_version,
                    }
                }
                WatchEvent::Bookmark { .. } => {}
                WatchEvent::Error(st) => return ListWatchEnd::Error(st.into()),
            }
        }
        if count == 0 && start.elapsed() < SHORT_WATCH {
            return ListWatchEnd::Short;
        }
        ListWatchEnd::Closed
    }
}

/// An error read from a watch stream: `Some` ends the watch with that error, `None` counts as
/// the server closing the stream. A broken connection is a close (the server may have gone
/// away mid-response); an undecodable event is an internal error, as client-go reports it.
fn stream_error(e: Error) -> Option<Error> {
    match e {
        Error::Api(_) => Some(e),
        Error::Decode(msg) => Some(Error::from(Status::failure(
            500,
            "InternalError",
            format!("unable to decode an event from the watch stream: {msg}"),
        ))),
        Error::Http(_) | Error::Timeout(_) | Error::Connect { .. } | Error::Config(_) => {
            tracing::debug!(error = %e, "watch stream ended");
            None
        }
    }
}

async fn tick(i: &mut Option<Interval>) {
    match i {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending().await,
    }
}

async fn or_stop<F: Future>(stop: &StopSignal, f: F) -> Option<F::Output> {
    tokio::select! {
        r = f => Some(r),
        _ = stop.stopped() => None,
    }
}

/// The pager (spec 1.3, 1.4): pages of `page_size` following `continue`, the list RV taken
/// from the first page; Expired on a later page falls back to one full list at the original
/// RV. Returns the items, the list RV and whether the result was paginated.
async fn pager_list<L: ListerWatcher>(
    lw: &L,
    rv: &str,
    page_size: Option<u32>,
) -> Result<(Vec<Object>, String, bool), Error> {
    let mut params = ListParams {
        resource_version: opt_rv(rv),
        limit: page_size,
        ..Default::default()
    };
    let original = params.clone();
    let mut items: Vec<Object> = Vec::new();
    let mut list_rv: Option<String> = None;
    let mut paginated = false;
    loop {
        let page = match lw.list(&params).await {
            Ok(p) => p,
            Err(e) if e.is_expired() && params.continue_token.is_some() => {
                tracing::info!("continue token expired; falling back to a full list");
                let full = ListParams {
                    limit: None,
                    continue_token: None,
                    ..original
                };
                let l = lw.list(&full).await?;
                return Ok((l.items, l.resource_version, paginated));
            }
            Err(e) => return Err(e),
        };
        let rv = list_rv.get_or_insert_with(|| page.resource_version.clone());
        if items.is_empty() {
            items = page.items;
        } else {
            items.extend(page.items);
        }
        match page.continue_token.filter(|c| !c.is_empty()) {
            None => return Ok((items, std::mem::take(rv), paginated)),
            Some(c) => {
                params.continue_token = Some(c);
                // RV and match are forbidden with continue (k/k#85221).
                params.resource_version = None;
                params.resource_version_match = None;
                paginated = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::fake::{self, FakeLw, Item, Recorded, Req, Step};
    use crate::informer::tombstone::test_support::obj;

    #[derive(Debug, Clone, PartialEq)]
    enum Op {
        Add(String, String),
        Update(String, String),
        Delete(String),
        Replace(Vec<String>, String),
        Resync,
    }

    #[derive(Default)]
    struct Rec(Mutex<Vec<Op>>);

    impl Rec {
        fn ops(&self) -> Vec<Op> {
            self.0.lock().clone()
        }
    }

    impl ReflectorStore for Rec {
        fn add(&self, o: Object) {
            self.0
                .lock()
                .push(Op::Add(o.key(), o.resource_version().into()))
        }
        fn update(&self, o: Object) {
            self.0
                .lock()
                .push(Op::Update(o.key(), o.resource_version().into()))
        }
        fn delete(&self, o: Object) {
            self.0.lock().push(Op::Delete(o.key()))
        }
        fn replace(&self, list: Vec<Object>, rv: &str) {
            let mut keys: Vec<String> = list.iter().map(Object::key).collect();
            keys.sort();
            self.0.lock().push(Op::Replace(keys, rv.into()))
        }
        fn resync(&self) {
            self.0.lock().push(Op::Resync)
        }
    }

    fn add(name: &str, rv: &str) -> Item {
        Item::Ev(WatchEvent::Added(obj("ns", name, rv)))
    }
    fn modified(name: &str, rv: &str) -> Item {
        Item::Ev(WatchEvent::Modified(obj("ns", name, rv)))
    }
    fn deleted(name: &str, rv: &str) -> Item {
        Item::Ev(WatchEvent::Deleted(obj("ns", name, rv)))
    }
    fn err_event(code: u16, reason: &str) -> Item {
        Item::Ev(WatchEvent::Error(Status::failure(code, reason, "scripted")))
    }
    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    type R = Reflector<FakeLw, Rec>;

    fn make(lw: &Arc<FakeLw>, opts: ReflectorOptions, rand: f64) -> (Arc<R>, Arc<Rec>) {
        let store = Arc::new(Rec::default());
        let r = Reflector::new(lw.clone(), store.clone(), opts).with_rand(Box::new(move || rand));
        (Arc::new(r), store)
    }

    /// Run the reflector until `n` requests were made, then stop it (bounded).
    async fn run_until(r: &Arc<R>, lw: &Arc<FakeLw>, n: usize) -> Vec<Recorded> {
        let stop = StopSignal::new();
        let task = tokio::spawn({
            let r = r.clone();
            let stop = stop.clone();
            async move { r.run(stop).await }
        });
        let reqs = lw.wait_requests(n).await;
        stop.stop();
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("reflector did not stop")
            .expect("reflector panicked");
        reqs
    }

    fn list_req(r: &Recorded) -> &ListParams {
        match &r.1 {
            Req::List(p) => p,
            other => panic!("expected a list, got {other:?}"),
        }
    }
    fn watch_req(r: &Recorded) -> &WatchParams {
        match &r.1 {
            Req::Watch(p) => p,
            other => panic!("expected a watch, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_3_pagination_1_5_replace_and_1_6_watch_params() {
        let lw = FakeLw::new(vec![
            fake::list("10", Some("c1"), vec![obj("ns", "a", "9")]),
            fake::list("11", None, vec![obj("ns", "b", "10")]),
            fake::watch_hang(vec![]),
        ]);
        let (r, store) = make(&lw, ReflectorOptions::default(), 0.0);
        let reqs = run_until(&r, &lw, 3).await;
        let p1 = list_req(&reqs[0]);
        assert_eq!(p1.resource_version.as_deref(), Some("0"));
        assert_eq!(p1.limit, Some(500));
        assert_eq!(p1.continue_token, None);
        let p2 = list_req(&reqs[1]);
        assert_eq!(p2.continue_token.as_deref(), Some("c1"));
        assert_eq!(
            p2.resource_version, None,
            "continue clears the RV (k/k#85221)"
        );
        assert_eq!(p2.resource_version_match, None);
        assert_eq!(p2.limit, Some(500));
        // The list RV is the first page's (spec 1.3) and lastSyncRV follows it (spec 1.5).
        assert_eq!(
            store.ops(),
            vec![Op::Replace(vec!["ns/a".into(), "ns/b".into()], "10".into())]
        );
        let w = watch_req(&reqs[2]);
        assert_eq!(
            w,
            &WatchParams {
                resource_version: Some("10".into()),
                allow_watch_bookmarks: true,
                timeout_seconds: Some(300),
                ..Default::default()
            }
        );
        assert_eq!(r.last_sync_resource_version(), "10");
    }

    #[test]
    fn spec_1_6_watch_timeout_is_uniform_in_300_600() {
        for (rand, want) in [(0.0, 300), (0.5, 450), (0.999_999, 599), (1.0, 599)] {
            let lw = FakeLw::new(vec![]);
            let (r, _) = make(&lw, ReflectorOptions::default(), rand);
            assert_eq!(r.watch_timeout_seconds(), want, "rand {rand}");
        }
        // A zero minimum must not underflow.
        let lw = FakeLw::new(vec![]);
        let opts = ReflectorOptions {
            min_watch_timeout: Duration::ZERO,
            ..Default::default()
        };
        let (r, _) = make(&lw, opts, 0.9);
        assert_eq!(r.watch_timeout_seconds(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_7_events_and_1_8_normal_close_rewatches_at_once() {
        let lw = FakeLw::new(vec![
            fake::list("10", None, vec![]),
            fake::watch(vec![
                Item::Sleep(secs(2.0)),
                add("a", "11"),
                modified("a", "12"),
                deleted("a", "13"),
                fake::bookmark("14", false),
            ]),
            fake::watch_hang(vec![]),
        ]);
        let (r, store) = make(&lw, ReflectorOptions::default(), 0.0);
        let reqs = run_until(&r, &lw, 3).await;
        assert_eq!(
            store.ops(),
            vec![
                Op::Replace(vec![], "10".into()),
                Op::Add("ns/a".into(), "11".into()),
                Op::Update("ns/a".into(), "12".into()),
                Op::Delete("ns/a".into()),
            ]
        );
        // Re-watch from the bookmark's RV, right when the stream ended: no relist, no backoff.
        let w = watch_req(&reqs[2]);
        assert_eq!(w.resource_version.as_deref(), Some("14"));
        assert_eq!(reqs[2].0, secs(2.0));
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_7_objects_without_a_name_are_skipped() {
        let table = Object::from_value(&serde_json::json!({
            "kind": "Table", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": "99"}, "rows": []
        }))
        .unwrap();
        let lw = FakeLw::new(vec![
            fake::list("10", None, vec![]),
            fake::watch(vec![
                Item::Sleep(secs(2.0)),
                Item::Ev(WatchEvent::Added(table)),
                add("a", "11"),
            ]),
            fake::watch_hang(vec![]),
        ]);
        let (r, store) = make(&lw, ReflectorOptions::default(), 0.0);
        let reqs = run_until(&r, &lw, 3).await;
        assert_eq!(
            store.ops(),
            vec![
                Op::Replace(vec![], "10".into()),
                Op::Add("ns/a".into(), "11".into())
            ]
        );
        assert_eq!(watch_req(&reqs[2]).resource_version.as_deref(), Some("11"));
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_7_regression_7_6_synthetic_adds_do_not_move_last_sync_rv() {
        // A list without an RV leaves lastSyncRV "", so the watch starts at "" and its
        // ADDEDs are synthetic and out of RV order (k/k#136583).
        let lw = FakeLw::new(vec![
            fake::list("", None, vec![]),
            fake::watch(vec![add("x", "5"), add("y", "3"), Item::Sleep(secs(2.0))]),
            fake::watch(vec![add("z", "9"), modified("x", "10"), add("w", "11")]),
            fake::watch_hang(vec![]),
        ]);
        let (r, _) = make(&lw, ReflectorOptions::default(), 0.0);
        let reqs = run_until(&r, &lw, 4).await;
        assert_eq!(watch_req(&reqs[1]).resource_version, None);
        // Still "": the ADDEDs were not propagated.
        assert_eq!(watch_req(&reqs[2]).resource_version, None);
        // After the first non-ADDED event every event counts again.
        assert_eq!(watch_req(&reqs[3]).resource_version.as_deref(), Some("11"));
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_8_short_watch_backs_off_then_relists_without_limit_7_1() {
        let lw = FakeLw::new(vec![
            fake::list("10", None, vec![obj("ns", "a", "10")]),
            fake::watch(vec![]),
            fake::list("12", None, vec![]),
            fake::watch_hang(vec![]),
        ]);
        let (r, _) = make(&lw, ReflectorOptions::default(), 0.0);
        let reqs = run_until(&r, &lw, 4).await;
        // Backoff 800 ms (jitter pinned to 0), then a relist at lastSyncRV: never back in
        // time (regression 7.1) and without limit, so the watch cache serves it (spec 1.3).
        assert_eq!(reqs[2].0 - reqs[1].0, secs(0.8));
        let p = list_req(&reqs[2]);
        assert_eq!(p.resource_version.as_deref(), Some("10"));
        assert_eq!(p.limit, None);
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_8_expired_in_stream_relists_at_last_sync_rv_regression_7_1() {
        let lw = FakeLw::new(vec![
            fake::list("10", None, vec![]),
            fake::watch(vec![
                add("a", "12"),
                modified("a", "15"),
                err_event(410, "Expired"),
            ]),
            fake::list("20", None, vec![]),
            fake::watch_hang(vec![]),
        ]);
        let (r, _) = make(&lw, ReflectorOptions::default(), 0.0);
        let reqs = run_until(&r, &lw, 4).await;
        assert_eq!(reqs[2].0 - reqs[1].0, secs(0.8));
        // Not marked unavailable: relist at "15", never at "" or "0".
        assert_eq!(list_req(&reqs[2]).resource_version.as_deref(), Some("15"));
        assert_eq!(watch_req(&reqs[3]).resource_version.as_deref(), Some("20"));
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_8_429_in_stream_backs_off_and_rewatches() {
        let lw = FakeLw::new(vec![
            fake::list("10", None, vec![]),
            fake::watch(vec![add("a", "11"), err_event(429, "TooManyRequests")]),
            fake::watch_hang(vec![]),
        ]);
        let (r, _) = make(&lw, ReflectorOptions::default(), 0.0);
        let reqs = run_until(&r, &lw, 3).await;
        assert_eq!(reqs[2].0 - reqs[1].0, secs(0.8));
        assert_eq!(watch_req(&reqs[2]).resource_version.as_deref(), Some("11"));
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_8_internal_error_relists_by_default() {
        let lw = FakeLw::new(vec![
            fake::list("10", None, vec![]),
            fake::watch(vec![err_event(500, "InternalError")]),
            fake::list("11", None, vec![]),
            fake::watch_hang(vec![]),
        ]);
        let (r, _) = make(&lw, ReflectorOptions::default(), 0.0);
        let reqs = run_until(&r, &lw, 3).await;
        list_req(&reqs[2]);
        assert_eq!(reqs[2].0 - reqs[1].0, secs(0.8));
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_8_internal_error_rewatches_with_max_retry_duration() {
        let lw = FakeLw::new(vec![
            fake::list("10", None, vec![]),
            fake::watch(vec![add("a", "11"), err_event(500, "InternalError")]),
            fake::watch_hang(vec![]),
        ]);
        let opts = ReflectorOptions {
            max_internal_error_retry_duration: Duration::from_secs(30),
            ..Default::default()
        };
        let (r, _) = make(&lw, opts, 0.0);
        let reqs = run_until(&r, &lw, 3).await;
        assert_eq!(watch_req(&reqs[2]).resource_version.as_deref(), Some("11"));
        assert_eq!(reqs[2].0, reqs[1].0, "re-watch at once");
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_8_other_stream_errors_back_off_and_relist() {
        let lw = FakeLw::new(vec![
            fake::list("10", None, vec![]),
            fake::watch(vec![
                add("a", "11"),
                Item::Err(Error::Decode("bad json".into())),
            ]),
            fake::list("12", None, vec![]),
            fake::watch(vec![err_event(403, "Forbidden")]),
            fake::list("13", None, vec![]),
            fake::watch_hang(vec![]),
        ]);
        let handled = Arc::new(Mutex::new(0usize));
        let h = handled.clone();
        let (r, _) = make(&lw, ReflectorOptions::default(), 0.0);
        let r = Arc::new(
            Arc::into_inner(r)
                .unwrap()
                .with_watch_error_handler(Arc::new(move |_| *h.lock() += 1)),
        );
        let reqs = run_until(&r, &lw, 6).await;
        assert_eq!(list_req(&reqs[2]).resource_version.as_deref(), Some("11"));
        assert_eq!(list_req(&reqs[4]).resource_version.as_deref(), Some("12"));
        assert_eq!(reqs[2].0 - reqs[1].0, secs(0.8));
        assert_eq!(reqs[4].0 - reqs[3].0, secs(1.6));
        // In-stream errors never reach the watch-error handler (spec 1.9).
        assert_eq!(*handled.lock(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_8_watch_start_refused_or_429_rewatch_after_backoff() {
        let lw = FakeLw::new(vec![
            fake::list("10", None, vec![]),
            Step::Watch(Err(fake::refused())),
            Step::Watch(Err(fake::api_err(429, "TooManyRequests"))),
            fake::watch_hang(vec![]),
        ]);
        let (r, _) = make(&lw, ReflectorOptions::default(), 0.0);
        let reqs = run_until(&r, &lw, 4).await;
        for r in &reqs[2..4] {
            assert_eq!(watch_req(r).resource_version.as_deref(), Some("10"));
        }
        assert_eq!(reqs[2].0 - reqs[1].0, secs(0.8));
        assert_eq!(reqs[3].0 - reqs[2].0, secs(1.6));
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_9_watch_error_handler_sees_list_and_watch_start_failures() {
        let lw = FakeLw::new(vec![
            Step::List(Err(fake::api_err(500, "InternalError"))),
            fake::list("10", None, vec![]),
            Step::Watch(Err(fake::api_err(403, "Forbidden"))),
            fake::list("11", None, vec![]),
            fake::watch_hang(vec![]),
        ]);
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let s = seen.clone();
        let lw2 = lw.clone();
        let store = Arc::new(Rec::default());
        let r = Arc::new(
            Reflector::new(lw2, store, ReflectorOptions::default())
                .with_rand(Box::new(|| 0.0))
                .with_watch_error_handler(Arc::new(move |e| {
                    s.lock().push(match e {
                        ReflectorError::List(_) => "list".into(),
                        ReflectorError::WatchStart(_) => "watch".into(),
                        other => other.to_string(),
                    })
                })),
        );
        let reqs = run_until(&r, &lw, 5).await;
        assert_eq!(*seen.lock(), vec!["list".to_owned(), "watch".to_owned()]);
        // A watch-start failure other than refused/429 ends ListAndWatch: backoff, relist.
        assert_eq!(list_req(&reqs[3]).resource_version.as_deref(), Some("10"));
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_4_pager_expired_on_page_2_lists_fully_at_original_rv() {
        let lw = FakeLw::new(vec![
            fake::list("10", Some("c1"), vec![obj("ns", "a", "9")]),
            Step::List(Err(fake::expired())),
            fake::list("12", None, vec![obj("ns", "a", "9"), obj("ns", "b", "12")]),
            fake::watch_hang(vec![]),
        ]);
        let (r, store) = make(&lw, ReflectorOptions::default(), 0.0);
        let reqs = run_until(&r, &lw, 4).await;
        let full = list_req(&reqs[2]);
        assert_eq!(full.resource_version.as_deref(), Some("0"));
        assert_eq!(full.limit, None);
        assert_eq!(full.continue_token, None);
        assert_eq!(
            store.ops(),
            vec![Op::Replace(vec!["ns/a".into(), "ns/b".into()], "12".into())]
        );
        assert_eq!(watch_req(&reqs[3]).resource_version.as_deref(), Some("12"));
    }

    async fn relist_after_unavailable(err: Error) {
        // Sync at 10, short watch, relist at 10 fails → immediate retry at "" (spec 1.4).
        let lw = FakeLw::new(vec![
            fake::list("10", None, vec![]),
            fake::watch(vec![]),
            Step::List(Err(err)),
            fake::list("30", None, vec![]),
            fake::watch(vec![]),
            fake::list("31", None, vec![]),
            fake::watch_hang(vec![]),
        ]);
        let (r, _) = make(&lw, ReflectorOptions::default(), 0.0);
        let reqs = run_until(&r, &lw, 7).await;
        // spec 1.2: "0" first, then lastSyncRV, then "" once unavailable.
        assert_eq!(list_req(&reqs[0]).resource_version.as_deref(), Some("0"));
        assert_eq!(list_req(&reqs[2]).resource_version.as_deref(), Some("10"));
        assert_eq!(list_req(&reqs[3]).resource_version, None);
        assert_eq!(reqs[3].0, reqs[2].0, "the retry is immediate");
        // A successful list clears "unavailable": the next relist is at lastSyncRV again.
        assert_eq!(list_req(&reqs[5]).resource_version.as_deref(), Some("30"));
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_2_and_1_4_expired_list_retries_at_empty_rv() {
        relist_after_unavailable(fake::expired()).await;
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_10_too_large_rv_list_retries_at_empty_rv() {
        let e = fake::too_large_rv();
        assert!(e.is_too_large_rv());
        relist_after_unavailable(e).await;
        // The message-only form counts too.
        let msg_only: Error =
            Status::failure(504, "Timeout", "Too large resource version: 5, current: 1").into();
        assert!(msg_only.is_too_large_rv());
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_3_paginated_rv0_list_keeps_paging_and_page_size_option() {
        let lw = FakeLw::new(vec![
            fake::list("10", Some("c"), vec![obj("ns", "a", "1")]),
            fake::list("10", None, vec![obj("ns", "b", "1")]),
            fake::watch(vec![]),
            fake::list("11", None, vec![]),
            fake::watch_hang(vec![]),
        ]);
        let (r, _) = make(&lw, ReflectorOptions::default(), 0.0);
        let reqs = run_until(&r, &lw, 5).await;
        let relist = list_req(&reqs[3]);
        assert_eq!(relist.resource_version.as_deref(), Some("10"));
        assert_eq!(relist.limit, Some(500), "server pages: keep paging");

        let lw = FakeLw::new(vec![
            fake::list("10", None, vec![]),
            fake::watch(vec![]),
            fake::list("11", None, vec![]),
            fake::watch_hang(vec![]),
        ]);
        let opts = ReflectorOptions {
            page_size: Some(7),
            ..Default::default()
        };
        let (r, _) = make(&lw, opts, 0.0);
        let reqs = run_until(&r, &lw, 4).await;
        assert_eq!(list_req(&reqs[0]).limit, Some(7));
        assert_eq!(list_req(&reqs[2]).limit, Some(7));
    }

    #[test]
    fn spec_1_1_backoff_sequence_cap_jitter_and_reset() {
        let t0 = Instant::now();
        let mut b = Backoff::default();
        let got: Vec<f64> = (0..9)
            .map(|i| b.step(t0 + secs(i as f64), 0.0).as_secs_f64())
            .collect();
        assert_eq!(got, vec![0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0]);
        // Jitter 1.0: every sleep is in [d, 2d); after the cap in [30, 60).
        let d = b.step(t0 + secs(10.0), 0.999);
        assert!(d >= secs(30.0) && d < secs(60.0), "{d:?}");
        // The reset comes at the first step more than 2 min after the previous reset (t0),
        // however often the steps came in between.
        assert_eq!(b.step(t0 + secs(120.0), 0.0), secs(30.0));
        assert_eq!(b.step(t0 + secs(120.5), 0.0), secs(0.8));
        assert_eq!(b.step(t0 + secs(121.0), 0.0), secs(1.6));
        let mut b = Backoff::default();
        assert_eq!(b.step(t0, 0.5), secs(1.2));
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_1_run_backs_off_after_every_return_up_to_the_cap() {
        let mut steps: Vec<Step> = (0..10)
            .map(|_| Step::List(Err(fake::api_err(500, "InternalError"))))
            .collect();
        steps.push(fake::list("1", None, vec![]));
        steps.push(fake::watch_hang(vec![]));
        let lw = FakeLw::new(steps);
        let (r, _) = make(&lw, ReflectorOptions::default(), 0.0);
        let reqs = run_until(&r, &lw, 12).await;
        assert_eq!(reqs[0].0, Duration::ZERO, "first ListAndWatch runs at once");
        let gaps: Vec<f64> = reqs
            .windows(2)
            .take(10)
            .map(|w| (w[1].0 - w[0].0).as_secs_f64())
            .collect();
        let want = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0];
        for (g, w) in gaps.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "gaps {gaps:?}");
        }
        // Steps come at 0, 0.8, …, 80.4 and 110.4 s (no reset: within 2 min of the first);
        // the step at 140.4 s is the first more than 2 min after it, so it resets.
        assert!((gaps[9] - 0.8).abs() < 1e-6, "gaps {gaps:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_11_resync_while_watching_when_should_resync() {
        for (should, want) in [(true, 3usize), (false, 0)] {
            let lw = FakeLw::new(vec![
                fake::list("1", None, vec![]),
                fake::watch_hang(vec![]),
            ]);
            let store = Arc::new(Rec::default());
            let opts = ReflectorOptions {
                resync_period: Duration::from_secs(10),
                ..Default::default()
            };
            let r = Arc::new(
                Reflector::new(lw.clone(), store.clone(), opts)
                    .with_should_resync(Arc::new(move || should)),
            );
            let stop = StopSignal::new();
            let task = tokio::spawn({
                let (r, stop) = (r.clone(), stop.clone());
                async move { r.run(stop).await }
            });
            lw.wait_requests(2).await;
            // Virtual time: ticks at 10, 20 and 30 s.
            tokio::time::sleep(secs(35.0)).await;
            stop.stop();
            tokio::time::timeout(secs(60.0), task)
                .await
                .unwrap()
                .unwrap();
            let n = store.ops().iter().filter(|o| **o == Op::Resync).count();
            assert_eq!(n, want, "should_resync={should}");
        }
    }

    fn watch_list_opts() -> ReflectorOptions {
        ReflectorOptions {
            use_watch_list: true,
            ..Default::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_12_watch_list_replaces_at_end_bookmark_and_continues_the_stream() {
        let lw = FakeLw::new(vec![fake::watch_hang(vec![
            add("a", "5"),
            add("b", "6"),
            add("c", "6"),
            deleted("c", "7"),
            fake::bookmark("7", false),
            fake::bookmark("8", true),
            modified("a", "9"),
        ])]);
        let (r, store) = make(&lw, watch_list_opts(), 0.0);
        let stop = StopSignal::new();
        let task = tokio::spawn({
            let (r, stop) = (r.clone(), stop.clone());
            async move { r.run(stop).await }
        });
        let reqs = lw.wait_requests(1).await;
        tokio::time::timeout(secs(60.0), async {
            while store.ops().len() < 2 {
                tokio::time::sleep(secs(0.01)).await;
            }
        })
        .await
        .expect("events not applied");
        stop.stop();
        task.await.unwrap();
        assert_eq!(
            watch_req(&reqs[0]),
            &WatchParams {
                resource_version: None,
                resource_version_match: Some("NotOlderThan".into()),
                send_initial_events: true,
                allow_watch_bookmarks: true,
                timeout_seconds: Some(300),
                ..Default::default()
            }
        );
        assert_eq!(
            store.ops(),
            vec![
                Op::Replace(vec!["ns/a".into(), "ns/b".into()], "8".into()),
                Op::Update("ns/a".into(), "9".into()),
            ]
        );
        assert_eq!(r.last_sync_resource_version(), "9");
        assert_eq!(lw.requests().len(), 1, "no list request");
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_12_missing_end_bookmark_retries_watch_list() {
        let lw = FakeLw::new(vec![
            fake::watch(vec![add("a", "5"), Item::Sleep(secs(25.0))]),
            fake::watch_hang(vec![add("a", "5"), fake::bookmark("6", true)]),
        ]);
        let (r, store) = make(&lw, watch_list_opts(), 0.0);
        let stop = StopSignal::new();
        let task = tokio::spawn({
            let (r, stop) = (r.clone(), stop.clone());
            async move { r.run(stop).await }
        });
        let reqs = lw.wait_requests(2).await;
        tokio::time::timeout(secs(60.0), async {
            while store.ops().is_empty() {
                tokio::time::sleep(secs(0.01)).await;
            }
        })
        .await
        .expect("second attempt never completed");
        stop.stop();
        task.await.unwrap();
        // Retried as a watch-list when the stream closed, not a fallback list (k/k#140890).
        assert!(watch_req(&reqs[1]).send_initial_events);
        assert_eq!(reqs[1].0, secs(25.0));
        // Nothing of the incomplete first attempt reached the store; the second attempt's
        // end bookmark completes the initial state.
        assert_eq!(
            store.ops(),
            vec![Op::Replace(vec!["ns/a".into()], "6".into())]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_12_422_falls_back_to_list_and_watch() {
        let lw = FakeLw::new(vec![
            Step::Watch(Err(fake::api_err(422, "Invalid"))),
            fake::list("10", None, vec![]),
            fake::watch_hang(vec![]),
        ]);
        let (r, _) = make(&lw, watch_list_opts(), 0.0);
        let reqs = run_until(&r, &lw, 3).await;
        assert_eq!(list_req(&reqs[1]).resource_version.as_deref(), Some("0"));
        let w = watch_req(&reqs[2]);
        assert!(!w.send_initial_events);
        assert_eq!(w.resource_version_match, None);
        assert_eq!(reqs[1].0, reqs[0].0, "fallback is immediate");
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_12_expired_retries_at_empty_rv_and_429_backs_off() {
        let lw = FakeLw::new(vec![
            fake::watch(vec![fake::bookmark("8", true), err_event(410, "Expired")]),
            Step::Watch(Err(fake::expired())),
            Step::Watch(Err(fake::api_err(429, "TooManyRequests"))),
            fake::watch_hang(vec![fake::bookmark("20", true)]),
        ]);
        let (r, _) = make(&lw, watch_list_opts(), 0.0);
        let reqs = run_until(&r, &lw, 4).await;
        // After the in-stream Expired: backoff, then a watch-list at lastSyncRV 8...
        assert_eq!(watch_req(&reqs[1]).resource_version.as_deref(), Some("8"));
        assert_eq!(reqs[1].0 - reqs[0].0, secs(0.8));
        // ...which expired: immediately again at "".
        assert_eq!(watch_req(&reqs[2]).resource_version, None);
        assert_eq!(reqs[2].0, reqs[1].0);
        // 429: back off, retry.
        assert!(watch_req(&reqs[3]).send_initial_events);
        assert_eq!(reqs[3].0 - reqs[2].0, secs(1.6));
    }

    #[tokio::test(start_paused = true)]
    async fn spec_1_12_too_large_rv_retries_at_empty_rv_and_short_close_falls_back() {
        let lw = FakeLw::new(vec![
            Step::Watch(Err(fake::too_large_rv())),
            // Closed at once with no events: a very short watch, which is not retried.
            fake::watch(vec![]),
            fake::list("10", None, vec![]),
            fake::watch_hang(vec![]),
        ]);
        let (r, _) = make(&lw, watch_list_opts(), 0.0);
        let reqs = run_until(&r, &lw, 4).await;
        assert!(watch_req(&reqs[1]).send_initial_events);
        assert_eq!(watch_req(&reqs[1]).resource_version, None);
        assert_eq!(reqs[1].0, reqs[0].0, "TooLarge retries at once");
        // The list after the fallback uses RV "" (the RV is still marked unavailable).
        assert_eq!(list_req(&reqs[2]).resource_version, None);
        assert!(!watch_req(&reqs[3]).send_initial_events);
    }

    #[tokio::test(start_paused = true)]
    async fn stop_during_backoff_ends_run_promptly() {
        let lw = FakeLw::new(vec![Step::List(Err(fake::api_err(500, "InternalError")))]);
        // Jitter pinned near its top: a long first sleep.
        let (r, _) = make(&lw, ReflectorOptions::default(), 0.99);
        let stop = StopSignal::new();
        let task = tokio::spawn({
            let (r, stop) = (r.clone(), stop.clone());
            async move { r.run(stop).await }
        });
        lw.wait_requests(1).await;
        let t0 = Instant::now();
        stop.stop();
        tokio::time::timeout(secs(60.0), task)
            .await
            .unwrap()
            .unwrap();
        assert!(t0.elapsed() < secs(0.1), "waited {:?}", t0.elapsed());
    }
}
