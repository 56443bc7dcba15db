//! The one sans-IO driver of a node, shared by `replay`, the simulator and the agent.
//!
//! A [`NodeDriver`] owns what one node keeps in memory around its [`NodeEngine`]: its view of
//! the log (the prefix it applied), whether it is paused (a frozen process) or partitioned (it
//! cannot read the log head), what it had approved when it froze, and the outbox of log appends
//! it wants made (`action-result` events). It never calls out: the caller hands it the [`Log`]
//! to follow, calls the provider with what [`NodeDriver::poll_actions`] hands out, and appends
//! what [`NodeDriver::poll_append`] drains. There is one walk, and `replay`, the simulator and
//! the agent all make it through this one API:
//!
//! ```text
//! log ─► follow ─► reconcile (plan, import, sweep, compact) ─► start_execution (promote)
//!     ─► follow (to the confirmed head) ─► poll_actions (the gate, right before the calls)
//!     ─► provider ─► handle_result ─► poll_append ─► log
//! ```
//!
//! Every check of the driver (import, sweep, promote, the gate before the call, stale calls,
//! refreshes) reads the node's own view; there is no head-taking variant. Import, sweep and
//! promotion read the view as the last follow left it — on an etcd fleet the local replica, not
//! confirmed, and in the simulator perhaps a lagging one ([`NodeDriver::follow_at_most`]): it
//! plans from what it saw, as a real replica does. The gate before the calls is what must read
//! the head: the caller follows to a confirmed head right before [`NodeDriver::poll_actions`]
//! (the agent confirms it first: SPEC 6; replay and the simulator read their one log).
//!
//! The local-step rules of SPEC 13 live here: a partitioned node does nothing, not even a
//! sweep; a paused node ignores reconcile and execute; `resume` gates only what was approved
//! before the pause (the caller follows first: catching up changes no journal entry), without
//! planning; `restart` loses memory (the view, the
//! pause) but not the journal, nor a partition.
//!
//! Planning a slice at a time — a due plan, and the requeue's safety net — is
//! [`NodeDriver::requeue`] (`driver/requeue.rs`);
//! the node's life (pause, resume, restart, partition) is `driver/lifecycle.rs`.

use std::collections::{BTreeSet, VecDeque};
use std::net::IpAddr;

use crate::federation::Federation;
use crate::federation::history::History;
use crate::journal::{JournalSeq, JournalStore};
use crate::log::{ActionOutcome, Event, EventKind};
use crate::log_store::{LOG_READ_BATCH_MAX, Log, LogError, LogIndex};
use crate::model::{IdempotencyKey, ParsedKey, ProviderAddress, StampedAction};
use crate::node::{NodeEngine, NodeError, ReconcileReport, StaleCall};

mod due;
mod lifecycle;
mod requeue;
use due::PlannedAt;
pub use requeue::Requeued;

/// How long after a failure without a backoff (the on-prem verbs) the node plans again, in ms of
/// stream time ([`NodeDriver::reconcile_due`]): about one heartbeat interval.
pub const RETRY_WITHOUT_BACKOFF_MS: u64 = 1_000;

/// How a driver reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverOptions {
    /// Append an `action-result` event for every reported call, and re-report (the outbox of
    /// results) what the log has not confirmed at every reconcile. The agent and the simulator
    /// do; `replay` does not (SPEC 13).
    pub report_results: bool,
}

/// Why a local step did nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// The node cannot read the log head: it must not act.
    Partitioned,
    /// The node is frozen: it ignores reconcile and execute.
    Paused,
    /// `resume` of a node that is not paused.
    NotPaused,
}

impl Blocked {
    /// Why, in words.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Partitioned => "partitioned: cannot read the log head, does nothing",
            Self::Paused => "paused: ignored",
            Self::NotPaused => "not paused: nothing to do",
        }
    }
}

