//! The provider kind `oci` (SPEC 7): OCI secondary private IPs on VNICs. Its settings
//! ([`OciSettings`]) are read and checked in every build; its executor (`OciExecutor`, through
//! `tenure-oci`) is built with the cargo feature `oci`, and a build without it refuses an `oci`
//! provider at start ([`NotBuilt::Feature`], exit 3).
//!
//! # Layout
//!
//! - this file — [`OciSettings`] (`region`, `auth`, `endpointUrl`, `skipSourceDestCheck`,
//!   `inventoryInterval`), their check (with the feature, the config file's profile is read: a
//!   missing file, profile or key is one line at `auth`), the VNIC OCID check, and `build()`.
//! - `oci/executor.rs` — `OciExecutor`: the verbs onto Core Services calls, and the inventory
//!   (feature `oci`).

#[cfg(feature = "oci")]
mod executor;

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use serde_saphyr::Spanned;
use tenure_core::input::Position;
use tenure_core::model::ProviderKind;

#[cfg(feature = "oci")]
pub use executor::{CONFIRM_INTERVAL, OciExecutor, tenure_oci};

use super::Executor;
use super::notices::{self, MaintenanceNotices, NoticeSource};
use super::registry::{BuildContext, NotBuilt, Provider, ProviderSettings, Runtime};
use crate::config::SettingsCheck;

/// Default time between two inventory reads of an `oci` provider (drift repair's input).
pub const OCI_INVENTORY_INTERVAL_DEFAULT_MS: u64 = 30_000;

/// The OCI config file read when `auth` names none.
pub const OCI_CONFIG_FILE_DEFAULT: &str = "~/.oci/config";

/// How an `oci` provider signs its requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OciAuth {
    /// Instance principals (a dynamic group's policies): the instance's certificate from its
    /// metadata service, a session token from the federation endpoint.
    InstancePrincipal,
    /// An API key of a profile of an OCI config file.
    ConfigFile {
        /// The file (`~` expanded; relative to the agent config's folder otherwise).
        path: PathBuf,
        /// The profile.
        profile: String,
    },
}

/// Whether `enable-forwarding` may turn `skipSourceDestCheck` on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SkipSourceDestCheck {
    /// Check it only: `failed`, naming the VNIC, when it is off (the default).
    #[default]
    Check,
    /// Turn it on when it is off (UpdateVnic: the policy then needs `use vnics` with update).
    Set,
}

/// `kind: oci` settings, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OciSettings {
    /// The OCI region (`us-ashburn-1`).
    pub region: String,
    /// How requests are signed.
    pub auth: OciAuth,
    /// Another Core Services endpoint (a test double), if any.
    pub endpoint_url: Option<String>,
    /// Whether `enable-forwarding` checks or sets the VNIC's `skipSourceDestCheck`.
    pub skip_source_dest_check: SkipSourceDestCheck,
    /// What the agent does when the instance metadata announces this instance's maintenance
    /// (`maintenanceNotices`).
    pub maintenance_notices: MaintenanceNotices,
}

/// `kind: oci` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OciRaw {
    region: Option<Spanned<String>>,
    /// `instancePrincipal`, or `{configFile: PATH, profile: NAME}` (read as any value, checked
    /// here: a generic untagged-enum error would name no key).
    auth: Option<Spanned<serde_json::Value>>,
    endpoint_url: Option<Spanned<String>>,
    skip_source_dest_check: Option<Spanned<String>>,
    inventory_interval: Option<Spanned<String>>,
    maintenance_notices: Option<Spanned<String>>,
}

/// Whether `text` is an OCID of `kind` (`ocid1.<kind>.<realm>.[region][.future].<unique>`).
#[must_use]
pub fn is_ocid(text: &str, kind: &str) -> bool {
    let parts: Vec<&str> = text.split('.').collect();
    let allowed = |part: &&str| {
        part.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    };
    (5..=6).contains(&parts.len())
        && parts[0] == "ocid1"
        && parts[1] == kind
        && !parts[2].is_empty()
        && parts.last().is_some_and(|unique| !unique.is_empty())
        && parts.iter().all(allowed)
}

fn check_region(check: &mut SettingsCheck<'_>, region: Option<Spanned<String>>) -> String {
    match region {
        None => {
            let message =
                format!("oci provider `{}` needs `region` (for instance `us-ashburn-1`)", check.name());
            check.error(check.entry(), message);
            String::new()
        }
        Some(text) => {
            let valid = !text.value.is_empty()
                && text.value.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            if !valid {
                check.error(
                    Position::of_spanned(&text),
                    format!("`{}` is not an OCI region identifier (like `us-ashburn-1`)", text.value),
                );
            }
            text.value
        }
    }
}

