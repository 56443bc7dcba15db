//! The ownership map as readers outside the agent loop see it (issue 24: reads never wait for
//! the loop). The loop keeps a [`MapIndex`] beside its view: one compact row per address the map
//! shows ([`Federation::map_addresses`], with phases), in the map's order, changed only where the
//! view says its rows changed ([`Federation::take_map_changes`]). After each follow the loop
//! publishes [`MapIndex::snapshot`]: a clone of a [`crate::chunked_map::ChunkedMap`], O(1), sharing
//! every chunk with the index; the index's next changes copy only the chunks they touch. The API pages,
//! filters and counts a snapshot on its own threads, however long the loop's step.
//!
//! One rule for a row: [`MapRow::of`] reads it from the view, [`MapRow::render`] writes it out;
//! [`crate::rows::ownership_row`] is the two together, so a row read from a snapshot is the row a
//! listing of the view gives (the property test `tests/map_index.rs` compares them after every
//! step of random logs).

use std::net::IpAddr;
use std::ops::Bound;
use std::sync::Arc;

use crate::federation::{Federation, MapAddress, MapChanges, MapStatus, NodeId, Phase};
use crate::input::canonical_address;
use crate::rows::OwnershipRow;

/// A row's position: its pool's name and the address (the map's order).
pub type MapKey = (crate::names::Name, IpAddr);

/// One address the map shows, without a name written out: node ids of the snapshot's nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapRow {
    /// The arbitrated owner, when a pool lists it.
    pub owner: Option<NodeId>,
    /// Current ownershipEpoch.
    pub ownership_epoch: u64,
    /// Current captureEpoch.
    pub capture_epoch: u64,
    /// Desired and listed.
    pub desired: bool,
    /// Its phase ([`MapStatus::WithPhase`] only).
    pub phase: Option<Phase>,
    /// The nodes whose last confirmed holding verb is an acquire, in node order.
    pub holders: Box<[NodeId]>,
    /// The NICs holding it ([`MapStatus::WithPhase`] only): the holders' and what inventory
    /// showed.
    pub nics: Option<Box<[crate::names::Name]>>,
}

impl MapRow {
    /// The row of `shown` in `view`.
    #[must_use]
    pub fn of(view: &Federation, shown: &MapAddress<'_>) -> Self {
        let nics = shown.phase.map(|_| {
            view.nics_holding(shown.pool, shown.provider, shown.address, &shown.holders)
                .iter()
                .map(|nic| crate::names::shared(nic))
                .collect()
        });
        Self {
            owner: shown.owner,
            ownership_epoch: shown.state.ownership_epoch.get(),
            capture_epoch: shown.state.line.epoch.get(),
            desired: shown.state.desired && shown.listed,
            phase: shown.phase,
            holders: shown.holders.clone().into_boxed_slice(),
            nics,
        }
    }

    /// Whether `node` owns it or holds it (the `node` filter of every ownership list).
    #[must_use]
    pub fn involves(&self, node: NodeId) -> bool {
        self.owner == Some(node) || self.holders.contains(&node)
    }

    /// The row written out, with node names from `name`.
    #[must_use]
    pub fn render<'n>(&self, pool: &str, address: IpAddr, name: impl Fn(NodeId) -> &'n str) -> OwnershipRow {
        OwnershipRow {
            pool: pool.to_owned(),
            address: canonical_address(address),
            owner: self.owner.map(|id| name(id).to_owned()),
            ownership_epoch: self.ownership_epoch,
            capture_epoch: self.capture_epoch,
            desired: self.desired,
            phase: self.phase.map(|phase| phase.as_str().to_owned()),
            held_by: self.phase.map(|_| self.holders.iter().map(|id| name(*id).to_owned()).collect()),
            nics: self.nics.as_ref().map(|nics| nics.iter().map(|nic| nic.to_string()).collect()),
        }
    }
}

/// The map as of one moment of the view: cheap to clone, immutable, readable from any thread.
#[derive(Clone, Debug, Default)]
pub struct MapSnapshot {
    rows: crate::chunked_map::ChunkedMap<MapKey, Arc<MapRow>>,
    /// The registry's node names, by id.
    nodes: Arc<[crate::names::Name]>,
}

impl MapSnapshot {
    /// How many addresses the map shows.
    #[must_use]
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the map shows no address.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The registry's node names, by id.
    #[must_use]
    pub fn nodes(&self) -> &[crate::names::Name] {
        &self.nodes
    }

    /// The id of node `name`, if the registry has it.
    #[must_use]
    pub fn node_id(&self, name: &str) -> Option<NodeId> {
        self.nodes.iter().position(|node| &**node == name).map(crate::state::node_id_of)
    }

    /// The name of node `id`.
    #[must_use]
    pub fn node_name(&self, id: NodeId) -> &str {
        &self.nodes[id as usize]
    }

    /// The row of `address` in `pool`, if the map shows it.
    #[must_use]
    pub fn row(&self, pool: &str, address: IpAddr) -> Option<&MapRow> {
        self.rows.get(&(crate::names::shared(pool), address)).map(|row| &**row)
    }