/// One node's driver.
#[derive(Debug)]
pub struct NodeDriver<S: JournalStore> {
    engine: NodeEngine<S>,
    /// The projection of the empty log over the registry: where a restarted view starts.
    registry: Federation,
    view: Federation,
    /// The index of the last record of the [`Log`] the view applied: the one cursor.
    applied_index: Option<LogIndex>,
    /// Events the view rejected (counted, never stopping the log).
    rejected: u64,
    paused: bool,
    partitioned: bool,
    approved_before_pause: BTreeSet<JournalSeq>,
    /// During a resume: the keys it may still gate (approved before the pause).
    zombie: Option<BTreeSet<JournalSeq>>,
    options: DriverOptions,
    outbox: VecDeque<EventKind>,
    /// What the last completed plan of everything planned from: see
    /// [`NodeDriver::whole_plan_due`].
    planned_at: Option<PlannedAt>,
    /// Positions the view named as changed, taken from it and not planned yet (more than a
    /// call's `max`): see [`NodeDriver::reconcile_due`].
    changed: BTreeSet<ProviderAddress>,
    /// The positions of releases held back by a deprovision hold, by the stream time the hold
    /// ends: named as changed then ([`NodeDriver::reconcile_due`]).
    holds: std::collections::BTreeMap<u64, BTreeSet<ProviderAddress>>,
    /// A pass of slices under way ([`NodeDriver::requeue`]); `None`: none.
    pass: Option<requeue::Pass>,
    /// The view's plan generation at the last promotion ([`NodeDriver::promotion_due`]).
    promoted_at: Option<u64>,
    /// Acquires that may have outrun a hand-over, seen while applying the log, until polled
    /// ([`NodeDriver::poll_outran_acquire`]). A set: one entry per (provider, address).
    outran: BTreeSet<OutranAcquire>,
}

/// An executed acquire that may have outrun a hand-over of its address
/// ([`Federation::acquire_outran_handover`]): the provider's inventory should be read at once.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct OutranAcquire {
    /// The provider whose inventory to read.
    pub provider: String,
    /// The address.
    pub address: std::net::IpAddr,
}

impl<S: JournalStore> NodeDriver<S> {
    /// A driver of `engine` over the empty log `registry` (nodes and providers known).
    #[must_use]
    pub fn new(engine: NodeEngine<S>, registry: Federation, options: DriverOptions) -> Self {
        Self {
            engine,
            view: registry.clone(),
            registry,
            applied_index: None,
            rejected: 0,
            paused: false,
            partitioned: false,
            approved_before_pause: BTreeSet::new(),
            zombie: None,
            options,
            outbox: VecDeque::new(),
            planned_at: None,
            changed: BTreeSet::new(),
            holds: std::collections::BTreeMap::new(),
            pass: None,
            promoted_at: None,
            outran: BTreeSet::new(),
        }
    }

