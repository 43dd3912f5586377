//! Shared pieces of the benchmark binaries: a counting allocator, process figures from /proc
//! and getrusage, object generators, a raw HTTP/1.1 client and table printing.
//!
//! Why a counting allocator: the emulator and the pipeline share one process, so RSS alone
//! cannot say what the informer's cache holds; live heap bytes before and after a phase can.

#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

/// Counts live heap bytes and their high-water mark, while [`set_counting`] has it on.
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static COUNTING: AtomicBool = AtomicBool::new(true);

/// Turns [`Counting`]'s and [`Tagged`]'s counters on or off. Why off: atomic updates of shared
/// cache lines on every allocation and free cost throughput figures that the host itself (plain
/// system allocator) never pays. `live()` deltas are only meaningful within an "on" window.
/// [`Tagged`] marks blocks allocated while off and never counts them, so its live figures stay
/// exact for the blocks it did count.
pub fn set_counting(on: bool) {
    COUNTING.store(on, Ordering::Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l);
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(l);
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = System.realloc(p, l, new);
        if !q.is_null() && COUNTING.load(Ordering::Relaxed) {
            if new >= l.size() {
                let now = LIVE.fetch_add(new - l.size(), Ordering::Relaxed) + new - l.size();
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(l.size() - new, Ordering::Relaxed);
            }
        }
        q
    }
}

/// Live heap bytes now.
pub fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Reset the heap high-water mark to the current live bytes.
pub fn reset_peak() {
    PEAK.store(live(), Ordering::Relaxed);
}

/// Heap high-water mark since the last reset.
pub fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

/// A `kB` field of /proc/self/status (VmRSS, VmHWM), in bytes.
pub fn proc_status(field: &str) -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Reset VmHWM to the current RSS (Linux ≥ 4.0); false when the kernel refuses.
pub fn reset_hwm() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// User + system CPU time of the whole process.
pub fn cpu_time() -> Duration {
    let mut ru = std::mem::MaybeUninit::<libc_rusage::Rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given; RUSAGE_SELF is 0.
    let ok = unsafe { libc_rusage::getrusage(0, ru.as_mut_ptr()) } == 0;
    if !ok {
        return Duration::ZERO;
    }
    // SAFETY: initialised by the successful call above.
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc_rusage::Timeval| Duration::new(t.sec as u64, (t.usec as u32) * 1000);
    tv(ru.utime) + tv(ru.stime)
}

/// System CPU time and voluntary context switches (waits) of the whole process: where a
/// throughput figure's spread comes from when threads park and wake.
pub fn sys_and_waits() -> (Duration, i64) {
    let mut ru = std::mem::MaybeUninit::<libc_rusage::Rusage>::zeroed();
    // SAFETY: as in `cpu_time`.
    if unsafe { libc_rusage::getrusage(0, ru.as_mut_ptr()) } != 0 {
        return (Duration::ZERO, 0);
    }
    // SAFETY: initialised by the successful call above.
    let ru = unsafe { ru.assume_init() };
    let st = Duration::new(ru.stime.sec as u64, (ru.stime.usec as u32) * 1000);
    (st, ru.rest[12])
}

/// The two fields of `struct rusage` we read, declared by hand to avoid a libc dependency
/// (x86_64/aarch64 Linux layout: two `timeval`s first).
mod libc_rusage {
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct Timeval {
        pub sec: i64,
        pub usec: i64,
    }
    #[repr(C)]
    pub struct Rusage {
        pub utime: Timeval,
        pub stime: Timeval,
        pub rest: [i64; 14],
    }
    extern "C" {
        pub fn getrusage(who: i32, usage: *mut Rusage) -> i32;
    }
}

/// A ConfigMap named `cm-<i>` in `ns` whose data pads it to about `size` bytes.
pub fn configmap(ns: &str, i: usize, pad: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("cm-{i:06}"), "namespace": ns, "labels": {"app": "bench", "rev": rev_label(0), "shard": (i % 16).to_string()}},
        "data": {"payload": "x".repeat(pad)}
    })
}

