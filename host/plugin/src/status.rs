//! What `/readyz`, `/statusz` and `/metrics` say about the plugins: read from shared handles,
//! never from a lock held by the runtime across a call.
//!
//! Why readiness names causes: an operator looking at a pod that never becomes ready needs the
//! informer that has not synced and the last error it met (a 403 from missing RBAC, a refused
//! connection), or the kind a plugin is still waiting for, not "not synced".

use std::fmt::{self, Write as _};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

use super::backend::shadow::{Outcome, ShadowLedger};
use super::backend::workqueue::QueueRefusals;
use super::cache_sync::CacheSync;
use super::dispatch::Dispatcher;
use super::engine::PluginEngine;
use super::health::{Health, HealthSnapshot, Phase};
use super::instance::Limits;
use super::loader::Plugin;
use super::reconcile::ReconcileStats;
use super::watch_counters::{live_counters, CounterMap, CountingLw, LwCounters};
use crate::events::EventRecorder;
use kwh_coordination::ownership::Ownership;
use kwh_informer::shared::{HandlerRegistration, SharedIndexInformer};
use kwh_informer::workqueue::metrics::encode_family;
use kwh_informer::workqueue::QueuesCollector;
use kwh_sandbox::CacheStats;

/// A plugin's sandbox limits as `/statusz` shows them (the plugins file's keys and units).
fn limits_json(l: &Limits) -> serde_json::Value {
    serde_json::json!({
        "handlerDeadlineMs": l.handler_deadline.as_millis() as u64,
        "reconcileDeadlineMs": l.reconcile_deadline.as_millis() as u64,
        "memoryBytes": l.memory_bytes,
        "maxInstances": l.max_instances,
        "maxQueuedKeys": l.max_queued_keys,
        "logLinesPerSecond": l.log_lines_per_second,
    })
}

/// One watch of a running plugin, as readiness reports it.
pub(crate) struct WatchStatus {
    /// The informer's key as displayed (`v1/configmaps|ns|labels|fields`).
    pub key: String,
    pub reg: HandlerRegistration,
    pub counters: Arc<LwCounters>,
    /// The informer, for what it last synced to.
    pub informer: SharedIndexInformer<CountingLw>,
}

/// The shared view of one running plugin.
pub(crate) struct RunningStatus {
    pub plugin: Plugin,
    pub stats: Arc<ReconcileStats>,
    pub dispatcher: Arc<Dispatcher>,
    pub health: Arc<Health>,
    pub watches: Vec<WatchStatus>,
    pub synced: CacheSync,
    pub queue_refusals: Arc<QueueRefusals>,
    /// Which revision of the plugin this is: 1 for the first, one more for each upgrade.
    pub revision: u64,
    /// The last revision that failed to replace this one (shared by the plugin's revisions;
    /// cleared by a successful upgrade).
    pub failure: Arc<Mutex<Option<RevisionFailure>>>,
    /// The plugin's last revisions, newest first (shared by its revisions).
    pub history: Arc<Mutex<std::collections::VecDeque<RevisionRecord>>>,
}

/// How many revisions of a plugin `/statusz` lists.
pub(crate) const HISTORY: usize = 5;

/// One revision a plugin ran, as `/statusz` lists it: enough to tell what to roll back to (a
/// module already compiled is loaded from the compile cache, so going back costs no compile).
#[derive(Debug, Clone)]
pub(crate) struct RevisionRecord {
    pub revision: u64,
    pub digest: Arc<str>,
    pub module: PathBuf,
    pub config: Arc<serde_json::Value>,
    pub since: SystemTime,
}

