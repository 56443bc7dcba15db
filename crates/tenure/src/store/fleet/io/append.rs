//! One append: a batch put under its key only while etcd still holds what this agent applied,
//! and, for a batch retried as it was, only when this process's writer key does not name it
//! already ([`append`]).

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};

use tracing::warn;

use super::super::EtcdError;
use super::super::anchor::{Anchor, check_anchor};
use super::super::claim::Held;
use super::{Appended, HeadRead, Keys, Retry, decode_manifest, got, retry_quick_failures};

/// Puts one batch under `key` unless it is there already or (a batch retried as it was,
/// [`Retry::SameBatch`]) this process's writer key names it, and only
/// while etcd still holds what `anchor` says this agent applied: the head created at the same
/// revision and written at or after the anchor, and the anchor's batch at its revision (or, once
/// a snapshot deleted it, a snapshot covering it: then tried again without that compare). A log
/// that does not ([`check_anchor`]: the prefix deleted, etcd restored from an older
/// snapshot, also when other writers pushed the restored log past the anchor) appends nothing
/// and answers [`Appended::WentBack`]: landing there would write into a log with a lost part.
/// These checks hold for every batch, heartbeats too, and so does `held`'s: each of this agent's
/// node claims under its current lease (a claim lapsed or taken appends nothing:
/// [`EtcdError::ClaimLost`]). Only a batch retried as it was compares
/// and puts the writer key; a writer key that is gone (deleted by hand: the compare on its value
/// then fails whatever it holds) is created again, empty, and the append tried once more. A
/// heartbeat ([`Retry::Never`]) leaves the key alone: it is never tried again as the same batch,
/// and moving the key would lose the name a held batch of the loop is found by (an operator's
/// request or the pool files' events, not retried either, append the same way).
pub(super) async fn append(
    client: &mut Client,
    keys: &Keys,
    key: &str,
    value: Vec<u8>,
    anchor: &Anchor,
    retry: Retry,
    held: Option<&Held>,
) -> Result<Appended, EtcdError> {
    // This process's writer key, when it names this batch.
    let writer = (retry == Retry::SameBatch).then_some(keys.writer.as_str());
    let head = keys.head.as_bytes();
    let batch_key = anchor.batch_key();
    // The claims' lease, read once: the compares and the reading of a refusal use the same.
    let fence = held.map(|held| (held, held.lease()));
    let txn = |with_batch: bool| {
        let mut when = vec![Compare::create_revision(key.as_bytes(), CompareOp::Equal, 0)];
        when.extend(
            writer.map(|writer| Compare::value(writer.as_bytes(), CompareOp::NotEqual, key.as_bytes())),
        );
        if anchor.revision > 0 {
            // An absent head compares as mod revision 0.
            when.push(Compare::mod_revision(head, CompareOp::Greater, anchor.revision - 1));
        }
        if let Some(created) = anchor.head_created {
            when.push(Compare::create_revision(head, CompareOp::Equal, created));
        }
        if let Some(batch) = batch_key.filter(|_| with_batch) {
            when.push(Compare::mod_revision(batch, CompareOp::Equal, anchor.revision));
        }
        when.extend(fence.map(|(held, lease)| held.compares(lease)).unwrap_or_default());
        let mut then =
            vec![TxnOp::put(key.as_bytes(), value.clone(), None), TxnOp::put(head, key.as_bytes(), None)];
        then.extend(writer.map(|writer| TxnOp::put(writer.as_bytes(), key.as_bytes(), None)));
        // Read back in the same transaction: the head's creation revision.
        then.push(TxnOp::get(head, None));
        let mut otherwise = vec![
            TxnOp::get(key.as_bytes(), None),
            // Read for a heartbeat too (unused then): every answer keeps its place.
            TxnOp::get(keys.writer.as_bytes(), None),
            TxnOp::get(head, None),
            TxnOp::get(keys.snapshot.as_bytes(), None),
        ];
        otherwise.extend(batch_key.map(|batch| TxnOp::get(batch, None)));
        // Then this agent's node claims, each in `Held::keys`' order.
        otherwise.extend(
            held.iter().flat_map(|held| held.keys.iter().map(|(_, key)| TxnOp::get(key.as_bytes(), None))),
        );
        Txn::new().when(when).and_then(then).or_else(otherwise)
    };
    let mut with_batch = true;
    let mut recreated = false;
    loop {
        let txn = txn(with_batch);
        let response = retry_quick_failures(|| {
            let mut client = client.clone();
            let txn = txn.clone();
            async move { client.txn(txn).await }
        })
        .await
        .map_err(EtcdError::request("append"))?;
        let succeeded = response.succeeded();
        let header = response.header().map(|h| (h.cluster_id(), h.revision()));
        let gets = got(response);
        if succeeded {
            let head_created = gets.last().cloned().flatten().map_or(0, |kv| kv.create_revision());
            let (_, revision) = header.ok_or(EtcdError::NoHeader { what: "append" })?;
            return Ok(Appended::Committed { revision, head_created });
        }
        let (cluster_id, revision) = header.ok_or(EtcdError::NoHeader { what: "append" })?;
        let head_kv = gets.get(2).cloned().flatten();
        let read = HeadRead {
            cluster_id,
            revision,
            head_revision: head_kv.as_ref().map_or(0, etcd_client::KeyValue::mod_revision),
            head_created: head_kv.as_ref().map_or(0, etcd_client::KeyValue::create_revision),
            batch_revision: if batch_key.is_some() {
                gets.get(4).cloned().flatten().map(|kv| kv.mod_revision())
            } else {
                None
            },
            snapshot_revision: match gets.get(3).cloned().flatten() {
                Some(kv) => Some(decode_manifest(keys, kv.value())?.revision),
                None => None,
            },
        };
        if let Err(reason) = check_anchor(anchor, &read) {
            return Ok(Appended::WentBack(reason));
        }
        let head_created = read.head_created;
        // An earlier try of this very batch was committed: the batch key is there, or (a batch
        // retried as it was, once a snapshot deleted its key) this process's writer key names
        // it — written in the same transaction, so at the batch's revision.
        let there = gets.first().cloned().flatten();
        let named =
            gets.get(1).cloned().flatten().filter(|kv| writer.is_some() && kv.value() == key.as_bytes());
        if let Some(kv) = there.or(named) {
            return Ok(Appended::Committed { revision: kv.mod_revision(), head_created });
        }
        // The batch is not there: a claim no longer under this agent's lease refused it (etcd
        // itself: the claim is a fence).
        let claims_from = 4 + usize::from(batch_key.is_some());
        let leases: Vec<i64> = gets
            .iter()
            .skip(claims_from)
            .map(|kv| kv.as_ref().map_or(0, etcd_client::KeyValue::lease))
            .collect();
        if let Some(lost) = fence.and_then(|(held, lease)| held.lost(lease, &leases)) {
            return Err(lost);
        }
        if with_batch && batch_key.is_some() && read.batch_revision != Some(anchor.revision) {
            // The anchor's batch is gone, and a snapshot covers it (checked just above).
            with_batch = false;
            continue;
        }
        let Some(writer) = writer else {
            return Err(EtcdError::AppendUnresolved {
                key: key.to_owned(),
                detail: "is not there, and its transaction failed all the same".into(),
            });
        };
        let writer_there = gets.get(1).is_some_and(Option::is_some);
        if writer_there || recreated {
            return Err(EtcdError::AppendUnresolved {
                key: key.to_owned(),
                detail: format!("is neither there nor named by {writer}"),
            });
        }
        warn!(%writer, "this agent's writer key is gone (deleted by hand?); creating it again");
        let create = Txn::new()
            .when([Compare::create_revision(writer.as_bytes(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(writer.as_bytes(), "", None)]);
        client.txn(create).await.map_err(EtcdError::request("writer key"))?;
        recreated = true;
    }
}
