//! Loading a plugin: bytes → component → pre-linked instance → validated manifest.
//!
//! Every failure is one [`LoadError`] naming the file and the cause, so with several plugins the
//! operator sees exactly which one is broken and why, and the others can still start.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use wasmtime::component::{Component, InstancePre};
use wasmtime::Engine;

use kwh_sandbox::{ComponentError, InstanceStats, NotComponent, Origin, Sandboxed};

use super::backend::Backends;
use super::bindings::{v0_1, v0_2};
pub use super::contract::Contract;
use super::contract::ExportIndices;
use super::engine::PluginEngine;
use super::guest_log::GuestLog;
use super::instance::{instantiate, GuestError, Limits, PluginInner, PluginInstance};
use super::manifest::{Manifest, ManifestError};
use super::own_keys::OwnKeyHandlers;
use super::state::{GuestState, PluginCtx};

/// A plugin that could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("plugin {}: {cause}", path.display())]
pub struct LoadError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub cause: LoadCause,
}

/// Why a plugin could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadCause {
    /// The file could not be read.
    #[error("cannot read the file: {0}")]
    Read(std::io::Error),
    /// Not a component: garbage, a core module, an unknown version or layer.
    #[error("{0}")]
    NotComponent(NotComponent),
    /// wasmtime refused to compile it.
    #[error("invalid component: {0}")]
    Compile(String),
    /// The child process compiling it failed (the component is invalid, or the process was
    /// killed or ran past its time; see [`kwh_sandbox::compiler`]).
    #[error("compiling in a child process failed: {0}")]
    ChildCompile(String),
    /// A component, but not of a `kube:controller` world this host serves.
    #[error("not a kube:controller controller component (this host serves 0.1.0 and 0.2.0): {0}")]
    World(String),
    /// It imports an interface the host does not provide: a controller may import the
    /// `kube:controller` interfaces and WASI's, nothing else.
    #[error("imports `{0}`, which this host does not provide (a controller may import kube:controller's interfaces and WASI's only)")]
    UngrantedImport(String),
    /// Instantiating it or calling `manifest` failed.
    #[error("manifest() failed: {0}")]
    ManifestCall(GuestError),
    /// `validate-config` could not run (trap, deadline, memory).
    #[error("validate-config failed: {0}")]
    ValidateCall(GuestError),
    /// The guest refused its configuration.
    #[error("configuration refused by the plugin: {0}")]
    ConfigRefused(String),
    /// The manifest is invalid.
    #[error("invalid manifest: {0}")]
    Manifest(ManifestError),
}

/// A plugin whose manifest is known, not yet connected to informers, client and queue.
pub struct LoadedPlugin {
    inner: PluginInner,
}

/// A running plugin: hands out instances for its workers and dispatcher. Cheap to clone.
#[derive(Clone)]
pub struct Plugin(Arc<PluginInner>);

impl PluginEngine {
    /// Loads the plugin at `path` with no configuration (see [`PluginEngine::load_bytes`]).
    pub async fn load(&self, path: &Path, limits: Limits) -> Result<LoadedPlugin, LoadError> {
        self.load_configured(path, limits, Arc::new(serde_json::Value::Null))
            .await
    }

    /// Loads the plugin at `path` with the operator's `config` for it (see
    /// [`PluginEngine::load_bytes`]).
    pub async fn load_configured(
        &self,
        path: &Path,
        limits: Limits,
        config: Arc<serde_json::Value>,
    ) -> Result<LoadedPlugin, LoadError> {
        let bytes = tokio::fs::read(path).await.map_err(|e| LoadError {
            path: path.to_path_buf(),
            cause: LoadCause::Read(e),
        })?;
        // Moved, not copied: a component may be a hundred megabytes.
        self.load_inner(path, Bytes::from(bytes), limits, Some(config))
            .await
    }

    /// Loads the plugin at `path` to read its manifest only: `validate-config` is not called
    /// (the configuration is `null`). For tools that never run the plugin (`host inspect`,
    /// `host rbac`), so that a plugin which requires a configuration can still be inspected.
    pub async fn load_for_inspection(
        &self,
        path: &Path,
        limits: Limits,
    ) -> Result<LoadedPlugin, LoadError> {
        let bytes = tokio::fs::read(path).await.map_err(|e| LoadError {
            path: path.to_path_buf(),
            cause: LoadCause::Read(e),
        })?;
        self.load_inner(path, Bytes::from(bytes), limits, None)
            .await
    }

