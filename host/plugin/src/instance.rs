//! Sandboxed guest instances: one store each, with deadlines, memory caps and replacement.
//!
//! A [`PluginInstance`] belongs to one reconcile worker, used by that task alone (`&mut self`),
//! or to the plugin's dispatcher, whose watch listeners take turns on it behind an async mutex:
//! that wait is the point (a plugin's notifications reach its guest one at a time, in order),
//! and the mutex guards nothing else, so no shared-state lock is held across a guest call. It
//! instantiates lazily; when a call traps, runs past its deadline or exhausts its memory, the
//! store is thrown away (its state may be inconsistent) and the next call starts from a fresh
//! instance.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::Either;
use kwh_client::object::Object;
use wasmtime::component::{ComponentType, Func, Lower, ResourceTable, TypedFunc};
use wasmtime::{ResourceLimiter, Store, StoreLimits, StoreLimitsBuilder, UpdateDeadline};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView};

use super::backend::Backends;
use super::bindings::v0_2::kube::controller::types as wit;
use super::engine::{PluginEngine, DEFAULT_MAX_MEMORY};
use super::guest_log::GuestLog;
use super::handover::HandedOver;
use super::loader::{Contract, PluginInner};
use super::manifest::Manifest;
use super::stdio::{LogStream, Stream};

/// Per-plugin sandbox limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Deadline of one `on-add`/`on-update`/`on-delete` call (and of `manifest`). Handlers should
    /// only enqueue keys, so this is short: a slow handler stalls the plugin's event stream.
    pub handler_deadline: Duration,
    /// Deadline of one `reconcile` call, wall-clock, including time spent in host calls (API
    /// writes), so a reconcile cannot hold its worker forever.
    pub reconcile_deadline: Duration,
    /// Linear memory cap per instance.
    pub memory_bytes: usize,
    /// Table elements cap per table.
    pub table_elements: usize,
    /// Instances per plugin (workers plus the dispatcher); further `instance()` calls fail.
    pub max_instances: u32,
    /// Keys the plugin's workqueue may hold (queued and waiting to be added after a delay):
    /// the queue lives in host memory, outside the guest's cap, so a guest enqueueing keys in
    /// a loop must meet a bound. Further adds of new keys are refused and counted.
    pub max_queued_keys: usize,
    /// Log lines (its `log` import, stdout and stderr) the plugin may write per second,
    /// sustained, after a burst of ten seconds' worth (at least 1,000); 0 lets every line
    /// through. See [`crate::guest_log`].
    pub log_lines_per_second: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            handler_deadline: Duration::from_secs(1),
            reconcile_deadline: Duration::from_secs(10),
            memory_bytes: DEFAULT_MAX_MEMORY,
            table_elements: 20_000,
            max_instances: 16,
            // Far above the objects a plugin's caches hold in practice (the benchmarks watch
            // 100,000), far below what would threaten the host: ~100 bytes a key.
            max_queued_keys: 1_000_000,
            log_lines_per_second: crate::guest_log::PER_SECOND,
        }
    }
}

/// Why a guest call failed. After any of these the instance has been discarded.
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
    /// The plugin already has its maximum number of instances.
    #[error("instance limit of {0} reached")]
    TooManyInstances(u32),
    /// A reconcile's error message was longer than [`MAX_ERROR_MESSAGE`]: taken as a fault of
    /// the plugin, not as its report on the key.
    #[error("reconcile returned an error message of {bytes} bytes, over the {MAX_ERROR_MESSAGE} allowed")]
    ErrorTooLong {
        /// The message's length.
        bytes: usize,
    },
}

/// The longest error message a reconcile may return, in bytes. The host must copy the whole
/// string out of the guest before it can look at it: a guest returning 24 MiB on every
/// attempt held the runtime thread for milliseconds each time, as often as its backoff let
/// it. Past this bound the attempt counts as a failure of the plugin, so that quarantine
/// stops the repeats; a real message is far shorter (an Event's note is at most 1 KiB).
pub const MAX_ERROR_MESSAGE: usize = 64 << 10;

