//! Pipeline benchmark (issue 3): events from the emulator through client → reflector →
//! DeltaFIFO → store + processor into a counting handler, for 1 KB ConfigMaps and 4 KB Pods
//! (stored with managedFields, stripped on ingest) at 10,000 and 100,000 objects.
//!
//! `cargo bench -p host --bench pipeline` prints Markdown tables. The emulator runs in the same
//! process (loopback HTTP/1.1), so CPU figures include its serving work; heap figures are
//! allocator-counted deltas around each phase, which the emulator does not change.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use futures_util::future::BoxFuture;
use host::emulator::{Emulator, EmulatorHandle};
use host::informer::processor::ResourceEventHandler;
use host::informer::shared::{InformerOptions, SharedIndexInformer};
use host::informer::tombstone::ObjOrTombstone;
use host::kube::{ApiResource, Client, Config, Object, ResourceClient};
use serde_json::Value;

#[global_allocator]
static ALLOC: Counting = Counting;

const DEADLINE: Duration = Duration::from_secs(120);

fn runs() -> usize {
    std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

#[derive(Default)]
struct Counter {
    adds: AtomicU64,
    updates: AtomicU64,
    deletes: AtomicU64,
}

impl ResourceEventHandler for Counter {
    fn on_add(&self, _: Object, _: bool) -> BoxFuture<'_, ()> {
        self.adds.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::ready(()))
    }
    fn on_update(&self, _: Object, _: Object) -> BoxFuture<'_, ()> {
        self.updates.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::ready(()))
    }
    fn on_delete(&self, _: ObjOrTombstone) -> BoxFuture<'_, ()> {
        self.deletes.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::ready(()))
    }
}

/// Wait until the live heap stops shrinking (tasks of a stopped informer free their memory
/// asynchronously), so that the next phase's base is not inflated by it.
async fn settle() {
    let t = Instant::now();
    loop {
        let a = live();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let b = live();
        if b + (256 << 10) >= a || t.elapsed() > Duration::from_secs(5) {
            return;
        }
    }
}

/// Poll `f` every millisecond until it holds; panics after [`DEADLINE`].
async fn until(what: &str, f: impl Fn() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[derive(Clone, Copy)]
enum Kind {
    ConfigMap,
    Pod,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::ConfigMap => "ConfigMap 1 KB",
            Kind::Pod => "Pod 4 KB (managedFields)",
        }
    }
    fn target(self) -> usize {
        match self {
            Kind::ConfigMap => 1024,
            Kind::Pod => 4096,
        }
    }
    fn make(self, i: usize, pad: usize) -> Value {
        match self {
            Kind::ConfigMap => configmap("bench", i, pad),
            Kind::Pod => pod("bench", i, pad),
        }
    }
    fn resource(self) -> ApiResource {
        match self {
            Kind::ConfigMap => ApiResource::new("v1", "ConfigMap", "configmaps", true),
            Kind::Pod => ApiResource::new("v1", "Pod", "pods", true),
        }
    }
    fn name(self, i: usize) -> String {
        match self {
            Kind::ConfigMap => format!("cm-{i:06}"),
            Kind::Pod => format!("pod-{i:06}"),
        }
    }
}

struct Row {
    label: String,
    n: usize,
    wire_json: usize,
    sync_s: f64,
    handled_s: f64,
    sync_cpu_us: f64,
    held_per_obj: f64,
    held_ratio: f64,
    cached_json: usize,
    hwm: usize,
    upd_rate: f64,
    upd_cpu_us: f64,
    relist_peak_ratio: f64,
    relist_hwm: usize,
    steady_rss: usize,
}

async fn run() {
    println!("# Pipeline benchmark\n");
    println!("load average at start: {}\n", load());
    let sizes: Vec<usize> = std::env::var("BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 100_000]);
    let mut rows = Vec::new();
    for kind in [Kind::ConfigMap, Kind::Pod] {
        for &n in &sizes {
            rows.push(bench(kind, n).await);
        }
    }
    println!("## Initial list (time to has_synced)\n");
    println!("| objects | n | stored JSON (emulator) | cached JSON (stripped) | informer has_synced | handler saw all adds | events/s | CPU/event | bytes held per cached object | held / cached JSON | VmHWM |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} B | {} B | {:.3} s | {:.3} s | {} | {:.2} µs | {:.0} B | {:.2} | {} |",
            r.label,
            thousands(r.n as f64),
            r.wire_json,
            r.cached_json,
            r.sync_s,
            r.handled_s,
            thousands(r.n as f64 / r.handled_s),
            r.sync_cpu_us,
            r.held_per_obj,
            r.held_ratio,
            mb(r.hwm)
        );
    }
    println!(
        "\n## Update stream (N MODIFIED events queued while the watch is stalled, then released)\n"
    );
    println!("| objects | n | events/s | CPU/event |\n|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {:.2} µs |",
            r.label,
            thousands(r.n as f64),
            thousands(r.upd_rate),
            r.upd_cpu_us
        );
    }
    println!("\n## Relist (410 on the watch → relist at the last synced RV: one unpaged LIST, as a watch cache serves it)\n");
    println!("| objects | n | peak pipeline heap / steady pipeline heap | process VmHWM during relist | process VmRSS before |\n|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {:.2} | {} | {} |",
            r.label,
            thousands(r.n as f64),
            r.relist_peak_ratio,
            mb(r.relist_hwm),
            mb(r.steady_rss)
        );
    }
    println!("\nload average at end: {}", load());
}

