#![doc = include_str!("../README.md")]
//!
//! ## Why turmoil
//!
//! Why turmoil (the tokio project's simulation crate) rather than tokio's paused clock alone:
//! a paused clock only makes time deterministic for one runtime; the guarantees in question
//! span several processes (replicas, the API server) and the network between them. Turmoil
//! runs each host on a paused current-thread runtime of its own and steps them one after the
//! other on one thread, moving every clock by the same tick, and carries TCP between them
//! with seeded latencies, partitions and holds; a host can be crashed (its runtime dropped
//! with every task in it, as kill -9 leaves nothing) and started again. The production code
//! runs unchanged on it: the client's connections come from a dialer (`kwh_client::dial`), the
//! emulator takes them from any listener (`kwh_emulator::server::Listener`), and every clock
//! the guarantees depend on is tokio's (`kwh_coordination`).
//!
//! A run is judged by the oracles in [`check`]; a failure names its seed, and [`run`] with
//! that seed replays it. `SIM_DUMP=1` prints a run's plugin lines and the hosts' log lines.

pub mod capture;
pub mod check;
pub mod net;
pub mod plan;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kwh_plugin::{EngineConfig, Limits, PluginEngine, PluginRuntime, PluginSpec, RuntimeOptions};
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::mpsc;

use plan::{Plan, Step};

/// Where the simulated API server listens, by its simulated host name.
const APISERVER: &str = "http://apiserver:6443";

/// What every run shares: the engine (compiled components cached) and the guest.
pub struct Setup {
    engine: PluginEngine,
    guest: PathBuf,
}

/// Why a simulation could not be set up or run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The Wasm engine.
    #[error("engine: {0}")]
    Engine(String),
    /// A guarantee was broken: the seed replays it.
    #[error("seed {seed}: {broken}")]
    Broken {
        /// The seed of the run.
        seed: u64,
        /// What was broken.
        broken: String,
    },
}

impl Setup {
    /// Runs the `reviser` test guest at `guest` (its lines say which revision did what).
    pub fn new(guest: PathBuf) -> Result<Setup, SimError> {
        let engine = PluginEngine::new(EngineConfig {
            cache_dir: Some(std::env::temp_dir().join("kube-wasm-host-sim-cache")),
            max_instances: 64,
            ..EngineConfig::default()
        })
        .map_err(|e| SimError::Engine(e.to_string()))?;
        Ok(Setup { engine, guest })
    }
}

/// What a run did, for the figures.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Simulated time.
    pub simulated: Duration,
    /// Updates made.
    pub updates: usize,
    /// Upgrades made.
    pub upgrades: usize,
    /// Plugin lines judged.
    pub lines: usize,
}

/// A command the driver sends a replica.
#[derive(Debug)]
enum Command {
    Upgrade(String),
}

