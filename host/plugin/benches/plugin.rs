//! Plugin runtime benchmark (issue 4): dispatch cost per event into a guest, events/s through
//! the whole pipeline with 0, 1 and 10 plugins, reconciles/s of a guest doing one lister get,
//! resident memory per idle instance, and cold start from the compile cache. Every figure is
//! given for two guests: a raw no-op (the floor) and one built with the SDK's default handlers
//! (each notification enqueues the object's key from the metadata the host sends along, without
//! parsing it; what users pay). The `events` section has a guest record 10,000 identical Events
//! in one reconcile and counts the API writes the host's recorder makes of them. The `upgrade`
//! section upgrades one plugin of ten under steady updates and removes one (`plugin/upgrade.rs`).
//!
//! `cargo bench -p host --bench plugin` prints Markdown tables (the test guests are built for
//! wasm32-wasip2 first, as the tests do). `BENCH_RUNS` (default 5) sets the runs per figure,
//! `BENCH_EVENTS` (default 20,000) the objects of the pipeline and reconcile runs. The emulator
//! runs in the same process over loopback HTTP, so pipeline CPU figures include its serving work.
//! `BENCH_ONLY=dispatch,pipeline,reconcile,events,memory,upgrade,cold` picks sections (`shadow` runs only when named) (for profiling one),
//! `BENCH_PLUGINS=10` the pipeline's rows, `BENCH_GUESTS=sdk` (or `raw`) its guests, and `BENCH_PERF_CTL` limits a `perf record` to the
//! timed windows (see `common::perf_window`).
//!
//! Time per dispatched event is given as wall-clock and as process CPU time: on a machine shared
//! with other work the wall-clock figure includes time the process was not running at all.

#[path = "../../../tests/bench_common/mod.rs"]
mod common;
// Only the test guests are used here; the example builders are for the tests.
#[allow(dead_code)]
#[path = "../../../tests/support/guests.rs"]
mod guests;
#[path = "plugin/shadow.rs"]
mod shadow;
#[path = "plugin/upgrade.rs"]
mod upgrade;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use futures_util::future::BoxFuture;
use kwh_client::{ApiResource, Client, Config, Object, ResourceClient};
use kwh_emulator::{Emulator, EmulatorHandle};
use kwh_informer::processor::ResourceEventHandler;
use kwh_informer::shared::{InformerOptions, SharedIndexInformer};
use kwh_informer::tombstone::ObjOrTombstone;
use kwh_informer::workqueue::{default_controller_rate_limiter, RateLimitingQueue};
use kwh_plugin::backend::{informer::InformerLister, workqueue::WorkqueueBackend};
use kwh_plugin::dispatch::Dispatcher;
use kwh_plugin::{
    Backends, EngineConfig, Health, Limits, PluginEngine, PluginRuntime, QuarantinePolicy,
    RetryPolicy, RuntimeOptions,
};

#[global_allocator]
static ALLOC: Counting = Counting;

const DEADLINE: Duration = Duration::from_secs(300);

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

fn cache_dir() -> PathBuf {
    std::env::temp_dir().join(format!("kube-wasm-host-bench-cache-{}", std::process::id()))
}

fn engine(max_instances: u32) -> PluginEngine {
    PluginEngine::new(EngineConfig {
        cache_dir: Some(cache_dir()),
        max_instances,
        ..EngineConfig::default()
    })
    .expect("engine")
}

fn want(section: &str) -> bool {
    std::env::var("BENCH_ONLY").map_or(true, |s| s.split(',').any(|x| x.trim() == section))
}

