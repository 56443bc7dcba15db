//! The fleet store (`store: {kind: etcd}`): the federation log in etcd, shared by every agent;
//! each agent's journals, high-water marks and identity in its own embedded store at
//! `store.path` (SPEC 10). See `docs/architecture.md`, "Fleet mode on etcd", for the key layout,
//! the ordering and the refusals; this module is that text as code.
//!
//! - this file — [`EtcdStore`] (an [`AgentStore`]): opening, appends, the head confirmation,
//!   snapshots, and the binding to one etcd cluster.
//! - `anchor.rs` — the rollback checks: how far this agent applied the log (`Anchor`), the
//!   binding record, and the refusals of another cluster or a log that went back.
//! - `claim.rs` — one node, one agent: this agent's nodes claimed in etcd under its lease.
//! - `error.rs` — [`EtcdError`]: what went wrong talking to etcd, typed.
//! - `io.rs` — the etcd client: appends, head reads, the initial load, the watch (a task of the
//!   runtime the store was opened on).
//! - `io/append.rs` — one append, compared against what this agent applied and its writer key.
//! - `io/snapshot.rs` — the snapshot in etcd (manifest and chunks): read, write, and the
//!   compaction of what it replaces.
//! - `io/load.rs` — the initial load (and the reload after a compaction): linear, by key, put in
//!   log order.
//! - `replica.rs` — the replica of the log the watch fills (`Shared`), and [`EtcdLog`], the
//!   log every node of this agent reads from it.
//! - `batch.rs` — one log key's value (a batch of codec events) and the indices of its events.

mod anchor;
pub mod batch;
mod claim;
mod error;
mod io;
mod replica;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use tenure_core::log::Event;
use tenure_core::log_store::{LogError, LogIndex, encode_record};
use tracing::{error, info, warn};

use self::anchor::{Anchor, Binding, Newest, SNAPSHOT, check_binding};
pub use self::error::EtcdError;
use self::io::{Appended, ConnectSettings, Io, Keys, Retry};
pub use self::replica::EtcdLog;
use self::replica::{Shared, StoredBatch};
use super::{EmbeddedJournal, EmbeddedStore, MissingIdentity, StoreError};
use crate::agent::{AgentStore, HeadUnconfirmed, StoreCapabilities};

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
    /// This agent's fleet: [`fleet_text`] of its nodes and peers, written under the fleet key as
    /// the log's first registry when the key is not there yet.
    pub fleet: String,
    /// The nodes this agent runs, claimed in etcd while it runs (`claim.rs`); empty for a store
    /// opened by a tool or a test, which runs no node.
    pub nodes: Vec<String>,
}

pub use tenure_lead::etcd_connection::{EtcdTlsPem, Secret};

pub use tenure_core::fleet_spec::fleet_text;

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
    #[error("etcd at {endpoints}: {source}")]
    Etcd {
        /// The endpoints tried.
        endpoints: String,
        /// What failed.
        #[source]
        source: EtcdError,
    },
}

impl EtcdStore {
    /// Opens the local store at `dir` (checked against `identity_file` as the embedded store
    /// is), connects to etcd and loads the log. A log this agent must not follow (another
    /// cluster, a log behind what it applied) opens in the **refused** state: nothing is read or
    /// appended, the agent reports why and never acts (never restarts tokens). The store's etcd
    /// requests and its watch run on the runtime this is awaited on.
    pub async fn open(
        dir: &Path,
        identity_file: &Path,
        options: &EtcdOptions,
    ) -> Result<Self, EtcdStoreError> {
        Self::open_with(dir, identity_file, options, MissingIdentity::Refuse).await
    }

