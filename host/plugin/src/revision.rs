//! A running plugin and its revisions: the guest code with its configuration (a revision), and
//! what stays with the plugin while revisions come and go.
//!
//! An upgrade must lose no notification and relist nothing, so the plugin keeps what holds
//! state: its informer registrations (and through them the shared informers and their caches),
//! its workqueue (and the keys pending in it), its reconcile counters, and the route its
//! registrations deliver through ([`Route`]). A revision brings the rest: the activated guest
//! with its lister and backends, a dispatcher, reconcile workers, a health gate and the tasks
//! that open the cache-sync gate and replay caches. Switching revisions moves the route to the
//! new dispatcher (the old one finishes its delivery in flight first), tells the old workers to
//! finish the reconcile they hold and take no other key, registers the watches the new
//! manifest adds and removes the ones it drops: an informer no other plugin uses stops, and
//! its cache is freed (the factory's reference counts).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{broadcast, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::backend::{
    informer::InformerLister,
    kube::KubeClientBackend,
    shadow::{ShadowClientBackend, ShadowEvents, ShadowLedger, ShadowQueue},
    workqueue::QueueRefusals,
    workqueue::WorkqueueBackend,
    Backends, ClientBackend, EventBackend, PluginEvents,
};
use super::cache_sync::CacheSync;
use super::dispatch::{Dispatcher, Route};
use super::events::EventRecorder;
use super::follow::{Follow, Mirror};
use super::health::Health;
use super::index::register as register_indexes;
use super::instance::GuestError;
use super::loader::{LoadedPlugin, Plugin};
use super::manifest::IndexSpec;
use super::options::RuntimeOptions;
use super::rbac::namespace_scope;
use super::reconcile::{spawn_workers, Following, PluginQueue, ReconcileStats, WorkerParts};
use super::spec::PluginSpec;
use super::status::{RevisionFailure, RevisionRecord, RunningStatus, WatchStatus, HISTORY};
use super::watch_counters::{CounterMap, CountingLw};
use kwh_client::{ApiResource, Client, ResourceClient};
use kwh_coordination::ownership::{Gain, GainedKeys, PluginOwnership};
use kwh_informer::factory::{FactoryRegistration, InformerKey, SharedInformerFactory};
use kwh_informer::shared::{HandlerRegistration, InformerError, SharedIndexInformer};

/// Every watched and written kind of a plugin, resolved to its resource.
pub(crate) type Resources = HashMap<(String, String), ApiResource>;

/// Why a revision could not be built or switched to. The runtime adds the file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RevisionError {
    /// No instance for the dispatcher or a worker, or the dispatcher's would not instantiate.
    #[error(transparent)]
    Instance(#[from] GuestError),
    /// The informer refused the handler.
    #[error("cannot register on informer {key}: {source}")]
    Informer {
        /// The informer.
        key: String,
        /// Why.
        #[source]
        source: InformerError,
    },
}

/// What a revision is built with: the runtime's shared parts.
pub(crate) struct Env<'a> {
    pub client: &'a Client,
    pub factory: &'a SharedInformerFactory<CountingLw>,
    pub lw_counters: &'a CounterMap,
    pub events: &'a EventRecorder,
    pub opts: &'a RuntimeOptions,
    /// Set for a shadow revision: its writes are dry runs compared into the ledger, it records
    /// no Events, and its workers follow the live revision's queue.
    pub shadow: Option<&'a ShadowOf>,
}

/// What a shadow revision is built against.
pub(crate) struct ShadowOf {
    pub ledger: Arc<ShadowLedger>,
    /// The live revision's queue: a key is reconciled only once the live one is done with it.
    pub live_queue: PluginQueue,
    /// The link the live revision hands keys on through and notes its writes in.
    pub follow: Arc<Follow>,
    /// Where its deliveries, reconciles and dry runs run: low-priority threads
    /// ([`Background`](crate::background::Background)).
    pub runtime: tokio::runtime::Handle,
}

/// One informer registration of a plugin, kept across its revisions. Its identity is the
/// informer and which of the manifest's watches on that informer it is (a manifest may watch
/// one informer twice, e.g. with two sets of indexes).
struct Registered {
    id: u32,
    key: InformerKey,
    nth: u32,
    reg: FactoryRegistration<CountingLw>,
}

