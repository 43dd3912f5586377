//! client-go's workqueue: dedup and processing sets, delaying queue, rate limiters, metrics.