/// The clocks a guest reads through WASI (`wasi:clocks`), when they are not the host's own.
///
/// Production instances always see the real clocks. The test harness substitutes a virtual
/// clock, so a guest that computes an expiry from `SystemTime::now()` (or measures an interval
/// with `Instant`) can be driven through time deterministically instead of by sleeping.
pub trait GuestClock: Send + Sync + 'static {
    /// Wall-clock time as a duration since the Unix epoch (`wasi:clocks/wall-clock.now`).
    fn wall(&self) -> Duration;
    /// Monotonic time in nanoseconds since an arbitrary fixed point; never goes backwards
    /// (`wasi:clocks/monotonic-clock.now`).
    fn monotonic_ns(&self) -> u64;
}

/// Adapts a shared [`GuestClock`] to wasmtime-wasi's wall-clock trait (one per store).
struct WallOf(Arc<dyn GuestClock>);

impl HostWallClock for WallOf {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }
    fn now(&self) -> Duration {
        self.0.wall()
    }
}

/// Adapts a shared [`GuestClock`] to wasmtime-wasi's monotonic-clock trait (one per store).
struct MonotonicOf(Arc<dyn GuestClock>);

impl HostMonotonicClock for MonotonicOf {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        self.0.monotonic_ns()
    }
}

/// Counters of what happened to a plugin's instances (metrics read these).
#[derive(Debug, Default)]
pub struct PluginStats {
    /// Instances created (first ones and replacements).
    pub instantiations: AtomicU64,
    /// Calls that trapped.
    pub traps: AtomicU64,
    /// Calls that ran past their deadline.
    pub deadline_hits: AtomicU64,
    /// Calls that hit the memory cap.
    pub memory_exhaustions: AtomicU64,
}

/// What the host-side import implementations see of their plugin.
pub(crate) struct PluginCtx {
    pub(crate) name: Arc<str>,
    pub(crate) manifest: Arc<Manifest>,
    pub(crate) backends: Backends,
    /// The operator's configuration of this plugin, as JSON (`null` when none).
    pub(crate) config: Arc<serde_json::Value>,
    /// `config` serialized once, as `config.get` and `validate-config` hand it to the guest.
    pub(crate) config_json: Bytes,
    /// The handlers the guest has handed over to the host (`queue.enqueue-own-keys`).
    pub(crate) handed_over: Arc<HandedOver>,
    /// What the plugin may put in the host's log (its `log` import, stdout and stderr).
    pub(crate) log: Arc<GuestLog>,
}

/// The data of a guest's store.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: Limiter,
    deadline: Instant,
    deadline_hit: bool,
    pub(crate) ctx: Arc<PluginCtx>,
    /// The key of the reconcile running in this store, when `reconciling`: a buffer reused
    /// call to call (every reconcile sets it; only a write reads it).
    reconcile_key: String,
    reconciling: bool,
}

impl HostState {
    /// The key of the reconcile running in this store, if one is.
    pub(crate) fn reconciling(&self) -> Option<&str> {
        self.reconciling.then_some(self.reconcile_key.as_str())
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// `StoreLimits` plus a record of whether the memory cap was what stopped the guest, so a trap
/// after a refused `memory.grow` is reported as memory exhaustion rather than a generic trap.
struct Limiter {
    limits: StoreLimits,
    memory_cap: usize,
    memory_denied: bool,
}

/// The marker error the epoch callback raises when a call's deadline has passed.
#[derive(Debug)]
struct DeadlineExceeded;

impl std::fmt::Display for DeadlineExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline exceeded")
    }
}

impl std::error::Error for DeadlineExceeded {}

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

/// A live instance: its store and the exports called on the hot path.
/// Drops a failed instance off the runtime's threads when there is a runtime: giving back its
/// pool slot resets its memory (up to its cap, 64 MiB by default) and tables, milliseconds
/// that every other plugin on the thread would otherwise wait out.
fn discard(live: Live) {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn_blocking(move || drop(live));
        }
        Err(_) => drop(live),
    }
}

