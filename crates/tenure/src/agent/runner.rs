//! The agent loop: [`run`]. See the module documentation of [`super`] for the walk of one step.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tenure_core::driver::{DriverOptions, NodeDriver};
use tenure_core::federation::Federation;
use tenure_core::federation::history::History;
use tenure_core::journal::JournalStore;
use tenure_core::log::{Event, EventKind};
use tenure_core::log_store::LogError;
use tenure_core::model::{NodeSpec, ProviderSpec, VrrpState};
use tenure_core::node::NodeEngine;
use tenure_core::retry::RetryBackoff;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{debug, error, info, warn};

use super::answers::Counters;
use super::keepalived::VrrpReport;
use super::pools::seed_pools;
use super::request::Requests;
use super::{AgentStore, HeadUnconfirmed, ProviderExecutor, Settings};

mod appends;
mod calls;
mod clock;
mod heartbeat;
mod history;
mod inventory;
mod refresh;
mod requests;
mod slow;
mod stale;
mod vrrp;
mod withdraw;

use calls::{CallDone, CallTask};
use inventory::{InventoryDone, InventorySchedule};

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
    /// A thread the agent needs could not be started.
    #[error("{0}")]
    Thread(String),
}

/// What a run did, reported when it ends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// Provider calls made.
    pub calls: u64,
    /// Events appended by this run.
    pub appended: u64,
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
    /// A batch whose append failed and is retried, alone and as it was, before anything else of
    /// the loop (heartbeats go on: [`AgentStore::append_heartbeats`]).
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
    if agent.store_failed.is_some() {
        agent.beat.stop();
    }
    // Heartbeats from now on go out on their own thread, whatever a step is doing: the first
    // step too (a full pass over every address), which also appends the first ones itself.
    agent.turned();
    match heartbeat::Beater::start(agent.store.clone(), Arc::clone(&agent.beat), agent.heartbeat_interval) {
        Ok(beater) => agent.beater = Some(beater),
        Err(e) => return Err(AgentError::Thread(format!("cannot start the heartbeat thread: {e}"))),
    }
    agent.step(true);
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
        if agent.store_failed.is_none()
            && let Some(reason) = agent.beater.as_ref().and_then(heartbeat::Beater::died)
        {
            error!(%reason, "not acting until restarted");
            agent.store_failed = Some(reason);
        }
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
            match driver.reconcile() {
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
            if let Err(e) = driver.start_execution() {
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

    fn journal_failed<E: std::error::Error>(&mut self, index: usize, error: &E) {
        let reason = format!("node `{}`: journal: {error}", self.drivers[index].name());
        error!(%reason, "not acting");
        self.store_failed.get_or_insert(reason);
    }

    /// Tells the heartbeat thread the loop turned: which nodes beat (not a frozen one).
    fn turned(&self) {
        let nodes = self.drivers.iter().filter(|d| !d.is_paused()).map(|d| d.name().to_owned()).collect();
        self.beat.turned(nodes);
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
