//! The one wasmtime engine every guest shares, what advances its epoch, and the compile cache.
//!
//! One engine means one code cache and one instance pool for the whole process. Epoch interruption
//! (rather than fuel) bounds guest calls: it costs about 1.25x on guest work against ~1.4x for
//! fuel, and a deadline in wall-clock time is what operators configure anyway.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use wasmtime::component::Component;
use wasmtime::{Config, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::cache::{self, CacheStats, CompileCache, ComponentError, Origin};
use crate::cache::{PrecompileError, Precompiled};
use crate::compiler::Compiler;
use crate::watchdog::Watchdog;

/// Engine-wide settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Where compiled components are cached; none disables the disk cache.
    pub cache_dir: Option<PathBuf>,
    /// Epoch tick: the granularity of deadlines and of yields back to tokio during long calls.
    /// 1 ms by default: on one runtime thread a guest computing in a loop holds every other
    /// task (a well-behaved guest's events among them) for up to a tick at each step of
    /// their way; at 5 ms that tripled another plugin's reconcile latency (the `hostile`
    /// benchmark). The timer fires only while a call runs longer than a tick, so the cost
    /// falls on long calls alone.
    pub epoch_tick: Duration,
    /// Use the pooling allocator (pre-reserved slots: ~9 µs instantiation instead of ~16 µs).
    pub pooling: bool,
    /// Instance slots in the pool, across all guests.
    pub max_instances: u32,
    /// Largest linear memory any instance may have; per-guest caps may only be lower.
    pub max_memory_bytes: usize,
    /// Where a component missing from the cache is compiled: in this process (the default) or
    /// in a child process (only with a cache directory; see [`crate::compiler`]).
    pub compiler: Compiler,
    /// Whether Cranelift compiles a component's functions on all cores (rayon's global pool)
    /// or on one: one is slower, and holds less memory at its peak. Code generation is the same
    /// either way, so the cache key does not depend on it.
    pub parallel_compilation: bool,
}

/// Default per-instance memory cap: generous for a controller holding a few objects, small
/// enough that a runaway guest cannot hurt the host.
pub const DEFAULT_MAX_MEMORY: usize = 64 << 20;

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            cache_dir: cache::default_cache_dir(),
            epoch_tick: Duration::from_millis(1),
            pooling: true,
            max_instances: 256,
            max_memory_bytes: DEFAULT_MAX_MEMORY,
            compiler: Compiler::InProcess,
            parallel_compilation: true,
        }
    }
}

/// Why the engine could not be built.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// wasmtime refused the configuration.
    #[error("cannot create the wasmtime engine: {0:#}")]
    Wasmtime(wasmtime::Error),
    /// Neither timer signals nor the ticker thread could be set up: nothing could stop a
    /// guest looping in its own code.
    #[error("cannot start the guest watchdog (timer signals or the epoch ticker thread): {0}")]
    Watchdog(std::io::Error),
}

/// The shared engine. Cheap to clone.
#[derive(Clone)]
pub struct Engine(Arc<EngineInner>);

struct EngineInner {
    engine: wasmtime::Engine,
    config: EngineConfig,
    cache: Option<CompileCache>,
    /// Shared with the embedder's metrics.
    stats: Arc<CacheStats>,
    watchdog: Watchdog,
}

