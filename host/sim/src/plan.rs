//! What one seed makes happen: the objects, a stream of updates, and the plugin's revisions
//! coming and going among them, each at a simulated instant drawn from the seed.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// One change the driver makes, at an instant after the simulation's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Update ConfigMap `u-<n>`.
    Update(usize),
    /// The plugin's entry (one `WasmController`, through the runtime's one reconciler of plugin
    /// sources) asks for the revision labelled so, of the same plugin: an upgrade.
    Upgrade(String),
    /// The entry's next revision, labelled so, names another plugin ([`Plan::plugin_of`]): the
    /// new plugin starts, and the old one is removed once it runs.
    Rename(String),
    /// The entry asks for a revision that fails to start: the one running carries on.
    Refuse,
    /// The entry asks again for the revision that runs, as an operator rolls back a refused
    /// one: nothing is switched.
    Rollback,
    /// The entry is taken out: its plugin is removed.
    Remove,
    /// The entry is back, as the revision labelled so: the plugin of the last name, started
    /// afresh.
    Restore(String),
    /// Kill replica `n` ([`LEADER`]: the one leading then; as kill -9: its runtime dropped
    /// with every task in it) and start it again after the given time.
    Crash(usize, Duration),
    /// Cut replica `n` ([`LEADER`]: the one leading then) off the API server (both ways,
    /// messages held until the link is back) for the given time.
    Partition(usize, Duration),
    /// The API server answers the next `n` patches (the plugin's writes) this late, as under
    /// load: writes still in flight when their key moves to another replica.
    SlowWrites(u64, Duration),
}

/// How the replicas share the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// One replica, owning everything.
    Single,
    /// `n` replicas electing a leader; only the leader runs the plugin.
    Leader(usize),
    /// `n` replicas electing a leader and dividing the plugin's keys among them.
    Shards(usize),
}

impl Topology {
    /// How many replicas run.
    pub fn replicas(self) -> usize {
        match self {
            Topology::Single => 1,
            Topology::Leader(n) | Topology::Shards(n) => n,
        }
    }
}

/// One seed's scenario.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The seed it was drawn from.
    pub seed: u64,
    /// How many ConfigMaps (`u-0` …) exist from the start.
    pub objects: usize,
    /// Reconcile workers of every revision.
    pub workers: u32,
    /// The replicas and how they share the work.
    pub topology: Topology,
    /// How long a reconcile may take: the default 10 s, or in a third of the seeds (two thirds
    /// under shards) a minute (a deadline may be up to an hour), longer than a write the server
    /// holds while its key moves.
    pub reconcile_deadline: Duration,
    /// Whether the simulation steps its hosts in a seeded random order each tick (else in a
    /// fixed one): each finds schedules the other misses.
    pub shuffle: bool,
    /// Whether each reconcile writes (its mark, a Secret): always with several replicas, in
    /// half the single-replica seeds (a reconcile that only prints is over in an instant, so
    /// workers race through the queue as revisions change hands).
    pub writes: bool,
    /// How long an old revision's reconciles may run on after an upgrade: mostly 10 s, in a
    /// quarter of the seeds a few milliseconds, so that workers are cut off mid-reconcile.
    pub grace: Duration,
    /// Whether a second entry of the source names a module on a registry that never answers:
    /// its fetch never finishes, and must hold up nothing of the plugin's entry.
    pub silent_registry: bool,
    /// The first revision's label.
    pub first: String,
    /// The driver's changes, in time order.
    pub steps: Vec<(Duration, Step)>,
    /// How long after the last step the simulation runs on before it is judged.
    pub settle: Duration,
}

/// The replica a fault hits when the plan names no one: whichever holds the leader Lease at
/// the fault's instant.
pub const LEADER: usize = usize::MAX;

/// Updates are drawn over this much simulated time.
const ACTIVE: Duration = Duration::from_secs(45);

