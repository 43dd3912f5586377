//! Hostile guests beside a well-behaved one: what stops each, what it logs and counts, and what
//! it costs the other plugin.
//!
//! Each scenario runs one `host` process (this package's binary, `--worker-threads 1` as users
//! run it) against one `host emulator` process, with two plugins: the `ledger` test guest, an
//! SDK controller confined to namespace `calm`, and one hostile guest confined to namespace
//! `wild` (or its own), fed new objects four times a second so it keeps misbehaving. Meanwhile
//! `calm`'s ConfigMaps are updated `BENCH_RATE` times a second (default 50) for
//! `BENCH_SECS` (default 10): the ledger's reconcile latency (update answered → reconcile
//! started, from its log line's wall clock) is measured, p50 and p99, and compared with a run
//! without a hostile guest made just before it (paired: this machine's noise drifts over
//! minutes, and one baseline at the start judged late scenarios against another machine).
//!
//! For each hostile guest the table gives the limit that stops it (checked: the metric that
//! counts it moved), the first line the host logged about it, its counters in `/metrics`, and
//! the ledger's latency beside it. Floors: every hostile guest's limit took effect, and the
//! ledger's p50 and p99 beside it stay within 2× of running alone (with 2 ms of grace for
//! sub-millisecond figures). `BENCH_ONLY=hungry,looper,…` runs some; the baseline always runs.
//! `BENCH_WORST=1` prints each run's slowest samples with their time into the run (stalls
//! spread over the run are the host's doing; a cluster at its start, the hostile plugin's
//! setup).

#[path = "../../tests/bench_common/mod.rs"]
mod bench_common;
#[path = "../../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kwh_client::client::WriteParams;
use kwh_client::{ApiResource, Client};
use serde_json::{json, Value};

use support::process::{HostProcess, WAIT};
use support::replicas::{now_ns, parse_ledger, EmulatorProcess};

const CALM: &str = "calm";
const WILD: &str = "wild";
const CALM_OBJECTS: usize = 20;

