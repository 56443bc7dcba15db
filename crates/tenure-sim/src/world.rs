//! The simulated world of one seed: the log and its head, every node's real engine and view,
//! the simulated provider with its in-flight calls, the message delays — and the driver that
//! moves it step by step, every choice drawn from one seeded generator.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tenure_core::agent::AgentCore;
use tenure_core::anchor::Anchor;
use tenure_core::federation::Federation;
use tenure_core::fence::StaleReason;
use tenure_core::log::{Event, EventKind};
use tenure_core::log_store::EventLog;
use tenure_core::model::{PoolSpec, ProviderKind, StampedAction};
use tenure_core::sim_provider::SimProvider;

use crate::checker::{self, Checker, Violation, ViolationKind, Violations};
use crate::config::{Fault, Mode, SimConfig};
use crate::plot::Timeline;
use crate::topology::{self, Topology};
use node::{SimNode, new_stamper};

mod appends;
mod faults;
mod liveness;
mod node;
mod provider;
mod rollback;
mod steps;
mod vrrp;

/// Most events waiting in the delay queue; beyond it, delays are dropped (lost).
pub const DELAYED_EVENTS_MAX: usize = 100_000;
/// Most violations of each kind kept per seed for display (all are counted and judged).
pub const VIOLATIONS_KEPT_PER_KIND_MAX: u64 = 8;
/// Stream-time length of one liveness round, in ms.
pub const LIVENESS_ROUND_MS: u64 = 250;
/// The nodes' retry backoff base, in ms of stream time: the agent's rule
/// ([`tenure_core::retry`]) with a base shorter than an agent's default `requeueInterval` (5 s),
/// so that the few seconds of stream time of a safety phase still see failed calls retried.
pub const RETRY_BASE_MS: u64 = 250;
/// Most records a node reads from the log at once, drawn at random per follow from 1 to this
/// (the agent reads up to `LOG_READ_BATCH_MAX`: where reads split must not matter).
pub const FOLLOW_BATCH_DRAW_MAX: usize = 8;
/// Most actions a node gates at once, drawn at random per batch from 1 to this (the agent gates
/// up to `GATE_BATCH_MAX` with one durable sync: where batches split must not matter).
pub const GATE_BATCH_DRAW_MAX: usize = 8;
/// The chance that a reconcile follows only part of the log it has not applied (an etcd
/// agent's mirror plans behind the head; only its gates wait for a confirmed head).
pub const LAGGING_RECONCILE_CHANCE: f64 = 0.3;
/// The chance that a node whose driver says no plan is due plans anyway (the agent's requeue
/// interval); otherwise it plans only when [`NodeDriver::reconcile_due`] says so, as the agent.
pub const REQUEUE_CHANCE: f64 = 0.2;
/// The agent's heartbeat interval in the simulation (a liveness round's heartbeat): the clock-lead
/// rule lets a node stamp at most half of it ahead of the lower median of the clocks it sees, as
/// the agent does (`heartbeatInterval / 2`).
pub const HEARTBEAT_INTERVAL_MS: u64 = LIVENESS_ROUND_MS;
/// How long another node's heartbeat stamp still votes in the clock-lead rule (the agent's
/// `CLOCK_VOTE_WINDOW`).
pub const CLOCK_VOTE_WINDOW_MS: u64 = 60_000;

/// A call's deadline in ms of stream time (the agent's `actionTimeout`): a call slower than this
/// is given up, in doubt, at its deadline (`provider-slow` draws latencies up to 3 s).
pub const CALL_DEADLINE_MS: u64 = 2_500;
/// The chance that a call given up or cancelled in flight had reached the provider anyway (a
/// given-up call then acts late, at its latency; a cancelled one acts as it is cancelled).
pub const IN_DOUBT_ACTED_CHANCE: f64 = 0.5;

/// Per-seed probabilities of the continuous faults, drawn from the seed (0 when disabled).
#[derive(Clone, Debug, Default)]
struct Chances {
    heartbeat_loss: f64,
    heartbeat_delay: f64,
    result_delay: f64,
    result_duplicate: f64,
    provider_fail: f64,
    provider_slow: f64,
    async_assign: f64,
    azure_two_step: f64,
    inventory_delay: f64,
    append_in_doubt: f64,
    stall_at_call: f64,
    /// Discrete faults and their relative weights.
    discrete: Vec<(Fault, u32)>,
}

