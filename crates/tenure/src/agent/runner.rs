//! The agent loop: [`run`]. See the module documentation of [`super`] for the walk of one step.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tenure_core::driver::{DriverOptions, NodeDriver};
use tenure_core::federation::Federation;
use tenure_core::federation::history::History;
use tenure_core::journal::JournalStore;
use tenure_core::log::{Event, EventKind};
use tenure_core::log_store::LogError;
use tenure_core::model::{NodeSpec, PoolSpec, ProviderSpec, StampedAction, VrrpState};
use tenure_core::node::{NodeEngine, NodeError};
use tenure_core::retry::RetryBackoff;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{debug, error, info, warn};

use super::answers::Counters;
use super::keepalived::VrrpReport;
use super::pools::{plan_pool_changes, seed_pools};
use super::request::Requests;
use super::{AgentStore, HeadUnconfirmed, ProviderExecutor, Settings};
use crate::exec::{ExecutionOutcome, Inventory, InventoryRequest, execute_within};

mod clock;
mod heartbeat;
mod history;
mod refresh;
mod requests;
mod slow;
mod stale;
mod vrrp;
mod withdraw;

/// Most provider calls in flight at once, across the agent's nodes.
pub const CALLS_IN_FLIGHT_MAX: usize = 256;

/// Most actions gated in one batch (one durable sync per batch).
pub const GATE_BATCH_MAX: usize = 64;

/// When no pool names a heartbeat TTL, how long the agent waits to confirm the log head.
pub const HEAD_CONFIRM_BOUND_DEFAULT: Duration = Duration::from_secs(1);

/// How long another node's last heartbeat stamp still votes in the clock-lead rule.
pub const CLOCK_VOTE_WINDOW: Duration = Duration::from_secs(60);

/// How often the identity record is written while things change.
pub const IDENTITY_FLUSH_INTERVAL: Duration = Duration::from_secs(1);

pub use heartbeat::LOOP_STALL_MAX;

/// What the loop reports about itself to metrics. Every method has a no-op default.
pub trait Observe: Send + Sync {
    /// One reconcile pass of one node took `duration`.
    fn reconcile(&self, _duration: Duration) {}
    /// One provider call of `provider` took `duration`.
    fn executor_call(&self, _provider: &str, _duration: Duration) {}
}

/// An observer that records nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoObserver;

impl Observe for NoObserver {}

/// Why the agent could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The pool files are bad at start (each line `file:line:column: message`).
    #[error("pool files refused:\n{}", .0.join("\n"))]
    Pools(Vec<String>),
    /// A node's journal could not be opened or written.
    #[error("node `{node}`: {reason}")]
    Journal {
        /// The node.
        node: String,
        /// What the store said.
        reason: String,
    },
    /// The log could not be read or appended to at start.
    #[error("log: {0}")]
    Log(String),
    /// A setting the agent reads at start is bad (a test hook's environment variable).
    #[error("{0}")]
    Setting(String),
}

/// What a run did, reported when it ends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// Provider calls made.
    pub calls: u64,
    /// Events appended by this run.
    pub appended: u64,
}

/// A finished provider call.
struct CallDone {
    node: usize,
    key: String,
    provider: String,
    /// A refresh of this address (`runner/refresh.rs`): not journaled.
    refresh: Option<IpAddr>,
    outcome: ExecutionOutcome,
    elapsed: Duration,
}

/// Which call a task makes, so that a task that panicked or was cancelled still ends its call.
struct CallTask {
    node: usize,
    key: String,
    provider: String,
    /// A refresh of this address: ended in the engine, never journaled.
    refresh: Option<IpAddr>,
}

/// A finished inventory read (its provider is [`InventorySchedule::tasks`]' entry for the task).
struct InventoryDone {
    /// The stamp taken when the read started: the `at` of the events it yields, so that a call
    /// confirmed while the read was under way is never contradicted by it.
    started_at_ms: u64,
    /// `None`: the executor takes no inventory.
    inventory: Option<Inventory>,
    /// The NICs the read could see, when it saw only this host's (`onprem`); `None`: the
    /// provider's whole view.
    scope: Option<Vec<String>>,
}

/// When each provider's inventory is read next, and which reads are under way.
#[derive(Default)]
struct InventorySchedule {
    /// Provider → (interval, next read).
    due: BTreeMap<String, (Duration, Instant)>,
    /// The reads under way: which provider each task reads (a task that panicked is
    /// rescheduled too).
    tasks: HashMap<tokio::task::Id, String>,
    /// The last failure logged at warn per provider (a repeat is logged at debug).
    last_failure: BTreeMap<String, String>,
    /// Providers to read again as soon as their read under way ends ([`Self::read_now`]).
    rushed: BTreeSet<String>,
    /// Providers whose next read was asked for at once ([`Self::read_now`]): made by this agent
    /// even when another node is the provider's reader.
    urgent: BTreeSet<String>,
    /// Per provider, the reader this agent last saw in the view ([`Self::reader_seen`]).
    readers: BTreeMap<String, Option<String>>,
}

impl InventorySchedule {
    /// Whether a read of `provider` is under way.
    fn reading(&self, provider: &str) -> bool {
        self.tasks.values().any(|p| p == provider)
    }

    /// The next read that is not under way, if any.
    fn next(&self) -> Option<Instant> {
        self.due.iter().filter(|(p, _)| !self.reading(p)).map(|(_, (_, at))| *at).min()
    }

    /// Records `reader` as `provider`'s inventory reader; `true` when it differs from the one
    /// seen before (to log the hand-over once).
    fn reader_seen(&mut self, provider: &str, reader: Option<&str>) -> bool {
        let reader = reader.map(str::to_owned);
        self.readers.insert(provider.to_owned(), reader.clone()) != Some(reader)
    }

    /// The next read of `provider` one interval from now (now, when it was rushed meanwhile).
    fn reschedule(&mut self, provider: &str) {
        let rushed = self.rushed.remove(provider);
        if let Some((interval, next)) = self.due.get_mut(provider) {
            *next = if rushed { Instant::now() } else { Instant::now() + *interval };
        }
    }
}

