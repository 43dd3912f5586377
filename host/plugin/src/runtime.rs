//! Running plugins: load, resolve kinds by discovery, wire each plugin to the shared informers,
//! its workqueue and the API client, and stop them all gracefully.
//!
//! Start-up order, as a controller on a real cluster needs it:
//! - a plugin whose kinds discovery cannot resolve yet (its CRD is applied later by a GitOps
//!   tool, or the API server is not reachable yet) waits, unready, and starts by itself once
//!   they resolve, retrying with backoff; one log line says it waits, one that it started;
//! - a started plugin's notifications are handled as its informers list, but its reconcile
//!   workers pass a [`CacheSync`] gate that opens only when every one of its watches has
//!   synced, so no reconcile reads a partial cache.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::backend::Backends;
use super::backend::{
    informer::InformerLister, kube::KubeClientBackend, workqueue::QueueRefusals,
    workqueue::WorkqueueBackend,
};
use super::cache_sync::CacheSync;
use super::dispatch::Dispatcher;
use super::engine::PluginEngine;
use super::health::Health;
use super::index::register as register_indexes;
use super::instance::GuestError;
use super::loader::{LoadError, LoadedPlugin, Plugin};
use super::options::RuntimeOptions;
use super::rbac::namespace_scope;
use super::reconcile::{spawn_workers, PluginQueue, ReconcileStats};
use super::spec::PluginSpec;
pub use super::status::RuntimeStatus;
use super::status::{metrics_registry, RunningStatus, Slot, Slots, WaitingStatus, WatchStatus};
use super::watch_counters::{CounterMap, CountingLw};
use crate::events::{EventRecorder, RecorderConfig};
use kwh_client::{ApiResource, Client, Discovery, ResourceClient};
use kwh_coordination::ownership::{GainedKeys, PluginOwnership};
use kwh_informer::factory::{FactoryRegistration, InformerKey, SharedInformerFactory};
use kwh_informer::processor::PanicPolicy;
use kwh_informer::reflector::ReflectorOptions;
use kwh_informer::shared::{
    HandlerRegistration, InformerError, InformerOptions, SharedIndexInformer,
};
use kwh_informer::workqueue::{
    default_controller_rate_limiter, MetricsError, QueuesCollector, RateLimitingQueue,
};

/// Why one plugin did not start. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Not a loadable component, or a bad manifest.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A watched or written kind that discovery cannot resolve.
    #[error("plugin {}: cannot resolve kind {kind} ({api_version}): {cause}", path.display())]
    Resolve {
        /// The file.
        path: PathBuf,
        /// `group/version`.
        api_version: String,
        /// The kind.
        kind: String,
        /// What discovery said (boxed: it is the rare path, and keeps every `Result` small).
        cause: Box<kwh_client::Error>,
    },
    /// A second plugin of the same name (metrics and field managers would collide).
    #[error("plugin {}: {0}", path.display())]
    Queue {
        /// The file.
        path: PathBuf,
        /// The duplicate name.
        #[source]
        source: MetricsError,
    },
    /// No instance for the dispatcher or a worker.
    #[error("plugin {}: {source}", path.display())]
    Instance {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: GuestError,
    },
    /// The informer refused the handler.
    #[error("plugin {}: cannot register on informer {key}: {source}", path.display())]
    Informer {
        /// The file.
        path: PathBuf,
        /// The informer.
        key: String,
        /// Why.
        #[source]
        source: InformerError,
    },
}

/// How often shared informers check whether a handler is due a resync.
const INFORMER_RESYNC_CHECK: Duration = Duration::from_secs(30);

/// What `start` made of a plugin that loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// Watching and reconciling (once its caches sync).
    Running,
    /// Waiting for a kind to be served, or for the API server; the reason as logged.
    Waiting(String),
}

/// What registering a plugin's watches made: the factory registrations (undone at shutdown),
/// each watch's status, and what a gain of keys replays.
struct Registered {
    regs: Vec<FactoryRegistration<CountingLw>>,
    watches: Vec<WatchStatus>,
    replays: Vec<(SharedIndexInformer<CountingLw>, HandlerRegistration)>,
}