/// One watch of a revision's manifest, placed: its informer, its registration's id, and
/// whether that registration exists already.
struct Planned {
    id: u32,
    key: InformerKey,
    nth: u32,
    existing: bool,
    api_version: String,
    kind: String,
    res: ApiResource,
    namespace: Option<String>,
    label_selector: Option<String>,
    field_selector: Option<String>,
    indexes: Vec<IndexSpec>,
    resync: Duration,
}

/// The parts of a revision that only its end takes apart.
struct Running {
    status: Arc<RunningStatus>,
    workers: Vec<JoinHandle<()>>,
    sync_task: JoinHandle<()>,
    replay: ReplayTask,
    /// Turned true when a newer revision takes over; dropping it retires the workers too.
    retire: watch::Sender<bool>,
}

/// A revision's task replaying gained keys ([`replay_on_gain`]).
struct ReplayTask {
    /// Dropped to stop the task at its next wait.
    stop: Option<oneshot::Sender<()>>,
    /// Ends with the task's subscription to gains, and the gains it has not read yet.
    task: JoinHandle<broadcast::Receiver<Gain>>,
}

impl ReplayTask {
    /// Stops the task once the replay it may be doing is done, and returns its subscription
    /// for the next revision: a gain published before the next revision subscribed, and not
    /// yet read here, is still in it (an abort would lose it).
    async fn hand_over(&mut self) -> Gains {
        self.stop.take();
        match (&mut self.task).await {
            Ok(gains) => Gains::Handed(gains),
            Err(_) => Gains::Lost,
        }
    }
}

/// Which subscription to gains a revision's replay task reads.
enum Gains {
    /// Its own, subscribed as it was built: the plugin's first revision.
    Own,
    /// The previous revision's, handed over by an upgrade.
    Handed(broadcast::Receiver<Gain>),
    /// The previous revision's task failed, and what it had not read with it.
    Lost,
}

/// What the plugin keeps across revisions, taken apart only when it stops.
struct Parts {
    regs: Vec<Registered>,
    revision: Running,
    /// Registration ids are never reused within a plugin.
    next_id: u32,
}

/// One running plugin.
pub struct RunningPlugin {
    name: String,
    queue: PluginQueue,
    /// Its shadow revision's queue, while one runs.
    mirror: Mirror,
    stats: Arc<ReconcileStats>,
    queue_refusals: Arc<QueueRefusals>,
    own: PluginOwnership,
    /// The last revision that failed to replace the running one.
    failure: Arc<Mutex<Option<RevisionFailure>>>,
    /// Its last revisions, newest first.
    history: Arc<Mutex<VecDeque<RevisionRecord>>>,
    route: Arc<Route>,
    /// The running revision's view (what the accessors and the status endpoints read).
    current: Mutex<Arc<RunningStatus>>,
    /// The spec the running revision was started from.
    spec: Mutex<PluginSpec>,
    /// Held across a switch of revisions (one at a time) and taken when the plugin stops.
    parts: tokio::sync::Mutex<Option<Parts>>,
    /// How many revisions have run: 1 for the first.
    revisions: std::sync::atomic::AtomicU64,
}

impl RunningPlugin {
    /// The running revision's plugin.
    pub fn plugin(&self) -> Plugin {
        self.current.lock().plugin.clone()
    }
    /// The plugin's name (its manifest's; the same in every revision).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Its workqueue (the same in every revision).
    pub fn queue(&self) -> &PluginQueue {
        &self.queue
    }
    /// Its reconcile counters, over every revision.
    pub fn reconcile_stats(&self) -> &ReconcileStats {
        &self.stats
    }
    /// The running revision's dispatcher and its counters.
    pub fn dispatcher(&self) -> Arc<Dispatcher> {
        self.current.lock().dispatcher.clone()
    }
    /// A shared handle on the running revision's dispatcher.
    pub fn dispatcher_handle(&self) -> Arc<Dispatcher> {
        self.dispatcher()
    }
    /// Whether every one of its handlers has seen its informer's initial list.
    pub fn has_synced(&self) -> bool {
        self.current
            .lock()
            .watches
            .iter()
            .all(|w| w.reg.has_synced())
    }
    /// Whether the running revision's workers have been let through the cache-sync gate.
    pub fn workers_started(&self) -> bool {
        self.current.lock().synced.is_open()
    }
    /// The running revision's health gate (quarantine state).
    pub fn health(&self) -> Arc<Health> {
        self.current.lock().health.clone()
    }
    /// The spec the running revision was started from.
    pub fn spec(&self) -> PluginSpec {
        self.spec.lock().clone()
    }
    /// How many revisions have run (1 until the first upgrade).
    pub fn revisions(&self) -> u64 {
        self.revisions.load(std::sync::atomic::Ordering::Relaxed)
    }
    /// The last revision that failed to replace the running one, as (module, error), until an
    /// upgrade succeeds.
    pub fn failed_revision(&self) -> Option<(std::path::PathBuf, String)> {
        self.failure
            .lock()
            .as_ref()
            .map(|f| (f.module.clone(), f.error.clone()))
    }

