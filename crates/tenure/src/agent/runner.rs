//! The agent loop: [`run`]. See the module documentation of [`super`] for the walk of one step.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tenure_core::agent::AgentCore;
use tenure_core::federation::history::History;
use tenure_core::log::{Event, EventKind};
use tenure_core::model::VrrpState;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{error, info};

use super::answers::Counters;
use super::keepalived::VrrpReport;
use super::request::Requests;
use super::{AgentStore, ProviderExecutor, Settings};

mod appends;
mod calls;
mod clock;
mod heartbeat;
mod inventory;
mod observe;
mod refresh;
mod requests;
mod slow;
mod stale;
mod start;
mod step;
mod vrrp;
mod wait;
mod withdraw;

use calls::{CallDone, CallTask};
use inventory::{InventoryDone, InventorySchedule};
use wait::{notified_or_never, recv_or_never, sleep_until_or_never};

/// Most provider calls in flight at once, across the agent's nodes.
pub const CALLS_IN_FLIGHT_MAX: usize = 256;

/// Most actions gated in one batch (one durable sync per batch): as many as may be in flight,
/// so that a step that has room for calls gates them with one sync (at 64, the loop capturing
/// 300k addresses was found waiting on `fdatasync` in a third of its samples: docs/decisions.md
/// "Issue 24: a node's pass under 10 µs an address").
pub const GATE_BATCH_MAX: usize = CALLS_IN_FLIGHT_MAX;

// A batch never holds more than may be in flight (`start_calls` takes the smaller of the two).
const _: () = assert!(GATE_BATCH_MAX <= CALLS_IN_FLIGHT_MAX);

/// When no pool names a heartbeat TTL, how long the agent waits to confirm the log head.
pub const HEAD_CONFIRM_BOUND_DEFAULT: Duration = Duration::from_secs(1);

/// How long another node's last heartbeat stamp still votes in the clock-lead rule.
pub const CLOCK_VOTE_WINDOW: Duration = Duration::from_secs(60);

/// How often the identity record is written while things change.
pub const IDENTITY_FLUSH_INTERVAL: Duration = Duration::from_secs(1);

