//! A node's journal as rows (the `journal_*` tables): applying buffered [`JournalChange`]s inside
//! one write transaction, and loading a node's [`DurableNodeState`] back.
//!
//! Rows, not a change log: an entry is one row rewritten when its state changes and removed when
//! compacted, a high-water mark one row per (pool, address, capture domain) raised in place, so
//! the store stays as large as the journal, not as its history. Every change passes the
//! journal's rules first ([`check_change`], the one place they are written: a sequence number
//! that grows, no final state left but for a retry, execution order that grows, attempts only of
//! open entries, only finished entries compacted) against the rows, and is refused with
//! [`StoreError::Inconsistent`] where the in-memory state would panic.
//!
//! Loading rebuilds the marks row by row with [`HighWater::raise`], which takes maxima, so the
//! marks loaded are the ones written whatever the order (their codec form is equal; the
//! in-memory layout of [`HighWater`] may list capture domains in another order).

use std::collections::BTreeMap;
use std::path::Path;

use redb::{ReadableTable, Table, WriteTransaction};
use tenure_core::codec;
use tenure_core::fence::HighWater;
use tenure_core::journal::{
    DurableNodeState, JournalChange, JournalEntry, JournalFacts, JournalSeq, check_change,
};

use super::StoreError;
use super::identity::encode_record;
use super::tables::{COUNTERS, Counters, ENTRIES, MARKS, mark_key};

/// The tables one commit writes journal rows into.
pub(crate) struct JournalTables<'txn> {
    /// `journal_entries`.
    entries: Table<'txn, (&'static str, u64), &'static [u8]>,
    /// `journal_marks`.
    marks: Table<'txn, (&'static str, &'static str), &'static [u8]>,
    /// `journal_counters`.
    counters: Table<'txn, &'static str, &'static [u8]>,
}

impl<'txn> JournalTables<'txn> {
    /// Opens the journal tables of `txn` (creating them in a new store).
    pub(crate) fn open(txn: &'txn WriteTransaction, path: &Path) -> Result<Self, StoreError> {
        let storage = |e: redb::TableError| StoreError::storage(path)(e.into());
        Ok(Self {
            entries: txn.open_table(ENTRIES).map_err(storage)?,
            marks: txn.open_table(MARKS).map_err(storage)?,
            counters: txn.open_table(COUNTERS).map_err(storage)?,
        })
    }

    /// Applies one node's changes, in order, to its rows. The rows a batch touches are read
    /// (decoded) once and written (encoded) once, whatever number of changes name them: a call
    /// handed out and reported in one batch changes its entry three or four times (the gate's
    /// mark, the attempt, the outcome) and its high-water row once per verb.
    pub(crate) fn apply(
        &mut self,
        path: &Path,
        node: &str,
        changes: &[&JournalChange],
    ) -> Result<(), StoreError> {
        let storage = |e: redb::StorageError| StoreError::storage(path)(e.into());
        let rejected = |source| StoreError::Rejected { node: node.to_owned(), source };
        let mut counters = match self.counters.get(node).map_err(storage)? {
            Some(row) => decode_counters(path, node, row.value())?,
            None => Counters::default(),
        };
        let before = counters;
        let mut batch = Batch::default();
        for change in changes {
            self.apply_one(path, node, change, &mut counters, &mut batch)?;
        }
        for (seq, row) in batch.entries {
            match row {
                Some(entry) => {
                    let bytes = codec::encode_journal_entry(&entry).map_err(rejected)?;
                    self.entries.insert((node, seq.get()), bytes.as_slice()).map_err(storage)?;
                }
                None => {
                    self.entries.remove((node, seq.get())).map_err(storage)?;
                }
            }
        }
        for (key, raised) in batch.marks {
            let bytes = codec::encode_journal_change(&raised).map_err(rejected)?;
            self.marks.insert((node, key.as_str()), bytes.as_slice()).map_err(storage)?;
        }
        if counters != before {
            self.counters.insert(node, encode_record(&counters).as_slice()).map_err(storage)?;
        }
        Ok(())
    }

