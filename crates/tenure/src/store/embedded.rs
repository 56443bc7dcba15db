//! [`EmbeddedStore`]: opening (with the refusals of the module doc) and group commit. The
//! handles the core drives, [`EmbeddedLog`] and [`EmbeddedJournal`], are in `handles.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};

use redb::{Database, Durability, ReadableDatabase};
use tenure_core::codec;
use tenure_core::journal::{DurableNodeState, JournalChange};
use tenure_core::log::{Event, EventKind};
use tenure_core::log_store::{self, LOG_READ_BATCH_MAX, LogError, LogIndex, LogRecord};

use super::checks::{check_against, corrupt, inspect_read_only, verify_contents};
use super::handles::{EmbeddedJournal, EmbeddedLog};
use super::identity::{StoreIdentity, encode_record};
use super::journal_rows::{self, JournalTables, change_token};
use super::lock::StoreLock;
use super::tables::{self, COUNTERS, ENTRIES, LOG, MARKS, META, META_IDENTITY_KEY};
use super::{STORE_FILE_NAME, StoreError};

/// The durable embedded store of one process: cheap to clone (an `Arc` inside), `Send + Sync`.
/// See the module doc of `store` for the tables, group commit and the refusals.
#[derive(Clone, Debug)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

/// The shared state of a store and its handles.
#[derive(Debug)]
struct Inner {
    /// The store directory.
    dir: PathBuf,
    /// The redb file.
    db_path: PathBuf,
    /// The identity file.
    identity_path: PathBuf,
    /// The cluster id (fixed for the store's life).
    cluster_id: String,
    /// The database; `None` once closed.
    db: RwLock<Option<Database>>,
    /// Journal changes committed by every node and not yet written.
    pending: Mutex<Pending>,
    /// Serialises write transactions; holds what was committed.
    writer: Mutex<Writer>,
    /// The highest token the agent said its view holds ([`EmbeddedStore::record_highest_token`]).
    recorded_token: AtomicU64,
    /// The committed head (0: empty log), for a lock-free `head`.
    head: AtomicU64,
    /// The first commit failure; the store refuses writes once set.
    failed: Mutex<Option<String>>,
    /// The held lock; dropped at close.
    lock: Mutex<Option<StoreLock>>,
    /// The identity last written to the identity file (serialises those writes).
    identity_written: Mutex<Option<StoreIdentity>>,
    /// The fleet of the agent using the store ([`EmbeddedStore::set_fleet`]), which its backups
    /// record.
    fleet: Mutex<Option<String>>,
}

/// Buffered journal changes, in commit order, each with its node.
#[derive(Debug, Default)]
struct Pending {
    /// The changes.
    changes: Vec<(String, JournalChange)>,
    /// The ticket the next buffered change gets; every change before it has a smaller one.
    next_ticket: u64,
}

/// What the writer knows was committed.
#[derive(Debug)]
struct Writer {
    /// Every change with a ticket below this is committed: durable, unless `deferred`.
    committed_ticket: u64,
    /// The identity record as committed in `meta`.
    identity: StoreIdentity,
    /// A commit since the last durable one was not durable ([`EmbeddedStore::append_deferred`]):
    /// the next [`EmbeddedStore::sync`] commits durably even with nothing buffered.
    deferred: bool,
}

/// Locks a mutex; a panic while it was held (a bug elsewhere) does not make the data behind it
/// wrong here, since every writer below leaves it consistent before anything can panic.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What [`EmbeddedStore::open_with`] does with a store that holds data but has no identity file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissingIdentity {
    /// Refuse it ([`StoreError::NoIdentity`]): the default.
    Refuse,
    /// Open it and write the identity file from it: the operator vouched that it is current.
    Accept,
}

impl EmbeddedStore {
    /// Opens (creating if absent) the store in directory `dir` (holding the redb file and a
    /// `LOCK` file), checking it against the identity file; refuses with a [`StoreError`] naming
    /// the reason (module doc of `store`). A refusal writes nothing. A store with no identity
    /// file is refused when it holds data ([`StoreError::NoIdentity`]); an empty one (a first
    /// start) writes the file from the store, with a warning.
    pub fn open(dir: &Path, identity_file: &Path) -> Result<Self, StoreError> {
        Self::open_with(dir, identity_file, MissingIdentity::Refuse)
    }

