//! The stored form of a pool spec, and its re-validation by the pool parser.
//!
//! A stored spec is the validated form (defaults filled in, durations in milliseconds), with the
//! addresses as the fewest CIDR blocks that cover exactly the pool's set. Reading one back does
//! not trust it: the spec is written out as the MobilityPool document it stands for and parsed by
//! [`parse_pool_documents`], the same function that reads a pool file, so a decoded pool passes
//! every rule a parsed pool passes, now and after any rule is added there. The document is JSON,
//! which YAML 1.2 reads as a flow mapping: every string is quoted and escaped, and a name that
//! survives the parser's name check has only letters, digits, `.`, `_` and `-`, which both read
//! alike.

use std::borrow::Cow;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::CodecError;
use crate::model::{Approval, Authority, PoolSpec};
use crate::spec::{API_VERSION, KIND_MOBILITY_POOL, parse_pool_documents};

/// A pool spec as stored.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct PoolSpecWire<'a> {
    /// `metadata.name`.
    name: Cow<'a, str>,
    /// The fewest CIDR blocks covering exactly the pool's addresses, in canonical order; a
    /// single address is written without a prefix length.
    addresses: Vec<String>,
    /// Provider name.
    provider: Cow<'a, str>,
    /// Placement group.
    placement_group: Cow<'a, str>,
    /// Member node names, in declaration order.
    members: Cow<'a, [String]>,
    /// `none` or `vrrp`.
    authority: Authority,
    /// `auto` or `manual`.
    approval: Approval,
    /// `deprovisionHoldDuration` in milliseconds.
    deprovision_hold_ms: u64,
    /// `heartbeatTTL` in milliseconds.
    heartbeat_ttl_ms: u64,
    /// `promotionHold` in milliseconds.
    promotion_hold_ms: u64,
    /// `ipOwnershipPolicy.epochLocking`.
    epoch_locking: bool,
    /// `ipOwnershipPolicy.preferNodes`.
    prefer_nodes: Cow<'a, [String]>,
    /// `ipOwnershipPolicy.preempt`.
    preempt: bool,
    /// `ipOwnershipPolicy.autoFailover`.
    auto_failover: bool,
}

impl<'a> PoolSpecWire<'a> {
    /// The stored form of `spec`, after checking that it is a spec the parser could have produced
    /// and that it reads back unchanged (check before write).
    pub(super) fn checked(spec: &'a PoolSpec) -> Result<Self, CodecError> {
        let invalid =
            |reason: &str| CodecError::InvalidPool { pool: spec.name.clone(), reason: reason.into() };
        if !spec.addresses.windows(2).all(|pair| pair[0] < pair[1]) {
            return Err(invalid("its addresses are not in canonical order without duplicates"));
        }
        let wire = Self {
            name: Cow::Borrowed(&spec.name),
            addresses: address_blocks(&spec.addresses),
            provider: Cow::Borrowed(&spec.provider),
            placement_group: Cow::Borrowed(&spec.placement_group),
            members: Cow::Borrowed(&spec.members),
            authority: spec.authority,
            approval: spec.approval,
            deprovision_hold_ms: spec.deprovision_hold_ms,
            heartbeat_ttl_ms: spec.heartbeat_ttl_ms,
            promotion_hold_ms: spec.promotion_hold_ms,
            epoch_locking: spec.epoch_locking,
            prefer_nodes: Cow::Borrowed(&spec.prefer_nodes),
            preempt: spec.preempt,
            auto_failover: spec.auto_failover,
        };
        if wire.parse()? != *spec {
            return Err(invalid("it changes when parsed again (it did not come from the pool parser)"));
        }
        Ok(wire)
    }

    /// The spec, rebuilt by the pool parser.
    pub(super) fn into_spec(self) -> Result<PoolSpec, CodecError> {
        self.parse()
    }