pub(crate) struct Live {
    pub(crate) store: Store<HostState>,
    /// Runs the calls into `store` under deadlines.
    engine: PluginEngine,
    contract: Contract,
    pub(crate) manifest: Func,
    on_add: Func,
    on_update: Func,
    on_delete: Func,
    reconcile: Func,
    validate_config: Option<Func>,
}

/// 0.2.0's `cached-object`: the JSON, and its metadata as positions in it (the flat `meta`
/// block of the WIT), lowered straight from the cached object's parsed spans. Each object is two
/// blocks of guest memory, where strings would cost a guest allocation each.
#[derive(ComponentType, Lower)]
#[component(record)]
struct ObjectArg<'a> {
    json: &'a [u8],
    meta: &'a [u32],
    generation: i64,
}

/// Bits of `meta[0]`.
const VERBATIM: u32 = 1;
const DELETING: u32 = 2;

impl<'a> ObjectArg<'a> {
    /// `meta` is the caller's scratch buffer, refilled for this object.
    fn of(o: &'a Object, meta: &'a mut Vec<u32>) -> Self {
        meta.clear();
        meta.resize(9, 0);
        let generation = match o.verbatim_meta(meta) {
            Some(m) => {
                let spans = [m.namespace, m.name, m.uid, m.resource_version];
                meta[0] = VERBATIM | if m.deleting { DELETING } else { 0 };
                for (i, s) in spans.iter().enumerate() {
                    meta[1 + 2 * i] = s.start;
                    meta[2 + 2 * i] = s.len;
                }
                m.generation
            }
            None => {
                let m = o.meta();
                meta.truncate(1);
                meta[0] = if m.deletion_timestamp.is_some() {
                    DELETING
                } else {
                    0
                };
                m.generation
            }
        };
        ObjectArg {
            json: o.raw(),
            meta,
            generation,
        }
    }
}

type OnAdd<'a> = TypedFunc<(u32, &'a [u8]), ()>;
type OnUpdate<'a> = TypedFunc<(u32, &'a [u8], &'a [u8]), ()>;
type OnDelete<'a> = TypedFunc<(u32, &'a [u8], bool), ()>;
type OnAdd2<'a> = TypedFunc<(u32, ObjectArg<'a>), ()>;
type OnUpdate2<'a> = TypedFunc<(u32, ObjectArg<'a>, ObjectArg<'a>), ()>;
type OnDelete2<'a> = TypedFunc<(u32, ObjectArg<'a>, bool), ()>;
type Reconcile<'a> = TypedFunc<(&'a str,), (Result<wit::Outcome, String>,)>;
type ValidateConfig<'a> = TypedFunc<(&'a [u8],), (Result<(), String>,)>;
pub(crate) type ManifestFn = TypedFunc<(), (wit::Manifest,)>;

/// `func` checked against the signature `P -> R` (the caller names it by its alias).
fn typed<P, R>(
    func: wasmtime::component::Func,
    store: &Store<HostState>,
) -> Result<TypedFunc<P, R>, GuestError>
where
    P: wasmtime::component::ComponentNamedList + wasmtime::component::Lower,
    R: wasmtime::component::ComponentNamedList + wasmtime::component::Lift,
{
    func.typed::<P, R>(store)
        .map_err(|e| GuestError::Instantiate(format!("{e:#}")))
}

/// Creates a store with nothing ambient and instantiates the plugin in it.
pub(crate) async fn instantiate(
    inner: &PluginInner,
    ctx: &Arc<PluginCtx>,
) -> Result<Live, GuestError> {
    instantiate_with_clock(inner, ctx, None).await
}

