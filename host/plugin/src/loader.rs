//! Loading a plugin: bytes → component → pre-linked instance → validated manifest.
//!
//! Every failure is one [`LoadError`] naming the file and the cause, so with several plugins the
//! operator sees exactly which one is broken and why, and the others can still start.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::ComponentExportIndex;

use super::backend::Backends;
use super::bindings::ControllerPre;
use super::engine::PluginEngine;
use super::instance::{
    instantiate, GuestError, HostState, Limits, PluginCtx, PluginInstance, PluginStats,
};
use super::manifest::{Manifest, ManifestError};

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
    /// Not WebAssembly at all.
    #[error("not a WebAssembly file (missing the \\0asm header)")]
    NotWasm,
    /// A core module: the host only runs components.
    #[error("a core WebAssembly module, not a component; build it with `--target wasm32-wasip2` or wrap it with `wasm-tools component new`")]
    CoreModule,
    /// A WebAssembly binary of an unknown version or layer.
    #[error("unsupported WebAssembly binary (version/layer bytes {0:02x?})")]
    UnknownVersion([u8; 4]),
    /// wasmtime refused to compile it.
    #[error("invalid component: {0}")]
    Compile(String),
    /// A component, but not of the `kube:controller` world this host serves.
    #[error("not a kube:controller@0.1.0 controller component: {0}")]
    World(String),
    /// Instantiating it or calling `manifest` failed.
    #[error("manifest() failed: {0}")]
    ManifestCall(GuestError),
    /// The manifest is invalid.
    #[error("invalid manifest: {0}")]
    Manifest(ManifestError),
}

/// Export indices resolved once per component, so instantiation does no name lookups.
pub(crate) struct ExportIndices {
    pub(crate) manifest: ComponentExportIndex,
    pub(crate) on_add: ComponentExportIndex,
    pub(crate) on_update: ComponentExportIndex,
    pub(crate) on_delete: ComponentExportIndex,
    pub(crate) reconcile: ComponentExportIndex,
}

/// Everything instances of one plugin share.
pub(crate) struct PluginInner {
    pub(crate) path: PathBuf,
    pub(crate) engine: PluginEngine,
    pub(crate) pre: ControllerPre<HostState>,
    pub(crate) exports: ExportIndices,
    pub(crate) limits: Limits,
    pub(crate) ctx: Arc<PluginCtx>,
    pub(crate) stats: PluginStats,
    pub(crate) live_instances: AtomicU32,
}

/// A plugin whose manifest is known, not yet connected to informers, client and queue.
pub struct LoadedPlugin {
    inner: PluginInner,
}

/// A running plugin: hands out instances for its workers and dispatcher. Cheap to clone.
#[derive(Clone)]
pub struct Plugin(Arc<PluginInner>);

impl PluginEngine {
    /// Loads the plugin at `path` (see [`PluginEngine::load_bytes`]).
    pub async fn load(&self, path: &Path, limits: Limits) -> Result<LoadedPlugin, LoadError> {
        let bytes = tokio::fs::read(path).await.map_err(|e| LoadError {
            path: path.to_path_buf(),
            cause: LoadCause::Read(e),
        })?;
        self.load_bytes(path, &bytes, limits).await
    }

