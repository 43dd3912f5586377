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
mod schedule;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kwh_coordination::leader_election::Timings;
use kwh_coordination::replica::{self, Replica};
use kwh_plugin::fetches::Fetches;
use kwh_plugin::sources::{Change, Desired, EntryOutcome, PluginSources, SourceOptions, Want};
use kwh_plugin::{EngineConfig, Limits, PluginEngine, PluginRuntime, PluginSpec, RuntimeOptions};
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::mpsc;

use plan::{Plan, Step, Topology};

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
            // The epoch ticks in the machine's time, and a guest call running past a tick
            // yields to the other tasks: with the default 1 ms, how busy the machine was
            // would reorder a run. The simulation's guest never computes for long; a second
            // keeps a seed's run the same from one run to the next.
            epoch_tick: Duration::from_secs(1),
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
    /// How the replicas shared the work.
    pub topology: Option<Topology>,
    /// Updates made.
    pub updates: usize,
    /// Upgrades made.
    pub upgrades: usize,
    /// Crashes and partitions.
    pub faults: usize,
    /// Plugin lines and server answers judged.
    pub lines: usize,
}

/// What the plugin's entry asks for: the revision labelled so, of the plugin named so.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Wanted {
    label: String,
    plugin: String,
}

/// A command the driver sends a replica: the entry as it is now (`None`: taken out).
#[derive(Debug)]
enum Command {
    Set(Option<Wanted>),
}

/// The one entry of the one source the replicas' plugin comes from (a `WasmController`).
const ENTRY: &str = "sim";
/// A second entry of the source, whose registry never answers ([`Plan::silent_registry`]).
const SILENT: &str = "silent";
/// The revision label the test guest refuses to start with.
const REFUSED: &str = "bad";

/// What the driver asks of the simulation itself, which only the loop that steps it can do.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Crash(usize),
    Restart(usize),
    Partition(usize),
    Repair(usize),
}

/// A replica's simulated host name, also its identity and User-Agent.
fn replica_name(i: usize) -> String {
    format!("replica-{i}")
}

/// The namespace of the coordination Leases.
const NAMESPACE: &str = "default";
/// The leader Lease's (and shard group's) name.
const LEASE: &str = "sim";
/// How long every replica's first caches may take to sync after the start.
const READY_WITHIN: Duration = Duration::from_secs(60);
/// How long after a replica stops on its own (a lost lease) it is started again, as a pod is.
const RESTART_AFTER: Duration = Duration::from_secs(2);

