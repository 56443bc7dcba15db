//! The checks `EmbeddedStore::open` makes before it writes anything: the store file opened
//! read-only and every record that decides whether to start decoded (its identity, every
//! journal row, the log's last record), then compared with the identity file. Each failure is
//! its own [`StoreError`] (module doc of `store`).

use std::path::Path;

use redb::{DatabaseError, ReadTransaction, ReadableDatabase, ReadableTable};
use tenure_core::codec;

use super::StoreError;
use super::identity::{RecordError, StoreIdentity, decode_record};
use super::journal_rows;
use super::tables::{COUNTERS, ENTRIES, LOG, MARKS, META, META_IDENTITY_KEY};

/// A redb open failure as a refusal: an unknown file format, or not a readable store.
pub(crate) fn corrupt(path: &Path, e: DatabaseError) -> StoreError {
    match e {
        DatabaseError::UpgradeRequired(version) => {
            StoreError::UnknownFormat { path: path.to_owned(), version: u64::from(version) }
        }
        DatabaseError::DatabaseAlreadyOpen => StoreError::Locked {
            dir: path.parent().map(Path::to_owned).unwrap_or_default(),
            holder: "another process that opened the redb file directly".into(),
        },
        other => StoreError::Corrupt { path: path.to_owned(), reason: other.to_string() },
    }
}

/// Checks an existing store without writing to it: opened read-only, its identity and every
/// journal row decoded, its log's last record decoded and at the recorded highest index. `None`
/// when the file was not shut down cleanly (redb repairs it on a writable open, after which the
/// caller checks it the same way).
pub(crate) fn inspect_read_only(path: &Path) -> Result<Option<StoreIdentity>, StoreError> {
    let opened = std::panic::catch_unwind(|| redb::Builder::new().open_read_only(path));
    let db = match opened {
        Ok(Ok(db)) => db,
        Ok(Err(DatabaseError::RepairAborted)) => return Ok(None),
        Ok(Err(e)) => return Err(corrupt(path, e)),
        Err(_) => {
            return Err(StoreError::Corrupt {
                path: path.to_owned(),
                reason: "redb could not read its header".into(),
            });
        }
    };
    let txn =
        db.begin_read().map_err(|e| StoreError::Corrupt { path: path.to_owned(), reason: e.to_string() })?;
    verify_contents(path, &txn).map(Some)
}

/// The checks of [`inspect_read_only`] on an open read transaction; returns the identity.
pub(crate) fn verify_contents(path: &Path, txn: &ReadTransaction) -> Result<StoreIdentity, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt { path: path.to_owned(), reason };
    let meta =
        txn.open_table(META).map_err(|e| corrupt(format!("no `meta` table ({e}): not a tenure store")))?;
    let row = meta
        .get(META_IDENTITY_KEY)
        .map_err(|e| corrupt(e.to_string()))?
        .ok_or_else(|| corrupt("the `meta` table has no identity record: not a tenure store".into()))?;
    let identity: StoreIdentity = decode_record(row.value()).map_err(|e| match e {
        RecordError::UnknownVersion(version) => StoreError::UnknownFormat { path: path.to_owned(), version },
        other => StoreError::RecordCorrupt {
            path: path.to_owned(),
            table: "meta",
            key: META_IDENTITY_KEY.into(),
            reason: other.to_string(),
        },
    })?;
    identity.check().map_err(|reason| StoreError::RecordCorrupt {
        path: path.to_owned(),
        table: "meta",
        key: META_IDENTITY_KEY.into(),
        reason,
    })?;
    let log = txn.open_table(LOG).map_err(|e| corrupt(e.to_string()))?;
    let last = log.last().map_err(|e| corrupt(e.to_string()))?;
    let last_index = last.as_ref().map_or(0, |(key, _)| key.value());
    if last_index != identity.highest_index {
        return Err(corrupt(format!(
            "the log's last record is at index {last_index}, but the store records highest index {}",
            identity.highest_index
        )));
    }
    if let Some((key, value)) = last {
        codec::decode_event(value.value()).map_err(|e| StoreError::RecordCorrupt {
            path: path.to_owned(),
            table: "log",
            key: key.value().to_string(),
            reason: e.to_string(),
        })?;
    }
    verify_journals(path, txn)?;
    Ok(identity)
}

/// Decodes every journal row of every node.
fn verify_journals(path: &Path, txn: &ReadTransaction) -> Result<(), StoreError> {
    let corrupt = |e: redb::Error| StoreError::Corrupt { path: path.to_owned(), reason: e.to_string() };
    let entries = txn.open_table(ENTRIES).map_err(|e| corrupt(e.into()))?;
    for row in entries.iter().map_err(|e| corrupt(e.into()))? {
        let (key, value) = row.map_err(|e| corrupt(e.into()))?;
        let (node, seq) = key.value();
        journal_rows::decode_entry(path, node, seq, value.value())?;
    }
    let marks = txn.open_table(MARKS).map_err(|e| corrupt(e.into()))?;
    for row in marks.iter().map_err(|e| corrupt(e.into()))? {
        let (key, value) = row.map_err(|e| corrupt(e.into()))?;
        let (node, mark) = key.value();
        journal_rows::decode_mark(path, node, mark, value.value())?;
    }
    let counters = txn.open_table(COUNTERS).map_err(|e| corrupt(e.into()))?;
    for row in counters.iter().map_err(|e| corrupt(e.into()))? {
        let (key, value) = row.map_err(|e| corrupt(e.into()))?;
        journal_rows::decode_counters(path, key.value(), value.value())?;
    }
    Ok(())
}

/// Refuses a store of another cluster than the identity file's, or behind it.
pub(crate) fn check_against(
    dir: &Path,
    identity_file: &Path,
    stored: &StoreIdentity,
    recorded: &StoreIdentity,
) -> Result<(), StoreError> {
    if stored.cluster_id != recorded.cluster_id {
        return Err(StoreError::OtherCluster {
            dir: dir.to_owned(),
            store_cluster: stored.cluster_id.clone(),
            identity: identity_file.to_owned(),
            identity_cluster: recorded.cluster_id.clone(),
        });
    }
    if stored.highest_index < recorded.highest_index || stored.highest_token < recorded.highest_token {
        return Err(StoreError::Behind {
            dir: dir.to_owned(),
            identity: identity_file.to_owned(),
            store_index: stored.highest_index,
            identity_index: recorded.highest_index,
            store_token: stored.highest_token,
            identity_token: recorded.highest_token,
        });
    }
    Ok(())
}
