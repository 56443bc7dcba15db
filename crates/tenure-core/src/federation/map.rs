//! The ownership map as the runtime lists it (`tenure ownership`, `GET /v1/ownership`, the status
//! page, the replay report): which addresses it shows, in which order, and what a list's filters
//! and counts need of each, borrowed from the view without a string built. A caller writes out a
//! full row (names, NICs) only for the addresses it returns, so a page of 500 of a 100k-address
//! map costs 500 rows, not 100k.
//!
//! The rule of which addresses the map shows is here, once: every active address of every
//! applied pool; and, with the nodes' results ([`MapStatus::WithPhase`]), an address of a deleted
//! pool or one a pool no longer lists while a node still holds it and no applied pool wants it on
//! that node (SPEC 13: an address moved to another pool on its holder is that pool's row), so that
//! nothing held is hidden.

use std::net::IpAddr;
use std::ops::Bound;

use super::{Federation, NodeId, Phase};
use crate::state::{AddressState, PoolState};

/// Whether a map listing carries the nodes' results (an agent's map) or not (a replay's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapStatus {
    /// Owners and epochs only: a replay's log has no results.
    OwnersOnly,
    /// With each address's phase and holders, from the results the log carries.
    WithPhase,
}

/// One address the map shows, borrowed from the view.
#[derive(Clone, Debug)]
pub struct MapAddress<'a> {
    /// The pool's name.
    pub pool: &'a str,
    /// The address.
    pub address: IpAddr,
    /// The pool's provider.
    pub provider: &'a str,
    /// Its state in the pool.
    pub state: &'a AddressState,
    /// Whether an applied pool lists it (not deleted, active).
    pub listed: bool,
    /// The arbitrated owner, when the pool lists it.
    pub owner: Option<NodeId>,
    /// Its phase ([`MapStatus::WithPhase`] only).
    pub phase: Option<Phase>,
    /// The nodes whose last confirmed holding verb is an acquire, in node order
    /// ([`MapStatus::WithPhase`] only; empty otherwise).
    pub holders: Vec<NodeId>,
    /// When its phase may change with stream time alone (a leaving holder's release hold ends;
    /// [`MapStatus::WithPhase`] only).
    pub phase_changes_at_ms: Option<u64>,
}

impl MapAddress<'_> {
    /// Whether `node` owns it or holds it (the `node` filter of every ownership list).
    #[must_use]
    pub fn involves(&self, node: NodeId) -> bool {
        self.owner == Some(node) || self.holders.contains(&node)
    }
}

impl Federation {
    /// The addresses the map shows, in its order (pool name, then canonical address order),
    /// only of `pool` when given, and only after `after` (a pool and an address: the position of
    /// the last row a previous page gave) when given. Lazy: a caller that stops after 500 pays
    /// for about 500.
    pub fn map_addresses<'a>(
        &'a self,
        status: MapStatus,
        pool: Option<&'a str>,
        after: Option<(&'a str, IpAddr)>,
    ) -> impl Iterator<Item = MapAddress<'a>> + 'a {
        let pools: Box<dyn Iterator<Item = (&'a String, &'a PoolState)> + 'a> = match (pool, after) {
            (Some(pool), Some((after_pool, _))) if after_pool > pool => Box::new(std::iter::empty()),
            (Some(pool), _) => Box::new(self.pools().get_key_value(pool).into_iter()),
            (None, Some((after_pool, _))) => {
                Box::new(self.pools().range::<str, _>((Bound::Included(after_pool), Bound::Unbounded)))
            }
            (None, None) => Box::new(self.pools().iter()),
        };
        pools.flat_map(move |(name, pool_state)| {
            // Every pool yielded is at or after the position's: only its own pool starts later.
            let addresses = match after {
                Some((after_pool, address)) if after_pool == name.as_str() => {
                    pool_state.addresses.range((Bound::Excluded(address), Bound::Unbounded))
                }
                _ => pool_state.addresses.range::<IpAddr, _>(..),
            };
            addresses.filter_map(move |(address, state)| {
                self.map_address(name, pool_state, *address, state, status)
            })
        })
    }

    /// `address` of `pool` as the map shows it; `None` when the map does not show it.
    #[must_use]
    pub fn map_address_of(&self, pool: &str, address: IpAddr, status: MapStatus) -> Option<MapAddress<'_>> {
        let (name, pool_state) = self.pools().get_key_value(pool)?;
        let state = pool_state.addresses.get(&address)?;
        self.map_address(name, pool_state, address, state, status)
    }

    fn map_address<'a>(
        &self,
        name: &'a str,
        pool_state: &'a PoolState,
        address: IpAddr,
        state: &'a AddressState,
        status: MapStatus,
    ) -> Option<MapAddress<'a>> {
        let listed = !pool_state.deleted && state.active;
        let (phase, holders, phase_changes_at_ms) = match status {
            MapStatus::OwnersOnly => (None, Vec::new(), None),
            MapStatus::WithPhase => {
                let holders = self.holders_of(name, pool_state, address, state);
                let (phase, changes_at_ms) = self.phase(name, pool_state, address, state, &holders);
                (Some(phase), holders, changes_at_ms)
            }
        };
        // Unlisted, an address stays while a node holds it that no pool wants it on.
        let held = !listed
            && holders
                .iter()
                .any(|node| self.desired_pool_of(*node, &pool_state.spec.provider, address).is_none());
        (listed || held).then(|| MapAddress {
            pool: name,
            address,
            provider: &pool_state.spec.provider,
            state,
            listed,
            owner: state.owner.filter(|_| listed),
            phase,
            holders,
            phase_changes_at_ms,
        })
    }
}