async fn run() {
    let runs = env_or("BENCH_RUNS", 5);
    let events = env_or("BENCH_EVENTS", 20_000);
    println!("# Plugin runtime benchmark\n");
    println!("load average at start: {}\n", load());
    eprintln!("building the test guests …");
    let guests = [
        ("raw no-op", guests::guest("noop")),
        ("SDK, default handlers", guests::guest("bench-sdk")),
    ];
    let _ = std::fs::remove_dir_all(cache_dir());
    let dispatch_n = env_or("BENCH_DISPATCH", 100_000) as u32;

    if want("dispatch") {
        eprintln!("dispatch …");
        let mut dispatch_rows = Vec::new();
        // The `k8s-openapi` feature's cost: handlers that decode each object into its struct.
        let typed = (
            "SDK, typed handlers (k8s-openapi)",
            guests::guest("bench-typed"),
        );
        for (guest, path) in guests.iter().chain([&typed]) {
            for size in [1024, 4096] {
                dispatch_rows.push((guest, size, dispatch(path, size, runs, dispatch_n).await));
            }
        }
        println!(
            "## Dispatch into a guest (ns per event, median of {runs} runs of {})\n",
            thousands(f64::from(dispatch_n))
        );
        println!("Through the dispatcher, the SDK guest's default handlers have handed over after the warm-up call (`queue.enqueue-own-keys`): the host enqueues the key and calls no guest; the bare columns always call the guest.\n");
        println!("| guest | object | through the dispatcher (handler → health gate → on-add): wall / CPU | bare `PluginInstance::on_add`: wall / CPU | bare `on_update` (old and new): CPU |");
        println!("|---|---|---|---|---|");
        for (guest, size, d) in &dispatch_rows {
            println!(
                "| {guest} | ConfigMap {size} B | {:.0} ns / {:.0} ns | {:.0} ns / {:.0} ns | {:.0} ns |",
                d.via_wall, d.via_cpu, d.bare_wall, d.bare_cpu, d.update_cpu
            );
        }
    }
    if want("pipeline") {
        pipeline_section(events, runs).await;
    }
    if want("reconcile") {
        reconcile_section(events, runs).await;
    }
    if want("events") {
        events_section().await;
    }
    if want("memory") {
        for (guest, path) in &guests {
            memory_section(guest, path).await;
        }
    }
    if want("upgrade") {
        upgrade::upgrade_section().await;
    }
    // Only when named, in a release build: see the section's own documentation.
    if std::env::var("BENCH_ONLY").is_ok_and(|s| s.split(',').any(|x| x.trim() == "shadow")) {
        shadow::shadow_section().await;
    }
    if want("cold") {
        for (guest, path) in &guests {
            cold_section(guest, path, runs).await;
        }
    }
    println!("\nload average at end: {}", load());
    let _ = std::fs::remove_dir_all(cache_dir());
}

async fn pipeline_section(events: usize, runs: usize) {
    eprintln!("pipeline …");
    // Heap counting is for the memory section; here it would only slow every allocation.
    set_counting(false);
    let mut pipeline_rows = Vec::new();
    // `BENCH_PLUGINS=10` (a comma-separated list) runs only those rows.
    let counts: Vec<usize> = std::env::var("BENCH_PLUGINS")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![0, 1, 10]);
    // `BENCH_GUESTS=sdk` (or `raw`) runs only that guest's rows, for profiling one.
    let guests = std::env::var("BENCH_GUESTS").unwrap_or_else(|_| "raw,sdk".into());
    for (guest, base, short) in [
        ("raw no-op", "bench-noop", "raw"),
        ("SDK, default handlers", "bench-sdk", "sdk"),
    ] {
        if !guests.split(',').any(|g| g.trim() == short) {
            continue;
        }
        for &plugins in &counts {
            if plugins == 0 && base != "bench-noop" {
                continue; // the row without plugins is the same for both
            }
            pipeline_rows.push((guest, plugins, pipeline(base, plugins, events, runs).await));
        }
    }
    println!("\n## Pipeline: {events} updates of 1 KB ConfigMaps (queued while the watch is stalled, then released) to every plugin's on-update\n");
    println!("The SDK guest's handlers enqueue each key (after their first call the host does it for them: `queue.enqueue-own-keys`) and its reconcile reads the object from the cache: its rows stop the clock only when every plugin has reconciled every key.\n");
    println!("The last two columns pace the updates one at a time at 1,000/s: the process CPU per event then includes the emulator's in-process write of each update; the row without plugins is that baseline, and the last column is what the plugins add to it.\n");
    println!("| guest | plugins | events/s (median) | events/s (best run) | guest calls/s (median) | CPU per event (median) | CPU per event at 1,000/s | added by the plugins at 1,000/s |");
    println!("|---|---|---|---|---|---|---|---|");
    set_counting(true);
    let baseline = pipeline_rows
        .iter()
        .find(|(_, plugins, _)| *plugins == 0)
        .map(|(_, _, p)| p.steady_cpu);
    for (guest, plugins, p) in &pipeline_rows {
        let added = baseline.map_or("–".to_owned(), |b| format!("{:.2} µs", p.steady_cpu - b));
        println!(
            "| {guest} | {plugins} | {} | {} | {} | {:.2} µs | {:.2} µs | {added} |",
            thousands(p.rate),
            thousands(p.best),
            thousands(p.rate * (*plugins as f64)),
            p.cpu,
            p.steady_cpu
        );
    }
}