/// [`instantiate`], with the guest's WASI clocks replaced by `clock` when one is given.
async fn instantiate_with_clock(
    inner: &PluginInner,
    ctx: &Arc<PluginCtx>,
    clock: Option<&Arc<dyn GuestClock>>,
) -> Result<Live, GuestError> {
    let mut wasi = WasiCtx::builder();
    wasi.stdout(LogStream::new(ctx.log.clone(), Stream::Stdout))
        .stderr(LogStream::new(ctx.log.clone(), Stream::Stderr))
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
    if let Some(c) = clock {
        wasi.wall_clock(WallOf(c.clone()))
            .monotonic_clock(MonotonicOf(c.clone()));
    }
    let limits = &inner.limits;
    let state = HostState {
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
        deadline: Instant::now() + limits.handler_deadline,
        deadline_hit: false,
        reconcile_key: String::new(),
        reconciling: false,
        ctx: ctx.clone(),
    };
    let mut store = Store::new(inner.engine.engine(), state);
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
    let instance = inner
        .engine
        .watch(inner.pre.instantiate_async(&mut store))
        .await
        .map_err(|e| GuestError::Instantiate(format!("{e:#}")))?;
    inner.stats.instantiations.fetch_add(1, Ordering::Relaxed);
    let ex = &inner.exports;
    let mut get = |idx| {
        instance
            .get_func(&mut store, idx)
            .ok_or_else(|| GuestError::Instantiate("export missing after instantiation".into()))
    };
    let (manifest, on_add, on_update, on_delete, reconcile) = (
        get(&ex.manifest)?,
        get(&ex.on_add)?,
        get(&ex.on_update)?,
        get(&ex.on_delete)?,
        get(&ex.reconcile)?,
    );
    let validate_config = match &ex.validate_config {
        Some(idx) => Some(get(idx)?),
        None => None,
    };
    // Type-check once per instance, so the per-call `new_unchecked` below is sound. Each
    // check is spelled with the alias its call uses: the two cannot drift apart.
    let _: ManifestFn = typed(manifest, &store)?;
    match ex.contract {
        Contract::V0_1 => {
            let _: OnAdd<'_> = typed(on_add, &store)?;
            let _: OnUpdate<'_> = typed(on_update, &store)?;
            let _: OnDelete<'_> = typed(on_delete, &store)?;
        }
        Contract::V0_2 => {
            let _: OnAdd2<'_> = typed(on_add, &store)?;
            let _: OnUpdate2<'_> = typed(on_update, &store)?;
            let _: OnDelete2<'_> = typed(on_delete, &store)?;
        }
    }
    let _: Reconcile<'_> = typed(reconcile, &store)?;
    if let Some(f) = validate_config {
        let _: ValidateConfig<'_> = typed(f, &store)?;
    }
    Ok(Live {
        store,
        engine: inner.engine.clone(),
        contract: ex.contract,
        manifest,
        on_add,
        on_update,
        on_delete,
        reconcile,
        validate_config,
    })
}

impl Live {
    /// Sets the call's deadline `deadline` from now, and returns now (one clock read per call).
    fn arm(&mut self, deadline: Duration) -> Instant {
        self.arm_at(deadline, Instant::now())
    }

    /// [`Self::arm`] from `now`, a clock read the caller just made.
    fn arm_at(&mut self, deadline: Duration, now: Instant) -> Instant {
        self.store.data_mut().deadline = now + deadline;
        self.store.set_epoch_deadline(1);
        now
    }

    /// Calls `manifest` (load time only).
    pub(crate) async fn call_manifest(
        &mut self,
        deadline: Duration,
    ) -> Result<wit::Manifest, GuestError> {
        self.arm(deadline);
        // SAFETY: the signature was checked by `typed` in `instantiate`.
        let f: ManifestFn = unsafe { TypedFunc::new_unchecked(self.manifest) };
        match self.engine.watch(f.call_async(&mut self.store, ())).await {
            Ok((m,)) => Ok(m),
            Err(_) if self.store.data().deadline_hit => Err(GuestError::DeadlineExceeded(deadline)),
            Err(_) if self.store.data().limiter.memory_denied => Err(GuestError::MemoryExhausted {
                limit: self.store.data().limiter.memory_cap,
            }),
            Err(e) => Err(GuestError::Trap(e.root_cause().to_string())),
        }
    }

