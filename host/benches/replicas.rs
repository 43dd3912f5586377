//! Replicas benchmark: the floors of leader election and sharding, measured from outside on
//! `host` processes (this package's release binary) against one `host emulator` process, each
//! replica behind its own loopback proxy, running the `ledger` test guest (a log line at each
//! reconcile's start and end, with the wall-clock time).
//!
//! Sections (`BENCH_ONLY=failover,handover,steady,shards`; all by default):
//! - `failover`: kill -9 of the leader (`--leader-elect-lease-duration 2s`), then one object
//!   changed: time until the new leader starts reconciling that change.
//! - `handover`: SIGTERM of the leader (client-go's default timings), then one object changed:
//!   time until the new leader starts reconciling it.
//! - `steady`: Lease writes per retry period per replica, idle, over `BENCH_STEADY_SECS`
//!   (default 20), for `--leader-elect` and for `--shards` (3 replicas each).
//! - `shards`: 3 replicas with `--shards` and a settled membership; `BENCH_OBJECTS` (default
//!   30,000) ConfigMaps created: each replica's share of the reconciles, and keys reconciled by
//!   more than one replica or at overlapping times.
//!
//! `BENCH_RUNS` (default 5) runs of failover and handover; the table prints medians and worst.

#[path = "../../tests/bench_common/mod.rs"]
mod bench_common;
#[path = "../../tests/support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::time::{Duration, Instant};

use serde_json::json;

use support::process::WAIT;
use support::replicas::*;

const NS: &str = "bench";

fn wanted(section: &str) -> bool {
    match std::env::var("BENCH_ONLY") {
        Ok(v) => v.split(',').any(|s| s.trim() == section),
        Err(_) => true,
    }
}

fn args(plugins: &std::path::Path, timings: [&str; 3], extra: &[&str]) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![
        "--plugins".into(),
        plugins.into(),
        "--leader-elect-lease-duration".into(),
        timings[0].into(),
        "--leader-elect-renew-deadline".into(),
        timings[1].into(),
        "--leader-elect-retry-period".into(),
        timings[2].into(),
    ];
    a.extend(extra.iter().map(OsString::from));
    a
}

