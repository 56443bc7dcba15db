//! The provider kind `onprem` (SPEC 7): proxy neighbour entries and gratuitous ARP / unsolicited
//! NA on a Linux interface. Its settings ([`OnpremSettings`]) are read and checked in every build;
//! its executor (`OnpremExecutor`) is built on Linux with the cargo feature `onprem`, and another
//! build refuses an `onprem` provider at start ([`NotBuilt::Feature`], exit 3).
//!
//! An `onprem` provider answers on one interface of this host: its proxy entries, and so its
//! inventory, cannot tell two of this agent's nodes apart, so at most one of them may be on it.
//!
//! # Layout
//!
//! - this file — [`OnpremSettings`] (`interface`, `garpCount`, `garpInterval`,
//!   `inventoryInterval`, `garpRefresh`), their check, and `build()`: the registration in
//!   [`super::registry`].
//! - `executor.rs` — `OnpremExecutor`: the verbs onto rtnetlink and raw sockets, the inventory,
//!   the local withdrawal (Linux, feature `onprem`).
//! - `frames.rs` — the gratuitous ARP and unsolicited NA frames (Linux, feature `onprem`).

#[cfg(all(target_os = "linux", feature = "onprem"))]
mod executor;
#[cfg(all(target_os = "linux", feature = "onprem"))]
pub mod frames;

use std::sync::Arc;
#[cfg(all(target_os = "linux", feature = "onprem"))]
use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::Spanned;
use tenure_core::input::Position;
use tenure_core::model::ProviderKind;

#[cfg(all(target_os = "linux", feature = "onprem"))]
pub use executor::{OnpremExecutor, proxy_entries};

use super::Executor;
use super::registry::{BuildContext, NotBuilt, Provider, ProviderSettings, Runtime};
use crate::config::SettingsCheck;

/// Default `garpCount` of an onprem provider.
pub const GARP_COUNT_DEFAULT: u32 = 3;
/// Most gratuitous ARPs an onprem provider may send per acquire.
pub const GARP_COUNT_MAX: u32 = 100;
/// Default `garpInterval` of an onprem provider.
pub const GARP_INTERVAL_DEFAULT_MS: u64 = 100;
/// Default time between two inventory reads of an `onprem` provider: a netlink dump of this
/// host's proxy entries, cheap enough to read often.
pub const ONPREM_INVENTORY_INTERVAL_DEFAULT_MS: u64 = 5_000;
/// Longest Linux interface name (`IFNAMSIZ` less its terminating NUL), in bytes.
pub const INTERFACE_NAME_BYTES_MAX: usize = 15;

/// `kind: onprem` settings, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnpremSettings {
    /// The Linux interface.
    pub interface: String,
    /// Gratuitous ARPs per acquire (default [`GARP_COUNT_DEFAULT`]).
    pub garp_count: u32,
    /// Time between them (default [`GARP_INTERVAL_DEFAULT_MS`]).
    pub garp_interval_ms: u64,
}

/// `kind: onprem` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OnpremRaw {
    interface: Option<Spanned<String>>,
    garp_count: Option<Spanned<u32>>,
    garp_interval: Option<Spanned<String>>,
    inventory_interval: Option<Spanned<String>>,
    garp_refresh: Option<Spanned<String>>,
}

impl Provider for OnpremSettings {
    const KIND: ProviderKind = ProviderKind::Onprem;
    type Raw = OnpremRaw;

    fn check(raw: OnpremRaw, check: &mut SettingsCheck<'_>) -> Self {
        let interface = match raw.interface {
            None => {
                let message = format!(
                    "onprem provider `{}` needs `interface`: the Linux interface it answers on",
                    check.name()
                );
                check.error(check.entry(), message);
                String::new()
            }
            Some(text) => {
                if let Err(m) = check_interface_name(&text.value) {
                    check.error(Position::of_spanned(&text), m);
                }
                text.value
            }
        };
        let garp_count = raw.garp_count.map_or(GARP_COUNT_DEFAULT, |count| {
            if count.value > GARP_COUNT_MAX {
                check.error(
                    Position::of_spanned(&count),
                    format!("garpCount {} is more than {GARP_COUNT_MAX}", count.value),
                );
            }
            count.value
        });
        let garp_interval_ms =
            check.duration("garpInterval", raw.garp_interval.as_ref(), GARP_INTERVAL_DEFAULT_MS, false);
        check.inventory_interval(raw.inventory_interval.as_ref(), ONPREM_INVENTORY_INTERVAL_DEFAULT_MS);
        check.garp_refresh(raw.garp_refresh.as_ref());
        Self { interface, garp_count, garp_interval_ms }
    }
}

impl From<OnpremSettings> for ProviderSettings {
    fn from(settings: OnpremSettings) -> Self {
        Self::Onprem(settings)
    }
}

impl Runtime for OnpremSettings {
    fn kind(&self) -> ProviderKind {
        Self::KIND
    }

    /// An `OnpremExecutor` on the interface (it opens nothing until a call).
    #[cfg(all(target_os = "linux", feature = "onprem"))]
    fn build(&self, _: &BuildContext<'_>) -> Result<Arc<dyn Executor>, NotBuilt> {
        let garp_interval = Duration::from_millis(self.garp_interval_ms);
        Ok(Arc::new(OnpremExecutor::new(&self.interface, self.garp_count, garp_interval)))
    }

    /// This build has none: the cargo feature `onprem` builds it, on Linux.
    #[cfg(not(all(target_os = "linux", feature = "onprem")))]
    fn build(&self, _: &BuildContext<'_>) -> Result<Arc<dyn Executor>, NotBuilt> {
        Err(NotBuilt::Feature { kind: Self::KIND.as_str(), feature: "onprem", platform: " (Linux)" })
    }

    fn one_node_per_agent(&self) -> bool {
        true
    }
}

/// Linux's rule for an interface name (`dev_valid_name`): 1 to 15 bytes, not `.` or `..`, no
/// `/`, `:` or whitespace.
///
/// # Errors
///
/// Why `name` is not one, in one line.
pub fn check_interface_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > INTERFACE_NAME_BYTES_MAX {
        return Err(format!(
            "interface `{name}` must be 1 to {INTERFACE_NAME_BYTES_MAX} bytes long (a Linux interface name)"
        ));
    }
    if name == "." || name == ".." || name.chars().any(|c| c == '/' || c == ':' || c.is_whitespace()) {
        return Err(format!("`{name}` is not a Linux interface name (no `/`, `:` or spaces)"));
    }
    Ok(())
}
