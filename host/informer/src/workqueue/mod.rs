//! client-go's workqueue: dedup and processing sets, delaying queue, rate limiters, metrics.
//!
//! Layers stack like client-go's interfaces: [`Queue`] (dedup + processing sets) is wrapped by
//! [`DelayingQueue`] (ready-time heap), which is wrapped by [`RateLimitingQueue`] (per-item
//! back-off). Each wrapper derefs to the layer below, so a worker written against `Queue`
//! methods (`get`, `done`, `add`) works on every layer.

pub mod delaying;
pub mod metrics;
pub mod queue;
pub mod rate_limiter;
pub mod rate_limiting;
mod sharded;

use std::hash::Hash;

pub use delaying::DelayingQueue;
pub use metrics::{MetricsError, QueuesCollector};
pub use queue::Queue;
pub use rate_limiter::{
    default_controller_rate_limiter, Bucket, ItemExponential, ItemFastSlow, MaxOf, RateLimiter,
};
pub use rate_limiting::RateLimitingQueue;

/// What a queue item must be: the host uses `String` keys (`namespace/name`), but anything
/// cheap to clone and hash works. Dedup is by equality, exactly like client-go's comparable `T`.
pub trait Key: Clone + Eq + Hash + Send + Sync + 'static {}

impl<T: Clone + Eq + Hash + Send + Sync + 'static> Key for T {}
