//! The history of the log (SPEC 10: `tenure history`, `GET /v1/history`): a timeline of
//! ownership changes with their cause, captureEpoch moves, approvals, and executed or failed
//! actions, each with the log index, stream time and wall time of the event that made it.
//!
//! It is a fold of the log over its own projection: [`History::apply`] applies one record to a
//! [`Federation`] and turns what the core itself moved in that step
//! ([`Federation::last_moves`], written where tokens move) into entries, so nothing is guessed
//! from outside the core. Same log in, same history out. Or it rides on another projection of
//! the same log: [`History::record`] takes that projection right after each record (the agent's
//! history is fed by its first node's view, [`crate::driver::NodeDriver::follow_recording`], so
//! the log is projected once).
//!
//! # Kinds and causes
//!
//! One entry per (event, address) whose tokens moved: `ownership` when the owner changed (its
//! ownershipEpoch moved; `from`/`to` are the owners), else `capture` (only a captureEpoch moved:
//! a `desire`/`undesire`, a re-capture, a pool moved to another capture domain; `from`/`to` are
//! the desired holders). Its cause, in this order:
//! 1. `re-capture` when drift repair asked for one (SPEC 7);
//! 2. the event's kind when it names the owner before or after (`drain`, `undrain`, `health`,
//!    `vrrp`; a heartbeat of one of them is `liveness`);
//! 3. `liveness` when the owner before was alive by its heartbeat at the stream time before the
//!    event and is not at the stream time after it (the event moved stream time past its TTL);
//! 4. the event's kind (`desire`, `undesire`, `pool-applied`, `pool-deleted`, a `drain` that
//!    freed capacity…), and `liveness` for the kinds that move ownership only through stream
//!    time and heartbeats (`heartbeat`, `action-result`, `inventory`, `approve`).
//!
//! Besides: `approval` for an `approve` the log kept (an approval that was stale or did not
//! parse changed nothing, SPEC 13, and is not shown); `executed` / `failed` for every
//! `action-result` whose key parses; `tokens-raised` for a restore's raise (no address: every
//! token moved by the same amount).
//!
//! # Clocks
//!
//! `streamTime` is the log's stream time after the event (the largest `at` applied so far: the
//! only clock that decides anything, SPEC 1). `wallTime` is the event's own `at`: the clock of
//! the host that appended it (an agent stamps its host clock, held to the clock-lead rule,
//! `docs/architecture.md` "Time in a fleet"; in a scenario, the timeline's `at`). Both are ms;
//! an agent's are ms since the Unix epoch.
//!
//! # How far back
//!
//! [`History::reaches_back_to`]: the first log index whose entries are all here. A history that
//! starts at a snapshot (the records before it were compacted away) reaches back to the record
//! after the snapshot; one that dropped its oldest entries (past [`HISTORY_ENTRIES_MAX`]) to the
//! record after the newest one it dropped entries of.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::{Federation, SnapshotError, TokenMove};
use crate::eligibility::is_alive;
use crate::log::{ActionOutcome, Event, EventKind};
use crate::log_store::{LOG_READ_BATCH_MAX, Log, LogError, LogIndex};
use crate::model::ParsedKey;

/// Most entries a [`History`] keeps; past it the oldest go (all of one log record at a time; the
/// newest record's are all kept).
pub const HISTORY_ENTRIES_MAX: usize = 65_536;

/// What an entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EntryKind {
    /// The owner changed; its ownershipEpoch moved (and the captureEpoch, when the desired holder
    /// moved with it).
    Ownership,
    /// Only a captureEpoch moved: the desired holder changed with the same owner, or a re-capture.
    Capture,
    /// An operator's approval the log kept.
    Approval,
    /// A node reported an action executed.
    Executed,
    /// A node reported an action failed.
    Failed,
    /// A restore raised every token (`tokens-raised`).
    TokensRaised,
}

