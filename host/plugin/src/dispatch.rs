//! Informer notifications into a plugin's `on-add` / `on-update` / `on-delete`.
//!
//! Each watch of a plugin is one handler registration on a shared informer, but all of a
//! plugin's registrations share one dispatch instance behind an async mutex: the guest sees one
//! notification at a time, and each registration's notifications in the informer's order (the
//! processor calls a registration's handler sequentially). The dispatch instance is separate
//! from the reconcile workers' instances, so a slow reconcile never delays notifications.
//!
//! A plugin's registrations outlive its revisions: each handler reaches the guest through the
//! plugin's [`Route`], which names the current revision's dispatcher. An upgrade switches the
//! route, then retires the old dispatcher once its delivery in flight has finished; a
//! notification that reached a retired dispatcher is delivered by the current one instead. So
//! each notification reaches exactly one revision, and none is lost or replayed by the switch.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use tracing::Instrument;

use super::backend::QueueBackend;
use super::health::{Admission, Health};
use super::instance::{GuestError, PluginInstance};
use super::loader::Plugin;
use super::own_keys::{Change, OwnKeyHandlers};
use kwh_client::clip::clip;
use kwh_client::object::Object;
use kwh_coordination::ownership::PluginOwnership;
use kwh_informer::processor::{
    listen_with, EventHandler, Notification, Notifications, ResourceEventHandler,
};
use kwh_informer::tombstone::ObjOrTombstone;

/// How a notification whose handler call failed in the sandbox is retried.
///
/// The failed call's instance is gone, so each retry runs on a fresh instance. Retrying keeps
/// the guest from silently missing an object because of one bad moment (a deadline hit under
/// load); bounding it keeps one poisonous object from stalling the plugin's event stream, whose
/// later notifications wait behind it to keep their order.
///
/// A trap is retried at once: the fresh instance is all the remedy there is (a trap says
/// nothing about the host being busy), and a wait would hold every later notification of the
/// plugin for nothing. Found by the chaos soak: with 1 % of handler calls trapping at a few
/// thousand events a second, the 50 ms waits added up to more than the time there was, and the
/// notifications waiting in the listener's buffer grew without bound. A deadline or exhausted
/// memory waits `backoff` (doubled for each such wait, at most `max_backoff`) first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Calls per notification, the first included; 1 disables retries.
    pub attempts: u32,
    /// Wait before the first retry after a deadline or exhausted memory; doubled before each
    /// further one. None before a retry after a trap.
    pub backoff: Duration,
    /// The longest wait between two attempts.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    /// Three calls: a transient failure gets two fresh instances, and a notification that
    /// always fails holds the stream up for a fraction of a second only (traps: not at all;
    /// deadlines: 50 ms then 100 ms, besides the deadlines themselves).
    fn default() -> Self {
        RetryPolicy {
            attempts: 3,
            backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
        }
    }
}

impl RetryPolicy {
    /// The wait before a retry after `failure`, when `waited` retries of this notification
    /// have waited already.
    pub fn wait_after(&self, failure: &GuestError, waited: u32) -> Duration {
        match failure {
            GuestError::Trap(_) => Duration::ZERO,
            _ => self.backoff_after(waited + 1),
        }
    }

    /// The `n`-th wait (1-based) of one notification's retries.
    pub fn backoff_after(&self, n: u32) -> Duration {
        let factor = 1u32.checked_shl(n.saturating_sub(1)).unwrap_or(u32::MAX);
        self.backoff
            .checked_mul(factor)
            .unwrap_or(self.max_backoff)
            .min(self.max_backoff)
    }
}

