//! The `host` binary: runs plugins against a cluster or the embedded emulator.

mod emulator_cmd;
mod plugins_file;
mod replica;
mod shutdown;
mod trim;
mod wakeups;

use std::io::{IsTerminal as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Deserialize;

use kwh_client::config::KubeconfigOptions;
use kwh_client::{Client, Config, Discovery};
use kwh_emulator::{Emulator, EmulatorHandle};
use kwh_plugin::engine::DEFAULT_MAX_MEMORY;
use kwh_plugin::{
    Compiler, EngineConfig, Limits, Manifest, PluginEngine, PluginRuntime, PluginSpec,
    PrecompileError, Precompiled, QuarantinePolicy, RetryPolicy, RuntimeOptions,
};
use plugins_file::{
    check, ranged, DEADLINE_MS, LIST_PAGE_SIZE, LOG_LINES_PER_SECOND, MAX_INSTANCES,
    MAX_QUEUED_KEYS, MEMORY_MB, WORKER_THREADS,
};

#[derive(Parser)]
#[command(
    name = "host",
    version,
    about = "WebAssembly-pluggable Kubernetes controller host",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Run the embedded API-server emulator as a process.
    Emulator(emulator_cmd::EmulatorArgs),
    /// Print a plugin's manifest.
    Inspect(InspectArgs),
    /// Print the RBAC the plugins need: a Role and RoleBinding in the namespace of each plugin
    /// confined to one, a ClusterRole and ClusterRoleBinding for the others; with
    /// `--leader-elect` or `--shards`, a Role for the host's own Leases too.
    Rbac(RbacArgs),
    /// Run scenario files against a plugin in the test harness (fake cluster, virtual clock)
    /// and print a pass/fail table; exits 0 only when every scenario passes.
    Test(TestArgs),
    /// Compile components into the compile cache ahead of time (in an image build or an init
    /// container), so that a run with the same cache directory compiles nothing. One line per
    /// component: `compiled` (with the time and this process's peak resident set so far) or
    /// `already cached`; a file that cannot be compiled is one line on stderr and the others
    /// are still compiled. Exits 1 when any file could not be compiled, 3 when all compiled but
    /// an entry could not be written.
    Compile(CompileArgs),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Running plugins. Every limit can also come from `--config`; flags win.
#[derive(Args, Debug)]
struct RunArgs {
    /// A controller component to run (repeatable), with the global limits and namespace.
    #[arg(long = "plugin", value_name = "FILE.wasm")]
    plugins: Vec<PathBuf>,
    /// A YAML list of plugins, each with `module` (its .wasm, relative to the file) and
    /// optionally `config` (any value, kept as JSON for the plugin), its own `memoryMb`,
    /// `handlerDeadlineMs`, `reconcileDeadlineMs`, `maxInstances` (bounds its own instances),
    /// `maxQueuedKeys`, `logLinesPerSecond`, `workers` (over its manifest's) and `namespace`; unset keys take the global values.
    /// Checked whole before anything starts. Also the key `plugins:` of `--config`; both may be
    /// given with `--plugin`: the config file's plugins start first, then this file's, then
    /// the `--plugin` ones.
    #[arg(long = "plugins", value_name = "FILE")]
    plugins_file: Option<PathBuf>,
    /// Kubeconfig file (default: KUBECONFIG, in-cluster, then ~/.kube/config).
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context.
    #[arg(long)]
    context: Option<String>,
    /// Restrict watches that name no namespace to this namespace.
    #[arg(long)]
    namespace: Option<String>,
    /// Run against the embedded emulator, optionally seeded from a YAML file.
    #[arg(long, value_name = "SEED.yaml", num_args = 0..=1)]
    emulator: Option<Option<PathBuf>>,
    /// Compile cache directory (default: the per-user cache directory).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Exit when any plugin fails to load, instead of starting the others.
    #[arg(long)]
    fail_fast: bool,
    /// Deadline of one handler call, in milliseconds (default 1000; 1 to 3600000).
    #[arg(long, value_name = "MS", value_parser = ranged(DEADLINE_MS))]
    handler_deadline_ms: Option<u64>,
    /// Deadline of one reconcile call, in milliseconds (default 10000; 1 to 3600000).
    #[arg(long, value_name = "MS", value_parser = ranged(DEADLINE_MS))]
    reconcile_deadline_ms: Option<u64>,
    /// Linear memory per instance, in MiB (default 64; 1 to 4096).
    #[arg(long, value_name = "MIB", value_parser = ranged(MEMORY_MB))]
    memory_mb: Option<u64>,
    /// Instances per plugin: workers plus one dispatcher (default 16; 1 to 1024).
    #[arg(long, value_name = "N", value_parser = ranged(MAX_INSTANCES))]
    max_instances: Option<u64>,
    /// Keys a plugin's workqueue may hold, queued or waiting out a delay (default 1000000;
    /// 1 to 100000000): further adds are refused and counted (`plugin_queue_adds_refused`).
    #[arg(long, value_name = "N", value_parser = ranged(MAX_QUEUED_KEYS))]
    max_queued_keys: Option<u64>,
    /// Log lines a plugin may write per second (its log import, stdout and stderr), after a
    /// burst of ten seconds' worth, at least 1000 (default 100; 0 to 1000000, 0 lets every
    /// line through): further lines are dropped and counted (`plugin_log_lines_dropped`).
    #[arg(long, value_name = "N", value_parser = ranged(LOG_LINES_PER_SECOND))]
    log_lines_per_second: Option<u64>,
    /// Grace period for in-flight reconciles at shutdown, in seconds (default 30). Reconciles
    /// still running when it ends are abandoned with a warning naming them; the exit status is
    /// still 0.
    #[arg(long, value_name = "SECONDS")]
    grace_period: Option<u64>,
    /// Instance failures (traps, deadlines, memory exhaustion) within the quarantine window
    /// that quarantine a plugin (default 5; 0 never quarantines).
    #[arg(long, value_name = "N")]
    quarantine_failures: Option<u32>,
    /// The window those failures are counted in, in seconds (default 60).
    #[arg(long, value_name = "SECONDS")]
    quarantine_window: Option<u64>,
    /// Cool-down of a first quarantine before a probation call, in milliseconds (default
    /// 10000); it doubles with each quarantine in a row.
    #[arg(long, value_name = "MS")]
    quarantine_cooldown_ms: Option<u64>,
    /// The longest quarantine cool-down, in milliseconds (default 300000).
    #[arg(long, value_name = "MS")]
    quarantine_max_cooldown_ms: Option<u64>,
    /// Calls per informer notification whose handler failed in the sandbox, the first included
    /// (default 3; 1 disables retries). Retries run on a fresh instance: after a trap at once,
    /// after a deadline or exhausted memory 50 ms then doubling (at most 1 s) later.
    #[arg(long, value_name = "N")]
    handler_attempts: Option<u32>,
    /// Threads that run the informers, the guests and the API calls (default 1; 1 to 256).
    /// One thread handles each event where it arrives, with no hand-over between threads:
    /// the least CPU per event at the rates clusters deliver. More threads run guests in
    /// parallel, for plugins whose reconciles need more than one core.
    #[arg(long, value_name = "N", value_parser = ranged(WORKER_THREADS))]
    worker_threads: Option<u64>,
    /// While events arrive faster than this window, an idle runtime thread waits out the
    /// window before it sleeps, so that what arrives meanwhile is read with one wake-up
    /// instead of one each (default 10ms, at most 100ms; 0 turns it off). An event waits at
    /// most this much longer; below one event per window nothing changes.
    #[arg(long, value_name = "DURATION", value_parser = kwh_client::duration::parse_duration)]
    wakeup_batching: Option<Duration>,
    /// Objects per page of an informer's LISTs (client-go's `WatchListPageSize`; 1 to 100000).
    /// By default a relist at a known resourceVersion asks for everything at once, which the
    /// API server answers from its watch cache; with a page size it is read from etcd in
    /// pages, for API servers where large answers hurt, at the cost of more requests. The
    /// first list (resourceVersion 0) is answered whole from the watch cache either way.
    #[arg(long, value_name = "N", value_parser = ranged(LIST_PAGE_SIZE))]
    list_page_size: Option<u64>,
    /// YAML file with any of: handlerDeadlineMs, reconcileDeadlineMs, memoryMb, maxInstances,
    /// maxQueuedKeys, logLinesPerSecond, workerThreads, wakeupBatching, listPageSize, gracePeriodSeconds, quarantineFailures, quarantineWindowSeconds, quarantineCooldownMs,
    /// quarantineMaxCooldownMs, handlerAttempts, cacheDir, metricsAddr, namespace, failFast,
    /// plugins (a list as in `--plugins`, relative to this file).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Serve /metrics, /healthz and /readyz on this address, e.g. 127.0.0.1:9090.
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<SocketAddr>,
    /// Log format on stderr; `json` also makes the lines announced on stdout (emulator address,
    /// kubeconfig, metrics address) and a fatal error JSON objects.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(flatten)]
    replica: replica::ReplicaArgs,
}

#[derive(Args, Debug)]
struct InspectArgs {
    /// The component.
    #[arg(value_name = "FILE.wasm")]
    plugin: PathBuf,
    /// Compile cache directory.
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("leases").args(["leader_elect", "shards"]).multiple(true)))]
struct RbacArgs {
    /// The components.
    #[arg(value_name = "FILE.wasm", required_unless_present = "plugins_file")]
    plugins: Vec<PathBuf>,
    /// A plugins file (as `host --plugins`): each plugin's own `namespace` confines it there,
    /// so it gets a Role in that namespace.
    #[arg(long = "plugins", value_name = "FILE")]
    plugins_file: Option<PathBuf>,
    /// Name of the roles and their bindings.
    #[arg(long, default_value = "kube-wasm-host")]
    role_name: String,
    /// The namespace the host will run with (`--namespace` of the run): watches that name none
    /// are confined to it.
    #[arg(long)]
    namespace: Option<String>,
    /// Namespace of the host's service account.
    #[arg(long = "service-account-namespace", default_value = "kube-system")]
    sa_namespace: String,
    /// Name of the host's service account.
    #[arg(long, default_value = "kube-wasm-host")]
    service_account: String,
    /// Resolve kinds by discovery against this kubeconfig's cluster (else built-in kinds are
    /// resolved as a kube-apiserver serves them, custom kinds from `--crd` files, and any
    /// other kind is guessed from its name, with a warning).
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// A YAML file holding CustomResourceDefinitions (other documents are skipped): their
    /// kinds resolve to the plural and scope they declare, without a cluster. Repeatable.
    #[arg(long = "crd", value_name = "FILE.yaml")]
    crds: Vec<PathBuf>,
    /// Kubeconfig context (implies discovery).
    #[arg(long)]
    context: Option<String>,
    /// Compile cache directory.
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Also grant what the host's leader election (`host --leader-elect`) needs: a Role in the
    /// lease namespace with `create` on Leases and `get` and `update` on the one Lease named by
    /// `--leader-elect-lease-name`.
    #[arg(long)]
    leader_elect: bool,
    /// Also grant what sharding (`host --shards`) needs: a Role in the lease namespace with
    /// `get`, `list`, `watch`, `create`, `update` and `delete` on its Leases (each replica's
    /// membership Lease is named after its pod).
    #[arg(long)]
    shards: bool,
    /// Namespace of the Leases (`--leader-elect-namespace` of the run; default: the service
    /// account's namespace, which is the pod's and so the run's default).
    #[arg(long, value_name = "NS", requires = "leases")]
    leader_elect_namespace: Option<String>,
    /// Name of the leader-election Lease, and of the shard group (`--leader-elect-lease-name`
    /// of the run).
    #[arg(
        long,
        value_name = "NAME",
        default_value = "kube-wasm-host",
        requires = "leases"
    )]
    leader_elect_lease_name: String,
}

