//! An ordered map kept in shared chunks, for a node's journal: the engine's own map of its
//! entries and, the same map cloned, what readers outside the loop see (issue 24: reads never
//! wait for the loop).
//!
//! Why not a `BTreeMap` with a persistent index beside it (what the journal had): the journal's
//! keys are sequence numbers given in order, and a B-tree filled one key at a time in order
//! keeps its nodes a little over half full (std's and `imbl`'s both split at the median); the
//! readers' `imbl` index was a second tree of every entry, half full too, path-copied at each
//! change. Measured at 100k addresses (heaptrack): 68 bytes an address for the journal's tree
//! and 240 for the readers' index (docs/benchmarks.md). Here the entries sit in sorted chunks
//! of up to [`CHUNK`] pairs; a key past the last one is pushed onto the last chunk, so chunks
//! filled in order are full (16 bytes a pair for a sequence number and an `Arc`), and the map is
//! one vector of chunks behind an `Arc`: a clone is O(1), and a change after a clone copies the
//! vector of chunk pointers once and each chunk it touches once (copy on write), never the
//! entries themselves (an `Arc` value is cloned, not what it points to). The first change after
//! a clone is therefore O(chunks), where a persistent tree's path copy is O(log n): at a million
//! addresses about 8k journal chunks and 4k map-row chunks, ~300 KB copied once a step that
//! changes anything after the loop posted its snapshots (an idle step copies nothing); the
//! capture and the node's pass measured no slower (docs/benchmarks.md).
//!
//! Lookups are two binary searches (the chunks' first keys, then one chunk). A key inserted
//! before the last one goes into its chunk; a full chunk gives its last pair to the next chunk
//! when that is the last or has room (keys that come nearly in order keep every chunk but the
//! last full), and splits in two otherwise; a chunk that falls below a quarter full after a
//! removal is merged with a neighbour when both fit in one.

use std::borrow::Borrow;
use std::fmt;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

/// Most pairs a chunk holds (4 KiB of sequence numbers and `Arc`s).
pub const CHUNK: usize = 256;

/// One chunk: its first key (kept beside the pointer, so a lookup's first search reads no
/// chunk) and its sorted pairs.
#[derive(Clone)]
struct Chunk<K, V> {
    first: K,
    pairs: Arc<Pairs<K, V>>,
}

/// A chunk's pairs: keys and values in two vectors of the same length, not one of tuples (a
/// 17-byte address beside an 8-aligned value would be padded to 24 in a tuple; a `BTreeMap`
/// node keeps them apart too). Their room grows by doubling from [`FIRST_ROOM`] to [`CHUNK`]
/// and never past it: a map of a few pairs (the marks of a small pool) holds a few.
struct Pairs<K, V> {
    keys: Vec<K>,
    values: Vec<V>,
}

/// The room of a new chunk.
const FIRST_ROOM: usize = 8;

impl<K: Clone, V: Clone> Clone for Pairs<K, V> {
    /// A copy with the same room (a chunk copied on write is often appended to next).
    fn clone(&self) -> Self {
        let mut keys = Vec::with_capacity(self.keys.capacity());
        keys.extend_from_slice(&self.keys);
        let mut values = Vec::with_capacity(self.values.capacity());
        values.extend_from_slice(&self.values);
        Self { keys, values }
    }
}

