//! Running plugins: load, resolve kinds by discovery, wire each plugin to the shared informers,
//! its workqueue and the API client, and stop them all gracefully.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::backend::Backends;
use super::backends::{InformerLister, KubeClientBackend, WorkqueueBackend};
use super::dispatch::{Dispatcher, RetryPolicy};
use super::engine::PluginEngine;
use super::health::{Health, HealthSnapshot, Phase, QuarantinePolicy};
use super::index::register as register_indexes;
use super::instance::{GuestError, Limits};
use super::loader::{LoadError, LoadedPlugin, Plugin};
use super::rbac::namespace_scope;
use super::reconcile::{spawn_workers, ReconcileStats, RECONCILE_BUCKETS};
use super::watch_counters::{CounterMap, CountingLw};
use crate::informer::factory::{FactoryRegistration, InformerKey, SharedInformerFactory};
use crate::informer::processor::PanicPolicy;
use crate::informer::shared::{InformerError, InformerOptions};
use crate::kube::{ApiResource, Client, Discovery, ResourceClient};
use crate::workqueue::{
    default_controller_rate_limiter, MetricsError, RateLimitingQueue, Registry,
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
        cause: Box<crate::kube::Error>,
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

/// Host-wide settings of the plugin runtime.
#[derive(Debug, Clone, Default)]
pub struct RuntimeOptions {
    /// Sandbox limits applied to every plugin.
    pub limits: Limits,
    /// Restricts watches that name no namespace to this one (namespaced kinds only).
    pub namespace: Option<String>,
    /// Stop at the first plugin that fails to start.
    pub fail_fast: bool,
    /// When a plugin whose instances keep failing is quarantined, and for how long.
    pub quarantine: QuarantinePolicy,
    /// How a notification whose handler failed in the sandbox is retried.
    pub handler_retry: RetryPolicy,
}

/// One running plugin.
pub struct RunningPlugin {
    plugin: Plugin,
    queue: RateLimitingQueue<String>,
    regs: Vec<FactoryRegistration<CountingLw>>,
    workers: Vec<JoinHandle<()>>,
    dispatcher: Arc<Dispatcher>,
    stats: Arc<ReconcileStats>,
    health: Arc<Health>,
}

impl RunningPlugin {
    /// The plugin.
    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }
    /// Its workqueue.
    pub fn queue(&self) -> &RateLimitingQueue<String> {
        &self.queue
    }
    /// Its reconcile counters.
    pub fn reconcile_stats(&self) -> &ReconcileStats {
        &self.stats
    }
    /// Its dispatcher counters.
    pub fn dispatcher(&self) -> &Dispatcher {
        &self.dispatcher
    }
    /// A shared handle on its dispatcher (counters outliving a borrow of the runtime).
    pub fn dispatcher_handle(&self) -> Arc<Dispatcher> {
        self.dispatcher.clone()
    }
    /// Whether every one of its handlers has seen its informer's initial list.
    pub fn has_synced(&self) -> bool {
        self.regs.iter().all(FactoryRegistration::has_synced)
    }
    /// Its health gate (quarantine state).
    pub fn health(&self) -> &Health {
        &self.health
    }
}

/// The plugins of one host process, sharing one informer factory and metrics registry.
pub struct PluginRuntime {
    engine: PluginEngine,
    client: Client,
    discovery: Arc<Discovery>,
    factory: SharedInformerFactory<CountingLw>,
    registry: Registry,
    lw_counters: CounterMap,
    opts: RuntimeOptions,
    plugins: Vec<RunningPlugin>,
}

