//! The provider kind `azure` (Azure ipConfigs on NICs): registered, and refused by every build of this
//! version. No executor yet (an `exec` provider with the operator's own command can drive it):
//! the agent's start checks and `tenure validate` refuse it with exit 3, at its `kind`
//! ([`NotBuilt`]).
//!
//! Its executor goes here, behind a cargo feature `azure`, as `aws.rs` does (see
//! `docs/architecture.md`, "Adding a provider").

use std::sync::Arc;

use serde::Deserialize;
use tenure_core::model::ProviderKind;

use super::Executor;
use super::registry::{BuildContext, NotBuilt, Provider, ProviderSettings, Runtime};
use crate::config::SettingsCheck;

/// `kind: azure` settings: none yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AzureSettings {}

/// `kind: azure` as written: no keys yet.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AzureRaw {}

impl Provider for AzureSettings {
    const KIND: ProviderKind = ProviderKind::Azure;
    type Raw = AzureRaw;

    fn check(_: AzureRaw, _: &mut SettingsCheck<'_>) -> Self {
        Self {}
    }
}

impl From<AzureSettings> for ProviderSettings {
    fn from(settings: AzureSettings) -> Self {
        Self::Azure(settings)
    }
}

impl Runtime for AzureSettings {
    fn kind(&self) -> ProviderKind {
        Self::KIND
    }

    fn build(&self, _: &BuildContext<'_>) -> Result<Arc<dyn Executor>, NotBuilt> {
        Err(NotBuilt::NotInThisVersion { kind: Self::KIND.as_str() })
    }
}
