//! The clocks a guest reads through WASI (`wasi:clocks`), when they are not the host's own.

use std::sync::Arc;
use std::time::Duration;

use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtxBuilder};

/// A source of time for a guest, in place of the host's clocks.
///
/// Production stores always see the real clocks. A test harness substitutes a virtual clock,
/// so a guest that computes an expiry from `SystemTime::now()` (or measures an interval with
/// `Instant`) can be driven through time deterministically instead of by sleeping.
pub trait GuestClock: Send + Sync + 'static {
    /// Wall-clock time as a duration since the Unix epoch (`wasi:clocks/wall-clock.now`).
    fn wall(&self) -> Duration;
    /// Monotonic time in nanoseconds since an arbitrary fixed point; never goes backwards
    /// (`wasi:clocks/monotonic-clock.now`).
    fn monotonic_ns(&self) -> u64;
}

/// Makes the stores built from `wasi` read `clock` for both of WASI's clocks.
pub fn use_clock(wasi: &mut WasiCtxBuilder, clock: &Arc<dyn GuestClock>) {
    wasi.wall_clock(WallOf(clock.clone()))
        .monotonic_clock(MonotonicOf(clock.clone()));
}

/// Adapts a shared [`GuestClock`] to wasmtime-wasi's wall-clock trait (one per store).
struct WallOf(Arc<dyn GuestClock>);

impl HostWallClock for WallOf {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }
    fn now(&self) -> Duration {
        self.0.wall()
    }
}

/// Adapts a shared [`GuestClock`] to wasmtime-wasi's monotonic-clock trait (one per store).
struct MonotonicOf(Arc<dyn GuestClock>);

impl HostMonotonicClock for MonotonicOf {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        self.0.monotonic_ns()
    }
}
