//! The shared index informer: reflector → DeltaFIFO → store + processor (spec 4.1, 4.5, 4.6).
//!
//! Why shared: one list+watch per scope feeds every handler interested in it, and all of them
//! read the same indexed cache. The informer owns the order of operations that keeps cache and
//! notifications consistent: a delta is applied to the store and distributed under one lock,
//! and a handler added late is seeded from the store under that same lock.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use tracing::Instrument;

use super::delta_fifo::{
    Delta, DeltaFifo, DeltaFifoOptions, Deltas, KnownObjects, PopError, TransformFunc,
};
use super::lister_watcher::ListerWatcher;
use super::processor::{
    determine_resync_period, ListenerHandle, ListenerId, Notification, PanicPolicy,
    ResourceEventHandler, SharedProcessor, SyncedFn, MINIMUM_RESYNC_PERIOD,
};
use super::reflector::{Reflector, ReflectorOptions, WatchErrorHandler};
use super::stop::StopSignal;
use super::store::{Indexers, Store, StoreError};
use kwh_client::Object;

/// Misuse of an informer's lifecycle (spec 4.6).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InformerError {
    #[error("informer has already started")]
    AlreadyStarted,
    #[error("informer was stopped")]
    Stopped,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How to build a [`SharedIndexInformer`].
#[derive(Clone, Default)]
pub struct InformerOptions {
    /// Default handler resync period and initial resync check period; zero disables resync.
    pub resync_period: Duration,
    /// Indexes besides the namespace index, which is always present.
    pub indexers: Indexers,
    pub reflector: ReflectorOptions,
    /// What a panicking handler does: by default the process aborts, as in client-go.
    pub handler_panics: PanicPolicy,
}

struct Config {
    started: bool,
    stopped: bool,
    transform: Option<TransformFunc>,
    watch_error_handler: Option<WatchErrorHandler>,
    resync_check_period: Duration,
    default_handler_resync: Duration,
}

struct Shared<L: ListerWatcher> {
    lw: Arc<L>,
    indexer: Arc<Store>,
    processor: Arc<SharedProcessor>,
    fifo: Arc<OnceLock<Arc<DeltaFifo>>>,
    reflector: OnceLock<Arc<Reflector<L, DeltaFifo>>>,
    config: Mutex<Config>,
    /// Orders delta processing against seeding a late handler (spec 4.5).
    block_deltas: Mutex<()>,
    stop: StopSignal,
    reflector_opts: ReflectorOptions,
}

/// A handler's registration on an informer.
#[derive(Clone)]
pub struct HandlerRegistration {
    handle: ListenerHandle,
}

impl HandlerRegistration {
    pub fn id(&self) -> ListenerId {
        self.handle.id
    }
    /// The informer synced and this handler has been given every initial-list object
    /// (spec 4.5, k/k#113985).
    pub fn has_synced(&self) -> bool {
        self.handle.has_synced()
    }
    /// Notifications waiting in this handler's buffer.
    pub fn pending(&self) -> usize {
        self.handle.pending()
    }
}

/// One list+watch scope, its indexed cache and its handlers. Cheap to clone.
pub struct SharedIndexInformer<L: ListerWatcher> {
    inner: Arc<Shared<L>>,
}

impl<L: ListerWatcher> Clone for SharedIndexInformer<L> {
    fn clone(&self) -> Self {
        SharedIndexInformer {
            inner: self.inner.clone(),
        }
    }
}