    /// [`Self::open`], with the operator's word on a store that holds data but has no identity
    /// file: [`MissingIdentity::Accept`] opens it (and writes the file from it) with a warning.
    pub fn open_with(dir: &Path, identity_file: &Path, missing: MissingIdentity) -> Result<Self, StoreError> {
        let identity = StoreIdentity::read_file(identity_file)?;
        let unvouched = |stored: &StoreIdentity| -> Result<(), StoreError> {
            let holds_data =
                stored.highest_index > 0 || stored.highest_token > 0 || !stored.restores.is_empty();
            match (&identity, missing) {
                (None, MissingIdentity::Refuse) if holds_data => Err(StoreError::NoIdentity {
                    dir: dir.to_owned(),
                    identity: identity_file.to_owned(),
                    store_index: stored.highest_index,
                    store_token: stored.highest_token,
                    beside: identity_beside(identity_file, stored),
                }),
                (None, MissingIdentity::Accept) if holds_data => {
                    tracing::warn!(
                        store = %dir.display(),
                        identity_file = %identity_file.display(),
                        highest_index = stored.highest_index,
                        highest_token = stored.highest_token,
                        "accepting a store that holds data without its identity file \
                         (--accept-store-without-identity): if it is a stale copy, it issues again tokens \
                         it issued before"
                    );
                    Ok(())
                }
                _ => Ok(()),
            }
        };
        let db_path = dir.join(STORE_FILE_NAME);
        let wiped = |recorded: &StoreIdentity| StoreError::Wiped {
            dir: dir.to_owned(),
            identity: identity_file.to_owned(),
            cluster: recorded.cluster_id.clone(),
            index: recorded.highest_index,
        };
        let present = || std::fs::metadata(&db_path).is_ok_and(|m| m.len() > 0);
        // Before the lock, so that this refusal creates nothing (a store in use always has its file).
        if let Some(recorded) = &identity
            && !present()
        {
            return Err(wiped(recorded));
        }
        std::fs::create_dir_all(dir).map_err(StoreError::io("create directory", dir))?;
        let mut store_lock = StoreLock::acquire(dir)?;
        let present = present();
        let (db, stored) = if present {
            // Every check before the writable open, which writes to the file even when it
            // repairs nothing: a refusal must leave the files as they were.
            let inspected = inspect_read_only(&db_path)?;
            if let Some(stored) = &inspected {
                unvouched(stored)?;
                if let Some(recorded) = &identity {
                    check_against(dir, identity_file, stored, recorded)?;
                }
            }
            let db = builder().open(&db_path).map_err(|e| corrupt(&db_path, e))?;
            let stored = match inspected {
                Some(stored) => stored,
                // Not shut down cleanly: redb repaired it on the open above (the one case where
                // a refused store was written to: by redb's recovery); check what it holds now.
                None => {
                    let txn = db.begin_read().map_err(|e| StoreError::storage(&db_path)(e.into()))?;
                    let stored = verify_contents(&db_path, &txn)?;
                    unvouched(&stored)?;
                    if let Some(recorded) = &identity {
                        check_against(dir, identity_file, &stored, recorded)?;
                    }
                    stored
                }
            };
            (db, stored)
        } else if let Some(recorded) = &identity {
            return Err(wiped(recorded));
        } else {
            create_store(&db_path, StoreIdentity::new_cluster())?
        };
        if identity.is_none() {
            tracing::warn!(
                store = %dir.display(),
                identity_file = %identity_file.display(),
                cluster = %stored.cluster_id,
                "no identity file: writing it from the store (first start, or the file was lost)"
            );
        }
        store_lock.write_holder()?;
        let store = Self {
            inner: Arc::new(Inner {
                dir: dir.to_owned(),
                db_path,
                identity_path: identity_file.to_owned(),
                cluster_id: stored.cluster_id.clone(),
                db: RwLock::new(Some(db)),
                pending: Mutex::new(Pending::default()),
                recorded_token: AtomicU64::new(stored.highest_token),
                head: AtomicU64::new(stored.highest_index),
                writer: Mutex::new(Writer { committed_ticket: 0, identity: stored, deferred: false }),
                failed: Mutex::new(None),
                lock: Mutex::new(Some(store_lock)),
                identity_written: Mutex::new(None),
                fleet: Mutex::new(None),
            }),
        };
        store.flush_identity()?;
        Ok(store)
    }

    /// The cluster id (made at creation, kept by a restore).
    #[must_use]
    pub fn cluster_id(&self) -> &str {
        &self.inner.cluster_id
    }

