//! The replay driver (SPEC 11): runs a scenario through the real core — the federation log, each
//! node's engine and journal — and the simulated providers, offline and deterministically.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::Serialize;

use crate::checker::Checker;

/// Most violations of each kind a replay reports (it counts them all).
pub const VIOLATIONS_KEPT_PER_KIND_MAX: u64 = 1_000;
use tenure_core::driver::{Blocked, DriverOptions, NodeDriver};
use tenure_core::federation::{EventRejected, Federation, PoolState};
use tenure_core::input::{InputError, canonical_address};
use tenure_core::journal::{EntryState, JournalEntry, MemoryJournalStore};
use tenure_core::log::{ActionOutcome, Event, EventKind};
use tenure_core::log_store::EventLog;
use tenure_core::model::{IdempotencyKey, VerbFamily};
use tenure_core::node::NodeEngine;
pub use tenure_core::rows::{ActionRow, ConditionRow, OwnershipRow};
use tenure_core::rows::{action_row, ownership_rows, pool_conditions};
use tenure_core::scenario::{LocalStep, Scenario, StepKind};
use tenure_core::sim_provider::SimProvider;

/// The final state of a replay.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayReport {
    /// Stream time at the end.
    pub stream_time: u64,
    /// Every active address of every applied pool.
    pub ownership: Vec<OwnershipRow>,
    /// Every journal entry of every node, by node name, then in journal order.
    pub actions: Vec<ActionRow>,
    /// Per declared provider, addresses held somewhere with their sorted NIC lists.
    pub provider: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    /// Pool conditions at the end.
    pub conditions: Vec<ConditionRow>,
    /// Every broken invariant the checker saw.
    pub violations: Vec<String>,
}

/// Why a replay could not run to the end: it is bad input (exit 2).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{error}")]
pub struct ReplayError {
    /// The entry that was refused, and why.
    pub error: InputError,
}

/// A running replay: the log and its head, one [`NodeDriver`] per node (the same driver the
/// simulator and the agent use), the simulated providers and the checker.
pub struct Replay {
    head: Federation,
    /// The projection of the empty log, where a node the log registers starts following it.
    registry: Federation,
    /// The log every node follows through its driver (the one walk: `tenure_core::driver`).
    log: EventLog,
    nodes: BTreeMap<String, NodeDriver<MemoryJournalStore>>,
    providers: BTreeMap<String, SimProvider>,
    checker: Checker,
    narrate: bool,
    narration: Vec<String>,
}

impl Replay {
    /// Prepares a replay of `scenario`. With `narrate`, a human-readable trace is kept (and only
    /// then built).
    #[must_use]
    pub fn new(scenario: &Scenario, narrate: bool) -> Self {
        let registry =
            Federation::new(&scenario.nodes, &scenario.providers).with_drift_repair(scenario.drift_repair);
        // SPEC 13: in replay, executing does not append `action-result` events.
        let options = DriverOptions { report_results: false };
        let nodes = scenario
            .nodes
            .iter()
            .map(|n| {
                // No retry backoff: a scenario's steps are explicit, and a failed action is
                // retried at the next `reconcile` it lists (reports stay as they were).
                let engine =
                    NodeEngine::open(&n.name, MemoryJournalStore::new()).expect("a memory store cannot fail");
                (n.name.clone(), NodeDriver::new(engine, registry.clone(), options))
            })
            .collect();
        let providers =
            scenario.providers.iter().map(|p| (p.name.clone(), SimProvider::new(p.kind))).collect();
        Self {
            head: registry.clone(),
            registry,
            log: EventLog::new(),
            nodes,
            providers,
            checker: Checker::new(VIOLATIONS_KEPT_PER_KIND_MAX),
            narrate,
            narration: Vec::new(),
        }
    }

    /// Runs the whole scenario and returns the final report.
    pub fn run(scenario: &Scenario, narrate: bool) -> Result<(ReplayReport, Vec<String>), ReplayError> {
        let mut replay = Self::new(scenario, narrate);
        for pool in &scenario.pools {
            let event = Event { at_ms: 0, kind: EventKind::PoolApplied { spec: Box::new(pool.clone()) } };
            replay
                .append(event)
                .map_err(|e| ReplayError { error: InputError::at(Default::default(), e.to_string()) })?;
        }
        for step in &scenario.timeline {
            match &step.kind {
                StepKind::Log(event) => replay
                    .append(event.clone())
                    .map_err(|e| ReplayError { error: InputError::at(step.position, e.to_string()) })?,
                StepKind::Local { at_ms, node, step } => replay.local(*at_ms, node, *step),
            }
        }
        Ok((replay.report(), replay.narration))
    }

