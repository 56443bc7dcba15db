//! The fleet store (`store: {kind: etcd}`): the federation log in etcd, shared by every agent;
//! each agent's journals, high-water marks and identity in its own embedded store at
//! `store.path` (SPEC 10). See `docs/architecture.md`, "Fleet mode on etcd", for the key layout,
//! the ordering and the refusals; this module is that text as code.
//!
//! - this file — [`EtcdStore`] (an [`AgentStore`]), the replica every node of this agent reads
//!   the log from ([`EtcdLog`]), the head confirmation, and the binding to one etcd cluster.
//! - `anchor.rs` — the rollback checks: how far this agent applied the log ([`Anchor`]), the
//!   binding record, and the refusals of another cluster or a log that went back.
//! - `io.rs` — the etcd client's own thread: appends, head reads, the initial load, the watch.
//! - `io/load.rs` — the initial load (and the reload after a compaction): linear, by key, put in
//!   log order.
//! - `batch.rs` — one log key's value (a batch of codec events) and the indices of its events.

mod anchor;
pub mod batch;
mod io;

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tenure_core::codec::{self, CodecError};
use tenure_core::log::Event;
use tenure_core::log_store::{LOG_READ_BATCH_MAX, Log, LogError, LogIndex, LogRecord, encode_record};
use tracing::{error, info, warn};

use self::anchor::{Anchor, Binding, Newest, SNAPSHOT, check_anchor, check_binding};
use self::io::{Appended, ConnectSettings, HeadRead, Io, Keys, Retry};
use super::{EmbeddedJournal, EmbeddedStore, MissingIdentity, StoreError};
use crate::agent::{AgentStore, HeadUnconfirmed};

/// The `meta` record (in the local store) binding this agent to one etcd cluster and prefix.
const BINDING_KEY: &str = "etcd";

/// Default time one etcd request may take (connect, append, head read).
pub const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_secs(2);

/// How to reach etcd (from the agent config's `store`).
#[derive(Clone, Debug)]
pub struct EtcdOptions {
    /// Client URLs.
    pub endpoints: Vec<String>,
    /// The key prefix (`/tenure`).
    pub prefix: String,
    /// Per request.
    pub request_timeout: Duration,
    /// `user`, `password` when etcd has authentication on.
    pub user: Option<(String, Secret)>,
    /// TLS to etcd: the CA (PEM), and this agent's certificate and key (PEM) when etcd asks.
    pub tls: Option<EtcdTlsPem>,
    /// Write a snapshot (and compact the log below it) every this many events.
    pub snapshot_every: u64,
    /// This agent's fleet: [`fleet_text`] of its nodes and peers.
    pub fleet: String,
}

pub use tenure_lead::etcd_connection::{EtcdTlsPem, Secret};

pub use tenure_core::fleet_spec::fleet_text;

/// `Ok` when the fleet in etcd is this agent's; else one line naming the first difference.
pub(crate) fn compare_fleets(stored: &str, mine: &str, key: &str) -> Result<(), String> {
    match tenure_core::fleet_spec::fleet_difference(stored, mine) {
        None => Ok(()),
        Some((theirs, ours)) => Err(format!(
            "this agent's nodes and peers differ from the fleet in etcd ({key}): etcd has `{theirs}`, this config \
             `{ours}`; every agent of a fleet lists the same nodes (node + peers)"
        )),
    }
}

/// Runs `f`, which blocks the thread, from any context: inside a multi-thread tokio runtime it
/// tells the runtime first (other tasks move to other workers).
pub(crate) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// The log as this agent holds it: every batch the watch delivered, decoded, in revision order.
#[derive(Debug, Default)]
struct Replica {
    /// Events after what every node already applied, each with its index (a record that does
    /// not decode is kept as its error: the reader stops there).
    records: VecDeque<(LogIndex, Result<Event, CodecError>)>,
    /// Every log key with a revision up to this one is in `records` (or was trimmed).
    seen_revision: i64,
    /// How far this agent applied the log (the newest batch or snapshot this replica holds, or
    /// the binding's at start): what the binding records, and what etcd must still show.
    anchor: Anchor,
    /// Records up to this index were dropped once every node had applied them.
    trimmed_upto: Option<LogIndex>,
    /// Why the log cannot be followed now (the watch is broken): cleared when it is back.
    down: Option<String>,
    /// Why this agent refuses the log for good (another cluster, a log gone back, a batch that
    /// does not decode): sticky until restarted.
    refused: Option<String>,
    /// The newest snapshot loaded (at start, or when a compaction made the watch reload): the
    /// index of the last record it holds, and its bytes.
    snapshot: Option<(LogIndex, Arc<Vec<u8>>)>,
    /// The revision of the newest batch this process appended, and until when a read of the
    /// replica waits for the watch to deliver it ([`Shared::wait_for_own`]).
    own: Option<(i64, Instant)>,
}

