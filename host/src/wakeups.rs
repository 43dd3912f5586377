//! Batching of the runtime's wake-ups while events arrive faster than a window.
//!
//! Why: at the rates clusters deliver (hundreds to thousands of watch events a second, each its
//! own small write on the server's side), a host that sleeps in `epoll_wait` between events is
//! woken once per event, and the wake-up itself (a context switch, the read, the TCP
//! acknowledgement it sends) costs more than everything the host then does with the event;
//! measured from outside, a process that only reads the watch stream and discards it spends
//! about as much CPU per event as the whole host did. So when the runtime runs out of work and
//! its last idle spell was shorter than the window (events are arriving that fast), its thread
//! first sleeps for the window without listening, then parks as usual: everything that
//! arrived meanwhile is read at once, with one wake-up for the lot. An event then waits at most
//! the window longer; below one event per window, and while the runtime has work (a burst,
//! a relist), nothing changes. Interrupt moderation on network cards makes the same trade.
//!
//! Only while watch events arrive at [`MIN_EVENTS_PER_WINDOW`] a window or more (over the last
//! [`RATE_PERIOD`]): below that a batch holds one event or two, saves next to no wake-ups, and
//! the wait is all cost. The runtime also wakes for other reasons (a plugin's requeue timers,
//! a failing guest's retries, a neighbour's Events); those alone must not make every other
//! plugin's events wait out the window (issue "Safe under faults": a well-behaved plugin's
//! latency beside a hostile one).

use std::cell::Cell;
use std::time::{Duration, Instant};

/// Watch events a window must see, at the recent rate, for batching to apply.
pub const MIN_EVENTS_PER_WINDOW: u64 = 4;
/// How often (at most) a thread about to park measures the event rate again.
pub const RATE_PERIOD: Duration = Duration::from_millis(100);

thread_local! {
    /// When this thread last parked (after any batching sleep).
    static PARKED_AT: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Whether its last idle spell was shorter than the window.
    static BUSY: Cell<bool> = const { Cell::new(false) };
    /// The start of the current rate period and the event count then.
    static PERIOD: Cell<Option<(Instant, u64)>> = const { Cell::new(None) };
    /// Whether events arrived fast enough in the last period measured.
    static FAST: Cell<bool> = const { Cell::new(false) };
}

/// The window and the runtime hooks that apply it; `Duration::ZERO` turns batching off.
#[derive(Debug, Clone, Copy)]
pub struct Batching {
    window: Duration,
    /// The events counted so far (the process's decoded watch events).
    events: fn() -> u64,
}

impl Batching {
    pub fn new(window: Duration) -> Self {
        Batching {
            window,
            events: kwh_client::watch::events_decoded,
        }
    }

    /// Adds the park and unpark hooks to `builder`. Even with a zero window a thread about to
    /// park disarms its guest-deadline timer ([`kwh_sandbox::watchdog::thread_idle`]): an idle
    /// thread then gets no timer signal, where it would otherwise get one more after its last
    /// guest call.
    pub fn install(self, builder: &mut tokio::runtime::Builder) {
        if self.window.is_zero() {
            builder.on_thread_park(kwh_sandbox::watchdog::thread_idle);
            return;
        }
        builder
            .on_thread_park(move || self.before_park())
            .on_thread_unpark(move || self.after_unpark());
    }

    fn before_park(self) {
        kwh_sandbox::watchdog::thread_idle();
        if self.waits(Instant::now()) {
            std::thread::sleep(self.window);
        }
        PARKED_AT.set(Some(Instant::now()));
    }

    fn after_unpark(self) {
        self.unparked(Instant::now());
    }

    /// Whether a thread about to park at `now` first waits the window: its last idle spell was
    /// short, and events are arriving fast.
    fn waits(self, now: Instant) -> bool {
        BUSY.get() && self.events_are_fast(now)
    }

    fn unparked(self, now: Instant) {
        if let Some(at) = PARKED_AT.take() {
            BUSY.set(now.saturating_duration_since(at) < self.window);
        }
    }

    /// Whether watch events arrived at [`MIN_EVENTS_PER_WINDOW`] a window or more over the
    /// last period; measured again once a period has passed (the first call starts one).
    fn events_are_fast(self, now: Instant) -> bool {
        let count = (self.events)();
        match PERIOD.get() {
            Some((start, _)) if now.duration_since(start) < RATE_PERIOD => FAST.get(),
            Some((start, then)) => {
                // events × window ≥ MIN × elapsed, in whole nanoseconds.
                let seen = u128::from(count.saturating_sub(then)) * self.window.as_nanos();
                let fast = seen
                    >= u128::from(MIN_EVENTS_PER_WINDOW) * now.duration_since(start).as_nanos();
                FAST.set(fast);
                PERIOD.set(Some((now, count)));
                fast
            }
            None => {
                PERIOD.set(Some((now, count)));
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    static EVENTS: AtomicU64 = AtomicU64::new(0);

    fn events() -> u64 {
        EVENTS.load(Ordering::Relaxed)
    }

    /// The rule on one thread, on a clock the test sets: a short idle spell makes the next park
    /// wait the window first, a long one does not; and only while events arrive at four a
    /// window or more. Broken by hand once (the rate ignored): the slow rate then batched.
    #[test]
    fn only_a_short_idle_spell_at_a_fast_event_rate_batches_the_next_park() {
        let window = Duration::from_millis(10);
        let b = Batching { window, events };
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);

        // Idle spells: woken 5 ms after parking is short, 50 ms long.
        PARKED_AT.set(Some(at(0)));
        b.unparked(at(5));
        assert!(BUSY.get());
        PARKED_AT.set(Some(at(10)));
        b.unparked(at(60));
        assert!(!BUSY.get());

        // A short one waits while the rate is high: 1,000 events in 150 ms, ~67 a window.
        BUSY.set(true);
        assert!(!b.waits(at(100)), "the first park starts a rate period");
        EVENTS.fetch_add(1_000, Ordering::Relaxed);
        assert!(b.waits(at(250)), "busy and fast: the window is waited");
        // Within the period the measurement stands.
        assert!(b.waits(at(300)));
        // A long idle spell never waits, whatever the rate.
        BUSY.set(false);
        assert!(!b.waits(at(310)), "idle: parks at once");
        BUSY.set(true);

        // Slow: 2 events in the next 150 ms, 0.13 a window (a neighbour's timers may still
        // wake the thread often; that alone does not batch).
        EVENTS.fetch_add(2, Ordering::Relaxed);
        assert!(!b.waits(at(400)), "busy but slow: parks at once");
        // Exactly the floor: 4 a window over 100 ms is 40 events.
        EVENTS.fetch_add(40, Ordering::Relaxed);
        assert!(b.waits(at(500)));
        EVENTS.fetch_add(39, Ordering::Relaxed);
        assert!(!b.waits(at(600)));
    }
}
