//! Sources of plugins and the one reconciler of what they ask for.
//!
//! Plugins come from several places: `plugins:` of `--config`, the `--plugins` file (watched
//! while the host runs), `--plugin` flags and `WasmController` resources. Each is a *source*: it
//! hands [`PluginSources::apply`] its whole desired set, entry by entry (an id the source
//! chooses → a [`PluginSpec`] ready to load, or a failure that came before loading), and the
//! reconciler compares it with what it last applied for that source. Why one reconciler: when
//! each source decided for itself, they drifted apart (a `WasmController` whose new generation
//! named another plugin started it and left the old one reconciling the same objects), and a
//! name taken by two sources was refused by one of them only. Here every source gets the same
//! rules:
//! - an entry whose spec is what was last applied for it is left alone, whether that worked or
//!   failed (a failure is not retried until the entry changes);
//! - a new entry starts its plugin; a changed one upgrades it when its manifest gives the same
//!   name;
//! - a changed entry whose manifest gives *another* name is a rename: the new plugin starts,
//!   and the old one is removed only once the new one runs (a new plugin waiting for its kinds
//!   leaves the old one running until it starts, [`PluginSources::settle`]); if the new one
//!   fails, the old one runs on;
//! - an entry that fails keeps the revision running for it; the failure is noted on that
//!   plugin (`/statusz`'s `failedRevision`), or, when nothing runs for it, listed as a plugin
//!   that failed to start (for the sources that list them);
//! - an entry taken out removes its plugin;
//! - one plugin name, one entry: a module whose manifest names a plugin that another entry of
//!   any source runs is refused before anything changes, naming who runs it. Within one source a
//!   name may pass from an entry taken out to a new one in the same pass (a plugins file entry
//!   whose module path changed is the same plugin's next revision: an upgrade).
//!
//! What each entry came to is returned ([`EntryOutcome`]), for the source to log, write as status
//! or record as Events: the reconciler itself writes no log line.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::runtime::{Applied, PluginRuntime, UpgradeError};
use crate::spec::PluginSpec;

/// One source of plugins, as registered with [`PluginSources::add`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SourceId(usize);

/// How a source's entries are named when another entry is refused their plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Label {
    /// Every entry alike ("the plugins file", "--plugin"): the operator knows the source.
    Source(String),
    /// Each entry by the kind of source and its id ("WasmController reviser").
    Entry(String),
}

/// What distinguishes one source from another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceOptions {
    /// How a refusal names this source's entries.
    pub label: Label,
    /// While an entry of the source failed before its plugin's name was known, entries taken
    /// out keep their plugins. For sources whose entries are identified by module path (the
    /// plugins file): a new path may be a plugin's next revision, and removing the old one
    /// before the new one loaded would leave neither running.
    pub hold_removals: bool,
    /// An entry that fails with nothing running for it is listed as a plugin that failed to
    /// start (`/statusz`, `plugin_failed_to_start`), as the start always did. Not for sources
    /// that report failures where they come from (a resource's status).
    pub list_start_failures: bool,
}

impl SourceOptions {
    /// `plugins:` of `--config`: started once, at start.
    pub fn config() -> Self {
        SourceOptions {
            label: Label::Source("the config file's plugins".into()),
            hold_removals: false,
            list_start_failures: true,
        }
    }

    /// `--plugin` flags: started once, at start.
    pub fn flags() -> Self {
        SourceOptions {
            label: Label::Source("--plugin".into()),
            hold_removals: false,
            list_start_failures: true,
        }
    }

    /// The `--plugins` file, its entries identified by module path.
    pub fn plugins_file() -> Self {
        SourceOptions {
            label: Label::Source("the plugins file".into()),
            hold_removals: true,
            list_start_failures: true,
        }
    }

    /// Resources of `kind` (`WasmController`), each entry identified by the resource's name;
    /// their failures are in their status.
    pub fn resources(kind: &str) -> Self {
        SourceOptions {
            label: Label::Entry(kind.to_owned()),
            hold_removals: false,
            list_start_failures: false,
        }
    }
}

/// Which step of bringing an entry's revision up failed (a `WasmController`'s `Fetched` and
/// `Compiled` conditions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Reading or pulling its module, or its settings, before anything loaded.
    Fetch,
    /// Compiling, validating, instantiating or starting it, or a name another entry runs.
    Load,
}