impl<L: ListerWatcher> SharedIndexInformer<L> {
    pub fn new(lw: L, opts: InformerOptions) -> Self {
        let indexer = Arc::new(Store::with_namespace_index());
        if !opts.indexers.is_empty() {
            if let Err(e) = indexer.add_indexers(opts.indexers) {
                // Only a duplicate "namespace" index can conflict; the built-in one stays.
                tracing::warn!(error = %e, "ignoring conflicting indexer");
            }
        }
        SharedIndexInformer {
            inner: Arc::new(Shared {
                lw: Arc::new(lw),
                indexer,
                processor: Arc::new(SharedProcessor::with_panic_policy(opts.handler_panics)),
                fifo: Arc::new(OnceLock::new()),
                reflector: OnceLock::new(),
                config: Mutex::new(Config {
                    started: false,
                    stopped: false,
                    transform: None,
                    watch_error_handler: None,
                    resync_check_period: opts.resync_period,
                    default_handler_resync: opts.resync_period,
                }),
                block_deltas: Mutex::new(()),
                stop: StopSignal::new(),
                reflector_opts: opts.reflector,
            }),
        }
    }

    /// The indexed cache: what listers read.
    pub fn indexer(&self) -> &Arc<Store> {
        &self.inner.indexer
    }

    pub fn lister_watcher(&self) -> &Arc<L> {
        &self.inner.lw
    }

    /// Add indexes; existing items are indexed (spec 3.5).
    pub fn add_indexers(&self, indexers: Indexers) -> Result<(), InformerError> {
        Ok(self.inner.indexer.add_indexers(indexers)?)
    }

    /// Set the transform; only before Run (spec 4.6). It must be idempotent.
    pub fn set_transform(&self, t: TransformFunc) -> Result<(), InformerError> {
        let mut c = self.inner.config.lock();
        if c.started {
            return Err(InformerError::AlreadyStarted);
        }
        c.transform = Some(t);
        Ok(())
    }

    /// Set the watch-error handler (spec 1.9); only before Run (spec 4.6).
    pub fn set_watch_error_handler(&self, h: WatchErrorHandler) -> Result<(), InformerError> {
        let mut c = self.inner.config.lock();
        if c.started {
            return Err(InformerError::AlreadyStarted);
        }
        c.watch_error_handler = Some(h);
        Ok(())
    }

    /// Add a handler with the informer's default resync period.
    pub fn add_event_handler(
        &self,
        handler: Arc<dyn ResourceEventHandler>,
    ) -> Result<HandlerRegistration, InformerError> {
        let d = self.inner.config.lock().default_handler_resync;
        self.add_event_handler_with_resync(handler, d)
    }

    /// Add a handler with its own resync period (spec 4.3). After start it is first given
    /// every cached object as an initial-list add (spec 4.5). After stop it is an error.
    pub fn add_event_handler_with_resync(
        &self,
        handler: Arc<dyn ResourceEventHandler>,
        resync: Duration,
    ) -> Result<HandlerRegistration, InformerError> {
        let s = &*self.inner;
        let mut c = s.config.lock();
        if c.stopped || s.stop.is_stopped() {
            return Err(InformerError::Stopped);
        }
        let mut resync = resync;
        if !resync.is_zero() {
            resync = resync.max(MINIMUM_RESYNC_PERIOD);
            if resync < c.resync_check_period {
                if c.started {
                    tracing::warn!(
                        requested = ?resync,
                        check = ?c.resync_check_period,
                        "resync period below the informer's check period after start; raised"
                    );
                    resync = c.resync_check_period;
                } else {
                    c.resync_check_period = resync;
                    s.processor.resync_check_period_changed(resync);
                }
            }
        }
        let effective = determine_resync_period(resync, c.resync_check_period);
        let upstream = self.synced_fn();
        let handle = if c.started {
            let _g = s.block_deltas.lock();
            s.processor
                .add_listener(handler, resync, effective, upstream, s.indexer.list())
        } else {
            s.processor
                .add_listener(handler, resync, effective, upstream, [])
        }
        .map_err(|_| InformerError::Stopped)?;
        Ok(HandlerRegistration { handle })
    }