    fn say(&mut self, line: impl FnOnce() -> String) {
        if self.narrate {
            self.narration.push(line());
        }
    }

    /// The log appended so far.
    #[must_use]
    pub fn log(&self) -> &[Event] {
        self.log.events()
    }

    /// Appends a log event and applies it to the head.
    pub fn append(&mut self, event: Event) -> Result<(), EventRejected> {
        let before = self.narrate.then(|| ownership_rows(&self.head));
        let applied = self.head.apply(&event)?;
        self.checker.after_event(&self.head);
        if let Some(before) = before {
            let mut line = format!("t={:<6} {}", event.at_ms, event.kind);
            if applied == tenure_core::federation::Applied::NoSuchTarget {
                line.push_str("  (no such pool or address: only moves stream time)");
            }
            self.narration.push(line);
            let after = ownership_rows(&self.head);
            for change in ownership_changes(&before, &after) {
                self.narration.push(format!("           {change}"));
            }
        }
        if let EventKind::NodeRegistered { spec, .. } = &event.kind
            && !self.nodes.contains_key(&spec.name)
        {
            // A node the log registers: one more driver, which follows the log from its start.
            let engine =
                NodeEngine::open(&spec.name, MemoryJournalStore::new()).expect("a memory store cannot fail");
            let options = DriverOptions { report_results: false };
            self.nodes.insert(spec.name.clone(), NodeDriver::new(engine, self.registry.clone(), options));
        }
        self.log.push(event);
        Ok(())
    }

    /// Runs one local step of one node.
    pub fn local(&mut self, at_ms: u64, name: &str, step: LocalStep) {
        let prefix = format!("t={at_ms:<6} {} {name}", step.as_str());
        let Some(node) = self.nodes.get_mut(name) else { return };
        if matches!(step, LocalStep::Reconcile | LocalStep::Execute) {
            // A node that may not act does not read the log either (SPEC 13). Before executing,
            // the gates read the node's view: it follows to the head first (catching up changes
            // no journal entry, and the gate reads the same tokens the head has).
            if !node.is_partitioned() && !node.is_paused() {
                node.follow(&self.log).expect("an event log cannot fail");
            }
            if node.view().node_id(name).is_none() {
                return self.say(|| {
                    format!("{prefix}: not in the registry (never registered, or retired): does nothing")
                });
            }
        }
        match step {
            LocalStep::Reconcile => {
                let report = match node.reconcile().expect("a memory store cannot fail") {
                    Err(blocked) => return self.say(|| format!("{prefix}: {}", blocked.as_str())),
                    Ok(report) => report,
                };
                self.checker.after_catch_up(name, node.view());
                if self.narrate {
                    let node = &self.nodes[name];
                    self.narration.push(format!(
                        "{prefix}: journaled {}, swept {} to skipped, promoted {}",
                        report.imported.len(),
                        report.swept.len(),
                        report.promoted.len()
                    ));
                    for k in &report.imported {
                        self.narration
                            .push(format!("           + {k} [{}]", state_text(node.engine().entry(k))));
                    }
                    for k in &report.swept {
                        self.narration
                            .push(format!("           - {k} [{}]", state_text(node.engine().entry(k))));
                    }
                }
            }
            LocalStep::Execute => {
                if let Err(blocked) = node.start_execution().expect("a memory store cannot fail") {
                    return self.say(|| format!("{prefix}: {}", blocked.as_str()));
                }
                self.say(|| prefix);
                self.execute(name);
            }
            LocalStep::Pause => {
                node.pause();
                self.say(|| format!("{prefix}: stops reading the log, keeps what it planned"));
            }
            LocalStep::Resume => match node.resume() {
                Err(Blocked::Partitioned) => {
                    self.say(|| format!("{prefix}: pause cleared (still partitioned)"))
                }
                Err(blocked) => self.say(|| format!("{prefix}: {}", blocked.as_str())),
                Ok(count) => {
                    self.say(|| {
                        format!("{prefix}: tries {count} action(s) approved before the pause (zombie)")
                    });
                    // It catches up first (as the agent's resume: it changes no journal entry, and
                    // the zombie's gate then reads the head's tokens), then gates what it approved.
                    let node = self.nodes.get_mut(name).expect("exists");
                    node.follow(&self.log).expect("an event log cannot fail");
                    self.execute(name);
                    let node = self.nodes.get_mut(name).expect("exists");
                    node.finish_resume();
                    self.checker.after_catch_up(name, node.view());
                }
            },
            LocalStep::Restart => {
                node.restart().expect("a memory store cannot fail");
                self.checker.after_restart(name);
                self.say(|| format!("{prefix}: memory lost; journal and high-water marks kept"));
            }
            LocalStep::Partition => {
                node.partition();
                self.say(|| format!("{prefix}: cut off from the log head"));
            }
            LocalStep::Heal => {
                node.heal();
                self.say(|| format!("{prefix}: reads the log head again"));
            }
        }
    }

