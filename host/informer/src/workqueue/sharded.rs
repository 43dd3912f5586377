//! A hash map kept in shards that grow one at a time.
//!
//! A map grows by rehashing every entry into a table twice the size, all at once: at a
//! million keys (the bound a plugin's workqueue may reach, by default) that one insert took
//! 240 ms on a busy machine, during which the runtime thread served nothing else. A guest
//! enqueueing keys in a loop could so stall every other plugin on the thread. (Go's maps,
//! under client-go's workqueue, grow incrementally and have no such step.) In [`SHARDS`]
//! shards picked by hash, each resize moves a sixty-fourth of the entries.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use foldhash::fast::FixedState;
use foldhash::HashMap as FastMap;

/// Shards per map: a power of two, picked by the top bits of a hash.
pub const SHARDS: usize = 64;

/// A map of `K` to `V` in [`SHARDS`] hash maps.
pub struct ShardedMap<K, V> {
    shards: Box<[FastMap<K, V>]>,
    len: usize,
    /// Picks the shard; seeded apart from the shards' own hashers, so that a shard's keys are
    /// spread evenly in its table.
    pick: FixedState,
}

impl<K: Hash + Eq, V> Default for ShardedMap<K, V> {
    fn default() -> Self {
        ShardedMap {
            shards: (0..SHARDS).map(|_| FastMap::default()).collect(),
            len: 0,
            pick: FixedState::with_seed(0x5eed_5ca1_ab1e),
        }
    }
}

impl<K: Hash + Eq, V> ShardedMap<K, V> {
    fn shard<Q: Hash + ?Sized>(&self, key: &Q) -> usize {
        (self.pick.hash_one(key) >> (64 - SHARDS.trailing_zeros())) as usize
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entries the shards hold room for, in all.
    pub fn capacity(&self) -> usize {
        self.shards.iter().map(|s| s.capacity()).sum()
    }

    /// Gives back room beyond about `capacity` entries in all.
    pub fn shrink_to(&mut self, capacity: usize) {
        let each = capacity.div_ceil(SHARDS);
        for s in self.shards.iter_mut() {
            s.shrink_to(each);
        }
    }

    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shards[self.shard(key)].contains_key(key)
    }

    #[cfg(test)]
    pub fn get_key_value<Q>(&self, key: &Q) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shards[self.shard(key)].get_key_value(key)
    }

    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let i = self.shard(key);
        self.shards[i].get_mut(key)
    }

    /// Inserts or replaces; the old value if there was one.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let i = self.shard(&key);
        let old = self.shards[i].insert(key, value);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    pub fn remove_entry<Q>(&mut self, key: &Q) -> Option<(K, V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let i = self.shard(key);
        let entry = self.shards[i].remove_entry(key);
        if entry.is_some() {
            self.len -= 1;
        }
        entry
    }

    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.remove_entry(key).map(|(_, v)| v)
    }

    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.shards.iter().flat_map(|s| s.keys())
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.shards.iter().flat_map(|s| s.values())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_as_one_map() {
        let mut m: ShardedMap<String, u32> = ShardedMap::default();
        assert!(m.is_empty());
        for i in 0..1000u32 {
            assert_eq!(m.insert(format!("k{i}"), i), None);
        }
        assert_eq!(m.insert("k7".into(), 70), Some(7));
        assert_eq!(m.len(), 1000);
        assert!(m.contains_key("k999"));
        assert!(!m.contains_key("k1000"));
        assert_eq!(m.remove("k7"), Some(70));
        assert_eq!(m.remove("k7"), None);
        assert_eq!(m.remove_entry("k8"), Some(("k8".to_string(), 8)));
        assert_eq!(m.len(), 998);
        assert_eq!(m.keys().count(), 998);
        assert_eq!(
            m.values().map(|v| u64::from(*v)).sum::<u64>(),
            (0..1000u64).sum::<u64>() - 15
        );
        for i in 0..1000u32 {
            m.remove(format!("k{i}").as_str());
        }
        assert!(m.is_empty());
        m.shrink_to(64);
        assert!(m.capacity() <= 64 * 4, "{}", m.capacity());
    }

    /// What bounds a resize: no shard holds much more than its share, so none rehashes more
    /// than about a sixty-fourth of the entries at once.
    #[test]
    fn entries_spread_over_the_shards() {
        let mut m: ShardedMap<String, ()> = ShardedMap::default();
        let n = 200_000;
        for i in 0..n {
            m.insert(format!("storm/{i}"), ());
        }
        let largest = m.shards.iter().map(|s| s.len()).max().unwrap_or(0);
        assert!(largest < 2 * n / SHARDS, "{largest} of {n} in one shard");
    }
}