    /// Delivers the cached objects `select` picks to one handler as `on-add`s (not initial-list
    /// ones), in the handler's own order: under the delta lock, so every notification the
    /// handler already holds is about a state at or before the cache's, and every later one
    /// about a state after it. A handler therefore never sees an object's versions go back, nor
    /// an add after its delete, whatever the watch delivers meanwhile (client-go's resync keeps
    /// that order by going through the DeltaFIFO; this is the same guarantee for one handler).
    /// What a controller that gained work (a new leader, a shard member gaining keys, a plugin
    /// back from quarantine) needs, without a relist. Returns how many objects were delivered.
    pub fn replay(&self, reg: &HandlerRegistration, select: impl Fn(&Object) -> bool) -> usize {
        let s = &*self.inner;
        let _g = s.block_deltas.lock();
        let objects = s.indexer.list_filtered(None, &select);
        s.processor.deliver_to(
            reg.id(),
            objects.into_iter().map(|obj| Notification::Add {
                obj,
                is_in_initial_list: false,
            }),
        )
    }

    /// Remove a handler; asynchronous (spec 4.6): it may still be finishing a notification.
    pub fn remove_event_handler(&self, reg: &HandlerRegistration) -> bool {
        self.inner.processor.remove_listener(reg.id())
    }

    pub fn handler_count(&self) -> usize {
        self.inner.processor.listener_count()
    }

    /// The FIFO's initial items have been processed (spec 4.5: not that handlers saw them).
    pub fn has_synced(&self) -> bool {
        self.inner.fifo.get().is_some_and(|f| f.has_synced())
    }

    fn synced_fn(&self) -> SyncedFn {
        let fifo = self.inner.fifo.clone();
        Arc::new(move || fifo.get().is_some_and(|f| f.has_synced()))
    }

    /// Resolves once synced; polls every 100 ms like client-go. False if stopped first.
    pub async fn wait_for_sync(&self) -> bool {
        loop {
            if self.has_synced() {
                return true;
            }
            if self.inner.stop.is_stopped() {
                return false;
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = self.inner.stop.stopped() => {}
            }
        }
    }

    /// The RV the reflector last synced to ("" before Run).
    pub fn last_sync_resource_version(&self) -> String {
        self.inner
            .reflector
            .get()
            .map(|r| r.last_sync_resource_version())
            .unwrap_or_default()
    }

    /// Ask Run to end. Handlers stop after their current notification.
    pub fn stop(&self) {
        self.inner.config.lock().stopped = true;
        self.inner.stop.stop();
    }

    pub fn is_stopped(&self) -> bool {
        self.inner.stop.is_stopped()
    }