async fn seed(kind: Kind, n: usize) -> (EmulatorHandle, usize, usize) {
    let h = Emulator::builder()
        .history_window(n + 10)
        .start()
        .await
        .expect("emulator");
    h.create(serde_json::json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"bench"}}))
        .expect("namespace");
    let probe = h.create(kind.make(999_999, 0)).expect("probe");
    let base = serde_json::to_vec(&probe).expect("json").len();
    let res = kind.resource();
    h.delete("v1", &res.kind, Some("bench"), &kind.name(999_999))
        .expect("delete probe");
    let pad = kind.target().saturating_sub(base);
    let mut json = 0;
    for i in 0..n {
        let o = h.create(kind.make(i, pad)).expect("seed");
        json += serde_json::to_vec(&o).map_or(0, |b| b.len());
    }
    (h, pad, json / n)
}

struct Running {
    informer: SharedIndexInformer<ResourceClient>,
    counter: Arc<Counter>,
    task: tokio::task::JoinHandle<()>,
}

fn start(h: &EmulatorHandle, kind: Kind) -> Running {
    let client = Client::new(Config::new(h.base_url().parse().expect("url"))).expect("client");
    let rc = ResourceClient::new(client, kind.resource(), None);
    let informer = SharedIndexInformer::new(rc, InformerOptions::default());
    let counter = Arc::new(Counter::default());
    informer
        .add_event_handler(counter.clone())
        .expect("add handler");
    let task = tokio::spawn({
        let i = informer.clone();
        async move {
            let _ = i.run().await;
        }
    });
    Running {
        informer,
        counter,
        task,
    }
}

async fn stop(r: Running) {
    r.informer.stop();
    let _ = tokio::time::timeout(DEADLINE, r.task).await;
}

async fn bench(kind: Kind, n: usize) -> Row {
    eprintln!("seeding {} × {} …", n, kind.label());
    let (h, pad, wire_json) = seed(kind, n).await;
    let runs = runs();

    // Initial list: a fresh informer per run.
    let (mut sync, mut handled, mut cpu, mut held) = (vec![], vec![], vec![], vec![]);
    let (mut cached_json, mut hwm) = (0, 0);
    let mut last = None;
    for run in 0..runs {
        settle().await;
        let heap0 = live();
        reset_hwm();
        let cpu0 = cpu_time();
        let t = Instant::now();
        let r = start(&h, kind);
        until("has_synced", || r.informer.has_synced()).await;
        sync.push(secs(t));
        until("all adds", || {
            r.counter.adds.load(Ordering::Relaxed) as usize >= n
        })
        .await;
        handled.push(secs(t));
        cpu.push((cpu_time() - cpu0).as_secs_f64() * 1e6 / n as f64);
        hwm = proc_status("VmHWM");
        let items = r.informer.indexer().list();
        assert_eq!(items.len(), n);
        cached_json = items.iter().map(|o| o.raw().len()).sum::<usize>();
        drop(items);
        held.push(live().saturating_sub(heap0) as f64);
        if run + 1 == runs {
            last = Some(r);
        } else {
            stop(r).await;
        }
    }
    let r = last.expect("at least one run");
    let held_b = median(held);

    // Update stream: queue N updates in the history while the watch is stalled.
    let mut upd = vec![];
    let mut upd_cpu = vec![];
    for run in 0..runs {
        let before = r.counter.updates.load(Ordering::Relaxed);
        h.faults().stall_streams(Duration::from_secs(600));
        for i in 0..n {
            h.update(bump(kind.make(i, pad), run + 1)).expect("update");
        }
        let cpu0 = cpu_time();
        let t = Instant::now();
        h.faults().clear();
        until("all updates", || {
            r.counter.updates.load(Ordering::Relaxed) - before >= n as u64
        })
        .await;
        upd.push(n as f64 / secs(t));
        upd_cpu.push((cpu_time() - cpu0).as_secs_f64() * 1e6 / n as f64);
    }

    // Relist: expire the watch; the reflector lists again and replaces the cache.
    let steady_rss = proc_status("VmRSS");
    let base = live() - held_b as usize;
    let lists0 = h.stats().requests("list");
    reset_peak();
    reset_hwm();
    h.faults().inject_expired();
    until("relist", || h.stats().requests("list") > lists0).await;
    let res = format!("/{}", kind.resource().plural);
    assert!(
        h.wait_for_open_watches(&res, 1, DEADLINE).await,
        "watch re-established"
    );
    // A marker update after the relist: once it is handled, every Replaced delta before it is.
    let before = r.counter.updates.load(Ordering::Relaxed);
    h.update(bump(kind.make(0, pad), 999)).expect("marker");
    until("marker", || {
        r.counter.updates.load(Ordering::Relaxed) > before
    })
    .await;
    let relist_peak = (peak() - base) as f64 / held_b;
    let relist_hwm = proc_status("VmHWM");
    stop(r).await;
    h.shutdown().await;
    eprintln!("done {} × {}", n, kind.label());

    Row {
        label: kind.label().into(),
        n,
        wire_json,
        sync_s: median(sync),
        handled_s: median(handled),
        sync_cpu_us: median(cpu),
        held_per_obj: held_b / n as f64,
        held_ratio: held_b / cached_json as f64,
        cached_json: cached_json / n,
        hwm,
        upd_rate: median(upd),
        upd_cpu_us: median(upd_cpu),
        relist_peak_ratio: relist_peak,
        relist_hwm,
        steady_rss,
    }
}
