//! The epoch ticker: the thread whose epoch increments enforce guest deadlines and make long
//! guest calls yield to tokio, running only while guest calls are in flight or recent. On Linux
//! the per-thread timer signals of [`crate::watchdog`] do this job, without waking a thread; the
//! ticker is what other platforms use, and the fallback where no timer can be made.
//!
//! Why it sleeps: a ticker that always ticks wakes the process every tick (200 times a second)
//! even when no event arrives for hours, which is most of a controller's life; it was nearly
//! all of an idle host's CPU. Why it must tick for the whole call: an epoch check is the only
//! thing that can stop a guest looping in its own code (a wall-clock timer cannot fire while
//! the fiber never returns to tokio), so it may not pause while any call is running, even one
//! blocked in a host import for a long time.
//!
//! Why it lingers: parking as soon as no call is in flight made every call at a steady event
//! rate (one every millisecond, each a microsecond long) wake the parked thread again, a futex
//! wake on the calling thread and two context switches on the ticker's, about a fifth of the
//! host's CPU at 1,000 events/s. The ticker now parks only after [`LINGER_TICKS`] ticks in
//! which no call started, so calls arriving closer together than that never wake it; idle, it
//! still parks within a few ticks.
//!
//! Calls are counted in per-thread shards (each a cache line of its own), so starting and
//! ending a call costs two uncontended atomic operations and never bounces a line between the
//! threads running guests; the ticker sums the shards.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::Thread;
use std::time::Duration;

use wasmtime::Engine;

const SHARDS: usize = 16;

/// While idle, the ticker still wakes this often to notice that its engine is gone.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// Ticks without a call starting after which the ticker parks (20 ms at the default 5 ms tick).
const LINGER_TICKS: u32 = 4;

/// Calls started and ended on one thread; both only grow, so their sums over the shards give
/// the calls in flight and show whether any call started since the ticker last looked.
#[repr(align(128))]
#[derive(Default)]
struct Shard {
    started: AtomicUsize,
    ended: AtomicUsize,
}

/// Guest calls in flight, and the ticker thread to wake when the first one starts.
pub(crate) struct Ticker {
    shards: [Shard; SHARDS],
    parked: AtomicBool,
    thread: Thread,
}

fn shard_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    INDEX.with(|i| *i)
}

impl Ticker {
    /// Starts the ticker thread for `engine`, incrementing its epoch every `tick` while a call
    /// is in flight or one started within the last few ticks; it ends once the engine is
    /// dropped.
    ///
    /// The ticker is leaked (a few kilobytes per engine, and a process makes one engine; tests
    /// make a few dozen): a `'static` reference lets every call mark itself busy without
    /// touching a reference count shared by all the threads running guests.
    pub(crate) fn start(engine: &Engine, tick: Duration) -> std::io::Result<&'static Ticker> {
        let weak = engine.weak();
        let tick = tick.max(Duration::from_millis(1));
        let (tx, rx) = std::sync::mpsc::sync_channel::<&'static Ticker>(1);
        let handle = std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || {
                let Ok(ticker) = rx.recv() else { return };
                // From zero, the counters' start, not from a first read: a call that started
                // before this thread first ran must be seen as one (it was missed, untimed, when
                // the engine's first call came before the thread was scheduled).
                let mut seen = 0;
                // Starts parked: an engine is made before any call.
                let mut quiet = LINGER_TICKS;
                loop {
                    if quiet >= LINGER_TICKS {
                        // Announce the park, then look again: a call that started in between
                        // either is seen here or sees `parked` and unparks this thread.
                        ticker.parked.store(true, Ordering::SeqCst);
                        if ticker.started() == seen {
                            std::thread::park_timeout(IDLE_CHECK);
                        }
                        ticker.parked.store(false, Ordering::SeqCst);
                        if weak.upgrade().is_none() {
                            return;
                        }
                        if ticker.started() == seen {
                            continue;
                        }
                    }
                    std::thread::sleep(tick);
                    match weak.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => return,
                    }
                    let started = ticker.started();
                    if started != seen || ticker.in_flight() != 0 {
                        seen = started;
                        quiet = 0;
                    } else {
                        quiet += 1;
                    }
                }
            })?;
        let ticker: &'static Ticker = Box::leak(Box::new(Ticker {
            shards: Default::default(),
            parked: AtomicBool::new(false),
            thread: handle.thread().clone(),
        }));
        // The thread waits for its own handle; it cannot fail to receive it while it lives.
        let _ = tx.send(ticker);
        Ok(ticker)
    }

    fn started(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.started.load(Ordering::SeqCst))
            .fold(0, usize::wrapping_add)
    }

    fn in_flight(&self) -> usize {
        // Ended first: a call that ends between the two reads is then counted as in flight,
        // never the other way round (which would underflow).
        let ended = self
            .shards
            .iter()
            .map(|s| s.ended.load(Ordering::SeqCst))
            .fold(0, usize::wrapping_add);
        self.started().wrapping_sub(ended)
    }

    /// Marks a guest call in flight until the guard drops (the ticker ticks meanwhile).
    pub(crate) fn busy(&'static self) -> Busy {
        self.shards[shard_index()]
            .started
            .fetch_add(1, Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) {
            self.thread.unpark();
        }
        Busy(self)
    }
}

/// A guest call in flight; see [`Ticker::busy`].
pub(crate) struct Busy(&'static Ticker);

impl Drop for Busy {
    fn drop(&mut self) {
        // Counted on the thread that ends the call, which may not be the one that started it:
        // only the sums mean anything.
        self.0.shards[shard_index()]
            .ended
            .fetch_add(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn engine() -> Engine {
        let mut c = wasmtime::Config::new();
        c.epoch_interruption(true);
        Engine::new(&c).unwrap()
    }

    #[test]
    fn it_ticks_while_a_call_is_in_flight_and_parks_soon_after() {
        let e = engine();
        let t = Ticker::start(&e, Duration::from_millis(1)).unwrap();
        // Idle: the thread parks (give it a moment to get there).
        let deadline = Instant::now() + Duration::from_secs(5);
        while !t.parked.load(Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "the idle ticker never parked");
            std::thread::sleep(Duration::from_millis(1));
        }
        {
            let _busy = t.busy();
            assert_eq!(t.in_flight(), 1);
            let deadline = Instant::now() + Duration::from_secs(5);
            while t.parked.load(Ordering::SeqCst) {
                assert!(Instant::now() < deadline, "a call did not wake the ticker");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        assert_eq!(t.in_flight(), 0);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !t.parked.load(Ordering::SeqCst) {
            assert!(
                Instant::now() < deadline,
                "the ticker kept ticking long after the call"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn calls_started_and_ended_on_different_threads_still_sum_to_zero() {
        let e = engine();
        let t = Ticker::start(&e, Duration::from_millis(1)).unwrap();
        let guards: Vec<_> = (0..4).map(|_| t.busy()).collect();
        assert_eq!(t.in_flight(), 4);
        std::thread::scope(|s| {
            s.spawn(move || drop(guards));
        });
        assert_eq!(t.in_flight(), 0);
    }
}
