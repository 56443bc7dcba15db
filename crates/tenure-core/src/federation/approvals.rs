//! Approvals as log state (SPEC 13), bounded. What is kept, a pure function of the log:
//! - an `approve` whose key does not parse as an idempotency key, or names an address no pool
//!   ever listed, is counted and not kept (it could never approve a journaled action);
//! - a kept approval is forgotten as soon as a token of its address moves past it (its
//!   captureEpoch is below its line's, or, under `epochLocking`, its ownershipEpoch below the
//!   address's): an action so stamped is stale and never runs, approved or not;
//! - at most [`APPROVALS_PER_ADDRESS_MAX`] approvals per (pool, address); past it the one with
//!   the highest tokens goes (the furthest ahead of the line: approvals of epochs to come cannot
//!   push out one of the current epoch).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::Federation;
use crate::model::{CaptureDomain, CaptureEpoch, OwnershipEpoch, ParsedKey};
use crate::state::{AddressState, PoolState};

/// Most approvals kept per (pool, address): every verb of a release and an acquire in the
/// current epoch, with room to spare.
pub const APPROVALS_PER_ADDRESS_MAX: usize = 16;

/// One kept approval.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Kept {
    pub(super) capture_epoch: CaptureEpoch,
    pub(super) ownership_epoch: OwnershipEpoch,
    pub(super) capture_domain: CaptureDomain,
    pub(super) key: String,
}

/// The approvals the log keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Approvals {
    keys: BTreeSet<String>,
    /// Per pool, per address (looked up with a borrowed pool name: this runs for every address
    /// whose tokens move).
    by_address: BTreeMap<String, BTreeMap<IpAddr, Vec<Kept>>>,
    /// Approvals not kept because they named nothing approvable.
    pub(super) ignored: u64,
}

impl Approvals {
    /// Every kept approval with its pool and address, in order (for a snapshot).
    pub(super) fn kept(&self) -> impl Iterator<Item = (&str, IpAddr, &Kept)> + '_ {
        self.by_address.iter().flat_map(|(pool, addresses)| {
            addresses
                .iter()
                .flat_map(move |(address, kept)| kept.iter().map(move |k| (pool.as_str(), *address, k)))
        })
    }

    /// Keeps an approval read back from a snapshot, as it was kept.
    pub(super) fn keep_restored(&mut self, pool: &str, address: IpAddr, kept: Kept) {
        self.keys.insert(kept.key.clone());
        self.by_address.entry(pool.to_owned()).or_default().entry(address).or_default().push(kept);
    }

    pub(super) fn contains(&self, key: &str) -> bool {
        self.keys.contains(key)
    }

    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }

    /// Forgets the approvals of (pool, address) that its tokens moved past.
    pub(super) fn forget_stale(
        &mut self,
        pool: &str,
        address: IpAddr,
        state: &AddressState,
        current: &CaptureDomain,
        epoch_locking: bool,
    ) {
        let Some(addresses) = self.by_address.get_mut(pool) else { return };
        let Some(kept) = addresses.get_mut(&address) else { return };
        kept.retain(|k| {
            let line = state.line_of(&k.capture_domain, current).map_or(CaptureEpoch::NEVER, |l| l.epoch);
            let keep =
                k.capture_epoch >= line && (!epoch_locking || k.ownership_epoch >= state.ownership_epoch);
            if !keep {
                self.keys.remove(&k.key);
            }
            keep
        });
        if kept.is_empty() {
            addresses.remove(&address);
            if addresses.is_empty() {
                self.by_address.remove(pool);
            }
        }
    }
}

impl Approvals {
    /// Forgets every kept approval whose address's tokens moved past it (after a
    /// `tokens-raised`, which moves every address at once). Walks the kept approvals only.
    pub(super) fn forget_all_stale(&mut self, pools: &BTreeMap<String, PoolState>) {
        let kept: Vec<(String, IpAddr)> = self
            .by_address
            .iter()
            .flat_map(|(pool, addresses)| addresses.keys().map(move |address| (pool.clone(), *address)))
            .collect();
        for (name, address) in kept {
            let Some(pool) = pools.get(&name) else { continue };
            let Some(state) = pool.addresses.get(&address) else { continue };
            self.forget_stale(&name, address, state, &pool.capture_domain, pool.spec.epoch_locking);
        }
    }
}

impl Federation {
    /// Applies `approve{key}` under the rules above.
    pub(super) fn approve(&mut self, key: &str) {
        let parsed = ParsedKey::parse(key);
        // Any address the federation keeps, retired ones and deleted pools' included: their
        // holders still release them, stamped with the last spec (manual approval included).
        let target = parsed.as_ref().and_then(|k| {
            let pool = self.pools.get(&k.pool)?;
            let state = pool.addresses.get(&k.address)?;
            Some((pool, state))
        });
        let (Some(parsed), Some((pool, state))) = (parsed.as_ref(), target) else {
            self.approvals.ignored += 1;
            return;
        };
        if self.approvals.keys.contains(key) {
            return;
        }
        let capture_domain = self.capture_domain_of_key(parsed);
        let line =
            state.line_of(&capture_domain, &pool.capture_domain).map_or(CaptureEpoch::NEVER, |l| l.epoch);
        let locking = pool.spec.epoch_locking;
        if parsed.capture_epoch < line || (locking && parsed.ownership_epoch < state.ownership_epoch) {
            // Already stale: it could never approve anything that runs.
            self.approvals.ignored += 1;
            return;
        }
        let kept = self
            .approvals
            .by_address
            .entry(parsed.pool.clone())
            .or_default()
            .entry(parsed.address)
            .or_default();
        kept.push(Kept {
            capture_epoch: parsed.capture_epoch,
            ownership_epoch: parsed.ownership_epoch,
            capture_domain,
            key: key.to_owned(),
        });
        self.approvals.keys.insert(key.to_owned());
        if kept.len() > APPROVALS_PER_ADDRESS_MAX {
            kept.sort();
            let dropped = kept.pop().expect("more than the maximum: not empty");
            self.approvals.keys.remove(&dropped.key);
        }
        // Kept now unless the bound pushed this very one out.
        self.approval_kept = self.approvals.keys.contains(key);
        // The phase of its rows reads the approvals (`pending-approval`); no plan does.
        self.row_changed(&parsed.provider, parsed.address);
    }

    /// The capture domain (the token line) an idempotency key is stamped on: its provider and its
    /// holder's placement group (a holder contends in its own domain); an unknown holder gets the
    /// pool's group, which names no line of another domain. The one rule for what line a key
    /// names, read by the approvals kept here and by the agent's check of an `approve` it is
    /// asked to append.
    #[must_use]
    pub fn capture_domain_of_key(&self, key: &ParsedKey) -> CaptureDomain {
        let placement = match self.node_id(&key.holder) {
            Some(id) => self.nodes[id as usize].spec.placement_group.clone(),
            None => self.pools.get(&key.pool).map(|p| p.spec.placement_group.clone()).unwrap_or_default(),
        };
        CaptureDomain::new(&key.provider, &placement)
    }

    /// How many `approve` events were not kept (junk keys, nothing to approve, already stale).
    #[must_use]
    pub fn approvals_ignored(&self) -> u64 {
        self.approvals.ignored
    }
}