impl<K, V> Pairs<K, V> {
    fn with_first(key: K, value: V) -> Self {
        let mut pairs = Self { keys: Vec::with_capacity(FIRST_ROOM), values: Vec::with_capacity(FIRST_ROOM) };
        pairs.keys.push(key);
        pairs.values.push(value);
        pairs
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    fn get(&self, at: usize) -> Option<(&K, &V)> {
        Some((self.keys.get(at)?, &self.values[at]))
    }

    fn insert(&mut self, at: usize, key: K, value: V) {
        if self.keys.len() == self.keys.capacity() {
            // Doubling, but never past a full chunk.
            let more = CHUNK.min(2 * self.keys.len().max(FIRST_ROOM / 2)).saturating_sub(self.keys.len());
            self.keys.reserve_exact(more);
            self.values.reserve_exact(more);
        }
        self.keys.insert(at, key);
        self.values.insert(at, value);
    }

    fn remove(&mut self, at: usize) -> (K, V) {
        (self.keys.remove(at), self.values.remove(at))
    }

    fn pop(&mut self) -> Option<(K, V)> {
        Some((self.keys.pop()?, self.values.pop().expect("as many values as keys")))
    }

    fn split_off(&mut self, at: usize) -> Self {
        Self { keys: self.keys.split_off(at), values: self.values.split_off(at) }
    }

    fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> + '_ {
        self.keys.iter().zip(&self.values)
    }

    fn slice(&self, from: usize, to: usize) -> impl DoubleEndedIterator<Item = (&K, &V)> + '_ {
        self.keys[from..to].iter().zip(&self.values[from..to])
    }
}

/// An ordered map of sorted chunks shared on clone (see the module's header).
#[derive(Clone)]
pub struct ChunkedMap<K, V> {
    chunks: Arc<Vec<Chunk<K, V>>>,
    len: usize,
}

impl<K, V> Default for ChunkedMap<K, V> {
    fn default() -> Self {
        Self { chunks: Arc::new(Vec::new()), len: 0 }
    }
}

/// Where a key is or would go: a chunk and a place in it (at most its length).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Place {
    chunk: usize,
    at: usize,
}

impl<K: Ord + Clone, V: Clone> ChunkedMap<K, V> {
    /// An empty map.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// How many pairs.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first place whose key is not `below` (`below` is true for a prefix of the keys).
    /// Past a chunk's last pair is the next chunk's first place, if there is a next chunk.
    fn partition(&self, below: impl Fn(&K) -> bool) -> Place {
        let chunk = self.chunks.partition_point(|c| below(&c.first));
        if chunk == 0 {
            return Place { chunk: 0, at: 0 };
        }
        let chunk = chunk - 1;
        let pairs = &self.chunks[chunk].pairs;
        let at = pairs.keys.partition_point(|k| below(k));
        if at == pairs.len() && chunk + 1 < self.chunks.len() {
            // The end of a chunk is the start of the next: said as the start, where the key
            // there is.
            return Place { chunk: chunk + 1, at: 0 };
        }
        Place { chunk, at }
    }

