//! The log's snapshot in etcd: the manifest under `<prefix>/snapshot` and its chunks, read whole
//! and checked against the manifest, written with a compare on the manifest (the highest revision
//! wins), and the compaction of the log batches and older chunks it replaces.

use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp};

use super::super::EtcdError;
use super::Keys;

/// The snapshot manifest under `<prefix>/snapshot`: `{"v":1,"revision":R,…}`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Manifest {
    v: u64,
    /// The snapshot holds every batch with a revision up to this one.
    pub(crate) revision: i64,
    /// The projection's applied events (its `eventsApplied`).
    events: u64,
    /// Chunk keys `<revision>/<0..chunks>`.
    chunks: usize,
    /// Total bytes.
    bytes: usize,
    /// xxh3-64 of the bytes, hex.
    xxh3: String,
}

/// Bytes per snapshot chunk (one etcd value).
const SNAPSHOT_CHUNK_BYTES: usize = 1024 * 1024;

/// The manifest under the snapshot key, with its mod revision.
async fn read_manifest(
    client: &mut Client,
    keys: &Keys,
    at: Option<i64>,
) -> Result<Option<(Manifest, i64)>, EtcdError> {
    let options = at.map(|at| GetOptions::new().with_revision(at));
    let response =
        client.get(keys.snapshot.as_bytes(), options).await.map_err(EtcdError::request("snapshot read"))?;
    let Some(kv) = response.kvs().first() else { return Ok(None) };
    Ok(Some((decode_manifest(keys, kv.value())?, kv.mod_revision())))
}

/// The manifest stored under the snapshot key, or why it is not one (one line).
pub(super) fn decode_manifest(keys: &Keys, value: &[u8]) -> Result<Manifest, EtcdError> {
    let manifest: Manifest = serde_json::from_slice(value).map_err(|e| {
        EtcdError::Damaged(format!("the snapshot manifest {} does not decode: {e}", keys.snapshot))
    })?;
    if manifest.v != 1 {
        return Err(EtcdError::Damaged(format!(
            "the snapshot manifest {} has format version {}, not 1",
            keys.snapshot, manifest.v
        )));
    }
    Ok(manifest)
}

/// The newest snapshot at revision `at`, checked whole against its manifest.
pub(super) async fn read_snapshot(
    client: &mut Client,
    keys: &Keys,
    at: i64,
) -> Result<Option<(Manifest, Vec<u8>)>, EtcdError> {
    let Some((manifest, _)) = read_manifest(client, keys, Some(at)).await? else { return Ok(None) };
    let mut bytes = Vec::with_capacity(manifest.bytes);
    for chunk in 0..manifest.chunks {
        let key = format!("{}{chunk:05}", keys.chunks_of(manifest.revision));
        let response = client
            .get(key.as_bytes(), Some(GetOptions::new().with_revision(at)))
            .await
            .map_err(EtcdError::request("snapshot chunk read"))?;
        let kv = response
            .kvs()
            .first()
            .ok_or_else(|| EtcdError::Damaged(format!("snapshot chunk {key} is missing")))?;
        bytes.extend_from_slice(kv.value());
    }
    let hash = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&bytes));
    if bytes.len() != manifest.bytes || hash != manifest.xxh3 {
        return Err(EtcdError::Damaged(format!(
            "the snapshot at revision {} is damaged: {} bytes with xxh3 {hash}, its manifest says {} bytes with {}",
            manifest.revision,
            bytes.len(),
            manifest.bytes,
            manifest.xxh3
        )));
    }
    Ok(Some((manifest, bytes)))
}

/// Writes the snapshot of the log up to `revision`: its chunks, then the manifest with a compare
/// on the manifest read first (the highest revision wins; equal snapshots are equal bytes, as
/// every agent projects the same log). Then deletes the older snapshot's chunks and every log
/// batch the new one holds. `Ok(false)`: a snapshot as new or newer was there already.
pub(super) async fn write_snapshot(
    client: &mut Client,
    keys: &Keys,
    revision: i64,
    events: u64,
    every: u64,
    bytes: &[u8],
) -> Result<bool, EtcdError> {
    let manifest = Manifest {
        v: 1,
        revision,
        events,
        chunks: bytes.len().div_ceil(SNAPSHOT_CHUNK_BYTES),
        bytes: bytes.len(),
        xxh3: format!("{:016x}", xxhash_rust::xxh3::xxh3_64(bytes)),
    };
    let mut written = false;
    for _ in 0..3 {
        let current = read_manifest(client, keys, None).await?;
        if current
            .as_ref()
            .is_some_and(|(m, _)| m.revision >= revision || m.events.saturating_add(every) > events)
        {
            // As new, or new enough: another agent got there first.
            break;
        }
        if !written {
            for (i, chunk) in bytes.chunks(SNAPSHOT_CHUNK_BYTES).enumerate() {
                let key = format!("{}{i:05}", keys.chunks_of(revision));
                client.put(key, chunk, None).await.map_err(EtcdError::request("snapshot chunk write"))?;
            }
            written = true;
        }
        let compare = match &current {
            Some((_, mod_revision)) => {
                Compare::mod_revision(keys.snapshot.as_bytes(), CompareOp::Equal, *mod_revision)
            }
            None => Compare::create_revision(keys.snapshot.as_bytes(), CompareOp::Equal, 0),
        };
        let value = serde_json::to_vec(&manifest).expect("a manifest serializes");
        let txn = Txn::new().when([compare]).and_then([TxnOp::put(keys.snapshot.as_bytes(), value, None)]);
        if client.txn(txn).await.map_err(EtcdError::request("snapshot manifest write"))?.succeeded() {
            if let Some((old, _)) = current {
                delete_prefix(client, &keys.chunks_of(old.revision)).await?;
            }
            delete_log_up_to(client, keys, revision).await?;
            return Ok(true);
        }
    }
    // A newer snapshot won: ours is not needed (unless it is the very one that won: equal bytes
    // under the same keys).
    if written && read_manifest(client, keys, None).await?.is_some_and(|(m, _)| m.revision != revision) {
        delete_prefix(client, &keys.chunks_of(revision)).await?;
    }
    Ok(false)
}

async fn delete_prefix(client: &mut Client, prefix: &str) -> Result<(), EtcdError> {
    client
        .delete(prefix.as_bytes(), Some(etcd_client::DeleteOptions::new().with_prefix()))
        .await
        .map_err(EtcdError::request("delete"))
        .map(drop)
}

/// Deletes the log batches at revision `revision` or before, a page at a time.
async fn delete_log_up_to(client: &mut Client, keys: &Keys, revision: i64) -> Result<(), EtcdError> {
    loop {
        let options =
            GetOptions::new().with_prefix().with_keys_only().with_max_mod_revision(revision).with_limit(64);
        let response = client
            .get(keys.log.as_bytes(), Some(options))
            .await
            .map_err(EtcdError::request("log compaction read"))?;
        if response.kvs().is_empty() {
            return Ok(());
        }
        let deletes: Vec<TxnOp> = response.kvs().iter().map(|kv| TxnOp::delete(kv.key(), None)).collect();
        client.txn(Txn::new().and_then(deletes)).await.map_err(EtcdError::request("log compaction"))?;
    }
}
