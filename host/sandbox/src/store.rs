//! A guest's store: WASI with nothing ambient, capped memory and tables, and a deadline the
//! epoch callback checks.
//!
//! The store's data is [`Sandboxed<T>`]: what the sandbox needs of every store (the WASI
//! context, the limiter, the running call's deadline) around the embedder's own `T`, as
//! wasmtime's `Store<T>` is generic over its data. The embedder's imports see `T` alone
//! (`bindgen!`'s `add_to_linker` with a getter onto [`Sandboxed::data_mut`]).

use std::time::Instant;

use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{ResourceLimiter, Store, StoreLimitsBuilder, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::engine::Engine;

/// The caps of one store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLimits {
    /// Linear memory, in bytes, per memory.
    pub memory_bytes: usize,
    /// Elements per table.
    pub table_elements: usize,
}

/// The data of a guest's store: the sandbox's part and the embedder's `T`.
pub struct Sandboxed<T> {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: Limiter,
    /// When the running call's time is up (see [`crate::Instance::arm`]).
    pub(crate) deadline: Instant,
    /// Whether the epoch callback stopped the guest at its deadline.
    pub(crate) deadline_hit: bool,
    data: T,
}

impl<T> Sandboxed<T> {
    /// The embedder's data.
    pub fn data(&self) -> &T {
        &self.data
    }

    /// The embedder's data, mutably: what its imports are handed.
    pub fn data_mut(&mut self) -> &mut T {
        &mut self.data
    }
}

impl<T: Send + 'static> WasiView for Sandboxed<T> {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// wasmtime's `StoreLimits` plus a record of whether the memory cap was what stopped the guest,
/// so a trap after a refused `memory.grow` is reported as memory exhaustion rather than a
/// generic trap.
pub(crate) struct Limiter {
    limits: wasmtime::StoreLimits,
    pub(crate) memory_cap: usize,
    pub(crate) memory_denied: bool,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let ok = self.limits.memory_growing(current, desired, maximum)?;
        if !ok && desired > self.memory_cap {
            self.memory_denied = true;
        }
        Ok(ok)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }
    fn tables(&self) -> usize {
        self.limits.tables()
    }
    fn memories(&self) -> usize {
        self.limits.memories()
    }
}

/// The marker error the epoch callback (or a call's backstop) raises when a call's deadline
/// has passed.
#[derive(Debug)]
pub(crate) struct DeadlineExceeded;

impl std::fmt::Display for DeadlineExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline exceeded")
    }
}

impl std::error::Error for DeadlineExceeded {}

impl Engine {
    /// A linker for stores of guest data `T` with WASI 0.2 in it: what a store grants is
    /// decided per store ([`Engine::store`]: nothing ambient), the embedder adds its own
    /// imports.
    pub fn linker<T: Send + 'static>(&self) -> wasmtime::Result<Linker<Sandboxed<T>>> {
        let mut linker = Linker::new(self.engine());
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        Ok(linker)
    }

    /// A store for one guest instance, holding `data`. WASI comes from `wasi`, where the
    /// embedder sets what it grants (where stdout and stderr go, a clock: see
    /// [`crate::clock::use_clock`]); sockets and name lookups are refused whatever it says, and
    /// nothing else is ambient (no files, no environment, no arguments) unless it added them.
    /// Each epoch tick checks the running call's deadline: past it the call fails, before it
    /// the guest steps aside for the tasks I/O woke ([`crate::fairness`]).
    pub fn store<T: Send + 'static>(
        &self,
        limits: &StoreLimits,
        mut wasi: WasiCtxBuilder,
        data: T,
    ) -> Store<Sandboxed<T>> {
        wasi.allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        let state = Sandboxed {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limiter: Limiter {
                limits: StoreLimitsBuilder::new()
                    .memory_size(limits.memory_bytes)
                    .table_elements(limits.table_elements)
                    .instances(64)
                    .tables(64)
                    .memories(8)
                    .build(),
                memory_cap: limits.memory_bytes,
                memory_denied: false,
            },
            deadline: Instant::now(),
            deadline_hit: false,
            data,
        };
        let mut store = Store::new(self.engine(), state);
        store.limiter(|s| &mut s.limiter);
        store.epoch_deadline_callback(|mut ctx| {
            if Instant::now() >= ctx.data().deadline {
                ctx.data_mut().deadline_hit = true;
                Err(wasmtime::Error::new(DeadlineExceeded))
            } else {
                // Not late yet: let the other tasks run, then check again next tick.
                Ok(UpdateDeadline::YieldCustom(
                    1,
                    Box::pin(crate::fairness::yield_behind_woken()),
                ))
            }
        });
        store.set_epoch_deadline(1);
        store
    }
}
