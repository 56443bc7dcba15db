//! Fleet membership (issue 24): `node-registered` adds a router to the registry (or updates the
//! priority and capacity of one already there), `node-retired` takes one out. Both change the
//! structure: every pool's members are resolved again by name and arbitration runs.
//!
//! Node ids index the registry. A registered node takes the next id; a retired node's id is
//! taken out and every later id moves down by one, so the registry holds registered nodes only,
//! in the order they joined — the order a snapshot lists them in, so that a projection restored
//! from a snapshot and one that applied the whole log have the same ids.

use super::{EventRejected, Federation};
use crate::arbitration;
use crate::model::{NodeSpec, ProviderKind};
use crate::state::{NodeId, NodeState};

impl Federation {
    /// Whether `node-registered{spec}` may be applied: the provider's kind is the one the
    /// registry knows (if it knows it), no other node has the NIC, and a node of the same name
    /// has the same provider, placement group and NIC (it is the same router: only its priority
    /// and capacity may change).
    pub(super) fn check_registration(
        &self,
        spec: &NodeSpec,
        kind: ProviderKind,
    ) -> Result<(), EventRejected> {
        if let Some(known) = self.providers.get(&spec.provider)
            && *known != kind
        {
            return Err(EventRejected::ProviderKind {
                provider: spec.provider.clone(),
                known: *known,
                named: kind,
            });
        }
        if let Some(other) = self
            .nodes
            .iter()
            .find(|n| n.spec.name != spec.name && n.spec.provider == spec.provider && n.spec.nic == spec.nic)
        {
            return Err(EventRejected::NicTaken {
                node: spec.name.clone(),
                nic: spec.nic.clone(),
                provider: spec.provider.clone(),
                holder: other.spec.name.clone(),
            });
        }
        if let Some(id) = self.node_ids.get(&spec.name) {
            let known = &self.nodes[*id as usize].spec;
            if let Some(difference) = identity_difference(known, spec) {
                return Err(EventRejected::NodeRegistered { node: spec.name.clone(), difference });
            }
        }
        Ok(())
    }

    /// Whether `node-retired{node}` may be applied: the node is registered, owns no address and
    /// is the desired holder of none, on any line (retired lines and deleted pools included).
    /// Names the first such address otherwise.
    pub(super) fn check_retirement(&self, node: &str) -> Result<(), EventRejected> {
        let Some(id) = self.node_ids.get(node).copied() else {
            return Err(EventRejected::UnknownNode { event: "node-retired", node: node.to_owned() });
        };
        for (pool, state) in &self.pools {
            for (address, a) in &state.addresses {
                let what = if a.owner == Some(id) {
                    "owns"
                } else if a.line.desired_holder == Some(id)
                    || a.retired_lines.iter().any(|(_, line)| line.desired_holder == Some(id))
                {
                    "is the desired holder of"
                } else {
                    continue;
                };
                return Err(EventRejected::NodeHolds {
                    node: node.to_owned(),
                    what,
                    position: format!("{pool}/{address}"),
                });
            }
        }
        Ok(())
    }

    /// Whether the log would take `node-retired{node}` now, and if not why (the one rule: the
    /// API asks it before it appends, the projection when it applies).
    pub fn retirement_refused(&self, node: &str) -> Option<EventRejected> {
        self.check_retirement(node).err()
    }

    /// Applies a checked `node-registered`: a new name takes the next id; a known one keeps its
    /// state and takes the new priority and capacity.
    pub(super) fn register_node(&mut self, spec: &NodeSpec, kind: ProviderKind) {
        self.providers.entry(spec.provider.clone()).or_insert(kind);
        match self.node_ids.get(&spec.name) {
            Some(id) => self.nodes[*id as usize].spec = spec.clone(),
            None => {
                self.node_ids.insert(spec.name.clone(), crate::state::node_id_of(self.nodes.len()));
                self.nodes.push(NodeState::new(spec.clone()));
            }
        }
        self.resolve_members();
    }

