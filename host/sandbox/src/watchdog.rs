//! What advances the engine's epoch while guest code runs: a timer signal to the thread running
//! the guest (Linux), or the epoch ticker thread (the private `ticker` module) elsewhere and as a
//! fallback.
//!
//! Why not only the ticker: an epoch check is the only thing that can stop a guest looping in its
//! own code, so something outside the guest must advance the epoch every tick while guest code
//! runs. A ticker thread does that by waking every tick from a call's start until shortly after
//! the last one, and at the rates clusters deliver (events a few milliseconds apart, each guest
//! call a few microseconds) it never gets to park: 200 wake-ups a second, each two context
//! switches, about a fifth of the host's CPU at 1,000 events/s. A per-thread kernel timer costs
//! instead one system call when the thread starts running guests and one when it goes idle,
//! and it fires only while the thread is still busy a tick later: during a long call, which the
//! signal interrupts on its own thread without waking any other, or once after a long spell of
//! other work, when the signal disarms it.
//!
//! How: each thread that polls a guest call gets one POSIX timer whose signal goes to that
//! thread (`SIGEV_THREAD_ID`). Entering a poll marks the thread as running the engine's guests
//! and arms the timer (periodic, one tick) unless it is armed; leaving the poll only clears the
//! mark. The signal handler advances the epoch of the engine whose guest the thread is running,
//! or, when the thread is not in a guest poll, disarms the timer. A runtime thread about to park
//! disarms it too ([`thread_idle`]), so that an idle thread gets no signal at all. Everything
//! the handler touches is this thread's own state, in atomics, and one system call: nothing
//! allocates, locks, or reaches another thread.

use std::future::Future;
use std::time::Duration;

use wasmtime::Engine;

use super::ticker::Ticker;

/// How one engine's epoch advances.
pub(crate) enum Watchdog {
    /// Per-thread timer signals, and the ticker for calls on a thread that could not get a
    /// timer (started the first time it is needed).
    #[cfg(target_os = "linux")]
    Signal {
        tick: Duration,
        fallback: std::sync::OnceLock<Option<&'static Ticker>>,
    },
    /// The ticker thread.
    Ticker(&'static Ticker),
}

impl Watchdog {
    /// Timer signals where the platform has them and their handler could be installed, else
    /// the ticker thread; `force_ticker` picks the ticker (tests of the fallback).
    pub(crate) fn start(
        engine: &Engine,
        tick: Duration,
        force_ticker: bool,
    ) -> std::io::Result<Watchdog> {
        #[cfg(target_os = "linux")]
        if !force_ticker {
            match signal::install() {
                Ok(()) => {
                    return Ok(Watchdog::Signal {
                        tick,
                        fallback: std::sync::OnceLock::new(),
                    })
                }
                Err(e) => {
                    tracing::warn!(error = %e, "guest deadlines fall back to a ticker thread")
                }
            }
        }
        let _ = force_ticker;
        Ticker::start(engine, tick).map(Watchdog::Ticker)
    }

    /// Runs `fut`, a future that runs guest code of `engine`, with the epoch advancing while it
    /// does.
    pub(crate) async fn watch<F: Future>(&self, engine: &Engine, fut: F) -> F::Output {
        match self {
            #[cfg(target_os = "linux")]
            Watchdog::Signal { tick, fallback } => {
                let mut fut = std::pin::pin!(fut);
                let mut ticker = None;
                std::future::poll_fn(|cx| {
                    let _running = match signal::enter(engine, *tick) {
                        Ok(running) => Some(running),
                        Err(e) => {
                            // No timer on this thread (a resource limit): this call keeps a
                            // ticker thread ticking instead.
                            if ticker.is_none() {
                                let t = fallback.get_or_init(|| fallback_ticker(engine, *tick, e));
                                ticker = t.map(|t| t.busy());
                            }
                            None
                        }
                    };
                    fut.as_mut().poll(cx)
                })
                .await
            }
            Watchdog::Ticker(ticker) => {
                let _busy = ticker.busy();
                fut.await
            }
        }
    }
}

/// Starts the ticker for an engine whose calls on some thread could not get a timer.
#[cfg(target_os = "linux")]
fn fallback_ticker(
    engine: &Engine,
    tick: Duration,
    cause: std::io::Error,
) -> Option<&'static Ticker> {
    tracing::warn!(error = %cause, "no timer for a thread running guests; a ticker thread advances the epoch");
    match Ticker::start(engine, tick) {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::error!(error = %e, "cannot start the epoch ticker either: guest calls on that thread run without deadlines");
            None
        }
    }
}

