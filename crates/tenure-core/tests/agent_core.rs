//! The agent's core ([`AgentCore`]): the rules of a step that `tenure agent` and the simulator
//! both run — which nodes plan and how much, promotion, the sticky failure, when the head must be
//! confirmed, gating, results, and the journaling of a local withdrawal.

mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;

use tenure_core::agent::{
    AgentCore, CallOutcome, HeadConfirmed, HeadWanted, Planned, Step, StepOp, WITHDRAWN,
};
use tenure_core::driver::{DriverOptions, NodeDriver};
use tenure_core::federation::Federation;
use tenure_core::journal::{DurableNodeState, EntryState, JournalChange, JournalStore, MemoryJournalStore};
use tenure_core::log::{ActionOutcome, Event, EventKind};
use tenure_core::log_store::{Log, MemoryLog};
use tenure_core::model::{Approval, NodeSpec, PoolSpec, ProviderKind, ProviderSpec, StampedAction, Verb};
use tenure_core::node::NodeEngine;

/// A memory store whose commits fail once `failing` is set (a test double of a disk that fails);
/// it counts the commits no sync has followed yet.
#[derive(Debug, Default)]
struct FlakyStore {
    inner: MemoryJournalStore,
    failing: bool,
    unsynced: usize,
}

#[derive(Debug, thiserror::Error)]
#[error("disk full")]
struct DiskFull;

impl JournalStore for FlakyStore {
    type Error = DiskFull;
    fn load(&self) -> Result<DurableNodeState, DiskFull> {
        Ok(self.inner.load().expect("memory"))
    }
    fn commit(&mut self, change: &JournalChange) -> Result<(), DiskFull> {
        if self.failing {
            return Err(DiskFull);
        }
        self.inner.commit(change).expect("memory");
        self.unsynced += 1;
        Ok(())
    }
    fn sync(&mut self) -> Result<(), DiskFull> {
        if self.failing {
            return Err(DiskFull);
        }
        self.unsynced = 0;
        Ok(())
    }
}

const PROVIDER: &str = "sim1";

fn node() -> NodeSpec {
    common::node("a", 0)
}

fn addresses() -> Vec<IpAddr> {
    (0..4).map(common::address).collect()
}

fn log_with_pool() -> MemoryLog {
    let spec = PoolSpec { members: vec!["a".into()], ..common::pool("edge", 0..4, 0, Approval::Auto) };
    let mut log = MemoryLog::new();
    log.append(&Event { at_ms: 0, kind: EventKind::PoolApplied { spec: Box::new(spec) } }).expect("append");
    log.append(&Event { at_ms: 10, kind: EventKind::Heartbeat { node: "a".into() } }).expect("append");
    log
}

/// An agent of one node `a` that followed a log with a pool of four addresses.
fn core() -> (AgentCore<FlakyStore>, MemoryLog) {
    let registry =
        Federation::new(&[node()], &[ProviderSpec { name: PROVIDER.into(), kind: ProviderKind::SimCloud }]);
    let engine = NodeEngine::open("a", FlakyStore::default()).expect("memory");
    let mut core =
        AgentCore::new(vec![NodeDriver::new(engine, registry, DriverOptions { report_results: true })]);
    let log = log_with_pool();
    core.drivers_mut()[0].follow(&log).expect("readable");
    (core, log)
}

/// Plans slices of `slice` until a pass ends; returns how many steps it took.
fn plan_to_the_end(core: &mut AgentCore<FlakyStore>, slice: usize) -> usize {
    for steps in 1..=100 {
        let planned = core.plan(slice);
        assert!(planned.iter().all(|(_, p)| matches!(p, Planned::Planned(_))), "{planned:?}");
        if !core.planning_left() {
            return steps;
        }
    }
    panic!("a pass of four addresses never ended");
}

/// The proof that `core` followed `log` to its head (the shell confirmed it).
fn at_head(core: &AgentCore<FlakyStore>, log: &MemoryLog) -> HeadConfirmed {
    core.confirmed_at(log.head().expect("readable")).expect("every node followed the log")
}

fn verbs(actions: &[StampedAction]) -> Vec<Verb> {
    actions.iter().map(|a| a.verb).collect()
}

