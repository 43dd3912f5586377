//! The virtual clock: the only time a harnessed guest, the fake cluster and the fake queue see.
//!
//! Time moves only when the test says so ([`VirtualClock::advance`]), so a requeue after an hour
//! or an expiry computed from `SystemTime::now()` is tested in microseconds and never flakes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kwh_plugin::GuestClock;

/// 2025-01-01T00:00:00Z: the default start, fixed so timestamps in test output are reproducible.
pub const DEFAULT_START_UNIX_SECS: u64 = 1_735_689_600;

/// Monotonic readings start here rather than at zero: guests may treat 0 as "unset".
const MONOTONIC_BASE_NS: u64 = 1_000_000_000;

/// A clock that stands still until advanced. Cheap to clone; clones share the time.
#[derive(Clone, Debug)]
pub struct VirtualClock(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    start: Duration,
    elapsed_ns: AtomicU64,
}

impl Default for VirtualClock {
    fn default() -> Self {
        VirtualClock::starting_at(UNIX_EPOCH + Duration::from_secs(DEFAULT_START_UNIX_SECS))
    }
}

impl VirtualClock {
    /// A clock whose wall time starts at `start` (times before the epoch count as the epoch).
    pub fn starting_at(start: SystemTime) -> Self {
        VirtualClock(Arc::new(Inner {
            start: start.duration_since(UNIX_EPOCH).unwrap_or_default(),
            elapsed_ns: AtomicU64::new(0),
        }))
    }

    /// The current virtual wall time.
    pub fn now(&self) -> SystemTime {
        UNIX_EPOCH + self.since_epoch()
    }

    /// The current virtual wall time as whole seconds since the epoch (what API timestamps hold).
    pub fn unix_secs(&self) -> u64 {
        self.since_epoch().as_secs()
    }

    /// How far the clock has been advanced since it was created.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.0.elapsed_ns.load(Ordering::Acquire))
    }

    /// Moves time forward by `d` (saturating after ~584 years of virtual time). Prefer
    /// [`super::Harness::advance`], which also makes due delayed keys ready.
    pub fn advance(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .0
            .elapsed_ns
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |e| {
                Some(e.saturating_add(ns))
            });
    }

    fn since_epoch(&self) -> Duration {
        self.0.start + self.elapsed()
    }
}

impl GuestClock for VirtualClock {
    fn wall(&self) -> Duration {
        self.since_epoch()
    }

    fn monotonic_ns(&self) -> u64 {
        MONOTONIC_BASE_NS.saturating_add(self.0.elapsed_ns.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_moves_only_when_advanced_and_both_clocks_agree() {
        let c = VirtualClock::default();
        let (w0, m0) = (c.wall(), c.monotonic_ns());
        assert_eq!(w0, Duration::from_secs(DEFAULT_START_UNIX_SECS));
        assert_eq!(c.wall(), w0);
        c.clone().advance(Duration::from_millis(1500));
        assert_eq!(c.wall() - w0, Duration::from_millis(1500));
        assert_eq!(c.monotonic_ns() - m0, 1_500_000_000);
        assert_eq!(c.unix_secs(), DEFAULT_START_UNIX_SECS + 1);
        assert_eq!(c.elapsed(), Duration::from_millis(1500));
    }
}
