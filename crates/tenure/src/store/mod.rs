//! The durable embedded store (SPEC 2's embedded default): the federation log, every node's
//! journal and high-water marks, and the store's identity, in one redb file owned by one process.
//! It sits behind the core's interfaces — [`EmbeddedLog`] implements
//! [`tenure_core::log_store::Log`], [`EmbeddedJournal`] implements
//! [`tenure_core::journal::JournalStore`] — so etcd adds a second implementation, not a second
//! agent.
//!
//! # Layout
//!
//! - `embedded.rs` — [`EmbeddedStore`]: open, group commit.
//! - `handles.rs` — [`EmbeddedLog`] and [`EmbeddedJournal`], the handles the core drives, and the
//!   store as an `AgentStore`.
//! - `checks.rs` — what open checks before it writes anything (the refusals below).
//! - `tables.rs` — the redb tables and the stored form of each row.
//! - `journal_rows.rs` — a node's journal as rows: applying changes, loading them back.
//! - `identity.rs` — the store's identity record (also the identity file's form), written atomically.
//! - `lock.rs` — the `LOCK` file: one process owns a store.
//! - `backup.rs` — the backup file format, and [`restore`].
//! - `backup_reader.rs` — [`BackupReader`]: the one parser of a backup file (restore, replay).
//! - `fleet/` (cargo feature `etcd`) — the fleet store (`store: {kind: etcd}`): `EtcdStore`, the
//!   federation log in etcd and this agent's journals in an embedded store beside it.
//!
//! Atomic file replaces (the identity file, backups) and the `LOCK` file are tenure's one
//! implementation, [`tenure_lead::durable`]; `identity.rs` and `lock.rs` only give them the
//! store's errors and meaning.
//!
//! # On disk
//!
//! A store is a directory holding `store.redb` and `LOCK`. The redb file has five tables; every
//! value is versioned JSON (the core codec for events, journal entries and high-water rows; the
//! store's own `{"v":1,…}` records for the rest), so a value that does not decode is an error
//! naming its table and key, never skipped:
//!
//! | table | key | value |
//! |---|---|---|
//! | `meta` | `"identity"` | cluster id, highest log index, highest token, restores applied |
//! | `log` | index (`u64`, dense from 1, or from a restore's jump) | a codec event |
//! | `journal_entries` | (node, seq) | a codec journal entry |
//! | `journal_marks` | (node, `<pool> <address> <captureDomain>`) | a codec `raise-high-water` change |
//! | `journal_counters` | node | `{"v":1,"lastSeq":…,"executions":…}` |
//!
//! # Group commit
//!
//! [`EmbeddedJournal::commit`] only buffers a change, in one buffer shared by every journal of the
//! store. [`EmbeddedJournal::sync`], [`EmbeddedStore::append_batch`] and `Log::append` write
//! everything buffered by every node, and their own appends, in **one** redb write transaction
//! with `Durability::Immediate`: one fsync covers many nodes' high-water raises and journal
//! writes. A sync that finds its changes already written by another's commit returns at once. A
//! failed commit fails the store: every later write refuses with [`StoreError::Failed`] (after a
//! failed fsync nothing buffered can be trusted to be anywhere), and the agent must restart.
//!
//! # Refusals
//!
//! [`EmbeddedStore::open`] refuses, each with its own [`StoreError`] and one line naming the path
//! and the numbers: a store locked by another process ([`StoreError::Locked`]); a store behind its
//! identity file — a plain copy of an old store ([`StoreError::Behind`]); a store of another
//! cluster ([`StoreError::OtherCluster`]); a file that is not a readable store
//! ([`StoreError::Corrupt`], [`StoreError::UnknownFormat`], [`StoreError::RecordCorrupt`]); an
//! identity file with no store ([`StoreError::Wiped`]); a store holding data with no identity
//! file ([`StoreError::NoIdentity`], unless [`MissingIdentity::Accept`]); an unreadable identity
//! file ([`StoreError::IdentityUnreadable`]). A refusal writes nothing: the files are as they were.

mod backup;
mod backup_reader;
mod checks;
mod embedded;
#[cfg(feature = "etcd")]
pub mod fleet;
mod handles;
mod identity;
mod journal_rows;
pub(crate) mod lock;
mod tables;

use std::path::PathBuf;

use tenure_core::codec::CodecError;

pub use backup::{BackupSummary, RestoreSummary, restore};
pub use backup_reader::{BackupHeader, BackupReader, BackupRecord, is_backup_header};
pub use embedded::{EmbeddedStore, MissingIdentity};
pub use handles::{EmbeddedJournal, EmbeddedLog};
pub use identity::{RestoreRecord, StoreIdentity, write_file_atomically};

