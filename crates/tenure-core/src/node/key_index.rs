//! The engine's index of journal entries by idempotency key, without a second copy of the keys.
//!
//! A key is ~80 bytes and a node holding a million addresses journals two million of them: a map
//! from the key's text held a copy of every one (~240 bytes an address with the table,
//! docs/benchmarks.md). This index keeps the key's 64-bit hash and the entry's sequence number;
//! the key itself is read from the entry when a lookup must tell two keys with one hash apart.
//! A collision is rare (two million keys: about one chance in ten million) but handled: a hash
//! then names every entry under it, and each is compared by its key.

use std::collections::BTreeMap;

use xxhash_rust::xxh3::{Xxh3Default, xxh3_64};

use super::sharded::{Shard, ShardedMap};
use crate::journal::{JournalEntry, JournalSeq};
use crate::model::{ActionStamp, KeyHasher, StampedAction};

/// The journal's entries, as the engine holds them.
pub(crate) type Entries = BTreeMap<JournalSeq, std::sync::Arc<JournalEntry>>;

/// An idempotency key's hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct KeyHash(u64);

impl KeyHash {
    /// `key`'s hash as the index keeps it.
    #[cfg(test)]
    pub(super) fn of(key: &str) -> Self {
        KeyHashing::Xxh3.of_text(key)
    }
}

/// How the index hashes a key: xxh3, the same over the key's text and over an action's key as
/// it is written ([`StampedAction::hash_key`]: an action keeps no text of its key).
#[derive(Clone, Copy, Debug)]
enum KeyHashing {
    Xxh3,
    /// Every key the same hash: a test's, to make every key collide.
    #[cfg(test)]
    Constant(u64),
}

struct Streaming(Xxh3Default);

impl KeyHasher for Streaming {
    fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

impl KeyHashing {
    fn of_text(self, key: &str) -> KeyHash {
        match self {
            Self::Xxh3 => KeyHash(xxh3_64(key.as_bytes())),
            #[cfg(test)]
            Self::Constant(hash) => KeyHash(hash),
        }
    }

    fn of_action(self, action: &StampedAction) -> KeyHash {
        match self {
            Self::Xxh3 => {
                let mut streaming = Streaming(Xxh3Default::new());
                action.hash_key(&mut streaming);
                KeyHash(streaming.0.digest())
            }
            #[cfg(test)]
            Self::Constant(hash) => KeyHash(hash),
        }
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
    hashing: KeyHashing,
}

/// Whether the entry `seq` of `entries` is journaled under `key`.
fn has_key(entries: &Entries, seq: JournalSeq, key: &str) -> bool {
    entries.get(&seq).expect("an indexed entry is in the journal").action.key_is(key)
}

impl KeyIndex {
    pub(crate) fn new() -> Self {
        Self::hashed_by(KeyHashing::Xxh3)
    }

    fn hashed_by(hashing: KeyHashing) -> Self {
        Self { by_hash: ShardedMap::new(), hashing }
    }

    /// Indexes every entry of `entries` anew, the newest of a key winning.
    pub(crate) fn rebuild(&mut self, entries: &Entries) {
        self.clear();
        for seq in entries.keys() {
            self.insert(*seq, entries);
        }
    }

    /// The newest entry journaled under `key`.
    pub(crate) fn get(&self, key: &str, entries: &Entries) -> Option<JournalSeq> {
        match self.by_hash.get(&self.hashing.of_text(key))? {
            Seqs::One(seq) => has_key(entries, *seq, key).then_some(*seq),
            Seqs::Many(seqs) => seqs.iter().copied().find(|seq| has_key(entries, *seq, key)),
        }
    }

    /// The newest entry journaled under `key`, the key `stamp` writes: an entry of the same
    /// stamp is told apart by its fields, not by writing its key again (the key leaves out the
    /// capture domain, so an entry whose fields differ is compared by its key).
    pub(crate) fn get_stamp(
        &self,
        key: &str,
        stamp: &ActionStamp<'_>,
        entries: &Entries,
    ) -> Option<JournalSeq> {
        debug_assert!(stamp.key_is(key), "`key` is the one `stamp` writes");
        let is = |seq: JournalSeq| {
            let action = &entries.get(&seq).expect("an indexed entry is in the journal").action;
            action.stamp() == *stamp || action.key_is(key)
        };
        match self.by_hash.get(&self.hashing.of_text(key))? {
            Seqs::One(seq) => is(*seq).then_some(*seq),
            Seqs::Many(seqs) => seqs.iter().copied().find(|seq| is(*seq)),
        }
    }

    /// Indexes `seq` (journaled already in `entries`) under its key, in place of an older entry
    /// of the same key (the key streamed into the hash: a restart's rebuild).
    pub(crate) fn insert(&mut self, seq: JournalSeq, entries: &Entries) {
        let action = &entries.get(&seq).expect("an entry is journaled before it is indexed").action;
        let hash = self.hashing.of_action(action);
        self.insert_hashed(hash, None, seq, entries);
    }

