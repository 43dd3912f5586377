//! Shadow revisions beside running plugins: started, compared, promoted and stopped.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::{PluginRuntime, StartError, UpgradeError};
use crate::backend::shadow::ShadowLedger;
use crate::follow::Follow;
use crate::revision::{Env, RunningPlugin, ShadowOf};
use crate::spec::{PluginSpec, ShadowSpec};
use crate::status::ShadowView;
use kwh_informer::workqueue::{default_controller_rate_limiter, RateLimitingQueue};

/// A shadow revision: the plugin it shadows, its own revision (queue, instances, watches), and
/// what its writes would have done.
pub(super) struct Shadow {
    pub(super) live: String,
    pub(super) running: Arc<RunningPlugin>,
    ledger: Arc<ShadowLedger>,
    /// The spec it runs, when a plugin spec asked for it (none: started by hand).
    spec: Option<Arc<ShadowSpec>>,
    started: std::time::Instant,
    /// Its automatic promotion was stopped by a difference (said once).
    blocked: bool,
}

impl PluginRuntime {
    /// Runs `shadow` (none: no shadow) beside plugin `name`, replacing a shadow of another
    /// spec. A shadow that fails to start is one error line and the plugin's failed revision;
    /// the live revision is not affected.
    pub(super) async fn sync_shadow(
        &self,
        name: &str,
        spec: &PluginSpec,
        shadow: Option<Arc<ShadowSpec>>,
        grace: Duration,
    ) {
        let current = self
            .wiring
            .shadows
            .lock()
            .iter()
            .find(|s| s.live == name)
            .map(|s| s.spec.clone());
        if current.as_ref().is_some_and(|c| *c == shadow) || (current.is_none() && shadow.is_none())
        {
            return;
        }
        if current.is_some() {
            self.stop_shadow(name, grace).await;
        }
        let (Some(shadow), Some(shadow_spec)) = (shadow, spec.shadow_spec()) else {
            return;
        };
        let path = shadow_spec.path.clone();
        match self.start_shadow(name, shadow_spec).await {
            Ok(_) => {
                if let Some(s) = self
                    .wiring
                    .shadows
                    .lock()
                    .iter_mut()
                    .find(|s| s.live == name)
                {
                    s.spec = Some(shadow);
                }
            }
            Err(e) => {
                tracing::error!(plugin = %name, "shadow revision {} not started: {e}", path.display());
                self.record_failure(name, &path, &format!("shadow: {e}"));
            }
        }
    }

    /// Promotes each shadow whose `promoteAfter` is met (that many reconciles and that long,
    /// no difference and no refusal): the plugin is upgraded to the shadow's module and
    /// configuration, with the upgrade's guarantees, and the shadow stops. A shadow with a
    /// difference is not promoted, and says why once. Returns the plugins promoted.
    pub async fn promote_due(&mut self, grace: Duration) -> Vec<String> {
        let due: Vec<(String, Arc<ShadowSpec>)> = {
            let mut shadows = self.wiring.shadows.lock();
            let mut due = Vec::new();
            for s in shadows.iter_mut() {
                let (Some(spec), Some(after)) = (
                    s.spec.clone(),
                    s.spec.as_ref().and_then(|p| p.promote_after),
                ) else {
                    continue;
                };
                let differing = s.ledger.differences.load(Ordering::Relaxed)
                    + s.ledger.refusals.load(Ordering::Relaxed);
                if differing > 0 {
                    if !s.blocked {
                        s.blocked = true;
                        let last = s
                            .ledger
                            .differences()
                            .last()
                            .map(|d| format!("; the last: {} {} of {}", d.op, d.kind, d.name))
                            .unwrap_or_default();
                        tracing::warn!(plugin = %s.live,
                            "automatic promotion of the shadow stopped: {differing} of its writes differ{last}");
                    }
                    continue;
                }
                let reconciles = s.running.reconcile_stats().total.load(Ordering::Relaxed);
                if reconciles >= after.reconciles && s.started.elapsed() >= after.after {
                    due.push((s.live.clone(), spec));
                }
            }
            due
        };
        let mut promoted = Vec::new();
        for (name, shadow) in due {
            let Some(live) = self.plugin(&name) else {
                continue;
            };
            let spec = PluginSpec {
                path: shadow.path.clone(),
                config: shadow.config.clone(),
                ..live.spec()
            };
            let reconciles = self.stop_shadow_counted(&name, grace).await;
            match self.upgrade(&name, spec, grace).await {
                Ok(_) => {
                    tracing::info!(plugin = %name, reconciles,
                        "shadow promoted: it agreed on every write");
                    self.wiring.promoted.lock().push((name.clone(), shadow));
                    promoted.push(name);
                }
                Err(e) => {
                    tracing::error!(plugin = %name, "shadow not promoted: {e}");
                }
            }
        }
        promoted
    }

