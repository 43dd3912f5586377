//! A live guest instance: its store, deadlines armed per call, and what a failed call was.
//!
//! When a call traps, runs past its deadline or exhausts its memory, the store may be in any
//! state: the embedder throws the instance away ([`Instance::discard`]) and makes a fresh one
//! for the next call. [`Instance::fault`] says which of those it was, so that it can be
//! counted and reported as the operator configured it (a deadline, a memory cap), not as a
//! generic trap.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::Either;
use wasmtime::component::InstancePre;
use wasmtime::Store;

use crate::engine::Engine;
use crate::store::{DeadlineExceeded, Sandboxed};

/// Why a guest call failed. After any of these the instance is to be discarded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuestError {
    /// The call ran past its deadline.
    #[error("deadline exceeded after {0:?}")]
    DeadlineExceeded(Duration),
    /// The guest tried to grow its memory beyond the cap.
    #[error("memory limit of {limit} bytes exceeded")]
    MemoryExhausted {
        /// The cap in bytes.
        limit: usize,
    },
    /// The guest trapped (panic, unreachable, out-of-bounds access, stack overflow, ...).
    #[error("guest trapped: {0}")]
    Trap(String),
    /// A fresh instance could not be created.
    #[error("instantiation failed: {0}")]
    Instantiate(String),
    /// The guest already has its maximum number of instances.
    #[error("instance limit of {0} reached")]
    TooManyInstances(u32),
    /// The guest returned more than the embedder allows for that result: taken as a fault of
    /// the guest (copying it out cost the host already), not as an answer.
    #[error("{what} of {bytes} bytes, over the {limit} allowed")]
    ResultTooLarge {
        /// The result, as the embedder names it.
        what: &'static str,
        /// Its length.
        bytes: usize,
        /// The bound.
        limit: usize,
    },
}

/// Counters of what happened to one guest's instances (metrics read these).
#[derive(Debug, Default)]
pub struct InstanceStats {
    /// Instances created (first ones and replacements).
    pub instantiations: AtomicU64,
    /// Calls that trapped.
    pub traps: AtomicU64,
    /// Calls that ran past their deadline.
    pub deadline_hits: AtomicU64,
    /// Calls that hit the memory cap.
    pub memory_exhaustions: AtomicU64,
}

impl InstanceStats {
    /// Counts a failed call.
    pub fn count(&self, e: &GuestError) {
        let counter = match e {
            GuestError::DeadlineExceeded(_) => &self.deadline_hits,
            GuestError::MemoryExhausted { .. } => &self.memory_exhaustions,
            GuestError::Trap(_) => &self.traps,
            _ => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// One instantiated component in its store.
pub struct Instance<T: 'static> {
    store: Store<Sandboxed<T>>,
    instance: wasmtime::component::Instance,
    /// Runs the calls into `store` under deadlines.
    engine: Engine,
}

impl<T: Send + 'static> Instance<T> {
    /// Instantiates `pre` in `store` (made by [`Engine::store`]) within `deadline`.
    pub async fn new(
        engine: &Engine,
        pre: &InstancePre<Sandboxed<T>>,
        mut store: Store<Sandboxed<T>>,
        deadline: Duration,
        stats: &InstanceStats,
    ) -> Result<Self, GuestError> {
        store.data_mut().deadline = Instant::now() + deadline;
        store.set_epoch_deadline(1);
        let instance = engine
            .watch(pre.instantiate_async(&mut store))
            .await
            .map_err(|e| GuestError::Instantiate(format!("{e:#}")))?;
        stats.instantiations.fetch_add(1, Ordering::Relaxed);
        Ok(Instance {
            store,
            instance,
            engine: engine.clone(),
        })
    }

    /// The component instance, to look its exports up.
    pub fn component(&self) -> &wasmtime::component::Instance {
        &self.instance
    }

    /// The store.
    pub fn store(&self) -> &Store<Sandboxed<T>> {
        &self.store
    }

    /// The store, mutably.
    pub fn store_mut(&mut self) -> &mut Store<Sandboxed<T>> {
        &mut self.store
    }

    /// The store to call into and the engine whose [`Engine::watch`] the call runs under.
    pub fn parts(&mut self) -> (&mut Store<Sandboxed<T>>, &Engine) {
        (&mut self.store, &self.engine)
    }

    /// Sets the next call's deadline `deadline` from now, and returns now (one clock read per
    /// call).
    pub fn arm(&mut self, deadline: Duration) -> Instant {
        self.arm_at(deadline, Instant::now())
    }

    /// [`Self::arm`] from `now`, a clock read the caller just made.
    pub fn arm_at(&mut self, deadline: Duration, now: Instant) -> Instant {
        self.store.data_mut().deadline = now + deadline;
        self.store.set_epoch_deadline(1);
        now
    }

    /// What the failure `e` of a call armed with `deadline` was: the deadline, the memory cap,
    /// or a trap of the guest's own.
    pub fn fault(&self, e: &wasmtime::Error, deadline: Duration) -> GuestError {
        let data = self.store.data();
        if data.deadline_hit || e.is::<DeadlineExceeded>() {
            GuestError::DeadlineExceeded(deadline)
        } else if data.limiter.memory_denied {
            GuestError::MemoryExhausted {
                limit: data.limiter.memory_cap,
            }
        } else {
            GuestError::Trap(e.root_cause().to_string())
        }
    }

    /// Drops a failed instance off the runtime's threads when there is a runtime: giving back
    /// its pool slot resets its memory (up to its cap, 64 MiB by default) and tables,
    /// milliseconds that every other task on the thread would otherwise wait out.
    pub fn discard(self) {
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn_blocking(move || drop(self));
            }
            Err(_) => drop(self),
        }
    }
}

