//! What the status page (`GET /`, [`crate::api::page`]) shows, built from one post of the loop's
//! reads ([`Reads`]: the map, the journals, the history and the nodes of the end of one step)
//! and the health it posted last (at most one turn apart): the nodes, one page of the ownership
//! map with its counts ([`super::map`]), the journal entries an operator must look at (waiting
//! for approval, failed), and the failover timeline's lanes: the core's history entries
//! ([`HistoryEntry`], the same the agent answers `GET /v1/history` with) of the addresses drawn.
//! Pure functions of the posts, run outside the loop.
//!
//! # The timeline's lanes
//!
//! The history the agent keeps is bounded ([`tenure_core::federation::history::HISTORY_ENTRIES_MAX`]
//! entries), so picking lanes costs at most one walk of it, newest first, whatever the size of
//! the map: each address met is checked once against the map's filters (one lookup in the view).
//! The lanes are the addresses the filters keep whose holder or captureEpoch moved in the
//! history, the latest changed first, at most [`TIMELINE_LANES_MAX`]; with a `node` filter (and no
//! phase), also the addresses that node owned or was desired for in the history (after a failover
//! the dead node holds nothing now, and its addresses are the ones to look at).

use std::collections::BTreeMap;
use std::net::IpAddr;

use tenure_core::federation::Federation;
use tenure_core::federation::history::{EntryKind, HistoryEntry, HistorySnapshot};
use tenure_core::map_index::MapSnapshot;
use tenure_core::model::VrrpState;
use tenure_core::rows::ActionRow;

use super::answers;
use super::map::{self, MapFilter, MapPage};
use super::request::{ActionFilter, Health, Reads};

/// Most addresses the timeline draws (those whose holder changed last, among the filtered ones).
pub const TIMELINE_LANES_MAX: usize = 12;

/// Most holder changes carried per address drawn (its latest).
pub const CHANGES_PER_LANE_MAX: usize = 16;

/// Most entries of other kinds (approvals, executed and failed actions) carried per address drawn
/// (its latest).
pub const OTHER_ENTRIES_PER_LANE_MAX: usize = 16;

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

/// What the status page asks of the loop: the map's filters and which page of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatusQuery {
    /// The filters of the map and the timeline.
    pub filter: MapFilter,
    /// Which page of the filtered map, from 1.
    pub page: usize,
    /// Rows a page.
    pub page_rows: usize,
}

/// One address the timeline draws: its history entries, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lane {
    /// The pool.
    pub pool: String,
    /// The address.
    pub address: IpAddr,
    /// Its owner now (the holder after its last entry).
    pub owner: Option<String>,
    /// Its latest `ownership` and `capture` entries (at most [`CHANGES_PER_LANE_MAX`]) and its
    /// latest other entries (at most [`OTHER_ENTRIES_PER_LANE_MAX`]), in log order.
    pub entries: Vec<HistoryEntry>,
}

/// What the failover timeline draws: the lanes and the history's extent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimelineLanes {
    /// The addresses drawn, by pool and address.
    pub lanes: Vec<Lane>,
    /// Entries of no address (`tokens-raised`), the latest [`OTHER_ENTRIES_PER_LANE_MAX`], in log
    /// order.
    pub unaddressed: Vec<HistoryEntry>,
    /// How many addresses the filters keep whose holder or captureEpoch moved in the history
    /// (the lanes are the latest changed of them).
    pub changed: usize,
    /// Stream time now: the right edge (ms).
    pub now_ms: u64,
    /// The first log index whose entries the history holds (1: the whole log).
    pub reaches_back_to: u64,
}

/// Everything the status page shows, of one moment of the loop.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusSnapshot {
    /// The agent's health, as `GET /v1/health` answers it.
    pub health: Health,
    /// Every node of the registry, by name.
    pub nodes: Vec<NodeStatus>,
    /// One page of the ownership map (phases, holders, NICs as `GET /v1/ownership`) and its counts.
    pub map: MapPage,
    /// Entries waiting for approval (`pending`), at most [`WAITING_ACTIONS_SHOWN_MAX`].
    pub waiting: Vec<ActionRow>,
    /// How many entries wait for approval in all.
    pub waiting_total: usize,
    /// Failed entries by node, each node's newest first, at most [`FAILED_ACTIONS_SHOWN_MAX`].
    pub failed: Vec<ActionRow>,
    /// How many entries failed in all (in the journals' retention).
    pub failed_total: usize,
    /// The failover timeline's lanes.
    pub timeline: TimelineLanes,
}