async fn reconcile_section(events: usize, runs: usize) {
    eprintln!("reconcile …");
    let (rate, cpu) = reconcile(events, runs).await;
    println!("\n## Reconcile: a guest doing one lister get (1 KB ConfigMap) and returning done, 1 worker\n");
    println!("| keys | reconciles/s (median) | CPU per reconcile |\n|---|---|---|");
    println!(
        "| {} | {} | {cpu:.2} µs |",
        thousands(events as f64),
        thousands(rate)
    );
}

async fn memory_section(guest: &str, path: &Path) {
    eprintln!("memory ({guest}) …");
    let fresh = memory(path, false).await;
    let used = memory(path, true).await;
    println!("\n## Resident memory per idle instance ({} instances of the {guest} guest, after one warm-up instance)\n", fresh.instances);
    println!("| measure | fresh (instantiated, never called) | idle after handling one 4 KB on-update |\n|---|---|---|");
    println!(
        "| VmRSS delta (everything resident: guest linear-memory pages touched, tables, store, heap) | {:.1} KiB | {:.1} KiB |",
        fresh.rss / 1024.0,
        used.rss / 1024.0
    );
    println!(
        "| of which RssAnon (private pages: touched linear memory + host heap) | {:.1} KiB | {:.1} KiB |",
        fresh.anon / 1024.0,
        used.anon / 1024.0
    );
    println!(
        "| host heap (allocator-counted: store, WASI context, resource table) | {:.1} KiB | {:.1} KiB |",
        fresh.heap / 1024.0,
        used.heap / 1024.0
    );
}

async fn cold_section(guest: &str, path: &Path, runs: usize) {
    eprintln!("cold start ({guest}) …");
    let c = cold_start(path, runs.max(20)).await;
    println!(
        "\n## Cold start of the {guest} guest from the compile cache (median of {} runs, fresh engine each)\n",
        c.runs
    );
    println!("| step | median | best run |\n|---|---|---|");
    println!("| load: read file, hash, deserialize cached artifact, link, instantiate, `manifest()` | {:.2} ms | {:.2} ms |", c.load_ms, c.load_best_ms);
    println!(
        "| … then a worker instance and its first `reconcile` | {:.2} ms | {:.2} ms |",
        c.first_reconcile_ms, c.first_best_ms
    );
    println!(
        "| first compile without a cache (Cranelift), for comparison | {:.1} ms | |",
        c.compile_ms
    );
}

/// A padded ConfigMap of about `size` bytes of JSON.
fn object(size: usize) -> Object {
    let base = serde_json::to_vec(&configmap("bench", 1, 0))
        .expect("json")
        .len();
    let v = configmap("bench", 1, size.saturating_sub(base));
    Object::from_value(&v).expect("object")
}

struct DispatchCost {
    via_wall: f64,
    via_cpu: f64,
    bare_wall: f64,
    bare_cpu: f64,
    /// A bare `on_update` (old and new, as the pipeline delivers them): CPU ns.
    update_cpu: f64,
}

/// ns per event through the dispatcher's handler, and for a bare instance call.
/// Backends for a guest that enqueues (the SDK's default handlers): a real workqueue and an
/// empty cache; no client.
fn queueing_backends() -> Backends {
    let queue = RateLimitingQueue::new(default_controller_rate_limiter::<Arc<str>>());
    Backends {
        lister: Arc::new(InformerLister::new()),
        queue: Arc::new(WorkqueueBackend::new(queue)),
        ..Backends::unavailable()
    }
}