    fn apply_one(
        &mut self,
        path: &Path,
        node: &str,
        change: &JournalChange,
        counters: &mut Counters,
        batch: &mut Batch,
    ) -> Result<(), StoreError> {
        // The entries the change names, read once per batch: checked by the journal's rules (the
        // one place they are written: `tenure_core::journal::check_change`), then changed.
        for seq in change.named_seqs() {
            if !batch.entries.contains_key(seq) {
                let row = self.entry(path, node, *seq)?;
                batch.entries.insert(*seq, row);
            }
        }
        let named = &batch.entries;
        let lookup = |seq: JournalSeq| named.get(&seq).and_then(Option::as_ref);
        let facts = JournalFacts {
            last_seq: JournalSeq::new(counters.last_seq),
            executions: counters.executions,
            entry: &lookup,
        };
        check_change(change, &facts).map_err(|broken| StoreError::Inconsistent {
            node: node.to_owned(),
            reason: broken.to_string(),
        })?;
        match change {
            JournalChange::Append(entry) => {
                batch.entries.insert(entry.seq, Some(entry.clone()));
                counters.last_seq = entry.seq.get();
            }
            JournalChange::SetState { seq, state, detail, executed_seq } => {
                if let Some(executed) = executed_seq {
                    counters.executions = *executed;
                }
                checked(&mut batch.entries, *seq).set_state(*state, detail.as_deref(), *executed_seq);
            }
            JournalChange::Attempt { seq, at_ms, wall_ms } => {
                checked(&mut batch.entries, *seq).record_attempt(*at_ms, *wall_ms);
            }
            JournalChange::RaiseHighWater {
                pool,
                address,
                capture_domain,
                capture_epoch,
                ownership_epoch,
            } => {
                let key = mark_key(pool, *address, capture_domain.as_str());
                let stored = match batch.marks.remove(&key) {
                    Some(raised) => Some(raised),
                    None => self.mark(path, node, &key)?,
                };
                let (mut capture, mut ownership) = (*capture_epoch, *ownership_epoch);
                if let Some(JournalChange::RaiseHighWater { capture_epoch, ownership_epoch, .. }) = stored {
                    capture = capture.max(capture_epoch);
                    ownership = ownership.max(ownership_epoch);
                }
                let raised = JournalChange::RaiseHighWater {
                    pool: pool.clone(),
                    address: *address,
                    capture_domain: capture_domain.clone(),
                    capture_epoch: capture,
                    ownership_epoch: ownership,
                };
                batch.marks.insert(key, raised);
            }
            JournalChange::Compact { seqs } => {
                for seq in seqs {
                    batch.entries.insert(*seq, None);
                }
            }
        }
        Ok(())
    }

    /// The entry `seq` of `node`, decoded.
    fn entry(&self, path: &Path, node: &str, seq: JournalSeq) -> Result<Option<JournalEntry>, StoreError> {
        let storage = |e: redb::StorageError| StoreError::storage(path)(e.into());
        match self.entries.get((node, seq.get())).map_err(storage)? {
            Some(row) => decode_entry(path, node, seq.get(), row.value()).map(Some),
            None => Ok(None),
        }
    }

    /// The high-water row `key` of `node`, decoded.
    fn mark(&self, path: &Path, node: &str, key: &str) -> Result<Option<JournalChange>, StoreError> {
        let storage = |e: redb::StorageError| StoreError::storage(path)(e.into());
        match self.marks.get((node, key)).map_err(storage)? {
            Some(row) => decode_mark(path, node, key, row.value()).map(Some),
            None => Ok(None),
        }
    }
}

/// The entry a checked change names (the rules refused a change naming a missing one).
fn checked(entries: &mut BTreeMap<JournalSeq, Option<JournalEntry>>, seq: JournalSeq) -> &mut JournalEntry {
    entries.get_mut(&seq).and_then(Option::as_mut).expect("checked: the journal holds it")
}

/// The rows one batch of a node's changes touched, as they end: written once each when the batch
/// is applied. An entry is `None` once compacted (its row removed).
#[derive(Default)]
struct Batch {
    entries: BTreeMap<JournalSeq, Option<JournalEntry>>,
    marks: BTreeMap<String, JournalChange>,
}