impl Plan {
    /// The scenario of `seed`.
    pub fn of(seed: u64) -> Plan {
        let mut rng = StdRng::seed_from_u64(seed);
        let objects = rng.gen_range(3..=20);
        let workers = rng.gen_range(1..=3);
        let topology = match rng.gen_range(0..3) {
            0 => Topology::Single,
            1 => Topology::Leader(rng.gen_range(2..=3)),
            _ => Topology::Shards(rng.gen_range(2..=3)),
        };
        let writes = topology != Topology::Single || rng.gen_bool(0.5);
        let shuffle = rng.gen_bool(0.5);
        // Under shards in two thirds: a write the server holds past a key's hand-over is cut
        // by the move, not first by the deadline, only when the deadline outlasts it.
        let long = if matches!(topology, Topology::Shards(_)) {
            2.0 / 3.0
        } else {
            1.0 / 3.0
        };
        let reconcile_deadline = if rng.gen_bool(long) {
            Duration::from_secs(60)
        } else {
            Duration::from_secs(10)
        };
        let grace = if rng.gen_bool(0.25) {
            Duration::from_millis(rng.gen_range(0..=40))
        } else {
            Duration::from_secs(10)
        };
        let mut steps = Vec::new();
        for _ in 0..rng.gen_range(50..=250) {
            let at = Duration::from_millis(rng.gen_range(2_000..ACTIVE.as_millis() as u64));
            steps.push((at, Step::Update(rng.gen_range(0..objects))));
        }
        // Whether the plugin changes hands by name too (renames, removals) in this seed: in
        // half of them, so that the other half still judges every update handled exactly once.
        let lifecycle = rng.gen_bool(0.5);
        for _ in 0..rng.gen_range(1..=4) {
            let at = Duration::from_millis(rng.gen_range(3_000..ACTIVE.as_millis() as u64));
            // A burst of updates just before and at the upgrade: notifications in flight and
            // keys queued and held as the revisions change hands.
            // Spread over up to a few network round trips, so that notifications are still
            // arriving, and being delivered, as the new revision is built and switched to.
            let spread = rng.gen_range(20..=200);
            for _ in 0..rng.gen_range(10..=60) {
                let before = Duration::from_millis(rng.gen_range(0..=spread));
                steps.push((at - before, Step::Update(rng.gen_range(0..objects))));
            }
            let change = if lifecycle { rng.gen_range(0..10) } else { 0 };
            match change {
                0..=4 => steps.push((at, Step::Upgrade(String::new()))),
                5..=6 => steps.push((at, Step::Rename(String::new()))),
                7 => {
                    steps.push((at, Step::Refuse));
                    let later = Duration::from_millis(rng.gen_range(500..5_000));
                    steps.push((at + later, Step::Rollback));
                }
                _ => {
                    steps.push((at, Step::Remove));
                    let later = Duration::from_millis(rng.gen_range(500..8_000));
                    steps.push((at + later, Step::Restore(String::new())));
                }
            }
            for _ in 0..rng.gen_range(0..=30) {
                let after = Duration::from_millis(rng.gen_range(0..=spread / 2));
                steps.push((at + after, Step::Update(rng.gen_range(0..objects))));
            }
        }
        // Slow writes only where keys move between live replicas: elsewhere they only hold up
        // handlers, which a deadline then retries (each update seen twice, as documented).
        let sharded = matches!(topology, Topology::Shards(_));
        if topology.replicas() > 1 {
            // Kills and partitions of any replica (the leader or a shard's owner among them),
            // some outlasting a lease, some not.
            for _ in 0..rng.gen_range(1..=3) {
                let at = Duration::from_millis(rng.gen_range(3_000..ACTIVE.as_millis() as u64));
                // Half of them hit whichever replica leads then (a takeover, its keys or the
                // lease gained by the others), the others any replica.
                let who = if rng.gen_bool(0.5) {
                    LEADER
                } else {
                    rng.gen_range(0..topology.replicas())
                };
                // Under shards, three in four outlast the membership Lease (15 s), so that the
                // replica's keys move to the others and, as it comes back, back to it.
                let down = if sharded && rng.gen_bool(0.75) {
                    Duration::from_millis(rng.gen_range(17_000..28_000))
                } else {
                    Duration::from_millis(rng.gen_range(1_000..25_000))
                };
                if rng.gen_bool(0.5) {
                    steps.push((at, Step::Crash(who, down)));
                } else {
                    steps.push((at, Step::Partition(who, down)));
                }
                // In half of them an upgrade just before the others take over (a lease runs out
                // 15 s after its last renewal, up to 2 s before the fault, and is seen as
                // expired at the next read): the new revision's replay task may not have run
                // yet as keys or leadership are gained.
                if rng.gen_bool(0.5) {
                    let taken = Duration::from_millis(rng.gen_range(11_000..=16_000));
                    steps.push((at + taken, Step::Upgrade(String::new())));
                }
                // And in half an upgrade as the replica comes back: its first revision's
                // replay task may not have run yet as it gains keys or the lease.
                if rng.gen_bool(0.5) {
                    let back = Duration::from_millis(rng.gen_range(0..=2_500));
                    steps.push((at + down + back, Step::Upgrade(String::new())));
                }
                // Writes in flight as the replica comes back and its keys move back to it,
                // with a few updates, so that the late writes are the live owners' (of keys
                // some of which move), not the returning replica's own.
                if sharded {
                    // Just after it is back: a partitioned replica's held requests have come
                    // through, so the late writes are the live owners'.
                    let after = Duration::from_millis(rng.gen_range(0..=300));
                    let armed = at + down + after;
                    // Several, so that some fall on keys that move back.
                    steps.push((
                        armed,
                        Step::SlowWrites(
                            rng.gen_range(2..=4),
                            Duration::from_millis(rng.gen_range(18_000..30_000)),
                        ),
                    ));
                    for _ in 0..rng.gen_range(4..=10) {
                        let after = Duration::from_millis(rng.gen_range(1..=200));
                        steps.push((armed + after, Step::Update(rng.gen_range(0..objects))));
                    }
                }
            }
            for _ in 0..rng.gen_range(0..=2) {
                let at = Duration::from_millis(rng.gen_range(3_000..ACTIVE.as_millis() as u64));
                if sharded {
                    steps.push((at, slow(&mut rng)));
                }
            }
        }
        // Drawn last, so that the draws above make the same scenario as before it was.
        let silent_registry = rng.gen_bool(0.5);
        // Stable: two steps at one instant keep the order they were drawn in.
        steps.sort_by_key(|(at, _)| *at);
        // Revisions are labelled in the order they start. Two changes drawn close together
        // may land out of the order drawn (a rollback after a later upgrade, a restore after
        // another removal): each still does what it says to what runs then.
        let mut n = 0;
        for (_, s) in &mut steps {
            if let Step::Upgrade(label) | Step::Rename(label) | Step::Restore(label) = s {
                n += 1;
                *label = format!("r{n}");
            }
        }
        // At least 20 s to settle after the last step (40 s after a fault ends: a lease to
        // expire and a new owner to catch up), and at least a minute in all.
        let last = steps
            .iter()
            .map(|(at, s)| match s {
                Step::Crash(_, d) | Step::Partition(_, d) => *at + *d + Duration::from_secs(20),
                // The delays fall on the next patches, which may come a hand-over wait
                // later (a replica that just joined), one after the other on one worker.
                Step::SlowWrites(n, d) => {
                    *at + Duration::from_secs(15) + *d * (*n as u32) + Duration::from_secs(20)
                }
                _ => *at,
            })
            .max()
            .unwrap_or(Duration::ZERO);
        let end = steps.last().map_or(Duration::ZERO, |(at, _)| *at);
        let settle = (last + Duration::from_secs(20))
            .max(Duration::from_secs(65))
            .saturating_sub(end);
        Plan {
            seed,
            objects,
            workers,
            topology,
            grace,
            writes,
            shuffle,
            reconcile_deadline,
            silent_registry,
            first: "r0".into(),
            steps,
            settle,
        }
    }

