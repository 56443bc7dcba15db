//! The engine's index of journal entries by idempotency key, without a second copy of the keys.
//!
//! A key is ~80 bytes and a node holding a million addresses journals two million of them: a map
//! from the key's text held a copy of every one (~240 bytes an address with the table,
//! docs/benchmarks.md). This index keeps the key's 64-bit hash and the entry's sequence number;
//! the key itself is read from the entry when a lookup must tell two keys with one hash apart.
//! A collision is rare (two million keys: about one chance in ten million) but handled: a hash
//! then names every entry under it, and each is compared by its key.

use xxhash_rust::xxh3::xxh3_64;

use super::sharded::{Shard, ShardedMap};
use crate::journal::JournalSeq;
use crate::model::ActionStamp;

/// The journal's entries, as the engine holds them.
pub(crate) type Entries = crate::journal::JournalEntries;

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

/// Whether the entry `seq` of `entries` is journaled under `key` (an entry keeps no text of its
/// key: it is compared as it is written, [`crate::model::StampedAction::key_is`]).
fn has_key(entries: &Entries, seq: JournalSeq, key: &str) -> bool {
    entries.get(&seq).expect("an indexed entry is in the journal").action.key_is(key)
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

    /// Indexes every entry of `entries` anew, the newest of a key winning (each key written into
    /// one buffer).
    pub(crate) fn rebuild(&mut self, entries: &Entries) {
        self.clear();
        let mut key = String::with_capacity(128);
        for (seq, entry) in entries.iter() {
            self.insert(entry.action.stamp().key_in(&mut key), *seq, entries);
        }
    }

    /// The newest entry journaled under `key`.
    pub(crate) fn get(&self, key: &str, entries: &Entries) -> Option<JournalSeq> {
        self.find(key, entries, |_| false)
    }

    /// [`KeyIndex::get`] of `key`, the key `stamp` writes: an entry of the same stamp is told
    /// apart by its fields, not by writing its key again (a reconcile finds most planned actions
    /// journaled already). The key leaves out the capture domain, so an entry whose fields differ
    /// is still compared by its key.
    pub(crate) fn get_stamp(
        &self,
        key: &str,
        stamp: &ActionStamp<'_>,
        entries: &Entries,
    ) -> Option<JournalSeq> {
        debug_assert!(stamp.key_is(key), "`key` is the one `stamp` writes");
        self.find(key, entries, |seq| entries[&seq].action.stamp() == *stamp)
    }

    /// The entry under `key`'s hash that `same` says is it, or whose key is `key`.
    fn find(&self, key: &str, entries: &Entries, same: impl Fn(JournalSeq) -> bool) -> Option<JournalSeq> {
        let is = |seq: JournalSeq| same(seq) || has_key(entries, seq, key);
        match self.by_hash.get(&self.hash(key))? {
            Seqs::One(seq) => is(*seq).then_some(*seq),
            Seqs::Many(seqs) => seqs.iter().copied().find(|seq| is(*seq)),
        }
    }

    /// Indexes `seq` (journaled already in `entries`) under `key`, its key, in place of an older
    /// entry of the same key.
    pub(crate) fn insert(&mut self, key: &str, seq: JournalSeq, entries: &Entries) {
        debug_assert!(entries[&seq].action.key_is(key), "`key` is the entry's");
        let hash = self.hash(key);
        let next = match self.by_hash.remove(&hash) {
            None => Seqs::One(seq),
            Some(Seqs::One(other)) if has_key(entries, other, key) => Seqs::One(seq),
            Some(Seqs::One(other)) => Seqs::Many(Box::new([other, seq])),
            Some(Seqs::Many(seqs)) => {
                let mut seqs = seqs.into_vec();
                seqs.retain(|other| !has_key(entries, *other, key));
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
    use crate::journal::{Attempts, EntryState, JournalEntry};
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
        let key = |seq: u64| entries[&JournalSeq::new(seq)].action.idempotency_key();
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
            for (seq, key) in [(3, &a), (2, &b)] {
                let stamp = entries[&JournalSeq::new(seq)].action.stamp();
                assert_eq!(
                    index.get_stamp(key, &stamp, &entries),
                    Some(JournalSeq::new(seq)),
                    "by its stamp"
                );
                // The key leaves the capture domain out: a stamp of another line with the same
                // key is the same entry (SPEC 6: importing that key again changes nothing).
                let other_line = CaptureDomain::new("sim1", "another-group");
                let other = ActionStamp { capture_domain: &other_line, ..stamp };
                assert_eq!(index.get_stamp(key, &other, &entries), Some(JournalSeq::new(seq)), "by its key");
            }
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