/// Why an entry's revision does not run.
#[derive(Debug, thiserror::Error)]
pub enum EntryError {
    /// It failed before its module could be loaded, as its source found.
    #[error("{message}")]
    NotLoaded {
        /// Where it failed.
        step: Step,
        /// Why, in one line.
        message: String,
    },
    /// The runtime did not apply it (a refused name included).
    #[error(transparent)]
    Apply(#[from] UpgradeError),
}

impl EntryError {
    /// Which step failed: a module that could not be read counts as not fetched.
    pub fn step(&self) -> Step {
        match self {
            EntryError::NotLoaded { step, .. } => *step,
            EntryError::Apply(UpgradeError::Load(l))
                if matches!(l.cause, crate::loader::LoadCause::Read(_)) =>
            {
                Step::Fetch
            }
            EntryError::Apply(_) => Step::Load,
        }
    }
}

/// What a source wants of one of its entries.
#[derive(Debug, Clone)]
pub enum Want {
    /// This revision: applied when it differs from the one last applied for the entry.
    Load {
        /// The spec, its module a file.
        spec: PluginSpec,
        /// What else makes it a new revision although the spec is equal: a module file
        /// rewritten in place, a resource's generation.
        stamp: String,
    },
    /// It failed before loading (a pull, a setting): the running revision carries on.
    Failed {
        /// Where it failed.
        step: Step,
        /// Why, in one line.
        message: String,
    },
    /// Leave it as it is (its next revision is still being fetched): neither changed nor gone.
    Keep,
}

/// One entry of a source's desired set.
#[derive(Debug, Clone)]
pub struct Desired {
    /// How the source identifies it (a module path, a resource's name): unique in the source.
    pub id: String,
    /// Its module as the source names it: what a failure is listed under.
    pub module: PathBuf,
    /// What it asks for.
    pub want: Want,
}

/// What the reconciler did with one entry.
#[derive(Debug)]
pub enum Change {
    /// The same as last applied, or asked to be kept: nothing done.
    Unchanged,
    /// Started, upgraded, or kept with only its shadow changed.
    Applied(Applied),
    /// Its manifest now names another plugin: that one was applied (`how`), and `from`, the
    /// one it ran before, removed (`Some(clean)`) or, while the new one waits for its kinds,
    /// left running (`None`; [`PluginSources::settle`] removes it once the new one runs).
    Renamed {
        /// The plugin it ran before.
        from: String,
        /// How the new one was applied.
        how: Applied,
        /// Whether the old one was removed now, and whether its reconciles finished in time.
        removed: Option<bool>,
    },
    /// Its revision did not run; [`EntryOutcome::plugin`] is the one that runs on, if any.
    Failed(EntryError),
    /// Taken out of the source: its plugin, if one ran, removed (`clean`: in time).
    Removed {
        /// Whether its reconciles finished within the grace period.
        clean: bool,
    },
    /// Taken out, but its plugin kept while another entry failed before its name was known
    /// ([`SourceOptions::hold_removals`]).
    Held {
        /// The entries that failed so.
        waiting_for: Vec<String>,
    },
    /// The plugin it ran before a rename, `from`, removed now that the new one runs.
    Retired {
        /// The old plugin.
        from: String,
        /// Whether its reconciles finished within the grace period.
        clean: bool,
    },
}

/// What one entry came to.
#[derive(Debug)]
pub struct EntryOutcome {
    /// The entry's id.
    pub id: String,
    /// The plugin it runs now (for [`Change::Removed`] and [`Change::Held`], the one it ran).
    pub plugin: Option<String>,
    /// What was done.
    pub change: Change,
}

/// What was last applied for one entry.
#[derive(Debug, Default)]
struct Entry {
    /// The revision last tried (`None`: it failed before loading).
    tried: Option<(PluginSpec, String)>,
    /// Whether that try failed.
    failed: bool,
    /// The plugin it runs.
    plugin: Option<String>,
    /// Plugins it ran before a rename whose new plugin does not run yet.
    retiring: Vec<String>,
    /// The module listed as failed to start for it ([`SourceOptions::list_start_failures`]).
    listed: Option<PathBuf>,
}

impl Entry {
    /// Every plugin name the entry holds.
    fn names(&self) -> impl Iterator<Item = &str> {
        self.plugin
            .iter()
            .chain(self.retiring.iter())
            .map(String::as_str)
    }
}

/// One registered source and its entries as last applied.
#[derive(Debug)]
struct Source {
    options: SourceOptions,
    entries: HashMap<String, Entry>,
}

/// The sources of one runtime's plugins and what was applied of each (see the module's
/// documentation).
#[derive(Debug)]
pub struct PluginSources {
    grace: Duration,
    sources: Vec<Source>,
}

impl PluginSources {
    /// No sources yet; `grace` is what a removed plugin's reconciles get.
    pub fn new(grace: Duration) -> Self {
        PluginSources {
            grace,
            sources: Vec::new(),
        }
    }

