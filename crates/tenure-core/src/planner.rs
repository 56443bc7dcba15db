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

/// A capture record's fields, borrowed: from a node's captured set, from what the provider
/// showed on its NIC (drift repair), or from the log's confirmation of its acquire (the phase,
/// [`Federation::address_status`]).
#[derive(Clone, Copy, Debug)]
pub struct CaptureRef<'a> {
    /// Pool of the acquire.
    pub pool: &'a str,
    /// NIC of the acquire: the release is stamped with it, not with the node's NIC now.
    pub nic: &'a str,
    /// Epoch line of the acquire.
    pub capture_domain: &'a CaptureDomain,
}

/// A node's release of an address it captured ([`release_plan`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Release<'a> {
    /// Held back by the pool's deprovision hold until stream time `due_ms`: nothing is planned
    /// yet (so nothing waits for an approval).
    Held {
        /// When the hold ends.
        due_ms: u64,
    },
    /// Due: the release verbs, in execution order, as the planner plans them.
    Due(Vec<PlannedAction<'a>>),
}

/// Plans node `node`'s actions from `view` (its applied prefix of the log), in canonical order
/// (pool, address), each address's verbs in execution order. A captured address that the node is
/// now the desired holder of on the same provider, through any applied pool, is not released;
/// when a release is due and how it is stamped is [`release_plan`].
#[must_use]
pub fn plan<'a>(view: &'a Federation, node: NodeId, captured: &'a Captured) -> Plan<'a> {
    let node_state = &view.nodes()[node];
    let node_name = node_state.spec.name.as_str();
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
    let mut observed_only: BTreeMap<(&'a str, IpAddr), CaptureRef<'a>> = BTreeMap::new();
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
                    let record = CaptureRef {
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
            CaptureRef { pool: &record.pool, nic: &record.nic, capture_domain: &record.capture_domain };
        ((provider.as_str(), *address), record)
    });
    for ((provider, address), record) in captured_refs.chain(observed_only) {
        match release_plan(view, node, provider, address, record) {
            None => {}
            Some(Release::Held { due_ms }) => {
                wake_at_ms = Some(wake_at_ms.map_or(due_ms, |w| w.min(due_ms)));
            }
            Some(Release::Due(actions)) => planned.push(((record.pool, address), actions)),
        }
    }

    planned.sort_by(|a, b| a.0.cmp(&b.0));
    Plan { actions: planned.into_iter().flat_map(|(_, actions)| actions).collect(), wake_at_ms }
}

/// Node `node`'s release of `address` on `provider`, captured as `record` says — the one rule
/// for when a release is due and how it is stamped, read by the planner and by the phase
/// ([`Federation::address_status`]), so the phase's `pending-approval` names the keys the node
/// plans. `None` when nothing is released: the node is the desired holder of the address on the
/// provider through any applied pool, or the record's pool or address is unknown to the view.
/// Where [`VerbFamily::release_is_held`] (not on the on-prem family: SPEC 13), the release waits
/// out the pool's deprovision hold from when the desired holder last moved away from the node.
/// Stamped with the record's pool, NIC and line (at that line's current epoch) and the address's
/// ownershipEpoch.
#[must_use]
pub fn release_plan<'a>(
    view: &'a Federation,
    node: NodeId,
    provider: &'a str,
    address: IpAddr,
    record: CaptureRef<'a>,
) -> Option<Release<'a>> {
    if view.desired_pool_of(node, provider, address).is_some() {
        return None;
    }
    let pool = view.pools().get(record.pool)?;
    let state = pool.addresses.get(&address)?;
    let family = view.provider_kind(provider).map_or(VerbFamily::Cloud, |k| k.verb_family());
    if family.release_is_held()
        && let Some(moved_ms) = state.moved_away_from(node)
    {
        let due_ms = moved_ms.saturating_add(pool.spec.deprovision_hold_ms);
        if view.stream_time_ms() < due_ms {
            return Some(Release::Held { due_ms });
        }
    }
    let holder = view.nodes()[node].spec.name.as_str();
    let capture_epoch = view.capture_epoch(record.pool, address, record.capture_domain);
    let actions = family
        .release_verbs()
        .iter()
        .map(|verb| PlannedAction {
            stamp: ActionStamp {
                pool: record.pool,
                address,
                verb: *verb,
                holder,
                provider,
                nic: record.nic,
                capture_domain: record.capture_domain,
                capture_epoch,
                ownership_epoch: state.ownership_epoch,
            },
            approval: pool.spec.approval,
        })
        .collect();
    Some(Release::Due(actions))
}
