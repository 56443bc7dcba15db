//! The one overlap rule (SPEC 12, 13): an address is listed by at most one applied pool of a
//! capture domain, checked when a pool is applied, against the pools applied at that moment
//! (a pool of the same name is an update of itself). A pool file, a scenario's timeline and the
//! federation log all walk their pools through [`AddressClaims`], so the rule lives here only.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::model::{CaptureDomain, PoolSpec};
use crate::state::push_exact;

/// An address that another applied pool of the same capture domain already lists.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("address {address} of pool `{pool}` is also in pool `{other}` of capture domain {domain}")]
pub struct Overlap {
    /// The pool being applied.
    pub pool: String,
    /// The applied pool that lists the address.
    pub other: String,
    /// The shared address.
    pub address: IpAddr,
    /// Their capture domain.
    pub domain: CaptureDomain,
}

/// Most addresses already claimed for each unclaimed one [`AddressClaims::apply`] adds by
/// rebuilding the claims' tree (with more, it inserts them one by one): the rebuilds then grow the
/// tree geometrically, O(addresses) in all.
const CLAIMED_PER_UNCLAIMED_MAX: usize = 4;

/// Which applied pool lists each (capture domain, address).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddressClaims {
    /// Per address: the (domain, pool) pairs that list it (one per domain). Chunks, not a
    /// B-tree: a pool's addresses past those claimed (pools applied in address order) fill whole
    /// chunks one by one ([`crate::chunked_map`]).
    by_address:
        crate::chunked_map::ChunkedMap<IpAddr, thin_vec::ThinVec<(CaptureDomain, crate::names::Name)>>,
    /// Per applied pool: its domain and addresses, to let them go on an update or a deletion.
    by_pool: BTreeMap<String, (CaptureDomain, Vec<IpAddr>)>,
}

impl AddressClaims {
    /// No pool applied.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Every overlap of `spec` with the pools applied now, in address order (empty: it may be
    /// applied).
    #[must_use]
    pub fn overlaps(&self, spec: &PoolSpec) -> Vec<Overlap> {
        let domain = spec.capture_domain();
        let mut found = Vec::new();
        for address in &spec.addresses {
            let Some(claims) = self.by_address.get(address) else { continue };
            if let Some((_, other)) = claims.iter().find(|(d, p)| *d == domain && **p != *spec.name) {
                found.push(Overlap {
                    pool: spec.name.clone(),
                    other: other.to_string(),
                    address: *address,
                    domain: domain.clone(),
                });
            }
        }
        found
    }

    /// The first overlap of `spec` with the pools applied now.
    pub fn check(&self, spec: &PoolSpec) -> Result<(), Overlap> {
        match self.overlaps(spec).into_iter().next() {
            Some(overlap) => Err(overlap),
            None => Ok(()),
        }
    }

    /// Records `spec` as applied (replacing an earlier spec of the same name). The caller has
    /// checked it: an overlapping spec is still recorded, and the first claim of an address wins.
    pub fn apply(&mut self, spec: &PoolSpec) {
        self.delete(&spec.name);
        let domain = spec.capture_domain();
        // One copy of the pool's name and domain for all its addresses.
        let name = crate::names::shared(&spec.name);
        // Addresses no pool claims yet are added at once when they are at least a quarter of
        // those claimed already (a pool's first apply, a snapshot's load): a map built from a
        // list fills its chunks, while addresses inserted one by one among those claimed (pools
        // that interleave) split chunks in halves. The rebuild moves every claim, so a few
        // addresses added to many are inserted one by one (a thousand small pools would
        // otherwise cost a rebuild each).
        let mut unclaimed = Vec::new();
        for address in &spec.addresses {
            match self.by_address.get_mut(address) {
                Some(claims) => {
                    if !claims.iter().any(|(d, _)| *d == domain) {
                        push_exact(claims, (domain.clone(), name.clone()));
                    }
                }
                None => {
                    let mut claims = thin_vec::ThinVec::new();
                    push_exact(&mut claims, (domain.clone(), name.clone()));
                    unclaimed.push((*address, claims));
                }
            }
        }
        if unclaimed.len().saturating_mul(CLAIMED_PER_UNCLAIMED_MAX) >= self.by_address.len() {
            self.by_address = std::mem::take(&mut self.by_address).into_pairs().chain(unclaimed).collect();
        } else {
            self.by_address.extend(unclaimed);
        }
        self.by_pool.insert(spec.name.clone(), (domain, spec.addresses.clone()));
    }

