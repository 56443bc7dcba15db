//! The federation state: a pure function of the log prefix applied so far (SPEC 2).
//!
//! [`Federation::apply`] folds one event in as **one atomic step** (SPEC 13): it moves stream
//! time, applies the payload, re-runs arbitration when its inputs changed, and only then moves
//! tokens, in [`settle`] — the one place where tokens move by the rules of SPEC 13. Each token is
//! compared with its value before the event and moves at most once: `ownershipEpoch` when the
//! owner differs, `captureEpoch` when the desired holder on that line differs (or drift repair
//! asked for a re-capture).
//!
//! The one other place is [`raise`]: a restore's `tokens-raised{by}` event adds `by` to every
//! token and to the floor where new lines start, so that a store restored from an older backup
//! never hands out a token value again. [`Federation::highest_token`] is kept up to date at both
//! places, never by a scan.

use std::collections::BTreeMap;
use std::net::IpAddr;

mod approvals;
mod changes;
mod drift;
pub mod history;
mod map;
mod members;
mod pools;
mod raise;
mod reader;
mod settle;
mod snapshot;
mod status;
mod vrrp;

pub use changes::{MapChanges, PLAN_CHANGES_MAX};
pub use map::{MapAddress, MapStatus};
pub use members::registrations;
pub use settle::TokenMove;
pub use snapshot::{SNAPSHOT_VERSION, SnapshotError};
pub use status::{AddressStatus, Phase};