impl EntryKind {
    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ownership => "ownership",
            Self::Capture => "capture",
            Self::Approval => "approval",
            Self::Executed => "executed",
            Self::Failed => "failed",
            Self::TokensRaised => "tokens-raised",
        }
    }
}

/// Why tokens moved (see the module doc for the order the rules are tried in).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    /// A `drain` of the owner (or one that freed capacity).
    Drain,
    /// An `undrain`.
    Undrain,
    /// A `health` verdict.
    Health,
    /// A `vrrp` state.
    Vrrp,
    /// Heartbeats: an owner's expired, or a node came alive.
    Liveness,
    /// A `desire`.
    Desire,
    /// An `undesire`.
    Undesire,
    /// A `pool-applied`.
    PoolApplied,
    /// A `pool-deleted`.
    PoolDeleted,
    /// Drift repair (SPEC 7).
    #[serde(rename = "re-capture")]
    Recapture,
    /// A `node-registered` (a router joined and took its share) or a `node-retired`.
    Membership,
}

impl Cause {
    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Drain => "drain",
            Self::Undrain => "undrain",
            Self::Health => "health",
            Self::Vrrp => "vrrp",
            Self::Liveness => "liveness",
            Self::Desire => "desire",
            Self::Undesire => "undesire",
            Self::PoolApplied => "pool-applied",
            Self::PoolDeleted => "pool-deleted",
            Self::Recapture => "re-capture",
            Self::Membership => "membership",
        }
    }
}

/// One entry of the history. The field names are the wire names (camelCase); the fields a kind
/// has no value for are absent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// The index of the log record that made it.
    pub log_index: u64,
    /// Stream time after that record (ms).
    #[serde(rename = "streamTime")]
    pub stream_time_ms: u64,
    /// The record's own `at`: the appending host's clock (ms).
    #[serde(rename = "wallTime")]
    pub wall_time_ms: u64,
    /// What it records.
    pub kind: EntryKind,
    /// The pool (absent for `tokens-raised`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// The address, canonical text (absent for `tokens-raised`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<IpAddr>,
    /// Why (`ownership`, `capture`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
    /// The owner (`ownership`) or desired holder (`capture`) before; absent for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The owner (`ownership`) or desired holder (`capture`) after; absent for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// The ownershipEpoch after the event (`ownership`, `capture`), or the action's stamp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ownership_epoch: Option<u64>,
    /// The captureEpoch of the pool's line after the event, or the action's stamp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture_epoch: Option<u64>,
    /// The reporting node (`executed`, `failed`) or the approved action's holder (`approval`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The action's verb.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verb: Option<String>,
    /// The action's idempotency key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The executor's detail (`executed`, `failed`), or what a `tokens-raised` did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl HistoryEntry {
    fn at(index: LogIndex, event: &Event, stream_time_ms: u64, kind: EntryKind) -> Self {
        Self {
            log_index: index.get(),
            stream_time_ms,
            wall_time_ms: event.at_ms,
            kind,
            pool: None,
            address: None,
            cause: None,
            from: None,
            to: None,
            ownership_epoch: None,
            capture_epoch: None,
            node: None,
            verb: None,
            idempotency_key: None,
            detail: None,
        }
    }

    /// Whether `node` is in it: as the owner or desired holder before or after, the reporting
    /// node, or the approved action's holder.
    #[must_use]
    pub fn involves(&self, node: &str) -> bool {
        [&self.from, &self.to, &self.node].into_iter().any(|n| n.as_deref() == Some(node))
    }

    /// The action entry of a parsed key.
    fn of_action(mut self, key: &str, parsed: ParsedKey, node: String) -> Self {
        self.pool = Some(parsed.pool);
        self.address = Some(parsed.address);
        self.ownership_epoch = Some(parsed.ownership_epoch.get());
        self.capture_epoch = Some(parsed.capture_epoch.get());
        self.node = Some(node);
        self.verb = Some(parsed.verb.as_str().to_owned());
        self.idempotency_key = Some(key.to_owned());
        self
    }
}

