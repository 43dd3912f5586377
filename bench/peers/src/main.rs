//! `peers`: the host against kube-rs, each client a separate process against one API server.
//!
//! `peers run` is the benchmark (see README.md beside this crate), `peers scale` its sync alone
//! from 1,000 to 1,000,000 objects (the scaling curve); `peers seed` and `peers load`
//! are its seeding and its load generator on their own, for profiling a client at a steady rate
//! against an API server someone else started.

mod api;
mod bench;
mod clients;
mod emulator;
mod load;
mod many;
mod objects;
mod proc_stats;
mod scale;
mod seed;
mod spawn;
mod svg;
mod table;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};

use crate::bench::{Deadlines, Plan, Polls};
use crate::clients::{Guests, Setup, Variant};
use crate::load::{Pace, Targets};
use crate::objects::Kind;

#[derive(Debug, Parser)]
#[command(
    about = "The host against kube-rs: sync, CPU per event and memory, each client a process of its own"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the benchmark and print Markdown tables.
    Run(Box<RunArgs>),
    /// Create objects of one kind in a namespace (created if missing).
    Seed(SeedArgs),
    /// Patch the objects of one kind in a namespace at a fixed rate, or as a burst.
    Load(LoadArgs),
    /// The scaling curve: each client's sync of 1k to 1M ConfigMaps (time, CPU, memory), a
    /// Markdown table, growth rates and an SVG chart.
    Scale(Box<scale::ScaleArgs>),
    /// Many idle SDK plugins in one host against as many kube-rs processes: memory and CPU.
    Many(Box<ManyArgs>),
}

#[derive(Debug, Args)]
struct ManyArgs {
    /// Plugin counts (N): N namespaces, N plugins, N kube-rs processes.
    #[arg(long, value_delimiter = ',', default_value = "1,10,100,500")]
    plugins: Vec<usize>,
    /// ConfigMaps (1 KB) in each namespace.
    #[arg(long, default_value_t = 10)]
    per_namespace: usize,
    /// How the plugins watch: each its own namespace, or all of them all namespaces.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "own,shared")]
    watches: Vec<many::Watches>,
    #[arg(long, value_enum, value_delimiter = ',', default_value = "host,kube")]
    clients: Vec<many::Side>,
    /// Run kube-rs only up to this many processes.
    #[arg(long, default_value_t = 500)]
    kube_up_to: usize,
    /// Patches in the update phase (rounded up to a multiple of N).
    #[arg(long, default_value_t = 1000)]
    updates: u64,
    /// Their rate, patches per second.
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    #[arg(long, default_value_t = 8)]
    seed_concurrency: usize,
    #[command(flatten)]
    bins: Bins,
    #[arg(long)]
    keep_logs: bool,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Run against this cluster (objects go into a namespace created for the run and deleted
    /// after it) instead of a `host emulator` process per object set.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Object kinds to seed and watch.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "configmap,pod"
    )]
    kinds: Vec<Kind>,
    /// Object counts (each kind at each count is one object set).
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    objects: Vec<usize>,
    /// Patches per update phase.
    #[arg(long, default_value_t = 10_000)]
    updates: u64,
    /// The paced phases' rates, patches per second.
    #[arg(long, value_delimiter = ',', default_value = "1000,5000")]
    rates: Vec<f64>,
    /// Leave out the burst phase.
    #[arg(long)]
    no_burst: bool,
    /// Patches in flight during the burst.
    #[arg(long, default_value_t = 8)]
    burst_in_flight: usize,
    /// Rounds; each runs every client once, host and kube-rs alternating.
    #[arg(long, default_value_t = 5)]
    pairs: usize,
    /// Clients, in the order each round runs them.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "host-noop,kube-reflector,host-sdk,kube-metadata,host-reloader,kube-reloader-kinds"
    )]
    variants: Vec<Variant>,
    /// The emulator's watch history, in events per resource (default: twice the updates per
    /// phase, at least 10,000), so that no client lagging through a burst has to relist.
    #[arg(long)]
    history_window: Option<usize>,
    #[command(flatten)]
    bins: Bins,
    /// How often the host's /metrics is read while it syncs (its sync time is late by up to this).
    #[arg(long, default_value_t = 10)]
    sync_poll_ms: u64,
    /// How often it is read while a load is sent.
    #[arg(long, default_value_t = 150)]
    poll_ms: u64,
    /// How often once the load has been sent, until the last event.
    #[arg(long, default_value_t = 5)]
    fine_poll_ms: u64,
    /// A phase ends when its process has used under 1 % of a core for this long. Longer than
    /// the host's cache-sync gate's 100 ms poll: the SDK guest's reconciles of the initial keys
    /// start only once the gate opens, and belong to the sync.
    #[arg(long, default_value_t = 250)]
    settle_ms: u64,
    /// Creates in flight while seeding.
    #[arg(long, default_value_t = 8)]
    seed_concurrency: usize,
    /// Keep the children's logs (they are kept anyway when a run fails).
    #[arg(long)]
    keep_logs: bool,
}