pub use heartbeat::LOOP_STALL_MAX;
pub use observe::{NoObserver, Observe};
pub use requests::{REQUESTS_BETWEEN_STEPS_MAX, STARTING};
pub use step::REQUEUE_SLICE;

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
    /// This agent's nodes or peers cannot join the log's registry as configured (one line).
    #[error("{0}")]
    Membership(String),
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
    /// The nodes' drivers and the rules of a step: the core the simulator runs too
    /// ([`AgentCore`]). Its failure is sticky (a failed commit poisons the store, a log that went
    /// back is refused), unlike a log unreadable a moment ago: the agent does not act, and says
    /// so, until restarted.
    core: AgentCore<S::Journal>,
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
    /// Why the last append failed, when the store retries appends (etcd): cleared when one lands.
    append_failure: Option<String>,
    /// What the start is doing or waits for (its appends, an append etcd did not take, its first
    /// step), said in health until the first step is done: health is not ok before.
    starting: Option<start::Starting>,
    /// keepalived's state was settled at start (once, whatever the start's appends waited for).
    vrrp_settled: bool,
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
    /// What the store does, read at start ([`StoreCapabilities`](super::StoreCapabilities)).
    capabilities: super::StoreCapabilities,
    /// The stamper and what the heartbeat thread is told (`runner/heartbeat.rs`).
    beat: Arc<heartbeat::Beat>,
    /// The heartbeat thread, once the first step is done.
    beater: Option<heartbeat::Beater>,
    /// Delays put into the loop on purpose by tests (`runner/slow.rs`).
    slow: slow::Slow,
    /// The names of this agent's nodes.
    own_nodes: BTreeSet<String>,
    shutting_down: bool,
    identity_dirty: bool,
    summary: RunSummary,
    heartbeat_interval: Duration,
    requeue_interval: Duration,
    /// Planning is under way: a node has slices of a pass or changed positions left
    /// ([`NodeDriver::requeue_under_way`]): the loop comes back for them at once.
    requeue_pass: bool,
    /// The `node-registered` events found at start, appended by [`Agent::begin`] first.
    registering: Vec<tenure_core::log::EventKind>,
    /// keepalived's reports, when the config has a `vrrp` section.
    vrrp: Option<mpsc::Receiver<VrrpReport>>,
    /// The VRRP state this agent last queued for its nodes.
    vrrp_state: Option<VrrpState>,
    /// keepalived's authority acted on without the log, and the local withdrawal's channels
    /// (`runner/withdraw.rs`), when the config has a `vrrp` section.
    local: Option<withdraw::Local>,
    /// The log's history (`GET /v1/history`). It rides on the first node's view: that driver folds
    /// each record in as it applies it (`NodeDriver::follow_recording`), one projection for both.
    history: History,
    /// When announcements of held addresses are repeated (`runner/refresh.rs`).
    refresh: refresh::RefreshSchedule,
    /// The ownership map readers see ([`tenure_core::map_index`]): it follows the first node's
    /// view, and is posted on `board` after every follow and every step.
    map_index: tenure_core::map_index::MapIndex,
    /// A step is under way ([`Agent::step`]): its follows do not post the reads, its end does.
    in_step: bool,
    /// Each node's journal as readers see it ([`tenure_core::journal_index`]), in the drivers'
    /// order; posted with the map.
    journal_indexes: Vec<tenure_core::journal_index::JournalIndex>,
    /// Where the map and journals are posted for readers that never wait for the loop: the
    /// API's board once the first step is done (before it, one nobody reads).
    board: super::request::HealthBoard,
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
    // Health probes while the store opens and the log is followed are answered at once.
    requests.board().post(requests::starting(&settings.nodes));
    let mut agent = Agent::start(store, settings, observer)?;
    // Health probes during the rest of the start are answered from here.
    requests.board().post(agent.health());
    tokio::pin!(shutdown);
    if let start::Begun::ShutDown = agent.begin(&requests.board(), shutdown.as_mut()).await? {
        // SIGTERM while the start waited for etcd: nothing more is appended.
        info!("shutting down before the start completed: no step was taken");
        agent.beat.stop();
        return Ok(agent.summary);
    }
    // The start's appends are done (or refused): its last phase, until the first step ends.
    agent.starting = Some(start::Starting::FirstStep);
    // A SIGTERM while the start appended (looked at once here, never awaited): no first step,
    // which would start calls (an operator trial: 256 calls started after the signal).
    if std::future::poll_fn(|cx| std::task::Poll::Ready(shutdown.as_mut().poll(cx).is_ready())).await {
        info!("shutting down before the first step: no step was taken");
        agent.stop().await;
        return Ok(agent.summary);
    }
    requests.board().post(agent.health());
    agent.step().await;
    agent.starting = None;
    // Reads (the map, the journals) from here: before its first step the agent has not applied
    // its pools, and an empty map would say it holds nothing (a read waits for this post).
    agent.board = requests.board();
    requests.board().post(agent.health());
    agent.post_reads(true);
    let mut requeue = tokio::time::interval(agent.requeue_interval.max(Duration::from_millis(1)));
    requeue.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut identity = tokio::time::interval(agent.slow.identity_tick(IDENTITY_FLUSH_INTERVAL));
    identity.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let log_changed = agent.store.log_changed();
    let board = requests.board();
    let mut reload_open = true;
    let mut requests_open = true;
    loop {
        // What `GET /v1/health` answers while the loop is busy (in a step, waiting on its log).
        board.post(agent.health());
        agent.turned();
        if agent.core.failed().is_none()
            && let Some(reason) = agent.beater.as_ref().and_then(heartbeat::Beater::died)
        {
            error!(%reason, "not acting until restarted");
            agent.core.fail(reason);
        }
        let mut dirty = false;
        let taken = requests.taken();
        let pass_under_way = agent.core.pass_under_way();
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
                agent.step().await;
            }
            request = requests.recv(), if requests_open => match request {
                Some(request) => dirty = agent.answer(request).await,
                // The API is gone: the agent keeps running until shutdown.
                None => requests_open = false,
            },
            signal = reload.recv(), if reload_open => match signal {
                Some(()) => {
                    agent.reload().await;
                    dirty = true;
                }
                None => reload_open = false,
            },
            // Heartbeats landed (the thread appended them): follow the log.
            () = agent.beat.landed.notified() => dirty = true,
            _ = requeue.tick(), if !pass_under_way => {
                dirty = true;
                agent.begin_requeue();
            }
            // The next slice of a requeue pass. `select!` polls its ready branches in random
            // order, so requests, results and reports are taken between the slices.
            () = std::future::ready(()), if agent.requeue_pass && !agent.shutting_down => dirty = true,
            () = sleep_until_or_never(agent.inventory.next()), if !agent.shutting_down => agent.start_inventories(),
            () = sleep_until_or_never(agent.refresh.next()), if !agent.shutting_down => agent.refresh_due().await,
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
            agent.step().await;
        }
        if agent.answer_waiting(&mut requests).await {
            agent.step().await;
        }
        if pass_under_way && !agent.core.pass_under_way() {
            // The interval runs from the end of a pass (whichever step ended it): a pass longer
            // than the interval (a million addresses) is not followed at once by another.
            requeue.reset();
        }
        if agent.shutting_down && agent.calls.is_empty() {
            break;
        }
        // After a turn that answered a request, let the waiting task run: it sits in this worker's
        // LIFO slot, which no other worker steals, until this task yields, which `select!` never
        // does while results or slices keep a branch ready (pages waited 100–270 ms at 1M). Not
        // after every turn: that made a change's calls ~30 ms slower (docs/decisions.md).
        if requests.taken() != taken {
            tokio::task::yield_now().await;
        }
    }
    agent.stop().await;
    Ok(agent.summary)
}

pub use start::registry;