    /// [`stop_shadow`](Self::stop_shadow), returning how many reconciles the shadow ran.
    async fn stop_shadow_counted(&self, live: &str, grace: Duration) -> u64 {
        let n = self
            .wiring
            .shadows
            .lock()
            .iter()
            .find(|s| s.live == live)
            .map_or(0, |s| {
                s.running.reconcile_stats().total.load(Ordering::Relaxed)
            });
        self.stop_shadow(live, grace).await;
        n
    }

    /// Starts `spec` as the shadow of the running plugin `live` (its manifest must name that
    /// plugin): on the same shared informers, with its own queue (metrics name `<live>~shadow`),
    /// instances and limits; every write a dry run compared with the stored object, no Event
    /// recorded, each key reconciled only once the live revision is done with it. Returns the
    /// ledger its writes are kept in.
    pub async fn start_shadow(
        &self,
        live: &str,
        spec: PluginSpec,
    ) -> Result<Arc<ShadowLedger>, UpgradeError> {
        let running = self.plugin(live).ok_or_else(|| UpgradeError::NotRunning {
            name: live.to_owned(),
        })?;
        let path = spec.path.clone();
        let loaded = self.load(&spec).await?;
        let refused = |reason: String| UpgradeError::Refused {
            path: path.clone(),
            name: loaded.name().to_owned(),
            reason,
        };
        if loaded.name() != live {
            return Err(UpgradeError::OtherPlugin {
                path: path.clone(),
                expected: live.to_owned(),
                found: loaded.name().to_owned(),
            });
        }
        if self.shadow_ledger(live).is_some() {
            return Err(refused("a shadow of it runs already".into()));
        }
        let resources = self.wiring.resolve(&loaded).await?;
        let runtime = self
            .wiring
            .background()
            .map_err(|e| refused(format!("its threads did not start: {e}")))?;
        let queue = RateLimitingQueue::named(
            &format!("{live}~shadow"),
            &self.wiring.registry,
            default_controller_rate_limiter::<Arc<str>>(),
        )
        .map_err(|source| StartError::Queue {
            path: path.clone(),
            source,
        })?;
        // The live workers hand keys on with a delay: their timers run with the shadow.
        queue.start_timers_on(&runtime);
        let ledger = Arc::new(ShadowLedger::default());
        let of = ShadowOf {
            ledger: ledger.clone(),
            live_queue: running.queue().clone(),
            follow: Follow::new(queue.clone()),
            runtime,
        };
        let env = Env {
            shadow: Some(&of),
            ..self.wiring.env()
        };
        let shadow = RunningPlugin::start(&env, queue, spec, loaded, &resources)
            .map_err(|e| StartError::from_revision(&path, e))?;
        running.set_mirror(Some(of.follow.clone()));
        self.wiring.shadow_views.lock().push(ShadowView {
            live: live.to_owned(),
            module: path.clone(),
            ledger: ledger.clone(),
            stats: shadow.stats_shared(),
        });
        tracing::info!(plugin = %live, file = %path.display(), "shadow revision started");
        self.wiring.shadows.lock().push(Shadow {
            live: live.to_owned(),
            running: Arc::new(shadow),
            ledger: ledger.clone(),
            spec: None,
            started: std::time::Instant::now(),
            blocked: false,
        });
        Ok(ledger)
    }

    /// Stops the shadow of `live` (its reconciles in flight get `grace`); whether one ran.
    pub async fn stop_shadow(&self, live: &str, grace: Duration) -> bool {
        let shadow = {
            let mut shadows = self.wiring.shadows.lock();
            let at = shadows.iter().position(|s| s.live == live);
            at.map(|i| shadows.remove(i))
        };
        let Some(s) = shadow else {
            return false;
        };
        if let Some(p) = self.plugin(live) {
            p.set_mirror(None);
        }
        self.wiring.shadow_views.lock().retain(|v| v.live != live);
        s.running.stop(tokio::time::Instant::now() + grace).await;
        tracing::info!(plugin = %live, "shadow revision stopped");
        true
    }

    /// What the shadow of `live` would have written, while it runs.
    pub fn shadow_ledger(&self, live: &str) -> Option<Arc<ShadowLedger>> {
        self.wiring
            .shadows
            .lock()
            .iter()
            .find(|s| s.live == live)
            .map(|s| s.ledger.clone())
    }
}
