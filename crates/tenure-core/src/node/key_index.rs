//! The engine's index of journal entries by idempotency key, without a second copy of the keys.
//!
//! A key is ~80 bytes and a node holding a million addresses journals two million of them: a map
//! from the key's text held a copy of every one (~240 bytes an address with the table,
//! docs/benchmarks.md). This index keeps the key's 64-bit hash and the entry's sequence number;
//! the key itself is read from the entry when a lookup must tell two keys with one hash apart.
//! A collision is rare (two million keys: about one chance in ten million) but handled: a hash
//! then names every entry under it, and each is compared by its key.

use std::collections::BTreeMap;

use xxhash_rust::xxh3::xxh3_64;

use super::sharded::{Shard, ShardedMap};
use crate::journal::{JournalEntry, JournalSeq};

/// The journal's entries, as the engine holds them.
pub(crate) type Entries = BTreeMap<JournalSeq, std::sync::Arc<JournalEntry>>;

/// An idempotency key's hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct KeyHash(u64);

impl KeyHash {
    /// `key`'s hash as the index keeps it.
    #[cfg(test)]
    pub(super) fn of(key: &str) -> Self {
        Self(xxh3_64(key.as_bytes()))
    }
}

impl Shard for KeyHash {
    fn shard(&self) -> usize {
        // Truncation is what is wanted: only the low bits pick the shard.
        #[allow(clippy::cast_possible_truncation)]
        let shard = self.0 as usize;
        shard
    }
}

/// The entries under one hash: almost always one.
#[derive(Debug)]
enum Seqs {
    One(JournalSeq),
    /// Keys whose hashes collide, one entry each (boxed: a slot stays 16 bytes).
    Many(Box<[JournalSeq]>),
}

// A slot of the index is as small as the sequence number beside its tag.
const _: () = assert!(std::mem::size_of::<Seqs>() == 16);

/// Idempotency key → the newest entry journaled under it.
#[derive(Debug)]
pub(crate) struct KeyIndex {
    by_hash: ShardedMap<KeyHash, Seqs>,
    /// xxh3; a test's hash makes every key collide.
    hasher: fn(&[u8]) -> u64,
}

fn key_of(entries: &Entries, seq: JournalSeq) -> &str {
    &entries.get(&seq).expect("an indexed entry is in the journal").action.idempotency_key
}

impl KeyIndex {
    pub(crate) fn new() -> Self {
        Self::hashed_by(xxh3_64)
    }

    fn hashed_by(hasher: fn(&[u8]) -> u64) -> Self {
        Self { by_hash: ShardedMap::new(), hasher }
    }

    fn hash(&self, key: &str) -> KeyHash {
        KeyHash((self.hasher)(key.as_bytes()))
    }

    /// Indexes every entry of `entries` anew, the newest of a key winning.
    pub(crate) fn rebuild(&mut self, entries: &Entries) {
        self.clear();
        for (seq, entry) in entries {
            self.insert(&entry.action.idempotency_key, *seq, entries);
        }
    }

    /// The newest entry journaled under `key`.
    pub(crate) fn get(&self, key: &str, entries: &Entries) -> Option<JournalSeq> {
        match self.by_hash.get(&self.hash(key))? {
            Seqs::One(seq) => (key_of(entries, *seq) == key).then_some(*seq),
            Seqs::Many(seqs) => seqs.iter().copied().find(|seq| key_of(entries, *seq) == key),
        }
    }

    /// Indexes `seq` (journaled already in `entries`) under `key`, in place of an older entry of
    /// the same key.
    pub(crate) fn insert(&mut self, key: &str, seq: JournalSeq, entries: &Entries) {
        let hash = self.hash(key);
        let next = match self.by_hash.remove(&hash) {
            None => Seqs::One(seq),
            Some(Seqs::One(other)) if key_of(entries, other) == key => Seqs::One(seq),
            Some(Seqs::One(other)) => Seqs::Many(Box::new([other, seq])),
            Some(Seqs::Many(seqs)) => {
                let mut seqs = seqs.into_vec();
                seqs.retain(|other| key_of(entries, *other) != key);
                seqs.push(seq);
                Seqs::Many(seqs.into_boxed_slice())
            }
        };
        self.by_hash.insert(hash, next);
    }