    /// Loops the node's gate and the providers until nothing is left.
    fn execute(&mut self, name: &str) {
        loop {
            let node = self.nodes.get_mut(name).expect("exists");
            // Scanning the journal for what the gate skipped is for the narration only.
            let skipped_before = self.narrate.then(|| skipped_keys(node));
            let next = node.poll_actions(1, None).expect("a memory store cannot fail").into_iter().next();
            if let Some(before) = skipped_before {
                let node = &self.nodes[name];
                for key in skipped_keys(node).difference(&before) {
                    let reason = state_text(node.engine().entry(key));
                    self.narration.push(format!("           gate: {key} [{reason}]"));
                }
            }
            let Some(action) = next else { break };
            let cut_off = self.nodes[name].is_partitioned();
            self.checker.before_provider_call(name, &action, &self.head, cut_off);
            let (outcome, detail) = match self.providers.get_mut(&*action.provider) {
                Some(p) => match p.execute(&action) {
                    Ok(detail) => (ActionOutcome::Executed, detail),
                    Err(e) => (ActionOutcome::Failed, e.to_string()),
                },
                None => (ActionOutcome::Failed, format!("no provider `{}`", action.provider)),
            };
            if let Some(p) = self.providers.get(&*action.provider) {
                self.checker.after_provider_call(&action.provider, p, action.address);
            }
            let node = self.nodes.get_mut(name).expect("exists");
            node.handle_result(&action.idempotency_key(), outcome, detail.clone())
                .expect("the action is in flight");
            let verdict = if outcome == ActionOutcome::Executed { "executed" } else { "failed" };
            self.say(|| {
                format!(
                    "           {} {} on {} → {verdict} ({detail})",
                    action.verb, action.address, action.nic
                )
            });
        }
    }

    /// The report of the state reached so far.
    #[must_use]
    pub fn report(&self) -> ReplayReport {
        let actions = self
            .nodes
            .iter()
            .flat_map(|(name, node)| node.engine().entries().map(move |e| action_row(name, e)))
            .collect();
        let provider = self
            .providers
            .iter()
            .map(|(name, p)| {
                let held = p
                    .holdings()
                    .iter()
                    .map(|(address, nics)| (canonical_address(*address), nics.iter().cloned().collect()))
                    .collect();
                (name.clone(), held)
            })
            .collect();
        let executed_acquires: BTreeSet<(&str, &str, IpAddr, u64)> = self
            .nodes
            .iter()
            .flat_map(|(name, node)| {
                node.engine()
                    .entries()
                    .filter(|e| e.state == EntryState::Executed && e.action.verb.is_acquire())
                    .map(move |e| {
                        (name.as_str(), &*e.action.pool, e.action.address, e.action.capture_epoch.get())
                    })
            })
            .collect();
        let mut conditions = Vec::new();
        for (name, pool) in self.head.pools().iter().filter(|(_, p)| !p.deleted) {
            conditions.extend(pool_conditions(name, pool));
            let unheld = self.held_by_no_one(pool, &executed_acquires);
            if unheld > 0 {
                conditions.push(ConditionRow {
                    pool: name.clone(),
                    condition: "HeldByNoOne".to_owned(),
                    addresses: unheld,
                });
            }
            let answered_twice = self.held_by_many(pool);
            if answered_twice > 0 {
                conditions.push(ConditionRow {
                    pool: name.clone(),
                    condition: "HeldByMany".to_owned(),
                    addresses: answered_twice,
                });
            }
        }
        ReplayReport {
            stream_time: self.head.stream_time_ms(),
            ownership: ownership_rows(&self.head),
            actions,
            provider,
            conditions,
            violations: self.checker.violations().kept().iter().map(|v| v.detail.clone()).collect(),
        }
    }

