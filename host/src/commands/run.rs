//! The run (`host --plugin …`, no subcommand): plugins against a cluster or the embedded
//! emulator until SIGINT or SIGTERM, or until a replica loses its lease.

mod embedded;
mod settings;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Args;
use kwh_client::{Client, Config};
use kwh_plugin::{
    Change, EntryError, PluginRuntime, PluginSources, RuntimeOptions, SourceId, SourceOptions,
};

use super::{engine, kube_config, run_compiler, LOG_TARGET};
use crate::cluster_plugins::ClusterPlugins;
use crate::output::{announce, LogFormat};
use crate::plugins_file::{
    ranged, DEADLINE_MS, LIST_PAGE_SIZE, LOG_LINES_PER_SECOND, MAX_INSTANCES, MAX_QUEUED_KEYS,
    MEMORY_MB, WORKER_THREADS,
};
use crate::plugins_watch::PluginsWatch;
use crate::{replica, shutdown, trim, wakeups};
use embedded::Embedded;
use settings::{FileConfig, Settings};

/// The run, on its own runtime: the `--config` file is read first, since it may set the
/// runtime's threads.
pub fn main(args: RunArgs) -> anyhow::Result<()> {
    let file = settings::read_config(&args)?;
    let threads = settings::worker_threads(&args, &file)?;
    let batching = settings::wakeup_batching(&args, &file)?;
    run_runtime(threads, batching)?.block_on(run(args, file))
}

/// Running plugins. Every limit can also come from `--config`; flags win.
#[derive(Args, Debug)]
pub struct RunArgs {
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
    /// How often the `--plugins` file and its modules are checked for changes (default 5s; 0
    /// never): an edit adds, upgrades and removes its plugins without a restart, and a
    /// change that fails leaves the running revision running.
    #[arg(long, value_name = "DURATION", value_parser = kwh_client::duration::parse_duration,
        default_value = "5s")]
    plugins_poll_interval: Option<Duration>,
    /// Also run the plugins that `WasmController` resources name (`kube-wasm.dev/v1alpha1`,
    /// `deploy/crds/wasmcontroller.yaml`): each change applied while the host runs, the status
    /// written to the resource.
    #[arg(long)]
    plugins_from_cluster: bool,
    #[command(flatten)]
    registry: super::RegistryArgs,
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
    pub log_format: LogFormat,
    #[command(flatten)]
    replica: replica::ReplicaArgs,
}

