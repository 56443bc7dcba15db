//! The replica of the log this agent holds ([`Shared`]: what the store and its watch share),
//! filled by the watch in revision order, and the [`EtcdLog`] every node of the agent reads it
//! through.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::time::Instant;

use tenure_core::codec::{self, CodecError};
use tenure_core::log::Event;
use tenure_core::log_store::{LOG_READ_BATCH_MAX, Log, LogError, LogIndex, LogRecord};
use tracing::{error, warn};

use super::anchor::{Anchor, Newest, check_anchor};
use super::batch;
use super::io::HeadRead;

/// The log as this agent holds it: every batch the watch delivered, decoded, in revision order.
#[derive(Debug, Default)]
pub(super) struct Replica {
    /// Events after what every node already applied, each with its index (a record that does
    /// not decode is kept as its error: the reader stops there).
    pub(super) records: VecDeque<(LogIndex, Result<Event, CodecError>)>,
    /// Every log key with a revision up to this one is in `records` (or was trimmed).
    pub(super) seen_revision: i64,
    /// How far this agent applied the log (the newest batch or snapshot this replica holds, or
    /// the binding's at start): what the binding records, and what etcd must still show.
    pub(super) anchor: Anchor,
    /// Records up to this index were dropped once every node had applied them.
    pub(super) trimmed_upto: Option<LogIndex>,
    /// Why the log cannot be followed now (the watch is broken): cleared when it is back.
    pub(super) down: Option<String>,
    /// Why this agent refuses the log for good (another cluster, a log gone back, a batch that
    /// does not decode): sticky until restarted.
    pub(super) refused: Option<String>,
    /// The revision of the newest batch this process appended, and until when the agent waits
    /// for the watch to deliver it before it follows the log ([`Shared::wait_for_own`]).
    pub(super) own: Option<(i64, Instant)>,
    /// The newest snapshot loaded (at start, or when a compaction made the watch reload): the
    /// index of the last record it holds, and its bytes.
    pub(super) snapshot: Option<(LogIndex, Arc<Vec<u8>>)>,
    /// The fleet the log began with, as stored under the fleet key (the first agent's nodes and
    /// peers, [`tenure_core::fleet_spec::fleet_text`]): read at open.
    pub(super) genesis: Option<String>,
}

/// One log key as read: its revision, key and value.
pub(crate) type StoredBatch = (i64, (Vec<u8>, Vec<u8>));

/// What the store and its watch share.
#[derive(Debug)]
pub(crate) struct Shared {
    replica: Mutex<Replica>,
    /// Signalled whenever the replica grew (waiters for an append or a head confirmation).
    grown: tokio::sync::Notify,
    /// Wakes the agent loop when someone appended.
    pub(super) changed: Arc<tokio::sync::Notify>,
}