/// A provider call on its way.
struct PendingCall {
    land_at_ms: u64,
    node: usize,
    incarnation: u64,
    action: StampedAction,
    /// Why the call fails instead of taking effect, if it does.
    failure: Option<&'static str>,
    /// What the node hears when it lands.
    heard: Heard,
}

/// What the node hears of a call when it lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Heard {
    /// Its result: executed, or failed and why.
    Result,
    /// Nothing: the agent gave the call up at its deadline (`actionTimeout`), in doubt. The
    /// provider did not act by then; it may still act later ([`Heard::Nothing`]).
    GivenUp,
    /// Nothing at all: the late effect of a call the node gave up on (the provider acts).
    Nothing,
    /// The end of a call the node cancelled because its view fenced it
    /// ([`World::cancel_stale_calls`]): the aborted task reports back, in doubt, with the next
    /// landing of calls (`land_due`) — never between a head confirmation and the calls it
    /// authorises, which one part of a step holds together. (The agent takes it after the step;
    /// the model may take it between two parts of one, as it takes any result: harmless, as the
    /// confirmation comes after.)
    Cancelled(StaleReason),
}

/// What one seed produced.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// The mode.
    pub mode: String,
    /// Violations seen: the first `VIOLATIONS_KEPT_PER_KIND_MAX` of each kind, for display.
    pub violations: Vec<Violation>,
    /// How many violations were seen in all.
    pub violations_total: u64,
    /// How many violations of each kind were seen, kept or not: what the seed is judged on.
    pub violation_counts: BTreeMap<ViolationKind, u64>,
    /// Liveness rounds until convergence, or none.
    pub converged_after_rounds: Option<u32>,
    /// Events appended to the log.
    pub events: u64,
    /// Provider calls made.
    pub provider_calls: u64,
    /// Stale calls that landed (the paused-call limit).
    pub stale_calls: u64,
    /// Re-captures triggered by drift repair.
    pub recaptures: u64,
    /// Calls whose outcome the node never heard: cancelled in flight because its view fenced
    /// them, or given up at their deadline (each recorded in doubt, SPEC 6).
    pub calls_in_doubt: u64,
    /// Nodes whose store refused the log because it went back (`store-rollback`).
    pub refusals: u64,
    /// How many times the log went back (`store-rollback` faults that truncated it).
    pub rollbacks: u64,
    /// Faults injected, by name.
    pub faults: BTreeMap<String, u64>,
}

impl SeedReport {
    /// The report of a seed of `mode` that saw `violations`; the other figures are zero.
    #[must_use]
    pub fn new(mode: Mode, violations: Violations, converged_after_rounds: Option<u32>) -> Self {
        Self {
            seed: 0,
            mode: mode.name().to_owned(),
            violations_total: violations.total(),
            violation_counts: violations.counts(),
            violations: violations.into_kept(),
            converged_after_rounds,
            events: 0,
            provider_calls: 0,
            stale_calls: 0,
            recaptures: 0,
            calls_in_doubt: 0,
            refusals: 0,
            rollbacks: 0,
            faults: BTreeMap::new(),
        }
    }

    fn parsed_mode(&self) -> Mode {
        self.mode.parse().expect("the mode printed itself")
    }

    /// The kept violations the mode does not predict (for display; see `unexpected_count`).
    pub fn unexpected(&self) -> impl Iterator<Item = &Violation> {
        let mode = self.parsed_mode();
        self.violations.iter().filter(move |v| !v.kind.predicted_in(mode))
    }

    /// How many violations, kept or not, the mode does not predict.
    #[must_use]
    pub fn unexpected_count(&self) -> u64 {
        let mode = self.parsed_mode();
        self.violation_counts.iter().filter(|(k, _)| !k.predicted_in(mode)).map(|(_, n)| n).sum()
    }

    /// How many violations, kept or not, the mode predicts (its documented limit).
    #[must_use]
    pub fn predicted_count(&self) -> u64 {
        self.violations_total - self.unexpected_count()
    }

    /// Whether the seed failed: any unexpected violation counted, or no convergence.
    #[must_use]
    pub fn failed(&self) -> bool {
        self.unexpected_count() > 0 || self.converged_after_rounds.is_none()
    }
}