/// Where the binaries and guests are; the defaults are the build outputs `scripts/bench-peers`
/// makes, relative to the repository's top directory.
#[derive(Debug, Args)]
struct Bins {
    #[arg(long, default_value = "target/release/host")]
    host: PathBuf,
    /// Default: beside this binary.
    #[arg(long)]
    kube_peer: Option<PathBuf>,
    #[arg(
        long,
        default_value = "tests/guests/target/wasm32-wasip2/release/guest_bench_noop.wasm"
    )]
    noop_wasm: PathBuf,
    #[arg(
        long,
        default_value = "tests/guests/target/wasm32-wasip2/release/guest_bench_sdk.wasm"
    )]
    sdk_wasm: PathBuf,
    #[arg(
        long,
        default_value = "tests/guests/target/wasm32-wasip2/release/guest_bench_sdk_bare.wasm"
    )]
    sdk_bare_wasm: PathBuf,
    #[arg(
        long,
        default_value = "bench/peers/guests/target/wasm32-wasip2/release/peers_noop_pod.wasm"
    )]
    noop_pod_wasm: PathBuf,
    #[arg(
        long,
        default_value = "bench/peers/guests/target/wasm32-wasip2/release/peers_sdk_pod.wasm"
    )]
    sdk_pod_wasm: PathBuf,
    #[arg(
        long,
        default_value = "examples/target/wasm32-wasip2/release/config_reloader.wasm"
    )]
    reloader_wasm: PathBuf,
}

#[derive(Debug, Args)]
struct SeedArgs {
    #[arg(long)]
    kubeconfig: PathBuf,
    #[arg(long, value_enum)]
    kind: Kind,
    #[arg(long)]
    count: usize,
    #[arg(long, default_value = "bench")]
    namespace: String,
    /// Stored size of each object, `managedFields` included (default: 1 KB ConfigMaps, 4 KB Pods).
    #[arg(long)]
    size: Option<usize>,
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
}

#[derive(Debug, Args)]
struct LoadArgs {
    #[arg(long)]
    kubeconfig: PathBuf,
    #[arg(long, value_enum)]
    kind: Kind,
    /// Patches per second, one at a time on a schedule.
    #[arg(long, required_unless_present = "burst", conflicts_with = "burst")]
    rate: Option<f64>,
    /// As fast as the server answers, `--in-flight` at a time.
    #[arg(long)]
    burst: bool,
    #[arg(long, default_value_t = 8)]
    in_flight: usize,
    #[arg(long, default_value_t = 10_000)]
    count: u64,
    /// The objects patched are those of `--kind` in this namespace, in turn.
    #[arg(long, default_value = "bench")]
    namespace: String,
    /// First patch number (patches write their number into the object, so a later load that
    /// starts from the same number can repeat values; the default takes the clock).
    #[arg(long)]
    first: Option<u64>,
}