impl Shared {
    pub(super) fn new() -> Self {
        Self {
            replica: Mutex::new(Replica::default()),
            grown: tokio::sync::Notify::new(),
            changed: Arc::new(tokio::sync::Notify::new()),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Replica> {
        self.replica.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds the batch stored under `key` at `revision` (ignored when it is not newer than what
    /// was seen: a watch re-created from a revision already read).
    pub(super) fn push_batch(&self, key: &[u8], revision: i64, value: &[u8]) {
        let mut replica = self.lock();
        if revision <= replica.seen_revision {
            return;
        }
        replica.seen_revision = revision;
        if revision > replica.anchor.revision {
            replica.anchor.revision = revision;
            replica.anchor.newest = Newest::Batch(key.to_vec());
        }
        match batch::decode(value) {
            Ok(records) => {
                for (position, record) in records.into_iter().enumerate() {
                    let index = batch::index_of(revision, position).expect("a decoded batch fits the index");
                    replica.records.push_back((index, codec::decode_event(record)));
                }
            }
            Err(reason) => {
                let key = String::from_utf8_lossy(key);
                error!(%key, revision, %reason, "a log batch in etcd does not decode");
                replica.refused.get_or_insert(format!(
                    "log batch {key} at revision {revision} does not decode: {reason}"
                ));
            }
        }
    }

    /// Makes the replica what a load read at revision `at`: the snapshot (its revision and
    /// bytes) and the batches after it, in revision order. Whatever the replica held goes; its
    /// anchor only moves forward (the load checked etcd against it first: [`Self::verify`]).
    pub(super) fn reset(&self, snapshot: Option<(i64, Vec<u8>)>, batches: Vec<StoredBatch>, at: i64) {
        {
            let mut replica = self.lock();
            replica.records.clear();
            replica.seen_revision = 0;
            replica.trimmed_upto = None;
            replica.snapshot = None;
            if let Some((revision, bytes)) = snapshot {
                let index =
                    batch::index_of(revision, batch::BATCH_EVENTS_MAX - 1).expect("a stored revision fits");
                replica.snapshot = Some((index, Arc::new(bytes)));
                replica.trimmed_upto = Some(index);
                replica.seen_revision = revision;
                if revision >= replica.anchor.revision {
                    replica.anchor.revision = revision;
                    replica.anchor.newest = Newest::Snapshot;
                }
            }
        }
        for (revision, (key, value)) in batches {
            self.push_batch(&key, revision, &value);
        }
        let mut replica = self.lock();
        replica.seen_revision = replica.seen_revision.max(at);
        drop(replica);
        self.grew();
    }

    pub(super) fn seen_revision(&self) -> i64 {
        self.lock().seen_revision
    }

    /// How far this agent applied the log (sample it before a read that is checked against it:
    /// a batch the watch brings while the read is under way must not count).
    pub(crate) fn anchor(&self) -> Anchor {
        self.lock().anchor.clone()
    }

    pub(super) fn is_refused(&self) -> bool {
        self.lock().refused.is_some()
    }

    /// Checks `read` against `anchor` (sampled before the read was sent: [`check_anchor`]); a
    /// log that went back refuses the replica for good. Learns the head's creation revision.
    pub(crate) fn verify(&self, anchor: &Anchor, read: &HeadRead) -> Result<(), String> {
        match check_anchor(anchor, read) {
            Ok(()) => {
                self.learn_head_created(read.head_created);
                Ok(())
            }
            Err(reason) => {
                self.break_replica(reason.clone());
                Err(reason)
            }
        }
    }

    /// The log's head key was created at `created` (0: not there; ignored).
    pub(crate) fn learn_head_created(&self, created: i64) {
        if created > 0 {
            self.lock().anchor.head_created.get_or_insert(created);
        }
    }

    pub(super) fn grew(&self) {
        self.grown.notify_waiters();
        self.changed.notify_one();
    }

    pub(super) fn set_down(&self, reason: Option<String>) {
        self.lock().down = reason;
        self.grew();
    }

    pub(super) fn break_replica(&self, reason: String) {
        error!(%reason, "not following the log any more");
        self.lock().refused.get_or_insert(reason);
        self.grew();
    }

    /// Drops the records up to `upto`, which every node applied (never a corrupt one: the
    /// readers stop there).
    pub(super) fn trim(&self, upto: LogIndex) {
        let mut replica = self.lock();
        while replica.records.front().is_some_and(|(index, event)| *index <= upto && event.is_ok()) {
            let (index, _) = replica.records.pop_front().expect("checked just above");
            replica.trimmed_upto = Some(index);
        }
    }

    /// This process appended a batch at `revision`: the agent waits (until `deadline` at most)
    /// for the watch to deliver it before it follows the log ([`Self::wait_for_own`]).
    pub(super) fn appended(&self, revision: i64, deadline: Instant) {
        let mut replica = self.lock();
        if replica.own.is_none_or(|(own, _)| own < revision) {
            replica.own = Some((revision, deadline));
        }
    }

    /// Before the agent follows the log: waits until the watch delivered the newest batch this
    /// process appended, so that the agent reads its own appends (as the embedded store's log
    /// gives them), at most until the deadline [`Self::appended`] set; then what is there is
    /// read. Only the reader waits: an append is done at etcd's answer. The replica still grows
    /// by the watch alone, in revision order.
    pub(super) async fn wait_for_own(&self) {
        let Some((revision, deadline)) = self.lock().own else { return };
        if let Err(reason) = self.wait_for(revision, deadline).await {
            warn!(%reason, "appended, but the watch has not delivered it yet");
        }
        let mut replica = self.lock();
        if replica.own.is_some_and(|(own, _)| own <= revision) {
            replica.own = None;
        }
    }

    /// Waits until the replica holds every batch up to `revision`, at most until `deadline`.
    pub(super) async fn wait_for(&self, revision: i64, deadline: Instant) -> Result<(), String> {
        loop {
            // Registered before the check: a batch delivered in between still wakes it.
            let grown = self.grown.notified();
            tokio::pin!(grown);
            grown.as_mut().enable();
            {
                let replica = self.lock();
                if let Some(reason) = &replica.refused {
                    return Err(reason.clone());
                }
                if replica.seen_revision >= revision {
                    return Ok(());
                }
                if Instant::now() >= deadline {
                    return Err(format!(
                        "this agent has the log up to revision {} but etcd's head is at {revision}",
                        replica.seen_revision
                    ));
                }
            }
            let _ = tokio::time::timeout_at(deadline, grown).await;
        }
    }
}

/// The log of an [`super::EtcdStore`], as its replica holds it.
#[derive(Clone, Debug)]
pub struct EtcdLog {
    pub(super) shared: Arc<Shared>,
}

impl Log for EtcdLog {
    fn append(&mut self, _event: &Event) -> Result<LogIndex, LogError> {
        Err(LogError::Unavailable { reason: "append through the store (EtcdStore::append_batch)".into() })
    }

    fn read_from(&self, from: LogIndex, max_records: usize) -> Result<Vec<LogRecord>, LogError> {
        let replica = self.shared.lock();
        if replica.refused.is_some() {
            // A refused log holds nothing this agent may apply; the agent reports why.
            return Ok(Vec::new());
        }
        if let Some(reason) = &replica.down {
            return Err(LogError::Unavailable { reason: reason.clone() });
        }
        if let Some(trimmed) = replica.trimmed_upto
            && from <= trimmed
        {
            let oldest = replica.records.front().map_or(trimmed.next(), |(i, _)| *i);
            return Err(LogError::Compacted { requested: from, oldest });
        }
        let start = replica.records.partition_point(|(index, _)| *index < from);
        replica
            .records
            .iter()
            .skip(start)
            .take(max_records.clamp(1, LOG_READ_BATCH_MAX))
            .map(|(index, event)| match event {
                Ok(event) => Ok(LogRecord { index: *index, event: event.clone() }),
                Err(source) => Err(LogError::Corrupt { index: *index, source: source.clone() }),
            })
            .collect()
    }

    fn head(&self) -> Result<Option<LogIndex>, LogError> {
        let replica = self.shared.lock();
        Ok(replica.records.back().map(|(i, _)| *i).or(replica.trimmed_upto))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::anchor::WENT_BACK;
    use super::super::anchor::tests::head;
    use super::*;

    #[test]
    fn the_anchor_follows_batches_and_snapshots_and_never_goes_back() {
        let shared = Shared::new();
        let value = batch::encode(&[]);
        shared.push_batch(b"k5", 5, &value);
        assert_eq!(
            shared.anchor(),
            Anchor { revision: 5, newest: Newest::Batch(b"k5".to_vec()), head_created: None }
        );
        shared.learn_head_created(3);
        shared.learn_head_created(9);
        assert_eq!(shared.anchor().head_created, Some(3), "learnt once");
        shared.reset(Some((5, b"{}".to_vec())), vec![], 20);
        assert_eq!(
            shared.anchor(),
            Anchor { revision: 5, newest: Newest::Snapshot, head_created: Some(3) },
            "covered"
        );
        shared.reset(None, vec![(8, (b"k8".to_vec(), value.clone()))], 20);
        assert_eq!(shared.anchor().revision, 8);
        let before = shared.anchor();
        let gone = HeadRead { head_created: 0, head_revision: 0, ..head(7, 0) };
        assert!(shared.verify(&before, &gone).is_err());
        assert!(shared.lock().refused.as_deref().is_some_and(|r| r.starts_with(WENT_BACK)), "sticky");
    }

    #[tokio::test(start_paused = true)]
    async fn a_follow_waits_for_this_process_s_own_append_until_its_deadline() {
        let shared = Arc::new(Shared::new());
        let log = EtcdLog { shared: Arc::clone(&shared) };
        let event = Event { at_ms: 1, kind: tenure_core::log::EventKind::Heartbeat { node: "a".into() } };
        let value = batch::encode(&[codec::encode_event(&event).expect("must hold")]);
        // The append completed at etcd's answer (revision 7); its watch delivery comes later.
        shared.appended(7, Instant::now() + Duration::from_secs(30));
        let delivery = {
            let shared = Arc::clone(&shared);
            let value = value.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                shared.push_batch(b"k7", 7, &value);
                shared.grew();
            })
        };
        shared.wait_for_own().await;
        assert_eq!(log.read_from(LogIndex::FIRST, 10).expect("must hold").len(), 1, "its own append read");
        delivery.await.expect("must hold");
        // Past its deadline, the wait ends at once and the follow takes what is there.
        shared.appended(9, Instant::now());
        shared.wait_for_own().await;
        assert_eq!(log.read_from(LogIndex::FIRST, 10).expect("must hold").len(), 1);
        assert_eq!(log.head().expect("must hold"), batch::index_of(7, 0));
        let late = shared.wait_for(9, Instant::now() + Duration::from_millis(20)).await;
        assert!(late.as_ref().is_err_and(|e| e.contains("up to revision 7")), "{late:?}");
    }

    #[test]
    fn the_replica_reads_in_order_stops_at_a_corrupt_record_and_refuses_below_a_trim() {
        let shared = Arc::new(Shared::new());
        let event =
            |at_ms| Event { at_ms, kind: tenure_core::log::EventKind::Heartbeat { node: "a".into() } };
        let encoded = |at| codec::encode_event(&event(at)).expect("must hold");
        shared.push_batch(b"k1", 3, &batch::encode(&[encoded(1), encoded(2)]));
        shared.push_batch(b"k0", 3, &batch::encode(&[encoded(9)]));
        shared.push_batch(b"k2", 9, &batch::encode(&[encoded(3)]));
        let log = EtcdLog { shared: Arc::clone(&shared) };
        let all = log.read_from(LogIndex::FIRST, 100).expect("must hold");
        assert_eq!(
            all.iter().map(|r| r.event.at_ms).collect::<Vec<_>>(),
            vec![1, 2, 3],
            "a revision seen is not applied twice"
        );
        assert_eq!(log.read_from(all[1].index.next(), 100).expect("must hold").len(), 1);
        assert_eq!(log.head().expect("must hold"), Some(all[2].index));
        shared.push_batch(b"k3", 10, &batch::encode(&[b"{\"v\":1,\"bad\":true}".to_vec()]));
        assert!(matches!(log.read_from(all[2].index.next(), 10), Err(LogError::Corrupt { .. })));
        shared.trim(all[1].index);
        assert!(matches!(log.read_from(LogIndex::FIRST, 10), Err(LogError::Compacted { .. })));
        assert_eq!(log.read_from(all[1].index.next(), 1).expect("must hold")[0].event.at_ms, 3);
        shared.set_down(Some("watch broke".into()));
        assert!(matches!(log.read_from(all[2].index, 10), Err(LogError::Unavailable { .. })));
        shared.set_down(None);
        shared.break_replica("gone".into());
        assert_eq!(log.read_from(all[2].index, 10), Ok(Vec::new()), "a refused log gives nothing to apply");
    }
}