    /// Compiles (or loads from the cache) and links `bytes`, calls `manifest` once in a throwaway
    /// instance whose imports are all unavailable, and validates the answer. `path` names the
    /// plugin in errors and logs.
    pub async fn load_bytes(
        &self,
        path: &Path,
        bytes: &[u8],
        limits: Limits,
    ) -> Result<LoadedPlugin, LoadError> {
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
        check_header(bytes).map_err(fail)?;
        let component = self
            .component(bytes)
            .map_err(|e| fail(LoadCause::Compile(format!("{e:#}"))))?;
        let instance_pre = self
            .0
            .linker
            .instantiate_pre(&component)
            .map_err(|e| fail(LoadCause::World(format!("{e:#}"))))?;
        let pre = ControllerPre::new(instance_pre)
            .map_err(|e| fail(LoadCause::World(format!("{e:#}"))))?;
        let index = |name: &str| {
            component
                .get_export_index(None, name)
                .ok_or_else(|| fail(LoadCause::World(format!("no export named `{name}`"))))
        };
        let exports = ExportIndices {
            manifest: index("manifest")?,
            on_add: index("on-add")?,
            on_update: index("on-update")?,
            on_delete: index("on-delete")?,
            reconcile: index("reconcile")?,
        };
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("plugin");
        let load_ctx = Arc::new(PluginCtx {
            name: Arc::from(stem),
            manifest: Arc::new(Manifest {
                name: stem.to_string(),
                watches: Vec::new(),
                writes: Vec::new(),
                resync_period: None,
                workers: 1,
            }),
            backends: Backends::unavailable(),
            config: Arc::new(serde_json::Value::Null),
        });
        let mut inner = PluginInner {
            path: path.to_path_buf(),
            engine: self.clone(),
            pre,
            exports,
            limits,
            ctx: load_ctx.clone(),
            stats: PluginStats::default(),
            live_instances: AtomicU32::new(0),
        };
        let mut live = instantiate(&inner, &load_ctx)
            .await
            .map_err(|e| fail(LoadCause::ManifestCall(e)))?;
        let raw = live
            .call_manifest(inner.limits.handler_deadline)
            .await
            .map_err(|e| fail(LoadCause::ManifestCall(e)))?;
        drop(live);
        let manifest = Manifest::from_wit(raw).map_err(|e| fail(LoadCause::Manifest(e)))?;
        tracing::info!(
            plugin = %manifest.name,
            file = %path.display(),
            watches = manifest.watches.len(),
            writes = manifest.writes.len(),
            elapsed_us = started.elapsed().as_micros() as u64,
            "plugin loaded"
        );
        inner.ctx = Arc::new(PluginCtx {
            name: Arc::from(manifest.name.as_str()),
            manifest: Arc::new(manifest),
            backends: Backends::unavailable(),
            config: Arc::new(serde_json::Value::Null),
        });
        Ok(LoadedPlugin { inner })
    }
}

/// Distinguishes garbage, core modules and components by the 8-byte preamble, so the common
/// mistake (a `wasm32-unknown-unknown` or wasip1 core module) gets an actionable message.
fn check_header(bytes: &[u8]) -> Result<(), LoadCause> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(LoadCause::NotWasm);
    }
    let version = [bytes[4], bytes[5], bytes[6], bytes[7]];
    match version {
        [1, 0, 0, 0] => Err(LoadCause::CoreModule),
        [_, _, 1, 0] => Ok(()),
        other => Err(LoadCause::UnknownVersion(other)),
    }
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

    /// Connects the plugin to its backends; instances can be created from then on.
    pub fn activate(mut self, backends: Backends) -> Plugin {
        let ctx = &self.inner.ctx;
        self.inner.ctx = Arc::new(PluginCtx {
            name: ctx.name.clone(),
            manifest: ctx.manifest.clone(),
            backends,
            config: ctx.config.clone(),
        });
        Plugin(Arc::new(self.inner))
    }

    /// Applies what the operator set for this plugin alone: `workers` over the count its
    /// manifest asks for, and its configuration (carried to every instance's context).
    pub fn configure(mut self, workers: Option<u32>, config: Arc<serde_json::Value>) -> Self {
        let ctx = &self.inner.ctx;
        let mut manifest = ctx.manifest.clone();
        if let Some(n) = workers {
            Arc::make_mut(&mut manifest).workers = n;
        }
        self.inner.ctx = Arc::new(PluginCtx {
            name: ctx.name.clone(),
            manifest,
            backends: ctx.backends.clone(),
            config,
        });
        self
    }

    /// The operator's configuration of this plugin (`null` when none).
    pub fn config(&self) -> &serde_json::Value {
        &self.inner.ctx.config
    }
}

impl Plugin {
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

    /// The operator's configuration of this plugin, as JSON (`null` when none). The contract
    /// that hands it to guests comes with `kube:controller@0.2.0`.
    pub fn config(&self) -> &serde_json::Value {
        &self.0.ctx.config
    }

    /// Instance counters.
    pub fn stats(&self) -> &PluginStats {
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