fn check_auth(check: &mut SettingsCheck<'_>, auth: Option<Spanned<serde_json::Value>>) -> OciAuth {
    use serde_json::Value;
    let at = auth.as_ref().map_or_else(|| check.entry(), Position::of_spanned);
    let usage = "use `instancePrincipal` or `{configFile: PATH, profile: NAME}`";
    let (mut file, mut profile) = (None, None);
    let mut mistaken = false;
    match auth.map(|a| a.value) {
        None => {}
        Some(Value::String(name)) if name == "instancePrincipal" => return OciAuth::InstancePrincipal,
        Some(Value::Object(map)) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("configFile", Value::String(v)) => file = Some(v),
                    ("profile", Value::String(v)) => profile = Some(v),
                    ("configFile" | "profile", other) => {
                        mistaken = true;
                        check.error(at, format!("auth: `{key}` must be a string, not `{other}`"));
                    }
                    (other, _) => {
                        mistaken = true;
                        check.error(
                            at,
                            format!("auth does not take `{other}` (it takes `configFile`, `profile`)"),
                        );
                    }
                }
            }
        }
        Some(Value::String(other)) => {
            check.error(at, format!("auth `{other}` is not an OCI auth: {usage}"));
            return OciAuth::InstancePrincipal;
        }
        Some(other) => {
            check.error(at, format!("auth `{other}` is not an OCI auth: {usage}"));
            return OciAuth::InstancePrincipal;
        }
    }
    let written = file.unwrap_or_else(|| OCI_CONFIG_FILE_DEFAULT.to_owned());
    let path = if written.starts_with('~') { home(&written) } else { check.resolve(&written) };
    let profile = profile.unwrap_or_else(|| "DEFAULT".to_owned());
    // The file is read only when the key was written right (one line per mistake).
    #[cfg(feature = "oci")]
    if !mistaken && let Err(e) = tenure_oci::profile::api_key(&path, &profile) {
        check.error(at, format!("auth: {e}"));
    }
    let _ = mistaken;
    OciAuth::ConfigFile { path, profile }
}

/// `~` or `~/…` with `$HOME`.
fn home(path: &str) -> PathBuf {
    match (path.strip_prefix('~'), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => {
            PathBuf::from(home).join(rest.trim_start_matches('/'))
        }
        _ => PathBuf::from(path),
    }
}

impl Provider for OciSettings {
    const KIND: ProviderKind = ProviderKind::Oci;
    type Raw = OciRaw;

    fn check(raw: OciRaw, check: &mut SettingsCheck<'_>) -> Self {
        let region = check_region(check, raw.region);
        let auth = check_auth(check, raw.auth);
        let endpoint_url = raw.endpoint_url.map(|url| {
            check.url("endpointUrl", &url);
            url.value
        });
        let skip_source_dest_check = match raw.skip_source_dest_check {
            None => SkipSourceDestCheck::Check,
            Some(text) => match text.value.as_str() {
                "check" => SkipSourceDestCheck::Check,
                "set" => SkipSourceDestCheck::Set,
                other => {
                    check.error(
                        Position::of_spanned(&text),
                        format!("skipSourceDestCheck `{other}`: use `check` (the default) or `set`"),
                    );
                    SkipSourceDestCheck::Check
                }
            },
        };
        check.inventory_interval(raw.inventory_interval.as_ref(), OCI_INVENTORY_INTERVAL_DEFAULT_MS);
        let maintenance_notices = notices::check(raw.maintenance_notices.as_ref(), check);
        Self { region, auth, endpoint_url, skip_source_dest_check, maintenance_notices }
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

    fn maintenance_notices(&self) -> Option<NoticeSource> {
        (self.maintenance_notices == MaintenanceNotices::Drain).then_some(NoticeSource::Oci)
    }

    /// An `OciExecutor` for the region (its key, or its instance principal's session, is read
    /// on the first call).
    #[cfg(feature = "oci")]
    fn build(&self, _: &BuildContext<'_>) -> Result<Arc<dyn Executor>, NotBuilt> {
        Ok(Arc::new(OciExecutor::new(self.clone())))
    }

    /// This build has none: the cargo feature `oci` builds it.
    #[cfg(not(feature = "oci"))]
    fn build(&self, _: &BuildContext<'_>) -> Result<Arc<dyn Executor>, NotBuilt> {
        Err(NotBuilt::Feature { kind: Self::KIND.as_str(), feature: "oci", platform: "" })
    }

    fn check_nic(&self, nic: &str) -> Option<String> {
        (!is_ocid(nic, "vnic")).then(|| {
            format!("`{nic}` is not a VNIC OCID (ocid1.vnic.<realm>.<region>.<unique>, as `oci network vnic get` shows)")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vnic_ocids_are_told_from_other_text() {
        assert!(is_ocid(
            "ocid1.vnic.oc1.phx.abyhqljrgvttnlx73nmrwfaux7kcvzfs3s66izvxf2h4lgvyndsdsnoiwr5q",
            "vnic"
        ));
        assert!(is_ocid("ocid1.vnic.oc1..aaaa", "vnic"));
        assert!(is_ocid("ocid1.vnic.oc1.iad.future.aaaa", "vnic"));
        assert!(!is_ocid("ocid1.instance.oc1.phx.aaaa", "vnic"));
        assert!(!is_ocid("eni-0123", "vnic"));
        assert!(!is_ocid("ocid1.vnic.oc1.phx.", "vnic"));
        assert!(!is_ocid("ocid1.vnic..phx.aaaa", "vnic"));
        assert!(!is_ocid("ocid1.vnic.oc1.phx.AA/A", "vnic"));
    }
}
