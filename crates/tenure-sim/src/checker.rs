//! The one invariant checker, used by `replay` and by the simulator (after every event, every
//! catch-up of a node's view and every provider call). It re-derives each rule from the log head
//! on its own instead of calling the fence, so that a bug in the fence shows up here.
//!
//! Every violation is counted by kind, and a run is judged on the counts; only the first few of
//! each kind are kept, for display, so that one noisy kind never hides another.

use std::collections::BTreeMap;
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::IpAddr;

use serde::Serialize;
use tenure_core::federation::Federation;
use tenure_core::model::{CaptureDomain, ProviderKind, StampedAction};

use crate::config::Mode;
use tenure_core::sim_provider::SimProvider;

mod tokens;

pub use tokens::TokenWatch;

/// One broken invariant's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ViolationKind {
    /// An action reached a provider while it was stale at the log head (SPEC 6 rule).
    StaleExecution,
    /// A call reached a provider after its own node's view had fenced it: the node followed past
    /// the fence and let the call go on (SPEC 9: a call whose action the view fences is
    /// cancelled; only a call given up in doubt at its deadline may still act late).
    StaleCallLanded,
    /// A node executed below an epoch it had executed before (its high-water mark was lost).
    BelowHighWater,
    /// A provider call came from a node cut off from the log head.
    PartitionedExecution,
    /// A token of some key went down on the head or on a node's view.
    TokenDecrease,
    /// A node's view differs from the head's state at the same log prefix.
    DivergentMaps,
    /// A cloud address was on two NICs.
    DoubleAssignment,
    /// A node owned more addresses than its capacity.
    CapacityExceeded,
    /// Two running hosts answered ARP for one on-prem address beyond the steps that hand it
    /// over: a connected host reconciled at the head and kept its entry for an address it is not
    /// the desired holder of, with no release planned, while another host answered it (the
    /// deprovision hold applied on-prem would do this); or (with VRRP authority) a running host
    /// that is not the VRRP master answered beside another host.
    OnpremSplitAnswer,
    /// Two hosts answered ARP for one on-prem address because a frozen host could not withdraw
    /// its entry: the limit of SPEC 9 (no provider-side single assignment, no STONITH).
    OnpremZombieAnswer,
    /// Without VRRP authority, a running host cut off from the log kept answering beside
    /// another: it cannot read the head, so it neither acts nor releases (fail-closed), and
    /// nothing on the LAN removes its entry — the limit of `authority: none` on-prem (SPEC 9).
    OnpremCutOffAnswer,
    /// With faults stopped, the fleet did not converge within the bound.
    NoConvergence,
    /// An operator's approval of an action waiting for it in its node's journal, current by the
    /// fence rule in the view of the agent that runs the node, was refused by that agent's check
    /// (`AgentCore::check_submit`, what `tenure approve` passes).
    ApprovalRefused,
}

impl ViolationKind {
    /// Every kind, in a fixed order.
    pub const ALL: [Self; 13] = [
        Self::StaleExecution,
        Self::StaleCallLanded,
        Self::BelowHighWater,
        Self::PartitionedExecution,
        Self::TokenDecrease,
        Self::DivergentMaps,
        Self::DoubleAssignment,
        Self::CapacityExceeded,
        Self::OnpremSplitAnswer,
        Self::OnpremZombieAnswer,
        Self::OnpremCutOffAnswer,
        Self::NoConvergence,
        Self::ApprovalRefused,
    ];

