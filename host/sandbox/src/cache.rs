//! On-disk cache of compiled components.
//!
//! Cranelift takes tens of milliseconds per component and more in debug builds, while
//! deserializing a cached artifact takes about a tenth of a millisecond; caching is what makes a
//! plugin load in a few milliseconds. Entries are keyed by the SHA-256 of the component's bytes
//! and a hash of everything in the engine that affects code generation (wasmtime version,
//! target, tunables), so an upgraded host or a changed setting never picks up a stale artifact.
//!
//! Trust: artifacts are native code loaded without verification, so the directory must only be
//! writable by the user running the host; it is created with mode 0700. Entries that fail to
//! deserialize (truncated, from another build, garbage) are recompiled and rewritten.
//!
//! On a miss the component is compiled in this process or, with [`Compiler::Child`], in a child
//! process (`host compile`) that writes the entry, which this process then loads as a hit would
//! be: see [`crate::compiler`]. [`Engine::precompile`](crate::Engine::precompile)
//! fills the cache ahead of time (`host compile`).

use std::ffi::OsString;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

use super::compiler::{self, ChildError, Compiler};

/// Counters of what the cache did, for tests and metrics.
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Components compiled with Cranelift in this process (cache misses, corrupt entries, or no
    /// cache).
    pub compiles: AtomicU64,
    /// Components compiled in a child process and then loaded from the cache.
    pub child_compiles: AtomicU64,
    /// Components loaded from the cache.
    pub hits: AtomicU64,
    /// Entries found unusable and replaced.
    pub corrupt: AtomicU64,
    /// Entries that could not be written (the load still succeeds).
    pub write_errors: AtomicU64,
}

/// The cache directory, the engine fingerprint its keys include, and where misses compile.
pub(crate) struct CompileCache {
    dir: PathBuf,
    engine_fingerprint: String,
    compiler: Compiler,
}

/// How a component was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Loaded from the compile cache.
    Cache,
    /// Compiled in a child process, then loaded from the cache.
    Child,
    /// Compiled in this process.
    InProcess,
}

impl Origin {
    /// As the `plugin loaded` log line says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Cache => "cached",
            Origin::Child => "compiled in a child process",
            Origin::InProcess => "compiled in this process",
        }
    }
}

/// Why a component could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ComponentError {
    /// Cranelift (in this process) refused it.
    #[error("{0:#}")]
    Compile(wasmtime::Error),
    /// The child process that compiled it failed, or was stopped.
    #[error("{0}")]
    Child(String),
}

/// What [`Engine::precompile`](crate::Engine::precompile) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Precompiled {
    /// The cache held a usable entry already.
    AlreadyCached(PathBuf),
    /// Compiled, and written to the cache at this path.
    Compiled(PathBuf),
}

/// Why a component could not be compiled ahead of time.
#[derive(Debug, thiserror::Error)]
pub enum PrecompileError {
    /// The engine has no cache directory to fill.
    #[error("no compile cache directory (give one with --cache-dir)")]
    NoCache,
    /// Not a component (garbage, a core module, an unknown version).
    #[error("{0}")]
    NotComponent(crate::component::NotComponent),
    /// Cranelift refused it.
    #[error("invalid component: {0}")]
    Compile(String),
    /// Compiled, but the entry could not be written.
    #[error("compiled, but cannot write the cache entry {}: {error}", path.display())]
    Write {
        /// The entry.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
}

/// The per-user default: `$XDG_CACHE_HOME/kube-wasm-host`, else `~/.cache/kube-wasm-host`.
pub fn default_cache_dir() -> Option<PathBuf> {
    cache_dir_from(std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME"))
}

/// The rule of [`default_cache_dir`], apart from the process environment so tests need not
/// change it. Without a per-user base there is no default: a shared directory such as the
/// system temp dir would let another user plant native code this host then loads.
fn cache_dir_from(xdg_cache_home: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    let base = xdg_cache_home
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            home.filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })?;
    Some(base.join("kube-wasm-host"))
}

/// Feeds `Hash` output into SHA-256, so the engine fingerprint is stable across processes
/// (std's hashers make no such promise).
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// The part of a cache key that names the engine: everything in it that affects code
/// generation (wasmtime version, target, tunables, features), the architecture and the OS.
pub(crate) fn engine_fingerprint(engine: &Engine) -> String {
    let mut h = ShaHasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut h);
    std::env::consts::ARCH.hash(&mut h);
    std::env::consts::OS.hash(&mut h);
    let digest = h.0.finalize();
    hex(&digest[..12])
}

