//! The level-triggered planner (SPEC 5): from the node's view of the log and what it has
//! captured, the acquire and release sets, every reconcile, from scratch. No edge logic and no
//! cancel: re-desiring an address takes it out of the release set and moves its captureEpoch on,
//! which makes every older action stale at the gate.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::federation::{Federation, NodeId};
use crate::model::{Approval, CaptureDomain, StampedAction, VerbFamily};

/// What a node captured, per (provider, address) — SPEC 13: a NIC holds an address, not a
/// pool's copy of it. Its last executed verb for the address on that provider, in any pool, was
/// an acquire verb. Holds what the release needs: the pool and line of the acquire it undoes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureRecord {
    /// Pool of the acquire.
    pub pool: String,
    /// NIC of the acquire.
    pub nic: String,
    /// Epoch line of the acquire.
    pub capture_domain: CaptureDomain,
}

/// A planned action and how it is to be imported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedAction {
    /// The stamped action.
    pub action: StampedAction,
    /// The pool's approval mode.
    pub approval: Approval,
}

/// What a node captured, keyed by (provider, address).
pub type Captured = BTreeMap<(String, IpAddr), CaptureRecord>;

/// A node's plan.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// The actions, in canonical order (pool, address), each address's verbs in execution order.
    pub actions: Vec<PlannedAction>,
    /// The earliest stream time at which a release held back by its pool's deprovision hold
    /// becomes due: planning again before it (with nothing else changed) gives the same plan.
    pub wake_at_ms: Option<u64>,
}

/// Plans node `node`'s actions from `view` (its applied prefix of the log), in canonical order
/// (pool, address), each address's verbs in execution order. A captured address that the node is
/// now the desired holder of on the same provider, through any applied pool, is not released.
#[must_use]
pub fn plan(view: &Federation, node: NodeId, captured: &Captured) -> Plan {
    let node_state = &view.nodes()[node];
    let node_name = node_state.spec.name.as_str();
    let now_ms = view.stream_time_ms();
    let mut planned: Vec<((String, IpAddr), Vec<PlannedAction>)> = Vec::new();

    for (pool_name, pool) in view.pools().iter().filter(|(_, p)| !p.deleted) {
        let Some(kind) = view.provider_kind(&pool.spec.provider) else { continue };
        for (address, state) in pool.addresses.iter().filter(|(_, a)| a.active) {
            if state.line.desired_holder != Some(node) {
                continue;
            }
            let actions = kind
                .verb_family()
                .acquire_verbs()
                .iter()
                .map(|verb| PlannedAction {
                    action: StampedAction::new(
                        pool_name,
                        *address,
                        *verb,
                        node_name,
                        &pool.spec.provider,
                        &node_state.spec.nic,
                        pool.capture_domain.clone(),
                        state.line.epoch,
                        state.ownership_epoch,
                    ),
                    approval: pool.spec.approval,
                })
                .collect();
            planned.push(((pool_name.clone(), *address), actions));
        }
    }

    // With drift repair on, what the provider last showed on this node's NIC counts as captured
    // too: a call that landed while the node crashed before recording it must still be released.
    let mut observed_only: Captured = BTreeMap::new();
    if view.drift_repair() {
        let provider = &node_state.spec.provider;
        for (pool_name, pool) in view.pools().iter().filter(|(_, p)| p.spec.provider == *provider) {
            for address in pool.addresses.keys() {
                let observed = view.observed_holders(provider, *address);
                if !observed.is_some_and(|holders| holders.contains(&node_state.spec.nic)) {
                    continue;
                }
                // Only an address seen on this NIC builds a key.
                let key = (provider.clone(), *address);
                if !captured.contains_key(&key) && !observed_only.contains_key(&key) {
                    let record = CaptureRecord {
                        pool: pool_name.clone(),
                        nic: node_state.spec.nic.clone(),
                        capture_domain: pool.capture_domain.clone(),
                    };
                    observed_only.insert(key, record);
                }
            }
        }
    }

    let mut wake_at_ms: Option<u64> = None;
    for ((provider, address), record) in captured.iter().chain(&observed_only) {
        if view.desired_pool_of(node, provider, *address).is_some() {
            continue;
        }
        let Some(pool) = view.pools().get(&record.pool) else { continue };
        let Some(state) = pool.addresses.get(address) else { continue };
        if let Some(moved_ms) = state.moved_away_from(node) {
            let due_ms = moved_ms.saturating_add(pool.spec.deprovision_hold_ms);
            if now_ms < due_ms {
                wake_at_ms = Some(wake_at_ms.map_or(due_ms, |w| w.min(due_ms)));
                continue;
            }
        }
        let family = view.provider_kind(provider).map_or(VerbFamily::Cloud, |k| k.verb_family());
        let capture_epoch = view.capture_epoch(&record.pool, *address, &record.capture_domain);
        let actions = family
            .release_verbs()
            .iter()
            .map(|verb| PlannedAction {
                action: StampedAction::new(
                    &record.pool,
                    *address,
                    *verb,
                    node_name,
                    provider,
                    &record.nic,
                    record.capture_domain.clone(),
                    capture_epoch,
                    state.ownership_epoch,
                ),
                approval: pool.spec.approval,
            })
            .collect();
        planned.push(((record.pool.clone(), *address), actions));
    }

    planned.sort_by(|a, b| a.0.cmp(&b.0));
    Plan { actions: planned.into_iter().flat_map(|(_, actions)| actions).collect(), wake_at_ms }
}