/// One log key as read: its revision, key and value.
pub(crate) type StoredBatch = (i64, (Vec<u8>, Vec<u8>));

/// What the store and its I/O thread share.
#[derive(Debug)]
pub(crate) struct Shared {
    replica: Mutex<Replica>,
    /// Signalled whenever the replica grew (waiters for an append or a head confirmation).
    grown: Condvar,
    /// Wakes the agent loop when someone appended.
    changed: Arc<tokio::sync::Notify>,
}

impl Shared {
    fn new() -> Self {
        Self {
            replica: Mutex::new(Replica::default()),
            grown: Condvar::new(),
            changed: Arc::new(tokio::sync::Notify::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Replica> {
        self.replica.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds the batch stored under `key` at `revision` (ignored when it is not newer than what
    /// was seen: a watch re-created from a revision already read).
    fn push_batch(&self, key: &[u8], revision: i64, value: &[u8]) {
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
    fn reset(&self, snapshot: Option<(i64, Vec<u8>)>, batches: Vec<StoredBatch>, at: i64) {
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

    fn seen_revision(&self) -> i64 {
        self.lock().seen_revision
    }

    /// How far this agent applied the log (sample it before a read that is checked against it:
    /// a batch the watch brings while the read is under way must not count).
    pub(crate) fn anchor(&self) -> Anchor {
        self.lock().anchor.clone()
    }

    fn is_refused(&self) -> bool {
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

    fn grew(&self) {
        self.grown.notify_all();
        self.changed.notify_one();
    }

    fn set_down(&self, reason: Option<String>) {
        self.lock().down = reason;
        self.grew();
    }

    fn break_replica(&self, reason: String) {
        error!(%reason, "not following the log any more");
        self.lock().refused.get_or_insert(reason);
        self.grew();
    }

    /// Drops the records up to `upto`, which every node applied (never a corrupt one: the
    /// readers stop there).
    fn trim(&self, upto: LogIndex) {
        let mut replica = self.lock();
        while replica.records.front().is_some_and(|(index, event)| *index <= upto && event.is_ok()) {
            let (index, _) = replica.records.pop_front().expect("checked just above");
            replica.trimmed_upto = Some(index);
        }
    }

    /// This process appended a batch at `revision`: reads of the replica wait (until
    /// `deadline` at most) for the watch to deliver it.
    fn appended(&self, revision: i64, deadline: Instant) {
        let mut replica = self.lock();
        if replica.own.is_none_or(|(own, _)| own < revision) {
            replica.own = Some((revision, deadline));
        }
    }

    /// Before a read of the replica: waits until the watch delivered the newest batch this
    /// process appended, so that the agent reads its own appends (as the embedded store's log
    /// gives them), at most until the deadline [`Self::appended`] set; then reads what is there.
    /// Only the reader waits: an append completes at etcd's answer. The replica still grows by
    /// the watch alone, in revision order.
    fn wait_for_own(&self) {
        let Some((revision, deadline)) = self.lock().own else { return };
        if let Err(reason) = blocking(|| self.wait_for(revision, deadline)) {
            warn!(%reason, "appended, but the watch has not delivered it yet");
        }
        let mut replica = self.lock();
        if replica.own.is_some_and(|(own, _)| own <= revision) {
            replica.own = None;
        }
    }

    /// Waits until the replica holds every batch up to `revision`, at most until `deadline`.
    fn wait_for(&self, revision: i64, deadline: Instant) -> Result<(), String> {
        let mut replica = self.lock();
        loop {
            if let Some(reason) = &replica.refused {
                return Err(reason.clone());
            }
            if replica.seen_revision >= revision {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(format!(
                    "this agent has the log up to revision {} but etcd's head is at {revision}",
                    replica.seen_revision
                ));
            }
            replica = self
                .grown
                .wait_timeout(replica, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }
}

/// The fleet store: the log in etcd (through a local replica), everything else in the embedded
/// store at `store.path`. Cheap to clone.
#[derive(Clone, Debug)]
pub struct EtcdStore {
    local: EmbeddedStore,
    shared: Arc<Shared>,
    io: Arc<Io>,
    prefix: String,
    /// Names this process's batch keys: `<prefix>/log/<instance>-<hash of the batch>`.
    instance: String,
    /// `<prefix>/log/` ([`Keys::log`]), the start of every batch key.
    log_keys: String,
    request_timeout: Duration,
    snapshot_every: u64,
    /// The cluster this agent is bound to.
    cluster_id: u64,
    /// The anchor the binding holds durably now (written again only when it moved).
    binding_written: Arc<Mutex<Option<Anchor>>>,
}

/// Why the fleet store did not open.
#[derive(Debug, thiserror::Error)]
pub enum EtcdStoreError {
    /// The local store refused (see [`StoreError`]).
    #[error(transparent)]
    Local(#[from] StoreError),
    /// etcd could not be reached or read.
    #[error("etcd at {endpoints}: {reason}")]
    Etcd {
        /// The endpoints tried.
        endpoints: String,
        /// What failed.
        reason: String,
    },
}

impl EtcdStore {
    /// Opens the local store at `dir` (checked against `identity_file` as the embedded store
    /// is), connects to etcd and loads the log. A log this agent must not follow (another
    /// cluster, a log behind what it applied) opens in the **refused** state: nothing is read or
    /// appended, the agent reports why and never acts (never restarts tokens).
    pub fn open(dir: &Path, identity_file: &Path, options: &EtcdOptions) -> Result<Self, EtcdStoreError> {
        Self::open_with(dir, identity_file, options, MissingIdentity::Refuse)
    }

    /// [`Self::open`], with the operator's word on a local store that holds data but has no
    /// identity file (see [`EmbeddedStore::open_with`]).
    pub fn open_with(
        dir: &Path,
        identity_file: &Path,
        options: &EtcdOptions,
        missing: MissingIdentity,
    ) -> Result<Self, EtcdStoreError> {
        let local = EmbeddedStore::open_with(dir, identity_file, missing)?;
        let binding = match local.meta_record(BINDING_KEY)? {
            Some(bytes) => {
                Some(serde_json::from_slice::<Binding>(&bytes).map_err(|e| StoreError::Storage {
                    path: local.db_path().to_owned(),
                    reason: format!("the etcd binding record does not decode: {e}"),
                })?)
            }
            None => None,
        };
        let shared = Arc::new(Shared::new());
        if let Some(binding) = &binding {
            shared.lock().anchor = binding.anchor();
        }
        let settings = ConnectSettings {
            endpoints: options.endpoints.clone(),
            request_timeout: options.request_timeout,
            user: options.user.clone(),
            tls: options.tls.clone(),
            fleet: options.fleet.clone(),
        };
        let endpoints = options.endpoints.join(",");
        let refuse: io::Refuse = {
            let binding = binding.clone();
            let prefix = options.prefix.clone();
            Box::new(move |head| binding.and_then(|b| check_binding(&b, &prefix, head).err()))
        };
        let instance = format!("{:016x}", rand::random::<u64>());
        let keys = Keys::new(&options.prefix, &instance);
        let log_keys = keys.log.clone();
        let (io, head) = Io::start(settings, keys, Arc::clone(&shared), refuse)
            .map_err(|reason| EtcdStoreError::Etcd { endpoints: endpoints.clone(), reason })?;
        let store = Self {
            local,
            shared,
            io: Arc::new(io),
            prefix: options.prefix.clone(),
            instance,
            log_keys,
            request_timeout: options.request_timeout,
            snapshot_every: options.snapshot_every.max(1),
            cluster_id: binding.as_ref().map_or(head.cluster_id, |b| b.cluster_id),
            binding_written: Arc::new(Mutex::new(binding.as_ref().map(Binding::anchor))),
        };
        match &binding {
            Some(_) => {
                if let Some(reason) = store.refused() {
                    error!(%reason, "refusing the log");
                }
            }
            None => {
                info!(cluster = %format!("{:x}", head.cluster_id), prefix = %options.prefix, "bound to this etcd cluster");
                store.write_binding(&Anchor::default())?;
            }
        }
        Ok(store)
    }

    /// The local store (journals, marks, identity).
    #[must_use]
    pub fn local(&self) -> &EmbeddedStore {
        &self.local
    }

    /// Why this agent refuses its etcd, if it does.
    #[must_use]
    pub fn refused(&self) -> Option<String> {
        self.shared.lock().refused.clone()
    }

    fn write_binding(&self, anchor: &Anchor) -> Result<(), StoreError> {
        let binding = Binding {
            v: 1,
            cluster_id: self.cluster_id,
            prefix: self.prefix.clone(),
            revision: anchor.revision,
            newest: match &anchor.newest {
                Newest::Unrecorded => None,
                Newest::Batch(key) => Some(String::from_utf8_lossy(key).into_owned()),
                Newest::Snapshot => Some(SNAPSHOT.to_owned()),
            },
            head_created: anchor.head_created,
        };
        let bytes = serde_json::to_vec(&binding).expect("a binding serializes");
        self.local.put_meta_record(BINDING_KEY, &bytes)
    }

    /// Closes the local store (the etcd thread ends with the last handle).
    /// Its writer key goes too: this process appends nothing more, so no retry of its batches
    /// needs it (an agent killed leaves its key behind, a few bytes).
    pub fn close(self) -> Result<(), StoreError> {
        let _ = self.flush_binding();
        if self.refused().is_none()
            && let Err(e) = self.io.forget_writer()
        {
            warn!(error = %e, "cannot delete this agent's writer key (a few bytes left behind)");
        }
        let Self { local, .. } = self;
        local.close()
    }

    /// Records how far this agent applied the log (its [`Anchor`]), unless refused (a refused
    /// agent keeps what it had) or already recorded. Not the revision the replica is complete
    /// to: other writes (the fleet key, snapshots, other users of the cluster) move etcd's
    /// revision without a batch, and the check at the next start looks for the newest batch.
    fn flush_binding(&self) -> Result<(), StoreError> {
        let anchor = {
            let replica = self.shared.lock();
            if replica.refused.is_some() {
                return Ok(());
            }
            replica.anchor.clone()
        };
        let mut written = self.binding_written.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if written.as_ref() == Some(&anchor) {
            return Ok(());
        }
        self.write_binding(&anchor)?;
        *written = Some(anchor);
        Ok(())
    }

    /// Appends `events` in order; with `sync_journal`, the local journal's buffered changes are
    /// synced first (the loop's batches: a result is in the journal before the log says so).
    /// `retry` says whether a failed batch is appended again as it was ([`Retry`]).
    fn append_events(
        &self,
        events: &[Event],
        sync_journal: bool,
        retry: Retry,
    ) -> Result<Vec<LogIndex>, LogError> {
        if let Some(reason) = self.refused() {
            return Err(LogError::Unavailable { reason });
        }
        let mut records = Vec::with_capacity(events.len());
        for event in events {
            records.push(encode_record(event)?);
        }
        if sync_journal {
            self.local.sync().map_err(|e| LogError::Unavailable { reason: e.to_string() })?;
        }
        let mut indices = Vec::with_capacity(records.len());
        let mut last_revision = 0;
        for range in batch::chunks(&records) {
            let revision = self.append_chunk(&records[range.clone()], retry)?;
            indices.extend(
                (0..range.len()).map(|p| batch::index_of(revision, p).expect("a batch fits the index")),
            );
            last_revision = revision;
        }
        self.shared.appended(last_revision, Instant::now() + self.request_timeout);
        Ok(indices)
    }

    /// Appends one batch of encoded records; returns its revision.
    fn append_chunk(&self, records: &[Vec<u8>], retry: Retry) -> Result<i64, LogError> {
        let value = batch::encode(records);
        // The same batch retried gets the same key: the transaction then finds it (or this
        // process's writer key naming it, once a snapshot deleted it: [`Retry::SameBatch`]) and
        // answers its revision instead of appending it twice.
        let hash = xxhash_rust::xxh3::xxh3_128(&value);
        let key = format!("{}{}-{hash:032x}", self.log_keys, self.instance);
        // The transaction compares etcd's head and the anchor's batch with this anchor: an append
        // never lands on a log that went back (it would rewrite the head past every agent's mark,
        // or add to a restored log other writers pushed past it).
        let anchor = self.shared.anchor();
        match self.io.append(key, value, anchor, retry).map_err(|reason| LogError::Unavailable { reason })? {
            Appended::Committed { revision, head_created } => {
                self.shared.learn_head_created(head_created);
                Ok(revision)
            }
            Appended::WentBack(reason) => {
                self.shared.break_replica(reason.clone());
                Err(LogError::Unavailable { reason })
            }
        }
    }
}

/// The log of an [`EtcdStore`], as its replica holds it.
#[derive(Clone, Debug)]
pub struct EtcdLog {
    shared: Arc<Shared>,
}

impl Log for EtcdLog {
    fn append(&mut self, _event: &Event) -> Result<LogIndex, LogError> {
        Err(LogError::Unavailable { reason: "append through the store (EtcdStore::append_batch)".into() })
    }

    fn read_from(&self, from: LogIndex, max_records: usize) -> Result<Vec<LogRecord>, LogError> {
        self.shared.wait_for_own();
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
        self.shared.wait_for_own();
        let replica = self.shared.lock();
        Ok(replica.records.back().map(|(i, _)| *i).or(replica.trimmed_upto))
    }
}

impl AgentStore for EtcdStore {
    type Journal = EmbeddedJournal;
    type Log = EtcdLog;

    fn log(&self) -> EtcdLog {
        EtcdLog { shared: Arc::clone(&self.shared) }
    }

    fn journal(&self, node: &str) -> EmbeddedJournal {
        self.local.journal(node)
    }

    /// Makes the journal changes buffered so far durable locally first (a result is in the
    /// journal before the log says so), then appends one batch per [`batch::chunks`] range.
    /// Complete at etcd's answer: the watch delivers the batches into the replica in log order,
    /// and the next read of the log waits (up to the request timeout) for them, so that
    /// following the log right after sees them ([`Shared::wait_for_own`]).
    fn append_batch(&self, events: &[Event]) -> Result<Vec<LogIndex>, LogError> {
        self.append_events(events, true, Retry::SameBatch)
    }

    fn append_unretried(&self, events: &[Event]) -> Result<Vec<LogIndex>, LogError> {
        self.append_events(events, true, Retry::Never)
    }

    /// Without syncing the journal (a heartbeat reports no result), and leaving this process's
    /// writer key alone ([`Retry::Never`]): heartbeats may land while a failed batch of the loop
    /// waits for its retry, which still finds that batch by the key.
    fn append_heartbeats(&self, events: &[Event]) -> Result<Vec<LogIndex>, LogError> {
        self.append_events(events, false, Retry::Never)
    }

    fn record_highest_token(&self, token: u64) {
        self.local.record_highest_token(token);
    }

    fn backup(&self) -> Result<Vec<u8>, String> {
        Err("a fleet agent's log is in etcd: back up etcd (etcdctl snapshot save); this agent's local store \
             holds only its journal"
            .into())
    }

    fn flush_identity(&self) -> Result<(), String> {
        self.local.flush_identity().map_err(|e| e.to_string())?;
        self.flush_binding().map_err(|e| e.to_string())
    }

    fn log_changed(&self) -> Option<Arc<tokio::sync::Notify>> {
        Some(Arc::clone(&self.shared.changed))
    }

    fn confirm_head(&self, bound: Duration) -> Result<(), HeadUnconfirmed> {
        let deadline = Instant::now() + bound;
        if let Some(reason) = self.refused() {
            return Err(HeadUnconfirmed::Refused(reason));
        }
        // Sampled before the head read is sent: the read is linearized after every batch this
        // agent has seen so far, not after one the watch brings while the read is under way.
        let anchor = self.shared.anchor();
        let head =
            self.io.head(bound, anchor.batch_key().map(<[u8]>::to_vec)).map_err(HeadUnconfirmed::Behind)?;
        if head.cluster_id != self.cluster_id {
            let reason = format!(
                "etcd cluster {:x} answered, not {:x} this agent follows (replaced underneath?); refusing to act",
                head.cluster_id, self.cluster_id
            );
            self.shared.break_replica(reason.clone());
            return Err(HeadUnconfirmed::Refused(reason));
        }
        self.shared.verify(&anchor, &head).map_err(HeadUnconfirmed::Refused)?;
        blocking(|| self.shared.wait_for(head.head_revision, deadline)).map_err(HeadUnconfirmed::Behind)?;
        // Durably, before any call on this head: a restarted agent knows how far it acted, and
        // refuses a log restored to before it.
        self.flush_binding().map_err(|e| {
            HeadUnconfirmed::Behind(format!("cannot record how far this agent applied the log: {e}"))
        })
    }

    fn refusal(&self) -> Option<String> {
        self.refused()
    }

    fn followed(&self, upto: LogIndex) {
        self.shared.trim(upto);
    }

    fn snapshot(&self) -> Option<(LogIndex, Arc<Vec<u8>>)> {
        self.shared.lock().snapshot.clone()
    }

    fn snapshot_every(&self) -> Option<u64> {
        Some(self.snapshot_every)
    }

    fn write_snapshot(&self, applied: LogIndex, events: u64, bytes: Vec<u8>) -> Result<(), String> {
        if let Some(reason) = self.refused() {
            return Err(reason);
        }
        self.io.write_snapshot(batch::revision_of(applied), events, self.snapshot_every, Arc::new(bytes))
    }

    fn shared_log(&self) -> bool {
        true
    }

    fn retries_appends(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::anchor::WENT_BACK;
    use super::*;

    fn head(cluster_id: u64, head_revision: i64) -> HeadRead {
        HeadRead {
            cluster_id,
            revision: head_revision + 5,
            head_revision,
            head_created: 2,
            batch_revision: None,
            snapshot_revision: None,
        }
    }

    #[test]
    fn fleets_compare_by_what_arbitration_reads() {
        use tenure_core::model::{NodeSpec, ProviderKind, ProviderSpec};
        let node = |name: &str, priority| NodeSpec {
            name: name.into(),
            provider: "sim1".into(),
            placement_group: "g1".into(),
            priority,
            nic: format!("eni-{name}"),
            capacity: None,
        };
        let providers = [
            ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud },
            ProviderSpec { name: "unused".into(), kind: ProviderKind::Exec },
        ];
        let a = fleet_text(&[node("b", 0), node("a", 10)], &providers);
        assert_eq!(
            a,
            "node a provider=sim1 placementGroup=g1 nic=eni-a priority=10 capacity=none\n\
             node b provider=sim1 placementGroup=g1 nic=eni-b priority=0 capacity=none\n\
             provider sim1 kind=sim-cloud"
        );
        assert_eq!(
            a,
            fleet_text(&[node("a", 10), node("b", 0)], &providers[..1]),
            "order and unused providers do not count"
        );
        let b = fleet_text(&[node("a", 10), node("b", 5)], &providers);
        let e = compare_fleets(&a, &b, "/tenure/fleet").expect_err("must fail");
        assert!(e.contains("etcd has `node b provider=sim1 placementGroup=g1 nic=eni-b priority=0"), "{e}");
        assert!(
            e.contains("this config `node b provider=sim1 placementGroup=g1 nic=eni-b priority=5"),
            "{e}"
        );
        assert_eq!(compare_fleets(&a, &a, "k"), Ok(()));
    }

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

    #[test]
    fn a_read_of_the_log_waits_for_this_process_s_own_append_until_its_deadline() {
        let shared = Arc::new(Shared::new());
        let log = EtcdLog { shared: Arc::clone(&shared) };
        let event = Event { at_ms: 1, kind: tenure_core::log::EventKind::Heartbeat { node: "a".into() } };
        let value = batch::encode(&[codec::encode_event(&event).expect("must hold")]);
        // The append completed at etcd's answer (revision 7); its watch delivery comes later.
        shared.appended(7, Instant::now() + Duration::from_secs(30));
        let delivery = {
            let shared = Arc::clone(&shared);
            let value = value.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(200));
                shared.push_batch(b"k7", 7, &value);
                shared.grew();
            })
        };
        assert_eq!(log.read_from(LogIndex::FIRST, 10).expect("must hold").len(), 1, "its own append read");
        delivery.join().expect("must hold");
        // Past its deadline, a read takes what is there.
        shared.appended(9, Instant::now());
        assert_eq!(log.read_from(LogIndex::FIRST, 10).expect("must hold").len(), 1);
        assert_eq!(log.head().expect("must hold"), batch::index_of(7, 0));
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