/// Which of `alive` leads, by `/statusz`.
async fn leader(rs: &mut Replicas, alive: &[usize]) -> usize {
    let deadline = Instant::now() + WAIT;
    loop {
        for &id in alive {
            let (code, body) = rs.replicas[id].get("/statusz").await;
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            if code == 200 && v["replica"]["role"] == "leader" {
                return id;
            }
        }
        assert!(Instant::now() < deadline, "no leader:\n{}", rs.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The wall-clock start of the first reconcile of (key, rv) by a replica other than `not`.
async fn first_start_by_other(rs: &mut Replicas, key: &str, rv: &str, not: usize) -> u64 {
    let found = rs
        .wait_for(WAIT, |recs| {
            recs.iter()
                .any(|r| r.replica != not && r.key == key && r.rv == rv)
        })
        .await
        .unwrap_or_else(|_| panic!("{key}@{rv} never reconciled:\n{}", rs.ledger_log()));
    found
        .iter()
        .filter(|r| r.replica != not && r.key == key && r.rv == rv)
        .map(|r| r.start_ns)
        .min()
        .expect("found")
}

/// One failover (`kill`) or handover (SIGTERM): seconds from the signal to the new leader's
/// first reconcile of a change made right after it.
async fn takeover(kill: bool, timings: [&str; 3]) -> f64 {
    let mut rs = Replicas::start().await;
    rs.emulator.create_namespace(NS).await;
    let rv = rs.emulator.create_cm(NS, "probe", json!({"v": "0"})).await;
    let plugins = ledger_plugins_file(&rs.dir, json!({"namespace": NS}), 1);
    for _ in 0..2 {
        rs.spawn(args(&plugins, timings, &["--leader-elect"])).await;
    }
    let first = leader(&mut rs, &[0, 1]).await;
    rs.expect_reconciled(&pairs([("bench/probe", rv.as_str())]), WAIT)
        .await;
    let other = 1 - first;
    assert!(rs.replicas[other].wait_ready(WAIT).await);
    let t0 = now_ns();
    if kill {
        rs.replicas[first].process.kill().await;
    } else {
        rs.replicas[first].process.sigterm();
    }
    let rv = rs.emulator.update_cm(NS, "probe", json!({"v": "1"})).await;
    let t1 = first_start_by_other(&mut rs, "bench/probe", &rv, first).await;
    if !kill {
        let status = rs.replicas[first].process.exit(WAIT).await;
        assert!(status.success());
    }
    (t1.saturating_sub(t0)) as f64 / 1e9
}

/// Lease writes (creates and updates: nothing else writes while idle) per retry period per
/// replica, over `secs` seconds with 3 replicas run with `extra`; and whether that is at most
/// one per retry period per replica, allowing each replica one write for the window's edges (a
/// renewal just inside it, whatever its length).
async fn steady(extra: &[&str], secs: u64) -> (f64, f64, bool) {
    let mut rs = Replicas::start().await;
    rs.emulator.create_namespace(NS).await;
    let plugins = ledger_plugins_file(&rs.dir, json!({"namespace": NS}), 1);
    for _ in 0..3 {
        rs.spawn(args(&plugins, ["15s", "10s", "2s"], extra)).await;
    }
    for id in 0..3 {
        assert!(rs.replicas[id].wait_ready(WAIT).await, "{}", rs.log());
    }
    // Past start-up (creates, the first acquisitions): a few retry periods.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let writes = |s: &serde_json::Value| {
        s["requests"]["create"].as_u64().unwrap_or(0)
            + s["requests"]["update"].as_u64().unwrap_or(0)
    };
    let before = writes(&stats(&rs).await);
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let n = writes(&stats(&rs).await) - before;
    let periods = t.elapsed().as_secs_f64() / 2.0;
    let met = n as f64 <= 3.0 * (periods.floor() + 1.0);
    (n as f64 / periods / 3.0, n as f64 / periods, met)
}

async fn stats(rs: &Replicas) -> serde_json::Value {
    let body = rs
        .emulator
        .client
        .request_raw(http::Method::GET, "/_emulator/stats", None)
        .await
        .expect("stats");
    serde_json::from_slice(&body).expect("stats json")
}

struct ShardFigures {
    objects: usize,
    per_replica: Vec<usize>,
    by_more_than_one: usize,
    overlaps: usize,
    seconds: f64,
}

async fn shards(objects: usize) -> ShardFigures {
    let mut rs = Replicas::start().await;
    rs.emulator.create_namespace(NS).await;
    let plugins = ledger_plugins_file(&rs.dir, json!({"namespace": NS}), 2);
    for _ in 0..3 {
        rs.spawn(args(&plugins, ["2s", "1500ms", "500ms"], &["--shards"]))
            .await;
    }
    // A settled membership: every replica sees three members, and the hand-over window of
    // the last change (one lease duration) has passed.
    let deadline = Instant::now() + WAIT;
    'settle: loop {
        let mut all = true;
        for id in 0..3 {
            let (_, body) = rs.replicas[id].get("/statusz").await;
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            all &= v["replica"]["shardMembers"].as_array().map(Vec::len) == Some(3);
        }
        if all {
            break 'settle;
        }
        assert!(Instant::now() < deadline, "no settled membership");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let t = Instant::now();
    let client = rs.emulator.client.clone();
    let res = kwh_client::ApiResource::new("v1", "ConfigMap", "configmaps", true);
    let mut tasks = Vec::new();
    for w in 0..8 {
        let (client, res) = (client.clone(), res.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = w;
            while i < objects {
                let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("cm-{i:06}"), "namespace": NS},
                    "data": {"v": "0"}});
                client
                    .create(&res, Some(NS), body.to_string().into(), &Default::default())
                    .await
                    .expect("create");
                i += 8;
            }
        }));
    }
    for t in tasks {
        t.await.expect("seed task");
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    let recs = loop {
        let recs = rs.records();
        let keys: BTreeSet<&str> = recs
            .iter()
            .filter(|r| r.finished)
            .map(|r| r.key.as_str())
            .collect();
        if keys.len() >= objects {
            break recs;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {objects} reconciled",
            keys.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let seconds = t.elapsed().as_secs_f64();
    let mut per_replica = vec![0; 3];
    let mut owners: BTreeMap<&str, BTreeSet<usize>> = BTreeMap::new();
    for r in recs.iter().filter(|r| r.finished) {
        per_replica[r.replica] += 1;
        owners.entry(r.key.as_str()).or_default().insert(r.replica);
    }
    ShardFigures {
        objects,
        per_replica,
        by_more_than_one: owners.values().filter(|o| o.len() > 1).count(),
        overlaps: overlaps(&recs).len(),
        seconds,
    }
}

fn row(cells: &[String]) {
    println!("| {} |", cells.join(" | "));
}

/// Prints a row whose last cell says whether its floor was met, and remembers a miss: the
/// run fails at the end if any floor was not met (a printed `false` is a failed run).
fn floor_row(unmet: &mut Vec<String>, cells: &[String], met: bool) {
    let mut all = cells.to_vec();
    all.push(met.to_string());
    row(&all);
    if !met {
        unmet.push(cells[0].clone());
    }
}

fn worst(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let runs = bench_common::env_or("BENCH_RUNS", 5);
        let objects = bench_common::env_or("BENCH_OBJECTS", 30_000);
        let steady_secs = bench_common::env_or("BENCH_STEADY_SECS", 20) as u64;
        println!("replicas benchmark: runs {runs}, load {}", bench_common::load());
        println!();
        println!("| measure | runs | median | worst | floor | met |");
        println!("|---|---|---|---|---|---|");
        let mut unmet = Vec::new();
        if wanted("failover") {
            let mut v = Vec::new();
            for _ in 0..runs {
                v.push(takeover(true, ["2s", "1500ms", "1s"]).await);
            }
            let w = worst(&v);
            floor_row(
                &mut unmet,
                &[
                    "failover after kill -9 of the leader (lease 2s, renew 1.5s, retry 1s): signal → new leader's reconcile".into(),
                    runs.to_string(),
                    format!("{:.2} s", bench_common::median(v)),
                    format!("{w:.2} s"),
                    "≤ 4 s (lease + 2 s)".into(),
                ],
                w <= 4.0,
            );
        }
        if wanted("handover") {
            let mut v = Vec::new();
            for _ in 0..runs {
                v.push(takeover(false, ["15s", "10s", "2s"]).await);
            }
            let w = worst(&v);
            floor_row(
                &mut unmet,
                &[
                    "handover on SIGTERM (15s/10s/2s): signal → new leader's reconcile".into(),
                    runs.to_string(),
                    format!("{:.2} s", bench_common::median(v)),
                    format!("{w:.2} s"),
                    "≤ 2 s".into(),
                ],
                w <= 2.0,
            );
        }
        if wanted("steady") {
            for (what, extra) in [
                ("--leader-elect", &["--leader-elect"][..]),
                ("--shards", &["--shards"][..]),
                ("--leader-elect --shards", &["--leader-elect", "--shards"][..]),
            ] {
                let (per_replica, all, met) = steady(extra, steady_secs).await;
                floor_row(
                    &mut unmet,
                    &[
                        format!("idle Lease writes per retry period, 3 replicas, {what} ({steady_secs} s)"),
                        "1".into(),
                        format!("{per_replica:.2} per replica ({all:.2} in all)"),
                        "-".into(),
                        "≤ 1 per replica".into(),
                    ],
                    met,
                );
            }
        }
        if wanted("shards") {
            let f = shards(objects).await;
            // Correctness, whatever the build: no key by two replicas.
            assert_eq!((f.by_more_than_one, f.overlaps), (0, 0), "keys reconciled by two replicas");
            let third = f.objects as f64 / 3.0;
            let spread = f
                .per_replica
                .iter()
                .map(|&c| (c as f64 - third).abs() / third)
                .fold(0.0, f64::max);
            // The spread of rendezvous hashing is judged only over enough keys: over 300 (CI's
            // short run) one replica's share deviates by more than 20 % about one run in 25.
            let judged = f.objects >= SPREAD_JUDGED_FROM;
            floor_row(
                &mut unmet,
                &[
                    format!(
                        "3 replicas --shards, {} ConfigMaps created: reconciles per replica (in {:.1} s)",
                        bench_common::thousands(f.objects as f64),
                        f.seconds
                    ),
                    "1".into(),
                    format!("{:?}", f.per_replica),
                    format!("±{:.1} % of a third", spread * 100.0),
                    if judged {
                        "±20 %, no key by two".into()
                    } else {
                        format!("no key by two (the ±20 % from {SPREAD_JUDGED_FROM} objects)")
                    },
                ],
                (!judged || spread <= 0.2) && f.by_more_than_one == 0 && f.overlaps == 0,
            );
            floor_row(
                &mut unmet,
                &[
                    "keys reconciled by more than one replica / at overlapping times".into(),
                    "1".into(),
                    format!("{} / {}", f.by_more_than_one, f.overlaps),
                    "-".into(),
                    "0".into(),
                ],
                f.by_more_than_one == 0 && f.overlaps == 0,
            );
        }
        assert!(unmet.is_empty(), "floors not met: {unmet:?}");
    });
}

/// Objects from which the shards' spread is held to its floor.
const SPREAD_JUDGED_FROM: usize = 3_000;
