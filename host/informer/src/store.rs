//! The thread-safe store and its indexes: what listers read (spec §3).
//!
//! Why a single `RwLock` over items and indexes: readers (listers in plugins, many at once) must
//! see an item and its index entries consistently; writes are short (one object, a few index
//! values) and never span an `.await`, so readers wait at most one small update.

use std::collections::{HashMap, HashSet};

use foldhash::{HashMap as FastMap, HashSet as FastSet};
use std::sync::Arc;

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::tombstone::ObjOrTombstone;
use kwh_client::Object;

/// Computes the index values of an object. Infallible by design: an index over metadata cannot
/// fail, so the "IndexFunc error panics" rule of spec 3.3 has nothing to act on here.
pub type IndexFunc = Arc<dyn Fn(&Object) -> Vec<String> + Send + Sync>;

/// Index functions by index name.
pub type Indexers = HashMap<String, IndexFunc>;

/// Name of the namespace index (spec 3.2).
pub const NAMESPACE_INDEX: &str = "namespace";

/// The namespace index: one value, the namespace, or `""` for cluster-scoped objects (spec 3.2).
pub fn namespace_index_func() -> IndexFunc {
    NAMESPACE_FN.clone()
}

/// The function [`namespace_index_func`] hands out, one for all stores: a store recognises it
/// by identity and reads the namespace in place, where calling it would allocate a `Vec` and a
/// `String` for the old and the new object on every write (every informer has this index).
static NAMESPACE_FN: std::sync::LazyLock<IndexFunc> =
    std::sync::LazyLock::new(|| Arc::new(|o: &Object| vec![namespace_of(o).to_owned()]));

fn namespace_of(o: &Object) -> &str {
    o.namespace().unwrap_or("")
}

/// Errors of index queries and indexer registration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("index with name {0} does not exist")]
    UnknownIndex(String),
    #[error("indexer conflict: {0}")]
    IndexerConflict(String),
}

/// Index value → keys. Keys are the same `Arc<str>` as the item map's, so a key costs one
/// allocation however many indexes hold it.
type Index = FastMap<String, FastSet<Arc<str>>>;

#[derive(Default)]
struct Inner {
    items: FastMap<Arc<str>, Object>,
    indexers: Indexers,
    indices: FastMap<String, Index>,
    /// The namespace index (under its own name, with [`namespace_index_func`]) is registered
    /// but not built yet: it is built from the items on its first read and kept from then on.
    /// Why: every informer's store has it and most are never read by namespace, while keeping
    /// it cost each write a hash-set insert (a tenth of a sync's per-object work at 100,000
    /// objects, and a set of every key).
    namespace_pending: bool,
}

/// A thread-safe keyed store of objects with secondary indexes (client-go's `Indexer`).
#[derive(Default)]
pub struct Store {
    inner: RwLock<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("len", &self.len()).finish()
    }
}

impl Store {
    /// An empty store with no indexes.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store with the given indexes.
    pub fn with_indexers(indexers: Indexers) -> Self {
        let indices = indexers
            .keys()
            .map(|k| (k.clone(), Index::default()))
            .collect();
        let namespace_pending = indexers
            .get(NAMESPACE_INDEX)
            .is_some_and(|f| Arc::ptr_eq(f, &NAMESPACE_FN));
        Store {
            inner: RwLock::new(Inner {
                items: FastMap::default(),
                indexers,
                indices,
                namespace_pending,
            }),
        }
    }

    /// An empty store with the namespace index (spec 3.2), as informers create it.
    pub fn with_namespace_index() -> Self {
        let mut ix = Indexers::new();
        ix.insert(NAMESPACE_INDEX.to_owned(), namespace_index_func());
        Self::with_indexers(ix)
    }

    /// Insert or replace an object (spec 3.3: Add and Update are the same upsert).
    pub fn add(&self, obj: Object) {
        let key = obj.key();
        self.inner.write().upsert(&key, obj);
    }

    /// Insert or replace, returning the previous object under the key: one lock and one key
    /// computation for the informer's "update or add" decision (spec 4.1).
    pub fn upsert(&self, obj: Object) -> Option<Object> {
        let key = obj.key();
        self.inner.write().upsert(&key, obj)
    }

