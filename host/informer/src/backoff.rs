//! The reflector's retry backoff (spec 1.1).
//!
//! Why its own type with an explicit clock and random input: the exact sequence (800 ms
//! doubling to a 30 s cap, full jitter, reset two minutes after the previous reset) is part of
//! how a fleet of informers treats a struggling API server, so it is tested step by step.

use std::time::Duration;

use tokio::time::Instant;

/// Exponential backoff with jitter and a periodic reset (spec 1.1).
#[derive(Debug, Clone)]
pub struct Backoff {
    pub initial: Duration,
    pub cap: Duration,
    pub factor: f64,
    pub jitter: f64,
    pub reset_after: Duration,
    current: Duration,
    last_reset: Option<Instant>,
}

impl Default for Backoff {
    /// client-go's reflector backoff: 800 ms, ×2, jitter 1.0, cap 30 s, reset after 2 min.
    fn default() -> Self {
        Backoff::new(
            Duration::from_millis(800),
            Duration::from_secs(30),
            2.0,
            1.0,
            Duration::from_secs(120),
        )
    }
}

impl Backoff {
    pub fn new(
        initial: Duration,
        cap: Duration,
        factor: f64,
        jitter: f64,
        reset_after: Duration,
    ) -> Self {
        Backoff {
            initial,
            cap,
            factor,
            jitter,
            reset_after,
            current: initial,
            last_reset: None,
        }
    }

    /// The next sleep: `d + r·jitter·d` for the current `d`, which then grows toward the cap.
    /// The sequence restarts at the first step more than `reset_after` after the previous
    /// restart; success does not postpone that (spec 1.1).
    pub fn step(&mut self, now: Instant, rand01: f64) -> Duration {
        let due = match self.last_reset {
            None => true,
            Some(t) => now.saturating_duration_since(t) > self.reset_after,
        };
        if due {
            self.current = self.initial;
            self.last_reset = Some(now);
        }
        let d = self.current;
        if self.factor != 0.0 {
            self.current = self.current.mul_f64(self.factor).min(self.cap);
        }
        if self.jitter > 0.0 {
            d + d.mul_f64(rand01.clamp(0.0, 1.0) * self.jitter)
        } else {
            d
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn spec_1_1_backoff_sequence_cap_jitter_and_reset() {
        let t0 = Instant::now();
        let mut b = Backoff::default();
        let got: Vec<f64> = (0..9)
            .map(|i| b.step(t0 + secs(i as f64), 0.0).as_secs_f64())
            .collect();
        assert_eq!(got, vec![0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0]);
        // Jitter 1.0: every sleep is in [d, 2d); after the cap in [30, 60).
        let d = b.step(t0 + secs(10.0), 0.999);
        assert!(d >= secs(30.0) && d < secs(60.0), "{d:?}");
        // The reset comes at the first step more than 2 min after the previous reset (t0),
        // however often the steps came in between.
        assert_eq!(b.step(t0 + secs(120.0), 0.0), secs(30.0));
        assert_eq!(b.step(t0 + secs(120.5), 0.0), secs(0.8));
        assert_eq!(b.step(t0 + secs(121.0), 0.0), secs(1.6));
        let mut b = Backoff::default();
        assert_eq!(b.step(t0, 0.5), secs(1.2));
    }
}