    /// Notes a revision that failed to replace the running one (`/statusz` shows it until an
    /// upgrade succeeds).
    pub(crate) fn failed(&self, module: &std::path::Path, error: String) {
        *self.failure.lock() = Some(RevisionFailure {
            module: module.to_path_buf(),
            error,
            at: std::time::SystemTime::now(),
        });
    }
    /// Its reconcile counters, shared (for a status view that outlives a borrow).
    pub(crate) fn stats_shared(&self) -> Arc<ReconcileStats> {
        self.stats.clone()
    }

    /// Hands every key its workers reconcile on to `shadow` from now on (none: to no one).
    pub(crate) fn set_mirror(&self, shadow: Option<Arc<Follow>>) {
        *self.mirror.lock() = shadow;
    }

    pub(crate) fn status(&self) -> Arc<RunningStatus> {
        self.current.lock().clone()
    }
    pub(crate) fn workers(&self) -> usize {
        self.status().plugin.manifest().workers.max(1) as usize
    }

    /// Starts the first revision of `loaded`: its queue named after it, its watches
    /// registered on the shared informers, its workers behind the cache-sync gate.
    pub(crate) fn start(
        env: &Env<'_>,
        queue: PluginQueue,
        spec: PluginSpec,
        loaded: LoadedPlugin,
        resources: &Resources,
    ) -> Result<Self, RevisionError> {
        let name = loaded.name().to_owned();
        let own = env.opts.ownership.for_plugin(&name, spec.leader_only);
        let stats = Arc::new(ReconcileStats::default());
        let queue_refusals = Arc::new(QueueRefusals::default());
        let mut next_id = 0;
        let plan = plan(
            &loaded,
            resources,
            spec.namespace.as_deref(),
            &[],
            &mut next_id,
        );
        let failure = Arc::new(Mutex::new(None));
        let history = Arc::new(Mutex::new(VecDeque::new()));
        let mirror = Mirror::default();
        let shared = Shared {
            queue: &queue,
            stats: &stats,
            queue_refusals: &queue_refusals,
            own: &own,
            failure: &failure,
            history: &history,
            mirror: &mirror,
            revision: 1,
        };
        let built = build(
            env,
            &shared,
            loaded,
            resources,
            &plan,
            spec.namespace.as_deref(),
        )?;
        let route = Route::on(
            built.dispatcher.clone(),
            env.shadow.map(|s| s.runtime.clone()),
        );
        let mut regs = Vec::new();
        register(env, &route, &plan, &mut regs).inspect_err(|_| built.synced.close())?;
        let revision = built.run(&shared, &plan, &regs, Gains::Own);
        let current = Mutex::new(revision.status.clone());
        Ok(RunningPlugin {
            name,
            queue,
            mirror,
            stats,
            queue_refusals,
            own,
            failure,
            history,
            route,
            current,
            spec: Mutex::new(spec),
            parts: tokio::sync::Mutex::new(Some(Parts {
                regs,
                revision,
                next_id,
            })),
            revisions: std::sync::atomic::AtomicU64::new(1),
        })
    }

