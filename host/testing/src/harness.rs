//! The harness: one guest loaded into wasmtime exactly as production loads it, wired to the
//! fake cluster, the fake queue and the virtual clock, driven step by step by a test.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tracing::instrument::WithSubscriber;

use super::clock::VirtualClock;
use super::cluster::{FakeCluster, SeedError};
use super::component::{component, ComponentError};
use super::events::{FakeRecorder, RecordedEvent};
use super::logs::{LogCapture, LogLine};
use super::queue::{ControllerRateLimiter, Enqueued, FakeQueue, Origin};
use super::world::{FakeClient, Notification, RecordedWrite, UnservedKind, World};
use kwh_client::object::Object;
use kwh_plugin::backend::{ApiError, Backends};
use kwh_plugin::instance::{GuestError, Limits, Outcome, PluginInstance};
use kwh_plugin::loader::{LoadError, Plugin};
use kwh_plugin::manifest::Manifest;
use kwh_plugin::{EngineConfig, PluginEngine};

/// How one reconcile call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReconcileOutcome {
    /// `ok(done)`.
    Done,
    /// `ok(requeue-after(ms))`.
    RequeueAfter(Duration),
    /// `err(message)`: the guest's own error.
    Error(String),
    /// The sandbox stopped the call: a trap (panic, unreachable, …), the deadline or the memory
    /// cap. The instance was replaced, as in production.
    Trap(GuestError),
}

impl ReconcileOutcome {
    /// `done`, `requeue-after 1.5s`, `error: …` or `trap: …`.
    pub fn describe(&self) -> String {
        match self {
            ReconcileOutcome::Done => "done".into(),
            ReconcileOutcome::RequeueAfter(d) => format!("requeue-after {d:?}"),
            ReconcileOutcome::Error(e) => format!("error: {e}"),
            ReconcileOutcome::Trap(e) => format!("trap: {e}"),
        }
    }
}

/// A handler call (`on-add`, `on-update`, `on-delete`) the sandbox stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} (watch {watch}, {key}) failed: {error}")]
pub struct HandlerFailure {
    /// `on-add`, `on-update` or `on-delete`.
    pub call: &'static str,
    /// The watch index.
    pub watch: u32,
    /// The object's key.
    pub key: String,
    /// What stopped it.
    pub error: GuestError,
}

