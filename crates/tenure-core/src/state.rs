//! The state the federation log builds, as plain data: nodes, pools, addresses and their token
//! lines. A leaf module: eligibility, arbitration, the planner and the fence read these types;
//! only [`crate::federation`] changes them, and only it moves tokens (SPEC 13, atomic events).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use thin_vec::ThinVec;

use crate::model::{CaptureDomain, CaptureEpoch, NodeSpec, OwnershipEpoch, PoolSpec, VrrpState};

/// Index of a node in the registry: the configured nodes sorted by name, then the nodes the log
/// registered in the order it did (a retired node's index is taken out: `federation/members.rs`).
pub type NodeId = u32;

/// The id of the node at `index` of the registry (a `u32`: an owner is 8 bytes in every address's
/// state, not 16). A registry has far fewer nodes than that.
#[must_use]
pub fn node_id_of(index: usize) -> NodeId {
    NodeId::try_from(index).expect("a registry of fewer than 2^32 nodes")
}

/// What the log says about one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeState {
    /// The node as configured.
    pub spec: NodeSpec,
    /// Its capture domain.
    pub capture_domain: CaptureDomain,
    /// The stream time at which the log took its latest heartbeat (SPEC 3 as amended for fleets:
    /// `max(stream time, at)` when applied, so a heartbeat stamped by a clock behind the stream
    /// is not old news: the node was alive when the log took it). Never moves backwards.
    pub last_heartbeat_ms: Option<u64>,
    /// Largest `at` its heartbeats carried: the appending host's own clock reading, which the
    /// agents' clock-lead rule reads (`docs/architecture.md`, "Time in a fleet").
    pub heartbeat_stamp_ms: Option<u64>,
    /// Drained nodes are excluded at once.
    pub drained: bool,
    /// Latest `health` verdict; healthy until told otherwise.
    pub healthy: bool,
    /// Latest VRRP state this node reported; `None` until keepalived reported one.
    pub vrrp: Option<VrrpState>,
    /// When its latest report is MASTER: where the log took that report. Among a pool's members
    /// that say MASTER, the newest report counts ([`crate::eligibility::vrrp_floor`]; issue 24).
    pub vrrp_master: Option<MasterReport>,
    /// The log order (`events_applied`) of this node's last return while it had a MASTER report
    /// (0: never): a heartbeat that found it expired, or an `undrain` / healthy `health` after a
    /// drain / unhealthy verdict. A MASTER report from before it sets no pool's floor — the
    /// router may have left MASTER while it was away (`federation/vrrp.rs`).
    pub revived_seq: u64,
}

/// Where the log took a node's latest MASTER report (`docs/decisions.md`, "The newest MASTER
/// report counts").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MasterReport {
    /// The federation's `events_applied` count when it was applied: the log's order. 0 for a
    /// report restored from a snapshot that did not record it (every such report ties).
    pub seq: u64,
    /// Stream time when it was applied.
    pub taken_ms: u64,
}

impl NodeState {
    /// A node the log has not mentioned yet.
    #[must_use]
    pub fn new(spec: NodeSpec) -> Self {
        Self {
            capture_domain: spec.capture_domain(),
            spec,
            last_heartbeat_ms: None,
            heartbeat_stamp_ms: None,
            drained: false,
            healthy: true,
            vrrp: None,
            vrrp_master: None,
            revived_seq: 0,
        }
    }
}

/// One capture-epoch line: (pool, address, captureDomain).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CaptureLine {
    /// The line's token.
    pub epoch: CaptureEpoch,
    /// The owner if the address is desired, else none. Always none on a retired line.
    pub desired_holder: Option<NodeId>,
}

/// A node's last confirmed acquire or release of an address, from `action-result` events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Confirmation {
    /// The node that reported.
    pub node: NodeId,
    /// The line of the confirmed action.
    pub capture_domain: CaptureDomain,
    /// The NIC of the confirmed action, as its key names it (a release of an acquire is stamped
    /// with the acquire's NIC, whatever the node's NIC is now).
    pub nic: crate::names::Name,
    /// Its capture epoch.
    pub capture_epoch: CaptureEpoch,
    /// `true` for an acquire verb that takes the address, `false` for a release that drops it.
    pub acquired: bool,
    /// `at` of the `action-result` event.
    pub at_ms: u64,
}

