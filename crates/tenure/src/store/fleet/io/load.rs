//! The initial load (and the reload after a compaction) of the log into the replica: the head
//! read, the snapshot, and every batch after it, read linearly by key at one revision and put in
//! log order here.

use etcd_client::{Client, GetOptions};

use super::super::EtcdError;
use super::super::StoredBatch;
use super::{DECODE_BYTES_MAX, HeadRead, Keys, Shared, read_snapshot, read_verified_head};

/// Reads the head, the newest snapshot and every batch after it, all at the head read's
/// revision, and makes them the replica (replacing what it held) — unless the log went back
/// below what the agent applied: the replica is then refused ([`Shared::verify`]) as it is.
pub(super) async fn load(client: &mut Client, keys: &Keys, shared: &Shared) -> Result<HeadRead, EtcdError> {
    let (head, kept) = read_verified_head(client, keys, shared).await?;
    if !kept {
        return Ok(head);
    }
    let snapshot = read_snapshot(client, keys, head.revision).await?;
    let after = snapshot.as_ref().map_or(0, |(m, _)| m.revision);
    let batches = read_log(client, keys, head.revision, after).await?;
    shared.reset(snapshot.map(|(m, bytes)| (m.revision, bytes)), batches, head.revision);
    Ok(head)
}

/// Keys per page of the log's key listing (keys and revisions only: ~100 bytes each).
const KEYS_PAGE: i64 = 8192;

/// Batches per page of values: a page of batches of up to 1 MiB each stays under the decode
/// limit.
const VALUES_PAGE: usize = 32;

/// Every log batch at revision `at` with a revision after `after` (the snapshot's; 0: none), in
/// log (revision) order. Linear in the log's size: etcd answers a range with a sort, or with a
/// revision filter, by reading the whole range and cutting it afterwards, so paging that way
/// re-reads the rest of the log for every page. Here the log is listed by key instead (keys and
/// revisions only, each page starting after the last key read), its values then read a page of
/// keys at a time (each range bounded by the page's first and last key), and the batches
/// ordered by revision here. All at revision `at`: the keys do not change between the reads.
async fn read_log(
    client: &mut Client,
    keys: &Keys,
    at: i64,
    after: i64,
) -> Result<Vec<StoredBatch>, EtcdError> {
    let mut kv = client.kv_client().max_decoding_message_size(DECODE_BYTES_MAX);
    let end = prefix_end(keys.log.as_bytes());
    // Every key, in key order, with its revision.
    let mut listed: Vec<(Vec<u8>, i64)> = Vec::new();
    let mut start = keys.log.as_bytes().to_vec();
    loop {
        let options = GetOptions::new()
            .with_range(end.clone())
            .with_revision(at)
            .with_keys_only()
            .with_limit(KEYS_PAGE);
        let mut response =
            kv.get(start.clone(), Some(options)).await.map_err(EtcdError::request("log listing"))?;
        let more = response.more();
        listed.extend(response.take_kvs().into_iter().map(|kv| {
            let revision = kv.mod_revision();
            (kv.into_key_value().0, revision)
        }));
        match listed.last() {
            Some((last, _)) if more => start = after_key(last),
            _ => break,
        }
    }
    let mut batches: Vec<StoredBatch> = Vec::with_capacity(listed.len());
    for page in listed.chunks(VALUES_PAGE) {
        // Batches a snapshot holds (not deleted yet, or deleted after `at`) are not read.
        if page.iter().all(|(_, revision)| *revision <= after) {
            continue;
        }
        let (first, last) = match (page.first(), page.last()) {
            (Some((first, _)), Some((last, _))) => (first.clone(), after_key(last)),
            _ => continue,
        };
        let options = GetOptions::new()
            .with_range(last)
            .with_revision(at)
            .with_limit(i64::try_from(page.len()).unwrap_or(i64::MAX));
        let mut response = kv.get(first, Some(options)).await.map_err(EtcdError::request("log read"))?;
        let kvs = response.take_kvs();
        if kvs.len() != page.len() {
            return Err(EtcdError::Damaged(format!(
                "etcd log read: {} batches where the listing at revision {at} had {}",
                kvs.len(),
                page.len()
            )));
        }
        batches.extend(
            kvs.into_iter()
                .filter(|kv| kv.mod_revision() > after)
                .map(|kv| (kv.mod_revision(), kv.into_key_value())),
        );
    }
    // Keys sort by writer, not by revision: the log's order is the revisions'.
    batches.sort_unstable_by_key(|(revision, _)| *revision);
    Ok(batches)
}

/// The first key after `key`.
fn after_key(key: &[u8]) -> Vec<u8> {
    let mut next = Vec::with_capacity(key.len() + 1);
    next.extend_from_slice(key);
    next.push(0);
    next
}

/// The end of the range of every key starting with `prefix` (etcd's rule: the prefix with its
/// last byte below 0xff incremented and what follows it dropped; all 0xff: every key).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_pages_by_key_within_the_log_prefix() {
        assert_eq!(prefix_end(b"/t/log/"), b"/t/log0".to_vec());
        assert_eq!(prefix_end(b"a\xff\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0], "every key");
        let next = after_key(b"/t/log/k");
        assert_eq!(next, b"/t/log/k\0".to_vec());
        assert!(
            next.as_slice() > &b"/t/log/k"[..] && next.as_slice() < &b"/t/log/k\x01"[..],
            "the very next key"
        );
    }
}