    /// Where `key` is, if it is.
    fn find<Q>(&self, key: &Q) -> Option<Place>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let place = self.partition(|k| k.borrow() < key);
        let pairs = &self.chunks.get(place.chunk)?.pairs;
        pairs.keys.get(place.at).filter(|k| (*k).borrow() == key).map(|_| place)
    }

    /// The value of `key`.
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(key).map(|p| &self.chunks[p.chunk].pairs.values[p.at])
    }

    /// Whether `key` is in the map.
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(key).is_some()
    }

    /// The value of `key`, to change: its chunk is copied first if a clone shares it.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let place = self.find(key)?;
        Some(self.value_mut(place))
    }

    /// The pair of `key`, with the key as kept.
    pub fn get_key_value<Q>(&self, key: &Q) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(key).and_then(|p| self.chunks[p.chunk].pairs.get(p.at))
    }

    /// The value of `key` to change, put there first by `make` if the map has none (what
    /// `BTreeMap`'s `entry(key).or_insert_with(make)` gives).
    pub fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        let place = match self.find(&key) {
            Some(place) => place,
            // Not there (once a key): put, then found where the insert left it.
            None => {
                self.insert(key.clone(), make());
                self.find(&key).expect("inserted above")
            }
        };
        self.value_mut(place)
    }

    /// The value at `place`, to change: its chunk is copied first if a clone shares it.
    fn value_mut(&mut self, place: Place) -> &mut V {
        let chunk = &mut Arc::make_mut(&mut self.chunks)[place.chunk];
        &mut Arc::make_mut(&mut chunk.pairs).values[place.at]
    }

    /// Puts `value` under `key`; returns the value it replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let place = self.partition(|k| *k < key);
        let chunks = Arc::make_mut(&mut self.chunks);
        let last = place.chunk + 1 >= chunks.len();
        let next_has_room = chunks.get(place.chunk + 1).is_some_and(|next| next.pairs.len() < CHUNK);
        let Some(chunk) = chunks.get_mut(place.chunk) else {
            chunks.push(Chunk { first: key.clone(), pairs: Arc::new(Pairs::with_first(key, value)) });
            self.len += 1;
            return None;
        };
        if chunk.pairs.keys.get(place.at).is_some_and(|k| *k == key) {
            let pairs = Arc::make_mut(&mut chunk.pairs);
            return Some(std::mem::replace(&mut pairs.values[place.at], value));
        }
        self.len += 1;
        if chunk.pairs.len() < CHUNK {
            Arc::make_mut(&mut chunk.pairs).insert(place.at, key.clone(), value);
            if place.at == 0 {
                chunk.first = key;
            }
        } else if last && place.at == CHUNK {
            // Past the last key: a new chunk, which later keys in order fill.
            chunks.push(Chunk { first: key.clone(), pairs: Arc::new(Pairs::with_first(key, value)) });
        } else if last || next_has_room {
            // A full chunk gives its last pair to the next (a new last chunk, or one with room)
            // and stays full: keys that come nearly in order (results of calls in flight, a
            // window behind the newest) would otherwise split every chunk in two halves that
            // are never filled again.
            let pairs = Arc::make_mut(&mut chunks[place.chunk].pairs);
            let (moved_key, moved_value) = pairs.pop().expect("a full chunk");
            pairs.insert(place.at, key.clone(), value);
            if place.at == 0 {
                chunks[place.chunk].first = key;
            }
            if last {
                let first = moved_key.clone();
                chunks.push(Chunk { first, pairs: Arc::new(Pairs::with_first(moved_key, moved_value)) });
            } else {
                let next = &mut chunks[place.chunk + 1];
                next.first = moved_key.clone();
                Arc::make_mut(&mut next.pairs).insert(0, moved_key, moved_value);
            }
        } else {
            let pairs = Arc::make_mut(&mut chunk.pairs);
            let upper = pairs.split_off(CHUNK / 2);
            let mut upper = Chunk { first: upper.keys[0].clone(), pairs: Arc::new(upper) };
            let target = if place.at > CHUNK / 2 {
                Arc::get_mut(&mut upper.pairs).expect("new").insert(place.at - CHUNK / 2, key, value);
                &mut upper
            } else {
                pairs.insert(place.at, key, value);
                chunk
            };
            target.first = target.pairs.keys[0].clone();
            chunks.insert(place.chunk + 1, upper);
        }
        None
    }

    /// Takes `key` out; returns its value.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let place = self.find(key)?;
        self.len -= 1;
        let chunks = Arc::make_mut(&mut self.chunks);
        let chunk = &mut chunks[place.chunk];
        let pairs = Arc::make_mut(&mut chunk.pairs);
        let (_, value) = pairs.remove(place.at);
        let left = pairs.len();
        if left == 0 {
            chunks.remove(place.chunk);
            return Some(value);
        }
        chunk.first = pairs.keys[0].clone();
        if left < CHUNK / 4 {
            Self::merge_small(chunks, place.chunk);
        }
        Some(value)
    }

    /// Merges chunk `i` (under a quarter full) into a neighbour when both fit in one chunk.
    fn merge_small(chunks: &mut Vec<Chunk<K, V>>, i: usize) {
        let fits = |a: usize, b: usize| chunks[a].pairs.len() + chunks[b].pairs.len() <= CHUNK;
        let (into, from) = if i + 1 < chunks.len() && fits(i, i + 1) {
            (i, i + 1)
        } else if i > 0 && fits(i - 1, i) {
            (i - 1, i)
        } else {
            return;
        };
        let taken = chunks.remove(from);
        let pairs = Arc::make_mut(&mut chunks[into].pairs);
        let moved = Arc::try_unwrap(taken.pairs).unwrap_or_else(|shared| (*shared).clone());
        // Exactly the room needed: both fit in a chunk, and the room stays within one.
        pairs.keys.reserve_exact(moved.keys.len());
        pairs.values.reserve_exact(moved.values.len());
        pairs.keys.extend(moved.keys);
        pairs.values.extend(moved.values);
    }

    /// The pairs whose keys are in `range`, in order (none for a start past the end, where
    /// `BTreeMap::range` panics).
    pub fn range<Q, R>(&self, range: R) -> impl DoubleEndedIterator<Item = (&K, &V)> + '_
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
        R: RangeBounds<Q>,
    {
        let start = match range.start_bound() {
            Bound::Included(q) => self.partition(|k| k.borrow() < q),
            Bound::Excluded(q) => self.partition(|k| k.borrow() <= q),
            Bound::Unbounded => Place { chunk: 0, at: 0 },
        };
        let end = match range.end_bound() {
            Bound::Included(q) => self.partition(|k| k.borrow() <= q),
            Bound::Excluded(q) => self.partition(|k| k.borrow() < q),
            Bound::Unbounded => self.end(),
        };
        self.between(start, end.max(start))
    }

    /// The place past the last pair.
    fn end(&self) -> Place {
        self.chunks.last().map_or(Place { chunk: 0, at: 0 }, |last| Place {
            chunk: self.chunks.len() - 1,
            at: last.pairs.len(),
        })
    }

    /// The pairs from `start` up to `end` (excluded).
    fn between(&self, start: Place, end: Place) -> impl DoubleEndedIterator<Item = (&K, &V)> + '_ {
        let chunks = self.chunks.get(start.chunk..=end.chunk).unwrap_or(&[]);
        chunks.iter().enumerate().flat_map(move |(i, chunk)| {
            let i = start.chunk + i;
            let from = if i == start.chunk { start.at } else { 0 };
            let to = if i == end.chunk { end.at } else { chunk.pairs.len() };
            chunk.pairs.slice(from, to)
        })
    }

    /// Every pair, in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> + '_ {
        self.chunks.iter().flat_map(|chunk| chunk.pairs.iter())
    }

    /// Every pair, in order, moved out as it goes (copied only from chunks a clone still
    /// shares): a rebuild holds each pair once more, not the whole map twice.
    pub fn into_pairs(self) -> impl Iterator<Item = (K, V)> {
        let chunks = Arc::try_unwrap(self.chunks).unwrap_or_else(|shared| (*shared).clone());
        chunks.into_iter().flat_map(|chunk| {
            let moved = Arc::try_unwrap(chunk.pairs).unwrap_or_else(|shared| (*shared).clone());
            moved.keys.into_iter().zip(moved.values)
        })
    }

    /// Every key, in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + '_ {
        self.iter().map(|(k, _)| k)
    }

    /// Every value, in key order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + '_ {
        self.iter().map(|(_, v)| v)
    }
}

