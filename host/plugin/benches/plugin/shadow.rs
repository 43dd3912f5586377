//! The `shadow` section (issue "Shadow runs"): a live SDK plugin over 10,000 cached ConfigMaps
//! updated one at a time at a steady 1,000/s, alone and with a shadow revision beside it whose
//! every reconcile writes (a merge patch, sent as a dry run and compared), in alternating
//! rounds; the emulator on two low-priority runtime threads of its own, standing in for an API
//! server on other machines.
//!
//! Floors, each checked here (a row that misses one fails the run):
//! - the live revision's p99 latency from update to reconcile with the shadow is within 1.1×
//!   of the same figure without it (sampled every 100 µs);
//! - nothing the shadow does persists: the store's revision moves by exactly the updates made
//!   (and the host's Events about the shadow's differences).
//!
//! Run only when named (`BENCH_ONLY=shadow`), in a release build: the ratio of two p99s over a
//! few seconds is judged here, and on a loaded machine in a debug build (CI's short benchmark
//! run) it would judge the machine. The shadow's zero writes are also checked by the test run
//! (`host/plugin/tests/shadow_writes.rs` and `shadow_runs.rs`, `tests/shadow_config_reloader.rs`).
//! Variants: `BENCH_SHADOW=bench-sdk` runs the live module itself as the shadow (no writes,
//! handlers handed over): what the shadow machinery costs without dry runs;
//! `BENCH_ANNOTATE=no` a shadow with its own handlers and reconciles that writes nothing;
//! `BENCH_EMULATOR=colocated` the emulator at the host's priority, sharing its two cores (the
//! latency row is then printed, not judged: it measures what the stand-in's answers cost this
//! machine, not what the shadow adds to the host); `BENCH_SHADOW_UPDATES`,
//! `BENCH_SHADOW_ROUNDS`.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::common::*;
use super::upgrade::{latencies, p99};
use super::{client, engine, DEADLINE};
use kwh_emulator::{Emulator, EmulatorHandle};
use kwh_plugin::background::Background;
use kwh_plugin::{PluginRuntime, PluginSpec, RuntimeOptions};

const OBJECTS: usize = 10_000;
/// Updates in each phase (`BENCH_SHADOW_UPDATES`); the phases alternate, without and with the
/// shadow, [`rounds`] times each, so that a drift over the run falls on both sides.
fn updates() -> usize {
    env_or("BENCH_SHADOW_UPDATES", 3_000)
}
/// Rounds (`BENCH_SHADOW_ROUNDS`): five, so that one disturbed round is not the median.
fn rounds() -> usize {
    env_or("BENCH_SHADOW_ROUNDS", 5)
}
const SAMPLE: Duration = Duration::from_micros(100);

/// [`updates`] updates at 1,000/s from `offset` on; the live plugin's latency p99 (ms).
async fn phase(
    h: &EmulatorHandle,
    rt: &Arc<PluginRuntime>,
    pad: usize,
    offset: usize,
    rev: usize,
) -> f64 {
    let count = |rt: &PluginRuntime| {
        rt.plugins()[0]
            .reconcile_stats()
            .total
            .load(Ordering::Relaxed)
    };
    let updates = updates();
    let base = vec![count(rt)];
    let sampler = {
        let rt = rt.clone();
        let base = base[0];
        tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut tick = tokio::time::interval(SAMPLE);
            let deadline = Instant::now() + DEADLINE;
            loop {
                tick.tick().await;
                let n = count(&rt);
                samples.push((Instant::now(), vec![n]));
                if n - base >= updates as u64 || Instant::now() > deadline {
                    return samples;
                }
            }
        })
    };
    let mut sent = Vec::with_capacity(updates);
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for i in 0..updates {
        tick.tick().await;
        sent.push(Instant::now());
        h.update(bump(configmap("bench", (offset + i) % OBJECTS, pad), rev))
            .expect("update");
    }
    let samples = sampler.await.expect("sampler");
    p99(latencies(&sent, &samples, &base).remove(0))
}

