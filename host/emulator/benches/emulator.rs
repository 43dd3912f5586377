//! Emulator benchmark (issue 2): LIST requests/s over 100,000 objects, watch events/s fanned
//! out to 1, 10 and 100 watchers, memory per stored object. Loopback only, bounded in time.
//!
//! `cargo bench -p host --bench emulator` prints Markdown tables. Watch clients are bare
//! hyper HTTP/1.1 connections that count newline-terminated events and body bytes (no
//! decoding), so the figures are the emulator's serving rate; one extra row decodes with the
//! host's own client. `BENCH_OBJECTS` (default 100,000) and `BENCH_RUNS` (default 3) size it
//! (`.ci/run` runs it small, so its assertions execute on every change).

#[path = "../../../tests/bench_common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use futures_util::StreamExt;
use kwh_client::params::WatchParams;
use kwh_client::{ApiResource, Client, Config};
use kwh_emulator::{Emulator, EmulatorHandle};

#[global_allocator]
static ALLOC: Counting = Counting;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

async fn run() {
    let (n_objects, runs) = (env_or("BENCH_OBJECTS", 100_000), env_or("BENCH_RUNS", 3));
    println!("# Emulator benchmark\n");
    println!("load average at start: {}\n", load());
    let h = Emulator::builder().start().await.expect("emulator");
    h.create(serde_json::json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"bench"}}))
        .expect("namespace");
    // Size the payload so each stored ConfigMap is about 1 KB (server fields included).
    let probe = h.create(configmap("bench", 999_999, 0)).expect("probe");
    let base = serde_json::to_vec(&probe).expect("json").len();
    h.delete("v1", "ConfigMap", Some("bench"), "cm-999999")
        .expect("delete probe");
    let pad = 1024usize.saturating_sub(base);

    store_section(&h, n_objects, pad);
    // The LISTs' connection stays open, idle, for the rest of the run (the watches beside it).
    let mut raw = Raw::connect(h.addr()).await;
    list_section(&mut raw, n_objects, runs).await;
    let from = prepare_watch(&h, n_objects, pad);
    let per_event = raw_watch_rows(&h, from, n_objects, runs).await;
    decoded_watch_row(&h, from, n_objects, runs, per_event).await;
    println!("\nload average at end: {}", load());
    h.shutdown().await;
}

/// Seeds the store through its create path and prints what it keeps per object: the memory
/// figures are only meaningful for a store filled this way.
fn store_section(h: &EmulatorHandle, n_objects: usize, pad: usize) {
    let heap0 = live();
    let rss0 = proc_status("VmRSS");
    let t = Instant::now();
    for i in 0..n_objects {
        h.create(configmap("bench", i, pad)).expect("seed");
    }
    let seed_s = secs(t);
    let heap = live() - heap0;
    let rss = proc_status("VmRSS").saturating_sub(rss0);
    let json: usize = h
        .list("v1", "ConfigMap", Some("bench"))
        .iter()
        .map(|v| serde_json::to_vec(v).map_or(0, |b| b.len()))
        .sum();
    println!("## Store\n");
    println!("| measure | value |\n|---|---|");
    println!(
        "| objects | {} ConfigMaps, {} B stored JSON each on average |",
        thousands(n_objects as f64),
        json / n_objects
    );
    println!(
        "| create rate (in-process, `EmulatorHandle::create`) | {} objects/s |",
        thousands(n_objects as f64 / seed_s)
    );
    println!("| heap per stored object (allocator-counted, incl. its share of the 10,000-event history) | {} B ({:.2} × JSON) |", heap / n_objects, heap as f64 / json as f64);
    println!(
        "| RSS per stored object (VmRSS delta) | {} B |",
        rss / n_objects
    );
}

/// LIST over one raw connection, paged and unpaged: the two ways clients read a cache's worth
/// of objects.
async fn list_section(raw: &mut Raw, n_objects: usize, runs: usize) {
    let mut paged = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let reqs = list_pages(raw).await;
        assert_eq!(reqs as usize, n_objects.div_ceil(500), "page count");
        paged.push(reqs as f64 / secs(t));
    }
    let paged = median(paged);
    let mut rv0 = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let body = raw.get_all("/api/v1/configmaps?resourceVersion=0").await;
        // Every object in it: ~1 KB each, less the kind and apiVersion list items go without.
        assert!(body.len() > n_objects * 950, "{} bytes", body.len());
        rv0.push(1.0 / secs(t));
    }
    let rv0 = median(rv0);
    println!(
        "\n## LIST of {} ConfigMaps (one HTTP/1.1 connection, body read, not decoded)\n",
        thousands(n_objects as f64)
    );
    println!("| request | requests/s | objects/s |\n|---|---|---|");
    println!(
        "| paged, limit=500 ({} pages) | {} | {} |",
        n_objects.div_ceil(500),
        thousands(paged),
        thousands(paged * 500.0)
    );
    println!(
        "| resourceVersion=0, unpaged | {:.2} | {} |",
        rv0,
        thousands(rv0 * n_objects as f64)
    );
}

/// Reads every page of the ConfigMaps, 500 a page, following the continue tokens; the number
/// of requests it took (the rate is counted in requests).
async fn list_pages(raw: &mut Raw) -> u32 {
    let mut reqs = 0u32;
    let mut cont = String::new();
    loop {
        let mut path = "/api/v1/configmaps?limit=500".to_owned();
        if !cont.is_empty() {
            path.push_str("&continue=");
            path.push_str(&cont);
        }
        let body = raw.get_all(&path).await;
        reqs += 1;
        match continue_token(&body) {
            Some(c) => cont = c,
            None => break,
        }
    }
    reqs
}