    /// Registers a source, with no entries yet.
    pub fn add(&mut self, options: SourceOptions) -> SourceId {
        self.sources.push(Source {
            options,
            entries: HashMap::new(),
        });
        SourceId(self.sources.len() - 1)
    }

    /// How entry `id` of `source` is named to the operator ("WasmController x", "the plugins
    /// file").
    pub fn describe(&self, source: SourceId, id: &str) -> String {
        match self.sources.get(source.0).map(|s| &s.options.label) {
            Some(Label::Source(s)) => s.clone(),
            Some(Label::Entry(kind)) => format!("{kind} {id}"),
            None => id.to_owned(),
        }
    }

    /// The plugin entry `id` of `source` runs.
    pub fn plugin(&self, source: SourceId, id: &str) -> Option<&str> {
        self.sources
            .get(source.0)?
            .entries
            .get(id)?
            .plugin
            .as_deref()
    }

    /// Whether a rename waits for its new plugin to run before the old one goes.
    pub fn has_retiring(&self) -> bool {
        self.sources
            .iter()
            .any(|s| s.entries.values().any(|e| !e.retiring.is_empty()))
    }

    /// Who holds plugin `name` among every source's entries but `(source, id)` and the
    /// entries of `source` listed in `free`: how a refusal names them.
    fn holder(&self, name: &str, source: SourceId, id: &str, free: &[String]) -> Option<String> {
        self.sources.iter().enumerate().find_map(|(s, src)| {
            src.entries.iter().find_map(|(eid, e)| {
                let mine = s == source.0 && (eid == id || free.contains(eid));
                (!mine && e.names().any(|n| n == name)).then(|| self.describe(SourceId(s), eid))
            })
        })
    }

    /// Whether any entry of any source holds plugin `name`.
    fn held(&self, name: &str) -> bool {
        self.sources
            .iter()
            .any(|s| s.entries.values().any(|e| e.names().any(|n| n == name)))
    }

    /// Applies `source`'s whole desired set: starts, upgrades, renames, removes and keeps
    /// plugins as the module's documentation says, in the order given, removals last. An
    /// unknown `source` changes nothing.
    pub async fn apply(
        &mut self,
        runtime: &mut PluginRuntime,
        source: SourceId,
        desired: Vec<Desired>,
    ) -> Vec<EntryOutcome> {
        let Some(src) = self.sources.get(source.0) else {
            return Vec::new();
        };
        let gone: Vec<String> = src
            .entries
            .keys()
            .filter(|id| !desired.iter().any(|d| d.id == **id))
            .cloned()
            .collect();
        let mut outcomes = Vec::with_capacity(desired.len() + gone.len());
        for d in desired {
            if let Some(o) = self.apply_entry(runtime, source, d, &gone).await {
                outcomes.push(o);
            }
        }
        outcomes.extend(self.remove_gone(runtime, source, gone).await);
        outcomes.extend(self.settle_source(runtime, source).await);
        outcomes
    }

