//! The provider kind `aws` (SPEC 7): EC2 secondary private IPs. Its settings ([`AwsSettings`])
//! are read and checked in every build; its executor (`AwsExecutor`, through `tenure-aws`) is
//! built with the cargo feature `aws`, and a build without it refuses an `aws` provider at start
//! ([`NotBuilt::Feature`], exit 3).
//!
//! # Layout
//!
//! - this file — [`AwsSettings`] (`region`, `endpointUrl`, `inventoryInterval`,
//!   `maintenanceNotices`), their check, and
//!   `build()`: the registration in [`super::registry`].
//! - `aws/executor.rs` — `AwsExecutor`: the verbs onto EC2 calls, and the inventory (feature
//!   `aws`).

#[cfg(feature = "aws")]
mod executor;

use std::sync::Arc;

use serde::Deserialize;
use serde_saphyr::Spanned;
use tenure_core::input::Position;
use tenure_core::model::ProviderKind;

#[cfg(feature = "aws")]
pub use executor::{AwsExecutor, CONFIRM_INTERVAL, Ec2, Ec2Error, Unassigned, tenure_aws};

use super::Executor;
use super::notices::{self, MaintenanceNotices, NoticeSource};
use super::registry::{BuildContext, NotBuilt, Provider, ProviderSettings, Runtime};
use crate::config::SettingsCheck;

/// Default time between two inventory reads of an `aws` provider (drift repair's input).
pub const AWS_INVENTORY_INTERVAL_DEFAULT_MS: u64 = 30_000;

/// `kind: aws` settings, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AwsSettings {
    /// The AWS region.
    pub region: String,
    /// Another EC2 endpoint (a test double such as moto), if any.
    pub endpoint_url: Option<String>,
    /// What the agent does when IMDS announces this instance's end (`maintenanceNotices`).
    pub maintenance_notices: MaintenanceNotices,
}

/// `kind: aws` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AwsRaw {
    region: Option<Spanned<String>>,
    endpoint_url: Option<Spanned<String>>,
    inventory_interval: Option<Spanned<String>>,
    maintenance_notices: Option<Spanned<String>>,
}

impl Provider for AwsSettings {
    const KIND: ProviderKind = ProviderKind::Aws;
    type Raw = AwsRaw;

    fn check(raw: AwsRaw, check: &mut SettingsCheck<'_>) -> Self {
        let region = match raw.region {
            None => {
                let message =
                    format!("aws provider `{}` needs `region` (for instance `us-east-1`)", check.name());
                check.error(check.entry(), message);
                String::new()
            }
            Some(text) => {
                let valid = !text.value.is_empty()
                    && text.value.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
                if !valid {
                    check.error(
                        Position::of_spanned(&text),
                        format!("`{}` is not an AWS region name (like `us-east-1`)", text.value),
                    );
                }
                text.value
            }
        };
        let endpoint_url = raw.endpoint_url.map(|url| {
            check.url("endpointUrl", &url);
            url.value
        });
        check.inventory_interval(raw.inventory_interval.as_ref(), AWS_INVENTORY_INTERVAL_DEFAULT_MS);
        let maintenance_notices = notices::check(raw.maintenance_notices.as_ref(), check);
        Self { region, endpoint_url, maintenance_notices }
    }
}

impl From<AwsSettings> for ProviderSettings {
    fn from(settings: AwsSettings) -> Self {
        Self::Aws(settings)
    }
}

impl Runtime for AwsSettings {
    fn kind(&self) -> ProviderKind {
        Self::KIND
    }

    fn maintenance_notices(&self) -> Option<NoticeSource> {
        (self.maintenance_notices == MaintenanceNotices::Drain).then_some(NoticeSource::Aws)
    }

    /// An `AwsExecutor` for the region (its client is made on the first call).
    #[cfg(feature = "aws")]
    fn build(&self, _: &BuildContext<'_>) -> Result<Arc<dyn Executor>, NotBuilt> {
        Ok(Arc::new(AwsExecutor::new(&self.region, self.endpoint_url.as_deref())))
    }

    /// This build has none: the cargo feature `aws` builds it.
    #[cfg(not(feature = "aws"))]
    fn build(&self, _: &BuildContext<'_>) -> Result<Arc<dyn Executor>, NotBuilt> {
        Err(NotBuilt::Feature { kind: Self::KIND.as_str(), feature: "aws", platform: "" })
    }
}
