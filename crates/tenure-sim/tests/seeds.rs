//! The simulator in the test suite: a seed sweep across the fault mix and the modes, the
//! determinism double-run, the documented-limit modes, and every seed that ever failed, pinned.
//!
//! `TENURE_SIM_SEEDS=N` scales the sweep (default 2,000 seeds in all); `TENURE_SIM_SEED_BASE`
//! shifts it, for longer or different sweeps outside CI.

use std::collections::BTreeSet;

use tenure_sim::checker::ViolationKind;
use tenure_sim::{FaultSet, Mode, SeedReport, SimConfig, run_seed};

fn config(mode: Mode) -> SimConfig {
    SimConfig { mode, ..SimConfig::default() }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Runs `seeds` on two threads (the machine has two cores); reports in seed order.
fn sweep(config: &SimConfig, seeds: std::ops::Range<u64>) -> Vec<SeedReport> {
    let all: Vec<u64> = seeds.collect();
    let (even, odd): (Vec<u64>, Vec<u64>) = all.iter().partition(|s| *s % 2 == 0);
    let run = |list: Vec<u64>| list.into_iter().map(|s| run_seed(s, config)).collect::<Vec<_>>();
    let (mut a, b) = std::thread::scope(|scope| {
        let other = scope.spawn(|| run(odd));
        (run(even), other.join().expect("the sweep thread does not panic"))
    });
    a.extend(b);
    a.sort_by_key(|r| r.seed);
    a
}

fn report_failures(config: &SimConfig, reports: &[SeedReport]) -> Vec<u64> {
    let mut failing = Vec::new();
    for r in reports.iter().filter(|r| r.failed()) {
        eprintln!("SEED={} {}", r.seed, config.reproduce_command(r.seed));
        for v in r.unexpected().take(3) {
            eprintln!("  {} at step {}: {}", v.kind, v.step, v.detail);
        }
        if r.converged_after_rounds.is_none() {
            eprintln!("  no convergence");
        }
        eprintln!("  unexpected violations counted: {}", r.unexpected_count());
        failing.push(r.seed);
    }
    failing
}

#[test]
fn seed_sweep_across_the_fault_mix_finds_no_violation() {
    let total = env_u64("TENURE_SIM_SEEDS", 2_000);
    let base = env_u64("TENURE_SIM_SEED_BASE", 0);
    // Most seeds on the cloud fleet, the rest on on-prem with VRRP authority and on the two
    // documented-limit modes (which must show nothing but their predicted violation).
    let shares =
        [(Mode::Cloud, 50), (Mode::Onprem, 30), (Mode::PausedCall, 10), (Mode::OnpremNoAuthority, 10)];
    let mut failing = Vec::new();
    for (mode, percent) in shares {
        let count = total * percent / 100;
        let config = config(mode);
        let reports = sweep(&config, base..base + count);
        assert_eq!(reports.len() as u64, count, "{mode:?}: one report per seed");
        failing.extend(report_failures(&config, &reports).into_iter().map(|s| (mode, s)));
    }
    assert!(failing.is_empty(), "failing seeds: {failing:?}");
}

#[test]
fn same_seed_same_run_byte_for_byte() {
    for mode in Mode::ALL {
        let config = config(mode);
        for seed in 0..10 {
            let first = format!("{:?}", run_seed(seed, &config));
            let second = format!("{:?}", run_seed(seed, &config));
            assert_eq!(first, second, "{mode} seed {seed} is not deterministic");
        }
    }
}

/// Every kind counted in `reports` (kept for display or not).
fn kinds(reports: &[SeedReport]) -> BTreeSet<ViolationKind> {
    reports.iter().flat_map(|r| r.violation_counts.keys().copied()).collect()
}

fn count(reports: &[SeedReport], kind: ViolationKind) -> u64 {
    reports.iter().filter_map(|r| r.violation_counts.get(&kind)).sum()
}

#[test]
fn paused_between_gate_and_call_lands_stale_and_drift_repair_recovers() {
    let config = config(Mode::PausedCall);
    let reports = sweep(&config, 0..60);
    let seen = kinds(&reports);
    assert!(
        seen.contains(&ViolationKind::StaleExecution),
        "the predicted stale call never appeared: {seen:?}"
    );
    assert!(
        seen.iter().all(|k| k.predicted_in(Mode::PausedCall)),
        "only the predicted violations may appear: {seen:?}"
    );
    assert!(reports.iter().all(|r| r.converged_after_rounds.is_some()), "drift repair must converge");
    assert!(
        reports.iter().any(|r| r.stale_calls > 0 && r.recaptures > 0),
        "repair by re-capture must happen"
    );
}

#[test]
fn onprem_without_vrrp_authority_answers_from_two_running_hosts() {
    // Every host with a proxy entry answers: agents that ignore keepalived leave a running host
    // cut off from the log answering beside the new holder (it cannot release through the log).
    // Two connected hosts never answer past the hand-over: the old holder releases at its next
    // reconcile, whatever the pool's deprovision hold (SPEC 13) — an `onprem-split-answer`.
    let reports = sweep(&config(Mode::OnpremNoAuthority), 0..40);
    assert!(count(&reports, ViolationKind::OnpremCutOffAnswer) > 0, "no cut-off answer found");
    assert_eq!(count(&reports, ViolationKind::OnpremSplitAnswer), 0, "a split answer outlasted a hand-over");
    let seen = kinds(&reports);
    assert!(seen.iter().all(|k| k.predicted_in(Mode::OnpremNoAuthority)), "only the predicted: {seen:?}");
}

#[test]
fn onprem_with_vrrp_authority_answers_from_two_hosts_only_through_a_frozen_one() {
    // Agents that withdraw on their own VRRP transition and refuse to add while not MASTER:
    // two hosts answer only when one was frozen through its transition (SPEC 9: no STONITH).
    let reports = sweep(&config(Mode::Onprem), 0..40);
    let limit = BTreeSet::from([ViolationKind::OnpremZombieAnswer]);
    assert!(kinds(&reports).is_subset(&limit), "only the predicted limit: {:?}", kinds(&reports));
    assert!(reports.iter().all(|r| !r.failed()));
    // The limit is shown: pinned seeds in which a frozen host answers beside the new holder.
    // (Since the simulator runs the agent's step from its core, `AgentCore::poll_step`, such
    // seeds are rarer: 3 in the first 322, where 22 and 24 were before; 93, 304 and 321 until
    // `append-in-doubt`, `slow-step` and `pool-move` joined `all`; 262, 278 and 650 until
    // `rebuild` did: 17 in the first 1,000 now; 108 until a step's plan and gate took one
    // fsync, where 203 shows it.)
    for seed in [6, 161, 203] {
        let pinned = sweep(&config(Mode::Onprem), seed..seed + 1);
        assert_eq!(kinds(&pinned), limit, "seed {seed}: a frozen host's answer, and nothing else");
        assert!(pinned.iter().all(|r| !r.failed()), "seed {seed}");
    }
}

#[test]
fn without_faults_nothing_is_violated_and_everything_converges_fast() {
    let config = SimConfig { faults: FaultSet(Default::default()), ..SimConfig::default() };
    for r in sweep(&config, 0..20) {
        assert_eq!(r.violations_total, 0, "seed {}: {:?}", r.seed, r.violations);
        assert!(
            r.converged_after_rounds.is_some_and(|n| n <= 40),
            "seed {}: {:?}",
            r.seed,
            r.converged_after_rounds
        );
    }
}

/// Every seed that ever failed during development, with what it exposed. They must stay green.
const PINNED: &[(Mode, u64, &str)] = &[
    (Mode::Cloud, 0, "a release overtook an acquire in flight: one call per address at a time"),
    (Mode::Cloud, 3, "same, the late acquire left a NIC holding an undesired address"),
    (Mode::Cloud, 5, "a late unassign of an old epoch emptied the desired holder's address"),
    (Mode::Cloud, 14, "a call from before a crash landed after it: observed holdings must be released"),
    (Mode::Onprem, 0, "a late proxy-arp-add after the release: two entries left"),
    (Mode::Onprem, 4, "an undesired address kept by a node that never recorded the capture"),
    (Mode::Onprem, 10, "a lost action-result: confirmations must be re-reported"),
    (Mode::Onprem, 14, "a host crashed while frozen kept its proxy entry: the agent starts fail-closed"),
    (Mode::OnpremNoAuthority, 2, "drift on a deleted pool must be repaired too"),
    (Mode::PausedCall, 0, "a node re-stalled during the liveness phase: faults must stop"),
    (Mode::PausedCall, 5, "same"),
    (Mode::PausedCall, 6, "a retired address captured by a stalled node"),
    (Mode::PausedCall, 14, "an undesired address held by a stalled node"),
    (Mode::OnpremNoAuthority, 3, "reconcile_due ignoring the plan generation: a hand-over unplanned"),
    (
        Mode::Cloud,
        60,
        "a resume's zombie pass followed past a fence and let the call in flight land (stale-call-landed)",
    ),
    (
        Mode::Cloud,
        40723,
        "the model appended a cancelled call's result between a head confirmation and its calls",
    ),
    (Mode::Cloud, 55712, "same, in a resume's zombie pass"),
];
// The seeds above were found with the draws of their day; since the simulator draws read sizes,
// lagging replicas, batches and requeues (issue 22) they replay other runs, and stay pinned as
// seeds that must stay green.

/// `store-rollback`: the log goes back under the running fleet (etcd wiped, or restored from an
/// older snapshot). Every node's store checks the log against its anchor with the fleet store's
/// own check (`tenure_core::anchor`) and refuses it; nothing acts on the shorter log, and after
/// the operator's recovery the fleet converges. With the check off (the safety issue's fix
/// reverted), nodes act on a log that is not the head's: cloud seed 0 and onprem seed 23 make
/// stale calls (cloud 2 before `rebuild` joined `all`; cloud 0 before the simulator's operator met the agent's submit check and a pool
/// that only shrinks was applied once; cloud 0 and onprem 5 before `append-in-doubt`, `slow-step` and `pool-move` joined `all`; cloud 3
/// and onprem 2 before the simulator ran the agent's step from its core; onprem 4 before a step's
/// plan and gate took one fsync).
/// `TENURE_SIM_ROLLBACK_SEEDS=N` scales the sweep (default 300 per mode).
#[test]
fn a_log_that_went_back_is_refused_by_every_node() {
    let seeds = env_u64("TENURE_SIM_ROLLBACK_SEEDS", 300);
    let faults: FaultSet = "all,store-rollback".parse().expect("fault names");
    for mode in [Mode::Cloud, Mode::Onprem] {
        let config = SimConfig { mode, faults: faults.clone(), ..SimConfig::default() };
        let reports = sweep(&config, 0..seeds);
        assert_eq!(report_failures(&config, &reports), Vec::<u64>::new(), "{mode}: failing seeds");
        let rollbacks: u64 = reports.iter().map(|r| r.rollbacks).sum();
        let refusals: u64 = reports.iter().map(|r| r.refusals).sum();
        assert!(rollbacks > 0 && refusals > 0, "{mode}: {rollbacks} rollbacks, {refusals} refusals");
        let unchecked = SimConfig { check_anchor: false, ..config };
        // (Onprem 4 until a step's plan and gate took one fsync.)
        let seed = if mode == Mode::Cloud { 0 } else { 23 };
        let r = run_seed(seed, &unchecked);
        assert!(r.rollbacks > 0, "{mode} seed {seed}: the log went back");
        assert!(
            count(std::slice::from_ref(&r), ViolationKind::StaleExecution) > 0,
            "{mode} seed {seed} without the anchor check: {:?}",
            r.violation_counts
        );
    }
}

/// The calls the agent never hears the end of (cancelled in flight, given up at their deadline)
/// are modelled: a cloud sweep with all faults records some in doubt.
#[test]
fn calls_in_doubt_are_simulated() {
    let reports = sweep(&config(Mode::Cloud), 0..20);
    let in_doubt: u64 = reports.iter().map(|r| r.calls_in_doubt).sum();
    assert!(in_doubt > 0, "no call was cancelled or given up in 20 seeds");
    assert!(reports.iter().all(|r| !r.failed()));
}

/// A store that does not answer (`append-in-doubt`: a step's batch lost, landed unheard, or
/// landing late, then retried alone and unchanged) and a loop stuck in a store call longer than
/// the heartbeat TTL (`slow-step`) are injected in both fleet kinds, with operators moving
/// addresses between pools (`pool-move`) and the faults they meet in production, and nothing is
/// violated; every seed converges.
#[test]
fn a_store_that_does_not_answer_or_is_slow_is_simulated() {
    let faults: FaultSet = "append-in-doubt,slow-step,pool-move,crash,drain,pool-churn,vrrp,result-delay"
        .parse()
        .expect("fault names");
    for mode in [Mode::Cloud, Mode::Onprem] {
        let config = SimConfig { mode, faults: faults.clone(), ..SimConfig::default() };
        let reports = sweep(&config, 0..40);
        assert_eq!(report_failures(&config, &reports), Vec::<u64>::new(), "{mode}: failing seeds");
        for fault in ["append-in-doubt", "slow-step", "pool-move"] {
            let injected: u64 = reports.iter().filter_map(|r| r.faults.get(fault)).sum();
            assert!(injected > 0, "{mode}: no {fault} in 40 seeds");
        }
    }
}

#[test]
fn pinned_seeds_stay_green() {
    for (mode, seed, why) in PINNED {
        let config = config(*mode);
        let r = run_seed(*seed, &config);
        assert!(!r.failed(), "pinned {mode} seed {seed} ({why}) failed again: {:?}", r.unexpected().next());
    }
}

/// Ordinary hand-overs only (drains and health flaps, desire bursts, late, duplicated or lost
/// results, late inventory) are never drift: drift repair must not re-capture once. Seed 28 with
/// drain and result-delay re-captured under issue 7's rule (an old holder whose acquire result
/// had not arrived counted as a foreign holding); issue 11's rule does not.
#[test]
fn hand_overs_alone_never_recapture() {
    let faults: FaultSet = "drain,health,desire-burst,result-delay,result-duplicate,inventory-delay"
        .parse()
        .expect("fault names");
    let config = SimConfig { mode: Mode::Cloud, faults, ..SimConfig::default() };
    for r in sweep(&config, 0..40) {
        assert_eq!(r.violations_total, 0, "seed {}: {:?}", r.seed, r.violations);
        assert_eq!(r.recaptures, 0, "seed {}: a hand-over re-captured", r.seed);
    }
    let pinned = SimConfig {
        mode: Mode::Cloud,
        faults: "drain,result-delay".parse().expect("fault names"),
        ..SimConfig::default()
    };
    assert_eq!(run_seed(28, &pinned).recaptures, 0, "seed 28, drain and result-delay");
}
