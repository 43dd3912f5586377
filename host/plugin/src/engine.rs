//! The sandbox's engine paired with the linker of the controller imports.
//!
//! [`kwh_sandbox::Engine`] knows nothing of what guests import. Every plugin of this host is
//! pre-linked against the same imports (WASI and each `kube:controller` version served), so
//! the linker is made once, here, beside the engine it belongs to.

use std::sync::Arc;

use wasmtime::component::Linker;

use kwh_sandbox::{
    CacheStats, Engine, EngineConfig, EngineError, PrecompileError, Precompiled, Sandboxed,
};

use super::state::GuestState;

/// The engine plugins load on. Cheap to clone.
#[derive(Clone)]
pub struct PluginEngine(Arc<EngineInner>);

struct EngineInner {
    sandbox: Engine,
    linker: Linker<Sandboxed<GuestState>>,
}

impl PluginEngine {
    /// Builds the sandbox's engine (see [`Engine::new`]) and links the controller imports.
    pub fn new(config: EngineConfig) -> Result<Self, EngineError> {
        let sandbox = Engine::new(config)?;
        let linker = super::imports::linker(&sandbox).map_err(EngineError::Wasmtime)?;
        Ok(PluginEngine(Arc::new(EngineInner { sandbox, linker })))
    }

    /// The sandbox's engine.
    pub fn sandbox(&self) -> &Engine {
        &self.0.sandbox
    }

    /// The linker every plugin is pre-linked against.
    pub(crate) fn linker(&self) -> &Linker<Sandboxed<GuestState>> {
        &self.0.linker
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &wasmtime::Engine {
        self.0.sandbox.engine()
    }

    /// The settings it was built with.
    pub fn config(&self) -> &EngineConfig {
        self.0.sandbox.config()
    }

    /// Compile-cache counters.
    pub fn cache_stats(&self) -> &CacheStats {
        self.0.sandbox.cache_stats()
    }

    /// How many components this engine compiled in this process (see [`Engine::compiles`]).
    pub fn compiles(&self) -> u64 {
        self.0.sandbox.compiles()
    }

    /// Ahead-of-time compilation into the cache (`host compile`; see [`Engine::precompile`]).
    pub fn precompile(&self, wasm: &[u8]) -> Result<Precompiled, PrecompileError> {
        self.0.sandbox.precompile(wasm)
    }
}
