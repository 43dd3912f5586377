//! The plugins file, watched: an edit adds, upgrades and removes plugins while the host runs,
//! without a restart that would relist every informer and interrupt every other plugin.
//!
//! Polled, not watched with inotify: the file is usually a ConfigMap mounted in a pod, which
//! the kubelet replaces by swapping a symlink (no event on the path itself), and a poll every
//! few seconds reads one small file and the modules' metadata. What a change does:
//! - the file is read and checked whole first; a mistake is one error line and nothing
//!   changes (the plugins running carry on);
//! - each entry whose settings or module file changed is applied
//!   ([`PluginRuntime::apply`]): a plugin of the name its manifest gives is upgraded in place,
//!   else started; an entry that fails (compile, `validate-config`, instantiation) is one
//!   error line, and the revision running for it carries on;
//! - a running plugin that no entry names any more is removed, unless an entry failed before
//!   its name was known (it may be that plugin's new revision): then nothing is removed, and
//!   a line says why.
//!
//! Plugins given with `--plugin` or in `--config` are not managed here: they run until the
//! host stops.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use kwh_oci::Credentials;
use kwh_plugin::{Applied, Limits, PluginRuntime, PluginSpec};

use crate::commands::LOG_TARGET;
use crate::modules::{self, Modules};
use crate::plugins_file::{self, Defaults};

/// What a file was when last looked at: its length and modification time (following
/// symlinks), enough to notice a replaced module without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp(Option<(u64, SystemTime)>);

impl Stamp {
    fn of(path: &Path) -> Self {
        Stamp(
            std::fs::metadata(path)
                .ok()
                .and_then(|m| Some((m.len(), m.modified().ok()?))),
        )
    }
}

/// One entry as last applied.
struct Entry {
    /// The module as the file names it: a path, or a registry reference.
    declared: PathBuf,
    /// With the module pulled: its path is then the blob's in the cache.
    spec: PluginSpec,
    /// When a reference's tag was last asked for its digest.
    pulled: Option<Instant>,
    module: Stamp,
    /// The plugin it runs as, once known (its manifest's name).
    name: Option<String>,
}

/// The watched plugins file and what was last applied from it.
pub struct PluginsWatch {
    path: PathBuf,
    limits: Limits,
    namespace: Option<String>,
    interval: Duration,
    grace: Duration,
    text: Option<String>,
    entries: Vec<Entry>,
    modules: Arc<Modules>,
    /// Whether a `leaderOnly` plugin can run here: not on a sharded host without an election
    /// (no replica leads there; the start refuses such a plugin in the file, an edit likewise).
    leader_only_runs: bool,
}