    /// Applies a checked `node-retired`: the node's id is taken out and every later id moves
    /// down; what the projection kept of the node (its confirmations, when it was moved away
    /// from an address) goes with it.
    pub(super) fn retire_node(&mut self, node: &str) {
        let gone = self.node_ids[node];
        let remap = |id: NodeId| if id > gone { id - 1 } else { id };
        self.nodes.remove(gone as usize);
        self.node_ids = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.spec.name.clone(), crate::state::node_id_of(i)))
            .collect();
        for pool in self.pools.values_mut() {
            for state in pool.addresses.values_mut() {
                debug_assert!(state.owner != Some(gone), "a retired node owns nothing");
                state.owner = state.owner.map(remap);
                state.line.desired_holder = state.line.desired_holder.map(remap);
                for (_, line) in &mut state.retired_lines {
                    line.desired_holder = line.desired_holder.map(remap);
                }
                state.moved_away_ms.retain(|(id, _)| *id != gone);
                for (id, _) in &mut state.moved_away_ms {
                    *id = remap(*id);
                }
                state.confirmations.retain(|c| c.node != gone);
                for confirmation in &mut state.confirmations {
                    confirmation.node = remap(confirmation.node);
                }
            }
        }
        self.resolve_members();
    }

    /// Every pool's members, resolved by name against the registry and ranked again.
    fn resolve_members(&mut self) {
        let ids = &self.node_ids;
        for pool in self.pools.values_mut() {
            let members: Vec<NodeId> = pool.spec.members.iter().filter_map(|m| ids.get(m).copied()).collect();
            pool.member_ids = arbitration::rank_members(&pool.spec, &members, &self.nodes);
        }
    }
}

/// The `node-registered` events an agent appends when it starts, after it loaded the log: one
/// for each of its own nodes (`own`) the log's registry lacks, or has with another priority or
/// capacity (an update: the same router, reconfigured). The nodes its config pins (`pins`, the
/// fleet config's `peers`) are checked, never registered: each registers itself when its agent
/// starts, and a retired one stays retired whatever configs still name it. `providers`: the agent's
/// providers, for each node's provider kind. An error, one line, when the registry has one of
/// these names as another router (provider, placement group or NIC differ), or a pin differs
/// at all: the agent then does not start.
pub fn registrations(
    view: &Federation,
    own: &[NodeSpec],
    pins: &[NodeSpec],
    providers: &[crate::model::ProviderSpec],
) -> Result<Vec<crate::log::EventKind>, String> {
    for provider in providers {
        if let Some(kind) = view.provider_kind(&provider.name)
            && kind != provider.kind
        {
            return Err(format!(
                "provider `{}`: this config says kind `{}`, the fleet's log `{}`",
                provider.name,
                provider.kind.as_str(),
                kind.as_str()
            ));
        }
    }
    for pin in pins {
        let known = view.node_id(&pin.name).map(|id| &view.nodes()[id as usize].spec);
        if let Some(difference) = known.and_then(|known| spec_difference(known, pin)) {
            return Err(format!(
                "peers: pinned node `{}`: this config names {difference}: the log's registry is in force: correct or \
                 remove the pin",
                pin.name
            ));
        }
    }
    let mut events = Vec::new();
    for spec in own {
        if view.node_id(&spec.name).is_some_and(|id| view.nodes()[id as usize].spec == *spec) {
            continue;
        }
        let Some(provider) = providers.iter().find(|p| p.name == spec.provider) else {
            return Err(format!("node `{}`: provider `{}` is not configured", spec.name, spec.provider));
        };
        // The log's own rule for a registration, asked before appending one.
        view.check_registration(spec, provider.kind)
            .map_err(|e| format!("{e}: this agent does not start"))?;
        events
            .push(crate::log::EventKind::NodeRegistered { spec: spec.clone(), provider_kind: provider.kind });
    }
    Ok(events)
}

/// What differs between a registered node and a pin of it, in anything, if anything.
fn spec_difference(known: &NodeSpec, named: &NodeSpec) -> Option<String> {
    let capacity = |c: Option<u64>| c.map_or_else(|| "none".to_owned(), |c| c.to_string());
    identity_difference(known, named)
        .or_else(|| {
            (known.priority != named.priority)
                .then(|| format!("priority `{}`, but the log has `{}`", named.priority, known.priority))
        })
        .or_else(|| {
            (known.capacity != named.capacity).then(|| {
                format!(
                    "capacity `{}`, but the log has `{}`",
                    capacity(named.capacity),
                    capacity(known.capacity)
                )
            })
        })
}

/// What differs between a registered node and a registration of the same name in what makes it
/// the same router (provider, placement group, NIC), if anything.
fn identity_difference(known: &NodeSpec, named: &NodeSpec) -> Option<String> {
    [
        ("provider", &known.provider, &named.provider),
        ("placementGroup", &known.placement_group, &named.placement_group),
        ("nic", &known.nic, &named.nic),
    ]
    .into_iter()
    .find(|(_, a, b)| a != b)
    .map(|(field, a, b)| format!("{field} `{b}`, but the log has `{a}`"))
}

#[cfg(test)]
mod tests;
