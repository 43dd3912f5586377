//! Fan-out of informer notifications to handlers (spec 4.2–4.5).
//!
//! Why one unbounded buffer and one task per listener: distribution runs under the informer's
//! delta lock and must never wait for a handler, and each handler must see its notifications
//! one at a time and in order. A slow handler therefore costs memory, not other handlers'
//! latency (spec 4.4); `pending()` exposes that backlog.

use std::future::{poll_fn, Future};
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use parking_lot::RwLock;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument;

use super::tombstone::ObjOrTombstone;
use kwh_client::Object;

/// Receives an informer's notifications. Calls for one registration are sequential; the
/// returned futures may await (e.g. a call into a Wasm guest). What a panic does is the
/// processor's [`PanicPolicy`].
pub trait ResourceEventHandler: Send + Sync + 'static {
    fn on_add(&self, obj: Object, is_in_initial_list: bool) -> BoxFuture<'_, ()>;
    fn on_update(&self, old: Object, new: Object) -> BoxFuture<'_, ()>;
    /// `obj` is the last state, or a tombstone when the deletion was seen only on a relist.
    fn on_delete(&self, obj: ObjOrTombstone) -> BoxFuture<'_, ()>;

    /// The listener task's loop over this handler's notifications. The default boxes one
    /// future per notification (the methods above); a handler on a hot path implements
    /// [`EventHandler`] too and overrides this with [`listen_with`], so that each
    /// notification's future lives inside the task instead.
    fn listen(self: Arc<Self>, notifications: Notifications) -> BoxFuture<'static, ()> {
        listen_with(Boxed(self), notifications).boxed()
    }

    /// Handles `n` at once, on the distributing thread, when this handler's whole work for it
    /// is a short step that never waits (enqueueing a key): returns whether it did, and
    /// `false` sends it through the listener's queue as usual. The processor asks only while
    /// the listener has nothing queued or running, so the handler still sees its
    /// notifications one at a time and in order; what it saves is the hand-over to the
    /// listener's task (a queue push, a task wake-up and a poll per notification), which for
    /// an enqueue is most of the cost. Must not block, and must not call into the informer.
    fn handle_inline(&self, n: &Notification) -> bool {
        let _ = n;
        false
    }
}

/// A handler with named future types, driven by [`listen_with`] without a box per
/// notification. Same contract as [`ResourceEventHandler`].
pub trait EventHandler: Send + Sync + 'static {
    fn added(&self, obj: Object, is_in_initial_list: bool) -> impl Future<Output = ()> + Send;
    fn updated(&self, old: Object, new: Object) -> impl Future<Output = ()> + Send;
    fn deleted(&self, obj: ObjOrTombstone) -> impl Future<Output = ()> + Send;
}

impl<H: EventHandler + ?Sized> EventHandler for Arc<H> {
    fn added(&self, obj: Object, is_in_initial_list: bool) -> impl Future<Output = ()> + Send {
        (**self).added(obj, is_in_initial_list)
    }
    fn updated(&self, old: Object, new: Object) -> impl Future<Output = ()> + Send {
        (**self).updated(old, new)
    }
    fn deleted(&self, obj: ObjOrTombstone) -> impl Future<Output = ()> + Send {
        (**self).deleted(obj)
    }
}

/// A [`ResourceEventHandler`] seen as an [`EventHandler`] (its boxed futures).
struct Boxed<H: ?Sized>(Arc<H>);

impl<H: ResourceEventHandler + ?Sized> EventHandler for Boxed<H> {
    fn added(&self, obj: Object, is_in_initial_list: bool) -> impl Future<Output = ()> + Send {
        self.0.on_add(obj, is_in_initial_list)
    }
    fn updated(&self, old: Object, new: Object) -> impl Future<Output = ()> + Send {
        self.0.on_update(old, new)
    }
    fn deleted(&self, obj: ObjOrTombstone) -> impl Future<Output = ()> + Send {
        self.0.on_delete(obj)
    }
}

type AddFn = Box<dyn Fn(Object, bool) + Send + Sync>;
type UpdateFn = Box<dyn Fn(Object, Object) + Send + Sync>;
type DeleteFn = Box<dyn Fn(ObjOrTombstone) + Send + Sync>;