/// The loop's state.
struct Agent<S: AgentStore> {
    store: S,
    log: S::Log,
    drivers: Vec<NodeDriver<S::Journal>>,
    executors: BTreeMap<String, ProviderExecutor>,
    pools: super::PoolSource,
    observer: Arc<dyn Observe>,
    calls: JoinSet<CallDone>,
    /// Which call each task makes, so that a task that panicked still ends its call: as
    /// `unknown` (the provider may have acted), never left in flight.
    call_tasks: HashMap<tokio::task::Id, CallTask>,
    /// The calls' tasks by node and key, to cancel a call the view fenced (`stale.rs`).
    call_aborts: stale::CallAborts,
    /// When the last head confirmation was asked for: every call's deadline counts from it.
    head_confirmed_at: Option<Instant>,
    /// Events to append at the next step (the first heartbeats, keepalived's state).
    queued: Vec<EventKind>,
    /// Events stamped already, appended at the next step before `queued` (inventory).
    queued_stamped: Vec<Event>,
    inventories: JoinSet<InventoryDone>,
    inventory: InventorySchedule,
    /// Re-captures the view had applied at the last step (to log new ones).
    recaptures_seen: u64,
    counters: Counters,
    /// Why the agent cannot act now (health), if it cannot.
    unhealthy: Option<String>,
    /// Why the last append failed, when the store retries appends (etcd): cleared by the next
    /// append that lands.
    append_failure: Option<String>,
    /// Why the heartbeat thread's last append failed, as the loop saw it at its last step (so
    /// that health turns ok only once a step followed the log past the heartbeat that landed).
    heartbeat_failure: Option<String>,
    /// A batch whose append failed and is retried, alone and as it was, before anything else.
    unappended: Option<Vec<Event>>,
    /// Why the last head confirmation failed (fail-closed): cleared by the next that succeeds.
    head_failure: Option<String>,
    /// The view's applied events at the last snapshot this agent wrote (or at start).
    snapshot_events: u64,
    /// The stamper and what the heartbeat thread is told (`runner/heartbeat.rs`).
    beat: Arc<heartbeat::Beat>,
    /// The heartbeat thread, once the first step is done.
    beater: Option<heartbeat::Beater>,
    /// Delays put into the loop on purpose by tests (`runner/slow.rs`).
    slow: slow::Slow,
    /// The names of this agent's nodes.
    own_nodes: BTreeSet<String>,
    /// Why the store cannot be written any more (a failed commit poisons it): sticky, unlike a
    /// log that could not be read a moment ago. The agent does not act and says so until it is
    /// restarted.
    store_failed: Option<String>,
    shutting_down: bool,
    identity_dirty: bool,
    summary: RunSummary,
    heartbeat_interval: Duration,
    requeue_interval: Duration,
    /// Nodes to freeze right after their next reconcile ([`Control::FreezeAfterReconcile`]).
    freeze_after_reconcile: BTreeSet<usize>,
    /// keepalived's reports, when the config has a `vrrp` section.
    vrrp: Option<mpsc::Receiver<VrrpReport>>,
    /// The VRRP state this agent last queued for its nodes.
    vrrp_state: Option<VrrpState>,
    /// keepalived's authority acted on without the log, and the local withdrawal's channels
    /// (`runner/withdraw.rs`), when the config has a `vrrp` section.
    local: Option<withdraw::Local>,
    /// The log's history (`GET /v1/history`), folded as the log is followed (`runner/history.rs`).
    history: History,
    /// When announcements of held addresses are repeated (`runner/refresh.rs`).
    refresh: refresh::RefreshSchedule,
}