    /// Parses the MobilityPool document this stored spec stands for.
    fn parse(&self) -> Result<PoolSpec, CodecError> {
        let invalid = |reason: String| CodecError::InvalidPool { pool: self.name.to_string(), reason };
        let text = serde_json::to_string(&self.document()).map_err(|e| invalid(e.to_string()))?;
        let mut pools = parse_pool_documents(&text).map_err(|errors| {
            invalid(errors.iter().map(|e| e.message.as_str()).collect::<Vec<_>>().join("; "))
        })?;
        match (pools.pop(), pools.is_empty()) {
            (Some((spec, _source)), true) => Ok(spec),
            _ => Err(invalid("it does not read as exactly one pool".into())),
        }
    }

    /// The MobilityPool document (SPEC 10) of this spec, every field written out.
    fn document(&self) -> Document<'_> {
        Document {
            api_version: API_VERSION,
            kind: KIND_MOBILITY_POOL,
            metadata: Metadata { name: &self.name },
            spec: DocumentSpec {
                addresses: &self.addresses,
                provider: &self.provider,
                placement_group: &self.placement_group,
                members: &self.members,
                authority: self.authority,
                approval: self.approval,
                deprovision_hold_duration: format!("{}ms", self.deprovision_hold_ms),
                heartbeat_ttl: format!("{}ms", self.heartbeat_ttl_ms),
                promotion_hold: format!("{}ms", self.promotion_hold_ms),
                ip_ownership_policy: Policy {
                    policy_type: "centralized",
                    epoch_locking: self.epoch_locking,
                    prefer_nodes: &self.prefer_nodes,
                    preempt: self.preempt,
                    auto_failover: self.auto_failover,
                },
            },
        }
    }
}

/// Checks `spec` against every rule of the pool parser (SPEC 10, 12): what decoding a stored
/// spec does, for a spec that did not come through the codec.
pub fn check_pool_spec(spec: &PoolSpec) -> Result<(), CodecError> {
    PoolSpecWire::checked(spec).map(|_| ())
}

/// The fewest CIDR blocks that cover exactly `addresses` (sorted, without duplicates), in
/// canonical order; a block of one address is written as the bare address.
fn address_blocks(addresses: &[IpAddr]) -> Vec<String> {
    let hosts: Vec<IpNet> = addresses.iter().map(|address| IpNet::from(*address)).collect();
    IpNet::aggregate(&hosts)
        .into_iter()
        .map(|block| {
            if block.prefix_len() == block.max_prefix_len() {
                block.addr().to_string()
            } else {
                block.to_string()
            }
        })
        .collect()
}

/// A MobilityPool document, as a pool file holds it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Document<'a> {
    /// [`API_VERSION`].
    api_version: &'static str,
    /// [`KIND_MOBILITY_POOL`].
    kind: &'static str,
    /// The name.
    metadata: Metadata<'a>,
    /// The rest.
    spec: DocumentSpec<'a>,
}

/// `metadata`.
#[derive(Serialize)]
struct Metadata<'a> {
    /// `metadata.name`.
    name: &'a str,
}

/// `spec`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DocumentSpec<'a> {
    /// Addresses and ranges.
    addresses: &'a [String],
    /// Provider name.
    provider: &'a str,
    /// Placement group.
    placement_group: &'a str,
    /// Members.
    members: &'a [String],
    /// Authority.
    authority: Authority,
    /// Approval.
    approval: Approval,
    /// Go-style duration.
    deprovision_hold_duration: String,
    /// Go-style duration.
    #[serde(rename = "heartbeatTTL")]
    heartbeat_ttl: String,
    /// Go-style duration.
    promotion_hold: String,
    /// The ownership policy.
    ip_ownership_policy: Policy<'a>,
}

/// `spec.ipOwnershipPolicy`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Policy<'a> {
    /// Always `centralized`.
    #[serde(rename = "type")]
    policy_type: &'static str,
    /// Fence on ownershipEpoch too.
    epoch_locking: bool,
    /// Nodes ranked first.
    prefer_nodes: &'a [String],
    /// Owners are not sticky.
    preempt: bool,
    /// Liveness moves ownership.
    auto_failover: bool,
}