impl PluginRuntime {
    /// A runtime with no plugins yet. Must be called inside a tokio runtime.
    pub fn new(engine: PluginEngine, client: Client, opts: RuntimeOptions) -> Self {
        PluginRuntime {
            engine,
            discovery: Arc::new(Discovery::new(client.clone())),
            client,
            factory: SharedInformerFactory::new(InformerOptions {
                // The resync check period of shared informers: plugins that want a shorter
                // resync lower it while the informer is new; 0 would disable resync entirely.
                resync_period: INFORMER_RESYNC_CHECK,
                // Plugin dispatchers turn guest faults into errors; a panic would be a host
                // bug in one plugin's path, and must not stop every other plugin.
                handler_panics: PanicPolicy::Skip,
                ..InformerOptions::default()
            }),
            registry: Registry::new(),
            lw_counters: CounterMap::default(),
            opts,
            plugins: Vec::new(),
        }
    }

    /// Loads and starts every file. A plugin that fails is logged as one line and skipped,
    /// unless `fail_fast`, when the first failure is returned. Returns the failures.
    pub async fn start_all(&mut self, paths: &[PathBuf]) -> Result<Vec<StartError>, StartError> {
        let mut failed = Vec::new();
        for path in paths {
            match self.start(path).await {
                Ok(()) => {}
                Err(e) if self.opts.fail_fast => return Err(e),
                Err(e) => {
                    tracing::error!("{e}");
                    failed.push(e);
                }
            }
        }
        Ok(failed)
    }

    /// Loads the plugin at `path` and starts its watches and workers.
    pub async fn start(&mut self, path: &Path) -> Result<(), StartError> {
        let loaded = self.engine.load(path, self.opts.limits.clone()).await?;
        let resources = self.resolve(&loaded).await?;
        let running = self.wire(loaded, &resources)?;
        tracing::info!(plugin = %running.plugin.name(), file = %path.display(),
            workers = running.workers.len(), "plugin started");
        self.plugins.push(running);
        Ok(())
    }

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

