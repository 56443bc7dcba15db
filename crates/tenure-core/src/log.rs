//! The events of the federation log (SPEC 2). The log is totally ordered; every node that
//! applies the same prefix computes the same state ([`crate::federation::Federation`]).

use std::fmt;
use std::net::IpAddr;

use crate::model::{NodeSpec, PoolSpec, ProviderKind, VrrpState};

/// One event of the log, with the emitter's time `at` in milliseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Emitter time in ms. Stream time is the largest `at` applied so far.
    pub at_ms: u64,
    /// What happened.
    pub kind: EventKind,
}

/// The payload of an event; the variant names are the wire names in kebab-case ([`EVENT_KINDS`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// `heartbeat{node}`: the node is alive at `at`.
    Heartbeat {
        /// Node name.
        node: String,
    },
    /// `drain{node}`: exclude the node at once.
    Drain {
        /// Node name.
        node: String,
    },
    /// `undrain{node}`: end a drain.
    Undrain {
        /// Node name.
        node: String,
    },
    /// `health{node, healthy}`: the node's latest health verdict.
    Health {
        /// Node name.
        node: String,
        /// Its verdict.
        healthy: bool,
    },
    /// `vrrp{node, state}`: the node's latest VRRP state.
    Vrrp {
        /// Node name.
        node: String,
        /// Master, backup or fault.
        state: VrrpState,
    },
    /// `pool-applied{spec}`: create or replace a pool.
    PoolApplied {
        /// The validated pool.
        spec: Box<PoolSpec>,
    },
    /// `pool-deleted{pool}`: retire every address of a pool.
    PoolDeleted {
        /// Pool name.
        pool: String,
    },
    /// `desire{pool, address}`: the address should be held.
    Desire {
        /// Pool name.
        pool: String,
        /// Address.
        address: IpAddr,
    },
    /// `undesire{pool, address}`: the address should be held by no one.
    Undesire {
        /// Pool name.
        pool: String,
        /// Address.
        address: IpAddr,
    },
    /// `approve{idempotencyKey}`: an operator approved an action of a manual pool.
    Approve {
        /// The approved action's key.
        idempotency_key: String,
    },
    /// `action-result{node, idempotencyKey, outcome, detail}`: what an executor reported.
    ActionResult {
        /// Executing node.
        node: String,
        /// The action's key.
        idempotency_key: String,
        /// Whether it ran.
        outcome: ActionOutcome,
        /// Free text from the executor.
        detail: String,
    },
    /// `inventory{provider, address, holders, scope?}`: what a provider reported.
    Inventory {
        /// Provider name.
        provider: String,
        /// Address.
        address: IpAddr,
        /// NICs that hold it.
        holders: Vec<String>,
        /// The NICs the read could see, when it saw only those (`onprem`: a host sees its own
        /// interface only): the NICs of `scope` not in `holders` do not hold the address, and
        /// nothing is said of any other NIC. `None`: the provider's whole view (`aws`): every
        /// NIC not in `holders` does not hold it.
        scope: Option<Vec<String>>,
    },
    /// `tokens-raised{by}`: every token line is raised by `by`, and lines created later start at
    /// the raised floor. Appended by `tenure store restore` (an older backup must never re-issue a
    /// token value already used after it, SPEC 1); never by an agent or an operator's request.
    TokensRaised {
        /// How much every token goes up.
        by: u64,
    },
    /// `node-registered{node, provider, providerKind, placementGroup, nic, priority, capacity?}`:
    /// a router joins the fleet (issue 24, "Fleet membership"). Its name is new, or was retired,
    /// or names the same NIC of the same provider in the same placement group (then its priority
    /// and capacity are updated); anything else is rejected.
    NodeRegistered {
        /// The node as its agent's config declares it.
        spec: NodeSpec,
        /// The kind of its provider, which every agent's registry must agree on.
        provider_kind: ProviderKind,
    },
    /// `node-retired{node, force?}`: a router leaves the fleet; rejected while it owns an address
    /// or is the desired holder of one on any line. The projection and its snapshots forget it.
    NodeRetired {
        /// Node name.
        node: String,
        /// The operator retired it although the log says it still holds addresses (its router is
        /// gone for good with them): the agent's guard was overridden. The log's rule ignores it.
        force: bool,
    },
}

/// One event kind's vocabulary: its name and its fields as a log record and a scenario entry
/// (SPEC 2, 11) write them. [`EVENT_KINDS`] is the one place they are spelled: the name in the
/// store's records (`codec/wire.rs`, whose serde names a test checks against this table), the
/// fields a scenario entry takes and needs (`scenario.rs`), [`EventKind::wire_name`] and
/// [`EventKind`]'s `Display` all read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KindVocabulary {
    /// The wire name: `event` of a record or a scenario entry.
    pub name: &'static str,
    /// The kind's fields besides `event` and `at`, in record order, as written (camelCase).
    pub fields: &'static [&'static str],
    /// Those of `fields` a record may leave out.
    pub optional: &'static [&'static str],
}