/// The dispatch side of one plugin: its instance and counters.
pub struct Dispatcher {
    name: Arc<str>,
    /// Shared by the listeners of every watch of the plugin. Held for a whole delivery
    /// (retries included) on purpose: it is what makes the plugin's notifications reach the
    /// guest one at a time, in order; it guards nothing else. A dispatch task fed by a channel
    /// would order them too, at the cost of one more hop and allocation per notification.
    instance: tokio::sync::Mutex<PluginInstance>,
    health: Arc<Health>,
    retry: RetryPolicy,
    /// The handlers the guest handed over, and the queue the host then enqueues keys into.
    own_keys: Arc<OwnKeyHandlers>,
    queue: Arc<dyn QueueBackend>,
    /// Whether this replica may call the guest now (a standby or a fenced leader may not).
    own: PluginOwnership,
    /// Notifications not delivered because this replica was not active (a standby's).
    pub skipped: AtomicU64,
    /// Notifications handled (delivered, enqueued by the host, dropped after failing, or
    /// abandoned at shutdown).
    pub delivered: AtomicU64,
    /// Of those, the ones whose handler the guest had handed over: the host enqueued the key.
    pub enqueued_by_host: AtomicU64,
    /// Handler calls that failed in the sandbox (each attempt counts).
    pub failures: AtomicU64,
    /// Handler calls that were retries of a failed one.
    pub retries: AtomicU64,
    /// Notifications given up after every attempt failed.
    pub dropped: AtomicU64,
    /// Notifications not delivered because the plugin was quarantined; their objects reach
    /// the guest again by a replay of its caches once it may be called again.
    pub held_back: AtomicU64,
    /// Set when a notification was held back and no replay has been asked for since.
    missed: AtomicBool,
    missed_notify: tokio::sync::Notify,
    /// For each manifest watch (by index), the plugin-wide id of the registration it listens
    /// through: registrations are kept across revisions, manifest indexes are not.
    watch_ids: Vec<u32>,
    /// Set, under the instance lock, once a newer revision's dispatcher took over the route.
    retired: AtomicBool,
}

/// What became of one delivery attempt on a dispatcher.
enum Delivery {
    /// Handled (delivered, enqueued, held back or dropped): nothing left to do.
    Done,
    /// The dispatcher was retired before it took the notification: the route's current one
    /// delivers it.
    Retired,
}

/// The way from a plugin's informer registrations to the dispatcher of its current revision.
pub struct Route {
    current: parking_lot::RwLock<Arc<Dispatcher>>,
    /// Where deliveries run when not on the informer's runtime (a shadow's: low priority).
    runtime: Option<tokio::runtime::Handle>,
}

impl Route {
    /// A route to `dispatcher`, delivering on the informer's runtime.
    pub fn new(dispatcher: Arc<Dispatcher>) -> Arc<Self> {
        Self::on(dispatcher, None)
    }

    /// A route to `dispatcher` whose deliveries run on `runtime` (none: the informer's).
    pub fn on(dispatcher: Arc<Dispatcher>, runtime: Option<tokio::runtime::Handle>) -> Arc<Self> {
        Arc::new(Route {
            current: parking_lot::RwLock::new(dispatcher),
            runtime,
        })
    }

    /// The dispatcher notifications go to now.
    pub fn current(&self) -> Arc<Dispatcher> {
        self.current.read().clone()
    }

    /// The handler for the registration `id` (see [`Dispatcher::with_watch_ids`]).
    pub fn handler(self: &Arc<Self>, id: u32) -> Arc<dyn ResourceEventHandler> {
        Arc::new(WatchHandler {
            route: self.clone(),
            id,
        })
    }

    /// Sends every later notification to `next`, and returns once the previous dispatcher has
    /// finished the delivery it had in flight (retries included) and is retired: from then on
    /// no notification reaches the previous revision. Returns the previous dispatcher.
    ///
    /// A key the previous revision's dispatcher would enqueue for a handed-over handler is
    /// enqueued under this route's read lock, so none is enqueued by it once the write lock
    /// here has been taken; notifications it held back while quarantined, and no replay has
    /// served yet, are replayed by `next` (see [`Dispatcher::missed`]).
    pub async fn switch(&self, next: Arc<Dispatcher>) -> Arc<Dispatcher> {
        let previous = std::mem::replace(&mut *self.current.write(), next.clone());
        {
            let _in_flight_done = previous.instance.lock().await;
            previous.retired.store(true, Ordering::Release);
        }
        crate::perturb::at(crate::perturb::Point::RouteSwitched).await;
        if previous.missed.swap(false, Ordering::AcqRel) {
            next.hold_back_noted();
        }
        previous
    }
}

/// One notification, borrowed for the duration of its delivery (retries included).
#[derive(Clone, Copy)]
enum Call<'a> {
    Add(&'a Object),
    Update(&'a Object, &'a Object),
    Delete(&'a Object, bool),
}

impl<'a> Call<'a> {
    fn handler(self) -> &'static str {
        match self {
            Call::Add(_) => "on-add",
            Call::Update(..) => "on-update",
            Call::Delete(..) => "on-delete",
        }
    }

    /// The object whose key the handler enqueues: the new state of an update, the last known
    /// state (or the tombstone's stub) of a delete.
    fn object(self) -> &'a Object {
        match self {
            Call::Add(o) | Call::Update(_, o) | Call::Delete(o, _) => o,
        }
    }

    fn change(self) -> Change {
        match self {
            Call::Add(_) => Change::Add,
            Call::Update(..) => Change::Update,
            Call::Delete(..) => Change::Delete,
        }
    }
}

