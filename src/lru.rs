//! A bounded least-recently-used map: every cache of the engine is one (bounded by `grammarmask.Limits`).
//!
//! Not synchronised itself: owners keep it behind a `Mutex` and hold the lock only to look up or
//! insert, never while computing a value.

use std::collections::BTreeMap;
use std::hash::Hash;

use rustc_hash::FxHashMap as HashMap;

/// At most `limit` entries; inserting past the limit drops the least recently used one.
#[derive(Debug)]
pub struct Lru<K, V> {
    limit: usize,
    tick: u64,
    entries: HashMap<K, (V, u64)>,
    order: BTreeMap<u64, K>,
}

impl<K: Eq + Hash + Clone, V> Lru<K, V> {
    /// An empty map keeping at most `limit` entries (a limit of 0 keeps nothing).
    pub fn new(limit: usize) -> Self {
        Lru {
            limit,
            tick: 0,
            entries: HashMap::default(),
            order: BTreeMap::new(),
        }
    }

    /// The value of `key`, now the most recently used.
    pub fn get(&mut self, key: &K) -> Option<&V> {
        self.tick += 1;
        let tick = self.tick;
        let (value, stamp) = self.entries.get_mut(key)?;
        self.order.remove(stamp);
        *stamp = tick;
        self.order.insert(tick, key.clone());
        Some(value)
    }

    /// The value of `key`, its recency unchanged.
    pub fn peek(&self, key: &K) -> Option<&V> {
        self.entries.get(key).map(|(v, _)| v)
    }

    /// Store `value` under `key` and evict the least recently used entries past the limit.
    pub fn put(&mut self, key: K, value: V) {
        if self.limit == 0 {
            return;
        }
        self.tick += 1;
        if let Some((_, old)) = self.entries.insert(key.clone(), (value, self.tick)) {
            self.order.remove(&old);
        }
        self.order.insert(self.tick, key);
        while self.entries.len() > self.limit {
            match self.order.pop_first() {
                Some((_, k)) => {
                    self.entries.remove(&k);
                }
                None => break,
            }
        }
    }

    /// Remove `key`, giving back its value.
    pub fn take(&mut self, key: &K) -> Option<V> {
        let (value, stamp) = self.entries.remove(key)?;
        self.order.remove(&stamp);
        Some(value)
    }

    /// Remove the least recently used entry, giving back its value.
    pub fn pop_oldest(&mut self) -> Option<V> {
        let (_, key) = self.order.pop_first()?;
        self.entries.remove(&key).map(|(v, _)| v)
    }

    /// The most entries kept.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Number of entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The values held, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.values().map(|(v, _)| v)
    }

    /// Whether the map holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::Lru;

    #[test]
    fn evicts_the_least_recently_used() {
        let mut lru = Lru::new(2);
        lru.put(1, "a");
        lru.put(2, "b");
        assert_eq!(lru.get(&1), Some(&"a")); // 2 is now the oldest
        lru.put(3, "c");
        assert_eq!(lru.get(&2), None);
        assert_eq!(lru.get(&1), Some(&"a"));
        assert_eq!(lru.get(&3), Some(&"c"));
        assert_eq!(lru.len(), 2);
    }

    #[test]
    fn taken_and_oldest_entries_leave() {
        let mut lru = Lru::new(3);
        lru.put(1, "a");
        lru.put(2, "b");
        lru.put(3, "c");
        assert_eq!(lru.take(&2), Some("b"));
        assert_eq!(lru.take(&2), None);
        lru.get(&1); // 3 is now the oldest
        assert_eq!(lru.pop_oldest(), Some("c"));
        assert_eq!(lru.pop_oldest(), Some("a"));
        assert_eq!(lru.pop_oldest(), None);
        assert!(lru.is_empty());
    }

    #[test]
    fn limit_zero_keeps_nothing() {
        let mut lru = Lru::new(0);
        lru.put(1, 1);
        assert!(lru.is_empty());
        assert_eq!(lru.get(&1), None);
    }

    #[test]
    fn replacing_a_key_keeps_one_entry() {
        let mut lru = Lru::new(2);
        lru.put(1, 1);
        lru.put(1, 2);
        lru.put(2, 3);
        assert_eq!(lru.len(), 2);
        assert_eq!(lru.get(&1), Some(&2));
    }
}