/// A handler from plain synchronous closures; missing ones ignore their notifications.
#[derive(Default)]
pub struct HandlerFns {
    pub add: Option<AddFn>,
    pub update: Option<UpdateFn>,
    pub delete: Option<DeleteFn>,
}

impl ResourceEventHandler for HandlerFns {
    fn on_add(&self, obj: Object, is_in_initial_list: bool) -> BoxFuture<'_, ()> {
        if let Some(f) = &self.add {
            f(obj, is_in_initial_list);
        }
        futures_util::future::ready(()).boxed()
    }
    fn on_update(&self, old: Object, new: Object) -> BoxFuture<'_, ()> {
        if let Some(f) = &self.update {
            f(old, new);
        }
        futures_util::future::ready(()).boxed()
    }
    fn on_delete(&self, obj: ObjOrTombstone) -> BoxFuture<'_, ()> {
        if let Some(f) = &self.delete {
            f(obj);
        }
        futures_util::future::ready(()).boxed()
    }
}

/// One notification for one listener.
#[derive(Debug, Clone)]
pub enum Notification {
    Add {
        obj: Object,
        is_in_initial_list: bool,
    },
    Update {
        old: Object,
        new: Object,
    },
    Delete(ObjOrTombstone),
}

/// Whether a source of "synced" is synced.
pub type SyncedFn = Arc<dyn Fn() -> bool + Send + Sync>;

/// A registration's HasSynced (spec 4.5, k/k#113985): the informer is synced and every
/// initial-list add queued for this listener has been handled.
pub struct SyncTracker {
    upstream: SyncedFn,
    pending_initial: AtomicUsize,
}

impl SyncTracker {
    pub fn new(upstream: SyncedFn) -> Self {
        SyncTracker {
            upstream,
            pending_initial: AtomicUsize::new(0),
        }
    }
    fn start(&self) {
        self.pending_initial.fetch_add(1, Ordering::SeqCst);
    }
    fn finished(&self) {
        self.pending_initial.fetch_sub(1, Ordering::SeqCst);
    }
    pub fn has_synced(&self) -> bool {
        self.pending_initial.load(Ordering::SeqCst) == 0 && (self.upstream)()
    }
}

/// The minimum resync period of a handler (spec 4.3).
pub const MINIMUM_RESYNC_PERIOD: Duration = Duration::from_secs(1);

/// A handler's effective period given the informer's check period (spec 4.3): 0 stays 0, a 0
/// check period disables it, and nothing resyncs more often than the checks run.
pub fn determine_resync_period(desired: Duration, check: Duration) -> Duration {
    if desired.is_zero() {
        return Duration::ZERO;
    }
    if check.is_zero() {
        tracing::warn!(
            ?desired,
            "the informer's resync period is 0: the handler's resync is disabled"
        );
        return Duration::ZERO;
    }
    desired.max(check)
}

/// What a panicking handler call does (spec 4.4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PanicPolicy {
    /// Abort the process, as client-go does by default: a handler that panicked may have left
    /// its own state half-updated, and a restart (by the kubelet, in a cluster) is the one
    /// recovery that is always correct.
    #[default]
    Crash,
    /// Log it, skip that notification and pause the listener for a second (client-go with
    /// crash-on-panic turned off). For hosts whose handlers isolate their own faults, such as
    /// the plugin runtime, where a guest's trap is an error, not a panic, and one plugin must
    /// not take the others down.
    Skip,
}

impl PanicPolicy {
    /// Deals with a handler call that panicked: aborts under `Crash`; under `Skip`, logs it
    /// and returns, the notification skipped.
    fn handler_panicked(self) {
        match self {
            PanicPolicy::Crash => {
                tracing::error!("event handler panicked; aborting the process (spec 4.4)");
                std::process::abort();
            }
            PanicPolicy::Skip => {
                tracing::error!("event handler panicked; notification skipped");
            }
        }
    }
}

/// How long a listener pauses after a skipped panic (client-go's listener loop restarts after
/// a second).
const PANIC_PAUSE: Duration = Duration::from_secs(1);

/// Identifies a listener within its processor.
pub type ListenerId = u64;