fn main() {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("peers: starting the runtime: {e}");
            std::process::exit(2);
        }
    };
    let result = rt.block_on(async {
        tokio::select! {
            r = dispatch(cli) => r,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        }
    });
    // Children are killed as their handles drop, before the process exits.
    drop(rt);
    if let Err(e) = result {
        eprintln!("peers: {e:#}");
        std::process::exit(1);
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(args) => {
            in_temp_dir(
                args.keep_logs,
                |dir| async move { run_in(&args, &dir).await },
            )
            .await
        }
        Command::Many(args) => {
            in_temp_dir(
                args.keep_logs,
                |dir| async move { run_many(&args, &dir).await },
            )
            .await
        }
        Command::Scale(args) => {
            in_temp_dir(args.keep_logs, |dir| async move {
                scale::run(&args, &dir).await
            })
            .await
        }
        Command::Seed(args) => {
            let client = api::connect(&args.kubeconfig).await?;
            let size = args.size.unwrap_or(args.kind.default_size());
            let s = seed::seed(
                &client,
                args.kind,
                &args.namespace,
                args.count,
                size,
                args.concurrency,
            )
            .await?;
            println!(
                "seeded {} {} in {} ({} B stored each) in {:.1} s",
                args.count,
                args.kind.plural(),
                args.namespace,
                s.stored_bytes,
                s.took.as_secs_f64()
            );
            Ok(())
        }
        Command::Load(args) => {
            let client = api::connect(&args.kubeconfig).await?;
            let names = own_objects(&client, args.kind, &args.namespace).await?;
            let targets = Targets::new(args.kind, &names);
            let pace = match args.rate {
                Some(r) => Pace::Rate(r),
                None => Pace::Burst {
                    in_flight: args.in_flight,
                },
            };
            let first = args.first.unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64)
            });
            let seq = AtomicU64::new(first);
            let expected = match pace {
                Pace::Rate(r) => Duration::from_secs_f64(args.count as f64 / r),
                Pace::Burst { .. } => Duration::ZERO,
            };
            let report = load::run(
                &client,
                &targets,
                &seq,
                args.count,
                pace,
                expected * 2 + Duration::from_secs(120),
            )
            .await?;
            println!(
                "{} patches to {} {} in {}: {:.0}/s sent, worst pacer lag {:.2} ms, last answer {:.3} s after the first send",
                report.sent,
                targets.paths.len(),
                args.kind.plural(),
                args.namespace,
                report.achieved_rate(pace),
                report.worst_lag.as_secs_f64() * 1e3,
                report.last_answer.duration_since(report.started).as_secs_f64()
            );
            Ok(())
        }
    }
}

/// The objects of `kind` the seeder made in `ns` (the ones `load` patches).
async fn own_objects(
    client: &kube::Client,
    kind: Kind,
    ns: &str,
) -> anyhow::Result<Vec<(String, String)>> {
    let prefix = kind.name(0);
    let prefix = prefix.trim_end_matches('0');
    let names: Vec<_> = api::list_names(client, kind, Some(ns))
        .await?
        .into_iter()
        .filter(|(_, n)| n.starts_with(prefix))
        .collect();
    if names.is_empty() {
        bail!(
            "no {} named {prefix}… in namespace {ns}: seed them first (`peers seed`)",
            kind.plural()
        );
    }
    Ok(names)
}

/// Runs `f` with a temporary directory for the children's logs, removed afterwards unless
/// `keep_logs` or `f` failed.
async fn in_temp_dir<F: std::future::Future<Output = anyhow::Result<()>>>(
    keep_logs: bool,
    f: impl FnOnce(PathBuf) -> F,
) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("peers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = f(dir.clone()).await;
    match &result {
        Ok(()) if !keep_logs => {
            let _ = std::fs::remove_dir_all(&dir);
        }
        _ => eprintln!("[peers] logs kept in {}", dir.display()),
    }
    result
}

/// The client binaries and guests of a run, checked to exist, and a compile cache filled with
/// the guests.
struct Prepared {
    kube_peer: PathBuf,
    guests: Guests,
    cache_dir: PathBuf,
}

