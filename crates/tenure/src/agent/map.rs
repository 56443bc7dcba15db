//! The ownership map a page at a time, as `GET /v1/ownership` and the status page list it: the
//! rows of a [`MapSnapshot`] (the map as the loop published it after a step, read on the
//! caller's thread: no read waits for the loop), filtered on what a row holds (names resolved
//! once), and rows written out only for the page returned. A 500-row page of a 100k-address map
//! writes 500 rows; the status page's counts (rows kept by the filters, per phase, per node) take
//! one pass over the snapshot that writes none.

use std::collections::BTreeMap;
use std::net::IpAddr;

use tenure_core::federation::history::HistoryEntry;
use tenure_core::federation::{NodeId, Phase};
use tenure_core::map_index::{MapRow, MapSnapshot};
use tenure_core::rows::OwnershipRow;

use super::listing::ListFilter;

/// What a listing of the map keeps: the list calls' filters (`pool`, `node`: owns or holds it,
/// `address` repeatable, each one address or a CIDR range), and the status page's phase.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapFilter {
    /// `pool`, `node`, `address` as every list call (and the status page) takes them.
    pub list: ListFilter,
    /// Only addresses in this phase.
    pub phase: Option<Phase>,
}

impl MapFilter {
    /// Whether a history entry of an address the map's filters do not keep now still puts it on
    /// the timeline: with `node=` and no phase, an address that node owned or was desired for
    /// earlier, of the filter's pool and addresses — the history's own rule
    /// ([`ListFilter::matches_history`], as `GET /v1/history?node=` lists it).
    #[must_use]
    pub fn keeps_by_history(&self, entry: &HistoryEntry) -> bool {
        self.phase.is_none() && self.list.node.is_some() && self.list.matches_history(entry)
    }
}

/// A [`MapFilter`] with its node name resolved in one snapshot.
struct Resolved<'a> {
    filter: &'a MapFilter,
    /// `Some(None)`: a node the snapshot does not know, which owns and holds nothing.
    node: Option<Option<NodeId>>,
}

impl<'a> Resolved<'a> {
    fn new(filter: &'a MapFilter, map: &MapSnapshot) -> Self {
        Self { filter, node: filter.list.node.as_deref().map(|name| map.node_id(name)) }
    }

    fn matches(&self, pool: &str, address: IpAddr, row: &MapRow) -> bool {
        let list = &self.filter.list;
        list.pool.as_deref().is_none_or(|kept| kept == pool)
            && self.node.is_none_or(|node| node.is_some_and(|node| row.involves(node)))
            && (list.addresses.is_empty() || list.contains(address))
            && self.filter.phase.is_none_or(|phase| row.phase == Some(phase))
    }
}

/// The rows of `map` that `filter` keeps, in the map's order, after `after` (a pool and an
/// address) when given. Lazy: the caller takes what it needs.
pub fn matching<'a>(
    map: &'a MapSnapshot,
    filter: &'a MapFilter,
    after: Option<(&'a str, IpAddr)>,
) -> impl Iterator<Item = (&'a str, IpAddr, &'a MapRow)> + 'a {
    let resolved = Resolved::new(filter, map);
    map.rows(filter.list.pool.as_deref(), after)
        .filter(move |(pool, address, row)| resolved.matches(pool, *address, row))
}

/// What `GET /v1/ownership` asks: its filters, and the page (after a position, at most a number
/// of rows).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnershipQuery {
    /// Which rows.
    pub filter: MapFilter,
    /// Only rows after this pool and address (a continue token's position).
    pub after: Option<(String, IpAddr)>,
    /// At most this many (`None`: all).
    pub limit: Option<usize>,
}

/// One page of the map's rows (`GET /v1/ownership`), in the map's order.
pub type RowsPage = super::listing::Page<OwnershipRow>;

/// The rows `query` asks for: at most its limit of the rows its filter keeps, after its position.
#[must_use]
pub fn rows_page(map: &MapSnapshot, query: &OwnershipQuery) -> RowsPage {
    let after = query.after.as_ref().map(|(pool, address)| (pool.as_str(), *address));
    super::listing::take_page(matching(map, &query.filter, after), query.limit, |(pool, address, row)| {
        map.render(pool, address, row)
    })
}

