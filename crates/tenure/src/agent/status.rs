//! What the status page (`GET /`, [`crate::api::page`]) shows, read from the loop in one request
//! so that every section is of the same moment: health, the nodes, the ownership map, and the
//! journal entries an operator must look at (waiting for approval, failed), and the failover
//! timeline ([`super::timeline`]). Pure functions of the loop's state.

use tenure_core::driver::NodeDriver;
use tenure_core::eligibility::is_alive;
use tenure_core::federation::Federation;
use tenure_core::journal::JournalStore;
use tenure_core::model::VrrpState;
use tenure_sim::replay::{ActionRow, OwnershipRow, ownership_rows_with_status};

use super::answers;
use super::request::{ActionFilter, Health};
use super::timeline::Timeline;

/// Most failed journal entries a status snapshot carries (the newest of each node's journal).
pub const FAILED_ACTIONS_SHOWN_MAX: usize = 50;

/// Most entries waiting for approval a status snapshot carries.
pub const WAITING_ACTIONS_SHOWN_MAX: usize = 200;

/// One node of the registry, as the log sees it now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStatus {
    /// The node's name.
    pub name: String,
    /// Its provider.
    pub provider: String,
    /// Its placement group.
    pub placement_group: String,
    /// Its NIC.
    pub nic: String,
    /// Whether this agent runs it.
    pub local: bool,
    /// Whether its last heartbeat still covers stream time for every applied pool that lists it
    /// (SPEC 3, each pool's `heartbeatTTL + promotionHold`); `None` when no applied pool lists
    /// it (no TTL to judge by).
    pub alive: Option<bool>,
    /// Stream time since the log took its last heartbeat (ms); `None`: never.
    pub heartbeat_age_ms: Option<u64>,
    /// Drained (excluded at once).
    pub drained: bool,
    /// Its latest `health` verdict.
    pub healthy: bool,
    /// Its latest VRRP state (`master`, `backup`, `fault`); `None` until keepalived reported one.
    pub vrrp: Option<&'static str>,
}

/// Everything the status page shows, of one moment of the loop.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusSnapshot {
    /// The agent's health, as `GET /v1/health` answers it.
    pub health: Health,
    /// Every node of the registry, by name.
    pub nodes: Vec<NodeStatus>,
    /// The ownership map with phases, holders and NICs (as `GET /v1/ownership`).
    pub ownership: Vec<OwnershipRow>,
    /// Entries waiting for approval (`pending`), at most [`WAITING_ACTIONS_SHOWN_MAX`].
    pub waiting: Vec<ActionRow>,
    /// How many entries wait for approval in all.
    pub waiting_total: usize,
    /// Failed entries by node, each node's newest first, at most [`FAILED_ACTIONS_SHOWN_MAX`].
    pub failed: Vec<ActionRow>,
    /// How many entries failed in all (in the journals' retention).
    pub failed_total: usize,
    /// The failover timeline.
    pub timeline: Timeline,
}

/// The status snapshot of the loop's state: `drivers` are the nodes this agent runs (the first
/// one's view is the agent's view), `health` as the loop computed it, `timeline` from the log.
#[must_use]
pub fn status<S: JournalStore>(
    drivers: &[NodeDriver<S>],
    health: Health,
    timeline: Timeline,
) -> StatusSnapshot {
    let Some(first) = drivers.first() else {
        return StatusSnapshot {
            health,
            nodes: Vec::new(),
            ownership: Vec::new(),
            waiting: Vec::new(),
            waiting_total: 0,
            failed: Vec::new(),
            failed_total: 0,
            timeline,
        };
    };
    let view = first.view();
    let local: Vec<&str> = drivers.iter().map(NodeDriver::name).collect();
    let in_state = |state: &str| {
        answers::actions(drivers, &ActionFilter { state: Some(state.to_owned()), ..ActionFilter::default() })
    };
    let mut waiting = in_state("pending");
    let waiting_total = waiting.len();
    waiting.truncate(WAITING_ACTIONS_SHOWN_MAX);
    let mut failed = in_state("failed");
    let failed_total = failed.len();
    // A journal is in the order entries were planned: its newest are last.
    failed.reverse();
    failed.sort_by(|a, b| a.node.cmp(&b.node));
    failed.truncate(FAILED_ACTIONS_SHOWN_MAX);
    StatusSnapshot {
        health,
        nodes: node_statuses(view, &local),
        ownership: ownership_rows_with_status(view),
        waiting,
        waiting_total,
        failed,
        failed_total,
        timeline,
    }
}

/// Every node of `view`'s registry, by name; `local` are the ones this agent runs.
#[must_use]
pub fn node_statuses(view: &Federation, local: &[&str]) -> Vec<NodeStatus> {
    let now_ms = view.stream_time_ms();
    let mut nodes: Vec<NodeStatus> = view
        .nodes()
        .iter()
        .map(|node| {
            let name = node.spec.name.as_str();
            let mut pools = view
                .pools()
                .values()
                .filter(|pool| !pool.deleted && pool.spec.members.iter().any(|m| m == name))
                .peekable();
            let alive = pools.peek().is_some().then(|| pools.all(|pool| is_alive(node, &pool.spec, now_ms)));
            NodeStatus {
                name: name.to_owned(),
                provider: node.spec.provider.clone(),
                placement_group: node.spec.placement_group.clone(),
                nic: node.spec.nic.clone(),
                local: local.contains(&name),
                alive,
                heartbeat_age_ms: node.last_heartbeat_ms.map(|at| now_ms.saturating_sub(at)),
                drained: node.drained,
                healthy: node.healthy,
                vrrp: node.vrrp.map(|state| match state {
                    VrrpState::Master => "master",
                    VrrpState::Backup => "backup",
                    VrrpState::Fault => "fault",
                }),
            }
        })
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    nodes
}
