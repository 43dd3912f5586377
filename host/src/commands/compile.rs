//! `host compile`: components into the compile cache ahead of time.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use kwh_plugin::{EngineConfig, Limits, PluginEngine, PrecompileError, Precompiled};

use crate::plugins_file;

#[derive(Args, Debug)]
pub struct CompileArgs {
    /// The components; `-` reads one from standard input.
    #[arg(value_name = "FILE.wasm", required_unless_present = "plugins_file")]
    files: Vec<PathBuf>,
    /// A plugins file (as `host --plugins`): its modules are compiled too.
    #[arg(long = "plugins", value_name = "FILE")]
    plugins_file: Option<PathBuf>,
    /// Compile cache directory (default: the per-user cache directory), as the run's
    /// `--cache-dir`.
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Threads Cranelift compiles a component's functions on (default: 2, or 1 on one core;
    /// a run compiling in its child process uses the default). Each thread holds its function's
    /// compile state: a CPython component peaks at about 320 MiB on one thread, 345 MiB on two
    /// (in half the time), more with each thread beyond.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    jobs: Option<u16>,
    #[command(flatten)]
    registry: super::RegistryArgs,
}

/// `host compile`: each component compiled into the cache (or found there), one line each; a
/// file that cannot be read or compiled is one line on stderr, and the others still compile.
pub fn compile(args: CompileArgs) -> std::process::ExitCode {
    use std::process::ExitCode;
    use std::time::Instant;
    let mut files = args.files.clone();
    if let Some(path) = &args.plugins_file {
        let limits = Limits::default();
        let defaults = plugins_file::Defaults {
            limits: &limits,
            namespace: None,
        };
        match plugins_file::read(path, "plugins file", &defaults) {
            Ok(specs) => files.extend(specs.into_iter().map(|s| s.path)),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let Some(cache_dir) = args
        .cache_dir
        .or_else(kwh_sandbox::cache::default_cache_dir)
    else {
        eprintln!("error: no compile cache directory (no HOME or XDG_CACHE_HOME); give one with --cache-dir");
        return ExitCode::from(2);
    };
    // References are pulled first (a runtime only then: the compiler child runs this command
    // for files, and starts no threads it does not need).
    if files.iter().any(|f| crate::modules::is_reference(f)) {
        let pulled = super::runtime().and_then(|rt| {
            rt.block_on(super::push::pulled(files, Some(&cache_dir), &args.registry))
        });
        files = match pulled {
            Ok(f) => f,
            Err(e) => {
                eprintln!("error: {e:#}");
                return ExitCode::from(2);
            }
        };
    }
    let jobs = args.jobs.map_or_else(default_compile_jobs, usize::from);
    if jobs > 1 {
        // Cranelift compiles a component's functions on rayon's global pool, which would
        // otherwise have a thread per core: memory the pod's limit has to cover.
        if let Err(e) = rayon::ThreadPoolBuilder::new()
            .num_threads(jobs)
            .build_global()
        {
            eprintln!("error: cannot start {jobs} compiler threads: {e}");
            return ExitCode::from(2);
        }
    }
    let engine = match PluginEngine::new(EngineConfig {
        cache_dir: Some(cache_dir),
        // Nothing is instantiated: no pool to reserve.
        pooling: false,
        parallel_compilation: jobs > 1,
        ..EngineConfig::default()
    }) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let one_line = |s: String| s.replace('\n', " ");
    let (mut failed, mut unwritten) = (false, false);
    for file in &files {
        let (name, bytes) = read_component(file);
        let bytes = match bytes {
            Ok(b) => b,
            Err(e) => {
                eprintln!("error: {name}: cannot read the file: {e}");
                failed = true;
                continue;
            }
        };
        let started = Instant::now();
        let result = engine.precompile(&bytes);
        let took = started.elapsed();
        match result {
            Ok(Precompiled::Compiled(_)) => {
                let peak = kwh_sandbox::compiler::peak_rss_bytes()
                    .map(|b| format!(" (peak RSS {} MiB)", b >> 20))
                    .unwrap_or_default();
                println!("compiled {name} in {}{peak}", human(took));
            }
            Ok(Precompiled::AlreadyCached(_)) => {
                println!("already cached {name} ({})", human(took));
            }
            Err(e @ PrecompileError::Write { .. }) => {
                eprintln!("error: {name}: {}", one_line(e.to_string()));
                unwritten = true;
            }
            Err(e) => {
                eprintln!("error: {name}: {}", one_line(e.to_string()));
                failed = true;
            }
        }
    }
    let _ = std::io::stdout().flush();
    if failed {
        ExitCode::FAILURE
    } else if unwritten {
        ExitCode::from(kwh_sandbox::compiler::EXIT_CACHE_NOT_WRITTEN as u8)
    } else {
        ExitCode::SUCCESS
    }
}

/// A component's name in the lines and its bytes: `-` is standard input.
fn read_component(file: &Path) -> (String, std::io::Result<Vec<u8>>) {
    use std::io::Read as _;
    if file.as_os_str() == "-" {
        let mut b = Vec::new();
        let read = std::io::stdin().lock().read_to_end(&mut b).map(|_| b);
        (kwh_sandbox::compiler::STDIN_NAME.to_string(), read)
    } else {
        (file.display().to_string(), std::fs::read(file))
    }
}

/// `host compile`'s threads unless `--jobs` says: two where there are two cores, which halves
/// a large component's compile for about 8 % more memory at its peak than one thread; more
/// threads would add memory with every core of the node.
pub fn default_compile_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(2))
}

/// `6.71 s`, `12.3 ms`.
pub fn human(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1000.0)
    }
}
