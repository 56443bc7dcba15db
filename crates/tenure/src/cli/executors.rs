//! The executors of an agent config's providers, each made by its kind's `build()` through the
//! registry (`exec/registry.rs`). A kind this build lacks (`aws`, `onprem` without their cargo
//! features; `oci`, `azure` in every build) is a one-line refusal here, which the start checks
//! (`preflight.rs`) turn into exit 3 for both `tenure agent` and `tenure validate`.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::agent::ProviderExecutor;
use crate::config::{AgentConfig, ProviderConfig};
use crate::exec::hook_groups::HookGroups;
use crate::exec::registry::BuildContext;

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
    let context = BuildContext { action_timeout, owner, groups };
    let executor =
        provider.settings.build(&context).map_err(|not_built| format!("provider `{}`: {not_built}", provider.name))?;
    Ok(ProviderExecutor {
        executor,
        call_timeout: provider.settings.call_timeout(action_timeout),
        inventory_interval: provider.inventory_interval_ms.map(Duration::from_millis),
        garp_refresh: provider.garp_refresh_ms.map(Duration::from_millis),
    })
}