/// The parts of a running plugin that only shutdown takes apart.
struct Teardown {
    regs: Vec<FactoryRegistration<CountingLw>>,
    workers: Vec<JoinHandle<()>>,
    sync_task: JoinHandle<()>,
    replay_task: JoinHandle<()>,
}

/// One running plugin.
pub struct RunningPlugin {
    status: Arc<RunningStatus>,
    queue: PluginQueue,
    teardown: Mutex<Option<Teardown>>,
}

impl RunningPlugin {
    /// The plugin.
    pub fn plugin(&self) -> &Plugin {
        &self.status.plugin
    }
    /// Its workqueue.
    pub fn queue(&self) -> &PluginQueue {
        &self.queue
    }
    /// Its reconcile counters.
    pub fn reconcile_stats(&self) -> &ReconcileStats {
        &self.status.stats
    }
    /// Its dispatcher counters.
    pub fn dispatcher(&self) -> &Dispatcher {
        &self.status.dispatcher
    }
    /// A shared handle on its dispatcher (counters outliving a borrow of the runtime).
    pub fn dispatcher_handle(&self) -> Arc<Dispatcher> {
        self.status.dispatcher.clone()
    }
    /// Whether every one of its handlers has seen its informer's initial list.
    pub fn has_synced(&self) -> bool {
        self.status.watches.iter().all(|w| w.reg.has_synced())
    }
    /// Whether its reconcile workers have been let through the cache-sync gate.
    pub fn workers_started(&self) -> bool {
        self.status.synced.is_open()
    }
    /// Its health gate (quarantine state).
    pub fn health(&self) -> &Health {
        &self.status.health
    }
}

/// Everything a plugin is wired to; shared with the tasks that start waiting plugins.
struct Wiring {
    client: Client,
    discovery: Arc<Discovery>,
    factory: SharedInformerFactory<CountingLw>,
    registry: QueuesCollector,
    /// What `/metrics` encodes: the queues of `registry` and the plugins of `slots`.
    metrics: Arc<prometheus_client::registry::Registry>,
    lw_counters: CounterMap,
    opts: RuntimeOptions,
    slots: Slots,
    running: Mutex<Vec<Arc<RunningPlugin>>>,
    /// One recorder for every plugin: Events are aggregated per reporting controller inside it.
    events: EventRecorder,
}

/// The plugins of one host process, sharing one informer factory and metrics registry.
pub struct PluginRuntime {
    engine: PluginEngine,
    wiring: Arc<Wiring>,
    stop_waiting: watch::Sender<bool>,
    waiting_tasks: Vec<JoinHandle<()>>,
    /// The Event writer: stopped (after a last flush of aggregated counts) once the workers are.
    event_writer: JoinHandle<()>,
    stop_events: Option<tokio::sync::oneshot::Sender<()>>,
}

impl PluginRuntime {
    /// A runtime with no plugins yet. Must be called inside a tokio runtime.
    pub fn new(engine: PluginEngine, client: Client, opts: RuntimeOptions) -> Self {
        let registry = QueuesCollector::new();
        let lw_counters = CounterMap::default();
        let slots = Slots::default();
        let (events, writer) = EventRecorder::new(
            client.clone(),
            RecorderConfig {
                fence: Some(opts.ownership.fence()),
                ..RecorderConfig::new(opts.identity.clone())
            },
        );
        let (stop_events, stopped) = tokio::sync::oneshot::channel::<()>();
        let event_writer = tokio::spawn(writer.run(async move {
            let _ = stopped.await;
        }));
        let metrics = metrics_registry(
            &engine,
            &registry,
            &slots,
            &lw_counters,
            &events,
            &opts.ownership,
        );
        PluginRuntime {
            engine,
            event_writer,
            stop_events: Some(stop_events),
            wiring: Arc::new(Wiring {
                discovery: Arc::new(
                    Discovery::new(client.clone())
                        .with_min_refresh_interval(opts.discovery_refresh),
                ),
                client,
                factory: SharedInformerFactory::new(InformerOptions {
                    // The resync check period of shared informers: plugins that want a
                    // shorter resync lower it while the informer is new; 0 would disable
                    // resync entirely.
                    resync_period: INFORMER_RESYNC_CHECK,
                    // Plugin dispatchers turn guest faults into errors; a panic would be a
                    // host bug in one plugin's path, and must not stop every other plugin.
                    handler_panics: PanicPolicy::Skip,
                    reflector: ReflectorOptions {
                        page_size: opts.list_page_size,
                        ..ReflectorOptions::default()
                    },
                    ..InformerOptions::default()
                }),
                metrics,
                registry,
                lw_counters,
                opts,
                slots,
                running: Mutex::new(Vec::new()),
                events,
            }),
            stop_waiting: watch::channel(false).0,
            waiting_tasks: Vec::new(),
        }
    }

