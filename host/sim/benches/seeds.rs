//! How many seeded scenarios the simulation judges a minute, as CI and the long runs use it
//! (every oracle applied; each scenario ≥ 60 simulated seconds). Run in release:
//!
//! ```text
//! cargo bench -p kwh-sim --bench seeds            # 100 seeds from 1,000,000
//! SIM_BENCH_SEEDS=1000000..1000300 cargo bench -p kwh-sim --bench seeds
//! ```
//!
//! Asserts the floor (100 scenarios a minute on 2 cores) and that every seed kept every
//! guarantee. The seeds start far from the test's range, so the figure is not of seeds
//! already tuned against.

#[allow(dead_code)]
#[path = "../../../tests/support/guests.rs"]
mod guests;

use std::time::{Duration, Instant};

/// Scenarios a minute the simulation must judge at least.
const FLOOR_PER_MINUTE: f64 = 100.0;

fn main() {
    let text = std::env::var("SIM_BENCH_SEEDS").unwrap_or_else(|_| "1000000..1000100".to_string());
    let (a, b) = text
        .split_once("..")
        .expect("SIM_BENCH_SEEDS is a range such as 1000000..1000100");
    let seeds: std::ops::Range<u64> = a.parse().expect("a seed")..b.parse().expect("a seed");
    let setup = kwh_sim::Setup::new(guests::guest("reviser")).expect("setup");
    // The first run compiles the component (cached afterwards): not part of the figure.
    let _ = kwh_sim::run(&setup, seeds.start);
    let started = Instant::now();
    let mut simulated = Duration::ZERO;
    let mut failed = Vec::new();
    let n = seeds.end - seeds.start;
    for (i, seed) in seeds.enumerate() {
        match kwh_sim::run(&setup, seed) {
            Ok(s) => simulated += s.simulated,
            Err(e) => {
                eprintln!("{e}");
                failed.push(e.to_string());
            }
        }
        // A long run says how far it got.
        if (i + 1) % 500 == 0 {
            eprintln!(
                "{} seeds in {:.0} s, {} failed",
                i + 1,
                started.elapsed().as_secs_f64(),
                failed.len()
            );
        }
    }
    let took = started.elapsed();
    let per_minute = n as f64 / took.as_secs_f64() * 60.0;
    println!(
        "simulation: {n} seeds in {:.1} s: {per_minute:.0} seeds/min, {:.0} simulated s each on average, {} failed",
        took.as_secs_f64(),
        simulated.as_secs_f64() / n.max(1) as f64,
        failed.len()
    );
    assert!(failed.is_empty(), "seeds failed:\n{}", failed.join("\n"));
    assert!(
        per_minute >= FLOOR_PER_MINUTE,
        "{per_minute:.0} seeds a minute, under the floor of {FLOOR_PER_MINUTE}"
    );
}