    /// Switches to a new revision, `loaded` started from `spec`: built and its dispatch
    /// instance instantiated while the running one carries on (a failure leaves it running
    /// untouched), then the route switched once the old dispatcher's delivery in flight is
    /// done, the old workers retired (each finishes the reconcile it holds, `grace` at most,
    /// waited for in the background), the new manifest's extra watches registered and the
    /// dropped ones removed. Pending keys stay queued; nothing is relisted. Returns the old
    /// revision's status, replaced, and how long the switch took (from the moment the new
    /// revision was built and instantiated).
    pub(crate) async fn upgrade(
        &self,
        env: &Env<'_>,
        spec: PluginSpec,
        loaded: LoadedPlugin,
        resources: &Resources,
        grace: Duration,
    ) -> Result<(Arc<RunningStatus>, Duration), RevisionError> {
        let mut guard = self.parts.lock().await;
        let Some(parts) = guard.as_mut() else {
            return Err(RevisionError::Instance(GuestError::Instantiate(
                "the plugin has stopped".into(),
            )));
        };
        let namespace = spec.namespace.as_deref();
        let existing: Vec<_> = parts
            .regs
            .iter()
            .map(|r| (r.id, r.key.clone(), r.nth))
            .collect();
        let mut next_id = parts.next_id;
        let plan = plan(&loaded, resources, namespace, &existing, &mut next_id);
        let revision = self.revisions() + 1;
        let shared = Shared {
            queue: &self.queue,
            stats: &self.stats,
            queue_refusals: &self.queue_refusals,
            own: &self.own,
            failure: &self.failure,
            history: &self.history,
            mirror: &self.mirror,
            revision,
        };
        let built = build(env, &shared, loaded, resources, &plan, namespace)?;
        // Instantiated now: a component that traps or runs out of its limits while starting
        // fails the upgrade, not the notifications after it.
        if let Err(e) = built.dispatcher.warm().await {
            built.synced.close();
            return Err(e.into());
        }
        parts.next_id = next_id;
        // Existing registrations' caches are read by the new revision from its first call.
        for p in plan.iter().filter(|p| p.existing) {
            if let Some(r) = parts.regs.iter().find(|r| r.id == p.id) {
                built.add_to_lister(p, r.reg.informer());
            }
        }
        let started = std::time::Instant::now();
        // The old workers retire before the route moves: from the first notification the new
        // revision handles, the old one takes no key (each worker finishes the one it holds).
        let _ = parts.revision.retire.send(true);
        let old = self.route.switch(built.dispatcher.clone()).await;
        parts.revision.sync_task.abort();
        let gains = parts.revision.replay.hand_over().await;
        // Registered after the switch, so that their initial adds reach the new revision.
        let registered = register(env, &self.route, &plan, &mut parts.regs);
        parts.regs.retain(|r| plan.iter().any(|p| p.id == r.id));
        if let Err(e) = registered {
            // The route already leads to the new revision: it runs without the watch that
            // failed, as a plugin whose informer stopped would.
            tracing::error!(plugin = %self.name, error = %e, "upgrade: a new watch could not be registered");
        }
        let revision = built.run(&shared, &plan, &parts.regs, gains);
        let old_revision = std::mem::replace(&mut parts.revision, revision);
        let status = parts.revision.status.clone();
        drop(guard);
        let old_status = std::mem::replace(&mut *self.current.lock(), status);
        *self.spec.lock() = spec;
        self.revisions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *self.failure.lock() = None;
        let took = started.elapsed();
        tracing::info!(plugin = %self.name, switch_us = took.as_micros() as u64,
            delivered_by_old = old.delivered.load(std::sync::atomic::Ordering::Relaxed),
            "switched to the new revision");
        let name = self.name.clone();
        tokio::spawn(async move {
            if !drain_workers(old_revision.workers, grace).await {
                tracing::warn!(plugin = %name, ?grace,
                    "the old revision's reconciles outlasted the grace period; abandoned, their keys queued again for the running revision");
            }
            old_revision.status.health.close();
        });
        Ok((old_status, took))
    }

    /// Stops the plugin: its registrations removed (informers no other plugin uses stop and
    /// free their caches), its queue drained until `deadline` (reconciles in flight and queued
    /// finish), its workers ended. Returns whether everything finished in time.
    pub(crate) async fn stop(&self, deadline: tokio::time::Instant) -> bool {
        let status = self.status();
        // Workers that never got past the gate would reconcile on a partial cache.
        status.synced.close();
        if status.health.is_quarantined() {
            // Its workers wait at the health gate and would only sit out the grace period.
            tracing::warn!(plugin = %self.name, queued = self.queue.len(),
                "plugin quarantined as it stops; its queued keys are not reconciled");
            status.health.close();
        }
        let Some(parts) = self.parts.lock().await.take() else {
            return true;
        };
        let Parts { regs, revision, .. } = parts;
        revision.sync_task.abort();
        revision.replay.task.abort();
        drop(regs);
        let mut clean = tokio::time::timeout_at(deadline, self.queue.shutdown_with_drain())
            .await
            .is_ok();
        if !clean {
            // The caller reports the cut-off once, for all plugins.
            tracing::debug!(plugin = %self.name,
                "grace period over with reconciles in flight; they were abandoned");
        }
        self.queue.shutdown();
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        clean &= drain_workers(revision.workers, remaining).await;
        // Releases a dispatcher still waiting at the gate.
        revision.status.health.close();
        drop(revision.retire);
        clean
    }
}