    /// Loads and starts every file. A plugin that fails to load is logged as one line and
    /// skipped, and one whose kinds do not resolve yet waits for them, unless `fail_fast`,
    /// when the first failure of either kind is returned. Returns the failures.
    pub async fn start_all(&mut self, paths: &[PathBuf]) -> Result<Vec<StartError>, StartError> {
        let specs = paths
            .iter()
            .map(|p| PluginSpec::with_defaults(p, &self.wiring.opts))
            .collect();
        self.start_all_specs(specs).await
    }

    /// [`PluginRuntime::start_all`] for plugins with settings of their own, in this order.
    pub async fn start_all_specs(
        &mut self,
        specs: Vec<PluginSpec>,
    ) -> Result<Vec<StartError>, StartError> {
        let mut failed = Vec::new();
        for spec in specs {
            match self.start_spec(spec).await {
                Ok(_) => {}
                Err(e) if self.wiring.opts.fail_fast => return Err(e),
                Err(e) => {
                    tracing::error!("{e}");
                    failed.push(e);
                }
            }
        }
        Ok(failed)
    }

    /// Loads the plugin at `path` and starts its watches and workers, or, when one of its
    /// kinds does not resolve (not served yet, API server unreachable) and not `fail_fast`,
    /// leaves it waiting: it starts by itself once discovery resolves its kinds.
    /// It runs with the runtime's global settings ([`PluginSpec::with_defaults`]).
    pub async fn start(&mut self, path: &Path) -> Result<Started, StartError> {
        self.start_spec(PluginSpec::with_defaults(path, &self.wiring.opts))
            .await
    }

    /// [`PluginRuntime::start`] with the plugin's own settings: its limits apply to each of its
    /// stores (deadlines, memory cap) and to its instance count, its workers override its
    /// manifest's, its namespace confines its watches, and its configuration is carried with
    /// it ([`Plugin::config`]).
    pub async fn start_spec(&mut self, spec: PluginSpec) -> Result<Started, StartError> {
        let PluginSpec {
            path,
            limits,
            workers,
            namespace,
            config,
            leader_only,
        } = spec;
        let path = path.as_path();
        let loaded = self
            .engine
            .load_configured(path, limits, config)
            .await?
            .with_workers(workers);
        match self.wiring.resolve(&loaded).await {
            Ok(resources) => {
                let running =
                    self.wiring
                        .wire(loaded, &resources, namespace.as_deref(), leader_only)?;
                self.wiring.adopt(running, None);
                Ok(Started::Running)
            }
            Err(e) if self.wiring.opts.fail_fast => Err(e),
            Err(e) => {
                let reason = waiting_reason(&e);
                tracing::warn!(plugin = %loaded.name(), file = %path.display(),
                    "plugin waits to start: {reason}; retrying with backoff until it resolves");
                let waiting = Arc::new(WaitingStatus {
                    name: loaded.name().to_owned(),
                    path: path.to_path_buf(),
                    since: SystemTime::now(),
                    reason: Mutex::new(reason.clone()),
                    attempts: AtomicU64::new(1),
                });
                self.wiring
                    .slots
                    .lock()
                    .push(Slot::Waiting(waiting.clone()));
                let task = tokio::spawn(start_when_resolved(
                    self.wiring.clone(),
                    loaded,
                    namespace,
                    leader_only,
                    waiting,
                    self.stop_waiting.subscribe(),
                ));
                self.waiting_tasks.push(task);
                Ok(Started::Waiting(reason))
            }
        }
    }