/// Finds what `variants` on `kinds` need, fails early (before any seeding) when a file is
/// missing, and compiles the guests into a cache of the run's own in `dir`.
async fn prepare(
    bins: &Bins,
    kinds: &[Kind],
    variants: &[Variant],
    dir: &Path,
) -> anyhow::Result<Prepared> {
    let kube_peer = match &bins.kube_peer {
        Some(p) => p.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("the driver's directory")?
            .join("kube-peer"),
    };
    let guests = Guests {
        noop: bins.noop_wasm.clone(),
        sdk: bins.sdk_wasm.clone(),
        sdk_bare: bins.sdk_bare_wasm.clone(),
        noop_pod: Some(bins.noop_pod_wasm.clone()),
        sdk_pod: Some(bins.sdk_pod_wasm.clone()),
        reloader: bins.reloader_wasm.clone(),
    };
    let mut needed: Vec<PathBuf> = vec![bins.host.clone(), kube_peer.clone()];
    for &kind in kinds {
        for &v in variants.iter().filter(|v| v.is_host() && v.supports(kind)) {
            needed.push(guests.for_variant(v, kind)?.to_path_buf());
        }
    }
    needed.sort();
    needed.dedup();
    for p in &needed {
        if !p.exists() {
            bail!(
                "{} is missing: build it first (scripts/bench-peers does)",
                p.display()
            );
        }
    }
    let cache_dir = dir.join("compile-cache");
    warm_cache(&bins.host, &cache_dir, &needed[..], dir).await?;
    Ok(Prepared {
        kube_peer,
        guests,
        cache_dir,
    })
}

async fn run_many(args: &ManyArgs, dir: &Path) -> anyhow::Result<()> {
    let Prepared {
        kube_peer,
        guests,
        cache_dir,
    } = prepare(
        &args.bins,
        &[Kind::Configmap],
        &[Variant::HostSdk, Variant::KubeReflector],
        dir,
    )
    .await?;
    let setup = Setup {
        host: args.bins.host.clone(),
        kube_peer,
        guests,
        cache_dir,
        // Each plugin count starts its own emulator and sets these.
        kubeconfig: PathBuf::new(),
        namespace: None,
        dir: dir.to_path_buf(),
        server_pid: None,
    };
    let plan = many::Plan {
        counts: args.plugins.clone(),
        per_namespace: args.per_namespace,
        watches: args.watches.clone(),
        sides: args.clients.clone(),
        kube_up_to: args.kube_up_to,
        updates: args.updates,
        rate: args.rate,
        rounds: args.rounds,
        polls: Polls {
            sync: Duration::from_millis(20),
            coarse: Duration::from_millis(150),
            fine: Duration::from_millis(5),
            settle: Duration::from_millis(250),
            cost_scrapes: 10,
        },
        deadlines: Deadlines {
            sync: Duration::from_secs(900),
            settle: Duration::from_secs(300),
            load_slack: Duration::from_secs(600),
        },
        seed_concurrency: args.seed_concurrency,
    };
    let load_before = loadavg();
    let table = many::run(&plan, &setup, &args.bins.sdk_wasm).await?;
    println!("## peers many: idle SDK plugins in one host against kube-rs processes\n");
    println!(
        "Command: `peers many {}`",
        std::env::args().skip(2).collect::<Vec<_>>().join(" ")
    );
    println!("{table}");
    println!(
        "Load average: {load_before} at the start, {} at the end.",
        loadavg()
    );
    Ok(())
}

async fn run_in(args: &RunArgs, dir: &Path) -> anyhow::Result<()> {
    let Prepared {
        kube_peer,
        guests,
        cache_dir,
    } = prepare(&args.bins, &args.kinds, &args.variants, dir).await?;

    let mut paces: Vec<Pace> = args.rates.iter().map(|&r| Pace::Rate(r)).collect();
    if !args.no_burst {
        paces.push(Pace::Burst {
            in_flight: args.burst_in_flight,
        });
    }
    let polls = Polls {
        sync: Duration::from_millis(args.sync_poll_ms),
        coarse: Duration::from_millis(args.poll_ms),
        fine: Duration::from_millis(args.fine_poll_ms),
        settle: Duration::from_millis(args.settle_ms),
        cost_scrapes: 10,
    };
    println!("## peers: the host against kube-rs\n");
    println!(
        "Command: `peers run {}`",
        std::env::args().skip(2).collect::<Vec<_>>().join(" ")
    );
    println!(
        "Each client is a process of its own; the compile cache was filled before any run (`host compile`), so no sync includes a compile.\n"
    );
    let seq = AtomicU64::new(1);
    for &kind in &args.kinds {
        for &objects in &args.objects {
            let plan = Plan {
                kind,
                objects,
                updates: args.updates,
                paces: paces.clone(),
                rounds: args.pairs,
                variants: args.variants.clone(),
                polls,
                deadlines: Deadlines {
                    sync: Duration::from_secs(120) + Duration::from_millis(objects as u64 * 2),
                    settle: Duration::from_secs(60),
                    load_slack: Duration::from_secs(60),
                },
            };
            let load_before = loadavg();
            let set = one_set(args, &plan, dir, &cache_dir, &kube_peer, &guests, &seq).await?;
            println!("{}", set.render());
            println!(
                "Load average: {load_before} at the start of this set, {} at its end.\n",
                loadavg()
            );
        }
    }
    Ok(())
}