impl<K: Ord + Clone, V: Clone> FromIterator<(K, V)> for ChunkedMap<K, V> {
    /// As a `BTreeMap` collects: in key order, the last value of a repeated key kept.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut pairs: Vec<(K, V)> = iter.into_iter().collect();
        // Stable: equal keys stay in their order, and the last of them is kept (its value moved
        // into the first's place, the later one dropped).
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        pairs.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(later, kept);
            }
            same
        });
        let len = pairs.len();
        let mut chunks = Vec::with_capacity(len.div_ceil(CHUNK));
        // Chunks from the end, so that each is split off the tail without moving the rest.
        while !pairs.is_empty() {
            let at = (pairs.len() - 1) / CHUNK * CHUNK;
            let (keys, values): (Vec<K>, Vec<V>) = pairs.split_off(at).into_iter().unzip();
            chunks.push(Chunk { first: keys[0].clone(), pairs: Arc::new(Pairs { keys, values }) });
        }
        chunks.reverse();
        Self { chunks: Arc::new(chunks), len }
    }
}

impl<K: Ord + Clone, V: Clone> Extend<(K, V)> for ChunkedMap<K, V> {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.insert(k, v);
        }
    }
}

impl<K: Ord + Clone, V: Clone, Q: Ord + ?Sized> std::ops::Index<&Q> for ChunkedMap<K, V>
where
    K: Borrow<Q>,
{
    type Output = V;

    fn index(&self, key: &Q) -> &V {
        self.get(key).expect("no entry found for key")
    }
}

