//! What an applied event changed for planning (issue 24: incremental planning). The planner
//! plans each (pool, address) position from the view and that position alone
//! ([`crate::planner::plan_slice`]); an event changes the plan of the positions whose inputs it
//! changed. This is the projection's own account of them, kept where they change:
//!
//! - every address [`super::settle`] settles (its owner, desired flag, activity or line was
//!   touched: the acquire of its pool, and every node's release of it on its provider, which
//!   reads every pool of the provider: [`crate::planner::release_plan`]);
//! - every address an `inventory` event speaks of, with drift repair on (what a node's NIC shows
//!   counts as captured: the planner releases it);
//! - and changes it cannot name by address — a pool applied or deleted (its spec, its addresses'
//!   activity, which pool of a provider is the first to list an address), `tokens-raised` (every
//!   token) — move [`Federation::whole_plan_generation`] instead.
//!
//! Keyed by (provider, address): the unit of "captured" (SPEC 13), and of a node's release. A
//! reader takes the keys ([`Federation::take_plan_changes`]) and plans those positions
//! ([`crate::planner::plan_keys`]); more than [`PLAN_CHANGES_MAX`] untaken keys are forgotten and
//! counted as a whole change (a view nobody takes from, as `replay`'s, stays bounded; a change
//! of that many positions is planned by a pass). Stream time is not here: a
//! release held back until a time is in the plan's [`crate::planner::Plan::held`], and the driver
//! names its position when the time comes.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::Federation;
use crate::model::ProviderAddress;

/// How many (provider, address) keys a view keeps untaken before it counts the lot as a whole
/// change: the largest pool's addresses ([`crate::input::POOL_ADDRESSES_MAX`]), a few MB at
/// most. A drain or a failover of up to that many addresses is planned position by position (64
/// steps of 1,024 at most), not by a pass over every address of the map.
pub const PLAN_CHANGES_MAX: usize = 65_536;

/// The keys changed since the last take, and the count of whole changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct PlanChanges {
    keys: BTreeSet<ProviderAddress>,
    whole_generation: u64,
    /// What the map's readers take ([`Federation::take_map_changes`]); `None` until one does.
    map: Option<MapChanges>,
}

/// What changed in the map the readers see ([`crate::map_index`]) since they last took it: the
/// (provider, address) keys of every pool's rows of that address, or everything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapChanges {
    /// The rows of these keys, in every pool of the provider that lists the address.
    Keys(BTreeSet<ProviderAddress>),
    /// Every row (a pool applied or deleted, tokens raised, a node joined or left, more keys than
    /// a view keeps, or the first take of this view).
    Whole,
}

impl Federation {
    /// A counter that moves when an applied event may change the plan of positions it cannot
    /// name ([`Federation::take_plan_changes`] names the others): a pool applied or deleted,
    /// `tokens-raised`, or more than [`PLAN_CHANGES_MAX`] keys untaken. While it stays, and the
    /// changed keys are planned as they are taken, planning everything again gives the same plan
    /// — but for a release whose hold ends with stream time ([`crate::planner::Plan::held`]).
    #[must_use]
    pub fn whole_plan_generation(&self) -> u64 {
        self.plan_changes.whole_generation
    }

    /// The (provider, address) keys whose plan the events applied since the last take may have
    /// changed, in order; the view keeps none after it.
    pub fn take_plan_changes(&mut self) -> BTreeSet<ProviderAddress> {
        std::mem::take(&mut self.plan_changes.keys)
    }

    /// What changed in the map's rows since the last take ([`crate::map_index::MapIndex`] takes
    /// them): every position whose plan may have changed, and what changes a row but no plan (an
    /// approval the log kept: the phase `pending-approval`). The first take of a view is
    /// [`MapChanges::Whole`]; from then on the view keeps them (a view nobody reads, as `replay`'s
    /// or the simulator's, keeps none).
    pub fn take_map_changes(&mut self) -> MapChanges {
        self.plan_changes.map.replace(MapChanges::Keys(BTreeSet::new())).unwrap_or(MapChanges::Whole)
    }

    /// Whether keys are waiting to be taken.
    #[must_use]
    pub fn has_plan_changes(&self) -> bool {
        !self.plan_changes.keys.is_empty()
    }

    /// The plan of (`provider`, `address`) may have changed.
    pub(super) fn plan_changed(&mut self, provider: &str, address: IpAddr) {
        if self.plan_changes.keys.len() >= PLAN_CHANGES_MAX {
            // The planner's keys alone: the map's readers keep their own, under their own bound
            // (they take them at every follow; a node's planner may not, in a long pass).
            self.plan_changes.keys.clear();
            self.plan_changes.whole_generation += 1;
        }
        self.plan_changes.keys.insert((crate::names::shared(provider), address));
        self.row_changed(provider, address);
    }

    /// The rows of (`provider`, `address`) in the map may have changed, its plan not
    /// ([`Federation::take_map_changes`]).
    pub(super) fn row_changed(&mut self, provider: &str, address: IpAddr) {
        if let Some(MapChanges::Keys(keys)) = &mut self.plan_changes.map {
            if keys.len() >= PLAN_CHANGES_MAX {
                self.plan_changes.map = Some(MapChanges::Whole);
            } else {
                keys.insert((crate::names::shared(provider), address));
            }
        }
    }

    /// The plan of positions no key names may have changed: everything is planned again, so
    /// the keys named so far are dropped (a pool of 65,536 addresses applied is one pass, not
    /// also 65,536 positions planned one by one).
    pub(super) fn plan_changed_whole(&mut self) {
        self.plan_changes.keys.clear();
        self.plan_changes.whole_generation += 1;
        if self.plan_changes.map.is_some() {
            self.plan_changes.map = Some(MapChanges::Whole);
        }
    }
}
