//! The revisioned store: every object as shared JSON bytes plus parsed metadata, one global
//! resourceVersion counter, and a bounded history of events per resource.
//!
//! Why history instead of per-watcher queues: a watcher is just a cursor (the last RV it sent).
//! Replaying from an RV, live streaming, detecting a cursor that fell out of the window (410) and
//! serving an Exact LIST at an older RV all read the same event log, and each event is serialized
//! once into a ready-to-write line that every watcher shares.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::watch;

use kwh_client::object::{object_key, Object};

/// Kind of a stored change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    /// The wire name (spec 6.3).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change in a resource's history.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub ty: EventType,
    pub key: Box<str>,
    /// The object after the change; for `Deleted`, its last state stamped with the deletion RV.
    pub obj: Object,
    /// The object before the change (`None` for `Added`): needed to tell selector transitions
    /// apart and to rebuild the state at an older RV.
    pub prev: Option<Object>,
}

/// Append one watch-stream line (spec 6.3), `{"type":…,"object":…}\n`, around raw object
/// bytes. Watchers write straight into their outgoing chunk, so the stored object bytes are the
/// only copy an event needs.
pub fn put_event(b: &mut BytesMut, ty: &str, raw: &[u8]) {
    b.reserve(raw.len() + 32);
    b.put_slice(b"{\"type\":\"");
    b.put_slice(ty.as_bytes());
    b.put_slice(b"\",\"object\":");
    b.put_slice(raw);
    b.put_slice(b"}\n");
}

/// One watch-stream line as its own buffer.
pub fn event_line(ty: &str, raw: &[u8]) -> Bytes {
    let mut b = BytesMut::new();
    put_event(&mut b, ty, raw);
    b.freeze()
}

/// The requested RV is older than what the history window still holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too old resource version: {requested} ({oldest})")]
pub struct TooOld {
    pub requested: u64,
    /// The oldest RV from which the history is complete.
    pub oldest: u64,
    /// A compaction, not the watch history's window, is what passed `requested` (a LIST
    /// only: watches are served from the history whatever the compaction point).
    pub compacted: bool,
}

/// What a [`Store::mutate`] closure decides.
#[derive(Debug)]
pub enum Mutation {
    /// Store this object (its `metadata.resourceVersion` is overwritten).
    Put(Value),
    /// Remove the object.
    Delete,
    /// Keep the current state; no event.
    Unchanged,
}

/// Result of a committed mutation.
#[derive(Debug, Clone)]
pub enum Outcome {
    Created(Object),
    Updated(Object),
    /// The last state, stamped with the deletion RV.
    Deleted(Object),
    Unchanged(Option<Object>),
}

/// One page of a LIST.
#[derive(Debug, Default)]
pub struct ListPage {
    /// The snapshot's RV.
    pub rv: u64,
    pub items: Vec<Object>,
    /// Key of the last item returned when more keys follow it.
    pub next_after: Option<String>,
    /// Keys after this page (only when counted).
    pub remaining: Option<usize>,
}

struct ResourceState {
    objects: BTreeMap<String, Object>,
    history: VecDeque<Arc<Event>>,
    /// Every event with an RV above this is still in `history`.
    floor: u64,
    tx: watch::Sender<u64>,
}

impl ResourceState {
    fn new() -> Self {
        ResourceState {
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            floor: 0,
            tx: watch::channel(0).0,
        }
    }
}

#[derive(Default)]
struct Inner {
    rv: u64,
    /// The storage's compaction point: a LIST at an older RV (an Exact read, a continue
    /// token's snapshot) is gone, while watches are still served from the per-resource history
    /// (the watch cache), as kube-apiserver serves them after an etcd compaction.
    compacted: u64,
    resources: HashMap<Arc<str>, ResourceState>,
    /// owner uid → dependents (store key, object key), for garbage collection.
    owners: HashMap<Box<str>, HashSet<(Arc<str>, String)>>,
}

impl Inner {
    fn res(&mut self, res: &Arc<str>) -> &mut ResourceState {
        self.resources
            .entry(res.clone())
            .or_insert_with(ResourceState::new)
    }
}

/// The store. All operations are short critical sections; nothing awaits under the lock.
pub struct Store {
    inner: Mutex<Inner>,
    window: AtomicUsize,
    /// `remainingItemCount`s of recent pages, so that the next page of a paginated LIST need
    /// not count the rest of the collection again (which made a paged LIST quadratic: 2.7 s of
    /// CPU for 100,000 objects in pages of 500).
    remaining: Mutex<VecDeque<Remaining>>,
}