    /// The runtime's Event recorder, for the host's own Events (leader election): written
    /// by the same writer as the plugins', behind the same fence, until the runtime shuts down.
    pub fn events(&self) -> EventRecorder {
        self.wiring.events.clone()
    }

    /// The running plugins, in the order they started.
    pub fn plugins(&self) -> Vec<Arc<RunningPlugin>> {
        self.wiring.running.lock().clone()
    }

    /// The plugins waiting to start, as (name, why).
    pub fn waiting(&self) -> Vec<(String, String)> {
        self.wiring
            .slots
            .lock()
            .iter()
            .filter_map(|s| match s {
                Slot::Waiting(w) => Some((w.name.clone(), w.reason.lock().clone())),
                Slot::Running(_) => None,
            })
            .collect()
    }

    /// The informer factory (shared watches).
    pub fn factory(&self) -> &SharedInformerFactory<CountingLw> {
        &self.wiring.factory
    }

    /// Whether every plugin has started, its informers have delivered their initial lists,
    /// its workers have passed the cache-sync gate, and no plugin is quarantined.
    pub fn is_ready(&self) -> bool {
        self.status().is_ready()
    }

    /// A cheap handle for the metrics and health endpoints; it also sees plugins that start
    /// later.
    pub fn status(&self) -> RuntimeStatus {
        RuntimeStatus {
            metrics: self.wiring.metrics.clone(),
            slots: self.wiring.slots.clone(),
            ownership: self.wiring.opts.ownership.clone(),
        }
    }

    /// Stops watches, lets in-flight and queued reconciles finish within `grace`, then stops
    /// the workers. Plugins still waiting to start are given up; workers whose caches never
    /// synced stop without reconciling. Returns whether everything finished in time.
    pub async fn shutdown(self, grace: Duration) -> bool {
        tracing::info!(?grace, "stopping watches and draining workqueues");
        self.stop_waiting.send_replace(true);
        for t in self.waiting_tasks {
            // A task wiring a plugin right now finishes that first (it holds no await then),
            // so every running plugin is in the list below once it has ended.
            let _ = t.await;
        }
        let w = &self.wiring;
        w.factory.shutdown();
        let deadline = tokio::time::Instant::now() + grace;
        let mut clean = true;
        let plugins = w.running.lock().clone();
        for p in &plugins {
            // Workers that never got past the gate would reconcile on a partial cache.
            p.status.synced.close();
            if p.status.health.is_quarantined() {
                // Its workers wait at the health gate and would only sit out the grace period.
                tracing::warn!(plugin = %p.plugin().name(), queued = p.queue.len(),
                    "plugin quarantined at shutdown; its queued keys are not reconciled");
                p.status.health.close();
            }
        }
        for p in plugins {
            let Some(t) = p.teardown.lock().take() else {
                continue;
            };
            t.sync_task.abort();
            t.replay_task.abort();
            drop(t.regs);
            let drained = tokio::time::timeout_at(deadline, p.queue.shutdown_with_drain())
                .await
                .is_ok();
            p.queue.shutdown();
            for worker in t.workers {
                let abort = worker.abort_handle();
                if tokio::time::timeout_at(deadline, worker).await.is_err() {
                    abort.abort();
                    clean = false;
                }
            }
            // Releases a dispatcher still waiting at the gate.
            p.status.health.close();
            if !drained {
                // The caller reports the cut-off once, for all plugins (it returns false).
                tracing::debug!(plugin = %p.plugin().name(), ?grace,
                    "grace period over with reconciles in flight; they were abandoned");
                clean = false;
            }
        }
        // Last: the workers have stopped recording, so the writer's final flush (bounded by
        // the writer itself) writes every aggregated count.
        if let Some(stop) = self.stop_events {
            let _ = stop.send(());
        }
        if let Err(e) = self.event_writer.await {
            tracing::warn!(error = %e, "event writer ended abnormally");
        }
        clean
    }
}