    /// [`Self::open`], with the operator's word on a local store that holds data but has no
    /// identity file (see [`EmbeddedStore::open_with`]).
    pub async fn open_with(
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
        let claim = (options.nodes.clone(), claim::Claim::mine(local.cluster_id(), local.dir(), &instance));
        let (io, head) = Io::start(settings, keys, Arc::clone(&shared), refuse, claim)
            .await
            .map_err(|source| EtcdStoreError::Etcd { endpoints: endpoints.clone(), source })?;
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

    /// Closes the local store (the watch ends with the last handle).
    /// Its writer key goes too: this process appends nothing more, so no retry of its batches
    /// needs it (an agent killed leaves its key behind, a few bytes). Its node claims are let go
    /// either way (a refused agent's too): another agent may run its nodes at once.
    pub async fn close(self) -> Result<(), StoreError> {
        let _ = self.flush_binding();
        let released = if self.refused().is_none() {
            self.io.forget_writer().await
        } else {
            self.io.release_claims().await
        };
        if let Err(e) = released {
            warn!(error = %e, "cannot let this agent's node claims go or delete its writer key (they lapse or stay, a few bytes)");
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
    /// `retry` says whether a failed batch is appended again as it was ([`Retry`]). Done at
    /// etcd's answer; the agent's next follow waits for the watch to deliver it
    /// ([`AgentStore::read_own_appends`]).
    async fn append_events(
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
            let revision = self.append_chunk(&records[range.clone()], retry).await?;
            indices.extend(
                (0..range.len()).map(|p| batch::index_of(revision, p).expect("a batch fits the index")),
            );
            last_revision = revision;
        }
        self.shared.appended(last_revision, Instant::now() + self.request_timeout);
        Ok(indices)
    }

    /// Appends one batch of encoded records; returns its revision.
    async fn append_chunk(&self, records: &[Vec<u8>], retry: Retry) -> Result<i64, LogError> {
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
        match self
            .io
            .append(key, value, anchor, retry)
            .await
            .map_err(|e| LogError::Unavailable { reason: e.to_string() })?
        {
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
    /// Done at etcd's answer: the watch delivers the batches into the replica in log order, and
    /// the agent's next follow waits (up to the request timeout) for them
    /// ([`AgentStore::read_own_appends`]).
    async fn append_batch(&self, events: &[Event]) -> Result<Vec<LogIndex>, LogError> {
        self.append_events(events, true, Retry::SameBatch).await
    }

    async fn append_unretried(&self, events: &[Event]) -> Result<Vec<LogIndex>, LogError> {
        self.append_events(events, true, Retry::Never).await
    }

    /// Without syncing the journal (a heartbeat reports no result), and leaving this process's
    /// writer key alone ([`Retry::Never`]): heartbeats may land while a failed batch of the loop
    /// waits for its retry, which still finds that batch by the key.
    async fn append_heartbeats(&self, events: &[Event]) -> Result<Vec<LogIndex>, LogError> {
        self.append_events(events, false, Retry::Never).await
    }

    async fn read_own_appends(&self) {
        self.shared.wait_for_own().await;
    }

    fn record_highest_token(&self, token: u64) {
        self.local.record_highest_token(token);
    }

    fn backup(&self) -> Result<Vec<u8>, StoreError> {
        Err(StoreError::NoBackup {
            why: "a fleet agent's log is in etcd: back up etcd (etcdctl snapshot save); this agent's local store \
                  holds only its journal",
        })
    }

    fn flush_identity(&self) -> Result<(), StoreError> {
        self.local.flush_identity()?;
        self.flush_binding()
    }

    fn log_changed(&self) -> Option<Arc<tokio::sync::Notify>> {
        Some(Arc::clone(&self.shared.changed))
    }

    async fn confirm_head(&self, bound: Duration) -> Result<(), HeadUnconfirmed> {
        let deadline = Instant::now() + bound;
        if let Some(reason) = self.refused() {
            return Err(HeadUnconfirmed::Refused(reason));
        }
        // Sampled before the head read is sent: the read is linearized after every batch this
        // agent has seen so far, not after one the watch brings while the read is under way.
        let anchor = self.shared.anchor();
        let head = self
            .io
            .head(bound, anchor.batch_key().map(<[u8]>::to_vec))
            .await
            .map_err(|e| HeadUnconfirmed::Behind(e.to_string()))?;
        if head.cluster_id != self.cluster_id {
            let reason = format!(
                "etcd cluster {:x} answered, not {:x} this agent follows (replaced underneath?); refusing to act",
                head.cluster_id, self.cluster_id
            );
            self.shared.break_replica(reason.clone());
            return Err(HeadUnconfirmed::Refused(reason));
        }
        self.shared.verify(&anchor, &head).map_err(HeadUnconfirmed::Refused)?;
        self.shared.wait_for(head.head_revision, deadline).await.map_err(HeadUnconfirmed::Behind)?;
        // Durably, before any call on this head: a restarted agent knows how far it acted, and
        // refuses a log restored to before it.
        self.flush_binding().map_err(|e| {
            HeadUnconfirmed::Behind(format!("cannot record how far this agent applied the log: {e}"))
        })
    }

    fn refusal(&self) -> Option<String> {
        self.refused()
    }

    fn genesis(&self) -> Option<String> {
        self.shared.lock().genesis.clone()
    }

    fn followed(&self, upto: LogIndex) {
        self.shared.trim(upto);
    }

    fn snapshot(&self) -> Option<(LogIndex, Arc<Vec<u8>>)> {
        self.shared.lock().snapshot.clone()
    }

    fn write_snapshot(&self, applied: LogIndex, events: u64, bytes: Vec<u8>) -> Result<(), StoreError> {
        if let Some(reason) = self.refused() {
            return Err(StoreError::LogRefused { reason });
        }
        self.io.write_snapshot(batch::revision_of(applied), events, self.snapshot_every, Arc::new(bytes));
        Ok(())
    }

    fn capabilities(&self) -> StoreCapabilities {
        StoreCapabilities {
            shared_log: true,
            retries_appends: true,
            snapshot_every: Some(self.snapshot_every),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_is_written_by_what_arbitration_reads() {
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
    }
}
