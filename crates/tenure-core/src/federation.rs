//! The federation state: a pure function of the log prefix applied so far (SPEC 2).
//!
//! [`Federation::apply`] folds one event in; arbitration runs inside it whenever the eligible
//! sets or the pools changed, and the epoch rules of SPEC 1 are enforced here and nowhere else:
//! `ownershipEpoch` moves when the owner changes, `captureEpoch` when the desired holder changes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use crate::arbitration::{self, OwnerMap};

mod drift;

use crate::log::{Event, EventKind};
use crate::model::{
    CaptureDomain, CaptureEpoch, NodeSpec, OwnershipEpoch, PoolSpec, ProviderKind, ProviderSpec, VrrpState,
};
pub use drift::Confirmation;

/// Index of a node in the registry (nodes sorted by name).
pub type NodeId = usize;

/// What the log says about one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeState {
    /// The node as configured.
    pub spec: NodeSpec,
    /// Its capture domain.
    pub capture_domain: CaptureDomain,
    /// Largest `at` of its heartbeats; never moves backwards.
    pub last_heartbeat_ms: Option<u64>,
    /// Drained nodes are excluded at once.
    pub drained: bool,
    /// Latest `health` verdict; healthy until told otherwise.
    pub healthy: bool,
    /// Latest VRRP state; `None` until keepalived reported one.
    pub vrrp: Option<VrrpState>,
}

impl NodeState {
    /// A node the log has not mentioned yet.
    #[must_use]
    pub fn new(spec: NodeSpec) -> Self {
        Self {
            capture_domain: spec.capture_domain(),
            spec,
            last_heartbeat_ms: None,
            drained: false,
            healthy: true,
            vrrp: None,
        }
    }
}

/// One capture-epoch line: (pool, address, captureDomain).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CaptureLine {
    /// The line's token.
    pub epoch: CaptureEpoch,
    /// The owner if the address is desired, else none.
    pub desired_holder: Option<NodeId>,
}

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
    pub retired_lines: Vec<(CaptureDomain, CaptureLine)>,
    /// Per node: stream time of the last event that moved the desired holder away from it.
    pub moved_away_ms: Vec<(NodeId, u64)>,
    /// Per node: its last confirmed (`action-result: executed`) holding verb for this address.
    pub confirmations: Vec<Confirmation>,
}

impl AddressState {
    /// When the desired holder last moved away from `node`, if it ever did.
    #[must_use]
    pub fn moved_away_from(&self, node: NodeId) -> Option<u64> {
        self.moved_away_ms.iter().find(|(n, _)| *n == node).map(|(_, t)| *t)
    }

    fn record_moved_away(&mut self, node: NodeId, now_ms: u64) {
        match self.moved_away_ms.iter_mut().find(|(n, _)| *n == node) {
            Some(entry) => entry.1 = now_ms,
            None => self.moved_away_ms.push((node, now_ms)),
        }
    }

    /// Sets the desired holder of the current line, bumping its epoch when it changes.
    fn set_desired_holder(&mut self, holder: Option<NodeId>, now_ms: u64) {
        if self.line.desired_holder == holder {
            return;
        }
        if let Some(previous) = self.line.desired_holder {
            self.record_moved_away(previous, now_ms);
        }
        self.line.desired_holder = holder;
        self.line.epoch = self.line.epoch.next();
    }

