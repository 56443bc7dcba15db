//! A hash map kept in shards, for the engine's indexes over every journal entry. A hash map grows
//! by doubling and moves every key when it does: at a million addresses (two million entries)
//! one insert of a slice's import moved them all and held the agent's loop for over a second
//! (measured: slices of 0.06, 0.2, 0.5 and 1.1 s at each doubling during a capture). A shard
//! holds about a 256th of the keys, so a growth moves that many, and every key is looked up in
//! the one shard its own hash names.

use std::collections::HashMap;
use std::hash::Hash;

use xxhash_rust::xxh3::xxh3_64;

use crate::journal::JournalSeq;

/// How many shards: a growth moves at most about 1/`SHARDS` of the keys.
const SHARDS: usize = 256;

/// A shard's room below which it is not shrunk (a few hundred bytes).
const SHRINK_ABOVE: usize = 32;

/// Which shard a key lives in.
pub(crate) trait Shard {
    /// Any number: the shard is this modulo [`SHARDS`].
    fn shard(&self) -> usize;
}

impl Shard for JournalSeq {
    fn shard(&self) -> usize {
        // Hashed, not taken modulo: numbers taken in a regular step (every other one, in the
        // predecessor index) would fill their shards in lockstep, and every shard would grow in
        // the same slice — the stall the shards are for.
        #[allow(clippy::cast_possible_truncation)]
        let hash = xxh3_64(&self.get().to_le_bytes()) as usize;
        hash
    }
}

/// A `HashMap` in [`SHARDS`] shards (see the module's header).
#[derive(Debug)]
pub(crate) struct ShardedMap<K, V> {
    shards: Vec<HashMap<K, V>>,
}

impl<K: Hash + Eq + Shard, V> ShardedMap<K, V> {
    pub(crate) fn new() -> Self {
        Self { shards: (0..SHARDS).map(|_| HashMap::new()).collect() }
    }

    fn of(key: &K) -> usize {
        key.shard() % SHARDS
    }

    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.shards[Self::of(key)].get(key)
    }

    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        let shard = Self::of(&key);
        self.shards[shard].insert(key, value)
    }

    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        let shard = &mut self.shards[Self::of(key)];
        let removed = shard.remove(key);
        // A shard left under a quarter full gives back half its room: the predecessor memo
        // fills during a capture and empties as its entries execute, and a hash map never
        // shrinks by itself (43 bytes an address at 1M, docs/benchmarks.md). Shrinking moves the
        // shard's keys, at most once for every three quarters of its room removed. (`capacity`
        // is what the shard takes before it grows, which the marks of removed keys lower: the
        // trigger errs late, never early.)
        if removed.is_some() && shard.capacity() > SHRINK_ABOVE && shard.len() * 4 < shard.capacity() {
            shard.shrink_to(shard.len() * 2);
        }
        removed
    }

    pub(crate) fn clear(&mut self) {
        for shard in &mut self.shards {
            shard.clear();
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(HashMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::node::key_index::KeyHash;

    fn key(i: u64) -> KeyHash {
        KeyHash::of(&format!("pool/10.{}.{}/assign", i / 256, i % 256))
    }

    #[test]
    fn a_key_is_found_in_its_shard_and_the_shards_share_the_keys() {
        let mut map: ShardedMap<KeyHash, u64> = ShardedMap::new();
        for i in 0..10_000 {
            map.insert(key(i), i);
        }
        assert_eq!(map.len(), 10_000);
        assert_eq!(map.get(&key(42)), Some(&42));
        assert_eq!(map.remove(&key(42)), Some(42));
        assert_eq!(map.get(&key(42)), None);
        assert_eq!(map.insert(key(7), 8), Some(7));
        // Every shard holds some, none holds many: a growth moves a small part.
        let largest = map.shards.iter().map(HashMap::len).max().expect("shards");
        let smallest = map.shards.iter().map(HashMap::len).min().expect("shards");
        assert!(smallest > 0 && largest < 100, "{smallest}..{largest} of 10,000 in 256 shards");
        map.clear();
        assert_eq!(map.len(), 0);
    }

    #[test]
    fn shards_emptied_give_their_room_back() {
        let mut map: ShardedMap<KeyHash, u64> = ShardedMap::new();
        for i in 0..100_000 {
            map.insert(key(i), i);
        }
        let room = |map: &ShardedMap<KeyHash, u64>| map.shards.iter().map(HashMap::capacity).sum::<usize>();
        let full = room(&map);
        for i in 0..99_000 {
            assert_eq!(map.remove(&key(i)), Some(i));
        }
        assert_eq!(map.get(&key(99_500)), Some(&99_500));
        assert!(room(&map) * 8 < full, "room {} of {full} kept for 1,000 keys", room(&map));
    }

    /// The most keys that growths moved within one run of `window` inserts, as a share of the
    /// keys there were (runs once there are 16,384 keys): a single map moves them all when it
    /// doubles; shards that fill in lockstep grow together and do the same.
    fn most_moved_in_a_window<K: Hash + Eq + Shard>(keys: impl Iterator<Item = K>, window: usize) -> f64 {
        let mut map: ShardedMap<K, ()> = ShardedMap::new();
        let (mut most, mut moved) = (0.0_f64, 0_usize);
        for (inserted, key) in keys.enumerate() {
            let shard = ShardedMap::<K, ()>::of(&key);
            let (before, len) = (map.shards[shard].capacity(), map.shards[shard].len());
            map.insert(key, ());
            if map.shards[shard].capacity() != before {
                moved += len;
            }
            if (inserted + 1) % window == 0 {
                if inserted >= 16_384 {
                    #[allow(clippy::cast_precision_loss)]
                    let share = moved as f64 / (inserted + 1) as f64;
                    most = most.max(share);
                }
                moved = 0;
            }
        }
        most
    }

    /// Keys of either kind fill the shards unevenly enough that a run of 1,024 inserts never
    /// moves a large share of the keys — also sequence numbers taken every other one (the
    /// predecessor index), which modulo the shard count filled 128 shards in lockstep.
    #[test]
    fn the_shards_do_not_grow_in_lockstep() {
        let seqs = most_moved_in_a_window((1..=400_000_u64).step_by(2).map(JournalSeq::new), 1_024);
        assert!(seqs < 0.25, "a run of 1,024 sequence numbers moved {:.0} % of the keys", seqs * 100.0);
        let keys = most_moved_in_a_window((0..200_000).map(key), 1_024);
        assert!(keys < 0.25, "a run of 1,024 keys moved {:.0} % of the keys", keys * 100.0);
    }
}