    /// Whether both handles are the same informer.
    pub fn same_as(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Run until [`SharedIndexInformer::stop`]: the reflector in its own task, the pop loop
    /// here. A second call returns an error.
    pub async fn run(&self) -> Result<(), InformerError> {
        let s = &self.inner;
        let (transform, weh) = {
            let mut c = s.config.lock();
            if c.stopped {
                return Err(InformerError::Stopped);
            }
            if c.started {
                return Err(InformerError::AlreadyStarted);
            }
            c.started = true;
            (c.transform.clone(), c.watch_error_handler.clone())
        };
        let resync_check = s.config.lock().resync_check_period;
        let fifo = Arc::new(DeltaFifo::new(DeltaFifoOptions {
            known_objects: Some(s.indexer.clone() as Arc<dyn KnownObjects>),
            emit_delta_type_replaced: true,
            transform,
        }));
        // `started` was false until just now, so nobody set the FIFO before.
        let _ = s.fifo.set(fifo.clone());
        let processor = s.processor.clone();
        let mut ropts = s.reflector_opts.clone();
        ropts.resync_period = resync_check;
        let mut reflector = Reflector::new(s.lw.clone(), fifo.clone(), ropts)
            .with_should_resync(Arc::new(move || processor.should_resync()));
        if let Some(h) = weh {
            reflector = reflector.with_watch_error_handler(h);
        }
        let reflector = Arc::new(reflector);
        let _ = s.reflector.set(reflector.clone());

        s.processor.run();
        let stop = s.stop.clone();
        // If this future is dropped, the informer stops rather than leaving its reflector
        // task running unowned.
        let _guard = StopOnDrop(stop.clone());
        let refl_task = tokio::spawn({
            let stop = stop.clone();
            let r = reflector.clone();
            async move { r.run(stop).await }
        });
        let closer = tokio::spawn({
            let (stop, fifo) = (stop.clone(), fifo.clone());
            async move {
                stop.stopped().await;
                fifo.close();
            }
        });

        let name = s.reflector_opts.name.clone();
        async {
            while !stop.is_stopped() {
                match fifo
                    .pop_keyed(|key, deltas, initial| {
                        self.process_deltas(&key, deltas, initial);
                        Ok::<(), std::convert::Infallible>(())
                    })
                    .await
                {
                    Ok(()) => {}
                    Err(PopError::Closed(_)) => break,
                    Err(PopError::Process(e)) => match e {},
                }
            }
        }
        .instrument(tracing::info_span!("informer", name = %name))
        .await;

        if let Err(e) = refl_task.await {
            tracing::error!(error = %e, "reflector task failed");
        }
        closer.abort();
        s.processor.stop();
        s.config.lock().stopped = true;
        Ok(())
    }

    /// Apply one key's deltas, oldest first, to the store and distribute them (spec 4.1).
    fn process_deltas(&self, key: &Arc<str>, deltas: Deltas, is_in_initial_list: bool) {
        let s = &*self.inner;
        let _g = s.block_deltas.lock();
        for d in deltas {
            match d {
                Delta::Sync(o) | Delta::Replaced(o) | Delta::Added(o) | Delta::Updated(o) => {
                    match s.indexer.upsert_keyed(key, o.clone()) {
                        Some(old) => {
                            // Unchanged RV: a resync or relist echo, only for syncing
                            // listeners (spec 4.2).
                            let is_sync = old.resource_version() == o.resource_version();
                            s.processor
                                .distribute(Notification::Update { old, new: o }, is_sync);
                        }
                        None => s.processor.distribute(
                            Notification::Add {
                                obj: o,
                                is_in_initial_list,
                            },
                            false,
                        ),
                    }
                }
                Delta::Deleted(o) => {
                    s.indexer.delete_key(key);
                    s.processor.distribute(Notification::Delete(o), false);
                }
            }
        }
    }
}

struct StopOnDrop(StopSignal);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{self, FakeLw, Item};
    use crate::processor::test_support::{recorder, recv_n, Recorder, Seen};
    use crate::tombstone::test_support::{obj, obj_labels};
    use kwh_client::watch::WatchEvent;
    use kwh_client::Object;
    use tokio::sync::mpsc;

    type Inf = SharedIndexInformer<Arc<FakeLw>>;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn start(inf: &Inf) -> tokio::task::JoinHandle<Result<(), InformerError>> {
        let inf = inf.clone();
        tokio::spawn(async move { inf.run().await })
    }

    async fn finish(inf: &Inf, task: tokio::task::JoinHandle<Result<(), InformerError>>) {
        inf.stop();
        tokio::time::timeout(secs(60.0), task)
            .await
            .expect("informer did not stop")
            .expect("informer panicked")
            .expect("run failed");
    }

    fn add(name: &str, rv: &str) -> Item {
        Item::Ev(WatchEvent::Added(obj("ns", name, rv)))
    }

    fn seen_add(k: &str, rv: &str, initial: bool) -> Seen {
        Seen::Add(k.into(), rv.into(), initial)
    }

