//! The one wasmtime engine every plugin shares, its epoch ticker, and the compile cache.
//!
//! One engine means one code cache and one instance pool for the whole host. Epoch interruption
//! (rather than fuel) bounds guest calls: it costs about 1.25x on guest work against ~1.4x for
//! fuel, and a deadline in wall-clock time is what operators configure anyway.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::ticker::{Busy, Ticker};

use super::cache::{self, CacheStats, CompileCache};
use super::instance::HostState;

/// Engine-wide settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Where compiled components are cached; none disables the disk cache.
    pub cache_dir: Option<PathBuf>,
    /// Epoch tick: the granularity of deadlines and of yields back to tokio during long calls.
    pub epoch_tick: Duration,
    /// Use the pooling allocator (pre-reserved slots: ~9 µs instantiation instead of ~16 µs).
    pub pooling: bool,
    /// Instance slots in the pool, across all plugins (workers + dispatchers + spares).
    pub max_instances: u32,
    /// Largest linear memory any instance may have; per-plugin caps may only be lower.
    pub max_memory_bytes: usize,
}

/// Default per-instance memory cap: generous for a controller holding a few objects, small
/// enough that a runaway guest cannot hurt the host.
pub const DEFAULT_MAX_MEMORY: usize = 64 << 20;

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            cache_dir: cache::default_cache_dir(),
            epoch_tick: Duration::from_millis(5),
            pooling: true,
            max_instances: 256,
            max_memory_bytes: DEFAULT_MAX_MEMORY,
        }
    }
}

/// Why the engine could not be built.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// wasmtime refused the configuration.
    #[error("cannot create the wasmtime engine: {0:#}")]
    Wasmtime(wasmtime::Error),
    /// The ticker thread could not be started.
    #[error("cannot start the epoch ticker: {0}")]
    Ticker(std::io::Error),
}

/// The shared engine. Cheap to clone.
#[derive(Clone)]
pub struct PluginEngine(pub(crate) Arc<EngineInner>);

pub(crate) struct EngineInner {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<HostState>,
    pub(crate) config: EngineConfig,
    cache: Option<CompileCache>,
    pub(crate) stats: CacheStats,
    ticker: &'static Ticker,
}

impl PluginEngine {
    /// Builds the engine and starts its epoch ticker (a thread that ends with the engine).
    pub fn new(config: EngineConfig) -> Result<Self, EngineError> {
        let engine = match build_engine(&config, config.pooling) {
            Ok(e) => e,
            Err(e) if config.pooling => {
                // Pooling reserves address space up front; some sandboxes (low ulimit -v) refuse
                // that. On-demand allocation is slower to instantiate but otherwise identical.
                tracing::warn!(error = %e, "pooling allocator unavailable; using on-demand allocation");
                build_engine(&config, false).map_err(EngineError::Wasmtime)?
            }
            Err(e) => return Err(EngineError::Wasmtime(e)),
        };
        let ticker = Ticker::start(&engine, config.epoch_tick).map_err(EngineError::Ticker)?;
        let linker = super::imports::linker(&engine).map_err(EngineError::Wasmtime)?;
        let cache = config
            .cache_dir
            .clone()
            .map(|dir| CompileCache::new(dir, &engine));
        Ok(PluginEngine(Arc::new(EngineInner {
            engine,
            linker,
            config,
            cache,
            stats: CacheStats::default(),
            ticker,
        })))
    }

