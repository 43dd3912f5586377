//! Pipeline benchmark (issue 3): events from the emulator through client → reflector →
//! DeltaFIFO → store + processor into a counting handler, for 1 KB ConfigMaps and 4 KB Pods
//! (stored with managedFields, stripped on ingest) at 10,000 and 100,000 objects.
//!
//! `cargo bench -p host --bench pipeline` prints Markdown tables. The emulator runs in the same
//! process (loopback HTTP/1.1) on a runtime of its own, so CPU figures include its serving
//! work. Heap figures are allocator-counted and split by owner: every allocation made on the
//! emulator's threads (or by the benchmark's in-process calls into the emulator) is tagged as
//! the emulator's, everything else is the pipeline's (client, reflector, DeltaFIFO, store,
//! processor, handler). Pipeline figures exclude the emulator's store and response buffers.
//!
//! `BENCH_SIZES` (default `10000,100000`) and `BENCH_RUNS` (default 3) set the rows and runs;
//! `BENCH_KINDS=configmap` or `pod` runs one kind only; `BENCH_PERF_CTL` limits a
//! `perf record` to the update windows (see `common::perf_window`).

#[path = "../../../tests/bench_common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use futures_util::future::BoxFuture;
use kwh_client::{ApiResource, Client, Config, Object, ResourceClient};
use kwh_emulator::{Emulator, EmulatorHandle};
use kwh_informer::processor::ResourceEventHandler;
use kwh_informer::shared::{InformerOptions, SharedIndexInformer};
use kwh_informer::store::Store;
use kwh_informer::tombstone::ObjOrTombstone;
use serde_json::Value;

#[global_allocator]
static ALLOC: Tagged = Tagged;

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
    // The emulator's own threads tag their allocations, so that the pipeline's heap can be
    // told apart from the server's (its store, history and LIST response bodies).
    let emu = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("emulator")
        .on_thread_start(|| set_thread_tag(TAG_EMULATOR))
        .enable_all()
        .build()
        .expect("emulator runtime");
    rt.block_on(run(emu.handle().clone()));
    drop(emu);
}