#[derive(Args, Debug)]
struct TestArgs {
    /// The controller component under test.
    #[arg(long = "plugin", value_name = "FILE.wasm")]
    plugin: PathBuf,
    /// Scenario files (format: docs/testing.md).
    #[arg(value_name = "SCENARIO.yaml", required = true)]
    scenarios: Vec<PathBuf>,
    /// Compile cache directory (default: the per-user cache directory).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// After the table, print what the guest logged during each failed step.
    #[arg(long)]
    show_logs: bool,
}

#[derive(Args, Debug)]
struct CompileArgs {
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
}

/// The `--config` file.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileConfig {
    handler_deadline_ms: Option<u64>,
    reconcile_deadline_ms: Option<u64>,
    memory_mb: Option<u64>,
    max_instances: Option<u64>,
    max_queued_keys: Option<u64>,
    log_lines_per_second: Option<u64>,
    worker_threads: Option<u64>,
    wakeup_batching: Option<String>,
    list_page_size: Option<u64>,
    grace_period_seconds: Option<u64>,
    quarantine_failures: Option<u32>,
    quarantine_window_seconds: Option<u64>,
    quarantine_cooldown_ms: Option<u64>,
    quarantine_max_cooldown_ms: Option<u64>,
    handler_attempts: Option<u32>,
    cache_dir: Option<PathBuf>,
    metrics_addr: Option<SocketAddr>,
    namespace: Option<String>,
    fail_fast: Option<bool>,
    /// Kept raw: checked entry by entry by [`plugins_file::parse`], naming each plugin.
    plugins: Option<serde_yaml::Value>,
    leader_elect: Option<bool>,
    leader_elect_namespace: Option<String>,
    leader_elect_lease_name: Option<String>,
    leader_elect_lease_duration: Option<String>,
    leader_elect_renew_deadline: Option<String>,
    leader_elect_retry_period: Option<String>,
    shards: Option<bool>,
}

