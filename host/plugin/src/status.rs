//! What `/readyz`, `/statusz` and `/metrics` say about the plugins: read from shared handles,
//! never from a lock held by the runtime across a call.
//!
//! Why readiness names causes: an operator looking at a pod that never becomes ready needs the
//! informer that has not synced and the last error it met (a 403 from missing RBAC, a refused
//! connection), or the kind a plugin is still waiting for, not "not synced".

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;

use super::cache_sync::CacheSync;
use super::dispatch::Dispatcher;
use super::health::{Health, HealthSnapshot, Phase};
use super::loader::Plugin;
use super::reconcile::{ReconcileStats, RECONCILE_BUCKETS};
use super::watch_counters::{CounterMap, LwCounters};
use kwh_informer::shared::HandlerRegistration;
use kwh_informer::workqueue::Registry;

/// One watch of a running plugin, as readiness reports it.
pub(crate) struct WatchStatus {
    /// The informer's key as displayed (`v1/configmaps|ns|labels|fields`).
    pub key: String,
    pub reg: HandlerRegistration,
    pub counters: Arc<LwCounters>,
}

/// The shared view of one running plugin.
pub(crate) struct RunningStatus {
    pub plugin: Plugin,
    pub stats: Arc<ReconcileStats>,
    pub dispatcher: Arc<Dispatcher>,
    pub health: Arc<Health>,
    pub watches: Vec<WatchStatus>,
    pub synced: CacheSync,
}

impl RunningStatus {
    fn synced(&self) -> bool {
        self.watches.iter().all(|w| w.reg.has_synced())
    }
}

/// A plugin that loaded but cannot start yet: a kind it names is not served (a CRD not
/// installed yet), or the API server did not answer discovery.
pub(crate) struct WaitingStatus {
    pub name: String,
    pub path: PathBuf,
    pub since: SystemTime,
    /// Why it has not started, as of the last attempt.
    pub reason: Mutex<String>,
    pub attempts: std::sync::atomic::AtomicU64,
}

/// A place in the host's list of plugins, in the order they were given.
#[derive(Clone)]
pub(crate) enum Slot {
    Waiting(Arc<WaitingStatus>),
    Running(Arc<RunningStatus>),
}

/// The plugins of one runtime: shared by the runtime, the tasks that start waiting plugins
/// and the ops endpoint.
pub(crate) type Slots = Arc<Mutex<Vec<Slot>>>;

/// What `/metrics` and `/readyz` read: shared handles, cloned out under a short lock.
#[derive(Clone)]
pub struct RuntimeStatus {
    pub(crate) registry: Registry,
    pub(crate) lw_counters: CounterMap,
    pub(crate) slots: Slots,
}

impl RuntimeStatus {
    fn snapshot(&self) -> Vec<Slot> {
        self.slots.lock().clone()
    }

    fn running(&self) -> Vec<Arc<RunningStatus>> {
        self.snapshot()
            .into_iter()
            .filter_map(|s| match s {
                Slot::Running(r) => Some(r),
                Slot::Waiting(_) => None,
            })
            .collect()
    }

    /// Ready when there is at least one plugin, every plugin has started, every handler has
    /// seen its initial list and no plugin is quarantined (a rollout whose new version
    /// quarantines a plugin should stall).
    pub fn is_ready(&self) -> bool {
        self.readiness().0
    }