/// Waits for `workers` to end, `within` at most; aborts the rest (a worker aborted inside a
/// reconcile queues its key again as it is dropped: see `reconcile::Held`). Whether all ended.
async fn drain_workers(workers: Vec<JoinHandle<()>>, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    let mut clean = true;
    for worker in workers {
        let abort = worker.abort_handle();
        if tokio::time::timeout_at(deadline, worker).await.is_err() {
            abort.abort();
            clean = false;
        }
    }
    clean
}

/// The plugin's parts a revision shares.
struct Shared<'a> {
    queue: &'a PluginQueue,
    stats: &'a Arc<ReconcileStats>,
    queue_refusals: &'a Arc<QueueRefusals>,
    own: &'a PluginOwnership,
    failure: &'a Arc<Mutex<Option<RevisionFailure>>>,
    history: &'a Arc<Mutex<VecDeque<RevisionRecord>>>,
    /// Where the workers hand each reconciled key on to a shadow revision, when one runs.
    mirror: &'a Mirror,
    /// The number of the revision being built.
    revision: u64,
}

/// Places each watch of `loaded`'s manifest: on the registration of `existing` with the same
/// informer and occurrence, else on a new id from `next_id`.
fn plan(
    loaded: &LoadedPlugin,
    resources: &Resources,
    namespace: Option<&str>,
    existing: &[(u32, InformerKey, u32)],
    next_id: &mut u32,
) -> Vec<Planned> {
    let manifest = loaded.manifest();
    let mut seen: HashMap<InformerKey, u32> = HashMap::new();
    let mut out = Vec::new();
    for w in &manifest.watches {
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
        let nth = seen.entry(key.clone()).or_insert(0);
        let this = *nth;
        *nth += 1;
        let found = existing
            .iter()
            .find(|(_, k, n)| *k == key && *n == this)
            .map(|(id, ..)| *id);
        let id = found.unwrap_or_else(|| {
            let id = *next_id;
            *next_id += 1;
            id
        });
        out.push(Planned {
            id,
            key,
            nth: this,
            existing: found.is_some(),
            api_version: w.api_version.clone(),
            kind: w.kind.clone(),
            res: res.clone(),
            namespace: watch_namespace,
            label_selector: w.label_selector.clone(),
            field_selector: w.field_selector.clone(),
            indexes: w.indexes.clone(),
            // Zero: this plugin asked for no resync (the factory default would apply).
            resync: manifest.resync_period.unwrap_or(Duration::ZERO),
        });
    }
    out
}

/// Registers the planned watches that have no registration yet, each through `route`.
fn register(
    env: &Env<'_>,
    route: &Arc<Route>,
    plan: &[Planned],
    regs: &mut Vec<Registered>,
) -> Result<(), RevisionError> {
    for p in plan.iter().filter(|p| !p.existing) {
        let make_lw = || {
            let mut lw =
                ResourceClient::new(env.client.clone(), p.res.clone(), p.namespace.clone());
            lw.label_selector = p.label_selector.clone();
            lw.field_selector = p.field_selector.clone();
            CountingLw::new(lw, p.key.to_string(), env.lw_counters)
        };
        let reg = env
            .factory
            .add_handler(p.key.clone(), make_lw, route.handler(p.id), Some(p.resync))
            .map_err(|source| RevisionError::Informer {
                key: p.key.to_string(),
                source,
            })?;
        regs.push(Registered {
            id: p.id,
            key: p.key.clone(),
            nth: p.nth,
            reg,
        });
    }
    Ok(())
}