// A million addresses keep one of each (node ids are `u32`: an `Option<usize>` owner was 16 bytes,
// the state 80 and a confirmation 48; docs/decisions.md "Issue 24: node ids are `u32`").
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<AddressState>() <= 64 && std::mem::size_of::<Confirmation>() <= 40);

/// The state of one address of one pool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddressState {
    /// Listed in the pool's current spec (and the pool is not deleted).
    pub active: bool,
    /// Desired addresses have a desired holder (their owner).
    pub desired: bool,
    /// The arbitrated owner.
    pub owner: Option<NodeId>,
    /// Token of the owner line.
    pub ownership_epoch: OwnershipEpoch,
    /// The capture line of the pool's current capture domain.
    pub line: CaptureLine,
    /// Lines of capture domains the pool used before (kept for their tokens).
    pub retired_lines: ThinVec<(CaptureDomain, CaptureLine)>,
    /// Per node: stream time of the last event that moved the desired holder away from it.
    pub moved_away_ms: ThinVec<(NodeId, u64)>,
    /// Per node: its last confirmed (`action-result: executed`) holding verb for this address.
    pub confirmations: ThinVec<Confirmation>,
}

impl AddressState {
    /// When the desired holder last moved away from `node`, if it ever did.
    #[must_use]
    pub fn moved_away_from(&self, node: NodeId) -> Option<u64> {
        self.moved_away_ms.iter().find(|(n, _)| *n == node).map(|(_, t)| *t)
    }

    pub(crate) fn record_moved_away(&mut self, node: NodeId, now_ms: u64) {
        match self.moved_away_ms.iter_mut().find(|(n, _)| *n == node) {
            Some(entry) => entry.1 = now_ms,
            None => push_exact(&mut self.moved_away_ms, (node, now_ms)),
        }
    }

    /// The line of `domain`, current or retired.
    #[must_use]
    pub fn line_of(&self, domain: &CaptureDomain, current: &CaptureDomain) -> Option<&CaptureLine> {
        if domain == current {
            Some(&self.line)
        } else {
            self.retired_lines.iter().find(|(d, _)| d == domain).map(|(_, l)| l)
        }
    }

    pub(crate) fn line_of_mut(
        &mut self,
        domain: &CaptureDomain,
        current: &CaptureDomain,
    ) -> Option<&mut CaptureLine> {
        if domain == current {
            Some(&mut self.line)
        } else {
            self.retired_lines.iter_mut().find(|(d, _)| d == domain).map(|(_, l)| l)
        }
    }

    /// The desired holder the address's state implies: its owner while it is active and desired.
    #[must_use]
    pub fn implied_holder(&self) -> Option<NodeId> {
        if self.active && self.desired { self.owner } else { None }
    }
}

/// Conditions a pool reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolConditions {
    /// Addresses without owner although some member was eligible: every eligible member is full.
    pub capacity_exhausted: u64,
    /// Addresses without owner because no member is eligible.
    pub no_eligible_member: u64,
}

/// One pool as the log built it. Deleted pools stay, for their tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolState {
    /// The latest applied spec (for a deleted pool, the last one that held its addresses).
    pub spec: Arc<PoolSpec>,
    /// Whether `pool-deleted` came after the latest `pool-applied`.
    pub deleted: bool,
    /// The capture domain of `spec`.
    pub capture_domain: CaptureDomain,
    /// Declared members, by node id, in rank-group order (see [`crate::arbitration`]).
    pub member_ids: Vec<NodeId>,
    /// Whether the newest MASTER report among the members counts ([`crate::eligibility::vrrp_floor`]):
    /// `authority: vrrp` on an on-prem provider, where keepalived's election is what decides and
    /// the host refuses adds while not MASTER. Derived from the spec and the provider's kind.
    pub newest_master_counts: bool,
    /// Every address ever listed, in canonical order.
    pub addresses: BTreeMap<IpAddr, AddressState>,
    /// The conditions of the latest arbitration.
    pub conditions: PoolConditions,
}

/// Pushes `item` growing `items` by exactly one: the per-address lists (confirmations, claims,
/// moved-away times, retired lines) hold one or two items, and `Vec::push`'s first allocation
/// is room for four — a million addresses' worth of empty slots (docs/benchmarks.md, "Where the
/// memory goes").
pub fn push_exact<T>(items: &mut ThinVec<T>, item: T) {
    items.reserve_exact(1);
    items.push(item);
}
