//! The simulated providers `sim-cloud` and `sim-onprem` (SPEC 7): in-memory, with exactly the
//! semantics of the real ones. These are test doubles for clouds and Linux neighbour tables, used
//! by `tenure replay`, `tenure demo` and the simulator.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::model::{ProviderKind, StampedAction, Verb};

/// One simulated provider's holdings: per address, the NICs that hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimProvider {
    kind: ProviderKind,
    holdings: BTreeMap<IpAddr, BTreeSet<String>>,
    forwarding: BTreeMap<IpAddr, BTreeSet<String>>,
    announcements: u64,
}

/// Why a simulated provider refused a call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SimProviderError {
    /// The verb belongs to the other family (a cloud verb on `sim-onprem`, or the reverse).
    #[error("{provider} does not support `{verb}`")]
    UnsupportedVerb {
        /// Provider kind.
        provider: &'static str,
        /// The verb.
        verb: Verb,
    },
}

impl SimProvider {
    /// An empty provider. `kind` must be `SimCloud` or `SimOnprem`.
    #[must_use]
    pub fn new(kind: ProviderKind) -> Self {
        assert!(matches!(kind, ProviderKind::SimCloud | ProviderKind::SimOnprem), "a simulated kind");
        Self { kind, holdings: BTreeMap::new(), forwarding: BTreeMap::new(), announcements: 0 }
    }

    /// Runs one action. Idempotent: running it twice leaves the same holdings.
    pub fn execute(&mut self, action: &StampedAction) -> Result<String, SimProviderError> {
        let nic = action.nic.to_string();
        let unsupported =
            || SimProviderError::UnsupportedVerb { provider: self.kind.as_str(), verb: action.verb };
        match (self.kind, action.verb) {
            (ProviderKind::SimCloud, Verb::AssignSecondaryIp) => {
                // AllowReassignment: the address moves from wherever it was.
                let holders = self.holdings.entry(action.address).or_default();
                let moved_from: Vec<String> = holders.iter().filter(|h| **h != nic).cloned().collect();
                holders.clear();
                holders.insert(nic.clone());
                Ok(if moved_from.is_empty() {
                    format!("assigned to {nic}")
                } else {
                    format!("reassigned from {} to {nic}", moved_from.join(","))
                })
            }
            (ProviderKind::SimCloud, Verb::UnassignSecondaryIp) => {
                // Scoped to the node's own NIC: never strips another NIC.
                let removed = self.remove(action.address, &nic);
                Ok(if removed {
                    format!("unassigned from {nic}")
                } else {
                    format!("not on {nic}: nothing to do")
                })
            }
            (ProviderKind::SimCloud, Verb::EnableForwarding) => {
                self.forwarding.entry(action.address).or_default().insert(nic);
                Ok("forwarding enabled".to_owned())
            }
            (ProviderKind::SimCloud, Verb::DisableForwarding) => {
                if let Some(set) = self.forwarding.get_mut(&action.address) {
                    set.remove(&nic);
                }
                Ok("forwarding disabled".to_owned())
            }
            (ProviderKind::SimOnprem, Verb::ProxyArpAdd) => {
                // No single assignment on-prem: two hosts may answer.
                self.holdings.entry(action.address).or_default().insert(nic.clone());
                Ok(format!("proxy neighbour on {nic}"))
            }
            (ProviderKind::SimOnprem, Verb::Garp) => {
                self.announcements += 1;
                Ok(format!("gratuitous ARP from {nic}"))
            }
            (ProviderKind::SimOnprem, Verb::ProxyArpDel) => {
                let removed = self.remove(action.address, &nic);
                Ok(if removed {
                    format!("proxy neighbour removed from {nic}")
                } else {
                    format!("no entry on {nic}")
                })
            }
            _ => Err(unsupported()),
        }
    }

    fn remove(&mut self, address: IpAddr, nic: &str) -> bool {
        let Some(holders) = self.holdings.get_mut(&address) else { return false };
        let removed = holders.remove(nic);
        if holders.is_empty() {
            self.holdings.remove(&address);
        }
        removed
    }

    /// The provider kind.
    #[must_use]
    pub fn kind(&self) -> ProviderKind {
        self.kind
    }

    /// Addresses held somewhere, each with its sorted NIC list.
    #[must_use]
    pub fn holdings(&self) -> &BTreeMap<IpAddr, BTreeSet<String>> {
        &self.holdings
    }

    /// Removes `nic` from every address it holds (an on-prem host withdrawing all its proxy
    /// entries); returns how many it held.
    pub fn remove_nic(&mut self, nic: &str) -> usize {
        let held: Vec<IpAddr> =
            self.holdings.iter().filter(|(_, nics)| nics.contains(nic)).map(|(a, _)| *a).collect();
        for address in &held {
            self.remove(*address, nic);
        }
        held.len()
    }

    /// Drops an address from a NIC behind tenure's back (drift, for tests and the simulator).
    pub fn inject_loss(&mut self, address: IpAddr, nic: &str) -> bool {
        self.remove(address, nic)
    }

    /// Puts an address on a NIC behind tenure's back (drift, for tests): on `sim-cloud` as a
    /// reassignment by another tool does (taken off every other NIC), on `sim-onprem` beside
    /// whoever answers for it already (a hand-added proxy entry).
    pub fn inject_holding(&mut self, address: IpAddr, nic: &str) {
        let holders = self.holdings.entry(address).or_default();
        if self.kind == ProviderKind::SimCloud {
            holders.clear();
        }
        holders.insert(nic.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CaptureDomain, CaptureEpoch, OwnershipEpoch};

    fn act(verb: Verb, nic: &str) -> StampedAction {
        StampedAction::new(
            "p",
            "10.0.0.1".parse().expect("literal"),
            verb,
            "n",
            "sim1",
            nic,
            CaptureDomain::new("sim1", "g1"),
            CaptureEpoch::from_stored(1),
            OwnershipEpoch::from_stored(1),
        )
    }

    #[test]
    fn cloud_assignment_is_single_and_unassign_is_nic_scoped() {
        let mut cloud = SimProvider::new(ProviderKind::SimCloud);
        cloud.execute(&act(Verb::AssignSecondaryIp, "eni-a")).expect("ok");
        cloud.execute(&act(Verb::AssignSecondaryIp, "eni-b")).expect("ok");
        let holders: Vec<&String> = cloud.holdings().values().flatten().collect();
        assert_eq!(holders, vec!["eni-b"]);
        cloud.execute(&act(Verb::UnassignSecondaryIp, "eni-a")).expect("ok");
        assert_eq!(cloud.holdings().len(), 1, "a stale unassign cannot strip another NIC");
        cloud.execute(&act(Verb::UnassignSecondaryIp, "eni-b")).expect("ok");
        assert!(cloud.holdings().is_empty());
        assert!(cloud.execute(&act(Verb::ProxyArpAdd, "eni-a")).is_err());
    }

    #[test]
    fn onprem_has_no_single_assignment() {
        let mut onprem = SimProvider::new(ProviderKind::SimOnprem);
        onprem.execute(&act(Verb::ProxyArpAdd, "eth-a")).expect("ok");
        onprem.execute(&act(Verb::ProxyArpAdd, "eth-b")).expect("ok");
        assert_eq!(onprem.holdings().values().next().map(BTreeSet::len), Some(2));
        onprem.execute(&act(Verb::ProxyArpDel, "eth-a")).expect("ok");
        assert_eq!(onprem.holdings().values().next().map(BTreeSet::len), Some(1));
        assert!(onprem.execute(&act(Verb::AssignSecondaryIp, "eth-a")).is_err());
    }
}