    /// [`upsert`](Self::upsert) under `key`, which must be `obj`'s key: the informer passes
    /// the DeltaFIFO's allocation of it, which a new item keeps.
    pub fn upsert_keyed(&self, key: &Arc<str>, obj: Object) -> Option<Object> {
        debug_assert_eq!(**key, obj.key());
        self.inner.write().upsert_keyed(key, obj)
    }

    /// Same as [`Store::add`] (spec 3.3).
    pub fn update(&self, obj: Object) {
        self.add(obj)
    }

    /// Remove the object (or the tombstone's key, spec 3.1) and its index entries.
    pub fn delete(&self, obj: &ObjOrTombstone) {
        self.delete_key(&obj.key());
    }

    /// Remove by key; absent keys are ignored.
    pub fn delete_key(&self, key: &str) {
        self.inner.write().remove(key);
    }

    /// Replace the whole content and rebuild every index (spec 3.3).
    pub fn replace(&self, list: Vec<Object>) {
        let items: FastMap<Arc<str>, Object> =
            list.into_iter().map(|o| (Arc::from(o.key()), o)).collect();
        let mut g = self.inner.write();
        g.items = items;
        g.rebuild_indices();
    }

    pub fn get_by_key(&self, key: &str) -> Option<Object> {
        self.inner.read().items.get(key).cloned()
    }

    /// The stored object with the same key as `obj`.
    pub fn get(&self, obj: &Object) -> Option<Object> {
        self.get_by_key(&obj.key())
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.inner.read().items.contains_key(key)
    }

    pub fn list(&self) -> Vec<Object> {
        self.inner.read().items.values().cloned().collect()
    }

    pub fn list_keys(&self) -> Vec<String> {
        self.inner
            .read()
            .items
            .keys()
            .map(|k| k.to_string())
            .collect()
    }

    /// Visit every `(key, object)` under one read lock, copying nothing. `f` must not call
    /// back into the store.
    pub fn for_each(&self, f: &mut dyn FnMut(&str, &Object)) {
        for (k, o) in &self.inner.read().items {
            f(k, o);
        }
    }

    /// The store's own allocation of `key`, for a queue that would otherwise copy it.
    pub fn shared_key(&self, key: &str) -> Option<Arc<str>> {
        self.inner
            .read()
            .items
            .get_key_value(key)
            .map(|(k, _)| k.clone())
    }

    /// Room for `total` items in all: a sync's list size, known before its items arrive one
    /// by one. Growing the table step by step rehashes every key at each doubling.
    pub fn reserve(&self, total: usize) {
        let mut g = self.inner.write();
        let more = total.saturating_sub(g.items.len());
        g.items.reserve(more);
    }

    pub fn len(&self) -> usize {
        self.inner.read().items.len()
    }

