//! The seeded waits at the runtime's perturbation points ([`kwh_plugin::perturb`]): an upgrade's
//! switching task late to carry on, a revision's replay task late to start, a delivery late to
//! begin — the orders a loaded multi-threaded runtime makes and one simulated thread never
//! would. Drawn from the seed, in the order the points are reached, so a seed replays them.

use std::cell::RefCell;
use std::sync::Once;
use std::time::Duration;

use kwh_plugin::perturb::{self, Point};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

thread_local! {
    /// This thread's run's draws (a simulation runs on one thread; runs on other threads, as
    /// the benchmark's are, draw their own). None between runs: no wait.
    static DRAWS: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

static INSTALLED: Once = Once::new();

/// The waits of one run being drawn on this thread, until dropped.
pub(crate) struct Draws(());

impl Draws {
    /// Starts drawing the waits of the run of `seed` on this thread.
    pub(crate) fn begin(seed: u64) -> Draws {
        INSTALLED.call_once(|| {
            perturb::install(wait_at);
        });
        DRAWS.with(|d| *d.borrow_mut() = Some(StdRng::seed_from_u64(seed ^ 0x7363_6865_6475_6c65)));
        Draws(())
    }
}

impl Drop for Draws {
    /// The points wait for nothing again on this thread.
    fn drop(&mut self) {
        DRAWS.with(|d| *d.borrow_mut() = None);
    }
}

fn wait_at(point: Point) -> Option<Duration> {
    DRAWS.with(|d| {
        let mut d = d.borrow_mut();
        let rng = d.as_mut()?;
        let (p, max_ms) = match point {
            // Up to a few deliveries' worth: the old revision's workers side by side with
            // the new one's, were they not retired first.
            Point::RouteSwitched => (0.5, 300),
            // Up to a few lease renewals: gains published before the task runs.
            Point::ReplayStarts => (0.75, 5_000),
            // Rarely, briefly: a notification routed, then delivered after a switch.
            Point::Routed => (0.02, 50),
            _ => return None,
        };
        rng.gen_bool(p)
            .then(|| Duration::from_millis(rng.gen_range(0..=max_ms)))
    })
}
