//! The agent (`tenure agent --config FILE`): follows the log through the one node driver,
//! reconciles on every change and on a requeue interval, gates every action at import, at every
//! sweep and right before the provider call, runs the executors with a deadline each, appends
//! `action-result` events and its own heartbeats, and answers the HTTP API.
//!
//! # The loop
//!
//! One tokio task owns everything that decides: the store handle, every node's [`NodeDriver`]
//! and the executors. Nothing else touches them; the HTTP API asks through
//! [`request::AgentHandle`], executor calls run as spawned tasks and come back as results. Each
//! turn of the loop waits for one thing (a request, a finished call, a heartbeat or requeue tick,
//! a signal), then takes one **step**:
//!
//! ```text
//! append what is queued (results, heartbeats) ─► follow the log to its head ─► reconcile each node
//!   ─► promote approved ─► follow again ─► gate a batch (one sync) ─► spawn the calls
//! ```
//!
//! The fence gate reads the node's own view right after it followed the log to its head: with
//! the embedded store the log lives in this process's store, so the view is the head.
//!
//! # Layout
//!
//! - this file — [`AgentStore`] (what the loop needs of a store: the seam the embedded store,
//!   the etcd fleet store `crate::store::fleet::EtcdStore` and [`memory::MemoryStore`]
//!   implement), [`Settings`], [`ProviderExecutor`].
//! - [`runner`] — the loop: [`runner::run`] (its `select!`); beside it in `runner/`: `start.rs`
//!   (the agent built, the run begun), `step.rs` (one step: follow, reconcile, confirm the head,
//!   gate and call, the rules of which are the core's `tenure_core::agent::AgentCore`, the one
//!   the simulator runs too), and its halves of the rules: `appends.rs` (commits, the kept batch, pool files applied), `calls.rs` (gated
//!   batches spawned, results recorded), `clock.rs` (this host's clocks for the core's clock-lead rule),
//!   `heartbeat.rs` (heartbeats on their own thread),
//!   `inventory.rs` (inventory reads), `refresh.rs` (repeated announcements), `requests.rs` (its
//!   answers to requests), `slow.rs` (test hooks that slow the loop), `stale.rs` (calls whose
//!   action went stale), `vrrp.rs` (keepalived's reports as `vrrp` events), `wait.rs` (the
//!   `select!`'s waits on what may be absent), `withdraw.rs` (the local withdrawal).
//! - [`answers`] — answering API requests from the loop's state.
//! - [`listing`] — the list calls' filters, and pages of the history the loop keeps.
//! - [`map`] — the ownership map a page at a time (`GET /v1/ownership`, the status page).
//! - [`authority`] — keepalived's authority acted on without the log: calls of `authority: vrrp`
//!   pools refused and cancelled while not MASTER, the local withdrawal.
//! - [`keepalived`] — keepalived's notify FIFO: its lines parsed, and the follower that turns
//!   them into reports for the loop (locked, its last state kept beside the FIFO).
//! - [`notices`] — the maintenance notice watcher (`maintenanceNotices: drain`): drains a node
//!   whose instance the cloud announces the end of, and acknowledges the notice.
//! - [`memory`] — [`memory::MemoryStore`], the in-memory test double of [`AgentStore`].
//! - [`request`] — the channel between the API and the loop.
//! - [`status`] — what the status page shows, read from the loop in one request (the failover
//!   timeline's lanes from the history the loop keeps).

pub mod answers;
pub mod authority;
pub mod keepalived;
pub mod listing;
pub mod map;
pub mod memory;
pub mod notices;
pub mod request;
pub mod runner;
pub mod status;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tenure_core::journal::JournalStore;
use tenure_core::log::Event;
use tenure_core::log_store::{Log, LogError, LogIndex};
use tenure_core::model::{NodeSpec, PoolSpec, ProviderSpec};

use crate::exec::Executor;
use crate::store::StoreError;