    /// The [`CacheDigest`] of what the store holds now, under one read lock.
    pub fn digest(&self) -> CacheDigest {
        let mut d = CacheDigest::default();
        for (k, o) in &self.inner.read().items {
            d.add(k, o.resource_version());
        }
        d
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Objects matching `pred` (e.g. a label selector), optionally limited to one namespace.
    /// Uses the namespace index when it exists, so a namespaced lister does not scan everything.
    pub fn list_filtered(
        &self,
        namespace: Option<&str>,
        pred: &dyn Fn(&Object) -> bool,
    ) -> Vec<Object> {
        let g = match namespace {
            Some(_) => self.read_index(NAMESPACE_INDEX),
            None => self.inner.read(),
        };
        match namespace {
            Some(ns) => {
                if let Some(ix) = g.indices.get(NAMESPACE_INDEX) {
                    return ix
                        .get(ns)
                        .into_iter()
                        .flatten()
                        .filter_map(|k| g.items.get(k))
                        .filter(|o| pred(o))
                        .cloned()
                        .collect();
                }
                g.items
                    .values()
                    .filter(|o| o.namespace().unwrap_or("") == ns && pred(o))
                    .cloned()
                    .collect()
            }
            None => g.items.values().filter(|o| pred(o)).cloned().collect(),
        }
    }

    /// Objects whose `index_name` values include `value`, unordered (spec 3.4).
    pub fn by_index(&self, index_name: &str, value: &str) -> Result<Vec<Object>, StoreError> {
        let g = self.read_index(index_name);
        let ix = g.index(index_name)?;
        Ok(ix
            .get(value)
            .into_iter()
            .flatten()
            .filter_map(|k| g.items.get(k).cloned())
            .collect())
    }

    /// Keys whose `index_name` values include `value`, sorted (spec 3.4).
    pub fn index_keys(&self, index_name: &str, value: &str) -> Result<Vec<String>, StoreError> {
        let g = self.read_index(index_name);
        let ix = g.index(index_name)?;
        let mut keys: Vec<String> = ix
            .get(value)
            .into_iter()
            .flatten()
            .map(|k| k.to_string())
            .collect();
        keys.sort_unstable();
        Ok(keys)
    }

    /// Objects sharing any of `obj`'s values of `index_name` (the union, spec 3.4).
    pub fn index(&self, index_name: &str, obj: &Object) -> Result<Vec<Object>, StoreError> {
        let g = self.read_index(index_name);
        let f = g
            .indexers
            .get(index_name)
            .ok_or_else(|| StoreError::UnknownIndex(index_name.to_owned()))?;
        let ix = g.index(index_name)?;
        let values = f(obj);
        let mut keys: HashSet<&Arc<str>> = HashSet::new();
        for v in &values {
            keys.extend(ix.get(v).into_iter().flatten());
        }
        Ok(keys
            .into_iter()
            .filter_map(|k| g.items.get(k).cloned())
            .collect())
    }

    /// Index values that still have keys (spec 3.4; empty sets are removed, spec 3.3).
    pub fn list_index_func_values(&self, index_name: &str) -> Result<Vec<String>, StoreError> {
        let g = self.read_index(index_name);
        Ok(g.index(index_name)?.keys().cloned().collect())
    }

    /// Names of the registered indexes.
    pub fn index_names(&self) -> Vec<String> {
        self.inner.read().indexers.keys().cloned().collect()
    }

    /// A read lock under which the index `index_name` is complete: the namespace index is
    /// built here on its first read (see `Inner::namespace_pending`).
    fn read_index(&self, index_name: &str) -> RwLockReadGuard<'_, Inner> {
        let g = self.inner.read();
        if !g.pending(index_name) {
            return g;
        }
        drop(g);
        let mut w = self.inner.write();
        w.build_namespace_index();
        RwLockWriteGuard::downgrade(w)
    }

    /// Register more indexes; a name already registered is an error and nothing is added.
    /// Items already stored are indexed at once (spec 3.5).
    pub fn add_indexers(&self, new: Indexers) -> Result<(), StoreError> {
        let mut g = self.inner.write();
        let mut conflicts: Vec<&str> = new
            .keys()
            .filter(|k| g.indexers.contains_key(*k))
            .map(String::as_str)
            .collect();
        if !conflicts.is_empty() {
            conflicts.sort_unstable();
            return Err(StoreError::IndexerConflict(conflicts.join(", ")));
        }
        let g = &mut *g;
        for (name, f) in new {
            let mut ix = Index::default();
            for (key, obj) in &g.items {
                for v in f(obj) {
                    ix.entry(v).or_default().insert(key.clone());
                }
            }
            g.indices.insert(name.clone(), ix);
            g.indexers.insert(name, f);
        }
        Ok(())
    }
}

impl Inner {
    /// Whether `name` is the namespace index waiting for its first read (writes skip it).
    fn pending(&self, name: &str) -> bool {
        self.namespace_pending && name == NAMESPACE_INDEX
    }

    fn index(&self, name: &str) -> Result<&Index, StoreError> {
        self.indices
            .get(name)
            .ok_or_else(|| StoreError::UnknownIndex(name.to_owned()))
    }

    fn upsert(&mut self, key: &str, obj: Object) -> Option<Object> {
        // An update keeps the key allocation the item already has.
        let key: Arc<str> = match self.items.get_key_value(key) {
            Some((k, _)) => k.clone(),
            None => Arc::from(key),
        };
        self.upsert_keyed(&key, obj)
    }

    fn upsert_keyed(&mut self, key: &Arc<str>, obj: Object) -> Option<Object> {
        use std::collections::hash_map::Entry;
        let (key, old) = match self.items.entry(key.clone()) {
            // An update keeps the key allocation the item already has.
            Entry::Occupied(mut e) => (e.key().clone(), Some(e.insert(obj.clone()))),
            Entry::Vacant(e) => {
                e.insert(obj.clone());
                (key.clone(), None)
            }
        };
        self.update_indices(old.as_ref(), Some(&obj), &key);
        old
    }

    fn remove(&mut self, key: &str) {
        if let Some((key, old)) = self.items.remove_entry(key) {
            self.update_indices(Some(&old), None, &key);
        }
    }