/// Why a harness step failed.
///
/// Its `Debug` is its `Display`, so a test that unwraps it prints the cause as it reads (cargo's
/// diagnostics for a component that did not build), not a nest of structs.
#[derive(thiserror::Error)]
pub enum HarnessError {
    /// The component of the crate under test could not be built
    /// ([`Harness::for_this_crate`]).
    #[error(transparent)]
    Component(#[from] ComponentError),
    /// The engine could not be created.
    #[error("cannot create the wasm engine: {0}")]
    Engine(String),
    /// The plugin did not load (file, component, world or manifest).
    #[error(transparent)]
    Load(#[from] Box<LoadError>),
    /// The plugin watches or writes a kind the fake cluster does not serve (seed its CRD first).
    #[error("{0}")]
    UnservedKind(#[from] UnservedKind),
    /// Seed objects were refused.
    #[error("seed: {0}")]
    Seed(#[from] SeedError),
    /// The fake cluster refused a change the test asked for.
    #[error("the cluster refused the change: {0}")]
    Cluster(#[from] ApiError),
    /// No instance slot.
    #[error("cannot create an instance: {0}")]
    Instance(GuestError),
    /// A handler call failed (the others of the same step were still delivered).
    #[error("{0}")]
    Handler(HandlerFailure),
}

impl std::fmt::Debug for HarnessError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Options of a [`Harness`]; see [`Harness::builder`].
pub struct HarnessBuilder {
    path: Result<PathBuf, ComponentError>,
    engine: Option<PluginEngine>,
    limits: Limits,
    start: Option<SystemTime>,
    seeds: Vec<String>,
    config: Value,
}

impl HarnessBuilder {
    fn new(path: Result<PathBuf, ComponentError>) -> HarnessBuilder {
        HarnessBuilder {
            path,
            engine: None,
            limits: Limits::default(),
            start: None,
            seeds: Vec::new(),
            config: Value::Null,
        }
    }

    /// Uses `engine` instead of the process-wide default (no pooling, disk compile cache).
    pub fn engine(mut self, engine: PluginEngine) -> Self {
        self.engine = Some(engine);
        self
    }

    /// Sandbox limits (deadlines, memory cap); production defaults otherwise.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The plugin's configuration, as the `config:` of its entry in a plugins file would give
    /// it (`null` when not set): what `config.get` returns and `validate-config` checks at load.
    pub fn config(mut self, config: Value) -> Self {
        self.config = config;
        self
    }

    /// Where the virtual clock starts (default 2025-01-01T00:00:00Z).
    pub fn start_time(mut self, t: SystemTime) -> Self {
        self.start = Some(t);
        self
    }

    /// Objects that exist before the plugin starts (YAML or JSON, `---`-separated, `List`s
    /// unpacked). They fill the caches without notifications. CRDs seeded here make their
    /// kinds servable.
    pub fn seed_yaml(mut self, text: impl Into<String>) -> Self {
        self.seeds.push(text.into());
        self
    }

    /// One seed object (see [`HarnessBuilder::seed_yaml`]).
    pub fn seed(self, obj: Value) -> Self {
        let text = obj.to_string();
        self.seed_yaml(text)
    }

    /// Seeds the cluster, loads the plugin as production does (component checks, manifest
    /// validation), checks every watched and written kind is served, and builds its caches.
    pub async fn build(self) -> Result<Harness, HarnessError> {
        let path = self.path?;
        let clock = self
            .start
            .map(VirtualClock::starting_at)
            .unwrap_or_default();
        let cluster = FakeCluster::new(clock.clone())?;
        for s in &self.seeds {
            cluster.seed_yaml(s)?;
        }
        let engine = match self.engine {
            Some(e) => e,
            None => default_engine()?,
        };
        let loaded = engine
            .load_configured(&path, self.limits, Arc::new(self.config))
            .await
            .map_err(Box::new)?;
        let world = Arc::new(World::new(cluster, loaded.manifest())?);
        let queue = Arc::new(FakeQueue::new(clock.clone()));
        let events = Arc::new(FakeRecorder::new(clock.clone()));
        let plugin = loaded.activate(Backends {
            lister: world.lister.clone(),
            client: Arc::new(FakeClient(world.clone())),
            queue: queue.clone(),
            events: events.clone(),
        });
        let clock_dyn: Arc<dyn kwh_plugin::GuestClock> = Arc::new(clock.clone());
        let instance = |p: &Plugin| -> Result<PluginInstance, HarnessError> {
            Ok(p.instance()
                .map_err(HarnessError::Instance)?
                .with_clock(clock_dyn.clone()))
        };
        let dispatch = instance(&plugin)?;
        let worker = instance(&plugin)?;
        let backoff = ControllerRateLimiter::new(clock.clone());
        Ok(Harness {
            world,
            queue,
            events,
            clock,
            plugin,
            dispatch,
            worker,
            logs: LogCapture::new(),
            backoff,
            handler_failures: Vec::new(),
            held: Vec::new(),
            hold_next: false,
        })
    }
}

/// The engine harnesses share unless given one: on-demand allocation (no large address-space
/// reservation per test process) and the default compile cache. Created once per process.
pub fn default_engine() -> Result<PluginEngine, HarnessError> {
    static ENGINE: OnceLock<Result<PluginEngine, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            PluginEngine::new(EngineConfig {
                pooling: false,
                ..EngineConfig::default()
            })
            .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(HarnessError::Engine)
}

/// A guest under test. See the [module documentation](super) for an example.
///
/// The plugin gets two instances, as in production: one for handlers (the dispatcher) and
/// one for reconciles (a worker), so state a guest keeps in globals is not shared between them.
pub struct Harness {
    world: Arc<World>,
    queue: Arc<FakeQueue>,
    events: Arc<FakeRecorder>,
    clock: VirtualClock,
    plugin: Plugin,
    dispatch: PluginInstance,
    worker: PluginInstance,
    logs: LogCapture,
    backoff: ControllerRateLimiter,
    handler_failures: Vec<HandlerFailure>,
    /// Notifications held back ([`Harness::hold_next_event`]) until after the next event's.
    held: Vec<Notification>,
    hold_next: bool,
}

/// Most reconciles [`Harness::run_queue`] makes, so a guest that requeues with no delay forever
/// ends the test instead of hanging it.
pub const RUN_QUEUE_LIMIT: usize = 1000;

impl Harness {
    /// Options for loading the component at `path`.
    pub fn builder(path: impl AsRef<Path>) -> HarnessBuilder {
        HarnessBuilder::new(Ok(path.as_ref().to_path_buf()))
    }

    /// Options for loading the component of the crate whose tests are running, built for
    /// `wasm32-wasip2` on first use ([`component`]): in a guest crate's own `cargo test`, no
    /// path and no separate build. A build failure is [`HarnessError::Component`] from
    /// [`HarnessBuilder::build`], with cargo's diagnostics.
    pub fn for_this_crate() -> HarnessBuilder {
        HarnessBuilder::new(component())
    }

    /// Loads the component at `path` with defaults and an empty cluster.
    pub async fn load(path: impl AsRef<Path>) -> Result<Harness, HarnessError> {
        Harness::builder(path).build().await
    }

    /// The validated manifest.
    pub fn manifest(&self) -> &Manifest {
        self.plugin.manifest()
    }

    /// Every Event the guest recorded so far (`events.record`), in order, unaggregated.
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.events.events()
    }

    /// Takes the Events recorded so far, so the next assertion sees only newer ones.
    pub fn take_events(&self) -> Vec<RecordedEvent> {
        self.events.take()
    }

    /// The virtual clock (read it; advance time with [`Harness::advance`]).
    pub fn clock(&self) -> &VirtualClock {
        &self.clock
    }

    /// The fake cluster, to read objects (writes through it bypass the caches until the next
    /// harness step; use the harness's event methods instead).
    pub fn cluster(&self) -> &FakeCluster {
        &self.world.cluster
    }

    /// An object as the cluster holds it now, as JSON.
    pub fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        self.world
            .cluster
            .get(api_version, kind, namespace, name)
            .and_then(|o| o.to_value().ok())
    }

    /// An object as the cache of watch `watch` holds it (what the guest's lister reads).
    pub fn cached(&self, watch: usize, key: &str) -> Option<Object> {
        self.world.cached(watch, key)
    }

    // ----- the cluster: given state and events -----

    /// Creates objects (YAML or JSON text) without notifying the plugin: "given" state.
    pub fn seed_yaml(&mut self, text: &str) -> Result<Vec<Object>, HarnessError> {
        let objs = self.world.cluster.seed_yaml(text)?;
        drop(self.world.sync());
        Ok(objs)
    }

    /// Creates one object without notifying the plugin.
    pub fn seed(&mut self, obj: Value) -> Result<Object, HarnessError> {
        let o = self.world.cluster.create(obj)?;
        drop(self.world.sync());
        Ok(o)
    }

    /// Creates `obj` (its namespace too when missing) and delivers what the informers see:
    /// `on-add` on each watch it falls in. Notifications still pending from the guest's own
    /// writes are delivered first, in cluster order.
    pub async fn add(&mut self, obj: Value) -> Result<Object, HarnessError> {
        self.before_event().await?;
        let o = self.world.cluster.create(obj)?;
        self.after_event().await?;
        Ok(o)
    }

    /// Replaces `obj` (a stale `metadata.resourceVersion` is a 409; none overwrites) and
    /// delivers `on-update` with the cached old state and the new one (or `on-add` /
    /// `on-delete` when it moves into or out of a watch's selectors).
    pub async fn update(&mut self, obj: Value) -> Result<Object, HarnessError> {
        self.before_event().await?;
        let o = self.world.cluster.replace(obj)?;
        self.after_event().await?;
        Ok(o)
    }

    /// Replaces the status subresource of `obj` and delivers the resulting notifications.
    pub async fn update_status(&mut self, obj: Value) -> Result<Object, HarnessError> {
        self.before_event().await?;
        let o = self.world.cluster.replace_status(obj)?;
        self.after_event().await?;
        Ok(o)
    }

    /// Deletes an object and delivers `on-delete` (or, when finalizers hold it, `on-update`
    /// with `deletionTimestamp` set).
    pub async fn delete(
        &mut self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Object, HarnessError> {
        self.before_event().await?;
        let o = self
            .world
            .cluster
            .delete(api_version, kind, namespace, name)?;
        self.after_event().await?;
        Ok(o)
    }

    /// Deletes an object so that the informers miss it: the plugin gets `on-delete` with
    /// `tombstone = true` and the last state its cache held (not the final one), as after a
    /// relist that no longer finds the object.
    pub async fn delete_missed(
        &mut self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Object, HarnessError> {
        self.before_event().await?;
        let key = kwh_client::object::object_key(namespace, name);
        let last_known: Vec<Option<Object>> = (0..self.manifest().watches.len())
            .map(|w| self.world.cached(w, &key))
            .collect();
        let o = self
            .world
            .cluster
            .delete(api_version, kind, namespace, name)?;
        let notes = self
            .world
            .sync()
            .into_iter()
            .map(|n| match n {
                Notification::Delete { watch, obj, .. } => Notification::Delete {
                    watch,
                    obj: last_known
                        .get(watch as usize)
                        .cloned()
                        .flatten()
                        .unwrap_or(obj),
                    tombstone: true,
                },
                other => other,
            })
            .collect();
        self.deliver_event(notes).await?;
        Ok(o)
    }

    /// Delivers the notifications the guest's own writes caused (and any other cluster change
    /// since the last step), as the informers would. Returns how many were delivered.
    /// Held notifications ([`Harness::hold_next_event`]) come after them, and lagging caches
    /// ([`Harness::restart_lagging`]) catch up first.
    pub async fn deliver_pending(&mut self) -> Result<usize, HarnessError> {
        let n = self.before_event().await? + self.held.len();
        let held = std::mem::take(&mut self.held);
        self.deliver(held).await?;
        Ok(n)
    }

    /// Before a test's change: a lagging cache catches up and what the guest's own writes
    /// caused is delivered, so the change's notifications are its own. Returns how many.
    async fn before_event(&mut self) -> Result<usize, HarnessError> {
        self.world.catch_up();
        self.world.sync_pending();
        let notes = self.world.take_pending();
        let n = notes.len();
        self.deliver(notes).await?;
        Ok(n)
    }

    /// After a test's change: its notifications, then any held ones (or, when the change is
    /// the one to hold, nothing yet).
    async fn after_event(&mut self) -> Result<(), HarnessError> {
        self.world.sync_pending();
        let notes = self.world.take_pending();
        self.deliver_event(notes).await
    }

    async fn deliver_event(&mut self, mut notes: Vec<Notification>) -> Result<(), HarnessError> {
        if std::mem::take(&mut self.hold_next) {
            self.held.append(&mut notes);
            return Ok(());
        }
        // Held ones stay held while these go, so one of the same object is released first.
        self.deliver(notes).await?;
        let held = std::mem::take(&mut self.held);
        self.deliver(held).await
    }

    /// Holds the notifications of the next change the test makes (`add`, `update`, `delete`…)
    /// until after those of the change that follows it, with reconciles in between seeing the
    /// cache already changed: notifications of different objects delivered out of order, as
    /// two informers (or one DeltaFIFO that queues an object's later change with its first)
    /// can. The order of one object's notifications is kept: a held one goes before any later
    /// one of the same object.
    pub fn hold_next_event(&mut self) {
        self.hold_next = true;
    }

    /// The plugin's process stops after the guest's next `writes` writes (the rest of that
    /// call's writes fail and reach nothing), and the step that did it ends with a restart
    /// ([`Harness::restart`]), as after a pod's crash between two writes.
    pub fn crash_after_writes(&mut self, writes: usize) {
        self.world.crash_after(writes);
    }

    /// Whether an armed crash has happened and the restart is due.
    pub fn crashed(&self) -> bool {
        self.world.is_dead()
    }

    /// A restart of the plugin's process: new instances (guest globals gone), an empty queue
    /// and rate limiter, held and pending notifications dropped, the caches listed again, and
    /// `on-add` for every cached object, as the informers' initial list after a pod restart.
    /// Returns how many were delivered.
    pub async fn restart(&mut self) -> Result<usize, HarnessError> {
        self.restart_lagging(0, 0).await
    }

    /// [`Harness::restart`] against an API server replica that lags: watch `watch`'s cache is
    /// listed `events` changes behind the cluster and stays there until the next test change
    /// or `deliver: pending`, when its watch delivers what it missed. A write the guest bases
    /// on it meets the 409 the cluster gives when it carries a resourceVersion.
    pub async fn restart_lagging(
        &mut self,
        watch: usize,
        events: usize,
    ) -> Result<usize, HarnessError> {
        let clock: Arc<dyn kwh_plugin::GuestClock> = Arc::new(self.clock.clone());
        let fresh = |p: &Plugin| -> Result<PluginInstance, HarnessError> {
            Ok(p.instance()
                .map_err(HarnessError::Instance)?
                .with_clock(clock.clone()))
        };
        self.dispatch = fresh(&self.plugin)?;
        self.worker = fresh(&self.plugin)?;
        self.queue.clear();
        self.backoff = ControllerRateLimiter::new(self.clock.clone());
        self.held.clear();
        self.hold_next = false;
        self.world.restart();
        if events > 0 {
            self.world.rewind(watch, events);
        }
        let notes = self.initial_list();
        let n = notes.len();
        self.deliver(notes).await?;
        Ok(n)
    }

    /// Writes that set back a change the guest's cache had not seen (a lost update: a replace
    /// without a resourceVersion, or a patch, built from a stale read), described.
    pub fn lost_updates(&self) -> Vec<String> {
        self.world.lost_updates()
    }

    /// Delivers `on-add` for every object the caches hold (watch by watch, in key order), as the
    /// informers' initial list does when the plugin starts: for testing start-up against
    /// existing ("given") objects. Returns how many were delivered.
    pub async fn deliver_initial_list(&mut self) -> Result<usize, HarnessError> {
        self.deliver_pending().await?;
        let notes = self.initial_list();
        let n = notes.len();
        self.deliver(notes).await?;
        Ok(n)
    }

    /// `on-add` for every cached object, watch by watch, in key order.
    fn initial_list(&self) -> Vec<Notification> {
        self.world
            .cached_all()
            .into_iter()
            .flat_map(|(watch, objs)| {
                objs.into_iter()
                    .map(move |obj| Notification::Add { watch, obj })
            })
            .collect()
    }

    /// Delivers `on-update` with old and new equal for every cached object, as a resync does.
    /// Returns how many were delivered.
    pub async fn resync(&mut self) -> Result<usize, HarnessError> {
        self.deliver_pending().await?;
        let notes: Vec<Notification> = self
            .world
            .cached_all()
            .into_iter()
            .flat_map(|(watch, objs)| {
                objs.into_iter().map(move |obj| Notification::Update {
                    watch,
                    old: obj.clone(),
                    new: obj,
                })
            })
            .collect();
        let n = notes.len();
        self.deliver(notes).await?;
        Ok(n)
    }

    /// How many notifications wait for [`Harness::deliver_pending`].
    pub fn pending_notifications(&self) -> usize {
        self.world.pending_len()
    }

    async fn deliver(&mut self, notes: Vec<Notification>) -> Result<(), HarnessError> {
        let mut first = None;
        let mut queue: std::collections::VecDeque<Notification> = notes.into();
        while let Some(n) = queue.pop_front() {
            if self.world.is_dead() {
                // The process is gone: what it had not handled, its restart lists again.
                break;
            }
            // A held notification of the same object goes first: one object's order is kept.
            if let Some(at) = self
                .held
                .iter()
                .position(|h| h.watch() == n.watch() && h.key() == n.key())
            {
                let h = self.held.remove(at);
                queue.push_front(n);
                queue.push_front(h);
                continue;
            }
            let d = self.logs.dispatch().clone();
            let r = match &n {
                Notification::Add { watch, obj } => {
                    self.dispatch.on_add(*watch, obj).with_subscriber(d).await
                }
                Notification::Update { watch, old, new } => {
                    self.dispatch
                        .on_update(*watch, old, new)
                        .with_subscriber(d)
                        .await
                }
                Notification::Delete {
                    watch,
                    obj,
                    tombstone,
                } => {
                    self.dispatch
                        .on_delete(*watch, obj, *tombstone)
                        .with_subscriber(d)
                        .await
                }
            };
            if let Err(error) = r {
                let f = HandlerFailure {
                    call: n.call(),
                    watch: n.watch(),
                    key: n.key(),
                    error,
                };
                self.handler_failures.push(f.clone());
                first.get_or_insert(f);
            }
        }
        match first {
            Some(f) => Err(HarnessError::Handler(f)),
            None => Ok(()),
        }
    }

    // ----- reconcile and the queue -----

    /// Reconciles `key` as a worker would after taking it from the queue (a ready copy of the
    /// key is taken off the queue), then does what the worker does with the outcome: done
    /// forgets the key's backoff; requeue-after adds it after the delay; an error or trap adds
    /// it after the default controller rate limiter's delay ([`ControllerRateLimiter`]: per-key
    /// exponential backoff from 5 ms and the overall 10 qps bucket) on the virtual clock.
    pub async fn reconcile(&mut self, key: &str) -> ReconcileOutcome {
        self.queue.remove_ready(key);
        let d = self.logs.dispatch().clone();
        let r = self.worker.reconcile(key).with_subscriber(d).await;
        let key = key.to_string();
        match r {
            Ok(Ok(Outcome::Done)) => {
                self.backoff.forget(&key);
                ReconcileOutcome::Done
            }
            Ok(Ok(Outcome::RequeueAfter(d))) => {
                self.backoff.forget(&key);
                self.queue.push(key, Some(d), Origin::Requeue);
                ReconcileOutcome::RequeueAfter(d)
            }
            Ok(Err(msg)) => {
                let delay = self.backoff.when(&key);
                self.queue.push(key, Some(delay), Origin::Backoff);
                ReconcileOutcome::Error(msg)
            }
            Err(e) => {
                let delay = self.backoff.when(&key);
                self.queue.push(key, Some(delay), Origin::Backoff);
                ReconcileOutcome::Trap(e)
            }
        }
    }

    /// Reconciles ready keys, in queue order, until none is ready (keys the reconciles add
    /// with no delay included), at most [`RUN_QUEUE_LIMIT`] times. Delayed keys wait for
    /// [`Harness::advance`].
    pub async fn run_queue(&mut self) -> Vec<(String, ReconcileOutcome)> {
        let mut out = Vec::new();
        self.queue.promote();
        while out.len() < RUN_QUEUE_LIMIT && !self.world.is_dead() {
            let Some(key) = self.queue.pop() else { break };
            let r = self.reconcile(&key).await;
            out.push((key, r));
            self.queue.promote();
        }
        out
    }

    /// Moves virtual time forward by `d`: the guest's clocks and the cluster's timestamps
    /// follow, and delayed keys now due become ready. Returns the keys that became ready.
    pub fn advance(&mut self, d: Duration) -> Vec<String> {
        self.clock.advance(d);
        self.queue.promote()
    }

    /// Keys ready for reconcile, in order.
    pub fn ready_keys(&self) -> Vec<String> {
        self.queue.ready()
    }

    /// Keys waiting for a delay, with the virtual time left, soonest first.
    pub fn waiting_keys(&self) -> Vec<(String, Duration)> {
        self.queue.waiting()
    }

    // ----- what happened -----

    /// Every queue add so far (the guest's and the worker's requeues and backoffs).
    pub fn enqueued(&self) -> Vec<Enqueued> {
        self.queue.log()
    }

    /// [`Harness::enqueued`], clearing the record.
    pub fn take_enqueued(&self) -> Vec<Enqueued> {
        self.queue.take_log()
    }

    /// Every write the guest made (that its manifest allowed), with the cluster's answer.
    pub fn writes(&self) -> Vec<RecordedWrite> {
        self.world.writes()
    }

    /// [`Harness::writes`], clearing the record.
    pub fn take_writes(&self) -> Vec<RecordedWrite> {
        self.world.take_writes()
    }

    /// Every line the guest logged or printed, and the host's refusals of its calls.
    pub fn logs(&self) -> Vec<LogLine> {
        self.logs.lines()
    }

    /// [`Harness::logs`], clearing the record.
    pub fn take_logs(&self) -> Vec<LogLine> {
        self.logs.take()
    }

    /// Every handler call the sandbox stopped so far.
    pub fn handler_failures(&self) -> &[HandlerFailure] {
        &self.handler_failures
    }

    /// Clears the records of writes, queue adds, Events, logs and handler failures (not the
    /// queue).
    pub fn clear_records(&mut self) {
        self.take_writes();
        self.take_enqueued();
        self.take_events();
        self.take_logs();
        self.handler_failures.clear();
    }
}