/// Seeds one object set (a fresh emulator, or a fresh namespace of the given cluster), measures
/// it, and removes what it made.
#[allow(clippy::too_many_arguments)]
async fn one_set(
    args: &RunArgs,
    plan: &Plan,
    dir: &Path,
    cache_dir: &Path,
    kube_peer: &Path,
    guests: &Guests,
    seq: &AtomicU64,
) -> anyhow::Result<table::ObjectSet> {
    let _emulator;
    let mut server_pid = None;
    let (kubeconfig, ns, scope) = match &args.kubeconfig {
        Some(k) => {
            let ns = format!(
                "peers-{}-{}-{}",
                std::process::id(),
                plan.kind.plural(),
                plan.objects
            );
            (k.clone(), ns.clone(), Some(ns))
        }
        None => {
            let window = args
                .history_window
                .unwrap_or((2 * plan.updates as usize).max(10_000));
            let e = emulator::Emulator::start(&args.bins.host, dir, window).await?;
            let k = e.kubeconfig.clone();
            server_pid = Some(e.pid);
            _emulator = e;
            (k, "bench".to_owned(), None)
        }
    };
    let client = api::connect(&kubeconfig).await?;
    let result = async {
        eprintln!(
            "[peers] seeding {} {} into {ns}",
            plan.objects,
            plan.kind.plural()
        );
        let seeded = seed::seed(
            &client,
            plan.kind,
            &ns,
            plan.objects,
            plan.kind.default_size(),
            args.seed_concurrency,
        )
        .await?;
        eprintln!(
            "[peers] seeded in {:.1} s, {} B stored each",
            seeded.took.as_secs_f64(),
            seeded.stored_bytes
        );
        let names = own_objects(&client, plan.kind, &ns).await?;
        let targets = Targets::new(plan.kind, &names);
        // The clients watch every namespace on the emulator: whatever else it holds of the kind
        // is part of their sync.
        let seen = api::list_names(&client, plan.kind, scope.as_deref())
            .await?
            .len() as u64;
        let setup = Setup {
            host: args.bins.host.clone(),
            kube_peer: kube_peer.to_path_buf(),
            guests: guests.clone(),
            cache_dir: cache_dir.to_path_buf(),
            kubeconfig: kubeconfig.clone(),
            namespace: scope.clone(),
            dir: dir.to_path_buf(),
            server_pid,
        };
        bench::measure_set(
            plan,
            &setup,
            &client,
            &targets,
            seen,
            seeded.stored_bytes,
            seq,
        )
        .await
    }
    .await;
    if scope.is_some() {
        if let Err(e) = api::delete_namespace(&client, &ns).await {
            eprintln!("[peers] {e:#}");
        }
    }
    result
}

/// Compiles the guests into a cache of the run's own, so that no client's sync includes a
/// compile.
async fn warm_cache(
    host: &Path,
    cache_dir: &Path,
    files: &[PathBuf],
    dir: &Path,
) -> anyhow::Result<()> {
    let wasm: Vec<String> = files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
        .map(|p| p.display().to_string())
        .collect();
    if wasm.is_empty() {
        return Ok(());
    }
    let mut argv = vec![
        "compile".to_owned(),
        "--cache-dir".to_owned(),
        cache_dir.display().to_string(),
    ];
    argv.extend(wasm);
    let log = dir.join("compile.log");
    let mut child = spawn::child(host, &argv, &log, false)?;
    let status = tokio::time::timeout(Duration::from_secs(600), child.wait())
        .await
        .context("`host compile` took over 10 minutes")??;
    if !status.success() {
        bail!("`host compile` failed ({status}); see {}", log.display());
    }
    Ok(())
}

/// The 1-minute load average, as `/proc/loadavg` gives it.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split(' ').next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}
