//! The pool lifecycle (SPEC 13): `pool-applied` creates or replaces a pool, `pool-deleted`
//! retires every address of it. Both only change state and touch what they change; tokens move
//! in [`super::settle`] at the end of the event.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use super::{Applied, Federation};
use crate::arbitration;
use crate::model::{Authority, PoolSpec, VerbFamily};
use crate::model::{CaptureEpoch, OwnershipEpoch};
use crate::state::{AddressState, CaptureLine, NodeId, PoolConditions, PoolState};

/// A capture line created now: at the token floor, no holder (its first holder gets floor + 1).
fn fresh_line(token_floor: u64) -> CaptureLine {
    CaptureLine { epoch: CaptureEpoch::from_stored(token_floor), desired_holder: None }
}

/// An address listed for the first time: inactive until the caller activates it, its tokens at
/// the floor.
fn fresh_address(token_floor: u64) -> AddressState {
    AddressState {
        ownership_epoch: OwnershipEpoch::from_stored(token_floor),
        line: fresh_line(token_floor),
        ..AddressState::default()
    }
}

impl Federation {
    fn member_ids(&self, spec: &PoolSpec) -> Vec<NodeId> {
        spec.members.iter().filter_map(|m| self.node_ids.get(m).copied()).collect()
    }

    /// Creates or replaces a pool. Surviving addresses keep their `desired` flag and owner; new
    /// ones start desired; removed ones retire like a deletion; a changed capture domain moves
    /// every address to the new domain's line (continuing it if the pool used it before). A line
    /// or address created here starts at the token floor (0 unless a restore raised it).
    pub(super) fn apply_pool(&mut self, spec: &PoolSpec) {
        let floor = self.token_floor;
        let domain = spec.capture_domain();
        let member_ids = arbitration::rank_members(spec, &self.member_ids(spec), &self.nodes);
        let listed: BTreeSet<IpAddr> = spec.addresses.iter().copied().collect();
        let newest_master_counts = self.newest_master_counts(spec);
        self.claims.apply(spec);
        let pool = self.pools.entry(spec.name.clone()).or_insert_with(|| PoolState {
            spec: Arc::new(spec.clone()),
            deleted: true,
            capture_domain: domain.clone(),
            member_ids: Vec::new(),
            newest_master_counts,
            addresses: listed.iter().map(|a| (*a, fresh_address(floor))).collect(),
            conditions: PoolConditions::default(),
        });
        let domain_before = pool.capture_domain.clone();
        let domain_changed = domain_before != domain;
        for (address, state) in &mut pool.addresses {
            let survives = !pool.deleted && state.active && listed.contains(address);
            let becomes_active = listed.contains(address) && !survives;
            if domain_changed || becomes_active || (state.active && !survives) {
                self.touched.touch(&spec.name, &domain_before, *address, state);
            }
            if state.active && !survives {
                state.active = false;
                state.owner = None;
            }
            if domain_changed {
                let old_line = std::mem::replace(&mut state.line, fresh_line(floor));
                crate::state::push_exact(&mut state.retired_lines, (domain_before.clone(), old_line));
                if let Some(index) = state.retired_lines.iter().position(|(d, _)| *d == domain) {
                    state.line = state.retired_lines.remove(index).1;
                }
            }
            if becomes_active {
                state.active = true;
                state.desired = true;
            }
        }
        for address in &listed {
            if !pool.addresses.contains_key(address) {
                let state = pool.addresses.entry(*address).or_insert_with(|| fresh_address(floor));
                self.touched.touch(&spec.name, &domain_before, *address, state);
                state.active = true;
                state.desired = true;
            }
        }
        pool.spec = Arc::new(spec.clone());
        pool.deleted = false;
        pool.capture_domain = domain;
        pool.member_ids = member_ids;
        pool.newest_master_counts = newest_master_counts;
    }

    /// [`PoolState::newest_master_counts`] for `spec`.
    pub(super) fn newest_master_counts(&self, spec: &PoolSpec) -> bool {
        spec.authority == Authority::Vrrp
            && self.providers.get(&spec.provider).is_some_and(|kind| kind.verb_family() == VerbFamily::Onprem)
    }

    /// Retires every address of a pool: owner and desired holder become none.
    pub(super) fn delete_pool(&mut self, name: &str) -> Applied {
        let Some(pool) = self.pools.get_mut(name).filter(|p| !p.deleted) else {
            return Applied::NoSuchTarget;
        };
        self.claims.delete(name);
        for (address, state) in pool.addresses.iter_mut().filter(|(_, s)| s.active) {
            self.touched.touch(name, &pool.capture_domain, *address, state);
            state.active = false;
            state.owner = None;
        }
        pool.deleted = true;
        pool.conditions = PoolConditions::default();
        Applied::Applied
    }
}
