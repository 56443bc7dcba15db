//! The local withdrawal in the loop (SPEC 7, `onprem` under `authority: vrrp`; the mechanism is
//! in [`crate::agent::authority`]): the loop starts the withdrawal task, tells it which
//! addresses are under VRRP authority, guards the calls of those pools, journals each removal as
//! an executed release (reported to the log when it can be appended), and asks for another round
//! while a capture of such an address is still recorded on a demoted host.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use tenure_core::agent::WITHDRAWN;
use tenure_core::model::{Authority, StampedAction, VerbFamily};
use tokio::sync::{mpsc, watch};
use tracing::{error, warn};

use super::super::AgentStore;
use super::super::authority::{
    LocalAuthority, VrrpAddresses, WithdrawTarget, Withdrawal, withdraw_on_demotion,
};
use super::Agent;

/// Most withdrawal reports waiting for the loop.
const WITHDRAWALS_QUEUED_MAX: usize = 16;

/// The loop's side of the local withdrawal.
pub(super) struct Local {
    /// The flag the follower sets.
    pub(super) authority: Arc<LocalAuthority>,
    /// What the withdrawal task removed.
    pub(super) withdrawals: mpsc::Receiver<Withdrawal>,
    /// The addresses under VRRP authority, by provider, as the task sees them.
    addresses: watch::Sender<VrrpAddresses>,
    /// The providers the task withdraws from (on-prem, with a node of this agent).
    providers: BTreeSet<String>,
}

impl<S: AgentStore> Agent<S> {
    /// Starts the withdrawal task over this agent's on-prem providers.
    pub(super) fn start_withdrawals(&self, authority: Arc<LocalAuthority>) -> Local {
        let view = self.view();
        let targets: Vec<WithdrawTarget> = self
            .executors
            .iter()
            .filter(|(provider, _)| {
                view.provider_kind(provider).is_some_and(|k| k.verb_family() == VerbFamily::Onprem)
            })
            .filter_map(|(provider, executor)| {
                let nics: Vec<String> = view
                    .nodes()
                    .iter()
                    .filter(|n| n.spec.provider == *provider && self.own_nodes.contains(&n.spec.name))
                    .map(|n| n.spec.nic.clone())
                    .collect();
                (!nics.is_empty()).then(|| WithdrawTarget {
                    provider: provider.clone(),
                    executor: Arc::clone(&executor.executor),
                    nics,
                })
            })
            .collect();
        let providers = targets.iter().map(|t| t.provider.clone()).collect();
        let (done, withdrawals) = mpsc::channel(WITHDRAWALS_QUEUED_MAX);
        let addresses = watch::Sender::new(self.vrrp_addresses());
        tokio::spawn(withdraw_on_demotion(Arc::clone(&authority), targets, addresses.subscribe(), done));
        Local { authority, withdrawals, addresses, providers }
    }

    /// The addresses of every pool under `authority: vrrp` the log has applied (deleted ones
    /// too: an entry of a deleted pool still answers), by provider.
    pub(super) fn vrrp_addresses(&self) -> VrrpAddresses {
        let mut wanted: BTreeMap<String, BTreeSet<IpAddr>> = BTreeMap::new();
        for pool in self.view().pools().values().filter(|p| p.spec.authority == Authority::Vrrp) {
            wanted.entry(pool.spec.provider.clone()).or_default().extend(pool.addresses.keys().copied());
        }
        Arc::new(wanted)
    }

    /// The authority a call of `action` runs under: keepalived's, for a `proxy-arp-add` or
    /// `garp` of a pool under `authority: vrrp` ([`LocalAuthority::guard`]); none otherwise.
    pub(super) fn guarding(&self, action: &StampedAction) -> Option<Arc<LocalAuthority>> {
        let local = self.local.as_ref()?;
        let vrrp =
            self.view().pools().get(&*action.pool).is_some_and(|p| p.spec.authority == Authority::Vrrp);
        (vrrp && action.verb.needs_vrrp_master()).then(|| Arc::clone(&local.authority))
    }

    /// At the start of each step (whatever the log does) and before its calls: tells the task
    /// the addresses under VRRP authority when they changed,
    /// and, on a demoted host, asks for another round while some node still records a capture
    /// of one of them with no call in flight for it (an add that was in flight during the last
    /// round and landed).
    pub(super) fn withdraw_if_due(&mut self) {
        let Some(local) = &self.local else { return };
        let wanted = self.vrrp_addresses();
        local.addresses.send_if_modified(|published| {
            let changed = **published != *wanted;
            if changed {
                *published = Arc::clone(&wanted);
            }
            changed
        });
        if !local.authority.is_demoted() {
            return;
        }
        let due = self.core.captured_without_call(|provider, address| {
            local.providers.contains(provider) && wanted.get(provider).is_some_and(|a| a.contains(&address))
        });
        if due {
            local.authority.withdraw_again();
        }
    }

    /// A withdrawal the task made: every node's capture of a withdrawn address becomes an
    /// executed release in its journal (synced), reported to the log with the next append.
    /// Returns whether anything was recorded.
    pub(super) fn withdrawn(&mut self, done: Withdrawal) -> bool {
        if done.removed.is_err() {
            return false;
        }
        // keepalived said MASTER again since: an add that waited for the withdrawal may have
        // run after it, and its capture must not be recorded as released. What the removal did
        // take away is found by the next inventory read (drift repair: the desired holder lost
        // the address), never by this report.
        if self.local.as_ref().is_some_and(|l| !l.authority.is_demoted()) {
            return false;
        }
        let asked: BTreeSet<IpAddr> = done.addresses.iter().copied().collect();
        let failed_before = self.core.failed().is_some();
        let recorded = self.core.record_withdrawal(&done.provider, &asked);
        if !failed_before && let Some(reason) = self.core.failed() {
            error!(reason, "not acting");
        }
        if recorded > 0 {
            warn!(provider = %done.provider, releases = recorded, "{WITHDRAWN}: journaled as executed releases");
        }
        recorded > 0
    }
}