/// Disarms this thread's timer if no guest call is being polled on it: for a runtime thread
/// about to park, so that an idle thread gets no signal. Cheap when there is nothing to do (one
/// thread-local read); does nothing off Linux.
pub fn thread_idle() {
    #[cfg(target_os = "linux")]
    signal::idle();
}

#[cfg(target_os = "linux")]
mod signal {
    use std::cell::RefCell;
    use std::ptr;
    use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
    use std::sync::OnceLock;
    use std::time::Duration;

    use wasmtime::Engine;

    thread_local! {
        /// The engine whose guest call this thread is polling; null outside a guest poll.
        static CURRENT: AtomicPtr<Engine> = const { AtomicPtr::new(ptr::null_mut()) };
        /// This thread's timer (`timer_t`), once `HAS_TIMER` (an ID, and 0 is one).
        static TIMER: AtomicPtr<libc::c_void> = const { AtomicPtr::new(ptr::null_mut()) };
        static HAS_TIMER: AtomicBool = const { AtomicBool::new(false) };
        /// Whether the timer is armed.
        static ARMED: AtomicBool = const { AtomicBool::new(false) };
        /// Deletes the timer when the thread ends (the others have no destructor, so the
        /// signal handler can read them at any time).
        static OWNER: RefCell<Option<TimerOwner>> = const { RefCell::new(None) };
    }

    #[cfg(test)]
    thread_local! {
        /// The handler's runs on this thread (tests observe that an idle thread gets none).
        pub(super) static FIRED: std::sync::atomic::AtomicU64 = const { std::sync::atomic::AtomicU64::new(0) };
    }

    /// A real-time signal: queued rather than merged with other signals, unused by the C
    /// library's threads (it reserves the first two), and by nothing else in the host.
    fn signal_number() -> libc::c_int {
        libc::SIGRTMIN() + 4
    }

    /// Installs the handler once per process.
    pub(super) fn install() -> std::io::Result<()> {
        static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
        INSTALLED
            .get_or_init(|| {
                // SAFETY: sigaction with a zeroed struct, then the fields set; the old action is
                // read first so that a handler someone else installed is not replaced.
                unsafe {
                    let sig = signal_number();
                    let mut old: libc::sigaction = std::mem::zeroed();
                    if libc::sigaction(sig, ptr::null(), &mut old) != 0 {
                        return Err(std::io::Error::last_os_error().to_string());
                    }
                    if old.sa_sigaction != libc::SIG_DFL {
                        return Err(format!("signal {sig} already has a handler"));
                    }
                    let mut action: libc::sigaction = std::mem::zeroed();
                    action.sa_sigaction = handler as *const () as usize;
                    action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
                    libc::sigemptyset(&mut action.sa_mask);
                    if libc::sigaction(sig, &action, ptr::null_mut()) != 0 {
                        return Err(std::io::Error::last_os_error().to_string());
                    }
                }
                Ok(())
            })
            .clone()
            .map_err(std::io::Error::other)
    }

    extern "C" fn handler(_sig: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
        #[cfg(test)]
        FIRED.with(|f| f.fetch_add(1, Ordering::Relaxed));
        let engine = CURRENT.with(|c| c.load(Ordering::Relaxed));
        if engine.is_null() {
            disarm();
        } else {
            // SAFETY: set by `enter` from a reference that outlives the poll this signal
            // interrupted (the handler runs on the polling thread, within the poll).
            unsafe { (*engine).increment_epoch() };
        }
    }

    /// This thread is polling a guest call of `engine` until the guard drops.
    pub(super) struct Running(*mut Engine);

