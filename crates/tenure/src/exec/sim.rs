//! The provider kinds `sim-cloud` and `sim-onprem`: [`SimExecutor`], the simulated providers
//! ([`tenure_core::sim_provider::SimProvider`]) as an [`Executor`], so that an agent can run them
//! for real, behind the same interface and the same gate as the real providers; and their
//! settings ([`SimCloudSettings`], [`SimOnpremSettings`]), registered in [`super::registry`].
//! Built in every build. Their inventory is read only when `inventoryInterval` asks.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::Deserialize;
use serde_saphyr::Spanned;
use tenure_core::model::{ProviderKind, StampedAction};
use tenure_core::sim_provider::SimProvider;
use tokio::time::Instant;

use super::registry::{BuildContext, NotBuilt, Provider, ProviderSettings, Runtime};
use super::{
    ExecuteFuture, ExecutionOutcome, Executor, InventoryFuture, InventoryRequest, WithdrawFuture,
    WithdrawRequest,
};
use crate::config::SettingsCheck;

/// `kind: sim-cloud` settings: none but `inventoryInterval` (read only when asked).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimCloudSettings {}

/// `kind: sim-cloud` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SimCloudRaw {
    inventory_interval: Option<Spanned<String>>,
}

impl Provider for SimCloudSettings {
    const KIND: ProviderKind = ProviderKind::SimCloud;
    type Raw = SimCloudRaw;

    fn check(raw: SimCloudRaw, check: &mut SettingsCheck<'_>) -> Self {
        check.inventory_interval(raw.inventory_interval.as_ref(), 0);
        Self {}
    }
}

impl From<SimCloudSettings> for ProviderSettings {
    fn from(settings: SimCloudSettings) -> Self {
        Self::SimCloud(settings)
    }
}

impl Runtime for SimCloudSettings {
    fn kind(&self) -> ProviderKind {
        Self::KIND
    }

    /// A fresh in-memory provider of its own (the agent's nodes on it share it).
    fn build(&self, _: &BuildContext<'_>) -> Result<Arc<dyn Executor>, NotBuilt> {
        Ok(Arc::new(SimExecutor::new(Self::KIND)))
    }
}

/// `kind: sim-onprem` settings: none but `inventoryInterval` (read only when asked) and
/// `garpRefresh`, as `onprem`'s.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimOnpremSettings {}

/// `kind: sim-onprem` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SimOnpremRaw {
    inventory_interval: Option<Spanned<String>>,
    garp_refresh: Option<Spanned<String>>,
}

impl Provider for SimOnpremSettings {
    const KIND: ProviderKind = ProviderKind::SimOnprem;
    type Raw = SimOnpremRaw;

    fn check(raw: SimOnpremRaw, check: &mut SettingsCheck<'_>) -> Self {
        check.inventory_interval(raw.inventory_interval.as_ref(), 0);
        check.garp_refresh(raw.garp_refresh.as_ref());
        Self {}
    }
}

impl From<SimOnpremSettings> for ProviderSettings {
    fn from(settings: SimOnpremSettings) -> Self {
        Self::SimOnprem(settings)
    }
}

impl Runtime for SimOnpremSettings {
    fn kind(&self) -> ProviderKind {
        Self::KIND
    }

    fn build(&self, _: &BuildContext<'_>) -> Result<Arc<dyn Executor>, NotBuilt> {
        Ok(Arc::new(SimExecutor::new(Self::KIND)))
    }
}

/// A simulated provider behind a shared, lock-protected handle: clones share one provider, as the
/// nodes of a fleet share one cloud. The lock is held only for the in-memory call, never across
/// an `.await`, so a plain [`std::sync::Mutex`] fits.
#[derive(Clone, Debug)]
pub struct SimExecutor {
    provider: Arc<Mutex<SimProvider>>,
}

impl SimExecutor {
    /// An empty simulated provider of `kind`.
    ///
    /// # Panics
    ///
    /// When `kind` is not `SimCloud` or `SimOnprem` (as [`SimProvider::new`]).
    #[must_use]
    pub fn new(kind: ProviderKind) -> Self {
        Self::from_provider(SimProvider::new(kind))
    }

    /// Shares an existing simulated provider (for instance one with holdings already set up).
    #[must_use]
    pub fn from_provider(provider: SimProvider) -> Self {
        Self { provider: Arc::new(Mutex::new(provider)) }
    }

    /// Runs `inspect` on the provider under its lock: to read its holdings, or to change them
    /// behind tenure's back ([`SimProvider::inject_loss`], drift). Keep it short: every call
    /// through this handle waits for it.
    pub fn with_provider<R>(&self, inspect: impl FnOnce(&mut SimProvider) -> R) -> R {
        inspect(&mut self.lock())
    }