impl KindVocabulary {
    /// Whether a record must carry `field` (one of [`Self::fields`], not [`Self::optional`]).
    #[must_use]
    pub fn needs(&self, field: &str) -> bool {
        self.fields.contains(&field) && !self.optional.contains(&field)
    }
}

/// Declares [`EVENT_KINDS`] and [`EventKind::vocabulary`] from one list: each variant, its wire
/// name, its fields and, after `?`, those a record may leave out. The `match` it writes is
/// exhaustive, so a variant cannot be added without its vocabulary.
macro_rules! event_vocabulary {
    ($($variant:ident => $name:literal [$($field:literal),*] $(? [$($optional:literal),*])?;)*) => {
        /// Every event kind's vocabulary, in the order [`EventKind`] declares them.
        pub const EVENT_KINDS: &[KindVocabulary] = &[$(KindVocabulary {
            name: $name,
            fields: &[$($field),*],
            optional: &[$($($optional),*)?],
        }),*];

        impl EventKind {
            /// The kind's name and fields ([`EVENT_KINDS`]).
            #[must_use]
            pub fn vocabulary(&self) -> &'static KindVocabulary {
                match self {
                    $(Self::$variant { .. } => &KindVocabulary {
                        name: $name,
                        fields: &[$($field),*],
                        optional: &[$($($optional),*)?],
                    },)*
                }
            }
        }
    };
}

event_vocabulary! {
    Heartbeat => "heartbeat" ["node"];
    Drain => "drain" ["node"];
    Undrain => "undrain" ["node"];
    Health => "health" ["node", "healthy"];
    Vrrp => "vrrp" ["node", "state"];
    PoolApplied => "pool-applied" ["spec"];
    PoolDeleted => "pool-deleted" ["pool"];
    Desire => "desire" ["pool", "address"];
    Undesire => "undesire" ["pool", "address"];
    Approve => "approve" ["idempotencyKey"];
    ActionResult => "action-result" ["node", "idempotencyKey", "outcome", "detail"];
    Inventory => "inventory" ["provider", "address", "holders", "scope"] ? ["scope"];
    TokensRaised => "tokens-raised" ["by"];
    NodeRegistered => "node-registered"
        ["node", "provider", "providerKind", "placementGroup", "nic", "priority", "capacity"] ? ["capacity"];
    NodeRetired => "node-retired" ["node", "force"] ? ["force"];
}

impl EventKind {
    /// The wire name of the event kind.
    #[must_use]
    pub fn wire_name(&self) -> &'static str {
        self.vocabulary().name
    }

    /// The vocabulary of the kind named `name`, if there is one.
    #[must_use]
    pub fn named(name: &str) -> Option<&'static KindVocabulary> {
        EVENT_KINDS.iter().find(|kind| kind.name == name)
    }
}

/// One line for people (replay's narration, the simulator's): the wire name, then what the event
/// is about (`desire edge/10.0.0.10`, `health a healthy=false`, `tokens-raised by 1000000`).
impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.wire_name();
        match self {
            Self::Heartbeat { node }
            | Self::Drain { node }
            | Self::Undrain { node }
            | Self::NodeRetired { node, force: false } => {
                write!(f, "{name} {node}")
            }
            Self::Health { node, healthy } => write!(f, "{name} {node} healthy={healthy}"),
            Self::Vrrp { node, state } => {
                // The serde name (`rename_all = "lowercase"`).
                let state = format!("{state:?}").to_lowercase();
                write!(f, "{name} {node} {state}")
            }
            Self::PoolApplied { spec } => {
                write!(f, "{name} {} ({} addresses)", spec.name, spec.addresses.len())
            }
            Self::PoolDeleted { pool } => write!(f, "{name} {pool}"),
            Self::Desire { pool, address } | Self::Undesire { pool, address } => {
                write!(f, "{name} {pool}/{address}")
            }
            Self::Approve { idempotency_key } => write!(f, "{name} {idempotency_key}"),
            Self::ActionResult { node, idempotency_key, .. } => write!(f, "{name} {node} {idempotency_key}"),
            Self::Inventory { provider, address, .. } => write!(f, "{name} {provider} {address}"),
            Self::TokensRaised { by } => write!(f, "{name} by {by}"),
            Self::NodeRetired { node, force: true } => write!(f, "{name} {node} force"),
            Self::NodeRegistered { spec, .. } => write!(f, "{name} {} nic={}", spec.name, spec.nic),
        }
    }
}

/// A holder of an `inventory` event that its `scope` leaves out, if any: such an event is
/// malformed (a read speaks only of the NICs it could see). The one place for the rule: the
/// codec refuses such an event both ways, and scenario files name the holder.
#[must_use]
pub fn holder_outside_scope<'a>(holders: &'a [String], scope: Option<&[String]>) -> Option<&'a String> {
    let scope = scope?;
    holders.iter().find(|holder| !scope.contains(holder))
}

/// The outcome of an executed action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionOutcome {
    /// The provider call succeeded.
    Executed,
    /// The provider call failed.
    Failed,
}

#[cfg(test)]
mod tests;