impl CompileCache {
    pub(crate) fn new(dir: PathBuf, engine: &Engine, compiler: Compiler) -> Self {
        CompileCache {
            dir,
            engine_fingerprint: engine_fingerprint(engine),
            compiler,
        }
    }

    fn entry_path(&self, wasm: &[u8]) -> PathBuf {
        let content = Sha256::digest(wasm);
        self.dir.join(format!(
            "{}-{}.cwasm",
            hex(&content),
            self.engine_fingerprint
        ))
    }

    /// The usable entry at `path`, if any (counted as a hit); an unusable one is counted and
    /// left to be replaced.
    fn cached(&self, engine: &Engine, path: &Path, stats: &CacheStats) -> Option<Component> {
        if !path.is_file() {
            return None;
        }
        // SAFETY: the entry was written by this host (see the module's trust note) and its name
        // binds it to this exact input and engine configuration; wasmtime still checks the
        // artifact's header and version before using it.
        match unsafe { Component::deserialize_file(engine, path) } {
            Ok(c) => {
                stats.hits.fetch_add(1, Ordering::Relaxed);
                Some(c)
            }
            Err(e) => {
                stats.corrupt.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(entry = %path.display(), error = %e,
                    "compile cache entry unusable; recompiling");
                None
            }
        }
    }

    /// Loads the compiled form of `wasm`, compiling (and caching) it when needed: in a child
    /// process with [`Compiler::Child`], else (or when no child can be started, or it could not
    /// write the cache) in this one.
    pub(crate) fn load(
        &self,
        engine: &Engine,
        wasm: &[u8],
        stats: &CacheStats,
    ) -> Result<(Component, Origin), ComponentError> {
        let path = self.entry_path(wasm);
        if let Some(c) = self.cached(engine, &path, stats) {
            return Ok((c, Origin::Cache));
        }
        if let Compiler::Child { exe, timeout } = &self.compiler {
            match compiler::compile_in_child(exe, *timeout, &self.dir, wasm) {
                Ok(report) => {
                    // SAFETY: as in `cached`: the child is this host's own binary.
                    match unsafe { Component::deserialize_file(engine, &path) } {
                        Ok(c) => {
                            stats.child_compiles.fetch_add(1, Ordering::Relaxed);
                            tracing::info!(entry = %path.display(),
                                elapsed_ms = report.elapsed.as_millis() as u64,
                                child = %report.said, "component compiled in a child process");
                            return Ok((c, Origin::Child));
                        }
                        Err(e) => tracing::warn!(entry = %path.display(), error = %e,
                            "the compiler process left no usable cache entry; compiling in this process"),
                    }
                }
                Err(ChildError::Spawn(e)) => tracing::warn!(exe = %exe.display(), error = %e,
                    "cannot start the compiler process; compiling in this process"),
                Err(ChildError::CacheNotWritten(e)) => tracing::warn!(error = %e,
                    "the compiler process could not write the compile cache; compiling in this process"),
                Err(ChildError::Failed(e)) => {
                    return Err(ComponentError::Child(e));
                }
            }
        }
        let component = compile(engine, wasm, stats).map_err(ComponentError::Compile)?;
        if let Err(e) = component
            .serialize()
            .map_err(std::io::Error::other)
            .and_then(|bytes| write_atomically(&path, &bytes))
        {
            stats.write_errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(entry = %path.display(), error = %e, "could not write compile cache entry");
        }
        Ok((component, Origin::InProcess))
    }

    /// Compiles `wasm` in this process into the cache unless a usable entry is there already;
    /// the component is not loaded.
    pub(crate) fn precompile(
        &self,
        engine: &Engine,
        wasm: &[u8],
        stats: &CacheStats,
    ) -> Result<Precompiled, PrecompileError> {
        let path = self.entry_path(wasm);
        if self.cached(engine, &path, stats).is_some() {
            return Ok(Precompiled::AlreadyCached(path));
        }
        stats.compiles.fetch_add(1, Ordering::Relaxed);
        let bytes = engine
            .precompile_component(wasm)
            .map_err(|e| PrecompileError::Compile(format!("{e:#}")))?;
        match write_atomically(&path, &bytes) {
            Ok(()) => Ok(Precompiled::Compiled(path)),
            Err(error) => {
                stats.write_errors.fetch_add(1, Ordering::Relaxed);
                Err(PrecompileError::Write { path, error })
            }
        }
    }
}

