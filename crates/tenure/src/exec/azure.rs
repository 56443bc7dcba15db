//! The provider kind `azure` (SPEC 7): a secondary static ipConfiguration on an Azure NIC. Its
//! settings ([`AzureSettings`]) are read and checked in every build, and so are its nodes' NIC ids
//! (ARM resource ids in the provider's subscription); its executor (`AzureExecutor`, through
//! `tenure-azure`) is built with the cargo feature `azure`, and a build without it refuses an
//! `azure` provider at start ([`NotBuilt::Feature`], exit 3).
//!
//! # Layout
//!
//! - this file — [`AzureSettings`] (`subscriptionId`, `resourceGroup`, `endpointUrl`,
//!   `ipForwarding`, `inventoryInterval`), their check, the NIC id check, and `build()`.
//! - `azure/executor.rs` — `AzureExecutor`: the verbs onto ARM operations, and the inventory
//!   (feature `azure`).

#[cfg(feature = "azure")]
mod executor;

use std::sync::Arc;

use serde::Deserialize;
use serde_saphyr::Spanned;
use tenure_core::input::Position;
use tenure_core::model::ProviderKind;

#[cfg(feature = "azure")]
pub use executor::{AzureExecutor, tenure_azure};

use super::Executor;
use super::notices::{self, MaintenanceNotices, NoticeSource};
use super::registry::{BuildContext, NotBuilt, Provider, ProviderSettings, Runtime};
use crate::config::SettingsCheck;

/// Default time between two inventory reads of an `azure` provider (drift repair's input).
pub const AZURE_INVENTORY_INTERVAL_DEFAULT_MS: u64 = 30_000;

/// What `enable-forwarding` does about a NIC's `enableIPForwarding`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IpForwarding {
    /// Read it; an action fails naming it when it is off (the default: the operator turns it on).
    #[default]
    Check,
    /// Turn it on when it is off (a write of the NIC).
    Set,
}

/// `kind: azure` settings, checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AzureSettings {
    /// The subscription every node's NIC is in (a GUID).
    pub subscription_id: String,
    /// The resource group of the nodes' NICs, when the config names one (each NIC id names its
    /// own group; this one only documents and checks it).
    pub resource_group: Option<String>,
    /// Another ARM endpoint (a test double), if any.
    pub endpoint_url: Option<String>,
    /// What `enable-forwarding` does.
    pub ip_forwarding: IpForwarding,
    /// What the agent does when Scheduled Events announce this VM's end (`maintenanceNotices`).
    pub maintenance_notices: MaintenanceNotices,
}

/// The test hook: a fixed bearer token sent instead of a credential's (the ARM fake), which also
/// lets `endpointUrl` be plain http (`tenure_azure::TEST_TOKEN_ENV`).
pub const AZURE_TEST_TOKEN_ENV: &str = "TENURE_AZURE_TEST_TOKEN";

/// `kind: azure` as written (its fields in the order error messages list them).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AzureRaw {
    subscription_id: Option<Spanned<String>>,
    resource_group: Option<Spanned<String>>,
    endpoint_url: Option<Spanned<String>>,
    ip_forwarding: Option<Spanned<String>>,
    inventory_interval: Option<Spanned<String>>,
    maintenance_notices: Option<Spanned<String>>,
}

/// Whether `text` is a GUID (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, hexadecimal).
fn is_guid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit()))
}

/// The subscription and name of an ARM NIC resource id
/// (`/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Network/networkInterfaces/{name}`,
/// segment names compared without regard to case), or `None`.
#[must_use]
pub fn parse_nic_id(id: &str) -> Option<(&str, &str, &str)> {
    let rest = id.strip_prefix('/')?;
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        [s, sub, r, group, p, ns, t, name]
            if s.eq_ignore_ascii_case("subscriptions")
                && r.eq_ignore_ascii_case("resourceGroups")
                && p.eq_ignore_ascii_case("providers")
                && ns.eq_ignore_ascii_case("Microsoft.Network")
                && t.eq_ignore_ascii_case("networkInterfaces")
                && [sub, group, name].iter().all(|x| !x.is_empty()) =>
        {
            Some((sub, group, name))
        }
        _ => None,
    }
}

/// The resource group scope (`/subscriptions/{sub}/resourceGroups/{rg}`) of an ARM NIC id, or
/// `None` when `id` is not one: where the executor looks for an address's holders.
#[must_use]
pub fn group_of(id: &str) -> Option<String> {
    parse_nic_id(id).map(|(sub, group, _)| format!("/subscriptions/{sub}/resourceGroups/{group}"))
}

impl Provider for AzureSettings {
    const KIND: ProviderKind = ProviderKind::Azure;
    type Raw = AzureRaw;

