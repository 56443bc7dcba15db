//! [`MemoryStore`]: an in-memory [`AgentStore`] — a **test double** of the embedded store, for
//! tests of the loop that need no files. Nothing survives the process.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tenure_core::journal::{DurableNodeState, JournalChange, JournalStore};
use tenure_core::log::Event;
use tenure_core::log_store::{Log, LogError, LogIndex, LogRecord, MemoryLog};

use super::AgentStore;
use crate::store::StoreError;

#[derive(Debug, Default)]
struct Shared {
    log: MemoryLog,
    journals: BTreeMap<String, DurableNodeState>,
}

/// The in-memory store: one log and the journals, shared by clones.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    shared: Arc<Mutex<Shared>>,
}

impl MemoryStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The log of a [`MemoryStore`].
#[derive(Clone, Debug)]
pub struct MemoryStoreLog(MemoryStore);

impl Log for MemoryStoreLog {
    fn append(&mut self, event: &Event) -> Result<LogIndex, LogError> {
        self.0.lock().log.append(event)
    }

    fn read_from(&self, from: LogIndex, max_records: usize) -> Result<Vec<LogRecord>, LogError> {
        self.0.lock().log.read_from(from, max_records)
    }

    fn head(&self) -> Result<Option<LogIndex>, LogError> {
        self.0.lock().log.head()
    }
}

/// A node's journal in a [`MemoryStore`].
#[derive(Clone, Debug)]
pub struct MemoryStoreJournal {
    store: MemoryStore,
    node: String,
}

impl JournalStore for MemoryStoreJournal {
    type Error = Infallible;

    fn load(&self) -> Result<DurableNodeState, Infallible> {
        Ok(self.store.lock().journals.get(&self.node).cloned().unwrap_or_default())
    }

    fn commit(&mut self, change: &JournalChange) -> Result<(), Infallible> {
        self.store.lock().journals.entry(self.node.clone()).or_default().apply(change);
        Ok(())
    }
}

impl AgentStore for MemoryStore {
    type Journal = MemoryStoreJournal;
    type Log = MemoryStoreLog;

    fn log(&self) -> MemoryStoreLog {
        MemoryStoreLog(self.clone())
    }

    fn journal(&self, node: &str) -> MemoryStoreJournal {
        MemoryStoreJournal { store: self.clone(), node: node.to_owned() }
    }

    async fn append_batch(&self, events: &[Event]) -> Result<Vec<LogIndex>, LogError> {
        // All or nothing, as the embedded store: an event the log will not hold refuses the batch.
        for event in events {
            tenure_core::log_store::encode_record(event)?;
        }
        let mut shared = self.lock();
        events.iter().map(|event| shared.log.append(event)).collect()
    }

    fn record_highest_token(&self, _token: u64) {}

    fn backup(&self) -> Result<Vec<u8>, StoreError> {
        Err(StoreError::NoBackup { why: "the in-memory store (a test double) has no backups" })
    }

    fn flush_identity(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
