//! Recorded traces (issue "Record, replay, explore"): a trace of `BENCH_EVENTS` (default
//! 10,000) watch events, written as `host record` writes one (ConfigMaps added, updated and
//! deleted, the time between events, a `runQueue` after each), parsed by the harness;
//! `BENCH_RUNS` (default 5) times. Floor: it loads in under a second (the median). Then it is
//! replayed once with the `noop` guest, the time printed.
//!
//! `cargo bench -p host --bench trace` prints a Markdown table; a missed floor fails the run.

#[path = "../../tests/bench_common/mod.rs"]
mod bench_common;
#[path = "../../tests/support/mod.rs"]
mod support;

use std::time::Instant;

use bench_common::{env_or, floor_row, median};
use serde_json::json;

/// A trace as `host record` writes it: `events` events over 100 ConfigMaps.
fn trace(events: usize) -> String {
    let cm = |i: usize, v: usize| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{}", i % 100), "namespace": "default",
                "labels": {"app": "bench"}},
            "data": {"value": format!("{v}"), "payload": "x".repeat(200)}})
    };
    let mut steps = Vec::with_capacity(events * 3);
    let mut live = [false; 100];
    for e in 0..events {
        let i = e % 100;
        let step = match (live[i], e % 7) {
            (false, _) => json!({"add": cm(i, e)}),
            (true, 6) => json!({"delete": {"apiVersion": "v1", "kind": "ConfigMap",
                "namespace": "default", "name": format!("cm-{i}")}}),
            (true, _) => json!({"update": cm(i, e)}),
        };
        live[i] = !(live[i] && e % 7 == 6);
        steps.push(json!({"advance": "3ms"}));
        steps.push(step);
        steps.push(json!({"runQueue": true}));
    }
    let scenario = json!({"name": "recorded", "start": "2026-11-29T00:00:00Z", "given": [],
        "steps": steps});
    yaml_serde::to_string(&scenario).expect("YAML")
}

fn main() {
    let events = env_or("BENCH_EVENTS", 10_000);
    let runs = env_or("BENCH_RUNS", 5);
    println!("# Recorded traces\n");
    println!("load average at start: {}\n", bench_common::load());
    let text = trace(events);
    let path = support::temp_dir("bench-trace").join("trace.yaml");
    std::fs::write(&path, &text).expect("write");
    let mut loads = Vec::new();
    let mut scenario = None;
    for _ in 0..runs {
        let t = Instant::now();
        let s = kwh_testing::scenario::parse(&path, &text).expect("parses");
        loads.push(t.elapsed().as_secs_f64());
        scenario = Some(s);
    }
    let load = median(loads);
    println!("| measure | value | floor | met |");
    println!("|---|---|---|---|");
    println!("| trace | {events} events, {} KB of YAML | | |", text.len() / 1024);
    let ok = floor_row(
        "load (parse), median",
        format!("{:.1} ms", load * 1e3),
        "< 1 s",
        load < 1.0,
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    if let Some(s) = scenario {
        let plugin = support::guests::guest("noop");
        let engine = support::engine();
        let t = Instant::now();
        let report = rt.block_on(kwh_testing::scenario::run(&s, &plugin, &engine));
        println!(
            "| replay with the noop guest ({} steps) | {:.2} s ({}) | | |",
            report.steps,
            t.elapsed().as_secs_f64(),
            if report.passed() { "passed" } else { "failed" }
        );
    }
    println!("\nload average at end: {}", bench_common::load());
    println!("\nmet: {ok}");
    if !ok {
        std::process::exit(1);
    }
}
