//! The reconcile loop: N workers per plugin, each with its own instance, fed by the plugin's
//! rate-limited workqueue.
//!
//! The queue's processing set guarantees a key is never with two workers at once, and its
//! dirty set folds adds that arrive during a reconcile into one re-run afterwards. So the
//! workers of two revisions of a plugin may share its queue during an upgrade: the old ones,
//! told to retire, finish the reconcile they hold and take no other key, and the new ones take
//! every key still queued.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::backend::informer::InformerLister;
use super::backend::shadow::ShadowLedger;
use super::cache_sync::CacheSync;
use super::follow::{Follow, Mirror, Turn};
use super::health::Health;
use super::instance::{GuestError, Outcome, PluginInstance};
use super::loader::Plugin;
use kwh_client::clip::clip;
use kwh_coordination::ownership::{Admit, PluginOwnership};
use kwh_informer::workqueue::metrics::HistogramSnapshot;
use kwh_informer::workqueue::RateLimitingQueue;
use kwh_sandbox::fairness::Slice;

/// A plugin's workqueue. Keys are shared, not copied, between its dirty set, its FIFO and
/// the worker holding one; the host's enqueues hand it borrowed keys
/// ([`add_borrowed`](kwh_informer::workqueue::Queue::add_borrowed)), so a key already queued
/// costs no allocation.
pub type PluginQueue = RateLimitingQueue<Arc<str>>;

/// Upper bounds (seconds) of the reconcile duration histogram: controller-runtime's buckets, so
/// dashboards written for Go controllers apply.
pub const RECONCILE_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets of the reconcile duration histogram: one per bound, then `+Inf`.
pub const RECONCILE_SLOTS: usize = RECONCILE_BUCKETS.len() + 1;

/// Reconcile counters of one plugin.
#[derive(Debug, Default)]
pub struct ReconcileStats {
    /// Reconcile calls made.
    pub total: AtomicU64,
    /// Calls that ended in a guest error or a sandbox failure.
    pub errors: AtomicU64,
    /// Calls that asked to be requeued after a delay.
    pub requeue_after: AtomicU64,
    buckets: [AtomicU64; RECONCILE_SLOTS],
    sum_nanos: AtomicU64,
}

impl ReconcileStats {
    fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = RECONCILE_BUCKETS
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(RECONCILE_BUCKETS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos
            .fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }

    /// The reconcile-duration histogram as of now, for the metrics endpoint to encode.
    pub fn histogram(&self) -> HistogramSnapshot<RECONCILE_SLOTS> {
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        HistogramSnapshot::read(&RECONCILE_BUCKETS, &self.buckets, sum)
    }
}

/// What a revision's workers share: the queue, counters, gates and links.
#[derive(Clone)]
pub struct WorkerParts {
    pub queue: PluginQueue,
    pub stats: Arc<ReconcileStats>,
    pub health: Arc<Health>,
    /// Opens once every watch of the plugin has synced.
    pub synced: CacheSync,
    /// Checked for each key before its reconcile.
    pub own: PluginOwnership,
    /// Turns true (or its sender is dropped) when a newer revision takes the queue over.
    pub retire: watch::Receiver<bool>,
    /// For a shadow revision: the live revision it follows.
    pub follows: Option<Following>,
    /// For a live revision: its shadow's queue while one runs.
    pub mirror: Mirror,
}

/// Starts `plugin.manifest().workers` workers on `parts.queue`, as tasks on `on`, each calling through the health
/// gate. They take no key before `synced` opens. Each takes an instance slot now, so an
/// instance limit too small for the worker count fails the plugin's start, not a worker. Each
/// key is checked against `own` before its reconcile. Once `retire` turns true, each worker
/// ends after the reconcile it holds (a newer revision's workers take the queue over).
pub fn spawn_workers(
    plugin: &Plugin,
    parts: &WorkerParts,
    on: &tokio::runtime::Handle,
) -> Result<Vec<JoinHandle<()>>, GuestError> {
    let n = plugin.manifest().workers.max(1);
    let instances = (0..n)
        .map(|_| plugin.instance())
        .collect::<Result<Vec<_>, _>>()?;
    Ok(instances
        .into_iter()
        .enumerate()
        .map(|(i, inst)| {
            let span = tracing::info_span!("worker", plugin = %plugin.name(), worker = i);
            on.spawn(worker(inst, parts.clone()).instrument(span))
        })
        .collect())
}

/// A shadow worker's side of the link to the live revision: its queue, the link, the
/// shadow's own caches, and the ledger its reconciles' log lines go to.
#[derive(Clone)]
pub struct Following {
    pub live: PluginQueue,
    pub follow: Arc<Follow>,
    pub caches: Arc<InformerLister>,
    pub ledger: Arc<ShadowLedger>,
}