/// The API server's stand-in on a thread of its own: two low-priority runtime threads, or with
/// `colocated` two at the host's priority. Its handle, the sender that stops it, and the thread.
fn start_emulator_thread(
    colocated: bool,
) -> (
    EmulatorHandle,
    tokio::sync::oneshot::Sender<()>,
    std::thread::JoinHandle<()>,
) {
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        let serve = async move {
            let h = Emulator::builder()
                .history_window(2 * rounds() * updates() + OBJECTS + 10)
                .start()
                .await
                .expect("emulator");
            let _ = tx.send(h.clone());
            let _ = stopped.await;
            h.shutdown().await;
        };
        if colocated {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("emulator runtime");
            rt.block_on(serve);
        } else {
            let threads = Background::start("emulator", 2).expect("emulator threads");
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(threads.handle().spawn(serve))
                .expect("the emulator's task");
        }
    });
    let h = rx.recv().expect("the emulator started");
    (h, stop, server)
}

/// The shadow of the live plugin `name` (module `live`): the reviser guest under its name,
/// annotating what it reconciles, or as `BENCH_SHADOW` and `BENCH_ANNOTATE` say; and whether
/// its every reconcile writes.
fn shadow_spec(live: &Path, name: &str, opts: &RuntimeOptions) -> (PluginSpec, bool) {
    let writing = std::env::var("BENCH_SHADOW").as_deref() != Ok("bench-sdk")
        && std::env::var("BENCH_ANNOTATE").as_deref() != Ok("no");
    let shadow = match std::env::var("BENCH_SHADOW").as_deref() {
        Ok("bench-sdk") => PluginSpec::with_defaults(live, opts),
        _ => PluginSpec {
            config: Arc::new(
                serde_json::json!({"revision": "b", "name": name, "annotate": std::env::var("BENCH_ANNOTATE").as_deref() != Ok("no")}),
            ),
            ..PluginSpec::with_defaults(super::guests::guest("reviser"), opts)
        },
    };
    (shadow, writing)
}

/// What the alternating rounds measured: the live p99s (ms) of each round without and with
/// the shadow, the store's revisions while the shadow ran less the host's Events about it,
/// the shadow's writes checked, and those Events.
#[derive(Default)]
struct Rounds {
    without: Vec<f64>,
    with: Vec<f64>,
    moved: u64,
    writes: u64,
    events: u64,
}

/// [`rounds`] rounds of a phase without the shadow, then one with it (started, waited for,
/// stopped), on the live plugin `name`; `writing`: wait for the shadow's every write.
async fn alternate_rounds(
    h: &EmulatorHandle,
    rt: &Arc<PluginRuntime>,
    pad: usize,
    name: &str,
    shadow: &PluginSpec,
    writing: bool,
) -> Rounds {
    let mut r = Rounds::default();
    let mut offset = 0;
    for round in 0..rounds() {
        r.without
            .push(phase(h, rt, pad, offset, 2 * round + 1).await);
        offset += updates();
        let ledger = rt
            .start_shadow(name, shadow.clone())
            .await
            .expect("shadow starts");
        let revision = h.current_resource_version();
        let events_before = h.list("events.k8s.io/v1", "Event", None).len() as u64;
        r.with.push(phase(h, rt, pad, offset, 2 * round + 2).await);
        offset += updates();
        // Every update reaches the shadow too (50 ms after the live reconcile).
        until("the shadow's writes", DEADLINE, || {
            !writing
                || ledger.differences.load(Ordering::Relaxed)
                    + ledger.agreements.load(Ordering::Relaxed)
                    >= updates() as u64
        })
        .await;
        // The store's revisions while the shadow ran: the updates, and the host's Events
        // about the shadow's differences (one per new kind), nothing of the shadow's.
        let new_events = h.list("events.k8s.io/v1", "Event", None).len() as u64 - events_before;
        r.moved += h.current_resource_version() - revision - new_events;
        r.events += new_events;
        r.writes +=
            ledger.differences.load(Ordering::Relaxed) + ledger.agreements.load(Ordering::Relaxed);
        assert!(rt.stop_shadow(name, Duration::from_secs(5)).await);
        eprintln!(
            "  round {round}: p99 {:.2} ms without, {:.2} ms with the shadow",
            r.without[round], r.with[round]
        );
    }
    r
}