/// The status page's snapshot, from what the loop posted (`reads`: the map, the journals, the
/// history, the nodes) and its `health`, for `query`: built on the caller's thread, never by the
/// loop.
#[must_use]
pub fn status(health: Health, reads: &Reads, query: &StatusQuery) -> StatusSnapshot {
    let in_state = |state: &str| {
        answers::actions(
            &reads.journals,
            &ActionFilter { state: Some(state.to_owned()), ..ActionFilter::default() },
        )
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
        nodes: reads.nodes.clone(),
        map: map::map_page(&reads.map, &query.filter, query.page, query.page_rows),
        waiting,
        waiting_total,
        failed,
        failed_total,
        timeline: timeline_lanes(&reads.map, &reads.history, &query.filter, reads.stream_time_ms),
    }
}

/// Whether an entry moves a holder or a captureEpoch (a band of the timeline).
fn moves_tokens(entry: &HistoryEntry) -> bool {
    matches!(entry.kind, EntryKind::Ownership | EntryKind::Capture)
}

/// The timeline's lanes for the addresses `filter` keeps (module doc, "The timeline's lanes").
#[must_use]
pub fn timeline_lanes(
    map: &MapSnapshot,
    history: &HistorySnapshot,
    filter: &MapFilter,
    now_ms: u64,
) -> TimelineLanes {
    // Per address met, newest first: whether it is drawn (kept and changed), or why not yet.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Seen {
        /// The filters keep it, and it has moved.
        Changed,
        /// The filters keep it; no move met yet.
        Kept,
        /// The filters do not keep it (it may still be the filter node's, by an older entry).
        Other,
    }
    let mut seen: BTreeMap<(&str, IpAddr), Seen> = BTreeMap::new();
    let mut order: Vec<(&str, IpAddr)> = Vec::new();
    for entry in history.entries().rev() {
        let (Some(pool), Some(address)) = (entry.pool.as_deref(), entry.address) else { continue };
        let key = (pool, address);
        let was = *seen
            .entry(key)
            .or_insert_with(|| if map::keeps(map, filter, pool, address) { Seen::Kept } else { Seen::Other });
        let now = match was {
            Seen::Other if filter.keeps_by_history(entry) => Seen::Kept,
            other => other,
        };
        let now = if now == Seen::Kept && moves_tokens(entry) { Seen::Changed } else { now };
        if now == Seen::Changed && was != Seen::Changed {
            order.push(key);
        }
        seen.insert(key, now);
    }
    // Latest changed first.
    let changed = order.len();
    let mut drawn: Vec<(&str, IpAddr)> = order.into_iter().take(TIMELINE_LANES_MAX).collect();
    drawn.sort_unstable();
    let mut collected: BTreeMap<(&str, IpAddr), (Vec<&HistoryEntry>, usize, usize)> =
        drawn.iter().map(|key| (*key, (Vec::new(), 0, 0))).collect();
    let mut unaddressed = Vec::new();
    for entry in history.entries().rev() {
        let (Some(pool), Some(address)) = (entry.pool.as_deref(), entry.address) else {
            if unaddressed.len() < OTHER_ENTRIES_PER_LANE_MAX {
                unaddressed.push(entry.clone());
            }
            continue;
        };
        let Some((entries, moves, others)) = collected.get_mut(&(pool, address)) else { continue };
        let count = if moves_tokens(entry) { moves } else { others };
        let max = if moves_tokens(entry) { CHANGES_PER_LANE_MAX } else { OTHER_ENTRIES_PER_LANE_MAX };
        if *count < max {
            *count += 1;
            entries.push(entry);
        }
    }
    unaddressed.reverse();
    let lanes = collected
        .into_iter()
        .map(|((pool, address), (entries, _, _))| Lane {
            pool: pool.to_owned(),
            address,
            // Its owner in the map now (none once the map no longer shows it).
            owner: map.row(pool, address).and_then(|row| row.owner).map(|id| map.node_name(id).to_owned()),
            entries: entries.into_iter().rev().cloned().collect(),
        })
        .collect();
    TimelineLanes { lanes, unaddressed, changed, now_ms, reaches_back_to: history.reaches_back_to() }
}