#[test]
fn a_due_node_plans_in_slices_promotes_and_wants_the_head_confirmed_before_its_calls() {
    let (mut core, log) = core();
    assert_eq!(core.head_wanted(false), None, "nothing planned: nothing to confirm");
    assert!(core.drivers()[0].step_due(), "a pool applied: a plan is due");
    plan_to_the_end(&mut core, 1);
    assert_eq!(core.plan(1).len(), 0, "nothing due any more: no node plans");
    assert_eq!(core.head_wanted(false), Some(HeadWanted::BeforeCalls), "calls wait for a confirmed head");
    let batch = core.poll_calls(&at_head(&core, &log), 0, 16, None);
    assert_eq!(verbs(&batch), vec![Verb::AssignSecondaryIp; 4]);
    assert_eq!(core.head_wanted(false), None, "every address has its call in flight");
}

#[test]
fn a_journal_that_fails_a_plan_fails_the_agent() {
    let (mut core, _log) = core();
    core.drivers_mut()[0].engine_mut().store_mut().failing = true;
    let planned = core.plan(1024);
    assert!(planned.iter().any(|(node, p)| *node == 0 && matches!(p, Planned::Failed)), "{planned:?}");
    assert_eq!(core.failed(), Some("node `a`: journal: journal store: disk full"));
    assert!(!core.fail("another reason".into()), "the first reason stays");
    assert_eq!(core.failed(), Some("node `a`: journal: journal store: disk full"));
}

#[test]
fn a_failed_journal_gates_and_plans_nothing_more_even_once_the_disk_recovers() {
    let (mut core, log) = core();
    plan_to_the_end(&mut core, 1024);
    core.drivers_mut()[0].engine_mut().store_mut().failing = true;
    let proof = at_head(&core, &log);
    assert!(core.poll_calls(&proof, 0, 16, None).is_empty(), "the gate's sync failed: nothing is called");
    assert_eq!(core.failed(), Some("node `a`: journal: journal store: disk full"));
    // The disk recovers; the agent does not, until restarted (a failed commit poisons the store).
    core.drivers_mut()[0].engine_mut().store_mut().failing = false;
    assert!(core.poll_calls(&proof, 0, 16, None).is_empty(), "a failed agent calls nothing");
    core.begin_requeue();
    assert!(core.plan(1024).is_empty(), "nor plans anything");
    assert!(!core.planning_left(), "and the loop does not come back for planning");
    assert_eq!(core.head_wanted(true), None, "nor confirms a head for the actions it still has ready");
}

#[test]
fn a_failed_agent_with_nothing_to_call_confirms_no_head() {
    let (mut core, _log) = core();
    core.fail("the log went back".into());
    assert_eq!(core.head_wanted(true), None, "a failed agent does not clear its health by a confirmation");
}

#[test]
fn a_failing_head_confirmation_is_asked_again_to_clear_with_nothing_to_call() {
    let (core, _log) = core();
    assert_eq!(core.head_wanted(true), Some(HeadWanted::ToClear));
    assert_eq!(core.head_wanted(false), None);
}

#[test]
fn a_node_frozen_after_its_plan_plans_whole_then_freezes() {
    let (mut core, _log) = core();
    core.freeze_after_plan(0);
    let planned = core.plan(1);
    match &planned[..] {
        [(0, Planned::Planned(requeued)), (0, Planned::Frozen)] => {
            assert!(requeued.done, "a whole plan, not a slice of one");
            assert_eq!(requeued.report.imported.len(), 8, "two verbs for each of four addresses");
        }
        other => panic!("{other:?}"),
    }
    assert!(core.drivers()[0].is_paused());
    assert!(core.plan(1).is_empty(), "frozen: it plans nothing");
}

#[test]
fn results_are_recorded_and_one_for_a_call_not_in_flight_is_ignored() {
    let (mut core, log) = core();
    plan_to_the_end(&mut core, 1024);
    let batch = core.poll_calls(&at_head(&core, &log), 0, 16, None);
    let key = &batch[0].idempotency_key();
    let executed = CallOutcome::Result { outcome: ActionOutcome::Executed, detail: "ok".into() };
    assert_eq!(core.handle_result(0, key, executed.clone()), Ok(true));
    assert_eq!(core.handle_result(0, key, executed), Ok(false), "a duplicate is ignored");
    let in_doubt = CallOutcome::InDoubt { reason: "deadline passed" };
    assert_eq!(core.handle_result(0, &batch[1].idempotency_key(), in_doubt), Ok(true));
    assert!(core.failed().is_none());
}

