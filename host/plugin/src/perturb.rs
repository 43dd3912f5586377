//! Points where a deterministic simulation may hold a task back, as a busy multi-threaded
//! runtime can. The simulation runs each replica on one thread, where the task that switches
//! revisions carries on without a break and a task just spawned runs before any task woken
//! later: orders a loaded machine does not keep, and races that hide in them (a route moved
//! before the old workers retire, gains published before their subscriber exists) would never
//! show. At each point the simulation's hook says how long to wait there, from its seed.
//!
//! Outside a simulation no hook is installed, and a point costs one atomic load.

use std::sync::OnceLock;
use std::time::Duration;

/// Where the runtime may be held back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Point {
    /// Inside an upgrade's switch, once the route leads to the new revision and the previous
    /// one is retired: the switching task is late to carry on.
    RouteSwitched,
    /// A revision's task that replays gained keys to its handlers, before it first runs.
    ReplayStarts,
    /// A notification routed to a revision's guest, before its delivery begins.
    Routed,
}

type Hook = Box<dyn Fn(Point) -> Option<Duration> + Send + Sync>;

static HOOK: OnceLock<Hook> = OnceLock::new();

/// Installs `hook`, asked at every point how long to hold the task there (`None`: not at all;
/// zero: a yield to the other ready tasks). One per process: returns whether this one was
/// installed (false when another was already).
pub fn install(hook: impl Fn(Point) -> Option<Duration> + Send + Sync + 'static) -> bool {
    HOOK.set(Box::new(hook)).is_ok()
}

/// Waits at `point` as long as the hook says.
pub(crate) async fn at(point: Point) {
    match HOOK.get().and_then(|h| h(point)) {
        None => {}
        Some(Duration::ZERO) => tokio::task::yield_now().await,
        Some(d) => tokio::time::sleep(d).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use futures_util::FutureExt;

    #[test]
    fn without_a_hook_a_point_waits_for_nothing() {
        // No test in this crate installs one: each point is ready at its first poll.
        for p in [Point::RouteSwitched, Point::ReplayStarts, Point::Routed] {
            assert_eq!(at(p).now_or_never(), Some(()), "{p:?}");
        }
    }
}