    /// Sets the owner, bumping the ownership epoch when it changes, then the desired holder.
    fn set_owner(&mut self, owner: Option<NodeId>, now_ms: u64) {
        if self.owner != owner {
            self.owner = owner;
            self.ownership_epoch = self.ownership_epoch.next();
        }
        let holder = if self.desired { owner } else { None };
        self.set_desired_holder(holder, now_ms);
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
    /// Declared members, by node id, in rank-group order (see [`arbitration`]).
    pub member_ids: Vec<NodeId>,
    /// Every address ever listed, in canonical order.
    pub addresses: BTreeMap<IpAddr, AddressState>,
    /// The conditions of the latest arbitration.
    pub conditions: PoolConditions,
}

/// Why an event was rejected. A rejected event changes nothing, not even stream time.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EventRejected {
    /// The event names a node that is not in the registry.
    #[error("{event}: unknown node `{node}`")]
    UnknownNode {
        /// Event wire name.
        event: &'static str,
        /// The node named.
        node: String,
    },
    /// A pool names a provider that is not in the registry.
    #[error("pool-applied: pool `{pool}` names unknown provider `{provider}`")]
    UnknownProvider {
        /// Pool name.
        pool: String,
        /// The provider named.
        provider: String,
    },
    /// A pool shares an address with another pool of the same capture domain.
    #[error("pool-applied: address {address} of pool `{pool}` is also in pool `{other}` of {domain}")]
    Overlap {
        /// Pool name.
        pool: String,
        /// The other pool.
        other: String,
        /// The shared address.
        address: IpAddr,
        /// Their capture domain.
        domain: CaptureDomain,
    },
}

/// What applying a well-formed event did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The event changed state (or was a no-op by the rules, like re-desiring a desired address).
    Applied,
    /// The event named a pool or address not applied now: it only moved stream time.
    NoSuchTarget,
}

/// The projection of the federation log. Same prefix in → same state out.
#[derive(Clone, Debug)]
pub struct Federation {
    nodes: Vec<NodeState>,
    node_ids: BTreeMap<String, NodeId>,
    providers: BTreeMap<String, ProviderKind>,
    pools: BTreeMap<String, PoolState>,
    approvals: BTreeSet<String>,
    stream_time_ms: u64,
    events_applied: u64,
    /// Per pool (in name order), the eligible flags of the last arbitration, to skip arbitration
    /// when an event changed nothing that it reads.
    last_eligibility: Vec<Vec<bool>>,
    /// Whether `inventory` events may trigger a re-capture (SPEC 7). Off in `replay`.
    drift_repair: bool,
    /// Re-captures triggered by drift so far.
    recaptures: u64,
    /// With drift repair on: the latest inventory per (provider, address): holders and `at`.
    observed: BTreeMap<(String, IpAddr), (Vec<String>, u64)>,
}

impl Federation {
    /// An empty log over a node and provider registry. Duplicate names keep the first.
    #[must_use]
    pub fn new(nodes: &[NodeSpec], providers: &[ProviderSpec]) -> Self {
        let mut sorted: Vec<NodeSpec> = nodes.to_vec();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        sorted.dedup_by(|a, b| a.name == b.name);
        let node_ids = sorted.iter().enumerate().map(|(i, n)| (n.name.clone(), i)).collect();
        let mut provider_kinds = BTreeMap::new();
        for provider in providers {
            provider_kinds.entry(provider.name.clone()).or_insert(provider.kind);
        }
        Self {
            nodes: sorted.into_iter().map(NodeState::new).collect(),
            node_ids,
            providers: provider_kinds,
            pools: BTreeMap::new(),
            approvals: BTreeSet::new(),
            stream_time_ms: 0,
            events_applied: 0,
            last_eligibility: Vec::new(),
            drift_repair: false,
            recaptures: 0,
            observed: BTreeMap::new(),
        }
    }

    /// The largest `at` applied so far.
    #[must_use]
    pub fn stream_time_ms(&self) -> u64 {
        self.stream_time_ms
    }

    /// How many events were applied (rejected ones are not counted here).
    #[must_use]
    pub fn events_applied(&self) -> u64 {
        self.events_applied
    }

    /// All nodes, by id.
    #[must_use]
    pub fn nodes(&self) -> &[NodeState] {
        &self.nodes
    }

    /// The id of a node by name.
    #[must_use]
    pub fn node_id(&self, name: &str) -> Option<NodeId> {
        self.node_ids.get(name).copied()
    }