/// Reads `node`'s journal back from the three journal tables.
pub(crate) fn load_node(
    path: &Path,
    node: &str,
    entries: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
    marks: &impl ReadableTable<(&'static str, &'static str), &'static [u8]>,
    counters: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<DurableNodeState, StoreError> {
    let storage = |e: redb::StorageError| StoreError::storage(path)(e.into());
    let mut state = DurableNodeState::default();
    if let Some(row) = counters.get(node).map_err(storage)? {
        let counters = decode_counters(path, node, row.value())?;
        state.last_seq = JournalSeq::new(counters.last_seq);
        state.executions = counters.executions;
    }
    // Read in key order: every entry goes past the last, so the chunks fill whole.
    for row in entries.range((node, 0)..=(node, u64::MAX)).map_err(storage)? {
        let (key, value) = row.map_err(storage)?;
        let seq = key.value().1;
        let entry = std::sync::Arc::new(decode_entry(path, node, seq, value.value())?);
        state.entries.insert(JournalSeq::new(seq), entry);
    }
    let mut high_water = HighWater::default();
    for row in marks.range((node, "")..).map_err(storage)? {
        let (key, value) = row.map_err(storage)?;
        let (row_node, mark) = key.value();
        if row_node != node {
            break;
        }
        if let JournalChange::RaiseHighWater {
            pool,
            address,
            capture_domain,
            capture_epoch,
            ownership_epoch,
        } = decode_mark(path, node, mark, value.value())?
        {
            high_water.raise(&pool, address, &capture_domain, capture_epoch, ownership_epoch);
        }
    }
    state.high_water = high_water;
    Ok(state)
}

/// Decodes an entry row; its seq must be its key's.
pub(crate) fn decode_entry(
    path: &Path,
    node: &str,
    seq: u64,
    bytes: &[u8],
) -> Result<JournalEntry, StoreError> {
    let corrupt = |reason: String| StoreError::RecordCorrupt {
        path: path.to_owned(),
        table: "journal_entries",
        key: format!("({node}, {seq})"),
        reason,
    };
    let entry = codec::decode_journal_entry(bytes).map_err(|e| corrupt(e.to_string()))?;
    if entry.seq.get() != seq {
        return Err(corrupt(format!("the entry says sequence number {}", entry.seq)));
    }
    Ok(entry)
}

/// Decodes a high-water row: a `raise-high-water` change.
pub(crate) fn decode_mark(
    path: &Path,
    node: &str,
    key: &str,
    bytes: &[u8],
) -> Result<JournalChange, StoreError> {
    let corrupt = |reason: String| StoreError::RecordCorrupt {
        path: path.to_owned(),
        table: "journal_marks",
        key: format!("({node}, {key})"),
        reason,
    };
    match codec::decode_journal_change(bytes) {
        Ok(change @ JournalChange::RaiseHighWater { .. }) => Ok(change),
        Ok(other) => Err(corrupt(format!("a `{other:?}` change where a raise-high-water belongs"))),
        Err(e) => Err(corrupt(e.to_string())),
    }
}

/// Decodes a counters row.
pub(crate) fn decode_counters(path: &Path, node: &str, bytes: &[u8]) -> Result<Counters, StoreError> {
    Counters::decode(bytes).map_err(|e| StoreError::RecordCorrupt {
        path: path.to_owned(),
        table: "journal_counters",
        key: node.to_owned(),
        reason: e.to_string(),
    })
}

/// The largest token a change carries (an appended action's or a raised mark's), 0 for others.
pub(crate) fn change_token(change: &JournalChange) -> u64 {
    match change {
        JournalChange::Append(entry) => {
            entry.action.capture_epoch.get().max(entry.action.ownership_epoch.get())
        }
        JournalChange::RaiseHighWater { capture_epoch, ownership_epoch, .. } => {
            capture_epoch.get().max(ownership_epoch.get())
        }
        JournalChange::SetState { .. } | JournalChange::Attempt { .. } | JournalChange::Compact { .. } => 0,
    }
}
