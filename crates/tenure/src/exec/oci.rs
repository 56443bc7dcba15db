//! The provider kind `oci` (OCI secondary private IPs on VNICs): registered, and refused by every build of this
//! version. No executor yet (an `exec` provider with the operator's own command can drive it):
//! the agent's start checks and `tenure validate` refuse it with exit 3, at its `kind`
//! ([`NotBuilt`]).
//!
//! Its executor goes here, behind a cargo feature `oci`, as `aws.rs` does (see
//! `docs/architecture.md`, "Adding a provider").

use std::sync::Arc;

use serde::Deserialize;
use tenure_core::model::ProviderKind;

use super::Executor;
use super::registry::{BuildContext, NotBuilt, Provider, ProviderSettings, Runtime};
use crate::config::SettingsCheck;

/// `kind: oci` settings: none yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OciSettings {}

/// `kind: oci` as written: no keys yet.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OciRaw {}

impl Provider for OciSettings {
    const KIND: ProviderKind = ProviderKind::Oci;
    type Raw = OciRaw;

    fn check(_: OciRaw, _: &mut SettingsCheck<'_>) -> Self {
        Self {}
    }
}

impl From<OciSettings> for ProviderSettings {
    fn from(settings: OciSettings) -> Self {
        Self::Oci(settings)
    }
}

impl Runtime for OciSettings {
    fn kind(&self) -> ProviderKind {
        Self::KIND
    }

    fn build(&self, _: &BuildContext<'_>) -> Result<Arc<dyn Executor>, NotBuilt> {
        Err(NotBuilt::NotInThisVersion { kind: Self::KIND.as_str() })
    }
}