#[test]
fn a_local_withdrawal_journals_each_capture_withdrawn_as_an_executed_release() {
    let (mut core, log) = core();
    plan_to_the_end(&mut core, 1024);
    let proof = at_head(&core, &log);
    let batch = core.poll_calls(&proof, 0, 16, None);
    let first = batch[0].address;
    // The first address's acquire executed (captured); the three others are in flight.
    let executed = CallOutcome::Result { outcome: ActionOutcome::Executed, detail: "ok".into() };
    core.handle_result(0, &batch[0].idempotency_key(), executed.clone()).expect("recorded");
    let all: BTreeSet<IpAddr> = addresses().into_iter().collect();
    assert!(!core.captured_without_call(|p, a| p == PROVIDER && a != first), "no other capture yet");
    assert!(core.captured_without_call(|p, a| p == PROVIDER && a == first));
    // Its second verb goes out: captured, with a call in flight. A withdrawal records nothing for
    // it (the withdrawal goes round again once that call landed).
    let second = core.poll_calls(&proof, 0, 16, None);
    assert_eq!(second.iter().map(|a| a.address).collect::<Vec<_>>(), vec![first]);
    assert!(!core.captured_without_call(|p, _| p == PROVIDER), "its call is in flight");
    assert_eq!(core.record_withdrawal(PROVIDER, &all), 0);
    core.handle_result(0, &second[0].idempotency_key(), executed).expect("recorded");
    assert!(core.captured_without_call(|p, a| p == PROVIDER && a == first), "the call landed");
    assert_eq!(core.record_withdrawal("another", &all), 0, "another provider's withdrawal records nothing");
    assert_eq!(
        core.record_withdrawal(PROVIDER, &all),
        2,
        "the one capture without a call in flight: both verbs of its release"
    );
    assert!(!core.captured_without_call(|p, _| p == PROVIDER), "nothing captured is left without a call");
    let released = core.drivers()[0]
        .engine()
        .entries()
        .filter(|e| e.action.address == first && !e.action.verb.is_acquire())
        .filter(|e| e.state == EntryState::Executed && e.detail.as_deref() == Some(WITHDRAWN))
        .count();
    assert_eq!(released, 2, "an executed release that says why");
    assert!(core.failed().is_none());
}

/// Runs one step of `core`, answering its follows in turn from `follows` and its head
/// confirmation with `head` (confirmed, `log`'s head: the node followed it); returns the
/// operations it asked for, by name (`call` with the step's proof of a confirmed head,
/// `call unconfirmed` without).
fn run_step(core: &mut AgentCore<FlakyStore>, step: Step, follows: &[bool], head: bool) -> Vec<String> {
    run_step_at(core, step, follows, head, &log_with_pool()).0
}

/// [`run_step`] against `log`, and the proof its `Call` carried.
fn run_step_at(
    core: &mut AgentCore<FlakyStore>,
    step: Step,
    follows: &[bool],
    head: bool,
    log: &MemoryLog,
) -> (Vec<String>, Option<HeadConfirmed>) {
    core.begin_step(step);
    let mut follows = follows.iter();
    let mut ops = Vec::new();
    let mut called = None;
    while let Some(op) = core.poll_step() {
        ops.push(match op {
            StepOp::Append => "append".to_owned(),
            StepOp::Withdraw => "withdraw".to_owned(),
            StepOp::Follow => {
                core.followed(*follows.next().expect("a follow answered"));
                "follow".to_owned()
            }
            StepOp::Planned(_) => "planned".to_owned(),
            StepOp::ConfirmHead(why) => {
                let proof = if head { Some(at_head(core, log)) } else { None };
                core.head_confirmed(proof);
                format!("confirm-head {why:?}")
            }
            StepOp::Call(proof) => {
                let name = if proof.is_some() { "call" } else { "call unconfirmed" };
                called = proof;
                name.to_owned()
            }
        });
    }
    assert!(!core.step_under_way(), "a step that answered None is over");
    (ops, called)
}

const STEP: Step = Step { slice: 1024, calls: true, head_failing: false };

#[test]
fn a_step_appends_follows_plans_appends_follows_and_calls_at_a_confirmed_head() {
    let (mut core, log) = core();
    let (ops, proof) = run_step_at(&mut core, STEP, &[true, true], true, &log);
    assert_eq!(
        ops,
        [
            "append",
            "withdraw",
            "follow",
            "planned",
            "append",
            "follow",
            "withdraw",
            "confirm-head BeforeCalls",
            "call"
        ]
    );
    let proof = proof.expect("the step's proof of its head confirmation");
    assert_eq!(core.poll_calls(&proof, 0, 16, None).len(), 4, "the calls the step asked for");
}