    #[tokio::test(start_paused = true)]
    async fn spec_4_1_deltas_update_store_then_notify_in_order() {
        let lw = FakeLw::new(vec![
            fake::list("10", None, vec![obj("ns", "a", "1"), obj("ns", "b", "1")]),
            fake::watch_hang(vec![
                Item::Sleep(secs(2.0)),
                Item::Ev(WatchEvent::Modified(obj("ns", "a", "2"))),
                Item::Ev(WatchEvent::Deleted(obj("ns", "b", "3"))),
                add("c", "4"),
            ]),
        ]);
        let inf: Inf = SharedIndexInformer::new(lw, InformerOptions::default());
        let (rec, mut rx) = recorder();
        let reg = inf.add_event_handler(rec).unwrap();
        assert!(!inf.has_synced());
        let task = start(&inf);
        let seen = recv_n(&mut rx, 5).await;
        assert_eq!(
            seen,
            vec![
                seen_add("ns/a", "1", true),
                seen_add("ns/b", "1", true),
                Seen::Update("ns/a".into(), "1".into(), "2".into()),
                Seen::Delete("ns/b".into(), false),
                seen_add("ns/c", "4", false),
            ]
        );
        assert!(inf.has_synced());
        assert!(reg.has_synced());
        let mut keys = inf.indexer().list_keys();
        keys.sort();
        assert_eq!(keys, vec!["ns/a", "ns/c"]);
        assert_eq!(
            inf.indexer().get_by_key("ns/a").unwrap().resource_version(),
            "2"
        );
        assert_eq!(inf.last_sync_resource_version(), "4");
        finish(&inf, task).await;
    }

    #[tokio::test(start_paused = true)]
    async fn spec_4_1_relist_tombstones_and_4_2_unchanged_rv_is_a_sync_update_7_2() {
        let lw = FakeLw::new(vec![
            fake::list("10", None, vec![obj("ns", "a", "1"), obj("ns", "b", "1")]),
            fake::watch(vec![]),
            fake::list("11", None, vec![obj("ns", "a", "1")]),
            fake::watch_hang(vec![]),
        ]);
        let inf: Inf = SharedIndexInformer::new(lw, InformerOptions::default());
        let (rec, mut rx) = recorder();
        inf.add_event_handler(rec).unwrap();
        let task = start(&inf);
        let seen = recv_n(&mut rx, 4).await;
        assert_eq!(
            seen[2..],
            [
                // New listeners are flagged as syncing, so the relist echo reaches them.
                Seen::Update("ns/a".into(), "1".into(), "1".into()),
                Seen::Delete("ns/b".into(), true),
            ]
        );
        assert_eq!(inf.indexer().list_keys(), vec!["ns/a"]);
        finish(&inf, task).await;
    }

    #[tokio::test(start_paused = true)]
    async fn spec_4_5_late_handler_gets_initial_adds_and_own_has_synced_7_8() {
        let lw = FakeLw::new(vec![
            fake::list("10", None, vec![obj("ns", "a", "1"), obj("ns", "b", "1")]),
            fake::watch_hang(vec![]),
        ]);
        let inf: Inf = SharedIndexInformer::new(lw, InformerOptions::default());
        let task = start(&inf);
        assert!(tokio::time::timeout(secs(60.0), inf.wait_for_sync())
            .await
            .unwrap());
        let (tx, mut rx) = mpsc::unbounded_channel();
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let late = Arc::new(Recorder {
            tx,
            gate: Some(gate.clone()),
        });
        let reg = inf.add_event_handler(late).unwrap();
        // The informer is synced; this registration is not until it has seen the cache.
        assert!(inf.has_synced());
        assert!(!reg.has_synced());
        gate.add_permits(2);
        let mut seen = recv_n(&mut rx, 2).await;
        seen.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        assert_eq!(
            seen,
            vec![seen_add("ns/a", "1", true), seen_add("ns/b", "1", true)]
        );
        tokio::time::timeout(secs(60.0), async {
            while !reg.has_synced() {
                tokio::time::sleep(secs(0.01)).await;
            }
        })
        .await
        .expect("late registration never synced");
        finish(&inf, task).await;
    }