/// A revision that could not replace the running one, as `/statusz` reports it.
#[derive(Debug, Clone)]
pub(crate) struct RevisionFailure {
    /// The module it was loaded from.
    pub module: PathBuf,
    /// Why, as logged.
    pub error: String,
    pub at: SystemTime,
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

/// A plugin that did not start and will not by itself: its module did not load (not a
/// component, a bad manifest, its configuration refused by `validate-config`, a trap while
/// starting). Listed so that a plugin given to the host never just vanishes; named by the
/// file's stem when its manifest could not be read.
pub(crate) struct FailedStatus {
    pub name: String,
    pub path: PathBuf,
    pub since: SystemTime,
    pub reason: String,
}

/// A place in the host's list of plugins, in the order they were given.
#[derive(Clone)]
pub(crate) enum Slot {
    Waiting(Arc<WaitingStatus>),
    Running(Arc<RunningStatus>),
    Failed(Arc<FailedStatus>),
}

/// The plugins of one runtime: shared by the runtime, the tasks that start waiting plugins
/// and the ops endpoint.
pub(crate) type Slots = Arc<Mutex<Vec<Slot>>>;

/// A shadow revision as `/statusz` and `/metrics` show it.
#[derive(Clone)]
pub(crate) struct ShadowView {
    pub live: String,
    pub module: std::path::PathBuf,
    pub ledger: Arc<ShadowLedger>,
    pub stats: Arc<ReconcileStats>,
}

/// The shadows of one runtime, kept by the runtime as they start and stop.
pub(crate) type ShadowViews = Arc<Mutex<Vec<ShadowView>>>;

/// What `/metrics` and `/readyz` read: shared handles, cloned out under a short lock.
#[derive(Clone)]
pub struct RuntimeStatus {
    /// Built once per runtime by [`metrics_registry`].
    pub(crate) metrics: Arc<prometheus_client::registry::Registry>,
    pub(crate) slots: Slots,
    pub(crate) ownership: Ownership,
    pub(crate) shadows: ShadowViews,
}

/// A shadow's figures and its newest differences, as JSON.
fn shadow_json(v: &ShadowView) -> serde_json::Value {
    let l = &v.ledger;
    serde_json::json!({
        "module": v.module.display().to_string(),
        "reconciles": v.stats.total.load(Ordering::Relaxed),
        "agreements": l.agreements.load(Ordering::Relaxed),
        "differences": l.differences.load(Ordering::Relaxed),
        "refusals": l.refusals.load(Ordering::Relaxed),
        "eventsNotRecorded": l.events.load(Ordering::Relaxed),
        "lastDifferences": l.differences().iter().map(|d| {
            let (kind, detail) = match &d.outcome {
                Outcome::Changes(patch) => ("changes", patch.clone()),
                Outcome::Refused(e) => ("refused", serde_json::json!({
                    "code": e.code, "reason": e.reason, "message": e.message})),
                Outcome::Agreement => ("agreement", serde_json::Value::Null),
            };
            serde_json::json!({
                "key": d.key.as_deref(),
                "op": d.op,
                "apiVersion": d.api_version,
                "kind": d.kind,
                "namespace": d.namespace,
                "name": d.name,
                "outcome": kind,
                "patch": if kind == "changes" { detail.clone() } else { serde_json::Value::Null },
                "refusal": if kind == "refused" { detail } else { serde_json::Value::Null },
                "liveWrite": d.live_write.as_ref().map(|w| serde_json::json!({
                    "op": w.op,
                    "body": w.body,
                    "resourceVersion": w.resource_version,
                    "at": kwh_client::time::time(w.at),
                })),
                "logs": d.logs,
            })
        }).collect::<Vec<_>>(),
    })
}

/// A shadow row's labels: plugin and outcome.
type Labels<'a> = [(&'static str, &'a str); 2];

/// Shadow writes by outcome, per plugin: `plugin_shadow_writes_total`.
#[derive(Debug)]
struct ShadowMetrics(ShadowViews);

impl std::fmt::Debug for ShadowView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShadowView")
            .field("live", &self.live)
            .finish()
    }
}

impl Collector for ShadowMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let views = self.0.lock().clone();
        let rows: Vec<(Labels<'_>, ConstCounter<u64>)> = views
            .iter()
            .flat_map(|v| {
                let l = &v.ledger;
                [
                    ("agreement", l.agreements.load(Ordering::Relaxed)),
                    ("difference", l.differences.load(Ordering::Relaxed)),
                    ("refused", l.refusals.load(Ordering::Relaxed)),
                ]
                .map(|(o, n)| {
                    (
                        [("plugin", v.live.as_str()), ("outcome", o)],
                        ConstCounter::new(n),
                    )
                })
            })
            .collect();
        encode_family(
            &mut encoder,
            "plugin_shadow_writes",
            "A shadow revision's writes, sent as dry runs, by outcome against the stored object: agreement (nothing would change), difference, refused by the server.",
            None,
            rows,
        )
    }
}

