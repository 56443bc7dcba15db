//! Backups and restores (`tenure store backup FILE`, `tenure store restore FILE`).
//!
//! # The backup file, format version 1
//!
//! A consistent snapshot, taken in one redb read transaction (so it works while the agent
//! writes), as JSON lines: a header, one line per stored row, an end line that counts them.
//! Every record is the stored one, byte for byte (core codec records under `"record"`):
//!
//! ```text
//! {"v":1,"format":"tenure-store-backup","clusterId":"9f…","highestIndex":1234,"highestToken":17,"createdAtMs":…,"restores":[]}
//! {"log":{"index":1,"record":{"v":1,"event":"pool-applied",…}}}
//! {"entry":{"node":"a","record":{"v":1,"seq":1,"action":{…},"state":"executed",…}}}
//! {"mark":{"node":"a","record":{"v":1,"change":"raise-high-water",…}}}
//! {"counters":{"node":"a","lastSeq":3,"executions":2}}
//! {"end":{"records":1240}}
//! ```
//!
//! It is written to a temporary file beside FILE, fsynced, and renamed over FILE. A file cut
//! short has no end line (or a broken last line) and is refused with its line number: the one
//! reader of the format is `backup_reader.rs`, shared with `tenure replay BACKUP`.
//!
//! # Restore, like etcd's `snapshot restore --bump-revision`
//!
//! With the agent stopped (a locked store is refused, naming the holder): the backup is read and
//! checked whole into a new store beside the old one, keeping the backup's cluster id (a backup
//! of another cluster than the identity file's is refused, unless there is no identity file).
//! Then it **raises**: the next log index is `max(identity's, backup's highest index) + margin`,
//! and there it appends `tokens-raised{by}` with `by = max(identity's, backup's highest token) +
//! margin`, so every token the restored log projects is above anything issued since the backup.
//! The current store directory is moved aside to `<dir>.before-restore-<unix seconds>` (never
//! deleted), the new one takes its place, and the identity file records the restore.

use std::io::{BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use redb::{Durability, ReadableDatabase, ReadableTable};
use tenure_core::codec;
use tenure_core::journal::JournalChange;
use tenure_core::log::{Event, EventKind};
use tenure_lead::durable::{AtomicFile, sync_parent_dir};

use super::backup_reader::{BACKUP_FORMAT, BackupHeader, BackupReader, BackupRecord};
use super::embedded::{EmbeddedStore, create_store};
use super::identity::{RestoreRecord, StoreIdentity, decode_record, encode_record};
use super::journal_rows::{decode_counters, decode_entry, decode_mark};
use super::lock::StoreLock;
use super::tables::{COUNTERS, Counters, ENTRIES, LOG, MARKS, META, META_IDENTITY_KEY, mark_key};
use super::{STORE_FILE_NAME, StoreError};

/// What a backup holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupSummary {
    /// The backup file.
    pub path: PathBuf,
    /// The store's cluster id.
    pub cluster_id: String,
    /// The highest log index in it.
    pub highest_index: u64,
    /// The highest token the store had recorded.
    pub highest_token: u64,
    /// Log records.
    pub log_records: u64,
    /// Journal entries, every node together.
    pub journal_entries: u64,
    /// Nodes with a journal.
    pub nodes: u64,
}

/// What a restore did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreSummary {
    /// The restored cluster id.
    pub cluster_id: String,
    /// Log records restored from the backup.
    pub log_records: u64,
    /// Journal entries restored.
    pub journal_entries: u64,
    /// The backup's highest log index.
    pub backup_highest_index: u64,
    /// The backup's highest token.
    pub backup_highest_token: u64,
    /// The log index of the `tokens-raised` event: the log continues after it.
    pub index_from: u64,
    /// What every token was raised by.
    pub by: u64,
    /// Where the store that was there before now is (`None` if there was none).
    pub moved_aside: Option<PathBuf>,
}