    /// Records the fleet of the agent using the store
    /// ([`tenure_core::fleet_spec::fleet_text`]), so that its backups say what the log was
    /// projected over.
    pub fn set_fleet(&self, fleet: String) {
        *self.inner.fleet.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(fleet);
    }

    /// The fleet [`Self::set_fleet`] recorded, if any.
    #[must_use]
    pub fn fleet(&self) -> Option<String> {
        self.inner.fleet.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The store directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The identity as committed: highest index, highest token, restores.
    #[must_use]
    pub fn identity(&self) -> StoreIdentity {
        lock(&self.inner.writer).identity.clone()
    }

    /// A handle on the log (implements [`Log`](tenure_core::log_store::Log)).
    #[must_use]
    pub fn log(&self) -> EmbeddedLog {
        EmbeddedLog { store: self.clone() }
    }

    /// A handle on `node`'s journal (implements [`JournalStore`](tenure_core::journal::JournalStore)).
    #[must_use]
    pub fn journal(&self, node: &str) -> EmbeddedJournal {
        EmbeddedJournal { store: self.clone(), node: node.to_owned() }
    }

    /// Appends `events` at the end of the log, with every journal change buffered so far, in one
    /// durable commit; returns their indices. Every event is encoded first: one that cannot be
    /// stored refuses the whole batch ([`LogError::Rejected`], [`LogError::TooLarge`]) and
    /// nothing is written. A storage failure is [`LogError::Unavailable`].
    pub fn append_batch(&self, events: &[Event]) -> Result<Vec<LogIndex>, LogError> {
        self.append_with(events, Durability::Immediate)
    }

    /// [`Self::append_batch`] in a commit that is not durable by itself: readers see it at once,
    /// and the next durable commit of this store (a [`Self::sync`] — the gate's, before any call
    /// leaves —, an [`Self::append_batch`], a heartbeat, [`Self::flush_identity`], a close)
    /// makes it durable with everything before it. A crash before loses it and the journal
    /// changes it carried, together (one transaction). What rests on it: everything derived from
    /// it (a result moves stream time, so arbitration and even epochs may follow from it) is
    /// committed after it in this same file, so it is never durable without it, and nothing
    /// leaves the process before a durable commit (the gate's sync before a call, the step's end
    /// before readers see it, a sync before a backup). For action results alone: their calls
    /// then look in flight at the restart, and go back through the gate (SPEC 6: at-least-once).
    /// One fsync a step instead of two (docs/decisions.md).
    pub fn append_deferred(&self, events: &[Event]) -> Result<Vec<LogIndex>, LogError> {
        self.append_with(events, Durability::None)
    }

    fn append_with(&self, events: &[Event], durability: Durability) -> Result<Vec<LogIndex>, LogError> {
        let mut records = Vec::with_capacity(events.len());
        let mut raised: u64 = 0;
        for event in events {
            let record = log_store::encode_record(event)?;
            if let EventKind::TokensRaised { by } = event.kind {
                raised = raised.saturating_add(by);
            }
            records.push(record);
        }
        let mut writer = lock(&self.inner.writer);
        self.commit_locked(&mut writer, &records, raised, durability).map_err(unavailable)
    }

    /// The index of the last committed record, `None` for an empty log.
    pub fn head(&self) -> Result<Option<LogIndex>, LogError> {
        if self.inner.db.read().map_or(true, |db| db.is_none()) {
            return Err(unavailable(StoreError::Closed { dir: self.inner.dir.clone() }));
        }
        Ok(LogIndex::from_stored(self.inner.head.load(Ordering::Acquire)))
    }

    /// The agent tells the store the highest token its view holds
    /// (`Federation::highest_token`); it is committed with the next commit and written to the
    /// identity file at the next [`Self::flush_identity`].
    pub fn record_highest_token(&self, token: u64) {
        self.inner.recorded_token.fetch_max(token, Ordering::AcqRel);
    }

    /// Writes the identity file now, from what is committed (first committing a recorded token
    /// the store has not written yet): atomically, temp + fsync + rename + directory fsync.
    /// Skipped when nothing changed since the last write. The agent calls it about once a second
    /// while things change; a plain copy of the store younger than the last write is not caught
    /// (`docs/operations.md`).
    pub fn flush_identity(&self) -> Result<(), StoreError> {
        let identity = {
            let mut writer = lock(&self.inner.writer);
            // Only what is durable is written to the file: a file ahead of the store would read
            // as a stale copy after a crash.
            if self.inner.recorded_token.load(Ordering::Acquire) > writer.identity.highest_token
                || writer.deferred
            {
                self.commit_locked(&mut writer, &[], 0, Durability::Immediate)?;
            }
            writer.identity.clone()
        };
        let mut written = lock(&self.inner.identity_written);
        if written.as_ref() == Some(&identity) {
            return Ok(());
        }
        identity.write_file(&self.inner.identity_path)?;
        *written = Some(identity);
        Ok(())
    }

    /// Closes the store: commits what is buffered, writes the identity file a last time, closes
    /// the database and releases the lock. Handles still around ([`EmbeddedLog`],
    /// [`EmbeddedJournal`]) then fail with [`StoreError::Closed`]. Dropping the last handle
    /// without `close` is a crash: what was not synced is lost, the lock is released.
    pub fn close(self) -> Result<(), StoreError> {
        self.sync()?;
        self.flush_identity()?;
        let _writer = lock(&self.inner.writer);
        let db = self.inner.db.write().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(db) = db {
            db.close().map_err(|e| StoreError::storage(&self.inner.db_path)(e.into()))?;
        }
        drop(lock(&self.inner.lock).take());
        Ok(())
    }

    /// A record of the `meta` table other than the identity (a fleet agent's etcd binding), as
    /// committed; `None` when absent.
    #[cfg(feature = "etcd")]
    pub(crate) fn meta_record(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let path = &self.inner.db_path;
        let storage = |e: redb::Error| StoreError::storage(path)(e);
        let db = self.read_db()?;
        let db = db.as_ref().ok_or_else(|| StoreError::Closed { dir: self.inner.dir.clone() })?;
        let txn = db.begin_read().map_err(|e| storage(e.into()))?;
        let meta = txn.open_table(META).map_err(|e| storage(e.into()))?;
        let row = meta.get(key).map_err(|e| storage(e.into()))?;
        Ok(row.map(|v| v.value().to_vec()))
    }

    /// Writes a `meta` record (not the identity) in its own durable commit.
    #[cfg(feature = "etcd")]
    pub(crate) fn put_meta_record(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        assert_ne!(key, META_IDENTITY_KEY, "the identity is written by commits only");
        let _writer = lock(&self.inner.writer);
        self.check_not_failed()?;
        let path = &self.inner.db_path;
        let storage = |e: redb::Error| StoreError::storage(path)(e);
        let db = self.read_db()?;
        let db = db.as_ref().ok_or_else(|| StoreError::Closed { dir: self.inner.dir.clone() })?;
        let mut txn = db.begin_write().map_err(|e| storage(e.into()))?;
        txn.set_durability(Durability::Immediate).map_err(|e| storage(e.into()))?;
        {
            let mut meta = txn.open_table(META).map_err(|e| storage(e.into()))?;
            meta.insert(key, value).map_err(|e| storage(e.into()))?;
        }
        txn.commit().map_err(|e| storage(e.into()))
    }

    /// Makes every journal change buffered so far, by any node, and every commit before,
    /// durable (group commit): returns at once when another durable commit already wrote them.
    pub fn sync(&self) -> Result<(), StoreError> {
        let wanted = lock(&self.inner.pending).next_ticket;
        let mut writer = lock(&self.inner.writer);
        if writer.committed_ticket >= wanted && !writer.deferred {
            return self.check_not_failed();
        }
        self.commit_locked(&mut writer, &[], 0, Durability::Immediate).map(drop)
    }

    /// Buffers one change of `node` (checked by the codec first) until the next commit.
    pub(super) fn buffer(&self, node: &str, change: &JournalChange) -> Result<(), StoreError> {
        codec::check_journal_change(change)
            .map_err(|source| StoreError::Rejected { node: node.to_owned(), source })?;
        self.check_not_failed()?;
        let mut pending = lock(&self.inner.pending);
        pending.changes.push((node.to_owned(), change.clone()));
        pending.next_ticket += 1;
        Ok(())
    }

    /// `node`'s journal as committed, after committing what is buffered (so that a node
    /// restarted inside this process sees every change it made).
    pub(super) fn load_node(&self, node: &str) -> Result<DurableNodeState, StoreError> {
        self.sync()?;
        let path = &self.inner.db_path;
        let storage = |e: redb::Error| StoreError::storage(path)(e);
        let db = self.read_db()?;
        let db = db.as_ref().ok_or_else(|| StoreError::Closed { dir: self.inner.dir.clone() })?;
        let txn = db.begin_read().map_err(|e| storage(e.into()))?;
        let entries = txn.open_table(ENTRIES).map_err(|e| storage(e.into()))?;
        let marks = txn.open_table(MARKS).map_err(|e| storage(e.into()))?;
        let counters = txn.open_table(COUNTERS).map_err(|e| storage(e.into()))?;
        journal_rows::load_node(path, node, &entries, &marks, &counters)
    }

    /// Reads log records (see [`Log::read_from`](tenure_core::log_store::Log::read_from)).
    pub(super) fn read_from(&self, from: LogIndex, max_records: usize) -> Result<Vec<LogRecord>, LogError> {
        let db = self.read_db().map_err(unavailable)?;
        let db =
            db.as_ref().ok_or_else(|| unavailable(StoreError::Closed { dir: self.inner.dir.clone() }))?;
        let txn = db.begin_read().map_err(|e| LogError::Unavailable { reason: e.to_string() })?;
        let table = txn.open_table(LOG).map_err(|e| LogError::Unavailable { reason: e.to_string() })?;
        tables::read_log(&table, from, max_records.clamp(1, LOG_READ_BATCH_MAX))
    }

    /// The database, for reading (`None` once closed).
    pub(crate) fn read_db(&self) -> Result<RwLockReadGuard<'_, Option<Database>>, StoreError> {
        Ok(self.inner.db.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// The redb file's path.
    pub(crate) fn db_path(&self) -> &Path {
        &self.inner.db_path
    }

    /// Refuses when an earlier commit failed.
    fn check_not_failed(&self) -> Result<(), StoreError> {
        match lock(&self.inner.failed).as_ref() {
            Some(reason) => Err(StoreError::Failed { dir: self.inner.dir.clone(), reason: reason.clone() }),
            None => Ok(()),
        }
    }

    /// One write transaction with every buffered journal change, the encoded `records` appended
    /// to the log, and the identity record; the writer lock is held. `raised` is what
    /// `tokens-raised` events among the records add to every token. `durability`: Immediate
    /// but for [`Self::append_deferred`]'s. A failure fails the store: the buffered changes it
    /// took are gone.
    fn commit_locked(
        &self,
        writer: &mut Writer,
        records: &[Vec<u8>],
        raised: u64,
        durability: Durability,
    ) -> Result<Vec<LogIndex>, StoreError> {
        self.check_not_failed()?;
        let (changes, upto) = {
            let mut pending = lock(&self.inner.pending);
            (std::mem::take(&mut pending.changes), pending.next_ticket)
        };
        match self.write(writer, &changes, records, raised, durability) {
            Ok((identity, indices)) => {
                self.inner.head.store(identity.highest_index, Ordering::Release);
                writer.identity = identity;
                writer.committed_ticket = upto;
                writer.deferred = matches!(durability, Durability::None);
                Ok(indices)
            }
            Err(e) => {
                let mut failed = lock(&self.inner.failed);
                if failed.is_none() {
                    *failed = Some(e.to_string());
                }
                Err(e)
            }
        }
    }

    /// The write transaction of [`Self::commit_locked`]; returns the identity it committed.
    fn write(
        &self,
        writer: &Writer,
        changes: &[(String, JournalChange)],
        records: &[Vec<u8>],
        raised: u64,
        durability: Durability,
    ) -> Result<(StoreIdentity, Vec<LogIndex>), StoreError> {
        let path = &self.inner.db_path;
        let storage = |e: redb::Error| StoreError::storage(path)(e);
        let db = self.read_db()?;
        let db = db.as_ref().ok_or_else(|| StoreError::Closed { dir: self.inner.dir.clone() })?;
        let mut identity = writer.identity.clone();
        let mut txn = db.begin_write().map_err(|e| storage(e.into()))?;
        txn.set_durability(durability).map_err(|e| storage(e.into()))?;
        let mut indices = Vec::with_capacity(records.len());
        {
            let mut log = txn.open_table(LOG).map_err(|e| storage(e.into()))?;
            for record in records {
                let index =
                    identity.highest_index.checked_add(1).and_then(LogIndex::from_stored).ok_or_else(
                        || StoreError::Storage {
                            path: path.clone(),
                            reason: "the log reached index 2^64 - 1".into(),
                        },
                    )?;
                log.insert(index.get(), record.as_slice()).map_err(|e| storage(e.into()))?;
                identity.highest_index = index.get();
                indices.push(index);
            }
        }
        let mut by_node: BTreeMap<&str, Vec<&JournalChange>> = BTreeMap::new();
        let mut token = self.inner.recorded_token.load(Ordering::Acquire);
        for (node, change) in changes {
            token = token.max(change_token(change));
            by_node.entry(node.as_str()).or_default().push(change);
        }
        if !by_node.is_empty() {
            let mut tables = JournalTables::open(&txn, path)?;
            for (node, node_changes) in &by_node {
                tables.apply(path, node, node_changes)?;
            }
        }
        identity.highest_token = identity.highest_token.max(token).saturating_add(raised);
        {
            let mut meta = txn.open_table(META).map_err(|e| storage(e.into()))?;
            meta.insert(META_IDENTITY_KEY, encode_record(&identity).as_slice())
                .map_err(|e| storage(e.into()))?;
        }
        txn.commit().map_err(|e| storage(e.into()))?;
        Ok((identity, indices))
    }
}

/// Maps a store failure on the log path to [`LogError::Unavailable`] (a corrupt record is
/// [`LogError::Corrupt`], found where it is read).
fn unavailable(e: StoreError) -> LogError {
    LogError::Unavailable { reason: e.to_string() }
}

/// How much memory redb may keep as its page cache. Its default (1 GiB) caches every page
/// written, which at 100k addresses was most of the agent's resident memory (about 2 KB per
/// address). The agent reads the store in full only at start; after that it writes, and reads
/// the log's tail it just wrote.
pub const STORE_CACHE_BYTES: usize = 16 * 1024 * 1024;

fn builder() -> redb::Builder {
    let mut builder = redb::Builder::new();
    builder.set_cache_size(STORE_CACHE_BYTES);
    builder
}

/// Creates a new store file holding every table and `identity`, committed durably.
pub(crate) fn create_store(
    path: &Path,
    identity: StoreIdentity,
) -> Result<(Database, StoreIdentity), StoreError> {
    let storage = |e: redb::Error| StoreError::storage(path)(e);
    let db = builder().create(path).map_err(|e| corrupt(path, e))?;
    let mut txn = db.begin_write().map_err(|e| storage(e.into()))?;
    txn.set_durability(Durability::Immediate).map_err(|e| storage(e.into()))?;
    {
        let mut meta = txn.open_table(META).map_err(|e| storage(e.into()))?;
        meta.insert(META_IDENTITY_KEY, encode_record(&identity).as_slice()).map_err(|e| storage(e.into()))?;
        txn.open_table(LOG).map_err(|e| storage(e.into()))?;
        txn.open_table(ENTRIES).map_err(|e| storage(e.into()))?;
        txn.open_table(MARKS).map_err(|e| storage(e.into()))?;
        txn.open_table(COUNTERS).map_err(|e| storage(e.into()))?;
    }
    txn.commit().map_err(|e| storage(e.into()))?;
    Ok((db, identity))
}

/// Identity files of `stored`'s cluster in the folder `missing` would be in, under other names
/// (the default name follows the store's folder, `data/a` → `data/a.identity`: a folder renamed
/// from `a` leaves `a.identity` behind; an earlier version's default was the config file's name):
/// `*.identity` regular files (symbolic links are not followed) that read as an identity record
/// of this cluster, each said with its figures against the store's. One it is behind says the
/// store is a stale copy; one at or behind the store's figures may be its own — only the
/// operator knows it is the newest, so the hint says "if". Empty when there is none.
fn identity_beside(missing: &Path, stored: &StoreIdentity) -> String {
    let folder = missing.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let Ok(entries) = std::fs::read_dir(folder) else { return String::new() };
    let mut said = Vec::new();
    for path in entries
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_file()))
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "identity") && path != missing)
    {
        let Ok(Some(found)) = StoreIdentity::read_file(&path) else { continue };
        if found.cluster_id != stored.cluster_id {
            continue;
        }
        let ahead = found.highest_index > stored.highest_index || found.highest_token > stored.highest_token;
        let verdict = if ahead {
            "ahead of this store, which is then a stale copy: restore a backup instead"
        } else {
            "if it is this store's newest identity file (its folder renamed?) and no agent runs on the store it \
             was written for, point `identityFile:` at it"
        };
        said.push(format!(
            "{} beside it is this cluster's, at log index {} and token {}: {verdict}",
            path.display(),
            found.highest_index,
            found.highest_token
        ));
    }
    said.sort();
    if said.is_empty() { String::new() } else { format!(" ({})", said.join("; ")) }
}