    /// The rows in the map's order (pool name, then address), only of `pool` when given, and only
    /// after `after` (a pool and an address: where a previous page ended) when given. Lazy.
    pub fn rows<'a>(
        &'a self,
        pool: Option<&'a str>,
        after: Option<(&str, IpAddr)>,
    ) -> impl Iterator<Item = (&'a str, IpAddr, &'a MapRow)> + 'a {
        // The smallest address of a pool: IPv4 orders before IPv6.
        let first = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);
        // A position past the pool asked for: nothing of it is left.
        let past = matches!((pool, after), (Some(pool), Some((after_pool, _))) if after_pool > pool);
        let from: Bound<MapKey> = match (pool, after) {
            (Some(pool), Some((after_pool, address))) if after_pool == pool => {
                Bound::Excluded((crate::names::shared(pool), address))
            }
            (Some(pool), _) => Bound::Included((crate::names::shared(pool), first)),
            (None, Some((after_pool, address))) => {
                Bound::Excluded((crate::names::shared(after_pool), address))
            }
            (None, None) => Bound::Unbounded,
        };
        self.rows
            .range((from, Bound::Unbounded))
            .take_while(move |((name, _), _)| !past && pool.is_none_or(|pool| &**name == pool))
            .map(|((name, address), row)| (&**name, *address, &**row))
    }

    /// The row of `address` in `pool` written out, if the map shows it.
    #[must_use]
    pub fn render(&self, pool: &str, address: IpAddr, row: &MapRow) -> OwnershipRow {
        row.render(pool, address, |id| self.node_name(id))
    }
}

/// The rows the loop keeps for readers, following one view.
#[derive(Clone, Debug, Default)]
pub struct MapIndex {
    current: MapSnapshot,
    /// Rows whose phase changes with stream time alone (a release hold ending), by when: read
    /// again once the view's stream time reaches it. Few: rows with a leaving holder in its hold.
    timed: std::collections::BTreeSet<(u64, MapKey)>,
    /// The time each of those rows is filed under in `timed`.
    timed_at: std::collections::BTreeMap<MapKey, u64>,
}

impl MapIndex {
    /// An index that has followed nothing: its first [`MapIndex::follow`] reads every row.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Brings the rows up to `view`: the rows of the positions it says changed (in every pool
    /// that lists the address: a key names the provider an action was stamped with, which a pool
    /// may have left since), or every row; then the rows whose phase stream time changed. Returns
    /// how many rows were read from the view.
    pub fn follow(&mut self, view: &mut Federation) -> usize {
        if self.current.nodes.len() != view.nodes().len()
            || self.current.nodes.iter().zip(view.nodes()).any(|(kept, node)| **kept != *node.spec.name)
        {
            self.current.nodes =
                view.nodes().iter().map(|node| crate::names::shared(&node.spec.name)).collect();
        }
        let mut read = 0;
        match view.take_map_changes() {
            MapChanges::Whole => {
                self.timed.clear();
                self.timed_at.clear();
                let mut rows = Vec::new();
                for shown in view.map_addresses(MapStatus::WithPhase, None, None) {
                    let key = (crate::names::shared(shown.pool), shown.address);
                    self.file_timed(&key, shown.phase_changes_at_ms);
                    rows.push((key, Arc::new(MapRow::of(view, &shown))));
                }
                self.current.rows = rows.into_iter().collect();
                read = self.current.rows.len();
            }
            MapChanges::Keys(keys) => {
                for (_, address) in keys {
                    let pools = view.pools().iter().filter(|(_, pool)| pool.addresses.contains_key(&address));
                    for (name, _) in pools {
                        read += self.read_row(view, crate::names::shared(name), address);
                    }
                }
            }
        }
        let now_ms = view.stream_time_ms();
        while let Some((at_ms, key)) = self.timed.first().cloned()
            && at_ms <= now_ms
        {
            self.timed.remove(&(at_ms, key.clone()));
            self.timed_at.remove(&key);
            read += self.read_row(view, key.0.clone(), key.1);
        }
        read
    }

    /// Reads the row of `address` in `pool` from `view` again (gone when the map no longer shows
    /// it). Returns 1 when a row was read.
    fn read_row(&mut self, view: &Federation, pool: crate::names::Name, address: IpAddr) -> usize {
        let key = (pool, address);
        match view.map_address_of(&key.0, address, MapStatus::WithPhase) {
            Some(shown) => {
                self.file_timed(&key, shown.phase_changes_at_ms);
                self.current.rows.insert(key, Arc::new(MapRow::of(view, &shown)));
                1
            }
            None => {
                self.file_timed(&key, None);
                self.current.rows.remove(&key);
                0
            }
        }
    }

    /// Files `key` under the time its phase changes by itself, or under none.
    fn file_timed(&mut self, key: &MapKey, at_ms: Option<u64>) {
        if let Some(old) = self.timed_at.remove(key) {
            self.timed.remove(&(old, key.clone()));
        }
        if let Some(at_ms) = at_ms {
            self.timed_at.insert(key.clone(), at_ms);
            self.timed.insert((at_ms, key.clone()));
        }
    }

    /// The rows as they are now, for readers: O(1), shares every chunk with the index.
    #[must_use]
    pub fn snapshot(&self) -> MapSnapshot {
        self.current.clone()
    }
}