/// What the agent loop needs of a store: the log, each node's journal, and the identity record.
/// The embedded store (redb) implements it; the etcd fleet store will too. One implementation
/// per store kind, one agent.
pub trait AgentStore: Clone + Send + Sync + 'static {
    /// A node's durable journal.
    type Journal: JournalStore + Send + 'static;
    /// The log, for reading (and single appends).
    type Log: Log + Send + 'static;

    /// A handle on the log.
    fn log(&self) -> Self::Log;

    /// Node `node`'s journal. Called once per node when the agent starts.
    fn journal(&self, node: &str) -> Self::Journal;

    /// Appends `events` in order, durably, in one commit (with every journal change buffered so
    /// far: group commit).
    fn append_batch(&self, events: &[Event]) -> impl Future<Output = Result<Vec<LogIndex>, LogError>> + Send;

    /// [`Self::append_batch`] for a batch of action results alone: a store may make it durable
    /// only at its next durable commit (the embedded store's next journal sync: the gate's,
    /// before any call leaves, or the one every step ends with, `AgentCore::poll_step`), so
    /// that a step's results, its plan and its gate take one fsync. Lost in a crash, results are
    /// calls in doubt at the restart (SPEC 6: at-least-once). A store may defer only where
    /// whatever follows from the results (the view's stream time, arbitration, the journals'
    /// next changes) is committed after them in the same ordered store, so that it is never
    /// durable without them — the embedded store's one file; the fleet store does not defer (its
    /// log is etcd). By default the same as [`Self::append_batch`].
    fn append_results(
        &self,
        events: &[Event],
    ) -> impl Future<Output = Result<Vec<LogIndex>, LogError>> + Send {
        self.append_batch(events)
    }

    /// Appends events that are not appended again if this fails (an operator's request, the pool
    /// files' events: the caller is told; a request sent again is a new batch). A store may skip
    /// what only a retried batch needs (the fleet store leaves its writer key alone, as for
    /// [heartbeats](Self::append_heartbeats): one landing after its answer was lost must not
    /// hide a held batch of the loop from that batch's retry).
    fn append_unretried(
        &self,
        events: &[Event],
    ) -> impl Future<Output = Result<Vec<LogIndex>, LogError>> + Send {
        self.append_batch(events)
    }

    /// Appends heartbeats, from the heartbeat thread (`runner/heartbeat.rs`), while the loop may
    /// be appending too, or holding a failed batch for its retry. A store may skip what only the
    /// loop's batches need (the fleet store does not sync the local journal first: a heartbeat
    /// reports no result); a store that [retries appends](StoreCapabilities::retries_appends)
    /// must append them so that a held batch's retry still lands once (the fleet store leaves
    /// its writer key alone: a heartbeat is never retried as the same batch).
    fn append_heartbeats(
        &self,
        events: &[Event],
    ) -> impl Future<Output = Result<Vec<LogIndex>, LogError>> + Send {
        self.append_batch(events)
    }

    /// Before the agent follows the log: waits until the log this process reads holds what this
    /// process appended (at most a bound of the store's; then what is there is read), so that
    /// following right after an append sees it. The embedded store's appends are in its log when
    /// they return; the fleet store's come back through etcd's watch.
    fn read_own_appends(&self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }

    /// The highest token the agent's view holds, for the store's identity record.
    fn record_highest_token(&self, token: u64);

    /// A consistent backup of the whole store, as the bytes of a backup file (taken while the
    /// agent runs; a read transaction, so writers go on).
    fn backup(&self) -> Result<Vec<u8>, StoreError>;

    /// Writes the identity record now (called about once a second while things change, and at
    /// shutdown).
    fn flush_identity(&self) -> Result<(), StoreError>;

    /// Wakes the loop when the log grew by appends of other processes (a fleet store). `None`
    /// (the embedded store): this process is the only writer, so its own steps see everything.
    fn log_changed(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }

    /// Confirms, within `bound`, that the log this process follows holds every event appended
    /// anywhere before the call (a linearizable read of the head, then waiting for the
    /// follower): the fence gate's head is current (SPEC 6). The embedded store's log is written
    /// only by this process, so it is always current.
    fn confirm_head(&self, _bound: Duration) -> impl Future<Output = Result<(), HeadUnconfirmed>> + Send {
        std::future::ready(Ok(()))
    }

    /// Why this store must not be used at all (a fleet agent bound to another etcd cluster, or
    /// to a log that went back): the agent then starts, appends nothing, never acts, and
    /// reports the reason in health until restarted with a store it may use.
    fn refusal(&self) -> Option<String> {
        None
    }

    /// The fleet a shared log began with, as [`tenure_core::fleet_spec::fleet_text`]: the agent
    /// projects the log over its nodes (the log's `node-registered` and `node-retired` change
    /// them from there). `None` (the embedded store): over the agent's own nodes.
    fn genesis(&self) -> Option<String> {
        None
    }

    /// The newest snapshot of the log this store holds: the index of the last record it
    /// covers, and its bytes ([`tenure_core::federation::Federation::snapshot`]). A node whose
    /// next record was compacted away starts again from it. `None`: no snapshot (the embedded
    /// store keeps its whole log).
    fn snapshot(&self) -> Option<(LogIndex, Arc<Vec<u8>>)> {
        None
    }

    /// Starts storing `bytes` as the snapshot of the log up to `applied` (`events` applied in
    /// all) and compacting the log below it, in the background (the outcome is logged); one as
    /// new or newer already there wins.
    fn write_snapshot(&self, _applied: LogIndex, _events: u64, _bytes: Vec<u8>) -> Result<(), StoreError> {
        Ok(())
    }

    /// Every node of this agent applied the log up to `upto`: a store may drop what it kept
    /// for them.
    fn followed(&self, _upto: LogIndex) {}

    /// What this store does ([`StoreCapabilities`]), read once when the agent starts.
    fn capabilities(&self) -> StoreCapabilities {
        StoreCapabilities::default()
    }
}

