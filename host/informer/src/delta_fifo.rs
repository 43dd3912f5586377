//! The DeltaFIFO: per-key queues of changes between the reflector and the informer (spec §2).
//!
//! Why per-key deltas rather than a plain event queue: a consumer that falls behind sees every
//! change of a key in order when it gets to it, yet each key is queued once, and relists turn
//! vanished keys into tombstones (spec 2.5) so handlers always learn about deletions.

use std::collections::{HashSet, VecDeque};

use foldhash::HashMap as FastMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::store::Store;
use super::tombstone::{DeletedFinalStateUnknown, ObjOrTombstone};
use kwh_client::decode::ObjectPool;
use kwh_client::Object;

/// The kind of a delta (spec 2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeltaType {
    Added,
    Updated,
    Deleted,
    /// An item of a relist (the informer always asks for these rather than Sync).
    Replaced,
    /// A periodic resync of a known object.
    Sync,
}

/// One change of one key. Only deletions can carry a tombstone.
#[derive(Debug, Clone, PartialEq)]
pub enum Delta {
    Added(Object),
    Updated(Object),
    Deleted(ObjOrTombstone),
    Replaced(Object),
    Sync(Object),
}

impl Delta {
    pub fn kind(&self) -> DeltaType {
        match self {
            Delta::Added(_) => DeltaType::Added,
            Delta::Updated(_) => DeltaType::Updated,
            Delta::Deleted(_) => DeltaType::Deleted,
            Delta::Replaced(_) => DeltaType::Replaced,
            Delta::Sync(_) => DeltaType::Sync,
        }
    }

    /// The key of the delta's object (tombstones keyed by their own key, spec 2.2).
    pub fn key(&self) -> String {
        match self {
            Delta::Added(o) | Delta::Updated(o) | Delta::Replaced(o) | Delta::Sync(o) => o.key(),
            Delta::Deleted(d) => d.key(),
        }
    }

    /// [`key`](Self::key) lent to `f` without allocating ([`Object::with_key`]).
    pub fn with_key<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        match self {
            Delta::Added(o) | Delta::Updated(o) | Delta::Replaced(o) | Delta::Sync(o) => {
                o.with_key(f)
            }
            Delta::Deleted(d) => d.with_key(f),
        }
    }

    /// The object, or the tombstone's last known state.
    pub fn object(&self) -> Option<&Object> {
        match self {
            Delta::Added(o) | Delta::Updated(o) | Delta::Replaced(o) | Delta::Sync(o) => Some(o),
            Delta::Deleted(d) => d.object(),
        }
    }

    /// A deletion observed only through a relist (spec 2.5).
    pub fn is_tombstone(&self) -> bool {
        matches!(self, Delta::Deleted(ObjOrTombstone::Tombstone(_)))
    }
}

/// The changes of one key, oldest first; never empty while queued.
///
/// Why not a `Vec`: a key mostly has one delta, and a relist queues one key per object, so the
/// item map's slot holds that one delta in place (two words, like the pointer to a longer
/// list) instead of a heap block per key at the moment a relist's memory peaks.
#[derive(Debug, Clone, PartialEq)]
pub struct Deltas(DeltasRepr);

#[derive(Debug, Clone, PartialEq)]
enum DeltasRepr {
    One(Delta),
    // Boxed on purpose: a thin pointer keeps `Deltas` two words (a `Vec` is three).
    #[allow(clippy::box_collection)]
    Many(Box<Vec<Delta>>),
}

impl Deltas {
    fn one(d: Delta) -> Self {
        Deltas(DeltasRepr::One(d))
    }

    pub fn as_slice(&self) -> &[Delta] {
        match &self.0 {
            DeltasRepr::One(d) => std::slice::from_ref(d),
            DeltasRepr::Many(v) => v,
        }
    }

    fn push(&mut self, d: Delta) {
        if let DeltasRepr::Many(v) = &mut self.0 {
            v.push(d);
            return;
        }
        let many = DeltasRepr::Many(Box::new(Vec::with_capacity(2)));
        if let DeltasRepr::One(first) = std::mem::replace(&mut self.0, many) {
            if let DeltasRepr::Many(v) = &mut self.0 {
                v.extend([first, d]);
            }
        }
    }

    /// The list behind two or more deltas (a single delta has nothing to merge).
    fn many_mut(&mut self) -> Option<&mut Vec<Delta>> {
        match &mut self.0 {
            DeltasRepr::One(_) => None,
            DeltasRepr::Many(v) => Some(v),
        }
    }
}

impl std::ops::Deref for Deltas {
    type Target = [Delta];
    fn deref(&self) -> &[Delta] {
        self.as_slice()
    }
}

impl IntoIterator for Deltas {
    type Item = Delta;
    type IntoIter = DeltasIntoIter;
    fn into_iter(self) -> DeltasIntoIter {
        DeltasIntoIter(match self.0 {
            DeltasRepr::One(d) => Ok(Some(d)),
            DeltasRepr::Many(v) => Err(v.into_iter()),
        })
    }
}

/// The deltas of one key by value, oldest first.
pub struct DeltasIntoIter(Result<Option<Delta>, std::vec::IntoIter<Delta>>);

impl Iterator for DeltasIntoIter {
    type Item = Delta;
    fn next(&mut self) -> Option<Delta> {
        match &mut self.0 {
            Ok(one) => one.take(),
            Err(many) => many.next(),
        }
    }
}