    /// [`KeyIndex::insert`] of an entry whose key the caller has written (`key`: a reconcile's
    /// import writes it to look it up first), not written again.
    pub(crate) fn insert_written(&mut self, key: &str, seq: JournalSeq, entries: &Entries) {
        debug_assert!(entries[&seq].action.key_is(key), "`key` is the entry's");
        self.insert_hashed(self.hashing.of_text(key), Some(key), seq, entries);
    }

    fn insert_hashed(&mut self, hash: KeyHash, key: Option<&str>, seq: JournalSeq, entries: &Entries) {
        let action = &entries.get(&seq).expect("an entry is journaled before it is indexed").action;
        // The entry's key, written once and only if another entry shares its hash.
        let mut written = key.map(str::to_owned);
        let mut same_key = |other: JournalSeq| {
            let indexed = &entries.get(&other).expect("an indexed entry is in the journal").action;
            indexed.stamp() == action.stamp()
                || indexed.key_is(written.get_or_insert_with(|| action.idempotency_key().into()))
        };
        let next = match self.by_hash.remove(&hash) {
            None => Seqs::One(seq),
            Some(Seqs::One(other)) if same_key(other) => Seqs::One(seq),
            Some(Seqs::One(other)) => Seqs::Many(Box::new([other, seq])),
            Some(Seqs::Many(seqs)) => {
                let mut seqs = seqs.into_vec();
                seqs.retain(|other| !same_key(*other));
                seqs.push(seq);
                Seqs::Many(seqs.into_boxed_slice())
            }
        };
        self.by_hash.insert(hash, next);
    }

    /// Forgets `seq` (its `action`) if it is the entry indexed under its key (an older entry of
    /// the key is not indexed). Called before the entry leaves `entries`.
    pub(crate) fn remove(&mut self, action: &StampedAction, seq: JournalSeq) {
        let hash = self.hashing.of_action(action);
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
        let key = |seq: u64| entries[&JournalSeq::new(seq)].action.idempotency_key();
        let (a, b) = (key(1), key(2));
        (entries, a, b)
    }

    fn each_hash(check: impl Fn(KeyIndex)) {
        check(KeyIndex::new());
        // Every key under one hash: what a collision does, for every key at once.
        check(KeyIndex::hashed_by(KeyHashing::Constant(7)));
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
            let action = |seq: u64| &entries[&JournalSeq::new(seq)].action;
            index.remove(action(1), JournalSeq::new(1));
            assert_eq!(index.get(&a, &entries), Some(JournalSeq::new(3)), "1 was not the indexed entry");
            index.remove(action(3), JournalSeq::new(3));
            assert_eq!(index.get(&a, &entries), None);
            assert_eq!(index.get(&b, &entries), Some(JournalSeq::new(2)), "b's entry stays");
            index.insert(JournalSeq::new(1), &entries);
            assert_eq!(index.get(&a, &entries), Some(JournalSeq::new(1)));
            index.remove(action(2), JournalSeq::new(2));
            assert_eq!(index.get(&b, &entries), None);
            assert_eq!(index.get(&a, &entries), Some(JournalSeq::new(1)));
        });
    }

    proptest::proptest! {
        /// An action keeps no text of its key: what the index hashes and compares is the key as
        /// it is written, and it must be the key's text byte for byte (an Azure NIC has `/` in
        /// it; names may be long or empty).
        #[test]
        fn a_key_hashed_and_compared_as_written_is_its_text(
            pool in "[a-z0-9-]{1,12}",
            holder in "[a-z0-9-]{0,40}",
            nic in "[a-z0-9/-]{1,200}",
            owner in 0u64..u64::MAX,
            epoch in 0u64..u64::MAX,
            cut in 0usize..400,
        ) {
            let action = StampedAction::new(
                &pool,
                "fd00::1".parse().expect("literal"),
                Verb::AssignSecondaryIp,
                &holder,
                "azure-west",
                &nic,
                CaptureDomain::new("azure-west", "g"),
                CaptureEpoch::from_stored(epoch),
                OwnershipEpoch::from_stored(owner),
            );
            let key = action.idempotency_key();
            proptest::prop_assert_eq!(KeyHashing::Xxh3.of_action(&action), KeyHashing::Xxh3.of_text(&key));
            proptest::prop_assert!(action.key_is(&key));
            let cut = cut.min(key.len() - 1);
            proptest::prop_assert!(!action.key_is(&key[..cut]), "a prefix of the key is not it");
            proptest::prop_assert!(!action.key_is(&format!("{key}0")), "nor the key and more");
            let mut other = key.to_string();
            let last = other.pop().expect("a key is not empty");
            other.push(if last == '0' { '1' } else { '0' });
            proptest::prop_assert!(!action.key_is(&other), "nor a key one byte apart");
        }
    }
}