    /// One desired entry applied; `None` for an entry asked to be kept that was never applied.
    async fn apply_entry(
        &mut self,
        runtime: &mut PluginRuntime,
        source: SourceId,
        d: Desired,
        gone: &[String],
    ) -> Option<EntryOutcome> {
        let Desired { id, module, want } = d;
        let (spec, stamp) = match want {
            Want::Keep => {
                let plugin = self.entry(source, &id)?.plugin.clone();
                return Some(EntryOutcome {
                    id,
                    plugin,
                    change: Change::Unchanged,
                });
            }
            Want::Failed { step, message } => {
                let error = EntryError::NotLoaded { step, message };
                let entry = self.entry_mut(source, &id);
                entry.tried = None;
                let plugin = entry.plugin.clone();
                self.failed(runtime, source, &id, &module, &error);
                return Some(EntryOutcome {
                    id,
                    plugin,
                    change: Change::Failed(error),
                });
            }
            Want::Load { spec, stamp } => (spec, stamp),
        };
        if let Some(e) = self.entry(source, &id) {
            if e.tried
                .as_ref()
                .is_some_and(|t| t.0 == spec && t.1 == stamp)
            {
                return Some(EntryOutcome {
                    id,
                    plugin: e.plugin.clone(),
                    change: Change::Unchanged,
                });
            }
        }
        let holder = |name: &str| match self.holder(name, source, &id, gone) {
            Some(who) => Err(format!("already run by {who}")),
            None => Ok(()),
        };
        // Checked against the entries as they are before this one changes.
        let result = runtime
            .apply_checked(spec.clone(), self.grace, holder)
            .await;
        let entry = self.entry_mut(source, &id);
        entry.tried = Some((spec, stamp));
        match result {
            Err(e) => {
                let error = EntryError::Apply(e);
                let plugin = entry.plugin.clone();
                self.failed(runtime, source, &id, &module, &error);
                Some(EntryOutcome {
                    id,
                    plugin,
                    change: Change::Failed(error),
                })
            }
            Ok((name, how)) => {
                entry.failed = false;
                let before = entry.plugin.replace(name.clone());
                if let Some(old) = before.as_ref().filter(|o| **o != name) {
                    entry.retiring.push(old.clone());
                }
                entry.retiring.retain(|r| *r != name);
                let listed = entry.listed.take();
                if let Some(m) = listed {
                    self.forget_listed(runtime, &m);
                }
                let change = match before.filter(|o| *o != name) {
                    None => Change::Applied(how),
                    Some(from) => {
                        let removed = self.retire(runtime, source, &id).await;
                        Change::Renamed {
                            from,
                            how,
                            removed: removed.map(|r| r.iter().all(|(_, clean)| *clean)),
                        }
                    }
                };
                Some(EntryOutcome {
                    id,
                    plugin: Some(name),
                    change,
                })
            }
        }
    }

    /// Removes the plugins entry `id` ran before a rename once the one it runs now runs (not
    /// while it waits for its kinds): each removed, with whether it finished in time; `None`
    /// while the new one does not run yet.
    async fn retire(
        &mut self,
        runtime: &PluginRuntime,
        source: SourceId,
        id: &str,
    ) -> Option<Vec<(String, bool)>> {
        let entry = self.sources.get_mut(source.0)?.entries.get_mut(id)?;
        let runs = entry.plugin.as_deref().and_then(|p| runtime.plugin(p));
        if runs.is_none() || entry.retiring.is_empty() {
            return runs.map(|_| Vec::new());
        }
        let old = std::mem::take(&mut entry.retiring);
        let mut removed = Vec::with_capacity(old.len());
        for name in old {
            let clean = runtime.remove(&name, self.grace).await;
            removed.push((name, clean));
        }
        Some(removed)
    }

    /// Removes the plugins of `source`'s entries `gone` (taken out), unless another entry took
    /// a plugin over, or [`SourceOptions::hold_removals`] holds them.
    async fn remove_gone(
        &mut self,
        runtime: &PluginRuntime,
        source: SourceId,
        gone: Vec<String>,
    ) -> Vec<EntryOutcome> {
        let Some(src) = self.sources.get_mut(source.0) else {
            return Vec::new();
        };
        let mut unnamed: Vec<String> = if src.options.hold_removals {
            src.entries
                .iter()
                .filter(|(id, e)| !gone.contains(id) && e.failed && e.plugin.is_none())
                .map(|(id, _)| id.clone())
                .collect()
        } else {
            Vec::new()
        };
        unnamed.sort();
        let hold = !unnamed.is_empty();
        let mut outcomes = Vec::with_capacity(gone.len());
        let mut taken = Vec::with_capacity(gone.len());
        for id in gone {
            if let Some(e) = src.entries.remove(&id) {
                taken.push((id, e));
            }
        }
        for (id, mut e) in taken {
            // A plugin another entry took over in this pass is that entry's now.
            e.retiring.retain(|n| !self.held(n));
            if e.plugin.as_deref().is_some_and(|n| self.held(n)) {
                e.plugin = None;
            }
            if hold && (e.plugin.is_some() || !e.retiring.is_empty()) {
                let plugin = e.plugin.clone().or_else(|| e.retiring.first().cloned());
                if let Some(src) = self.sources.get_mut(source.0) {
                    src.entries.insert(id.clone(), e);
                }
                outcomes.push(EntryOutcome {
                    id,
                    plugin,
                    change: Change::Held {
                        waiting_for: unnamed.clone(),
                    },
                });
                continue;
            }
            let mut clean = true;
            for name in e.retiring.iter().chain(e.plugin.iter()) {
                clean &= runtime.remove(name, self.grace).await;
            }
            if let Some(m) = &e.listed {
                self.forget_listed(runtime, m);
            }
            outcomes.push(EntryOutcome {
                id,
                plugin: e.plugin,
                change: Change::Removed { clean },
            });
        }
        outcomes
    }