    fn check(raw: AzureRaw, check: &mut SettingsCheck<'_>) -> Self {
        let subscription_id = match raw.subscription_id {
            None => {
                let message = format!(
                    "azure provider `{}` needs `subscriptionId` (the GUID of the NICs' subscription)",
                    check.name()
                );
                check.error(check.entry(), message);
                String::new()
            }
            Some(text) => {
                if !is_guid(&text.value) {
                    check.error(
                        Position::of_spanned(&text),
                        format!(
                            "`{}` is not a subscription id (a GUID like 00000000-0000-0000-0000-000000000000)",
                            text.value
                        ),
                    );
                }
                text.value
            }
        };
        let resource_group = raw.resource_group.map(|group| {
            if group.value.is_empty() {
                check.error(Position::of_spanned(&group), "resourceGroup is empty");
            }
            group.value
        });
        let endpoint_url = raw.endpoint_url.map(|url| {
            check.url("endpointUrl", &url);
            // The client sends a credential's token over https only: a plain-http endpoint is
            // for the test fake, with the test hook's fixed token (refused here, not at every call).
            if url.value.starts_with("http://") && std::env::var_os(AZURE_TEST_TOKEN_ENV).is_none() {
                check.error(
                    Position::of_spanned(&url),
                    format!(
                        "endpointUrl `{}` is not https: a credential's token is sent over https only (set {AZURE_TEST_TOKEN_ENV} for a test endpoint)",
                        url.value
                    ),
                );
            }
            url.value
        });
        let ip_forwarding = match raw.ip_forwarding {
            None => IpForwarding::Check,
            Some(text) => match text.value.as_str() {
                "check" => IpForwarding::Check,
                "set" => IpForwarding::Set,
                other => {
                    check.error(
                        Position::of_spanned(&text),
                        format!("ipForwarding `{other}` is not one of check, set"),
                    );
                    IpForwarding::Check
                }
            },
        };
        check.inventory_interval(raw.inventory_interval.as_ref(), AZURE_INVENTORY_INTERVAL_DEFAULT_MS);
        let maintenance_notices = notices::check(raw.maintenance_notices.as_ref(), check);
        Self { subscription_id, resource_group, endpoint_url, ip_forwarding, maintenance_notices }
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

    fn maintenance_notices(&self) -> Option<NoticeSource> {
        (self.maintenance_notices == MaintenanceNotices::Drain).then_some(NoticeSource::Azure)
    }

    /// An `AzureExecutor` (its client is made on the first call).
    #[cfg(feature = "azure")]
    fn build(&self, _: &BuildContext<'_>) -> Result<Arc<dyn Executor>, NotBuilt> {
        Ok(Arc::new(AzureExecutor::new(self.endpoint_url.as_deref(), self.ip_forwarding)))
    }

    /// This build has none: the cargo feature `azure` builds it.
    #[cfg(not(feature = "azure"))]
    fn build(&self, _: &BuildContext<'_>) -> Result<Arc<dyn Executor>, NotBuilt> {
        Err(NotBuilt::Feature { kind: Self::KIND.as_str(), feature: "azure", platform: "" })
    }

    /// ARM resource ids compare without regard to case.
    fn same_nic(&self, a: &str, b: &str) -> bool {
        a.eq_ignore_ascii_case(b)
    }

    /// A node's `nic` is its NIC's ARM resource id, in this provider's subscription (and resource
    /// group, when `resourceGroup` is set).
    fn check_nic(&self, nic: &str) -> Option<String> {
        let Some((subscription, group, _)) = parse_nic_id(nic) else {
            return Some(format!(
                "`{nic}` is not an Azure NIC resource id (/subscriptions/SUBSCRIPTION/resourceGroups/GROUP/providers/Microsoft.Network/networkInterfaces/NAME)"
            ));
        };
        // A subscriptionId that is no GUID is refused at its own place; comparing NICs to it
        // would only add lines.
        if is_guid(&self.subscription_id) && !subscription.eq_ignore_ascii_case(&self.subscription_id) {
            return Some(format!(
                "NIC `{nic}` is in subscription {subscription}, not in the provider's subscriptionId {}",
                self.subscription_id
            ));
        }
        match &self.resource_group {
            Some(expected) if !group.eq_ignore_ascii_case(expected) => Some(format!(
                "NIC `{nic}` is in resource group {group}, not in the provider's resourceGroup {expected}"
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUB: &str = "0b1f6471-1bf0-4dda-aec3-cb9272f09590";

    fn settings(group: Option<&str>) -> AzureSettings {
        AzureSettings {
            subscription_id: SUB.into(),
            resource_group: group.map(str::to_owned),
            ..Default::default()
        }
    }

    /// The config check and the client name one test hook.
    #[cfg(feature = "azure")]
    #[test]
    fn the_test_hook_is_the_clients() {
        assert_eq!(AZURE_TEST_TOKEN_ENV, tenure_azure::TEST_TOKEN_ENV);
    }

    #[test]
    fn nic_ids_are_arm_ids_in_the_subscription() {
        let id =
            format!("/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/a");
        assert_eq!(settings(None).check_nic(&id), None);
        let lower = id.to_ascii_lowercase();
        assert_eq!(
            settings(Some("RG")).check_nic(&lower),
            None,
            "segment names and values compare without case"
        );
        let message = settings(None).check_nic("eni-0123").expect("refused");
        assert!(
            message.starts_with("`eni-0123` is not an Azure NIC resource id (/subscriptions/"),
            "{message}"
        );
        let other = id.replace(SUB, "11111111-1bf0-4dda-aec3-cb9272f09590");
        let message = settings(None).check_nic(&other).expect("refused");
        assert!(message.contains("not in the provider's subscriptionId"), "{message}");
        let message = settings(Some("other")).check_nic(&id).expect("refused");
        assert!(message.contains("not in the provider's resourceGroup other"), "{message}");
        assert!(settings(None).check_nic(&format!("{id}/ipConfigurations/x")).is_some());
        assert_eq!(group_of(&id), Some(format!("/subscriptions/{SUB}/resourceGroups/rg")));
        assert_eq!(group_of("eni-0123"), None);
    }

    #[test]
    fn guids() {
        assert!(is_guid(SUB));
        assert!(!is_guid("0b1f6471-1bf0-4dda-aec3"));
        assert!(!is_guid("zb1f6471-1bf0-4dda-aec3-cb9272f09590"));
    }
}