    /// The node's name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.engine.name()
    }

    /// The engine.
    #[must_use]
    pub fn engine(&self) -> &NodeEngine<S> {
        &self.engine
    }

    /// The engine, for a caller that simulates its store's fate (see [`NodeEngine::store_mut`]).
    pub fn engine_mut(&mut self) -> &mut NodeEngine<S> {
        &mut self.engine
    }

    /// The node's view: the log prefix it applied.
    #[must_use]
    pub fn view(&self) -> &Federation {
        &self.view
    }

    /// Brings `index` up to the view ([`crate::map_index::MapIndex::follow`]: the rows the view
    /// says changed since the index last followed it). Returns how many rows it read.
    pub fn follow_map(&mut self, index: &mut crate::map_index::MapIndex) -> usize {
        index.follow(&mut self.view)
    }

    /// How many log events the view rejected (a malformed event never stops the log).
    #[must_use]
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    /// Whether the node is frozen.
    #[must_use]
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Whether a resume's zombie pass is under way (between [`NodeDriver::resume`] and
    /// [`NodeDriver::finish_resume`]): the process is awake, gating what it approved before it
    /// froze.
    #[must_use]
    pub fn is_resuming(&self) -> bool {
        self.zombie.is_some()
    }

    /// Whether the node is cut off from the log head.
    #[must_use]
    pub fn is_partitioned(&self) -> bool {
        self.partitioned
    }

    /// Applies one event to the view: a rejected one is counted (and `false` returned: nothing
    /// changed); an executed acquire that may have outrun a hand-over is noted for
    /// [`NodeDriver::poll_outran_acquire`].
    fn apply(&mut self, event: &Event) -> bool {
        if self.view.apply(event).is_err() {
            self.rejected += 1;
            return false;
        }
        if let EventKind::ActionResult { idempotency_key, outcome: ActionOutcome::Executed, .. } = &event.kind
            && let Some(key) = ParsedKey::parse(idempotency_key)
            && key.verb.is_acquire()
            && key.verb.changes_holding()
            && self.view.acquire_outran_handover(&key.pool, key.address)
        {
            self.outran.insert(OutranAcquire { provider: key.provider, address: key.address });
        }
        true
    }

    /// The next executed acquire, seen in the log since the last poll, that may have outrun a
    /// hand-over of its address (SPEC 9): the runtime reads the provider's inventory at once,
    /// so that drift repair sees what the late call did without waiting for the next read.
    pub fn poll_outran_acquire(&mut self) -> Option<OutranAcquire> {
        self.outran.pop_first()
    }

    /// Applies at most `max_records` records of `log` after the last one applied from it,
    /// `batch` per read (`usize::MAX` records: to the head; fewer: a replica that has not received
    /// the rest yet, the simulator's lagging view). Returns how many were applied. A record that
    /// does not decode stops it with the log's error (the view keeps what it applied before it): a
    /// node whose copy of the log cannot be trusted must not go on as if the record were not there.
    pub fn follow_at_most(
        &mut self,
        log: &impl Log,
        batch: usize,
        max_records: usize,
    ) -> Result<usize, LogError> {
        self.follow_into(log, batch, max_records, None)
    }

    /// The one follow loop: [`Self::follow_at_most`], folding each record into `history` too
    /// when there is one ([`Self::follow_recording`]).
    fn follow_into(
        &mut self,
        log: &impl Log,
        batch: usize,
        max_records: usize,
        mut history: Option<&mut History>,
    ) -> Result<usize, LogError> {
        let batch = batch.max(1);
        let mut applied = 0;
        while applied < max_records {
            let from = self.applied_index.map_or(LogIndex::FIRST, LogIndex::next);
            let records = log.read_from(from, batch.min(max_records - applied))?;
            if records.is_empty() {
                break;
            }
            for record in records {
                let stream_before_ms = self.view.stream_time_ms();
                let accepted = self.apply(&record.event);
                self.applied_index = Some(record.index);
                if let Some(history) = history.as_deref_mut() {
                    let view = accepted.then_some(&self.view);
                    history.record(record.index, &record.event, stream_before_ms, view);
                }
                applied += 1;
            }
        }
        Ok(applied)
    }

    /// Starts the view over again from `snapshot` ([`Federation::snapshot`] of a projection
    /// that applied every record of the log up to `applied`; the records before it were
    /// compacted away), restored over this driver's registry. The journal is untouched; the next
    /// reconcile plans afresh. A snapshot that does not restore changes nothing.
    pub fn restore_snapshot(
        &mut self,
        snapshot: &[u8],
        applied: LogIndex,
    ) -> Result<(), crate::federation::SnapshotError> {
        self.view = self.registry.restore(snapshot)?;
        self.applied_index = Some(applied);
        self.start_over();
        Ok(())
    }

    /// The index of the last record applied from a [`Log`], if any.
    #[must_use]
    pub fn applied_index(&self) -> Option<LogIndex> {
        self.applied_index
    }

    /// When reporting results: queues an `action-result` for every executed entry the log has
    /// not confirmed (the outbox of results).
    fn queue_unconfirmed(&mut self) {
        self.queue_unconfirmed_in((std::ops::Bound::Unbounded, std::ops::Bound::Unbounded));
    }

    /// [`Self::queue_unconfirmed`] for the (provider, address) keys in `window` (a requeue
    /// slice's part of the captured set).
    fn queue_unconfirmed_in(&mut self, window: crate::planner::KeyWindow) {
        if self.options.report_results {
            for key in self.engine.unconfirmed_results_in(&self.view, window) {
                self.outbox.push_back(EventKind::ActionResult {
                    node: self.name().to_owned(),
                    idempotency_key: key.into(),
                    outcome: ActionOutcome::Executed,
                    detail: "re-reported".to_owned(),
                });
            }
        }
    }

    /// Cut off from the log, or frozen outside a resume's zombie pass: no call starts, none is
    /// cancelled.
    fn frozen_or_cut_off(&self) -> bool {
        self.partitioned || (self.paused && self.zombie.is_none())
    }

    fn blocked(&self) -> Option<Blocked> {
        if self.partitioned {
            Some(Blocked::Partitioned)
        } else if self.paused {
            Some(Blocked::Paused)
        } else {
            None
        }
    }

    /// Follows `log` to its head: applies every record after the last one applied, in batches
    /// of [`LOG_READ_BATCH_MAX`]. Returns how many were applied. After it, the view holds every
    /// event appended before the call: for a log this process reads directly (the embedded
    /// store) the view **is** the head the fence gate must read.
    pub fn follow(&mut self, log: &impl Log) -> Result<usize, LogError> {
        self.follow_at_most(log, LOG_READ_BATCH_MAX, usize::MAX)
    }

    /// [`Self::follow`], folding every record applied into `history` from this view as it
    /// applied it (one projection of the log for both: the agent's history rides on its first
    /// node). A history that has not folded in exactly what this view applied — the view started
    /// over from a snapshot ([`Self::restore_snapshot`]) since the last follow — starts over after
    /// the view's last record first: the one place the two are kept together, so the history
    /// never holds a record twice or skips one, and reaches back only as far as the view.
    pub fn follow_recording(&mut self, log: &impl Log, history: &mut History) -> Result<usize, LogError> {
        if history.applied_index() != self.applied_index {
            history.restart_after(self.applied_index);
        }
        self.follow_into(log, LOG_READ_BATCH_MAX, usize::MAX, Some(history))
    }

    /// A local `reconcile` (plan, import, sweep, compact) against the node's own view as the
    /// head; then, when reporting results, queue what the log has not confirmed (the outbox of
    /// results). Follow the log first: the node plans from what it applied. A whole plan ends a
    /// [requeue](NodeDriver::requeue) pass under way.
    pub fn reconcile(&mut self) -> Result<Result<ReconcileReport, Blocked>, NodeError<S::Error>> {
        if let Some(blocked) = self.blocked() {
            return Ok(Err(blocked));
        }
        let report = self.engine.reconcile(&self.view, &self.view)?;
        self.pass = None;
        self.planned(&report);
        self.queue_unconfirmed();
        Ok(Ok(report))
    }

    /// The start of a local `execute`: pending entries the view (the head: follow first) shows
    /// approved are promoted. Then [`NodeDriver::poll_actions`] until it returns nothing.
    pub fn start_execution(&mut self) -> Result<Result<Vec<IdempotencyKey>, Blocked>, NodeError<S::Error>> {
        if let Some(blocked) = self.blocked() {
            return Ok(Err(blocked));
        }
        self.zombie = None;
        let promoted = self.engine.promote_approved(&self.view)?;
        self.promoted_at = Some(self.view.plan_generation());
        Ok(Ok(promoted))
    }

    /// Up to `max` actions that passed the gate against the node's own view an instant ago
    /// (follow the log to its confirmed head right before, so the view is the head), with one
    /// durable sync for the batch; each attempt recorded with `wall_ms`, the caller's wall clock
    /// (unix ms, read in `tenure actions`), when given. Empty when nothing is left or the node may
    /// not act (partitioned, or paused outside a resume's zombie pass).
    pub fn poll_actions(
        &mut self,
        max: usize,
        wall_ms: Option<u64>,
    ) -> Result<Vec<StampedAction>, NodeError<S::Error>> {
        if self.frozen_or_cut_off() {
            return Ok(Vec::new());
        }
        self.engine.poll_executions(&self.view, self.zombie.as_ref(), max, wall_ms)
    }

    /// The calls in flight that the fence rule refuses against the node's view now, each named
    /// once ([`NodeEngine::poll_stale_in_flight`]): the caller cancels them and reports each
    /// through [`NodeDriver::handle_in_doubt_result`] unless it finished first. Ask after every
    /// [`NodeDriver::follow`]. No head confirmation is needed to cancel: a view behind the head
    /// names fewer calls (epochs only grow), and a cancelled call that turns out current again (a
    /// release refused for another pool's sake) is only retried by a later sweep. Empty for a
    /// node that may not act (partitioned, or frozen: a frozen process cancels nothing); a
    /// resume's zombie pass is awake and cancels what its view now fences (the simulator found a
    /// call that landed after the pass's follow had fenced it).
    pub fn poll_stale_calls(&mut self) -> Vec<StaleCall> {
        if self.frozen_or_cut_off() {
            return Vec::new();
        }
        self.engine.poll_stale_in_flight(&self.view)
    }

    /// Up to `max` announcements to repeat for addresses this node holds, among those `wanted`
    /// accepts, each through the gate against the node's own view as the head (follow to a
    /// confirmed head right before; [`NodeEngine::poll_refreshes`]); report each back with
    /// [`NodeDriver::handle_refresh_result`]. Empty for a node that may not act (partitioned, or
    /// paused).
    pub fn poll_refreshes(
        &mut self,
        wanted: impl Fn(&str, IpAddr) -> bool,
        max: usize,
    ) -> Vec<StampedAction> {
        if self.blocked().is_some() {
            return Vec::new();
        }
        self.engine.poll_refreshes(&self.view, &self.view, wanted, max)
    }

    /// A refresh handed out by [`NodeDriver::poll_refreshes`] ended: nothing is journaled or
    /// reported (a refresh repeats an executed action). Returns whether it was in flight.
    pub fn handle_refresh_result(&mut self, provider: &str, address: IpAddr) -> bool {
        self.engine.handle_refresh_result(provider, address)
    }

    /// Whether [`NodeDriver::poll_actions`] would have something to gate: an entry ready
    /// for its call, on a node that may act.
    #[must_use]
    pub fn has_ready_actions(&self) -> bool {
        !(self.partitioned || (self.paused && self.zombie.is_none())) && self.engine.has_ready()
    }

    /// What the provider said about an action [`NodeDriver::poll_actions`] handed out.
    pub fn handle_result(
        &mut self,
        idempotency_key: &str,
        outcome: ActionOutcome,
        detail: String,
    ) -> Result<(), NodeError<S::Error>> {
        let seq = self.engine.handle_execution_result(idempotency_key, outcome, Some(detail.clone()))?;
        if outcome == ActionOutcome::Executed {
            let action = &self.engine.entry_at(seq).expect("a finished entry stays journaled").action;
            let (contradicts, released) = (self.result_contradicts_view(action), Self::released(action));
            if contradicts {
                self.plan_again();
            }
            self.changed.extend(released);
        }
        self.wake_for_retry(seq);
        self.report_result(idempotency_key, outcome, detail);
        Ok(())
    }

    /// A call whose outcome is unknown (cancelled in flight, past its deadline, its answer
    /// lost; `detail` says why): journaled `failed` and reported so; an acquire the view already
    /// fences is counted as held, and its release planned by the next reconcile
    /// ([`NodeEngine::handle_in_doubt_result`]).
    pub fn handle_in_doubt_result(
        &mut self,
        idempotency_key: &str,
        detail: &str,
    ) -> Result<(), NodeError<S::Error>> {
        let (seq, detail) = self.engine.handle_in_doubt_result(idempotency_key, detail, &self.view)?;
        self.wake_for_retry(seq);
        self.report_result(idempotency_key, ActionOutcome::Failed, detail);
        Ok(())
    }

    fn report_result(&mut self, idempotency_key: &str, outcome: ActionOutcome, detail: String) {
        if self.options.report_results {
            self.outbox.push_back(EventKind::ActionResult {
                node: self.name().to_owned(),
                idempotency_key: idempotency_key.to_owned(),
                outcome,
                detail,
            });
        }
    }

    /// A release the node made on its own authority, outside the gate (SPEC 7: keepalived says
    /// this host is not MASTER; the runtime removed the entry itself): journaled as executed
    /// ([`NodeEngine::record_local_release`]) and reported in the outbox like any result. Returns
    /// the keys recorded (none when the node had not captured the address or a call for it is in
    /// flight).
    pub fn record_local_release(
        &mut self,
        provider: &str,
        address: IpAddr,
        detail: &str,
    ) -> Result<Vec<IdempotencyKey>, NodeError<S::Error>> {
        let keys = self.engine.record_local_release(&self.view, provider, address, detail)?;
        if keys.is_empty() {
            return Ok(keys);
        }
        // What the node captured changed under the last plan.
        self.plan_again();
        if self.options.report_results {
            for key in &keys {
                self.outbox.push_back(EventKind::ActionResult {
                    node: self.name().to_owned(),
                    idempotency_key: key.to_string(),
                    outcome: ActionOutcome::Executed,
                    detail: detail.to_owned(),
                });
            }
        }
        Ok(keys)
    }

    /// Whether an executed holding verb left the node holding what its view no longer wants it
    /// to hold (an acquire of an address not desired for it any more, in any pool), or not
    /// holding what it wants (a release of an address desired for it again): the view moved
    /// while the call was in flight, and what it captured now differs from what the last
    /// reconcile planned from. The next step must plan again ([`NodeDriver::reconcile_due`]).
    /// Other results change no plan: their successor verb is in the journal already.
    fn result_contradicts_view(&self, action: &StampedAction) -> bool {
        if !action.verb.changes_holding() {
            return false;
        }
        let desired = self
            .view
            .node_id(self.name())
            .and_then(|node| self.view.desired_pool_of(node, &action.provider, action.address))
            .is_some();
        action.verb.is_acquire() != desired
    }

    /// The next log append this node wants made (the caller stamps `at` and appends it).
    pub fn poll_append(&mut self) -> Option<EventKind> {
        self.outbox.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::view_of_a as registry;
    use crate::journal::MemoryJournalStore;
    use crate::log_store::MemoryLog;

    #[test]
    fn a_driver_follows_a_log_in_batches_and_starts_over_after_a_restart() {
        let engine = NodeEngine::open("a", MemoryJournalStore::new()).expect("memory");
        let mut driver = NodeDriver::new(engine, registry(), DriverOptions::default());
        let mut log = MemoryLog::new();
        for at_ms in 0..5 {
            log.append(&Event { at_ms, kind: EventKind::Heartbeat { node: "a".into() } }).expect("append");
        }
        log.append(&Event { at_ms: 9, kind: EventKind::Drain { node: "nobody".into() } }).expect("append");
        assert_eq!(driver.follow_at_most(&log, 2, 3).expect("readable"), 3, "a lagging replica");
        assert_eq!(driver.applied_index().map(LogIndex::get), Some(3));
        assert_eq!(driver.follow_at_most(&log, 2, usize::MAX).expect("readable"), 3);
        assert_eq!(driver.applied_index().map(LogIndex::get), Some(6));
        assert_eq!(driver.rejected(), 1, "an unknown node is counted, the log goes on");
        assert_eq!(driver.view().stream_time_ms(), 4, "a rejected event moves nothing");
        assert_eq!(driver.follow_at_most(&log, 2, usize::MAX).expect("readable"), 0, "nothing new");
        assert_eq!(driver.follow_at_most(&log, 2, 5).expect("readable"), 0, "nothing new");
        driver.restart().expect("memory");
        assert_eq!(driver.follow(&log).expect("readable"), 6, "memory lost: from the start");
    }
}