async fn dispatch(guest: &Path, size: usize, runs: usize, n: u32) -> DispatchCost {
    let engine = engine(64);
    let plugin = engine
        .load(guest, Limits::default())
        .await
        .expect("load")
        .activate(queueing_backends());
    let health = Arc::new(Health::new(plugin.name(), QuarantinePolicy::default()));
    let own = kwh_coordination::ownership::Ownership::single().for_plugin(plugin.name(), false);
    let d = Dispatcher::new(&plugin, health, RetryPolicy::default(), own).expect("dispatcher");
    let handler = d.handler(0);
    let obj = object(size);
    assert!(obj.raw().len().abs_diff(size) < 64, "{}", obj.raw().len());
    for _ in 0..1000 {
        handler.on_add(obj.clone(), false).await;
    }
    let per = |d: Duration| d.as_nanos() as f64 / f64::from(n);
    let (mut via_wall, mut via_cpu) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (t, c) = (Instant::now(), cpu_time());
        for _ in 0..n {
            handler.on_add(obj.clone(), false).await;
        }
        via_wall.push(per(t.elapsed()));
        via_cpu.push(per(cpu_time() - c));
    }
    assert_eq!(d.failures.load(Ordering::Relaxed), 0);
    let mut inst = plugin.instance().expect("instance");
    inst.warm().await.expect("warm");
    let (mut bare_wall, mut bare_cpu) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (t, c) = (Instant::now(), cpu_time());
        for _ in 0..n {
            inst.on_add(0, &obj).await.expect("call");
        }
        bare_wall.push(per(t.elapsed()));
        bare_cpu.push(per(cpu_time() - c));
    }
    let mut update_cpu = Vec::new();
    for _ in 0..runs {
        let c = cpu_time();
        for _ in 0..n {
            inst.on_update(0, &obj, &obj).await.expect("call");
        }
        update_cpu.push(per(cpu_time() - c));
    }
    DispatchCost {
        via_wall: median(via_wall),
        via_cpu: median(via_cpu),
        bare_wall: median(bare_wall),
        bare_cpu: median(bare_cpu),
        update_cpu: median(update_cpu),
    }
}

fn client(h: &EmulatorHandle) -> Client {
    Client::new(Config::new(h.base_url().parse().expect("url"))).expect("client")
}

/// Counts notifications, for the pipeline without plugins.
#[derive(Default)]
struct Counter {
    n: AtomicU64,
}

impl ResourceEventHandler for Counter {
    fn on_add(&self, _: Object, _: bool) -> BoxFuture<'_, ()> {
        self.n.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::ready(()))
    }
    fn on_update(&self, _: Object, _: Object) -> BoxFuture<'_, ()> {
        self.n.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::ready(()))
    }
    fn on_delete(&self, _: ObjOrTombstone) -> BoxFuture<'_, ()> {
        self.n.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::ready(()))
    }
}

/// Update events/s through reflector → DeltaFIFO → store → processor → every plugin's
/// dispatcher → guest, and CPU per event.
async fn pipeline(base: &str, plugins: usize, n: usize, runs: usize) -> Pipeline {
    let h = Emulator::builder()
        .history_window(n + 10)
        .start()
        .await
        .expect("emulator");
    let pad = seed_configmaps(&h, "bench", n, 1024);
    let consumers = Consumers::start(&h, base, plugins).await;
    consumers.handled("initial adds", (0, 0), n).await;
    let (rates, cpus) = backlog_runs(&h, &consumers, pad, n, runs, plugins).await;
    let steady_cpu = steady_cpu(&h, &consumers, pad, n, runs).await;
    consumers.stop().await;
    h.shutdown().await;
    let best = rates.iter().copied().fold(0.0, f64::max);
    Pipeline {
        rate: median(rates),
        best,
        cpu: median(cpus),
        steady_cpu,
    }
}

/// What a pipeline row feeds, and how far it got: a counting handler on an informer (no
/// plugins) or a runtime with its plugins. The clock stops on these counters.
struct Consumers {
    /// The informer without plugins, and its task.
    baseline: Option<(
        SharedIndexInformer<ResourceClient>,
        tokio::task::JoinHandle<()>,
    )>,
    rt: Option<PluginRuntime>,
    /// Every plugin's dispatcher, for its failed and dropped counts.
    handles: Vec<Arc<Dispatcher>>,
    /// Notifications handed over so far.
    delivered: Box<dyn Fn() -> u64>,
    /// Notifications per event: one per plugin (one without plugins).
    per_event: u64,
    /// Reconciles per event: the SDK guest's handlers enqueue every key and its reconcile reads
    /// the object, so an event is handled when every plugin has reconciled it (the raw guest
    /// enqueues nothing).
    reconciles: u64,
}

