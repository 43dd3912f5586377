//! The rate-limiting queue controllers use: a [`DelayingQueue`] whose retries are delayed by a
//! [`RateLimiter`] (spec 5.6).

use std::ops::Deref;
use std::sync::Arc;

use super::delaying::DelayingQueue;
use super::metrics::{MetricsError, QueuesCollector};
use super::rate_limiter::RateLimiter;
use super::Key;

/// A [`DelayingQueue`] plus a [`RateLimiter`]. Derefs to the delaying queue, so `get`, `done`,
/// `add`, `add_after` and the shutdowns are available directly. Cloning yields another handle.
///
/// The worker contract, as in client-go: on failure `add_rate_limited(key)`, on success
/// `forget(&key)`, and in both cases `done(&key)`:
/// ```
/// use kwh_informer::workqueue::{default_controller_rate_limiter, RateLimitingQueue};
/// # async fn reconcile(_key: &str) -> Result<(), ()> { Ok(()) }
/// # async fn worker() {
/// let q = RateLimitingQueue::new(default_controller_rate_limiter::<String>());
/// q.add("default/web".to_owned());
/// while let Some(key) = q.get().await {
///     match reconcile(&key).await {
///         Ok(()) => q.forget(&key),
///         Err(()) => q.add_rate_limited(key.clone()),
///     }
///     q.done(&key);
/// }
/// # }
/// ```
pub struct RateLimitingQueue<T: Key> {
    queue: DelayingQueue<T>,
    limiter: Arc<dyn RateLimiter<T>>,
}

impl<T: Key> Clone for RateLimitingQueue<T> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            limiter: Arc::clone(&self.limiter),
        }
    }
}

impl<T: Key> std::fmt::Debug for RateLimitingQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitingQueue")
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

impl<T: Key> Deref for RateLimitingQueue<T> {
    type Target = DelayingQueue<T>;

    fn deref(&self) -> &DelayingQueue<T> {
        &self.queue
    }
}

impl<T: Key> RateLimitingQueue<T> {
    /// An unnamed queue (no metrics) limited by `limiter`.
    pub fn new(limiter: impl RateLimiter<T> + 'static) -> Self {
        Self {
            queue: DelayingQueue::new(),
            limiter: Arc::new(limiter),
        }
    }

    /// A queue with metrics labelled `name` in `registry`, limited by `limiter`.
    pub fn named(
        name: &str,
        registry: &QueuesCollector,
        limiter: impl RateLimiter<T> + 'static,
    ) -> Result<Self, MetricsError> {
        Ok(Self {
            queue: DelayingQueue::named(name, registry)?,
            limiter: Arc::new(limiter),
        })
    }

    /// Adds `item` after the delay the limiter gives it (`AddAfter(When(item))`).
    pub fn add_rate_limited(&self, item: T) {
        let delay = self.limiter.when(&item);
        self.queue.add_after(item, delay);
    }

    /// Resets the limiter's count for `item`. The worker must still call `done`.
    pub fn forget(&self, item: &T) {
        self.limiter.forget(item);
    }

    /// How often `item` was rate-limited since it was last forgotten.
    pub fn num_requeues(&self, item: &T) -> u32 {
        self.limiter.num_requeues(item)
    }
}

#[cfg(test)]
mod tests;
