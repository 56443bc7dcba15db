//! Where tokens move by the rules (SPEC 1, 13). While an event is applied, every change to an
//! address's owner, desired flag, activity or capture domain first [`Touched::touch`]es it,
//! which keeps the value from before the event; [`Federation::settle`] then compares the state
//! after the whole event with that value and moves each token at most once. (The one other place
//! tokens move is a restore's `tokens-raised`, in [`super::raise`].) Every move here is a `next()`,
//! and keeps [`Federation::highest_token`] up to date.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::Federation;
use crate::model::CaptureDomain;
use crate::state::{AddressState, NodeId};

/// What one address was before the event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Before {
    /// Its owner before the event.
    owner: Option<NodeId>,
    /// Drift repair asked for a re-capture (SPEC 7): the line moves even if the holder does not.
    recapture: bool,
}

/// The addresses of one pool that the event touched.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PoolTouched {
    /// The pool's capture domain before the event (its line then).
    domain: CaptureDomain,
    addresses: BTreeMap<IpAddr, Before>,
}

/// Everything the event being applied touched; empty between events.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Touched {
    pools: BTreeMap<String, PoolTouched>,
}

impl Touched {
    /// Records `state` as it is before the event, once per event (call before changing it).
    /// `domain` is the pool's capture domain before the event.
    pub(super) fn touch(
        &mut self,
        pool: &str,
        domain: &CaptureDomain,
        address: IpAddr,
        state: &AddressState,
    ) {
        if !self.pools.contains_key(pool) {
            self.pools
                .insert(pool.to_owned(), PoolTouched { domain: domain.clone(), addresses: BTreeMap::new() });
        }
        let touched = self.pools.get_mut(pool).expect("inserted above");
        touched.addresses.entry(address).or_insert(Before { owner: state.owner, recapture: false });
    }

    /// Asks for a re-capture of (pool, address): its current line moves once at the end of the
    /// event, whatever else happens to it.
    pub(super) fn recapture(
        &mut self,
        pool: &str,
        domain: &CaptureDomain,
        address: IpAddr,
        state: &AddressState,
    ) {
        self.touch(pool, domain, address, state);
        if let Some(before) = self.pools.get_mut(pool).and_then(|p| p.addresses.get_mut(&address)) {
            before.recapture = true;
        }
    }
}

impl Federation {
    /// Moves the tokens of every touched address by comparing with its value before the event:
    /// `ownershipEpoch` +1 when the owner differs; on each capture line the address was on
    /// before or is on after, `captureEpoch` +1 when the desired holder differs (a line left or
    /// joined counts as none on the other side) or a re-capture was asked for. Records, per
    /// node, when the desired holder moved away from it (the release hold), and forgets
    /// approvals the moved tokens made useless.
    pub(super) fn settle(&mut self) {
        let now_ms = self.stream_time_ms;
        let touched = std::mem::take(&mut self.touched);
        for (name, pool_touched) in touched.pools {
            let pool = self.pools.get_mut(&name).expect("a touched pool exists");
            let domain_after = pool.capture_domain.clone();
            let epoch_locking = pool.spec.epoch_locking;
            for (address, before) in pool_touched.addresses {
                let state = pool.addresses.get_mut(&address).expect("a touched address exists");
                let moved = settle_address(state, before, &pool_touched.domain, &domain_after, now_ms);
                if moved {
                    self.highest_token = highest_of(state).max(self.highest_token);
                    self.approvals.forget_stale(&name, address, state, &domain_after, epoch_locking);
                }
            }
        }
    }
}

/// The largest token of one address (its ownershipEpoch, current and retired lines). An address
/// has a handful of lines at most.
fn highest_of(state: &AddressState) -> u64 {
    let retired = state.retired_lines.iter().map(|(_, line)| line.epoch.get());
    retired.fold(state.ownership_epoch.get().max(state.line.epoch.get()), u64::max)
}

/// Settles one address; true when a token moved.
fn settle_address(
    state: &mut AddressState,
    before: Before,
    domain_before: &CaptureDomain,
    domain_after: &CaptureDomain,
    now_ms: u64,
) -> bool {
    let mut moved = false;
    if state.owner != before.owner {
        state.ownership_epoch = state.ownership_epoch.next();
        moved = true;
    }
    let holder_after = state.implied_holder();
    if domain_before != domain_after {
        // The line the address left: its holder becomes none there.
        if let Some(left) = state.line_of_mut(domain_before, domain_after)
            && let Some(previous) = left.desired_holder.take()
        {
            left.epoch = left.epoch.next();
            state.record_moved_away(previous, now_ms);
            moved = true;
        }
        // The line it joined had no holder (a retired line never has one).
        debug_assert_eq!(state.line.desired_holder, None, "a joined line has no holder");
    }
    let holder_before = state.line.desired_holder;
    if holder_before != holder_after || before.recapture {
        state.line.epoch = state.line.epoch.next();
        state.line.desired_holder = holder_after;
        moved = true;
        if let Some(previous) = holder_before.filter(|p| Some(*p) != holder_after) {
            state.record_moved_away(previous, now_ms);
        }
    }
    moved
}
