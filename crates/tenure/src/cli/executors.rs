//! The executor of each provider kind this build has: the one cfg-gated registry. A kind this
//! build lacks (`aws`, `onprem` without their cargo features; `oci`, `azure` in every build) is a
//! one-line refusal here, which the start checks (`preflight.rs`) turn into exit 3 for both
//! `tenure agent` and `tenure validate`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tenure_core::model::ProviderKind;

use crate::agent::ProviderExecutor;
use crate::config::{AgentConfig, ProviderConfig, ProviderSettings};
use crate::exec::SimExecutor;
use crate::exec::hook::ExecHook;
use crate::exec::hook_groups::HookGroups;

/// Extra time an exec hook's call gets past the hook's own timeout, so that the hook's timeout
/// (which kills its process group) fires first and names itself.
const HOOK_DEADLINE_GRACE: Duration = Duration::from_secs(1);

/// The executors of the configured providers, by provider name, or the refusal of the first kind
/// this build has no executor for.
pub(super) fn executors(
    config: &AgentConfig,
    owner: &str,
    groups: Option<&HookGroups>,
) -> Result<BTreeMap<String, ProviderExecutor>, String> {
    let action_timeout = Duration::from_millis(config.action_timeout_ms);
    let mut executors = BTreeMap::new();
    for provider in &config.providers {
        let executor = executor(provider, action_timeout, owner, groups)?;
        executors.insert(provider.name.clone(), executor);
    }
    Ok(executors)
}

/// The executor of one provider (its hooks' processes marked with `owner` and recorded in
/// `groups`), or a one-line refusal naming the provider and what to do when this build has no
/// executor for its kind. Making one does no I/O.
pub(super) fn executor(
    provider: &ProviderConfig,
    action_timeout: Duration,
    owner: &str,
    groups: Option<&HookGroups>,
) -> Result<ProviderExecutor, String> {
    let mut executor = match (&provider.kind, &provider.settings) {
        (ProviderKind::SimCloud | ProviderKind::SimOnprem, _) => ProviderExecutor {
            executor: Arc::new(SimExecutor::new(provider.kind)),
            call_timeout: action_timeout,
            inventory_interval: None,
            garp_refresh: None,
        },
        (ProviderKind::Exec, ProviderSettings::Exec { command, timeout_ms }) => {
            let timeout = Duration::from_millis(*timeout_ms);
            let mut hook = ExecHook::new(command.clone(), timeout).owned_by(owner);
            if let Some(groups) = groups {
                hook = hook.recorded_in(groups.clone());
            }
            ProviderExecutor {
                executor: Arc::new(hook),
                call_timeout: timeout + HOOK_DEADLINE_GRACE,
                inventory_interval: None,
                garp_refresh: None,
            }
        }
        #[cfg(all(target_os = "linux", feature = "onprem"))]
        (ProviderKind::Onprem, ProviderSettings::Onprem { interface, garp_count, garp_interval_ms }) => {
            ProviderExecutor {
                executor: Arc::new(crate::exec::onprem::OnpremExecutor::new(
                    interface,
                    *garp_count,
                    Duration::from_millis(*garp_interval_ms),
                )),
                call_timeout: action_timeout,
                inventory_interval: None,
                garp_refresh: None,
            }
        }
        #[cfg(feature = "aws")]
        (ProviderKind::Aws, ProviderSettings::Aws { region, endpoint_url }) => ProviderExecutor {
            executor: Arc::new(crate::exec::aws::AwsExecutor::new(region, endpoint_url.as_deref())),
            call_timeout: action_timeout,
            inventory_interval: None,
            garp_refresh: None,
        },
        #[cfg(not(feature = "aws"))]
        (ProviderKind::Aws, _) => {
            return Err(format!(
                "provider `{}`: this build has no aws executor; rebuild with --features aws",
                provider.name
            ));
        }
        #[cfg(not(all(target_os = "linux", feature = "onprem")))]
        (ProviderKind::Onprem, _) => {
            return Err(format!(
                "provider `{}`: this build has no onprem executor; rebuild with --features onprem (Linux)",
                provider.name
            ));
        }
        (kind, _) => {
            return Err(format!(
                "provider `{}`: kind {} has no executor in this version (see README.md, Status); \
                 use exec to drive it with your own command",
                provider.name,
                kind.as_str()
            ));
        }
    };
    executor.inventory_interval = provider.inventory_interval_ms.map(Duration::from_millis);
    executor.garp_refresh = provider.garp_refresh_ms.map(Duration::from_millis);
    Ok(executor)
}