#[test]
fn a_step_calls_nothing_on_a_view_it_cannot_stand_behind() {
    let (mut core, _log) = core();
    assert_eq!(
        run_step(&mut core, STEP, &[false], true),
        ["append", "withdraw", "follow"],
        "first follow failed"
    );
    let ops = run_step(&mut core, STEP, &[true, false], true);
    assert_eq!(ops, ["append", "withdraw", "follow", "planned", "append", "follow"], "second follow failed");
    let ops = run_step(&mut core, STEP, &[true, true], false);
    assert_eq!(
        ops.last().map(String::as_str),
        Some("confirm-head BeforeCalls"),
        "unconfirmed: no call: {ops:?}"
    );
    let shutting_down = Step { calls: false, ..STEP };
    let ops = run_step(&mut core, shutting_down, &[true, true], true);
    assert_eq!(ops, ["append", "withdraw", "follow", "append", "follow"], "shutting down: nothing called");
    core.fail("the log went back".into());
    let ops = run_step(&mut core, STEP, &[true, true], true);
    assert!(!ops.iter().any(|op| op.starts_with("confirm") || op == "call"), "failed: {ops:?}");
}

/// Planning commits without syncing; however a step ends — calls handed out, nothing to call,
/// a follow or the head confirmation failing after the plan, shutting down — it ends synced.
#[test]
fn every_step_ends_with_its_journal_synced() {
    let unsynced = |core: &AgentCore<FlakyStore>| core.drivers()[0].engine().store().unsynced;
    let ends: [(&str, Step, &[bool], bool); 4] = [
        ("shutting down", Step { calls: false, ..STEP }, &[true, true], true),
        ("second follow failed", STEP, &[true, false], true),
        ("head unconfirmed", STEP, &[true, true], false),
        ("calls", STEP, &[true, true], true),
    ];
    for (end, step, follows, head) in ends {
        let (mut core, _log) = core();
        // A slice of one address: planning commits, and a step is left to end.
        let step = Step { slice: 1, ..step };
        let ops = run_step(&mut core, step, follows, head);
        assert!(ops.contains(&"planned".to_owned()), "{end}: {ops:?}");
        assert_eq!(unsynced(&core), 0, "{end}: {ops:?}");
    }
    // Planning alone leaves its changes unsynced (the step's end syncs them).
    let (mut core, _log) = core();
    core.begin_step(STEP);
    while let Some(op) = core.poll_step() {
        match op {
            StepOp::Follow => core.followed(true),
            StepOp::Planned(_) => break,
            _ => {}
        }
    }
    assert!(unsynced(&core) > 0, "a plan commits");
}

#[test]
fn a_step_with_nothing_to_call_confirms_the_head_only_to_clear_a_failing_confirmation() {
    let (mut core, _log) = core();
    core.drivers_mut()[0].pause();
    let quiet = run_step(&mut core, STEP, &[true, true], true);
    assert_eq!(
        quiet,
        ["append", "withdraw", "follow", "planned", "append", "follow", "withdraw", "call unconfirmed"],
        "nothing to call: no confirmation, and the call pass gates nothing"
    );
    let failing = Step { head_failing: true, ..STEP };
    let ops = run_step(&mut core, failing, &[true, true], true);
    assert_eq!(ops[ops.len() - 2..], ["confirm-head ToClear", "call"], "confirmed: {ops:?}");
    // Unconfirmed, the step ends there: nothing is gated on a view it could not stand behind.
    let ops = run_step(&mut core, failing, &[true, true], false);
    assert_eq!(ops.last().map(String::as_str), Some("confirm-head ToClear"), "unconfirmed: {ops:?}");
}

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "not answered")]
fn a_shell_that_does_not_answer_a_follow_is_caught_in_a_debug_build() {
    let (mut core, _log) = core();
    core.begin_step(STEP);
    while let Some(op) = core.poll_step() {
        if matches!(op, StepOp::Follow) {
            break;
        }
    }
    core.poll_step();
}

#[test]
fn calls_are_gated_only_at_a_head_every_node_followed_to() {
    let (mut core, mut log) = core();
    plan_to_the_end(&mut core, 1024);
    log.append(&Event { at_ms: 20, kind: EventKind::Heartbeat { node: "a".into() } }).expect("append");
    let head = log.head().expect("readable");
    assert_eq!(core.confirmed_at(head), None, "the node has not followed to the head the shell confirmed");
    core.drivers_mut()[0].follow(&log).expect("readable");
    let proof = core.confirmed_at(head).expect("followed to it");
    assert_eq!(core.poll_calls(&proof, 0, 1, None).len(), 1, "one ready action gated");
    // A new step: the last step's proof gates nothing, calls or announcements.
    core.begin_step(STEP);
    assert!(core.poll_calls(&proof, 0, 16, None).is_empty(), "a proof of an earlier step");
    core.abandon_step();
    let proof = at_head(&core, &log);
    assert_eq!(core.poll_calls(&proof, 0, 16, None).len(), 3, "a new proof: the three left");
}