impl RuntimeStatus {
    fn snapshot(&self) -> Vec<Slot> {
        self.slots.lock().clone()
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
                // Said after the verdict: the others run (as a failed revision's is).
                Slot::Failed(_) => continue,
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
        // A revision that failed leaves the last good one running, which keeps the host ready;
        // the failure is said all the same, after the verdict.
        let mut notes = String::new();
        for slot in &slots {
            if let Slot::Failed(f) = slot {
                let _ = writeln!(
                    notes,
                    "plugin {} ({}): failed to start: {}",
                    f.name,
                    f.path.display(),
                    f.reason
                );
            }
            if let Slot::Running(p) = slot {
                if let Some(f) = p.failure.lock().as_ref() {
                    let _ = writeln!(
                        notes,
                        "plugin {}: revision {} runs; a new revision ({}) failed: {}",
                        p.plugin.name(),
                        p.revision,
                        f.module.display(),
                        f.error
                    );
                }
            }
        }
        // A standby is ready (its caches are synced, it can take over): only a replica that
        // lost its lease, and is about to exit, is not. The role is said either way.
        let role = replica_line(&self.ownership);
        if let Some((lost, line)) = role {
            if lost {
                out.push_str(&line);
            } else if out.is_empty() {
                return (true, format!("ok\n{notes}{line}"));
            } else {
                out.push_str(&line);
            }
        }
        if out.is_empty() {
            (true, format!("ok\n{notes}"))
        } else {
            out.push_str(&notes);
            (false, out)
        }
    }

    /// The `/statusz` document: one entry per plugin with its state, quarantine details,
    /// informer sync and a few counters, as JSON.
    pub fn render_status(&self) -> String {
        self.render(false)
    }

    /// [`render_status`](Self::render_status) with each informer's cache digest (`cache`:
    /// `objects` and `digest`, a [`CacheDigest`](kwh_informer::store::CacheDigest)), computed
    /// now from its store: `/statusz?digest=1`. Why on request only: it reads every cached
    /// object, where the rest of the document reads counters.
    pub fn render_status_with_digests(&self) -> String {
        self.render(true)
    }

    fn render(&self, digests: bool) -> String {
        let unix = |t: SystemTime| {
            t.duration_since(std::time::UNIX_EPOCH)
                .ok()
                .map(|d| d.as_secs())
        };
        let shadows = self.shadows.lock().clone();
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
                Slot::Failed(f) => serde_json::json!({
                    "name": f.name,
                    "file": f.path.display().to_string(),
                    "state": "failed",
                    "reason": f.reason,
                    "failedSinceUnix": unix(f.since),
                    "informersSynced": false,
                    "cachesSynced": false,
                }),
                Slot::Running(p) => {
                    let h: HealthSnapshot = p.health.snapshot();
                    let informers: Vec<_> = p
                        .watches
                        .iter()
                        .map(|w| {
                            let mut v = serde_json::json!({
                                "informer": w.key,
                                "synced": w.reg.has_synced(),
                                "lastSyncResourceVersion": w.informer.last_sync_resource_version(),
                                "lastError": w.counters.last_error(),
                                "relists": w.counters.relists(),
                            });
                            if digests {
                                let d = w.informer.indexer().digest();
                                v["cache"] = serde_json::json!({
                                    "objects": d.objects,
                                    "digest": format!("{d:x}"),
                                });
                            }
                            v
                        })
                        .collect();
                    serde_json::json!({
                        "name": p.plugin.name(),
                        "file": p.plugin.path().display().to_string(),
                        "revision": p.revision,
                        "digest": p.plugin.digest(),
                        "revisions": p.history.lock().iter().map(|r| serde_json::json!({
                            "revision": r.revision,
                            "digest": &*r.digest,
                            "module": r.module.display().to_string(),
                            "config": &*r.config,
                            "sinceUnix": unix(r.since),
                        })).collect::<Vec<_>>(),
                        "failedRevision": p.failure.lock().as_ref().map(|f| serde_json::json!({
                            "module": f.module.display().to_string(),
                            "error": f.error,
                            "atUnix": unix(f.at),
                        })),
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
                        "notificationsHeldBack": p.dispatcher.held_back.load(Ordering::Relaxed),
                        "instantiations": p.plugin.stats().instantiations.load(Ordering::Relaxed),
                        // What the operator set for this plugin, so a plugins file can be
                        // checked against what runs.
                        "config": p.plugin.config(),
                        "limits": limits_json(p.plugin.limits()),
                        "workers": p.plugin.manifest().workers,
                        "shadow": shadows
                            .iter()
                            .find(|v| v.live == p.plugin.name())
                            .map(shadow_json),
                    })
                }
            })
            .collect();
        let (ready, _) = self.readiness();
        let doc = serde_json::json!({
            "ready": ready,
            "replica": replica_json(&self.ownership),
            "runtime": runtime_json(),
            "plugins": plugins,
        });
        let mut s = doc.to_string();
        s.push('\n');
        s
    }

    /// The OpenMetrics exposition served at `/metrics`: client-go's workqueue metrics (one queue
    /// per plugin, named after it), then the runtime's own families labelled by plugin or by
    /// informer.
    pub fn render_metrics(&self) -> Result<String, ScrapeError> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.metrics)?;
        Ok(out)
    }
}