impl Engine {
    /// Builds the engine and sets up what advances its epoch during guest calls
    /// ([`crate::watchdog`]).
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
        let watchdog =
            Watchdog::start(&engine, config.epoch_tick, false).map_err(EngineError::Watchdog)?;
        let cache = config
            .cache_dir
            .clone()
            .map(|dir| CompileCache::new(dir, &engine, config.compiler.clone()));
        Ok(Engine(Arc::new(EngineInner {
            engine,
            config,
            cache,
            stats: Arc::default(),
            watchdog,
        })))
    }

    /// Runs `fut`, a future that runs this engine's guest code, under its deadlines: the
    /// epoch advances while it runs.
    pub async fn watch<F: std::future::Future>(&self, fut: F) -> F::Output {
        self.0.watchdog.watch(&self.0.engine, fut).await
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &wasmtime::Engine {
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

    /// The compile-cache counters, shared (for a metrics collector that outlives a borrow).
    pub fn cache_stats_shared(&self) -> Arc<CacheStats> {
        self.0.stats.clone()
    }

    /// How many components this engine compiled in this process (the rest came from the
    /// cache, or were compiled in a child process: [`CacheStats::child_compiles`]).
    pub fn compiles(&self) -> u64 {
        self.0.stats.compiles.load(Ordering::Relaxed)
    }

    /// Compiles `wasm`, or loads it from the disk cache, on this thread.
    pub fn component(&self, wasm: &[u8]) -> Result<(Component, Origin), ComponentError> {
        match &self.0.cache {
            Some(c) => c.load(&self.0.engine, wasm, &self.0.stats),
            None => cache::compile(&self.0.engine, wasm, &self.0.stats)
                .map(|c| (c, Origin::InProcess))
                .map_err(ComponentError::Compile),
        }
    }

    /// Ahead-of-time compilation (`host compile`): compiles the component `wasm` in this
    /// process and writes it to the cache, unless the cache holds a usable entry for it already.
    /// The entry is the one a later load of the same bytes by an engine with the same
    /// code-generation settings finds. Nothing is instantiated, and the world is not checked.
    pub fn precompile(&self, wasm: &[u8]) -> Result<Precompiled, PrecompileError> {
        crate::component::check_header(wasm).map_err(PrecompileError::NotComponent)?;
        let cache = self.0.cache.as_ref().ok_or(PrecompileError::NoCache)?;
        cache.precompile(&self.0.engine, wasm, &self.0.stats)
    }

    /// [`Engine::component`] on the blocking pool: a cache miss compiles for seconds (in a
    /// child process or here), and on a one-thread runtime that would stall every other task.
    /// Its log lines keep this task's subscriber and span.
    pub async fn component_off_thread(
        &self,
        wasm: Bytes,
    ) -> Result<(Component, Origin), ComponentError> {
        let engine = self.clone();
        let span = tracing::Span::current();
        let logs = tracing::dispatcher::get_default(|d| d.clone());
        let compiled = tokio::task::spawn_blocking(move || {
            tracing::dispatcher::with_default(&logs, || span.in_scope(|| engine.component(&wasm)))
        })
        .await;
        compiled.unwrap_or_else(|e| {
            Err(ComponentError::Compile(wasmtime::Error::msg(format!(
                "the compile task failed: {e}"
            ))))
        })
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

/// The pool's totals across all guests.
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

fn build_engine(config: &EngineConfig, pooling: bool) -> wasmtime::Result<wasmtime::Engine> {
    let mut c = Config::new();
    c.wasm_component_model(true)
        .epoch_interruption(true)
        .parallel_compilation(config.parallel_compilation)
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
    wasmtime::Engine::new(&c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{engine_fingerprint, PrecompileError, Precompiled};

    /// The smallest valid component: the preamble of a component binary, no sections.
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("engine-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn engine_with(cache_dir: &std::path::Path, compiler: Compiler) -> Engine {
        Engine::new(EngineConfig {
            cache_dir: Some(cache_dir.to_path_buf()),
            pooling: false,
            compiler,
            ..EngineConfig::default()
        })
        .expect("engine")
    }

    #[test]
    fn a_compile_engine_and_a_run_engine_share_cache_keys() {
        // The run's engine: pooling, sized for its plugins, compiling on all cores. The child's
        // (`host compile`): on-demand allocation, default sizes, one core. Neither setting
        // changes the generated code, so both find each other's entries; if wasmtime ever
        // folded one of them into the compatibility hash, this is where it would show.
        let run = EngineConfig {
            max_memory_bytes: 512 << 20,
            max_instances: 1000,
            ..EngineConfig::default()
        };
        let compile = EngineConfig {
            pooling: false,
            parallel_compilation: false,
            ..EngineConfig::default()
        };
        let run = build_engine(&run, true).expect("run engine");
        let compile = build_engine(&compile, false).expect("compile engine");
        assert_eq!(engine_fingerprint(&run), engine_fingerprint(&compile));
    }

    #[test]
    fn precompiling_fills_the_cache_that_a_load_then_finds() {
        let dir = temp_dir("precompile");
        let e = engine_with(&dir, Compiler::InProcess);
        let path = match e.precompile(EMPTY_COMPONENT).expect("compiles") {
            Precompiled::Compiled(p) => p,
            other => panic!("{other:?}"),
        };
        assert!(
            path.is_file() && path.starts_with(&dir),
            "{}",
            path.display()
        );
        assert_eq!(
            e.precompile(EMPTY_COMPONENT).expect("cached"),
            Precompiled::AlreadyCached(path)
        );
        assert_eq!(e.compiles(), 1);
        // Another engine, as a later run: a hit, nothing compiled.
        let later = engine_with(&dir, Compiler::InProcess);
        let (_, origin) = later.component(EMPTY_COMPONENT).expect("loads");
        assert_eq!(origin, Origin::Cache);
        assert_eq!(later.compiles(), 0);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn precompiling_refuses_what_is_not_a_component_and_needs_a_cache() {
        let dir = temp_dir("precompile-refused");
        let e = engine_with(&dir, Compiler::InProcess);
        let err = e.precompile(b"not wasm at all").expect_err("garbage");
        assert!(matches!(err, PrecompileError::NotComponent(_)), "{err}");
        let err = e.precompile(b"\0asm\x01\0\0\0").expect_err("a core module");
        assert!(
            err.to_string().contains("a core WebAssembly module"),
            "{err}"
        );
        // A component preamble followed by a section that does not parse.
        let broken = [EMPTY_COMPONENT, b"\x07\x05garbage"].concat();
        let err = e.precompile(&broken).expect_err("broken");
        assert!(
            matches!(err, PrecompileError::Compile(_))
                && err.to_string().starts_with("invalid component: "),
            "{err}"
        );
        assert!(!err.to_string().contains('\n'), "one line: {err}");
        let no_cache = Engine::new(EngineConfig {
            cache_dir: None,
            pooling: false,
            ..EngineConfig::default()
        })
        .expect("engine");
        let err = no_cache.precompile(EMPTY_COMPONENT).expect_err("no cache");
        assert!(matches!(err, PrecompileError::NoCache), "{err}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_compiler_process_that_cannot_start_or_leaves_nothing_falls_back_to_this_process() {
        for (tag, exe) in [
            ("spawn", "/nonexistent/kube-wasm-host/host"),
            ("nothing", "true"),
        ] {
            let dir = temp_dir(&format!("fallback-{tag}"));
            let e = engine_with(&dir, Compiler::child(exe));
            let (_, origin) = e.component(EMPTY_COMPONENT).expect("compiles here");
            assert_eq!(origin, Origin::InProcess, "{exe}");
            assert_eq!(e.compiles(), 1, "{exe}");
            assert_eq!(e.cache_stats().child_compiles.load(Ordering::Relaxed), 0);
            // The entry was written here as before: the next load is a hit.
            let (_, origin) = e.component(EMPTY_COMPONENT).expect("cached");
            assert_eq!(origin, Origin::Cache, "{exe}");
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    #[test]
    fn a_compiler_process_that_fails_fails_the_load_in_one_line() {
        let dir = temp_dir("child-fails");
        let e = engine_with(&dir, Compiler::child("false"));
        let err = e.component(EMPTY_COMPONENT).expect_err("the child failed");
        assert!(
            matches!(&err, ComponentError::Child(m) if m == "exit status 1"),
            "{err}"
        );
        assert_eq!(e.compiles(), 0, "not compiled here as well");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn without_a_cache_directory_a_child_compiler_is_not_used() {
        let e = Engine::new(EngineConfig {
            cache_dir: None,
            pooling: false,
            compiler: Compiler::child("false"),
            ..EngineConfig::default()
        })
        .expect("engine");
        let (_, origin) = e.component(EMPTY_COMPONENT).expect("compiles here");
        assert_eq!(origin, Origin::InProcess);
    }

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
