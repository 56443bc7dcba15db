//! A node's journal as readers outside the agent loop see it (issue 24: reads never wait for the
//! loop), as [`crate::map_index`] is the map's. A snapshot is the engine's own map of entries,
//! cloned (O(1): [`crate::chunked_map`] shares its chunks, and a change the engine makes after
//! copies only the chunks it touches), with the one thing a row reads from the engine and not the
//! entry: when a failed entry is tried again, kept for those entries alone. The loop keeps a
//! [`JournalIndex`] per node beside its engine, which reads those times again only for the
//! entries the engine says changed ([`NodeEngine::take_row_changes`]).

use crate::journal::{JournalEntries, JournalEntry, JournalSeq, JournalStore};
use crate::node::{NodeEngine, RowChanges};
use crate::rows::{ActionRow, action_row_with_attempts};

/// One entry as a reader sees it.
#[derive(Clone, Copy, Debug)]
pub struct JournalRow<'a> {
    /// The entry, as the snapshot holds it (the journal's own until it changes there).
    pub entry: &'a JournalEntry,
    /// When a failed entry a sweep retries may be tried again ([`NodeEngine::next_attempt_ms`]).
    pub next_attempt_ms: Option<u64>,
}

/// One node's journal as of one moment: cheap to clone, immutable, readable from any thread.
#[derive(Clone, Debug)]
pub struct JournalSnapshot {
    node: crate::names::Name,
    entries: JournalEntries,
    /// [`JournalRow::next_attempt_ms`] of the entries that have one (failed, retried).
    next_attempts: imbl::OrdMap<JournalSeq, u64>,
}

impl JournalSnapshot {
    /// The node whose journal it is.
    #[must_use]
    pub fn node(&self) -> &str {
        &self.node
    }

    /// How many entries.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the journal has none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn row<'a>(&self, entry: &'a JournalEntry) -> JournalRow<'a> {
        JournalRow { entry, next_attempt_ms: self.next_attempts.get(&entry.seq).copied() }
    }

    /// The entries in journal order.
    pub fn rows(&self) -> impl DoubleEndedIterator<Item = JournalRow<'_>> + '_ {
        self.entries.values().map(|entry| self.row(entry))
    }

    /// The entries after sequence number `after` (all when `None`), in journal order.
    pub fn rows_after(&self, after: Option<u64>) -> impl Iterator<Item = JournalRow<'_>> + '_ {
        let from =
            after.map_or(std::ops::Bound::Unbounded, |seq| std::ops::Bound::Excluded(JournalSeq::new(seq)));
        self.entries.range((from, std::ops::Bound::Unbounded)).map(|(_, entry)| self.row(entry))
    }

    /// An entry written out, as `GET /v1/actions` lists it.
    #[must_use]
    pub fn render(&self, row: &JournalRow<'_>) -> ActionRow {
        action_row_with_attempts(&self.node, row.entry, row.next_attempt_ms)
    }
}

/// The entries the loop keeps for readers, following one node's engine.
#[derive(Clone, Debug)]
pub struct JournalIndex {
    current: JournalSnapshot,
}

impl JournalIndex {
    /// An index of node `node`'s journal that has followed nothing: its first
    /// [`JournalIndex::follow`] reads every entry.
    #[must_use]
    pub fn new(node: &str) -> Self {
        Self {
            current: JournalSnapshot {
                node: crate::names::shared(node),
                entries: JournalEntries::new(),
                next_attempts: imbl::OrdMap::new(),
            },
        }
    }

    /// Brings the entries up to `engine`: its map (shared), and the retry times of the entries
    /// it says changed, or of all. Returns how many entries' times were read.
    pub fn follow<S: JournalStore>(&mut self, engine: &mut NodeEngine<S>) -> usize {
        let read = match engine.take_row_changes() {
            RowChanges::Whole => {
                self.current.next_attempts = engine
                    .entries()
                    .filter_map(|entry| engine.next_attempt_ms(entry).map(|at| (entry.seq, at)))
                    .collect();
                engine.durable().entries.len()
            }
            RowChanges::Seqs(seqs) => {
                for seq in &seqs {
                    match engine.entry_at(*seq).and_then(|entry| engine.next_attempt_ms(entry)) {
                        Some(at) => {
                            self.current.next_attempts.insert(*seq, at);
                        }
                        None => {
                            self.current.next_attempts.remove(seq);
                        }
                    }
                }
                seqs.len()
            }
        };
        self.current.entries = engine.durable().entries.clone();
        read
    }

    /// The entries as they are now, for readers: O(1).
    #[must_use]
    pub fn snapshot(&self) -> JournalSnapshot {
        self.current.clone()
    }
}