/// Which per-address series a scrape of `/metrics` writes (`?addresses=`): four series an address
/// (`tenure_ownership_epoch`, `tenure_capture_epoch`, `tenure_address_owner`,
/// `tenure_address_desired`) are 4 million series at a million addresses, so by default they are
/// written only for a map of at most [`ADDRESS_SERIES_AUTO_MAX`] addresses; the counts by pool
/// and phase (`tenure_addresses`) are written always.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressSeries {
    /// Every address's series while the map shows at most this many addresses; none beyond.
    Auto(usize),
    /// Every address's series, whatever their number (asked for: `?addresses=all`).
    All,
    /// No address's series (`?addresses=none`).
    None,
}

/// The most addresses whose series a scrape writes unless asked for all (`?addresses=all`):
/// 40,000 series, what one Prometheus target comfortably holds.
pub const ADDRESS_SERIES_AUTO_MAX: usize = 10_000;

impl AddressSeries {
    /// `?addresses=` of `/metrics`: `auto` ([`ADDRESS_SERIES_AUTO_MAX`]), `all` or `none`.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "auto" => Some(Self::Auto(ADDRESS_SERIES_AUTO_MAX)),
            "all" => Some(Self::All),
            "none" => Some(Self::None),
            _ => None,
        }
    }
}

/// What a scrape says of the map's addresses: how many are in each phase, by pool (always), and
/// every address's row when `series` lets them be written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddressMetrics {
    /// Addresses by (pool, phase name): every phase of every pool the map shows, 0 included (a
    /// series does not vanish when its phase empties).
    pub counts: Vec<((String, String), u64)>,
    /// Every address's row (`None`: left out).
    pub rows: Option<Vec<OwnershipRow>>,
    /// How many addresses' series were left out (0 when the rows are written).
    pub omitted: u64,
}

/// [`AddressMetrics`] of `map`: one pass to count; the rows written out only when `series`
/// allows them for this many addresses.
#[must_use]
pub fn address_metrics(map: &MapSnapshot, series: AddressSeries) -> AddressMetrics {
    let mut counts: BTreeMap<(&str, Phase), u64> = BTreeMap::new();
    let mut total: u64 = 0;
    let mut last_pool = None;
    for (pool, _, row) in map.rows(None, None) {
        total += 1;
        if last_pool != Some(pool) {
            last_pool = Some(pool);
            counts.extend(Phase::ALL.map(|phase| ((pool, phase), 0)));
        }
        if let Some(phase) = row.phase {
            *counts.entry((pool, phase)).or_default() += 1;
        }
    }
    let written = match series {
        AddressSeries::All => true,
        AddressSeries::Auto(max) => usize::try_from(total).is_ok_and(|total| total <= max),
        AddressSeries::None => false,
    };
    AddressMetrics {
        counts: counts
            .into_iter()
            .map(|((pool, phase), count)| ((pool.to_owned(), phase.as_str().to_owned()), count))
            .collect(),
        rows: written.then(|| rows_page(map, &OwnershipQuery::default()).rows),
        omitted: if written { 0 } else { total },
    }
}

/// What the status page shows of the map: one page of the filtered rows and the counts around it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapPage {
    /// The rows of the page shown, in the map's order.
    pub rows: Vec<OwnershipRow>,
    /// The page shown, from 1 (a page past the last shows the last).
    pub page: usize,
    /// How many pages the filtered rows make (at least 1).
    pub pages: usize,
    /// How many addresses the filters keep.
    pub matched: usize,
    /// How many addresses the map shows.
    pub total: usize,
    /// Of the addresses the filters keep, how many are in each phase (phases with none absent).
    pub phases: BTreeMap<Phase, usize>,
    /// Per node name: how many addresses of the whole map it owns and holds.
    pub per_node: BTreeMap<String, (usize, usize)>,
    /// The pools the map shows addresses of, by name.
    pub pools: Vec<String>,
}

