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

pub use super::backoff::Backoff;
use super::delta_fifo::DeltaFifo;
use super::lister_watcher::{ListerWatcher, WatchStream};
use super::pager::pager_list;
use super::processor::SyncedFn;
use super::stop::StopSignal;
use super::store::Store;
use super::tombstone::ObjOrTombstone;
use kwh_client::clip::clip;
use kwh_client::decode::ObjectPool;
use kwh_client::error::Status;
use kwh_client::params::WatchParams;
use kwh_client::watch::WatchEvent;
use kwh_client::{Error, Object};

/// Where the reflector writes: the DeltaFIFO in an informer, a plain store elsewhere.
pub trait ReflectorStore: Send + Sync + 'static {
    fn add(&self, obj: Object);
    fn update(&self, obj: Object);
    /// `obj` is the object's last state as the DELETED event carried it.
    fn delete(&self, obj: Object);
    /// A full relist at `resource_version`.
    fn replace(&self, list: Vec<Object>, resource_version: &str);
    fn resync(&self);
    /// Objects already delivered downstream, which a relist may hand back for items of the
    /// same version rather than holding a second copy of each (none by default).
    fn object_pool(&self) -> Option<Arc<dyn ObjectPool>> {
        None
    }
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
    fn object_pool(&self) -> Option<Arc<dyn ObjectPool>> {
        DeltaFifo::object_pool(self)
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
    /// Let a relist hand back the already-cached object for every listed item of the same
    /// uid and resourceVersion instead of decoding a second copy. Why: a relist after an
    /// expired watch mostly returns objects the cache already holds, byte for byte (a new
    /// resourceVersion comes with every write); without reuse the old and the new copy of
    /// each coexist until the relist is handed over, which doubles the cache's memory at the
    /// worst moment. Off only to compare against (benchmarks) or to rule it out.
    pub reuse_cached_objects: bool,
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
            reuse_cached_objects: true,
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

/// Watch-start errors retried in place: connection refused and 429 (spec 1.8). Other
/// connect failures (DNS, TLS, proxy) end ListAndWatch, so the watch-error handler sees them
/// and the next round relists after a backoff.
fn is_watch_error_retriable(e: &Error) -> bool {
    e.is_connection_refused() || e.is_too_many_requests()
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
            None => tracing::warn!(
                name = %self.opts.name,
                error = %clip(&e.to_string()),
                "list and watch failed"
            ),
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
                    tracing::warn!(
                        error = %clip(&e.to_string()),
                        "watch-list failed; falling back to list+watch"
                    );
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
        let pool = if self.opts.reuse_cached_objects {
            self.store.object_pool()
        } else {
            None
        };
        let mut res = pager_list(&*self.lw, &rv, page_size, pool.clone()).await;
        if matches!(&res, Err(e) if e.is_expired() || e.is_too_large_rv()) {
            self.set_unavailable(true);
            let retry_rv = self.relist_resource_version();
            tracing::info!(rv = %rv, "list RV unavailable; relisting at the most recent RV");
            res = pager_list(&*self.lw, &retry_rv, page_size, pool).await;
        }
        let (items, list_rv, paginated) = res.map_err(ReflectorError::List)?;
        let items = self.expected_items(items);
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
                            tracing::info!(
                                error = %clip(&e.to_string()),
                                "watch start failed; backing off"
                            );
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
                    tracing::info!(error = %clip(&e.to_string()), "watch expired; relisting");
                    return Ok(());
                }
                WatchEnd::Error(e) if e.is_too_many_requests() => {
                    tracing::info!("watch returned 429; backing off");
                    if !self.backoff_sleep(stop).await {
                        return Ok(());
                    }
                }
                WatchEnd::Error(e) if is_internal_error(&e) && retry.should_retry() => {
                    tracing::info!(
                        error = %clip(&e.to_string()),
                        "retrying watch after internal error"
                    );
                }
                WatchEnd::Error(e) => {
                    tracing::warn!(
                        error = %clip(&e.to_string()),
                        "watch ended with an error; relisting"
                    );
                    return Ok(());
                }
            }
        }
    }

    /// Why an object does not belong in this scope's store, if it does not: not of the watched
    /// type (a Table, another kind or version) or without a name. Such an object is skipped,
    /// RV and all, rather than cached under a wrong or empty key (spec 1.7). The one check of
    /// watch events and listed items alike: a LIST used to take in what a WATCH dropped
    /// (reported from outside).
    fn unexpected(&self, o: &Object) -> Option<String> {
        if o.name().is_empty() {
            return Some("its object has no metadata.name".into());
        }
        let (api_version, kind) = self.lw.expected_type()?;
        let (got_version, got_kind) = o.type_meta();
        // A server always sends type metadata in watch events (and a list's items get the
        // list's); an object without it is taken as the watched type, as a typed decoder would.
        if got_kind.is_empty() || (got_kind == kind && got_version == api_version) {
            return None;
        }
        Some(format!(
            "{} is {}, Kind={}, not {api_version}, Kind={kind}",
            clip(&o.key()),
            clip(&got_version),
            clip(&got_kind)
        ))
    }

    /// [`unexpected`](Self::unexpected) for a watch event's object, with a warning.
    fn is_expected(&self, o: &Object) -> bool {
        match self.unexpected(o) {
            None => true,
            Some(why) => {
                tracing::warn!(%why, "skipping a watch event");
                false
            }
        }
    }

    /// A list's items less those [`unexpected`](Self::unexpected) skips, with one warning
    /// for all of them.
    fn expected_items(&self, mut items: Vec<Object>) -> Vec<Object> {
        let mut skipped = 0usize;
        let mut first = None;
        items.retain(|o| match self.unexpected(o) {
            None => true,
            Some(why) => {
                skipped += 1;
                first.get_or_insert(why);
                false
            }
        });
        if let Some(first) = first {
            tracing::warn!(skipped, first = %first, "skipping listed objects");
        }
        items
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
        // One wait for the stop signal for the whole watch: a new one per event would enter
        // and leave the signal's waiter list (two locks) for every event.
        let stopped = stop.stopped();
        tokio::pin!(stopped);
        loop {
            let ev = tokio::select! {
                _ = &mut stopped => return WatchEnd::Stopped,
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
                if !self.is_expected(o) {
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
        // As a LIST relist does: an initial event of a cached version is the cached object,
        // so a watch-list relist of unchanged objects does not hold them twice.
        let pool = if self.opts.reuse_cached_objects {
            self.store.object_pool()
        } else {
            None
        };
        let mut count = 0usize;
        let stopped = stop.stopped();
        tokio::pin!(stopped);
        loop {
            let ev = tokio::select! {
                _ = &mut stopped => return ListWatchEnd::Stopped,
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
                    if !self.is_expected(&o) => {}
                WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                    let key = o.key();
                    let o = match &pool {
                        Some(p) => p.get(&key).filter(|held| held.is_same_version(&o)),
                        None => None,
                    }
                    .unwrap_or(o);
                    temp.insert(key, o);
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
            tracing::debug!(error = %clip(&e.to_string()), "watch stream ended");
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

#[cfg(test)]
mod tests;