/// A Pod named `pod-<i>` in `ns` with a realistic spec; `pad` sizes an annotation.
pub fn pod(ns: &str, i: usize, pad: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("pod-{i:06}"), "namespace": ns,
            "labels": {"app": "bench", "pod-template-hash": "5d8f7c9b4", "rev": rev_label(0), "shard": (i % 16).to_string()},
            "annotations": {"bench/pad": "y".repeat(pad)},
        },
        "spec": {
            "containers": [{
                "name": "app", "image": "registry.example/app:1.2.3",
                "args": ["--port=8080", "--verbose"],
                "ports": [{"containerPort": 8080, "protocol": "TCP", "name": "http"}],
                "env": [{"name": "MODE", "value": "bench"}, {"name": "LEVEL", "value": "info"}],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
                "volumeMounts": [{"name": "cfg", "mountPath": "/etc/app"}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 5},
            }],
            "volumes": [{"name": "cfg", "configMap": {"name": "app-config"}}],
            "nodeName": format!("node-{}", i % 50),
            "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
        }
    })
}

/// Set `metadata.labels.rev` (an update that changes content and RV).
pub fn bump(mut v: Value, rev: usize) -> Value {
    v["metadata"]["labels"]["rev"] = Value::String(rev_label(rev));
    v
}

/// The `rev` label's value, fixed-width and present from the start, so that an update changes
/// an object's content but not its size: a relist of changed objects is then measured against
/// a steady state of objects just as large.
pub fn rev_label(rev: usize) -> String {
    format!("{:04}", rev % 10_000)
}

/// A bare HTTP/1.1 connection to the emulator.
pub struct Raw {
    sender: hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
}

impl Raw {
    pub async fn connect(addr: SocketAddr) -> Raw {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        tcp.set_nodelay(true).expect("nodelay");
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .expect("handshake");
        tokio::spawn(conn);
        Raw { sender }
    }

    async fn get(&mut self, path: &str) -> hyper::body::Incoming {
        self.sender.ready().await.expect("ready");
        let req = http::Request::get(path)
            .header("host", "127.0.0.1")
            .header("accept", "application/json")
            .body(Empty::new())
            .expect("request");
        let resp = self.sender.send_request(req).await.expect("response");
        assert!(resp.status().is_success(), "GET {path}: {}", resp.status());
        resp.into_body()
    }

    /// GET `path` and read the whole body.
    pub async fn get_all(&mut self, path: &str) -> Bytes {
        self.get(path)
            .await
            .collect()
            .await
            .expect("body")
            .to_bytes()
    }

    /// GET a watch and count newline-terminated events until `want` arrived.
    /// Reads a watch until `want` events have arrived; returns (events, body bytes read).
    pub async fn count_events(&mut self, path: &str, want: u64) -> (u64, u64) {
        let mut body = self.get(path).await;
        let (mut n, mut bytes) = (0u64, 0u64);
        while n < want {
            match body.frame().await {
                Some(Ok(f)) => {
                    if let Some(d) = f.data_ref() {
                        n += d.iter().filter(|&&b| b == b'\n').count() as u64;
                        bytes += d.len() as u64;
                    }
                }
                _ => break,
            }
        }
        (n, bytes)
    }
}