/// What the FIFO knows has already been delivered downstream: the informer's store. A trait so
/// tests can stand in a fake.
pub trait KnownObjects: Send + Sync {
    fn list_keys(&self) -> Vec<String>;
    fn get_by_key(&self, key: &str) -> Option<Object>;
    /// Visit every known `(key, object)` without copying the keys (a relist visits them
    /// all). `f` must not call back into the known objects.
    fn for_each(&self, f: &mut dyn FnMut(&str, &Object)) {
        for k in self.list_keys() {
            if let Some(o) = self.get_by_key(&k) {
                f(&k, &o);
            }
        }
    }
    /// The known store's own allocation of `key`, so a relist or resync that queues every
    /// known key does not allocate each one again. `None` if unknown or not shareable.
    fn shared_key(&self, _key: &str) -> Option<Arc<str>> {
        None
    }
    /// A relist of `listed` items is being queued: room for them downstream, so the store
    /// takes them in without growing its table step by step.
    fn reserve(&self, _listed: usize) {}
    /// Nothing is known (an informer's first list is coming).
    fn is_empty(&self) -> bool {
        self.list_keys().is_empty()
    }
}

impl KnownObjects for Store {
    fn list_keys(&self) -> Vec<String> {
        Store::list_keys(self)
    }
    fn get_by_key(&self, key: &str) -> Option<Object> {
        Store::get_by_key(self, key)
    }
    fn for_each(&self, f: &mut dyn FnMut(&str, &Object)) {
        Store::for_each(self, f)
    }
    fn shared_key(&self, key: &str) -> Option<Arc<str>> {
        Store::shared_key(self, key)
    }
    fn reserve(&self, listed: usize) {
        Store::reserve(self, listed)
    }
    fn is_empty(&self) -> bool {
        Store::is_empty(self)
    }
}

/// The known objects as a relist's [`ObjectPool`].
struct KnownPool(Arc<dyn KnownObjects>);

impl ObjectPool for KnownPool {
    fn get(&self, key: &str) -> Option<Object> {
        self.0.get_by_key(key)
    }
}

/// Rewrites objects on their way in (e.g. to drop fields). Must be idempotent (spec 4.6).
pub type TransformFunc = Arc<dyn Fn(Object) -> Object + Send + Sync>;

/// Pop on a closed, drained queue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("DeltaFIFO: manipulating with closed queue")]
pub struct FifoClosed;

/// Errors of [`DeltaFifo::pop`]: the queue closed, or the process function failed.
#[derive(Debug, thiserror::Error)]
pub enum PopError<E> {
    #[error(transparent)]
    Closed(#[from] FifoClosed),
    #[error("processing deltas failed: {0}")]
    Process(E),
}

/// Options of a [`DeltaFifo`].
#[derive(Clone, Default)]
pub struct DeltaFifoOptions {
    /// The store of objects already delivered (the informer's indexer).
    pub known_objects: Option<Arc<dyn KnownObjects>>,
    /// Emit Replaced (rather than Sync) for relisted items; the informer sets it (spec 2.5).
    pub emit_delta_type_replaced: bool,
    pub transform: Option<TransformFunc>,
}

/// Keys are shared between the item map and the queue (one allocation per queued key).
#[derive(Default)]
struct State {
    items: FastMap<Arc<str>, Deltas>,
    queue: VecDeque<Arc<str>>,
    /// The items of a list taken in while nothing was queued or known (an informer's first
    /// list), in the list's order, each one Replaced (or Sync) delta: popped before `queue`,
    /// without entering `items`. Why: the first list is most of a sync's deltas, and each
    /// would otherwise be inserted into `items` and removed again, two probes of a table as
    /// large as the list. The per-key order holds: anything queued for one of these keys
    /// meanwhile is in `queue`, behind them all.
    listed: VecDeque<Object>,
    /// Some Add/Update/Delete/Replace has happened.
    populated: bool,
    /// Items of the first Replace not yet popped.
    initial_population_count: usize,
    closed: bool,
}

/// Queue capacity kept once the queue drains; more is given back to the allocator. Small:
/// a host runs many informers of a few hundred objects each (one per namespace, say), and
/// each relist left every one of them its whole list's worth of table (200 informers of 101
/// objects: 2 MiB); a steady stream keeps a handful of keys queued, well under this.
const SPARE_CAPACITY: usize = 64;

impl State {
    fn has_synced(&self) -> bool {
        self.populated && self.initial_population_count == 0
    }

    /// Counts a pop against the first list's items: whether the popped entry is in the
    /// initial list.
    fn count_pop(&mut self) -> bool {
        let is_in_initial_list = !self.has_synced();
        if self.initial_population_count > 0 {
            self.initial_population_count -= 1;
        }
        is_in_initial_list
    }

    /// Give back the room a relist grew: a drained queue would otherwise keep one slot per
    /// object of the largest list it ever held, as much as a sixth of a small object's size.
    fn release_spare(&mut self) {
        if self.listed.is_empty() && self.listed.capacity() > 0 {
            self.listed = VecDeque::new();
        }
        if self.items.capacity() > SPARE_CAPACITY {
            self.items.shrink_to(SPARE_CAPACITY);
        }
        if self.queue.capacity() > SPARE_CAPACITY {
            self.queue.shrink_to(SPARE_CAPACITY);
        }
    }
}

/// A queue of per-key deltas; see the module docs.
pub struct DeltaFifo {
    state: Mutex<State>,
    notify: Notify,
    known: Option<Arc<dyn KnownObjects>>,
    emit_replaced: bool,
    transform: Option<TransformFunc>,
}

impl std::fmt::Debug for DeltaFifo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.lock();
        f.debug_struct("DeltaFifo")
            .field("queued", &(s.listed.len() + s.queue.len()))
            .field("closed", &s.closed)
            .finish()
    }
}

impl DeltaFifo {
    pub fn new(opts: DeltaFifoOptions) -> Self {
        DeltaFifo {
            state: Mutex::new(State::default()),
            notify: Notify::new(),
            known: opts.known_objects,
            emit_replaced: opts.emit_delta_type_replaced,
            transform: opts.transform,
        }
    }

    pub fn add(&self, obj: Object) {
        let mut s = self.state.lock();
        s.populated = true;
        self.queue_action(&mut s, Delta::Added(obj), true, false);
        self.notify.notify_waiters();
    }

    pub fn update(&self, obj: Object) {
        let mut s = self.state.lock();
        s.populated = true;
        self.queue_action(&mut s, Delta::Updated(obj), true, false);
        self.notify.notify_waiters();
    }