impl Dispatcher {
    /// Takes one instance slot of `plugin` for dispatch; calls pass `health`'s gate and failed
    /// ones are retried as `retry` says; nothing is delivered while `own` is not active.
    pub fn new(
        plugin: &Plugin,
        health: Arc<Health>,
        retry: RetryPolicy,
        own: PluginOwnership,
    ) -> Result<Arc<Self>, GuestError> {
        Ok(Arc::new(Dispatcher {
            name: Arc::from(plugin.name()),
            instance: tokio::sync::Mutex::new(plugin.instance()?),
            health,
            retry,
            own_keys: plugin.ctx().own_keys.clone(),
            queue: plugin.ctx().backends.queue.clone(),
            own,
            skipped: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            enqueued_by_host: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            held_back: AtomicU64::new(0),
            missed: AtomicBool::new(false),
            missed_notify: tokio::sync::Notify::new(),
            watch_ids: (0..u32::try_from(plugin.manifest().watches.len()).unwrap_or(u32::MAX))
                .collect(),
            retired: AtomicBool::new(false),
        }))
    }

    /// The same dispatcher listening through registrations `ids` (one per manifest watch, in
    /// order) instead of `0..n`. Call before the first notification.
    pub fn with_watch_ids(mut self: Arc<Self>, ids: Vec<u32>) -> Arc<Self> {
        if let Some(d) = Arc::get_mut(&mut self) {
            d.watch_ids = ids;
        }
        self
    }

    /// The handler for watch number `watch` of the manifest, on a route of its own (a plugin
    /// that never changes revision).
    pub fn handler(self: &Arc<Self>, watch: u32) -> Arc<dyn ResourceEventHandler> {
        let id = self.watch_ids.get(watch as usize).copied().unwrap_or(watch);
        Route::new(self.clone()).handler(id)
    }