/// The world of one seed.
pub struct World {
    rng: ChaCha8Rng,
    config: SimConfig,
    topology: Topology,
    chances: Chances,
    head: Federation,
    /// The empty federation of the seed's nodes and provider: what the log is applied over.
    registry: Federation,
    /// The one log every node follows through its driver, as the agent follows its store's.
    log: EventLog,
    /// Each record's serial (its key: no two records ever share one, as etcd's batch keys).
    serials: Vec<u64>,
    /// The last serial given.
    next_serial: u64,
    /// Nodes whose store refused a log that went back.
    refusals: u64,
    /// The log went back since the last recovery (the operator recovers before the liveness phase).
    went_back: bool,
    /// How many times the log went back (a `store-rollback` that truncated something).
    rollbacks: u64,
    head_fingerprints: Vec<u64>,
    checker: Checker,
    nodes: Vec<SimNode>,
    provider: SimProvider,
    calls: Vec<PendingCall>,
    /// While a gated batch's calls go out: those that take no time, landed once all went out.
    issuing: Option<Vec<PendingCall>>,
    delayed: Vec<(u64, u64, Event)>,
    delayed_seq: u64,
    /// Step batches on their way to the log that their node did not hear land
    /// (`append-in-doubt`; `world/appends.rs`).
    appends: appends::InDoubt,
    pools: Vec<Option<PoolSpec>>,
    /// The one host whose keepalived is MASTER (on-prem fleets; a LAN that is not partitioned).
    vrrp_master: Option<usize>,
    now_ms: u64,
    step: u64,
    provider_calls: u64,
    stale_calls: u64,
    calls_in_doubt: u64,
    faults: BTreeMap<String, u64>,
    timeline: Option<Timeline>,
}

