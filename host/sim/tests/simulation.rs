//! The simulation over a short range of seeds (`SIM_SEEDS`, default 0..128): each seed a
//! scenario of at least a simulated minute, upgrades of a running plugin among a stream of
//! updates, judged by every oracle. A failure names its seed; `SIM_SEEDS=<seed>..<seed+1>`
//! replays it (`SIM_REPEAT=n` runs each seed n times: what is left of the machine's time can
//! reorder a run, so a failure may need a few).

#[allow(dead_code)]
#[path = "../../../tests/support/guests.rs"]
mod guests;

use std::ops::Range;

fn seeds() -> Range<u64> {
    let text = std::env::var("SIM_SEEDS").unwrap_or_else(|_| "0..128".into());
    let (a, b) = text
        .split_once("..")
        .expect("SIM_SEEDS is a range such as 0..16");
    a.parse().expect("a seed")..b.parse().expect("a seed")
}

fn repeat() -> usize {
    std::env::var("SIM_REPEAT")
        .ok()
        .map(|n| n.parse().expect("SIM_REPEAT is a count"))
        .unwrap_or(1)
}

#[test]
fn every_seed_keeps_every_guarantee() {
    let setup = kwh_sim::Setup::new(guests::guest("reviser")).expect("setup");
    let mut failed = Vec::new();
    let runs = repeat();
    for seed in seeds().flat_map(|s| std::iter::repeat_n(s, runs)) {
        match kwh_sim::run(&setup, seed) {
            Ok(s) => eprintln!(
                "seed {seed}: ok ({:?}, {:?} simulated, {} updates, {} upgrades, {} faults, {} lines)",
                s.topology, s.simulated, s.updates, s.upgrades, s.faults, s.lines
            ),
            Err(e) => {
                eprintln!("{e}");
                failed.push(e.to_string());
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} seeds failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