impl FileConfig {
    /// The replica keys, for [`replica::ReplicaSettings::resolve`].
    fn replica(&self) -> replica::ReplicaConfig {
        replica::ReplicaConfig {
            leader_elect: self.leader_elect,
            leader_elect_namespace: self.leader_elect_namespace.clone(),
            leader_elect_lease_name: self.leader_elect_lease_name.clone(),
            leader_elect_lease_duration: self.leader_elect_lease_duration.clone(),
            leader_elect_renew_deadline: self.leader_elect_renew_deadline.clone(),
            leader_elect_retry_period: self.leader_elect_retry_period.clone(),
            shards: self.shards,
        }
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // `host test` reports through its table; only warnings (e.g. a cache problem) go to stderr.
    let default_level = match cli.command {
        Some(Command::Test(_) | Command::Compile(_)) => "warn",
        _ => "info",
    };
    init_logs(cli.run.log_format, default_level);
    let format = cli.run.log_format;
    let r = match cli.command {
        Some(Command::Compile(args)) => return compile(args),
        Some(Command::Test(args)) => match runtime() {
            Ok(rt) => return rt.block_on(test(args)),
            Err(e) => Err(e),
        },
        Some(Command::Emulator(args)) => {
            runtime().and_then(|rt| rt.block_on(emulator_cmd::run(args)))
        }
        Some(Command::Inspect(args)) => runtime().and_then(|rt| rt.block_on(inspect(args))),
        Some(Command::Rbac(args)) => runtime().and_then(|rt| rt.block_on(rbac(args))),
        None => read_config(&cli.run).and_then(|file| {
            let threads = worker_threads(&cli.run, &file)?;
            let batching = wakeup_batching(&cli.run, &file)?;
            run_runtime(threads, batching)?.block_on(run(cli.run, file))
        }),
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            match format {
                LogFormat::Text => eprintln!("error: {e:#}"),
                // Written directly rather than through the subscriber, so that no log filter
                // can hide why the host stopped; shaped like the subscriber's own lines.
                LogFormat::Json => eprintln!(
                    "{}",
                    serde_json::json!({
                        "level": "ERROR",
                        "fields": { "message": format!("error: {e:#}") },
                        "target": "host",
                    })
                ),
            }
            std::process::ExitCode::FAILURE
        }
    }
}