pub(crate) fn compile(
    engine: &Engine,
    wasm: &[u8],
    stats: &CacheStats,
) -> wasmtime::Result<Component> {
    stats.compiles.fetch_add(1, Ordering::Relaxed);
    Component::new(engine, wasm)
}

/// Writes `bytes` to a temporary file beside `path` and renames it into place, so readers
/// (other host processes included) never see a half-written entry.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("cache entry has no parent directory"))?;
    create_private_dir(dir)?;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".{}.{}-{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("entry"),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(config: &wasmtime::Config) -> Engine {
        Engine::new(config).expect("engine")
    }

    fn base_config() -> wasmtime::Config {
        let mut c = wasmtime::Config::new();
        c.wasm_component_model(true).epoch_interruption(true);
        c
    }

    fn entry(config: &wasmtime::Config, wasm: &[u8]) -> PathBuf {
        CompileCache::new(
            PathBuf::from("/cache"),
            &engine(config),
            Compiler::InProcess,
        )
        .entry_path(wasm)
    }

    #[test]
    fn the_key_is_stable_for_the_same_bytes_and_engine_configuration() {
        // Two engines built alike, as in two runs of the host: the second finds the first's entry.
        let a = entry(&base_config(), b"component");
        assert_eq!(a, entry(&base_config(), b"component"));
        assert_ne!(a, entry(&base_config(), b"another component"));
        let name = a.file_name().and_then(|n| n.to_str()).expect("name");
        let content = hex(&Sha256::digest(b"component"));
        assert!(name.starts_with(&content), "{name}");
        assert!(name.ends_with(".cwasm"), "{name}");
    }

    #[test]
    fn another_wasmtime_version_gets_another_key() {
        // wasmtime folds its crate version into the compatibility hash through the module
        // version strategy; a custom version string stands in for another release.
        let mut other = base_config();
        other
            .module_version(wasmtime::ModuleVersionStrategy::Custom(
                "0.0.0-another-release".into(),
            ))
            .expect("version");
        let same = entry(&base_config(), b"component");
        let upgraded = entry(&other, b"component");
        assert_ne!(same, upgraded);
        // Only the engine part differs: the content hash is the same.
        let stem = |p: &Path| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.split_once('-'))
                .map(|(content, _)| content.to_string())
        };
        assert_eq!(stem(&same), stem(&upgraded));
    }

    #[test]
    fn an_engine_setting_that_changes_code_generation_gets_another_key() {
        let base = entry(&base_config(), b"component");
        let mut no_epochs = base_config();
        no_epochs.epoch_interruption(false);
        assert_ne!(base, entry(&no_epochs, b"component"));
        let mut fast = base_config();
        fast.cranelift_opt_level(wasmtime::OptLevel::None);
        assert_ne!(base, entry(&fast, b"component"));
    }

    #[test]
    fn the_default_directory_is_per_user() {
        let os = |s: &str| Some(OsString::from(s));
        assert_eq!(
            cache_dir_from(os("/home/ana/.xdg-cache"), os("/home/ana")),
            Some(PathBuf::from("/home/ana/.xdg-cache/kube-wasm-host"))
        );
        assert_eq!(
            cache_dir_from(None, os("/home/ana")),
            Some(PathBuf::from("/home/ana/.cache/kube-wasm-host"))
        );
        assert_eq!(
            cache_dir_from(os(""), os("/home/ana")),
            Some(PathBuf::from("/home/ana/.cache/kube-wasm-host")),
            "an empty XDG_CACHE_HOME counts as unset"
        );
        assert_eq!(cache_dir_from(None, None), None, "no shared fallback");
        assert_eq!(cache_dir_from(os(""), os("")), None);
        // The public entry point reads the same variables.
        assert_eq!(
            default_cache_dir(),
            cache_dir_from(std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME"))
        );
    }

    #[cfg(unix)]
    #[test]
    fn the_directory_is_created_private_to_the_user() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("compile-cache-mode-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let path = dir.join("nested").join("entry.cwasm");
        write_atomically(&path, b"artifact").expect("write");
        for d in [dir.as_path(), dir.join("nested").as_path()] {
            let mode = fs::metadata(d).expect("metadata").permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", d.display());
        }
        assert_eq!(fs::read(&path).expect("read"), b"artifact");
        let _ = fs::remove_dir_all(&dir);
    }
}
