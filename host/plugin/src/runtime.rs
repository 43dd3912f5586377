//! Running plugins: load, resolve kinds by discovery, wire each plugin to the shared informers,
//! its workqueue and the API client, and stop them all gracefully.
//!
//! Start-up order, as a controller on a real cluster needs it:
//! - a plugin whose kinds discovery cannot resolve yet (its CRD is applied later by a GitOps
//!   tool, or the API server is not reachable yet) waits, unready, and starts by itself once
//!   they resolve, retrying with backoff; one log line says it waits, one that it started;
//! - a started plugin's notifications are handled as its informers list, but its reconcile
//!   workers pass a [`CacheSync`](crate::cache_sync::CacheSync) gate that opens only when every one of its watches has
//!   synced, so no reconcile reads a partial cache.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;

mod shadows;

use self::shadows::Shadow;
use super::background::Background;
use super::engine::PluginEngine;
use super::instance::GuestError;
use super::loader::{LoadError, LoadedPlugin};
use super::options::RuntimeOptions;
pub use super::revision::RunningPlugin;
use super::revision::{Env, Resources, RevisionError};
use super::spec::{PluginSpec, ShadowSpec};
pub use super::status::RuntimeStatus;
use super::status::{metrics_registry, FailedStatus, ShadowViews, Slot, Slots, WaitingStatus};
use super::watch_counters::{CounterMap, CountingLw};
use crate::events::{EventRecorder, RecorderConfig};
use kwh_client::{Client, Discovery};
use kwh_informer::factory::SharedInformerFactory;
use kwh_informer::processor::PanicPolicy;
use kwh_informer::reflector::ReflectorOptions;
use kwh_informer::shared::{InformerError, InformerOptions};
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

/// Why a running plugin could not switch to a new revision; it runs on, unchanged.
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    /// The new revision did not load: not a component, a bad manifest, a refused
    /// configuration, a failed compile.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// No running plugin has that name.
    #[error("plugin {name}: not running")]
    NotRunning {
        /// The name asked for.
        name: String,
    },
    /// The new revision's manifest names another plugin.
    #[error("plugin {}: its manifest names plugin {found}, not {expected}", path.display())]
    OtherPlugin {
        /// The file.
        path: PathBuf,
        /// The running plugin's name.
        expected: String,
        /// The new revision's.
        found: String,
    },
    /// A kind of the new revision does not resolve, or it could not be started.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The caller refused the plugin its manifest names (see [`PluginRuntime::apply_checked`]).
    #[error("plugin {name} ({}): {reason}", path.display())]
    Refused {
        /// The file.
        path: PathBuf,
        /// The manifest's name.
        name: String,
        reason: String,
    },
}

/// What [`PluginRuntime::apply`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// No plugin of its name ran: started (or waiting for its kinds).
    Started(Started),
    /// A plugin of its name ran: switched to the new revision.
    Upgraded,
    /// A plugin of its name ran with these settings already: only its shadow changed.
    Kept,
}

/// What `start` made of a plugin that loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// Watching and reconciling (once its caches sync).
    Running,
    /// Waiting for a kind to be served, or for the API server; the reason as logged.
    Waiting(String),
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
    /// Shadow revisions, each beside the running plugin of its name.
    shadows: Mutex<Vec<Shadow>>,
    /// The shadows as `/statusz` and `/metrics` read them.
    shadow_views: ShadowViews,
    /// Shadows promoted without a hand: a spec still naming one runs it as the plugin.
    promoted: Mutex<Vec<(String, Arc<ShadowSpec>)>>,
    /// One recorder for every plugin: Events are aggregated per reporting controller inside it.
    events: EventRecorder,
    /// The shadows' low-priority threads, started with the first shadow.
    background: Mutex<Option<Background>>,
}