impl Consumers {
    /// The informer with a counter (`plugins` 0), or `plugins` copies of the guest `base` in a
    /// runtime, started against `h`.
    async fn start(h: &EmulatorHandle, base: &str, plugins: usize) -> Consumers {
        let res = ApiResource::new("v1", "ConfigMap", "configmaps", true);
        let mut baseline = None;
        let mut rt = None;
        let mut handles = Vec::new();
        let delivered: Box<dyn Fn() -> u64> = if plugins == 0 {
            let informer = SharedIndexInformer::new(
                ResourceClient::new(client(h), res, None),
                InformerOptions::default(),
            );
            let counter = Arc::new(Counter::default());
            informer
                .add_event_handler(counter.clone())
                .expect("handler");
            let i = informer.clone();
            let task = tokio::spawn(async move {
                let _ = i.run().await;
            });
            baseline = Some((informer, task));
            Box::new(move || counter.n.load(Ordering::Relaxed))
        } else {
            let dir = std::env::temp_dir().join(format!("plugin-bench-{}", std::process::id()));
            let paths = guests::variants(base, &dir, plugins);
            let mut r = PluginRuntime::new(
                engine(256),
                client(h),
                RuntimeOptions {
                    namespace: Some("bench".into()),
                    ..RuntimeOptions::default()
                },
            );
            let failed = r.start_all(&paths).await.expect("start");
            assert!(failed.is_empty(), "{failed:?}");
            let _ = std::fs::remove_dir_all(dir);
            let dispatchers: Vec<_> = r.plugins().iter().map(|p| p.dispatcher_handle()).collect();
            handles = dispatchers.clone();
            rt = Some(r);
            Box::new(move || {
                dispatchers
                    .iter()
                    .map(|d| d.delivered.load(Ordering::Relaxed))
                    .sum()
            })
        };
        let reconciles = if base == "bench-sdk" {
            plugins as u64
        } else {
            0
        };
        Consumers {
            baseline,
            rt,
            handles,
            delivered,
            per_event: plugins.max(1) as u64,
            reconciles,
        }
    }

    /// Reconciles so far, over every plugin.
    fn reconciled(&self) -> u64 {
        self.rt.as_ref().map_or(0, |r: &PluginRuntime| {
            r.plugins()
                .iter()
                .map(|p| p.reconcile_stats().total.load(Ordering::Relaxed))
                .sum::<u64>()
        })
    }

    /// The counters now (delivered, reconciled): where a run's events start.
    fn mark(&self) -> (u64, u64) {
        ((self.delivered)(), self.reconciled())
    }

    /// Waits until `n` events since `mark` were handed to every plugin and reconciled by every
    /// one that reconciles them.
    async fn handled(&self, what: &str, (before, reconciled_before): (u64, u64), n: usize) {
        until(what, DEADLINE, || {
            (self.delivered)() - before >= n as u64 * self.per_event
                && self.reconciled() - reconciled_before >= n as u64 * self.reconciles
        })
        .await;
    }

    /// Checks that the figures stand and stops the informer or the runtime.
    async fn stop(self) {
        // `delivered` counts every notification handed to a dispatcher, failed ones too: the
        // figures stand only if none failed or was dropped.
        for d in &self.handles {
            assert_eq!(
                d.failures.load(Ordering::Relaxed),
                0,
                "failed handler calls"
            );
            assert_eq!(
                d.dropped.load(Ordering::Relaxed),
                0,
                "dropped notifications"
            );
        }
        if let Some((informer, task)) = self.baseline {
            informer.stop();
            tokio::time::timeout(DEADLINE, task)
                .await
                .expect("the informer stops")
                .expect("its task does not panic");
        }
        if let Some(r) = self.rt {
            assert!(r.shutdown(Duration::from_secs(5)).await, "clean stop");
        }
    }
}

/// `runs` backlogs of `n` updates, queued while the watch is stalled and then released at
/// once: events/s and µs of CPU per event of each run (the pipeline at full speed).
async fn backlog_runs(
    h: &EmulatorHandle,
    consumers: &Consumers,
    pad: usize,
    n: usize,
    runs: usize,
    plugins: usize,
) -> (Vec<f64>, Vec<f64>) {
    let (mut rates, mut cpus) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let since = consumers.mark();
        h.faults().stall_streams(Duration::from_secs(600));
        for i in 0..n {
            h.update(bump(configmap("bench", i, pad), run + 1))
                .expect("update");
        }
        let cpu0 = cpu_time();
        let (sys0, waits0) = sys_and_waits();
        let t = Instant::now();
        perf_window(true);
        h.faults().clear();
        consumers.handled("all updates", since, n).await;
        perf_window(false);
        rates.push(n as f64 / secs(t));
        cpus.push((cpu_time() - cpu0).as_secs_f64() * 1e6 / n as f64);
        let (sys1, waits1) = sys_and_waits();
        eprintln!(
            "  {plugins} plugins, run {run}: {} events/s, {:.2} µs CPU per event ({:.2} µs system), {:.2} waits per event",
            thousands(rates[run]),
            cpus[run],
            (sys1 - sys0).as_secs_f64() * 1e6 / n as f64,
            (waits1 - waits0) as f64 / n as f64
        );
    }
    (rates, cpus)
}

