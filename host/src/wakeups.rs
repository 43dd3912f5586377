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

use std::cell::Cell;
use std::time::{Duration, Instant};

thread_local! {
    /// When this thread last parked (after any batching sleep).
    static PARKED_AT: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Whether its last idle spell was shorter than the window.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// The window and the runtime hooks that apply it; `Duration::ZERO` turns batching off.
#[derive(Debug, Clone, Copy)]
pub struct Batching {
    window: Duration,
}

impl Batching {
    pub fn new(window: Duration) -> Self {
        Batching { window }
    }

    /// Adds the park and unpark hooks to `builder`. Even with a zero window a thread about to
    /// park disarms its guest-deadline timer ([`kwh_plugin::watchdog::thread_idle`]): an idle
    /// thread then gets no timer signal, where it would otherwise get one more after its last
    /// guest call.
    pub fn install(self, builder: &mut tokio::runtime::Builder) {
        if self.window.is_zero() {
            builder.on_thread_park(kwh_plugin::watchdog::thread_idle);
            return;
        }
        builder
            .on_thread_park(move || self.before_park())
            .on_thread_unpark(move || self.after_unpark());
    }

    fn before_park(self) {
        kwh_plugin::watchdog::thread_idle();
        if BUSY.get() {
            std::thread::sleep(self.window);
        }
        PARKED_AT.set(Some(Instant::now()));
    }

    fn after_unpark(self) {
        if let Some(at) = PARKED_AT.take() {
            BUSY.set(at.elapsed() < self.window);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule on one thread: a short idle spell makes the next park wait the window first; a
    /// long one does not.
    #[test]
    fn only_a_short_idle_spell_batches_the_next_park() {
        let b = Batching::new(Duration::from_millis(20));
        BUSY.set(false);
        let t = Instant::now();
        b.before_park();
        assert!(t.elapsed() < Duration::from_millis(20), "no wait when idle");
        // Woken at once: events arrive faster than the window.
        b.after_unpark();
        assert!(BUSY.get());
        let t = Instant::now();
        b.before_park();
        assert!(
            t.elapsed() >= Duration::from_millis(20),
            "the window is waited"
        );
        // Woken after a long idle spell: back to parking at once.
        PARKED_AT.set(Some(Instant::now() - Duration::from_millis(50)));
        b.after_unpark();
        assert!(!BUSY.get());
    }
}
