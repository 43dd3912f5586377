//! The epoch ticker: the thread whose epoch increments enforce guest deadlines and make long
//! guest calls yield to tokio, running only while a guest call is in flight.
//!
//! Why it sleeps: a ticker that always ticks wakes the process every tick (200 times a second)
//! even when no event arrives for hours, which is most of a controller's life; it was nearly
//! all of an idle host's CPU. Why it must tick for the whole call: an epoch check is the only
//! thing that can stop a guest looping in its own code (a wall-clock timer cannot fire while
//! the fiber never returns to tokio), so it may not pause while any call is running, even one
//! blocked in a host import for a long time.
//!
//! Calls are counted in per-thread shards (each a cache line of its own), so starting and
//! ending a call costs two uncontended atomic operations and never bounces a line between the
//! threads running guests; the ticker sums the shards.

use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};
use std::thread::Thread;
use std::time::Duration;

use wasmtime::Engine;

const SHARDS: usize = 16;

/// While idle, the ticker still wakes this often to notice that its engine is gone.
const IDLE_CHECK: Duration = Duration::from_secs(1);

#[repr(align(128))]
#[derive(Default)]
struct Shard(AtomicIsize);

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
    /// is in flight; it ends once the engine is dropped.
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
                loop {
                    if ticker.in_flight() == 0 {
                        // Announce the park, then look again: a call that started in between
                        // either is seen here or sees `parked` and unparks this thread.
                        ticker.parked.store(true, Ordering::SeqCst);
                        if ticker.in_flight() == 0 {
                            std::thread::park_timeout(IDLE_CHECK);
                        }
                        ticker.parked.store(false, Ordering::SeqCst);
                        if weak.upgrade().is_none() {
                            return;
                        }
                        continue;
                    }
                    std::thread::sleep(tick);
                    match weak.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => return,
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

    fn in_flight(&self) -> isize {
        self.shards.iter().map(|s| s.0.load(Ordering::SeqCst)).sum()
    }

    /// Marks a guest call in flight until the guard drops (the ticker ticks meanwhile).
    pub(crate) fn busy(&'static self) -> Busy {
        self.shards[shard_index()].0.fetch_add(1, Ordering::SeqCst);
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
        // Another thread's shard may go negative: only the sum means anything.
        self.0.shards[shard_index()]
            .0
            .fetch_sub(1, Ordering::SeqCst);
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
    fn it_ticks_only_while_a_call_is_in_flight() {
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
                "the ticker kept ticking after the call"
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