    fn wire(
        &self,
        loaded: LoadedPlugin,
        resources: &HashMap<(String, String), ApiResource>,
    ) -> Result<RunningPlugin, StartError> {
        let path = loaded.path().to_path_buf();
        let name = loaded.name().to_string();
        let queue = RateLimitingQueue::named(
            &name,
            &self.registry,
            default_controller_rate_limiter::<String>(),
        )
        .map_err(|source| StartError::Queue {
            path: path.clone(),
            source,
        })?;
        let lister = Arc::new(InformerLister::new());
        let backends = Backends {
            lister: lister.clone(),
            client: Arc::new(
                KubeClientBackend::new(self.client.clone(), &name, resources.clone()).confined_to(
                    namespace_scope(loaded.manifest(), self.opts.namespace.as_deref(), |a, k| {
                        resources
                            .get(&(a.to_string(), k.to_string()))
                            .map(|r| r.namespaced)
                    }),
                ),
            ),
            queue: Arc::new(WorkqueueBackend::new(queue.clone())),
        };
        let plugin = loaded.activate(backends);
        let instance_err = |source| StartError::Instance {
            path: path.clone(),
            source,
        };
        let health = Arc::new(Health::new(&name, self.opts.quarantine.clone()));
        let dispatcher = Dispatcher::new(&plugin, health.clone(), self.opts.handler_retry.clone())
            .map_err(instance_err)?;
        let stats = Arc::new(ReconcileStats::default());
        let workers = spawn_workers(&plugin, &queue, &stats, &health).map_err(instance_err)?;
        let mut regs = Vec::new();
        let manifest = plugin.manifest().clone();
        for (i, w) in manifest.watches.iter().enumerate() {
            let Some(res) = resources.get(&(w.api_version.clone(), w.kind.clone())) else {
                continue;
            };
            let namespace = if res.namespaced {
                w.namespace.clone().or_else(|| self.opts.namespace.clone())
            } else {
                None
            };
            let key = InformerKey::new(
                &format!("{}/{}", res.api_version, res.plural),
                namespace.as_deref(),
                w.label_selector.as_deref(),
                w.field_selector.as_deref(),
            );
            let make_lw = || {
                let mut lw =
                    ResourceClient::new(self.client.clone(), res.clone(), namespace.clone());
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
                    for h in &workers {
                        h.abort();
                    }
                    StartError::Informer {
                        path: path.clone(),
                        key: key.to_string(),
                        source,
                    }
                })?;
            let store = reg.informer().indexer().clone();
            let indexes = register_indexes(&store, &w.indexes);
            lister.add_indexed_store(
                &w.api_version,
                &w.kind,
                namespace.as_deref(),
                store,
                indexes,
            );
            regs.push(reg);
        }
        Ok(RunningPlugin {
            plugin,
            queue,
            regs,
            workers,
            dispatcher,
            stats,
            health,
        })
    }

    /// The running plugins.
    pub fn plugins(&self) -> &[RunningPlugin] {
        &self.plugins
    }

    /// The informer factory (shared watches).
    pub fn factory(&self) -> &SharedInformerFactory<CountingLw> {
        &self.factory
    }

    /// Whether every plugin's informers have delivered their initial lists and no plugin is
    /// quarantined.
    pub fn is_ready(&self) -> bool {
        !self.plugins.is_empty()
            && self
                .plugins
                .iter()
                .all(|p| p.has_synced() && !p.health.is_quarantined())
    }

    /// A cheap handle for the metrics and health endpoints.
    pub fn status(&self) -> RuntimeStatus {
        RuntimeStatus {
            registry: self.registry.clone(),
            lw_counters: self.lw_counters.clone(),
            plugins: self
                .plugins
                .iter()
                .map(|p| PluginStatus {
                    plugin: p.plugin.clone(),
                    stats: p.stats.clone(),
                    dispatcher: p.dispatcher.clone(),
                    health: p.health.clone(),
                    synced: p
                        .regs
                        .iter()
                        .filter_map(|r| r.registration().cloned())
                        .collect(),
                })
                .collect::<Vec<_>>()
                .into(),
        }
    }

    /// Stops watches, lets in-flight and queued reconciles finish within `grace`, then stops
    /// the workers. Returns whether everything finished in time.
    pub async fn shutdown(self, grace: Duration) -> bool {
        tracing::info!(?grace, "stopping watches and draining workqueues");
        self.factory.shutdown();
        let deadline = tokio::time::Instant::now() + grace;
        let mut clean = true;
        for p in &self.plugins {
            if p.health.is_quarantined() {
                // Its workers wait at the health gate and would only sit out the grace period.
                tracing::warn!(plugin = %p.plugin.name(), queued = p.queue.len(),
                    "plugin quarantined at shutdown; its queued keys are not reconciled");
                p.health.close();
            }
        }
        for p in self.plugins {
            drop(p.regs);
            let drained = tokio::time::timeout_at(deadline, p.queue.shutdown_with_drain())
                .await
                .is_ok();
            p.queue.shutdown();
            for w in p.workers {
                let abort = w.abort_handle();
                if tokio::time::timeout_at(deadline, w).await.is_err() {
                    abort.abort();
                    clean = false;
                }
            }
            // Releases a dispatcher still waiting at the gate.
            p.health.close();
            if !drained {
                // The caller reports the cut-off once, for all plugins (it returns false).
                tracing::debug!(plugin = %p.plugin.name(), ?grace,
                    "grace period over with reconciles in flight; they were abandoned");
                clean = false;
            }
        }
        clean
    }
}

struct PluginStatus {
    plugin: Plugin,
    stats: Arc<ReconcileStats>,
    dispatcher: Arc<Dispatcher>,
    health: Arc<Health>,
    synced: Vec<crate::informer::shared::HandlerRegistration>,
}

impl PluginStatus {
    fn synced(&self) -> bool {
        self.synced.iter().all(|r| r.has_synced())
    }
}

/// What `/metrics` and `/readyz` read: shared handles, no lock on the runtime.
#[derive(Clone)]
pub struct RuntimeStatus {
    registry: Registry,
    lw_counters: CounterMap,
    plugins: Arc<[PluginStatus]>,
}