/// Run `f` (a call into the in-process emulator) with its allocations tagged as the emulator's.
fn emu<R>(f: impl FnOnce() -> R) -> R {
    with_tag(TAG_EMULATOR, f)
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

#[derive(Clone, Copy, PartialEq, Eq)]
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
    /// Object `i` with its `rev` label at `rev`. A Pod is its stored self so changed: a Pod's
    /// spec may not change after creation, and the server added to it (its ServiceAccount's
    /// token volume, tolerations, priority), so a replace with the object first created would
    /// be refused, as by a real server.
    fn updated(self, h: &EmulatorHandle, i: usize, pad: usize, rev: usize) -> Value {
        match self {
            Kind::ConfigMap => bump(self.make(i, pad), rev),
            Kind::Pod => {
                let current = h
                    .get("v1", "Pod", Some("bench"), &self.name(i))
                    .expect("the Pod exists");
                bump(current, rev)
            }
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
    relist: Relist,
    relist_changed: Relist,
    /// Of the held bytes: the objects themselves (JSON + header + metadata arrays) and the
    /// store (item map, keys, namespace index), per object.
    objects_per_obj: f64,
    store_per_obj: f64,
}

/// Figures of one relist.
#[derive(Default)]
struct Relist {
    /// Pipeline heap high-water mark during the relist over its steady-state heap.
    peak_ratio: f64,
    /// Pipeline heap after the relist over its steady-state heap before it.
    after_ratio: f64,
    /// The emulator's extra heap during the relist (its response body), in bytes.
    emulator_extra: usize,
    /// Process VmHWM during the relist and VmRSS before it.
    hwm: usize,
    rss_before: usize,
}

async fn run(emu_rt: tokio::runtime::Handle) {
    println!("# Pipeline benchmark\n");
    println!("load average at start: {}\n", load());
    let sizes: Vec<usize> = std::env::var("BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 100_000]);
    let mut rows = Vec::new();
    let kinds = std::env::var("BENCH_KINDS")
        .unwrap_or_default()
        .to_ascii_lowercase();
    for kind in [Kind::ConfigMap, Kind::Pod] {
        let name = if kind == Kind::Pod {
            "pod"
        } else {
            "configmap"
        };
        if !kinds.is_empty() && !kinds.split(',').any(|k| k.trim() == name) {
            continue;
        }
        for &n in &sizes {
            rows.push(bench(&emu_rt, kind, n).await);
        }
    }
    println!("## Initial list (time to has_synced)\n");
    println!("| objects | n | stored JSON (emulator) | cached JSON (stripped) | informer has_synced | handler saw all adds | events/s | CPU/event | pipeline heap per cached object | held / cached JSON | VmHWM |");
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
    println!("\n## Where the pipeline heap goes (per cached object, last run)\n");
    println!("| objects | n | held | objects (JSON + header + metadata arrays) | store (item map, keys, namespace index) | rest (client, FIFO, processor, tasks; fixed) |\n|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {:.0} B | {:.0} B | {:.0} B | {:.0} B |",
            r.label,
            thousands(r.n as f64),
            r.held_per_obj,
            r.objects_per_obj,
            r.store_per_obj,
            r.held_per_obj - r.objects_per_obj - r.store_per_obj
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
    println!("\"unchanged\": the objects did not change while the watch was down (the usual case after a 410); \"all changed\": every object was updated between the last event and the relist.\n");
    println!("| objects | n | relist | peak pipeline heap / steady | pipeline heap after / before | emulator heap extra at its peak | process VmHWM during relist | process VmRSS before |\n|---|---|---|---|---|---|---|---|");
    for r in &rows {
        for (what, x) in [("unchanged", &r.relist), ("all changed", &r.relist_changed)] {
            println!(
                "| {} | {} | {} | {:.3} | {:.2} | {} | {} | {} |",
                r.label,
                thousands(r.n as f64),
                what,
                x.peak_ratio,
                x.after_ratio,
                mb(x.emulator_extra),
                mb(x.hwm),
                mb(x.rss_before)
            );
        }
    }
    println!("\nload average at end: {}", load());
}

async fn seed(
    emu_rt: &tokio::runtime::Handle,
    kind: Kind,
    n: usize,
) -> (EmulatorHandle, usize, usize) {
    let h = emu_rt
        .spawn(Emulator::builder().history_window(n + 10).start())
        .await
        .expect("join")
        .expect("emulator");
    emu(|| {
        h.create(
            serde_json::json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"bench"}}),
        )
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
    })
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

/// Expire the watch and measure the relist it causes. With `changed`, every object is
/// updated first while the watch is stalled, so the relist brings new versions of all of them.
async fn relist(
    h: &EmulatorHandle,
    r: &Running,
    kind: Kind,
    n: usize,
    pad: usize,
    changed: Option<usize>,
    base: usize,
) -> Relist {
    settle().await;
    // The pipeline's steady state: its heap now less what the process held before it started.
    let steady = live_of(TAG_PIPELINE).saturating_sub(base);
    let rss_before = proc_status("VmRSS");
    if let Some(rev) = changed {
        emu(|| {
            h.faults().stall_streams(Duration::from_secs(600));
            for i in 0..n {
                h.update(kind.updated(h, i, pad, rev)).expect("update");
            }
        });
    }
    let lists0 = emu(|| h.stats().requests("list"));
    let emu0 = live_of(TAG_EMULATOR);
    let updates0 = r.counter.updates.load(Ordering::Relaxed);
    reset_peaks();
    reset_hwm();
    emu(|| h.faults().inject_expired());
    until("relist", || emu(|| h.stats().requests("list")) > lists0).await;
    let res = format!("/{}", kind.resource().plural);
    assert!(
        WithTag(
            TAG_EMULATOR,
            Box::pin(h.wait_for_open_watches(&res, 1, DEADLINE))
        )
        .await,
        "watch re-established"
    );
    emu(|| h.faults().clear());
    // Every relisted key becomes an update (spec 2.5): wait for all of them, so that the peak
    // covers the whole hand-over (the listener's backlog included), not just the Replace.
    until("relisted updates", || {
        r.counter.updates.load(Ordering::Relaxed) >= updates0 + n as u64
    })
    .await;
    // Then a marker update: the watch after the relist delivers.
    let before = r.counter.updates.load(Ordering::Relaxed);
    emu(|| h.update(kind.updated(h, 0, pad, 999)).expect("marker"));
    until("marker", || {
        r.counter.updates.load(Ordering::Relaxed) > before
    })
    .await;
    let out = Relist {
        peak_ratio: peak_of(TAG_PIPELINE).saturating_sub(base) as f64 / steady as f64,
        after_ratio: 0.0,
        emulator_extra: peak_of(TAG_EMULATOR).saturating_sub(emu0),
        hwm: proc_status("VmHWM"),
        rss_before,
    };
    settle().await;
    Relist {
        after_ratio: live_of(TAG_PIPELINE).saturating_sub(base) as f64 / steady as f64,
        ..out
    }
}

async fn bench(emu_rt: &tokio::runtime::Handle, kind: Kind, n: usize) -> Row {
    eprintln!("seeding {} × {} …", n, kind.label());
    let (h, pad, wire_json) = seed(emu_rt, kind, n).await;
    let runs = runs();

    // Initial list: a fresh informer per run.
    let (mut sync, mut handled, mut cpu, mut held) = (vec![], vec![], vec![], vec![]);
    let (mut cached_json, mut hwm) = (0, 0);
    let (mut objects_bytes, mut store_bytes) = (0, 0);
    let mut last = None;
    let mut base = 0;
    for run in 0..runs {
        settle().await;
        let heap0 = live_of(TAG_PIPELINE);
        base = heap0;
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
        objects_bytes = items.iter().map(|o| o.heap_size()).sum::<usize>();
        // What the store's map, keys and index cost: build the same store again beside it.
        let l0 = live_of(TAG_PIPELINE);
        let copy = Store::with_namespace_index();
        copy.replace(items);
        store_bytes = live_of(TAG_PIPELINE).saturating_sub(l0);
        drop(copy);
        held.push(live_of(TAG_PIPELINE).saturating_sub(heap0) as f64);
        if run + 1 == runs {
            last = Some(r);
        } else {
            stop(r).await;
        }
    }
    let r = last.expect("at least one run");
    let held_b = median(held);

    // Relists: the watch expires; the reflector lists again and replaces the cache.
    let unchanged = relist(&h, &r, kind, n, pad, None, base).await;
    let changed = relist(&h, &r, kind, n, pad, Some(runs + 1), base).await;

    // Update stream: queue N updates in the history while the watch is stalled. Last, and with
    // the heap counters off: nothing is weighed here, and their shared atomics on every
    // allocation would slow the pipeline in a way the host (plain system allocator) never is.
    set_counting(false);
    let mut upd = vec![];
    let mut upd_cpu = vec![];
    for run in 0..runs {
        let before = r.counter.updates.load(Ordering::Relaxed);
        emu(|| {
            h.faults().stall_streams(Duration::from_secs(600));
            for i in 0..n {
                h.update(kind.updated(&h, i, pad, run + 1)).expect("update");
            }
        });
        perf_window(true);
        let cpu0 = cpu_time();
        let t = Instant::now();
        emu(|| h.faults().clear());
        until("all updates", || {
            r.counter.updates.load(Ordering::Relaxed) - before >= n as u64
        })
        .await;
        upd.push(n as f64 / secs(t));
        upd_cpu.push((cpu_time() - cpu0).as_secs_f64() * 1e6 / n as f64);
        perf_window(false);
    }
    set_counting(true);

    stop(r).await;
    WithTag(TAG_EMULATOR, Box::pin(h.shutdown())).await;
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
        relist: unchanged,
        relist_changed: changed,
        objects_per_obj: objects_bytes as f64 / n as f64,
        store_per_obj: store_bytes as f64 / n as f64,
    }
}