    /// Compiles (or loads from the cache) and links `bytes`, calls `manifest` once in a throwaway
    /// instance whose imports are unavailable (but for `config`), validates the answer, and hands
    /// `config` to the guest's `validate-config` when it exports one: a refusal fails the load,
    /// so a misconfigured plugin never starts. `path` names the plugin in errors and logs.
    pub async fn load_bytes(
        &self,
        path: &Path,
        bytes: &[u8],
        limits: Limits,
        config: Arc<serde_json::Value>,
    ) -> Result<LoadedPlugin, LoadError> {
        self.load_inner(path, Bytes::copy_from_slice(bytes), limits, Some(config))
            .await
    }

    /// [`PluginEngine::load_bytes`]; without a configuration, `validate-config` is skipped.
    async fn load_inner(
        &self,
        path: &Path,
        bytes: Bytes,
        limits: Limits,
        config: Option<Arc<serde_json::Value>>,
    ) -> Result<LoadedPlugin, LoadError> {
        let validate = config.is_some();
        let config = config.unwrap_or_default();
        let fail = |cause| LoadError {
            path: path.to_path_buf(),
            cause,
        };
        let started = Instant::now();
        let mut limits = limits;
        let engine_cap = self.config().max_memory_bytes;
        if limits.memory_bytes > engine_cap {
            // Pool slots are sized by the engine; a larger per-plugin cap could never be honoured.
            tracing::warn!(file = %path.display(), requested = limits.memory_bytes, engine_cap,
                "per-instance memory limit above the engine's maximum; using the maximum");
            limits.memory_bytes = engine_cap;
        }
        kwh_sandbox::component::check_header(&bytes)
            .map_err(|e| fail(LoadCause::NotComponent(e)))?;
        let (component, origin) = self.compile_off_thread(&bytes).await.map_err(fail)?;
        let (pre, exports) = self.link(&component).map_err(fail)?;
        let contract = exports.contract;
        let config_json = config_bytes(&config);
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("plugin");
        let load_ctx = Arc::new(PluginCtx {
            log: Arc::new(GuestLog::new(Arc::from(stem), limits.log_lines_per_second)),
            name: Arc::from(stem),
            manifest: Arc::new(Manifest {
                name: stem.to_string(),
                watches: Vec::new(),
                writes: Vec::new(),
                resync_period: None,
                workers: 1,
                records_events: false,
            }),
            backends: Backends::unavailable(),
            config: config.clone(),
            config_json: config_json.clone(),
            own_keys: Arc::new(OwnKeyHandlers::default()),
        });
        let mut inner = PluginInner {
            path: path.to_path_buf(),
            digest: Arc::from(kwh_sandbox::component::digest(&bytes)),
            engine: self.clone(),
            pre,
            exports,
            limits,
            ctx: load_ctx.clone(),
            stats: InstanceStats::default(),
            live_instances: AtomicU32::new(0),
        };
        let mut live = instantiate(&inner, &load_ctx)
            .await
            .map_err(|e| fail(LoadCause::ManifestCall(e)))?;
        let raw = live
            .call_manifest(inner.limits.handler_deadline)
            .await
            .map_err(|e| fail(LoadCause::ManifestCall(e)))?;
        let mut manifest = Manifest::from_wit(raw).map_err(|e| fail(LoadCause::Manifest(e)))?;
        manifest.records_events = imports_events(&component, self.engine());
        if validate && inner.exports.validate_config.is_some() {
            let verdict = live
                .call_validate_config(&config_json, inner.limits.handler_deadline)
                .await
                .map_err(|e| fail(LoadCause::ValidateCall(e)))?;
            if let Err(message) = verdict {
                return Err(fail(LoadCause::ConfigRefused(message)));
            }
        }
        drop(live);
        tracing::info!(
            plugin = %manifest.name,
            file = %path.display(),
            contract = contract.version(),
            component = origin.as_str(),
            watches = manifest.watches.len(),
            writes = manifest.writes.len(),
            elapsed_us = started.elapsed().as_micros() as u64,
            "plugin loaded"
        );
        let name: Arc<str> = Arc::from(manifest.name.as_str());
        inner.ctx = Arc::new(PluginCtx {
            log: Arc::new(GuestLog::new(
                name.clone(),
                inner.limits.log_lines_per_second,
            )),
            name,
            own_keys: Arc::new(OwnKeyHandlers::new(manifest.watches.len())),
            manifest: Arc::new(manifest),
            backends: Backends::unavailable(),
            config,
            config_json,
        });
        Ok(LoadedPlugin { inner })
    }

