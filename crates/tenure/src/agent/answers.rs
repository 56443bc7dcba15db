//! Answers to API requests, computed from the loop's state: the view every node shares after
//! following the log, and each node's journal. Pure functions of that state.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use tenure_core::driver::NodeDriver;
use tenure_core::federation::Federation;
use tenure_core::journal::{EntryState, JournalStore};
use tenure_core::journal_index::JournalSnapshot;
use tenure_core::log::EventKind;
use tenure_core::rows::ActionRow;

use super::request::{ActionFilter, MetricsSnapshot};

/// The journal entries of every node (as the loop posted them: [`JournalSnapshot`]) that match
/// `filter`, by node name, then in journal order.
#[must_use]
pub fn actions(journals: &[JournalSnapshot], filter: &ActionFilter) -> Vec<ActionRow> {
    let query = ActionsQuery { filter: filter.clone(), ..ActionsQuery::default() };
    actions_page(journals, &query).rows
}

/// What `GET /v1/actions` asks: its filters, and the page (after a position, at most a number of
/// entries).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActionsQuery {
    /// `node`, `state`, `pool`.
    pub filter: ActionFilter,
    /// `address` (repeatable): only these addresses or ranges (none: every address).
    pub addresses: Vec<ipnet::IpNet>,
    /// Only entries after this node and sequence number (a continue token's position).
    pub after: Option<(String, u64)>,
    /// At most this many (`None`: all).
    pub limit: Option<usize>,
}

/// One page of journal entries, by node name, then in journal order.
pub type ActionsPage = super::listing::Page<ActionRow>;

/// The entries `query` asks for, by node name then in journal order: filtered on the entries
/// as they are, and only the page's written out (a page of 500 of a million entries writes 500).
#[must_use]
pub fn actions_page(journals: &[JournalSnapshot], query: &ActionsQuery) -> ActionsPage {
    let filter = &query.filter;
    let mut kept: Vec<&JournalSnapshot> = journals
        .iter()
        .filter(|j| filter.node.as_deref().is_none_or(|n| n == j.node()))
        .filter(|j| query.after.as_ref().is_none_or(|(node, _)| j.node() >= node.as_str()))
        .collect();
    kept.sort_by(|a, b| a.node().cmp(b.node()));
    let matching = kept.into_iter().flat_map(|journal| {
        let after = query.after.as_ref().filter(|(node, _)| node == journal.node()).map(|(_, seq)| *seq);
        journal
            .rows_after(after)
            .filter(|row| {
                let entry = &row.entry;
                filter.state.as_deref().is_none_or(|s| s == entry.state.as_str())
                    && filter.pool.as_deref().is_none_or(|p| p == &*entry.action.pool)
                    && (query.addresses.is_empty()
                        || query.addresses.iter().any(|range| range.contains(&entry.action.address)))
            })
            .map(move |row| (journal, row))
    });
    super::listing::take_page(matching, query.limit, |(journal, row)| journal.render(&row))
}

/// Journal entries now, by (verb, state) (`tenure_actions`): a `skipped` entry whatever its reason.
#[must_use]
pub fn action_counts(journals: &[JournalSnapshot]) -> Vec<((String, String), u64)> {
    let mut actions: BTreeMap<(&'static str, &'static str), u64> = BTreeMap::new();
    for row in journals.iter().flat_map(JournalSnapshot::rows) {
        let state = match row.entry.state {
            EntryState::Skipped(_) => "skipped",
            other => other.as_str(),
        };
        *actions.entry((row.entry.action.verb.as_str(), state)).or_insert(0) += 1;
    }
    actions.into_iter().map(|((verb, state), n)| ((verb.to_owned(), state.to_owned()), n)).collect()
}

/// What an operator is told of an event that changed nothing ([`changes_nothing`]).
pub const UNCHANGED_NOTE: &str = "it already was so; nothing changed";

/// Whether `event`, applied to `view`, would change nothing an operator asks it to: a drain of a
/// node already drained, an undrain of one that is not, a desire of an address already desired,
/// an undesire of one that is not. Such an event is appended all the same (the log records what
/// the operator did); its answer says it changed nothing, so that a repeated command is not read
/// as a second change.
#[must_use]
pub fn changes_nothing(view: &Federation, event: &EventKind) -> bool {
    let drained = |node: &str| view.node_id(node).map(|id| view.nodes()[id as usize].drained);
    let desired = |pool: &str, address: &IpAddr| {
        view.pools().get(pool).filter(|p| !p.deleted)?.addresses.get(address).map(|a| a.desired)
    };
    match event {
        EventKind::Drain { node } => drained(node) == Some(true),
        EventKind::Undrain { node } => drained(node) == Some(false),
        EventKind::Desire { pool, address } => desired(pool, address) == Some(true),
        EventKind::Undesire { pool, address } => desired(pool, address) == Some(false),
        _ => false,
    }
}

/// Every (pool, address) of the applied pools that has a desired holder now.
#[must_use]
pub fn with_desired_holder(view: &Federation) -> BTreeSet<(String, IpAddr)> {
    view.pools()
        .iter()
        .filter(|(_, pool)| !pool.deleted)
        .flat_map(|(name, pool)| {
            pool.addresses
                .iter()
                .filter(|(_, state)| state.active && state.line.desired_holder.is_some())
                .map(move |(address, _)| (name.clone(), *address))
        })
        .collect()
}