/// The comparisons of a store with its identity file that failed, for [`StoreError::Behind`]:
/// `highest log index 3 < 6`, `highest token 0 < 42`, or both joined by `and`.
fn behind_account(store_index: u64, identity_index: u64, store_token: u64, identity_token: u64) -> String {
    let failed: Vec<String> =
        [("highest log index", store_index, identity_index), ("highest token", store_token, identity_token)]
            .into_iter()
            .filter(|(_, store, identity)| store < identity)
            .map(|(what, store, identity)| format!("{what} {store} < {identity}"))
            .collect();
    failed.join(" and ")
}

/// The store's own format version: of the `meta`, counters and identity records, the backup
/// file, and the table layout above. A store of another version is refused.
pub const STORE_FORMAT_VERSION: u64 = 1;

/// The margin a restore raises the log index and every token by, above the highest values the
/// identity file and the backup know (`tenure store restore --margin N`).
pub const RESTORE_MARGIN_DEFAULT: u64 = 1_000_000;

/// The redb file inside a store directory.
pub const STORE_FILE_NAME: &str = "store.redb";

/// The lock file inside a store directory.
pub const LOCK_FILE_NAME: &str = "LOCK";

/// What can go wrong opening, writing, backing up or restoring a store. Each message is one line
/// naming the path and the numbers.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another process (or another handle in this one) holds the store's lock.
    #[error("store {dir} is locked by {holder}; one process owns a store")]
    Locked {
        /// The store directory.
        dir: PathBuf,
        /// Who holds it, as its lock file says (pid, host, start time).
        holder: String,
    },
    /// The store is behind what its identity file recorded: a plain copy of an old store. The
    /// message names only the comparisons that failed.
    #[error(
        "store {dir} is behind its identity file {identity}: {} (a plain copy of an old store?); restore a \
         backup with `tenure store restore`, which raises every token",
        behind_account(*store_index, *identity_index, *store_token, *identity_token)
    )]
    Behind {
        /// The store directory.
        dir: PathBuf,
        /// The identity file.
        identity: PathBuf,
        /// The store's highest log index.
        store_index: u64,
        /// The identity file's.
        identity_index: u64,
        /// The store's highest token.
        store_token: u64,
        /// The identity file's.
        identity_token: u64,
    },
    /// The store holds a log or tokens, but its identity file does not exist: a copy of a store
    /// taken anywhere, or an identity file lost or moved. Accepted only when the operator says so
    /// (`tenure agent --accept-store-without-identity`).
    #[error(
        "store {dir} holds data (highest log index {store_index}, highest token {store_token}) but its identity \
         file {identity} does not exist{beside}: it may be a stale copy of a store, which would issue again tokens it \
         issued before; put the identity file back (or point `identityFile:` at it), restore a backup with \
         `tenure store restore`, or, if this store is known to be the current one, start once with \
         --accept-store-without-identity"
    )]
    NoIdentity {
        /// The store directory.
        dir: PathBuf,
        /// The identity file that is missing.
        identity: PathBuf,
        /// The store's highest log index.
        store_index: u64,
        /// The store's highest token.
        store_token: u64,
        /// An identity file of this store's cluster found beside where it was looked for, said
        /// (`" (PATH beside it is …)"`), or empty.
        beside: String,
    },
    /// The store belongs to another cluster than the identity file.
    #[error(
        "store {dir} belongs to cluster {store_cluster}, but identity file {identity} to cluster {identity_cluster}: \
         a copy of another cluster's store, or the identity file of another agent's store (two agents whose configs \
         share a folder and whose stores' folders share a name: give each its own identityFile)"
    )]
    OtherCluster {
        /// The store directory.
        dir: PathBuf,
        /// The store's cluster id.
        store_cluster: String,
        /// The identity file.
        identity: PathBuf,
        /// The identity file's cluster id.
        identity_cluster: String,
    },
    /// The file is not a readable store: truncated, overwritten, not redb, or without its tables.
    #[error("store file {path} is not a readable store: {reason}")]
    Corrupt {
        /// The redb file.
        path: PathBuf,
        /// What redb or the check found.
        reason: String,
    },
    /// The store (or backup) was written in a format version this build does not read.
    #[error("{path} is in store format version {version}; this build reads version {current}", current = STORE_FORMAT_VERSION)]
    UnknownFormat {
        /// The file.
        path: PathBuf,
        /// The version it declares.
        version: u64,
    },
    /// A stored value does not decode. Never skipped: this copy of the store cannot be trusted.
    #[error("store file {path}: table `{table}`, key {key}: {reason}")]
    RecordCorrupt {
        /// The redb file.
        path: PathBuf,
        /// The table.
        table: &'static str,
        /// The key, as text.
        key: String,
        /// What the decoder found.
        reason: String,
    },
    /// The identity file names a store, but the store is missing or empty.
    #[error(
        "store {dir} is missing or empty, but identity file {identity} records cluster {cluster} at log index {index}: \
         restore a backup with `tenure store restore`; if that file is another agent's (two agents whose configs share a \
         folder and whose stores' folders share a name), give this agent its own identityFile and leave that file alone; \
         remove it only to start a new cluster on purpose"
    )]
    Wiped {
        /// The store directory.
        dir: PathBuf,
        /// The identity file.
        identity: PathBuf,
        /// The cluster it records.
        cluster: String,
        /// The highest log index it records.
        index: u64,
    },
    /// The identity file exists but cannot be read or does not decode.
    #[error("identity file {path} is unreadable: {reason}")]
    IdentityUnreadable {
        /// The identity file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A file system operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done ("write", "rename", …).
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// redb failed (a transaction, a commit, a read).
    #[error("store file {path}: {reason}")]
    Storage {
        /// The redb file.
        path: PathBuf,
        /// redb's account.
        reason: String,
    },
    /// An earlier commit failed; the store refuses every write until it is opened again.
    #[error("store {dir} failed earlier and refuses writes until the agent restarts: {reason}")]
    Failed {
        /// The store directory.
        dir: PathBuf,
        /// The first failure.
        reason: String,
    },
    /// The store was closed; this handle outlived it.
    #[error("store {dir} is closed")]
    Closed {
        /// The store directory.
        dir: PathBuf,
    },
    /// A journal change cannot be stored: the codec refused it.
    #[error("journal change of node `{node}` not stored: {source}")]
    Rejected {
        /// The node.
        node: String,
        /// The codec's account.
        #[source]
        source: CodecError,
    },
    /// A journal change contradicts what is stored (an unknown entry, a final state left, an
    /// open entry compacted, a sequence number that does not grow). Nothing of its commit is written.
    #[error("journal change of node `{node}` contradicts the stored journal: {reason}")]
    Inconsistent {
        /// The node.
        node: String,
        /// What contradicts what.
        reason: String,
    },
    /// A backup file is not a complete backup of this format.
    #[error("backup {path}:{line}: {reason}")]
    BadBackup {
        /// The backup file.
        path: PathBuf,
        /// The 1-based line where reading stopped.
        line: u64,
        /// Why.
        reason: String,
    },
    /// A backup of another cluster than the identity file's.
    #[error(
        "backup {backup} is of cluster {backup_cluster}, but identity file {identity} records cluster {identity_cluster}; \
         remove the identity file to restore another cluster's backup on purpose"
    )]
    BackupOfOtherCluster {
        /// The backup file.
        backup: PathBuf,
        /// The backup's cluster id.
        backup_cluster: String,
        /// The identity file.
        identity: PathBuf,
        /// Its cluster id.
        identity_cluster: String,
    },
    /// This store keeps no backup of its own (a fleet agent's log is in etcd; the test double
    /// keeps nothing); `why` says where the backup is taken instead.
    #[error("{why}")]
    NoBackup {
        /// Why, and what to back up instead.
        why: &'static str,
    },
    /// The store refuses its log for good (a fleet agent bound to another etcd cluster, or to a
    /// log that went back): nothing more is written to it until the agent restarts.
    #[error("{reason}")]
    LogRefused {
        /// Why.
        reason: String,
    },
    /// A restore's raise would take the log index or a token past `u64::MAX`.
    #[error("restore of {backup}: raising by margin {margin} would pass 2^64 - 1 ({what})")]
    RaiseOverflow {
        /// The backup file.
        backup: PathBuf,
        /// The margin asked for.
        margin: u64,
        /// Which number.
        what: &'static str,
    },
}

