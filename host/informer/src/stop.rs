//! A cloneable stop signal for the informer's tasks.
//!
//! Why not a channel: many tasks (reflector, pop loop, factory) wait on the same signal and any
//! owner may fire it; it must stay fired, and checking it must be cheap and synchronous.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

#[derive(Default)]
struct Inner {
    stopped: AtomicBool,
    notify: Notify,
}

/// Fired once, observed by every clone.
#[derive(Clone, Default)]
pub struct StopSignal(Arc<Inner>);

impl std::fmt::Debug for StopSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StopSignal")
            .field(&self.is_stopped())
            .finish()
    }
}

impl StopSignal {
    pub fn new() -> Self {
        Self::default()
    }

    /// Fire the signal; idempotent.
    pub fn stop(&self) {
        self.0.stopped.store(true, Ordering::SeqCst);
        self.0.notify.notify_waiters();
    }

    pub fn is_stopped(&self) -> bool {
        self.0.stopped.load(Ordering::SeqCst)
    }

    /// Resolves once the signal has fired (at once if it already has).
    pub async fn stopped(&self) {
        loop {
            let n = self.0.notify.notified();
            tokio::pin!(n);
            n.as_mut().enable();
            if self.is_stopped() {
                return;
            }
            n.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn stop_wakes_waiters_and_stays_fired() {
        let s = StopSignal::new();
        let s2 = s.clone();
        let w = tokio::spawn(async move { s2.stopped().await });
        tokio::task::yield_now().await;
        s.stop();
        tokio::time::timeout(Duration::from_secs(5), w)
            .await
            .expect("waiter not woken")
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), s.stopped())
            .await
            .expect("fired signal must resolve at once");
        assert!(s.is_stopped());
    }
}
