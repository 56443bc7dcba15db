//! Where tokens move by the rules (SPEC 1, 13). While an event is applied, every change to an
//! address's owner, desired flag, activity or capture domain first [`Touched::touch`]es it,
//! which keeps the value from before the event; [`Federation::settle`] then compares the state
//! after the whole event with that value and moves each token at most once. (The one other place
//! tokens move is a restore's `tokens-raised`, in [`super::raise`].) Every move here is a `next()`,
//! and keeps [`Federation::highest_token`] up to date.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::Federation;
use crate::model::{CaptureDomain, CaptureEpoch, OwnershipEpoch};
use crate::state::{AddressState, NodeId};

/// One address whose tokens the last applied event moved, as `settle` moved them:
/// what [`Federation::last_moves`] lists and the history ([`super::history`]) reads. Values
/// after the event unless named `_before`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenMove {
    /// The pool (shared: one event moves up to a whole pool).
    pub pool: crate::names::Name,
    /// The address.
    pub address: IpAddr,
    /// The owner before the event.
    pub owner_before: Option<NodeId>,
    /// The owner after it.
    pub owner: Option<NodeId>,
    /// The ownershipEpoch after it (moved exactly when the owner differs).
    pub ownership_epoch: OwnershipEpoch,
    /// The desired holder before the event: on the pool's line then (the line the address
    /// left, when the event moved the pool to another capture domain).
    pub desired_holder_before: Option<NodeId>,
    /// The desired holder on the pool's current line after it.
    pub desired_holder: Option<NodeId>,
    /// The captureEpoch of the pool's current line after it.
    pub capture_epoch: CaptureEpoch,
    /// Whether a captureEpoch moved (the current line's, or the line the address left).
    pub capture_moved: bool,
    /// Drift repair asked for a re-capture (SPEC 7): the line moved although its holder may not.
    pub recapture: bool,
}

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
    /// approvals the moved tokens made useless. Every address whose tokens moved is listed in
    /// [`Federation::last_moves`], in canonical order (pool name, then address).
    pub(super) fn settle(&mut self, name_changes: bool) {
        let now_ms = self.stream_time_ms;
        let touched = std::mem::take(&mut self.touched);
        for (name, pool_touched) in touched.pools {
            // Every touched address may plan differently (incremental planning: `changes`),
            // unless the event is a change of everything.
            if name_changes {
                let provider = self.pools[&name].spec.provider.clone();
                for address in pool_touched.addresses.keys() {
                    self.plan_changed(&provider, *address);
                }
            }
            let pool = self.pools.get_mut(&name).expect("a touched pool exists");
            let domain_after = pool.capture_domain.clone();
            let epoch_locking = pool.spec.epoch_locking;
            let shared_name = crate::names::shared(&name);
            for (address, before) in pool_touched.addresses {
                let state = pool.addresses.get_mut(&address).expect("a touched address exists");
                let Some(moved) = settle_address(state, before, &pool_touched.domain, &domain_after, now_ms)
                else {
                    continue;
                };
                self.highest_token = highest_of(state).max(self.highest_token);
                self.approvals.forget_stale(&name, address, state, &domain_after, epoch_locking);
                self.moves.push(TokenMove {
                    pool: shared_name.clone(),
                    address,
                    owner_before: before.owner,
                    owner: state.owner,
                    ownership_epoch: state.ownership_epoch,
                    desired_holder_before: moved.desired_holder_before,
                    desired_holder: state.line.desired_holder,
                    capture_epoch: state.line.epoch,
                    capture_moved: moved.capture_moved,
                    recapture: before.recapture,
                });
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

/// What settling one address moved, beyond what its state shows after.
struct Settled {
    /// The desired holder before the event (on the line the address left, if it left one).
    desired_holder_before: Option<NodeId>,
    /// Whether a captureEpoch moved.
    capture_moved: bool,
}

/// Settles one address; `None` when no token moved.
fn settle_address(
    state: &mut AddressState,
    before: Before,
    domain_before: &CaptureDomain,
    domain_after: &CaptureDomain,
    now_ms: u64,
) -> Option<Settled> {
    let mut owner_moved = false;
    let mut settled = Settled { desired_holder_before: None, capture_moved: false };
    if state.owner != before.owner {
        state.ownership_epoch = state.ownership_epoch.next();
        owner_moved = true;
    }
    let holder_after = state.implied_holder();
    if domain_before != domain_after {
        // The line the address left: its holder becomes none there.
        if let Some(left) = state.line_of_mut(domain_before, domain_after)
            && let Some(previous) = left.desired_holder.take()
        {
            left.epoch = left.epoch.next();
            state.record_moved_away(previous, now_ms);
            settled = Settled { desired_holder_before: Some(previous), capture_moved: true };
        }
        // The line it joined had no holder (a retired line never has one).
        debug_assert_eq!(state.line.desired_holder, None, "a joined line has no holder");
    }
    let holder_before = state.line.desired_holder;
    settled.desired_holder_before = settled.desired_holder_before.or(holder_before);
    if holder_before != holder_after || before.recapture {
        state.line.epoch = state.line.epoch.next();
        state.line.desired_holder = holder_after;
        settled.capture_moved = true;
        if let Some(previous) = holder_before.filter(|p| Some(*p) != holder_after) {
            state.record_moved_away(previous, now_ms);
        }
    }
    (owner_moved || settled.capture_moved).then_some(settled)
}
