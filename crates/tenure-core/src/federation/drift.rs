//! Drift repair (SPEC 7): confirmations from `action-result` events, the latest inventory, and
//! the re-capture rule. Off unless [`Federation::with_drift_repair`] turns it on (`replay` keeps
//! it off, as SPEC 13 asks).

use std::net::IpAddr;

use super::{Federation, NodeId};
use crate::model::{CaptureDomain, CaptureEpoch};

/// A node's last confirmed acquire or release of an address, from `action-result` events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Confirmation {
    /// The node that reported.
    pub node: NodeId,
    /// The line of the confirmed action.
    pub capture_domain: CaptureDomain,
    /// Its capture epoch.
    pub capture_epoch: CaptureEpoch,
    /// `true` for an acquire verb that takes the address, `false` for a release that drops it.
    pub acquired: bool,
    /// `at` of the `action-result` event.
    pub at_ms: u64,
}

impl Federation {
    /// Turns drift repair on or off. With it on, an `inventory` event that contradicts what was
    /// confirmed executed bumps the address's captureEpoch (a re-capture), which yields fresh
    /// acquire and release actions through the same planner and gate:
    /// - the desired holder confirmed its acquire in the current epoch, and its NIC is not among
    ///   the holders (it lost the address), or
    /// - a NIC holds the address whose node is not the desired holder and has no confirmed capture
    ///   (or is not a known node at all) — also when nobody is the desired holder, so that the
    ///   fresh epoch yields a fresh release for the node the inventory shows holding it.
    ///
    /// An inventory observed (`at`) before the confirmation it would contradict is ignored, so
    /// ordinary hand-overs never churn epochs.
    #[must_use]
    pub fn with_drift_repair(mut self, on: bool) -> Self {
        self.drift_repair = on;
        self
    }

    /// With drift repair on, the NICs the latest inventory of `provider` showed holding `address`.
    #[must_use]
    pub fn observed_holders(&self, provider: &str, address: IpAddr) -> Option<&[String]> {
        self.observed.get(&(provider.to_owned(), address)).map(|(holders, _)| holders.as_slice())
    }

    /// Whether inventory drives repair (and observed holdings count as captured for releases).
    #[must_use]
    pub fn drift_repair(&self) -> bool {
        self.drift_repair
    }

    /// How many re-captures drift repair triggered.
    #[must_use]
    pub fn recaptures(&self) -> u64 {
        self.recaptures
    }

    /// Records a confirmed holding verb.
    pub(super) fn confirm(&mut self, node: &str, key: &str, at_ms: u64) {
        let Some(parsed) = crate::model::ParsedKey::parse(key) else { return };
        if !parsed.verb.changes_holding() {
            return;
        }
        let acquired = parsed.verb.is_acquire();
        let node_id = self.node_ids[node];
        if parsed.holder != node {
            return;
        }
        let Some(state) = self.pools.get_mut(&parsed.pool).and_then(|p| p.addresses.get_mut(&parsed.address))
        else {
            return;
        };
        let confirmation = Confirmation {
            node: node_id,
            capture_domain: crate::model::CaptureDomain::new(
                &parsed.provider,
                &self.nodes[node_id].spec.placement_group,
            ),
            capture_epoch: parsed.capture_epoch,
            acquired,
            at_ms,
        };
        match state.confirmations.iter_mut().find(|c| c.node == node_id) {
            // A late or duplicated result never overrides a newer confirmation.
            Some(existing) if existing.at_ms > at_ms => {}
            Some(existing) => *existing = confirmation,
            None => state.confirmations.push(confirmation),
        }
    }

    /// Applies the drift rule to every applied pool of `provider` that lists `address`.
    pub(super) fn repair_drift(&mut self, provider: &str, address: IpAddr, holders: &[String], at_ms: u64) {
        let holder_nodes: Vec<Option<NodeId>> = holders
            .iter()
            .map(|nic| self.nodes.iter().position(|n| n.spec.provider == provider && n.spec.nic == *nic))
            .collect();
        for pool in self.pools.values_mut().filter(|p| p.spec.provider == provider) {
            let domain = pool.capture_domain.clone();
            let Some(state) = pool.addresses.get_mut(&address) else { continue };
            let desired = state.line.desired_holder.filter(|_| state.active);
            let confirmation_of = |node: NodeId| state.confirmations.iter().find(|c| c.node == node);
            let lost = desired.and_then(confirmation_of).is_some_and(|c| {
                c.acquired
                    && c.capture_epoch == state.line.epoch
                    && c.capture_domain == domain
                    && at_ms >= c.at_ms
                    && !holder_nodes.contains(&desired)
            });
            let foreign = holder_nodes.iter().any(|holder| match holder {
                None => true,
                Some(node) if Some(*node) == desired => false,
                Some(node) => confirmation_of(*node).is_none_or(|c| !c.acquired && at_ms >= c.at_ms),
            });
            if lost || foreign {
                state.line.epoch = state.line.epoch.next();
                self.recaptures += 1;
            }
        }
    }
}