/// A revision built, not yet running: its guest, dispatcher, health, gate, and workers waiting
/// at the gate (dropping it unbuilt retires them).
struct Built {
    plugin: Plugin,
    dispatcher: Arc<Dispatcher>,
    health: Arc<Health>,
    synced: CacheSync,
    lister: Arc<InformerLister>,
    workers: Vec<JoinHandle<()>>,
    retire: watch::Sender<bool>,
    /// Subscribed as the revision is built. An upgrade gives the new revision the previous
    /// one's subscription instead (see [`ReplayTask::hand_over`]).
    gains: broadcast::Receiver<Gain>,
}

/// Activates `loaded` on backends of its own (a lister over its watches, writes confined as
/// its spec says, the plugin's queue) and makes its dispatcher, listening through the planned
/// registrations.
fn build(
    env: &Env<'_>,
    shared: &Shared<'_>,
    loaded: LoadedPlugin,
    resources: &Resources,
    plan: &[Planned],
    namespace: Option<&str>,
) -> Result<Built, RevisionError> {
    let name = loaded.name().to_owned();
    let lister = Arc::new(InformerLister::new());
    let confined = namespace_scope(loaded.manifest(), namespace, |a, k| {
        resources
            .get(&(a.to_string(), k.to_string()))
            .map(|r| r.namespaced)
    });
    let client: Arc<dyn ClientBackend> = match env.shadow {
        None => Arc::new(
            KubeClientBackend::new(env.client.clone(), &name, resources.clone())
                .confined_to(confined)
                .owned_by(shared.own.clone())
                .noting_writes_in(shared.mirror.clone()),
        ),
        Some(s) => Arc::new(
            ShadowClientBackend::new(
                env.client.with_own_connections(),
                &name,
                resources.clone(),
                s.ledger.clone(),
            )
            .confined_to(confined)
            .with_events(env.events.clone())
            .with_lister(lister.clone())
            .following(s.follow.clone()),
        ),
    };
    let events: Arc<dyn EventBackend> = match env.shadow {
        None => Arc::new(PluginEvents::new(env.events.clone(), shared.own.clone())),
        Some(s) => Arc::new(ShadowEvents(s.ledger.clone())),
    };
    let backends = Backends {
        lister: lister.clone(),
        client,
        queue: match env.shadow {
            None => Arc::new(
                WorkqueueBackend::new(shared.queue.clone())
                    .owned_by(shared.own.clone())
                    .bounded(
                        &name,
                        loaded.limits().max_queued_keys,
                        shared.queue_refusals.clone(),
                    ),
            ),
            Some(_) => Arc::new(ShadowQueue),
        },
        events,
    };
    let loaded = if env.shadow.is_some() {
        loaded.as_shadow()
    } else {
        loaded
    };
    let plugin = loaded.activate(backends);
    let health = Arc::new(Health::new(&name, env.opts.quarantine.clone()));
    let dispatcher = Dispatcher::new(
        &plugin,
        health.clone(),
        env.opts.handler_retry.clone(),
        shared.own.clone(),
    )?
    .with_watch_ids(plan.iter().map(|p| p.id).collect());
    let synced = CacheSync::new();
    let (retire, retired) = watch::channel(false);
    let workers = spawn_workers(
        &plugin,
        &WorkerParts {
            queue: shared.queue.clone(),
            stats: shared.stats.clone(),
            health: health.clone(),
            synced: synced.clone(),
            own: shared.own.clone(),
            retire: retired.clone(),
            follows: env.shadow.map(|s| Following {
                live: s.live_queue.clone(),
                follow: s.follow.clone(),
                caches: lister.clone(),
                ledger: s.ledger.clone(),
            }),
            mirror: shared.mirror.clone(),
        },
        &env.shadow
            .map_or_else(tokio::runtime::Handle::current, |s| s.runtime.clone()),
    )?;
    Ok(Built {
        plugin,
        dispatcher,
        health,
        synced,
        lister,
        workers,
        retire,
        gains: shared.own.gains(),
    })
}

impl Built {
    /// Adds the cache of `informer`, the planned watch `p`'s, to the revision's lister.
    fn add_to_lister(&self, p: &Planned, informer: &SharedIndexInformer<CountingLw>) {
        let store = informer.indexer().clone();
        let indexes = register_indexes(&store, &p.indexes);
        self.lister.add_indexed_store(
            &p.api_version,
            &p.kind,
            p.namespace.as_deref(),
            store,
            indexes,
        );
    }