impl RuntimeStatus {
    /// Ready when there is at least one plugin, every handler has seen its initial list and no
    /// plugin is quarantined (a rollout whose new version quarantines a plugin should stall).
    pub fn is_ready(&self) -> bool {
        self.readiness().0
    }

    /// Readiness and its explanation: `ok`, or one line per reason it is not ready, naming the
    /// plugin (and, for a quarantine, why and for how long).
    pub fn readiness(&self) -> (bool, String) {
        if self.plugins.is_empty() {
            return (false, "no plugin running\n".into());
        }
        let mut out = String::new();
        for p in self.plugins.iter() {
            let name = p.plugin.name();
            if !p.synced() {
                let _ = writeln!(out, "plugin {name}: informers not synced");
            }
            let h = p.health.snapshot();
            if h.phase != Phase::Running {
                let _ = write!(out, "plugin {name}: {}", h.phase.as_str());
                if let Some(r) = &h.reason {
                    let _ = write!(out, " ({r})");
                }
                if let Some(left) = h.remaining {
                    let _ = write!(out, "; probation in {:.1}s", left.as_secs_f64());
                }
                out.push('\n');
            }
        }
        if out.is_empty() {
            (true, "ok\n".into())
        } else {
            (false, out)
        }
    }

    /// The `/statusz` document: one entry per plugin with its state, quarantine details,
    /// informer sync and a few counters, as JSON.
    pub fn render_status(&self) -> String {
        let plugins: Vec<_> = self
            .plugins
            .iter()
            .map(|p| {
                let h: HealthSnapshot = p.health.snapshot();
                let since = h.since.and_then(|t| {
                    t.duration_since(std::time::UNIX_EPOCH)
                        .ok()
                        .map(|d| d.as_secs())
                });
                serde_json::json!({
                    "name": p.plugin.name(),
                    "file": p.plugin.path().display().to_string(),
                    "state": h.phase.as_str(),
                    "reason": h.reason,
                    "quarantinedSinceUnix": since,
                    "probationInSeconds": h.remaining.map(|d| d.as_secs_f64()),
                    "quarantines": h.quarantines,
                    "informersSynced": p.synced(),
                    "reconciles": p.stats.total.load(Ordering::Relaxed),
                    "reconcileErrors": p.stats.errors.load(Ordering::Relaxed),
                    "notificationsDropped": p.dispatcher.dropped.load(Ordering::Relaxed),
                    "instantiations": p.plugin.stats().instantiations.load(Ordering::Relaxed),
                })
            })
            .collect();
        let (ready, _) = self.readiness();
        let doc = serde_json::json!({ "ready": ready, "plugins": plugins });
        let mut s = doc.to_string();
        s.push('\n');
        s
    }

