//! Replay of a recorded log (`tenure replay BACKUP`): an agent's log, in index order, folded
//! through the core's history ([`History`]: the projection the agent keeps, and the timeline it
//! narrates from [`Federation::last_moves`]), with the invariants that a recorded log lets one
//! check without a provider.
//!
//! Nothing here reads a file: the runtime parses the backup and hands over core values (the
//! records, the journals, the registry of nodes and providers the log was projected over).
//!
//! # What is checked (each a [`ViolationKind`] of the one checker)
//!
//! - `token-decrease` and `capacity-exceeded`: the checker's head checks
//!   ([`Checker::after_event`]: [`crate::checker::TokenWatch`], [`capacity_excess`]) after every
//!   record, as the simulator makes them. On a log the core itself wrote they can only fire if
//!   this build projects the log differently from the build that wrote it.
//! - `below-high-water`: per node, its executed journal entries in execution order
//!   (`executedSeq`): the captureEpoch of one capture line never goes below one it executed
//!   before. This is the recorded tokens going backwards (a node that lost its high-water marks).
//! - `stale-execution`: an executed entry was stale at the head its gate saw. The entry records
//!   the stream time of that head (`lastAttemptMs`); every prefix of the log with that stream
//!   time is a head the gate may have seen, and the entry must be current
//!   ([`staleness`]) at one of them. Judged at the gate rather than at the `action-result`:
//!   between the two the head may move while the call is in flight (SPEC 9), which is no
//!   violation. An entry without a recorded attempt (written before attempts were kept) or whose
//!   stream time no prefix has is not judged, and counted in [`RecordedReport::unjudged`].
//!
//! What a provider holds is not in a log: the report has no provider holdings, and no
//! `HeldByNoOne`/`HeldByMany` conditions.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::Serialize;
use tenure_core::federation::Federation;
use tenure_core::federation::history::{Cause, EntryKind, History, HistoryEntry};
use tenure_core::journal::{EntryState, JournalEntry};
use tenure_core::log::{Event, EventKind};
use tenure_core::log_store::LogIndex;
use tenure_core::model::{CaptureDomain, StampedAction};

#[cfg(doc)]
use crate::checker::capacity_excess;
use crate::checker::{Checker, ViolationKind, staleness};
use crate::plot::Timeline;
use crate::replay::VIOLATIONS_KEPT_PER_KIND_MAX;
use tenure_core::rows::{
    ActionRow, ConditionRow, OwnershipRow, action_row_with_attempts, ownership_rows_with_status,
    pool_conditions,
};

/// One record of a recorded log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its log index.
    pub index: u64,
    /// The event.
    pub event: Event,
}

/// A recorded log and the journals recorded beside it.
#[derive(Clone, Debug)]
pub struct RecordedLog {
    /// The projection of the empty log: the nodes and providers the agent projected it over.
    pub registry: Federation,
    /// The records, in index order.
    pub records: Vec<Record>,
    /// Every node's journal entries, in journal order.
    pub journals: BTreeMap<String, Vec<JournalEntry>>,
}

/// Why a recorded log cannot be replayed: a record the projection refuses (an agent appends none,
/// so the registry is not the one the log was written over).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("log index {index}: {reason}")]
pub struct RecordedError {
    /// The refused record's index.
    pub index: u64,
    /// Why.
    pub reason: String,
}

/// What a replay of a recorded log found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedReport {
    /// Stream time at the end.
    pub stream_time: u64,
    /// The history ([`HistoryEntry`], as `GET /v1/history` answers it).
    pub timeline: Vec<HistoryEntry>,
    /// The first log index whose history entries are all in the timeline.
    pub reaches_back_to: u64,
    /// The ownership at the end, with phases, holders and NICs.
    pub ownership: Vec<OwnershipRow>,
    /// Every journal entry, by node name, then in journal order.
    pub actions: Vec<ActionRow>,
    /// Pool conditions at the end (those the log alone says).
    pub conditions: Vec<ConditionRow>,
    /// Executed entries the stale-execution check could not judge (module doc).
    pub unjudged: u64,
    /// Every broken invariant seen.
    pub violations: Vec<String>,
}

/// An executed entry waiting for the heads its gate may have seen.
struct Gated<'a> {
    node: &'a str,
    entry: &'a JournalEntry,
    /// Whether a prefix with its gate's stream time was seen.
    windowed: bool,
    /// Why it was stale at the last such prefix.
    stale: Option<String>,
}