    /// Removes, in every source, the plugins renamed entries ran before, once their new ones
    /// run; what each came to. Called by [`apply`](Self::apply) for its source, and by a host
    /// while [`has_retiring`](Self::has_retiring) says a rename waits.
    pub async fn settle(&mut self, runtime: &PluginRuntime) -> Vec<(SourceId, EntryOutcome)> {
        let mut out = Vec::new();
        for s in 0..self.sources.len() {
            let source = SourceId(s);
            out.extend(
                self.settle_source(runtime, source)
                    .await
                    .into_iter()
                    .map(|o| (source, o)),
            );
        }
        out
    }

    /// [`settle`](Self::settle) for one source.
    async fn settle_source(
        &mut self,
        runtime: &PluginRuntime,
        source: SourceId,
    ) -> Vec<EntryOutcome> {
        let waiting: Vec<String> = self
            .sources
            .get(source.0)
            .map(|s| {
                s.entries
                    .iter()
                    .filter(|(_, e)| !e.retiring.is_empty())
                    .map(|(id, _)| id.clone())
                    .collect()
            })
            .unwrap_or_default();
        let mut out = Vec::new();
        for id in waiting {
            let Some(removed) = self.retire(runtime, source, &id).await else {
                continue;
            };
            let plugin = self.plugin(source, &id).map(str::to_owned);
            out.extend(removed.into_iter().map(|(from, clean)| EntryOutcome {
                id: id.clone(),
                plugin: plugin.clone(),
                change: Change::Retired { from, clean },
            }));
        }
        out
    }

    /// Notes `error` for entry `id` (module `module`): on the plugin running for it, or, with
    /// nothing running, as a plugin that failed to start where the source lists those.
    fn failed(
        &mut self,
        runtime: &PluginRuntime,
        source: SourceId,
        id: &str,
        module: &Path,
        error: &EntryError,
    ) {
        let Some(src) = self.sources.get_mut(source.0) else {
            return;
        };
        let list = src.options.list_start_failures;
        let Some(entry) = src.entries.get_mut(id) else {
            return;
        };
        entry.failed = true;
        match &entry.plugin {
            Some(p) => runtime.record_failure(p, module, &error.to_string()),
            None if list => {
                runtime.record_start_failure(module, &error.to_string());
                entry.listed = Some(module.to_path_buf());
            }
            None => {}
        }
    }

    /// Drops `module`'s listing as failed to start unless another entry's failure listed it.
    fn forget_listed(&self, runtime: &PluginRuntime, module: &Path) {
        let still = self.sources.iter().any(|s| {
            s.entries
                .values()
                .any(|e| e.listed.as_deref() == Some(module))
        });
        if !still {
            runtime.forget_failed(|p| p != module);
        }
    }

    fn entry(&self, source: SourceId, id: &str) -> Option<&Entry> {
        self.sources.get(source.0)?.entries.get(id)
    }

    /// Entry `id` of `source`, new if it was not there. `source` must have been registered.
    fn entry_mut(&mut self, source: SourceId, id: &str) -> &mut Entry {
        let src = &mut self.sources[source.0];
        src.entries.entry(id.to_owned()).or_default()
    }
}

/// Ids for entries identified by their module paths: the path itself, and for the second and
/// later entries naming the same module, the path with `#2`, `#3`… (a file may run one module
/// twice, with other settings).
pub fn ids_by_module<'a>(modules: impl IntoIterator<Item = &'a Path>) -> Vec<String> {
    let mut seen: HashMap<&Path, usize> = HashMap::new();
    modules
        .into_iter()
        .map(|m| {
            let n = seen.entry(m).or_insert(0);
            *n += 1;
            if *n == 1 {
                m.display().to_string()
            } else {
                format!("{}#{n}", m.display())
            }
        })
        .collect()
}