impl World {
    /// Builds the world of `seed`. With `plot`, a timeline is recorded for `--plot`.
    #[must_use]
    pub fn new(seed: u64, config: &SimConfig, plot: bool) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let topology = topology::generate(&mut rng, config);
        let chances = draw_chances(&mut rng, config);
        let registry = Federation::new(&topology.nodes, std::slice::from_ref(&topology.provider))
            .with_drift_repair(true);
        let nodes = topology
            .nodes
            .iter()
            .map(|spec| SimNode {
                core: AgentCore::new(vec![rollback::fresh_driver(&spec.name, &registry)]),
                stamper: new_stamper(),
                own: BTreeSet::from([spec.name.clone()]),
                stalled: Vec::new(),
                unappended: None,
                stuck_until_ms: 0,
                incarnation: 0,
                floor: 0,
                skew_ms: if config.faults.has(Fault::ClockSkew) { rng.random_range(-300..=300) } else { 0 },
                vrrp_reported: None,
                anchor: Anchor::default(),
                refused: None,
                watch_broken: false,
            })
            .collect();
        let timeline = plot.then(|| {
            let addresses =
                topology.pools.iter().flat_map(|pool| pool.addresses.iter().map(|a| (pool.name.clone(), *a)));
            let nodes = topology.nodes.iter().map(|n| (n.name.clone(), n.nic.clone())).collect();
            Timeline::over(addresses, nodes)
        });
        let mut world = Self {
            rng,
            config: config.clone(),
            provider: SimProvider::new(topology.provider.kind),
            pools: topology.pools.iter().cloned().map(Some).collect(),
            topology,
            chances,
            head: registry.clone(),
            registry,
            log: EventLog::new(),
            serials: Vec::new(),
            next_serial: 0,
            refusals: 0,
            went_back: false,
            rollbacks: 0,
            head_fingerprints: Vec::new(),
            checker: Checker::new(VIOLATIONS_KEPT_PER_KIND_MAX),
            nodes,
            calls: Vec::new(),
            issuing: None,
            delayed: Vec::new(),
            delayed_seq: 0,
            appends: appends::InDoubt::default(),
            vrrp_master: None,
            now_ms: 0,
            step: 0,
            provider_calls: 0,
            stale_calls: 0,
            calls_in_doubt: 0,
            faults: BTreeMap::new(),
            timeline,
        };
        world.head_fingerprints.push(checker::fingerprint(&world.head));
        world.start();
        world
    }

    fn start(&mut self) {
        for spec in self.topology.pools.clone() {
            self.append(Event { at_ms: 0, kind: EventKind::PoolApplied { spec: Box::new(spec) } });
        }
        if self.topology.provider.kind == ProviderKind::SimOnprem {
            let master = self.rng.random_range(0..self.nodes.len());
            self.set_vrrp_master(master);
        }
        for node in 0..self.nodes.len() {
            let name = self.name(node);
            self.append(Event { at_ms: 0, kind: EventKind::Heartbeat { node: name } });
        }
    }

    fn name(&self, node: usize) -> String {
        self.topology.nodes[node].name.clone()
    }

    fn violation(&mut self, kind: ViolationKind, detail: String) {
        self.checker.record(kind, detail);
    }

    /// The next step: violations seen from now on are stamped with it.
    fn next_step(&mut self) {
        self.step += 1;
        self.checker.set_step(self.step);
    }

    fn count_fault(&mut self, fault: Fault) {
        *self.faults.entry(fault.name().to_owned()).or_default() += 1;
    }

    /// Marks a fault on the plot's timeline (when plotting), at `stream_time_ms`, described as
    /// it should read there (`crash b`, `heal c`).
    fn mark_fault(&mut self, stream_time_ms: u64, description: impl FnOnce() -> String) {
        if let Some(timeline) = &mut self.timeline {
            timeline.mark(stream_time_ms, &description());
        }
    }

    /// The event time a node stamps: the true time plus its clock skew.
    fn stamp(&mut self, node: usize) -> u64 {
        let wall_ms = self.now_ms.saturating_add_signed(self.nodes[node].skew_ms);
        self.nodes[node].stamper.stamp(wall_ms, self.now_ms).at_ms
    }

    /// Appends an event to the log, applies it to the head and checks the head.
    fn append(&mut self, event: Event) {
        if let Err(rejected) = self.head.apply(&event) {
            // The simulator only generates well-formed events; a rejection is a bug in it.
            panic!("the head rejected a generated event: {rejected}");
        }
        self.log.push(event);
        self.next_serial += 1;
        self.serials.push(self.next_serial);
        self.head_fingerprints.push(checker::fingerprint(&self.head));
        self.checker.after_event(&self.head);
    }

    fn delay(&mut self, deliver_at_ms: u64, event: Event) {
        if self.delayed.len() < DELAYED_EVENTS_MAX {
            self.delayed_seq += 1;
            self.delayed.push((deliver_at_ms, self.delayed_seq, event));
        }
    }

    fn deliver_due(&mut self) {
        let now = self.now_ms;
        let mut due: Vec<(u64, u64, Event)> = Vec::new();
        let mut keep = Vec::new();
        for item in self.delayed.drain(..) {
            if item.0 <= now { due.push(item) } else { keep.push(item) }
        }
        self.delayed = keep;
        due.sort_by_key(|(at, seq, _)| (*at, *seq));
        for (_, _, event) in due {
            self.append(event);
        }
        self.land_late_appends();
    }

    // ---------------------------------------------------------------- the provider

    // ---------------------------------------------------------------- the safety phase

    fn tick(&mut self) {
        self.now_ms += self.rng.random_range(1..150);
        for node in 0..self.nodes.len() {
            let n = &self.nodes[node];
            if n.cut_off() || n.driver().is_paused() || n.refused.is_some() {
                continue;
            }
            self.report_vrrp(node);
            if self.rng.random_bool(self.chances.heartbeat_loss) || !self.anchor_holds(node) {
                continue;
            }
            let event =
                Event { at_ms: self.stamp(node), kind: EventKind::Heartbeat { node: self.name(node) } };
            if self.rng.random_bool(self.chances.heartbeat_delay) {
                let at = self.now_ms + self.rng.random_range(100..2_500);
                self.delay(at, event);
            } else {
                self.append(event);
            }
        }
        self.deliver_due();
        self.land_due(false);
    }

    fn random_node(&mut self) -> usize {
        self.rng.random_range(0..self.nodes.len())
    }

    fn random_address(&mut self) -> (usize, IpAddr) {
        let pool = self.rng.random_range(0..self.topology.pools.len());
        let range = &self.topology.pools[pool].addresses;
        (pool, range[self.rng.random_range(0..range.len())])
    }

    fn safety_step(&mut self) {
        self.next_step();
        let roll = self.rng.random_range(0..100);
        match roll {
            0..30 => self.tick(),
            30..74 => {
                let node = self.random_node();
                self.advance(node);
            }
            74..82 => {
                let (_, address) = self.random_address();
                let delayed = self.rng.random_bool(self.chances.inventory_delay);
                self.observe_inventory(address, delayed);
            }
            _ => {
                let total: u32 = self.chances.discrete.iter().map(|(_, w)| *w).sum();
                if total > 0 {
                    let mut pick = self.rng.random_range(0..total);
                    let fault = self
                        .chances
                        .discrete
                        .iter()
                        .find(|(_, w)| {
                            let hit = pick < *w;
                            pick = pick.saturating_sub(*w);
                            hit
                        })
                        .map(|(f, _)| *f)
                        .expect("pick is below the total weight");
                    self.inject(fault);
                }
            }
        }
        self.sample();
    }

    fn sample(&mut self) {
        if let Some(timeline) = &mut self.timeline {
            // The band: the first NIC the provider has the address on.
            let holdings = self.provider.holdings();
            timeline.sample_with(&self.head, |_, address| {
                holdings.get(&address).and_then(|nics| nics.iter().next().cloned())
            });
        }
    }

    // ---------------------------------------------------------------- the liveness phase

    /// Runs both phases; returns the log and the registry it was applied over (for tests of
    /// what reads logs, like snapshots).
    #[must_use]
    pub fn run_log(mut self) -> (Federation, Vec<Event>) {
        for _ in 0..self.config.safety_steps {
            self.safety_step();
        }
        let _ = self.liveness();
        let registry = Federation::new(&self.topology.nodes, std::slice::from_ref(&self.topology.provider))
            .with_drift_repair(true);
        (registry, self.log.into_events())
    }

    /// Runs both phases and reports.
    pub fn run(mut self) -> (SeedReport, Option<Timeline>) {
        for _ in 0..self.config.safety_steps {
            self.safety_step();
        }
        let converged_after_rounds = self.liveness();
        let report = SeedReport {
            events: self.log.len() as u64,
            provider_calls: self.provider_calls,
            stale_calls: self.stale_calls,
            recaptures: self.head.recaptures(),
            calls_in_doubt: self.calls_in_doubt,
            refusals: self.refusals,
            rollbacks: self.rollbacks,
            faults: self.faults,
            ..SeedReport::new(self.config.mode, self.checker.into_violations(), converged_after_rounds)
        };
        (report, self.timeline)
    }
}