/// The entries one record made: `view` is the projection after it applied `event` (accepted),
/// `stream_before_ms` the stream time before it. The one place history entries are made.
#[must_use]
pub fn entries_of(
    index: LogIndex,
    event: &Event,
    stream_before_ms: u64,
    view: &Federation,
) -> Vec<HistoryEntry> {
    let stream_ms = view.stream_time_ms();
    let entry = |kind| HistoryEntry::at(index, event, stream_ms, kind);
    let name = |id: Option<crate::state::NodeId>| id.map(|id| view.node_name(id).to_owned());
    let mut entries: Vec<HistoryEntry> = view
        .last_moves()
        .iter()
        .map(|moved| {
            let owner_changed = moved.owner != moved.owner_before;
            let (kind, from, to) = if owner_changed {
                (EntryKind::Ownership, moved.owner_before, moved.owner)
            } else {
                (EntryKind::Capture, moved.desired_holder_before, moved.desired_holder)
            };
            HistoryEntry {
                pool: Some(moved.pool.to_string()),
                address: Some(moved.address),
                cause: Some(cause_of(&event.kind, moved, view, stream_before_ms)),
                from: name(from),
                to: name(to),
                ownership_epoch: Some(moved.ownership_epoch.get()),
                capture_epoch: Some(moved.capture_epoch.get()),
                ..entry(kind)
            }
        })
        .collect();
    match &event.kind {
        EventKind::Approve { idempotency_key } if view.last_approval_kept() => {
            if let Some(parsed) = ParsedKey::parse(idempotency_key) {
                let holder = parsed.holder.clone();
                entries.push(entry(EntryKind::Approval).of_action(idempotency_key, parsed, holder));
            }
        }
        EventKind::ActionResult { node, idempotency_key, outcome, detail } => {
            if let Some(parsed) = ParsedKey::parse(idempotency_key) {
                let kind = match outcome {
                    ActionOutcome::Executed => EntryKind::Executed,
                    ActionOutcome::Failed => EntryKind::Failed,
                };
                let mut reported = entry(kind).of_action(idempotency_key, parsed, node.clone());
                reported.detail = Some(detail.clone()).filter(|d| !d.is_empty());
                entries.push(reported);
            }
        }
        EventKind::TokensRaised { by } => {
            let mut raised = entry(EntryKind::TokensRaised);
            raised.detail = Some(format!("every token raised by {by} (a restore)"));
            entries.push(raised);
        }
        _ => {}
    }
    entries
}

/// Why `moved`'s tokens moved in the step that applied `event` (module doc, "Kinds and causes").
fn cause_of(event: &EventKind, moved: &TokenMove, view: &Federation, stream_before_ms: u64) -> Cause {
    if moved.recapture {
        return Cause::Recapture;
    }
    let names_an_owner = |node: &str| {
        [moved.owner_before, moved.owner].into_iter().flatten().any(|id| view.node_name(id) == node)
    };
    let named = match event {
        EventKind::Drain { node } if names_an_owner(node) => Some(Cause::Drain),
        EventKind::Undrain { node } if names_an_owner(node) => Some(Cause::Undrain),
        EventKind::Health { node, .. } if names_an_owner(node) => Some(Cause::Health),
        EventKind::Vrrp { node, .. } if names_an_owner(node) => Some(Cause::Vrrp),
        EventKind::Heartbeat { node } if names_an_owner(node) => Some(Cause::Liveness),
        _ => None,
    };
    if let Some(cause) = named {
        return cause;
    }
    if moved.owner != moved.owner_before && owner_expired(moved, view, stream_before_ms) {
        return Cause::Liveness;
    }
    match event {
        EventKind::Drain { .. } => Cause::Drain,
        EventKind::Undrain { .. } => Cause::Undrain,
        EventKind::Health { .. } => Cause::Health,
        EventKind::Vrrp { .. } => Cause::Vrrp,
        EventKind::Desire { .. } => Cause::Desire,
        EventKind::Undesire { .. } => Cause::Undesire,
        EventKind::PoolApplied { .. } => Cause::PoolApplied,
        EventKind::PoolDeleted { .. } => Cause::PoolDeleted,
        EventKind::NodeRegistered { .. } | EventKind::NodeRetired { .. } => Cause::Membership,
        EventKind::Heartbeat { .. }
        | EventKind::ActionResult { .. }
        | EventKind::Inventory { .. }
        | EventKind::Approve { .. }
        | EventKind::TokensRaised { .. } => Cause::Liveness,
    }
}