    /// The component for `bytes`, from the cache or compiled, off the runtime's threads.
    async fn compile_off_thread(&self, bytes: &Bytes) -> Result<(Component, Origin), LoadCause> {
        let compiled = self.sandbox().component_off_thread(bytes.clone()).await;
        compiled.map_err(|e| match e {
            ComponentError::Compile(e) => LoadCause::Compile(format!("{e:#}")),
            ComponentError::Child(e) => LoadCause::ChildCompile(e),
        })
    }

    /// `component` linked against the host's imports, its contract found and every export's
    /// signature checked: a mismatch is the component's fault, reported here, not later as a
    /// failed call.
    fn link(
        &self,
        component: &Component,
    ) -> Result<(InstancePre<Sandboxed<GuestState>>, ExportIndices), LoadCause> {
        let instance_pre = self.linker().instantiate_pre(component).map_err(|e| {
            // Named plainly when it is an import from outside what any controller gets;
            // wasmtime's own wording ("has the wrong type") reads as a version mismatch.
            let engine = self.engine();
            let foreign = component
                .component_type()
                .imports(engine)
                .map(|(name, _)| name)
                .find(|name| !name.starts_with("kube:controller/") && !name.starts_with("wasi:"))
                .map(str::to_owned);
            match foreign {
                Some(name) => LoadCause::UngrantedImport(name),
                None => LoadCause::World(format!("{e:#}")),
            }
        })?;
        let contract = Contract::of(component, self.engine()).map_err(LoadCause::World)?;
        let checked = match contract {
            Contract::V0_1 => v0_1::ControllerPre::new(instance_pre.clone()).map(drop),
            Contract::V0_2 => v0_2::ControllerBasePre::new(instance_pre.clone()).map(drop),
        };
        checked.map_err(|e| {
            LoadCause::World(format!("built against {}: {e:#}", contract.version()))
        })?;
        let index = |name: &str| {
            component
                .get_export_index(None, name)
                .ok_or_else(|| LoadCause::World(format!("no export named `{name}`")))
        };
        let validate_config = match contract {
            Contract::V0_1 => None,
            Contract::V0_2 => component.get_export_index(None, "validate-config"),
        };
        let exports = ExportIndices {
            contract,
            manifest: index("manifest")?,
            on_add: index("on-add")?,
            on_update: index("on-update")?,
            on_delete: index("on-delete")?,
            reconcile: index("reconcile")?,
            validate_config,
        };
        Ok((instance_pre, exports))
    }
}

/// The configuration as the guest reads it (`config.get`), serialized once per plugin.
fn config_bytes(config: &serde_json::Value) -> Bytes {
    // Serializing a `Value` cannot fail (its keys are strings); `null` is the fallback anyway.
    Bytes::from(serde_json::to_vec(config).unwrap_or_else(|_| b"null".to_vec()))
}

/// Whether the component imports the `events` interface: such a plugin records Events, so
/// `host rbac` grants it the Events rules. Read off the component, it cannot be forgotten.
fn imports_events(component: &Component, engine: &Engine) -> bool {
    component
        .component_type()
        .imports(engine)
        .any(|(name, _)| name.starts_with("kube:controller/events@"))
}