    /// The name of a node id.
    #[must_use]
    pub fn node_name(&self, id: NodeId) -> &str {
        &self.nodes[id].spec.name
    }

    /// The kind of a provider by name.
    #[must_use]
    pub fn provider_kind(&self, name: &str) -> Option<ProviderKind> {
        self.providers.get(name).copied()
    }

    /// Every pool ever applied, deleted ones included, by name.
    #[must_use]
    pub fn pools(&self) -> &BTreeMap<String, PoolState> {
        &self.pools
    }

    /// Whether an `approve` event named `key`.
    #[must_use]
    pub fn is_approved(&self, key: &str) -> bool {
        self.approvals.contains(key)
    }

    /// Applies one event (SPEC 2). A rejected event changes nothing.
    pub fn apply(&mut self, event: &Event) -> Result<Applied, EventRejected> {
        self.check(&event.kind)?;
        self.stream_time_ms = self.stream_time_ms.max(event.at_ms);
        self.events_applied += 1;
        let now_ms = self.stream_time_ms;
        let mut structure_changed = false;
        let applied = match &event.kind {
            EventKind::Heartbeat { node } => {
                let state = self.node_mut(node);
                state.last_heartbeat_ms =
                    Some(state.last_heartbeat_ms.map_or(event.at_ms, |t| t.max(event.at_ms)));
                Applied::Applied
            }
            EventKind::Drain { node } => {
                self.node_mut(node).drained = true;
                Applied::Applied
            }
            EventKind::Undrain { node } => {
                self.node_mut(node).drained = false;
                Applied::Applied
            }
            EventKind::Health { node, healthy } => {
                self.node_mut(node).healthy = *healthy;
                Applied::Applied
            }
            EventKind::Vrrp { node, state } => {
                self.node_mut(node).vrrp = Some(*state);
                Applied::Applied
            }
            EventKind::PoolApplied { spec } => {
                self.apply_pool(spec, now_ms);
                structure_changed = true;
                Applied::Applied
            }
            EventKind::PoolDeleted { pool } => {
                structure_changed = true;
                self.delete_pool(pool, now_ms)
            }
            EventKind::Desire { pool, address } => self.set_desired(pool, *address, true, now_ms),
            EventKind::Undesire { pool, address } => self.set_desired(pool, *address, false, now_ms),
            EventKind::Approve { idempotency_key } => {
                self.approvals.insert(idempotency_key.clone());
                Applied::Applied
            }
            EventKind::ActionResult { node, idempotency_key, outcome, .. } => {
                if *outcome == crate::log::ActionOutcome::Executed {
                    self.confirm(node, idempotency_key, event.at_ms);
                }
                Applied::Applied
            }
            EventKind::Inventory { provider, address, holders } => {
                if self.drift_repair {
                    self.repair_drift(provider, *address, holders, event.at_ms);
                    let key = (provider.clone(), *address);
                    if self.observed.get(&key).is_none_or(|(_, at)| *at <= event.at_ms) {
                        self.observed.insert(key, (holders.clone(), event.at_ms));
                    }
                }
                Applied::Applied
            }
        };
        self.arbitrate_if_needed(structure_changed);
        Ok(applied)
    }

    /// Validates references before anything changes.
    fn check(&self, kind: &EventKind) -> Result<(), EventRejected> {
        let node = match kind {
            EventKind::Heartbeat { node }
            | EventKind::Drain { node }
            | EventKind::Undrain { node }
            | EventKind::Health { node, .. }
            | EventKind::Vrrp { node, .. }
            | EventKind::ActionResult { node, .. } => Some(node),
            _ => None,
        };
        if let Some(node) = node
            && !self.node_ids.contains_key(node)
        {
            return Err(EventRejected::UnknownNode { event: kind.wire_name(), node: node.clone() });
        }
        if let EventKind::PoolApplied { spec } = kind {
            if !self.providers.contains_key(&spec.provider) {
                return Err(EventRejected::UnknownProvider {
                    pool: spec.name.clone(),
                    provider: spec.provider.clone(),
                });
            }
            self.check_overlap(spec)?;
        }
        Ok(())
    }

