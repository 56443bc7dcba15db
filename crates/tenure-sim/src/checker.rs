//! The invariant checker used by `replay` (and the simulator). It re-derives each rule from the
//! log head on its own instead of calling the fence, so that a bug in the fence shows up here.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::sim_provider::SimProvider;
use tenure_core::federation::Federation;
use tenure_core::model::{CaptureDomain, CaptureEpoch, OwnershipEpoch, ProviderKind, StampedAction};

/// Most violations recorded before the checker stops recording (it still counts).
pub const VIOLATIONS_MAX: usize = 1_000;

/// Collects broken invariants.
#[derive(Clone, Debug, Default)]
pub struct Checker {
    violations: Vec<String>,
    violations_total: u64,
    capture_seen: BTreeMap<(String, IpAddr, CaptureDomain), CaptureEpoch>,
    ownership_seen: BTreeMap<(String, IpAddr), OwnershipEpoch>,
}

impl Checker {
    /// A checker that has seen nothing.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn violation(&mut self, text: String) {
        self.violations_total += 1;
        if self.violations.len() < VIOLATIONS_MAX {
            self.violations.push(text);
        }
    }

    /// Every violation recorded, in the order seen.
    #[must_use]
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// How many violations were seen, recorded or not.
    #[must_use]
    pub fn violations_total(&self) -> u64 {
        self.violations_total
    }

    /// Called right before an action reaches a provider: was it current at the head?
    pub fn before_provider_call(&mut self, node: &str, action: &StampedAction, head: &Federation) {
        if let Some(why) = staleness(action, head) {
            self.violation(format!("stale action executed by {node}: {} ({why})", action.idempotency_key));
        }
    }

    /// Called after a provider call: single assignment on cloud providers.
    pub fn after_provider_call(&mut self, provider_name: &str, provider: &SimProvider, address: IpAddr) {
        if provider.kind() != ProviderKind::SimCloud {
            return;
        }
        if let Some(nics) = provider.holdings().get(&address)
            && nics.len() > 1
        {
            let list: Vec<&str> = nics.iter().map(String::as_str).collect();
            self.violation(format!(
                "address {address} is on {} NICs of {provider_name}: {}",
                nics.len(),
                list.join(",")
            ));
        }
    }

    /// Called after every applied event: no token of any key went down.
    pub fn after_event(&mut self, head: &Federation) {
        let mut went_down = Vec::new();
        for (pool_name, pool) in head.pools() {
            for (address, state) in &pool.addresses {
                let key = (pool_name.clone(), *address);
                let seen = self.ownership_seen.entry(key).or_default();
                if state.ownership_epoch < *seen {
                    went_down.push(format!(
                        "ownershipEpoch of {pool_name}/{address} went from {seen} to {}",
                        state.ownership_epoch
                    ));
                }
                *seen = (*seen).max(state.ownership_epoch);
                let lines = std::iter::once((&pool.capture_domain, &state.line))
                    .chain(state.retired_lines.iter().map(|(d, l)| (d, l)));
                for (domain, line) in lines {
                    let key = (pool_name.clone(), *address, domain.clone());
                    let seen = self.capture_seen.entry(key).or_default();
                    if line.epoch < *seen {
                        went_down.push(format!(
                            "captureEpoch of {pool_name}/{address} on {domain} went from {seen} to {}",
                            line.epoch
                        ));
                    }
                    *seen = (*seen).max(line.epoch);
                }
            }
        }
        for text in went_down {
            self.violation(text);
        }
    }
}

/// Why an action is stale at `head`, re-derived from the head without the fence module (so that
/// a bug in the fence shows up here); `None` when it is current. Every broken rule is named.
#[must_use]
pub fn staleness(action: &StampedAction, head: &Federation) -> Option<String> {
    let capture = head.capture_epoch(&action.pool, action.address, &action.capture_domain);
    let ownership = head.ownership_epoch(&action.pool, action.address);
    let holder = head.desired_holder(&action.pool, action.address, &action.capture_domain);
    let mut wrong = Vec::new();
    if action.capture_epoch != capture {
        wrong.push(format!("captureEpoch {} but head has {capture}", action.capture_epoch));
    }
    if head.epoch_locking(&action.pool) && action.ownership_epoch != ownership {
        wrong.push(format!("ownershipEpoch {} but head has {ownership}", action.ownership_epoch));
    }
    if action.verb.is_acquire() != (holder == Some(action.holder.as_str())) {
        wrong.push(format!("holder {} but desired holder is {}", action.holder, holder.unwrap_or("none")));
    }
    if !action.verb.is_acquire() {
        // SPEC 13: a NIC holds an address, not a pool's copy of it. Re-derived by walking every
        // applied pool of the provider, not through the federation's own lookup.
        let elsewhere = head.pools().iter().find(|(name, pool)| {
            **name != action.pool
                && !pool.deleted
                && pool.spec.provider == action.provider
                && pool.addresses.get(&action.address).is_some_and(|a| {
                    a.line.desired_holder.is_some_and(|id| head.node_name(id) == action.holder)
                })
        });
        if let Some((name, _)) = elsewhere {
            wrong.push(format!("release by {} who is the desired holder through pool {name}", action.holder));
        }
    }
    (!wrong.is_empty()).then(|| wrong.join("; "))
}
