//! A node's journal as readers outside the agent loop see it (issue 24: reads never wait for the
//! loop), as [`crate::map_index`] is the map's. The loop keeps a [`JournalIndex`] per node beside
//! its engine: every entry, in journal order, in a persistent B-tree (`imbl`), with the one thing a
//! row reads from the engine and not the entry (when a failed entry is tried again). It changes
//! only the entries the engine says changed ([`NodeEngine::take_row_changes`]). The entries are the
//! engine's own, shared (`Arc`): since the index holds every one, the journal copies an entry
//! (~256 bytes) at each change of its state or attempts, and the index then takes the copy. A snapshot ([`JournalIndex::snapshot`]) is O(1).

use std::sync::Arc;

use crate::journal::{JournalEntry, JournalSeq, JournalStore};
use crate::node::{NodeEngine, RowChanges};
use crate::rows::{ActionRow, action_row_with_attempts};

/// One entry as a reader sees it.
#[derive(Clone, Debug)]
pub struct JournalRow {
    /// The entry (shared with the journal until it changes there).
    pub entry: Arc<JournalEntry>,
    /// When a failed entry a sweep retries may be tried again ([`NodeEngine::next_attempt_ms`]).
    pub next_attempt_ms: Option<u64>,
}

/// One node's journal as of one moment: cheap to clone, immutable, readable from any thread.
#[derive(Clone, Debug)]
pub struct JournalSnapshot {
    node: crate::names::Name,
    entries: imbl::OrdMap<JournalSeq, JournalRow>,
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

    /// The entries in journal order.
    pub fn rows(&self) -> impl DoubleEndedIterator<Item = &JournalRow> + '_ {
        self.entries.values()
    }

    /// The entries after sequence number `after` (all when `None`), in journal order.
    pub fn rows_after(&self, after: Option<u64>) -> impl Iterator<Item = &JournalRow> + '_ {
        let from =
            after.map_or(std::ops::Bound::Unbounded, |seq| std::ops::Bound::Excluded(JournalSeq::new(seq)));
        self.entries.range((from, std::ops::Bound::Unbounded)).map(|(_, row)| row)
    }

    /// An entry written out, as `GET /v1/actions` lists it.
    #[must_use]
    pub fn render(&self, row: &JournalRow) -> ActionRow {
        action_row_with_attempts(&self.node, &row.entry, row.next_attempt_ms)
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
        Self { current: JournalSnapshot { node: crate::names::shared(node), entries: imbl::OrdMap::new() } }
    }

    /// Brings the entries up to `engine`: those it says changed, or all. Returns how many rows
    /// were read from it.
    pub fn follow<S: JournalStore>(&mut self, engine: &mut NodeEngine<S>) -> usize {
        let row = |engine: &NodeEngine<S>, entry: &Arc<JournalEntry>| JournalRow {
            next_attempt_ms: engine.next_attempt_ms(entry),
            entry: Arc::clone(entry),
        };
        match engine.take_row_changes() {
            RowChanges::Whole => {
                let entries = &engine.durable().entries;
                self.current.entries =
                    entries.iter().map(|(seq, entry)| (*seq, row(engine, entry))).collect();
                self.current.entries.len()
            }
            RowChanges::Seqs(seqs) => {
                for seq in &seqs {
                    match engine.durable().entries.get(seq) {
                        Some(entry) => {
                            self.current.entries.insert(*seq, row(engine, entry));
                        }
                        None => {
                            self.current.entries.remove(seq);
                        }
                    }
                }
                seqs.len()
            }
        }
    }

    /// The entries as they are now, for readers: O(1).
    #[must_use]
    pub fn snapshot(&self) -> JournalSnapshot {
        self.current.clone()
    }
}