    /// Builds the pending namespace index from the items (nothing when it is built already).
    fn build_namespace_index(&mut self) {
        if !self.namespace_pending {
            return;
        }
        let mut ix = Index::default();
        for (key, obj) in &self.items {
            index(&mut ix, namespace_of(obj), key);
        }
        self.indices.insert(NAMESPACE_INDEX.to_owned(), ix);
        self.namespace_pending = false;
    }

    fn rebuild_indices(&mut self) {
        for (name, f) in self.indexers.iter() {
            if self.pending(name) {
                continue;
            }
            let mut ix = Index::default();
            for (key, obj) in self.items.iter() {
                for v in f(obj) {
                    ix.entry(v).or_default().insert(key.clone());
                }
            }
            self.indices.insert(name.clone(), ix);
        }
    }

    /// Move `key` from the old object's index values to the new one's (spec 3.3).
    fn update_indices(&mut self, old: Option<&Object>, new: Option<&Object>, key: &Arc<str>) {
        for (name, f) in &self.indexers {
            if Arc::ptr_eq(f, &NAMESPACE_FN) {
                if self.pending(name) {
                    continue;
                }
                let old_ns = old.map(namespace_of);
                let new_ns = new.map(namespace_of);
                // An update keeps its namespace: nothing to move.
                if old_ns.is_some() && old_ns == new_ns {
                    continue;
                }
                let Some(ix) = index_named(&mut self.indices, name) else {
                    continue;
                };
                if let Some(v) = old_ns {
                    unindex(ix, v, key);
                }
                if let Some(v) = new_ns {
                    index(ix, v, key);
                }
                continue;
            }
            let old_vals = old.map(|o| f(o)).unwrap_or_default();
            let new_vals = new.map(|o| f(o)).unwrap_or_default();
            // The common case (one unchanged value) touches nothing.
            if old_vals.len() == 1 && new_vals.len() == 1 && old_vals[0] == new_vals[0] {
                continue;
            }
            let Some(ix) = index_named(&mut self.indices, name) else {
                continue;
            };
            for v in &old_vals {
                unindex(ix, v, key);
            }
            for v in &new_vals {
                index(ix, v, key);
            }
        }
    }
}

/// The index `name`, created empty if it has no entry yet (always `Some`).
fn index_named<'a>(indices: &'a mut FastMap<String, Index>, name: &str) -> Option<&'a mut Index> {
    if !indices.contains_key(name) {
        indices.insert(name.to_owned(), Index::default());
    }
    indices.get_mut(name)
}

fn index(ix: &mut Index, value: &str, key: &Arc<str>) {
    match ix.get_mut(value) {
        Some(keys) => keys.insert(key.clone()),
        None => ix.entry(value.to_owned()).or_default().insert(key.clone()),
    };
}

fn unindex(ix: &mut Index, value: &str, key: &Arc<str>) {
    if let Some(set) = ix.get_mut(value) {
        set.remove(key);
        // Leaving empty sets behind leaks memory for churning values (k/k#84959).
        if set.is_empty() {
            ix.remove(value);
        }
    }
}

/// What a cache holds, in two numbers: how many objects, and an order-independent hash of
/// their (key, resourceVersion) pairs. Why: a cache compared with the API server's state from
/// outside the process (`/statusz?digest=1` against a LIST) would otherwise have to be dumped;
/// equal digests mean the same keys at the same versions (barring a 64-bit collision).
///
/// Each pair is hashed on its own (FNV-1a over the key, a byte no UTF-8 text holds and the
/// resourceVersion, then SplitMix64's finaliser to spread it) and the hashes are added, so
/// the order in which a map or a LIST yields them does not matter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheDigest {
    pub objects: u64,
    pub hash: u64,
}

impl CacheDigest {
    /// The digest of `(key, resourceVersion)` pairs in any order, e.g. from a LIST.
    pub fn of<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> CacheDigest {
        let mut d = CacheDigest::default();
        for (k, rv) in pairs {
            d.add(k, rv);
        }
        d
    }

    /// Counts one more object.
    pub fn add(&mut self, key: &str, resource_version: &str) {
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let bytes = key
            .as_bytes()
            .iter()
            .chain(&[0xff])
            .chain(resource_version.as_bytes());
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(PRIME);
        }
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^= h >> 31;
        self.objects += 1;
        self.hash = self.hash.wrapping_add(h);
    }
}