/// Sleeps until `at`, or forever when there is nothing to wait for.
async fn sleep_until_or_never(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Waits for `notify`, or forever when there is none.
async fn notified_or_never(notify: Option<&tokio::sync::Notify>) {
    match notify {
        Some(notify) => notify.notified().await,
        None => std::future::pending().await,
    }
}

/// The next message of `receiver`, or never when there is none.
async fn recv_or_never<T>(receiver: Option<&mut mpsc::Receiver<T>>) -> Option<T> {
    match receiver {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// The retry backoff of the agent's nodes: from the requeue interval (the retry interval before
/// there was a backoff), doubling per failed attempt, capped ([`RetryBackoff::from_base`]).
fn retry_backoff(requeue_interval: Duration) -> RetryBackoff {
    RetryBackoff::from_base(u64::try_from(requeue_interval.as_millis()).unwrap_or(u64::MAX))
}

/// Milliseconds since the Unix epoch by this host's clock.
fn wall_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Runs the agent until `shutdown` completes, then stops taking new work, lets the calls in
/// flight finish or time out, records their results and returns. `reload` asks for the pool
/// files to be read again (SIGHUP).
pub async fn run<S: AgentStore>(
    store: S,
    settings: Settings,
    mut requests: Requests,
    mut reload: mpsc::Receiver<()>,
    observer: Arc<dyn Observe>,
    shutdown: impl Future<Output = ()>,
) -> Result<RunSummary, AgentError> {
    let mut agent = Agent::start(store, settings, observer)?;
    // Health probes during a long start are answered from here.
    requests.board().post(agent.health());
    let wanted = (agent.pools)().map_err(AgentError::Pools)?;
    if let Some(reason) = agent.store.refusal() {
        error!(%reason, "refusing the store: appending nothing, never acting");
        agent.store_failed = Some(reason);
    } else {
        let wanted = if agent.store.shared_log() {
            let deleted: BTreeSet<String> = agent
                .view()
                .pools()
                .iter()
                .filter(|(_, p)| p.deleted)
                .map(|(name, _)| name.clone())
                .collect();
            let (seed, differing) = seed_pools(&agent.applied_pools(), &deleted, &wanted);
            if !differing.is_empty() {
                warn!(
                    pools = %differing.join(", "),
                    "these pools differ between this router's pool files and the fleet's log: the log's \
                     version is in force (a reload, SIGHUP, applies this router's files to the whole fleet)"
                );
            }
            seed
        } else {
            wanted
        };
        agent.apply_pools(&wanted).map_err(AgentError::Pools)?;
        // No step before keepalived's state is known.
        agent.vrrp_settle().await;
        for driver in &agent.drivers {
            agent.queued.push(EventKind::Heartbeat { node: driver.name().to_owned() });
        }
    }
    agent.step(true);

    // Heartbeats from now on go out on their own thread, whatever a step is doing.
    agent.turned();
    match heartbeat::Beater::start(agent.store.clone(), Arc::clone(&agent.beat), agent.heartbeat_interval) {
        Ok(beater) => agent.beater = Some(beater),
        Err(e) => return Err(AgentError::Setting(format!("cannot start the heartbeat thread: {e}"))),
    }
    let mut requeue = tokio::time::interval(agent.requeue_interval.max(Duration::from_millis(1)));
    requeue.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut identity = tokio::time::interval(IDENTITY_FLUSH_INTERVAL);
    identity.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    let log_changed = agent.store.log_changed();
    let board = requests.board();
    let mut reload_open = true;
    let mut requests_open = true;
    loop {
        // What `GET /v1/health` answers while the loop is busy (in a step, waiting on its log).
        board.post(agent.health());
        agent.turned();
        let mut dirty = false;
        let mut requeue_due = false;
        tokio::select! {
            () = &mut shutdown, if !agent.shutting_down => {
                info!(in_flight = agent.calls.len(), "shutting down: no new work; waiting for calls in flight");
                agent.shutting_down = true;
                agent.beat.stop();
            }
            Some(done) = agent.calls.join_next_with_id(), if !agent.calls.is_empty() => {
                agent.finish_call(done);
                while let Some(done) = agent.calls.try_join_next_with_id() {
                    agent.finish_call(done);
                }
                // A result rarely changes a plan: it unblocks the next verb of its address (the
                // engine's own index) and is appended; a failure is retried by the first sweep
                // after its backoff (`NodeDriver::reconcile_due` wakes the node then).
                // So a step after results reconciles only a node whose plan it changed (the view
                // moved while the call was in flight: `NodeDriver::reconcile_due`).
                agent.step(false);
            }
            request = requests.recv(), if requests_open => match request {
                Some(request) => dirty = agent.answer(request),
                // The API is gone: the agent keeps running until shutdown.
                None => requests_open = false,
            },
            signal = reload.recv(), if reload_open => match signal {
                Some(()) => {
                    agent.reload();
                    dirty = true;
                }
                None => reload_open = false,
            },
            // Heartbeats landed (the thread appended them): follow the log.
            () = agent.beat.landed.notified() => dirty = true,
            _ = requeue.tick() => {
                dirty = true;
                requeue_due = true;
            }
            () = sleep_until_or_never(agent.inventory.next()), if !agent.shutting_down => agent.start_inventories(),
            () = sleep_until_or_never(agent.refresh.next()), if !agent.shutting_down => agent.refresh_due(),
            Some(done) = agent.inventories.join_next_with_id(), if !agent.inventories.is_empty() => {
                dirty = agent.finish_inventory(done);
            }
            _ = identity.tick() => agent.flush_identity(),
            report = recv_or_never(agent.vrrp.as_mut()) => dirty = agent.vrrp_received(report),
            Some(done) = recv_or_never(agent.local.as_mut().map(|l| &mut l.withdrawals)) => {
                dirty = agent.withdrawn(done);
            }
            () = notified_or_never(log_changed.as_deref()) => dirty = true,
        }
        if dirty {
            agent.step(requeue_due);
            if requeue_due {
                // The interval runs from the end of a full pass: a pass longer than the interval
                // (a million addresses) must not be followed at once by another, or the loop
                // would do nothing else.
                requeue.reset();
            }
        }
        if agent.shutting_down && agent.calls.is_empty() {
            break;
        }
    }
    // No heartbeat after the last results (the thread is joined: an append under way ends first).
    agent.beat.stop();
    drop(agent.beater.take());
    agent.summary.appended += agent.beat.appended();
    agent.finish();
    Ok(agent.summary)
}

/// The projection of the empty log an agent follows: its nodes and its peers (the whole fleet),
/// its providers, drift repair on. `tenure replay BACKUP` projects a backup's log over the same.
#[must_use]
pub fn registry(nodes: &[NodeSpec], peers: &[NodeSpec], providers: &[ProviderSpec]) -> Federation {
    let fleet: Vec<NodeSpec> = nodes.iter().chain(peers).cloned().collect();
    Federation::new(&fleet, providers).with_drift_repair(true)
}

impl<S: AgentStore> Agent<S> {
    fn start(store: S, settings: Settings, observer: Arc<dyn Observe>) -> Result<Self, AgentError> {
        let registry = registry(&settings.nodes, &settings.peers, &settings.providers);
        let mut drivers = Vec::with_capacity(settings.nodes.len());
        for node in &settings.nodes {
            let engine = NodeEngine::open(&node.name, store.journal(&node.name))
                .map_err(|e| AgentError::Journal { node: node.name.clone(), reason: e.to_string() })?
                .with_retention(settings.journal_retention)
                .with_retry_backoff(retry_backoff(settings.requeue_interval));
            drivers.push(NodeDriver::new(engine, registry.clone(), DriverOptions { report_results: true }));
        }
        let retries_appends = store.retries_appends();
        let mut agent = Self {
            history: History::new(registry),
            log: store.log(),
            store,
            drivers,
            executors: settings.executors,
            pools: settings.pools,
            observer,
            calls: JoinSet::new(),
            call_tasks: HashMap::new(),
            call_aborts: stale::CallAborts::default(),
            head_confirmed_at: None,
            queued: Vec::new(),
            queued_stamped: Vec::new(),
            inventories: JoinSet::new(),
            inventory: InventorySchedule::default(),
            recaptures_seen: 0,
            counters: Counters::default(),
            unhealthy: None,
            append_failure: None,
            unappended: None,
            heartbeat_failure: None,
            head_failure: None,
            snapshot_events: 0,
            beat: Arc::new(heartbeat::Beat::new(
                clock::Stamper::new(clock::PeerClocks::new(
                    settings.heartbeat_interval / 2,
                    CLOCK_VOTE_WINDOW,
                )),
                retries_appends,
            )),
            beater: None,
            slow: slow::Slow::from_env().map_err(AgentError::Setting)?,
            own_nodes: settings.nodes.iter().map(|n| n.name.clone()).collect(),
            store_failed: None,
            shutting_down: false,
            identity_dirty: true,
            summary: RunSummary::default(),
            freeze_after_reconcile: BTreeSet::new(),
            vrrp: None,
            vrrp_state: None,
            local: None,
            refresh: refresh::RefreshSchedule::default(),
            heartbeat_interval: settings.heartbeat_interval,
            requeue_interval: settings.requeue_interval,
        };
        agent.restore_snapshot().map_err(AgentError::Log)?;
        agent.follow().map_err(AgentError::Log)?;
        agent.snapshot_events = agent.view().events_applied();
        let own = agent.own_nodes.clone();
        let until = Instant::now() + agent.heartbeat_interval * 3;
        agent.beat.stamper().peers.baseline(
            agent.drivers.first().expect("the agent runs at least one node").view(),
            &own,
            until,
        );
        agent.recaptures_seen = agent.view().recaptures();
        if let Some(follow) = settings.vrrp {
            agent.vrrp = Some(follow.reports);
            agent.local = Some(agent.start_withdrawals(follow.authority));
        }
        let now = Instant::now();
        for (provider, executor) in &agent.executors {
            if let Some(interval) = executor.inventory_interval {
                agent.inventory.due.insert(provider.clone(), (interval, now));
            }
        }
        agent.refresh = refresh::RefreshSchedule::of(&agent.executors, now);
        Ok(agent)
    }

    /// Follows the log to its head with every node's driver. A log that cannot be read makes the
    /// agent unhealthy: it does not act until it can read the head again.
    fn follow(&mut self) -> Result<(), String> {
        if self.store_failed.is_none()
            && let Some(reason) = self.store.refusal()
        {
            error!(%reason, "refusing the store from now on: never acting until restarted");
            self.store_failed = Some(reason);
        }
        for index in 0..self.drivers.len() {
            let mut followed = self.drivers[index].follow(&self.log);
            // A node whose next record was compacted away (the watch fell behind an etcd
            // compaction) starts again from the store's newest snapshot.
            if matches!(followed, Err(LogError::Compacted { .. })) {
                self.restore_snapshot()?;
                followed = self.drivers[index].follow(&self.log);
            }
            if let Err(e) = followed {
                let reason = format!("cannot follow the log: {e}");
                if self.unhealthy.as_deref() != Some(reason.as_str()) {
                    error!(%reason, "not acting");
                }
                self.unhealthy = Some(reason.clone());
                return Err(reason);
            }
        }
        self.unhealthy = None;
        self.beat.stamper().peers.observe(
            self.drivers.first().expect("the agent runs at least one node").view(),
            &self.own_nodes,
            Instant::now(),
        );
        // Before the store may drop the records the nodes applied (an etcd fleet's store trims
        // what every node followed: read after it, the history would find them gone).
        self.follow_history();
        if let Some(upto) = self.drivers.iter().map(NodeDriver::applied_index).min().flatten() {
            self.store.followed(upto);
        }
        self.after_follow();
        Ok(())
    }

    /// Starts every node's view from the store's newest snapshot when it has one and a node has
    /// not applied that far (at start, or after a compaction it fell behind).
    fn restore_snapshot(&mut self) -> Result<(), String> {
        let Some((index, bytes)) = self.store.snapshot() else { return Ok(()) };
        for driver in &mut self.drivers {
            if driver.applied_index().is_some_and(|applied| applied >= index) {
                continue;
            }
            driver
                .restore_snapshot(&bytes, index)
                .map_err(|e| format!("cannot start from the log's snapshot at index {index}: {e}"))?;
            info!(node = driver.name(), index = index.get(), "started from the log's snapshot");
        }
        Ok(())
    }

    /// Hands the store a snapshot of the view when `snapshotEvery` events were applied since the
    /// last one this agent took (every agent does; the store keeps the newest, and agents that
    /// project the same log write the same bytes). The store writes it in the background.
    fn maybe_snapshot(&mut self) {
        let Some(every) = self.store.snapshot_every() else { return };
        let events = self.view().events_applied();
        if events < self.snapshot_events.saturating_add(every) || self.store_failed.is_some() {
            return;
        }
        let Some(applied) = self.drivers.iter().map(NodeDriver::applied_index).min().flatten() else {
            return;
        };
        let driver =
            self.drivers.iter().find(|d| d.applied_index() == Some(applied)).expect("the min is one of them");
        let bytes = driver.view().snapshot();
        let size = bytes.len();
        self.snapshot_events = events;
        match self.store.write_snapshot(applied, driver.view().events_applied(), bytes) {
            Ok(()) => debug!(events, bytes = size, "log snapshot handed to the store"),
            Err(e) => warn!(error = %e, "cannot write the log's snapshot; trying again later"),
        }
    }

    /// The view all nodes share (they follow the same log).
    fn view(&self) -> &Federation {
        self.drivers.first().expect("the agent runs at least one node").view()
    }

    /// The `at` of a new event ([`clock::Stamper::stamp`]; the heartbeat thread stamps with the
    /// same stamper).
    fn stamp(&mut self) -> u64 {
        self.beat.stamper().stamp(wall_clock_ms(), Instant::now())
    }

    /// Appends `kinds` in one durable commit. Returns the index of each, or why not.
    /// An operator's or the pool files' events: appended after any batch kept for a retry, and
    /// never kept for a retry themselves (a caller told "unavailable" must not see them land
    /// later).
    fn append(&mut self, kinds: Vec<EventKind>) -> Result<Vec<u64>, String> {
        self.retry_unappended()?;
        self.append_with(Vec::new(), kinds, false)
    }

    /// Appends the batch kept from a failed append, alone and as it was; `Err` while it does not
    /// land (it stays kept).
    fn retry_unappended(&mut self) -> Result<(), String> {
        match self.unappended.take() {
            Some(events) => self.commit(events, true).map(drop),
            None => Ok(()),
        }
    }

    /// Appends `stamped` (as they are) and then `kinds` (stamped now) in one durable commit.
    /// With `keep`, a batch that could not be appended to a store that retries is kept and
    /// appended again, alone and unchanged, before anything else.
    fn append_with(
        &mut self,
        mut events: Vec<Event>,
        kinds: Vec<EventKind>,
        keep: bool,
    ) -> Result<Vec<u64>, String> {
        if events.is_empty() && kinds.is_empty() {
            return Ok(Vec::new());
        }
        if !kinds.is_empty() {
            let at_ms = self.stamp();
            events.extend(kinds.into_iter().map(|kind| Event { at_ms, kind }));
        }
        self.commit(events, keep)
    }

    fn commit(&mut self, events: Vec<Event>, keep: bool) -> Result<Vec<u64>, String> {
        self.slow.append();
        match self.store.append_batch(&events) {
            Ok(indices) => {
                self.summary.appended += events.len() as u64;
                self.identity_dirty = true;
                self.append_failure = None;
                Ok(indices.into_iter().map(|i| i.get()).collect())
            }
            Err(e @ LogError::Unavailable { .. }) if self.store.retries_appends() => {
                let reason = format!("cannot append to the log: {e}");
                if self.append_failure.as_deref() != Some(reason.as_str()) {
                    error!(%reason, keep, "append failed");
                }
                self.append_failure = Some(reason.clone());
                if keep {
                    self.unappended = Some(events);
                }
                Err(reason)
            }
            // A request's events (a pool reload, an operator's request) that the store will not
            // hold — a record over its size limit, an event the codec refuses — were refused
            // before anything was written: the request is refused, the store is as it was.
            Err(e @ (LogError::TooLarge { .. } | LogError::Rejected(_))) if !keep => {
                let reason = format!("not appended, the store is unchanged: {e}");
                warn!(%reason, "request refused");
                Err(reason)
            }
            Err(e) => {
                let reason = format!("cannot append to the log: {e}");
                error!(%reason);
                self.store_failed.get_or_insert_with(|| reason.clone());
                Err(reason)
            }
        }
    }

    /// Appends what is queued (the first heartbeats, keepalived's state, inventory news) and
    /// every node's outbox (action results). A batch whose append failed goes first, alone and
    /// unchanged (so it lands once); while it does not land, nothing else is appended (the
    /// heartbeat thread waits too: [`Self::turned`]).
    fn flush_appends(&mut self) {
        if self.store_failed.is_none()
            && let Some(reason) = self.beat.failure()
        {
            self.store_failed = Some(reason);
        }
        if self.store_failed.is_some() {
            // A failed or refused store takes nothing more.
            self.queued.clear();
            self.beat.stop();
            return;
        }
        let mut kinds = std::mem::take(&mut self.queued);
        for driver in &mut self.drivers {
            while let Some(kind) = driver.poll_append() {
                kinds.push(kind);
            }
        }
        if self.retry_unappended().is_err() {
            self.queued = kinds;
            return;
        }
        let stamped = std::mem::take(&mut self.queued_stamped);
        let _ = self.append_with(stamped, kinds, true);
    }

    /// Applies the pool files' set: the ordered events of [`plan_pool_changes`]. A rejected one
    /// is reported (the set was checked as a whole, so it should not happen).
    fn apply_pools(&mut self, wanted: &[PoolSpec]) -> Result<(), Vec<String>> {
        let applied = self.applied_pools();
        let plan = plan_pool_changes(&applied, wanted);
        if plan.is_empty() {
            return Ok(());
        }
        info!(events = plan.len(), "applying pool changes");
        // Said once the events are in the log, one line per pool event, by name.
        let said: Vec<(String, Option<usize>, &'static str)> = plan
            .iter()
            .filter_map(|kind| match kind {
                EventKind::PoolDeleted { pool } => Some((pool.clone(), None, "pool deleted")),
                EventKind::PoolApplied { spec } if !wanted.contains(&**spec) => Some((
                    spec.name.clone(),
                    Some(spec.addresses.len()),
                    "pool shrunk first (lets addresses go before another pool takes them)",
                )),
                EventKind::PoolApplied { spec } => {
                    Some((spec.name.clone(), Some(spec.addresses.len()), "pool applied"))
                }
                _ => None,
            })
            .collect();
        self.append(plan).map_err(|e| vec![e])?;
        for (pool, addresses, what) in said {
            match addresses {
                Some(addresses) => info!(%pool, addresses, "{what}"),
                None => info!(%pool, "{what}"),
            }
        }
        Ok(())
    }

    /// The pools the log has applied now (not deleted), by name.
    fn applied_pools(&self) -> BTreeMap<String, PoolSpec> {
        self.view()
            .pools()
            .iter()
            .filter(|(_, p)| !p.deleted)
            .map(|(name, p)| (name.clone(), p.spec.as_ref().clone()))
            .collect()
    }

    /// SIGHUP: reads the pools again ([`super::Settings::pools`]: for the agent, the config's
    /// `pools` list and the pool files); a bad config or pool file changes nothing and is
    /// reported.
    fn reload(&mut self) {
        match (self.pools)() {
            Ok(wanted) => {
                if let Err(lines) = self.apply_pools(&wanted) {
                    error!(errors = %lines.join("; "), "pool reload not applied");
                }
            }
            Err(lines) => {
                *self.counters.rejected_events.entry("pool-reload".to_owned()).or_insert(0) += 1;
                for line in &lines {
                    error!(error = %line, "pool reload refused: nothing applied");
                }
            }
        }
    }

    /// One step: append, follow, reconcile, gate, call. A node reconciles when `requeue` says
    /// so (the requeue interval: a journal over its bound) or when its view changed what it plans
    /// from, or a failed action's backoff ended ([`NodeDriver::reconcile_due`]); a heartbeat alone
    /// does not re-plan 100k addresses.
    fn step(&mut self, requeue: bool) {
        self.slow.step();
        self.heartbeat_failure = self.beat.last_error();
        self.flush_appends();
        // Whatever the log does (an unreachable etcd must not stop a local withdrawal).
        self.withdraw_if_due();
        if self.follow().is_err() {
            return;
        }
        for index in 0..self.drivers.len() {
            if !requeue
                && !self.drivers[index].reconcile_due()
                && !self.freeze_after_reconcile.contains(&index)
            {
                continue;
            }
            let started = Instant::now();
            let driver = &mut self.drivers[index];
            match driver.reconcile_at_head() {
                Ok(Ok(report)) => {
                    super::approval::log_waiting(driver, &report.imported);
                    if !report.swept.is_empty() {
                        info!(
                            node = driver.name(),
                            fenced = report.swept.len(),
                            "sweep fenced stale entries"
                        );
                    }
                    for key in &report.counted {
                        warn!(
                            node = driver.name(),
                            key,
                            "an acquire whose outcome is unknown went stale: counted as held, its release is planned"
                        );
                    }
                }
                Ok(Err(blocked)) => debug!(node = driver.name(), "reconcile: {}", blocked.as_str()),
                Err(e) => self.journal_failed(index, &e),
            }
            self.observer.reconcile(started.elapsed());
            let driver = &mut self.drivers[index];
            if let Err(e) = driver.start_execution_at_head() {
                self.journal_failed(index, &e);
            }
        }
        for index in std::mem::take(&mut self.freeze_after_reconcile) {
            self.drivers[index].pause();
            warn!(node = self.drivers[index].name(), "frozen: no heartbeats, no reconcile, no calls");
        }
        // The reconcile may have queued results the log has not confirmed yet.
        self.flush_appends();
        if self.follow().is_err() || self.shutting_down {
            self.record_highest_token();
            return;
        }
        // The addresses under VRRP authority as the view now has them, before any add of them
        // starts.
        self.withdraw_if_due();
        if !self.start_calls_at_confirmed_head(0..self.drivers.len()) {
            self.record_highest_token();
            return;
        }
        self.record_highest_token();
        self.maybe_snapshot();
        self.burst_if_due();
        let recaptures = self.view().recaptures();
        if recaptures > self.recaptures_seen {
            warn!(
                recaptures = recaptures - self.recaptures_seen,
                "drift: inventory contradicted a confirmed execution; re-captured (fresh epochs, fresh actions)"
            );
            self.recaptures_seen = recaptures;
        }
    }

    /// The one way calls start: when any of `nodes` has an action ready, the log head is
    /// confirmed first ([`Self::confirm_head`]), then their ready actions are gated and called.
    /// `false`: the head could not be confirmed and nothing was called.
    fn start_calls_at_confirmed_head(&mut self, nodes: std::ops::Range<usize>) -> bool {
        if self.drivers[nodes.clone()].iter().any(NodeDriver::has_ready_actions) {
            if !self.confirm_head(true) {
                return false;
            }
        } else if self.head_failure.is_some() && self.store_failed.is_none() {
            // Nothing to call, but health still says fail-closed: confirm again so that it clears
            // once etcd answers (only while failed: a quiet agent reads nothing).
            self.confirm_head(false);
        }
        for index in nodes {
            self.start_calls(index);
        }
        true
    }

    /// Before a batch of provider calls: confirms the log head is current (the store's
    /// linearizable read; at once for the embedded store) within half the smallest heartbeat TTL
    /// of the applied pools, then follows to it. `false`: the agent does not act now and says why.
    /// `before_calls`: a batch of calls waits on it (only those refusals are counted in
    /// `tenure_head_unconfirmed_total`; a check that only clears health is not).
    fn confirm_head(&mut self, before_calls: bool) -> bool {
        let bound = self
            .view()
            .pools()
            .values()
            .filter(|p| !p.deleted)
            .map(|p| p.spec.heartbeat_ttl_ms / 2)
            .min()
            .map_or(HEAD_CONFIRM_BOUND_DEFAULT, Duration::from_millis)
            .max(Duration::from_millis(1));
        let asked = Instant::now();
        match self.store.confirm_head(bound) {
            Ok(()) => {
                self.head_confirmed_at = Some(asked);
                if self.head_failure.take().is_some() {
                    info!("the log head is confirmed again: acting");
                }
                self.follow().is_ok()
            }
            Err(HeadUnconfirmed::Behind(reason)) => {
                self.counters.head_unconfirmed += u64::from(before_calls);
                let reason = format!(
                    "fail-closed: cannot confirm the log head within {} ms: {reason}",
                    bound.as_millis()
                );
                if self.head_failure.as_deref() != Some(reason.as_str()) {
                    warn!(%reason, "not acting");
                }
                self.head_failure = Some(reason);
                false
            }
            Err(HeadUnconfirmed::Refused(reason)) => {
                self.counters.head_unconfirmed += u64::from(before_calls);
                error!(%reason, "not acting until restarted");
                self.head_failure = None;
                self.store_failed.get_or_insert(reason);
                false
            }
        }
    }

    /// Starts the inventory reads that are due, one per provider at a time, each bounded by the
    /// provider's call timeout. Not while the agent cannot append what they would find.
    fn start_inventories(&mut self) {
        let now = Instant::now();
        let due: Vec<String> = self
            .inventory
            .due
            .iter()
            .filter(|(p, (_, at))| *at <= now && !self.inventory.reading(p))
            .map(|(p, _)| p.clone())
            .collect();
        for provider in due {
            let (interval, _) = self.inventory.due[&provider];
            if self.unhealthy.is_some() || self.store_failed.is_some() {
                self.inventory.due.insert(provider, (interval, now + interval));
                continue;
            }
            let Some(executor) = self.executors.get(&provider).cloned() else { continue };
            let view = self.view();
            let addresses: Vec<std::net::IpAddr> = view
                .pools()
                .values()
                // Every address a pool of the provider lists or listed (deleted pools and
                // addresses included): what the federation keeps observations of.
                .filter(|pool| pool.spec.provider == provider)
                .flat_map(|pool| pool.addresses.keys().copied())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let nics: Vec<String> = view
                .nodes()
                .iter()
                .filter(|node| node.spec.provider == provider)
                .map(|node| node.spec.nic.clone())
                .collect();
            let own_nics: Vec<String> = view
                .nodes()
                .iter()
                .filter(|node| node.spec.provider == provider && self.own_nodes.contains(&node.spec.name))
                .map(|node| node.spec.nic.clone())
                .collect();
            // A read that sees only this host's NICs speaks of nothing else (a scoped event).
            let scope = executor.executor.inventory_sees_only_own_nics().then(|| own_nics.clone());
            if scope.as_ref().is_some_and(Vec::is_empty) {
                info!(%provider, "no node of this agent on this provider: its inventory sees only its own host; not read");
                self.inventory.due.remove(&provider);
                continue;
            }
            // One reader per provider for a read of the whole provider (`Federation::
            // inventory_reader`); every agent while the log names none, and a read asked for at
            // once (`read_now`) by the agent that asked.
            let reader = view.inventory_reader(&provider).map(str::to_owned);
            let urgent = self.inventory.urgent.remove(&provider);
            if scope.is_none() {
                let ours = reader.as_ref().is_none_or(|r| self.own_nodes.contains(r));
                if self.inventory.reader_seen(&provider, reader.as_deref()) {
                    let shown = reader.as_deref().unwrap_or("none alive: every agent reads");
                    info!(%provider, reader = shown, ours, "inventory reader");
                }
                if !ours && !urgent {
                    self.inventory.due.insert(provider, (interval, now + interval));
                    continue;
                }
            }
            let started_at_ms = self.stamp();
            // A read of many addresses is several paginated calls: it may take up to its
            // interval, and never less than one call's timeout.
            let deadline = now + executor.call_timeout.max(interval);
            let handle = self.inventories.spawn(async move {
                let request = InventoryRequest { addresses, nics, own_nics };
                let inventory = match executor.executor.inventory(&request) {
                    None => None,
                    Some(read) => Some(match tokio::time::timeout_at(deadline, read).await {
                        Ok(answer) => answer,
                        Err(_elapsed) => Err("no answer before the read's deadline".to_owned()),
                    }),
                };
                InventoryDone { started_at_ms, inventory, scope }
            });
            self.inventory.tasks.insert(handle.id(), provider);
        }
    }

    /// Queues what a read found that the log does not know yet ([`Federation::inventory_is_news`]:
    /// one event per change). Returns whether anything was queued.
    fn finish_inventory(
        &mut self,
        done: Result<(tokio::task::Id, InventoryDone), tokio::task::JoinError>,
    ) -> bool {
        let (id, done) = match done {
            Ok((id, done)) => (id, Ok(done)),
            Err(e) => (e.id(), Err(e)),
        };
        let Some(provider) = self.inventory.tasks.remove(&id) else { return false };
        self.inventory.reschedule(&provider);
        let done = match done {
            Ok(done) => done,
            Err(e) => {
                error!(error = %e, %provider, "an inventory read's task failed; read again at its interval");
                *self.counters.inventory_reads.entry((provider, "failed")).or_insert(0) += 1;
                return false;
            }
        };
        let Some(inventory) = done.inventory else {
            info!(%provider, "this provider's executor takes no inventory: drift repair is off for it");
            self.inventory.due.remove(&provider);
            return false;
        };
        match inventory {
            Ok(found) => {
                *self.counters.inventory_reads.entry((provider.clone(), "ok")).or_insert(0) += 1;
                self.inventory.last_failure.remove(&provider);
                let view = self.view();
                let news: Vec<Event> = found
                    .into_iter()
                    .filter(|(address, holders)| {
                        view.inventory_is_news(&provider, *address, holders, done.scope.as_deref())
                    })
                    .map(|(address, holders)| Event {
                        at_ms: done.started_at_ms,
                        kind: EventKind::Inventory {
                            provider: provider.clone(),
                            address,
                            holders,
                            scope: done.scope.clone(),
                        },
                    })
                    .collect();
                if news.is_empty() {
                    return false;
                }
                debug!(%provider, changes = news.len(), "inventory: appending what changed");
                // A newer read supersedes what an earlier one queued for the same addresses (while
                // appends fail, reads would otherwise pile up the same news).
                let addresses: BTreeSet<IpAddr> = news
                    .iter()
                    .filter_map(|e| match &e.kind {
                        EventKind::Inventory { address, .. } => Some(*address),
                        _ => None,
                    })
                    .collect();
                self.queued_stamped.retain(|e| {
                    !matches!(&e.kind, EventKind::Inventory { provider: p, address, .. }
                        if *p == provider && addresses.contains(address))
                });
                self.queued_stamped.extend(news);
                true
            }
            Err(reason) => {
                *self.counters.inventory_reads.entry((provider.clone(), "failed")).or_insert(0) += 1;
                if self.inventory.last_failure.get(&provider) == Some(&reason) {
                    debug!(%provider, %reason, "inventory read failed (as before)");
                } else {
                    warn!(%provider, %reason, "inventory read failed; drift repair waits for the next read");
                    self.inventory.last_failure.insert(provider, reason);
                }
                false
            }
        }
    }

    fn journal_failed<E: std::error::Error>(&mut self, index: usize, error: &E) {
        let reason = format!("node `{}`: journal: {error}", self.drivers[index].name());
        error!(%reason, "not acting");
        self.store_failed.get_or_insert(reason);
    }

    /// Gates a batch of node `index`'s ready actions against the head and spawns their calls.
    fn start_calls(&mut self, index: usize) {
        if self.store_failed.is_some() {
            return;
        }
        loop {
            let room = CALLS_IN_FLIGHT_MAX.saturating_sub(self.calls.len()).min(GATE_BATCH_MAX);
            if room == 0 {
                return;
            }
            let batch = match self.drivers[index].poll_actions_at_head_at(room, Some(wall_clock_ms())) {
                Ok(batch) => batch,
                Err(e) => {
                    self.journal_failed(index, &e);
                    return;
                }
            };
            if batch.is_empty() {
                return;
            }
            for action in batch {
                self.spawn_call(index, action, false);
            }
        }
    }

    /// Spawns the provider call of `action` (a refresh of its address with `refresh`).
    fn spawn_call(&mut self, node: usize, action: StampedAction, refresh: bool) {
        let refresh = refresh.then_some(action.address);
        let Some(provider) = self.executors.get(&action.provider).cloned() else {
            let reason = format!("no executor for provider `{}` in this agent", action.provider);
            warn!(key = %action.idempotency_key, %reason);
            let task = CallTask { node, key: action.idempotency_key, provider: action.provider, refresh };
            self.end_call(&task, &ExecutionOutcome::Failed { reason });
            return;
        };
        self.summary.calls += 1;
        debug!(node = self.drivers[node].name(), key = %action.idempotency_key, "calling the provider");
        let deadline = self.call_deadline(provider.call_timeout);
        let task = CallTask {
            node,
            key: action.idempotency_key.clone(),
            provider: action.provider.clone(),
            refresh,
        };
        let authority = self.guarding(&action);
        let key = action.idempotency_key.clone();
        let handle = self.calls.spawn(async move {
            let started = Instant::now();
            let call = execute_within(&*provider.executor, &action, deadline);
            let outcome = match authority {
                Some(authority) => authority.guard(call).await,
                None => call.await,
            };
            CallDone {
                node,
                key: action.idempotency_key,
                provider: action.provider,
                refresh,
                outcome,
                elapsed: started.elapsed(),
            }
        });
        self.call_tasks.insert(handle.id(), task);
        self.call_aborts.track(node, key, handle);
    }

    fn finish_call(&mut self, done: Result<(tokio::task::Id, CallDone), tokio::task::JoinError>) {
        match done {
            Ok((id, done)) => {
                self.call_tasks.remove(&id);
                // Finished before a cancellation took effect: its own outcome stands.
                let _ = self.call_aborts.finished(done.node, &done.key, id);
                self.observer.executor_call(&done.provider, done.elapsed);
                let task = CallTask {
                    node: done.node,
                    key: done.key,
                    provider: done.provider,
                    refresh: done.refresh,
                };
                self.end_call(&task, &done.outcome);
            }
            // A call task panicked (an executor's bug) or was cancelled: the provider may have
            // acted. Recorded as `unknown`, as a call past its deadline is: the entry leaves
            // flight and the address is free for the gate's next decision.
            Err(e) => {
                let Some(task) = self.call_tasks.remove(&e.id()) else {
                    error!(error = %e, "a provider call task failed; its call is unknown to the loop");
                    return;
                };
                if let Some(stale) = self.call_aborts.finished(task.node, &task.key, e.id())
                    && e.is_cancelled()
                {
                    self.end_call(&task, &Self::cancelled_outcome(stale));
                    return;
                }
                error!(error = %e, key = %task.key, provider = %task.provider, "a provider call task failed; recorded as unknown");
                let reason = format!("the call's task failed: {e}");
                self.end_call(&task, &ExecutionOutcome::Unknown { reason });
            }
        }
    }

    /// A call ended with `outcome`: a journaled call's result is recorded, a refresh's ends in
    /// the engine.
    fn end_call(&mut self, task: &CallTask, outcome: &ExecutionOutcome) {
        match task.refresh {
            Some(address) => self.refresh_ended(task.node, &task.provider, address, outcome),
            None => self.record_result(task.node, &task.key, outcome),
        }
    }

    fn record_result(&mut self, node: usize, key: &str, outcome: &ExecutionOutcome) {
        let (outcome_kind, detail) = outcome.for_journal();
        match outcome {
            ExecutionOutcome::Executed { .. } => info!(node = self.drivers[node].name(), key, "executed"),
            ExecutionOutcome::Failed { reason } | ExecutionOutcome::Unknown { reason } => {
                warn!(node = self.drivers[node].name(), key, %reason, "call failed");
            }
        }
        let recorded = match outcome {
            ExecutionOutcome::Unknown { reason } => self.drivers[node].handle_in_doubt_result(key, reason),
            _ => self.drivers[node].handle_result(key, outcome_kind, detail),
        };
        if let Err(e) = recorded {
            match e {
                NodeError::NotInFlight(_) => warn!(key, "result of a call no longer in flight: ignored"),
                other => self.journal_failed(node, &other),
            }
        }
    }

    /// Tells the heartbeat thread the loop turned: which nodes beat (not a frozen one), and
    /// whether a failed batch waits for its retry.
    fn turned(&self) {
        let nodes = self.drivers.iter().filter(|d| !d.is_paused()).map(|d| d.name().to_owned()).collect();
        self.beat.turned(nodes, self.unappended.is_some());
    }

    fn record_highest_token(&mut self) {
        self.store.record_highest_token(self.view().highest_token());
    }

    fn flush_identity(&mut self) {
        if !self.identity_dirty {
            return;
        }
        match self.store.flush_identity() {
            Ok(()) => self.identity_dirty = false,
            Err(e) => error!(error = %e, "cannot write the identity file"),
        }
    }

    /// The end of a run: results recorded, journals synced, identity written.
    fn finish(&mut self) {
        self.flush_appends();
        for index in 0..self.drivers.len() {
            if let Err(e) = self.drivers[index].engine_mut().store_mut().sync() {
                self.journal_failed(index, &e);
            }
        }
        self.identity_dirty = true;
        self.flush_identity();
        info!(calls = self.summary.calls, appended = self.summary.appended, "stopped");
    }
}