    #[tokio::test(start_paused = true)]
    async fn spec_4_6_setup_rules_and_removal() {
        let lw = FakeLw::new(vec![
            fake::list("10", None, vec![]),
            fake::watch_hang(vec![Item::Sleep(secs(10.0)), add("d", "11")]),
        ]);
        let inf: Inf = SharedIndexInformer::new(lw, InformerOptions::default());
        let (r1, mut rx1) = recorder();
        let (r2, mut rx2) = recorder();
        let reg1 = inf.add_event_handler(r1).unwrap();
        inf.add_event_handler(r2).unwrap();
        let task = start(&inf);
        assert!(tokio::time::timeout(secs(5.0), inf.wait_for_sync())
            .await
            .unwrap());
        assert_eq!(
            inf.set_transform(Arc::new(|o| o)),
            Err(InformerError::AlreadyStarted)
        );
        assert_eq!(
            inf.set_watch_error_handler(Arc::new(|_| {})),
            Err(InformerError::AlreadyStarted)
        );
        assert_eq!(inf.run().await, Err(InformerError::AlreadyStarted));
        assert!(inf.remove_event_handler(&reg1));
        assert_eq!(
            recv_n(&mut rx2, 1).await,
            vec![seen_add("ns/d", "11", false)]
        );
        // The removed handler's task ended without delivering "d".
        let end = tokio::time::timeout(secs(5.0), rx1.recv()).await.unwrap();
        assert_eq!(end, None);
        finish(&inf, task).await;
        let (r3, _rx3) = recorder();
        assert!(matches!(
            inf.add_event_handler(r3),
            Err(InformerError::Stopped)
        ));
        assert_eq!(inf.run().await, Err(InformerError::Stopped));
    }

    #[tokio::test(start_paused = true)]
    async fn transform_applies_before_store_and_handlers() {
        let lw = FakeLw::new(vec![
            fake::list("10", None, vec![obj("ns", "a", "1")]),
            fake::watch_hang(vec![]),
        ]);
        let inf: Inf = SharedIndexInformer::new(lw, InformerOptions::default());
        inf.set_transform(Arc::new(|o: Object| {
            obj_labels(
                o.namespace().unwrap_or(""),
                o.name(),
                o.resource_version(),
                &[("t", "1")],
            )
        }))
        .unwrap();
        let task = start(&inf);
        assert!(tokio::time::timeout(secs(5.0), inf.wait_for_sync())
            .await
            .unwrap());
        let a = inf.indexer().get_by_key("ns/a").unwrap();
        assert_eq!(a.meta().label("t"), Some("1"));
        finish(&inf, task).await;
    }