    fn check_overlap(&self, spec: &PoolSpec) -> Result<(), EventRejected> {
        let domain = spec.capture_domain();
        for (name, other) in &self.pools {
            if *name == spec.name || other.deleted || other.capture_domain != domain {
                continue;
            }
            for address in &spec.addresses {
                if other.addresses.get(address).is_some_and(|a| a.active) {
                    return Err(EventRejected::Overlap {
                        pool: spec.name.clone(),
                        other: name.clone(),
                        address: *address,
                        domain: domain.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    fn node_mut(&mut self, name: &str) -> &mut NodeState {
        let id = self.node_ids[name];
        &mut self.nodes[id]
    }

    fn member_ids(&self, spec: &PoolSpec) -> Vec<NodeId> {
        spec.members.iter().filter_map(|m| self.node_ids.get(m).copied()).collect()
    }

    fn apply_pool(&mut self, spec: &PoolSpec, now_ms: u64) {
        let domain = spec.capture_domain();
        let member_ids = arbitration::rank_members(spec, &self.member_ids(spec), &self.nodes);
        let listed: BTreeSet<IpAddr> = spec.addresses.iter().copied().collect();
        let pool = self.pools.entry(spec.name.clone()).or_insert_with(|| PoolState {
            spec: Arc::new(spec.clone()),
            deleted: true,
            capture_domain: domain.clone(),
            member_ids: Vec::new(),
            addresses: BTreeMap::new(),
            conditions: PoolConditions::default(),
        });
        let domain_changed = pool.capture_domain != domain;
        for (address, state) in &mut pool.addresses {
            let survives = !pool.deleted && state.active && listed.contains(address);
            if state.active && (!survives || domain_changed) {
                // Retire from the old epoch line: no desired holder there any more.
                state.set_desired_holder(None, now_ms);
            }
            if state.active && !survives {
                state.active = false;
                state.set_owner(None, now_ms);
            }
            if domain_changed {
                let old_line = std::mem::take(&mut state.line);
                state.retired_lines.push((pool.capture_domain.clone(), old_line));
                if let Some(index) = state.retired_lines.iter().position(|(d, _)| *d == domain) {
                    state.line = state.retired_lines.remove(index).1;
                }
                if state.active {
                    let holder = if state.desired { state.owner } else { None };
                    state.set_desired_holder(holder, now_ms);
                }
            }
        }
        for address in &listed {
            let state = pool.addresses.entry(*address).or_default();
            if !state.active {
                state.active = true;
                state.desired = true;
            }
        }
        pool.spec = Arc::new(spec.clone());
        pool.deleted = false;
        pool.capture_domain = domain;
        pool.member_ids = member_ids;
    }

    fn delete_pool(&mut self, name: &str, now_ms: u64) -> Applied {
        let Some(pool) = self.pools.get_mut(name).filter(|p| !p.deleted) else {
            return Applied::NoSuchTarget;
        };
        for state in pool.addresses.values_mut().filter(|s| s.active) {
            state.active = false;
            state.set_owner(None, now_ms);
        }
        pool.deleted = true;
        pool.conditions = PoolConditions::default();
        Applied::Applied
    }

    fn set_desired(&mut self, pool: &str, address: IpAddr, desired: bool, now_ms: u64) -> Applied {
        let Some(state) = self
            .pools
            .get_mut(pool)
            .filter(|p| !p.deleted)
            .and_then(|p| p.addresses.get_mut(&address))
            .filter(|s| s.active)
        else {
            return Applied::NoSuchTarget;
        };
        if state.desired != desired {
            state.desired = desired;
            let holder = if desired { state.owner } else { None };
            state.set_desired_holder(holder, now_ms);
        }
        Applied::Applied
    }

    fn arbitrate_if_needed(&mut self, structure_changed: bool) {
        let eligibility = arbitration::eligibility(self);
        if !structure_changed && eligibility == self.last_eligibility {
            return;
        }
        let owners = arbitration::compute_owners(self);
        self.apply_owners(&owners);
        self.last_eligibility = eligibility;
    }

    /// Writes an arbitration result, moving epochs by the SPEC 1 rules.
    fn apply_owners(&mut self, owners: &OwnerMap) {
        let now_ms = self.stream_time_ms;
        let mut live: Vec<&mut PoolState> = self.pools.values_mut().filter(|p| !p.deleted).collect();
        for (pool, conditions) in live.iter_mut().zip(&owners.conditions) {
            pool.conditions = *conditions;
        }
        // Only changed owners are written: an unchanged owner keeps its epochs and its desired
        // holder (which only desire/undesire and pool changes move, and they set it themselves).
        for (pool_index, address, owner) in &owners.changes {
            let state =
                live[*pool_index].addresses.get_mut(address).expect("the map was computed from this state");
            state.set_owner(*owner, now_ms);
        }
    }

    /// The current capture epoch of (pool, address, domain); `NEVER` if unknown.
    #[must_use]
    pub fn capture_epoch(&self, pool: &str, address: IpAddr, domain: &CaptureDomain) -> CaptureEpoch {
        self.pools
            .get(pool)
            .and_then(|p| p.addresses.get(&address).and_then(|a| a.line_of(domain, &p.capture_domain)))
            .map_or(CaptureEpoch::NEVER, |l| l.epoch)
    }

    /// The current ownership epoch of (pool, address); `NEVER` if unknown.
    #[must_use]
    pub fn ownership_epoch(&self, pool: &str, address: IpAddr) -> OwnershipEpoch {
        self.address(pool, address).map_or(OwnershipEpoch::NEVER, |a| a.ownership_epoch)
    }

    /// The current desired holder of (pool, address) on the line of `domain`.
    #[must_use]
    pub fn desired_holder(&self, pool: &str, address: IpAddr, domain: &CaptureDomain) -> Option<&str> {
        let p = self.pools.get(pool)?;
        let line = p.addresses.get(&address)?.line_of(domain, &p.capture_domain)?;
        line.desired_holder.map(|id| self.node_name(id))
    }

    /// Every token the gate needs for one action, with one pool and one address lookup.
    #[must_use]
    pub fn head_view(
        &self,
        pool: &str,
        address: IpAddr,
        domain: &CaptureDomain,
    ) -> crate::fence::HeadView<'_> {
        let mut view = crate::fence::HeadView {
            capture_epoch: CaptureEpoch::NEVER,
            ownership_epoch: OwnershipEpoch::NEVER,
            desired_holder: None,
            epoch_locking: true,
        };
        let Some(p) = self.pools.get(pool) else { return view };
        view.epoch_locking = p.spec.epoch_locking;
        let Some(state) = p.addresses.get(&address) else { return view };
        view.ownership_epoch = state.ownership_epoch;
        if let Some(line) = state.line_of(domain, &p.capture_domain) {
            view.capture_epoch = line.epoch;
            view.desired_holder = line.desired_holder.map(|id| self.node_name(id));
        }
        view
    }

    /// Whether the pool fences on ownershipEpoch (its latest spec; true if unknown).
    #[must_use]
    pub fn epoch_locking(&self, pool: &str) -> bool {
        self.pools.get(pool).is_none_or(|p| p.spec.epoch_locking)
    }

    /// The state of one address, active or retired.
    #[must_use]
    pub fn address(&self, pool: &str, address: IpAddr) -> Option<&AddressState> {
        self.pools.get(pool)?.addresses.get(&address)
    }
}