/// This replica's place among its peers: its role in the election, its shard membership.
/// The async runtime serving this call: how many threads run the informers and the guests.
fn runtime_json() -> serde_json::Value {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let Ok(h) = Handle::try_current() else {
        return serde_json::Value::Null;
    };
    let flavor = match h.runtime_flavor() {
        RuntimeFlavor::CurrentThread => "current_thread",
        RuntimeFlavor::MultiThread => "multi_thread",
        _ => "other",
    };
    serde_json::json!({ "flavor": flavor, "threads": h.metrics().num_workers() })
}

fn replica_json(own: &Ownership) -> serde_json::Value {
    let mut v = serde_json::json!({ "leader": own.is_leader() });
    if let Some(e) = own.election() {
        v["identity"] = e.identity.clone().into();
        v["lease"] = e.lease.clone().into();
        v["role"] = role_name(&e.role.borrow()).into();
    }
    if let Some(s) = own.shards() {
        v["identity"] = s.me().into();
        v["shardMember"] = s.fence.is_open().into();
        v["shardMembers"] = s.members().into();
        v["handOverWaitSeconds"] = s.hand_over_wait().map(|d| d.as_secs_f64()).into();
    }
    v
}

/// The replica's role as one `/readyz` line, and whether it lost its lease; none when alone.
fn replica_line(own: &Ownership) -> Option<(bool, String)> {
    use kwh_coordination::leader_election::Role;
    let mut line = String::new();
    let mut lost = false;
    if let Some(e) = own.election() {
        match &*e.role.borrow() {
            Role::Leader => line.push_str("role: leader"),
            Role::Standby { leader } => {
                let _ = write!(
                    line,
                    "role: standby (leader: {})",
                    leader.as_deref().unwrap_or("none")
                );
            }
            Role::Lost => {
                lost = true;
                line.push_str("role: lost its lease; stopping");
            }
            Role::Stopped => line.push_str("role: stopped"),
        }
    }
    if let Some(s) = own.shards() {
        if !line.is_empty() {
            line.push_str("; ");
        }
        if s.fence.is_open() {
            let _ = write!(line, "shard member of {}", s.members().len());
            if let Some(wait) = s.hand_over_wait() {
                // Ready (its caches are synced), and not yet reconciling the keys that moved
                // here from members still running: say so, and for how long.
                let _ = write!(
                    line,
                    "; keys moved from live members are reconciled here in {:.1}s (hand-over)",
                    wait.as_secs_f64()
                );
            }
        } else {
            line.push_str("not a shard member (membership lease not renewed)");
        }
    }
    if line.is_empty() {
        return None;
    }
    line.push('\n');
    Some((lost, line))
}