    /// Queue a deletion, unless the key is unknown both here and downstream (spec 2.4).
    pub fn delete(&self, obj: ObjOrTombstone) {
        let key = obj.key();
        let mut s = self.state.lock();
        s.populated = true;
        // A key of a first list still being taken in counts as queued (finding it would take
        // a search); its deletion goes behind it. A watch that starts from that list's
        // version deletes only what the list had, or what it added since.
        let queued = !s.listed.is_empty() || s.items.contains_key(key.as_str());
        let known = match &self.known {
            Some(k) => k.get_by_key(&key).is_some(),
            None => false,
        };
        if !queued && !known {
            return;
        }
        self.queue_action(&mut s, Delta::Deleted(obj), true, false);
        self.notify.notify_waiters();
    }

    /// Take in a full relist (spec 2.5): every item as Replaced (or Sync), and a tombstone
    /// deletion for every queued or known key the list no longer has.
    ///
    /// Memory: the list is consumed as it is queued, the listed keys share the queue's key
    /// allocations, and known keys are visited in place, so a relist adds little besides the
    /// queued deltas (and the new objects, where they differ from the known ones).
    pub fn replace(&self, mut list: Vec<Object>) {
        // The list's buffer lives until every item is queued: drop the room a decoder grew
        // it by (up to a third) before the queue grows.
        list.shrink_to_fit();
        let mut s = self.state.lock();
        let nothing_known = self.known.as_ref().is_none_or(|k| k.is_empty());
        if s.items.is_empty() && s.listed.is_empty() && nothing_known {
            // A first list: nothing to merge with and nothing to tombstone (see `listed`).
            if let Some(known) = &self.known {
                known.reserve(list.len());
            }
            if let Some(t) = &self.transform {
                list = list.into_iter().map(|o| t(o)).collect();
            }
            if !s.populated {
                s.populated = true;
                s.initial_population_count = list.len();
            }
            s.listed = VecDeque::from(list);
            self.notify.notify_waiters();
            return;
        }
        // Room for the whole list up front: growing step by step would hold the old and the
        // new table at once, at the moment the relist's memory peaks.
        s.items.reserve(list.len());
        s.queue.reserve(list.len());
        if let Some(known) = &self.known {
            known.reserve(list.len());
        }
        // Keys queued before the list that the list lacks get a tombstone below. Few keys are
        // queued when a relist ends, so these are remembered rather than every listed key.
        let mut unlisted: HashSet<Arc<str>> = s.items.keys().cloned().collect();
        // A first list not yet taken in whole (a relist came quickly): its keys are queued too.
        let first_list: FastMap<Arc<str>, Object> = s
            .listed
            .iter()
            .map(|o| (Arc::from(o.key()), o.clone()))
            .collect();
        unlisted.extend(first_list.keys().cloned());
        for obj in list {
            // Relisted items are new objects: the transform applies even to the Sync form.
            let key = self.queue_action(&mut s, self.list_delta(obj), true, true);
            if !unlisted.is_empty() {
                unlisted.remove(&key);
            }
        }
        // Distinct listed keys: every key in `items` now but the ones queued before that the
        // list lacks (the loop added none of those).
        let listed = s.items.len() - unlisted.iter().filter(|k| s.items.contains_key(*k)).count();

        // Keys only in the queue vanished too (k/k#115620): tombstone with the newest state.
        let deletions: Vec<DeletedFinalStateUnknown> = unlisted
            .iter()
            .map(|k| DeletedFinalStateUnknown {
                key: k.to_string(),
                obj: s
                    .items
                    .get(k)
                    .and_then(|d| d.last())
                    .and_then(|d| d.object().cloned())
                    .or_else(|| first_list.get(k).cloned()),
            })
            .collect();
        drop(unlisted);
        let mut queued_deletions = deletions.len();
        for t in deletions {
            self.queue_action(&mut s, Delta::Deleted(t.into()), false, false);
        }

        if let Some(known) = &self.known {
            // Every listed key is queued now (nothing pops while the lock is held), so a known
            // key with nothing queued is one the list lacks.
            let mut vanished: Vec<DeletedFinalStateUnknown> = Vec::new();
            known.for_each(&mut |k, obj| {
                if s.items.get(k).is_some_and(|d| !d.is_empty()) {
                    return;
                }
                vanished.push(DeletedFinalStateUnknown {
                    key: k.to_owned(),
                    obj: Some(obj.clone()),
                });
            });
            queued_deletions += vanished.len();
            for t in vanished {
                self.queue_action(&mut s, Delta::Deleted(t.into()), false, true);
            }
        }

        if !s.populated {
            s.populated = true;
            s.initial_population_count = listed + queued_deletions;
        }
        // Once for the whole list: the lock held throughout kept any consumer out anyway.
        self.notify.notify_waiters();
    }

    /// The delta of a listed item: Replaced, or Sync when the informer did not ask for Replaced.
    fn list_delta(&self, obj: Object) -> Delta {
        if self.emit_replaced {
            Delta::Replaced(obj)
        } else {
            Delta::Sync(obj)
        }
    }

    /// Queue `Sync(known)` for every known key with nothing queued (spec 2.6, k/k#32125):
    /// a queued delta is newer than the known state, so a resync must not overtake it.
    pub fn resync(&self) {
        let Some(known) = &self.known else { return };
        let mut s = self.state.lock();
        for k in known.list_keys() {
            let Some(obj) = known.get_by_key(&k) else {
                continue;
            };
            if s.items
                .get(obj.key().as_str())
                .is_some_and(|d| !d.is_empty())
            {
                continue;
            }
            // Known objects were transformed on their way in; never again (k/k#124337).
            self.queue_action(&mut s, Delta::Sync(obj), false, true);
        }
        self.notify.notify_waiters();
    }