    /// Readiness and its explanation: `ok`, or one line per reason it is not ready, naming the
    /// plugin and what it waits for: the kind not served yet, each informer not synced with
    /// the last error it met, or the quarantine (why and for how long).
    pub fn readiness(&self) -> (bool, String) {
        let slots = self.snapshot();
        if slots.is_empty() {
            return (false, "no plugin running\n".into());
        }
        let mut out = String::new();
        for slot in &slots {
            let p = match slot {
                Slot::Waiting(w) => {
                    let _ = writeln!(out, "plugin {}: not started: {}", w.name, w.reason.lock());
                    continue;
                }
                Slot::Running(p) => p,
            };
            let name = p.plugin.name();
            for w in p.watches.iter().filter(|w| !w.reg.has_synced()) {
                let _ = write!(out, "plugin {name}: informer {} not synced", w.key);
                if let Some(e) = w.counters.last_error() {
                    let _ = write!(out, ": last error: {e}");
                }
                out.push('\n');
            }
            if p.synced() && !p.synced.is_open() {
                let _ = writeln!(
                    out,
                    "plugin {name}: caches synced, reconcile workers starting"
                );
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
        let unix = |t: SystemTime| {
            t.duration_since(std::time::UNIX_EPOCH)
                .ok()
                .map(|d| d.as_secs())
        };
        let plugins: Vec<_> = self
            .snapshot()
            .iter()
            .map(|slot| match slot {
                Slot::Waiting(w) => serde_json::json!({
                    "name": w.name,
                    "file": w.path.display().to_string(),
                    "state": "waiting",
                    "reason": *w.reason.lock(),
                    "waitingSinceUnix": unix(w.since),
                    "startAttempts": w.attempts.load(Ordering::Relaxed),
                    "informersSynced": false,
                    "cachesSynced": false,
                }),
                Slot::Running(p) => {
                    let h: HealthSnapshot = p.health.snapshot();
                    let informers: Vec<_> = p
                        .watches
                        .iter()
                        .map(|w| {
                            serde_json::json!({
                                "informer": w.key,
                                "synced": w.reg.has_synced(),
                                "lastError": w.counters.last_error(),
                            })
                        })
                        .collect();
                    serde_json::json!({
                        "name": p.plugin.name(),
                        "file": p.plugin.path().display().to_string(),
                        "state": h.phase.as_str(),
                        "reason": h.reason,
                        "quarantinedSinceUnix": h.since.and_then(unix),
                        "probationInSeconds": h.remaining.map(|d| d.as_secs_f64()),
                        "quarantines": h.quarantines,
                        "informersSynced": p.synced(),
                        "cachesSynced": p.synced.is_open(),
                        "informers": informers,
                        "reconciles": p.stats.total.load(Ordering::Relaxed),
                        "reconcileErrors": p.stats.errors.load(Ordering::Relaxed),
                        "notificationsDropped": p.dispatcher.dropped.load(Ordering::Relaxed),
                        "instantiations": p.plugin.stats().instantiations.load(Ordering::Relaxed),
                    })
                }
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
        let plugins = self.running();
        type Get = fn(&RunningStatus) -> u64;
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
            for p in &plugins {
                let _ = writeln!(out, "{name}{{plugin=\"{}\"}} {}", p.plugin.name(), get(p));
            }
        }
        let name = "plugin_reconcile_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Duration of reconcile calls.\n# TYPE {name} histogram"
        );
        for p in &plugins {
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
        type Gauge = fn(&RunningStatus) -> bool;
        let gauges: [(&str, &str, Gauge); 3] = [
            (
                "plugin_quarantined",
                "Whether the plugin is quarantined or on probation (1) or running (0).",
                |p| p.health.is_quarantined(),
            ),
            (
                "plugin_informers_synced",
                "Whether all of a plugin's informers have synced.",
                RunningStatus::synced,
            ),
            (
                "plugin_workers_started",
                "Whether the plugin's reconcile workers have passed the cache-sync gate.",
                |p| p.synced.is_open(),
            ),
        ];
        for (name, help, get) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for p in &plugins {
                let _ = writeln!(
                    out,
                    "{name}{{plugin=\"{}\"}} {}",
                    p.plugin.name(),
                    u8::from(get(p))
                );
            }
        }
        let name = "plugin_waiting_to_start";
        let _ = writeln!(
            out,
            "# HELP {name} Whether the plugin waits for a kind to be served or for the API server (1).\n# TYPE {name} gauge"
        );
        for slot in self.snapshot() {
            let (plugin, waiting) = match &slot {
                Slot::Waiting(w) => (w.name.as_str(), 1),
                Slot::Running(p) => (p.plugin.name(), 0),
            };
            let _ = writeln!(out, "{name}{{plugin=\"{plugin}\"}} {waiting}");
        }
        let informers: Vec<_> = self
            .lw_counters
            .lock()
            .iter()
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect();
        type Count = fn(&LwCounters) -> u64;
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