/// Replays `log`; with `plot`, samples the plotted addresses whenever they change and marks the
/// history's faults and operator actions on it.
pub fn replay_recorded(
    log: &RecordedLog,
    mut plot: Option<&mut Timeline>,
) -> Result<RecordedReport, RecordedError> {
    let mut checker = Checker::new(VIOLATIONS_KEPT_PER_KIND_MAX);
    check_high_water(&log.journals, &mut checker);
    let mut gated = gate_windows(&log.journals);
    let mut history = History::new(log.registry.clone());
    // The empty log is a head too (stream time 0).
    judge_window(&mut gated, history.view());
    let mut marked = 0;
    for record in &log.records {
        let index = LogIndex::from_stored(record.index)
            .ok_or_else(|| RecordedError { index: record.index, reason: "log index 0".to_owned() })?;
        let applied = history.view().events_applied();
        let before_ms = history.view().stream_time_ms();
        history.apply(index, &record.event);
        let head = history.view();
        if head.events_applied() == applied {
            let reason = head
                .clone()
                .apply(&record.event)
                .err()
                .map_or_else(|| "refused".to_owned(), |e| e.to_string());
            return Err(RecordedError { index: record.index, reason });
        }
        checker.after_event(head);
        if head.stream_time_ms() != before_ms {
            close_windows(&mut gated, before_ms, &mut checker);
        }
        judge_window(&mut gated, head);
        if let Some(timeline) = plot.as_deref_mut() {
            sample(timeline, head);
            for entry in history.entries().skip(marked) {
                if let Some(text) = mark_text(entry) {
                    timeline.mark(entry.stream_time_ms, &text);
                }
            }
            marked = history.entries().len();
        }
    }
    let head = history.view();
    close_windows(&mut gated, u64::MAX, &mut checker);
    if let Some(timeline) = plot {
        // The last moment, so that the axis reaches the end of the log.
        let rows = timeline.rows_at(head, |pool, address| held_nic(head, pool, address));
        timeline.push(head.stream_time_ms(), rows);
    }
    let unjudged = gated.values().flatten().count() as u64
        + log
            .journals
            .values()
            .flatten()
            .filter(|e| e.state == EntryState::Executed && e.attempts.last_at_ms().is_none())
            .count() as u64;
    Ok(RecordedReport {
        stream_time: head.stream_time_ms(),
        timeline: history.entries().cloned().collect(),
        reaches_back_to: history.reaches_back_to(),
        ownership: ownership_rows_with_status(head),
        actions: log
            .journals
            .iter()
            .flat_map(|(node, entries)| entries.iter().map(move |e| action_row_with_attempts(node, e, None)))
            .collect(),
        conditions: head
            .pools()
            .iter()
            .filter(|(_, p)| !p.deleted)
            .flat_map(|(name, pool)| pool_conditions(name, pool))
            .collect(),
        unjudged,
        violations: checker.violations().kept().iter().map(|v| v.detail.clone()).collect(),
    })
}

/// Per node, its executed entries in execution order: no capture line's captureEpoch below one
/// executed before (`below-high-water`).
pub fn check_high_water(journals: &BTreeMap<String, Vec<JournalEntry>>, checker: &mut Checker) {
    for (node, entries) in journals {
        let mut executed: Vec<&JournalEntry> =
            entries.iter().filter(|e| e.state == EntryState::Executed).collect();
        executed.sort_by_key(|e| (e.executed_seq, e.seq));
        let mut highest: BTreeMap<(&str, IpAddr, &CaptureDomain), (u64, &StampedAction)> = BTreeMap::new();
        for entry in executed {
            let action = &entry.action;
            let line = (&*action.pool, action.address, &action.capture_domain);
            let epoch = action.capture_epoch.get();
            match highest.get(&line) {
                Some((before, earlier)) if epoch < *before => {
                    let detail = format!(
                        "{node} executed {} below captureEpoch {before} it executed before ({})",
                        action.idempotency_key(),
                        earlier.idempotency_key()
                    );
                    checker.record(ViolationKind::BelowHighWater, detail);
                }
                Some((before, _)) if epoch == *before => {}
                _ => {
                    highest.insert(line, (epoch, action));
                }
            }
        }
    }
}

/// The executed entries with a recorded gate, by the stream time of the head it saw.
fn gate_windows(journals: &BTreeMap<String, Vec<JournalEntry>>) -> BTreeMap<u64, Vec<Gated<'_>>> {
    let mut windows: BTreeMap<u64, Vec<Gated<'_>>> = BTreeMap::new();
    for (node, entries) in journals {
        for entry in entries.iter().filter(|e| e.state == EntryState::Executed) {
            if let Some(at) = entry.attempts.last_at_ms() {
                windows.entry(at).or_default().push(Gated { node, entry, windowed: false, stale: None });
            }
        }
    }
    windows
}

