//! The failover timeline's model — per address, its holder and tokens over stream time, and the
//! faults and operator actions around them — and the fold of the agent's log that fills it
//! ([`fold_log`]), for the status page ([`crate::api::page::timeline`] draws it).
//!
//! The fold ([`TimelineFold`]) follows the log from its start (or its newest snapshot) over the
//! registry, on a projection of its own, and compares every address's owner and tokens after
//! each record: what the agent's own view applied, step by step. Comparing every address after
//! every record is bounded ([`FOLD_ADDRESSES_MAX`]); it is the one place to swap for the core's
//! history of the log, which lists what each event moved.

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;

use tenure_core::eligibility::is_alive;
use tenure_core::federation::Federation;
use tenure_core::input::canonical_address;
use tenure_core::log::{ActionOutcome, EventKind};
use tenure_core::log_store::{LOG_READ_BATCH_MAX, Log, LogError, LogIndex};
use tenure_core::model::VrrpState;

/// Most addresses the fold compares after each record: past it the timeline is not drawn (the
/// core's history of the log, which lists what each event moved, lifts this).
pub const FOLD_ADDRESSES_MAX: usize = 2_000;

/// Most holder changes the fold keeps (the oldest go first).
pub const FOLD_CHANGES_MAX: usize = 10_000;

/// Most marks the fold keeps (the oldest go first).
pub const FOLD_MARKS_MAX: usize = 1_000;

/// One change of an address's holder and tokens, at a stream time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderChange {
    /// The pool.
    pub pool: String,
    /// Canonical address text.
    pub address: String,
    /// Stream time of the event that made the change (ms).
    pub at_ms: u64,
    /// The holder from then on (the owner the log arbitrated), `None`: nobody.
    pub holder: Option<String>,
    /// The ownershipEpoch from then on.
    pub ownership_epoch: u64,
    /// The captureEpoch from then on.
    pub capture_epoch: u64,
    /// What caused it (`liveness`, `drain`, `desire`, …), as the history says.
    pub cause: String,
}

/// What a mark on the timeline is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkKind {
    /// Something went wrong: a node's heartbeat expired, a health or VRRP fault, a failed action.
    Fault,
    /// An operator acted: drain, undrain, approve, desire, undesire, a pool applied or deleted.
    Operator,
}

impl MarkKind {
    /// The class and `data-kind` of its line (`fault`, `operator`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fault => "fault",
            Self::Operator => "operator",
        }
    }
}

/// A fault or an operator action, at a stream time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    /// Stream time (ms).
    pub at_ms: u64,
    /// Fault or operator action.
    pub kind: MarkKind,
    /// What it was, in a few words (`b expired`, `drain a`).
    pub label: String,
}

/// Everything the timeline draws.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    /// Every holder change, in log order.
    pub changes: Vec<HolderChange>,
    /// Faults and operator actions, in log order.
    pub marks: Vec<Mark>,
    /// Stream time now: the right edge.
    pub now_ms: u64,
    /// Where the history starts when the log's beginning is compacted away (a log index), for a
    /// note under the picture.
    pub starts_at_index: Option<u64>,
    /// Why there is no timeline to draw (the log is too long to fold for a page view).
    pub unavailable: Option<String>,
}

/// An address's owner and tokens after a record.
type Tokens = (Option<usize>, u64, u64);

fn tokens(view: &Federation) -> BTreeMap<(String, IpAddr), Tokens> {
    let mut now = BTreeMap::new();
    for (name, pool) in view.pools() {
        for (address, state) in &pool.addresses {
            now.insert(
                (name.clone(), *address),
                (state.owner, state.ownership_epoch.get(), state.line.epoch.get()),
            );
        }
    }
    now
}

/// Per node: whether it is alive for some applied pool that lists it.
fn alive(view: &Federation) -> Vec<bool> {
    let now_ms = view.stream_time_ms();
    view.nodes()
        .iter()
        .map(|node| {
            view.pools().values().any(|pool| {
                !pool.deleted
                    && pool.spec.members.contains(&node.spec.name)
                    && is_alive(node, &pool.spec, now_ms)
            })
        })
        .collect()
}

/// The mark an event is, if it is a fault or an operator action.
fn mark_of(kind: &EventKind) -> Option<(MarkKind, String)> {
    let operator = |label: String| Some((MarkKind::Operator, label));
    match kind {
        EventKind::Drain { node } => operator(format!("drain {node}")),
        EventKind::Undrain { node } => operator(format!("undrain {node}")),
        EventKind::Desire { pool, address } => operator(format!("desire {pool} {address}")),
        EventKind::Undesire { pool, address } => operator(format!("undesire {pool} {address}")),
        EventKind::Approve { .. } => operator("approve".to_owned()),
        EventKind::PoolDeleted { pool } => operator(format!("pool {pool} deleted")),
        EventKind::Health { node, healthy: false } => Some((MarkKind::Fault, format!("{node} unhealthy"))),
        EventKind::Vrrp { node, state: VrrpState::Fault } => {
            Some((MarkKind::Fault, format!("{node} VRRP fault")))
        }
        EventKind::ActionResult { node, outcome: ActionOutcome::Failed, .. } => {
            Some((MarkKind::Fault, format!("{node}: action failed")))
        }
        _ => None,
    }
}