/// `hash` in 16 hex digits (what `/statusz` shows beside the count).
impl std::fmt::LowerHex for CacheDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tombstone::test_support::{obj, obj_labels};
    use crate::tombstone::DeletedFinalStateUnknown;

    fn label_index(label: &'static str) -> IndexFunc {
        Arc::new(move |o: &Object| {
            o.meta()
                .label(label)
                .map(str::to_owned)
                .into_iter()
                .collect()
        })
    }

    fn store_with_app_index() -> Store {
        let mut ix = Indexers::new();
        ix.insert(NAMESPACE_INDEX.into(), namespace_index_func());
        ix.insert("app".into(), label_index("app"));
        Store::with_indexers(ix)
    }

    #[test]
    fn spec_3_1_keys_and_tombstone_delete() {
        let s = Store::new();
        s.add(obj("ns", "a", "1"));
        s.add(obj("", "n1", "1"));
        let mut keys = s.list_keys();
        keys.sort();
        assert_eq!(keys, vec!["n1", "ns/a"]);
        s.delete(&ObjOrTombstone::from(DeletedFinalStateUnknown {
            key: "ns/a".into(),
            obj: None,
        }));
        assert_eq!(s.list_keys(), vec!["n1"]);
    }

    #[test]
    fn spec_3_2_namespace_index_values() {
        let s = Store::with_namespace_index();
        s.add(obj("ns1", "a", "1"));
        s.add(obj("ns1", "b", "1"));
        s.add(obj("", "node", "1"));
        assert_eq!(
            s.index_keys(NAMESPACE_INDEX, "ns1").unwrap(),
            vec!["ns1/a", "ns1/b"]
        );
        assert_eq!(s.index_keys(NAMESPACE_INDEX, "").unwrap(), vec!["node"]);
    }

    #[test]
    fn spec_3_3_upsert_moves_key_and_deletes_empty_sets_k84959() {
        let s = store_with_app_index();
        s.add(obj_labels("ns", "a", "1", &[("app", "x")]));
        assert_eq!(s.list_index_func_values("app").unwrap(), vec!["x"]);
        // Update is the same upsert; the key moves and the emptied set for "x" disappears.
        s.update(obj_labels("ns", "a", "2", &[("app", "y")]));
        assert_eq!(s.list_index_func_values("app").unwrap(), vec!["y"]);
        assert!(s.index_keys("app", "x").unwrap().is_empty());
        assert_eq!(s.get_by_key("ns/a").unwrap().resource_version(), "2");
        // Delete removes the key from its old values; no empty set is left (regression 7.8).
        s.delete(&obj("ns", "a", "2").into());
        assert!(s.list_index_func_values("app").unwrap().is_empty());
        assert!(s
            .list_index_func_values(NAMESPACE_INDEX)
            .unwrap()
            .is_empty());
        assert!(s.is_empty());
    }

    #[test]
    fn spec_3_3_unchanged_single_value_keeps_entry_and_multi_values_update() {
        let mut ix = Indexers::new();
        ix.insert(
            "labels".into(),
            Arc::new(|o: &Object| o.meta().labels.iter().map(|(k, _)| k.to_string()).collect())
                as IndexFunc,
        );
        let s = Store::with_indexers(ix);
        s.add(obj_labels("ns", "a", "1", &[("a", "1"), ("b", "1")]));
        s.add(obj_labels("ns", "a", "2", &[("b", "1"), ("c", "1")]));
        let mut vals = s.list_index_func_values("labels").unwrap();
        vals.sort();
        assert_eq!(vals, vec!["b", "c"]);
        assert_eq!(s.index_keys("labels", "b").unwrap(), vec!["ns/a"]);
    }

    #[test]
    fn spec_3_3_replace_rebuilds_every_index() {
        let s = store_with_app_index();
        s.add(obj_labels("ns", "a", "1", &[("app", "x")]));
        s.add(obj_labels("ns", "b", "1", &[("app", "x")]));
        s.replace(vec![
            obj_labels("ns2", "c", "5", &[("app", "z")]),
            obj_labels("ns", "b", "5", &[("app", "w")]),
        ]);
        let mut vals = s.list_index_func_values("app").unwrap();
        vals.sort();
        assert_eq!(vals, vec!["w", "z"]);
        assert_eq!(s.index_keys(NAMESPACE_INDEX, "ns").unwrap(), vec!["ns/b"]);
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn spec_3_4_queries() {
        let s = store_with_app_index();
        s.add(obj_labels("ns", "c", "1", &[("app", "x")]));
        s.add(obj_labels("ns", "a", "1", &[("app", "x")]));
        s.add(obj_labels("ns", "b", "1", &[("app", "y")]));
        // IndexKeys sorted.
        assert_eq!(s.index_keys("app", "x").unwrap(), vec!["ns/a", "ns/c"]);
        // ByIndex: the same set, any order.
        let mut by: Vec<String> = s
            .by_index("app", "x")
            .unwrap()
            .iter()
            .map(|o| o.key())
            .collect();
        by.sort();
        assert_eq!(by, vec!["ns/a", "ns/c"]);
        // Index(name, obj): union over obj's values.
        let probe = obj_labels("other", "p", "1", &[("app", "y")]);
        let keys: Vec<String> = s
            .index("app", &probe)
            .unwrap()
            .iter()
            .map(|o| o.key())
            .collect();
        assert_eq!(keys, vec!["ns/b"]);
        let mut ns_union: Vec<String> = s
            .index(NAMESPACE_INDEX, &obj("ns", "zz", "1"))
            .unwrap()
            .iter()
            .map(|o| o.key())
            .collect();
        ns_union.sort();
        assert_eq!(ns_union, vec!["ns/a", "ns/b", "ns/c"]);
        // Unknown index names are errors.
        assert_eq!(
            s.by_index("nope", "x").unwrap_err(),
            StoreError::UnknownIndex("nope".into())
        );
        assert!(s.index_keys("nope", "x").is_err());
        assert!(s.index("nope", &probe).is_err());
        assert!(s.list_index_func_values("nope").is_err());
    }

    #[test]
    fn spec_3_4_index_union_over_multiple_values() {
        let mut ix = Indexers::new();
        ix.insert(
            "labels".into(),
            Arc::new(|o: &Object| o.meta().labels.iter().map(|(k, _)| k.to_string()).collect())
                as IndexFunc,
        );
        let s = Store::with_indexers(ix);
        s.add(obj_labels("ns", "a", "1", &[("p", "1")]));
        s.add(obj_labels("ns", "b", "1", &[("q", "1")]));
        s.add(obj_labels("ns", "c", "1", &[("r", "1")]));
        let probe = obj_labels("ns", "z", "1", &[("p", "1"), ("q", "1")]);
        let mut keys: Vec<String> = s
            .index("labels", &probe)
            .unwrap()
            .iter()
            .map(|o| o.key())
            .collect();
        keys.sort();
        assert_eq!(keys, vec!["ns/a", "ns/b"]);
    }

    #[test]
    fn spec_3_5_add_indexers_conflict_and_indexes_existing_items() {
        let s = Store::with_namespace_index();
        s.add(obj_labels("ns", "a", "1", &[("app", "x")]));
        let mut dup = Indexers::new();
        dup.insert(NAMESPACE_INDEX.into(), namespace_index_func());
        dup.insert("app".into(), label_index("app"));
        assert!(matches!(
            s.add_indexers(dup),
            Err(StoreError::IndexerConflict(_))
        ));
        // Nothing from the rejected batch was added.
        assert!(s.index_keys("app", "x").is_err());
        let mut more = Indexers::new();
        more.insert("app".into(), label_index("app"));
        s.add_indexers(more).unwrap();
        assert_eq!(s.index_keys("app", "x").unwrap(), vec!["ns/a"]);
        s.add(obj_labels("ns", "b", "1", &[("app", "x")]));
        assert_eq!(s.index_keys("app", "x").unwrap(), vec!["ns/a", "ns/b"]);
    }

    /// The namespace index is built on its first read and kept from then on; its answers are
    /// those of the same index kept on every write (here a copy of its function under another
    /// name, which the store cannot recognise and so keeps eagerly), before and after that
    /// read, through updates, deletes and a replace (spec 3.2, 3.3).
    #[test]
    fn spec_3_2_namespace_index_built_on_first_read_answers_like_one_kept_on_every_write() {
        let mut ix = Indexers::new();
        ix.insert(NAMESPACE_INDEX.to_owned(), namespace_index_func());
        ix.insert(
            "eager".to_owned(),
            Arc::new(|o: &Object| vec![o.namespace().unwrap_or("").to_owned()]) as IndexFunc,
        );
        let s = Store::with_indexers(ix);
        let same = |s: &Store| {
            let mut vals = s.list_index_func_values(NAMESPACE_INDEX).unwrap();
            let mut eager = s.list_index_func_values("eager").unwrap();
            vals.sort();
            eager.sort();
            assert_eq!(vals, eager);
            for v in &vals {
                assert_eq!(
                    s.index_keys(NAMESPACE_INDEX, v).unwrap(),
                    s.index_keys("eager", v).unwrap(),
                    "{v}"
                );
            }
            vals
        };
        s.add(obj("a", "x", "1"));
        s.add(obj("a", "y", "1"));
        s.add(obj("b", "x", "1"));
        s.add(obj("", "node", "1"));
        s.delete(&obj("a", "y", "1").into());
        // Writes so far left it alone.
        assert!(s.inner.read().namespace_pending);
        assert!(s.inner.read().indices[NAMESPACE_INDEX].is_empty());
        assert_eq!(same(&s), vec!["", "a", "b"]);
        assert!(!s.inner.read().namespace_pending);
        // From here on every write keeps it.
        s.add(obj("c", "z", "1"));
        s.update(obj("a", "x", "2"));
        s.delete(&obj("b", "x", "1").into());
        assert_eq!(same(&s), vec!["", "a", "c"]);
        s.replace(vec![obj("d", "w", "1"), obj("a", "x", "3")]);
        assert_eq!(same(&s), vec!["a", "d"]);
        assert_eq!(s.by_index(NAMESPACE_INDEX, "d").unwrap().len(), 1);
        // A store read by namespace first (a lister's list) builds it the same way.
        let t = Store::with_namespace_index();
        t.add(obj("a", "x", "1"));
        t.add(obj("b", "x", "1"));
        assert_eq!(t.list_filtered(Some("a"), &|_| true).len(), 1);
        t.add(obj("a", "y", "1"));
        assert_eq!(
            t.index_keys(NAMESPACE_INDEX, "a").unwrap(),
            vec!["a/x", "a/y"]
        );
    }

    #[test]
    fn list_filtered_by_namespace_and_predicate() {
        let s = Store::with_namespace_index();
        s.add(obj_labels("ns", "a", "1", &[("app", "x")]));
        s.add(obj_labels("ns", "b", "1", &[("app", "y")]));
        s.add(obj_labels("other", "c", "1", &[("app", "x")]));
        let pred = |o: &Object| o.meta().label("app") == Some("x");
        let keys: Vec<String> = s
            .list_filtered(Some("ns"), &pred)
            .iter()
            .map(|o| o.key())
            .collect();
        assert_eq!(keys, vec!["ns/a"]);
        assert_eq!(s.list_filtered(None, &pred).len(), 2);
        // Without the namespace index the same answer comes from a scan.
        let plain = Store::new();
        plain.add(obj_labels("ns", "a", "1", &[("app", "x")]));
        plain.add(obj_labels("other", "c", "1", &[("app", "x")]));
        assert_eq!(plain.list_filtered(Some("ns"), &pred).len(), 1);
    }

    #[test]
    fn the_digest_counts_keys_and_versions_in_any_order() {
        let s = Store::new();
        assert_eq!(s.digest(), CacheDigest::default());
        s.add(obj("ns", "a", "1"));
        s.add(obj("ns", "b", "2"));
        s.add(obj("", "c", "3"));
        let listed = CacheDigest::of([("c", "3"), ("ns/b", "2"), ("ns/a", "1")]);
        assert_eq!(
            s.digest(),
            listed,
            "what a LIST in another order digests to"
        );
        assert_eq!(s.digest().objects, 3);
        // Another version, a missing or an extra key: another digest.
        s.update(obj("ns", "b", "4"));
        assert_ne!(s.digest(), listed);
        assert_eq!(s.digest().objects, 3);
        s.update(obj("ns", "b", "2"));
        assert_eq!(s.digest(), listed);
        s.delete_key("c");
        assert_ne!(s.digest(), listed);
        // The separator keeps a key and a version apart: ("ns/a1", "") is not ("ns/a", "1").
        assert_ne!(
            CacheDigest::of([("ns/a1", "")]),
            CacheDigest::of([("ns/a", "1")])
        );
        assert_eq!(format!("{:x}", CacheDigest::of([])), "0000000000000000");
        assert_eq!(format!("{:x}", listed).len(), 16);
    }
}