/// A bound on a call that also waits on the host (an import doing network I/O): epoch checks
/// only run while guest code runs, so a host call that never returns is caught here instead.
/// Counted on tokio's clock, as every wait of the host is (a simulation's clock too: a bound
/// read off the machine's clock and compared with tokio's would pass at once there). Its timer
/// is kept from call to call (a new timer per call is an insertion into and a removal from the
/// timer wheel under the driver's lock).
#[derive(Default)]
pub struct Backstop(Option<Pin<Box<tokio::time::Sleep>>>);

impl Backstop {
    /// Runs `call`, failing it with a deadline error if it has not finished `bound` after it
    /// first waited. The clock is read only then: a call that finishes without waiting (most
    /// do) costs no clock read, and the time before its first wait is guest code, which the
    /// epoch deadline bounds.
    pub async fn run<R>(
        &mut self,
        call: impl Future<Output = wasmtime::Result<R>>,
        bound: Duration,
    ) -> wasmtime::Result<R> {
        let slot = &mut self.0;
        let passed = async move {
            let at = tokio::time::Instant::now() + bound;
            let timer = match slot {
                Some(t) => t,
                None => slot.insert(Box::pin(tokio::time::sleep_until(at))),
            };
            // The timer is re-armed only when it fires before this call's bound. It is never
            // set later than that (each call's bound is later than the last one's), and
            // resetting it for every call cost a timer-wheel removal and insertion each.
            loop {
                timer.as_mut().await;
                if tokio::time::Instant::now() >= at {
                    return;
                }
                timer.as_mut().reset(at);
            }
        };
        let call = std::pin::pin!(call);
        let passed = std::pin::pin!(passed);
        match futures_util::future::select(call, passed).await {
            Either::Left((res, _)) => res,
            Either::Right(_) => Err(wasmtime::Error::new(DeadlineExceeded)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_backstop_fails_a_call_that_outlives_it_and_lets_one_that_does_not_finish() {
        let mut b = Backstop::default();
        let start = tokio::time::Instant::now();
        let done = b
            .run(async { Ok(7) }, Duration::from_secs(2))
            .await
            .expect("finished");
        assert_eq!(done, 7);
        let stuck = b.run(
            std::future::pending::<wasmtime::Result<()>>(),
            Duration::from_secs(2),
        );
        let err = stuck.await.expect_err("bounded");
        assert!(err.is::<DeadlineExceeded>(), "{err:#}");
        let bound = start + Duration::from_secs(2);
        assert_eq!(tokio::time::Instant::now(), bound);
        // The timer is kept, and moved for a later bound.
        let err = b.run(
            std::future::pending::<wasmtime::Result<()>>(),
            Duration::from_secs(5),
        );
        assert!(err.await.is_err());
        assert_eq!(tokio::time::Instant::now(), bound + Duration::from_secs(5));
    }

    #[test]
    fn stats_count_what_the_guest_did_not_what_the_host_refused() {
        let s = InstanceStats::default();
        s.count(&GuestError::Trap("unreachable".into()));
        s.count(&GuestError::DeadlineExceeded(Duration::from_secs(1)));
        s.count(&GuestError::MemoryExhausted { limit: 1 });
        s.count(&GuestError::TooManyInstances(2));
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        assert_eq!(
            (
                read(&s.traps),
                read(&s.deadline_hits),
                read(&s.memory_exhaustions)
            ),
            (1, 1, 1)
        );
    }
}