struct Listener {
    tx: mpsc::UnboundedSender<Notification>,
    rx: Option<mpsc::UnboundedReceiver<Notification>>,
    handler: Arc<dyn ResourceEventHandler>,
    tracker: Arc<SyncTracker>,
    pending: Arc<AtomicUsize>,
    /// Notifications sent to the task and not yet handled by it (queued or running): while
    /// non-zero, nothing may be handled inline, or it would overtake them.
    unfinished: Arc<AtomicUsize>,
    removed: Arc<AtomicBool>,
    requested_resync_period: Duration,
    resync_period: Duration,
    next_resync: Instant,
    /// Receives Sync-type updates (spec 4.2). New listeners start flagged.
    syncing: bool,
}

impl Listener {
    fn add(&self, n: Notification) {
        if matches!(
            n,
            Notification::Add {
                is_in_initial_list: true,
                ..
            }
        ) {
            self.tracker.start();
        }
        self.pending.fetch_add(1, Ordering::Relaxed);
        self.unfinished.fetch_add(1, Ordering::Relaxed);
        if self.tx.send(n).is_err() {
            // The listener task is gone (removed or stopped); keep the counters honest.
            self.pending.fetch_sub(1, Ordering::Relaxed);
            self.unfinished.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Hands `n` to the listener: inline when its handler takes it so and the listener is
    /// idle, else through its queue.
    fn deliver(&self, n: &Notification, panics: PanicPolicy) {
        // Only `distribute` and `add_listener` send to a listener, never both at once (the
        // processor's lock), so an idle listener stays idle until this call sends. Acquire:
        // whatever the task's last handler did happens before this one.
        let idle = self.rx.is_none()
            && self.unfinished.load(Ordering::Acquire) == 0
            && !self.removed.load(Ordering::Relaxed);
        if idle {
            match std::panic::catch_unwind(AssertUnwindSafe(|| self.handler.handle_inline(n))) {
                Ok(true) => return,
                Ok(false) => {}
                Err(_) => {
                    // Skipped (no pause: this is the informer's thread, not the listener's).
                    panics.handler_panicked();
                    return;
                }
            }
        }
        self.add(n.clone());
    }

    fn spawn(&mut self, rt: &tokio::runtime::Handle, id: ListenerId, panics: PanicPolicy) {
        let Some(rx) = self.rx.take() else { return };
        let span = tracing::info_span!("informer.listener", listener = id);
        let notifications = Notifications {
            rx,
            tracker: self.tracker.clone(),
            pending: self.pending.clone(),
            unfinished: self.unfinished.clone(),
            removed: self.removed.clone(),
            panics,
        };
        rt.spawn(self.handler.clone().listen(notifications).instrument(span));
    }
}

/// One listener's queue as its task sees it: the notifications in order, and the counters
/// the processor and the listener's HasSynced read.
pub struct Notifications {
    rx: mpsc::UnboundedReceiver<Notification>,
    tracker: Arc<SyncTracker>,
    pending: Arc<AtomicUsize>,
    unfinished: Arc<AtomicUsize>,
    removed: Arc<AtomicBool>,
    panics: PanicPolicy,
}

/// Hands `handler` the notifications one at a time, in order, until the listener is removed
/// or the processor stops (spec 4.4). A panicking handler call is dealt with as the
/// processor's [`PanicPolicy`] says.
pub async fn listen_with<H: EventHandler>(handler: H, mut n: Notifications) {
    while let Some(note) = n.rx.recv().await {
        n.pending.fetch_sub(1, Ordering::Relaxed);
        if n.removed.load(Ordering::SeqCst) {
            break;
        }
        let initial = matches!(
            note,
            Notification::Add {
                is_in_initial_list: true,
                ..
            }
        );
        let h = &handler;
        // The handler is called inside the future so a panic before its first await is
        // caught as well. Pinned where it stands and polled under `catch_unwind`: the future
        // can be kilobytes (a guest call's state), and every wrapper would move it again.
        let call = pin!(async move {
            match note {
                Notification::Add {
                    obj,
                    is_in_initial_list,
                } => h.added(obj, is_in_initial_list).await,
                Notification::Update { old, new } => h.updated(old, new).await,
                Notification::Delete(o) => h.deleted(o).await,
            }
        });
        let mut call = AssertUnwindSafe(call);
        let caught = poll_fn(|cx| {
            match std::panic::catch_unwind(AssertUnwindSafe(|| call.as_mut().poll(cx))) {
                Ok(Poll::Ready(())) => Poll::Ready(true),
                Ok(Poll::Pending) => Poll::Pending,
                Err(_) => Poll::Ready(false),
            }
        });
        if !caught.await {
            n.panics.handler_panicked();
            tokio::time::sleep(PANIC_PAUSE).await;
        }
        if initial {
            n.tracker.finished();
        }
        // Release: pairs with the Acquire of `Listener::deliver`'s idle check.
        n.unfinished.fetch_sub(1, Ordering::Release);
    }
}

/// What a caller gets back for an added listener.
#[derive(Clone)]
pub struct ListenerHandle {
    pub id: ListenerId,
    pub tracker: Arc<SyncTracker>,
    pending: Arc<AtomicUsize>,
}

impl ListenerHandle {
    /// Notifications queued for this listener and not yet taken by its task.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }
    pub fn has_synced(&self) -> bool {
        self.tracker.has_synced()
    }
}

#[derive(Default)]
struct Inner {
    listeners: Vec<(ListenerId, Listener)>,
    next_id: ListenerId,
    runtime: Option<tokio::runtime::Handle>,
    stopped: bool,
    panics: PanicPolicy,
}

/// The set of listeners of one informer.
#[derive(Default)]
pub struct SharedProcessor {
    inner: RwLock<Inner>,
}

/// Adding a listener to a stopped processor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("processor is stopped")]
pub struct ProcessorStopped;

impl SharedProcessor {
    pub fn new() -> Self {
        Self::default()
    }

    /// A processor whose listeners deal with handler panics as `panics` says.
    pub fn with_panic_policy(panics: PanicPolicy) -> Self {
        let p = Self::default();
        p.inner.write().panics = panics;
        p
    }

    /// Add a listener; `initial` objects are queued to it (and only it) as initial-list adds
    /// before any later notification can reach it (spec 4.5). Its task starts now if the
    /// processor runs, else at [`SharedProcessor::run`].
    pub fn add_listener(
        &self,
        handler: Arc<dyn ResourceEventHandler>,
        requested_resync_period: Duration,
        resync_period: Duration,
        upstream_synced: SyncedFn,
        initial: impl IntoIterator<Item = Object>,
    ) -> Result<ListenerHandle, ProcessorStopped> {
        let mut g = self.inner.write();
        if g.stopped {
            return Err(ProcessorStopped);
        }
        let id = g.next_id;
        g.next_id += 1;
        let (tx, rx) = mpsc::unbounded_channel();
        let tracker = Arc::new(SyncTracker::new(upstream_synced));
        let pending = Arc::new(AtomicUsize::new(0));
        let mut l = Listener {
            tx,
            rx: Some(rx),
            handler,
            tracker: tracker.clone(),
            pending: pending.clone(),
            unfinished: Arc::new(AtomicUsize::new(0)),
            removed: Arc::new(AtomicBool::new(false)),
            requested_resync_period,
            resync_period,
            next_resync: Instant::now() + resync_period,
            syncing: true,
        };
        for obj in initial {
            l.add(Notification::Add {
                obj,
                is_in_initial_list: true,
            });
        }
        if let Some(rt) = g.runtime.clone() {
            l.spawn(&rt, id, g.panics);
        }
        g.listeners.push((id, l));
        Ok(ListenerHandle {
            id,
            tracker,
            pending,
        })
    }

    /// Remove a listener. Asynchronous (spec 4.6): a notification being handled finishes,
    /// queued ones are dropped. Returns whether it was present.
    pub fn remove_listener(&self, id: ListenerId) -> bool {
        let mut g = self.inner.write();
        let Some(pos) = g.listeners.iter().position(|(i, _)| *i == id) else {
            return false;
        };
        let (_, l) = g.listeners.remove(pos);
        l.removed.store(true, Ordering::SeqCst);
        true
    }

    pub fn listener_count(&self) -> usize {
        self.inner.read().listeners.len()
    }

    /// Send `n` to every listener, or only to syncing ones when it is a resync (spec 4.2).
    /// Never blocks.
    pub fn distribute(&self, n: Notification, is_sync: bool) {
        let g = self.inner.read();
        for (_, l) in &g.listeners {
            if !is_sync || l.syncing {
                l.deliver(&n, g.panics);
            }
        }
    }

    /// Hands `notifications` to listener `id` alone, in order, as [`SharedProcessor::distribute`]
    /// hands a notification to each: inline while the listener is idle and its handler takes
    /// it so, else through its queue, behind whatever it already holds. Returns how many were
    /// handed over (0 when the listener is gone). The caller orders this against the
    /// informer's other distributions (its delta lock), which is what keeps a replay in order.
    pub fn deliver_to(
        &self,
        id: ListenerId,
        notifications: impl IntoIterator<Item = Notification>,
    ) -> usize {
        let g = self.inner.read();
        let Some((_, l)) = g.listeners.iter().find(|(i, _)| *i == id) else {
            return 0;
        };
        let mut n = 0;
        for note in notifications {
            l.deliver(&note, g.panics);
            n += 1;
        }
        n
    }

    /// Start every listener's task on the current runtime.
    pub fn run(&self) {
        let rt = tokio::runtime::Handle::current();
        let mut g = self.inner.write();
        let panics = g.panics;
        for (id, l) in g.listeners.iter_mut() {
            l.spawn(&rt, *id, panics);
        }
        g.runtime = Some(rt);
    }

    /// Stop: every listener stops after its current notification; no listener can be added.
    pub fn stop(&self) {
        let mut g = self.inner.write();
        g.stopped = true;
        for (_, l) in g.listeners.drain(..) {
            l.removed.store(true, Ordering::SeqCst);
        }
    }

    pub fn is_stopped(&self) -> bool {
        self.inner.read().stopped
    }

    /// Decide which listeners are due for a resync now (spec 4.3); true if any is.
    pub fn should_resync(&self) -> bool {
        let now = Instant::now();
        let mut g = self.inner.write();
        let mut any = false;
        for (_, l) in g.listeners.iter_mut() {
            l.syncing = !l.resync_period.is_zero() && now >= l.next_resync;
            if l.syncing {
                any = true;
                l.next_resync = now + l.resync_period;
            }
        }
        any
    }

    /// The informer's check period changed before Run: recompute every listener's period.
    pub fn resync_check_period_changed(&self, check: Duration) {
        let mut g = self.inner.write();
        for (_, l) in g.listeners.iter_mut() {
            l.resync_period = determine_resync_period(l.requested_resync_period, check);
        }
    }

    /// The effective resync period of a listener (for tests and diagnostics).
    pub fn resync_period(&self, id: ListenerId) -> Option<Duration> {
        self.inner
            .read()
            .listeners
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, l)| l.resync_period)
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    /// What a recording handler saw, in order.
    #[derive(Debug, Clone, PartialEq)]
    pub enum Seen {
        Add(String, String, bool),
        Update(String, String, String),
        Delete(String, bool),
    }

    /// Records notifications into a channel; optionally waits on a gate before each one, and
    /// panics on objects named "boom".
    pub struct Recorder {
        pub tx: mpsc::UnboundedSender<Seen>,
        pub gate: Option<Arc<tokio::sync::Semaphore>>,
    }

    pub fn recorder() -> (Arc<Recorder>, mpsc::UnboundedReceiver<Seen>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Arc::new(Recorder { tx, gate: None }), rx)
    }