/// The page `page` (from 1; past the last: the last) of `page_rows` rows of the rows of `map`
/// that `filter` keeps, with the counts the page shows. One pass over the map, no row written
/// out but the page's.
#[must_use]
pub fn map_page(map: &MapSnapshot, filter: &MapFilter, page: usize, page_rows: usize) -> MapPage {
    let resolved = Resolved::new(filter, map);
    let page_rows = page_rows.max(1);
    let mut kept: Vec<(&str, IpAddr, &MapRow)> = Vec::new();
    let mut per_node = vec![(0_usize, 0_usize); map.nodes().len()];
    let mut phases = BTreeMap::new();
    let mut pools: Vec<&str> = Vec::new();
    let mut total = 0;
    for (pool, address, row) in map.rows(None, None) {
        total += 1;
        if pools.last() != Some(&pool) {
            pools.push(pool);
        }
        if let Some(owner) = row.owner {
            per_node[owner as usize].0 += 1;
        }
        for holder in &row.holders {
            per_node[*holder as usize].1 += 1;
        }
        if resolved.matches(pool, address, row) {
            if let Some(phase) = row.phase {
                *phases.entry(phase).or_default() += 1;
            }
            kept.push((pool, address, row));
        }
    }
    let pages = kept.len().div_ceil(page_rows).max(1);
    let page = page.clamp(1, pages);
    let start = ((page - 1) * page_rows).min(kept.len());
    let end = (start + page_rows).min(kept.len());
    MapPage {
        rows: kept[start..end].iter().map(|(pool, address, row)| map.render(pool, *address, row)).collect(),
        page,
        pages,
        matched: kept.len(),
        total,
        phases,
        per_node: map.nodes().iter().zip(per_node).map(|(node, counts)| (node.to_string(), counts)).collect(),
        pools: pools.into_iter().map(str::to_owned).collect(),
    }
}

/// Whether the map shows `address` of `pool` and `filter` keeps it (the timeline's lanes follow
/// the map's filters).
#[must_use]
pub fn keeps(map: &MapSnapshot, filter: &MapFilter, pool: &str, address: IpAddr) -> bool {
    let resolved = Resolved::new(filter, map);
    map.row(pool, address).is_some_and(|row| resolved.matches(pool, address, row))
}

#[cfg(test)]
pub(crate) mod tests {
    use tenure_core::federation::Federation;
    use tenure_core::federation::history::History;
    use tenure_core::log::{ActionOutcome, Event, EventKind};
    use tenure_core::model::{
        Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec, StampedAction,
    };

    use super::*;