    /// Calls `validate-config` (load time only; the caller checks the export exists).
    pub(crate) async fn call_validate_config(
        &mut self,
        config: &[u8],
        deadline: Duration,
    ) -> Result<Result<(), String>, GuestError> {
        let Some(func) = self.validate_config else {
            return Ok(Ok(()));
        };
        self.arm(deadline);
        // SAFETY: the signature was checked by `typed` in `instantiate`.
        let f: ValidateConfig<'_> = unsafe { TypedFunc::new_unchecked(func) };
        match self
            .engine
            .watch(f.call_async(&mut self.store, (config,)))
            .await
        {
            Ok((verdict,)) => Ok(verdict),
            Err(_) if self.store.data().deadline_hit => Err(GuestError::DeadlineExceeded(deadline)),
            Err(_) if self.store.data().limiter.memory_denied => Err(GuestError::MemoryExhausted {
                limit: self.store.data().limiter.memory_cap,
            }),
            Err(e) => Err(GuestError::Trap(e.root_cause().to_string())),
        }
    }
}

/// What `reconcile` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done: forget the key's backoff.
    Done,
    /// Reconcile again after this long.
    RequeueAfter(Duration),
}

/// The result of a reconcile call that did not fail in the sandbox: the guest's own verdict.
pub type ReconcileResult = Result<Outcome, String>;

/// One guest instance, owned by one worker. Created by [`super::loader::Plugin::instance`].
pub struct PluginInstance {
    inner: Arc<PluginInner>,
    live: Option<Live>,
    clock: Option<Arc<dyn GuestClock>>,
    /// The `meta` blocks of one notification's objects (old and new), reused call to call.
    meta: [Vec<u32>; 2],
    /// The reconcile backstop's timer, reused call to call (a new timer per call is an
    /// insertion into and a removal from the timer wheel under the driver's lock) and moved
    /// only when it fires before the running call's backstop.
    backstop: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Drop for PluginInstance {
    fn drop(&mut self) {
        self.inner.live_instances.fetch_sub(1, Ordering::AcqRel);
    }
}

impl PluginInstance {
    pub(crate) fn new(inner: Arc<PluginInner>) -> Self {
        PluginInstance {
            inner,
            live: None,
            clock: None,
            meta: Default::default(),
            backstop: None,
        }
    }

    /// Makes this instance (and every replacement of it after a failure) read `clock` through
    /// WASI instead of the host's clocks. A store's clocks are fixed when it is created, so a
    /// live instance is discarded and the next call starts a fresh one. Production never sets
    /// a clock; the test harness does.
    pub fn with_clock(mut self, clock: Arc<dyn GuestClock>) -> Self {
        self.clock = Some(clock);
        self.live = None;
        self
    }

    /// Whether a live instance exists (false before the first call and after a failure).
    pub fn is_live(&self) -> bool {
        self.live.is_some()
    }

    /// Instantiates now rather than on the first call (e.g. at worker start, to fail early).
    pub async fn warm(&mut self) -> Result<(), GuestError> {
        self.live_mut(Duration::ZERO).await.map(drop)
    }

    async fn live_mut(&mut self, deadline: Duration) -> Result<&mut Live, GuestError> {
        self.live_armed(deadline, None).await.map(|(live, _)| live)
    }

    /// [`Self::live_mut`], armed from `now` if given (a clock read the caller just made) unless
    /// an instance had to be made first, and when its deadline was armed.
    async fn live_armed(
        &mut self,
        deadline: Duration,
        mut now: Option<Instant>,
    ) -> Result<(&mut Live, Instant), GuestError> {
        if self.live.is_none() {
            now = None;
            let started = Instant::now();
            let live =
                instantiate_with_clock(&self.inner, &self.inner.ctx, self.clock.as_ref()).await?;
            tracing::debug!(plugin = %self.inner.ctx.name, elapsed_us = started.elapsed().as_micros() as u64, "instantiated");
            self.live = Some(live);
        }
        let live = self
            .live
            .as_mut()
            .ok_or_else(|| GuestError::Instantiate("no instance".into()))?;
        let armed = match now {
            Some(now) => live.arm_at(deadline, now),
            None => live.arm(deadline),
        };
        Ok((live, armed))
    }