/// The n-th object fed to a hostile guest: (kind, name, data).
type Feed = fn(usize) -> (&'static str, String, Value);

/// One hostile guest and how to provoke it.
struct Scenario {
    name: &'static str,
    /// The component (a test guest's name, or a file made for the run).
    module: Module,
    /// What each new object in its namespace looks like: (kind, name, data).
    feed: Option<Feed>,
    /// Its namespace (`wild` unless the guest names its own).
    namespace: &'static str,
    /// The limit that stops it, in words.
    limit: &'static str,
    /// The metric that must have moved (a counter of the hostile plugin), or a log line that
    /// must have been written (for a plugin refused at load).
    proof: Proof,
    /// Its `reconcileDeadlineMs`, where the default (10 s) would not show within a run.
    reconcile_deadline_ms: Option<u64>,
}

enum Module {
    Guest(&'static str),
    /// The `noop` guest with a 100 MB custom section appended.
    Padded,
}

enum Proof {
    Metric(&'static str),
    Line(&'static str),
}

fn cm(name: String, data: Value) -> (&'static str, String, Value) {
    ("ConfigMap", name, data)
}

/// Every hostile guest, in the order of the table (the order also numbers their namespaces).
fn scenarios() -> Vec<Scenario> {
    let mut all = misbehaving_in_reconcile();
    all.extend(abusing_the_host());
    all
}

/// The guests whose reconciles or handlers run away, trap or fail: what the runtime's limits
/// and quarantine are for.
fn misbehaving_in_reconcile() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "hungry",
            module: Module::Guest("hungry"),
            feed: Some(|i| {
                cm(
                    if i == 0 {
                        "stall".into()
                    } else {
                        format!("eat-{i}")
                    },
                    json!({}),
                )
            }),
            namespace: WILD,
            limit:
                "memory cap (64 MiB) in reconcile; handler deadline (1 s) for `stall`; quarantine",
            proof: Proof::Metric("plugin_guest_memory_exhaustions_total"),
            reconcile_deadline_ms: None,
        },
        Scenario {
            name: "looper",
            module: Module::Guest("looper"),
            feed: Some(|i| cm(format!("w-{i}"), json!({}))),
            namespace: WILD,
            limit: "reconcile deadline (10 s by default, 2 s here), checked every 1 ms; quarantine",
            proof: Proof::Metric("plugin_guest_deadline_hits_total"),
            reconcile_deadline_ms: Some(2000),
        },
        Scenario {
            name: "trapper",
            module: Module::Guest("trapper"),
            feed: Some(|i| ("Secret", format!("trap-{i}"), json!({}))),
            namespace: WILD,
            limit: "trap → instance replaced; 5 failures in 60 s → quarantine",
            proof: Proof::Metric("plugin_quarantines_total"),
            reconcile_deadline_ms: None,
        },
        Scenario {
            name: "relapse",
            module: Module::Guest("relapse"),
            feed: Some(|i| ("Secret", format!("item-{i}"), json!({}))),
            namespace: "default",
            limit:
                "traps in handlers and reconcile → quarantine; notifications held back, no backlog",
            proof: Proof::Metric("plugin_notifications_held_back_total"),
            reconcile_deadline_ms: None,
        },
        Scenario {
            name: "unruly (fail)",
            module: Module::Guest("unruly"),
            feed: Some(|i| cm(format!("f-{i}"), json!({"fail": "yes"}))),
            namespace: WILD,
            limit: "reconcile errors → rate-limited requeue (5 ms doubling to 1000 s)",
            proof: Proof::Metric("plugin_reconcile_errors_total"),
            reconcile_deadline_ms: None,
        },
        Scenario {
            name: "unruly (hog)",
            module: Module::Guest("unruly"),
            feed: Some(|i| cm(format!("h-{i}"), json!({"hog": "yes"}))),
            namespace: WILD,
            limit: "memory cap (64 MiB) → instance replaced; quarantine",
            proof: Proof::Metric("plugin_guest_memory_exhaustions_total"),
            reconcile_deadline_ms: None,
        },
        Scenario {
            name: "flaky",
            module: Module::Guest("flaky"),
            feed: Some(|i| cm(format!("k-{i}"), json!({"traps": "5"}))),
            namespace: WILD,
            limit: "handler trap → retried on a fresh instance (3 attempts), then dropped",
            proof: Proof::Metric("plugin_notifications_dropped_total"),
            reconcile_deadline_ms: None,
        },
    ]
}

/// The guests that push the host's own bounds (stack, message size, queue, log budget, imports,
/// component size): what the host must refuse or survive.
fn abusing_the_host() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "havoc (recursion)",
            module: Module::Guest("havoc"),
            feed: Some(|i| cm(format!("r-{i}"), json!({"mode": "recurse"}))),
            namespace: WILD,
            limit:
                "its stack runs out (out-of-bounds trap; wasmtime's 1 MiB stack for native frames)",
            proof: Proof::Metric("plugin_guest_traps_total"),
            reconcile_deadline_ms: None,
        },
        Scenario {
            name: "havoc (24 MiB return value)",
            module: Module::Guest("havoc"),
            feed: Some(|i| cm(format!("b-{i}"), json!({"mode": "bigreturn"}))),
            namespace: WILD,
            limit: "an error message over 64 KiB is a failure of the plugin → quarantine; its memory cap bounds the value",
            proof: Proof::Metric("plugin_quarantines_total"),
            reconcile_deadline_ms: None,
        },
        Scenario {
            name: "havoc (enqueue storm, 10 M keys)",
            module: Module::Guest("havoc"),
            feed: Some(|i| cm(format!("s-{i}"), json!({"mode": "storm"}))),
            namespace: WILD,
            limit: "the queue's bound (1,000,000 keys, --max-queued-keys); reconcile deadline",
            proof: Proof::Metric("plugin_queue_adds_refused_total"),
            reconcile_deadline_ms: None,
        },
        Scenario {
            name: "chatter (log spam)",
            module: Module::Guest("chatter"),
            feed: Some(|i| cm(format!("chatter-{i}"), json!({}))),
            namespace: WILD,
            limit: "log budget: bursts of 1,000 lines, 100/s; lines cut at 4 KiB",
            proof: Proof::Metric("plugin_log_lines_dropped_total"),
            reconcile_deadline_ms: None,
        },
        Scenario {
            name: "stranger (imports an ungranted interface)",
            module: Module::Guest("stranger"),
            feed: None,
            namespace: WILD,
            limit: "refused at load; the other plugins start",
            proof: Proof::Line("which this host does not provide"),
            reconcile_deadline_ms: None,
        },
        Scenario {
            name: "100 MB component",
            module: Module::Padded,
            feed: None,
            namespace: WILD,
            limit: "none: it loads (compiled once in a child process, then mapped from the cache)",
            proof: Proof::Line("plugin started plugin=noop"),
            reconcile_deadline_ms: None,
        },
    ]
}

