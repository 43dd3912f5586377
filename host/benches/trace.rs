//! Recorded traces (issue "Record, replay, explore"): a trace of `BENCH_EVENTS` (default
//! 10,000) watch events, written as `host record` writes one (ConfigMaps added, updated and
//! deleted, the time between events, a `runQueue` after each), parsed by the harness;
//! `BENCH_RUNS` (default 5) times. Floor: it loads in under a second (the median). Then it is
//! replayed once with the `noop` guest, the time printed. Then `host test --explore`'s
//! engine on a 100-event trace of the config-reloader example for `BENCH_EXPLORE_SECS`
//! (default 10): floor, at least 1,000 perturbed runs per minute. Then each planted bug (the
//! `edge` and `planted` test guests' scenarios) explored with a 60 s budget and at most
//! `BENCH_PLANTED_RUNS` (default 1,000) runs: floor, each found, under the right class,
//! within 60 s.
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
    println!(
        "| trace | {events} events, {} KB of YAML | | |",
        text.len() / 1024
    );
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
    let ok = ok & rt.block_on(explore_section());
    let ok = ok & rt.block_on(planted_section());
    println!("\nload average at end: {}", bench_common::load());
    println!("\nmet: {ok}");
    if !ok {
        std::process::exit(1);
    }
}

/// A 100-event trace of the config-reloader: two opted-in Deployments over ConfigMaps that
/// change, explored for a while; its rate of perturbed runs.
async fn explore_section() -> bool {
    let secs = env_or("BENCH_EXPLORE_SECS", 10) as u64;
    let deploy = |n: usize| {
        json!({"add": {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": format!("web-{n}"), "namespace": "default",
                "annotations": {"config-reloader/enabled": "true"}},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "i",
                    "envFrom": [{"configMapRef": {"name": format!("cm-{n}")}}]}]}}}}})
    };
    let mut steps = Vec::new();
    for n in 0..2 {
        steps.push(json!({"add": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{n}"), "namespace": "default"}, "data": {"v": "0"}}}));
        steps.push(json!({"runQueue": true}));
        steps.push(deploy(n));
        steps.push(json!({"runQueue": true}));
    }
    for e in 4..100 {
        steps.push(json!({"advance": "2s"}));
        steps.push(json!({"update": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{}", e % 2), "namespace": "default"},
            "data": {"v": format!("{e}")}}}));
        steps.push(json!({"runQueue": true}));
    }
    let text = yaml_serde::to_string(&json!({"name": "reloader, 100 events", "steps": steps}))
        .expect("YAML");
    let path = support::temp_dir("bench-explore").join("reloader.yaml");
    std::fs::write(&path, &text).expect("write");
    let plugin = support::guests::example("config_reloader");
    let engine = support::engine();
    let opts = kwh_testing::scenario::explore::ExploreOptions {
        budget: std::time::Duration::from_secs(secs),
        seed: 1,
        max_runs: usize::MAX,
    };
    let report = kwh_testing::scenario::explore::explore(&path, &text, &plugin, &engine, &opts)
        .await
        .expect("explores");
    let per_minute = report.runs as f64 * 60.0 / report.elapsed.as_secs_f64();
    println!(
        "| explore, config-reloader, 100 events: violations | {} | – | – |",
        report.violations.len()
    );
    let value = format!(
        "{per_minute:.0} ({} runs in {:.1} s; {} single perturbations)",
        report.runs,
        report.elapsed.as_secs_f64(),
        report.singles
    );
    if cfg!(debug_assertions) {
        // CI's short run in a debug build: the host side is several times slower there.
        println!(
            "| explore: perturbed runs per minute | {value} | not judged: a debug build | – |"
        );
        return true;
    }
    floor_row(
        "explore: perturbed runs per minute",
        value,
        ">= 1,000",
        per_minute >= 1000.0,
    )
}

/// Each planted bug: the guest, its scenario (under `tests/guests/`), the class to be named.
const PLANTED: [(&str, &str, &str); 5] = [
    (
        "edge",
        "edge/scenarios/phases.yaml",
        "unobserved state: coalesced updates",
    ),
    (
        "planted",
        "planted/scenarios/baseline.yaml",
        "unobserved state: notifications reordered across objects",
    ),
    (
        "planted",
        "planted/scenarios/stale-delete.yaml",
        "stale state: a restart reading a lagging cache",
    ),
    (
        "planted",
        "planted/scenarios/crash-child.yaml",
        "crash: the process stopped between two writes",
    ),
    (
        "planted",
        "planted/scenarios/lost-update.yaml",
        "stale state: a restart reading a lagging cache",
    ),
];

/// How long exploring takes to find each planted bug, under its class.
async fn planted_section() -> bool {
    let max_runs = env_or("BENCH_PLANTED_RUNS", 1000);
    let engine = support::engine();
    let mut ok = true;
    for (guest, file, class) in PLANTED {
        let path = support::guests::repo_root().join("tests/guests").join(file);
        let text = std::fs::read_to_string(&path).expect("scenario");
        let opts = kwh_testing::scenario::explore::ExploreOptions {
            budget: std::time::Duration::from_secs(60),
            seed: 1,
            max_runs,
        };
        let plugin = support::guests::guest(guest);
        let report = kwh_testing::scenario::explore::explore(&path, &text, &plugin, &engine, &opts)
            .await
            .expect("explores");
        let found = report
            .violations
            .iter()
            .filter(|v| kwh_testing::scenario::explore::class_of(&v.perturbations) == class)
            .min_by_key(|v| v.run);
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("?");
        let (value, met) = match found {
            Some(v) => (
                format!(
                    "{:.2} s (run {} of {}; {} singles)",
                    v.found_after.as_secs_f64(),
                    v.run,
                    report.runs,
                    report.singles
                ),
                v.found_after.as_secs() < 60,
            ),
            None => (format!("not found in {} runs", report.runs), false),
        };
        ok &= floor_row(
            &format!("planted `{name}`: found as \"{class}\""),
            value,
            "< 60 s",
            met,
        );
    }
    ok
}