/// How many of `before` (from [`with_desired_holder`]) have no desired holder in `view`: after a
/// drain, the addresses no eligible member is left to take.
#[must_use]
pub fn lost_their_desired_holder(before: &BTreeSet<(String, IpAddr)>, view: &Federation) -> u64 {
    let lost = before.iter().filter(|(pool, address)| {
        view.pools()
            .get(pool)
            .filter(|p| !p.deleted)
            .and_then(|p| p.addresses.get(address))
            .is_none_or(|state| !state.active || state.line.desired_holder.is_none())
    });
    lost.count() as u64
}

/// Counters the loop keeps since it started.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    /// Log events the projection rejected, by reason.
    pub rejected_events: BTreeMap<String, u64>,
    /// Inventory reads, by (provider, `ok` | `failed`).
    pub inventory_reads: BTreeMap<(String, &'static str), u64>,
    /// Stamps the clock-lead rule held back (this host's clock ran ahead of the others').
    pub stamps_capped: u64,
    /// Head confirmations that failed: the agent did not act (fail-closed).
    pub head_unconfirmed: u64,
    /// Calls cancelled in flight because the view fenced their action.
    pub calls_cancelled: u64,
    /// Repeated announcements of held addresses (`garpRefresh`, keepalived's MASTER-again
    /// burst), by (provider, `executed` | `refused` | `failed`).
    pub garp_refreshes: BTreeMap<(String, &'static str), u64>,
}

/// The metrics snapshot of the loop's state.
#[must_use]
pub fn metrics<S: JournalStore>(
    drivers: &[NodeDriver<S>],
    counters: &Counters,
    log_head: u64,
    healthy: bool,
) -> MetricsSnapshot {
    let Some(first) = drivers.first() else { return MetricsSnapshot::default() };
    let mut fenced: BTreeMap<String, u64> = BTreeMap::new();
    for driver in drivers {
        for (reason, count) in driver.engine().fenced() {
            *fenced.entry(reason.as_str().to_owned()).or_insert(0) += count;
        }
    }
    let log_index = first.applied_index().map_or(0, |i| i.get());
    let mut rejected_events = counters.rejected_events.clone();
    let projection: u64 = drivers.iter().map(NodeDriver::rejected).max().unwrap_or(0);
    if projection > 0 {
        rejected_events.insert("projection".to_owned(), projection);
    }
    MetricsSnapshot {
        // Filled in by the handle, from the map and journals the loop posted: not by the loop.
        ownership: None,
        addresses: Vec::new(),
        address_series_omitted: 0,
        actions: Vec::new(),
        fenced: fenced.into_iter().collect(),
        rejected_events: rejected_events.into_iter().collect(),
        log_index,
        log_lag: log_head.saturating_sub(log_index),
        healthy,
        drift_recaptures: first.view().recaptures(),
        garp_refreshes: counters
            .garp_refreshes
            .iter()
            .map(|((provider, outcome), n)| ((provider.clone(), (*outcome).to_owned()), *n))
            .collect(),
        inventory_reads: counters
            .inventory_reads
            .iter()
            .map(|((provider, outcome), n)| ((provider.clone(), (*outcome).to_owned()), *n))
            .collect(),
        stamps_capped: counters.stamps_capped,
        head_unconfirmed: counters.head_unconfirmed,
        calls_cancelled: counters.calls_cancelled,
        // Filled by the loop, which holds the executors.
        provider_throttled: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command is "unchanged" exactly when the view already is as it makes it; a node or pool
    /// the view does not know is for the submit's own check, not "unchanged".
    #[test]
    fn an_event_changes_nothing_only_where_the_view_already_is_so() {
        let mut fleet = crate::agent::map::tests::fleet();
        let address: IpAddr = "10.0.0.10".parse().expect("an address");
        let desire = |pool: &str| EventKind::Desire { pool: pool.into(), address };
        let undesire = |pool: &str| EventKind::Undesire { pool: pool.into(), address };
        let drain = |node: &str| EventKind::Drain { node: node.into() };
        let undrain = |node: &str| EventKind::Undrain { node: node.into() };
        let view = &fleet.0;
        assert!(view.address("edge", address).expect("listed").desired);
        assert!(changes_nothing(view, &desire("edge")));
        assert!(!changes_nothing(view, &undesire("edge")));
        assert!(!changes_nothing(view, &desire("nosuch")), "not known: the submit's check says so");
        assert!(!changes_nothing(view, &drain("a")));
        assert!(changes_nothing(view, &undrain("a")));
        assert!(!changes_nothing(view, &undrain("nobody")));
        crate::agent::map::tests::apply(&mut fleet, 2_000, undesire("edge"));
        crate::agent::map::tests::apply(&mut fleet, 2_000, drain("a"));
        let view = &fleet.0;
        assert!(changes_nothing(view, &undesire("edge")));
        assert!(!changes_nothing(view, &desire("edge")));
        assert!(changes_nothing(view, &drain("a")));
        assert!(!changes_nothing(view, &undrain("a")));
    }
}
