//! The report rows (SPEC 10's lists and SPEC 11's replay report): one row per address of the
//! ownership map ([`OwnershipRow`]), per journal entry ([`ActionRow`]) and per pool condition
//! ([`ConditionRow`]), built from the core's own state. The agent's API, its CLI and the offline
//! replay print the same rows, built by the same functions here.

use serde::Serialize;

use crate::federation::{Federation, MapAddress, MapStatus, PoolState};
use crate::input::canonical_address;
use crate::journal::{EntryState, JournalEntry};

/// One row of the ownership map, as reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnershipRow {
    /// Pool name.
    pub pool: String,
    /// Canonical address text.
    pub address: String,
    /// Owner node, or null.
    pub owner: Option<String>,
    /// Current ownershipEpoch.
    pub ownership_epoch: u64,
    /// Current captureEpoch (of the pool's capture domain).
    pub capture_epoch: u64,
    /// Whether the address is desired.
    pub desired: bool,
    /// Where its hand-over is (`pending-approval`, `acquiring`, `held`, `releasing`,
    /// `released`): [`Federation::address_status`]. Only where the log
    /// carries the nodes' results (an agent's map, [`ownership_rows_with_status`]); a replay's
    /// log has none, its provider holdings say what is held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The nodes whose last confirmed holding verb is an acquire (the log's results).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by: Option<Vec<String>>,
    /// The NICs holding it: the holders' NICs and what the latest inventory showed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nics: Option<Vec<String>>,
}

/// One journal entry, as reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionRow {
    /// The journaling node.
    pub node: String,
    /// The idempotency key.
    pub idempotency_key: String,
    /// The verb.
    pub verb: String,
    /// Pool name.
    pub pool: String,
    /// Canonical address text.
    pub address: String,
    /// Holder stamped on the action.
    pub holder: String,
    /// Provider name.
    pub provider: String,
    /// NIC.
    pub nic: String,
    /// Capture domain.
    pub capture_domain: String,
    /// Stamped ownershipEpoch.
    pub ownership_epoch: u64,
    /// Stamped captureEpoch.
    pub capture_epoch: u64,
    /// `pending`, `approved`, `executed`, `failed` or `skipped`.
    pub state: String,
    /// Why it was skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Provider calls made for it. Only in an agent's rows ([`action_row_with_attempts`]): a
    /// replay's report leaves the attempt fields out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// Stream time (ms) of the head the last call was gated against (in an agent, events are
    /// stamped by the agents' clocks: unix ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_attempt_ms: Option<u64>,
    /// The agent's wall clock (unix ms) when the last call was handed out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_attempt_wall_ms: Option<u64>,
    /// The executor's one-line error of the last failed call (`outcome unknown: …` when the call
    /// may have acted), kept through retries and after a later success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// For a failed action that will be retried: the stream time (ms) from which its backoff
    /// lets it run again. Absent when it will not be retried (fenced) or is not failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_attempt_ms: Option<u64>,
    /// Its sequence number in the node's journal (journal order; never reused). Not in the
    /// report: the agent's API pages its actions by (node, seq).
    #[serde(skip)]
    pub seq: u64,
}

/// A pool condition, as reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionRow {
    /// Pool name.
    pub pool: String,
    /// `CapacityExhausted` or `NoEligibleMember`.
    #[serde(rename = "type")]
    pub condition: String,
    /// How many addresses it affects.
    pub addresses: u64,
}

/// The conditions the log alone says of pool `name`: `CapacityExhausted`, `NoEligibleMember`
/// (the provider's holdings add `HeldByNoOne`, `HeldByMany` in a replay).
#[must_use]
pub fn pool_conditions(name: &str, pool: &PoolState) -> Vec<ConditionRow> {
    let mut conditions = Vec::new();
    if pool.conditions.capacity_exhausted > 0 {
        conditions.push(ConditionRow {
            pool: name.to_owned(),
            condition: "CapacityExhausted".to_owned(),
            addresses: pool.conditions.capacity_exhausted,
        });
    }
    if pool.conditions.no_eligible_member > 0 {
        conditions.push(ConditionRow {
            pool: name.to_owned(),
            condition: "NoEligibleMember".to_owned(),
            addresses: pool.conditions.no_eligible_member,
        });
    }
    conditions
}

/// The report row of one journal entry of `node`.
#[must_use]
pub fn action_row(node: &str, e: &JournalEntry) -> ActionRow {
    ActionRow {
        node: node.to_owned(),
        idempotency_key: e.action.idempotency_key().to_string(),
        verb: e.action.verb.as_str().to_owned(),
        pool: e.action.pool.to_string(),
        address: canonical_address(e.action.address),
        holder: e.action.holder.to_string(),
        provider: e.action.provider.to_string(),
        nic: e.action.nic.to_string(),
        capture_domain: e.action.capture_domain.as_str().to_owned(),
        ownership_epoch: e.action.ownership_epoch.get(),
        capture_epoch: e.action.capture_epoch.get(),
        state: e.state.as_str().to_owned(),
        reason: match e.state {
            EntryState::Skipped(r) => Some(r.as_str().to_owned()),
            _ => None,
        },
        attempts: None,
        last_attempt_ms: None,
        last_attempt_wall_ms: None,
        last_error: None,
        next_attempt_ms: None,
        seq: e.seq.get(),
    }
}

/// The report row of one journal entry of `node` with its attempts (an agent's rows:
/// `GET /v1/actions`), `next_attempt_ms` being when a failed entry may be retried
/// ([`crate::node::NodeEngine::next_attempt_ms`]).
#[must_use]
pub fn action_row_with_attempts(node: &str, e: &JournalEntry, next_attempt_ms: Option<u64>) -> ActionRow {
    ActionRow {
        attempts: Some(e.attempts.count),
        last_attempt_ms: e.attempts.last_at_ms(),
        last_attempt_wall_ms: e.attempts.last_wall_ms(),
        last_error: e.attempts.last_error.as_deref().map(str::to_owned),
        next_attempt_ms,
        ..action_row(node, e)
    }
}

/// The ownership rows of every active address of every applied pool, in canonical order (a
/// replay's map: owners and epochs, no phase).
#[must_use]
pub fn ownership_rows(head: &Federation) -> Vec<OwnershipRow> {
    rows(head, false)
}

/// The ownership rows of an agent, whose log carries its nodes' results: each row with its
/// phase, holders and NICs; and, after the active addresses of the applied pools, the addresses
/// of deleted pools and those a pool no longer lists that a node still holds (phase
/// `releasing`), so that nothing held is hidden.
#[must_use]
pub fn ownership_rows_with_status(head: &Federation) -> Vec<OwnershipRow> {
    rows(head, true)
}

fn rows(head: &Federation, with_status: bool) -> Vec<OwnershipRow> {
    let status = if with_status { MapStatus::WithPhase } else { MapStatus::OwnersOnly };
    head.map_addresses(status, None, None).map(|shown| ownership_row(head, &shown)).collect()
}

/// The row of one address the map shows ([`Federation::map_addresses`]): its names and NICs
/// written out (a list builds rows only for the addresses it returns).
#[must_use]
pub fn ownership_row(head: &Federation, shown: &MapAddress<'_>) -> OwnershipRow {
    crate::map_index::MapRow::of(head, shown).render(shown.pool, shown.address, |id| head.node_name(id))
}