/// Prints the section's table from the medians of the rounds; whether every floor was met.
fn print_shadow_table(colocated: bool, r: Rounds) -> bool {
    let (without, with) = (median(r.without), median(r.with));
    let (moved, writes, events) = (r.moved, r.writes, r.events);
    println!("\n## A shadow revision beside a live plugin, at a steady 1,000 updates/s\n");
    println!(
        "The API server's stand-in: {}.\n",
        if colocated {
            "two threads at the host's priority (sharing its cores)"
        } else {
            "two threads at the lowest priority (its CPU not taken from the host's, as on a real cluster)"
        }
    );
    println!("10,000 cached ConfigMaps; the live `bench-sdk` plugin (default handlers, a reconcile reading the object from the cache); {} rounds of {} updates one at a time without a shadow, then {} with one (the `reviser` guest under the live plugin's name, each reconcile a merge patch sent as a dry run and compared). Latency: update to the live reconcile, sampled every 100 µs.\n", rounds(), updates(), updates());
    println!("| measure | value | floor | met |\n|---|---|---|---|");
    let latency = format!(
        "{without:.2} ms / {with:.2} ms ({:.2}×)",
        with / without.max(f64::EPSILON)
    );
    let what = "the live revision's p99 update → reconcile, without / with the shadow (medians of the rounds)";
    let mut ok = if colocated {
        println!("| {what} | {latency} | not judged: the stand-in shares the host's cores | – |");
        true
    } else {
        floor_row(what, latency, "with ≤ 1.1 × without", with <= without * 1.1)
    };
    ok &= floor_row(
        "the shadow's writes checked / store revisions while it ran, less the host's Events about it",
        format!("{writes} / {moved} ({events} Events)"),
        "revisions = updates made",
        moved == (rounds() * updates()) as u64,
    );
    println!("\nmet: {ok}");
    ok
}

pub async fn shadow_section() {
    eprintln!("shadow …");
    // The API server's stand-in on two runtime threads of its own, as a real one serves
    // requests concurrently on other machines: its handling of the shadow's dry runs is not
    // the host's work. At the lowest priority (`BENCH_EMULATOR=colocated`: at the host's), so
    // that, as on a real cluster, its CPU is not taken from the host's two cores: at the
    // host's priority the work of answering 1,000 dry runs a second lands on the live
    // revision's latency (docs/benchmarks-history.md, "Shadow runs", both rows).
    let colocated = std::env::var("BENCH_EMULATOR").as_deref() == Ok("colocated");
    let (h, stop, server) = start_emulator_thread(colocated);
    let pad = seed_configmaps(&h, "bench", OBJECTS, 1024);
    let opts = RuntimeOptions {
        namespace: Some("bench".into()),
        ..RuntimeOptions::default()
    };
    let mut rt = PluginRuntime::new(engine(256), client(&h), opts.clone());
    let live = super::guests::guest("bench-sdk");
    rt.start_spec(PluginSpec::with_defaults(&live, &opts))
        .await
        .expect("live starts");
    let name = rt.plugins()[0].name().to_owned();
    until("initial reconciles", DEADLINE, || {
        rt.plugins()[0]
            .reconcile_stats()
            .total
            .load(Ordering::Relaxed)
            >= OBJECTS as u64
    })
    .await;
    // The shadow: the reviser guest under the live plugin's name, annotating what it reconciles.
    // `BENCH_SHADOW=bench-sdk` runs the live plugin's own module as the shadow instead (no
    // writes, handlers handed over): what the shadow machinery costs without dry runs.
    let (shadow, writing) = shadow_spec(&live, &name, &opts);
    let rt = Arc::new(rt);
    let rounds = alternate_rounds(&h, &rt, pad, &name, &shadow, writing).await;
    let rt = Arc::into_inner(rt).expect("the runtime is not shared any more");
    assert!(rt.shutdown(Duration::from_secs(5)).await, "clean stop");
    let _ = stop.send(());
    let _ = server.join();

    let ok = print_shadow_table(colocated, rounds);
    assert!(ok, "a shadow floor was missed");
}