/// Replays cached objects to the plugin's handlers, each time it needs them again:
/// - this replica gained keys (it became the leader, or a membership change gave it keys):
///   the objects of exactly those keys, as a controller that starts sees its informers'
///   contents, so they are queued without a relist;
/// - notifications were held back while the plugin was quarantined: every object, once it
///   may be called again, so what changed meanwhile reaches it (a level-based reconcile
///   needs the latest state, not each step).
///
/// Replays go through each handler's own queue, in order with its live notifications
/// ([`SharedIndexInformer::replay`]).
async fn replay_on_gain(
    own: PluginOwnership,
    dispatcher: Arc<Dispatcher>,
    watches: Vec<(SharedIndexInformer<CountingLw>, HandlerRegistration)>,
) {
    use tokio::sync::broadcast::error::{RecvError, TryRecvError};
    let mut gains = own.gains();
    loop {
        let (keys, why) = tokio::select! {
            r = gains.recv() => {
                let mut got = Vec::new();
                let mut lagged = false;
                match r {
                    Ok(g) => got.push(g),
                    Err(RecvError::Lagged(_)) => lagged = true,
                    Err(RecvError::Closed) => return,
                }
                loop {
                    match gains.try_recv() {
                        Ok(g) => got.push(g),
                        Err(TryRecvError::Lagged(_)) => lagged = true,
                        Err(_) => break,
                    }
                }
                let keys = if lagged { GainedKeys::All } else { own.gained_keys(&got) };
                (keys, "gained work")
            }
            () = dispatcher.missed() => (GainedKeys::All, "back from quarantine"),
        };
        if keys.is_none() || !own.active() {
            continue;
        }
        let mut n = 0;
        for (informer, reg) in &watches {
            n += informer.replay(reg, |o| o.with_key(|k| keys.contains(k)));
        }
        tracing::debug!(objects = n, why, "caches replayed to the handlers");
    }
}

/// Why a plugin waits, without the file name its log line already carries.
fn waiting_reason(e: &StartError) -> String {
    match e {
        StartError::Resolve {
            api_version,
            kind,
            cause,
            ..
        } => format!("cannot resolve kind {kind} ({api_version}): {cause}"),
        other => other.to_string(),
    }
}

/// Retries resolving a waiting plugin's kinds with backoff; wires it once they resolve and
/// puts it in its slot. One line when it starts (or fails for good), none per retry.
async fn start_when_resolved(
    wiring: Arc<Wiring>,
    loaded: LoadedPlugin,
    namespace: Option<String>,
    leader_only: bool,
    waiting: Arc<WaitingStatus>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = wiring.opts.start_retry.clone();
    loop {
        let wait = backoff.step(tokio::time::Instant::now(), rand::random::<f64>());
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let resolved = tokio::select! {
            r = wiring.resolve(&loaded) => r,
            _ = stop.wait_for(|s| *s) => return,
        };
        waiting.attempts.fetch_add(1, Ordering::Relaxed);
        match resolved {
            Ok(resources) => {
                let name = loaded.name().to_owned();
                match wiring.wire(loaded, &resources, namespace.as_deref(), leader_only) {
                    Ok(running) => wiring.adopt(running, Some(&waiting)),
                    Err(e) => {
                        tracing::error!("{e}");
                        wiring
                            .slots
                            .lock()
                            .retain(|s| !matches!(s, Slot::Waiting(w) if Arc::ptr_eq(w, &waiting)));
                        tracing::debug!(plugin = %name, "waiting plugin given up");
                    }
                }
                return;
            }
            Err(e) => {
                let reason = waiting_reason(&e);
                tracing::debug!(plugin = %waiting.name, ?wait, "still waiting: {reason}");
                *waiting.reason.lock() = reason;
            }
        }
    }
}

