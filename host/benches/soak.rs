//! The chaos soak (issue "Safe under faults", 3), opt-in: `cargo bench -p host --bench soak`
//! (this package's release binary). Two `host` replicas with `--leader-elect` against one
//! `host emulator`, two SDK plugins (the `soak` test guest) trapping on about 1 % of calls,
//! 1,000,000 updates over 10,000 ConfigMaps while the emulator injects faults of every kind
//! and the leader is killed every 100,000 updates. What runs and how it is checked:
//! `tests/support/soak.rs`; a one-minute variant runs in the test run (`tests/soak.rs`).
//!
//! Prints the tables (updates, faults confirmed per kind, kills, convergence time, each host
//! process's memory by role, reconciles and traps, the floors) and fails when a floor is not
//! met or a fault kind was confirmed fewer times than wanted: a printed `false` is a failed run.
//!
//! Environment (defaults in brackets): `SOAK_EVENTS` [1000000], `SOAK_OBJECTS` [10000],
//! `SOAK_WRITERS` [8], `SOAK_RATE` (updates per second at most) [unpaced], `SOAK_KILL_EVERY`
//! [100000], `SOAK_FAULTS` (confirmed wanted per kind) [1000], `SOAK_RELIST_FAULTS` [1000],
//! `SOAK_RELIST_EVERY_MS` [20000], `SOAK_PACE_MS` [10], `SOAK_WORKERS` [2],
//! `SOAK_TRAP_PER_MILLE` [10], `SOAK_CONVERGE_SECS` [240], `SOAK_SHARDS` (Secret informers
//! per host beside the ConfigMaps') [200], `SOAK_SHARD_OBJECTS` [101], `SOAK_PAGE_SIZE` (the
//! hosts' `--list-page-size`, 0 for none) [100].

#[path = "../../tests/bench_common/mod.rs"]
mod bench_common;
#[path = "../../tests/support/soak.rs"]
mod soak;
#[path = "../../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use bench_common::env_or;

fn main() {
    let base = soak::SoakConfig::full();
    let ms = |name: &str, default: Duration| {
        Duration::from_millis(env_or(name, default.as_millis() as usize) as u64)
    };
    let cfg = soak::SoakConfig {
        objects: env_or("SOAK_OBJECTS", base.objects),
        events: env_or("SOAK_EVENTS", base.events),
        writers: env_or("SOAK_WRITERS", base.writers).max(1),
        rate: std::env::var("SOAK_RATE").ok().and_then(|r| r.parse().ok()),
        kill_every: env_or("SOAK_KILL_EVERY", base.kill_every),
        faults: env_or("SOAK_FAULTS", base.faults as usize) as u64,
        relist_faults: env_or("SOAK_RELIST_FAULTS", base.relist_faults as usize) as u64,
        relist_every: ms("SOAK_RELIST_EVERY_MS", base.relist_every),
        pace: ms("SOAK_PACE_MS", base.pace),
        workers: env_or("SOAK_WORKERS", base.workers as usize) as u32,
        trap_per_mille: env_or("SOAK_TRAP_PER_MILLE", base.trap_per_mille as usize) as u64,
        converge_within: Duration::from_secs(env_or(
            "SOAK_CONVERGE_SECS",
            base.converge_within.as_secs() as usize,
        ) as u64),
        shards: env_or("SOAK_SHARDS", base.shards),
        shard_objects: env_or("SOAK_SHARD_OBJECTS", base.shard_objects).max(1),
        page_size: match env_or("SOAK_PAGE_SIZE", base.page_size.unwrap_or(0) as usize) {
            0 => None,
            n => Some(u32::try_from(n).unwrap_or(u32::MAX)),
        },
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!("chaos soak: {cfg:?}; load {}", bench_common::load());
    let started = std::time::Instant::now();
    let report = rt.block_on(soak::run(cfg));
    println!(
        "\n{}\nwhole run {:.1} s; load {}",
        report.table(),
        started.elapsed().as_secs_f64(),
        bench_common::load()
    );
    let unmet = report.unmet();
    assert!(unmet.is_empty(), "floors not met: {unmet:#?}");
    let short = report.faults_short();
    assert!(
        short.is_empty(),
        "fault kinds short of the count wanted: {short:#?}"
    );
}
