//! Announcements repeated for the addresses this agent holds (issue 25), the loop's half: *when*.
//!
//! - Every `garpRefresh` of an on-prem provider (off by default), the announcement of every
//!   address this agent's nodes hold on it.
//! - Once when keepalived says MASTER again after saying anything else (`runner/vrrp.rs` sets
//!   [`RefreshSchedule::burst`]), the announcement of every held address of the pools under
//!   `authority: vrrp`: during a split the switches may have learned another router's MAC, and
//!   when nothing changed in the log no new acquire (and so no new `garp`) is planned.
//!
//! *What* may be announced is the core's rule (`tenure_core::node::NodeEngine::poll_refreshes`):
//! an address the node holds, the stamp's own announcement executed, no call of it in flight,
//! and the fence rule passed against the head, confirmed right before (a node that cannot
//! confirm the head announces nothing). Each refresh is a call like any other: bounded by the
//! provider's call timeout from that confirmation, guarded by keepalived's authority for pools
//! under `authority: vrrp` (refused while not MASTER, cancelled by a demotion), cancelled when
//! the view fences it. It is not journaled and appends nothing to the log.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::super::authority::NOT_MASTER;
use super::super::{AgentStore, ProviderExecutor};
use super::{Agent, CALLS_IN_FLIGHT_MAX};
use crate::exec::ExecutionOutcome;

/// When the announcements of held addresses are repeated.
#[derive(Debug, Default)]
pub(super) struct RefreshSchedule {
    /// Provider → (its `garpRefresh`, the next refresh).
    due: BTreeMap<String, (Duration, Instant)>,
    /// keepalived said MASTER again after saying anything else: one burst is due at the next
    /// step.
    pub(super) burst: bool,
}

impl RefreshSchedule {
    /// The providers of `executors` with a `garpRefresh`, each first due one interval after `now`
    /// (an acquire announces by itself).
    pub(super) fn of(executors: &BTreeMap<String, ProviderExecutor>, now: Instant) -> Self {
        let due = executors
            .iter()
            .filter_map(|(provider, executor)| {
                let interval = executor.garp_refresh?;
                Some((provider.clone(), (interval, now + interval)))
            })
            .collect();
        Self { due, burst: false }
    }

    /// The next refresh, if any provider has one.
    pub(super) fn next(&self) -> Option<Instant> {
        self.due.values().map(|(_, at)| *at).min()
    }
}

impl<S: AgentStore> Agent<S> {
    /// The refresh timer fired: the providers whose time came are refreshed (and due again one
    /// interval from now, whether or not this round could run).
    pub(super) async fn refresh_due(&mut self) {
        let now = Instant::now();
        let mut providers = BTreeSet::new();
        for (provider, (interval, at)) in &mut self.refresh.due {
            if *at <= now {
                *at = now + *interval;
                providers.insert(provider.clone());
            }
        }
        if providers.is_empty() {
            return;
        }
        let started = self.start_refreshes(|provider, _| providers.contains(provider)).await;
        debug!(providers = ?providers, started, "garpRefresh: announcements of the held addresses");
    }

    /// At the end of a step: the burst keepalived's MASTER-again asked for, once.
    pub(super) async fn burst_if_due(&mut self) {
        if !std::mem::take(&mut self.refresh.burst) {
            return;
        }
        let wanted = self.vrrp_addresses();
        let started = self
            .start_refreshes(|provider, address| wanted.get(provider).is_some_and(|a| a.contains(&address)))
            .await;
        if started > 0 {
            info!(
                addresses = started,
                "keepalived says MASTER again: announcing the addresses this host still holds"
            );
        }
    }

    /// Starts the refreshes `wanted` accepts, on every node, after confirming the log head.
    /// Returns how many started (none while the agent may not act).
    async fn start_refreshes(&mut self, wanted: impl Fn(&str, IpAddr) -> bool + Send) -> usize {
        if self.shutting_down || self.core.failed().is_some() {
            return 0;
        }
        let Some(proof) = self.confirm_head(true).await else { return 0 };
        let mut started = 0;
        for index in 0..self.core.drivers().len() {
            let room = CALLS_IN_FLIGHT_MAX.saturating_sub(self.calls.len());
            if room == 0 {
                // The rest waits for the next round: refreshes never crowd out planned calls.
                break;
            }
            let batch = self.core.poll_refreshes(&proof, index, &wanted, room);
            started += batch.len();
            for action in batch {
                self.spawn_call(index, action, true);
            }
        }
        started
    }

    /// A refresh's call ended: the engine frees its address; nothing is journaled or appended.
    pub(super) fn refresh_ended(
        &mut self,
        node: usize,
        provider: &str,
        address: IpAddr,
        outcome: &ExecutionOutcome,
    ) {
        let name = self.core.drivers()[node].name().to_owned();
        if !self.core.drivers_mut()[node].handle_refresh_result(provider, address) {
            warn!(node = %name, %provider, %address, "result of a refresh no longer in flight: ignored");
        }
        let label = match outcome {
            ExecutionOutcome::Executed { detail } => {
                debug!(node = %name, %provider, %address, %detail, "refreshed");
                "executed"
            }
            // keepalived took mastership away between the check and the call: expected.
            ExecutionOutcome::Failed { reason } if reason == NOT_MASTER => {
                debug!(node = %name, %provider, %address, %reason, "refresh refused");
                "refused"
            }
            ExecutionOutcome::Failed { reason } | ExecutionOutcome::Unknown { reason } => {
                warn!(node = %name, %provider, %address, %reason, "refresh failed; the next one is due at its time");
                "failed"
            }
        };
        *self.counters.garp_refreshes.entry((provider.to_owned(), label)).or_insert(0) += 1;
    }
}