/// Updates every object once, kept in the history, and prints the WATCH table's heading: the
/// watchers replay this stream from the returned resource version.
fn prepare_watch(h: &EmulatorHandle, n_objects: usize, pad: usize) -> u64 {
    h.set_history_window(n_objects + 10);
    let from = h.current_resource_version();
    let t = Instant::now();
    for i in 0..n_objects {
        h.update(bump(configmap("bench", i, pad), 1))
            .expect("update");
    }
    let upd_s = secs(t);
    println!(
        "\n## WATCH fan-out (history replay of {} MODIFIED events of ~1 KB)\n",
        thousands(n_objects as f64)
    );
    println!(
        "in-process update rate while preparing: {} updates/s\n",
        thousands(n_objects as f64 / upd_s)
    );
    println!("| watchers | events per watcher | total events/s | per watcher events/s | MB/s (bytes read) |\n|---|---|---|---|---|");
    from
}

/// The raw watchers' rows (1, 10 and 100 of them); returns the bytes per event they read, for
/// the decoded row's MB/s.
async fn raw_watch_rows(h: &EmulatorHandle, from: u64, n_objects: usize, runs: usize) -> f64 {
    let addr = h.addr();
    let per_event = std::sync::Arc::new(parking_lot::Mutex::new(0.0f64));
    let objects = n_objects as u64;
    for (watchers, per) in [
        (1usize, objects),
        (10, objects.min(50_000)),
        (100, objects.min(10_000)),
    ] {
        let bytes_per_s = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let rate = median_of(runs, || {
            let (bytes_per_s, per_event) = (bytes_per_s.clone(), per_event.clone());
            async move {
                let (total, bytes, s) = fan_out(addr, from, watchers, per).await;
                assert!(
                    total >= per * watchers as u64,
                    "every watcher got its events"
                );
                assert!(bytes >= total * 1000, "~1 KB events: {bytes} B for {total}");
                bytes_per_s.lock().push(bytes as f64 / s);
                *per_event.lock() = bytes as f64 / total as f64;
                total as f64 / s
            }
        })
        .await;
        let mb_s = median(bytes_per_s.lock().clone()) / 1e6;
        println!(
            "| {watchers} | {} | {} | {} | {mb_s:.0} |",
            thousands(per as f64),
            thousands(rate),
            thousands(rate / watchers as f64),
        );
    }
    let per_event = *per_event.lock();
    per_event
}

/// One run of `watchers` raw watches from `from`, each until `per` events; (events, bytes,
/// seconds), timed from when every connection is open so that connecting is not counted.
async fn fan_out(addr: SocketAddr, from: u64, watchers: usize, per: u64) -> (u64, u64, f64) {
    let path = format!("/api/v1/configmaps?watch=true&resourceVersion={from}");
    let mut conns = Vec::with_capacity(watchers);
    for _ in 0..watchers {
        conns.push(Raw::connect(addr).await);
    }
    let t = Instant::now();
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|mut c| {
            let path = path.clone();
            tokio::spawn(async move { c.count_events(&path, per).await })
        })
        .collect();
    let (mut total, mut bytes) = (0, 0);
    for task in tasks {
        let (n, b) = task.await.expect("watch task");
        total += n;
        bytes += b;
    }
    (total, bytes, secs(t))
}

/// The same stream decoded by the host's client (metadata parsed, managedFields stripped): what
/// a controller on the host gets of the serving rate.
async fn decoded_watch_row(
    h: &EmulatorHandle,
    from: u64,
    n_objects: usize,
    runs: usize,
    per_event: f64,
) {
    let client = Client::new(Config::new(h.base_url().parse().expect("url"))).expect("client");
    let cms = ApiResource::new("v1", "ConfigMap", "configmaps", true);
    let decoded = median_of(runs, || {
        let (client, cms) = (&client, &cms);
        async move {
            let p = WatchParams {
                resource_version: Some(from.to_string()),
                timeout_seconds: Some(60),
                ..Default::default()
            };
            let t = Instant::now();
            let mut s = client.watch(cms, None, &p).await.expect("watch");
            let mut n = 0;
            while n < n_objects {
                match tokio::time::timeout(Duration::from_secs(30), s.next()).await {
                    Ok(Some(Ok(_))) => n += 1,
                    other => panic!(
                        "watch ended early after {n}: {:?}",
                        other.map(|o| o.map(|r| r.err()))
                    ),
                }
            }
            n as f64 / secs(t)
        }
    })
    .await;
    println!(
        "| 1, host client (decoded) | {} | {} | {} | {:.0} |",
        thousands(n_objects as f64),
        thousands(decoded),
        thousands(decoded),
        decoded * per_event / 1e6
    );
}

/// The `metadata.continue` of a list body, if non-empty.
fn continue_token(body: &[u8]) -> Option<String> {
    let pat = b"\"continue\":\"";
    let head = &body[..body.len().min(8192)];
    let at = head.windows(pat.len()).position(|w| w == pat)? + pat.len();
    let end = head[at..].iter().position(|&b| b == b'"')? + at;
    let tok = std::str::from_utf8(&head[at..end]).ok()?;
    (!tok.is_empty()).then(|| tok.to_owned())
}