    /// The Prometheus text exposition: client-go workqueue metrics (one queue per plugin, named
    /// after it), then reconcile and sandbox counters labelled by plugin.
    pub fn render_metrics(&self) -> String {
        let mut out = self.registry.render();
        type Get = fn(&PluginStatus) -> u64;
        let counters: [(&str, &str, Get); 11] = [
            ("plugin_reconcile_total", "Reconcile calls.", |p| {
                p.stats.total.load(Ordering::Relaxed)
            }),
            (
                "plugin_reconcile_errors_total",
                "Reconcile calls that failed (guest error or sandbox failure).",
                |p| p.stats.errors.load(Ordering::Relaxed),
            ),
            (
                "plugin_reconcile_requeue_after_total",
                "Reconcile calls that asked to be requeued after a delay.",
                |p| p.stats.requeue_after.load(Ordering::Relaxed),
            ),
            (
                "plugin_guest_traps_total",
                "Guest calls that trapped.",
                |p| p.plugin.stats().traps.load(Ordering::Relaxed),
            ),
            (
                "plugin_guest_deadline_hits_total",
                "Guest calls stopped at their deadline.",
                |p| p.plugin.stats().deadline_hits.load(Ordering::Relaxed),
            ),
            (
                "plugin_guest_memory_exhaustions_total",
                "Guest calls stopped at the memory cap.",
                |p| p.plugin.stats().memory_exhaustions.load(Ordering::Relaxed),
            ),
            (
                "plugin_instantiations_total",
                "Guest instances created (first ones and replacements).",
                |p| p.plugin.stats().instantiations.load(Ordering::Relaxed),
            ),
            (
                "plugin_notifications_total",
                "Informer notifications delivered to the guest's handlers.",
                |p| p.dispatcher.delivered.load(Ordering::Relaxed),
            ),
            (
                "plugin_notification_retries_total",
                "Handler calls retried on a fresh instance after a sandbox failure.",
                |p| p.dispatcher.retries.load(Ordering::Relaxed),
            ),
            (
                "plugin_notifications_dropped_total",
                "Notifications dropped after every handler attempt failed.",
                |p| p.dispatcher.dropped.load(Ordering::Relaxed),
            ),
            (
                "plugin_quarantines_total",
                "Times the plugin was quarantined (repeated instance failures, failed probation).",
                |p| p.health.quarantines(),
            ),
        ];
        for (name, help, get) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for p in self.plugins.iter() {
                let _ = writeln!(out, "{name}{{plugin=\"{}\"}} {}", p.plugin.name(), get(p));
            }
        }
        let name = "plugin_reconcile_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Duration of reconcile calls.\n# TYPE {name} histogram"
        );
        for p in self.plugins.iter() {
            let plugin = p.plugin.name();
            let (buckets, sum) = p.stats.histogram();
            for (bound, n) in RECONCILE_BUCKETS.iter().zip(&buckets) {
                let _ = writeln!(
                    out,
                    "{name}_bucket{{plugin=\"{plugin}\",le=\"{bound}\"}} {n}"
                );
            }
            let count = buckets.last().copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "{name}_bucket{{plugin=\"{plugin}\",le=\"+Inf\"}} {count}"
            );
            let _ = writeln!(out, "{name}_sum{{plugin=\"{plugin}\"}} {sum}");
            let _ = writeln!(out, "{name}_count{{plugin=\"{plugin}\"}} {count}");
        }
        let _ = writeln!(
            out,
            "# HELP plugin_quarantined Whether the plugin is quarantined or on probation (1) or running (0).\n# TYPE plugin_quarantined gauge"
        );
        for p in self.plugins.iter() {
            let _ = writeln!(
                out,
                "plugin_quarantined{{plugin=\"{}\"}} {}",
                p.plugin.name(),
                u8::from(p.health.is_quarantined())
            );
        }
        let _ = writeln!(
            out,
            "# HELP plugin_informers_synced Whether all of a plugin's informers have synced.\n# TYPE plugin_informers_synced gauge"
        );
        for p in self.plugins.iter() {
            let synced = p.synced.iter().all(|r| r.has_synced());
            let _ = writeln!(
                out,
                "plugin_informers_synced{{plugin=\"{}\"}} {}",
                p.plugin.name(),
                u8::from(synced)
            );
        }
        let informers: Vec<_> = self
            .lw_counters
            .lock()
            .iter()
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect();
        type Count = fn(&super::watch_counters::LwCounters) -> u64;
        let informer_counters: [(&str, &str, Count); 2] = [
            (
                "informer_relists_total",
                "Full lists after an informer's first one (410 Gone, errors, restarts).",
                |c| c.relists(),
            ),
            (
                "informer_watch_restarts_total",
                "Watch requests after an informer's first one.",
                |c| c.watch_restarts(),
            ),
        ];
        for (name, help, get) in informer_counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (key, c) in &informers {
                let key = key.replace('\\', "\\\\").replace('"', "\\\"");
                let _ = writeln!(out, "{name}{{informer=\"{key}\"}} {}", get(c));
            }
        }
        out
    }
}
