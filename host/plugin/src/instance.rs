//! Sandboxed guest instances: one store each, with deadlines, memory caps and replacement.
//!
//! A [`PluginInstance`] belongs to one reconcile worker, used by that task alone (`&mut self`),
//! or to the plugin's dispatcher, whose watch listeners take turns on it behind an async mutex:
//! that wait is the point (a plugin's notifications reach its guest one at a time, in order),
//! and the mutex guards nothing else, so no shared-state lock is held across a guest call. It
//! instantiates lazily; when a call traps, runs past its deadline or exhausts its memory, the
//! store is thrown away (its state may be inconsistent) and the next call starts from a fresh
//! instance.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kwh_client::object::Object;
use kwh_sandbox::{Backstop, GuestClock, Instance, InstanceStats, Sandboxed, StoreLimits};
use wasmtime::component::{ComponentType, Func, InstancePre, Lower, TypedFunc};
use wasmtime::Store;
use wasmtime_wasi::WasiCtx;

pub use kwh_sandbox::GuestError;

use super::bindings::v0_2::kube::controller::types as wit;
use super::contract::{Contract, ExportIndices};
use super::engine::PluginEngine;
use super::state::{GuestState, PluginCtx};
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
            memory_bytes: kwh_sandbox::DEFAULT_MAX_MEMORY,
            table_elements: 20_000,
            max_instances: 16,
            // Far above the objects a plugin's caches hold in practice (the benchmarks watch
            // 100,000), far below what would threaten the host: ~100 bytes a key.
            max_queued_keys: 1_000_000,
            log_lines_per_second: crate::guest_log::PER_SECOND,
        }
    }
}

impl Limits {
    /// The caps of each of the plugin's stores.
    fn store_limits(&self) -> StoreLimits {
        StoreLimits {
            memory_bytes: self.memory_bytes,
            table_elements: self.table_elements,
        }
    }
}

/// The longest error message a reconcile may return, in bytes. The host must copy the whole
/// string out of the guest before it can look at it: a guest returning 24 MiB on every
/// attempt held the runtime thread for milliseconds each time, as often as its backoff let
/// it. Past this bound the attempt counts as a failure of the plugin, so that quarantine
/// stops the repeats; a real message is far shorter (an Event's note is at most 1 KiB).
pub const MAX_ERROR_MESSAGE: usize = 64 << 10;

/// Everything instances of one plugin share.
pub(crate) struct PluginInner {
    pub(crate) path: PathBuf,
    /// The module's content digest (`sha256:…`): what names this revision.
    pub(crate) digest: Arc<str>,
    pub(crate) engine: PluginEngine,
    pub(crate) pre: InstancePre<Sandboxed<GuestState>>,
    pub(crate) exports: ExportIndices,
    pub(crate) limits: Limits,
    pub(crate) ctx: Arc<PluginCtx>,
    pub(crate) stats: InstanceStats,
    pub(crate) live_instances: AtomicU32,
}