    /// Delivers an add notification for watch number `watch`.
    pub async fn on_add(&mut self, watch: u32, obj: &Object) -> Result<(), GuestError> {
        let d = self.inner.limits.handler_deadline;
        let mut meta = std::mem::take(&mut self.meta);
        let r = {
            let live = self.live_mut(d).await?;
            // SAFETY (each arm): the signature was checked by `typed` in `instantiate`.
            match live.contract {
                Contract::V0_1 => {
                    let f: OnAdd<'_> = unsafe { TypedFunc::new_unchecked(live.on_add) };
                    live.engine
                        .watch(f.call_async(&mut live.store, (watch, obj.raw())))
                        .await
                }
                Contract::V0_2 => {
                    let f: OnAdd2<'_> = unsafe { TypedFunc::new_unchecked(live.on_add) };
                    let arg = ObjectArg::of(obj, &mut meta[0]);
                    live.engine
                        .watch(f.call_async(&mut live.store, (watch, arg)))
                        .await
                }
            }
        };
        self.meta = meta;
        self.settle(r, d)
    }

    /// Delivers an update notification (old and new object) for watch number `watch`.
    pub async fn on_update(
        &mut self,
        watch: u32,
        old: &Object,
        new: &Object,
    ) -> Result<(), GuestError> {
        let d = self.inner.limits.handler_deadline;
        let mut meta = std::mem::take(&mut self.meta);
        let r = {
            let live = self.live_mut(d).await?;
            // SAFETY (each arm): the signature was checked by `typed` in `instantiate`.
            match live.contract {
                Contract::V0_1 => {
                    let f: OnUpdate<'_> = unsafe { TypedFunc::new_unchecked(live.on_update) };
                    live.engine
                        .watch(f.call_async(&mut live.store, (watch, old.raw(), new.raw())))
                        .await
                }
                Contract::V0_2 => {
                    let f: OnUpdate2<'_> = unsafe { TypedFunc::new_unchecked(live.on_update) };
                    let [a, b] = &mut meta;
                    let args = (watch, ObjectArg::of(old, a), ObjectArg::of(new, b));
                    live.engine.watch(f.call_async(&mut live.store, args)).await
                }
            }
        };
        self.meta = meta;
        self.settle(r, d)
    }

    /// Delivers a delete notification; `tombstone` when the final state is unknown.
    pub async fn on_delete(
        &mut self,
        watch: u32,
        obj: &Object,
        tombstone: bool,
    ) -> Result<(), GuestError> {
        let d = self.inner.limits.handler_deadline;
        let mut meta = std::mem::take(&mut self.meta);
        let r = {
            let live = self.live_mut(d).await?;
            // SAFETY (each arm): the signature was checked by `typed` in `instantiate`.
            match live.contract {
                Contract::V0_1 => {
                    let f: OnDelete<'_> = unsafe { TypedFunc::new_unchecked(live.on_delete) };
                    live.engine
                        .watch(f.call_async(&mut live.store, (watch, obj.raw(), tombstone)))
                        .await
                }
                Contract::V0_2 => {
                    let f: OnDelete2<'_> = unsafe { TypedFunc::new_unchecked(live.on_delete) };
                    let args = (watch, ObjectArg::of(obj, &mut meta[0]), tombstone);
                    live.engine.watch(f.call_async(&mut live.store, args)).await
                }
            }
        };
        self.meta = meta;
        self.settle(r, d)
    }

    /// Reconciles `key`. The outer error is a sandbox failure (instance discarded); the inner
    /// result is the guest's own answer.
    pub async fn reconcile(&mut self, key: &str) -> Result<ReconcileResult, GuestError> {
        self.reconcile_started(key, Instant::now()).await
    }

