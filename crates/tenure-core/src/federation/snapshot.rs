//! The projection as a stored snapshot: everything [`Federation::apply`] reads and writes, so
//! that a federation restored from the snapshot taken after event N, then given events N+1…,
//! is the federation that applied every event (`tests/snapshot.rs` checks it on every prefix of
//! the example scenarios and simulated runs). The fleet store writes one under its prefix and
//! compacts the log below it, so a new agent does not replay history.
//!
//! The form is versioned JSON like the codec's records (`{"v":3,…}`, camelCase, unknown fields
//! refused): the registry's nodes in id order with their specs and their providers' kinds (format
//! 4: the log's `node-registered` and `node-retired` change the registry, so the snapshot is where
//! a restored projection takes it from; formats 1–3 name nodes only, over the agent's registry),
//! pools with their spec in the codec's pool form and
//! every address's lines, approvals, observations, counters and tokens. What is derived from
//! those is rebuilt, not stored: the overlap claims, the capture domains, the node ids.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::approvals::{Approvals, Kept};
use super::{Federation, Touched};
use crate::codec;
use crate::model::{CaptureEpoch, NodeSpec, OwnershipEpoch, ProviderKind, VrrpState};
use crate::state::{
    AddressState, CaptureLine, Confirmation, MasterReport, NodeId, NodeState, PoolConditions, PoolState,
};

/// The snapshot format this build writes. It reads this one, version 2 (no `vrrpMaster`: its
/// MASTER reports read as the oldest) and version 1 (whose observations were whole views: holders
/// and one `atMs` per address, before scoped inventory). Version 3 exists so that an agent that
/// does not know the newest-MASTER rule refuses a snapshot written by one that does (issue 24).
/// Version 4 carries each node's spec and its provider's kind: the registry is the log's
/// (fleet membership, issue 24), and an agent that does not know that refuses it.
pub const SNAPSHOT_VERSION: u64 = 4;

/// The first format with MASTER reports' order (`vrrpMaster`) and `revivedSeq`.
const MASTER_ORDERS: u64 = 3;

/// The first format with each node's spec: the registry is the snapshot's.
const NODE_SPECS: u64 = 4;

/// Why a snapshot could not be read (one line).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("snapshot: {0}")]
pub struct SnapshotError(pub String);

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Wire {
    v: u64,
    stream_time_ms: u64,
    events_applied: u64,
    plan_generation: u64,
    last_eligibility: Vec<Vec<bool>>,
    recaptures: u64,
    token_floor: u64,
    highest_token: u64,
    nodes: Vec<NodeWire>,
    pools: Vec<PoolWire>,
    approvals: Vec<KeptWire>,
    approvals_ignored: u64,
    observed: Vec<ObservedWire>,
    /// Format 4: every provider the registry knows, with its kind (a provider stays known after
    /// its last node retired: a pool may still name it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    providers: Option<Vec<ProviderWire>>,
}

/// A provider of a format-4 snapshot's registry.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProviderWire {
    name: String,
    kind: ProviderKind,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NodeWire {
    name: String,
    last_heartbeat_ms: Option<u64>,
    heartbeat_stamp_ms: Option<u64>,
    drained: bool,
    healthy: bool,
    vrrp: Option<VrrpState>,
    /// Where the log took its latest report when that is MASTER (format 3). Missing in formats 1
    /// and 2: such a MASTER reads as the oldest (order 0, stream time 0), so every one ties.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    vrrp_master: Option<MasterWire>,
    /// Format 3; written only when not 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    revived_seq: u64,
    /// Format 4: the node as registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    spec: Option<NodeSpecWire>,
}

/// A node's spec in a format-4 snapshot (the fields of `node-registered` but its name and its
/// provider's kind, which the snapshot's `providers` carry).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NodeSpecWire {
    provider: String,
    placement_group: String,
    nic: String,
    priority: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    capacity: Option<u64>,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// A node's MASTER report as the snapshot has it: format 3 carries it for every MASTER, and only