/// A live instance: the sandbox's, and the exports called on the hot path.
pub(crate) struct Live {
    pub(crate) inst: Instance<GuestState>,
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
    store: &Store<Sandboxed<GuestState>>,
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
        .stderr(LogStream::new(ctx.log.clone(), Stream::Stderr));
    if let Some(c) = clock {
        kwh_sandbox::clock::use_clock(&mut wasi, c);
    }
    let limits = &inner.limits;
    let state = GuestState {
        reconcile_key: String::new(),
        reconciling: false,
        reconcile_log: Vec::new(),
        ctx: ctx.clone(),
    };
    let sandbox = inner.engine.sandbox();
    let store = sandbox.store(&limits.store_limits(), wasi, state);
    let mut inst = Instance::new(
        sandbox,
        &inner.pre,
        store,
        limits.handler_deadline,
        &inner.stats,
    )
    .await?;
    let instance = *inst.component();
    let store = inst.store_mut();
    let ex = &inner.exports;
    let mut get = |idx| {
        instance
            .get_func(&mut *store, idx)
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
    let store = inst.store();
    let _: ManifestFn = typed(manifest, store)?;
    match ex.contract {
        Contract::V0_1 => {
            let _: OnAdd<'_> = typed(on_add, store)?;
            let _: OnUpdate<'_> = typed(on_update, store)?;
            let _: OnDelete<'_> = typed(on_delete, store)?;
        }
        Contract::V0_2 => {
            let _: OnAdd2<'_> = typed(on_add, store)?;
            let _: OnUpdate2<'_> = typed(on_update, store)?;
            let _: OnDelete2<'_> = typed(on_delete, store)?;
        }
    }
    let _: Reconcile<'_> = typed(reconcile, store)?;
    if let Some(f) = validate_config {
        let _: ValidateConfig<'_> = typed(f, store)?;
    }
    Ok(Live {
        inst,
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
    /// Calls `f` with `args` under the engine's deadlines (armed by the caller).
    async fn call<P, R>(&mut self, f: TypedFunc<P, R>, args: P) -> wasmtime::Result<R>
    where
        P: wasmtime::component::ComponentNamedList + Lower + Send + Sync,
        R: wasmtime::component::ComponentNamedList
            + wasmtime::component::Lift
            + Send
            + Sync
            + 'static,
    {
        let (store, engine) = self.inst.parts();
        engine.watch(f.call_async(store, args)).await
    }

    /// Calls `manifest` (load time only).
    pub(crate) async fn call_manifest(
        &mut self,
        deadline: Duration,
    ) -> Result<wit::Manifest, GuestError> {
        self.inst.arm(deadline);
        // SAFETY: the signature was checked by `typed` in `instantiate`.
        let f: ManifestFn = unsafe { TypedFunc::new_unchecked(self.manifest) };
        let (store, engine) = self.inst.parts();
        match engine.watch(f.call_async(store, ())).await {
            Ok((m,)) => Ok(m),
            Err(e) => Err(self.inst.fault(&e, deadline)),
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
        self.inst.arm(deadline);
        // SAFETY: the signature was checked by `typed` in `instantiate`.
        let f: ValidateConfig<'_> = unsafe { TypedFunc::new_unchecked(func) };
        let (store, engine) = self.inst.parts();
        match engine.watch(f.call_async(store, (config,))).await {
            Ok((verdict,)) => Ok(verdict),
            Err(e) => Err(self.inst.fault(&e, deadline)),
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
    /// The reconcile's wall-clock bound, its timer reused call to call.
    backstop: Backstop,
    /// The last reconcile's log lines, when the plugin's log captures them.
    reconcile_log: Vec<String>,
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
            backstop: Backstop::default(),
            reconcile_log: Vec::new(),
        }
    }

    /// The last reconcile's log lines (taken), when the plugin's log captures them
    /// ([`GuestLog::capturing`](crate::guest_log::GuestLog::capturing)); empty otherwise.
    pub fn take_reconcile_log(&mut self) -> Vec<String> {
        std::mem::take(&mut self.reconcile_log)
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
            Some(now) => live.inst.arm_at(deadline, now),
            None => live.inst.arm(deadline),
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
                    live.call(f, (watch, obj.raw())).await
                }
                Contract::V0_2 => {
                    let f: OnAdd2<'_> = unsafe { TypedFunc::new_unchecked(live.on_add) };
                    let arg = ObjectArg::of(obj, &mut meta[0]);
                    live.call(f, (watch, arg)).await
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
                    live.call(f, (watch, old.raw(), new.raw())).await
                }
                Contract::V0_2 => {
                    let f: OnUpdate2<'_> = unsafe { TypedFunc::new_unchecked(live.on_update) };
                    let [a, b] = &mut meta;
                    let args = (watch, ObjectArg::of(old, a), ObjectArg::of(new, b));
                    live.call(f, args).await
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
                    live.call(f, (watch, obj.raw(), tombstone)).await
                }
                Contract::V0_2 => {
                    let f: OnDelete2<'_> = unsafe { TypedFunc::new_unchecked(live.on_delete) };
                    let args = (watch, ObjectArg::of(obj, &mut meta[0]), tombstone);
                    live.call(f, args).await
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
        let mut timer = std::mem::take(&mut self.backstop);
        let r = async {
            let (live, _) = self.live_armed(d, Some(started)).await?;
            // SAFETY: the signature was checked by `typed` in `instantiate`.
            let f: Reconcile<'_> = unsafe { TypedFunc::new_unchecked(live.reconcile) };
            let data = live.inst.store_mut().data_mut().data_mut();
            data.reconcile_key.clear();
            data.reconcile_key.push_str(key);
            data.reconciling = true;
            let r = timer.run(live.call(f, (key,)), backstop).await;
            let data = live.inst.store_mut().data_mut().data_mut();
            data.reconciling = false;
            let log = if data.ctx.log.captures() {
                std::mem::take(&mut data.reconcile_log)
            } else {
                Vec::new()
            };
            Ok::<_, GuestError>((r, log))
        }
        .await;
        self.backstop = timer;
        let (r, log) = r?;
        self.reconcile_log = log;
        let (res,) = self.settle(r, d)?;
        if let Err(msg) = &res {
            if msg.len() > MAX_ERROR_MESSAGE {
                let err = GuestError::ResultTooLarge {
                    what: "reconcile returned an error message",
                    bytes: msg.len(),
                    limit: MAX_ERROR_MESSAGE,
                };
                if let Some(live) = self.live.take() {
                    live.inst.discard();
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
        let err = match self.live.take() {
            Some(live) => {
                let err = live.inst.fault(&e, deadline);
                live.inst.discard();
                err
            }
            None => GuestError::Trap(e.root_cause().to_string()),
        };
        self.inner.stats.count(&err);
        tracing::warn!(plugin = %self.inner.ctx.name, error = %err, "guest call failed; instance discarded");
        tracing::debug!(plugin = %self.inner.ctx.name, detail = ?e, "guest failure detail");
        Err(err)
    }
}