/// Now, unix milliseconds.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl EmbeddedStore {
    /// Writes a consistent snapshot of the store to `file` (format in the module doc): one read
    /// transaction, so it runs beside the agent's writes; written to a temporary file, fsynced,
    /// renamed. A stored record that does not decode fails the backup, naming it.
    pub fn backup_to(&self, file: &Path) -> Result<BackupSummary, StoreError> {
        // What the backup holds is durable first (a step's results may be in a commit that is
        // not yet: `append_deferred`), so a crash cannot give the live store's indices to other
        // events than the backup's.
        self.sync()?;
        let path = self.db_path().to_owned();
        let storage = |e: redb::Error| StoreError::storage(&path)(e);
        let db = self.read_db()?;
        let db = db.as_ref().ok_or_else(|| StoreError::Closed { dir: self.dir().to_owned() })?;
        let txn = db.begin_read().map_err(|e| storage(e.into()))?;
        let meta = txn.open_table(META).map_err(|e| storage(e.into()))?;
        let identity: StoreIdentity = match meta.get(META_IDENTITY_KEY).map_err(|e| storage(e.into()))? {
            Some(row) => decode_record(row.value()).map_err(|e| StoreError::RecordCorrupt {
                path: path.clone(),
                table: "meta",
                key: META_IDENTITY_KEY.into(),
                reason: e.to_string(),
            })?,
            None => return Err(StoreError::Corrupt { path, reason: "no identity record".into() }),
        };
        let mut out = AtomicFile::create(file)?;
        let write_error = StoreError::io("write", file);
        let mut summary = BackupSummary {
            path: file.to_owned(),
            cluster_id: identity.cluster_id.clone(),
            highest_index: identity.highest_index,
            highest_token: identity.highest_token,
            log_records: 0,
            journal_entries: 0,
            nodes: 0,
        };
        let header = BackupHeader {
            format: BACKUP_FORMAT.into(),
            cluster_id: identity.cluster_id,
            highest_index: identity.highest_index,
            highest_token: identity.highest_token,
            created_at_ms: now_ms(),
            restores: identity.restores,
            fleet: self.fleet(),
        };
        let mut lines: u64 = 0;
        {
            let mut w = BufWriter::new(out.file());
            let mut line = |bytes: &[u8]| -> std::io::Result<()> {
                w.write_all(bytes)?;
                w.write_all(b"\n")
            };
            let result: Result<(), StoreError> = (|| {
                line(&encode_record(&header)).map_err(StoreError::io("write", file))?;
                let log = txn.open_table(LOG).map_err(|e| storage(e.into()))?;
                for row in log.iter().map_err(|e| storage(e.into()))? {
                    let (key, value) = row.map_err(|e| storage(e.into()))?;
                    let index = key.value();
                    codec::decode_event(value.value()).map_err(|e| StoreError::RecordCorrupt {
                        path: path.clone(),
                        table: "log",
                        key: index.to_string(),
                        reason: e.to_string(),
                    })?;
                    let mut text = format!("{{\"log\":{{\"index\":{index},\"record\":").into_bytes();
                    text.extend_from_slice(value.value());
                    text.extend_from_slice(b"}}");
                    line(&text).map_err(StoreError::io("write", file))?;
                    summary.log_records += 1;
                    lines += 1;
                }
                let entries = txn.open_table(ENTRIES).map_err(|e| storage(e.into()))?;
                for row in entries.iter().map_err(|e| storage(e.into()))? {
                    let (key, value) = row.map_err(|e| storage(e.into()))?;
                    let (node, seq) = key.value();
                    decode_entry(&path, node, seq, value.value())?;
                    line(&node_line("entry", node, value.value())).map_err(StoreError::io("write", file))?;
                    summary.journal_entries += 1;
                    lines += 1;
                }
                let marks = txn.open_table(MARKS).map_err(|e| storage(e.into()))?;
                for row in marks.iter().map_err(|e| storage(e.into()))? {
                    let (key, value) = row.map_err(|e| storage(e.into()))?;
                    let (node, mark) = key.value();
                    decode_mark(&path, node, mark, value.value())?;
                    line(&node_line("mark", node, value.value())).map_err(StoreError::io("write", file))?;
                    lines += 1;
                }
                let counters = txn.open_table(COUNTERS).map_err(|e| storage(e.into()))?;
                for row in counters.iter().map_err(|e| storage(e.into()))? {
                    let (key, value) = row.map_err(|e| storage(e.into()))?;
                    let node = key.value();
                    let counters = decode_counters(&path, node, value.value())?;
                    let text = serde_json::json!({"counters": {
                        "node": node, "lastSeq": counters.last_seq, "executions": counters.executions,
                    }});
                    line(text.to_string().as_bytes()).map_err(StoreError::io("write", file))?;
                    summary.nodes += 1;
                    lines += 1;
                }
                line(format!("{{\"end\":{{\"records\":{lines}}}}}").as_bytes())
                    .map_err(StoreError::io("write", file))
            })();
            result?;
            w.flush().map_err(write_error)?;
        }
        out.commit()?;
        Ok(summary)
    }
}

/// `{"<kind>":{"node":"<node>","record":<record>}}`.
fn node_line(kind: &str, node: &str, record: &[u8]) -> Vec<u8> {
    let node = serde_json::to_string(node).expect("a string always serializes");
    let mut text = format!("{{\"{kind}\":{{\"node\":{node},\"record\":").into_bytes();
    text.extend_from_slice(record);
    text.extend_from_slice(b"}}");
    text
}

