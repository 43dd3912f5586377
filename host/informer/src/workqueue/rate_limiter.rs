//! Rate limiters deciding how long a failed item waits before its retry (spec 5.6).
//!
//! Per-item limiters back a single hot key off exponentially; the bucket limits the overall retry
//! rate so a mass failure (an API server outage) cannot turn into a retry storm. Controllers use
//! both via [`default_controller_rate_limiter`].

use foldhash::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::Key;

/// Decides the delay before an item is retried, and tracks how often it has been.
pub trait RateLimiter<T>: Send + Sync {
    /// The delay before `item` may be processed again; each call counts as one more failure for
    /// limiters that track failures.
    fn when(&self, item: &T) -> Duration;
    /// Stops tracking `item` (it succeeded). Clears only the counter: the worker still calls
    /// `done`.
    fn forget(&self, item: &T);
    /// How many times `item` has been limited since it was last forgotten.
    fn num_requeues(&self, item: &T) -> u32;
}

impl<T, R: RateLimiter<T> + ?Sized> RateLimiter<T> for Box<R> {
    fn when(&self, item: &T) -> Duration {
        (**self).when(item)
    }
    fn forget(&self, item: &T) {
        (**self).forget(item)
    }
    fn num_requeues(&self, item: &T) -> u32 {
        (**self).num_requeues(item)
    }
}

/// `base · 2^failures`, capped at `max`; failures count per item (client-go's
/// ItemExponentialFailureRateLimiter).
pub struct ItemExponential<T> {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<T, u32>>,
}

impl<T: Key> ItemExponential<T> {
    /// Starts at `base`, doubles per failure, never exceeds `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: Mutex::new(HashMap::default()),
        }
    }

    fn backoff(&self, exp: u32) -> Duration {
        let base = self.base.as_nanos();
        if base == 0 {
            return Duration::ZERO;
        }
        // Saturate before the shift could push bits out of the u128.
        if exp >= base.leading_zeros() {
            return self.max;
        }
        let nanos = base << exp;
        if nanos >= self.max.as_nanos() {
            return self.max;
        }
        // nanos < max.as_nanos(), so it fits a Duration.
        Duration::new(
            (nanos / 1_000_000_000) as u64,
            (nanos % 1_000_000_000) as u32,
        )
    }
}

impl<T: Key> RateLimiter<T> for ItemExponential<T> {
    fn when(&self, item: &T) -> Duration {
        let exp = {
            let mut failures = self.failures.lock();
            match failures.get_mut(item) {
                Some(n) => {
                    let exp = *n;
                    *n = n.saturating_add(1);
                    exp
                }
                None => {
                    failures.insert(item.clone(), 1);
                    0
                }
            }
        };
        self.backoff(exp)
    }

    fn forget(&self, item: &T) {
        // Every successful reconcile forgets its key; almost none has failed, so the common
        // case costs no hashing.
        let mut failures = self.failures.lock();
        if !failures.is_empty() {
            failures.remove(item);
        }
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.failures.lock().get(item).copied().unwrap_or(0)
    }
}

/// `fast` for the first `max_fast_attempts` failures of an item, `slow` after that (client-go's
/// ItemFastSlowRateLimiter).
pub struct ItemFastSlow<T> {
    fast: Duration,
    slow: Duration,
    max_fast_attempts: u32,
    failures: Mutex<HashMap<T, u32>>,
}

impl<T: Key> ItemFastSlow<T> {
    /// See the type's doc.
    pub fn new(fast: Duration, slow: Duration, max_fast_attempts: u32) -> Self {
        Self {
            fast,
            slow,
            max_fast_attempts,
            failures: Mutex::new(HashMap::default()),
        }
    }
}

impl<T: Key> RateLimiter<T> for ItemFastSlow<T> {
    fn when(&self, item: &T) -> Duration {
        let mut failures = self.failures.lock();
        let n = match failures.get_mut(item) {
            Some(n) => {
                *n = n.saturating_add(1);
                *n
            }
            None => {
                failures.insert(item.clone(), 1);
                1
            }
        };
        if n <= self.max_fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }

    fn forget(&self, item: &T) {
        // Every successful reconcile forgets its key; almost none has failed, so the common
        // case costs no hashing.
        let mut failures = self.failures.lock();
        if !failures.is_empty() {
            failures.remove(item);
        }
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.failures.lock().get(item).copied().unwrap_or(0)
    }
}

/// An overall token bucket: `qps` tokens per second, at most `burst` stored, starting full; the
/// delay is how long until the reserved token exists (golang.org/x/time/rate's
/// `Reserve().Delay()`, client-go's BucketRateLimiter). Items are not tracked: `num_requeues` is
/// always 0.
pub struct Bucket {
    qps: f64,
    burst: u32,
    state: Mutex<BucketState>,
}