    /// [`Self::reconcile`], its deadline counted from `started` (the caller's clock read just
    /// before, which it times the reconcile with anyway; an instance made first re-reads it).
    pub async fn reconcile_started(
        &mut self,
        key: &str,
        started: Instant,
    ) -> Result<ReconcileResult, GuestError> {
        let d = self.inner.limits.reconcile_deadline;
        // Epoch checks only run while guest code runs; a host call that never returns (a stalled
        // API request) is caught by this wall-clock backstop one tick later.
        let backstop = d + self.inner.engine.config().epoch_tick;
        let mut timer = self.backstop.take();
        let r = async {
            let (live, armed) = self.live_armed(d, Some(started)).await?;
            let at = tokio::time::Instant::from_std(armed + backstop);
            let timer = match &mut timer {
                Some(t) => t,
                None => timer.insert(Box::pin(tokio::time::sleep_until(at))),
            };
            // The timer is re-armed only when it fires before this call's backstop. It is never
            // set later than that (each call's backstop is later than the last one's), and
            // resetting it for every call cost a timer-wheel removal and insertion each.
            let backstop_passed = async {
                loop {
                    timer.as_mut().await;
                    if tokio::time::Instant::now() >= at {
                        return;
                    }
                    timer.as_mut().reset(at);
                }
            };
            // SAFETY: the signature was checked by `typed` in `instantiate`.
            let f: Reconcile<'_> = unsafe { TypedFunc::new_unchecked(live.reconcile) };
            let data = live.store.data_mut();
            data.reconcile_key.clear();
            data.reconcile_key.push_str(key);
            data.reconciling = true;
            let res = {
                let call = std::pin::pin!(live.engine.watch(f.call_async(&mut live.store, (key,))));
                let backstop_passed = std::pin::pin!(backstop_passed);
                match futures_util::future::select(call, backstop_passed).await {
                    Either::Left((res, _)) => Some(res),
                    Either::Right(_) => None,
                }
            };
            let data = live.store.data_mut();
            data.reconciling = false;
            let res = res.unwrap_or_else(|| {
                data.deadline_hit = true;
                Err(wasmtime::Error::new(DeadlineExceeded))
            });
            Ok::<_, GuestError>(res)
        }
        .await;
        self.backstop = timer;
        let r = r?;
        let (res,) = self.settle(r, d)?;
        if let Err(msg) = &res {
            if msg.len() > MAX_ERROR_MESSAGE {
                let err = GuestError::ErrorTooLong { bytes: msg.len() };
                if let Some(live) = self.live.take() {
                    discard(live);
                }
                tracing::warn!(plugin = %self.inner.ctx.name, error = %err, "guest call failed; instance discarded");
                return Err(err);
            }
        }
        Ok(res.map(|o| match o {
            wit::Outcome::Done => Outcome::Done,
            wit::Outcome::RequeueAfter(ms) => Outcome::RequeueAfter(Duration::from_millis(ms)),
        }))
    }

    /// Passes a successful result through; on failure classifies it, counts it, logs it with the
    /// plugin's name and discards the instance.
    fn settle<R>(&mut self, r: wasmtime::Result<R>, deadline: Duration) -> Result<R, GuestError> {
        let e = match r {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let (deadline_hit, memory_denied) = self.live.take().map_or((false, false), |l| {
            let data = l.store.data();
            let seen = (data.deadline_hit, data.limiter.memory_denied);
            discard(l);
            seen
        });
        let stats = &self.inner.stats;
        let err = if deadline_hit || e.is::<DeadlineExceeded>() {
            stats.deadline_hits.fetch_add(1, Ordering::Relaxed);
            GuestError::DeadlineExceeded(deadline)
        } else if memory_denied {
            stats.memory_exhaustions.fetch_add(1, Ordering::Relaxed);
            GuestError::MemoryExhausted {
                limit: self.inner.limits.memory_bytes,
            }
        } else {
            stats.traps.fetch_add(1, Ordering::Relaxed);
            GuestError::Trap(e.root_cause().to_string())
        };
        tracing::warn!(plugin = %self.inner.ctx.name, error = %err, "guest call failed; instance discarded");
        tracing::debug!(plugin = %self.inner.ctx.name, detail = ?e, "guest failure detail");
        Err(err)
    }
}