impl Wiring {
    /// Every watched and written kind → its resource, or the first that does not resolve.
    async fn resolve(
        &self,
        loaded: &LoadedPlugin,
    ) -> Result<HashMap<(String, String), ApiResource>, StartError> {
        let m = loaded.manifest();
        let kinds = m
            .watches
            .iter()
            .map(|w| (&w.api_version, &w.kind))
            .chain(m.writes.iter().map(|w| (&w.api_version, &w.kind)));
        let mut out = HashMap::new();
        for (api_version, kind) in kinds {
            let k = (api_version.clone(), kind.clone());
            if out.contains_key(&k) {
                continue;
            }
            let r = self
                .discovery
                .resolve(api_version, kind)
                .await
                .map_err(|cause| StartError::Resolve {
                    path: loaded.path().to_path_buf(),
                    api_version: api_version.clone(),
                    kind: kind.clone(),
                    cause: Box::new(cause),
                })?;
            out.insert(k, r);
        }
        Ok(out)
    }

    /// Puts a newly wired plugin in the running list and in its slot (replacing `waiting`,
    /// or appended), and says so.
    fn adopt(&self, running: RunningPlugin, waiting: Option<&Arc<WaitingStatus>>) {
        let running = Arc::new(running);
        let slot = Slot::Running(running.status.clone());
        {
            let mut slots = self.slots.lock();
            let at = waiting.and_then(|w| {
                slots
                    .iter()
                    .position(|s| matches!(s, Slot::Waiting(x) if Arc::ptr_eq(x, w)))
            });
            match at {
                Some(i) => slots[i] = slot,
                None => slots.push(slot),
            }
        }
        let workers = running
            .teardown
            .lock()
            .as_ref()
            .map_or(0, |t| t.workers.len());
        tracing::info!(plugin = %running.plugin().name(), file = %running.plugin().path().display(),
            workers, "plugin started");
        self.running.lock().push(running);
    }

    /// Connects a loaded plugin to its queue, client, informers and workers; `namespace`
    /// confines its watches that name none.
    fn wire(
        &self,
        loaded: LoadedPlugin,
        resources: &HashMap<(String, String), ApiResource>,
        namespace: Option<&str>,
        leader_only: bool,
    ) -> Result<RunningPlugin, StartError> {
        let path = loaded.path().to_path_buf();
        let name = loaded.name().to_string();
        let own = self.opts.ownership.for_plugin(&name, leader_only);
        let queue = RateLimitingQueue::named(
            &name,
            &self.registry,
            default_controller_rate_limiter::<Arc<str>>(),
        )
        .map_err(|source| StartError::Queue {
            path: path.clone(),
            source,
        })?;
        let lister = Arc::new(InformerLister::new());
        let queue_refusals = Arc::new(QueueRefusals::default());
        let backends = Backends {
            lister: lister.clone(),
            client: Arc::new(
                KubeClientBackend::new(self.client.clone(), &name, resources.clone())
                    .confined_to(namespace_scope(loaded.manifest(), namespace, |a, k| {
                        resources
                            .get(&(a.to_string(), k.to_string()))
                            .map(|r| r.namespaced)
                    }))
                    .owned_by(own.clone()),
            ),
            queue: Arc::new(
                WorkqueueBackend::new(queue.clone())
                    .owned_by(own.clone())
                    .bounded(
                        &name,
                        loaded.limits().max_queued_keys,
                        queue_refusals.clone(),
                    ),
            ),
            events: Arc::new(self.events.clone()),
        };
        let plugin = loaded.activate(backends);
        let instance_err = |source| StartError::Instance {
            path: path.clone(),
            source,
        };
        let health = Arc::new(Health::new(&name, self.opts.quarantine.clone()));
        let dispatcher = Dispatcher::new(
            &plugin,
            health.clone(),
            self.opts.handler_retry.clone(),
            own.clone(),
        )
        .map_err(instance_err)?;
        let stats = Arc::new(ReconcileStats::default());
        let synced = CacheSync::new();
        let workers =
            spawn_workers(&plugin, &queue, &stats, &health, &synced, &own).map_err(instance_err)?;
        let Registered {
            regs,
            watches,
            replays,
        } = self.register_watches(&plugin, &dispatcher, resources, namespace, &lister, &synced)?;
        let replay_task = tokio::spawn(
            replay_on_gain(own, dispatcher.clone(), replays)
                .instrument(tracing::info_span!("replay", plugin = %name)),
        );
        let sync_task = synced.open_when(&name, {
            let handlers: Vec<_> = watches.iter().map(|w| w.reg.clone()).collect();
            move || handlers.iter().all(|h| h.has_synced())
        });
        Ok(RunningPlugin {
            status: Arc::new(RunningStatus {
                plugin,
                stats,
                dispatcher,
                health,
                watches,
                synced,
                queue_refusals,
            }),
            queue,
            teardown: Mutex::new(Some(Teardown {
                regs,
                workers,
                sync_task,
                replay_task,
            })),
        })
    }