impl PluginsWatch {
    /// Watches `path`, whose `specs` (as read at start: each module as declared, and the spec
    /// the runtime started with it pulled) the runtime started; `limits` and `namespace` are
    /// what unset keys take, `grace` what a removed plugin's reconciles get.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        path: PathBuf,
        limits: Limits,
        namespace: Option<String>,
        interval: Duration,
        grace: Duration,
        specs: Vec<(PathBuf, PluginSpec)>,
        runtime: &PluginRuntime,
        modules: Arc<Modules>,
        leader_only_runs: bool,
    ) -> Self {
        let running = runtime.plugins();
        let entries = specs
            .into_iter()
            .map(|(declared, spec)| Entry {
                pulled: modules::is_reference(&declared).then(Instant::now),
                declared,
                module: Stamp::of(&spec.path),
                name: running
                    .iter()
                    .find(|p| p.spec() == spec.live())
                    .map(|p| p.name().to_owned()),
                spec,
            })
            .collect();
        PluginsWatch {
            text: std::fs::read_to_string(&path).ok(),
            path,
            limits,
            namespace,
            interval,
            grace,
            entries,
            modules,
            leader_only_runs,
        }
    }

    /// Resolves at the first poll that finds the file or one of its modules changed.
    pub async fn changed(&mut self) {
        loop {
            tokio::time::sleep(self.interval).await;
            let text = std::fs::read_to_string(&self.path).ok();
            if text != self.text
                || self
                    .entries
                    .iter()
                    .any(|e| Stamp::of(&e.spec.path) != e.module)
                || self.entries.iter().any(|e| {
                    e.pulled
                        .is_some_and(|t| t.elapsed() >= self.modules.pull_interval())
                })
                // A shadow waiting for its automatic promotion is looked at every poll.
                || self.entries.iter().any(|e| {
                    e.spec
                        .shadow
                        .as_ref()
                        .is_some_and(|s| s.promote_after.is_some())
                })
            {
                return;
            }
        }
    }

    /// Entry `i` (module `declared`) failed to fetch or load: noted on the plugin it runs as,
    /// if known, and one error line saying what carries on.
    fn failed(
        &self,
        runtime: &PluginRuntime,
        i: usize,
        declared: &Path,
        keeps: Option<&str>,
        error: &str,
    ) {
        match keeps {
            Some(name) => runtime.record_failure(name, declared, error),
            // Listed as failed (`/statusz`, `plugin_failed_to_start`) rather than gone.
            None => runtime.record_start_failure(declared, error),
        }
        let kept = match keeps {
            Some(n) => format!("plugin {n} keeps its running revision"),
            None => "nothing was started".to_owned(),
        };
        tracing::error!(target: LOG_TARGET,
            "plugins file {}: plugin {i} ({}): {error}; {kept}", self.path.display(), declared.display());
    }

    /// Reads the file again and applies what changed (see the module's documentation).
    pub async fn apply(&mut self, runtime: &mut PluginRuntime) {
        for name in runtime.promote_due(self.grace).await {
            tracing::info!(target: LOG_TARGET, plugin = %name,
                "plugins file {}: the shadow of plugin {name} was promoted", self.path.display());
        }
        self.text = std::fs::read_to_string(&self.path).ok();
        let defaults = Defaults {
            limits: &self.limits,
            namespace: self.namespace.as_deref(),
        };
        let specs = match plugins_file::read(&self.path, "plugins file", &defaults) {
            Ok(specs) => specs,
            Err(e) => {
                tracing::error!(target: LOG_TARGET, "{e}; the running plugins are kept as they are");
                // Stamped as read, so the same mistake is not reported at every poll.
                for e in &mut self.entries {
                    e.module = Stamp::of(&e.spec.path);
                }
                return;
            }
        };
        let mut next = Vec::with_capacity(specs.len());
        let mut unknown = Vec::new();
        for (i, spec) in specs.into_iter().enumerate() {
            next.push(self.apply_entry(runtime, i, spec, &mut unknown).await);
        }
        self.remove_gone(runtime, &mut next, &unknown).await;
        // A module that failed and is no longer listed is no longer shown as failed.
        let listed_before: Vec<PathBuf> = self.entries.iter().map(|e| e.declared.clone()).collect();
        runtime.forget_failed(|p| {
            !listed_before.iter().any(|b| b == p) || next.iter().any(|e| e.declared == p)
        });
        self.entries = next;
    }

    /// Entry `i` of the file, fetched and applied: started, upgraded or kept; one that fails
    /// keeps its running revision (`unknown` gets its index when none runs).
    async fn apply_entry(
        &self,
        runtime: &mut PluginRuntime,
        i: usize,
        spec: PluginSpec,
        unknown: &mut Vec<usize>,
    ) -> Entry {
        let declared = spec.path.clone();
        let before = self.entries.iter().find(|e| e.declared == declared);
        let pulled = modules::is_reference(&declared).then(Instant::now);
        let fetched = if spec.leader_only && !self.leader_only_runs {
            Err("leaderOnly: with --shards it needs --leader-elect".to_owned())
        } else {
            self.modules
                .fetch(spec.clone(), &Credentials::none(), None, &[])
                .await
                .map(|(s, _)| s)
                .map_err(|e| e.to_string())
        };
        let spec = match fetched {
            Ok(s) => s,
            Err(e) => {
                // As a revision that fails to load: the running one carries on.
                let keeps = before.and_then(|b| b.name.clone());
                self.failed(runtime, i, &declared, keeps.as_deref(), &e);
                if keeps.is_none() {
                    unknown.push(i);
                }
                let (spec, module) = match before {
                    Some(b) => (b.spec.clone(), b.module.clone()),
                    None => (spec, Stamp(None)),
                };
                return Entry {
                    declared,
                    spec,
                    pulled,
                    module,
                    name: keeps,
                };
            }
        };
        let module = Stamp::of(&spec.path);
        if let Some(e) = before.filter(|e| e.spec == spec && e.module == module) {
            if e.name.is_some() {
                return Entry {
                    declared,
                    spec,
                    pulled,
                    module,
                    name: e.name.clone(),
                };
            }
        }
        let name = match runtime.apply(spec.clone(), self.grace).await {
            Ok((name, how)) => {
                let how = match how {
                    Applied::Upgraded => "upgraded",
                    Applied::Started(_) => "added",
                    Applied::Kept => "kept (its shadow changed)",
                };
                tracing::info!(target: LOG_TARGET, plugin = %name,
                    "plugins file {}: plugin {i} ({}) {how}", self.path.display(), declared.display());
                runtime.forget_failed(|p| p != declared.as_path());
                Some(name)
            }
            Err(e) => {
                let keeps = before.and_then(|b| b.name.clone());
                self.failed(runtime, i, &declared, keeps.as_deref(), &e.to_string());
                if keeps.is_none() {
                    unknown.push(i);
                }
                keeps
            }
        };
        Entry {
            declared,
            spec,
            pulled,
            module,
            name,
        }
    }

    /// Removes the plugins no entry of `next` names any more, unless an entry failed to load
    /// (its new revision may be one of them): then they are kept as entries, for a later edit.
    async fn remove_gone(
        &mut self,
        runtime: &mut PluginRuntime,
        next: &mut Vec<Entry>,
        unknown: &[usize],
    ) {
        let named: Vec<&str> = next.iter().filter_map(|e| e.name.as_deref()).collect();
        let gone: Vec<String> = self
            .entries
            .iter()
            .filter_map(|e| e.name.clone())
            .filter(|n| !named.contains(&n.as_str()))
            .collect();
        if !gone.is_empty() && !unknown.is_empty() {
            tracing::warn!(target: LOG_TARGET,
                "plugins file {}: {} not removed: entries {unknown:?} failed to load and may be \
                 their new revisions", self.path.display(), gone.join(", "));
            // Kept as entries, so that a later edit can still remove them.
            next.extend(
                self.entries
                    .drain(..)
                    .filter(|e| e.name.as_ref().is_some_and(|n| gone.contains(n))),
            );
        } else {
            for name in gone {
                let clean = runtime.remove(&name, self.grace).await;
                tracing::info!(target: LOG_TARGET, plugin = %name, clean,
                    "plugins file {}: plugin removed", self.path.display());
            }
        }
    }
}
