//! The wire types of the records other than pool specs (`pool.rs`): events, stamped actions,
//! journal entries and changes, high-water rows. Each is built from its in-memory value by
//! borrowing (`of`), and turned back with the checks of the in-memory types (`into_*`).
//!
//! - this file — events, stamped actions, the high-water marks as rows.
//! - `wire/journal.rs` — journal entries, their states and attempts, and the durable changes.

use std::borrow::Cow;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::pool::PoolSpecWire;
use super::{CodecError, RECORD_EVENT, RECORD_HIGH_WATER};
use crate::fence::HighWater;
use crate::input::check_name;
use crate::log::{ActionOutcome, Event, EventKind, holder_outside_scope};
use crate::model::{
    CaptureDomain, CaptureEpoch, NodeSpec, OwnershipEpoch, ProviderKind, StampedAction, Verb, VrrpState,
};

mod journal;

pub(super) use journal::{ChangeWire, EntryWire};

/// An `inventory` event whose holder `outside` its scope leaves out.
fn outside_scope(outside: &str) -> CodecError {
    CodecError::Malformed {
        record: RECORD_EVENT,
        reason: format!("inventory holder `{outside}` is not in its scope"),
    }
}

/// A log event: the kind as the tag `event`, then `at`, then the kind's fields.
#[derive(Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case", rename_all_fields = "camelCase", deny_unknown_fields)]
pub(super) enum EventWire<'a> {
    /// `heartbeat`.
    Heartbeat { at: u64, node: Cow<'a, str> },
    /// `drain`.
    Drain { at: u64, node: Cow<'a, str> },
    /// `undrain`.
    Undrain { at: u64, node: Cow<'a, str> },
    /// `health`.
    Health { at: u64, node: Cow<'a, str>, healthy: bool },
    /// `vrrp`.
    Vrrp { at: u64, node: Cow<'a, str>, state: VrrpState },
    /// `pool-applied`.
    PoolApplied { at: u64, spec: PoolSpecWire<'a> },
    /// `pool-deleted`.
    PoolDeleted { at: u64, pool: Cow<'a, str> },
    /// `desire`.
    Desire { at: u64, pool: Cow<'a, str>, address: IpAddr },
    /// `undesire`.
    Undesire { at: u64, pool: Cow<'a, str>, address: IpAddr },
    /// `approve`.
    Approve { at: u64, idempotency_key: Cow<'a, str> },
    /// `action-result`.
    ActionResult {
        at: u64,
        node: Cow<'a, str>,
        idempotency_key: Cow<'a, str>,
        outcome: ActionOutcome,
        detail: Cow<'a, str>,
    },
    /// `inventory` (`scope` only when the read saw only some NICs).
    Inventory {
        at: u64,
        provider: Cow<'a, str>,
        address: IpAddr,
        holders: Cow<'a, [String]>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<Cow<'a, [String]>>,
    },
    /// `tokens-raised` (a restore's raise).
    TokensRaised { at: u64, by: u64 },
    /// `node-registered` (`capacity` only when limited).
    NodeRegistered {
        at: u64,
        node: Cow<'a, str>,
        provider: Cow<'a, str>,
        provider_kind: ProviderKind,
        placement_group: Cow<'a, str>,
        nic: Cow<'a, str>,
        priority: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        capacity: Option<u64>,
    },
    /// `node-retired`.
    NodeRetired {
        at: u64,
        node: Cow<'a, str>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        force: bool,
    },
}

impl<'a> EventWire<'a> {
    /// The wire form of `event`; a `pool-applied` spec is checked first (check before write).
    pub(super) fn of(event: &'a Event) -> Result<Self, CodecError> {
        let at = event.at_ms;
        let b = |text: &'a String| Cow::Borrowed(text.as_str());
        Ok(match &event.kind {
            EventKind::Heartbeat { node } => Self::Heartbeat { at, node: b(node) },
            EventKind::Drain { node } => Self::Drain { at, node: b(node) },
            EventKind::Undrain { node } => Self::Undrain { at, node: b(node) },
            EventKind::Health { node, healthy } => Self::Health { at, node: b(node), healthy: *healthy },
            EventKind::Vrrp { node, state } => Self::Vrrp { at, node: b(node), state: *state },
            EventKind::PoolApplied { spec } => Self::PoolApplied { at, spec: PoolSpecWire::checked(spec)? },
            EventKind::PoolDeleted { pool } => Self::PoolDeleted { at, pool: b(pool) },
            EventKind::Desire { pool, address } => Self::Desire { at, pool: b(pool), address: *address },
            EventKind::Undesire { pool, address } => Self::Undesire { at, pool: b(pool), address: *address },
            EventKind::Approve { idempotency_key } => {
                Self::Approve { at, idempotency_key: b(idempotency_key) }
            }
            EventKind::ActionResult { node, idempotency_key, outcome, detail } => Self::ActionResult {
                at,
                node: b(node),
                idempotency_key: b(idempotency_key),
                outcome: *outcome,
                detail: b(detail),
            },
            EventKind::Inventory { holders, scope, .. }
                if let Some(outside) = holder_outside_scope(holders, scope.as_deref()) =>
            {
                return Err(outside_scope(outside));
            }
            EventKind::Inventory { provider, address, holders, scope } => Self::Inventory {
                at,
                provider: b(provider),
                address: *address,
                holders: Cow::Borrowed(holders),
                scope: scope.as_deref().map(Cow::Borrowed),
            },
            EventKind::TokensRaised { by } => Self::TokensRaised { at, by: *by },
            EventKind::NodeRegistered { spec, provider_kind } => Self::NodeRegistered {
                at,
                node: b(&spec.name),
                provider: b(&spec.provider),
                provider_kind: *provider_kind,
                placement_group: b(&spec.placement_group),
                nic: b(&spec.nic),
                priority: spec.priority,
                capacity: spec.capacity,
            },
            EventKind::NodeRetired { node, force } => Self::NodeRetired { at, node: b(node), force: *force },
        })
    }

    /// The event; a `pool-applied` spec is rebuilt through the pool parser.
    pub(super) fn into_event(self) -> Result<Event, CodecError> {
        let (at_ms, kind) = match self {
            Self::Heartbeat { at, node } => (at, EventKind::Heartbeat { node: node.into_owned() }),
            Self::Drain { at, node } => (at, EventKind::Drain { node: node.into_owned() }),
            Self::Undrain { at, node } => (at, EventKind::Undrain { node: node.into_owned() }),
            Self::Health { at, node, healthy } => {
                (at, EventKind::Health { node: node.into_owned(), healthy })
            }
            Self::Vrrp { at, node, state } => (at, EventKind::Vrrp { node: node.into_owned(), state }),
            Self::PoolApplied { at, spec } => {
                (at, EventKind::PoolApplied { spec: Box::new(spec.into_spec()?) })
            }
            Self::PoolDeleted { at, pool } => (at, EventKind::PoolDeleted { pool: pool.into_owned() }),
            Self::Desire { at, pool, address } => {
                (at, EventKind::Desire { pool: pool.into_owned(), address })
            }
            Self::Undesire { at, pool, address } => {
                (at, EventKind::Undesire { pool: pool.into_owned(), address })
            }
            Self::Approve { at, idempotency_key } => {
                (at, EventKind::Approve { idempotency_key: idempotency_key.into_owned() })
            }
            Self::ActionResult { at, node, idempotency_key, outcome, detail } => (
                at,
                EventKind::ActionResult {
                    node: node.into_owned(),
                    idempotency_key: idempotency_key.into_owned(),
                    outcome,
                    detail: detail.into_owned(),
                },
            ),
            Self::Inventory { at, provider, address, holders, scope } => {
                if let Some(outside) = holder_outside_scope(&holders, scope.as_deref()) {
                    return Err(outside_scope(outside));
                }
                (
                    at,
                    EventKind::Inventory {
                        provider: provider.into_owned(),
                        address,
                        holders: holders.into_owned(),
                        scope: scope.map(Cow::into_owned),
                    },
                )
            }
            Self::TokensRaised { at, by } => (at, EventKind::TokensRaised { by }),
            Self::NodeRegistered {
                at,
                node,
                provider,
                provider_kind,
                placement_group,
                nic,
                priority,
                capacity,
            } => {
                let malformed = |reason: String| CodecError::Malformed { record: RECORD_EVENT, reason };
                for (what, text) in
                    [("node name", &node), ("provider name", &provider), ("placementGroup", &placement_group)]
                {
                    check_name(what, text).map_err(malformed)?;
                }
                if nic.trim().is_empty() {
                    return Err(malformed("nic must be non-empty".to_owned()));
                }
                let spec = NodeSpec {
                    name: node.into_owned(),
                    provider: provider.into_owned(),
                    placement_group: placement_group.into_owned(),
                    priority,
                    nic: nic.into_owned(),
                    capacity,
                };
                (at, EventKind::NodeRegistered { spec, provider_kind })
            }
            Self::NodeRetired { at, node, force } => {
                (at, EventKind::NodeRetired { node: node.into_owned(), force })
            }
        };
        Ok(Event { at_ms, kind })
    }
}

/// A stamped action: every field of [`StampedAction`], tokens as integers.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct ActionWire<'a> {
    /// Pool name.
    pool: Cow<'a, str>,
    /// Address.
    address: IpAddr,
    /// Verb.
    verb: Verb,
    /// Holder node.
    holder: Cow<'a, str>,
    /// Provider name.
    provider: Cow<'a, str>,
    /// NIC.
    nic: Cow<'a, str>,
    /// `provider:<provider>:placement:<placementGroup>`.
    capture_domain: Cow<'a, str>,
    /// Stamped captureEpoch.
    capture_epoch: u64,
    /// Stamped ownershipEpoch.
    ownership_epoch: u64,
    /// The key, which must be the one the fields above give.
    idempotency_key: Cow<'a, str>,
}

impl<'a> ActionWire<'a> {
    /// The wire form of `action`.
    pub(super) fn of(action: &'a StampedAction) -> Self {
        Self {
            pool: Cow::Borrowed(&action.pool),
            address: action.address,
            verb: action.verb,
            holder: Cow::Borrowed(&action.holder),
            provider: Cow::Borrowed(&action.provider),
            nic: Cow::Borrowed(&action.nic),
            capture_domain: Cow::Borrowed(action.capture_domain.as_str()),
            capture_epoch: action.capture_epoch.get(),
            ownership_epoch: action.ownership_epoch.get(),
            idempotency_key: Cow::Owned(action.idempotency_key().into()),
        }
    }

    /// The action, rebuilt by [`StampedAction::new`]; its key must equal the stored one.
    pub(super) fn into_action(self, record: &'static str) -> Result<StampedAction, CodecError> {
        let capture_domain = parse_capture_domain(&self.capture_domain)
            .map_err(|reason| CodecError::Inconsistent { record, reason })?;
        let action = StampedAction::new(
            &self.pool,
            self.address,
            self.verb,
            &self.holder,
            &self.provider,
            &self.nic,
            capture_domain,
            CaptureEpoch::from_stored(self.capture_epoch),
            OwnershipEpoch::from_stored(self.ownership_epoch),
        );
        if *action.idempotency_key() != *self.idempotency_key {
            return Err(CodecError::Inconsistent {
                record,
                reason: format!(
                    "idempotency key `{}` is not the one its fields give, `{}`",
                    self.idempotency_key,
                    action.idempotency_key()
                ),
            });
        }
        Ok(action)
    }
}

/// One high-water row: the marks of one (pool, address, capture domain).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct MarkWire<'a> {
    /// Pool name.
    pool: Cow<'a, str>,
    /// Address.
    address: IpAddr,
    /// The line's capture domain.
    capture_domain: Cow<'a, str>,
    /// Highest captureEpoch seen on the line.
    capture_epoch: u64,
    /// Highest ownershipEpoch seen for (pool, address).
    ownership_epoch: u64,
}

impl MarkWire<'_> {
    /// The canonical sort key of a row.
    fn key(&self) -> (&str, IpAddr, &str) {
        (&self.pool, self.address, &self.capture_domain)
    }

    /// The row's values, checked: a valid pool name and capture domain.
    fn parts(
        &self,
        record: &'static str,
    ) -> Result<(CaptureDomain, CaptureEpoch, OwnershipEpoch), CodecError> {
        let inconsistent = |reason: String| CodecError::Inconsistent { record, reason };
        check_name("pool", &self.pool).map_err(inconsistent)?;
        let domain = parse_capture_domain(&self.capture_domain).map_err(inconsistent)?;
        Ok((
            domain,
            CaptureEpoch::from_stored(self.capture_epoch),
            OwnershipEpoch::from_stored(self.ownership_epoch),
        ))
    }
}

/// The high-water marks as rows, sorted by pool, address, capture domain.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HighWaterWire<'a> {
    /// The rows.
    marks: Vec<MarkWire<'a>>,
}

impl<'a> HighWaterWire<'a> {
    /// The rows of `high_water`, in canonical order.
    pub(super) fn of(high_water: &'a HighWater) -> Self {
        let mut marks: Vec<MarkWire<'a>> = high_water
            .rows()
            .map(|(pool, address, domain, capture, ownership)| MarkWire {
                pool: Cow::Borrowed(pool),
                address,
                capture_domain: Cow::Borrowed(domain.as_str()),
                capture_epoch: capture.get(),
                ownership_epoch: ownership.get(),
            })
            .collect();
        // Rows come by pool and address already; only an address's lines are in first-seen order.
        marks.sort_by(|a, b| a.key().cmp(&b.key()));
        Self { marks }
    }

    /// The marks, rebuilt by [`HighWater::raise`] of each row after checking the rows.
    pub(super) fn into_high_water(self) -> Result<HighWater, CodecError> {
        let record = RECORD_HIGH_WATER;
        let mut high_water = HighWater::default();
        let mut previous: Option<&MarkWire<'_>> = None;
        for row in &self.marks {
            let (domain, capture, ownership) = row.parts(record)?;
            if let Some(previous) = previous {
                if previous.key() >= row.key() {
                    return Err(CodecError::Inconsistent {
                        record,
                        reason: format!(
                            "row ({}, {}, {}) is out of order or repeated (rows are sorted by pool, address, capture domain)",
                            row.pool, row.address, row.capture_domain
                        ),
                    });
                }
                let same_address = previous.pool == row.pool && previous.address == row.address;
                if same_address && previous.ownership_epoch != row.ownership_epoch {
                    return Err(CodecError::Inconsistent {
                        record,
                        reason: format!(
                            "({}, {}) has two ownershipEpochs, {} and {}",
                            row.pool, row.address, previous.ownership_epoch, row.ownership_epoch
                        ),
                    });
                }
            }
            high_water.raise(&row.pool, row.address, &domain, capture, ownership);
            previous = Some(row);
        }
        Ok(high_water)
    }
}

/// `provider:<provider>:placement:<placementGroup>`, both valid names, as [`CaptureDomain::new`]
/// writes it.
pub(crate) fn parse_capture_domain(text: &str) -> Result<CaptureDomain, String> {
    let bad = || format!("capture domain `{text}` is not of the form `provider:<name>:placement:<name>`");
    let (provider, placement_group) =
        text.strip_prefix("provider:").and_then(|rest| rest.split_once(":placement:")).ok_or_else(bad)?;
    check_name("the capture domain's provider", provider)?;
    check_name("the capture domain's placement group", placement_group)?;
    let domain = CaptureDomain::new(provider, placement_group);
    if domain.as_str() == text { Ok(domain) } else { Err(bad()) }
}