    /// Marks a guest call in flight until the guard drops: the epoch ticker runs only then.
    pub(crate) fn busy(&self) -> Busy {
        self.0.ticker.busy()
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &Engine {
        &self.0.engine
    }

    /// The settings it was built with.
    pub fn config(&self) -> &EngineConfig {
        &self.0.config
    }

    /// Compile-cache counters.
    pub fn cache_stats(&self) -> &CacheStats {
        &self.0.stats
    }

    /// How many components this engine compiled (the rest came from the cache).
    pub fn compiles(&self) -> u64 {
        self.0.stats.compiles.load(Ordering::Relaxed)
    }

    /// Compiles `wasm`, or loads it from the disk cache.
    pub(crate) fn component(&self, wasm: &[u8]) -> wasmtime::Result<Component> {
        match &self.0.cache {
            Some(c) => c.load(&self.0.engine, wasm, &self.0.stats),
            None => cache::compile(&self.0.engine, wasm, &self.0.stats),
        }
    }
}

/// Per-component ceilings; a component over one is refused at load, naming it. A Rust wasip2
/// component instantiates a handful of core modules (the program plus adapter shims) with one
/// memory and a table or two. A CPython component made by componentize-py instantiates 14 (libc,
/// libpython and its other shared libraries, shims) sharing one memory, and one with native
/// extension modules more: the ceilings leave room for those.
const MAX_CORE_INSTANCES_PER_COMPONENT: u32 = 32;
const MAX_MEMORIES_PER_COMPONENT: u32 = 4;
const MAX_TABLES_PER_COMPONENT: u32 = 8;

/// The pool's totals across all plugins.
#[derive(Debug, PartialEq, Eq)]
struct PoolSizes {
    component_instances: u32,
    core_instances: u32,
    memories: u32,
    tables: u32,
    stacks: u32,
}

impl PoolSizes {
    /// Room for `max_instances` live instances even if every one is of a component at all the
    /// per-component ceilings, so no kind of slot runs out before the instance count does (sized
    /// for Rust guests alone, the core-instance slots ran out at about half of `max_instances`
    /// CPython instances). Spare core-instance slots cost nothing up front (wasmtime only counts
    /// them); a memory slot reserves address space only (4 GiB + guard, inaccessible until
    /// used), a table slot 160 KiB of untouched address space.
    fn for_instances(max_instances: u32) -> Self {
        let n = max_instances.max(1);
        PoolSizes {
            component_instances: n,
            core_instances: n.saturating_mul(MAX_CORE_INSTANCES_PER_COMPONENT),
            memories: n.saturating_mul(MAX_MEMORIES_PER_COMPONENT),
            tables: n.saturating_mul(MAX_TABLES_PER_COMPONENT),
            // One fiber stack per guest call in flight, and an instance has at most one.
            stacks: n,
        }
    }
}

fn build_engine(config: &EngineConfig, pooling: bool) -> wasmtime::Result<Engine> {
    let mut c = Config::new();
    c.wasm_component_model(true)
        .epoch_interruption(true)
        .parallel_compilation(true)
        // Guests get a bounded native stack; deep recursion traps instead of overflowing ours.
        .max_wasm_stack(1 << 20);
    if pooling {
        let sizes = PoolSizes::for_instances(config.max_instances);
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(sizes.component_instances)
            .total_core_instances(sizes.core_instances)
            .total_memories(sizes.memories)
            .total_tables(sizes.tables)
            .total_stacks(sizes.stacks)
            .max_core_instances_per_component(MAX_CORE_INSTANCES_PER_COMPONENT)
            .max_memories_per_component(MAX_MEMORIES_PER_COMPONENT)
            .max_tables_per_component(MAX_TABLES_PER_COMPONENT)
            .max_memory_size(config.max_memory_bytes)
            // Keep a few freed slots' pages warm so re-instantiation after a trap stays cheap,
            // without letting idle slots hold memory forever.
            .max_unused_warm_slots(sizes.component_instances.min(32));
        c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    Engine::new(&c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_holds_max_instances_instances_at_every_per_component_ceiling() {
        let s = PoolSizes::for_instances(256);
        assert_eq!(s.component_instances, 256);
        assert_eq!(s.core_instances, 256 * MAX_CORE_INSTANCES_PER_COMPONENT);
        assert_eq!(s.memories, 256 * MAX_MEMORIES_PER_COMPONENT);
        assert_eq!(s.tables, 256 * MAX_TABLES_PER_COMPONENT);
        assert_eq!(s.stacks, 256);
        // A CPython component (14 core instances, one memory) at the default count.
        assert!(s.core_instances >= 256 * 14);
        assert_eq!(PoolSizes::for_instances(0), PoolSizes::for_instances(1));
        assert_eq!(PoolSizes::for_instances(u32::MAX).core_instances, u32::MAX);
    }
}