    /// The kebab-case name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::StaleExecution => "stale-execution",
            Self::StaleCallLanded => "stale-call-landed",
            Self::BelowHighWater => "below-high-water",
            Self::PartitionedExecution => "partitioned-execution",
            Self::TokenDecrease => "token-decrease",
            Self::DivergentMaps => "divergent-maps",
            Self::DoubleAssignment => "double-assignment",
            Self::CapacityExceeded => "capacity-exceeded",
            Self::OnpremSplitAnswer => "onprem-split-answer",
            Self::OnpremZombieAnswer => "onprem-zombie-answer",
            Self::OnpremCutOffAnswer => "onprem-cut-off-answer",
            Self::NoConvergence => "no-convergence",
            Self::ApprovalRefused => "approval-refused",
        }
    }

    /// Whether `mode` predicts this violation (a documented limit, SPEC 9).
    ///
    /// A frozen on-prem host cannot withdraw its proxy entry, and without STONITH nothing else
    /// can: with or without VRRP authority, its answer beside the new holder's is the limit.
    /// Without authority, a running host cut off from the log answering beside another is the
    /// limit too. Two running, connected hosts answering past the hand-over is never predicted.
    #[must_use]
    pub fn predicted_in(self, mode: Mode) -> bool {
        match mode {
            Mode::Cloud => false,
            Mode::Onprem => self == Self::OnpremZombieAnswer,
            Mode::OnpremNoAuthority => matches!(self, Self::OnpremCutOffAnswer | Self::OnpremZombieAnswer),
            Mode::PausedCall => matches!(self, Self::StaleExecution | Self::PartitionedExecution),
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for ViolationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One broken invariant, where it was seen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Simulator step (safety step, or liveness round after them) at which it was seen; 0 in
    /// `replay`.
    pub step: u64,
    /// Its kind.
    pub kind: ViolationKind,
    /// What exactly.
    pub detail: String,
}

/// Every violation counted per kind, and the first `kept_per_kind_max` of each kind kept, in
/// the order seen.
#[derive(Clone, Debug)]
pub struct Violations {
    counts: [u64; ViolationKind::ALL.len()],
    kept: Vec<Violation>,
    kept_per_kind_max: u64,
}

impl Violations {
    /// No violation yet; keeps at most `kept_per_kind_max` of each kind.
    #[must_use]
    pub fn new(kept_per_kind_max: u64) -> Self {
        Self { counts: [0; ViolationKind::ALL.len()], kept: Vec::new(), kept_per_kind_max }
    }

    /// Counts one violation, and keeps it if fewer than the bound of its kind are kept.
    pub fn record(&mut self, step: u64, kind: ViolationKind, detail: String) {
        let count = &mut self.counts[kind.index()];
        *count += 1;
        if *count <= self.kept_per_kind_max {
            self.kept.push(Violation { step, kind, detail });
        }
    }

    /// How many violations of `kind` were seen.
    #[must_use]
    pub fn count(&self, kind: ViolationKind) -> u64 {
        self.counts[kind.index()]
    }

    /// How many violations were seen in all.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The kinds seen, each with its count.
    #[must_use]
    pub fn counts(&self) -> BTreeMap<ViolationKind, u64> {
        ViolationKind::ALL.into_iter().map(|k| (k, self.count(k))).filter(|(_, n)| *n > 0).collect()
    }

    /// The violations kept, in the order seen.
    #[must_use]
    pub fn kept(&self) -> &[Violation] {
        &self.kept
    }

    /// The violations kept, in the order seen.
    #[must_use]
    pub fn into_kept(self) -> Vec<Violation> {
        self.kept
    }
}

/// A host that answers ARP for an on-prem address (it has a proxy entry for it), as the
/// simulator sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answerer<'a> {
    /// The host's NIC.
    pub nic: &'a str,
    /// Frozen (paused): it cannot act, so it cannot withdraw its entry.
    pub frozen: bool,
    /// Its own keepalived says MASTER.
    pub vrrp_master: bool,
    /// Cut off from the log head: it cannot act, so it cannot release through the log.
    pub cut_off: bool,
}