    impl Drop for Running {
        fn drop(&mut self) {
            CURRENT.with(|c| c.store(self.0, Ordering::Relaxed));
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
        }
    }

    /// Marks this thread as polling a guest call of `engine`, and arms its timer unless armed.
    pub(super) fn enter(engine: &Engine, tick: Duration) -> std::io::Result<Running> {
        let prev =
            CURRENT.with(|c| c.swap(engine as *const Engine as *mut Engine, Ordering::Relaxed));
        let running = Running(prev);
        // The handler, from here on, advances the epoch and never disarms; so an armed timer
        // stays armed for the whole poll.
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        if !ARMED.with(|a| a.load(Ordering::Relaxed)) {
            arm(tick)?;
        }
        Ok(running)
    }

    fn arm(tick: Duration) -> std::io::Result<()> {
        let timer = match HAS_TIMER.with(|h| h.load(Ordering::Relaxed)) {
            true => TIMER.with(|t| t.load(Ordering::Relaxed)),
            false => create()?,
        };
        ARMED.with(|a| a.store(true, Ordering::Relaxed));
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        let period = libc::timespec {
            tv_sec: tick.as_secs() as libc::time_t,
            tv_nsec: tick.subsec_nanos() as libc::c_long,
        };
        let spec = libc::itimerspec {
            it_interval: period,
            it_value: period,
        };
        // SAFETY: a timer this thread created and has not deleted.
        if unsafe { libc::timer_settime(timer, 0, &spec, ptr::null_mut()) } != 0 {
            ARMED.with(|a| a.store(false, Ordering::Relaxed));
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Disarms this thread's timer if armed; async-signal-safe (the handler calls it).
    fn disarm() {
        if !ARMED.with(|a| a.swap(false, Ordering::Relaxed)) {
            return;
        }
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        if !HAS_TIMER.with(|h| h.load(Ordering::Relaxed)) {
            return;
        }
        let timer = TIMER.with(|t| t.load(Ordering::Relaxed));
        // SAFETY: zeroes disarm; the timer is this thread's own and still exists.
        unsafe {
            let stop: libc::itimerspec = std::mem::zeroed();
            libc::timer_settime(timer, 0, &stop, ptr::null_mut());
        }
    }

    pub(super) fn idle() {
        if CURRENT.with(|c| c.load(Ordering::Relaxed)).is_null() {
            disarm();
        }
    }

    /// Creates this thread's timer, its signal directed at this thread.
    fn create() -> std::io::Result<*mut libc::c_void> {
        // SAFETY: a zeroed sigevent with the fields for SIGEV_THREAD_ID set; gettid has no
        // failure mode.
        let timer = unsafe {
            let mut ev: libc::sigevent = std::mem::zeroed();
            ev.sigev_notify = libc::SIGEV_THREAD_ID;
            ev.sigev_signo = signal_number();
            ev.sigev_notify_thread_id = libc::syscall(libc::SYS_gettid) as libc::c_int;
            let mut timer: libc::timer_t = ptr::null_mut();
            if libc::timer_create(libc::CLOCK_MONOTONIC, &mut ev, &mut timer) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            timer
        };
        // Owned before it is published: a thread that ends deletes it.
        OWNER.with(|o| *o.borrow_mut() = Some(TimerOwner(timer)));
        TIMER.with(|t| t.store(timer, Ordering::Relaxed));
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        HAS_TIMER.with(|h| h.store(true, Ordering::Relaxed));
        Ok(timer)
    }

    struct TimerOwner(libc::timer_t);

    impl Drop for TimerOwner {
        fn drop(&mut self) {
            // Unpublished first, so a last signal finds no timer to touch.
            let _ = HAS_TIMER.try_with(|h| h.store(false, Ordering::Relaxed));
            let _ = ARMED.try_with(|a| a.store(false, Ordering::Relaxed));
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
            // SAFETY: created by this thread, deleted once.
            unsafe { libc::timer_delete(self.0) };
        }
    }

    #[cfg(test)]
    pub(super) fn armed() -> bool {
        ARMED.with(|a| a.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Instant;

    use wasmtime::{Config, Module, Store};

    /// `(module (func (export "spin") (loop (br 0))))`: a guest that never returns by itself.
    const SPIN: &[u8] = &[
        0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
        0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type: () -> ()
        0x03, 0x02, 0x01, 0x00, // function 0 of type 0
        0x07, 0x08, 0x01, 0x04, b's', b'p', b'i', b'n', 0x00, 0x00, // export "spin"
        0x0a, 0x09, 0x01, 0x07, 0x00, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b, // loop { br 0 }
    ];

    fn engine() -> Engine {
        let mut c = Config::new();
        c.epoch_interruption(true);
        Engine::new(&c).unwrap()
    }

    /// Calls the spinning guest under `watchdog` with an epoch deadline one tick away, on a
    /// thread of its own, and returns how long it took to be stopped; `None` if it was not
    /// stopped within ten seconds (that thread then spins until the test process ends).
    fn spin_until_stopped(force_ticker: bool) -> Option<Duration> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let e = engine();
            let dog = Watchdog::start(&e, Duration::from_millis(2), force_ticker).unwrap();
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let started = Instant::now();
            let r = rt.block_on(async {
                let module = Module::new(&e, SPIN).unwrap();
                let mut store = Store::new(&e, ());
                store.epoch_deadline_trap();
                store.set_epoch_deadline(1);
                let instance = wasmtime::Instance::new_async(&mut store, &module, &[])
                    .await
                    .unwrap();
                let spin = instance
                    .get_typed_func::<(), ()>(&mut store, "spin")
                    .unwrap();
                dog.watch(&e, spin.call_async(&mut store, ())).await
            });
            let _ = tx.send((r.is_err(), started.elapsed()));
        });
        let (trapped, took) = rx.recv_timeout(Duration::from_secs(10)).ok()?;
        assert!(trapped, "the spin call returned normally");
        Some(took)
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_timer_signal_stops_a_guest_looping_in_its_own_code() {
        let took = spin_until_stopped(false).expect("the looping guest was never interrupted");
        assert!(took < Duration::from_secs(5), "stopped only after {took:?}");
    }

    #[test]
    fn the_ticker_thread_stops_a_guest_looping_in_its_own_code() {
        let took = spin_until_stopped(true).expect("the looping guest was never interrupted");
        assert!(took < Duration::from_secs(5), "stopped only after {took:?}");
    }

    /// Waits until `cond` holds, in 1 ms sleeps (each of which a signal may cut short), for at
    /// most five seconds.
    #[cfg(target_os = "linux")]
    fn wait_for(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !cond() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[cfg(target_os = "linux")]
    fn fired() -> u64 {
        signal::FIRED.with(|f| f.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// A poll arms this thread's timer; it keeps firing only while a guest poll runs: after the
    /// poll, the first signal disarms it, or the park hook does before any signal.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_thread_gets_signals_only_while_it_polls_a_guest_call() {
        let e = engine();
        let tick = Duration::from_millis(1);
        let dog = Watchdog::start(&e, tick, false).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert!(!signal::armed());
        // A poll that lasts a few ticks: the handler runs (advancing the epoch) meanwhile.
        let before = fired();
        rt.block_on(dog.watch(&e, async {
            let until = Instant::now() + Duration::from_millis(20);
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }));
        assert!(
            fired() > before,
            "no signal during a 20 ms poll with a 1 ms tick"
        );
        assert!(signal::armed(), "the timer is left armed after the poll");
        // No park hook: the next signal finds no guest poll and disarms.
        wait_for("the timer was never disarmed", || !signal::armed());
        let after = fired();
        std::thread::sleep(tick * 20);
        assert_eq!(
            fired(),
            after,
            "signals kept coming after the timer was disarmed"
        );

        // With the park hook: disarmed at once, before any signal.
        rt.block_on(dog.watch(&e, async {}));
        assert!(signal::armed());
        thread_idle();
        assert!(!signal::armed(), "the park hook left the timer armed");
        let after = fired();
        std::thread::sleep(tick * 20);
        assert_eq!(fired(), after, "signals came to an idle thread");
    }
}
