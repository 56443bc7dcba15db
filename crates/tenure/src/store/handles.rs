//! The handles an [`EmbeddedStore`] gives the core and the agent: [`EmbeddedLog`] (the
//! federation log), [`EmbeddedJournal`] (one node's journal), and the store as an
//! [`AgentStore`](crate::agent::AgentStore).

use tenure_core::journal::{DurableNodeState, JournalChange, JournalStore};
use tenure_core::log::Event;
use tenure_core::log_store::{Log, LogError, LogIndex, LogRecord};

use super::{EmbeddedStore, StoreError};

/// The log of an [`EmbeddedStore`]: a cheap handle; appends are durable commits (group commit:
/// each also writes the journal changes buffered so far).
#[derive(Clone, Debug)]
pub struct EmbeddedLog {
    pub(super) store: EmbeddedStore,
}

impl EmbeddedLog {
    /// The store this log lives in.
    #[must_use]
    pub fn store(&self) -> &EmbeddedStore {
        &self.store
    }
}

impl Log for EmbeddedLog {
    fn append(&mut self, event: &Event) -> Result<LogIndex, LogError> {
        let indices = self.store.append_batch(std::slice::from_ref(event))?;
        Ok(*indices.first().expect("one event appended, one index"))
    }

    fn read_from(&self, from: LogIndex, max_records: usize) -> Result<Vec<LogRecord>, LogError> {
        self.store.read_from(from, max_records)
    }

    fn head(&self) -> Result<Option<LogIndex>, LogError> {
        self.store.head()
    }
}

/// One node's journal in an [`EmbeddedStore`]: `commit` buffers, `sync` writes every node's
/// buffered changes in one durable commit, `load` reads back what is committed.
#[derive(Clone, Debug)]
pub struct EmbeddedJournal {
    pub(super) store: EmbeddedStore,
    pub(super) node: String,
}

impl JournalStore for EmbeddedJournal {
    type Error = StoreError;

    fn load(&self) -> Result<DurableNodeState, StoreError> {
        self.store.load_node(&self.node)
    }

    fn commit(&mut self, change: &JournalChange) -> Result<(), StoreError> {
        self.store.buffer(&self.node, change)
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        self.store.sync()
    }
}

impl crate::agent::AgentStore for EmbeddedStore {
    type Journal = EmbeddedJournal;
    type Log = EmbeddedLog;

    fn log(&self) -> EmbeddedLog {
        EmbeddedStore::log(self)
    }

    fn journal(&self, node: &str) -> EmbeddedJournal {
        EmbeddedStore::journal(self, node)
    }

    /// One redb commit, on the caller's thread (the loop's, or the heartbeat thread's): the
    /// fsync blocks it, as the loop's step waits for its appends anyway.
    async fn append_batch(&self, events: &[Event]) -> Result<Vec<LogIndex>, LogError> {
        EmbeddedStore::append_batch(self, events)
    }

    /// A commit that is not durable by itself ([`EmbeddedStore::append_deferred`]): the step's
    /// gate, or its end, syncs it (a journal's sync is this store's).
    async fn append_results(&self, events: &[Event]) -> Result<Vec<LogIndex>, LogError> {
        EmbeddedStore::append_deferred(self, events)
    }

    fn record_highest_token(&self, token: u64) {
        EmbeddedStore::record_highest_token(self, token);
    }

    fn backup(&self) -> Result<Vec<u8>, StoreError> {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let file = self.dir().join(format!("api-backup-{}-{nanos}.tmp", std::process::id()));
        let result =
            self.backup_to(&file).and_then(|_| std::fs::read(&file).map_err(StoreError::io("read", &file)));
        let _ = std::fs::remove_file(&file);
        result
    }

    fn flush_identity(&self) -> Result<(), StoreError> {
        EmbeddedStore::flush_identity(self)
    }
}