/// Whether the owner before the step was alive at the stream time before it and is not at the
/// stream time after it (its heartbeat is unchanged by any event but its own).
fn owner_expired(moved: &TokenMove, view: &Federation, stream_before_ms: u64) -> bool {
    let (Some(owner), Some(pool)) = (moved.owner_before, view.pools().get(moved.pool.as_str())) else {
        return false;
    };
    let node = &view.nodes()[owner as usize];
    is_alive(node, &pool.spec, stream_before_ms) && !is_alive(node, &pool.spec, view.stream_time_ms())
}

/// The history fold: a projection of its own and the entries it made, bounded.
#[derive(Clone, Debug)]
pub struct History {
    /// The projection of the empty log, where a restart from a snapshot starts.
    registry: Federation,
    view: Federation,
    /// A persistent vector: [`History::snapshot`] is O(1), for readers outside the agent loop.
    entries: imbl::Vector<HistoryEntry>,
    entries_max: usize,
    reaches_back_to: u64,
    applied_index: Option<LogIndex>,
}

/// A history's entries as of one moment ([`History::snapshot`]): cheap to clone, immutable.
#[derive(Clone, Debug, Default)]
pub struct HistorySnapshot {
    entries: imbl::Vector<HistoryEntry>,
    reaches_back_to: u64,
}

impl HistorySnapshot {
    /// The entries, oldest first ([`History::entries`]).
    pub fn entries(&self) -> impl DoubleEndedIterator<Item = &HistoryEntry> + ExactSizeIterator + '_ {
        self.entries.iter()
    }

    /// The first log index whose entries are all here ([`History::reaches_back_to`]).
    #[must_use]
    pub fn reaches_back_to(&self) -> u64 {
        self.reaches_back_to
    }
}

impl History {
    /// The history of a log read from its first record, over `registry` (the projection of the
    /// empty log: nodes, providers, drift repair as the agent's view has them).
    #[must_use]
    pub fn new(registry: Federation) -> Self {
        Self {
            view: registry.clone(),
            registry,
            entries: imbl::Vector::new(),
            entries_max: HISTORY_ENTRIES_MAX,
            reaches_back_to: LogIndex::FIRST.get(),
            applied_index: None,
        }
    }

    /// Starts over from `snapshot` ([`Federation::snapshot`] of the log up to `applied`, whose
    /// records were compacted away): the entries go, and the history reaches back to the record
    /// after `applied`. A snapshot that does not restore changes nothing.
    pub fn restart_from_snapshot(&mut self, snapshot: &[u8], applied: LogIndex) -> Result<(), SnapshotError> {
        self.view = self.registry.restore(snapshot)?;
        self.restart_after(Some(applied));
        Ok(())
    }

    /// The same history, keeping at most `entries_max` entries (at least 1).
    #[must_use]
    pub fn with_entries_max(mut self, entries_max: usize) -> Self {
        self.entries_max = entries_max.max(1);
        self.trim();
        self
    }