    /// The manifest watch that registration `id` serves in this revision.
    fn watch_of(&self, id: u32) -> Option<u32> {
        let i = self.watch_ids.iter().position(|&w| w == id)?;
        u32::try_from(i).ok()
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Instantiates the dispatch instance now, so that a component failing to start fails
    /// here (an upgrade) rather than at its first notification.
    pub async fn warm(&self) -> Result<(), GuestError> {
        self.instance.lock().await.warm().await
    }

    /// Delivers one notification to the guest: holds it back while the plugin is quarantined
    /// (see [`Dispatcher::missed`]), retries a sandbox failure on a fresh instance with
    /// backoff, and drops it (logged and counted) when every attempt failed. The instance lock
    /// is held throughout, so the plugin's notifications reach the guest one at a time and in
    /// order, retries included. (A notification whose handler the guest handed over never gets
    /// here: [`WatchHandler`] enqueues its key under the route's lock.)
    async fn deliver(&self, watch: u32, call: Call<'_>) -> Delivery {
        let mut inst = self.instance.lock().await;
        if self.retired.load(Ordering::Acquire) {
            return Delivery::Retired;
        }
        let mut attempt = 1;
        let mut waited = 0;
        loop {
            // Checked before every attempt: a leader that lost its lease mid-retry stops.
            if !self.own.active() {
                self.skipped.fetch_add(1, Ordering::Relaxed);
                return Delivery::Done;
            }
            let permit = match self.health.try_admit() {
                Admission::Go(permit) => permit,
                Admission::Held => {
                    // Quarantined: waiting here would hold every later notification in the
                    // listener's buffer, each keeping its object version alive, for as long
                    // as the quarantine lasts. Dropped instead; the caches are replayed, in
                    // order, once calls are let through again (reconciles are level-based).
                    self.held_back.fetch_add(1, Ordering::Relaxed);
                    self.hold_back_noted();
                    return Delivery::Done;
                }
                Admission::Closed => {
                    tracing::debug!(plugin = %self.name, key = %clip(&call.object().key()), "shutting down; notification not delivered");
                    break;
                }
            };
            let r = match call {
                Call::Add(obj) => inst.on_add(watch, obj).await,
                Call::Update(old, new) => inst.on_update(watch, old, new).await,
                Call::Delete(obj, tombstone) => inst.on_delete(watch, obj, tombstone).await,
            };
            let Err(e) = permit.settle(r) else { break };
            // The instance has already discarded its store (and logged why); the next attempt
            // gets a fresh one.
            self.failures.fetch_add(1, Ordering::Relaxed);
            if attempt >= self.retry.attempts.max(1) {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(plugin = %self.name, handler = call.handler(), key = %clip(&call.object().key()),
                    attempts = attempt, error = %clip(&e.to_string()), "handler failed on every attempt; notification dropped");
                break;
            }
            let wait = self.retry.wait_after(&e, waited);
            tracing::info!(plugin = %self.name, handler = call.handler(), key = %clip(&call.object().key()), attempt,
                error = %clip(&e.to_string()), "handler failed; retrying on a fresh instance in {wait:?}");
            if !wait.is_zero() {
                waited += 1;
                tokio::time::sleep(wait).await;
            }
            self.retries.fetch_add(1, Ordering::Relaxed);
            attempt += 1;
        }
        self.delivered.fetch_add(1, Ordering::Relaxed);
        Delivery::Done
    }
}

impl Dispatcher {
    /// What a handed-over handler does: enqueue the object's own key (when this replica is
    /// active), counted.
    fn enqueue(&self, key: &str) {
        if !self.own.active() {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.queue.add(key);
        self.enqueued_by_host.fetch_add(1, Ordering::Relaxed);
        self.delivered.fetch_add(1, Ordering::Relaxed);
    }

    /// Notes that a notification was held back, for [`Dispatcher::missed`] to replay.
    fn hold_back_noted(&self) {
        if !self.missed.swap(true, Ordering::AcqRel) {
            self.missed_notify.notify_one();
        }
    }

    /// Resolves once a notification was held back (quarantine) since the last call, and the
    /// plugin may be called again: the moment to replay its caches.
    pub async fn missed(&self) {
        loop {
            let notified = self.missed_notify.notified();
            if self.missed.load(Ordering::Acquire) {
                break;
            }
            notified.await;
        }
        self.health.admittable().await;
        self.missed.store(false, Ordering::Release);
    }
}

/// One registration's handler: each notification goes to the route's current dispatcher, as
/// the manifest watch that dispatcher's revision serves through this registration.
struct WatchHandler {
    route: Arc<Route>,
    id: u32,
}

impl WatchHandler {
    /// Delivers `call` to exactly one revision: the current one, or its successor when the
    /// current one was retired while the notification waited for it.
    async fn deliver(&self, call: Call<'_>) {
        loop {
            let enqueue = |d: &Dispatcher| call.object().with_key(|k| d.enqueue(k));
            let (d, watch) = match self.route.own_key_or_guest(self.id, call.change(), enqueue) {
                Routed::Handled => return,
                Routed::Guest(d, watch) => (d, watch),
            };
            crate::perturb::at(crate::perturb::Point::Routed).await;
            match d.deliver(watch, call).await {
                Delivery::Done => return,
                Delivery::Retired => continue,
            }
        }
    }
}

/// Where [`Route::own_key_or_guest`] sent a notification.
enum Routed {
    /// Its key was enqueued for a handed-over handler, or nothing serves it any more.
    Handled,
    /// To the guest, through this dispatcher, as this manifest watch.
    Guest(Arc<Dispatcher>, u32),
}

impl Route {
    /// Enqueues the notification's own key (`enqueue` on the current dispatcher) when the
    /// current revision handed this change's handler over, under the route's read lock, so
    /// that no revision enqueues after a switch has taken the route from it; else says which
    /// dispatcher, as which watch, delivers it.
    fn own_key_or_guest(
        &self,
        id: u32,
        change: Change,
        enqueue: impl FnOnce(&Dispatcher),
    ) -> Routed {
        let d = self.current.read();
        // A registration the current revision no longer has: being removed.
        let Some(watch) = d.watch_of(id) else {
            return Routed::Handled;
        };
        if d.own_keys.own_keys(watch, change) {
            enqueue(&d);
            return Routed::Handled;
        }
        Routed::Guest(d.clone(), watch)
    }
}

/// The object handed to `on-delete` for a tombstone whose last state is unknown: enough
/// metadata for the guest to compute the key.
fn tombstone_stub(key: &str) -> Option<Object> {
    let (ns, name) = match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    };
    let meta = match ns {
        Some(ns) => serde_json::json!({"namespace": ns, "name": name}),
        None => serde_json::json!({"name": name}),
    };
    Object::from_value(&serde_json::json!({ "metadata": meta })).ok()
}

impl EventHandler for WatchHandler {
    async fn added(&self, obj: Object, _is_in_initial_list: bool) {
        self.deliver(Call::Add(&obj)).await;
    }