    /// Desired addresses of `pool` whose desired holder executed an acquire verb of the current
    /// epoch — a settled, quiet state for that address — and yet no NIC of the provider
    /// holds them: something undid the capture (SPEC 13: an address moved between pools and
    /// released by the old one). A condition, not a safety violation.
    fn held_by_no_one(
        &self,
        pool: &PoolState,
        executed_acquires: &BTreeSet<(&str, &str, IpAddr, u64)>,
    ) -> u64 {
        let Some(provider) = self.providers.get(&pool.spec.provider) else { return 0 };
        let mut count = 0;
        for (address, state) in pool.addresses.iter().filter(|(_, a)| a.active) {
            let Some(holder) = state.line.desired_holder else { continue };
            let holder_name = self.head.node_name(holder);
            let settled = executed_acquires.contains(&(
                holder_name,
                pool.spec.name.as_str(),
                *address,
                state.line.epoch.get(),
            ));
            if settled && provider.holdings().get(address).is_none_or(|nics| nics.is_empty()) {
                count += 1;
            }
        }
        count
    }

    /// Active addresses of `pool` on an on-prem provider (no provider-side single assignment)
    /// that two or more NICs hold at the end: two routers answer ARP for them. A condition, not a
    /// violation: a scenario may end between the new holder's add and the old holder's release
    /// (SPEC 13: on the on-prem family the old holder plans that release at its next reconcile,
    /// the deprovision hold never applies).
    fn held_by_many(&self, pool: &PoolState) -> u64 {
        let on_prem = self
            .head
            .provider_kind(&pool.spec.provider)
            .is_some_and(|kind| kind.verb_family() == VerbFamily::Onprem);
        let Some(provider) = self.providers.get(&pool.spec.provider).filter(|_| on_prem) else { return 0 };
        let holdings = provider.holdings();
        let many = pool
            .addresses
            .iter()
            .filter(|(address, a)| a.active && holdings.get(*address).is_some_and(|nics| nics.len() > 1));
        u64::try_from(many.count()).expect("a pool holds at most 65,536 addresses")
    }

    /// A provider of the replay, for a test that does to it what another tool would (an address
    /// unassigned by hand); the next report shows the result.
    pub fn provider_mut(&mut self, name: &str) -> Option<&mut SimProvider> {
        self.providers.get_mut(name)
    }

    /// The log head.
    #[must_use]
    pub fn head(&self) -> &Federation {
        &self.head
    }

    /// Node `name`'s driver, for a caller that reads its journal as the agent's readers do
    /// ([`tenure_core::journal_index::JournalIndex::follow`]).
    pub fn driver_mut(&mut self, name: &str) -> Option<&mut NodeDriver<MemoryJournalStore>> {
        self.nodes.get_mut(name)
    }
}

fn skipped_keys(node: &NodeDriver<MemoryJournalStore>) -> BTreeSet<IdempotencyKey> {
    node.engine()
        .entries()
        .filter(|e| matches!(e.state, EntryState::Skipped(_)))
        .map(|e| e.action.idempotency_key())
        .collect()
}

fn state_text(entry: Option<&JournalEntry>) -> String {
    match entry.map(|e| e.state) {
        Some(EntryState::Skipped(reason)) => format!("skipped: {reason}"),
        Some(s) => s.as_str().to_owned(),
        None => "unknown".to_owned(),
    }
}

fn ownership_changes(before: &[OwnershipRow], after: &[OwnershipRow]) -> Vec<String> {
    let index: BTreeMap<(&str, &str), &OwnershipRow> =
        before.iter().map(|r| ((r.pool.as_str(), r.address.as_str()), r)).collect();
    let mut changes = Vec::new();
    for row in after {
        let old = index.get(&(row.pool.as_str(), row.address.as_str()));
        if old.is_some_and(|o| *o == row) || (old.is_none() && row.owner.is_none()) {
            continue;
        }
        let old_owner = old.and_then(|o| o.owner.as_deref()).unwrap_or("none");
        changes.push(format!(
            "{}/{}: owner {} → {}, desired {}, ownershipEpoch {}, captureEpoch {}",
            row.pool,
            row.address,
            old_owner,
            row.owner.as_deref().unwrap_or("none"),
            row.desired,
            row.ownership_epoch,
            row.capture_epoch
        ));
    }
    changes
}