fn role_name(r: &kwh_coordination::leader_election::Role) -> &'static str {
    use kwh_coordination::leader_election::Role;
    match r {
        Role::Standby { .. } => "standby",
        Role::Leader => "leader",
        Role::Lost => "lost",
        Role::Stopped => "stopped",
    }
}

/// client-go's `leader_election_master_status{name}` (1 while leading) and the shard
/// membership's size, read at scrape time.
#[derive(Debug)]
struct ReplicaMetrics(Ownership);

impl Collector for ReplicaMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        if let Some(e) = self.0.election() {
            let name = e.lease.rsplit('/').next().unwrap_or(&e.lease);
            encode_family(
                &mut encoder,
                "leader_election_master_status",
                "Gauge of whether the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
                None,
                [([("name", name)], ConstGauge::new(i64::from(self.0.is_leader())))],
            )?;
        }
        if let Some(s) = self.0.shards() {
            let none: [(&str, &str); 0] = [];
            encode_family(
                &mut encoder,
                "shard_members",
                "Live members of the shard group as this replica last read it (0 when it is not a member).",
                None,
                [(
                    none,
                    ConstGauge::new(if s.fence.is_open() { s.members().len() as i64 } else { 0 }),
                )],
            )?;
        }
        Ok(())
    }
}

/// Why `/metrics` could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// The encoder refused a value (prometheus-client reports no more than that).
    #[error("cannot encode the metrics")]
    Encode(#[from] fmt::Error),
}

/// The registry `/metrics` encodes: the workqueues' collector, then the runtime's own.
pub(crate) fn metrics_registry(
    engine: &PluginEngine,
    queues: &QueuesCollector,
    slots: &Slots,
    lw_counters: &CounterMap,
    events: &EventRecorder,
    ownership: &Ownership,
    shadows: &ShadowViews,
) -> Arc<prometheus_client::registry::Registry> {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(queues.clone()));
    registry.register_collector(Box::new(PluginMetrics {
        slots: slots.clone(),
        lw_counters: lw_counters.clone(),
    }));
    registry.register_collector(Box::new(EventMetrics(events.clone())));
    registry.register_collector(Box::new(ReplicaMetrics(ownership.clone())));
    registry.register_collector(Box::new(ShadowMetrics(shadows.clone())));
    registry.register_collector(Box::new(CompileMetrics(
        engine.sandbox().cache_stats_shared(),
    )));
    Arc::new(registry)
}

/// What the compile cache did: components compiled (in this process or in a child process)
/// and loaded from the cache.
#[derive(Debug)]
struct CompileMetrics(Arc<CacheStats>);

impl Collector for CompileMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let s = &self.0;
        encode_family(
            &mut encoder,
            "component_compiles",
            "Components compiled with Cranelift, by where: in this process, or in a child process (`host compile`).",
            None,
            [
                (
                    [("compiler", "in_process")],
                    ConstCounter::new(s.compiles.load(Ordering::Relaxed)),
                ),
                (
                    [("compiler", "child")],
                    ConstCounter::new(s.child_compiles.load(Ordering::Relaxed)),
                ),
            ],
        )?;
        let none: [(&str, &str); 0] = [];
        encode_family(
            &mut encoder,
            "component_cache_hits",
            "Components loaded from the compile cache without compiling.",
            None,
            [(none, ConstCounter::new(s.hits.load(Ordering::Relaxed)))],
        )
    }
}

/// The Event recorder's counters, read at scrape time. Events never block a reconcile, so a
/// full buffer or a rate limit drops them: these counters are where an operator sees that.
#[derive(Debug)]
struct EventMetrics(EventRecorder);

impl Collector for EventMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let s = self.0.stats();
        let none: [(&str, &str); 0] = [];
        let single: [(&str, &str, u64); 5] = [
            (
                "events_recorded",
                "Events plugins recorded (before aggregation).",
                s.recorded,
            ),
            (
                "events_aggregated",
                "Recorded events counted into an existing Event's series.",
                s.aggregated,
            ),
            (
                "events_write_failures",
                "Event writes given up after their retries.",
                s.write_failures,
            ),
            (
                "events_created",
                "Events created through the API.",
                s.created,
            ),
            (
                "events_series_patched",
                "Merge patches of an Event's series count.",
                s.patched,
            ),
        ];
        for (name, help, v) in single {
            encode_family(
                &mut encoder,
                name,
                help,
                None,
                [(none, ConstCounter::new(v))],
            )?;
        }
        encode_family(
            &mut encoder,
            "events_dropped",
            "Recorded events not written, by reason.",
            None,
            [
                (
                    [("reason", "queue_full")],
                    ConstCounter::new(s.dropped_queue_full),
                ),
                (
                    [("reason", "rate_limited")],
                    ConstCounter::new(s.dropped_rate_limited),
                ),
            ],
        )
    }
}