/// Events one at a time at a steady 1,000/s, as a cluster delivers them (the backlog runs
/// release a backlog at once): CPU per event over the whole paced window.
async fn steady_cpu(
    h: &EmulatorHandle,
    consumers: &Consumers,
    pad: usize,
    n: usize,
    runs: usize,
) -> f64 {
    let steady_n = n.min(5_000);
    let since = consumers.mark();
    let cpu0 = cpu_time();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for i in 0..steady_n {
        tick.tick().await;
        h.update(bump(configmap("bench", i, pad), runs + 1))
            .expect("update");
    }
    consumers
        .handled("all paced updates", since, steady_n)
        .await;
    (cpu_time() - cpu0).as_secs_f64() * 1e6 / steady_n as f64
}

/// Figures of one pipeline row.
struct Pipeline {
    /// Events/s releasing a backlog (median, best run).
    rate: f64,
    best: f64,
    /// µs of process CPU per event releasing a backlog.
    cpu: f64,
    /// µs of process CPU per event at a steady 1,000 events/s, one at a time.
    steady_cpu: f64,
}

/// The `herald` guest records 10,000 identical Events about one ConfigMap in one reconcile;
/// the host's recorder aggregates them (client-go's series), so the API sees a handful of
/// writes. Counted with the emulator's request counters, after the runtime's shutdown flush.
async fn events_section() {
    eprintln!("events …");
    let repeat = 10_000;
    let h = Emulator::builder().start().await.expect("emulator");
    let mut rt = PluginRuntime::new(engine(64), client(&h), RuntimeOptions::default());
    let spec = kwh_plugin::PluginSpec {
        config: Arc::new(serde_json::json!({"repeat": repeat})),
        ..kwh_plugin::PluginSpec::with_defaults(guests::guest("herald"), &RuntimeOptions::default())
    };
    rt.start_spec(spec).await.expect("start");
    until("synced", DEADLINE, || rt.is_ready()).await;
    let writes = |h: &EmulatorHandle| {
        let s = h.stats();
        s.requests("create") + s.requests("patch") + s.requests("update")
    };
    let before = writes(&h);
    let (t, cpu0) = (Instant::now(), cpu_time());
    h.create(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "loud", "namespace": "default", "labels": {"herald": "yes"}}}))
        .expect("create");
    let events = |h: &EmulatorHandle| h.list("events.k8s.io/v1", "Event", Some("default"));
    until("the first Event", DEADLINE, || !events(&h).is_empty()).await;
    assert!(rt.shutdown(Duration::from_secs(30)).await, "clean shutdown");
    let (wall, cpu) = (t.elapsed(), cpu_time() - cpu0);
    let stored = events(&h);
    assert_eq!(stored.len(), 1, "one Event");
    println!(
        "\n## Events: {} identical Events recorded in one reconcile\n",
        thousands(repeat as f64)
    );
    println!("| API writes (creates + patches) | stored Events | their `series.count` | wall, record to flushed | process CPU |\n|---|---|---|---|---|");
    println!(
        "| {} | {} | {} | {:.1} ms | {:.1} ms |",
        writes(&h) - before,
        stored.len(),
        stored[0]["series"]["count"],
        wall.as_secs_f64() * 1e3,
        cpu.as_secs_f64() * 1e3
    );
    h.shutdown().await;
}