pub async fn run(args: RunArgs, file: FileConfig) -> anyhow::Result<()> {
    trim::start();
    require_plugins(&args)?;
    // Listen before anything is announced, so an early signal stops the host cleanly.
    let mut stop =
        shutdown::ShutdownSignal::install().context("cannot listen for SIGINT/SIGTERM")?;
    let mut settings = Settings::resolve(&args, &file)?;
    let replica_settings = &settings.replica;
    if args.plugins_from_cluster && replica_settings.shards && !replica_settings.leader_elect {
        // Every member runs every plugin; the leader writes the resources' status, and a
        // sharded host without an election has no leader.
        bail!("--plugins-from-cluster with --shards needs --leader-elect: the leader writes the WasmControllers' status");
    }
    // Modules named by `oci://` reference are pulled (or found in the blob cache) first: from
    // here on every spec names a file.
    let modules = std::sync::Arc::new(super::modules(
        settings.cache_dir.as_deref(),
        &args.registry,
    )?);
    let given = fetch_given(&modules, std::mem::take(&mut settings.given)).await?;
    let specs: Vec<kwh_plugin::PluginSpec> = given.all().map(|(_, s)| s.clone()).collect();
    let (slots, max_memory) = pool_size(
        &specs,
        &settings.limits,
        settings.watched.is_some() || args.plugins_from_cluster,
    );
    let engine = engine(
        settings.cache_dir.clone(),
        max_memory,
        slots,
        run_compiler(),
    )?;
    let (config, emulator) = connect(&args).await?;
    let client = Client::new(config)?;
    let identity = kwh_plugin::identity::default_identity();
    let leader_only: Vec<String> = specs
        .iter()
        .filter(|s| s.leader_only)
        .map(|s| s.path.display().to_string())
        .collect();
    let replica = replica::Replica::start(&settings.replica, &client, &identity, &leader_only)?;
    let mut runtime = PluginRuntime::new(
        engine,
        client,
        RuntimeOptions {
            limits: settings.limits.clone(),
            namespace: settings.namespace.clone(),
            fail_fast: settings.fail_fast,
            quarantine: settings.quarantine.clone(),
            handler_retry: settings.handler_retry.clone(),
            identity,
            ownership: replica.ownership(),
            list_page_size: settings.list_page_size,
            ..RuntimeOptions::default()
        },
    );
    replica.record_leadership(runtime.events());
    let count = specs.len();
    let mut reconciler = PluginSources::new(settings.grace);
    let started = start_given(&mut runtime, &mut reconciler, &given, settings.fail_fast).await;
    let sources = Sources::start(
        reconciler,
        started.as_ref().ok().copied(),
        given.file,
        args.plugins_from_cluster,
        &settings,
        &runtime,
        &modules,
        &replica,
    );
    let grace = settings.grace;
    let result = match started {
        Err(e) => Err(anyhow::anyhow!("{e}")),
        Ok(_)
            if sources.watch.is_none()
                && sources.cluster.is_none()
                && runtime.plugins().is_empty()
                && runtime.waiting().is_empty() =>
        {
            Err(anyhow::anyhow!(
                "no plugin could be started ({count} given)"
            ))
        }
        Ok(_) => {
            serve(
                &mut runtime,
                sources,
                &replica,
                settings.metrics_addr,
                args.log_format,
                &mut stop,
            )
            .await
        }
    };
    let (clean, queues) = stop_all(runtime, grace, replica, emulator).await;
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

/// Refuses a run with nothing to run, in one line.
fn require_plugins(args: &RunArgs) -> anyhow::Result<()> {
    if args.plugins.is_empty()
        && args.plugins_file.is_none()
        && args.config.is_none()
        && !args.plugins_from_cluster
    {
        bail!(
            "no plugin given: use `--plugin FILE.wasm` or `--plugins FILE` (see `host --help`), \
             or a subcommand"
        );
    }
    Ok(())
}

/// The plugins given at start, by source, each as declared and with its module fetched
/// (pulled, or found in the blob cache).
#[derive(Debug, Default)]
struct FetchedGiven {
    config: Vec<(PathBuf, kwh_plugin::PluginSpec)>,
    file: Vec<(PathBuf, kwh_plugin::PluginSpec)>,
    flags: Vec<(PathBuf, kwh_plugin::PluginSpec)>,
}

impl FetchedGiven {
    /// Every plugin given, in start order.
    fn all(&self) -> impl Iterator<Item = &(PathBuf, kwh_plugin::PluginSpec)> {
        self.config.iter().chain(&self.file).chain(&self.flags)
    }
}

/// Each given plugin's module fetched, or the first failure naming its reference.
async fn fetch_given(
    modules: &crate::modules::Modules,
    given: settings::Given,
) -> anyhow::Result<FetchedGiven> {
    let fetch = |specs: Vec<kwh_plugin::PluginSpec>| async move {
        let mut pairs = Vec::with_capacity(specs.len());
        for s in specs {
            let declared = s.path.clone();
            let (spec, ..) = modules
                .fetch(s, &kwh_oci::Credentials::none(), None, &[])
                .await?;
            pairs.push((declared, spec));
        }
        anyhow::Ok(pairs)
    };
    Ok(FetchedGiven {
        config: fetch(given.config).await?,
        file: fetch(given.file).await?,
        flags: fetch(given.flags).await?,
    })
}

/// Starts the given plugins, each place they were given registered as a source of the
/// runtime's plugins (so that a name one of them runs is refused to any other source): the
/// config file's, the plugins file's, then `--plugin`'s. Each entry is added to its source's
/// desired set in turn, so that a failure is one line in start order, and with `fail_fast` the
/// first one stops the start (nothing after it starts) and is returned. The plugins file's
/// source, for its watch.
async fn start_given(
    runtime: &mut PluginRuntime,
    reconciler: &mut PluginSources,
    given: &FetchedGiven,
    fail_fast: bool,
) -> Result<SourceId, EntryError> {
    let mut file_source = None;
    for (options, entries, is_file) in [
        (SourceOptions::config(), &given.config, false),
        (SourceOptions::plugins_file(), &given.file, true),
        (SourceOptions::flags(), &given.flags, false),
    ] {
        let source = reconciler.add(options);
        if is_file {
            file_source = Some(source);
        }
        let ids = kwh_plugin::sources::ids_by_module(entries.iter().map(|(d, _)| d.as_path()));
        let mut desired = Vec::with_capacity(entries.len());
        for ((declared, spec), id) in entries.iter().zip(ids) {
            desired.push(crate::plugins_watch::desired(
                id.clone(),
                declared.clone(),
                spec.clone(),
            ));
            let outcomes = reconciler.apply(runtime, source, desired.clone()).await;
            for o in outcomes.into_iter().filter(|o| o.id == id) {
                if let Change::Failed(e) = o.change {
                    if fail_fast {
                        return Err(e);
                    }
                    tracing::error!("{e}");
                }
            }
        }
    }
    Ok(file_source.unwrap_or_else(|| reconciler.add(SourceOptions::plugins_file())))
}

/// The instance pool's slots and per-instance memory cap. Each plugin may hold its
/// `max_instances` instances (its workers and its dispatcher), each with its own memory cap:
/// the pool is sized for all of them and for the largest cap; a run that adds plugins later
/// (`live`) has room for them, and for an upgrade's two revisions side by side.
fn pool_size(
    specs: &[kwh_plugin::PluginSpec],
    limits: &kwh_plugin::Limits,
    live: bool,
) -> (u32, usize) {
    let mut slots = specs
        .iter()
        .fold(0u32, |n, s| n.saturating_add(s.limits.max_instances));
    if live {
        slots = slots.saturating_mul(2).max(LIVE_SLOTS);
    }
    let max_memory = specs
        .iter()
        .map(|s| s.limits.memory_bytes)
        .fold(limits.memory_bytes, usize::max);
    (slots, max_memory)
}

/// Stops the plugins (within `grace`), then the replica's membership and the embedded
/// emulator. Whether every reconcile finished, and each plugin's queue: the queue handles
/// outlive the runtime's shutdown, so what their workers still held is what the grace period
/// cut off.
async fn stop_all(
    runtime: PluginRuntime,
    grace: Duration,
    replica: replica::Replica,
    emulator: Option<Embedded>,
) -> (bool, Vec<(String, kwh_plugin::reconcile::PluginQueue)>) {
    let queues: Vec<_> = runtime
        .plugins()
        .iter()
        .map(|p| (p.plugin().name().to_string(), p.queue().clone()))
        .collect();
    let clean = runtime.shutdown(grace).await;
    // After the plugins stopped: the next owner of their keys may start at once.
    replica.stop().await;
    if let Some(emulator) = emulator {
        emulator.stop().await;
    }
    (clean, queues)
}

/// Where plugins come from while the host runs, and the reconciler they all hand their
/// desired plugins to.
pub struct Sources {
    /// What every source asked for and what was applied of it.
    pub reconciler: PluginSources,
    /// The watched `--plugins` file.
    pub watch: Option<PluginsWatch>,
    /// `WasmController` resources (`--plugins-from-cluster`).
    pub cluster: Option<ClusterPlugins>,
}

impl Sources {
    /// Watches the plugins file (its `source` in the reconciler, its plugins as given at
    /// start) when it is watched and, with `--plugins-from-cluster`, the `WasmController`
    /// resources, for plugins added, changed and removed while the host runs.
    #[allow(clippy::too_many_arguments)]
    fn start(
        mut reconciler: PluginSources,
        source: Option<SourceId>,
        file: Vec<(PathBuf, kwh_plugin::PluginSpec)>,
        from_cluster: bool,
        settings: &Settings,
        runtime: &PluginRuntime,
        modules: &std::sync::Arc<crate::modules::Modules>,
        replica: &replica::Replica,
    ) -> Sources {
        let watch = match (&settings.watched, source) {
            (Some(w), Some(source)) => Some(PluginsWatch::new(
                w.path.clone(),
                source,
                settings.limits.clone(),
                settings.namespace.clone(),
                w.interval,
                settings.grace,
                file,
                modules.clone(),
                !settings.replica.shards || settings.replica.leader_elect,
            )),
            _ => None,
        };
        let cluster = from_cluster.then(|| {
            ClusterPlugins::start(
                runtime.client(),
                reconciler.add(SourceOptions::resources("WasmController")),
                settings.limits.clone(),
                settings.namespace.clone(),
                settings.grace,
                replica.ownership(),
                runtime.events(),
                modules.clone(),
            )
        });
        Sources {
            reconciler,
            watch,
            cluster,
        }
    }
}

/// How often a rename whose new plugin waits for its kinds is looked at again, to remove the
/// old plugin once the new one runs.
const SETTLE: Duration = Duration::from_secs(1);

/// Instance slots of a run whose plugins file is watched, at least: plugins added later need
/// theirs (16 each by default), and an upgrade holds two revisions' for a moment.
const LIVE_SLOTS: u32 = 256;

/// The cluster to run against: the embedded emulator (started here, its address and
/// kubeconfig announced; handed back to be stopped at the end), else the kubeconfig's.
async fn connect(args: &RunArgs) -> anyhow::Result<(Config, Option<Embedded>)> {
    let Some(seed) = &args.emulator else {
        let config = kube_config(args.kubeconfig.as_deref(), args.context.as_deref())?;
        return Ok((config, None));
    };
    let emulator = Embedded::start(seed.as_deref()).await?;
    let url = emulator.url();
    announce(
        args.log_format,
        format_args!("emulator listening on {url}"),
        "emulator listening",
        serde_json::json!({ "url": url }),
    )?;
    announce(
        args.log_format,
        format_args!("kubeconfig: {}", emulator.kubeconfig().display()),
        "kubeconfig written",
        serde_json::json!({ "path": emulator.kubeconfig().display().to_string() }),
    )?;
    let config = kube_config(Some(emulator.kubeconfig()), None)?;
    Ok((config, Some(emulator)))
}

/// One warning line for a grace period that ended with work left: how many reconciles were
/// abandoned mid-call, as `plugin key` pairs, and how many queued keys never started.
pub fn warn_abandoned(grace: Duration, queues: &[(String, kwh_plugin::reconcile::PluginQueue)]) {
    let mut in_flight = Vec::new();
    let mut queued = 0;
    for (plugin, q) in queues {
        let mut keys = q.processing();
        keys.sort();
        in_flight.extend(keys.into_iter().map(|k| format!("{plugin} {k}")));
        queued += q.len();
    }
    tracing::warn!(target: LOG_TARGET,
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

/// Serves metrics (if asked) until SIGINT/SIGTERM, applying the watched plugins file's
/// changes meanwhile (a signal during an upgrade is handled once that upgrade is done: a
/// switch of revisions is not cut in half).
pub async fn serve(
    runtime: &mut PluginRuntime,
    mut sources: Sources,
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
    tracing::info!(target: LOG_TARGET,
        plugins = runtime.plugins().len(),
        waiting = runtime.waiting().len(),
        "running; SIGINT or SIGTERM stops"
    );
    let lost = loop {
        let file = async {
            match sources.watch.as_mut() {
                Some(w) => w.changed().await,
                None => std::future::pending().await,
            }
        };
        let cluster = async {
            match sources.cluster.as_mut() {
                Some(c) => c.changed().await,
                None => std::future::pending().await,
            }
        };
        let retiring = sources.reconciler.has_retiring();
        let settle = async {
            if retiring {
                tokio::time::sleep(SETTLE).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            _ = stop.recv() => break None,
            why = replica.lost() => break Some(why),
            () = file => {
                if let Some(w) = sources.watch.as_mut() {
                    w.apply(runtime, &mut sources.reconciler).await;
                }
            }
            () = cluster => {
                if let Some(c) = sources.cluster.as_mut() {
                    c.apply(runtime, &mut sources.reconciler).await;
                }
            }
            () = settle => {
                for (source, o) in sources.reconciler.settle(runtime).await {
                    if let Change::Retired { from, clean } = &o.change {
                        tracing::info!(target: LOG_TARGET, plugin = %from, clean,
                            "{}: plugin {from} removed: plugin {} runs",
                            sources.reconciler.describe(source, &o.id),
                            o.plugin.as_deref().unwrap_or("-"));
                    }
                }
            }
        }
    };
    if let Some(t) = ops {
        t.abort();
    }
    match lost {
        None => {
            tracing::info!(target: LOG_TARGET, "signal received; shutting down");
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

/// The run's runtime: one thread (a current-thread runtime, so an event is read, cached and
/// handed to the guests on the thread that woke for it) or tokio's work-stealing runtime with
/// `threads` workers; idle wake-ups batched as [`wakeups::Batching`] says.
pub fn run_runtime(threads: usize, batching: Duration) -> anyhow::Result<tokio::runtime::Runtime> {
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