/// Flags added to every host's command line (`BENCH_HOST_ARGS`, space-separated), e.g.
/// `--worker-threads 2`.
fn host_args() -> Vec<String> {
    std::env::var("BENCH_HOST_ARGS")
        .map(|v| v.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

fn wanted(name: &str) -> bool {
    match std::env::var("BENCH_ONLY") {
        Ok(v) => v
            .split(',')
            .any(|s| name.starts_with(s.trim()) && !s.trim().is_empty()),
        Err(_) => true,
    }
}

fn resource(kind: &str) -> ApiResource {
    match kind {
        "Secret" => ApiResource::new("v1", "Secret", "secrets", true),
        _ => ApiResource::new("v1", "ConfigMap", "configmaps", true),
    }
}

/// The `noop` guest with a custom section of 100 MB appended: a valid component that large.
fn padded_component(dir: &Path) -> PathBuf {
    let mut bytes = std::fs::read(support::guests::guest("noop")).expect("noop");
    let name = b"padding";
    let mut payload = leb128(name.len());
    payload.extend_from_slice(name);
    payload.resize(payload.len() + (100 << 20), 0);
    bytes.push(0);
    bytes.extend(leb128(payload.len()));
    bytes.extend(payload);
    let path = dir.join("padded.wasm");
    std::fs::write(&path, bytes).expect("write");
    path
}

fn leb128(mut n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

/// What one run measured.
struct Run {
    p50_ms: f64,
    p99_ms: f64,
    samples: usize,
    /// The hostile plugin's non-zero counters.
    counters: BTreeMap<String, f64>,
    /// The first warning or error the host logged about the hostile plugin.
    first_line: Option<String>,
    saw_line: bool,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The counters of plugin `plugin` (`name_total{plugin="…",…} value`), summed per family.
fn counters_of(metrics: &str, plugin: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let label = format!("plugin=\"{plugin}\"");
    for line in metrics.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Some((name, labels)) = series.split_once('{') else {
            continue;
        };
        if !name.ends_with("_total") || !labels.contains(&label) {
            continue;
        }
        let Ok(v) = value.parse::<f64>() else {
            continue;
        };
        if v > 0.0 {
            *out.entry(name.to_string()).or_default() += v;
        }
    }
    out
}

async fn run(
    em: &EmulatorProcess,
    dir: &Path,
    s: Option<(usize, &Scenario)>,
    secs: u64,
    rate: u64,
) -> Run {
    let client = &em.client;
    // Each scenario in a namespace of its own: objects fed to one never reach the next.
    let wild = s.map(|(i, s)| {
        if s.namespace == WILD {
            format!("{WILD}-{i}")
        } else {
            s.namespace.to_string()
        }
    });
    if let Some(ns) = &wild {
        em.create_namespace(ns).await;
    }
    let s = s.map(|(_, s)| s);
    let hostile_name = s.map(|s| match s.module {
        Module::Guest(g) => g.to_string(),
        Module::Padded => "noop".to_string(),
    });
    let (mut host, ops) = start_host(em, dir, s, wild.as_deref()).await;

    // The hostile plugin's feed, four new objects a second, for the whole run.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let feeder = s
        .and_then(|s| s.feed)
        .zip(wild.clone())
        .map(|(feed, ns)| spawn_feeder(client, feed, ns, stop.clone()));
    let written = calm_load(em, secs, rate).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(f) = feeder {
        let _ = f.await;
    }
    let latencies = reconcile_latencies(&mut host, &written).await;
    report_worst(&latencies, &written, s);
    let mut sorted: Vec<f64> = latencies.into_iter().map(|(l, _)| l).collect();
    sorted.sort_by(f64::total_cmp);
    let metrics = support::cluster::http_get(&ops, "/metrics").await.1;
    let counters = hostile_name
        .as_deref()
        .map(|p| counters_of(&metrics, p))
        .unwrap_or_default();
    host.drain();
    let first_line = hostile_name
        .as_deref()
        .and_then(|p| first_line_about(&host, p));
    let saw_line = match s.map(|s| &s.proof) {
        Some(Proof::Line(text)) => host.saw(text),
        _ => false,
    };
    host.sigterm();
    let _ = host.exit(Duration::from_secs(60)).await;
    Run {
        p50_ms: percentile(&sorted, 0.5),
        p99_ms: percentile(&sorted, 0.99),
        samples: sorted.len(),
        counters,
        first_line,
        saw_line,
    }
}

/// Writes the plugins file (the ledger, and the hostile guest `s` confined to `wild`), starts
/// a host on it and waits for the ledger: the run measures only once the ledger is running.
/// The host and its operations address.
async fn start_host(
    em: &EmulatorProcess,
    dir: &Path,
    s: Option<&Scenario>,
    wild: Option<&str>,
) -> (HostProcess, String) {
    let ledger = json!({"module": support::guests::guest("ledger"), "config": {"namespace": CALM}});
    let mut plugins = vec![ledger];
    if let Some(s) = s {
        let module = match s.module {
            Module::Guest(g) => support::guests::guest(g),
            Module::Padded => padded_component(dir),
        };
        let mut entry = json!({"module": module, "namespace": wild});
        if let Some(ms) = s.reconcile_deadline_ms {
            entry["reconcileDeadlineMs"] = ms.into();
        }
        plugins.push(entry);
    }
    let file = dir.join(format!("plugins-{}.json", now_ns()));
    std::fs::write(&file, Value::from(plugins).to_string()).expect("plugins file");
    let cache = dir.join(format!("cache-{}", now_ns()));
    let mut host = HostProcess::spawn(
        [
            OsString::from("--kubeconfig"),
            em.kubeconfig.clone().into_os_string(),
            "--plugins".into(),
            file.into_os_string(),
            "--metrics-addr".into(),
            "127.0.0.1:0".into(),
            "--cache-dir".into(),
            cache.into_os_string(),
        ]
        .into_iter()
        .chain(host_args().into_iter().map(OsString::from)),
        "info",
    );
    let ops = host.ops_addr().await;
    host.line("running; SIGINT or SIGTERM stops").await;
    // The ledger is running once its caches synced (the hostile plugin may never be ready).
    let synced = support::cluster::get_until(&ops, "/statusz", WAIT, |_, body| {
        let v: Value = serde_json::from_str(body).unwrap_or_default();
        v["plugins"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["name"] == "ledger" && p["cachesSynced"] == true)
    })
    .await;
    assert!(synced.is_some(), "the ledger never synced:\n{}", host.log());
    (host, ops)
}

/// Creates `feed`'s objects in `ns` four times a second until `stop`: keeps the hostile guest
/// misbehaving for the whole run.
fn spawn_feeder(
    client: &Client,
    feed: Feed,
    ns: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let client = client.clone();
    tokio::spawn(async move {
        let mut i = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let (kind, name, data) = feed(i);
            let name = format!("{name}-{}", now_ns() % 1_000_000_000);
            let name = if i == 0 && name.starts_with("stall") {
                "stall".to_string()
            } else {
                name
            };
            let body = json!({"apiVersion": "v1", "kind": kind,
                "metadata": {"name": name, "namespace": &ns}, "data": data});
            let _ = client
                .create(
                    &resource(kind),
                    Some(ns.as_str()),
                    body.to_string().into(),
                    &WriteParams::default(),
                )
                .await;
            i += 1;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
}

/// The calm load: one update every 1/rate s for `secs`, round robin over the ConfigMaps. Each
/// update's (key, resource version, answered at ns), to match with the ledger's reconciles.
async fn calm_load(em: &EmulatorProcess, secs: u64, rate: u64) -> Vec<(String, String, u64)> {
    let mut written: Vec<(String, String, u64)> = Vec::new();
    let every = Duration::from_secs_f64(1.0 / rate as f64);
    let started = tokio::time::Instant::now();
    let end = started + Duration::from_secs(secs);
    let mut n = 0usize;
    while tokio::time::Instant::now() < end {
        let name = format!("cm-{}", n % CALM_OBJECTS);
        let rv = em.update_cm(CALM, &name, json!({"n": n.to_string()})).await;
        written.push((format!("{CALM}/{name}"), rv, now_ns()));
        n += 1;
        tokio::time::sleep_until(started + every * n as u32).await;
    }
    written
}

/// The ledger's latency (ms) for each written version it reconciled, with the write's time:
/// waits until every version was reconciled (or its key's later one), within a bound.
async fn reconcile_latencies(
    host: &mut HostProcess,
    written: &[(String, String, u64)],
) -> Vec<(f64, u64)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        host.drain();
        let recs = parse_ledger(0, host.seen.iter().map(|l| l.text.as_str()), None);
        let mut lat = Vec::new();
        let mut missing = 0;
        for (key, rv, at) in written {
            match recs.iter().find(|r| &r.key == key && &r.rv == rv) {
                Some(r) => lat.push((r.start_ns.saturating_sub(*at) as f64 / 1e6, *at)),
                None => missing += 1,
            }
        }
        // Updates coalesced into a later version are not missing; a few may be.
        if missing * 20 <= written.len() || Instant::now() > deadline {
            break lat;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `BENCH_WORST=1`: the run's slowest samples and their time into it, to tell the host's stalls
/// (spread over the run) from the hostile plugin's setup (a cluster at its start).
fn report_worst(latencies: &[(f64, u64)], written: &[(String, String, u64)], s: Option<&Scenario>) {
    let mut worst = latencies.to_vec();
    worst.sort_by(|a, b| b.0.total_cmp(&a.0));
    if std::env::var_os("BENCH_WORST").is_some() {
        let t0 = written.first().map_or(0, |w| w.2);
        let w: Vec<String> = worst
            .iter()
            .take(8)
            .map(|(l, at)| format!("{l:.1} ms at +{:.2} s", at.saturating_sub(t0) as f64 / 1e9))
            .collect();
        eprintln!("{}: slowest {w:?}", s.map_or("alone", |s| s.name));
    }
}

/// The first warning or error the host logged about plugin `p`: the host's own words about the
/// plugin (not the guest's stderr), or the line saying its log was cut short.
fn first_line_about(host: &HostProcess, p: &str) -> Option<String> {
    host.seen
        .iter()
        .map(|l| l.text.as_str())
        .find(|t| {
            (t.contains(" WARN ") || t.contains(" ERROR "))
                && (t.contains(&format!("plugin={p}")) || t.contains(&format!("{p}.wasm")))
                && (t.contains(" kwh_plugin::") || t.contains("log lines of this plugin dropped"))
        })
        .map(|t| {
            let t = t.split_once(' ').map_or(t, |(_, rest)| rest);
            let mut t = t.to_string();
            t.truncate(220);
            t
        })
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let secs = bench_common::env_or("BENCH_SECS", 10) as u64;
        let rate = bench_common::env_or("BENCH_RATE", 50) as u64;
        println!(
            "hostile guests benchmark: {secs} s per run, calm updates {rate}/s, host flags {:?}, load {}",
            host_args(),
            bench_common::load()
        );
        let dir = support::temp_dir("hostile");
        let em = EmulatorProcess::start(&[]).await;
        for ns in [CALM, WILD] {
            em.create_namespace(ns).await;
        }
        for i in 0..CALM_OBJECTS {
            em.create_cm(CALM, &format!("cm-{i}"), json!({"n": "0"})).await;
        }
        println!();
        println!("| guest | limit that stops it | took effect | its counters | first line logged | ledger p50 / p99 beside it | alone, just before | within 2× |");
        println!("|---|---|---|---|---|---|---|---|");
        let mut unmet = Vec::new();
        for (i, s) in scenarios().iter().enumerate().filter(|(_, s)| wanted(s.name)) {
            let alone = run(&em, &dir, None, secs, rate).await;
            let r = run(&em, &dir, Some((i, s)), secs, rate).await;
            let took = match s.proof {
                Proof::Metric(m) => r.counters.get(m).copied().unwrap_or(0.0) > 0.0,
                Proof::Line(_) => r.saw_line,
            };
            let within = |v: f64, base: f64| v <= 2.0 * base + 2.0;
            let calm_ok = r.samples > 0 && within(r.p50_ms, alone.p50_ms) && within(r.p99_ms, alone.p99_ms);
            let counters = r
                .counters
                .iter()
                .map(|(k, v)| format!("{}={v}", k.trim_start_matches("plugin_").trim_end_matches("_total")))
                .collect::<Vec<_>>()
                .join(", ");
            println!(
                "| {} | {} | {} | {} | {} | {:.1} / {:.1} ms ({} samples) | {:.1} / {:.1} ms | {} |",
                s.name,
                s.limit,
                took,
                if counters.is_empty() { "-".into() } else { counters },
                r.first_line.as_deref().map(|l| format!("`{}`", l.replace('|', "\\|"))).unwrap_or_else(|| "-".into()),
                r.p50_ms,
                r.p99_ms,
                r.samples,
                alone.p50_ms,
                alone.p99_ms,
                calm_ok
            );
            if !took {
                unmet.push(format!("{}: its limit did not show", s.name));
            }
            if !calm_ok {
                unmet.push(format!("{}: the ledger's latency beside it", s.name));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert!(unmet.is_empty(), "floors not met: {unmet:?}");
    });
}