struct BucketState {
    /// May go negative: tokens already promised to reservations in the future.
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// A bucket refilled at `qps` per second holding at most `burst` tokens.
    pub fn new(qps: f64, burst: u32) -> Self {
        Self::full_at(qps, burst, Instant::now())
    }

    /// A bucket that is full at `start`, for callers that keep their own time (the guest test
    /// harness runs it on a virtual clock through [`Bucket::reserve_at`]).
    pub fn full_at(qps: f64, burst: u32, start: Instant) -> Self {
        Self {
            qps,
            burst,
            state: Mutex::new(BucketState {
                tokens: f64::from(burst),
                last: start,
            }),
        }
    }

    /// Reserves one token now and returns how long until it may be used.
    fn reserve(&self) -> Duration {
        self.reserve_at(Instant::now())
    }

    /// Reserves one token at `now` (a monotonic reading: no refill is credited for a time
    /// before the last reservation's) and returns how long after `now` it may be used.
    pub fn reserve_at(&self, now: Instant) -> Duration {
        if self.qps == f64::INFINITY {
            return Duration::ZERO;
        }
        let mut st = self.state.lock();
        if self.burst == 0 {
            // A reservation larger than the burst can never be satisfied (x/time/rate: not ok,
            // infinite delay, nothing consumed).
            return Duration::MAX;
        }
        let refill_rate = if self.qps > 0.0 { self.qps } else { 0.0 };
        let elapsed = now.saturating_duration_since(st.last);
        let tokens =
            (st.tokens + elapsed.as_secs_f64() * refill_rate).min(f64::from(self.burst)) - 1.0;
        if tokens >= 0.0 {
            st.tokens = tokens;
            st.last = now;
            return Duration::ZERO;
        }
        if refill_rate == 0.0 {
            // The token will never come; like x/time/rate, do not consume anything.
            return Duration::MAX;
        }
        st.tokens = tokens;
        st.last = now;
        let seconds = -tokens / refill_rate;
        // Truncating float → integer nanoseconds, as Go's `time.Duration(float)` does; `as`
        // saturates instead of overflowing.
        Duration::from_nanos((1e9 * seconds) as u64)
    }
}

impl<T> RateLimiter<T> for Bucket {
    fn when(&self, _item: &T) -> Duration {
        self.reserve()
    }

    fn forget(&self, _item: &T) {}

    fn num_requeues(&self, _item: &T) -> u32 {
        0
    }
}

/// Combines limiters: the largest `when` and `num_requeues` of all; `forget` reaches every one
/// (client-go's MaxOfRateLimiter). Every limiter sees every `when`, so each keeps counting.
pub struct MaxOf<T> {
    limiters: Vec<Box<dyn RateLimiter<T>>>,
}

impl<T> MaxOf<T> {
    /// The maximum over `limiters`; with none, every delay is zero.
    pub fn new(limiters: Vec<Box<dyn RateLimiter<T>>>) -> Self {
        Self { limiters }
    }
}

impl<T> RateLimiter<T> for MaxOf<T> {
    fn when(&self, item: &T) -> Duration {
        self.limiters
            .iter()
            .map(|l| l.when(item))
            .fold(Duration::ZERO, Duration::max)
    }

    fn forget(&self, item: &T) {
        for l in &self.limiters {
            l.forget(item);
        }
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.limiters
            .iter()
            .map(|l| l.num_requeues(item))
            .max()
            .unwrap_or(0)
    }
}

/// The per-item back-off of client-go's default controller rate limiter starts here...
pub const CONTROLLER_BASE_DELAY: Duration = Duration::from_millis(5);
/// ...doubles per failure up to this...
pub const CONTROLLER_MAX_DELAY: Duration = Duration::from_secs(1000);
/// ...and every retry also takes a token from a bucket refilled at this rate...
pub const CONTROLLER_QPS: f64 = 10.0;
/// ...holding at most this many.
pub const CONTROLLER_BURST: u32 = 100;

/// client-go's `DefaultControllerRateLimiter`: per-item exponential back-off from 5 ms to
/// 1000 s, combined with an overall 10 qps bucket with a burst of 100 (spec 5.6).
pub fn default_controller_rate_limiter<T: Key>() -> MaxOf<T> {
    MaxOf::new(vec![
        Box::new(ItemExponential::new(
            CONTROLLER_BASE_DELAY,
            CONTROLLER_MAX_DELAY,
        )),
        Box::new(Bucket::new(CONTROLLER_QPS, CONTROLLER_BURST)),
    ])
}

#[cfg(test)]
mod tests;