    /// Forgets `seq` under `key` if it is the entry indexed there (an older entry of the key is
    /// not indexed). Called before the entry leaves `entries`.
    pub(crate) fn remove(&mut self, key: &str, seq: JournalSeq) {
        let hash = self.hash(key);
        match self.by_hash.remove(&hash) {
            None => {}
            Some(Seqs::One(other)) if other == seq => {}
            Some(Seqs::One(other)) => {
                self.by_hash.insert(hash, Seqs::One(other));
            }
            Some(Seqs::Many(seqs)) => {
                let mut seqs = seqs.into_vec();
                seqs.retain(|other| *other != seq);
                let rest = match seqs.as_slice() {
                    [] => return,
                    [one] => Seqs::One(*one),
                    _ => Seqs::Many(seqs.into_boxed_slice()),
                };
                self.by_hash.insert(hash, rest);
            }
        }
    }

    pub(crate) fn clear(&mut self) {
        self.by_hash.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Attempts, EntryState};
    use crate::model::{CaptureDomain, CaptureEpoch, IdempotencyKey, OwnershipEpoch, StampedAction, Verb};

    fn entry(seq: u64, holder: &str) -> (JournalSeq, std::sync::Arc<JournalEntry>) {
        let seq = JournalSeq::new(seq);
        let action = StampedAction::new(
            "p",
            "10.0.0.1".parse().expect("literal"),
            Verb::AssignSecondaryIp,
            holder,
            "sim1",
            "eni",
            CaptureDomain::new("sim1", "g"),
            CaptureEpoch::from_stored(1),
            OwnershipEpoch::from_stored(1),
        );
        let entry = JournalEntry {
            seq,
            action,
            state: EntryState::Pending,
            detail: None,
            executed_seq: None,
            attempts: Attempts::default(),
        };
        (seq, std::sync::Arc::new(entry))
    }

    /// Entries 1 and 3 share a key (`a`'s), entry 2 has `b`'s.
    fn journal() -> (Entries, IdempotencyKey, IdempotencyKey) {
        let entries: Entries = [entry(1, "a"), entry(2, "b"), entry(3, "a")].into_iter().collect();
        let key = |seq: u64| entries[&JournalSeq::new(seq)].action.idempotency_key.clone();
        let (a, b) = (key(1), key(2));
        (entries, a, b)
    }

    fn each_hash(check: impl Fn(KeyIndex)) {
        check(KeyIndex::new());
        // Every key under one hash: what a collision does, for every key at once.
        check(KeyIndex::hashed_by(|_| 7));
    }

    #[test]
    fn the_newest_entry_of_a_key_is_found_and_removing_an_older_one_keeps_it() {
        each_hash(|mut index| {
            let (entries, a, b) = journal();
            index.rebuild(&entries);
            assert_eq!(index.get(&a, &entries), Some(JournalSeq::new(3)), "the newest of `a`");
            assert_eq!(index.get(&b, &entries), Some(JournalSeq::new(2)));
            assert_eq!(index.get("p/10.0.0.1/unjournaled", &entries), None);
            index.remove(&a, JournalSeq::new(1));
            assert_eq!(index.get(&a, &entries), Some(JournalSeq::new(3)), "1 was not the indexed entry");
            index.remove(&a, JournalSeq::new(3));
            assert_eq!(index.get(&a, &entries), None);
            assert_eq!(index.get(&b, &entries), Some(JournalSeq::new(2)), "b's entry stays");
            index.insert(&a, JournalSeq::new(1), &entries);
            assert_eq!(index.get(&a, &entries), Some(JournalSeq::new(1)));
            index.remove(&b, JournalSeq::new(2));
            assert_eq!(index.get(&b, &entries), None);
            assert_eq!(index.get(&a, &entries), Some(JournalSeq::new(1)));
        });
    }
}