    /// The provider's lock. A panic under the lock cannot leave a provider half-changed in a way
    /// that matters here (each call is one map update), so a poisoned lock is taken over rather
    /// than turned into a second panic.
    fn lock(&self) -> MutexGuard<'_, SimProvider> {
        self.provider.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Executor for SimExecutor {
    /// Calls [`SimProvider::execute`] when first polled. The in-memory call cannot outlast any
    /// deadline, so `deadline` is left to [`super::execute_within`].
    fn execute<'a>(&'a self, action: &'a StampedAction, _deadline: Instant) -> ExecuteFuture<'a> {
        Box::pin(async move {
            match self.lock().execute(action) {
                Ok(detail) => ExecutionOutcome::Executed { detail },
                Err(refused) => ExecutionOutcome::Failed { reason: refused.to_string() },
            }
        })
    }

    /// The simulated provider's holdings of the asked addresses: it sees every NIC.
    fn inventory<'a>(&'a self, request: &'a InventoryRequest) -> Option<InventoryFuture<'a>> {
        Some(Box::pin(async move {
            let provider = self.lock();
            Ok(request
                .addresses
                .iter()
                .map(|address| {
                    let holders = provider.holdings().get(address).map(|nics| nics.iter().cloned().collect());
                    (*address, holders.unwrap_or_default())
                })
                .collect())
        }))
    }

    /// `sim-onprem` only: removes the asked addresses from the asked NICs.
    fn withdraw<'a>(&'a self, request: &'a WithdrawRequest) -> Option<WithdrawFuture<'a>> {
        if self.lock().kind() != ProviderKind::SimOnprem {
            return None;
        }
        Some(Box::pin(async move {
            let mut provider = self.lock();
            let removed = request
                .addresses
                .iter()
                .filter(|address| {
                    let mut any = false;
                    for nic in &request.nics {
                        any |= provider.inject_loss(**address, nic);
                    }
                    any
                })
                .copied()
                .collect();
            Ok(removed)
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tenure_core::model::Verb;

    use super::super::execute_within;
    use super::super::tests::action;
    use super::*;

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[tokio::test]
    async fn sim_cloud_executes_and_moves_the_address_between_nics() {
        let cloud = SimExecutor::new(ProviderKind::SimCloud);
        let first = execute_within(&cloud, &action(Verb::AssignSecondaryIp, "eni-a"), soon()).await;
        assert_eq!(first, ExecutionOutcome::Executed { detail: "assigned to eni-a".to_owned() });
        let moved = execute_within(&cloud, &action(Verb::AssignSecondaryIp, "eni-b"), soon()).await;
        assert_eq!(moved, ExecutionOutcome::Executed { detail: "reassigned from eni-a to eni-b".to_owned() });
        let holders = cloud.with_provider(|p| p.holdings().values().flatten().cloned().collect::<Vec<_>>());
        assert_eq!(holders, vec!["eni-b".to_owned()]);
    }

    #[tokio::test]
    async fn sim_onprem_executes_its_own_verbs() {
        let onprem = SimExecutor::new(ProviderKind::SimOnprem);
        let added = execute_within(&onprem, &action(Verb::ProxyArpAdd, "eth0"), soon()).await;
        assert_eq!(added, ExecutionOutcome::Executed { detail: "proxy neighbour on eth0".to_owned() });
        let removed = execute_within(&onprem, &action(Verb::ProxyArpDel, "eth0"), soon()).await;
        assert_eq!(
            removed,
            ExecutionOutcome::Executed { detail: "proxy neighbour removed from eth0".to_owned() }
        );
        assert!(onprem.with_provider(|p| p.holdings().is_empty()));
    }

    #[tokio::test]
    async fn a_verb_of_the_other_family_fails_with_the_providers_reason() {
        let cloud = SimExecutor::new(ProviderKind::SimCloud);
        let outcome = execute_within(&cloud, &action(Verb::ProxyArpAdd, "eni-a"), soon()).await;
        assert_eq!(
            outcome,
            ExecutionOutcome::Failed { reason: "sim-cloud does not support `proxy-arp-add`".to_owned() }
        );
        assert!(cloud.with_provider(|p| p.holdings().is_empty()), "a failed call changed nothing");
    }

    #[tokio::test]
    async fn clones_share_one_provider() {
        let cloud = SimExecutor::new(ProviderKind::SimCloud);
        let other_node = cloud.clone();
        let outcome = execute_within(&other_node, &action(Verb::AssignSecondaryIp, "eni-c"), soon()).await;
        assert!(matches!(outcome, ExecutionOutcome::Executed { .. }), "{outcome:?}");
        assert!(cloud.with_provider(|p| p.inject_loss("10.0.0.10".parse().expect("literal"), "eni-c")));
        assert!(other_node.with_provider(|p| p.holdings().is_empty()), "the loss is seen through the clone");
    }

    #[tokio::test]
    async fn nothing_happens_until_the_future_is_polled() {
        let cloud = SimExecutor::new(ProviderKind::SimCloud);
        let assign = action(Verb::AssignSecondaryIp, "eni-a");
        let call = cloud.execute(&assign, soon());
        assert!(cloud.with_provider(|p| p.holdings().is_empty()), "not polled yet");
        drop(call);
        assert!(cloud.with_provider(|p| p.holdings().is_empty()), "dropped unpolled: never called");
    }
}
