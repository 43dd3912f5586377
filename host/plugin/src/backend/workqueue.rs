//! The guest's `queue` import over the plugin's rate-limited workqueue, bounded in key length
//! and in keys held.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::QueueBackend;
use crate::reconcile::PluginQueue;
use kwh_coordination::ownership::{Admit, Ownership, PluginOwnership};

/// The longest key a plugin may enqueue, in bytes. A Kubernetes key is at most 317
/// (`namespace/name`: 63 + 1 + 253); longer ones are not object keys and only cost memory.
pub const MAX_KEY_BYTES: usize = 1024;

/// Adds a plugin's workqueue refused, by cause (the `plugin_queue_adds_refused` metric).
#[derive(Debug, Default)]
pub struct QueueRefusals {
    /// Keys longer than [`MAX_KEY_BYTES`].
    pub too_long: AtomicU64,
    /// Adds while the queue held [`crate::instance::Limits::max_queued_keys`] keys.
    pub full: AtomicU64,
}

/// The guest's `queue` import over the plugin's workqueue.
pub struct WorkqueueBackend {
    queue: PluginQueue,
    own: PluginOwnership,
    max_keys: usize,
    refusals: Arc<QueueRefusals>,
    plugin: Arc<str>,
}

impl WorkqueueBackend {
    /// Adds go to `queue`.
    pub fn new(queue: PluginQueue) -> Self {
        WorkqueueBackend {
            queue,
            own: Ownership::single().for_plugin("", false),
            max_keys: crate::instance::Limits::default().max_queued_keys,
            refusals: Arc::default(),
            plugin: Arc::from(""),
        }
    }

    /// Holds at most `max_keys` keys (queued and delayed) for `plugin`, counting refusals
    /// into `refusals`.
    pub fn bounded(mut self, plugin: &str, max_keys: usize, refusals: Arc<QueueRefusals>) -> Self {
        self.plugin = Arc::from(plugin);
        self.max_keys = max_keys;
        self.refusals = refusals;
        self
    }

    /// Whether `key` may be added: not over-long, and room in the queue. A refusal is
    /// counted; it is logged at the first and then at every power of two, so a guest adding
    /// keys in a loop cannot flood the log either.
    fn fits(&self, key: &str) -> bool {
        let (counter, why) = if key.len() > MAX_KEY_BYTES {
            (&self.refusals.too_long, "key longer than 1024 bytes")
        } else if self.queue.len() + self.queue.waiting_len() >= self.max_keys {
            (&self.refusals.full, "workqueue full")
        } else {
            return true;
        };
        let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            tracing::warn!(plugin = %self.plugin, refused = n, max_keys = self.max_keys,
                key = %kwh_client::clip::clip(key), "queue add refused: {why}");
        }
        false
    }

    /// Admits only the keys `own` says are this replica's (a standby's queue stays empty).
    pub fn owned_by(mut self, own: PluginOwnership) -> Self {
        self.own = own;
        self
    }
}

impl QueueBackend for WorkqueueBackend {
    fn add(&self, key: &str) {
        if !self.fits(key) {
            return;
        }
        match self.own.admit(key) {
            Admit::Now => self.queue.add_borrowed(key),
            Admit::After(wait) => self.queue.add_after(key.into(), wait),
            Admit::No => {}
        }
    }
    fn add_after(&self, key: &str, delay: Duration) {
        if !self.fits(key) {
            return;
        }
        match self.own.admit(key) {
            Admit::Now => self.queue.add_after(key.into(), delay),
            Admit::After(wait) => self.queue.add_after(key.into(), delay.max(wait)),
            Admit::No => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A guest enqueueing keys in a loop meets the queue's bound: over-long keys and adds to
    /// a full queue are refused and counted; delayed keys count against the bound too.
    #[tokio::test]
    async fn queue_adds_are_bounded_in_length_and_number() {
        let queue = PluginQueue::new(kwh_informer::workqueue::default_controller_rate_limiter());
        let refusals = Arc::new(QueueRefusals::default());
        let q = WorkqueueBackend::new(queue.clone()).bounded("p", 5, refusals.clone());
        for i in 0..4 {
            q.add(&format!("ns/k{i}"));
        }
        q.add_after("ns/later", Duration::from_secs(3600));
        assert_eq!((queue.len(), queue.waiting_len()), (4, 1));
        q.add("ns/k9");
        q.add_after("ns/k10", Duration::from_secs(1));
        assert_eq!(queue.len(), 4, "full: nothing more");
        assert_eq!(refusals.full.load(Ordering::Relaxed), 2);
        let long = format!("ns/{}", "x".repeat(MAX_KEY_BYTES));
        let _ = queue.get().await;
        q.add(&long);
        assert_eq!(refusals.too_long.load(Ordering::Relaxed), 1);
        assert_eq!(queue.len(), 3, "an over-long key is refused even with room");
        q.add("ns/k4");
        assert_eq!(queue.len(), 4, "room again: added");
    }
}