    #[tokio::test]
    async fn spec_4_3_handler_resync_periods() {
        let s = Duration::from_secs;
        let lw = FakeLw::new(vec![]);
        let inf: Inf = SharedIndexInformer::new(
            lw,
            InformerOptions {
                resync_period: s(10),
                ..Default::default()
            },
        );
        let (h, _r) = recorder();
        let default = inf.add_event_handler(h).unwrap();
        // Before Run a shorter period lowers the check period, and others are recomputed.
        let (h, _r) = recorder();
        let fast = inf.add_event_handler_with_resync(h, s(2)).unwrap();
        // The minimum is 1 s.
        let (h, _r) = recorder();
        let tiny = inf
            .add_event_handler_with_resync(h, Duration::from_millis(10))
            .unwrap();
        let p = &inf.inner.processor;
        assert_eq!(inf.inner.config.lock().resync_check_period, s(1));
        assert_eq!(p.resync_period(default.id()), Some(s(10)));
        assert_eq!(p.resync_period(fast.id()), Some(s(2)));
        assert_eq!(p.resync_period(tiny.id()), Some(s(1)));
        // After Run, a shorter period is raised to the check period.
        inf.inner.config.lock().started = true;
        inf.inner.config.lock().resync_check_period = s(5);
        let (h, _r) = recorder();
        let late = inf.add_event_handler_with_resync(h, s(2)).unwrap();
        assert_eq!(p.resync_period(late.id()), Some(s(5)));

        // An informer without resync disables every handler's.
        let inf: Inf = SharedIndexInformer::new(FakeLw::new(vec![]), InformerOptions::default());
        let (h, _r) = recorder();
        let reg = inf.add_event_handler_with_resync(h, s(5)).unwrap();
        assert_eq!(
            inf.inner.processor.resync_period(reg.id()),
            Some(Duration::ZERO)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn spec_4_3_resync_delivers_known_state_to_resyncing_handler_7_4() {
        let lw = FakeLw::new(vec![
            fake::list("10", None, vec![obj("ns", "a", "1")]),
            // After two resync periods, a real change.
            fake::watch_hang(vec![
                Item::Sleep(secs(2.5)),
                Item::Ev(WatchEvent::Modified(obj("ns", "a", "2"))),
            ]),
        ]);
        let inf: Inf = SharedIndexInformer::new(
            lw,
            InformerOptions {
                resync_period: Duration::from_secs(1),
                ..Default::default()
            },
        );
        let (rec, mut rx) = recorder();
        let (quiet, mut quiet_rx) = recorder();
        inf.add_event_handler(rec).unwrap();
        inf.add_event_handler_with_resync(quiet, Duration::ZERO)
            .unwrap();
        let task = start(&inf);
        assert_eq!(recv_n(&mut rx, 1).await, vec![seen_add("ns/a", "1", true)]);
        assert_eq!(recv_n(&mut quiet_rx, 1).await.len(), 1);
        // Resyncs carry the cached (current) object, old == new.
        let seen = recv_n(&mut rx, 2).await;
        for s in seen {
            assert_eq!(s, Seen::Update("ns/a".into(), "1".into(), "1".into()));
        }
        assert_eq!(
            recv_n(&mut rx, 1).await,
            vec![Seen::Update("ns/a".into(), "1".into(), "2".into())]
        );
        // The handler without resync got none of the resyncs: its next notification is the
        // real change, which every handler gets.
        assert_eq!(
            recv_n(&mut quiet_rx, 1).await,
            vec![Seen::Update("ns/a".into(), "1".into(), "2".into())]
        );
        finish(&inf, task).await;
    }
}

#[cfg(test)]
mod replay_tests {
    use super::*;
    use crate::fake::{self, FakeLw, Item};
    use crate::processor::HandlerFns;
    use crate::tombstone::test_support::obj;
    use kwh_client::watch::WatchEvent;

    /// What the handler saw of one key: `a`dd, `u`pdate or `d`elete, and the resourceVersion.
    type Log = Arc<Mutex<Vec<(String, char, u64)>>>;

    fn rv(o: &Object) -> u64 {
        o.resource_version().parse().expect("numeric test RV")
    }

    /// Checks one handler's log: per key, versions never go back, and after a delete the key
    /// comes back only as an add of a later version.
    fn check_order(log: &[(String, char, u64)]) -> Result<(), String> {
        let mut last: std::collections::HashMap<&str, (char, u64)> = Default::default();
        for (i, (key, what, v)) in log.iter().enumerate() {
            if let Some(&(prev, pv)) = last.get(key.as_str()) {
                let bad = match (prev, *what) {
                    ('d', 'a') => *v <= pv,
                    ('d', _) => true,
                    _ => *v < pv,
                };
                if bad {
                    return Err(format!(
                        "#{i} {key}: {what}@{v} after {prev}@{pv}: {:?}",
                        &log[i.saturating_sub(5)..(i + 1).min(log.len())]
                    ));
                }
            }
            last.insert(key, (*what, *v));
        }
        Ok(())
    }

    /// A replay (what a plugin that gained work asks for) running again and again while the
    /// watch streams updates, deletes and re-creations: the handler still sees every key's
    /// versions in order and no add after its delete (the contract of spec 4.1's ordered
    /// delivery, kept for replays by taking the delta lock).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn spec_4_1_replays_keep_each_keys_order_against_live_notifications() {
        const KEYS: usize = 8;
        const EVENTS: u64 = 4000;
        let mut items = Vec::new();
        let mut alive = [true; KEYS];
        for i in 0..EVENTS {
            let k = (i as usize * 5) % KEYS;
            let name = format!("k{k}");
            let o = obj("ns", &name, &(i + 2).to_string());
            items.push(Item::Ev(if !alive[k] {
                alive[k] = true;
                WatchEvent::Added(o)
            } else if i % 7 == 3 {
                alive[k] = false;
                WatchEvent::Deleted(o)
            } else {
                WatchEvent::Modified(o)
            }));
        }
        let initial = (0..KEYS)
            .map(|k| obj("ns", &format!("k{k}"), "1"))
            .collect();
        let lw = FakeLw::new(vec![
            fake::list("1", None, initial),
            fake::watch_hang(items),
        ]);
        let inf: SharedIndexInformer<Arc<FakeLw>> =
            SharedIndexInformer::new(lw, InformerOptions::default());
        let log: Log = Default::default();
        let (l1, l2, l3) = (log.clone(), log.clone(), log.clone());
        let h = HandlerFns {
            add: Some(Box::new(move |o: Object, _| {
                l1.lock().push((o.key(), 'a', rv(&o)))
            })),
            update: Some(Box::new(move |_, o: Object| {
                l2.lock().push((o.key(), 'u', rv(&o)))
            })),
            delete: Some(Box::new(move |o: crate::tombstone::ObjOrTombstone| {
                let v = o.object().map_or(0, rv);
                l3.lock().push((o.key(), 'd', v))
            })),
        };
        let reg = inf.add_event_handler(Arc::new(h)).unwrap();
        let task = {
            let inf = inf.clone();
            tokio::spawn(async move { inf.run().await })
        };
        let last_rv = EVENTS + 1;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        // Replays from a thread of their own, as often as they can, racing the informer.
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let replayer = {
            let (inf, reg, done) = (inf.clone(), reg.clone(), done.clone());
            std::thread::spawn(move || {
                let (mut replays, mut replayed) = (0usize, 0usize);
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    replayed += inf.replay(&reg, |_| true);
                    replays += 1;
                }
                (replays, replayed)
            })
        };
        while !log.lock().iter().any(|(_, _, v)| *v == last_rv) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the handler never saw the end"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let (replays, replayed) = replayer.join().expect("replayer panicked");
        assert!(
            replays > 10 && replayed > 0,
            "{replays} replays, {replayed} objects"
        );
        let log = log.lock().clone();
        if let Err(e) = check_order(&log) {
            panic!("{e}");
        }
        inf.stop();
        let _ = tokio::time::timeout(Duration::from_secs(60), task).await;
    }

    #[test]
    fn the_order_check_catches_what_it_must() {
        let l = |v: &[(&str, char, u64)]| -> Vec<(String, char, u64)> {
            v.iter().map(|(k, w, r)| (k.to_string(), *w, *r)).collect()
        };
        assert!(check_order(&l(&[("a", 'a', 1), ("a", 'u', 2), ("a", 'a', 2)])).is_ok());
        assert!(check_order(&l(&[("a", 'u', 3), ("a", 'a', 2)])).is_err());
        assert!(check_order(&l(&[("a", 'd', 3), ("a", 'a', 3)])).is_err());
        assert!(check_order(&l(&[("a", 'd', 3), ("a", 'u', 4)])).is_err());
        assert!(check_order(&l(&[("a", 'd', 3), ("a", 'a', 4)])).is_ok());
    }
}
