//! tenure-oci: the OCI calls of tenure's `oci` provider (SPEC 7), in a crate of their own; the
//! `tenure` binary's cargo feature `oci` turns it on, and its executor (`tenure::exec::oci`) maps
//! verbs onto these calls.
//!
//! - [`sign`] — OCI's request signature (version 1, rsa-sha256), tested against the published
//!   test vector of OCI's "Request Signatures" page.
//! - [`profile`] — the OCI config file (`~/.oci/config`): an API key's id and key.
//! - [`principal`] — instance principals: certificate, federation, session token.
//! - [`http`] — one signed request, retried within a deadline; errors classified.
//! - [`core`] — the Core Services private IP and VNIC calls ([`Core`]).
//!
//! No OCI SDK is used: none for Rust is maintained by Oracle, and the signature is small and
//! specified.

pub mod core;
pub mod http;
pub mod principal;
pub mod profile;
pub mod sign;

pub use crate::core::{Auth, Core, PrivateIp, Vnic};
pub use crate::http::{OciError, POLICY_HINT};
pub use crate::principal::{Endpoints, InstancePrincipal};
