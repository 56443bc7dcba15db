//! The events of the federation log (SPEC 2). The log is totally ordered; every node that
//! applies the same prefix computes the same state ([`crate::federation::Federation`]).

use std::net::IpAddr;

use crate::model::{PoolSpec, VrrpState};

/// One event of the log, with the emitter's time `at` in milliseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Emitter time in ms. Stream time is the largest `at` applied so far.
    pub at_ms: u64,
    /// What happened.
    pub kind: EventKind,
}

/// The payload of an event; the variant names are the wire names in kebab-case.
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
}

impl EventKind {
    /// The wire name of the event kind.
    #[must_use]
    pub fn wire_name(&self) -> &'static str {
        match self {
            Self::Heartbeat { .. } => "heartbeat",
            Self::Drain { .. } => "drain",
            Self::Undrain { .. } => "undrain",
            Self::Health { .. } => "health",
            Self::Vrrp { .. } => "vrrp",
            Self::PoolApplied { .. } => "pool-applied",
            Self::PoolDeleted { .. } => "pool-deleted",
            Self::Desire { .. } => "desire",
            Self::Undesire { .. } => "undesire",
            Self::Approve { .. } => "approve",
            Self::ActionResult { .. } => "action-result",
            Self::Inventory { .. } => "inventory",
            Self::TokensRaised { .. } => "tokens-raised",
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