/// Writes one announcement line to stdout (what scripts and tests read addresses from): `text`
/// as is, or in JSON mode an object shaped like the log lines with `message` and `fields`.
fn announce(
    format: LogFormat,
    text: std::fmt::Arguments<'_>,
    message: &str,
    fields: serde_json::Value,
) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match format {
        LogFormat::Text => writeln!(out, "{text}")?,
        LogFormat::Json => {
            let mut f = serde_json::json!({ "message": message });
            if let (Some(f), Some(extra)) = (f.as_object_mut(), fields.as_object()) {
                f.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            let line = serde_json::json!({ "level": "INFO", "fields": f, "target": "host" });
            writeln!(out, "{line}")?
        }
    }
    out.flush()
}

fn init_logs(format: LogFormat, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    // Colour only on a terminal: a log file or a collector would get the escape codes.
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => b.init(),
        LogFormat::Json => b.json().init(),
    }
}

/// The engine, with pool slots for `instances` instances (at least one plugin's default
/// limit, for the commands that load plugins one at a time): a run needs every plugin's worker
/// and dispatch instances at once, and the loader holds each plugin to its own limit, so the
/// sum is enough. Why not more: every slot is set up when the process starts (a fiber stack
/// and its guard page each), which was a tenth of a start's CPU at the default 256 slots.
fn engine(
    cache_dir: Option<PathBuf>,
    max_memory: usize,
    instances: u32,
    compiler: Compiler,
) -> anyhow::Result<PluginEngine> {
    let defaults = EngineConfig::default();
    Ok(PluginEngine::new(EngineConfig {
        cache_dir: cache_dir.or(defaults.cache_dir),
        max_memory_bytes: max_memory.max(DEFAULT_MAX_MEMORY),
        max_instances: instances.max(Limits::default().max_instances),
        compiler,
        ..EngineConfig::default()
    })?)
}

/// A run compiles what the cache lacks in a child process, this same binary's `host compile`:
/// the compiler's memory goes back to the system when it exits (see `kwh_plugin::compiler`).
fn run_compiler() -> Compiler {
    match std::env::current_exe() {
        Ok(exe) => Compiler::child(exe),
        Err(e) => {
            tracing::warn!(error = %e,
                "cannot find this program's path; components missing from the cache compile in this process");
            Compiler::InProcess
        }
    }
}

/// `host compile`: each component compiled into the cache (or found there), one line each; a
/// file that cannot be read or compiled is one line on stderr, and the others still compile.
fn compile(args: CompileArgs) -> std::process::ExitCode {
    use std::io::Read as _;
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
    let Some(cache_dir) = args.cache_dir.or_else(kwh_plugin::cache::default_cache_dir) else {
        eprintln!("error: no compile cache directory (no HOME or XDG_CACHE_HOME); give one with --cache-dir");
        return ExitCode::from(2);
    };
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
        let stdin = file.as_os_str() == "-";
        let name = if stdin {
            kwh_plugin::compiler::STDIN_NAME.to_string()
        } else {
            file.display().to_string()
        };
        let bytes = if stdin {
            let mut b = Vec::new();
            std::io::stdin().lock().read_to_end(&mut b).map(|_| b)
        } else {
            std::fs::read(file)
        };
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
                let peak = kwh_plugin::compiler::peak_rss_bytes()
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
        ExitCode::from(kwh_plugin::compiler::EXIT_CACHE_NOT_WRITTEN as u8)
    } else {
        ExitCode::SUCCESS
    }
}

/// `host compile`'s threads unless `--jobs` says: two where there are two cores, which halves
/// a large component's compile for about 8 % more memory at its peak than one thread; more
/// threads would add memory with every core of the node.
fn default_compile_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(2))
}

/// `6.71 s`, `12.3 ms`.
fn human(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1000.0)
    }
}