fn draw_chances(rng: &mut ChaCha8Rng, config: &SimConfig) -> Chances {
    let faults = &config.faults;
    let mut chance =
        |fault: Fault, max: f64| if faults.has(fault) { rng.random_range(0.0..max) } else { 0.0 };
    let mut chances = Chances {
        heartbeat_loss: chance(Fault::HeartbeatLoss, 0.3),
        heartbeat_delay: chance(Fault::HeartbeatDelay, 0.2),
        result_delay: chance(Fault::ResultDelay, 0.4),
        result_duplicate: chance(Fault::ResultDuplicate, 0.2),
        provider_fail: chance(Fault::ProviderFail, 0.2),
        provider_slow: chance(Fault::ProviderSlow, 0.2),
        async_assign: chance(Fault::AsyncAssign, 0.5),
        azure_two_step: chance(Fault::AzureTwoStep, 0.3),
        inventory_delay: chance(Fault::InventoryDelay, 0.5),
        append_in_doubt: 0.0,
        stall_at_call: 0.0,
        discrete: Vec::new(),
    };
    if config.mode == Mode::PausedCall {
        chances.stall_at_call = rng.random_range(0.02..0.1);
    }
    for fault in [
        Fault::Crash,
        Fault::CrashLossy,
        Fault::Pause,
        Fault::Partition,
        Fault::Drain,
        Fault::Health,
        Fault::Vrrp,
        Fault::PoolChurn,
        Fault::DesireBurst,
        Fault::SlowStep,
        Fault::PoolMove,
    ] {
        if faults.has(fault) {
            chances.discrete.push((fault, rng.random_range(1..10)));
        }
    }
    // (Drawn after the others: the chances drawn before it stay what they were for every seed.)
    if faults.has(Fault::AppendInDoubt) {
        chances.append_in_doubt = rng.random_range(0.0..0.5);
    }
    // Rare: it ends the fleet's log (every node refuses it until the operator's recovery).
    if faults.has(Fault::StoreRollback) {
        chances.discrete.push((Fault::StoreRollback, 1));
    }
    // (Drawn last: the chances drawn before it stay what they were for every seed.)
    if faults.has(Fault::Rebuild) {
        chances.discrete.push((Fault::Rebuild, rng.random_range(1..4)));
    }
    chances
}