/// Every node of `view`'s registry, by name; `local` are the ones this agent runs.
#[must_use]
pub fn node_statuses(view: &Federation, local: &[&str]) -> Vec<NodeStatus> {
    let now_ms = view.stream_time_ms();
    let mut nodes: Vec<NodeStatus> = view
        .nodes()
        .iter()
        .enumerate()
        .map(|(id, node)| {
            let name = node.spec.name.as_str();
            let alive = view.node_alive(tenure_core::state::node_id_of(id));
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

#[cfg(test)]
mod tests {
    use tenure_core::log::EventKind;

    use super::super::map::tests::{apply, fleet};
    use super::*;

    /// The lanes of `view` and its history, as the loop's posts have them.
    fn lanes(
        view: &Federation,
        history: &tenure_core::federation::history::History,
        filter: &MapFilter,
    ) -> TimelineLanes {
        timeline_lanes(
            &crate::agent::map::tests::snapshot(view),
            &history.snapshot(),
            filter,
            view.stream_time_ms(),
        )
    }

    fn filter(pool: Option<&str>, node: Option<&str>) -> MapFilter {
        MapFilter {
            list: super::super::listing::ListFilter {
                pool: pool.map(str::to_owned),
                node: node.map(str::to_owned),
                addresses: Vec::new(),
            },
            ..MapFilter::default()
        }
    }

    fn drawn(lanes: &TimelineLanes) -> Vec<String> {
        lanes.lanes.iter().map(|lane| format!("{}/{}", lane.pool, lane.address)).collect()
    }

    /// After one node expires, its addresses are drawn with the hand-over's entries, and the
    /// lanes follow the map's filters; with `node=`, the dead node's addresses are drawn though
    /// it owns nothing now.
    #[test]
    fn lanes_follow_the_filters_and_the_history() {
        let mut fleet = fleet();
        let view = &fleet.0;
        let edge: IpAddr = "10.0.0.10".parse().expect("an address");
        let dead =
            view.node_name(view.address("edge", edge).and_then(|s| s.owner).expect("owned")).to_owned();
        // The others beat past the dead node's TTL.
        for name in ["a", "b", "c"].into_iter().filter(|n| *n != dead) {
            apply(&mut fleet, 2_500, EventKind::Heartbeat { node: name.into() });
        }
        let (view, history) = &fleet;
        let all = lanes(view, history, &MapFilter::default());
        assert_eq!(all.changed, 3, "every address moved at least once (its first owner)");
        assert_eq!(drawn(&all), ["core/10.0.0.11", "edge/10.0.0.10", "edge/10.0.1.10"]);
        let lane = &all.lanes[1];
        let last = lane.entries.iter().rev().find(|e| e.kind == EntryKind::Ownership).expect("a move");
        assert_eq!(
            (last.from.as_deref(), last.cause.map(|c| c.as_str())),
            (Some(dead.as_str()), Some("liveness"))
        );
        assert_eq!(lane.owner, last.to, "the owner now is the last move's");
        assert!(lane.entries.iter().any(|e| e.kind == EntryKind::Executed), "the confirmed acquire");
        assert_eq!(all.now_ms, 2_500);
        let edge_only = lanes(view, history, &filter(Some("edge"), None));
        assert_eq!(drawn(&edge_only), ["edge/10.0.0.10", "edge/10.0.1.10"]);
        let of_dead = lanes(view, history, &filter(None, Some(&dead)));
        assert!(drawn(&of_dead).contains(&"edge/10.0.0.10".to_owned()), "{:?}", drawn(&of_dead));
        assert!(
            of_dead.lanes.iter().all(|lane| lane.entries.iter().any(|e| e.involves(&dead))),
            "only addresses the dead node was in"
        );
        // The node's earlier addresses are still narrowed by the pool and address filters.
        let dead_in_core = lanes(view, history, &filter(Some("core"), Some(&dead)));
        assert!(dead_in_core.lanes.iter().all(|lane| lane.pool == "core"), "{:?}", drawn(&dead_in_core));
        let mut dead_elsewhere = filter(None, Some(&dead));
        dead_elsewhere.list.addresses.push("10.0.1.0/24".parse().expect("a range"));
        let dead_elsewhere = lanes(view, history, &dead_elsewhere);
        assert!(
            !drawn(&dead_elsewhere).contains(&"edge/10.0.0.10".to_owned()),
            "{:?}",
            drawn(&dead_elsewhere)
        );
        let gone = lanes(view, history, &filter(Some("gone"), None));
        assert!(gone.lanes.is_empty() && gone.changed == 0);
    }

    /// At most [`TIMELINE_LANES_MAX`] lanes: the latest changed; `changed` counts them all.
    #[test]
    fn at_most_the_lane_limit_the_latest_changed() {
        let mut fleet = fleet();
        let many: Vec<IpAddr> = (0..30).map(|i| format!("10.0.2.{i}").parse().expect("an address")).collect();
        for (i, address) in many.iter().enumerate() {
            let spec = {
                let mut spec = (*fleet.0.pools()["edge"].spec).clone();
                spec.name = format!("p{i:02}");
                spec.addresses = vec![*address];
                spec
            };
            apply(&mut fleet, 1_200 + i as u64, EventKind::PoolApplied { spec: Box::new(spec) });
        }
        let (view, history) = &fleet;
        let drawn = lanes(view, history, &MapFilter::default());
        assert_eq!(drawn.changed, 33);
        assert_eq!(drawn.lanes.len(), TIMELINE_LANES_MAX);
        let addresses: Vec<IpAddr> = drawn.lanes.iter().map(|lane| lane.address).collect();
        assert!(addresses.contains(&many[29]) && !addresses.contains(&many[0]), "{addresses:?}");
    }
}