    /// One informer handler per watch of the plugin's manifest (informers shared through the
    /// factory), each watch's cache added to the plugin's lister.
    fn register_watches(
        &self,
        plugin: &Plugin,
        dispatcher: &Arc<Dispatcher>,
        resources: &HashMap<(String, String), ApiResource>,
        namespace: Option<&str>,
        lister: &InformerLister,
        synced: &CacheSync,
    ) -> Result<Registered, StartError> {
        let mut regs = Vec::new();
        let mut watches = Vec::new();
        let mut replays = Vec::new();
        let manifest = plugin.manifest().clone();
        let path = plugin.path();
        for (i, w) in manifest.watches.iter().enumerate() {
            let Some(res) = resources.get(&(w.api_version.clone(), w.kind.clone())) else {
                continue;
            };
            let watch_namespace = if res.namespaced {
                w.namespace.clone().or_else(|| namespace.map(str::to_owned))
            } else {
                None
            };
            let key = InformerKey::new(
                &format!("{}/{}", res.api_version, res.plural),
                watch_namespace.as_deref(),
                w.label_selector.as_deref(),
                w.field_selector.as_deref(),
            );
            let make_lw = || {
                let mut lw =
                    ResourceClient::new(self.client.clone(), res.clone(), watch_namespace.clone());
                lw.label_selector = w.label_selector.clone();
                lw.field_selector = w.field_selector.clone();
                CountingLw::new(lw, key.to_string(), &self.lw_counters)
            };
            let reg = self
                .factory
                .add_handler(
                    key.clone(),
                    make_lw,
                    dispatcher.handler(i as u32),
                    // Zero: this plugin asked for no resync (the factory default would apply).
                    Some(manifest.resync_period.unwrap_or(Duration::ZERO)),
                )
                .map_err(|source| {
                    // Closing the gate ends the workers, which have reconciled nothing.
                    synced.close();
                    StartError::Informer {
                        path: path.to_path_buf(),
                        key: key.to_string(),
                        source,
                    }
                })?;
            let store = reg.informer().indexer().clone();
            let indexes = register_indexes(&store, &w.indexes);
            lister.add_indexed_store(
                &w.api_version,
                &w.kind,
                watch_namespace.as_deref(),
                store,
                indexes,
            );
            if let Some(handler) = reg.registration() {
                replays.push((reg.informer().clone(), handler.clone()));
                watches.push(WatchStatus {
                    key: key.to_string(),
                    informer: reg.informer().clone(),
                    reg: handler.clone(),
                    counters: reg.informer().lister_watcher().counters().clone(),
                });
            }
            regs.push(reg);
        }
        Ok(Registered {
            regs,
            watches,
            replays,
        })
    }
}