    /// Append `delta` to its key's deltas (queueing the key if new); returns the key. The
    /// caller wakes the consumer (once per call of its own, however many keys it queued). A key
    /// new to the queue takes the known store's allocation when `share_known_key` says the
    /// key is likely known (relist, resync): ~40 B less per queued key at a relist's peak.
    fn queue_action(
        &self,
        s: &mut State,
        delta: Delta,
        may_transform: bool,
        share_known_key: bool,
    ) -> Arc<str> {
        let delta = match &self.transform {
            Some(t) if may_transform => transform_delta(t, delta),
            _ => delta,
        };
        // The key is looked up on the stack; only a key new to the queue is allocated.
        let (key, queued) = delta.with_key(|key| match s.items.get_key_value(key) {
            Some((k, _)) => (k.clone(), true),
            None => {
                let shared = match &self.known {
                    Some(known) if share_known_key => known.shared_key(key),
                    _ => None,
                };
                (shared.unwrap_or_else(|| Arc::from(key)), false)
            }
        });
        let queued_deltas = if queued { s.items.get_mut(&*key) } else { None };
        match queued_deltas {
            Some(deltas) => {
                deltas.push(delta);
                dedup_deltas(deltas);
            }
            None => {
                s.items.insert(key.clone(), Deltas::one(delta));
                s.queue.push_back(key.clone());
            }
        }
        key
    }

    /// The known objects (the informer's store) as a relist's [`ObjectPool`]: listed items
    /// of the same version come back as the objects already delivered.
    pub fn object_pool(&self) -> Option<Arc<dyn ObjectPool>> {
        self.known
            .clone()
            .map(|k| Arc::new(KnownPool(k)) as Arc<dyn ObjectPool>)
    }

    /// Wait for the head key, remove it and run `process(deltas, is_in_initial_list)` while
    /// holding the queue lock (spec 2.7), so nothing is queued for that key until the consumer
    /// has applied it. `process` must not block.
    pub async fn pop<F, E>(&self, process: F) -> Result<(), PopError<E>>
    where
        F: FnOnce(Deltas, bool) -> Result<(), E>,
    {
        self.pop_keyed(|_, deltas, initial| process(deltas, initial))
            .await
    }