    /// Starts the revision on `regs`: the lister reads their caches, the gate opens once every
    /// planned watch has synced, and the replay task runs, reading `gains`.
    fn run(
        self,
        shared: &Shared<'_>,
        plan: &[Planned],
        regs: &[Registered],
        gains: Gains,
    ) -> Running {
        let name = self.plugin.name().to_owned();
        let mut watches = Vec::new();
        let mut replays = Vec::new();
        for p in plan {
            let Some(r) = regs.iter().find(|r| r.id == p.id) else {
                continue;
            };
            if !p.existing {
                self.add_to_lister(p, r.reg.informer());
            }
            if let Some(handler) = r.reg.registration() {
                replays.push((r.reg.informer().clone(), handler.clone()));
                watches.push(WatchStatus {
                    key: p.key.to_string(),
                    informer: r.reg.informer().clone(),
                    reg: handler.clone(),
                    counters: r.reg.informer().lister_watcher().counters().clone(),
                });
            }
        }
        {
            let mut history = shared.history.lock();
            history.push_front(RevisionRecord {
                revision: shared.revision,
                digest: Arc::from(self.plugin.digest()),
                module: self.plugin.path().to_path_buf(),
                config: Arc::new(self.plugin.config().clone()),
                since: std::time::SystemTime::now(),
            });
            history.truncate(HISTORY);
        }
        let (gains, replay_all) = match gains {
            Gains::Own => (self.gains, false),
            Gains::Handed(handed) => (handed, false),
            Gains::Lost => {
                // What the previous revision had not read yet is lost with it: every key.
                tracing::error!(plugin = %name,
                    "the previous revision's replay task failed; replaying every key");
                (self.gains, true)
            }
        };
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(
            replay_on_gain(
                shared.own.clone(),
                gains,
                self.dispatcher.clone(),
                replays,
                replay_all,
                stopped,
            )
            .instrument(tracing::info_span!("replay", plugin = %name)),
        );
        let sync_task = self.synced.open_when(&name, {
            let handlers: Vec<HandlerRegistration> =
                watches.iter().map(|w| w.reg.clone()).collect();
            move || handlers.iter().all(|h| h.has_synced())
        });
        Running {
            status: Arc::new(RunningStatus {
                plugin: self.plugin,
                stats: shared.stats.clone(),
                dispatcher: self.dispatcher,
                health: self.health,
                watches,
                synced: self.synced,
                queue_refusals: shared.queue_refusals.clone(),
                revision: shared.revision,
                failure: shared.failure.clone(),
                history: shared.history.clone(),
            }),
            workers: self.workers,
            sync_task,
            replay: ReplayTask {
                stop: Some(stop),
                task,
            },
            retire: self.retire,
        }
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
/// ([`SharedIndexInformer::replay`]). `replay_all`: every object first. Ends when `stop`'s
/// sender is dropped, returning `gains` with what it has not read.
async fn replay_on_gain(
    own: PluginOwnership,
    mut gains: broadcast::Receiver<Gain>,
    dispatcher: Arc<Dispatcher>,
    watches: Vec<(SharedIndexInformer<CountingLw>, HandlerRegistration)>,
    replay_all: bool,
    mut stop: oneshot::Receiver<()>,
) -> broadcast::Receiver<Gain> {
    use tokio::sync::broadcast::error::{RecvError, TryRecvError};
    tokio::select! {
        _ = &mut stop => return gains,
        () = crate::perturb::at(crate::perturb::Point::ReplayStarts) => {}
    }
    let replay = |keys: &GainedKeys, why: &str| {
        if keys.is_none() || !own.active() {
            return;
        }
        let mut n = 0;
        for (informer, reg) in &watches {
            n += informer.replay(reg, |o| o.with_key(|k| keys.contains(k)));
        }
        tracing::debug!(objects = n, why, "caches replayed to the handlers");
    };
    if replay_all {
        replay(&GainedKeys::All, "a lost subscription");
    }
    loop {
        let (keys, why) = tokio::select! {
            _ = &mut stop => return gains,
            r = gains.recv() => {
                let mut got = Vec::new();
                let mut lagged = false;
                match r {
                    Ok(g) => got.push(g),
                    Err(RecvError::Lagged(_)) => lagged = true,
                    Err(RecvError::Closed) => return gains,
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
        replay(&keys, why);
    }
}