    impl Recorder {
        async fn wait_gate(&self) {
            if let Some(g) = &self.gate {
                g.acquire().await.expect("gate open").forget();
            }
        }
    }

    impl ResourceEventHandler for Recorder {
        fn on_add(&self, obj: Object, initial: bool) -> BoxFuture<'_, ()> {
            async move {
                self.wait_gate().await;
                if obj.name() == "boom" {
                    panic!("handler failure on purpose");
                }
                let _ = self.tx.send(Seen::Add(
                    obj.key(),
                    obj.resource_version().to_owned(),
                    initial,
                ));
            }
            .boxed()
        }
        fn on_update(&self, old: Object, new: Object) -> BoxFuture<'_, ()> {
            async move {
                self.wait_gate().await;
                let _ = self.tx.send(Seen::Update(
                    new.key(),
                    old.resource_version().to_owned(),
                    new.resource_version().to_owned(),
                ));
            }
            .boxed()
        }
        fn on_delete(&self, obj: ObjOrTombstone) -> BoxFuture<'_, ()> {
            async move {
                self.wait_gate().await;
                let _ = self.tx.send(Seen::Delete(obj.key(), obj.is_tombstone()));
            }
            .boxed()
        }
    }

    /// Receive `n` notifications within a deadline.
    pub async fn recv_n(rx: &mut mpsc::UnboundedReceiver<Seen>, n: usize) -> Vec<Seen> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let s = tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .expect("timed out waiting for a notification")
                .expect("handler channel closed");
            out.push(s);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use crate::tombstone::test_support::obj;

    fn always() -> SyncedFn {
        Arc::new(|| true)
    }

    fn upd(rv_old: &str, rv_new: &str) -> Notification {
        Notification::Update {
            old: obj("ns", "a", rv_old),
            new: obj("ns", "a", rv_new),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn spec_4_2_and_4_3_sync_notifications_go_only_to_syncing_listeners() {
        let p = SharedProcessor::new();
        p.run();
        let (fast, mut fast_rx) = recorder();
        let (never, mut never_rx) = recorder();
        let s = Duration::from_secs(10);
        p.add_listener(fast, s, s, always(), []).unwrap();
        p.add_listener(never, Duration::ZERO, Duration::ZERO, always(), [])
            .unwrap();
        // New listeners start flagged as syncing (spec 4.2).
        p.distribute(upd("1", "1"), true);
        assert_eq!(recv_n(&mut fast_rx, 1).await.len(), 1);
        assert_eq!(recv_n(&mut never_rx, 1).await.len(), 1);
        // Not due yet: nobody syncs.
        assert!(!p.should_resync());
        p.distribute(upd("1", "1"), true);
        // A real change goes to everyone.
        p.distribute(upd("1", "2"), false);
        assert_eq!(
            recv_n(&mut fast_rx, 1).await,
            vec![Seen::Update("ns/a".into(), "1".into(), "2".into())]
        );
        assert_eq!(
            recv_n(&mut never_rx, 1).await,
            vec![Seen::Update("ns/a".into(), "1".into(), "2".into())]
        );
        // Due: only the listener with a period syncs (spec 4.3), next due one period later.
        tokio::time::advance(s).await;
        assert!(p.should_resync());
        p.distribute(upd("2", "2"), true);
        assert_eq!(recv_n(&mut fast_rx, 1).await.len(), 1);
        assert!(!p.should_resync());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(never_rx.try_recv().is_err());
    }

    /// Updates are handled inline; adds go through the task and wait for `gate`. Records
    /// `inline N` / `task N` (N the new resourceVersion) in the order they were handled.
    struct Inliner {
        seen: Arc<parking_lot::Mutex<Vec<String>>>,
        gate: Arc<tokio::sync::Semaphore>,
    }

    impl ResourceEventHandler for Inliner {
        fn on_add(&self, obj: Object, _: bool) -> BoxFuture<'_, ()> {
            async move {
                self.gate.acquire().await.expect("gate open").forget();
                self.seen
                    .lock()
                    .push(format!("task {}", obj.resource_version()));
            }
            .boxed()
        }
        fn on_update(&self, _: Object, new: Object) -> BoxFuture<'_, ()> {
            self.seen
                .lock()
                .push(format!("task {}", new.resource_version()));
            futures_util::future::ready(()).boxed()
        }
        fn on_delete(&self, _: ObjOrTombstone) -> BoxFuture<'_, ()> {
            futures_util::future::ready(()).boxed()
        }
        fn handle_inline(&self, n: &Notification) -> bool {
            let Notification::Update { new, .. } = n else {
                return false;
            };
            if new.resource_version() == "boom" {
                panic!("inline handler failure on purpose");
            }
            self.seen
                .lock()
                .push(format!("inline {}", new.resource_version()));
            true
        }
    }

    /// spec 4.4: a handler that takes notifications inline still sees them one at a time and
    /// in order: only while its listener has nothing queued or running; a panic inline is
    /// dealt with as the processor's policy says.
    #[tokio::test]
    async fn spec_4_4_inline_handling_never_overtakes_queued_notifications() {
        let p = SharedProcessor::with_panic_policy(PanicPolicy::Skip);
        p.run();
        let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let h = Inliner {
            seen: seen.clone(),
            gate: gate.clone(),
        };
        let l = p
            .add_listener(Arc::new(h), Duration::ZERO, Duration::ZERO, always(), [])
            .unwrap();
        // Idle: an update is handled before `distribute` returns.
        p.distribute(upd("1", "2"), false);
        assert_eq!(*seen.lock(), ["inline 2"]);
        // An add held at the gate: the updates after it queue behind it, not inline.
        p.distribute(
            Notification::Add {
                obj: obj("ns", "a", "3"),
                is_in_initial_list: false,
            },
            false,
        );
        p.distribute(upd("3", "4"), false);
        p.distribute(upd("4", "5"), false);
        assert_eq!(*seen.lock(), ["inline 2"], "nothing overtook the held add");
        gate.add_permits(1);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while seen.lock().len() < 4 {
            assert!(tokio::time::Instant::now() < deadline, "{:?}", seen.lock());
            tokio::task::yield_now().await;
        }
        // Drained: inline again, at once.
        while l.pending() > 0
            || p.inner.read().listeners[0]
                .1
                .unfinished
                .load(Ordering::Acquire)
                > 0
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the listener drains"
            );
            tokio::task::yield_now().await;
        }
        p.distribute(upd("5", "boom"), false);
        p.distribute(upd("5", "6"), false);
        assert_eq!(
            *seen.lock(),
            ["inline 2", "task 3", "task 4", "task 5", "inline 6"],
            "in order; the panicking update skipped (PanicPolicy::Skip)"
        );
    }

    #[test]
    fn spec_4_3_determine_resync_period() {
        let s = Duration::from_secs;
        assert_eq!(determine_resync_period(s(0), s(5)), s(0));
        assert_eq!(determine_resync_period(s(3), s(0)), s(0));
        assert_eq!(determine_resync_period(s(3), s(5)), s(5));
        assert_eq!(determine_resync_period(s(9), s(5)), s(9));
    }

    #[tokio::test]
    async fn spec_4_4_slow_handler_never_blocks_distribution_and_order_is_kept() {
        let p = SharedProcessor::new();
        p.run();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let slow = Arc::new(Recorder {
            tx,
            gate: Some(gate.clone()),
        });
        let h = p
            .add_listener(slow, Duration::ZERO, Duration::ZERO, always(), [])
            .unwrap();
        let n = 5000;
        for i in 0..n {
            p.distribute(upd(&i.to_string(), &(i + 1).to_string()), false);
        }
        // All were accepted while the handler was stuck.
        assert!(h.pending() >= n - 1, "pending {}", h.pending());
        gate.add_permits(n);
        let seen = recv_n(&mut rx, n).await;
        for (i, s) in seen.iter().enumerate() {
            assert_eq!(
                s,
                &Seen::Update("ns/a".into(), i.to_string(), (i + 1).to_string())
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn spec_4_4_with_skip_a_panicking_handler_is_contained_and_pauses_a_second() {
        let p = SharedProcessor::with_panic_policy(PanicPolicy::Skip);
        p.run();
        let t0 = Instant::now();
        let (r, mut rx) = recorder();
        p.add_listener(r, Duration::ZERO, Duration::ZERO, always(), [])
            .unwrap();
        p.distribute(
            Notification::Add {
                obj: obj("ns", "boom", "1"),
                is_in_initial_list: false,
            },
            false,
        );
        p.distribute(
            Notification::Add {
                obj: obj("ns", "ok", "1"),
                is_in_initial_list: false,
            },
            false,
        );
        assert_eq!(
            recv_n(&mut rx, 1).await,
            vec![Seen::Add("ns/ok".into(), "1".into(), false)]
        );
        assert!(t0.elapsed() >= PANIC_PAUSE, "{:?}", t0.elapsed());
    }

    #[tokio::test]
    async fn a_handler_panicking_before_returning_its_future_is_contained() {
        let p = SharedProcessor::with_panic_policy(PanicPolicy::Skip);
        p.run();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let h = HandlerFns {
            add: Some(Box::new(move |o: Object, _| {
                assert_ne!(o.name(), "boom", "handler failure on purpose");
                let _ = tx.send(o.key());
            })),
            ..Default::default()
        };
        p.add_listener(Arc::new(h), Duration::ZERO, Duration::ZERO, always(), [])
            .unwrap();
        for name in ["boom", "ok"] {
            p.distribute(
                Notification::Add {
                    obj: obj("ns", name, "1"),
                    is_in_initial_list: false,
                },
                false,
            );
        }
        let got = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("listener died with the panic");
        assert_eq!(got.as_deref(), Some("ns/ok"));
    }

    /// The child half of the crash test: only runs when the parent sets the variable.
    #[tokio::test]
    #[ignore = "run by spec_4_4_by_default_a_handler_panic_aborts_the_process"]
    async fn panicking_handler_child() {
        if std::env::var_os("HOST_PANIC_CHILD").is_none() {
            return;
        }
        let p = SharedProcessor::new();
        p.run();
        let (r, _rx) = recorder();
        p.add_listener(r, Duration::ZERO, Duration::ZERO, always(), [])
            .unwrap();
        p.distribute(
            Notification::Add {
                obj: obj("ns", "boom", "1"),
                is_in_initial_list: false,
            },
            false,
        );
        // The abort ends the process long before this; returning means it did not happen.
        tokio::time::sleep(Duration::from_secs(20)).await;
    }

    #[test]
    fn spec_4_4_by_default_a_handler_panic_aborts_the_process() {
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "processor::tests::panicking_handler_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("HOST_PANIC_CHILD", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "child exited cleanly: {stderr}");
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(out.status.signal(), Some(6), "not SIGABRT: {stderr}");
        }
        assert!(stderr.contains("handler failure on purpose"), "{stderr}");
    }

    #[tokio::test]
    async fn spec_4_5_regression_7_8_registration_synced_only_after_initial_adds() {
        let p = SharedProcessor::new();
        p.run();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let r = Arc::new(Recorder {
            tx,
            gate: Some(gate.clone()),
        });
        let h = p
            .add_listener(
                r,
                Duration::ZERO,
                Duration::ZERO,
                always(),
                [obj("ns", "a", "1"), obj("ns", "b", "1")],
            )
            .unwrap();
        // The informer is synced but this handler has not seen its initial list yet.
        assert!(!h.has_synced());
        gate.add_permits(1);
        recv_n(&mut rx, 1).await;
        assert!(!h.has_synced());
        gate.add_permits(1);
        let seen = recv_n(&mut rx, 1).await;
        assert!(matches!(&seen[0], Seen::Add(_, _, true)));
        // The tracker is updated right after the handler returns; wait for it boundedly.
        tokio::time::timeout(Duration::from_secs(5), async {
            while !h.has_synced() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("registration never synced");
        // And never before upstream is synced.
        let t = SyncTracker::new(Arc::new(|| false));
        assert!(!t.has_synced());
    }

    #[tokio::test]
    async fn removed_listener_gets_nothing_more_and_stopped_processor_refuses_adds() {
        let p = SharedProcessor::new();
        p.run();
        let (r1, mut rx1) = recorder();
        let (r2, mut rx2) = recorder();
        let h1 = p
            .add_listener(r1, Duration::ZERO, Duration::ZERO, always(), [])
            .unwrap();
        p.add_listener(r2, Duration::ZERO, Duration::ZERO, always(), [])
            .unwrap();
        assert!(p.remove_listener(h1.id));
        assert!(!p.remove_listener(h1.id));
        p.distribute(upd("1", "2"), false);
        recv_n(&mut rx2, 1).await;
        // r1's task ends: its channel closes without delivering anything.
        let end = tokio::time::timeout(Duration::from_secs(5), rx1.recv())
            .await
            .expect("removed listener's task did not end");
        assert_eq!(end, None);
        p.stop();
        let (r3, _rx3) = recorder();
        assert!(p
            .add_listener(r3, Duration::ZERO, Duration::ZERO, always(), [])
            .is_err());
    }
}
