//! The level-triggered planner (SPEC 5): from the node's view of the log and what it has
//! captured, the acquire and release sets, every reconcile, from scratch. No edge logic and no
//! cancel: re-desiring an address takes it out of the release set and moves its captureEpoch on,
//! which makes every older action stale at the gate.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::federation::{Federation, NodeId};
use crate::model::{ActionStamp, Approval, CaptureDomain, VerbFamily};

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

/// A planned action and how it is to be imported. Borrowed from the view (and the node's
/// captured set): see [`ActionStamp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedAction<'a> {
    /// The stamp.
    pub stamp: ActionStamp<'a>,
    /// The pool's approval mode.
    pub approval: Approval,
}

/// What a node captured, keyed by (provider, address).
pub type Captured = BTreeMap<(String, IpAddr), CaptureRecord>;

/// A node's plan.
#[derive(Clone, Debug, Default)]
pub struct Plan<'a> {
    /// The actions, in canonical order (pool, address), each address's verbs in execution order.
    pub actions: Vec<PlannedAction<'a>>,
    /// The earliest stream time at which a release held back by its pool's deprovision hold
    /// becomes due: planning again before it (with nothing else changed) gives the same plan.
    pub wake_at_ms: Option<u64>,
}

/// A capture record's fields, borrowed from the captured set or from the view.
#[derive(Clone, Copy)]
struct RecordRef<'a> {
    pool: &'a str,
    nic: &'a str,
    capture_domain: &'a CaptureDomain,
}

/// Plans node `node`'s actions from `view` (its applied prefix of the log), in canonical order
/// (pool, address), each address's verbs in execution order. A captured address that the node is
/// now the desired holder of on the same provider, through any applied pool, is not released.
/// A release waits out its pool's deprovision hold only where [`VerbFamily::release_is_held`]
/// (not on the on-prem family: SPEC 13).
#[must_use]
pub fn plan<'a>(view: &'a Federation, node: NodeId, captured: &'a Captured) -> Plan<'a> {
    let node_state = &view.nodes()[node];
    let node_name = node_state.spec.name.as_str();
    let now_ms = view.stream_time_ms();
    let mut planned: Vec<((&'a str, IpAddr), Vec<PlannedAction<'a>>)> = Vec::new();

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
                    stamp: ActionStamp {
                        pool: pool_name,
                        address: *address,
                        verb: *verb,
                        holder: node_name,
                        provider: &pool.spec.provider,
                        nic: &node_state.spec.nic,
                        capture_domain: &pool.capture_domain,
                        capture_epoch: state.line.epoch,
                        ownership_epoch: state.ownership_epoch,
                    },
                    approval: pool.spec.approval,
                })
                .collect();
            planned.push(((pool_name.as_str(), *address), actions));
        }
    }

    // With drift repair on, what the provider last showed on this node's NIC counts as captured
    // too: a call that landed while the node crashed before recording it must still be released.
    let mut observed_only: BTreeMap<(&'a str, IpAddr), RecordRef<'a>> = BTreeMap::new();
    if view.drift_repair() {
        let provider = &node_state.spec.provider;
        for (pool_name, pool) in view.pools().iter().filter(|(_, p)| p.spec.provider == *provider) {
            for address in pool.addresses.keys() {
                if !view.observed_on(provider, *address, &node_state.spec.nic) {
                    continue;
                }
                // Only an address seen on this NIC builds a key.
                let key = (provider.as_str(), *address);
                if !captured.contains_key(&(provider.clone(), *address)) && !observed_only.contains_key(&key)
                {
                    let record = RecordRef {
                        pool: pool_name,
                        nic: &node_state.spec.nic,
                        capture_domain: &pool.capture_domain,
                    };
                    observed_only.insert(key, record);
                }
            }
        }
    }

    let mut wake_at_ms: Option<u64> = None;
    let captured_refs = captured.iter().map(|((provider, address), record)| {
        let record =
            RecordRef { pool: &record.pool, nic: &record.nic, capture_domain: &record.capture_domain };
        ((provider.as_str(), *address), record)
    });
    for ((provider, address), record) in captured_refs.chain(observed_only) {
        if view.desired_pool_of(node, provider, address).is_some() {
            continue;
        }
        let Some((pool_name, pool)) = view.pools().get_key_value(record.pool) else { continue };
        let Some(state) = pool.addresses.get(&address) else { continue };
        let family = view.provider_kind(provider).map_or(VerbFamily::Cloud, |k| k.verb_family());
        if family.release_is_held()
            && let Some(moved_ms) = state.moved_away_from(node)
        {
            let due_ms = moved_ms.saturating_add(pool.spec.deprovision_hold_ms);
            if now_ms < due_ms {
                wake_at_ms = Some(wake_at_ms.map_or(due_ms, |w| w.min(due_ms)));
                continue;
            }
        }
        let capture_epoch = view.capture_epoch(record.pool, address, record.capture_domain);
        let actions = family
            .release_verbs()
            .iter()
            .map(|verb| PlannedAction {
                stamp: ActionStamp {
                    pool: record.pool,
                    address,
                    verb: *verb,
                    holder: node_name,
                    provider,
                    nic: record.nic,
                    capture_domain: record.capture_domain,
                    capture_epoch,
                    ownership_epoch: state.ownership_epoch,
                },
                approval: pool.spec.approval,
            })
            .collect();
        planned.push(((pool_name.as_str(), address), actions));
    }

    planned.sort_by(|a, b| a.0.cmp(&b.0));
    Plan { actions: planned.into_iter().flat_map(|(_, actions)| actions).collect(), wake_at_ms }
}