/// `host test`: every scenario file is parsed before anything runs (a bad file is one line
/// naming it and the cause, exit 2); the plugin is loaded once up front for the same reason;
/// then each scenario runs in its own harness. Exit 0 only when all pass, else 1.
async fn test(args: TestArgs) -> std::process::ExitCode {
    use kwh_testing::scenario::{self, Scenario};
    use std::process::ExitCode;
    let mut scenarios = Vec::new();
    let mut invalid = false;
    for path in &args.scenarios {
        match Scenario::from_file(path) {
            Ok(s) => scenarios.push(s),
            Err(e) => {
                eprintln!("error: scenario {e}");
                invalid = true;
            }
        }
    }
    if invalid {
        return ExitCode::from(2);
    }
    let defaults = EngineConfig::default();
    let engine = match PluginEngine::new(EngineConfig {
        cache_dir: args.cache_dir.or(defaults.cache_dir),
        pooling: false,
        ..defaults
    }) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // Each scenario loads the plugin with its own `config:`; this only checks it is a plugin.
    if let Err(e) = engine
        .load_for_inspection(&args.plugin, Limits::default())
        .await
    {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let mut reports = Vec::new();
    for s in &scenarios {
        reports.push(scenario::run(s, &args.plugin, &engine).await);
    }
    print!("{}", scenario::render_table(&reports));
    if args.show_logs {
        print!("{}", scenario::render_failure_logs(&reports));
    }
    let _ = std::io::stdout().flush();
    if reports.iter().all(|r| r.passed()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

async fn inspect(args: InspectArgs) -> anyhow::Result<()> {
    let engine = engine(args.cache_dir, DEFAULT_MAX_MEMORY, 0, Compiler::InProcess)?;
    let loaded = engine
        .load_for_inspection(&args.plugin, Limits::default())
        .await?;
    let mut v = manifest_value(loaded.manifest());
    v["contract"] = loaded.contract().version().into();
    // Unset optional fields are left out, as kubectl prints objects.
    if let Some(watches) = v["watches"].as_array_mut() {
        for w in watches {
            if let Some(o) = w.as_object_mut() {
                o.retain(|_, v| !v.is_null());
            }
        }
    }
    let yaml = serde_yaml::to_string(&v)?;
    print!("{yaml}");
    Ok(())
}

fn manifest_value(m: &Manifest) -> serde_json::Value {
    use serde_json::json;
    json!({
        "name": m.name,
        "watches": m.watches.iter().map(|w| json!({
            "apiVersion": w.api_version,
            "kind": w.kind,
            "namespace": w.namespace,
            "labelSelector": w.label_selector,
            "fieldSelector": w.field_selector,
            // Left out when there are none (null is dropped like the other unset fields).
            "indexes": (!w.indexes.is_empty()).then(|| w.indexes.iter().map(|i| json!({
                "name": i.name,
                "paths": i.paths,
                "namespaced": i.namespaced,
            })).collect::<Vec<_>>()),
        })).collect::<Vec<_>>(),
        "writes": m.writes.iter().map(|w| json!({
            "apiVersion": w.api_version,
            "kind": w.kind,
            "verbs": w.verbs.iter().map(|v| match v.subresource() {
                Some(s) => format!("{}/{s}", v.rbac()),
                None => v.rbac().to_string(),
            }).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "resyncPeriodMs": m.resync_period.map_or(0, |d| d.as_millis() as u64),
        "workers": m.workers,
        "recordsEvents": m.records_events,
    })
}

async fn rbac(args: RbacArgs) -> anyhow::Result<()> {
    use kwh_plugin::rbac::guess;
    // Checked before any plugin is compiled: a mistake here is one line, at once.
    let leases = kwh_plugin::rbac::Leases::new(
        args.leader_elect_namespace
            .as_deref()
            .unwrap_or(&args.sa_namespace),
        &args.leader_elect_lease_name,
        args.leader_elect,
        args.shards,
    )?;
    let engine = engine(args.cache_dir, DEFAULT_MAX_MEMORY, 0, Compiler::InProcess)?;
    // Each component with the namespace it will run with: `--namespace`, or its own in the
    // plugins file.
    let mut plugins: Vec<(PathBuf, Option<String>)> = args
        .plugins
        .iter()
        .map(|p| (p.clone(), args.namespace.clone()))
        .collect();
    if let Some(file) = &args.plugins_file {
        let limits = Limits::default();
        let defaults = plugins_file::Defaults {
            limits: &limits,
            namespace: args.namespace.as_deref(),
        };
        let specs =
            plugins_file::read(file, "plugins file", &defaults).map_err(anyhow::Error::msg)?;
        plugins.extend(specs.into_iter().map(|s| (s.path, s.namespace)));
    }
    let mut manifests = Vec::new();
    for (p, ns) in &plugins {
        let manifest = engine
            .load_for_inspection(p, Limits::default())
            .await?
            .manifest()
            .clone();
        manifests.push((manifest, ns.as_deref()));
    }
    let mut offline = kwh_plugin::rbac::OfflineKinds::new();
    for f in &args.crds {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("CRD file {}", f.display()))?;
        let n = offline
            .add_crds(&text)
            .with_context(|| format!("CRD file {}", f.display()))?;
        if n == 0 {
            anyhow::bail!(
                "CRD file {}: holds no CustomResourceDefinition",
                f.display()
            );
        }
    }
    let discovery = if args.kubeconfig.is_some() || args.context.is_some() {
        Some(Discovery::new(Client::new(kube_config(
            args.kubeconfig.as_deref(),
            args.context.as_deref(),
        )?)?))
    } else {
        None
    };
    // Every kind a manifest names, resolved once: from the CRD files first (the kind they
    // define is what the cluster will serve, whether or not it does yet), then by discovery
    // when a cluster is given, else from the built-in resources, else guessed as kubectl would
    // (and said).
    let mut resolved = std::collections::HashMap::new();
    for (m, _) in &manifests {
        let kinds = m
            .watches
            .iter()
            .map(|w| (&w.api_version, &w.kind))
            .chain(m.writes.iter().map(|w| (&w.api_version, &w.kind)));
        for (av, k) in kinds {
            if resolved.contains_key(&(av.clone(), k.clone())) {
                continue;
            }
            let from_crd = offline.resolve_from_crds(av, k);
            let r = match (&discovery, from_crd) {
                (_, Some(r)) => r,
                (Some(d), None) => {
                    let r = d
                        .resolve(av, k)
                        .await
                        .with_context(|| format!("plugin {:?}: kind {k} ({av})", m.name))?;
                    kwh_plugin::rbac::Resolved {
                        resource: r.plural,
                        namespaced: r.namespaced,
                    }
                }
                (None, None) => offline.resolve(av, k).unwrap_or_else(|| {
                    let g = guess(k);
                    eprintln!(
                        "warning: plugin {:?}: kind {k} ({av}) is not built in and no --crd file \
                         defines it; guessed resource {:?}, namespaced (give its CRD with --crd, \
                         or --kubeconfig to ask the cluster)",
                        m.name, g.resource
                    );
                    g
                }),
            };
            resolved.insert((av.clone(), k.clone()), r);
        }
    }
    let subject = kwh_plugin::rbac::Subject {
        role_name: &args.role_name,
        namespace: &args.sa_namespace,
        service_account: &args.service_account,
    };
    let yaml = kwh_plugin::rbac::rbac_yaml(
        manifests.iter().map(|(m, ns)| (m, *ns)),
        |av, k| resolved.get(&(av.to_string(), k.to_string())).cloned(),
        &subject,
        leases.as_ref(),
    )?;
    print!("{yaml}");
    Ok(())
}

fn kube_config(kubeconfig: Option<&Path>, context: Option<&str>) -> anyhow::Result<Config> {
    Ok(match kubeconfig {
        Some(p) => Config::from_kubeconfig_paths(
            &[p.to_path_buf()],
            &KubeconfigOptions {
                context: context.map(str::to_owned),
                ..Default::default()
            },
        )?,
        None => Config::infer(context)?,
    })
}

async fn start_emulator(seed: Option<&Path>) -> anyhow::Result<(EmulatorHandle, PathBuf)> {
    let handle = Emulator::builder().admin(true).start().await?;
    if let Some(path) = seed {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read seed {}", path.display()))?;
        let n = handle
            .seed_yaml(&text)
            .with_context(|| format!("seed {}", path.display()))?;
        tracing::info!(file = %path.display(), objects = n, "emulator seeded");
    }
    let kubeconfig =
        std::env::temp_dir().join(format!("host-emulator-{}.kubeconfig", handle.addr().port()));
    handle.write_kubeconfig(&kubeconfig)?;
    Ok((handle, kubeconfig))
}

/// tokio's default runtime, for the commands other than a run (the emulator serves many
/// clients).
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The run's runtime: one thread (a current-thread runtime, so an event is read, cached and
/// handed to the guests on the thread that woke for it) or tokio's work-stealing runtime with
/// `threads` workers; idle wake-ups batched as [`wakeups::Batching`] says.
fn run_runtime(threads: usize, batching: Duration) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut b = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    wakeups::Batching::new(batching).install(&mut b);
    b.enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The `--config` file, read before the runtime starts (it may set the runtime's threads).
fn read_config(args: &RunArgs) -> anyhow::Result<FileConfig> {
    Ok(match &args.config {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read config {}", p.display()))?;
            serde_yaml::from_str(&text).with_context(|| format!("config {}", p.display()))?
        }
        None => FileConfig::default(),
    })
}

/// `--worker-threads`, else the config's `workerThreads`, else one.
fn worker_threads(args: &RunArgs, file: &FileConfig) -> anyhow::Result<usize> {
    let from_file = file
        .worker_threads
        .map(|v| check("workerThreads", v, &WORKER_THREADS))
        .transpose()
        .map_err(|e| match &args.config {
            Some(p) => anyhow::anyhow!("config {}: {e}", p.display()),
            None => anyhow::anyhow!("{e}"),
        })?;
    let n = args.worker_threads.or(from_file).unwrap_or(1);
    Ok(usize::try_from(n).unwrap_or(1))
}

/// The longest `--wakeup-batching` window: beyond it the wait would be noticeable.
const MAX_WAKEUP_BATCHING: Duration = Duration::from_millis(100);

/// `--wakeup-batching`, else the config's `wakeupBatching`, else 10 ms: a delay no controller
/// notices (kube-controller-manager trades latency for fewer wake-ups the same way with
/// `--endpointslice-updates-batch-period`).
fn wakeup_batching(args: &RunArgs, file: &FileConfig) -> anyhow::Result<Duration> {
    let in_config = |e: String| match &args.config {
        Some(p) => anyhow::anyhow!("config {}: wakeupBatching: {e}", p.display()),
        None => anyhow::anyhow!("wakeupBatching: {e}"),
    };
    let from_file = file
        .wakeup_batching
        .as_deref()
        .map(kwh_client::duration::parse_duration)
        .transpose()
        .map_err(in_config)?;
    let too_long = |w: Duration| -> Result<Duration, String> {
        if w > MAX_WAKEUP_BATCHING {
            return Err(format!("{w:?} is longer than {MAX_WAKEUP_BATCHING:?}"));
        }
        Ok(w)
    };
    match (args.wakeup_batching, from_file) {
        (Some(w), _) => too_long(w).map_err(|e| anyhow::anyhow!("--wakeup-batching: {e}")),
        (None, Some(w)) => too_long(w).map_err(in_config),
        (None, None) => Ok(Duration::from_millis(10)),
    }
}

async fn run(args: RunArgs, file: FileConfig) -> anyhow::Result<()> {
    trim::start();
    if args.plugins.is_empty() && args.plugins_file.is_none() && args.config.is_none() {
        bail!(
            "no plugin given: use `--plugin FILE.wasm` or `--plugins FILE` (see `host --help`), \
             or a subcommand"
        );
    }
    // Listen before anything is announced, so an early signal stops the host cleanly.
    let mut stop =
        shutdown::ShutdownSignal::install().context("cannot listen for SIGINT/SIGTERM")?;
    let file_check = |key: &str, v: Option<u64>, range| {
        v.map(|v| check(key, v, range))
            .transpose()
            .map_err(|e| match &args.config {
                Some(p) => anyhow::anyhow!("config {}: {e}", p.display()),
                None => anyhow::anyhow!("{e}"),
            })
    };
    let handler_deadline_ms =
        file_check("handlerDeadlineMs", file.handler_deadline_ms, &DEADLINE_MS)?;
    let reconcile_deadline_ms = file_check(
        "reconcileDeadlineMs",
        file.reconcile_deadline_ms,
        &DEADLINE_MS,
    )?;
    let memory_mb = file_check("memoryMb", file.memory_mb, &MEMORY_MB)?;
    let max_instances = file_check("maxInstances", file.max_instances, &MAX_INSTANCES)?;
    let max_queued_keys = file_check("maxQueuedKeys", file.max_queued_keys, &MAX_QUEUED_KEYS)?;
    let log_lines_per_second = file_check(
        "logLinesPerSecond",
        file.log_lines_per_second,
        &LOG_LINES_PER_SECOND,
    )?;
    let list_page_size = file_check("listPageSize", file.list_page_size, &LIST_PAGE_SIZE)?;
    let list_page_size = args
        .list_page_size
        .or(list_page_size)
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    let defaults = Limits::default();
    let ms = Duration::from_millis;
    let limits = Limits {
        handler_deadline: args
            .handler_deadline_ms
            .or(handler_deadline_ms)
            .map_or(defaults.handler_deadline, ms),
        reconcile_deadline: args
            .reconcile_deadline_ms
            .or(reconcile_deadline_ms)
            .map_or(defaults.reconcile_deadline, ms),
        memory_bytes: args
            .memory_mb
            .or(memory_mb)
            .map_or(defaults.memory_bytes, plugins_file::mib),
        max_instances: args
            .max_instances
            .or(max_instances)
            .map_or(defaults.max_instances, |n| {
                u32::try_from(n).unwrap_or(u32::MAX)
            }),
        max_queued_keys: args
            .max_queued_keys
            .or(max_queued_keys)
            .map_or(defaults.max_queued_keys, plugins_file::keys),
        log_lines_per_second: args
            .log_lines_per_second
            .or(log_lines_per_second)
            .map_or(defaults.log_lines_per_second, |n| {
                u32::try_from(n).unwrap_or(u32::MAX)
            }),
        ..defaults
    };
    let namespace = args.namespace.clone().or(file.namespace.clone());
    let specs = plugin_specs(&args, file.plugins.clone(), &limits, namespace.as_deref())?;
    if specs.is_empty() {
        bail!(
            "no plugin given: use `--plugin FILE.wasm` or `--plugins FILE` (see `host --help`), \
             or a subcommand"
        );
    }
    let grace = Duration::from_secs(
        args.grace_period
            .or(file.grace_period_seconds)
            .unwrap_or(30),
    );
    let qd = QuarantinePolicy::default();
    let quarantine = QuarantinePolicy {
        failures: args
            .quarantine_failures
            .or(file.quarantine_failures)
            .unwrap_or(qd.failures),
        window: args
            .quarantine_window
            .or(file.quarantine_window_seconds)
            .map_or(qd.window, Duration::from_secs),
        cooldown: args
            .quarantine_cooldown_ms
            .or(file.quarantine_cooldown_ms)
            .map_or(qd.cooldown, ms),
        max_cooldown: args
            .quarantine_max_cooldown_ms
            .or(file.quarantine_max_cooldown_ms)
            .map_or(qd.max_cooldown, ms),
    };
    if quarantine.max_cooldown < quarantine.cooldown {
        bail!(
            "the quarantine's maximum cool-down ({:?}) is shorter than its first one ({:?})",
            quarantine.max_cooldown,
            quarantine.cooldown
        );
    }
    let handler_retry = RetryPolicy {
        attempts: args
            .handler_attempts
            .or(file.handler_attempts)
            .unwrap_or(RetryPolicy::default().attempts)
            .max(1),
        ..RetryPolicy::default()
    };
    let metrics_addr = args.metrics_addr.or(file.metrics_addr);
    let replica_settings = replica::ReplicaSettings::resolve(&args.replica, &file.replica())
        .map_err(|e| match &args.config {
            Some(p) => anyhow::anyhow!("config {}: {e}", p.display()),
            None => e,
        })?;
    // Each plugin may hold its `max_instances` instances (its workers and its dispatcher), each
    // with its own memory cap: the pool is sized for all of them and for the largest cap.
    let slots = specs
        .iter()
        .fold(0u32, |n, s| n.saturating_add(s.limits.max_instances));
    let max_memory = specs
        .iter()
        .map(|s| s.limits.memory_bytes)
        .fold(limits.memory_bytes, usize::max);
    let engine = engine(
        args.cache_dir.or(file.cache_dir),
        max_memory,
        slots,
        run_compiler(),
    )?;

    let mut emulator = None;
    let config = match &args.emulator {
        Some(seed) => {
            let (handle, kubeconfig) = start_emulator(seed.as_deref()).await?;
            let url = handle.base_url();
            announce(
                args.log_format,
                format_args!("emulator listening on {url}"),
                "emulator listening",
                serde_json::json!({ "url": url }),
            )?;
            announce(
                args.log_format,
                format_args!("kubeconfig: {}", kubeconfig.display()),
                "kubeconfig written",
                serde_json::json!({ "path": kubeconfig.display().to_string() }),
            )?;
            let config = kube_config(Some(&kubeconfig), None)?;
            emulator = Some((handle, kubeconfig));
            config
        }
        None => kube_config(args.kubeconfig.as_deref(), args.context.as_deref())?,
    };
    let client = Client::new(config)?;
    let identity = kwh_plugin::identity::default_identity();
    let leader_only: Vec<String> = specs
        .iter()
        .filter(|s| s.leader_only)
        .map(|s| s.path.display().to_string())
        .collect();
    let replica = replica::Replica::start(&replica_settings, &client, &identity, &leader_only)?;
    let mut runtime = PluginRuntime::new(
        engine,
        client,
        RuntimeOptions {
            limits,
            namespace,
            fail_fast: args.fail_fast || file.fail_fast.unwrap_or(false),
            quarantine,
            handler_retry,
            identity,
            ownership: replica.ownership(),
            list_page_size,
            ..RuntimeOptions::default()
        },
    );
    replica.record_leadership(runtime.events());
    let given = specs.len();
    let started = runtime.start_all_specs(specs).await;
    let result = match started {
        Err(e) => Err(anyhow::anyhow!("{e}")),
        Ok(_) if runtime.plugins().is_empty() && runtime.waiting().is_empty() => Err(
            anyhow::anyhow!("no plugin could be started ({given} given)"),
        ),
        Ok(_) => serve(&runtime, &replica, metrics_addr, args.log_format, &mut stop).await,
    };
    // Queue handles outlive the runtime's shutdown: what their workers still held then is what
    // the grace period cut off.
    let queues: Vec<_> = runtime
        .plugins()
        .iter()
        .map(|p| (p.plugin().name().to_string(), p.queue().clone()))
        .collect();
    let clean = runtime.shutdown(grace).await;
    // After the plugins stopped: the next owner of their keys may start at once.
    replica.stop().await;
    if let Some((handle, kubeconfig)) = emulator {
        handle.shutdown().await;
        let _ = std::fs::remove_file(kubeconfig);
    }
    result?;
    if !clean {
        // A stop that was asked for is a success: the reconciles are level-based and run again
        // from the current state at the next start, so a non-zero status would only make an
        // orchestrator report a failure (or restart a host being stopped). The line says what
        // was cut off, so a grace period that is too short still shows.
        warn_abandoned(grace, &queues);
    }
    Ok(())
}

/// Every plugin to run, in start order: the config file's `plugins:`, the `--plugins` file's,
/// then each `--plugin` with the global settings. Any mistake in either list is one line and
/// nothing is returned, so nothing starts.
fn plugin_specs(
    args: &RunArgs,
    from_config: Option<serde_yaml::Value>,
    limits: &Limits,
    namespace: Option<&str>,
) -> anyhow::Result<Vec<PluginSpec>> {
    let defaults = plugins_file::Defaults { limits, namespace };
    let mut specs = Vec::new();
    if let (Some(value), Some(path)) = (from_config, &args.config) {
        specs.extend(
            plugins_file::parse(value, path, "config", &defaults).map_err(anyhow::Error::msg)?,
        );
    }
    if let Some(path) = &args.plugins_file {
        specs.extend(
            plugins_file::read(path, "plugins file", &defaults).map_err(anyhow::Error::msg)?,
        );
    }
    specs.extend(args.plugins.iter().map(|p| PluginSpec {
        path: p.clone(),
        limits: limits.clone(),
        workers: None,
        namespace: namespace.map(str::to_owned),
        config: std::sync::Arc::new(serde_json::Value::Null),
        leader_only: false,
    }));
    Ok(specs)
}

/// One warning line for a grace period that ended with work left: how many reconciles were
/// abandoned mid-call, as `plugin key` pairs, and how many queued keys never started.
fn warn_abandoned(grace: Duration, queues: &[(String, kwh_plugin::reconcile::PluginQueue)]) {
    let mut in_flight = Vec::new();
    let mut queued = 0;
    for (plugin, q) in queues {
        let mut keys = q.processing();
        keys.sort();
        in_flight.extend(keys.into_iter().map(|k| format!("{plugin} {k}")));
        queued += q.len();
    }
    tracing::warn!(
        abandoned = in_flight.len(),
        queued,
        "grace period of {grace:?} ended: {} in-flight reconcile{} abandoned ({}){}",
        in_flight.len(),
        if in_flight.len() == 1 { "" } else { "s" },
        in_flight.join(", "),
        if queued > 0 {
            format!(", {queued} queued key(s) not reconciled")
        } else {
            String::new()
        },
    );
}

/// Serves metrics (if asked) until SIGINT/SIGTERM.
async fn serve(
    runtime: &PluginRuntime,
    replica: &replica::Replica,
    metrics_addr: Option<SocketAddr>,
    format: LogFormat,
    stop: &mut shutdown::ShutdownSignal,
) -> anyhow::Result<()> {
    let ops = match metrics_addr {
        Some(addr) => {
            let (bound, task) = kwh_plugin::ops::serve(addr, runtime.status())
                .await
                .with_context(|| format!("cannot serve metrics on {addr}"))?;
            let url = format!("http://{bound}/metrics");
            announce(
                format,
                format_args!("metrics on {url}"),
                "metrics served",
                serde_json::json!({ "url": url }),
            )?;
            Some(task)
        }
        None => None,
    };
    tracing::info!(
        plugins = runtime.plugins().len(),
        waiting = runtime.waiting().len(),
        "running; SIGINT or SIGTERM stops"
    );
    let lost = tokio::select! {
        _ = stop.recv() => None,
        why = replica.lost() => Some(why),
    };
    if let Some(t) = ops {
        t.abort();
    }
    match lost {
        None => {
            tracing::info!("signal received; shutting down");
            Ok(())
        }
        // As kube-controller-manager and controller-runtime do: stop, and let the
        // orchestrator restart the process as a candidate. Nothing acts meanwhile: the
        // fence closed before this line.
        Some(why) => Err(anyhow::anyhow!(
            "{why}: stopped calling plugins and writing; exiting so the process restarts as a standby"
        )),
    }
}