impl LoadedPlugin {
    /// The validated manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.inner.ctx.manifest
    }

    /// The plugin's name (from its manifest).
    pub fn name(&self) -> &str {
        &self.inner.ctx.name
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The sandbox limits.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// The module's content digest (`sha256:…`).
    pub fn digest(&self) -> &str {
        &self.inner.digest
    }

    /// Connects the plugin to its backends; instances can be created from then on.
    pub fn activate(mut self, backends: Backends) -> Plugin {
        let ctx = &self.inner.ctx;
        self.inner.ctx = Arc::new(PluginCtx {
            name: ctx.name.clone(),
            manifest: ctx.manifest.clone(),
            backends,
            config: ctx.config.clone(),
            config_json: ctx.config_json.clone(),
            own_keys: ctx.own_keys.clone(),
            log: ctx.log.clone(),
        });
        Plugin(Arc::new(self.inner))
    }

    /// Tags the plugin's log lines (its `log` import, stdout and stderr) as a shadow
    /// revision's: `plugin="<name> (shadow)"`, with the same budget.
    pub fn as_shadow(mut self) -> Self {
        let ctx = &self.inner.ctx;
        let label: Arc<str> = Arc::from(format!("{} (shadow)", ctx.name));
        self.inner.ctx = Arc::new(PluginCtx {
            name: ctx.name.clone(),
            manifest: ctx.manifest.clone(),
            backends: ctx.backends.clone(),
            config: ctx.config.clone(),
            config_json: ctx.config_json.clone(),
            own_keys: ctx.own_keys.clone(),
            log: Arc::new(GuestLog::new(label, self.inner.limits.log_lines_per_second).capturing()),
        });
        self
    }

    /// Applies the operator's worker count for this plugin alone, over the count its manifest
    /// asks for. (Its configuration is given at load, where `validate-config` checks it.)
    pub fn with_workers(mut self, workers: Option<u32>) -> Self {
        let Some(n) = workers else { return self };
        let ctx = &self.inner.ctx;
        let mut manifest = ctx.manifest.clone();
        Arc::make_mut(&mut manifest).workers = n;
        self.inner.ctx = Arc::new(PluginCtx {
            name: ctx.name.clone(),
            manifest,
            backends: ctx.backends.clone(),
            config: ctx.config.clone(),
            config_json: ctx.config_json.clone(),
            own_keys: ctx.own_keys.clone(),
            log: ctx.log.clone(),
        });
        self
    }

    /// The contract version the component was built against.
    pub fn contract(&self) -> Contract {
        self.inner.exports.contract
    }

    /// The operator's configuration of this plugin (`null` when none).
    pub fn config(&self) -> &serde_json::Value {
        &self.inner.ctx.config
    }
}

impl Plugin {
    /// Log lines of this plugin dropped over its budget ([`crate::guest_log`]).
    pub fn log_lines_dropped(&self) -> u64 {
        self.0.ctx.log.dropped()
    }

    /// What the imports see of the plugin: backends, configuration, handed-over handlers.
    pub(crate) fn ctx(&self) -> &Arc<PluginCtx> {
        &self.0.ctx
    }

    /// The validated manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.0.ctx.manifest
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.0.ctx.name
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.0.path
    }

    /// The sandbox limits.
    pub fn limits(&self) -> &Limits {
        &self.0.limits
    }

    /// The module's content digest (`sha256:…`): what names this revision.
    pub fn digest(&self) -> &str {
        &self.0.digest
    }

    /// The operator's configuration of this plugin, as JSON (`null` when none); guests built
    /// against `kube:controller@0.2.0` read it through the `config` import.
    pub fn config(&self) -> &serde_json::Value {
        &self.0.ctx.config
    }

    /// The contract version the component was built against.
    pub fn contract(&self) -> Contract {
        self.0.exports.contract
    }

    /// Instance counters.
    pub fn stats(&self) -> &InstanceStats {
        &self.0.stats
    }

    /// A new instance slot for one worker (instantiated on first use). At most
    /// `limits.max_instances` exist at once; dropping one frees its slot.
    pub fn instance(&self) -> Result<PluginInstance, GuestError> {
        let max = self.0.limits.max_instances;
        self.0
            .live_instances
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .map_err(|_| GuestError::TooManyInstances(max))?;
        Ok(PluginInstance::new(self.0.clone()))
    }
}