    /// The plugin that revision `label` belongs to: `sim` until the first rename, then
    /// `sim-<label>` of the last rename at or before it.
    pub fn plugin_of(&self, label: &str) -> String {
        let mut name = "sim".to_owned();
        if label == self.first {
            return name;
        }
        for (_, s) in &self.steps {
            match s {
                Step::Rename(l) => {
                    name = format!("sim-{l}");
                    if l == label {
                        return name;
                    }
                }
                Step::Upgrade(l) | Step::Restore(l) if l == label => return name,
                _ => {}
            }
        }
        name
    }

    /// Whether the plugin changes by name (a rename, a removal): an update made then may reach
    /// two plugins, or none.
    pub fn changes_plugins(&self) -> bool {
        self.steps
            .iter()
            .any(|(_, s)| matches!(s, Step::Rename(_) | Step::Remove))
    }

    /// Simulated time from the start to the end of the settling.
    pub fn duration(&self) -> Duration {
        self.steps.last().map_or(Duration::ZERO, |(at, _)| *at) + self.settle
    }
}

/// A few writes answered later than a shard's hand-over wait (a lease duration).
fn slow(rng: &mut StdRng) -> Step {
    Step::SlowWrites(
        rng.gen_range(1..=3),
        Duration::from_millis(rng.gen_range(18_000..30_000)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_the_same_plan_every_time() {
        let (a, b) = (Plan::of(7), Plan::of(7));
        assert_eq!(a.steps, b.steps);
        assert_eq!((a.objects, a.workers), (b.objects, b.workers));
        assert_ne!(Plan::of(8).steps, a.steps);
        assert!(
            a.duration() >= Duration::from_secs(60),
            "{:?}",
            a.duration()
        );
        let labels: Vec<_> = a
            .steps
            .iter()
            .filter_map(|(_, s)| match s {
                Step::Upgrade(l) | Step::Rename(l) | Step::Restore(l) => Some(l.clone()),
                _ => None,
            })
            .collect();
        let want: Vec<_> = (1..=labels.len()).map(|i| format!("r{i}")).collect();
        assert_eq!(labels, want);
    }

    #[test]
    fn a_rename_names_the_plugin_of_every_revision_after_it() {
        let plan = (0..200)
            .map(Plan::of)
            .find(|p| {
                let renames = p
                    .steps
                    .iter()
                    .position(|(_, s)| matches!(s, Step::Rename(_)));
                let upgrade_after = renames.is_some_and(|i| {
                    p.steps[i..]
                        .iter()
                        .any(|(_, s)| matches!(s, Step::Upgrade(_) | Step::Restore(_)))
                });
                upgrade_after
            })
            .expect("a seed of 0..200 renames, then upgrades");
        let mut name = "sim".to_owned();
        for (_, s) in &plan.steps {
            match s {
                Step::Rename(l) => {
                    name = format!("sim-{l}");
                    assert_eq!(plan.plugin_of(l), name);
                }
                Step::Upgrade(l) | Step::Restore(l) => assert_eq!(plan.plugin_of(l), name),
                _ => {}
            }
        }
        assert_eq!(plan.plugin_of("r0"), "sim");
        assert!(plan.changes_plugins());
    }
}