impl<K: Ord + Clone, V: Clone + PartialEq> PartialEq for ChunkedMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<K: Ord + Clone, V: Clone + Eq> Eq for ChunkedMap<K, V> {}

impl<K: Ord + Clone + fmt::Debug, V: Clone + fmt::Debug> fmt::Debug for ChunkedMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u16, u32),
        Remove(u16),
        Set(u16, u32),
        Bump(u16, u32),
        Snapshot,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (any::<u16>(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k % 2048, v)),
            2 => any::<u16>().prop_map(|k| Op::Remove(k % 2048)),
            1 => (any::<u16>(), any::<u32>()).prop_map(|(k, v)| Op::Set(k % 2048, v)),
            2 => (any::<u16>(), any::<u32>()).prop_map(|(k, v)| Op::Bump(k % 2048, v)),
            1 => Just(Op::Snapshot),
        ]
    }

    /// The map's whole observable behaviour against `BTreeMap`'s, and every snapshot unchanged
    /// by what followed it.
    fn check(ops: &[Op], appended: u16) -> Result<(), TestCaseError> {
        let mut map = ChunkedMap::new();
        let mut model = BTreeMap::new();
        for k in 0..appended {
            map.insert(k, u32::from(k));
            model.insert(k, u32::from(k));
        }
        let mut snapshots = Vec::new();
        for op in ops {
            match *op {
                Op::Insert(k, v) => prop_assert_eq!(map.insert(k, v), model.insert(k, v)),
                Op::Remove(k) => prop_assert_eq!(map.remove(&k), model.remove(&k)),
                Op::Set(k, v) => {
                    prop_assert_eq!(
                        map.get_mut(&k).map(|x| std::mem::replace(x, v)),
                        model.get_mut(&k).map(|x| std::mem::replace(x, v))
                    );
                }
                Op::Bump(k, v) => {
                    let got = map.get_or_insert_with(k, || v);
                    *got = got.wrapping_add(1);
                    let kept = model.entry(k).or_insert(v);
                    *kept = kept.wrapping_add(1);
                }
                Op::Snapshot => snapshots.push((map.clone(), model.clone())),
            }
            prop_assert_eq!(map.len(), model.len());
        }
        prop_assert!(map.iter().eq(model.iter()));
        prop_assert!(map.iter().rev().eq(model.iter().rev()));
        for k in [0u16, 1, 7, 300, 1000, 2047, 4000] {
            prop_assert_eq!(map.get(&k), model.get(&k));
            prop_assert!(map.range(k..).eq(model.range(k..)));
            prop_assert!(map.range(..k).rev().eq(model.range(..k).rev()));
            prop_assert!(
                map.range((Bound::Excluded(k), Bound::Included(k.saturating_add(600))))
                    .eq(model.range((Bound::Excluded(k), Bound::Included(k.saturating_add(600)))))
            );
        }
        prop_assert_eq!(map.iter().next(), model.iter().next());
        prop_assert_eq!(map.iter().next_back(), model.iter().next_back());
        for (snapshot, was) in &snapshots {
            prop_assert!(snapshot.iter().eq(was.iter()), "a clone is not changed by what the map does after");
        }
        let collected: ChunkedMap<u16, u32> = model.iter().map(|(k, v)| (*k, *v)).collect();
        prop_assert!(collected == map);
        let shared = map.clone();
        prop_assert!(shared.into_pairs().eq(model.clone()), "moved out of a shared map");
        for chunk in map.chunks.iter() {
            prop_assert!(chunk.pairs.len() > 0 && chunk.pairs.len() <= CHUNK);
            prop_assert!(
                chunk.pairs.keys.capacity() <= CHUNK && chunk.pairs.values.capacity() <= CHUNK,
                "room past a chunk"
            );
            prop_assert_eq!(chunk.pairs.keys.len(), chunk.pairs.values.len());
            prop_assert_eq!(&chunk.first, &chunk.pairs.keys[0]);
            prop_assert!(chunk.pairs.keys.windows(2).all(|w| w[0] < w[1]));
        }
        prop_assert!(map.chunks.windows(2).all(|w| w[0].pairs.keys.last() < Some(&w[1].first)));
        drop(snapshots);
        prop_assert!(map.into_pairs().eq(model), "moved out");
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn behaves_as_a_btree_map(ops in prop::collection::vec(op(), 0..1500), appended in 0u16..1200) {
            check(&ops, appended)?;
        }
    }

    #[test]
    fn keys_in_order_fill_whole_chunks() {
        let map: ChunkedMap<u64, u64> = {
            let mut map = ChunkedMap::new();
            for k in 0..(10 * CHUNK as u64 + 3) {
                map.insert(k, k);
            }
            map
        };
        assert_eq!(map.chunks.len(), 11);
        assert!(map.chunks[..10].iter().all(|c| c.pairs.len() == CHUNK && c.pairs.keys.capacity() == CHUNK));
    }

    #[test]
    fn keys_nearly_in_order_fill_whole_chunks() {
        // Results of calls in flight: each key at most a window behind the newest.
        let keys: Vec<u64> = (0..40u64).flat_map(|w| (0..100u64).rev().map(move |k| w * 100 + k)).collect();
        let mut map = ChunkedMap::new();
        for k in keys {
            map.insert(k, k);
        }
        assert_eq!(map.len(), 4000);
        let (last, whole) = map.chunks.split_last().expect("chunks");
        assert!(whole.iter().all(|c| c.pairs.len() == CHUNK), "every chunk but the last is full");
        assert_eq!(last.pairs.len(), 4000 % CHUNK);
    }

    #[test]
    fn removals_merge_chunks_under_a_quarter() {
        let mut map: ChunkedMap<u64, u64> = (0..(4 * CHUNK as u64)).map(|k| (k, k)).collect();
        assert_eq!(map.chunks.len(), 4);
        // Leave a few in each chunk: every chunk under a quarter, two by two they fit in one.
        for k in 0..(4 * CHUNK as u64) {
            if k % CHUNK as u64 >= 8 {
                map.remove(&k);
            }
        }
        assert_eq!(map.len(), 32);
        assert_eq!(map.chunks.len(), 1, "the small chunks merged");
    }

    #[test]
    fn a_change_after_a_clone_copies_only_the_chunk_it_touches() {
        let mut map: ChunkedMap<u64, u64> = (0..(4 * CHUNK as u64)).map(|k| (k, k)).collect();
        let snapshot = map.clone();
        *map.get_mut(&5).expect("there") = 99;
        let shared = map
            .chunks
            .iter()
            .zip(snapshot.chunks.iter())
            .filter(|(a, b)| Arc::ptr_eq(&a.pairs, &b.pairs))
            .count();
        assert_eq!(shared, 3, "three of four chunks still shared");
        assert_eq!(snapshot.get(&5), Some(&5));
        assert_eq!(map.get(&5), Some(&99));
    }
}