/// The fold of the log into a [`Timeline`], kept by the agent loop beside its nodes' views and
/// fed the same records ([`TimelineFold::catch_up`] right after they followed the log, before
/// the store may drop the records they applied).
#[derive(Clone, Debug)]
pub struct TimelineFold {
    view: Federation,
    before: BTreeMap<(String, IpAddr), Tokens>,
    was_alive: Vec<bool>,
    next: LogIndex,
    changes: VecDeque<HolderChange>,
    marks: VecDeque<Mark>,
    starts_at_index: Option<u64>,
    unavailable: Option<String>,
}

impl TimelineFold {
    /// A fold from the start of the log over `registry` (the projection of the empty log), or
    /// from `snapshot` when the log's beginning was compacted into one (its last index, bytes).
    #[must_use]
    pub fn new(registry: &Federation, snapshot: Option<(LogIndex, Arc<Vec<u8>>)>) -> Self {
        let mut view = registry.clone();
        let mut next = LogIndex::FIRST;
        let mut starts_at_index = None;
        if let Some((index, bytes)) = snapshot
            && let Ok(restored) = registry.restore(&bytes)
        {
            view = restored;
            next = index.next();
            starts_at_index = Some(next.get());
        }
        Self {
            before: tokens(&view),
            was_alive: alive(&view),
            view,
            next,
            changes: VecDeque::new(),
            marks: VecDeque::new(),
            starts_at_index,
            unavailable: None,
        }
    }

    /// Folds in every record of `log` after the last one folded in. A map past
    /// [`FOLD_ADDRESSES_MAX`] addresses stops the fold (the timeline says so); a record the
    /// store already dropped starts it again from `snapshot`; a read error waits for the next call.
    pub fn catch_up(&mut self, log: &impl Log, snapshot: impl FnOnce() -> Option<(LogIndex, Arc<Vec<u8>>)>) {
        if self.unavailable.is_some() {
            return;
        }
        let mut snapshot = Some(snapshot);
        loop {
            let batch = match log.read_from(self.next, LOG_READ_BATCH_MAX) {
                Ok(batch) => batch,
                Err(LogError::Compacted { .. }) if snapshot.is_some() => {
                    let registry = self.view.clone();
                    let kept = (std::mem::take(&mut self.changes), std::mem::take(&mut self.marks));
                    *self = Self::new(&registry, snapshot.take().and_then(|f| f()));
                    (self.changes, self.marks) = kept;
                    continue;
                }
                // A log it cannot read now (an etcd watch blip) is tried again at the next
                // follow: only the address cap stops the fold for good.
                Err(_) => return,
            };
            let Some(last) = batch.last() else { return };
            self.next = last.index.next();
            for record in batch {
                self.apply(&record.event.kind, |view| view.apply(&record.event).is_ok());
                if self.before.len() > FOLD_ADDRESSES_MAX {
                    self.unavailable = Some(format!(
                        "more than {FOLD_ADDRESSES_MAX} addresses: this build draws the timeline of smaller \
                         maps only (see `tenure ownership`)"
                    ));
                    return;
                }
            }
        }
    }

    /// Applies one event with `apply` (false: rejected, nothing changed) and records what moved.
    fn apply(&mut self, kind: &EventKind, apply: impl FnOnce(&mut Federation) -> bool) {
        if !apply(&mut self.view) {
            return;
        }
        let at_ms = self.view.stream_time_ms();
        if let Some((mark, label)) = mark_of(kind) {
            self.push_mark(Mark { at_ms, kind: mark, label });
        }
        let is_alive = alive(&self.view);
        let expired: Vec<usize> = (0..is_alive.len())
            .filter(|n| self.was_alive.get(*n).copied().unwrap_or(false) && !is_alive[*n])
            .collect();
        for node in &expired {
            let label = format!("{} expired", self.view.node_name(*node));
            self.push_mark(Mark { at_ms, kind: MarkKind::Fault, label });
        }
        let after = tokens(&self.view);
        for (key, now) in &after {
            let then = self.before.get(key).copied().unwrap_or((None, 0, 0));
            if *now == then {
                continue;
            }
            let cause = match then.0 {
                Some(old) if now.0 != then.0 && expired.contains(&old) => "liveness",
                _ => kind.wire_name(),
            };
            if self.changes.len() >= FOLD_CHANGES_MAX {
                self.changes.pop_front();
            }
            self.changes.push_back(HolderChange {
                pool: key.0.clone(),
                address: canonical_address(key.1),
                at_ms,
                holder: now.0.map(|id| self.view.node_name(id).to_owned()),
                ownership_epoch: now.1,
                capture_epoch: now.2,
                cause: cause.to_owned(),
            });
        }
        self.before = after;
        self.was_alive = is_alive;
    }

    fn push_mark(&mut self, mark: Mark) {
        if self.marks.len() >= FOLD_MARKS_MAX {
            self.marks.pop_front();
        }
        self.marks.push_back(mark);
    }

    /// The timeline so far, its right edge at stream time `now_ms`.
    #[must_use]
    pub fn timeline(&self, now_ms: u64) -> Timeline {
        Timeline {
            changes: self.changes.iter().cloned().collect(),
            marks: self.marks.iter().cloned().collect(),
            now_ms,
            starts_at_index: self.starts_at_index,
            unavailable: self.unavailable.clone(),
        }
    }
}