impl Following {
    /// Whether the shadow may reconcile `key` now ([`Follow::turn`]).
    pub fn turn(&self, key: &str) -> Turn {
        self.follow.turn(key, &self.live, &self.caches)
    }
}

/// What the worker does with a key after a reconcile call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    Forget,
    After(Duration),
    RateLimited,
}

fn next(r: &Result<Result<Outcome, String>, GuestError>) -> Next {
    match r {
        Ok(Ok(Outcome::Done)) => Next::Forget,
        Ok(Ok(Outcome::RequeueAfter(d))) => Next::After(*d),
        Ok(Err(_)) | Err(_) => Next::RateLimited,
    }
}

async fn worker(mut inst: PluginInstance, parts: WorkerParts) {
    let WorkerParts {
        queue,
        stats,
        health,
        synced,
        own,
        mut retire,
        follows,
        mirror,
    } = parts;
    let synced = tokio::select! {
        biased;
        _ = retire.wait_for(|r| *r) => false,
        s = synced.wait() => s,
    };
    if !synced {
        tracing::debug!("worker stopped before the caches synced");
        return;
    }
    // A queue that is never empty, and reconciles that return at once, would keep this task
    // on its thread for as long as the keys last.
    let mut slice = Slice::new();
    loop {
        // `get` takes a key only as it returns, so a retirement seen first leaves every key
        // queued for the next revision's workers.
        let key = tokio::select! {
            biased;
            _ = retire.wait_for(|r| *r) => {
                tracing::debug!("worker retired: a newer revision took the queue over");
                return;
            }
            key = queue.get() => key,
        };
        let Some(key) = key else { break };
        if !admitted(&key, &own, follows.as_ref(), &queue) {
            slice.step(Instant::now()).await;
            continue;
        }
        // From here until `done` the key is marked as processing: were this task dropped in
        // between (aborted after the grace period of an upgrade, or at a stop), the guard hands
        // the key back, queued again for whichever revision's workers run now.
        let held = Held::new(&queue, &key);
        // Taken after the key: while the plugin is quarantined the key waits here, marked as
        // processing, so no other worker takes it and the rest stay queued.
        // A retirement seen here (the key was taken as it came) hands the key back: queued
        // again, for the next revision's workers.
        let permit = tokio::select! {
            biased;
            _ = retire.wait_for(|r| *r) => {
                drop(held);
                return;
            }
            p = health.admit() => p,
        };
        let Some(permit) = permit else {
            held.settle();
            queue.done(&key);
            break;
        };
        // Two clock reads time the reconcile, its deadline and the queue's work duration.
        let started = Instant::now();
        // The per-key span only when someone reads debug spans: wrapping the call's future
        // (kilobytes: it holds the guest call's) moves it once more per reconcile.
        let r = if tracing::enabled!(tracing::Level::DEBUG) {
            inst.reconcile_started(&key, started)
                .instrument(tracing::debug_span!("reconcile", key = %clip(&key)))
                .await
        } else {
            inst.reconcile_started(&key, started).await
        };
        let ended = Instant::now();
        // Only sandbox failures count against the plugin's health; a guest's own error is a
        // healthy instance reporting a problem with the key.
        match &r {
            Err(e) => permit.failed(e),
            Ok(_) => permit.succeeded(),
        }
        stats.observe(ended.saturating_duration_since(started));
        stats.total.fetch_add(1, Ordering::Relaxed);
        if let Some(f) = &follows {
            f.ledger.attach_logs(&key, &inst.take_reconcile_log());
        }
        settle(&queue, &stats, &key, &r, follows.is_some());
        held.settle();
        queue.done_at(&key, tokio::time::Instant::from_std(ended));
        // The live revision's reconcile is done: its shadow's turn (which waits for the
        // writes it made to reach the caches, and for the key not to be queued here again).
        if let Some(shadow) = mirror.lock().as_ref() {
            shadow.hand_on(&key);
        }
        slice.step(ended).await;
    }
    tracing::debug!("worker stopped: queue shut down");
}

/// A key a worker took from the queue and has not yet marked done. Dropped unsettled (the
/// worker's task was aborted or dropped inside the guest call, or retired before the call), it
/// queues the key again and marks it done, so the key is not left "processing" for ever: the
/// queue's processing set would otherwise refuse it to every worker of every later revision.
/// A queue shutting down (the plugin stops) keeps the key as processing: no revision follows,
/// and the shutdown reports those keys as the reconciles it abandoned.
struct Held<'a> {
    queue: &'a PluginQueue,
    key: &'a Arc<str>,
    settled: bool,
}