use crate::arbitration;
use crate::claims::{AddressClaims, Overlap};
use crate::fence::{HeadTokens, HeadView};
use crate::log::{Event, EventKind};
use crate::model::{
    CaptureDomain, CaptureEpoch, NodeSpec, OwnershipEpoch, ProviderKind, ProviderSpec, StampedAction,
};
pub use crate::state::{
    AddressState, CaptureLine, Confirmation, NodeId, NodeState, PoolConditions, PoolState,
};
use approvals::Approvals;
use changes::PlanChanges;
use settle::Touched;

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
    /// A pool shares an address with another applied pool of the same capture domain.
    #[error("pool-applied: {0}")]
    Overlap(#[from] Overlap),
    /// A `node-registered` naming a provider the registry knows as another kind.
    #[error("node-registered: provider `{provider}` is of kind `{}` in the log, not `{}`", .known.as_str(), .named.as_str())]
    ProviderKind {
        /// The provider named.
        provider: String,
        /// Its kind in the registry.
        known: ProviderKind,
        /// The kind the event names.
        named: ProviderKind,
    },
    /// A `node-registered` naming a NIC another registered node has.
    #[error(
        "node-registered: node `{node}` names nic `{nic}` of provider `{provider}`, which is node `{holder}`'s"
    )]
    NicTaken {
        /// The node registered.
        node: String,
        /// Its NIC.
        nic: String,
        /// Its provider.
        provider: String,
        /// The registered node with that NIC.
        holder: String,
    },
    /// A `node-registered` of a registered name that is another router (provider, placement
    /// group or NIC differ).
    #[error("node-registered: node `{node}` names {difference} (retire it first to register it anew)")]
    NodeRegistered {
        /// The node registered.
        node: String,
        /// The first difference, as a phrase.
        difference: String,
    },
    /// A `node-retired` of a node that still owns or is the desired holder of an address.
    #[error("node-retired: node `{node}` {what} {position}")]
    NodeHolds {
        /// The node named.
        node: String,
        /// `owns` or `is the desired holder of`.
        what: &'static str,
        /// `pool/address`.
        position: String,
    },
    /// A `tokens-raised` whose `by` would take the highest token past `u64::MAX`.
    #[error("tokens-raised: raising by {by} would take the highest token, {highest}, past 2^64 - 1")]
    TokensOverflow {
        /// The raise asked for.
        by: u64,
        /// The highest token the federation holds.
        highest: u64,
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

/// Most moves whose room [`Federation::apply`] keeps for the next event: a larger vector is freed
/// when the next event is applied (its moves read by then).
const MOVES_KEPT_MAX: usize = 4096;

/// The projection of the federation log. Same prefix in → same state out.
#[derive(Clone, Debug)]
pub struct Federation {
    nodes: Vec<NodeState>,
    node_ids: BTreeMap<String, NodeId>,
    providers: BTreeMap<String, ProviderKind>,
    pools: BTreeMap<String, PoolState>,
    /// Which applied pool lists each address, per capture domain (the overlap rule).
    claims: AddressClaims,
    approvals: Approvals,
    stream_time_ms: u64,
    events_applied: u64,
    /// Bumped by every applied event that can change what a node plans: every kind but a
    /// heartbeat or an action result, and those too when they changed the arbitration's inputs.
    plan_generation: u64,
    /// The positions whose plan the events applied since a reader last took them may have
    /// changed, and a count of changes no position names (`changes`: incremental planning).
    plan_changes: PlanChanges,
    /// Per pool (in name order), the eligible flags of the last arbitration, to skip arbitration
    /// when an event changed nothing that it reads.
    last_eligibility: Vec<Vec<bool>>,
    /// Whether `inventory` events may trigger a re-capture (SPEC 7). Off in `replay`.
    drift_repair: bool,
    /// Re-captures triggered by drift so far.
    recaptures: u64,
    /// With drift repair on: what inventory last showed per (provider, address) that a pool of
    /// that provider ever listed, per NIC: whether it held the address, and the `at` of that
    /// observation (a scoped read speaks of some NICs only). Keyed provider → address, so that
    /// the planner looks it up with a borrowed provider name on every reconcile.
    observed: BTreeMap<String, BTreeMap<IpAddr, drift::Observed>>,
    /// What the event being applied changed, with the values before it (empty between events).
    touched: Touched,
    /// The addresses whose tokens the last applied event moved ([`Federation::last_moves`]).
    moves: Vec<TokenMove>,
    /// Whether the last applied event was an `approve` the log kept now, not one it already held
    /// ([`Federation::last_approval_kept`]).
    approval_kept: bool,
    /// Where a token line created now starts (its first holder gets one more): 0 until a
    /// `tokens-raised` raises it.
    token_floor: u64,
    /// The largest token value the projection ever held (the floor if larger): kept where tokens
    /// move (`settle`, `raise`), so that it bounds every token without a scan.
    highest_token: u64,
}

impl Federation {
    /// An empty log over a node and provider registry. Duplicate names keep the first.
    #[must_use]
    pub fn new(nodes: &[NodeSpec], providers: &[ProviderSpec]) -> Self {
        let mut sorted: Vec<NodeSpec> = nodes.to_vec();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        sorted.dedup_by(|a, b| a.name == b.name);
        let node_ids =
            sorted.iter().enumerate().map(|(i, n)| (n.name.clone(), crate::state::node_id_of(i))).collect();
        let mut provider_kinds = BTreeMap::new();
        for provider in providers {
            provider_kinds.entry(provider.name.clone()).or_insert(provider.kind);
        }
        Self {
            nodes: sorted.into_iter().map(NodeState::new).collect(),
            node_ids,
            providers: provider_kinds,
            pools: BTreeMap::new(),
            claims: AddressClaims::new(),
            approvals: Approvals::default(),
            stream_time_ms: 0,
            events_applied: 0,
            plan_generation: 0,
            plan_changes: PlanChanges::default(),
            last_eligibility: Vec::new(),
            drift_repair: false,
            recaptures: 0,
            observed: BTreeMap::new(),
            touched: Touched::default(),
            moves: Vec::new(),
            approval_kept: false,
            token_floor: 0,
            highest_token: 0,
        }
    }

    /// The largest token value (ownershipEpoch or captureEpoch, of any address, line or pool,
    /// deleted and retired ones included) this projection ever held, or the token floor if that
    /// is larger. Tokens never go down, so this is also the largest token now held. The agent
    /// tells its store (and the store its identity file) so that a restore can raise above it.
    #[must_use]
    pub fn highest_token(&self) -> u64 {
        self.highest_token
    }

    /// Where a token line created now starts: 0, or the sum of the `tokens-raised` applied.
    #[must_use]
    pub fn token_floor(&self) -> u64 {
        self.token_floor
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

    /// A counter that moves whenever an applied event may change a node's plan or what it may
    /// promote: any event but a heartbeat or an action result, and those when they changed who is
    /// eligible (a node came alive or expired). The driver plans from finer accounts (the
    /// positions named, [`Federation::take_plan_changes`], and [`Federation::whole_plan_generation`]);
    /// this one tells it that pending entries may have been approved since its last promotion
    /// ([`crate::driver::NodeDriver::promotion_due`]).
    #[must_use]
    pub fn plan_generation(&self) -> u64 {
        self.plan_generation
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
        &self.nodes[id as usize].spec.name
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

    /// Whether an `approve` event named `key` (and the approval is still kept: see
    /// [`approvals`](self::approvals)).
    #[must_use]
    pub fn is_approved(&self, key: &str) -> bool {
        self.approvals.contains(key)
    }

    /// How many approvals the log state keeps (bounded: see the approvals module).
    #[must_use]
    pub fn approvals_kept(&self) -> usize {
        self.approvals.len()
    }

    /// The addresses whose tokens the last [`Federation::apply`] moved, in canonical order (pool
    /// name, then address), each with its owner and desired holder before and after: the core's
    /// own account of what an event changed, which the history ([`history`]) reads. Empty after
    /// an event that moved no token, and after a `tokens-raised` (which moves every token by the
    /// same amount and changes no holder); a rejected event changes nothing, these included.
    #[must_use]
    pub fn last_moves(&self) -> &[TokenMove] {
        &self.moves
    }

    /// Whether the last [`Federation::apply`] was an `approve` that the log keeps and did not
    /// hold before: an `approve` of a key already approved (two operators, a retried request, two
    /// agents of a fleet) changes nothing and is not a second approval in the history.
    #[must_use]
    pub fn last_approval_kept(&self) -> bool {
        self.approval_kept
    }

    /// Applies one event (SPEC 2) as one atomic step (SPEC 13). A rejected event changes nothing.
    pub fn apply(&mut self, event: &Event) -> Result<Applied, EventRejected> {
        self.check(&event.kind)?;
        if self.moves.capacity() > MOVES_KEPT_MAX {
            // Not kept at the size of the largest event's moves: a node's first heartbeat over a
            // million addresses moves them all (~100 MB, kept for nothing since).
            self.moves = Vec::new();
        } else {
            self.moves.clear();
        }
        self.approval_kept = false;
        self.stream_time_ms = self.stream_time_ms.max(event.at_ms);
        self.events_applied += 1;
        let mut structure_changed = false;
        let applied = match &event.kind {
            EventKind::Heartbeat { node } => {
                self.note_revival(node);
                // Counted as of the stream time the log took it (SPEC 3; "Time in a fleet").
                let taken_ms = self.stream_time_ms;
                let state = self.node_mut(node);
                state.last_heartbeat_ms = Some(state.last_heartbeat_ms.map_or(taken_ms, |t| t.max(taken_ms)));
                state.heartbeat_stamp_ms =
                    Some(state.heartbeat_stamp_ms.map_or(event.at_ms, |t| t.max(event.at_ms)));
                Applied::Applied
            }
            EventKind::Drain { node } => {
                self.node_mut(node).drained = true;
                Applied::Applied
            }
            EventKind::Undrain { node } => {
                self.note_return(node);
                self.node_mut(node).drained = false;
                Applied::Applied
            }
            EventKind::Health { node, healthy } => {
                if *healthy {
                    self.note_return(node);
                }
                self.node_mut(node).healthy = *healthy;
                Applied::Applied
            }
            EventKind::Vrrp { node, state } => {
                self.apply_vrrp(node, *state);
                Applied::Applied
            }
            EventKind::PoolApplied { spec } => {
                self.apply_pool(spec);
                structure_changed = true;
                Applied::Applied
            }
            EventKind::PoolDeleted { pool } => {
                structure_changed = true;
                self.delete_pool(pool)
            }
            EventKind::Desire { pool, address } => self.set_desired(pool, *address, true),
            EventKind::Undesire { pool, address } => self.set_desired(pool, *address, false),
            EventKind::Approve { idempotency_key } => {
                self.approve(idempotency_key);
                Applied::Applied
            }
            EventKind::ActionResult { node, idempotency_key, outcome, .. } => {
                if *outcome == crate::log::ActionOutcome::Executed {
                    self.confirm(node, idempotency_key, event.at_ms);
                }
                Applied::Applied
            }
            EventKind::Inventory { provider, address, holders, scope } => {
                if self.drift_repair {
                    self.observe_inventory(provider, *address, holders, scope.as_deref(), event.at_ms);
                }
                Applied::Applied
            }
            EventKind::TokensRaised { by } => {
                self.raise_tokens(*by);
                Applied::Applied
            }
            EventKind::NodeRegistered { spec, provider_kind } => {
                self.register_node(spec, *provider_kind);
                structure_changed = true;
                Applied::Applied
            }
            EventKind::NodeRetired { node, .. } => {
                self.retire_node(node);
                structure_changed = true;
                Applied::Applied
            }
        };
        let rearbitrated = self.arbitrate_if_needed(structure_changed);
        // A whole change subsumes the names: `settle` names what it touched only otherwise.
        let whole = structure_changed || matches!(event.kind, EventKind::TokensRaised { .. });
        if whole {
            self.plan_changed_whole();
        }
        self.settle(!whole);
        let liveness_only =
            matches!(event.kind, EventKind::Heartbeat { .. } | EventKind::ActionResult { .. });
        if rearbitrated || !liveness_only {
            self.plan_generation += 1;
        }
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
            self.claims.check(spec)?;
        }
        match kind {
            EventKind::TokensRaised { by } => self.check_raise(*by)?,
            EventKind::NodeRegistered { spec, provider_kind } => {
                self.check_registration(spec, *provider_kind)?
            }
            EventKind::NodeRetired { node, .. } => self.check_retirement(node)?,
            _ => {}
        }
        Ok(())
    }

    fn node_mut(&mut self, name: &str) -> &mut NodeState {
        let id = self.node_ids[name];
        &mut self.nodes[id as usize]
    }

    fn set_desired(&mut self, pool: &str, address: IpAddr, desired: bool) -> Applied {
        let Some(p) = self.pools.get_mut(pool).filter(|p| !p.deleted) else {
            return Applied::NoSuchTarget;
        };
        let Some(state) = p.addresses.get_mut(&address).filter(|s| s.active) else {
            return Applied::NoSuchTarget;
        };
        if state.desired != desired {
            self.touched.touch(pool, &p.capture_domain, address, state);
            state.desired = desired;
        }
        Applied::Applied
    }

    /// Arbitrates again when the structure or anyone's eligibility changed. Returns whether it
    /// did.
    fn arbitrate_if_needed(&mut self, structure_changed: bool) -> bool {
        let now_ms = self.stream_time_ms;
        let eligibility = arbitration::eligibility(&self.nodes, &self.pools, now_ms);
        if !structure_changed && eligibility == self.last_eligibility {
            return false;
        }
        let owners = arbitration::compute_owners(&self.nodes, &self.pools, now_ms);
        for (name, conditions) in owners.conditions {
            if let Some(pool) = self.pools.get_mut(&name) {
                pool.conditions = conditions;
            }
        }
        // Only changed owners are written; tokens move in `settle`, once per event.
        for (name, address, owner) in owners.changes {
            let pool = self.pools.get_mut(&name).expect("the map was computed from these pools");
            let state = pool.addresses.get_mut(&address).expect("the map was computed from this state");
            self.touched.touch(&name, &pool.capture_domain, address, state);
            state.owner = owner;
        }
        self.last_eligibility = eligibility;
        true
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

    /// The applied pool through which `node` is now the desired holder of `address` on
    /// `provider`, if any (SPEC 13: a NIC holds an address, not a pool's copy of it). Pools are
    /// few; this walks the applied pools of the provider.
    #[must_use]
    pub fn desired_pool_of(&self, node: NodeId, provider: &str, address: IpAddr) -> Option<&str> {
        self.pools
            .iter()
            .filter(|(_, p)| !p.deleted && p.spec.provider == provider)
            .find(|(_, p)| p.addresses.get(&address).is_some_and(|a| a.line.desired_holder == Some(node)))
            .map(|(name, _)| name.as_str())
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

/// The log head the gate reads is a federation state: every token of an action's keys with one
/// pool and one address lookup (and, for a release, the walk over the provider's pools that
/// SPEC 13's `release-of-current` needs).
impl HeadTokens for Federation {
    fn view(&self, action: &StampedAction) -> HeadView<'_> {
        let mut view = HeadView {
            capture_epoch: CaptureEpoch::NEVER,
            ownership_epoch: OwnershipEpoch::NEVER,
            desired_holder: None,
            epoch_locking: true,
            holder_desired_on_provider: false,
        };
        if !action.verb.is_acquire()
            && let Some(node) = self.node_id(&action.holder)
        {
            view.holder_desired_on_provider =
                self.desired_pool_of(node, &action.provider, action.address).is_some();
        }
        let Some(p) = self.pools.get(&*action.pool) else { return view };
        view.epoch_locking = p.spec.epoch_locking;
        let Some(state) = p.addresses.get(&action.address) else { return view };
        view.ownership_epoch = state.ownership_epoch;
        if let Some(line) = state.line_of(&action.capture_domain, &p.capture_domain) {
            view.capture_epoch = line.epoch;
            view.desired_holder = line.desired_holder.map(|id| self.node_name(id));
        }
        view
    }

    fn is_approved(&self, key: &str) -> bool {
        Federation::is_approved(self, key)
    }

    fn approval_required(&self, pool: &str) -> bool {
        self.pools.get(pool).is_none_or(|p| p.spec.approval == crate::model::Approval::Manual)
    }

    fn stream_time_ms(&self) -> u64 {
        Federation::stream_time_ms(self)
    }
}
