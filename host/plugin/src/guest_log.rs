//! What a plugin may put in the host's log: lines of bounded length at a bounded rate.
//!
//! A guest's `log` import and its stdout and stderr all end up as host log lines. A guest
//! logging in a loop, or one 60 MB message, would otherwise cost the host's CPU and disk (and
//! its operators' log bill) without bound, and drown every other plugin's lines. So each
//! plugin has one budget for all of its instances: a token bucket (by default a burst of
//! [`BURST`] lines, then [`PER_SECOND`] a second; a plugin's `logLinesPerSecond` sets the rate,
//! the burst is ten seconds of it), lines over it are dropped and counted, and one line says
//! how many were dropped once the plugin is let log again. A message longer
//! than [`MAX_LINE`] bytes is cut, saying by how much.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

/// The longest line kept, in bytes (cut at a character boundary).
pub const MAX_LINE: usize = 4096;
/// Lines a plugin may log at once after a quiet spell, at the default rate (and at least).
pub const BURST: u32 = 1000;
/// Lines a plugin may log per second, sustained, by default.
pub const PER_SECOND: u32 = 100;

/// One plugin's log budget, shared by its instances.
#[derive(Debug)]
pub struct GuestLog {
    plugin: Arc<str>,
    /// Lines per second, sustained; `None`: no budget.
    rate: Option<f64>,
    /// The bucket's size.
    burst: f64,
    bucket: Mutex<Bucket>,
    /// Lines dropped since start (the `plugin_log_lines_dropped` metric).
    dropped: AtomicU64,
    /// Of those, not yet reported by a summary line.
    unreported: AtomicU64,
    /// Keep each reconcile's lines for the caller (a shadow's: shown beside its differences).
    capture: bool,
}

/// Lines kept of one reconcile when capturing: the first ones (a reconcile's story starts
/// where it read its object), the rest counted.
pub const CAPTURED_LINES: usize = 20;

/// Keeps `message` as the next captured line of a reconcile (see [`GuestLog::capturing`]).
pub fn capture(lines: &mut Vec<String>, level: &str, message: &str) {
    match lines.len() {
        n if n < CAPTURED_LINES => lines.push(format!("{level} {}", bounded(message))),
        CAPTURED_LINES => lines.push("… more lines not kept".to_owned()),
        _ => {}
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl GuestLog {
    /// A full budget for `plugin` of `per_second` lines a second (0: unbounded).
    pub fn new(plugin: Arc<str>, per_second: u32) -> Self {
        let rate = (per_second > 0).then_some(f64::from(per_second));
        let burst = f64::from(BURST.max(per_second.saturating_mul(10)));
        GuestLog {
            plugin,
            rate,
            burst,
            bucket: Mutex::new(Bucket {
                tokens: burst,
                at: Instant::now(),
            }),
            dropped: AtomicU64::new(0),
            unreported: AtomicU64::new(0),
            capture: false,
        }
    }

    /// The same budget, keeping each reconcile's lines (all levels, at most
    /// [`CAPTURED_LINES`]) for the caller, whatever the host's log shows.
    pub fn capturing(mut self) -> Self {
        self.capture = true;
        self
    }

    /// Whether each reconcile's lines are kept.
    pub fn captures(&self) -> bool {
        self.capture
    }

    /// The plugin's name, as its lines carry it.
    pub fn plugin(&self) -> &Arc<str> {
        &self.plugin
    }

    /// Lines dropped since start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Whether one more line may be logged now; a refusal is counted. The first line let
    /// through after refusals is preceded by one that says how many were dropped.
    pub fn admit(&self) -> bool {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> bool {
        let Some(rate) = self.rate else {
            return true;
        };
        {
            let mut b = self.bucket.lock();
            let refill = now.saturating_duration_since(b.at).as_secs_f64() * rate;
            b.tokens = (b.tokens + refill).min(self.burst);
            b.at = now;
            if b.tokens < 1.0 {
                drop(b);
                self.dropped.fetch_add(1, Ordering::Relaxed);
                self.unreported.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            b.tokens -= 1.0;
        }
        let missed = self.unreported.swap(0, Ordering::Relaxed);
        if missed > 0 {
            tracing::warn!(target: "plugin::guest", plugin = %self.plugin, dropped = missed,
                "{missed} log lines of this plugin dropped: over {rate} a second (bursts of {}; its logLinesPerSecond)", self.burst);
        }
        true
    }
}

/// `line` cut to [`MAX_LINE`] bytes at a character boundary, saying how much was cut.
pub fn bounded(line: &str) -> Cow<'_, str> {
    if line.len() <= MAX_LINE {
        return Cow::Borrowed(line);
    }
    let end = kwh_client::clip::floor_char_boundary(line, MAX_LINE);
    Cow::Owned(format!(
        "{}… ({} more bytes cut)",
        &line[..end],
        line.len() - end
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_then_a_rate_and_every_refusal_counted() {
        let log = GuestLog::new(Arc::from("p"), PER_SECOND);
        let t0 = Instant::now();
        let let_through = (0..5_000).filter(|_| log.admit_at(t0)).count();
        assert_eq!(let_through, BURST as usize);
        assert_eq!(log.dropped(), 5_000 - BURST as u64);
        // A second later: a second's worth.
        let t1 = t0 + Duration::from_secs(1);
        let let_through = (0..5_000).filter(|_| log.admit_at(t1)).count();
        assert_eq!(let_through, PER_SECOND as usize);
        // Quiet for long: the burst again, no more.
        let t2 = t1 + Duration::from_secs(3600);
        assert_eq!(
            (0..5_000).filter(|_| log.admit_at(t2)).count(),
            BURST as usize
        );
    }

    #[test]
    fn a_plugins_own_rate_sets_its_burst_and_zero_lets_everything_through() {
        let log = GuestLog::new(Arc::from("p"), 500);
        let t0 = Instant::now();
        assert_eq!((0..20_000).filter(|_| log.admit_at(t0)).count(), 5_000);
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!((0..20_000).filter(|_| log.admit_at(t1)).count(), 500);
        let free = GuestLog::new(Arc::from("p"), 0);
        assert_eq!((0..20_000).filter(|_| free.admit_at(t0)).count(), 20_000);
        assert_eq!(free.dropped(), 0);
    }

    #[test]
    fn long_lines_are_cut_at_a_character_boundary() {
        assert_eq!(bounded("short"), "short");
        let long = "é".repeat(MAX_LINE);
        let cut = bounded(&long);
        assert!(cut.len() < MAX_LINE + 40, "{}", cut.len());
        assert!(cut.ends_with(&format!("… ({} more bytes cut)", long.len() - MAX_LINE)));
    }
}
