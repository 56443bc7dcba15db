//! The executors of an agent config's providers, each made by its kind's `build()` through the
//! registry (`exec/registry.rs`). A kind this build lacks (`aws`, `azure`, `oci`, `onprem` without
//! their cargo features) is a one-line refusal here, which the start checks
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
    let executor = provider
        .settings
        .build(&context)
        .map_err(|not_built| format!("provider `{}`: {not_built}", provider.name))?;
    Ok(ProviderExecutor {
        executor,
        call_timeout: provider.settings.call_timeout(action_timeout),
        inventory_interval: provider.inventory_interval_ms.map(Duration::from_millis),
        garp_refresh: provider.garp_refresh_ms.map(Duration::from_millis),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::parse_config;
    use crate::exec::WithdrawRequest;

    #[test]
    fn each_provider_gets_its_kinds_executor_deadline_and_intervals() {
        let text = "node: {name: a, provider: sim, placementGroup: g1, nic: eth0}\nstore: {path: ./d}\n\
                    providers:\n  - {name: hook, kind: exec, command: [true], timeout: 1500ms}\n  \
                    - {name: sim, kind: sim-onprem, inventoryInterval: 2s, garpRefresh: 3s}\n  \
                    - {name: cloud, kind: sim-cloud}\nactionTimeout: 3s\n";
        let config = parse_config(text, Path::new("agent.yaml")).expect("valid");
        let executors = executors(&config, "", None).expect("every kind here is built");
        let millis = Duration::from_millis;
        let hook = &executors["hook"];
        assert_eq!(hook.call_timeout, millis(2_500), "the hook's own timeout, and a grace to name itself");
        assert_eq!((hook.inventory_interval, hook.garp_refresh), (None, None));
        let sim = &executors["sim"];
        assert_eq!(sim.call_timeout, millis(3_000), "actionTimeout");
        assert_eq!((sim.inventory_interval, sim.garp_refresh), (Some(millis(2_000)), Some(millis(3_000))));
        let withdraw = WithdrawRequest { addresses: Vec::new(), nics: vec!["eth0".into()] };
        assert!(sim.executor.withdraw(&withdraw).is_some(), "a sim-onprem executor withdraws locally");
        assert!(executors["cloud"].executor.withdraw(&withdraw).is_none(), "a sim-cloud one does not");
    }

    /// A build without the cargo feature `azure` refuses an azure provider naming the feature.
    #[cfg(not(feature = "azure"))]
    #[test]
    fn an_azure_provider_in_a_build_without_the_feature_is_refused_naming_it() {
        let text = "node: {name: a, provider: o, placementGroup: g1, nic: '/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/a'}\n\
                    store: {path: ./d}\nproviders: [{name: o, kind: azure, subscriptionId: 00000000-0000-0000-0000-000000000001}]\n";
        let config = parse_config(text, Path::new("agent.yaml")).expect("a valid azure config parses");
        assert_eq!(
            executors(&config, "", None).expect_err("no executor"),
            "provider `o`: this build has no azure executor; rebuild with --features azure"
        );
    }
}