/// within the snapshot's own order and stream time; formats 1 and 2 carry none, and their MASTERs
/// read as the oldest (order 0: they tie).
fn master_report(wire: &Wire, n: &NodeWire) -> Result<Option<MasterReport>, SnapshotError> {
    let refuse = |what: &str| Err(bad(format!("node `{}`: {what}", n.name)));
    match (&n.vrrp_master, n.vrrp == Some(VrrpState::Master)) {
        (Some(_), _) if wire.v < MASTER_ORDERS => refuse("`vrrpMaster` in a snapshot of format 1 or 2"),
        (Some(_), false) => refuse("`vrrpMaster` without a MASTER state"),
        (Some(m), true) if m.seq > wire.events_applied || m.taken_ms > wire.stream_time_ms => {
            refuse("`vrrpMaster` outside this snapshot's order or stream time")
        }
        (Some(m), true) => Ok(Some(MasterReport { seq: m.seq, taken_ms: m.taken_ms })),
        (None, true) if wire.v >= MASTER_ORDERS => refuse("a MASTER state without `vrrpMaster`"),
        (None, true) => Ok(Some(MasterReport::default())),
        (None, false) => Ok(None),
    }
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MasterWire {
    seq: u64,
    taken_ms: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PoolWire {
    /// The codec's pool spec record, as its text (the codec reads its own key order).
    spec: String,
    deleted: bool,
    members: Vec<String>,
    addresses: Vec<AddressWire>,
    capacity_exhausted: u64,
    no_eligible_member: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LineWire {
    capture_epoch: u64,
    desired_holder: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AddressWire {
    address: IpAddr,
    active: bool,
    desired: bool,
    owner: Option<String>,
    ownership_epoch: u64,
    line: LineWire,
    retired_lines: Vec<(String, LineWire)>,
    moved_away_ms: Vec<(String, u64)>,
    confirmations: Vec<ConfirmationWire>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConfirmationWire {
    node: String,
    capture_domain: String,
    /// The confirmed action's NIC, written only when it is not the node's NIC in the registry
    /// (after a NIC change), so that a snapshot is byte for byte what older agents write and read
    /// (a fleet upgraded one agent at a time); absent: the node's NIC in the registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nic: Option<String>,
    capture_epoch: u64,
    acquired: bool,
    at_ms: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct KeptWire {
    pool: String,
    address: IpAddr,
    capture_epoch: u64,
    ownership_epoch: u64,
    capture_domain: String,
    key: String,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ObservedWire {
    provider: String,
    address: IpAddr,
    /// Per NIC: whether it held the address, and when that was observed (version 2).
    #[serde(default)]
    nics: Vec<ObservedNicWire>,
    /// Version 1: the holders of the address's latest whole view, and its `at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    holders: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    at_ms: Option<u64>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ObservedNicWire {
    nic: String,
    held: bool,
    at_ms: u64,
}

fn bad(what: impl std::fmt::Display) -> SnapshotError {
    SnapshotError(what.to_string())
}

impl Federation {
    /// A format-4 snapshot's registry in place of this one's: its providers with their kinds and
    /// its nodes in its order (their ids). Nothing of this registry is kept: the snapshot's is
    /// the log's.
    fn restore_registry(
        &mut self,
        nodes: &[NodeWire],
        providers: &[ProviderWire],
    ) -> Result<(), SnapshotError> {
        let mut kinds = BTreeMap::new();
        for p in providers {
            if kinds.insert(p.name.clone(), p.kind).is_some() {
                return Err(bad(format!("provider `{}` is named twice", p.name)));
            }
        }
        let mut registry = Vec::with_capacity(nodes.len());
        for n in nodes {
            let Some(spec) = &n.spec else {
                return Err(bad(format!("node `{}` has no spec (format 4 needs one)", n.name)));
            };
            if !kinds.contains_key(&spec.provider) {
                return Err(bad(format!(
                    "node `{}`: provider `{}` is not in the snapshot's providers",
                    n.name, spec.provider
                )));
            }
            registry.push(NodeState::new(NodeSpec {
                name: n.name.clone(),
                provider: spec.provider.clone(),
                placement_group: spec.placement_group.clone(),
                priority: spec.priority,
                nic: spec.nic.clone(),
                capacity: spec.capacity,
            }));
        }
        self.node_ids = registry
            .iter()
            .enumerate()
            .map(|(i, n)| (n.spec.name.clone(), crate::state::node_id_of(i)))
            .collect();
        if self.node_ids.len() != registry.len() {
            return Err(bad("a node is named twice"));
        }
        self.nodes = registry;
        self.providers = kinds;
        Ok(())
    }

    /// The snapshot of this projection (between two events).
    #[must_use]
    pub fn snapshot(&self) -> Vec<u8> {
        let name = |id: NodeId| self.nodes[id as usize].spec.name.clone();
        let line = |l: &CaptureLine| LineWire {
            capture_epoch: l.epoch.get(),
            desired_holder: l.desired_holder.map(name),
        };
        let wire = Wire {
            v: SNAPSHOT_VERSION,
            providers: Some(
                self.providers
                    .iter()
                    .map(|(name, kind)| ProviderWire { name: name.clone(), kind: *kind })
                    .collect(),
            ),
            stream_time_ms: self.stream_time_ms,
            events_applied: self.events_applied,
            plan_generation: self.plan_generation,
            last_eligibility: self.last_eligibility.clone(),
            recaptures: self.recaptures,
            token_floor: self.token_floor,
            highest_token: self.highest_token,
            nodes: self
                .nodes
                .iter()
                .map(|n| NodeWire {
                    name: n.spec.name.clone(),
                    last_heartbeat_ms: n.last_heartbeat_ms,
                    heartbeat_stamp_ms: n.heartbeat_stamp_ms,
                    drained: n.drained,
                    healthy: n.healthy,
                    vrrp: n.vrrp,
                    vrrp_master: n.vrrp_master.map(|m| MasterWire { seq: m.seq, taken_ms: m.taken_ms }),
                    revived_seq: n.revived_seq,
                    spec: Some(NodeSpecWire {
                        provider: n.spec.provider.clone(),
                        placement_group: n.spec.placement_group.clone(),
                        nic: n.spec.nic.clone(),
                        priority: n.spec.priority,
                        capacity: n.spec.capacity,
                    }),
                })
                .collect(),
            pools: self
                .pools
                .values()
                .map(|p| PoolWire {
                    spec: String::from_utf8(
                        codec::encode_pool_spec(&p.spec).expect("an applied pool encodes"),
                    )
                    .expect("a codec record is UTF-8"),
                    deleted: p.deleted,
                    members: p.member_ids.iter().map(|id| name(*id)).collect(),
                    addresses: p
                        .addresses
                        .iter()
                        .map(|(address, a)| AddressWire {
                            address: *address,
                            active: a.active,
                            desired: a.desired,
                            owner: a.owner.map(name),
                            ownership_epoch: a.ownership_epoch.get(),
                            line: line(&a.line),
                            retired_lines: a
                                .retired_lines
                                .iter()
                                .map(|(d, l)| (d.as_str().to_owned(), line(l)))
                                .collect(),
                            moved_away_ms: a.moved_away_ms.iter().map(|(id, t)| (name(*id), *t)).collect(),
                            confirmations: a
                                .confirmations
                                .iter()
                                .map(|c| ConfirmationWire {
                                    node: name(c.node),
                                    capture_domain: c.capture_domain.as_str().to_owned(),
                                    nic: (*c.nic != *self.nodes[c.node as usize].spec.nic)
                                        .then(|| c.nic.to_string()),
                                    capture_epoch: c.capture_epoch.get(),
                                    acquired: c.acquired,
                                    at_ms: c.at_ms,
                                })
                                .collect(),
                        })
                        .collect(),
                    capacity_exhausted: p.conditions.capacity_exhausted,
                    no_eligible_member: p.conditions.no_eligible_member,
                })
                .collect(),
            approvals: self
                .approvals
                .kept()
                .map(|(pool, address, k)| KeptWire {
                    pool: pool.to_owned(),
                    address,
                    capture_epoch: k.capture_epoch.get(),
                    ownership_epoch: k.ownership_epoch.get(),
                    capture_domain: k.capture_domain.as_str().to_owned(),
                    key: k.key.clone(),
                })
                .collect(),
            approvals_ignored: self.approvals.ignored,
            observed: self
                .observed
                .iter()
                .flat_map(|(provider, addresses)| {
                    addresses.iter().map(move |(address, kept)| ObservedWire {
                        provider: provider.clone(),
                        address: *address,
                        nics: kept
                            .iter()
                            .map(|(nic, (held, at_ms))| ObservedNicWire {
                                nic: nic.clone(),
                                held: *held,
                                at_ms: *at_ms,
                            })
                            .collect(),
                        holders: None,
                        at_ms: None,
                    })
                })
                .collect(),
        };
        serde_json::to_vec(&wire).expect("a snapshot serializes")
    }

    /// The projection a snapshot holds, over this federation's registry (nodes and providers)
    /// and settings (drift repair): `self` is a fresh [`Federation::new`] of the same registry
    /// the snapshot was taken with.
    /// A snapshot of another version, or naming a node or provider the registry lacks, is an
    /// error; nothing is half restored.
    pub fn restore(&self, bytes: &[u8]) -> Result<Self, SnapshotError> {
        let version: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
        if !matches!(version.get("v").and_then(serde_json::Value::as_u64), Some(1..=SNAPSHOT_VERSION)) {
            return Err(bad(format!(
                "format version {} is not 1 to {SNAPSHOT_VERSION}",
                version.get("v").map_or_else(|| "none".to_owned(), ToString::to_string)
            )));
        }
        let wire: Wire = serde_json::from_value(version).map_err(bad)?;
        let mut fed = self.clone();
        if wire.v >= NODE_SPECS {
            fed.restore_registry(&wire.nodes, wire.providers.as_deref().unwrap_or_default())?;
        } else if wire.providers.is_some() {
            return Err(bad("`providers` in a snapshot of format 1 to 3"));
        }
        let id = |name: &str| {
            fed.node_ids
                .get(name)
                .copied()
                .ok_or_else(|| bad(format!("node `{name}` is not in this registry")))
        };
        let domain = |text: &str| codec::parse_capture_domain(text).map_err(bad);
        let line = |l: &LineWire| -> Result<CaptureLine, SnapshotError> {
            Ok(CaptureLine {
                epoch: CaptureEpoch::from_stored(l.capture_epoch),
                desired_holder: l.desired_holder.as_deref().map(id).transpose()?,
            })
        };
        let mut nodes = fed.nodes.clone();
        for n in &wire.nodes {
            let state = &mut nodes[id(&n.name)? as usize];
            state.last_heartbeat_ms = n.last_heartbeat_ms;
            state.heartbeat_stamp_ms = n.heartbeat_stamp_ms;
            state.drained = n.drained;
            state.healthy = n.healthy;
            state.vrrp = n.vrrp;
            state.vrrp_master = master_report(&wire, n)?;
            if wire.v < NODE_SPECS && n.spec.is_some() {
                return Err(bad(format!("node `{}`: `spec` in a snapshot of format 1 to 3", n.name)));
            }
            if n.revived_seq > wire.events_applied || (wire.v < MASTER_ORDERS && n.revived_seq != 0) {
                return Err(bad(format!(
                    "node `{}`: `revivedSeq` {} is not in this snapshot",
                    n.name, n.revived_seq
                )));
            }
            state.revived_seq = n.revived_seq;
        }
        let mut pools = BTreeMap::new();
        for p in &wire.pools {
            let spec = codec::decode_pool_spec(p.spec.as_bytes()).map_err(bad)?;
            if !fed.providers.contains_key(&spec.provider) {
                return Err(bad(format!(
                    "pool `{}` names provider `{}`, not in this registry",
                    spec.name, spec.provider
                )));
            }
            // Collected, not inserted one by one: a B-tree built from a list fills its nodes, one
            // filled in order keeps them a little over half full (~150 bytes an address, not 82).
            let mut addresses = Vec::with_capacity(p.addresses.len());
            for a in &p.addresses {
                let state = AddressState {
                    active: a.active,
                    desired: a.desired,
                    owner: a.owner.as_deref().map(id).transpose()?,
                    ownership_epoch: OwnershipEpoch::from_stored(a.ownership_epoch),
                    line: line(&a.line)?,
                    retired_lines: a
                        .retired_lines
                        .iter()
                        .map(|(d, l)| Ok((domain(d)?, line(l)?)))
                        .collect::<Result<_, SnapshotError>>()?,
                    moved_away_ms: a.moved_away_ms.iter().map(|(n, t)| Ok((id(n)?, *t))).collect::<Result<
                        _,
                        SnapshotError,
                    >>(
                    )?,
                    confirmations: a
                        .confirmations
                        .iter()
                        .map(|c| {
                            Ok(Confirmation {
                                node: id(&c.node)?,
                                capture_domain: domain(&c.capture_domain)?,
                                nic: crate::names::shared(match &c.nic {
                                    Some(nic) => nic,
                                    None => &fed.nodes[id(&c.node)? as usize].spec.nic,
                                }),
                                capture_epoch: CaptureEpoch::from_stored(c.capture_epoch),
                                acquired: c.acquired,
                                at_ms: c.at_ms,
                            })
                        })
                        .collect::<Result<_, SnapshotError>>()?,
                };
                addresses.push((a.address, state));
            }
            let addresses: BTreeMap<_, _> = addresses.into_iter().collect();
            let state = PoolState {
                newest_master_counts: fed.newest_master_counts(&spec),
                capture_domain: spec.capture_domain(),
                member_ids: p.members.iter().map(|m| id(m)).collect::<Result<_, _>>()?,
                spec: Arc::new(spec),
                deleted: p.deleted,
                addresses,
                conditions: PoolConditions {
                    capacity_exhausted: p.capacity_exhausted,
                    no_eligible_member: p.no_eligible_member,
                },
            };
            pools.insert(state.spec.name.clone(), state);
        }
        let mut approvals = Approvals::default();
        for k in &wire.approvals {
            approvals.keep_restored(
                &k.pool,
                k.address,
                Kept {
                    capture_epoch: CaptureEpoch::from_stored(k.capture_epoch),
                    ownership_epoch: OwnershipEpoch::from_stored(k.ownership_epoch),
                    capture_domain: domain(&k.capture_domain)?,
                    key: k.key.clone(),
                },
            );
        }
        approvals.ignored = wire.approvals_ignored;
        let mut observed: BTreeMap<String, BTreeMap<IpAddr, super::drift::Observed>> = BTreeMap::new();
        for o in &wire.observed {
            let mut kept: super::drift::Observed =
                o.nics.iter().map(|n| (n.nic.clone(), (n.held, n.at_ms))).collect();
            // Format 1 kept the latest whole view: recorded as one.
            if let (Some(holders), Some(at_ms)) = (&o.holders, o.at_ms) {
                super::drift::record(&mut kept, &fed.node_nics(&o.provider), holders, None, at_ms);
            }
            observed.entry(o.provider.clone()).or_default().insert(o.address, kept);
        }
        for pool in pools.values().filter(|p| !p.deleted) {
            fed.claims.apply(&pool.spec);
        }
        fed.nodes = nodes;
        fed.pools = pools;
        fed.approvals = approvals;
        fed.observed = observed;
        fed.stream_time_ms = wire.stream_time_ms;
        fed.events_applied = wire.events_applied;
        fed.plan_generation = wire.plan_generation;
        fed.last_eligibility = wire.last_eligibility;
        fed.recaptures = wire.recaptures;
        fed.token_floor = wire.token_floor;
        fed.highest_token = wire.highest_token;
        fed.touched = Touched::default();
        fed.moves = Vec::new();
        Ok(fed)
    }
}
