//! The plugins file, watched: an edit adds, upgrades and removes plugins while the host runs,
//! without a restart that would relist every informer and interrupt every other plugin.
//!
//! Polled, not watched with inotify: the file is usually a ConfigMap mounted in a pod, which
//! the kubelet replaces by swapping a symlink (no event on the path itself), and a poll every
//! few seconds reads one small file and the modules' metadata. What a change does:
//! - the file is read and checked whole first; a mistake is one error line and nothing
//!   changes (the plugins running carry on);
//! - each entry's module is fetched (a registry reference pulled), and the whole file handed to
//!   the runtime's reconciler of plugin sources ([`kwh_plugin::sources`]) as one source, each
//!   entry identified by its module path: it upgrades, starts, renames and removes plugins by
//!   the same rules as for every other source (a name another source runs is refused), and
//!   holds removals while an entry failed before its plugin's name was known (a new module
//!   path may be that plugin's next revision);
//! - what each entry came to is one line here.
//!
//! Plugins given with `--plugin` or in `--config` are sources too, but not watched: they run
//! until the host stops.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use kwh_oci::Credentials;
use kwh_plugin::sources::ids_by_module;
use kwh_plugin::{
    Applied, Change, Desired, Limits, PluginRuntime, PluginSources, PluginSpec, SourceId, Step,
    Want,
};

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

/// One entry as last read, for the poll: what to look at for a change.
struct Entry {
    /// The module as the file names it: a path, or a registry reference.
    declared: PathBuf,
    /// With the module pulled: its path is then the blob's in the cache.
    spec: PluginSpec,
    /// When a reference's tag was last asked for its digest.
    pulled: Option<Instant>,
    module: Stamp,
}

/// Entry `id` of a plugins file as a source hands it to the reconciler: `spec` (its module
/// fetched) to load, a new revision also when its module file was rewritten in place.
pub fn desired(id: String, declared: PathBuf, spec: PluginSpec) -> Desired {
    let stamp = format!("{:?}", Stamp::of(&spec.path));
    Desired {
        id,
        module: declared,
        want: Want::Load { spec, stamp },
    }
}

/// The watched plugins file and what was last read from it.
pub struct PluginsWatch {
    path: PathBuf,
    /// The file as a source of the runtime's plugins.
    source: SourceId,
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
    /// Watches `path`, the reconciler's `source`, whose `specs` (as read at start: each module
    /// as declared, and the spec with it pulled) were applied at start; `limits` and
    /// `namespace` are what unset keys take, `grace` what a promotion gives the old revision.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        path: PathBuf,
        source: SourceId,
        limits: Limits,
        namespace: Option<String>,
        interval: Duration,
        grace: Duration,
        specs: Vec<(PathBuf, PluginSpec)>,
        modules: Arc<Modules>,
        leader_only_runs: bool,
    ) -> Self {
        let entries = specs
            .into_iter()
            .map(|(declared, spec)| Entry {
                pulled: modules::is_reference(&declared).then(Instant::now),
                declared,
                module: Stamp::of(&spec.path),
                spec,
            })
            .collect();
        PluginsWatch {
            text: std::fs::read_to_string(&path).ok(),
            path,
            source,
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

    /// Reads the file again and applies it (see the module's documentation).
    pub async fn apply(&mut self, runtime: &mut PluginRuntime, sources: &mut PluginSources) {
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
        let ids = ids_by_module(specs.iter().map(|s| s.path.as_path()));
        let mut next = Vec::with_capacity(specs.len());
        let mut wanted = Vec::with_capacity(specs.len());
        for (spec, id) in specs.into_iter().zip(ids) {
            let (entry, want) = self.fetch(spec, id).await;
            next.push(entry);
            wanted.push(want);
        }
        let outcomes = sources.apply(runtime, self.source, wanted).await;
        self.report(&next, &outcomes);
        self.entries = next;
    }

    /// Entry `id`'s module fetched: what the poll looks at next, and what the reconciler is
    /// asked for (a fetch that fails is a failure before loading: the running revision stays).
    async fn fetch(&self, spec: PluginSpec, id: String) -> (Entry, Desired) {
        let declared = spec.path.clone();
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
        match fetched {
            Ok(spec) => (
                Entry {
                    declared: declared.clone(),
                    spec: spec.clone(),
                    pulled,
                    module: Stamp::of(&spec.path),
                },
                desired(id, declared, spec),
            ),
            Err(message) => {
                // The poll goes on looking at what was last fetched for it.
                let (spec, module) = match self.entries.iter().find(|e| e.declared == declared) {
                    Some(b) => (b.spec.clone(), b.module.clone()),
                    None => (spec, Stamp(None)),
                };
                let entry = Entry {
                    declared: declared.clone(),
                    spec,
                    pulled,
                    module,
                };
                let want = Want::Failed {
                    step: Step::Fetch,
                    message,
                };
                (
                    entry,
                    Desired {
                        id,
                        module: declared,
                        want,
                    },
                )
            }
        }
    }

    /// One line per entry that changed, failed or went, naming it by its index in the file
    /// (`entries`, in the file's order) and module.
    fn report(&self, entries: &[Entry], outcomes: &[kwh_plugin::EntryOutcome]) {
        let file = self.path.display();
        let ids = ids_by_module(entries.iter().map(|e| e.declared.as_path()));
        let index = |id: &str| ids.iter().position(|i| i == id);
        let mut held = Vec::new();
        let mut unknown = Vec::new();
        for o in outcomes {
            // An entry taken out of the file is named by its module.
            let entry = match index(&o.id) {
                Some(i) => format!("plugin {i} ({})", entries[i].declared.display()),
                None => o.id.clone(),
            };
            let plugin = o.plugin.as_deref().unwrap_or("-");
            match &o.change {
                Change::Unchanged => {}
                Change::Applied(how) => {
                    let how = match how {
                        Applied::Upgraded => "upgraded",
                        Applied::Started(_) => "added",
                        Applied::Kept => "kept (its shadow changed)",
                    };
                    tracing::info!(target: LOG_TARGET, plugin = %plugin,
                        "plugins file {file}: {entry} {how}");
                }
                Change::Renamed { from, removed, .. } => {
                    let old = match removed {
                        Some(_) => format!("plugin {from} removed"),
                        None => format!("plugin {from} runs until plugin {plugin} starts"),
                    };
                    tracing::info!(target: LOG_TARGET, plugin = %plugin,
                        "plugins file {file}: {entry} added as plugin {plugin}; {old}");
                }
                Change::Retired { from, clean } => {
                    tracing::info!(target: LOG_TARGET, plugin = %from, clean,
                        "plugins file {file}: {entry}: plugin {from} removed, plugin {plugin} runs");
                }
                Change::Failed(e) => {
                    let kept = match &o.plugin {
                        Some(n) => format!("plugin {n} keeps its running revision"),
                        None => "nothing was started".to_owned(),
                    };
                    tracing::error!(target: LOG_TARGET, "plugins file {file}: {entry}: {e}; {kept}");
                }
                Change::Removed { clean } => {
                    if o.plugin.is_some() {
                        tracing::info!(target: LOG_TARGET, plugin = %plugin, clean,
                            "plugins file {file}: plugin removed");
                    }
                }
                Change::Held { waiting_for } => {
                    held.extend(o.plugin.clone());
                    unknown = waiting_for.iter().filter_map(|id| index(id)).collect();
                }
            }
        }
        if !held.is_empty() {
            tracing::warn!(target: LOG_TARGET,
                "plugins file {file}: {} not removed: entries {unknown:?} failed to load and may be \
                 their new revisions", held.join(", "));
        }
    }
}