    /// [`pop`](Self::pop), with the deltas' key (the queue's own allocation, shared by every
    /// delta of the entry), so that the consumer's store need not compute and allocate it again.
    pub async fn pop_keyed<F, E>(&self, process: F) -> Result<(), PopError<E>>
    where
        F: FnOnce(Arc<str>, Deltas, bool) -> Result<(), E>,
    {
        // First without registering as a waiter: under load a key is usually queued, and
        // registering costs the `Notify`'s lock twice (in and out of its waiter list).
        let mut registered = false;
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            if registered {
                // Before the state check, so a push between the check and the await still
                // wakes this pop.
                notified.as_mut().enable();
            }
            {
                let mut s = self.state.lock();
                if let Some(obj) = s.listed.pop_front() {
                    let is_in_initial_list = s.count_pop();
                    let delta = self.list_delta(obj);
                    let key: Arc<str> = delta.with_key(|k| Arc::from(k));
                    if s.listed.is_empty() && s.queue.is_empty() {
                        s.release_spare();
                    }
                    return process(key, Deltas::one(delta), is_in_initial_list)
                        .map_err(PopError::Process);
                }
                if let Some(key) = s.queue.pop_front() {
                    let is_in_initial_list = s.count_pop();
                    let Some(deltas) = s.items.remove(&*key) else {
                        // Unreachable by the queue/items invariant (spec 2.2); skip the key.
                        continue;
                    };
                    if s.queue.is_empty() {
                        s.release_spare();
                    }
                    return process(key, deltas, is_in_initial_list).map_err(PopError::Process);
                }
                if s.closed {
                    return Err(FifoClosed.into());
                }
            }
            if registered {
                notified.await;
            }
            registered = true;
        }
    }

    /// True once Add/Update/Delete came before any Replace, or the first Replace's items have
    /// all been popped (spec 2.7).
    pub fn has_synced(&self) -> bool {
        self.state.lock().has_synced()
    }

    /// Wake every `pop`; they return [`FifoClosed`] once the queue is empty.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.notify.notify_waiters();
    }

    pub fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// Queued keys, head first (a key of a first list still being taken in that was queued
    /// again since is listed twice: it is popped twice).
    pub fn list_keys(&self) -> Vec<String> {
        let s = self.state.lock();
        s.listed
            .iter()
            .map(Object::key)
            .chain(s.queue.iter().map(|k| k.to_string()))
            .collect()
    }

    /// The queued deltas of a key, oldest first.
    pub fn get_by_key(&self, key: &str) -> Option<Deltas> {
        let s = self.state.lock();
        let listed = s
            .listed
            .iter()
            .filter(|o| o.with_key(|k| k == key))
            .map(|o| self.list_delta(o.clone()));
        let queued = s.items.get(key).into_iter().flat_map(|d| d.iter().cloned());
        let mut all = listed.chain(queued);
        let mut deltas = Deltas::one(all.next()?);
        for d in all {
            deltas.push(d);
        }
        Some(deltas)
    }

    /// Queued entries (a key of a first list still being taken in that was queued again since
    /// counts twice).
    pub fn len(&self) -> usize {
        let s = self.state.lock();
        s.listed.len() + s.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn transform_delta(t: &TransformFunc, d: Delta) -> Delta {
    match d {
        Delta::Added(o) => Delta::Added(t(o)),
        Delta::Updated(o) => Delta::Updated(t(o)),
        Delta::Replaced(o) => Delta::Replaced(t(o)),
        Delta::Sync(o) => Delta::Sync(t(o)),
        Delta::Deleted(ObjOrTombstone::Object(o)) => Delta::Deleted(ObjOrTombstone::Object(t(o))),
        d @ Delta::Deleted(ObjOrTombstone::Tombstone(_)) => d,
    }
}

/// Spec 2.3: only two trailing Deleted deltas merge; keep the older unless it is a tombstone.
fn dedup_deltas(deltas: &mut Deltas) {
    let Some(deltas) = deltas.many_mut() else {
        return;
    };
    let n = deltas.len();
    if n < 2 {
        return;
    }
    if let (Delta::Deleted(a), Delta::Deleted(_)) = (&deltas[n - 2], &deltas[n - 1]) {
        if a.is_tombstone() {
            deltas.swap_remove(n - 2);
        } else {
            deltas.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::tombstone::test_support::obj;

    fn fifo_with(known: Option<Arc<Store>>) -> DeltaFifo {
        DeltaFifo::new(DeltaFifoOptions {
            known_objects: known.map(|k| k as Arc<dyn KnownObjects>),
            emit_delta_type_replaced: true,
            transform: None,
        })
    }

    #[tokio::test]
    async fn pop_keyed_hands_over_the_queued_key() {
        // spec 2.2: deltas are keyed by the object's key, tombstones by their own.
        let f = fifo_with(None);
        f.add(obj("ns", "a", "1"));
        f.add(obj("", "node1", "1"));
        let mut keys = Vec::new();
        for _ in 0..2 {
            tokio::time::timeout(
                Duration::from_secs(5),
                f.pop_keyed(|key, deltas, _| {
                    keys.push((key.to_string(), deltas.iter().next().map(Delta::key)));
                    Ok::<(), ()>(())
                }),
            )
            .await
            .expect("pop timed out")
            .expect("pop failed");
        }
        assert_eq!(
            keys,
            vec![
                ("ns/a".to_owned(), Some("ns/a".to_owned())),
                ("node1".to_owned(), Some("node1".to_owned())),
            ]
        );
    }

    /// Pop one key without blocking the test forever.
    async fn pop1(f: &DeltaFifo) -> (Deltas, bool) {
        let mut out = None;
        tokio::time::timeout(
            Duration::from_secs(5),
            f.pop(|d, init| {
                out = Some((d, init));
                Ok::<(), ()>(())
            }),
        )
        .await
        .expect("pop timed out")
        .expect("pop failed");
        out.expect("process ran")
    }

    fn kinds(d: &Deltas) -> Vec<DeltaType> {
        d.iter().map(Delta::kind).collect()
    }

    #[test]
    fn spec_2_1_delta_types() {
        let o = obj("ns", "a", "1");
        assert_eq!(Delta::Added(o.clone()).kind(), DeltaType::Added);
        assert_eq!(Delta::Updated(o.clone()).kind(), DeltaType::Updated);
        assert_eq!(Delta::Deleted(o.clone().into()).kind(), DeltaType::Deleted);
        assert_eq!(Delta::Replaced(o.clone()).kind(), DeltaType::Replaced);
        assert_eq!(Delta::Sync(o).kind(), DeltaType::Sync);
    }

    #[tokio::test]
    async fn spec_2_2_and_2_3_queue_order_and_no_merging_except_deletes() {
        let f = fifo_with(None);
        f.add(obj("ns", "a", "1"));
        f.add(obj("ns", "b", "1"));
        f.update(obj("ns", "a", "2"));
        // A queued key keeps its position; a new key goes to the tail.
        assert_eq!(f.list_keys(), vec!["ns/a", "ns/b"]);
        assert_eq!(
            kinds(&f.get_by_key("ns/a").unwrap()),
            vec![DeltaType::Added, DeltaType::Updated]
        );
        let (d, _) = pop1(&f).await;
        assert_eq!(d.len(), 2);
        assert_eq!(d[1].object().unwrap().resource_version(), "2");
        // Popped key leaves both the queue and the items (spec 2.2).
        assert!(f.get_by_key("ns/a").is_none());
        assert_eq!(f.list_keys(), vec!["ns/b"]);
    }

    #[test]
    fn spec_2_3_two_deletes_keep_the_older_one() {
        let f = fifo_with(None);
        f.add(obj("ns", "a", "1"));
        f.delete(obj("ns", "a", "2").into());
        f.delete(obj("ns", "a", "3").into());
        let d = f.get_by_key("ns/a").unwrap();
        assert_eq!(kinds(&d), vec![DeltaType::Added, DeltaType::Deleted]);
        assert_eq!(d[1].object().unwrap().resource_version(), "2");
    }

    #[test]
    fn spec_2_3_tombstone_then_delete_keeps_the_newer_one() {
        let f = fifo_with(None);
        f.add(obj("ns", "a", "1"));
        f.replace(vec![]); // tombstones ns/a
        f.delete(obj("ns", "a", "7").into());
        let d = f.get_by_key("ns/a").unwrap();
        assert_eq!(kinds(&d), vec![DeltaType::Added, DeltaType::Deleted]);
        assert!(!d[1].is_tombstone());
        assert_eq!(d[1].object().unwrap().resource_version(), "7");
    }

    #[test]
    fn spec_2_4_delete_of_unknown_key_is_ignored() {
        // Without knownObjects: only queued keys count.
        let f = fifo_with(None);
        f.delete(obj("ns", "a", "1").into());
        assert!(f.is_empty());
        // With knownObjects: a key known downstream is deleted even with nothing queued.
        let known = Arc::new(Store::new());
        known.add(obj("ns", "k", "1"));
        let f = fifo_with(Some(known));
        f.delete(obj("ns", "a", "1").into());
        assert!(f.is_empty());
        f.delete(obj("ns", "k", "2").into());
        assert_eq!(f.list_keys(), vec!["ns/k"]);
    }

    #[test]
    fn spec_2_5_replace_emits_replaced_or_sync() {
        let f = fifo_with(None);
        f.replace(vec![obj("ns", "a", "1")]);
        assert_eq!(
            kinds(&f.get_by_key("ns/a").unwrap()),
            vec![DeltaType::Replaced]
        );
        let f = DeltaFifo::new(DeltaFifoOptions::default());
        f.replace(vec![obj("ns", "a", "1")]);
        assert_eq!(kinds(&f.get_by_key("ns/a").unwrap()), vec![DeltaType::Sync]);
    }

    #[test]
    fn spec_2_5_regression_7_2_queued_only_keys_get_tombstones() {
        // k/k#115620: a key only in the queue, absent from the relist, must be deleted.
        let known = Arc::new(Store::new());
        let f = fifo_with(Some(known));
        f.add(obj("ns", "queued", "1"));
        f.update(obj("ns", "queued", "2"));
        f.replace(vec![obj("ns", "a", "5")]);
        let d = f.get_by_key("ns/queued").unwrap();
        assert_eq!(
            kinds(&d),
            vec![DeltaType::Added, DeltaType::Updated, DeltaType::Deleted]
        );
        match &d[2] {
            Delta::Deleted(ObjOrTombstone::Tombstone(t)) => {
                assert_eq!(t.key, "ns/queued");
                // The newest queued state rides in the tombstone.
                assert_eq!(t.obj.as_ref().unwrap().resource_version(), "2");
            }
            other => panic!("expected tombstone, got {other:?}"),
        }
    }

    #[test]
    fn spec_2_5_known_keys_missing_from_list_get_tombstones_with_known_state() {
        let known = Arc::new(Store::new());
        known.add(obj("ns", "gone", "3"));
        known.add(obj("ns", "stay", "3"));
        known.add(obj("ns", "busy", "3"));
        let f = fifo_with(Some(known));
        f.update(obj("ns", "busy", "4"));
        f.replace(vec![obj("ns", "stay", "3")]);
        match f.get_by_key("ns/gone").unwrap().as_slice() {
            [Delta::Deleted(ObjOrTombstone::Tombstone(t))] => {
                assert_eq!(t.obj.as_ref().unwrap().resource_version(), "3")
            }
            other => panic!("unexpected {other:?}"),
        }
        // A known key with queued deltas gets exactly one tombstone (from the queued pass),
        // carrying the queued (newer) state.
        let busy = f.get_by_key("ns/busy").unwrap();
        assert_eq!(kinds(&busy), vec![DeltaType::Updated, DeltaType::Deleted]);
        assert_eq!(busy[1].object().unwrap().resource_version(), "4");
        assert_eq!(
            kinds(&f.get_by_key("ns/stay").unwrap()),
            vec![DeltaType::Replaced]
        );
    }

    #[tokio::test]
    async fn spec_2_5_and_2_7_initial_population_and_has_synced() {
        let known = Arc::new(Store::new());
        known.add(obj("ns", "gone", "1"));
        let f = fifo_with(Some(known));
        assert!(!f.has_synced());
        f.replace(vec![obj("ns", "a", "1"), obj("ns", "b", "1")]);
        // Two items + one deletion = three initial pops.
        for i in 0..3 {
            assert!(!f.has_synced(), "synced too early at pop {i}");
            let (_, initial) = pop1(&f).await;
            assert!(initial, "pop {i} must be in the initial list");
        }
        assert!(f.has_synced());
        // A later Replace does not reset HasSynced; later pops are not initial.
        f.replace(vec![obj("ns", "a", "2")]);
        assert!(f.has_synced());
        let (_, initial) = pop1(&f).await;
        assert!(!initial);
    }

    #[tokio::test]
    async fn spec_2_5_initial_population_counts_keys_queued_before_the_first_replace() {
        // A resync can queue known keys before the first Replace (it does not populate):
        // those the list names count once, those it lacks count as their deletion.
        let known = Arc::new(Store::new());
        known.add(obj("ns", "listed", "1"));
        known.add(obj("ns", "gone", "1"));
        let f = fifo_with(Some(known));
        f.resync();
        assert!(!f.has_synced());
        f.replace(vec![obj("ns", "listed", "2"), obj("ns", "new", "1")]);
        let mut popped = Vec::new();
        for i in 0..3 {
            assert!(!f.has_synced(), "synced too early at pop {i}");
            let (d, initial) = pop1(&f).await;
            assert!(initial, "pop {i} must be in the initial list");
            popped.push((d[0].key(), kinds(&d)));
        }
        assert!(f.has_synced());
        // The resync queued the known keys in the store's (hash) order.
        popped.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            popped,
            vec![
                (
                    "ns/gone".to_owned(),
                    vec![DeltaType::Sync, DeltaType::Deleted]
                ),
                (
                    "ns/listed".to_owned(),
                    vec![DeltaType::Sync, DeltaType::Replaced]
                ),
                ("ns/new".to_owned(), vec![DeltaType::Replaced]),
            ]
        );
    }

    #[test]
    fn a_queued_key_with_one_delta_needs_no_heap_block_for_it() {
        // A relist queues one delta per object: the delta is two words and sits inline in
        // the item map's slot (see `Deltas`).
        assert_eq!(std::mem::size_of::<Delta>(), 16);
        assert_eq!(std::mem::size_of::<Deltas>(), 16);
        let mut d = Deltas::one(Delta::Sync(obj("ns", "a", "1")));
        assert!(d.many_mut().is_none());
        d.push(Delta::Updated(obj("ns", "a", "2")));
        assert_eq!(kinds(&d), [DeltaType::Sync, DeltaType::Updated]);
        let rvs: Vec<String> = d
            .into_iter()
            .map(|d| {
                d.object()
                    .map(|o| o.resource_version().to_owned())
                    .unwrap_or_default()
            })
            .collect();
        assert_eq!(rvs, ["1", "2"]);
    }

    #[test]
    fn relist_and_resync_share_the_known_stores_key_allocations() {
        // Memory at a relist's peak: a queued known key costs no second allocation.
        let known = Arc::new(Store::new());
        known.add(obj("ns", "a", "1"));
        known.add(obj("ns", "gone", "1"));
        let f = fifo_with(Some(known.clone()));
        f.replace(vec![obj("ns", "a", "2"), obj("ns", "new", "1")]);
        let queued: Vec<Arc<str>> = f.state.lock().queue.iter().cloned().collect();
        let shared = |k: &str| {
            let q = queued.iter().find(|q| &***q == k).expect("queued");
            Arc::ptr_eq(q, &known.shared_key(k).expect("known"))
        };
        assert!(
            shared("ns/a"),
            "a relisted known key shares the store's key"
        );
        assert!(
            shared("ns/gone"),
            "a vanished known key shares the store's key"
        );
        assert!(queued.iter().any(|q| &**q == "ns/new"));

        let f = fifo_with(Some(known.clone()));
        f.resync();
        let queued: Vec<Arc<str>> = f.state.lock().queue.iter().cloned().collect();
        assert_eq!(queued.len(), 2);
        for q in &queued {
            assert!(Arc::ptr_eq(q, &known.shared_key(q).expect("known")));
        }
    }

    #[test]
    fn spec_2_7_has_synced_after_add_before_any_replace() {
        let f = fifo_with(None);
        f.add(obj("ns", "a", "1"));
        assert!(f.has_synced());
        let f = fifo_with(None);
        f.delete(obj("ns", "a", "1").into());
        assert!(f.has_synced());
    }

    #[tokio::test]
    async fn spec_2_6_resync_only_known_keys_with_nothing_queued_7_4() {
        // k/k#32125: a queued (newer) delta must not be overtaken by a stale Sync.
        let known = Arc::new(Store::new());
        known.add(obj("ns", "idle", "1"));
        known.add(obj("ns", "busy", "1"));
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let f = DeltaFifo::new(DeltaFifoOptions {
            known_objects: Some(known as Arc<dyn KnownObjects>),
            emit_delta_type_replaced: true,
            transform: Some(Arc::new(move |o| {
                c.fetch_add(1, Ordering::SeqCst);
                o
            })),
        });
        f.update(obj("ns", "busy", "2"));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        f.resync();
        assert_eq!(
            kinds(&f.get_by_key("ns/idle").unwrap()),
            vec![DeltaType::Sync]
        );
        assert_eq!(
            kinds(&f.get_by_key("ns/busy").unwrap()),
            vec![DeltaType::Updated]
        );
        // k/k#124337: the transform is not applied to Sync deltas.
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn transform_applies_to_new_objects_and_relist_items_but_not_tombstones() {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let f = DeltaFifo::new(DeltaFifoOptions {
            known_objects: None,
            emit_delta_type_replaced: true,
            transform: Some(Arc::new(move |o| {
                c.fetch_add(1, Ordering::SeqCst);
                o
            })),
        });
        f.add(obj("ns", "a", "1"));
        f.replace(vec![obj("ns", "b", "1")]); // tombstone for ns/a is not transformed
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn spec_2_7_pop_blocks_until_an_item_arrives() {
        let f = Arc::new(fifo_with(None));
        let f2 = f.clone();
        let popper = tokio::spawn(async move { pop1(&f2).await });
        tokio::task::yield_now().await;
        assert!(!popper.is_finished());
        f.add(obj("ns", "a", "1"));
        let (d, _) = tokio::time::timeout(Duration::from_secs(5), popper)
            .await
            .expect("pop did not wake")
            .unwrap();
        assert_eq!(d[0].key(), "ns/a");
    }

    #[tokio::test]
    async fn spec_2_7_closed_queue_drains_then_errors() {
        let f = Arc::new(fifo_with(None));
        f.add(obj("ns", "a", "1"));
        f.close();
        let (d, _) = pop1(&f).await;
        assert_eq!(d[0].key(), "ns/a");
        let r = f.pop(|_, _| Ok::<(), ()>(())).await;
        assert!(matches!(r, Err(PopError::Closed(FifoClosed))));
        // A pop already waiting is woken by close.
        let f = Arc::new(fifo_with(None));
        let f2 = f.clone();
        let waiter = tokio::spawn(async move { f2.pop(|_, _| Ok::<(), ()>(())).await });
        tokio::task::yield_now().await;
        f.close();
        let r = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("close did not wake pop")
            .unwrap();
        assert!(matches!(r, Err(PopError::Closed(_))));
    }

    #[tokio::test]
    async fn spec_2_7_process_runs_under_the_queue_lock() {
        // While process runs, nothing else can touch the queue: is_empty would deadlock, so
        // observe via try_lock instead.
        let f = fifo_with(None);
        f.add(obj("ns", "a", "1"));
        let mut held = false;
        f.pop(|_, _| {
            held = f.state.try_lock().is_none();
            Ok::<(), ()>(())
        })
        .await
        .unwrap();
        assert!(held);
    }

    /// A relist's list decode asks the pool for every item while the informer may be popping
    /// (queue lock held, indexer write lock taken inside). The pool must take only the
    /// indexer's read lock, never the queue's, or the reflector and the consumer could wait on
    /// each other. Checked from inside `process`, where the queue lock is held; on a thread
    /// with a deadline, because a second lock of the queue would hang rather than fail.
    #[test]
    fn object_pool_reads_the_known_objects_without_the_queue_lock() {
        let known = Arc::new(Store::new());
        let cached = obj("ns", "a", "1");
        known.add(cached.clone());
        let f = Arc::new(fifo_with(Some(known)));
        f.add(obj("ns", "b", "1"));
        let pool = f
            .object_pool()
            .expect("a FIFO with known objects has a pool");
        let (tx, rx) = std::sync::mpsc::channel();
        let f2 = f.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(f2.pop(|_, _| {
                assert!(
                    f2.state.try_lock().is_none(),
                    "process runs under the queue lock"
                );
                let _ = tx.send(pool.get("ns/a"));
                Ok::<(), ()>(())
            }))
            .unwrap();
        });
        let got = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the pool blocked on the queue lock");
        assert!(Object::ptr_eq(&got.unwrap(), &cached));
    }

    /// Pops everything queued, applying each entry to `known` as the informer does; each
    /// entry as (key, delta kinds, is_in_initial_list).
    async fn drain(f: &DeltaFifo, known: &Store) -> Vec<(String, Vec<DeltaType>, bool)> {
        let mut out = Vec::new();
        while !f.is_empty() {
            let (deltas, init) = pop1(f).await;
            for d in deltas.iter() {
                match d {
                    Delta::Deleted(_) => known.delete_key(&d.key()),
                    d => known.add(d.object().cloned().expect("an object")),
                }
            }
            out.push((
                deltas[0].key(),
                deltas.iter().map(Delta::kind).collect(),
                init,
            ));
        }
        out
    }

    /// What [`drain`] returns, written as (key, delta kinds, is_in_initial_list).
    fn entries(want: &[(&str, &[DeltaType], bool)]) -> Vec<(String, Vec<DeltaType>, bool)> {
        want.iter()
            .map(|(k, kinds, init)| (k.to_string(), kinds.to_vec(), *init))
            .collect()
    }

    /// An informer's first list is popped before what the watch queued meanwhile, each key's
    /// changes in order: an update and a deletion of listed keys come after their list items
    /// (the deletion is queued although its key was neither queued in `items` nor known when it
    /// came), and only the list's items are in the initial list (spec 2.5, 2.7).
    #[tokio::test]
    async fn spec_2_7_a_first_list_pops_before_later_changes_in_each_keys_order() {
        use DeltaType::*;
        let known = Arc::new(Store::new());
        let f = fifo_with(Some(known.clone()));
        f.replace(vec![
            obj("ns", "a", "1"),
            obj("ns", "b", "1"),
            obj("ns", "c", "1"),
        ]);
        f.update(obj("ns", "b", "2"));
        f.delete(obj("ns", "c", "1").into());
        f.add(obj("ns", "d", "1"));
        assert_eq!(f.len(), 6);
        assert_eq!(
            f.list_keys(),
            ["ns/a", "ns/b", "ns/c", "ns/b", "ns/c", "ns/d"]
        );
        assert_eq!(
            f.get_by_key("ns/b")
                .map(|d| d.iter().map(Delta::kind).collect::<Vec<_>>()),
            Some(vec![Replaced, Updated])
        );
        assert!(!f.has_synced());
        let popped = drain(&f, &known).await;
        let want = entries(&[
            ("ns/a", &[Replaced], true),
            ("ns/b", &[Replaced], true),
            ("ns/c", &[Replaced], true),
            ("ns/b", &[Updated], false),
            ("ns/c", &[Deleted], false),
            ("ns/d", &[Added], false),
        ]);
        assert_eq!(popped, want);
        assert!(f.has_synced());
        assert_eq!(known.list_keys().len(), 3);
        assert_eq!(known.get_by_key("ns/b").unwrap().resource_version(), "2");
        assert!(known.get_by_key("ns/c").is_none());
    }

    /// A relist that comes while a first list is still being popped: keys of the first list
    /// the relist has again get their new state after the old, the ones it lacks (queued or
    /// already known) a tombstone with their last state; the initial count still ends with
    /// the first list (spec 2.5).
    #[tokio::test]
    async fn spec_2_5_a_relist_during_a_first_list_tombstones_what_it_lacks() {
        use DeltaType::*;
        let known = Arc::new(Store::new());
        let f = fifo_with(Some(known.clone()));
        f.replace(vec![
            obj("ns", "a", "1"),
            obj("ns", "b", "1"),
            obj("ns", "c", "1"),
        ]);
        let (first, init) = pop1(&f).await;
        assert!(init);
        known.add(first[0].object().cloned().unwrap());
        f.replace(vec![obj("ns", "b", "2"), obj("ns", "d", "1")]);
        let c_tombstone = f
            .get_by_key("ns/c")
            .and_then(|d| d.last().cloned())
            .expect("c queued");
        match c_tombstone {
            Delta::Deleted(ObjOrTombstone::Tombstone(t)) => {
                assert_eq!(
                    t.obj.map(|o| o.resource_version().to_owned()),
                    Some("1".into())
                )
            }
            other => panic!("{other:?}"),
        }
        let popped = drain(&f, &known).await;
        let want = entries(&[
            ("ns/b", &[Replaced], true),
            ("ns/c", &[Replaced], true),
            ("ns/b", &[Replaced], false),
            ("ns/d", &[Replaced], false),
            ("ns/c", &[Deleted], false),
            ("ns/a", &[Deleted], false),
        ]);
        assert_eq!(popped, want);
        let mut keys = known.list_keys();
        keys.sort();
        assert_eq!(keys, ["ns/b", "ns/d"]);
        assert_eq!(known.get_by_key("ns/b").unwrap().resource_version(), "2");
    }

    #[tokio::test]
    async fn drained_queue_gives_back_the_room_a_large_relist_grew() {
        // A first list waits in `listed`; a relist (here: something was queued before it) is
        // merged into `items` and `queue`. Either gives its room back once drained.
        for first in [true, false] {
            let f = fifo_with(None);
            if !first {
                f.add(obj("ns", "queued", "1"));
            }
            f.replace(
                (0..5000)
                    .map(|i| obj("ns", &format!("o{i}"), "1"))
                    .collect(),
            );
            {
                let s = f.state.lock();
                if first {
                    assert!(s.listed.len() == 5000 && s.items.is_empty());
                } else {
                    assert!(s.listed.is_empty() && s.items.capacity() >= 5000);
                }
            }
            for _ in 0..f.len() {
                pop1(&f).await;
            }
            let s = f.state.lock();
            assert!(s.items.is_empty() && s.queue.is_empty() && s.listed.is_empty());
            assert_eq!(s.listed.capacity(), 0);
            assert!(
                s.items.capacity() <= 2 * SPARE_CAPACITY,
                "{}",
                s.items.capacity()
            );
            assert!(
                s.queue.capacity() <= 2 * SPARE_CAPACITY,
                "{}",
                s.queue.capacity()
            );
        }
    }
}
