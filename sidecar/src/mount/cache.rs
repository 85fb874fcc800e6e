//! A least-recently-used cache bounded by the bytes of what it holds: the mount's trees and file
//! content blobs stay within a fixed budget however much of a snapshot is read.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Arc;

/// Values by key, evicting the least recently used once their sizes add up to more than the
/// budget. A value larger than the whole budget is kept alone (everything else is evicted): the
/// tree of a huge folder must stay while its entries are looked up one by one.
pub struct ByteBoundedCache<K, V> {
    budget_bytes: u64,
    held_bytes: u64,
    /// Each key's value, size and last use.
    entries: HashMap<K, (Arc<V>, u64, u64)>,
    /// Keys by last use, oldest first.
    by_use: BTreeMap<u64, K>,
    clock: u64,
}

impl<K: Hash + Eq + Clone, V> ByteBoundedCache<K, V> {
    pub fn new(budget_bytes: u64) -> Self {
        ByteBoundedCache {
            budget_bytes,
            held_bytes: 0,
            entries: HashMap::new(),
            by_use: BTreeMap::new(),
            clock: 0,
        }
    }

    /// The value of `key`, now the most recently used.
    pub fn get(&mut self, key: &K) -> Option<Arc<V>> {
        self.clock += 1;
        let clock = self.clock;
        let (value, _, used) = self.entries.get_mut(key)?;
        self.by_use.remove(used);
        *used = clock;
        self.by_use.insert(clock, key.clone());
        Some(value.clone())
    }

    /// Keeps `value` (of `size_bytes`) under `key`, evicting what was used longest ago.
    pub fn insert(&mut self, key: K, value: Arc<V>, size_bytes: u64) {
        if let Some((_, size, used)) = self.entries.remove(&key) {
            self.held_bytes -= size;
            self.by_use.remove(&used);
        }
        while self.held_bytes > 0 && self.held_bytes + size_bytes > self.budget_bytes {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            if let Some((_, size, _)) = self.entries.remove(&oldest) {
                self.held_bytes -= size;
            }
        }
        self.clock += 1;
        self.by_use.insert(self.clock, key.clone());
        self.entries.insert(key, (value, size_bytes, self.clock));
        self.held_bytes += size_bytes;
    }

    /// Bytes of the values held now.
    #[cfg(test)]
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_values_go_first_and_the_budget_holds() {
        let mut cache = ByteBoundedCache::new(10);
        cache.insert("a", Arc::new(1), 4);
        cache.insert("b", Arc::new(2), 4);
        assert_eq!(cache.get(&"a").as_deref(), Some(&1));
        cache.insert("c", Arc::new(3), 4);
        // b was used longest ago.
        assert!(cache.get(&"b").is_none());
        assert_eq!(cache.get(&"a").as_deref(), Some(&1));
        assert_eq!(cache.get(&"c").as_deref(), Some(&3));
        assert_eq!(cache.held_bytes(), 8);
        cache.insert("a", Arc::new(5), 10);
        assert_eq!(cache.held_bytes(), 10);
        assert!(cache.get(&"c").is_none());
        assert_eq!(cache.get(&"a").as_deref(), Some(&5));
        // Larger than the budget: kept alone, until anything else comes.
        cache.insert("huge", Arc::new(4), 11);
        assert_eq!(cache.get(&"huge").as_deref(), Some(&4));
        assert!(cache.get(&"a").is_none());
        assert_eq!(cache.held_bytes(), 11);
        cache.insert("b", Arc::new(6), 1);
        assert!(cache.get(&"huge").is_none());
        assert_eq!(cache.held_bytes(), 1);
    }
}