/// The plugin runtime's own families, labelled by plugin (or by informer), read at scrape time
/// from the same shared handles as readiness: the counters stay plain atomics on the runtime's
/// paths, and a plugin that stops or starts is seen at the next scrape without registering.
struct PluginMetrics {
    slots: Slots,
    lw_counters: CounterMap,
}

impl fmt::Debug for PluginMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginMetrics")
            .field("plugins", &self.slots.lock().len())
            .field("informers", &self.lw_counters.lock().len())
            .finish()
    }
}

fn plugin_label(name: &str) -> [(&'static str, &str); 1] {
    [("plugin", name)]
}

type Get = fn(&RunningStatus) -> u64;

/// The per-plugin counter families: name, help, value. Named without `_total`: the
/// OpenMetrics encoder appends it.
const PLUGIN_COUNTERS: [(&str, &str, Get); 14] = [
    ("plugin_reconcile", "Reconcile calls.", |p| {
        p.stats.total.load(Ordering::Relaxed)
    }),
    (
        "plugin_reconcile_errors",
        "Reconcile calls that failed (guest error or sandbox failure).",
        |p| p.stats.errors.load(Ordering::Relaxed),
    ),
    (
        "plugin_reconcile_requeue_after",
        "Reconcile calls that asked to be requeued after a delay.",
        |p| p.stats.requeue_after.load(Ordering::Relaxed),
    ),
    ("plugin_guest_traps", "Guest calls that trapped.", |p| {
        p.plugin.stats().traps.load(Ordering::Relaxed)
    }),
    (
        "plugin_guest_deadline_hits",
        "Guest calls stopped at their deadline.",
        |p| p.plugin.stats().deadline_hits.load(Ordering::Relaxed),
    ),
    (
        "plugin_guest_memory_exhaustions",
        "Guest calls stopped at the memory cap.",
        |p| p.plugin.stats().memory_exhaustions.load(Ordering::Relaxed),
    ),
    (
        "plugin_instantiations",
        "Guest instances created (first ones and replacements).",
        |p| p.plugin.stats().instantiations.load(Ordering::Relaxed),
    ),
    (
        "plugin_notifications",
        "Informer notifications handled: delivered to the guest's handlers, or enqueued by the host for a handler the guest handed over.",
        |p| p.dispatcher.delivered.load(Ordering::Relaxed),
    ),
    (
        "plugin_notifications_enqueued_by_host",
        "Of those, notifications whose handler the guest handed over (it only enqueues the object's key): the host enqueued the key without a guest call.",
        |p| p.dispatcher.enqueued_by_host.load(Ordering::Relaxed),
    ),
    (
        "plugin_notification_retries",
        "Handler calls retried on a fresh instance after a sandbox failure.",
        |p| p.dispatcher.retries.load(Ordering::Relaxed),
    ),
    (
        "plugin_notifications_dropped",
        "Notifications dropped after every handler attempt failed.",
        |p| p.dispatcher.dropped.load(Ordering::Relaxed),
    ),
    (
        "plugin_notifications_held_back",
        "Notifications not delivered while the plugin was quarantined; its caches are replayed to it once it may be called again.",
        |p| p.dispatcher.held_back.load(Ordering::Relaxed),
    ),
    (
        "plugin_log_lines_dropped",
        "Lines the plugin logged (log import, stdout, stderr) over its budget of 100 a second (bursts of 1,000), not written.",
        |p| p.plugin.ctx().log.dropped(),
    ),
    (
        "plugin_quarantines",
        "Times the plugin was quarantined (repeated instance failures, failed probation).",
        |p| p.health.quarantines(),
    ),
];

type Flag = fn(&RunningStatus) -> bool;

/// The per-plugin 0/1 gauges: name, help, value.
const PLUGIN_FLAGS: [(&str, &str, Flag); 3] = [
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

type Count = fn(&LwCounters) -> u64;

/// The per-informer counter families: name, help, value.
const INFORMER_COUNTERS: [(&str, &str, Count); 3] = [
    (
        "informer_relists",
        "Full lists after an informer's first one (410 Gone, errors, restarts).",
        LwCounters::relists,
    ),
    (
        "informer_watch_restarts",
        "Watch requests after an informer's first one.",
        LwCounters::watch_restarts,
    ),
    (
        "informer_decode_errors",
        "LIST responses and watch events that could not be decoded (malformed, over \
         the size bound, a resourceVersion that is not an integer).",
        LwCounters::decode_errors,
    ),
];

impl Collector for PluginMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let slots = self.slots.lock().clone();
        let running: Vec<&RunningStatus> = slots
            .iter()
            .filter_map(|s| match s {
                Slot::Running(r) => Some(&**r),
                Slot::Waiting(_) | Slot::Failed(_) => None,
            })
            .collect();
        for (name, help, get) in PLUGIN_COUNTERS {
            encode_family(
                &mut encoder,
                name,
                help,
                None,
                running
                    .iter()
                    .map(|p| (plugin_label(p.plugin.name()), ConstCounter::new(get(p)))),
            )?;
        }
        encode_family(
            &mut encoder,
            "plugin_queue_adds_refused",
            "Keys the plugin's workqueue refused: longer than 1024 bytes, or the queue full (the plugin's maxQueuedKeys).",
            None,
            running.iter().flat_map(|p| {
                let r = &p.queue_refusals;
                [
                    ("too_long", r.too_long.load(Ordering::Relaxed)),
                    ("full", r.full.load(Ordering::Relaxed)),
                ]
                .map(|(reason, n)| {
                    (
                        [("plugin", p.plugin.name()), ("reason", reason)],
                        ConstCounter::new(n),
                    )
                })
            }),
        )?;
        encode_family(
            &mut encoder,
            "plugin_reconcile_duration",
            "Duration of reconcile calls.",
            Some(&Unit::Seconds),
            running
                .iter()
                .map(|p| (plugin_label(p.plugin.name()), p.stats.histogram())),
        )?;
        for (name, help, get) in PLUGIN_FLAGS {
            encode_family(
                &mut encoder,
                name,
                help,
                None,
                running.iter().map(|p| {
                    (
                        plugin_label(p.plugin.name()),
                        ConstGauge::new(i64::from(get(p))),
                    )
                }),
            )?;
        }
        encode_family(
            &mut encoder,
            "plugin_waiting_to_start",
            "Whether the plugin waits for a kind to be served or for the API server (1).",
            None,
            slots.iter().map(|slot| match slot {
                Slot::Waiting(w) => (plugin_label(&w.name), ConstGauge::new(1i64)),
                Slot::Running(p) => (plugin_label(p.plugin.name()), ConstGauge::new(0)),
                Slot::Failed(f) => (plugin_label(&f.name), ConstGauge::new(0)),
            }),
        )?;
        encode_family(
            &mut encoder,
            "plugin_failed_to_start",
            "Whether the plugin failed to start and will not by itself (1): its module did not load, or its configuration was refused; /statusz and /readyz say why.",
            None,
            slots.iter().map(|slot| match slot {
                Slot::Failed(f) => (plugin_label(&f.name), ConstGauge::new(1i64)),
                Slot::Waiting(w) => (plugin_label(&w.name), ConstGauge::new(0)),
                Slot::Running(p) => (plugin_label(p.plugin.name()), ConstGauge::new(0)),
            }),
        )?;
        let informers = live_counters(&self.lw_counters);
        for (name, help, get) in INFORMER_COUNTERS {
            encode_family(
                &mut encoder,
                name,
                help,
                None,
                informers
                    .iter()
                    .map(|(key, c)| ([("informer", key.as_str())], ConstCounter::new(get(c)))),
            )?;
        }
        Ok(())
    }
}