impl From<tenure_lead::durable::FileError> for StoreError {
    fn from(error: tenure_lead::durable::FileError) -> Self {
        Self::Io { what: error.operation, path: error.path, source: error.source }
    }
}

impl StoreError {
    /// Wraps an I/O error with what was done to which path.
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { what, path, source }
    }

    /// Wraps a redb error with the store file's path.
    pub(crate) fn storage(path: impl Into<PathBuf>) -> impl FnOnce(redb::Error) -> Self {
        let path = path.into();
        move |e| Self::Storage { path, reason: e.to_string() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_behind_its_identity_file_names_only_the_comparisons_that_failed() {
        let behind = |store_index, identity_index, store_token, identity_token| {
            StoreError::Behind {
                dir: PathBuf::from("/s"),
                identity: PathBuf::from("/i"),
                store_index,
                identity_index,
                store_token,
                identity_token,
            }
            .to_string()
        };
        let token = behind(1_000_012, 1_000_012, 1_000_011, 1_000_012);
        assert!(
            token.starts_with("store /s is behind its identity file /i: highest token 1000011 < 1000012 ("),
            "{token}"
        );
        assert!(!token.contains("log index"), "an index that is not behind is not printed: {token}");
        let index = behind(3, 6, 42, 42);
        assert!(index.contains(": highest log index 3 < 6 ("), "{index}");
        assert!(behind(3, 6, 0, 42).contains(": highest log index 3 < 6 and highest token 0 < 42 ("));
    }
}
