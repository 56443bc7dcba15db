//! The provider registry: every provider kind once, with its module's settings and executor.
//!
//! A kind's module (`aws.rs`, `onprem/`, `hook.rs`, `sim.rs`, `oci.rs`, `azure.rs`) defines its
//! settings as written (a serde struct with `deny_unknown_fields`), how they are checked, and its
//! `build()`, by implementing [`Provider`]; the module's executor is behind the kind's cargo
//! feature, and `build()` says so when this build lacks it ([`NotBuilt`]). This file only lists
//! them: one [`ProviderSettings`] variant per kind, and `read`, which picks the variant of the
//! `kind` already read. Nothing else in the crate matches on a provider kind to build, check or
//! run one (the core's `ProviderKind` keeps the wire name and the verb family: the simulator and
//! the log need those without this crate).
//!
//! How an entry is read (`config/providers.rs`): its `name` and `kind` first, with the rest of the
//! file; then the entry again, into its kind's settings struct, with every other kind's key
//! refused by name at its value ("provider kind `sim-cloud` does not take `timeout` (it takes
//! `inventoryInterval`)"), never by serde's generic "unknown field": serde's internally tagged
//! enums buffer their content and lose the positions errors need.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::de::{DeserializeOwned, MapAccess};
use tenure_core::model::ProviderKind;

use super::Executor;
#[cfg(unix)]
use super::hook_groups::HookGroups;
use super::notices::NoticeSource;
use super::{aws, azure, hook, oci, onprem, sim};
use crate::config::SettingsCheck;

/// The settings of a provider, by kind: one variant per kind, holding its module's checked
/// settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderSettings {
    /// `sim-cloud`: the in-memory cloud provider.
    SimCloud(sim::SimCloudSettings),
    /// `sim-onprem`: the in-memory proxy-ARP provider.
    SimOnprem(sim::SimOnpremSettings),
    /// `exec` (SPEC 7): the operator's command, fed the stamped action.
    Exec(hook::ExecSettings),
    /// `onprem`: proxy-ARP and gratuitous ARP on a Linux interface (cargo feature `onprem`).
    Onprem(onprem::OnpremSettings),
    /// `aws`: EC2 secondary private IPs (cargo feature `aws`).
    Aws(aws::AwsSettings),
    /// `oci`: OCI secondary private IPs on VNICs (cargo feature `oci`).
    Oci(oci::OciSettings),
    /// `azure`: secondary ipConfigurations on Azure NICs (cargo feature `azure`).
    Azure(azure::AzureSettings),
}

impl ProviderSettings {
    /// The kind's module behind these settings.
    fn provider(&self) -> &dyn Runtime {
        match self {
            Self::SimCloud(s) => s,
            Self::SimOnprem(s) => s,
            Self::Exec(s) => s,
            Self::Onprem(s) => s,
            Self::Aws(s) => s,
            Self::Oci(s) => s,
            Self::Azure(s) => s,
        }
    }

    /// The provider kind these settings are of.
    #[must_use]
    pub fn kind(&self) -> ProviderKind {
        self.provider().kind()
    }

    /// This provider's executor, or why this build has none. Making one does no I/O.
    ///
    /// # Errors
    ///
    /// [`NotBuilt`] when this build has no executor for the kind.
    pub fn build(&self, context: &BuildContext<'_>) -> Result<Arc<dyn Executor>, NotBuilt> {
        self.provider().build(context)
    }

    /// The deadline of one call of this provider, given the agent's `actionTimeout`.
    #[must_use]
    pub fn call_timeout(&self, action_timeout: Duration) -> Duration {
        self.provider().call_timeout(action_timeout)
    }

    /// Whether at most one of this agent's nodes may be on a provider with these settings (an
    /// `onprem` provider answers on one interface of this host).
    #[must_use]
    pub fn one_node_per_agent(&self) -> bool {
        self.provider().one_node_per_agent()
    }

    /// Which metadata service announces the end of this provider's instances, when its
    /// `maintenanceNotices` is `drain` (`None`: ignore them, or a kind without notices).
    #[must_use]
    pub fn maintenance_notices(&self) -> Option<NoticeSource> {
        self.provider().maintenance_notices()
    }

    /// Why `nic` cannot be a NIC of this provider's nodes (an Azure NIC is an ARM resource id, an
    /// OCI VNIC an OCID), if it cannot: the config check puts it at the node's `nic`.
    #[must_use]
    pub fn check_nic(&self, nic: &str) -> Option<String> {
        self.provider().check_nic(nic)
    }

    /// Whether `a` and `b` name the same NIC of this provider (its kind's comparison).
    #[must_use]
    pub fn same_nic(&self, a: &str, b: &str) -> bool {
        self.provider().same_nic(a, b)
    }
}

/// Reads the settings of one `providers:` entry whose `kind` is `kind` from `entry` (the entry's
/// keys other than `name` and `kind`: see `config/providers.rs`), and checks them.
///
/// # Errors
///
/// The deserializer's error (a wrong type, a duplicate key): the entry cannot be read.
pub(crate) fn read<'de, M: MapAccess<'de>>(
    kind: ProviderKind,
    entry: M,
    check: &mut SettingsCheck<'_>,
) -> Result<ProviderSettings, M::Error> {
    match kind {
        ProviderKind::SimCloud => read_as::<sim::SimCloudSettings, M>(entry, check),
        ProviderKind::SimOnprem => read_as::<sim::SimOnpremSettings, M>(entry, check),
        ProviderKind::Exec => read_as::<hook::ExecSettings, M>(entry, check),
        ProviderKind::Onprem => read_as::<onprem::OnpremSettings, M>(entry, check),
        ProviderKind::Aws => read_as::<aws::AwsSettings, M>(entry, check),
        ProviderKind::Oci => read_as::<oci::OciSettings, M>(entry, check),
        ProviderKind::Azure => read_as::<azure::AzureSettings, M>(entry, check),
    }
}