    /// Folds one record in. A record the projection rejects makes no entry (it changed nothing).
    pub fn apply(&mut self, index: LogIndex, event: &Event) {
        self.applied_index = Some(index);
        let stream_before_ms = self.view.stream_time_ms();
        if self.view.apply(event).is_err() {
            return;
        }
        self.entries.extend(entries_of(index, event, stream_before_ms, &self.view));
        self.trim();
    }

    /// Folds in one record that another projection applied: `view` is that projection right
    /// after it applied `event` (`None`: it refused it, and nothing changed), `stream_before_ms`
    /// its stream time before. The agent's history rides on its first node's view this way
    /// ([`crate::driver::NodeDriver::follow_recording`]) instead of projecting the log a second
    /// time; this history's own view ([`Self::view`]) is then left as it was made, and
    /// [`Self::apply`] must not be mixed in.
    pub fn record(
        &mut self,
        index: LogIndex,
        event: &Event,
        stream_before_ms: u64,
        view: Option<&Federation>,
    ) {
        self.applied_index = Some(index);
        let Some(view) = view else { return };
        self.entries.extend(entries_of(index, event, stream_before_ms, view));
        self.trim();
    }

    /// Starts over after record `applied` (`None`: before the first), for a history fed by
    /// [`Self::record`] whose projection started again from a snapshot of the log up to
    /// `applied`: the entries go, and the history reaches back to the record after it.
    pub fn restart_after(&mut self, applied: Option<LogIndex>) {
        self.entries.clear();
        self.reaches_back_to = applied.map_or(1, |a| a.next().get());
        self.applied_index = applied;
    }

    /// Drops the oldest entries past the bound, every entry of a record at a time; the newest
    /// record's are kept even when they alone pass it (a pool of many addresses applied at once).
    fn trim(&mut self) {
        let Some(newest) = self.entries.back().map(|e| e.log_index) else { return };
        while self.entries.len() > self.entries_max {
            let Some(oldest) = self.entries.front().map(|e| e.log_index).filter(|i| *i != newest) else {
                break;
            };
            while self.entries.front().is_some_and(|e| e.log_index == oldest) {
                self.entries.pop_front();
            }
            self.reaches_back_to = self.reaches_back_to.max(oldest.saturating_add(1));
        }
    }

    /// Folds in every record of `log` after the last one folded in. Returns how many. A record
    /// that does not decode stops it with the log's error (as a node's driver stops).
    pub fn catch_up_from(&mut self, log: &impl Log) -> Result<usize, LogError> {
        let mut applied = 0;
        loop {
            let from = self.applied_index.map_or(LogIndex::FIRST, LogIndex::next);
            let records = log.read_from(from, LOG_READ_BATCH_MAX)?;
            if records.is_empty() {
                return Ok(applied);
            }
            for record in records {
                self.apply(record.index, &record.event);
                applied += 1;
            }
        }
    }

    /// The entries, oldest first (log order; within a record, moves in canonical order, then
    /// the approval or result).
    pub fn entries(&self) -> impl DoubleEndedIterator<Item = &HistoryEntry> + ExactSizeIterator + '_ {
        self.entries.iter()
    }

    /// The entries as they are now, for readers outside the agent loop: O(1), sharing the
    /// vector's chunks (issue 24: reads never wait for the loop).
    #[must_use]
    pub fn snapshot(&self) -> HistorySnapshot {
        HistorySnapshot { entries: self.entries.clone(), reaches_back_to: self.reaches_back_to }
    }

    /// The first log index whose entries are all here (1: the whole log).
    #[must_use]
    pub fn reaches_back_to(&self) -> u64 {
        self.reaches_back_to
    }

    /// The index of the last record folded in.
    #[must_use]
    pub fn applied_index(&self) -> Option<LogIndex> {
        self.applied_index
    }

    /// The projection after the records folded in by [`Self::apply`] (a history fed by
    /// [`Self::record`] keeps the view it was made with: the projection is its feeder's).
    #[must_use]
    pub fn view(&self) -> &Federation {
        &self.view
    }
}

#[cfg(test)]
mod tests;