/// Which violation, if any, these answering hosts of one address are, right after the answering
/// set changed. One host is none.
/// - With `vrrp_authority` a running host withdraws its entries the moment it stops being
///   master (locally, without the log), so two running hosts, or a running host that is not the
///   master beside another, are a split answer.
/// - Without it, two running hosts answer for the steps of a hand-over (the new holder's add
///   comes before the old holder's next reconcile plans its release): not judged here but at
///   that reconcile ([`Checker::after_onprem_reconcile`]); unless one of them is cut off from the
///   log and so cannot release at all (`onprem-cut-off-answer`, the limit of `authority: none`).
/// - Otherwise the split exists only because frozen hosts could not withdraw.
#[must_use]
pub fn split_answer(answerers: &[Answerer<'_>], vrrp_authority: bool) -> Option<ViolationKind> {
    if answerers.len() < 2 {
        return None;
    }
    let running: Vec<&Answerer<'_>> = answerers.iter().filter(|a| !a.frozen).collect();
    if vrrp_authority {
        let split = running.len() >= 2 || running.iter().any(|a| !a.vrrp_master);
        return Some(if split {
            ViolationKind::OnpremSplitAnswer
        } else {
            ViolationKind::OnpremZombieAnswer
        });
    }
    if running.len() < 2 {
        return Some(ViolationKind::OnpremZombieAnswer);
    }
    running.iter().any(|a| a.cut_off).then_some(ViolationKind::OnpremCutOffAnswer)
}

/// Collects broken invariants: what `replay` reports and what a simulated seed is judged on.
#[derive(Clone, Debug)]
pub struct Checker {
    violations: Violations,
    step: u64,
    head_tokens: TokenWatch,
    /// Per node: the tokens of its view in its current life (a restarted view starts afresh).
    view_tokens: BTreeMap<String, TokenWatch>,
    /// Per node, across restarts: the highest captureEpoch it executed per line.
    executed_epochs: BTreeMap<String, BTreeMap<(String, IpAddr, CaptureDomain), u64>>,
}

impl Checker {
    /// A checker that has seen nothing and keeps at most `kept_per_kind_max` violations of
    /// each kind (it counts them all).
    #[must_use]
    pub fn new(kept_per_kind_max: u64) -> Self {
        Self {
            violations: Violations::new(kept_per_kind_max),
            step: 0,
            head_tokens: TokenWatch::default(),
            view_tokens: BTreeMap::new(),
            executed_epochs: BTreeMap::new(),
        }
    }

    /// The step stamped on the violations seen from now on.
    pub fn set_step(&mut self, step: u64) {
        self.step = step;
    }

    /// Records a violation seen by the caller (one only a simulator can observe).
    pub fn record(&mut self, kind: ViolationKind, detail: String) {
        self.violations.record(self.step, kind, detail);
    }

    /// What was seen so far.
    #[must_use]
    pub fn violations(&self) -> &Violations {
        &self.violations
    }

    /// What was seen.
    #[must_use]
    pub fn into_violations(self) -> Violations {
        self.violations
    }

    /// Called after every event applied to the head: no token went down, no node owns more
    /// than its capacity.
    pub fn after_event(&mut self, head: &Federation) {
        for line in self.head_tokens.update(head) {
            self.record(ViolationKind::TokenDecrease, format!("head: {line}"));
        }
        if let Some(detail) = capacity_excess(head) {
            self.record(ViolationKind::CapacityExceeded, detail);
        }
    }

    /// Called after `node` caught its view up with the log: no token of the view went down.
    pub fn after_catch_up(&mut self, node: &str, view: &Federation) {
        let lines = match self.view_tokens.get_mut(node) {
            Some(watch) => watch.update(view),
            None => self.view_tokens.entry(node.to_owned()).or_default().update(view),
        };
        for line in lines {
            self.record(ViolationKind::TokenDecrease, format!("{node}: {line}"));
        }
    }

    /// The log went back (the simulator's `store-rollback`): the head is what the shorter log
    /// builds, its tokens below what the lost part had raised them to — the fault itself, not a
    /// node's doing. The head's watch starts from it; each node's view and executions are still
    /// held to what that node saw and did (a node that acted on the shorter log would show).
    pub fn after_log_reset(&mut self, head: &Federation) {
        self.head_tokens = TokenWatch::default();
        let _ = self.head_tokens.update(head);
    }

    /// The operator's recovery from a log that went back: a new log, every node on a new store;
    /// tokens start again from 1, and nothing fences the old epochs any more (docs/operations.md).
    /// Everything the checker remembers of tokens starts afresh.
    pub fn after_fleet_recovery(&mut self, head: &Federation) {
        self.after_log_reset(head);
        self.view_tokens.clear();
        self.executed_epochs.clear();
    }

    /// `node` restarted: its view starts from the empty registry again.
    pub fn after_restart(&mut self, node: &str) {
        self.view_tokens.remove(node);
    }

    /// Called right before an action of `node` reaches a provider: it is current at the head,
    /// the node can read the head (`cut_off` says it cannot), and it is not below an epoch the
    /// node executed before. Returns whether the action was stale.
    pub fn before_provider_call(
        &mut self,
        node: &str,
        action: &StampedAction,
        head: &Federation,
        cut_off: bool,
    ) -> bool {
        if cut_off {
            let detail = format!("{node} called {} while cut off from the head", action.idempotency_key());
            self.record(ViolationKind::PartitionedExecution, detail);
        }
        let stale = staleness(action, head);
        if let Some(why) = &stale {
            let detail = format!("stale action executed by {node}: {} ({why})", action.idempotency_key());
            self.record(ViolationKind::StaleExecution, detail);
        }
        let lines = match self.executed_epochs.get_mut(node) {
            Some(lines) => lines,
            None => self.executed_epochs.entry(node.to_owned()).or_default(),
        };
        let line = (action.pool.to_string(), action.address, action.capture_domain.clone());
        let highest = lines.entry(line).or_default();
        let before = *highest;
        *highest = before.max(action.capture_epoch.get());
        if action.capture_epoch.get() < before {
            let detail = format!(
                "{node} executed {} below captureEpoch {before} it executed before",
                action.idempotency_key()
            );
            self.record(ViolationKind::BelowHighWater, detail);
        }
        stale.is_some()
    }

    /// Called after a provider call on `address`: single assignment on cloud providers.
    pub fn after_provider_call(&mut self, provider_name: &str, provider: &SimProvider, address: IpAddr) {
        if provider.kind() != ProviderKind::SimCloud {
            return;
        }
        if let Some(nics) = provider.holdings().get(&address)
            && nics.len() > 1
        {
            let list: Vec<&str> = nics.iter().map(String::as_str).collect();
            let detail =
                format!("address {address} is on {} NICs of {provider_name}: {}", nics.len(), list.join(","));
            self.record(ViolationKind::DoubleAssignment, detail);
        }
    }

    /// Called after `node`, connected and running, reconciled at the head: `kept` lists the
    /// on-prem addresses its NIC still answers beside another NIC although it is not their
    /// desired holder and has no release of them open. Each is a split answer that outlasted the
    /// hand-over (SPEC 13: on-prem the old holder plans its release at its next reconcile).
    pub fn after_onprem_reconcile(&mut self, node: &str, kept: &[(IpAddr, Vec<String>)]) {
        for (address, nics) in kept {
            let detail = format!(
                "{node} reconciled at the head and kept its entry for {address}, which it is not the desired \
                 holder of, with no release planned, while {} answer it",
                nics.join(", ")
            );
            self.record(ViolationKind::OnpremSplitAnswer, detail);
        }
    }

    /// Called after the hosts answering ARP for on-prem `address` changed (see
    /// [`split_answer`]). Which hosts answer and which are frozen is the caller's data-plane
    /// model; `replay` has none.
    pub fn after_onprem_answer(&mut self, address: IpAddr, answerers: &[Answerer<'_>], vrrp_authority: bool) {
        let Some(kind) = split_answer(answerers, vrrp_authority) else { return };
        let list: Vec<String> = answerers
            .iter()
            .map(|a| {
                let role = if a.vrrp_master { "master" } else { "not master" };
                let state = match (a.frozen, a.cut_off) {
                    (true, _) => ", frozen",
                    (false, true) => ", cut off",
                    (false, false) => "",
                };
                format!("{} ({role}{state})", a.nic)
            })
            .collect();
        self.record(kind, format!("{address} answered by {}", list.join(", ")));
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
    if action.verb.is_acquire() != (holder == Some(&*action.holder)) {
        wrong.push(format!("holder {} but desired holder is {}", action.holder, holder.unwrap_or("none")));
    }
    if !action.verb.is_acquire() {
        // SPEC 13: a NIC holds an address, not a pool's copy of it. Re-derived by walking every
        // applied pool of the provider, not through the federation's own lookup.
        let elsewhere = head.pools().iter().find(|(name, pool)| {
            **name != *action.pool
                && !pool.deleted
                && *pool.spec.provider == *action.provider
                && pool.addresses.get(&action.address).is_some_and(|a| {
                    a.line.desired_holder.is_some_and(|id| head.node_name(id) == &*action.holder)
                })
        });
        if let Some((name, _)) = elsewhere {
            wrong.push(format!("release by {} who is the desired holder through pool {name}", action.holder));
        }
    }
    (!wrong.is_empty()).then(|| wrong.join("; "))
}

/// Owners per node at the head, against capacity: the first node over it, if any.
#[must_use]
pub fn capacity_excess(federation: &Federation) -> Option<String> {
    let mut held = vec![0u64; federation.nodes().len()];
    for pool in federation.pools().values().filter(|p| !p.deleted) {
        for state in pool.addresses.values().filter(|a| a.active) {
            if let Some(owner) = state.owner {
                held[owner as usize] += 1;
            }
        }
    }
    held.into_iter().enumerate().find_map(|(node, count)| {
        let spec = &federation.nodes()[node].spec;
        spec.capacity
            .filter(|cap| count > *cap)
            .map(|cap| format!("{} owns {count} addresses, capacity {cap}", spec.name))
    })
}

/// A fingerprint of everything a node's map consists of: owners, desired flags and tokens
/// (retired capture lines included).
#[must_use]
pub fn fingerprint(federation: &Federation) -> u64 {
    let mut hasher = DefaultHasher::new();
    federation.stream_time_ms().hash(&mut hasher);
    for (name, pool) in federation.pools() {
        name.hash(&mut hasher);
        (pool.deleted, &pool.capture_domain).hash(&mut hasher);
        for (address, state) in &pool.addresses {
            (address, state.active, state.desired, state.owner).hash(&mut hasher);
            (state.ownership_epoch.get(), state.line.epoch.get(), state.line.desired_holder)
                .hash(&mut hasher);
            for (domain, line) in &state.retired_lines {
                (domain, line.epoch.get()).hash(&mut hasher);
            }
        }
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_violation_is_counted_and_each_kind_keeps_its_first_few() {
        let mut seen = Violations::new(2);
        for i in 0..100 {
            seen.record(i, ViolationKind::StaleExecution, format!("stale {i}"));
        }
        seen.record(100, ViolationKind::DoubleAssignment, "double".into());
        assert_eq!(seen.count(ViolationKind::StaleExecution), 100);
        assert_eq!(seen.total(), 101);
        assert_eq!(
            seen.counts(),
            BTreeMap::from([(ViolationKind::StaleExecution, 100), (ViolationKind::DoubleAssignment, 1)])
        );
        let kept: Vec<(u64, ViolationKind)> = seen.kept().iter().map(|v| (v.step, v.kind)).collect();
        assert_eq!(
            kept,
            vec![
                (0, ViolationKind::StaleExecution),
                (1, ViolationKind::StaleExecution),
                (100, ViolationKind::DoubleAssignment)
            ],
            "a kind seen after many of another is still kept"
        );
    }

    fn answerer(nic: &str, frozen: bool, vrrp_master: bool) -> Answerer<'_> {
        Answerer { nic, frozen, vrrp_master, cut_off: false }
    }

    #[test]
    fn a_split_answer_is_the_zombie_limit_only_when_frozen_hosts_make_it() {
        let master = answerer("eth-a", false, true);
        let backup = answerer("eth-b", false, false);
        let frozen_backup = answerer("eth-c", true, false);
        let frozen_master = answerer("eth-d", true, true);
        assert_eq!(split_answer(&[master], true), None);
        assert_eq!(split_answer(&[master, backup], true), Some(ViolationKind::OnpremSplitAnswer));
        // Without authority two running, connected hosts are a hand-over in progress (judged at
        // the old holder's reconcile); one of them cut off from the log is the documented limit.
        assert_eq!(split_answer(&[master, backup], false), None);
        let cut_off = Answerer { cut_off: true, ..backup };
        assert_eq!(split_answer(&[master, cut_off], false), Some(ViolationKind::OnpremCutOffAnswer));
        assert_eq!(split_answer(&[master, cut_off], true), Some(ViolationKind::OnpremSplitAnswer));
        assert_eq!(split_answer(&[master, frozen_backup], true), Some(ViolationKind::OnpremZombieAnswer));
        assert_eq!(
            split_answer(&[frozen_backup, frozen_master], true),
            Some(ViolationKind::OnpremZombieAnswer)
        );
        // A running backup should have withdrawn: with VRRP authority that is a bug.
        assert_eq!(split_answer(&[backup, frozen_master], true), Some(ViolationKind::OnpremSplitAnswer));
        assert_eq!(split_answer(&[backup, frozen_master], false), Some(ViolationKind::OnpremZombieAnswer));
    }
}