impl Wiring {
    /// Where shadow revisions run (see [`Background`]), its threads started on first use.
    fn background(&self) -> std::io::Result<tokio::runtime::Handle> {
        let mut bg = self.background.lock();
        if let Some(b) = bg.as_ref() {
            return Ok(b.handle());
        }
        let b = Background::start("kwh-shadow", 1)?;
        let h = b.handle();
        *bg = Some(b);
        Ok(h)
    }
}

/// The plugins of one host process, sharing one informer factory and metrics registry.
pub struct PluginRuntime {
    engine: PluginEngine,
    wiring: Arc<Wiring>,
    stop_waiting: watch::Sender<bool>,
    /// The tasks starting waiting plugins, with their status (a finished task's entry stays
    /// until shutdown or a removal of its name).
    waiting_tasks: Mutex<Vec<(Arc<WaitingStatus>, JoinHandle<()>)>>,
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
        let shadow_views = ShadowViews::default();
        let metrics = metrics_registry(
            &engine,
            &registry,
            &slots,
            &lw_counters,
            &events,
            &opts.ownership,
            &shadow_views,
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
                shadows: Mutex::new(Vec::new()),
                background: Mutex::new(None),
                shadow_views,
                promoted: Mutex::new(Vec::new()),
                events,
            }),
            stop_waiting: watch::channel(false).0,
            waiting_tasks: Mutex::new(Vec::new()),
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
            let path = spec.path.clone();
            match self.start_spec(spec).await {
                Ok(_) => {}
                Err(e) if self.wiring.opts.fail_fast => return Err(e),
                Err(e) => {
                    tracing::error!("{e}");
                    self.record_start_failure(&path, &e.to_string());
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
    /// it ([`Plugin::config`](crate::Plugin::config)).
    pub async fn start_spec(&mut self, spec: PluginSpec) -> Result<Started, StartError> {
        let live = spec.live();
        let loaded = self.load(&live).await?;
        let name = loaded.name().to_owned();
        let started = self.start_loaded(live, loaded).await?;
        // Its shadow, once the plugin runs (a waiting plugin's shadow starts with its next
        // apply).
        if started == Started::Running && spec.shadow.is_some() {
            self.sync_shadow(&name, &spec, spec.shadow.clone(), Duration::ZERO)
                .await;
        }
        Ok(started)
    }

    /// Starts `loaded` (not running yet) as [`PluginRuntime::start_spec`] does.
    async fn start_loaded(
        &mut self,
        spec: PluginSpec,
        loaded: LoadedPlugin,
    ) -> Result<Started, StartError> {
        match self.wiring.resolve(&loaded).await {
            Ok(resources) => {
                let running = self.wiring.wire(loaded, &resources, spec)?;
                self.wiring.adopt(running, None);
                Ok(Started::Running)
            }
            Err(e) if self.wiring.opts.fail_fast => Err(e),
            Err(e) => {
                let reason = waiting_reason(&e);
                tracing::warn!(plugin = %loaded.name(), file = %spec.path.display(),
                    "plugin waits to start: {reason}; retrying with backoff until it resolves");
                let waiting = Arc::new(WaitingStatus {
                    name: loaded.name().to_owned(),
                    path: spec.path.clone(),
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
                    spec,
                    waiting.clone(),
                    self.stop_waiting.subscribe(),
                ));
                self.waiting_tasks.lock().push((waiting, task));
                Ok(Started::Waiting(reason))
            }
        }
    }

    /// Compiles (or takes from the cache) and validates `spec`'s module with its settings.
    async fn load(&self, spec: &PluginSpec) -> Result<LoadedPlugin, LoadError> {
        Ok(self
            .engine
            .load_configured(&spec.path, spec.limits.clone(), spec.config.clone())
            .await?
            .with_workers(spec.workers))
    }

    /// Switches the running plugin `name` to a new revision started from `spec`, without a
    /// restart: the new module is compiled, validated (`validate-config`) and instantiated
    /// while the running revision carries on, and any failure leaves that one running
    /// untouched. Then the running revision's delivery in flight finishes, notifications go to
    /// the new one, the old workers finish the reconciles they hold (within `grace`, in the
    /// background) and the keys still queued are the new workers'. Informers are shared, not
    /// relisted: the new manifest's extra watches are registered, the ones it dropped removed.
    /// Returns how long the switch took, from the moment the new revision was compiled,
    /// validated and instantiated.
    pub async fn upgrade(
        &self,
        name: &str,
        spec: PluginSpec,
        grace: Duration,
    ) -> Result<Duration, UpgradeError> {
        let running = self.plugin(name).ok_or_else(|| UpgradeError::NotRunning {
            name: name.to_owned(),
        })?;
        let module = spec.path.clone();
        let loaded = match self.load(&spec).await {
            Ok(l) => l,
            Err(e) => {
                running.failed(&module, e.to_string());
                return Err(e.into());
            }
        };
        self.upgrade_loaded(&running, spec, loaded, grace).await
    }

    /// Lists the module at `path` as a plugin that failed to start (`/statusz` state `failed`,
    /// the metric `plugin_failed_to_start`, a note in `/readyz`), named by the file's stem,
    /// replacing an earlier failure of the same file. It stays listed until that file starts
    /// or [`forget_failed`](Self::forget_failed) drops it.
    pub fn record_start_failure(&self, path: &Path, error: &str) {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        let failed = Slot::Failed(Arc::new(FailedStatus {
            name,
            path: path.to_path_buf(),
            since: SystemTime::now(),
            reason: error.to_owned(),
        }));
        let mut slots = self.wiring.slots.lock();
        match slots
            .iter()
            .position(|s| matches!(s, Slot::Failed(f) if f.path == path))
        {
            Some(i) => slots[i] = failed,
            None => slots.push(failed),
        }
    }

    /// Drops the failures of modules `keep` says no (a plugins file that no longer lists them).
    pub fn forget_failed(&self, keep: impl Fn(&Path) -> bool) {
        self.wiring
            .slots
            .lock()
            .retain(|s| !matches!(s, Slot::Failed(f) if !keep(&f.path)));
    }

    /// Notes on the running plugin `name` that a revision from `module` failed to replace it
    /// (for a failure the runtime could not tie to it: a module that did not load at all).
    /// `/statusz` shows it until an upgrade succeeds.
    pub fn record_failure(&self, name: &str, module: &Path, error: &str) {
        if let Some(p) = self.plugin(name) {
            p.failed(module, error.to_owned());
        }
    }

    /// Starts `spec`'s plugin, or, when a plugin of the name its manifest gives runs already,
    /// upgrades that one to it ([`PluginRuntime::upgrade`]): what a changed plugins file or
    /// resource asks for. Returns the plugin's name and what was done.
    pub async fn apply(
        &mut self,
        spec: PluginSpec,
        grace: Duration,
    ) -> Result<(String, Applied), UpgradeError> {
        self.apply_checked(spec, grace, |_| Ok(())).await
    }

    /// [`apply`](Self::apply), once `check` accepted the name the new revision's manifest
    /// gives (known only once it loaded): so that a source of plugins (a `WasmController`) can
    /// refuse a module that names a plugin another source runs, before anything changes.
    pub async fn apply_checked(
        &mut self,
        spec: PluginSpec,
        grace: Duration,
        check: impl FnOnce(&str) -> Result<(), String>,
    ) -> Result<(String, Applied), UpgradeError> {
        // A shadow promoted without a hand stays promoted while the spec still names it.
        let promoted = spec
            .shadow
            .as_ref()
            .is_some_and(|s| self.wiring.promoted.lock().iter().any(|(_, p)| p == s));
        let spec = if promoted {
            spec.shadow_spec().unwrap_or(spec)
        } else {
            spec
        };
        let shadow = spec.shadow.clone();
        let live = spec.live();
        let loaded = self.load(&live).await?;
        let name = loaded.name().to_owned();
        check(&name).map_err(|reason| UpgradeError::Refused {
            path: live.path.clone(),
            name: name.clone(),
            reason,
        })?;
        if !promoted {
            // The spec no longer names the shadow this plugin was promoted from.
            self.wiring.promoted.lock().retain(|(n, _)| *n != name);
        }
        // A revision of a plugin still waiting for its kinds replaces the waiting one.
        self.give_up_waiting(&name).await;
        let applied = match self.plugin(&name) {
            Some(running) if running.spec() == live => Applied::Kept,
            Some(running) => {
                self.upgrade_loaded(&running, live.clone(), loaded, grace)
                    .await?;
                Applied::Upgraded
            }
            None => Applied::Started(self.start_loaded(live.clone(), loaded).await?),
        };
        self.sync_shadow(&name, &spec, shadow, grace).await;
        Ok((name, applied))
    }

    /// Switches `running` to `loaded` (its name checked, its kinds resolved, the slot's status
    /// replaced); a failure is noted on it for `/statusz`.
    async fn upgrade_loaded(
        &self,
        running: &RunningPlugin,
        spec: PluginSpec,
        loaded: LoadedPlugin,
        grace: Duration,
    ) -> Result<Duration, UpgradeError> {
        let path = spec.path.clone();
        let name = running.name();
        let switched = async {
            if loaded.name() != name {
                return Err(UpgradeError::OtherPlugin {
                    path: path.clone(),
                    expected: name.to_owned(),
                    found: loaded.name().to_owned(),
                });
            }
            let resources = self.wiring.resolve(&loaded).await?;
            let (old, took) = running
                .upgrade(&self.wiring.env(), spec, loaded, &resources, grace)
                .await
                .map_err(|e| StartError::from_revision(&path, e))?;
            let new = Slot::Running(running.status());
            for slot in self.wiring.slots.lock().iter_mut() {
                if matches!(slot, Slot::Running(s) if Arc::ptr_eq(s, &old)) {
                    *slot = new;
                    break;
                }
            }
            Ok(took)
        }
        .await;
        if let Err(e) = &switched {
            running.failed(&path, e.to_string());
        }
        switched
    }

    /// Stops the running plugin `name` and forgets it, without touching the others: its
    /// watches are removed (an informer no other plugin uses stops and frees its cache), its
    /// queued and in-flight reconciles finish within `grace`. Returns false when it was not
    /// running, or did not finish in time.
    pub async fn remove(&self, name: &str, grace: Duration) -> bool {
        // Its shadow goes with it (first: it follows the live revision's queue).
        self.stop_shadow(name, grace).await;
        let gave_up = self.give_up_waiting(name).await;
        let Some(running) = self.plugin(name) else {
            return gave_up;
        };
        self.wiring
            .running
            .lock()
            .retain(|p| !Arc::ptr_eq(p, &running));
        let status = running.status();
        self.wiring
            .slots
            .lock()
            .retain(|s| !matches!(s, Slot::Running(x) if Arc::ptr_eq(x, &status)));
        drop(status);
        let clean = running.stop(tokio::time::Instant::now() + grace).await;
        tracing::info!(plugin = %name, clean, "plugin removed");
        clean
    }

    /// Gives up starting the plugin `name` if it waits for its kinds: its task is stopped (at
    /// an await, so never halfway through wiring it) and its slot removed. Whether one waited.
    async fn give_up_waiting(&self, name: &str) -> bool {
        let entry = {
            let mut tasks = self.waiting_tasks.lock();
            let at = tasks
                .iter()
                .position(|(w, t)| w.name == name && !t.is_finished());
            at.map(|i| tasks.swap_remove(i))
        };
        let Some((waiting, task)) = entry else {
            return false;
        };
        task.abort();
        let _ = task.await;
        let before = self.wiring.slots.lock().len();
        self.wiring
            .slots
            .lock()
            .retain(|s| !matches!(s, Slot::Waiting(w) if Arc::ptr_eq(w, &waiting)));
        let gave_up = self.wiring.slots.lock().len() < before;
        if gave_up {
            tracing::info!(plugin = %name, "waiting plugin given up");
        }
        gave_up
    }

    /// The running plugin named `name`.
    pub fn plugin(&self, name: &str) -> Option<Arc<RunningPlugin>> {
        self.wiring
            .running
            .lock()
            .iter()
            .find(|p| p.name() == name)
            .cloned()
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
                Slot::Running(_) | Slot::Failed(_) => None,
            })
            .collect()
    }

    /// The API client the runtime's plugins write through.
    pub fn client(&self) -> &Client {
        &self.wiring.client
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
            shadows: self.wiring.shadow_views.clone(),
        }
    }

    /// Stops watches, lets in-flight and queued reconciles finish within `grace`, then stops
    /// the workers. Plugins still waiting to start are given up; workers whose caches never
    /// synced stop without reconciling. Returns whether everything finished in time.
    pub async fn shutdown(self, grace: Duration) -> bool {
        tracing::info!(?grace, "stopping watches and draining workqueues");
        self.stop_waiting.send_replace(true);
        for (_, t) in self.waiting_tasks.into_inner() {
            // A task wiring a plugin right now finishes that first (it holds no await then),
            // so every running plugin is in the list below once it has ended.
            let _ = t.await;
        }
        let w = &self.wiring;
        w.factory.shutdown();
        let deadline = tokio::time::Instant::now() + grace;
        let mut clean = true;
        let shadows: Vec<Shadow> = std::mem::take(&mut *w.shadows.lock());
        for s in shadows {
            clean &= s.running.stop(deadline).await;
        }
        let plugins = w.running.lock().clone();
        for p in plugins {
            clean &= p.stop(deadline).await;
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
    spec: PluginSpec,
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
                match wiring.wire(loaded, &resources, spec) {
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
    async fn resolve(&self, loaded: &LoadedPlugin) -> Result<Resources, StartError> {
        let m = loaded.manifest();
        let kinds = m
            .watches
            .iter()
            .map(|w| (&w.api_version, &w.kind))
            .chain(m.writes.iter().map(|w| (&w.api_version, &w.kind)));
        let mut out = Resources::new();
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
        let slot = Slot::Running(running.status());
        {
            let mut slots = self.slots.lock();
            // The module that failed before starts now (fixed, or its configuration).
            let path = running.status().plugin.path().to_path_buf();
            slots.retain(|s| !matches!(s, Slot::Failed(f) if f.path == path));
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
        let workers = running.workers();
        tracing::info!(plugin = %running.name(), file = %running.plugin().path().display(),
            workers, "plugin started");
        self.running.lock().push(running);
    }

    /// What a revision is built with.
    fn env(&self) -> Env<'_> {
        Env {
            client: &self.client,
            factory: &self.factory,
            lw_counters: &self.lw_counters,
            events: &self.events,
            opts: &self.opts,
            shadow: None,
        }
    }

    /// Starts the first revision of a loaded plugin: its queue, its watches on the shared
    /// informers, its workers behind the cache-sync gate.
    fn wire(
        &self,
        loaded: LoadedPlugin,
        resources: &Resources,
        spec: PluginSpec,
    ) -> Result<RunningPlugin, StartError> {
        let path = spec.path.clone();
        let queue = RateLimitingQueue::named(
            loaded.name(),
            &self.registry,
            default_controller_rate_limiter::<Arc<str>>(),
        )
        .map_err(|source| StartError::Queue {
            path: path.clone(),
            source,
        })?;
        RunningPlugin::start(&self.env(), queue, spec, loaded, resources)
            .map_err(|e| StartError::from_revision(&path, e))
    }
}

impl StartError {
    fn from_revision(path: &Path, e: RevisionError) -> Self {
        match e {
            RevisionError::Instance(source) => StartError::Instance {
                path: path.to_path_buf(),
                source,
            },
            RevisionError::Informer { key, source } => StartError::Informer {
                path: path.to_path_buf(),
                key,
                source,
            },
        }
    }
}