    /// Lets go of every address of pool `name` (no-op if it is not applied).
    pub fn delete(&mut self, name: &str) {
        let Some((domain, addresses)) = self.by_pool.remove(name) else { return };
        for address in addresses {
            if let Some(claims) = self.by_address.get_mut(&address) {
                claims.retain(|(d, p)| !(*d == domain && **p == *name));
                if claims.is_empty() {
                    self.by_address.remove(&address);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Approval, Authority};

    fn pool(name: &str, group: &str, addresses: &[&str]) -> PoolSpec {
        PoolSpec {
            name: name.into(),
            addresses: addresses.iter().map(|a| a.parse().expect("literal")).collect(),
            provider: "sim1".into(),
            placement_group: group.into(),
            members: vec![],
            authority: Authority::None,
            approval: Approval::Auto,
            deprovision_hold_ms: 0,
            heartbeat_ttl_ms: 1,
            promotion_hold_ms: 0,
            epoch_locking: true,
            prefer_nodes: vec![],
            preempt: false,
            auto_failover: true,
        }
    }

    #[test]
    fn an_address_moves_only_after_it_was_let_go() {
        let mut claims = AddressClaims::new();
        let pa = pool("pa", "g1", &["10.0.0.1", "10.0.0.2"]);
        let pb = pool("pb", "g1", &["10.0.0.2"]);
        claims.apply(&pa);
        let overlap = claims.check(&pb).expect_err("10.0.0.2 is in pa");
        assert_eq!((overlap.other.as_str(), overlap.address.to_string()), ("pa", "10.0.0.2".into()));
        assert!(claims.check(&pool("pb", "g2", &["10.0.0.2"])).is_ok(), "another domain");
        assert!(claims.check(&pool("pa", "g1", &["10.0.0.2"])).is_ok(), "an update of itself");
        claims.apply(&pool("pa", "g1", &["10.0.0.1"]));
        assert!(claims.check(&pb).is_ok(), "shrunk: 10.0.0.2 was let go");
        claims.apply(&pb);
        claims.delete("pa");
        claims.delete("pa");
        assert!(claims.check(&pool("pc", "g1", &["10.0.0.1"])).is_ok(), "deleted: let go");
        assert!(claims.check(&pool("pc", "g1", &["10.0.0.2"])).is_err(), "pb holds it");
    }

    /// A few addresses added to many (inserted one by one) are claimed as those of a pool's first
    /// apply (a tree built at once): both ways, every claim is there.
    #[test]
    fn addresses_added_at_once_or_one_by_one_are_claimed_alike() {
        let mut claims = AddressClaims::new();
        let many: Vec<String> = (1..=12).map(|i| format!("10.0.0.{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        claims.apply(&pool("big", "g1", &many));
        // One new address (fewer than a quarter of the twelve claimed) and one of `big`'s in
        // another domain.
        claims.apply(&pool("small", "g2", &["10.0.0.99", "10.0.0.3"]));
        for (address, owner) in [("10.0.0.1", "big"), ("10.0.0.12", "big"), ("10.0.0.3", "big")] {
            let overlap = claims.check(&pool("probe", "g1", &[address])).expect_err(address);
            assert_eq!(overlap.other, owner, "{address}");
        }
        for address in ["10.0.0.99", "10.0.0.3"] {
            let overlap = claims.check(&pool("probe", "g2", &[address])).expect_err(address);
            assert_eq!(overlap.other, "small", "{address}");
        }
        assert!(
            claims.check(&pool("probe", "g1", &["10.0.0.99"])).is_ok(),
            "small's address, another domain"
        );
        claims.delete("small");
        assert!(claims.check(&pool("probe", "g2", &["10.0.0.99"])).is_ok(), "let go");
    }
}