/// Runs the scenario of `seed` and judges it.
pub fn run(setup: &Setup, seed: u64) -> Result<Summary, SimError> {
    let plan = Plan::of(seed);
    let broken = |broken: String| SimError::Broken { seed, broken };
    capture::reset();
    let mut sim = turmoil::Builder::new()
        .simulation_duration(plan.duration() + Duration::from_secs(60))
        .tick_duration(Duration::from_millis(5))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(20))
        .rng_seed(seed)
        .build();

    let em: Arc<Mutex<Option<kwh_emulator::EmulatorHandle>>> = Arc::default();
    sim.host("apiserver", {
        let em = em.clone();
        move || {
            let em = em.clone();
            async move {
                let l = turmoil::net::TcpListener::bind("0.0.0.0:6443").await?;
                let addr = l.local_addr()?;
                let handle =
                    kwh_emulator::Emulator::builder().start_with(net::Listener(l), addr)?;
                *em.lock() = Some(handle);
                std::future::pending::<()>().await;
                Ok(())
            }
        }
    });

    let (tx, rx) = mpsc::unbounded_channel::<Command>();
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let opts = RuntimeOptions {
        limits: Limits {
            // Every line counts: no log budget.
            log_lines_per_second: 0,
            ..Limits::default()
        },
        ..RuntimeOptions::default()
    };
    let spec = {
        let guest = setup.guest.clone();
        let opts = opts.clone();
        let workers = plan.workers;
        move |revision: &str| PluginSpec {
            config: Arc::new(json!({"revision": revision, "name": "sim", "workers": workers})),
            ..PluginSpec::with_defaults(guest.clone(), &opts)
        }
    };
    // Set once the first revision's caches synced: the driver's clock starts there, so that
    // every update it makes is one the plugin sees as an update (before the initial list, an
    // update is folded into it).
    let ready = Arc::new(AtomicBool::new(false));
    sim.host("replica-0", {
        let ready = ready.clone();
        let engine = setup.engine.clone();
        let failures = failures.clone();
        let first = plan.first.clone();
        let spec = spec.clone();
        move || {
            let (engine, rx, failures, opts, spec, ready) = (
                engine.clone(),
                rx.clone(),
                failures.clone(),
                opts.clone(),
                spec.clone(),
                ready.clone(),
            );
            let first = first.clone();
            async move {
                let client = net::client(APISERVER)?;
                let mut rt = PluginRuntime::new(engine, client, opts);
                rt.start_spec(spec(&first)).await?;
                while !rt.is_ready() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                ready.store(true, Ordering::Release);
                let mut rx = rx.lock().await;
                while let Some(cmd) = rx.recv().await {
                    match cmd {
                        Command::Upgrade(label) => {
                            if let Err(e) = rt.upgrade("sim", spec(&label), GRACE).await {
                                failures.lock().push(format!("upgrade to {label}: {e}"));
                            }
                        }
                    }
                }
                Ok(())
            }
        }
    });

    let made: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    sim.client("driver", {
        let (em, made, plan) = (em.clone(), made.clone(), plan.clone());
        async move {
            let em = loop {
                if let Some(h) = em.lock().clone() {
                    break h;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            };
            for i in 0..plan.objects {
                em.create(cm(i, 0))?;
            }
            while !ready.load(Ordering::Acquire) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let start = tokio::time::Instant::now();
            for (n, (at, step)) in plan.steps.iter().enumerate() {
                tokio::time::sleep_until(start + *at).await;
                match step {
                    Step::Update(i) => {
                        let o = em.update(cm(*i, n + 1))?;
                        let rv = o["metadata"]["resourceVersion"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned();
                        made.lock().push((format!("default/u-{i}"), rv));
                    }
                    Step::Upgrade(label) => {
                        tx.send(Command::Upgrade(label.clone()))?;
                    }
                }
            }
            tokio::time::sleep(plan.settle).await;
            Ok(())
        }
    });

    sim.run()
        .map_err(|e| broken(format!("the simulation failed: {e}")))?;
    let lines = capture::take();
    let made = made.lock().clone();
    if capture::dump() {
        for l in &lines {
            eprintln!("{} {} {} {}", l.revision, l.what, l.key, l.rv);
        }
        eprintln!("made: {made:?}");
    }
    if let Some(f) = failures.lock().first() {
        return Err(broken(f.clone()));
    }
    check::each_update_handled_once(&lines, &made).map_err(broken)?;
    check::old_revisions_only_finish_what_they_held(&lines, &plan).map_err(broken)?;
    check::last_versions_reconciled(&lines, &made).map_err(broken)?;
    Ok(Summary {
        simulated: sim.elapsed(),
        updates: made.len(),
        upgrades: plan
            .steps
            .iter()
            .filter(|(_, s)| matches!(s, Step::Upgrade(_)))
            .count(),
        lines: lines.len(),
    })
}

/// How long an old revision's reconciles may run on after an upgrade.
const GRACE: Duration = Duration::from_secs(10);

/// ConfigMap `u-<i>` with data `n`.
fn cm(i: usize, n: usize) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": format!("u-{i}"), "namespace": "default"},
           "data": {"n": n.to_string()}})
}