/// Runs the scenario of `seed` and judges it.
pub fn run(setup: &Setup, seed: u64) -> Result<Summary, SimError> {
    let plan = Plan::of(seed);
    let broken = |broken: String| SimError::Broken { seed, broken };
    capture::reset();
    let _draws = schedule::Draws::begin(seed);
    let mut builder = turmoil::Builder::new();
    builder
        .simulation_duration(plan.duration() + Duration::from_secs(60))
        .tick_duration(Duration::from_millis(5))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(20))
        .rng_seed(seed);
    if plan.shuffle {
        builder.enable_random_order();
    }
    let mut sim = builder.build();

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

    let replicas = plan.topology.replicas();
    let mut txs = Vec::new();
    let mut rxs = Vec::new();
    for _ in 0..replicas {
        let (tx, rx) = mpsc::unbounded_channel::<Command>();
        txs.push(tx);
        rxs.push(Arc::new(tokio::sync::Mutex::new(rx)));
    }
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let opts = RuntimeOptions {
        limits: Limits {
            // Every line counts: no log budget.
            log_lines_per_second: 0,
            reconcile_deadline: plan.reconcile_deadline,
            ..Limits::default()
        },
        ..RuntimeOptions::default()
    };
    let spec = {
        let guest = setup.guest.clone();
        let opts = opts.clone();
        let workers = plan.workers;
        // Its handlers write too: a delivery in flight as revisions change hands (under
        // shards the host must refuse them).
        let writes = plan.writes;
        move |w: &Wanted, mark: &str| {
            let mut config = json!({"revision": w.label, "name": w.plugin, "workers": workers});
            if writes {
                config["mark"] = json!(mark);
                config["handlerWrites"] = json!(true);
            }
            PluginSpec {
                config: Arc::new(config),
                ..PluginSpec::with_defaults(guest.clone(), &opts)
            }
        }
    };
    // The plugins each replica runs, as of its last change: what the end is judged on.
    let running: Arc<Mutex<std::collections::BTreeMap<String, Vec<String>>>> = Arc::default();
    // What the entry asks for now: a replica started again starts with it.
    let current = Arc::new(Mutex::new(Some(Wanted {
        label: plan.first.clone(),
        plugin: plan.plugin_of(&plan.first),
    })));
    // Set once each replica's first caches synced: the driver's clock starts there, so that
    // every update it makes is one the plugin sees as an update (before the initial list, an
    // update is folded into it).
    let ready: Arc<Vec<AtomicBool>> =
        Arc::new((0..replicas).map(|_| AtomicBool::new(false)).collect());
    let (topology, grace, silent_registry) = (plan.topology, plan.grace, plan.silent_registry);
    for (i, rx) in rxs.into_iter().enumerate() {
        let name = replica_name(i);
        let (ready, engine, failures, current, spec, opts, running) = (
            ready.clone(),
            setup.engine.clone(),
            failures.clone(),
            current.clone(),
            spec.clone(),
            opts.clone(),
            running.clone(),
        );
        sim.host(replica_name(i).as_str(), move || {
            let (engine, rx, failures, opts, spec, ready, current, name, running) = (
                engine.clone(),
                rx.clone(),
                failures.clone(),
                opts.clone(),
                spec.clone(),
                ready.clone(),
                current.clone(),
                name.clone(),
                running.clone(),
            );
            async move {
                running.lock().remove(&name);
                capture::note(format!("start {name}"));
                let client = net::client(APISERVER, &name)?;
                let replica = match topology {
                    Topology::Single => Replica::single(),
                    Topology::Leader(_) | Topology::Shards(_) => Replica::start(
                        &replica::Settings {
                            leader_elect: true,
                            shards: matches!(topology, Topology::Shards(_)),
                            namespace: NAMESPACE.into(),
                            lease_name: LEASE.into(),
                            timings: Timings::default(),
                        },
                        &client,
                        &name,
                        &[],
                    )?,
                };
                let mut rt = PluginRuntime::new(
                    engine,
                    client,
                    RuntimeOptions {
                        identity: name.clone(),
                        ownership: replica.ownership(),
                        ..opts
                    },
                );
                // Commands left from before a crash are stale: the current entry is read
                // after they are drained.
                let mut rx = rx.lock().await;
                while rx.try_recv().is_ok() {}
                let mut sources = PluginSources::new(grace);
                let src = sources.add(SourceOptions::resources("WasmController"));
                // As the binary fetches each resource's module: on a task of its own, the
                // entry kept as it runs until its fetch finishes. A fetch takes a few network
                // round trips; the silent registry's never ends.
                let wake = Arc::new(tokio::sync::Notify::new());
                let mut fetches: Fetches<Wanted> = Fetches::new(wake.clone());
                let mut generation = 0;
                let mut fetch = |fetches: &mut Fetches<Wanted>, w: Wanted| {
                    generation += 1;
                    let took = Duration::from_millis(generation as u64 * 53 % 200);
                    fetches.start(ENTRY, generation, false, async move {
                        tokio::time::sleep(took).await;
                        w
                    });
                };
                if silent_registry {
                    fetches.start(SILENT, 1, false, std::future::pending());
                }
                // The source's entries: the plugin's, as fetched (`load`) or kept while its
                // fetch runs (absent once taken out), and the silent one, kept.
                let entries = |asked: &Option<Wanted>, load: Option<&Wanted>| -> Vec<Desired> {
                    let mut entries = Vec::new();
                    if asked.is_some() {
                        entries.push(Desired {
                            id: ENTRY.into(),
                            module: PathBuf::from(ENTRY),
                            want: load.map_or(Want::Keep, |w| Want::Load {
                                spec: spec(w, &name),
                                stamp: String::new(),
                            }),
                        });
                    }
                    if silent_registry {
                        entries.push(Desired {
                            id: SILENT.into(),
                            module: PathBuf::from(SILENT),
                            want: Want::Keep,
                        });
                    }
                    entries
                };
                let mut asked = current.lock().clone();
                if let Some(w) = asked.clone() {
                    fetch(&mut fetches, w);
                }
                // Running, or waiting for the API server to answer (a replica started while
                // cut off): held either way.
                let names = |rt: &PluginRuntime| {
                    let mut names: Vec<String> =
                        rt.plugins().iter().map(|p| p.name().to_owned()).collect();
                    names.extend(rt.waiting().into_iter().map(|(name, _)| name));
                    names
                };
                running.lock().insert(name.clone(), names(&rt));
                // Ready once its caches synced; the entry's changes are taken meanwhile (a
                // replica started while a refused revision was asked for runs nothing, and is
                // not ready, until the rollback).
                let mut noted = false;
                loop {
                    if !noted && rt.is_ready() {
                        capture::note(format!("ready {name}"));
                        ready[i].store(true, Ordering::Release);
                        noted = true;
                    }
                    // As the binary does: a rename whose new plugin waits for the API server
                    // keeps the old one until the new one runs, looked at again each second.
                    let retiring = sources.has_retiring();
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(100)), if !noted => {}
                        _ = tokio::time::sleep(Duration::from_secs(1)), if retiring => {
                            let outcomes: Vec<EntryOutcome> =
                                sources.settle(&rt).await.into_iter().map(|(_, o)| o).collect();
                            judge(&outcomes, &current.lock().clone(), &name, &failures);
                            running.lock().insert(name.clone(), names(&rt));
                        }
                        () = wake.notified() => {
                            let mut done = fetches.finished().await;
                            if let Some(Ok(w)) = done.remove(ENTRY).map(|d| d.result) {
                                let outcomes =
                                    sources.apply(&mut rt, src, entries(&asked, Some(&w))).await;
                                judge(&outcomes, &Some(w), &name, &failures);
                                running.lock().insert(name.clone(), names(&rt));
                            }
                        }
                        cmd = rx.recv() => match cmd {
                            Some(Command::Set(wanted)) => {
                                asked = wanted.clone();
                                match wanted {
                                    Some(w) => fetch(&mut fetches, w),
                                    None => {
                                        fetches.cancel(ENTRY);
                                        let outcomes =
                                            sources.apply(&mut rt, src, entries(&asked, None)).await;
                                        judge(&outcomes, &None, &name, &failures);
                                        running.lock().insert(name.clone(), names(&rt));
                                    }
                                }
                            }
                            None => break,
                        },
                        why = replica.lost() => {
                            capture::note(format!("lost {name}: {why}"));
                            break;
                        }
                    }
                }
                // As the binary stops: the plugins first, then the Leases.
                running.lock().remove(&name);
                rt.shutdown(grace).await;
                replica.stop().await;
                capture::note(format!("stopped {name}"));
                Ok(())
            }
        });
    }

    let made: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let faults: Arc<Mutex<Vec<(Duration, Fault)>>> = Arc::default();
    sim.client("driver", {
        let (em, made, plan, faults, current) = (
            em.clone(),
            made.clone(),
            plan.clone(),
            faults.clone(),
            current.clone(),
        );
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
            // A replica whose plugin never starts (its entry held up, say) fails the run here,
            // saying which.
            let deadline = tokio::time::Instant::now() + READY_WITHIN;
            while !ready.iter().all(|r| r.load(Ordering::Acquire)) {
                if tokio::time::Instant::now() >= deadline {
                    let late: Vec<String> = (0..ready.len())
                        .filter(|i| !ready[*i].load(Ordering::Acquire))
                        .map(replica_name)
                        .collect();
                    return Err(format!(
                        "{late:?} not ready {READY_WITHIN:?} after the start: their plugin never ran"
                    )
                    .into());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let start = tokio::time::Instant::now();
            // The last entry that is not a refused revision: what a rollback asks for again.
            let mut good = current.lock().clone();
            for (n, (at, step)) in plan.steps.iter().enumerate() {
                tokio::time::sleep_until(start + *at).await;
                let now = turmoil::elapsed();
                match step {
                    Step::Update(i) => {
                        let o = em.update(cm(*i, n + 1))?;
                        let rv = o["metadata"]["resourceVersion"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned();
                        made.lock().push((format!("default/u-{i}"), rv));
                    }
                    Step::Upgrade(_)
                    | Step::Rename(_)
                    | Step::Refuse
                    | Step::Rollback
                    | Step::Remove
                    | Step::Restore(_) => {
                        let wanted = match step {
                            Step::Upgrade(label) | Step::Rename(label) | Step::Restore(label) => {
                                Some(Wanted {
                                    label: label.clone(),
                                    plugin: plan.plugin_of(label),
                                })
                            }
                            Step::Refuse => good.clone().map(|w| Wanted {
                                label: REFUSED.into(),
                                ..w
                            }),
                            Step::Rollback => good.clone(),
                            _ => None,
                        };
                        if !matches!(step, Step::Refuse | Step::Rollback) {
                            good = wanted.clone();
                        }
                        capture::note(format!("set {wanted:?}"));
                        *current.lock() = wanted.clone();
                        for tx in &txs {
                            // A replica that is down reads the current entry as it starts.
                            let _ = tx.send(Command::Set(wanted.clone()));
                        }
                    }
                    Step::Crash(who, down) => {
                        let who = resolve(&em, *who);
                        let mut f = faults.lock();
                        f.push((now, Fault::Crash(who)));
                        f.push((now + *down, Fault::Restart(who)));
                    }
                    Step::SlowWrites(n, by) => {
                        capture::note(format!("slow writes {n} {by:?}"));
                        em.faults().delay_next(*n, *by, &["patch"])?;
                    }
                    Step::Partition(who, down) => {
                        let who = resolve(&em, *who);
                        let mut f = faults.lock();
                        f.push((now, Fault::Partition(who)));
                        f.push((now + *down, Fault::Repair(who)));
                    }
                }
            }
            tokio::time::sleep(plan.settle).await;
            Ok(())
        }
    });

    // Step the simulation, doing what only its owner can: crash and restart hosts (also the
    // replicas that stopped on their own, as their pods would be), cut and repair links.
    let mut crashed = vec![false; replicas];
    let mut restart_at: Vec<Option<Duration>> = vec![None; replicas];
    loop {
        let done = sim
            .step()
            .map_err(|e| broken(format!("the simulation failed: {e}")))?;
        if done {
            break;
        }
        let now = sim.elapsed();
        let due: Vec<Fault> = {
            let mut f = faults.lock();
            let (due, later): (Vec<_>, Vec<_>) = f.drain(..).partition(|(at, _)| *at <= now);
            *f = later;
            due.into_iter().map(|(_, f)| f).collect()
        };
        for f in due {
            match f {
                Fault::Crash(i) if !crashed[i] => {
                    crashed[i] = true;
                    restart_at[i] = None;
                    if sim.is_host_running(replica_name(i).as_str()) {
                        capture::note(format!("crash {}", replica_name(i)));
                        running.lock().remove(&replica_name(i));
                        sim.crash(replica_name(i).as_str());
                    }
                }
                Fault::Crash(_) => {}
                Fault::Restart(i) => {
                    if crashed[i] {
                        crashed[i] = false;
                        restart_at[i] = Some(now);
                    }
                }
                // Held, not dropped: TCP carries what was sent once the link is back (a watch
                // resumes; a request arrives late), as after a real partition shorter than
                // TCP's retransmission timeout. Turmoil's dropped segments are never sent
                // again, which no real connection does.
                Fault::Partition(i) => {
                    capture::note(format!("partition {}", replica_name(i)));
                    sim.hold(replica_name(i).as_str(), "apiserver");
                }
                Fault::Repair(i) => {
                    capture::note(format!("repair {}", replica_name(i)));
                    sim.release(replica_name(i).as_str(), "apiserver");
                }
            }
        }
        for i in 0..replicas {
            let name = replica_name(i);
            if crashed[i] || sim.is_host_running(name.as_str()) {
                continue;
            }
            match restart_at[i] {
                None => restart_at[i] = Some(now + RESTART_AFTER),
                Some(at) if at <= now => {
                    restart_at[i] = None;
                    sim.bounce(name.as_str());
                }
                Some(_) => {}
            }
        }
    }
    let seen = capture::take();
    let made = made.lock().clone();
    if capture::dump() {
        for s in &seen {
            eprintln!("{s:?}");
        }
        eprintln!("made: {made:?}");
    }
    if let Some(f) = failures.lock().first() {
        return Err(broken(f.clone()));
    }
    check::every_kind_of_line_seen(&seen, plan.writes).map_err(broken)?;
    if let Topology::Shards(_) = plan.topology {
        check::no_handler_writes(&seen).map_err(broken)?;
    }
    let lines = capture::revs(&seen);
    check::refused_revisions_never_run(&lines, REFUSED).map_err(broken)?;
    if plan.topology == Topology::Single {
        // Exactly once while one plugin runs throughout; a rename or a removal lets an update
        // reach both plugins, or neither (the next one lists it).
        if !plan.changes_plugins() {
            check::each_update_handled_once(&lines, &made).map_err(broken)?;
        }
        for one in check::by_plugin(&lines, &plan) {
            check::no_update_handled_twice(&one, &made).map_err(broken)?;
            check::old_revisions_only_finish_what_they_held(&one, &plan).map_err(broken)?;
        }
        check::last_versions_reconciled(&lines, &made).map_err(broken)?;
    } else {
        for life in check::lives(&seen) {
            for one in check::by_plugin(&life, &plan) {
                check::no_update_handled_twice(&one, &made).map_err(broken)?;
                check::old_revisions_only_finish_what_they_held(&one, &plan).map_err(broken)?;
            }
        }
    }
    check::retired_plugins_stay_retired(&seen, &plan).map_err(broken)?;
    check::no_key_on_two_replicas_at_once(&seen, &plan).map_err(broken)?;
    check::writes_follow_the_key(&seen, &plan).map_err(broken)?;
    if let Topology::Leader(_) = plan.topology {
        check::writes_only_by_the_leader(&seen, LEASE).map_err(broken)?;
    }
    let last = current.lock().clone();
    check::the_entry_is_what_runs(&running.lock(), last.as_ref().map(|w| w.plugin.as_str()))
        .map_err(broken)?;
    let em = em
        .lock()
        .clone()
        .ok_or_else(|| broken("the API server never started".into()))?;
    if plan.writes {
        check::end_state_marks_last_versions(&em, &made).map_err(broken)?;
    }
    Ok(Summary {
        simulated: sim.elapsed(),
        topology: Some(plan.topology),
        updates: made.len(),
        upgrades: count(&plan, |s| {
            matches!(
                s,
                Step::Upgrade(_)
                    | Step::Rename(_)
                    | Step::Refuse
                    | Step::Rollback
                    | Step::Remove
                    | Step::Restore(_)
            )
        }),
        faults: count(&plan, |s| {
            matches!(s, Step::Crash(..) | Step::Partition(..))
        }),
        lines: seen.len(),
    })
}

/// Notes what the reconciler of plugin sources did with the entry, where the oracles read it
/// (a plugin removed or retired by a rename, on which replica), and records as a failure
/// anything but what was asked: only the refused revision may fail.
fn judge(
    outcomes: &[EntryOutcome],
    wanted: &Option<Wanted>,
    on: &str,
    failures: &Mutex<Vec<String>>,
) {
    let refused = wanted.as_ref().is_some_and(|w| w.label == REFUSED);
    for o in outcomes {
        match &o.change {
            Change::Unchanged | Change::Applied(_) => {}
            Change::Renamed {
                from,
                removed: Some(_),
                ..
            }
            | Change::Retired { from, .. } => capture::note(format!("retired {from} on {on}")),
            // The new plugin waits (this replica cut off): the old one runs on until it runs.
            Change::Renamed {
                from,
                removed: None,
                ..
            } => capture::note(format!("retiring {from} on {on}")),
            Change::Removed { .. } => {
                if let Some(p) = &o.plugin {
                    capture::note(format!("retired {p} on {on}"));
                }
            }
            Change::Failed(_) if refused => capture::note(format!("refused on {on}")),
            other => failures
                .lock()
                .push(format!("{on}: the entry as {wanted:?} came to {other:?}")),
        }
    }
}

/// The replica a fault hits: `who`, or for [`plan::LEADER`] the leader Lease's holder (replica
/// 0 while none holds it).
fn resolve(em: &kwh_emulator::EmulatorHandle, who: usize) -> usize {
    if who != plan::LEADER {
        return who;
    }
    em.get("coordination.k8s.io/v1", "Lease", Some(NAMESPACE), LEASE)
        .and_then(|l| {
            l["spec"]["holderIdentity"]
                .as_str()
                .and_then(|h| h.strip_prefix("replica-"))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn count(plan: &Plan, f: impl Fn(&Step) -> bool) -> usize {
    plan.steps.iter().filter(|(_, s)| f(s)).count()
}

/// ConfigMap `u-<i>` with data `n`.
fn cm(i: usize, n: usize) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": format!("u-{i}"), "namespace": "default"},
           "data": {"n": n.to_string()}})
}