/// Reconciles/s of the `lookup` guest (one lister get per key) over `n` queued keys.
async fn reconcile(n: usize, runs: usize) -> (f64, f64) {
    let h = Emulator::builder().start().await.expect("emulator");
    seed_configmaps(&h, "bench", n, 1024);
    let mut rt = PluginRuntime::new(engine(64), client(&h), RuntimeOptions::default());
    let failed = rt
        .start_all(&[guests::guest("lookup")])
        .await
        .expect("start");
    assert!(failed.is_empty(), "{failed:?}");
    until("synced", DEADLINE, || rt.is_ready()).await;
    let p = &rt.plugins()[0];
    let total = || p.reconcile_stats().total.load(Ordering::Relaxed);
    let keys: Vec<String> = (0..n).map(|i| format!("bench/cm-{i:06}")).collect();
    let (mut rates, mut cpus) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let before = total();
        let cpu0 = cpu_time();
        let t = Instant::now();
        perf_window(true);
        for k in &keys {
            p.queue().add_borrowed(k.as_str());
        }
        until("reconciles", DEADLINE, || total() - before >= n as u64).await;
        perf_window(false);
        rates.push(n as f64 / secs(t));
        cpus.push((cpu_time() - cpu0).as_secs_f64() * 1e6 / n as f64);
    }
    assert_eq!(
        p.reconcile_stats().errors.load(Ordering::Relaxed),
        0,
        "every lookup found its object"
    );
    rt.shutdown(Duration::from_secs(5)).await;
    h.shutdown().await;
    (median(rates), median(cpus))
}

struct Memory {
    instances: usize,
    rss: f64,
    anon: f64,
    heap: f64,
}

/// Per-instance resident memory of idle instances: fresh (instantiated, never called), or after
/// one `on-update` with two 4 KB objects (the guest's allocator and stack have been used).
async fn memory(guest: &Path, after_a_call: bool) -> Memory {
    const K: usize = 200;
    let engine = engine(256);
    let plugin = engine
        .load(
            guest,
            Limits {
                max_instances: K as u32 + 1,
                ..Limits::default()
            },
        )
        .await
        .expect("load")
        .activate(queueing_backends());
    // The first instance maps the compiled code and the memory image; later ones share them.
    let mut first = plugin.instance().expect("instance");
    first.warm().await.expect("warm");
    if after_a_call {
        let obj = object(4096);
        first.on_update(0, &obj, &obj).await.expect("call");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (rss0, anon0, heap0) = (proc_status("VmRSS"), proc_status("RssAnon"), live());
    let obj = object(4096);
    let mut all = Vec::with_capacity(K);
    for _ in 0..K {
        let mut i = plugin.instance().expect("instance");
        i.warm().await.expect("warm");
        if after_a_call {
            i.on_update(0, &obj, &obj).await.expect("call");
        }
        all.push(i);
    }
    let (rss1, anon1, heap1) = (proc_status("VmRSS"), proc_status("RssAnon"), live());
    let per = |a: usize, b: usize| b.saturating_sub(a) as f64 / K as f64;
    let m = Memory {
        instances: K,
        rss: per(rss0, rss1),
        anon: per(anon0, anon1),
        heap: per(heap0, heap1),
    };
    drop(all);
    m
}

struct Cold {
    runs: usize,
    load_ms: f64,
    load_best_ms: f64,
    first_reconcile_ms: f64,
    first_best_ms: f64,
    compile_ms: f64,
}

async fn cold_start(guest: &Path, runs: usize) -> Cold {
    // The first load compiles and fills the cache (a fresh directory per benchmark process).
    let fresh = std::env::temp_dir().join(format!("plugin-bench-cold-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&fresh);
    let compiling = PluginEngine::new(EngineConfig {
        cache_dir: Some(fresh.clone()),
        ..EngineConfig::default()
    })
    .expect("engine");
    let t = Instant::now();
    compiling
        .load(guest, Limits::default())
        .await
        .expect("load");
    let compile_ms = secs(t) * 1e3;
    assert_eq!(compiling.compiles(), 1);
    drop(compiling);
    let (mut load, mut first) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let engine = PluginEngine::new(EngineConfig {
            cache_dir: Some(fresh.clone()),
            ..EngineConfig::default()
        })
        .expect("engine");
        let t = Instant::now();
        let loaded = engine.load(guest, Limits::default()).await.expect("load");
        load.push(secs(t) * 1e3);
        let plugin = loaded.activate(queueing_backends());
        let mut inst = plugin.instance().expect("instance");
        inst.reconcile("bench/cm-000001")
            .await
            .expect("no trap")
            .expect("done");
        first.push(secs(t) * 1e3);
        assert_eq!(engine.compiles(), 0, "served from the cache");
    }
    let _ = std::fs::remove_dir_all(&fresh);
    let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    Cold {
        runs,
        load_best_ms: best(&load),
        first_best_ms: best(&first),
        load_ms: median(load),
        first_reconcile_ms: median(first),
        compile_ms,
    }
}