/// `head` is a head the gates of its stream time may have seen: an entry current at it is done.
fn judge_window(windows: &mut BTreeMap<u64, Vec<Gated<'_>>>, head: &Federation) {
    let Some(waiting) = windows.get_mut(&head.stream_time_ms()) else { return };
    waiting.retain_mut(|gated| {
        gated.windowed = true;
        gated.stale = staleness(&gated.entry.action, head);
        gated.stale.is_some()
    });
}

/// Stream time moved past every window up to `passed_ms`: the entries still waiting there were
/// stale at every head of their gate's stream time (those never windowed stay unjudged).
fn close_windows(windows: &mut BTreeMap<u64, Vec<Gated<'_>>>, passed_ms: u64, checker: &mut Checker) {
    let closed: Vec<u64> = windows.range(..=passed_ms).map(|(at, _)| *at).collect();
    for at in closed {
        let Some(waiting) = windows.remove(&at) else { continue };
        let mut never_seen = Vec::new();
        for gated in waiting {
            match (&gated.stale, gated.windowed) {
                (Some(why), true) => {
                    let detail = format!(
                        "stale action executed by {}: {} (stale at every head of stream time {at}: {why})",
                        gated.node,
                        gated.entry.action.idempotency_key()
                    );
                    checker.record(ViolationKind::StaleExecution, detail);
                }
                _ => never_seen.push(gated),
            }
        }
        if !never_seen.is_empty() {
            // Kept under a key no stream time reaches, to be counted as unjudged.
            windows.entry(u64::MAX).or_default().extend(never_seen);
        }
    }
}

/// The first NIC the log says holds `address` of `pool` (its results, its inventories).
fn held_nic(head: &Federation, pool: &str, address: IpAddr) -> Option<String> {
    head.address_status(pool, address).and_then(|s| s.nics.into_iter().next())
}

/// Samples the plotted addresses when they changed since the last sample.
fn sample(timeline: &mut Timeline, head: &Federation) {
    let rows = timeline.rows_at(head, |pool, address| held_nic(head, pool, address));
    if timeline.last_rows() != Some(rows.as_slice()) {
        timeline.push(head.stream_time_ms(), rows);
    }
}

/// How a history entry reads on the plot, if it is marked: faults (a holder lost an address to
/// liveness, health, VRRP or drift; a failed action), operator actions (drain, desire, approval,
/// pools, a restore's raise), and a node coming alive and taking what no one held (no prefix).
/// Executed actions are not marked: the bands show them.
#[must_use]
pub fn mark_text(entry: &HistoryEntry) -> Option<String> {
    let name = |n: &Option<String>| n.clone().unwrap_or_else(|| "none".to_owned());
    let verb = entry.verb.as_deref().unwrap_or("?");
    match entry.kind {
        EntryKind::Ownership | EntryKind::Capture => {
            let cause = entry.cause.map_or("?", Cause::as_str);
            let moved = format!("{cause} {} → {}", name(&entry.from), name(&entry.to));
            Some(match entry.cause {
                // A holder lost it: a fault. A node coming alive and taking what no one held is not.
                Some(Cause::Liveness | Cause::Health | Cause::Vrrp | Cause::Recapture)
                    if entry.from.is_some() =>
                {
                    format!("fault: {moved}")
                }
                Some(Cause::Liveness | Cause::Health | Cause::Vrrp | Cause::Recapture) => moved,
                _ => format!("operator: {moved}"),
            })
        }
        EntryKind::Approval => Some(format!("operator: approve {verb} for {}", name(&entry.node))),
        EntryKind::Failed => Some(format!("fault: {verb} by {} failed", name(&entry.node))),
        EntryKind::TokensRaised => Some("operator: restore (tokens raised)".to_owned()),
        EntryKind::Executed => None,
    }
}

/// Every (pool, address) a `pool-applied` of `records` lists, in pool then address order: the
/// addresses a plot of the log draws.
#[must_use]
pub fn recorded_addresses(records: &[Record]) -> Vec<(String, IpAddr)> {
    let mut all = BTreeSet::new();
    for record in records {
        if let EventKind::PoolApplied { spec } = &record.event.kind {
            all.extend(spec.addresses.iter().map(|a| (spec.name.clone(), *a)));
        }
    }
    all.into_iter().collect()
}

#[cfg(test)]
mod tests;