/// Restores `backup` into the store directory `dir` and raises every token and the log index by
/// `margin` above what the identity file and the backup know (module doc). The agent must be
/// stopped: a locked store is refused naming its holder. The store that was there is moved aside
/// to `<dir>.before-restore-<unix seconds>`, never deleted; the records of hook process groups
/// a killed agent left in it (`hook-groups/`) move into the restored store, so that its next
/// start kills them.
pub fn restore(
    backup: &Path,
    dir: &Path,
    identity_file: &Path,
    margin: u64,
) -> Result<RestoreSummary, StoreError> {
    if margin == 0 {
        return Err(StoreError::RaiseOverflow {
            backup: backup.to_owned(),
            margin,
            what: "a margin of 0 would reuse the backup's last index; give 1 or more",
        });
    }
    let recorded = StoreIdentity::read_file(identity_file)?;
    let old_lock = if dir.exists() { Some(StoreLock::acquire(dir)?) } else { None };
    // The store being replaced may be ahead of the identity file (written about once a second):
    // what it committed counts too, when it still opens (a corrupt store is the usual reason
    // to restore; then the identity file is all there is).
    let current = match super::checks::inspect_read_only(&dir.join(STORE_FILE_NAME)) {
        Ok(current) if dir.join(STORE_FILE_NAME).exists() => current,
        _ => None,
    };
    let identity = highest_known(recorded, current);
    let seconds = now_ms() / 1_000;
    let building = sibling(dir, &format!("restoring-{seconds}"))?;
    std::fs::create_dir_all(&building).map_err(StoreError::io("create directory", &building))?;
    let built = build(backup, &building, identity.as_ref(), identity_file, margin);
    let (summary, restored) = match built {
        Ok(done) => done,
        Err(e) => {
            // Nothing was moved yet: the half-built store goes, the old one stays.
            let _ = std::fs::remove_dir_all(&building);
            return Err(e);
        }
    };
    // The hook process groups a killed agent recorded go with the restored store: its next
    // start kills them by their records before it gates anything. Left in the store moved
    // aside, an orphaned hook (one in another mount namespace, that no other sweep finds) would
    // run beside the new agent's calls.
    #[cfg(unix)]
    {
        let groups = dir.join(crate::exec::hook_groups::HOOK_GROUPS_DIR_NAME);
        if groups.is_dir() {
            let carried = building.join(crate::exec::hook_groups::HOOK_GROUPS_DIR_NAME);
            if let Err(e) = std::fs::rename(&groups, &carried) {
                let _ = std::fs::remove_dir_all(&building);
                return Err(StoreError::io("carry the hook records over", &groups)(e));
            }
        }
    }
    let moved_aside = if dir.exists() {
        let aside = unused_sibling(dir, &format!("before-restore-{seconds}"))?;
        std::fs::rename(dir, &aside).map_err(StoreError::io("move aside", dir))?;
        Some(aside)
    } else {
        None
    };
    drop(old_lock);
    std::fs::rename(&building, dir).map_err(StoreError::io("rename", &building))?;
    sync_parent_dir(dir)?;
    restored.write_file(identity_file)?;
    Ok(RestoreSummary { moved_aside, ..summary })
}

/// What the identity file records, raised to what the replaced store committed when both are of
/// one cluster (a store of another cluster is not this node's history: the file decides).
fn highest_known(recorded: Option<StoreIdentity>, current: Option<StoreIdentity>) -> Option<StoreIdentity> {
    match (recorded, current) {
        (Some(mut recorded), Some(current)) if recorded.cluster_id == current.cluster_id => {
            recorded.highest_index = recorded.highest_index.max(current.highest_index);
            recorded.highest_token = recorded.highest_token.max(current.highest_token);
            Some(recorded)
        }
        (None, current) => current,
        (recorded, _) => recorded,
    }
}

/// `<dir>.<suffix>`.
fn sibling(dir: &Path, suffix: &str) -> Result<PathBuf, StoreError> {
    let name = dir.file_name().ok_or_else(|| StoreError::Io {
        what: "name",
        path: dir.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "a store directory needs a name"),
    })?;
    Ok(dir.with_file_name(format!("{}.{suffix}", name.to_string_lossy())))
}

/// `<dir>.<suffix>`, or `<dir>.<suffix>-<n>` for the first `n` not taken.
fn unused_sibling(dir: &Path, suffix: &str) -> Result<PathBuf, StoreError> {
    let first = sibling(dir, suffix)?;
    if !first.exists() {
        return Ok(first);
    }
    let mut n: u64 = 1;
    loop {
        let candidate = sibling(dir, &format!("{suffix}-{n}"))?;
        if !candidate.exists() {
            return Ok(candidate);
        }
        n += 1;
    }
}