/// A count from the environment (`BENCH_RUNS=3`), else `default`.
pub fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The median of some measurements.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Run `f` `runs` times; the median of its returned figure.
pub async fn median_of<F, Fut>(runs: usize, mut f: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = f64>,
{
    let mut v = Vec::with_capacity(runs);
    for _ in 0..runs {
        v.push(f().await);
    }
    median(v)
}

pub fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

pub fn mb(b: usize) -> String {
    format!("{:.1} MB", b as f64 / 1e6)
}

/// `1234567.0` → `1,234,567`.
pub fn thousands(x: f64) -> String {
    let s = format!("{:.0}", x);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `uptime`'s load averages, for the record.
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Poll `f` every millisecond until it holds; panics after `deadline`.
pub async fn until(what: &str, deadline: Duration, f: impl Fn() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The `data.payload` padding that makes `configmap(ns, i, pad)` about `target` bytes of JSON
/// as the emulator stores it (measured on a probe object, then removed).
pub fn configmap_pad(h: &kwh_emulator::EmulatorHandle, ns: &str, target: usize) -> usize {
    let probe = h.create(configmap(ns, 999_999, 0)).expect("probe");
    let base = serde_json::to_vec(&probe).expect("json").len();
    h.delete("v1", "ConfigMap", Some(ns), "cm-999999")
        .expect("delete probe");
    target.saturating_sub(base)
}

/// Creates namespace `ns` and `n` ConfigMaps of about `target` bytes in it; returns the padding.
pub fn seed_configmaps(
    h: &kwh_emulator::EmulatorHandle,
    ns: &str,
    n: usize,
    target: usize,
) -> usize {
    h.create(json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name": ns}}))
        .expect("namespace");
    let pad = configmap_pad(h, ns, target);
    for i in 0..n {
        h.create(configmap(ns, i, pad)).expect("seed");
    }
    pad
}

/// Allocation tags of [`Tagged`]: which side of the process an allocation belongs to.
pub const TAG_PIPELINE: u8 = 0;
pub const TAG_EMULATOR: u8 = 1;
const TAGS: usize = 2;

thread_local! {
    /// The tag new allocations of this thread get (a const initialiser without a destructor,
    /// so the allocator may read it at any time, even while the thread exits).
    static THREAD_TAG: std::cell::Cell<u8> = const { std::cell::Cell::new(TAG_PIPELINE) };
}

static LIVE_TAG: [AtomicUsize; TAGS] = [AtomicUsize::new(0), AtomicUsize::new(0)];
static PEAK_TAG: [AtomicUsize; TAGS] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// A counting allocator that also attributes every allocation to the tag of the thread that
/// made it, and keeps per-tag live bytes and high-water marks.
///
/// Why: the emulator and the pipeline share one process, and a relist's peak is exactly when
/// both hold large buffers (the server's response body, the client's new objects). The tag is
/// stored in a small header in front of each allocation, so bytes are always returned to the
/// tag that allocated them, whichever thread frees them. The header changes RSS, not the
/// counted (requested) bytes; [`live`] and [`peak`] still count the whole process.
pub struct Tagged;

/// Header room in front of an allocation of `l`: at least 16 bytes, keeping the alignment.
fn header(l: Layout) -> usize {
    l.align().max(16)
}

fn outer(l: Layout) -> Option<Layout> {
    Layout::from_size_align(l.size().checked_add(header(l))?, header(l)).ok()
}

fn count_alloc(tag: u8, n: usize) {
    let now = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
    let t = usize::from(tag).min(TAGS - 1);
    let now = LIVE_TAG[t].fetch_add(n, Ordering::Relaxed) + n;
    PEAK_TAG[t].fetch_max(now, Ordering::Relaxed);
}

fn count_free(tag: u8, n: usize) {
    LIVE.fetch_sub(n, Ordering::Relaxed);
    LIVE_TAG[usize::from(tag).min(TAGS - 1)].fetch_sub(n, Ordering::Relaxed);
}

/// Set in a block's tag byte when it was allocated with counting off.
const UNCOUNTED: u8 = 0x80;

/// The tag byte of a new block of `size` bytes, counted if counting is on.
fn tag_new_block(size: usize) -> u8 {
    let tag = thread_tag();
    if COUNTING.load(Ordering::Relaxed) {
        count_alloc(tag, size);
        tag
    } else {
        tag | UNCOUNTED
    }
}

fn thread_tag() -> u8 {
    THREAD_TAG.try_with(|t| t.get()).unwrap_or(TAG_PIPELINE)
}

unsafe impl GlobalAlloc for Tagged {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let Some(o) = outer(l) else {
            return std::ptr::null_mut();
        };
        let base = System.alloc(o);
        if base.is_null() {
            return base;
        }
        // SAFETY: the block is `header(l) + size` bytes; the tag byte sits just before the
        // pointer handed out, inside the header.
        let p = base.add(header(l));
        p.sub(1).write(tag_new_block(l.size()));
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let Some(o) = outer(l) else {
            return std::ptr::null_mut();
        };
        let base = System.alloc_zeroed(o);
        if base.is_null() {
            return base;
        }
        // SAFETY: as in `alloc`.
        let p = base.add(header(l));
        p.sub(1).write(tag_new_block(l.size()));
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `alloc`/`realloc` with this layout, so the header precedes it.
        let tag = p.sub(1).read();
        let o = outer(l).expect("layout was valid at allocation");
        System.dealloc(p.sub(header(l)), o);
        if tag & UNCOUNTED == 0 {
            count_free(tag, l.size());
        }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let h = header(l);
        // SAFETY: as in `dealloc`; the header moves with the block, so the tag stays.
        let tag = p.sub(1).read();
        let o = outer(l).expect("layout was valid at allocation");
        let Some(new_outer) = new.checked_add(h) else {
            return std::ptr::null_mut();
        };
        let base = System.realloc(p.sub(h), o, new_outer);
        if base.is_null() {
            return base;
        }
        if tag & UNCOUNTED != 0 {
            // Allocated while counting was off: stays out of the figures for its whole life.
        } else if new >= l.size() {
            count_alloc(tag, new - l.size());
        } else {
            count_free(tag, l.size() - new);
        }
        base.add(h)
    }
}

/// Tag the current thread's future allocations (e.g. from a runtime's `on_thread_start`).
pub fn set_thread_tag(tag: u8) {
    THREAD_TAG.with(|t| t.set(tag));
}

/// Run `f` with this thread's allocations tagged `tag`.
pub fn with_tag<R>(tag: u8, f: impl FnOnce() -> R) -> R {
    let old = THREAD_TAG.with(|t| t.replace(tag));
    let r = f();
    THREAD_TAG.with(|t| t.set(old));
    r
}

/// A future whose polls allocate under `tag`.
pub struct WithTag<F>(pub u8, pub F);

impl<F: std::future::Future + Unpin> std::future::Future for WithTag<F> {
    type Output = F::Output;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let tag = self.0;
        with_tag(tag, || std::pin::Pin::new(&mut self.1).poll(cx))
    }
}

/// Live bytes allocated under `tag`.
pub fn live_of(tag: u8) -> usize {
    LIVE_TAG[usize::from(tag).min(TAGS - 1)].load(Ordering::Relaxed)
}

/// High-water mark of `tag`'s live bytes since the last [`reset_peaks`].
pub fn peak_of(tag: u8) -> usize {
    PEAK_TAG[usize::from(tag).min(TAGS - 1)].load(Ordering::Relaxed)
}

/// Reset the process and every per-tag high-water mark to the current live bytes.
pub fn reset_peaks() {
    reset_peak();
    for t in 0..TAGS {
        PEAK_TAG[t].store(LIVE_TAG[t].load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// Profiles only the timed windows: with `BENCH_PERF_CTL=CTL_FIFO,ACK_FIFO` (the fifos given to
/// `perf record --control=fifo:CTL_FIFO,ACK_FIFO -D -1`), `perf_window(true)` starts sampling
/// and `perf_window(false)` stops it, so set-up work (seeding, the emulator's writes) stays out
/// of the profile. Without the variable it does nothing.
pub fn perf_window(on: bool) {
    use std::io::{Read, Write};
    let Ok(v) = std::env::var("BENCH_PERF_CTL") else {
        return;
    };
    let Some((ctl, ack)) = v.split_once(',') else {
        return;
    };
    let cmd: &[u8] = if on { b"enable\n" } else { b"disable\n" };
    let sent = std::fs::OpenOptions::new()
        .write(true)
        .open(ctl)
        .and_then(|mut f| f.write_all(cmd));
    if sent.is_ok() {
        let mut buf = [0u8; 5];
        let _ = std::fs::File::open(ack).and_then(|mut f| f.read(&mut buf));
    }
}

/// One row of a floors table (`| measure | value | floor | met |`); whether it was met.
pub fn floor_row(measure: &str, value: String, floor: &str, met: bool) -> bool {
    println!(
        "| {measure} | {value} | {floor} | {} |",
        if met { "yes" } else { "no" }
    );
    met
}