fn read_as<'de, P: Provider, M: MapAccess<'de>>(
    entry: M,
    check: &mut SettingsCheck<'_>,
) -> Result<ProviderSettings, M::Error> {
    let raw = check.deserialize::<P::Raw, M>(P::KIND, entry)?;
    Ok(P::check(raw, check).into())
}

/// A provider kind's module: what its `providers:` entries take, how that is checked, and its
/// executor. Implemented by the kind's checked settings; registered by one [`ProviderSettings`]
/// variant and one arm of `read`.
pub trait Provider: Runtime + Into<ProviderSettings> + Sized {
    /// The kind, as its entries write `kind:`.
    const KIND: ProviderKind;
    /// The settings as written: the entry's keys besides `name` and `kind`, each value
    /// `Spanned` so that a check can name its place. A braced struct with `deny_unknown_fields`
    /// and `rename_all = "camelCase"`; its fields are the keys the kind takes, in the order error
    /// messages list them.
    type Raw: DeserializeOwned;

    /// Checks `raw`, pushing each mistake to `check` at its place, and returns the settings
    /// (with defaults where a mistake left no value: the config is refused anyway).
    fn check(raw: Self::Raw, check: &mut SettingsCheck<'_>) -> Self;
}

/// The part of a kind's module the agent runs (object-safe: [`ProviderSettings`] dispatches to
/// it).
pub trait Runtime: fmt::Debug {
    /// The kind.
    fn kind(&self) -> ProviderKind;

    /// The executor, or why this build has none. Makes no I/O.
    ///
    /// # Errors
    ///
    /// [`NotBuilt`] when the kind's executor is not in this build.
    fn build(&self, context: &BuildContext<'_>) -> Result<Arc<dyn Executor>, NotBuilt>;

    /// The deadline of one call (an inventory read too): `actionTimeout` unless the kind has its
    /// own.
    fn call_timeout(&self, action_timeout: Duration) -> Duration {
        action_timeout
    }

    /// Whether at most one of this agent's nodes may be on such a provider.
    fn one_node_per_agent(&self) -> bool {
        false
    }

    /// Why `nic` is not a NIC id of this kind, if it is not (any non-empty id is, unless the kind
    /// says otherwise).
    fn check_nic(&self, _nic: &str) -> Option<String> {
        None
    }

    /// Whether two NIC ids name the same NIC (byte for byte, unless the kind's ids compare
    /// otherwise: ARM ids ignore case).
    fn same_nic(&self, a: &str, b: &str) -> bool {
        a == b
    }

    /// Which metadata service the agent polls for notices of this instance's end
    /// (`maintenanceNotices: drain` of a cloud kind, see [`super::notices`]); `None` (the
    /// default): none.
    fn maintenance_notices(&self) -> Option<NoticeSource> {
        None
    }
}

/// What a `build()` may need besides the provider's settings.
#[derive(Clone, Copy, Debug)]
pub struct BuildContext<'a> {
    /// The agent's `actionTimeout`.
    pub action_timeout: Duration,
    /// The mark every process of an exec hook carries (`TENURE_HOOK_OWNER`); empty for a
    /// start check that runs nothing.
    pub owner: &'a str,
    /// Where exec hooks record their process groups before they act, if anywhere.
    #[cfg(unix)]
    pub groups: Option<&'a HookGroups>,
}

/// Why this build has no executor for a provider's kind: the start checks refuse it with exit 3
/// (a part this build does not have), `tenure validate` too.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotBuilt {
    /// The executor is behind a cargo feature this build was made without.
    #[error("this build has no {kind} executor; rebuild with --features {feature}{platform}")]
    Feature {
        /// The kind.
        kind: &'static str,
        /// The cargo feature that builds it.
        feature: &'static str,
        /// Where it builds, when not everywhere (` (Linux)`), else empty.
        platform: &'static str,
    },
}

#[cfg(test)]
mod tests {
    use serde::de::value::{Error, MapDeserializer};

    use super::*;

    /// Every kind reads into its own variant, and the variant says its kind (an entry with no
    /// settings: the checks complain of what is missing, and still say what they read).
    #[test]
    fn every_kind_is_read_into_its_own_variant() {
        let kinds = [
            ProviderKind::SimCloud,
            ProviderKind::SimOnprem,
            ProviderKind::Exec,
            ProviderKind::Onprem,
            ProviderKind::Aws,
            ProviderKind::Oci,
            ProviderKind::Azure,
        ];
        for kind in kinds {
            let mut errors = Vec::new();
            let mut check = SettingsCheck::for_test("p", &mut errors);
            let empty = MapDeserializer::<_, Error>::new(std::iter::empty::<(String, String)>());
            let settings = read(kind, empty, &mut check).expect("an empty entry reads");
            assert_eq!(settings.kind(), kind, "{kind:?} reads into its own variant");
        }
    }
}