    async fn updated(&self, old: Object, new: Object) {
        self.deliver(Call::Update(&old, &new)).await;
    }

    async fn deleted(&self, obj: ObjOrTombstone) {
        let tombstone = obj.is_tombstone();
        let stub;
        let last: &Object = match obj.object() {
            Some(o) => o,
            None => match tombstone_stub(&obj.key()) {
                Some(o) => {
                    stub = o;
                    &stub
                }
                None => {
                    tracing::warn!(plugin = %self.route.current().name, key = %clip(&obj.key()),
                        "tombstone without a valid key; on-delete not delivered");
                    return;
                }
            },
        };
        self.deliver(Call::Delete(last, tombstone)).await;
    }
}

impl ResourceEventHandler for WatchHandler {
    fn on_add(&self, obj: Object, is_in_initial_list: bool) -> BoxFuture<'_, ()> {
        self.added(obj, is_in_initial_list).boxed()
    }

    fn on_update(&self, old: Object, new: Object) -> BoxFuture<'_, ()> {
        self.updated(old, new).boxed()
    }

    fn on_delete(&self, obj: ObjOrTombstone) -> BoxFuture<'_, ()> {
        self.deleted(obj).boxed()
    }

    /// Every plugin notification passes here (once per plugin per event): no box and no
    /// span per call (the span is the listener's: a guest call's future is kilobytes, and each
    /// wrapper would move it once more).
    ///
    /// On a route with a runtime of its own, the listener's task only waits for the delivery
    /// loop, which runs there (and is cancelled with that task).
    fn listen(self: Arc<Self>, notifications: Notifications) -> BoxFuture<'static, ()> {
        let span = tracing::debug_span!("dispatch", plugin = %self.route.current().name, registration = self.id);
        match self.route.runtime.clone() {
            None => listen_with(self, notifications).instrument(span).boxed(),
            Some(rt) => {
                let task = AbortOnDrop(rt.spawn(listen_with(self, notifications).instrument(span)));
                async move {
                    let mut task = task;
                    let _ = (&mut task.0).await;
                }
                .boxed()
            }
        }
    }

    /// A handed-over handler's enqueue runs as the informer distributes the notification:
    /// no trip through the listener's queue and task, once per plugin per event.
    fn handle_inline(&self, n: &Notification) -> bool {
        let routed = match n {
            Notification::Add { obj, .. } => {
                self.route
                    .own_key_or_guest(self.id, Change::Add, |d| obj.with_key(|k| d.enqueue(k)))
            }
            Notification::Update { new, .. } => {
                self.route
                    .own_key_or_guest(self.id, Change::Update, |d| new.with_key(|k| d.enqueue(k)))
            }
            Notification::Delete(o) => self
                .route
                .own_key_or_guest(self.id, Change::Delete, |d| o.with_key(|k| d.enqueue(k))),
        };
        match routed {
            Routed::Handled => true,
            Routed::Guest(..) => false,
        }
    }
}

/// A task cancelled when its handle is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_backoff_doubles_up_to_its_cap() {
        let p = RetryPolicy {
            attempts: 5,
            backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(300),
        };
        let got: Vec<_> = (1..=5).map(|n| p.backoff_after(n).as_millis()).collect();
        assert_eq!(got, [50, 100, 200, 300, 300]);
        // A trap is retried at once, however many retries waited before; a deadline or
        // exhausted memory takes the next wait.
        let trap = GuestError::Trap("unreachable".into());
        let deadline = GuestError::DeadlineExceeded(Duration::from_secs(1));
        let memory = GuestError::MemoryExhausted { limit: 1 };
        assert_eq!(p.wait_after(&trap, 0), Duration::ZERO);
        assert_eq!(p.wait_after(&trap, 2), Duration::ZERO);
        assert_eq!(p.wait_after(&deadline, 0), Duration::from_millis(50));
        assert_eq!(p.wait_after(&memory, 1), Duration::from_millis(100));
    }

    #[test]
    fn tombstone_stub_names_the_object() {
        let o = tombstone_stub("ns/a").expect("stub");
        assert_eq!((o.namespace(), o.name()), (Some("ns"), "a"));
        let v: serde_json::Value = serde_json::from_slice(o.raw()).unwrap();
        assert_eq!(v["metadata"]["namespace"], "ns");
        let o = tombstone_stub("node-1").expect("stub");
        assert_eq!((o.namespace(), o.name()), (None, "node-1"));
        let v: serde_json::Value = serde_json::from_slice(o.raw()).unwrap();
        assert!(v["metadata"].get("namespace").is_none());
    }
}