impl<'a> Held<'a> {
    fn new(queue: &'a PluginQueue, key: &'a Arc<str>) -> Self {
        Held {
            queue,
            key,
            settled: false,
        }
    }

    /// The worker settles the key itself (requeued as its result says, then done).
    fn settle(mut self) {
        self.settled = true;
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        if self.queue.shutting_down() {
            // Said all the same: the key's reconcile ended here, which whoever judges who
            // held a key when (the simulation) must see.
            tracing::debug!(key = %clip(self.key), "worker stopped holding a key; the queue is shutting down");
            return;
        }
        tracing::debug!(key = %clip(self.key), "worker stopped holding a key; queued again for the running revision");
        self.queue.add(self.key.clone());
        self.queue.done(self.key);
    }
}

/// Whether the worker reconciles `key` now; if not, the key is queued again (or dropped) and
/// done. Ownership is checked again here: the key may have moved to another replica while it
/// was queued (dropped), or have just arrived from one (started after its lease). A shadow
/// revision reconciles a key only once the live revision is done with it (neither queued nor
/// held there) and the writes it made have reached the caches, so both act on the same state.
fn admitted(
    key: &Arc<str>,
    own: &PluginOwnership,
    follows: Option<&Following>,
    queue: &PluginQueue,
) -> bool {
    let again = match own.admit(key) {
        Admit::Now => match follows.map(|live| live.turn(key)) {
            None | Some(Turn::Now) => return true,
            Some(Turn::Later(wait)) => Some(wait),
            Some(Turn::Drop) => None,
        },
        Admit::After(wait) => Some(wait),
        Admit::No => {
            tracing::debug!(key = %clip(key), "not this replica's key now; dropped");
            None
        }
    };
    queue.forget(key);
    if let Some(wait) = again {
        queue.add_after(key.clone(), wait);
    }
    queue.done(key);
    false
}

/// Queues `key` again as the reconcile's result asks: forgotten, after a delay, or with
/// backoff after an error (logged). A shadow (`shadow`) reconciles once per live reconcile:
/// its own requeues are not followed.
fn settle(
    queue: &PluginQueue,
    stats: &ReconcileStats,
    key: &Arc<str>,
    r: &Result<Result<Outcome, String>, GuestError>,
    shadow: bool,
) {
    let next = if shadow { Next::Forget } else { next(r) };
    match next {
        Next::Forget => queue.forget(key),
        Next::After(d) => {
            stats.requeue_after.fetch_add(1, Ordering::Relaxed);
            queue.forget(key);
            queue.add_after(key.clone(), d);
        }
        Next::RateLimited => {
            stats.errors.fetch_add(1, Ordering::Relaxed);
            match r {
                Ok(Err(msg)) => {
                    tracing::warn!(key = %clip(key), error = %clip(msg), "reconcile failed; requeued with backoff")
                }
                Err(e) => {
                    tracing::warn!(key = %clip(key), error = %clip(&e.to_string()), "reconcile failed in the sandbox; instance replaced, requeued with backoff")
                }
                Ok(Ok(_)) => {}
            }
            queue.add_rate_limited(key.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_map_to_queue_actions() {
        assert_eq!(next(&Ok(Ok(Outcome::Done))), Next::Forget);
        let d = Duration::from_millis(250);
        assert_eq!(next(&Ok(Ok(Outcome::RequeueAfter(d)))), Next::After(d));
        assert_eq!(next(&Ok(Err("boom".into()))), Next::RateLimited);
        assert_eq!(
            next(&Err(GuestError::DeadlineExceeded(d))),
            Next::RateLimited
        );
        assert_eq!(
            next(&Err(GuestError::Trap("unreachable".into()))),
            Next::RateLimited
        );
    }

    #[test]
    fn histogram_counts_each_duration_in_the_first_bucket_that_holds_it() {
        let s = ReconcileStats::default();
        s.observe(Duration::from_millis(1));
        s.observe(Duration::from_millis(30));
        s.observe(Duration::from_secs(60));
        let h = s.histogram();
        let b = h.buckets();
        assert_eq!(b.len(), RECONCILE_BUCKETS.len() + 1);
        assert_eq!(b[0], (0.005, 1));
        assert_eq!(b[3], (0.05, 1), "30ms: <= 50ms");
        assert_eq!(
            b[RECONCILE_BUCKETS.len()],
            (f64::INFINITY, 1),
            "60s: only +Inf"
        );
        assert_eq!(h.count(), 3);
        assert!((h.sum() - 60.031).abs() < 1e-6, "{}", h.sum());
    }
}