/// How many keys of a snapshot follow a page: `count` keys of resource `res` under `prefix`,
/// as of RV `at`, from key `from` on (the next page's `start`). A snapshot at an RV never
/// changes, so the count stays true for as long as that RV can be listed at all.
struct Remaining {
    res: Box<str>,
    prefix: Box<str>,
    at: u64,
    from: String,
    count: usize,
}

/// Paginated LISTs in progress whose counts are remembered (the oldest is dropped).
const REMAINING_MEMO: usize = 32;

/// Errors of the mutation path that are not the caller's own.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot serialize object: {0}")]
    Json(#[from] serde_json::Error),
    #[error("cannot parse stored object: {0}")]
    Object(#[from] kwh_client::object::ObjectError),
}

impl Store {
    /// A store keeping at most `window` events per resource.
    pub fn new(window: usize) -> Self {
        Store {
            inner: Mutex::new(Inner::default()),
            window: AtomicUsize::new(window.max(1)),
            remaining: Mutex::new(VecDeque::new()),
        }
    }

    /// The latest resourceVersion handed out.
    pub fn current_rv(&self) -> u64 {
        self.inner.lock().rv
    }

    /// The object at `key`.
    pub fn get(&self, res: &str, key: &str) -> Option<Object> {
        let inner = self.inner.lock();
        inner.resources.get(res)?.objects.get(key).cloned()
    }

    /// Number of objects of a resource.
    pub fn len(&self, res: &str) -> usize {
        let inner = self.inner.lock();
        inner.resources.get(res).map_or(0, |r| r.objects.len())
    }

    /// Keys of a resource starting with `prefix` (`"ns/"` for a namespace, `""` for all).
    pub fn keys(&self, res: &str, prefix: &str) -> Vec<String> {
        let inner = self.inner.lock();
        let Some(st) = inner.resources.get(res) else {
            return Vec::new();
        };
        st.objects
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Atomically read the object at `key`, let `f` decide, and commit the decision with the
    /// next resourceVersion. `f` runs under the store lock, so concurrent writers serialize and a
    /// stale-RV check inside `f` is race-free.
    pub fn mutate<E: From<StoreError>>(
        &self,
        res: &Arc<str>,
        key: &str,
        f: impl FnOnce(Option<&Object>) -> Result<Mutation, E>,
    ) -> Result<Outcome, E> {
        self.mutate_with(res, key, false, f)
    }

    /// [`Store::mutate`], or with `dry_run` only what it would produce: the outcome is computed
    /// (the object keeps its current resourceVersion) but nothing is stored and no event is sent.
    ///
    /// A dry run decides outside the lock, on the object as it was read: kube-apiserver's dry
    /// runs read and compute without serializing with the writes of others, and a dry run
    /// holding the lock would delay every write and watch event meanwhile (a shadow revision's
    /// dry runs would slow the live revision's notifications).
    pub fn mutate_with<E: From<StoreError>>(
        &self,
        res: &Arc<str>,
        key: &str,
        dry_run: bool,
        f: impl FnOnce(Option<&Object>) -> Result<Mutation, E>,
    ) -> Result<Outcome, E> {
        if dry_run {
            let current = {
                let g = self.inner.lock();
                g.resources
                    .get(res)
                    .and_then(|r| r.objects.get(key).cloned())
            };
            let decision = f(current.as_ref())?;
            return Ok(match (decision, current) {
                (Mutation::Put(v), cur) => {
                    let obj = Object::from_bytes(Bytes::from(
                        super::encode::to_vec(&v).map_err(StoreError::from)?,
                    ))
                    .map_err(StoreError::from)?;
                    if cur.is_some() {
                        Outcome::Updated(obj)
                    } else {
                        Outcome::Created(obj)
                    }
                }
                (Mutation::Delete, Some(cur)) => Outcome::Deleted(cur),
                (_, cur) => Outcome::Unchanged(cur),
            });
        }
        let window = self.window.load(Ordering::Relaxed);
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        let current = inner.res(res).objects.get(key).cloned();
        let decision = f(current.as_ref())?;
        let rv = inner.rv + 1;
        let (ty, obj) = match (decision, &current) {
            (Mutation::Unchanged, _) | (Mutation::Delete, None) => {
                return Ok(Outcome::Unchanged(current))
            }
            (Mutation::Put(mut v), _) => {
                set_rv(&mut v, rv);
                let obj = Object::from_bytes(Bytes::from(
                    super::encode::to_vec(&v).map_err(StoreError::from)?,
                ))
                .map_err(StoreError::from)?;
                let ty = if current.is_some() {
                    EventType::Modified
                } else {
                    EventType::Added
                };
                (ty, obj)
            }
            (Mutation::Delete, Some(cur)) => {
                let mut v = cur.to_value().map_err(StoreError::from)?;
                set_rv(&mut v, rv);
                let obj = Object::from_bytes(Bytes::from(
                    super::encode::to_vec(&v).map_err(StoreError::from)?,
                ))
                .map_err(StoreError::from)?;
                (EventType::Deleted, obj)
            }
        };
        inner.rv = rv;
        if let Some(old) = &current {
            for o in old.meta().owner_references.iter() {
                if let Some(set) = inner.owners.get_mut(o.uid) {
                    set.remove(&(res.clone(), key.to_owned()));
                    if set.is_empty() {
                        inner.owners.remove(o.uid);
                    }
                }
            }
        }
        if ty != EventType::Deleted {
            for o in obj.meta().owner_references.iter() {
                inner
                    .owners
                    .entry(o.uid.into())
                    .or_default()
                    .insert((res.clone(), key.to_owned()));
            }
        }
        let st = inner.res(res);
        if ty == EventType::Deleted {
            st.objects.remove(key);
        } else {
            st.objects.insert(key.to_owned(), obj.clone());
        }
        st.history.push_back(Arc::new(Event {
            rv,
            ty,
            key: key.into(),
            obj: obj.clone(),
            prev: current,
        }));
        while st.history.len() > window {
            if let Some(e) = st.history.pop_front() {
                st.floor = e.rv;
            }
        }
        st.tx.send_replace(rv);
        Ok(match ty {
            EventType::Added => Outcome::Created(obj),
            EventType::Modified => Outcome::Updated(obj),
            EventType::Deleted => Outcome::Deleted(obj),
        })
    }

    /// One page of the objects under `prefix`, as of `at` (`None` = now), starting at key
    /// `start` (inclusive), keeping those `filter` accepts, at most `limit` of them.
    /// An `at` older than the history window → [`TooOld`].
    #[allow(clippy::too_many_arguments)]
    pub fn list(
        &self,
        res: &str,
        at: Option<u64>,
        prefix: &str,
        start: &str,
        limit: Option<usize>,
        filter: &dyn Fn(&Object) -> bool,
        count_remaining: bool,
    ) -> Result<ListPage, TooOld> {
        let inner = self.inner.lock();
        let now = inner.rv;
        let at = at.unwrap_or(now);
        let empty = ResourceState::new();
        let st = inner.resources.get(res).unwrap_or(&empty);
        let oldest = st.floor.max(inner.compacted);
        if at < oldest {
            return Err(TooOld {
                requested: at,
                oldest,
                compacted: at < inner.compacted,
            });
        }
        // Undo the events after `at`: key → its state at `at`.
        let mut overrides: BTreeMap<&str, Option<&Object>> = BTreeMap::new();
        let from = st.history.partition_point(|e| e.rv <= at);
        for e in st.history.range(from..).rev() {
            overrides.insert(&e.key, e.prev.as_ref());
        }
        let start = if start < prefix { prefix } else { start };
        let mut cur = st
            .objects
            .range::<str, _>((Bound::Included(start), Bound::Unbounded))
            .filter(|(k, _)| !overrides.contains_key(k.as_str()))
            .map(|(k, o)| (k.as_str(), o))
            .peekable();
        let mut old = overrides
            .range::<str, _>((Bound::Included(start), Bound::Unbounded))
            .filter_map(|(k, o)| o.map(|o| (*k, o)))
            .peekable();
        let mut merged = std::iter::from_fn(move || match (cur.peek(), old.peek()) {
            (Some(a), Some(b)) if b.0 < a.0 => old.next(),
            (Some(_), _) => cur.next(),
            (None, _) => old.next(),
        })
        .take_while(|(k, _)| k.starts_with(prefix));
        let limit = limit.unwrap_or(usize::MAX);
        let mut page = ListPage {
            rv: at,
            ..Default::default()
        };
        let mut last = None;
        // Keys passed over, accepted or not: what a remembered count of the keys from `start`
        // on is reduced by.
        let mut walked = 0usize;
        for (k, o) in merged.by_ref() {
            walked += 1;
            if filter(o) {
                page.items.push(o.clone());
                last = Some(k);
                if page.items.len() >= limit {
                    break;
                }
            }
        }
        if page.items.len() >= limit {
            if count_remaining {
                // The previous page of this LIST counted the keys from `start` on; else count.
                let n = match self.take_remaining(res, prefix, at, start) {
                    Some(from_start) => from_start.saturating_sub(walked),
                    None => merged.count(),
                };
                if n > 0 {
                    page.remaining = Some(n);
                    page.next_after = last.map(str::to_owned);
                    if let Some(last) = last {
                        self.remember_remaining(Remaining {
                            res: res.into(),
                            prefix: prefix.into(),
                            at,
                            from: format!("{last}\u{0}"),
                            count: n,
                        });
                    }
                }
            } else if merged.next().is_some() {
                page.next_after = last.map(str::to_owned);
            }
        }
        Ok(page)
    }

    /// The remembered count of the keys from `from` on (see [`Remaining`]), forgotten as it is
    /// read: the page that reads it remembers the next one.
    fn take_remaining(&self, res: &str, prefix: &str, at: u64, from: &str) -> Option<usize> {
        let mut memo = self.remaining.lock();
        let i = memo
            .iter()
            .position(|r| r.at == at && *r.res == *res && *r.prefix == *prefix && r.from == from)?;
        memo.remove(i).map(|r| r.count)
    }

    fn remember_remaining(&self, r: Remaining) {
        let mut memo = self.remaining.lock();
        if memo.len() >= REMAINING_MEMO {
            memo.pop_front();
        }
        memo.push_back(r);
    }

    /// The current objects under `prefix` and the RV they are consistent with.
    pub fn snapshot(&self, res: &str, prefix: &str) -> (u64, Vec<Object>) {
        let inner = self.inner.lock();
        let items = inner.resources.get(res).map_or_else(Vec::new, |st| {
            st.objects
                .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
                .take_while(|(k, _)| k.starts_with(prefix))
                .map(|(_, o)| o.clone())
                .collect()
        });
        (inner.rv, items)
    }

    /// A receiver that changes whenever the resource gets a new event.
    pub fn subscribe(&self, res: &Arc<str>) -> watch::Receiver<u64> {
        self.inner.lock().res(res).tx.subscribe()
    }

    /// Append to `out` up to `max` events with an RV above `after`. Returns the RV up to which the
    /// caller has now seen everything of this resource (the global RV when nothing is left).
    pub fn events_after(
        &self,
        res: &str,
        after: u64,
        max: usize,
        out: &mut Vec<Arc<Event>>,
    ) -> Result<u64, TooOld> {
        let inner = self.inner.lock();
        let Some(st) = inner.resources.get(res) else {
            return Ok(inner.rv.max(after));
        };
        if after < st.floor {
            return Err(TooOld {
                requested: after,
                oldest: st.floor,
                compacted: false,
            });
        }
        let from = st.history.partition_point(|e| e.rv <= after);
        let end = st.history.len().min(from.saturating_add(max));
        out.extend(st.history.range(from..end).cloned());
        if end == st.history.len() {
            Ok(inner.rv.max(after))
        } else {
            Ok(out.last().map_or(after, |e| e.rv))
        }
    }

    /// Compacts the storage at the current RV, as `etcdctl compact` does: LISTs at an older RV
    /// (Exact reads, continue tokens) are too old from now on; watches from an older RV are
    /// still served from the history, the watch cache. True when it moved the compaction point.
    pub fn compact(&self) -> bool {
        let mut inner = self.inner.lock();
        let moved = inner.compacted < inner.rv;
        inner.compacted = inner.rv;
        moved
    }

    /// Forgets every resource's history, as a watch cache that restarted or fell behind its
    /// window: any older RV is too old for watches and lists alike. True when any event was
    /// dropped.
    pub fn expire_history(&self) -> bool {
        let mut inner = self.inner.lock();
        let rv = inner.rv;
        let mut dropped = false;
        for st in inner.resources.values_mut() {
            dropped |= !st.history.is_empty();
            st.history.clear();
            st.floor = rv;
        }
        dropped
    }

    /// Change the history window; shrinking drops the oldest events at the next write.
    pub fn set_window(&self, window: usize) {
        self.window.store(window.max(1), Ordering::Relaxed);
    }

    /// Objects whose ownerReferences name `uid`.
    pub fn dependents(&self, uid: &str) -> Vec<(Arc<str>, String)> {
        let inner = self.inner.lock();
        inner
            .owners
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether an object with this uid exists under (`res`, `key`).
    pub fn has_uid(&self, res: &str, key: &str, uid: &str) -> bool {
        self.get(res, key).is_some_and(|o| o.uid() == uid)
    }
}

/// The key of an object in its resource: `namespace/name` or `name`.
pub fn key_of(namespace: Option<&str>, name: &str) -> String {
    object_key(namespace, name)
}

fn set_rv(v: &mut Value, rv: u64) {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(name: &str, data: &str) -> Value {
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":name,"namespace":"ns"},"data":{"k":data}})
    }

    fn put(s: &Store, res: &Arc<str>, name: &str, data: &str) -> Outcome {
        s.mutate::<StoreError>(res, &format!("ns/{name}"), |_| {
            Ok(Mutation::Put(cm(name, data)))
        })
        .unwrap()
    }

    fn del(s: &Store, res: &Arc<str>, name: &str) -> Outcome {
        s.mutate::<StoreError>(res, &format!("ns/{name}"), |_| Ok(Mutation::Delete))
            .unwrap()
    }

    fn names(p: &ListPage) -> Vec<String> {
        p.items.iter().map(|o| o.name().to_owned()).collect()
    }

    #[test]
    fn one_global_counter_and_event_lines() {
        let s = Store::new(100);
        let a: Arc<str> = "/configmaps".into();
        let b: Arc<str> = "/secrets".into();
        assert!(matches!(put(&s, &a, "x", "1"), Outcome::Created(_)));
        put(&s, &b, "y", "1");
        let Outcome::Updated(o) = put(&s, &a, "x", "2") else {
            panic!("expected update")
        };
        assert_eq!(o.resource_version(), "3");
        let Outcome::Deleted(d) = del(&s, &a, "x") else {
            panic!("expected delete")
        };
        assert_eq!(d.resource_version(), "4", "DELETED carries the deletion RV");
        let mut ev = Vec::new();
        assert_eq!(s.events_after("/configmaps", 0, 10, &mut ev), Ok(4));
        let types: Vec<_> = ev.iter().map(|e| e.ty).collect();
        assert_eq!(
            types,
            [EventType::Added, EventType::Modified, EventType::Deleted]
        );
        let line = event_line(ev[0].ty.as_str(), ev[0].obj.raw());
        assert!(line.starts_with(b"{\"type\":\"ADDED\",\"object\":{"));
        assert!(line.ends_with(b"}}\n"));
    }

    #[test]
    fn window_evicts_and_reports_too_old() {
        let s = Store::new(2);
        let a: Arc<str> = "/configmaps".into();
        for i in 0..5 {
            put(&s, &a, "x", &i.to_string());
        }
        let mut ev = Vec::new();
        assert_eq!(
            s.events_after("/configmaps", 1, 10, &mut ev),
            Err(TooOld {
                requested: 1,
                oldest: 3,
                compacted: false
            })
        );
        assert!(s.events_after("/configmaps", 3, 10, &mut ev).is_ok());
        assert_eq!(ev.len(), 2);
        // A compaction leaves the watch history alone; only LISTs at older RVs are gone.
        assert!(s.compact());
        assert!(!s.compact(), "nothing new to compact");
        assert!(s.events_after("/configmaps", 4, 10, &mut ev).is_ok());
        let all = |_: &Object| true;
        assert_eq!(
            s.list("/configmaps", Some(4), "", "", None, &all, false)
                .map(|p| p.rv),
            Err(TooOld {
                requested: 4,
                oldest: 5,
                compacted: true
            })
        );
        assert!(s
            .list("/configmaps", Some(5), "", "", None, &all, false)
            .is_ok());
        // Expiring the history is what makes a watch from an older RV too old.
        assert!(s.expire_history());
        assert!(s.events_after("/configmaps", 4, 10, &mut ev).is_err());
        assert!(s.events_after("/configmaps", 5, 10, &mut ev).is_ok());
    }

    #[test]
    fn list_pages_and_counts_remaining() {
        let s = Store::new(100);
        let a: Arc<str> = "/configmaps".into();
        for n in ["a", "b", "c", "d", "e"] {
            put(&s, &a, n, "1");
        }
        let all = |_: &Object| true;
        let p = s
            .list("/configmaps", None, "ns/", "", Some(2), &all, true)
            .unwrap();
        assert_eq!(names(&p), ["a", "b"]);
        assert_eq!(p.remaining, Some(3));
        assert_eq!(p.next_after.as_deref(), Some("ns/b"));
        let p = s
            .list("/configmaps", None, "ns/", "ns/b\0", Some(10), &all, true)
            .unwrap();
        assert_eq!(names(&p), ["c", "d", "e"]);
        assert_eq!(p.next_after, None);
        let p = s
            .list("/configmaps", None, "other/", "", None, &all, true)
            .unwrap();
        assert!(p.items.is_empty());
    }

    #[test]
    fn paged_counts_are_carried_from_page_to_page() {
        let s = Store::new(1000);
        let a: Arc<str> = "/configmaps".into();
        for i in 0..100 {
            put(&s, &a, &format!("k{i:03}"), "1");
        }
        let all = |_: &Object| true;
        let at = s.current_rv();
        let (mut start, mut seen) = (String::new(), 0);
        loop {
            let p = s
                .list("/configmaps", Some(at), "ns/", &start, Some(7), &all, true)
                .unwrap();
            seen += p.items.len();
            // Writes after the snapshot change the collection, not the pages at `at`.
            put(&s, &a, &format!("k{seen:03}a"), "2");
            del(&s, &a, &format!("k{:03}", 100 - seen.min(100)));
            match p.next_after {
                Some(k) => {
                    assert_eq!(p.remaining, Some(100 - seen), "after {seen}");
                    start = format!("{k}\0");
                }
                None => break,
            }
        }
        assert_eq!(seen, 100);
        // A count nothing remembers (another start, or the state now) is counted.
        let p = s
            .list("/configmaps", None, "ns/", "ns/k050", Some(7), &all, true)
            .unwrap();
        let now = s.keys("/configmaps", "ns/");
        let after = now.iter().filter(|k| k.as_str() >= "ns/k050").count();
        assert_eq!(p.remaining, Some(after - 7));
    }

    #[test]
    fn list_at_an_older_rv_rebuilds_that_snapshot() {
        let s = Store::new(100);
        let a: Arc<str> = "/configmaps".into();
        put(&s, &a, "a", "1");
        put(&s, &a, "b", "1");
        let at = s.current_rv();
        put(&s, &a, "a", "2");
        del(&s, &a, "b");
        put(&s, &a, "c", "1");
        let all = |_: &Object| true;
        let p = s
            .list("/configmaps", Some(at), "ns/", "", None, &all, false)
            .unwrap();
        assert_eq!(names(&p), ["a", "b"]);
        assert_eq!(p.items[0].resource_version(), "1");
        assert_eq!(p.rv, at);
        let now = s
            .list("/configmaps", None, "ns/", "", None, &all, false)
            .unwrap();
        assert_eq!(names(&now), ["a", "c"]);
    }

    #[test]
    fn list_at_rv_older_than_window_is_too_old() {
        let s = Store::new(1);
        let a: Arc<str> = "/configmaps".into();
        put(&s, &a, "a", "1");
        put(&s, &a, "a", "2");
        put(&s, &a, "a", "3");
        let all = |_: &Object| true;
        assert!(s
            .list("/configmaps", Some(1), "", "", None, &all, false)
            .is_err());
        assert!(s
            .list("/configmaps", Some(2), "", "", None, &all, false)
            .is_ok());
    }

    #[test]
    fn owner_index_tracks_dependents() {
        let s = Store::new(10);
        let a: Arc<str> = "/configmaps".into();
        let mut v = cm("dep", "1");
        v["metadata"]["ownerReferences"] =
            json!([{"apiVersion":"v1","kind":"ConfigMap","name":"o","uid":"u-1"}]);
        s.mutate::<StoreError>(&a, "ns/dep", |_| Ok(Mutation::Put(v)))
            .unwrap();
        assert_eq!(s.dependents("u-1"), vec![(a.clone(), "ns/dep".to_owned())]);
        del(&s, &a, "dep");
        assert!(s.dependents("u-1").is_empty());
    }
}