    /// Three nodes, pools `edge` (10.0.0.10, 10.0.1.10) and `core` (10.0.0.11), TTL 1 s; every
    /// node alive at 1,000 ms; the owner of edge/10.0.0.10 confirmed its acquire (`held`). The
    /// history follows every event.
    pub(crate) fn fleet() -> (Federation, History) {
        let nodes: Vec<NodeSpec> = ["a", "b", "c"]
            .iter()
            .map(|name| NodeSpec {
                name: (*name).to_owned(),
                provider: "sim1".into(),
                placement_group: "g1".into(),
                priority: 0,
                nic: format!("eni-{name}"),
                capacity: None,
            })
            .collect();
        let view =
            Federation::new(&nodes, &[ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }]);
        let mut fleet = (view.clone(), History::new(view));
        for name in ["a", "b", "c"] {
            apply(&mut fleet, 1_000, EventKind::Heartbeat { node: name.into() });
        }
        for (name, addresses) in [("edge", &["10.0.0.10", "10.0.1.10"][..]), ("core", &["10.0.0.11"][..])] {
            let spec = PoolSpec {
                name: name.into(),
                addresses: addresses.iter().map(|a| a.parse().expect("an address")).collect(),
                provider: "sim1".into(),
                placement_group: "g1".into(),
                members: vec!["a".into(), "b".into(), "c".into()],
                authority: Authority::None,
                approval: Approval::Auto,
                deprovision_hold_ms: 0,
                heartbeat_ttl_ms: 1_000,
                promotion_hold_ms: 0,
                epoch_locking: true,
                prefer_nodes: Vec::new(),
                preempt: false,
                auto_failover: true,
            };
            apply(&mut fleet, 1_000, EventKind::PoolApplied { spec: Box::new(spec) });
        }
        let result = confirmed(&fleet.0, "edge", "10.0.0.10".parse().expect("an address"));
        apply(&mut fleet, 1_100, result);
        fleet
    }

    /// Applies one event to the view and the history.
    pub(crate) fn apply(fleet: &mut (Federation, History), at_ms: u64, kind: EventKind) {
        let event = Event { at_ms, kind };
        fleet.0.apply(&event).expect("the test's events apply");
        let index =
            tenure_core::log_store::LogIndex::from_stored(fleet.0.events_applied()).expect("not zero");
        fleet.1.apply(index, &event);
    }

    /// The `action-result` confirming the owner's acquire of `address`.
    pub(crate) fn confirmed(view: &Federation, pool: &str, address: IpAddr) -> EventKind {
        let state = view.address(pool, address).expect("listed");
        let node = &view.nodes()[state.line.desired_holder.expect("a holder") as usize].spec;
        let pool_state = &view.pools()[pool];
        let action = StampedAction::new(
            pool,
            address,
            ProviderKind::SimCloud.verb_family().acquire_verbs()[0],
            &node.name,
            &node.provider,
            &node.nic,
            pool_state.capture_domain.clone(),
            state.line.epoch,
            state.ownership_epoch,
        );
        EventKind::ActionResult {
            node: node.name.clone(),
            idempotency_key: action.idempotency_key().to_string(),
            outcome: ActionOutcome::Executed,
            detail: String::new(),
        }
    }

    fn filter(
        pool: Option<&str>,
        node: Option<&str>,
        range: Option<&str>,
        phase: Option<Phase>,
    ) -> MapFilter {
        MapFilter {
            list: ListFilter {
                pool: pool.map(str::to_owned),
                node: node.map(str::to_owned),
                addresses: range.into_iter().map(|r| r.parse().expect("a range")).collect(),
            },
            phase,
        }
    }

    /// The map of `view` as the loop publishes it.
    pub(crate) fn snapshot(view: &Federation) -> MapSnapshot {
        let mut index = tenure_core::map_index::MapIndex::new();
        index.follow(&mut view.clone());
        index.snapshot()
    }

    fn shown(view: &Federation, filter: &MapFilter) -> Vec<String> {
        map_page(&snapshot(view), filter, 1, 100)
            .rows
            .into_iter()
            .map(|row| format!("{}/{}", row.pool, row.address))
            .collect()
    }

    #[test]
    fn filters_narrow_by_pool_node_range_and_phase() {
        let (view, _) = fleet();
        let owner = |pool: &str, address: &str| {
            let state = view.address(pool, address.parse().expect("an address")).expect("listed");
            view.node_name(state.owner.expect("owned")).to_owned()
        };
        let edge_owner = owner("edge", "10.0.0.10");
        assert_eq!(
            shown(&view, &MapFilter::default()),
            ["core/10.0.0.11", "edge/10.0.0.10", "edge/10.0.1.10"]
        );
        assert_eq!(
            shown(&view, &filter(Some("edge"), None, None, None)),
            ["edge/10.0.0.10", "edge/10.0.1.10"]
        );
        assert_eq!(
            shown(&view, &filter(None, None, Some("10.0.0.0/24"), None)),
            ["core/10.0.0.11", "edge/10.0.0.10"]
        );
        assert_eq!(shown(&view, &filter(None, None, Some("10.0.1.10/32"), None)), ["edge/10.0.1.10"]);
        assert_eq!(shown(&view, &filter(None, None, None, Some(Phase::Held))), ["edge/10.0.0.10"]);
        let acquiring = shown(&view, &filter(None, None, None, Some(Phase::Acquiring)));
        assert_eq!(acquiring, ["core/10.0.0.11", "edge/10.0.1.10"]);
        let of_owner = shown(&view, &filter(None, Some(&edge_owner), None, None));
        assert!(of_owner.contains(&"edge/10.0.0.10".to_owned()), "{of_owner:?}");
        assert!(of_owner.iter().all(|row| {
            let (pool, address) = row.split_once('/').expect("pool/address");
            owner(pool, address) == edge_owner
        }));
        assert!(
            shown(&view, &filter(None, Some("nobody"), None, None)).is_empty(),
            "an unknown node has nothing"
        );
        // The counts: of the filtered rows by phase; of the whole map per node.
        let page = map_page(&snapshot(&view), &filter(Some("edge"), None, None, None), 1, 100);
        assert_eq!((page.matched, page.total), (2, 3));
        assert_eq!(page.phases, BTreeMap::from([(Phase::Acquiring, 1), (Phase::Held, 1)]));
        assert_eq!(page.per_node.values().map(|c| c.0).sum::<usize>(), 3, "every address has an owner");
        assert_eq!(page.per_node[&edge_owner].1, 1, "the owner holds the address it confirmed");
        assert_eq!(page.pools, ["core", "edge"]);
    }

    #[test]
    fn a_page_past_the_last_shows_the_last() {
        let (view, _) = fleet();
        let page = |n| map_page(&snapshot(&view), &MapFilter::default(), n, 2);
        assert_eq!((page(1).rows.len(), page(1).page, page(1).pages), (2, 1, 2));
        assert_eq!((page(2).rows.len(), page(2).page), (1, 2));
        assert_eq!((page(9).rows.len(), page(9).page), (1, 2));
        assert_eq!(page(9).rows[0].address, "10.0.1.10");
        let none = map_page(&snapshot(&view), &filter(Some("gone"), None, None, None), 3, 2);
        assert_eq!((none.rows.len(), none.page, none.pages, none.matched), (0, 1, 1, 0));
    }

    /// A scrape counts every address by pool and phase, and writes the rows only as asked: for
    /// a map of at most the bound (auto), always (all), never (none).
    #[test]
    fn a_scrape_counts_every_address_and_writes_rows_only_as_asked() {
        let (view, _) = fleet();
        let map = snapshot(&view);
        let count = |pool: &str, phase: Phase, n| ((pool.to_owned(), phase.as_str().to_owned()), n);
        let counts = vec![
            count("core", Phase::PendingApproval, 0),
            count("core", Phase::Acquiring, 1),
            count("core", Phase::Held, 0),
            count("core", Phase::Releasing, 0),
            count("core", Phase::Released, 0),
            count("edge", Phase::PendingApproval, 0),
            count("edge", Phase::Acquiring, 1),
            count("edge", Phase::Held, 1),
            count("edge", Phase::Releasing, 0),
            count("edge", Phase::Released, 0),
        ];
        let whole = rows_page(&map, &OwnershipQuery::default()).rows;
        assert_eq!(whole.len(), 3);
        for (series, rows) in [
            (AddressSeries::Auto(3), Some(&whole)),
            (AddressSeries::Auto(2), None),
            (AddressSeries::All, Some(&whole)),
            (AddressSeries::None, None),
        ] {
            let metrics = address_metrics(&map, series);
            assert_eq!(metrics.counts, counts, "{series:?}");
            assert_eq!(metrics.rows.as_ref(), rows, "{series:?}");
            assert_eq!(metrics.omitted, if rows.is_some() { 0 } else { 3 }, "{series:?}");
        }
        assert_eq!(AddressSeries::parse("auto"), Some(AddressSeries::Auto(ADDRESS_SERIES_AUTO_MAX)));
        assert_eq!(AddressSeries::parse("All"), None, "values are lower case");
    }

    /// Pages of `GET /v1/ownership` walk the whole list once, in order, each row its full row.
    #[test]
    fn rows_pages_continue_after_a_position() {
        let (view, _) = fleet();
        let whole = tenure_core::rows::ownership_rows_with_status(&view);
        let mut walked = Vec::new();
        let mut after = None;
        loop {
            let page = rows_page(
                &snapshot(&view),
                &OwnershipQuery { filter: MapFilter::default(), after, limit: Some(2) },
            );
            let last =
                page.rows.last().map(|row| (row.pool.clone(), row.address.parse().expect("an address")));
            walked.extend(page.rows);
            if !page.more {
                break;
            }
            after = last;
        }
        assert_eq!(walked, whole);
        let edge = rows_page(
            &snapshot(&view),
            &OwnershipQuery {
                filter: filter(Some("edge"), None, None, None),
                after: Some(("core".into(), "10.0.0.11".parse().expect("an address"))),
                limit: None,
            },
        );
        assert_eq!(edge.rows.len(), 2);
        let past = rows_page(
            &snapshot(&view),
            &OwnershipQuery {
                filter: filter(Some("core"), None, None, None),
                after: Some(("edge".into(), "10.0.0.10".parse().expect("an address"))),
                limit: None,
            },
        );
        assert!(past.rows.is_empty() && !past.more);
    }
}