/// What a store does, read once when the agent starts: the loop asks no policy question of the
/// store as it runs. `Default`: the embedded store (this process alone writes a log it keeps
/// whole).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreCapabilities {
    /// Other agents share this log (a fleet): then a starting agent's pool files only seed the
    /// pools the log lacks ([`tenure_core::pool_changes::seed_pools`]); the log's version of a pool is the fleet's,
    /// changed on purpose by a reload (SIGHUP), never reverted by a router that restarts with an
    /// old file.
    pub shared_log: bool,
    /// An append that failed as [`LogError::Unavailable`] may be retried (the same batch,
    /// exactly once in the log): a remote log after a lost answer. The embedded store's failed
    /// commit poisons it instead.
    pub retries_appends: bool,
    /// How many applied events between two snapshots the agent writes; `None`: it writes none.
    pub snapshot_every: Option<u64>,
}

/// Why the head could not be confirmed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeadUnconfirmed {
    /// Not now (etcd unreachable, the follower behind): the agent does not act until it can.
    Behind(String),
    /// Never (another cluster, a log gone back): the agent does not act until restarted.
    Refused(String),
}

/// One configured provider's executor and the deadline of its calls.
#[derive(Clone)]
pub struct ProviderExecutor {
    /// The executor.
    pub executor: Arc<dyn Executor>,
    /// How long one call may take before its outcome is unknown (an inventory read too).
    pub call_timeout: Duration,
    /// How often the provider's inventory is read for drift repair; `None`: never.
    pub inventory_interval: Option<Duration>,
    /// How often the announcement of every address this agent holds on the provider is repeated
    /// (`garpRefresh`, on-prem); `None`: never.
    pub garp_refresh: Option<Duration>,
}

impl std::fmt::Debug for ProviderExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderExecutor")
            .field("call_timeout", &self.call_timeout)
            .field("inventory_interval", &self.inventory_interval)
            .field("garp_refresh", &self.garp_refresh)
            .finish_non_exhaustive()
    }
}

/// Where the agent's pools come from: read again on SIGHUP. Errors are rendered one per line.
pub type PoolSource = Box<dyn Fn() -> Result<Vec<PoolSpec>, Vec<String>> + Send>;

/// What the loop runs with (built from the agent config, or by the demo and tests).
pub struct Settings {
    /// The nodes this process runs (one on a router; several in the demo and tests).
    pub nodes: Vec<NodeSpec>,
    /// The fleet's other nodes, run by other agents on the same log (fleet mode): known, so
    /// that the map is the same everywhere, but never run here.
    pub peers: Vec<NodeSpec>,
    /// Every provider of the registry.
    pub providers: Vec<ProviderSpec>,
    /// The executor of each provider, by provider name.
    pub executors: BTreeMap<String, ProviderExecutor>,
    /// How often each node appends its heartbeat.
    pub heartbeat_interval: Duration,
    /// Reconcile at least this often, even when nothing changed (level-triggered); also the
    /// first wait of a failed action's retry backoff ([`tenure_core::retry`]).
    pub requeue_interval: Duration,
    /// Journal entries each node keeps before compaction.
    pub journal_retention: usize,
    /// The pool files (read at start and on reload).
    pub pools: PoolSource,
    /// keepalived's reports for this host ([`keepalived::follow_fifo`]), when the agent config
    /// has a `vrrp` section: the agent appends each change as a `vrrp` event of every node it
    /// runs, and takes no step before the follower's first report (keepalived not running:
    /// `fault`; running and silent: the state the log recorded stands).
    pub vrrp: Option<VrrpFollow>,
}

/// keepalived beside the agent: the follower's reports, and the flag it lowers as it reads them
/// ([`authority::LocalAuthority`]), which the calls of `authority: vrrp` pools and the local
/// withdrawal act on without waiting for the loop.
pub struct VrrpFollow {
    /// The follower's reports ([`keepalived::follow_fifo`]).
    pub reports: tokio::sync::mpsc::Receiver<keepalived::VrrpReport>,
    /// The flag the follower sets as it reads.
    pub authority: Arc<authority::LocalAuthority>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("nodes", &self.nodes)
            .field("providers", &self.providers)
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("requeue_interval", &self.requeue_interval)
            .finish_non_exhaustive()
    }
}