/// Builds the restored store in `building` from `backup`: one write transaction with every row,
/// the raise, and the identity. Returns the summary and the identity written.
fn build(
    backup: &Path,
    building: &Path,
    identity: Option<&StoreIdentity>,
    identity_file: &Path,
    margin: u64,
) -> Result<(RestoreSummary, StoreIdentity), StoreError> {
    let mut reader = BackupReader::open(backup)?;
    let header = reader.header().clone();
    let header_identity = header.identity();
    if let Some(recorded) = identity
        && recorded.cluster_id != header.cluster_id
    {
        return Err(StoreError::BackupOfOtherCluster {
            backup: backup.to_owned(),
            backup_cluster: header.cluster_id,
            identity: identity_file.to_owned(),
            identity_cluster: recorded.cluster_id.clone(),
        });
    }
    let overflow = |what| StoreError::RaiseOverflow { backup: backup.to_owned(), margin, what };
    let known_index = identity.map_or(0, |i| i.highest_index).max(header.highest_index);
    let known_token = identity.map_or(0, |i| i.highest_token).max(header.highest_token);
    let index_from = known_index.checked_add(margin).ok_or(overflow("the log index"))?;
    let by = known_token.checked_add(margin).ok_or(overflow("the token raise"))?;
    let highest_token = by.checked_add(header.highest_token).ok_or(overflow("the highest token"))?;

    let db_path = building.join(STORE_FILE_NAME);
    let (db, _) = create_store(&db_path, header_identity.clone())?;
    let storage = |e: redb::Error| StoreError::storage(&db_path)(e);
    let mut txn = db.begin_write().map_err(|e| storage(e.into()))?;
    txn.set_durability(Durability::Immediate).map_err(|e| storage(e.into()))?;
    let mut summary = RestoreSummary {
        cluster_id: header.cluster_id.clone(),
        log_records: 0,
        journal_entries: 0,
        backup_highest_index: header.highest_index,
        backup_highest_token: header.highest_token,
        index_from,
        by,
        moved_aside: None,
    };
    let mut stream_time_ms: u64 = 0;
    {
        let mut log = txn.open_table(LOG).map_err(|e| storage(e.into()))?;
        let mut entries = txn.open_table(ENTRIES).map_err(|e| storage(e.into()))?;
        let mut marks = txn.open_table(MARKS).map_err(|e| storage(e.into()))?;
        let mut counters = txn.open_table(COUNTERS).map_err(|e| storage(e.into()))?;
        while let Some(record) = reader.next_record()? {
            match record {
                BackupRecord::Log { index, event, stored } => {
                    stream_time_ms = stream_time_ms.max(event.at_ms);
                    log.insert(index, stored.as_slice()).map_err(|e| storage(e.into()))?;
                    summary.log_records += 1;
                }
                BackupRecord::Entry { node, entry, stored } => {
                    entries
                        .insert((node.as_str(), entry.seq.get()), stored.as_slice())
                        .map_err(|e| storage(e.into()))?;
                    summary.journal_entries += 1;
                }
                BackupRecord::Mark { node, change, stored } => {
                    let JournalChange::RaiseHighWater { pool, address, capture_domain, .. } = &change else {
                        unreachable!("the reader hands out raise-high-water marks only");
                    };
                    let key = mark_key(pool, *address, capture_domain.as_str());
                    marks
                        .insert((node.as_str(), key.as_str()), stored.as_slice())
                        .map_err(|e| storage(e.into()))?;
                }
                BackupRecord::Counters { node, last_seq, executions } => {
                    let row = encode_record(&Counters { last_seq, executions });
                    counters.insert(node.as_str(), row.as_slice()).map_err(|e| storage(e.into()))?;
                }
            }
        }
        let raise = Event { at_ms: stream_time_ms, kind: EventKind::TokensRaised { by } };
        let record = codec::encode_event(&raise).map_err(|e| reader.bad(reader.line(), e.to_string()))?;
        log.insert(index_from, record.as_slice()).map_err(|e| storage(e.into()))?;
    }
    let mut restored = header_identity;
    restored.highest_index = index_from;
    restored.highest_token = highest_token;
    restored.restores.push(RestoreRecord { at: now_ms(), by, index_from });
    {
        let mut meta = txn.open_table(META).map_err(|e| storage(e.into()))?;
        meta.insert(META_IDENTITY_KEY, encode_record(&restored).as_slice()).map_err(|e| storage(e.into()))?;
    }
    txn.commit().map_err(|e| storage(e.into()))?;
    db.close().map_err(|e| storage(e.into()))?;
    Ok((summary, restored))
}
