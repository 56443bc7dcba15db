//! tenure-azure: the Azure Resource Manager calls of tenure's `azure` provider (SPEC 7), through
//! the official SDK's `azure_core` HTTP pipeline (its retries off) and `azure_identity`'s
//! credentials; the `tenure` binary's cargo feature `azure` turns it on, and its executor
//! (`tenure::exec::azure`) maps verbs onto these operations.
//!
//! | operation | ARM calls (`Microsoft.Network`, api-version [`API_VERSION`]) | idempotent as |
//! |---|---|---|
//! | [`Arm::seize`] | GET own NIC; list the resource group's NICs; per other holder in the same virtual network: PUT without the ipConfiguration (If-Match), its operation polled; PUT own NIC with it (If-Match), polled; GET own NIC to confirm (`Succeeded`). On `PrivateIPAddressInUse`: GET the NIC ARM names as the holder (any group), remove it there | an address on the NIC already is success with no write; an address on no NIC (a crash between the writes) is only added |
//! | [`Arm::release`] | GET own NIC; PUT without the ipConfiguration (If-Match), polled (the operation's `Succeeded` is the confirmation) | an address not there is success with no write |
//! | [`Arm::forwarding`] | GET own NIC; with `set`, PUT with `enableIPForwarding` (If-Match), polled (likewise) | on already: no write |
//! | [`Arm::holders`] | list each resource group's NICs (paged by `nextLink`); only holders in the nodes' virtual networks count | a read |
//!
//! Retries ([`client`]'s table): throttling and busy resources after `Retry-After`, server
//! errors with backoff, a 412 by reading again; all within the caller's deadline, which is
//! checked before every request (past it, nothing more is sent). 401/403 come back at once as
//! [`ArmError::Permission`], whose message names the role needed. Anything that goes wrong after
//! a write was accepted is [`ArmError::InDoubt`]: the write may have applied.
//!
//! Every decision is made on a settled NIC ([`Arm::settled`]): `provisioningState` `Succeeded`;
//! `Updating` is read again until it settles; `Failed` is written back as read (ARM's recovery)
//! first. Holders count only in the virtual network of the NIC's primary subnet.
//!
//! # Layout
//!
//! - [`client`] — [`Arm`]: one ARM call through `azure_core`'s pipeline, and the retry rules.
//! - [`nic`] — [`nic::Nic`]: a network interface as ARM answers it, kept as JSON.
//! - [`ops`] — reading a settled NIC, writing it with `If-Match`, listing a group's NICs, and
//!   the verbs release and forwarding.
//! - [`seize`] — the seize and the inventory: where an address is held, and moving it.

pub mod client;
pub mod nic;
pub mod ops;
pub mod seize;

/// The HTTP method of [`Arm::call`].
pub use azure_core::http::Method;
pub use client::{API_VERSION, ARM_ENDPOINT, ARM_SCOPE, Arm, TEST_TOKEN_ENV};
pub use nic::Nic;
pub use ops::{Forwarding, Released};
pub use seize::Seized;

/// What the role of the agent's identity needs (named in every permission error).
pub const ROLE_HINT: &str = "the agent's identity needs the role Network Contributor on the NICs and their subnet, or a \
     custom role with Microsoft.Network/networkInterfaces/read, Microsoft.Network/networkInterfaces/write, \
     Microsoft.Network/virtualNetworks/subnets/join/action and Microsoft.Network/locations/operations/read, plus \
     the join action of any resource the NIC links (LinkedAuthorizationFailed: docs/operations.md, Azure)";

/// Why an ARM call did not do what was asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArmError {
    /// 401/403: the credential or its role; retrying will not help.
    #[error("{operation}: HTTP {status} {code}: {message}; {hint}", hint = ROLE_HINT)]
    Permission {
        /// The ARM operation.
        operation: &'static str,
        /// The HTTP status.
        status: u16,
        /// ARM's error code.
        code: String,
        /// ARM's message.
        message: String,
    },
    /// ARM refused the request (an unknown NIC, an address outside the subnet, a primary
    /// address to remove, an operation that failed, …).
    #[error("{operation}: HTTP {status} {code}: {message}")]
    Refused {
        /// The ARM operation.
        operation: &'static str,
        /// The HTTP status (0: refused here, before any call).
        status: u16,
        /// ARM's error code (or this crate's).
        code: String,
        /// ARM's message.
        message: String,
    },
    /// A write got no answer: it may or may not have taken effect.
    #[error("{operation}: no answer from ARM: {message}")]
    NoAnswer {
        /// The ARM operation.
        operation: &'static str,
        /// What failed.
        message: String,
    },
    /// A write was accepted (200/201/202), and what followed failed (its operation `Failed` or
    /// `Canceled`, a poll refused, a confirming read refused): it may have taken effect. Also a
    /// write an earlier try of which was answered 5xx, and whose resend was refused (but 412).
    #[error("{operation}: the write was accepted, then {cause}; it may have taken effect")]
    InDoubt {
        /// The ARM operation of the write.
        operation: &'static str,
        /// What failed after the write was accepted.
        cause: Box<ArmError>,
    },
    /// The deadline came first (throttled, busy, or an operation still running), or had passed
    /// before a request was sent (then the request was not sent).
    #[error("{operation}: {message}")]
    Deadline {
        /// The ARM operation.
        operation: &'static str,
        /// What was under way.
        message: String,
    },
    /// The client could not be made or get a token.
    #[error("azure: {message}")]
    Setup {
        /// What is wrong.
        message: String,
    },
}
