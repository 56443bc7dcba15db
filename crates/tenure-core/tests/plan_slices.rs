//! Planning a slice at a time (issue 24): the slices of one pass over an unchanged view plan
//! exactly what one whole plan does — whatever the slice size, over random logs with pools
//! applied and deleted, two of them listing the same addresses on one provider, drift repair's
//! observations, holds, approvals, and executed calls — and a driver's pass of slices (a due
//! plan, or the requeue's) ends, imports nothing a whole reconcile did not, and is followed by
//! another when the view moves or the node must plan again.
//!
//! Over 600 lines: one rig (random logs, drivers and their passes) shared by every case; a second
//! binary would cost a link.

use std::net::IpAddr;

use proptest::prelude::*;
use tenure_core::driver::{DriverOptions, NodeDriver};
use tenure_core::federation::Federation;
use tenure_core::journal::EntryState;
use tenure_core::journal::MemoryJournalStore;
use tenure_core::log::{ActionOutcome, EventKind};
use tenure_core::log_store::MemoryLog;
use tenure_core::model::{Approval, NodeSpec, PoolSpec, ProviderKind, ProviderSpec};
use tenure_core::node::{NodeEngine, ReconcileReport, SWEEP_ENTRIES_PER_POSITION};
use tenure_core::planner::{self, PlanCursor};

mod common;
use common::{
    Step, address, append, apply, driver, driver_with_drift, log, node, pool, registry, rows, step,
};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// After every step of a random log, the slices of `max` positions from the start until
    /// the cursor is done plan what the whole plan plans (as a set of keys, with their
    /// approval, and the same earliest hold ending), every position once.
    #[test]
    fn the_slices_of_a_pass_plan_what_the_whole_plan_plans(
        steps in prop::collection::vec(step(), 0..24),
        max in 1..5_usize,
        drift_repair in any::<bool>(),
    ) {
        let mut log = log();
        let mut a = driver_with_drift("a", drift_repair);
        let mut at_ms = 10;
        for step in &steps {
            at_ms = apply(&mut log, &mut a, at_ms + 1, step);
            a.follow(&log).expect("readable");
            let view = a.view();
            let node = view.node_id("a").expect("a is known");
            let captured = a.engine().captured();
            let whole = planner::plan(view, node, captured);
            let (mut sliced, mut wake, mut cursor, mut slices) = (Vec::new(), None::<u64>, PlanCursor::default(), 0);
            loop {
                let (plan, next) = planner::plan_slice(view, node, captured, &cursor, max);
                slices += 1;
                wake = match (wake, plan.wake_at_ms()) {
                    (Some(w), Some(p)) => Some(w.min(p)),
                    (w, p) => w.or(p),
                };
                sliced.extend(plan.actions);
                prop_assert!(slices <= 64, "the pass ends");
                if next.is_done() {
                    break;
                }
                cursor = next;
            }
            let positions = view.pools().values().map(|p| p.addresses.len()).sum::<usize>().max(captured.len());
            prop_assert!(slices <= positions / max + 1, "{} slices for {} positions of {}", slices, positions, max);
            prop_assert_eq!(rows(&sliced), rows(&whole.actions), "after {:?}", step);
            // A NIC holds an address, not a pool's copy of it (SPEC 13): what drift repair saw
            // is released through one pool, even when a deleted pool and a live one both list it.
            let mut released: Vec<(IpAddr, &str)> = whole
                .actions
                .iter()
                .filter(|planned| !planned.stamp.verb.is_acquire())
                .map(|planned| (planned.stamp.address, planned.stamp.pool))
                .collect();
            released.sort_unstable();
            released.dedup();
            let addresses: std::collections::BTreeSet<IpAddr> = released.iter().map(|(a, _)| *a).collect();
            prop_assert_eq!(addresses.len(), released.len(), "released through two pools: {:?}", released);
            prop_assert_eq!(wake, whole.wake_at_ms(), "the earliest hold ending, after {:?}", step);
        }
    }
}

/// A driver's pass of slices over an unchanged view ends after as many slices as its walks
/// need, imports nothing the whole reconcile before it did not, and leaves the reconcile not
/// due; a change in between does not stop it, and another pass begins at its end.
#[test]
fn a_pass_of_slices_ends_imports_nothing_new_and_another_follows_a_change() {
    let mut log = log();
    let mut a = driver("a");
    let mut at_ms = 10;
    for step in [Step::Execute, Step::Execute] {
        at_ms = apply(&mut log, &mut a, at_ms + 1, &step);
    }
    a.follow(&log).expect("readable");
    a.reconcile().expect("memory").expect("not blocked");
    assert!(!a.reconcile_due());
    // No pass begun: nothing to do.
    let idle = a.requeue(4).expect("memory").expect("not blocked");
    assert!(idle.done && idle.report == ReconcileReport::default(), "{idle:?}");
    assert!(!a.requeue_under_way());
    a.begin_requeue();
    // Nine positions in the pools' walk (6 + 3 addresses), six in the captured set: slices of 4.
    let mut turns = 0;
    loop {
        let requeued = a.requeue(4).expect("memory").expect("not blocked");
        turns += 1;
        assert!(requeued.report.imported.is_empty(), "nothing new: {:?}", requeued.report);
        assert!(!a.reconcile_due(), "a slice leaves the last whole plan's record");
        if requeued.done {
            break;
        }
        assert!(a.requeue_under_way());
        assert!(turns < 10, "the pass ends");
    }
    assert_eq!(a.engine().captured().len(), 6, "a holds edge's addresses");
    assert_eq!(turns, 3, "9 positions of the pools' walk, 4 a slice");
    assert!(!a.requeue_under_way());
    assert!(a.requeue(4).expect("memory").expect("not blocked").done, "the pass is over: nothing more");
    // A pass begun, then the view moves in a way it cannot name by position (a restore's
    // `tokens-raised`: every token): the pass goes on to its end (its later slices plan from the
    // new view), which leaves the plan due; the next call begins another pass, whose end records
    // the new plan.
    a.begin_requeue();
    assert!(!a.requeue(4).expect("memory").expect("not blocked").done);
    append(&mut log, at_ms + 1, EventKind::TokensRaised { by: 1 });
    a.follow(&log).expect("readable");
    assert!(a.whole_plan_due());
    let (turns, _) = pass(&mut a);
    assert_eq!(turns, 2, "the pass ends where it would have: 4 of 9 positions were done");
    assert!(a.whole_plan_due(), "its first slice planned from the view before the raise");
    assert!(a.requeue_under_way(), "the next pass began at once");
    let (turns, _, imported) = pass_imports(&mut a);
    assert_eq!(turns, 3, "a whole pass");
    assert!(
        imported.iter().filter(|key| key.starts_with("edge/10.0.0.1/")).count() == 2,
        "the acquires under the raised tokens: {imported:?}"
    );
    assert!(!a.reconcile_due());
    assert!(!a.requeue_under_way());
}

/// A change the view names by position (an address undesired and desired again, a drain) is
/// planned at the next call, those positions alone, `max` at a time — no pass: the plan of
/// everything is not due. Entries waiting for an approval that the change made stale are swept.
#[test]
fn a_change_the_view_names_is_planned_at_the_next_call_without_a_pass() {
    let mut log = log();
    let mut a = driver("a");
    a.follow(&log).expect("readable");
    pass(&mut a);
    assert!(!a.reconcile_due());
    let now = a.view().stream_time_ms();
    append(&mut log, now + 1, EventKind::Undesire { pool: "edge".into(), address: address(0) });
    append(&mut log, now + 2, EventKind::Desire { pool: "edge".into(), address: address(0) });
    append(&mut log, now + 3, EventKind::Undesire { pool: "west".into(), address: address(6) });
    a.follow(&log).expect("readable");
    assert!(a.reconcile_due() && a.requeue_under_way() && !a.whole_plan_due());
    let requeued = a.requeue(4).expect("memory").expect("not blocked");
    assert!(!requeued.done, "positions were planned: call again");
    let imported = &requeued.report.imported;
    assert_eq!(imported.len(), 2, "the new acquire of 10.0.0.1 alone: {imported:?}");
    assert!(
        imported.iter().all(|key| key.starts_with("edge/10.0.0.1/") && key.ends_with("epoch:3")),
        "{imported:?}"
    );
    let swept = &requeued.report.swept;
    assert!(!swept.is_empty() && swept.iter().all(|key| key.starts_with("west/10.0.0.7/")), "{swept:?}");
    assert!(!a.reconcile_due() && !a.requeue_under_way(), "nothing else is due");
    let requeued = a.requeue(4).expect("memory").expect("not blocked");
    assert!(requeued.done && requeued.report == ReconcileReport::default(), "{requeued:?}");
    // A drain names every address of the node: four positions a call.
    append(&mut log, now + 4, EventKind::Drain { node: "a".into() });
    a.follow(&log).expect("readable");
    let mut calls = 0;
    while a.requeue_under_way() {
        let requeued = a.requeue(4).expect("memory").expect("not blocked");
        calls += 1;
        assert!(requeued.report.imported.len() <= 8, "four positions at most: {requeued:?}");
        assert!(calls < 10);
    }
    assert_eq!(calls, 3, "nine addresses named, four a call");
    assert!(!a.reconcile_due());
}

/// A plan that is due begins a pass of slices, and its end records the plan — unless something
/// the pass's earlier slices could not see made the node plan again (a result that contradicts
/// the view): then the plan stays due and another pass begins at once. A restored view drops a
/// pass under way. A failed call's retry woken during a pass is not lost when the pass's end
/// records its plan.
#[test]
fn a_due_plan_is_a_pass_and_its_end_records_the_plan_unless_the_node_must_plan_again() {
    let mut log = log();
    let mut a = driver("a");
    a.follow(&log).expect("readable");
    assert!(a.reconcile_due(), "never planned");
    let (turns, _) = pass(&mut a);
    assert_eq!(turns, 3, "the due plan is a pass of slices");
    assert!(!a.reconcile_due() && !a.requeue_under_way());
    // A result that contradicts the view during a pass (an acquire lands after its address was
    // undesired, before the pass began): the pass's end does not count as the plan, and the
    // next pass begins at once.
    a.start_execution().expect("memory").expect("not blocked");
    let call = a.poll_actions(1, None).expect("memory").pop().expect("a call is ready");
    assert_eq!(call.address, address(0));
    let now = a.view().stream_time_ms();
    append(&mut log, now + 1, EventKind::Undesire { pool: "edge".into(), address: address(0) });
    a.follow(&log).expect("readable");
    a.begin_requeue();
    assert!(!a.requeue(4).expect("memory").expect("not blocked").done, "the first slice");
    a.handle_result(&call.idempotency_key(), ActionOutcome::Executed, "ok".into()).expect("in flight");
    let (turns, _) = pass(&mut a);
    assert_eq!(turns, 2, "the pass goes on to its end");
    assert!(a.reconcile_due() && a.requeue_under_way(), "the plan is due again: the next pass began");
    pass(&mut a);
    assert!(!a.reconcile_due() && !a.requeue_under_way());
    // A view restored during a pass drops the pass: the next begins from the first position.
    a.begin_requeue();
    assert!(!a.requeue(4).expect("memory").expect("not blocked").done);
    let snapshot = a.view().snapshot();
    let applied = a.applied_index().expect("applied");
    a.restore_snapshot(&snapshot, applied).expect("restores");
    assert!(a.reconcile_due() && !a.requeue_under_way());
    let (turns, _) = pass(&mut a);
    assert_eq!(turns, 3, "a whole pass");
    assert!(!a.reconcile_due());
    // A call fails during a pass: it is retried a second of stream time later (no backoff in
    // this engine), pass or not.
    a.start_execution().expect("memory").expect("not blocked");
    let call = a.poll_actions(1, None).expect("memory").pop().expect("a call is ready");
    a.begin_requeue();
    assert!(!a.requeue(4).expect("memory").expect("not blocked").done);
    a.handle_result(&call.idempotency_key(), ActionOutcome::Failed, "refused".into()).expect("in flight");
    pass(&mut a);
    assert!(!a.reconcile_due(), "the retry is not due yet");
    let now = a.view().stream_time_ms();
    append(&mut log, now + 1_000, EventKind::Heartbeat { node: "a".into() });
    a.follow(&log).expect("readable");
    assert!(a.reconcile_due(), "the failed call's retry woke the node");
}

/// An acquire in doubt counted as held during a pass, after the slice that planned its address
/// (its call came back cancelled, stale since before the pass began), leaves the plan due at the
/// pass's end — the view did not move during the pass — and the next pass plans its release.
#[test]
fn an_acquire_counted_as_held_during_a_pass_leaves_the_plan_due() {
    let mut log = log();
    let mut a = driver("a");
    a.follow(&log).expect("readable");
    pass(&mut a);
    a.start_execution().expect("memory").expect("not blocked");
    let call = a.poll_actions(1, None).expect("memory").pop().expect("a call is ready");
    assert_eq!(call.address, address(0), "the first position's acquire");
    append(&mut log, 20, EventKind::Drain { node: "a".into() });
    a.follow(&log).expect("readable");
    assert!(a.reconcile_due());
    // The drain names the addresses (the first four are planned at the first call, before the
    // call's result): a pass under way as the result comes back.
    a.begin_requeue();
    assert!(!a.requeue(4).expect("memory").expect("not blocked").done, "the first slice passed it");
    a.handle_in_doubt_result(&call.idempotency_key(), "cancelled: stale").expect("in flight");
    assert!(
        a.engine().captured().contains_key(&(tenure_core::names::shared("sim1"), address(0))),
        "counted as held"
    );
    pass(&mut a);
    assert!(a.reconcile_due(), "its release is not planned yet");
    // Past edge's 500 ms hold: the release is due when planned.
    append(&mut log, 1_000, EventKind::Heartbeat { node: "a".into() });
    a.follow(&log).expect("readable");
    let (_, _, imported) = pass_imports(&mut a);
    assert!(
        imported.iter().any(|key| key.starts_with("edge/10.0.0.1/unassign")),
        "the next pass plans the release"
    );
    assert!(!a.reconcile_due());
}

/// An approval that lands during a pass is promoted without waiting for the pass's end: the
/// view moved while entries were pending.
#[test]
fn an_approval_during_a_pass_is_due_for_promotion_at_once() {
    let mut log = log();
    let mut a = driver("a");
    a.follow(&log).expect("readable");
    pass(&mut a);
    a.start_execution().expect("memory").expect("not blocked");
    assert!(!a.promotion_due(), "promoted on this view");
    let pending: Vec<String> = a
        .engine()
        .entries()
        .filter(|e| e.state == tenure_core::journal::EntryState::Pending)
        .map(|e| e.action.idempotency_key().to_string())
        .collect();
    assert!(!pending.is_empty(), "west asks for approval");
    a.begin_requeue();
    assert!(!a.requeue(4).expect("memory").expect("not blocked").done);
    let now = a.view().stream_time_ms();
    append(&mut log, now + 1, EventKind::Approve { idempotency_key: pending[0].clone() });
    a.follow(&log).expect("readable");
    assert!(a.requeue_under_way() && a.promotion_due(), "due while the pass goes on");
    let promoted = a.start_execution().expect("memory").expect("not blocked");
    assert_eq!(promoted, vec![pending[0].clone()]);
    assert!(!a.promotion_due());
}

/// Calls [`NodeDriver::requeue`] with slices of 4 until the pass ends. Returns how many calls it
/// took and the earliest hold ending the slices planned.
fn pass(a: &mut NodeDriver<MemoryJournalStore>) -> (usize, Option<u64>) {
    let (turns, wake, _) = pass_imports(a);
    (turns, wake)
}

/// [`pass`], and the keys its slices imported.
fn pass_imports(a: &mut NodeDriver<MemoryJournalStore>) -> (usize, Option<u64>, Vec<String>) {
    let (mut turns, mut wake, mut imported) = (0, None::<u64>, Vec::new());
    loop {
        let requeued = a.requeue(4).expect("memory").expect("not blocked");
        turns += 1;
        if let Some(at) = requeued.report.wake_at_ms() {
            wake = Some(wake.map_or(at, |w| w.min(at)));
        }
        imported.extend(requeued.report.imported.iter().map(ToString::to_string));
        if requeued.done {
            return (turns, wake, imported);
        }
        assert!(turns < 10, "the pass ends");
    }
}

/// What drift repair saw on the NIC is released once, through the first pool (by name) of the
/// provider that lists the address — here `east` and `edge` both do — by
/// the whole plan and by every slicing of it.
#[test]
fn an_address_seen_on_the_nic_and_listed_by_two_pools_is_released_through_one() {
    let mut log = log();
    let mut a = driver("a");
    let mut at_ms = 10;
    for step in [Step::Apply("east"), Step::Drain("a"), Step::Inventory(4, vec!["a"]), Step::Wait(600)] {
        at_ms = apply(&mut log, &mut a, at_ms + 1, &step);
    }
    a.follow(&log).expect("readable");
    let view = a.view();
    assert!(view.pools().get("east").is_some_and(|east| east.addresses.contains_key(&address(4))));
    let node = view.node_id("a").expect("a is known");
    let captured = a.engine().captured();
    assert!(captured.is_empty());
    for max in [1, 2, 5, usize::MAX] {
        let (mut pools, mut cursor) = (Vec::new(), PlanCursor::default());
        loop {
            let (plan, next) = planner::plan_slice(view, node, captured, &cursor, max);
            pools.extend(plan.actions.iter().map(|p| (p.stamp.pool.to_owned(), p.stamp.address)));
            if next.is_done() {
                break;
            }
            cursor = next;
        }
        pools.dedup();
        assert_eq!(pools, vec![("east".to_owned(), address(4))], "slices of {max}");
    }
}

/// A slice's compaction looks at a few entries at a time, from where the last look stopped:
/// over enough slices it drops what one whole reconcile's compaction drops (the oldest finished,
/// superseded entries), even when the oldest entries of the journal may never go.
#[test]
fn the_compaction_of_slices_drops_what_a_whole_compaction_drops() {
    // a captures 10.0.0.1 first (its entries, the oldest, stay current: never dropped), then the
    // other five, releases them and captures them again: the first captures of those five and
    // their releases are superseded. Journaled with room for all of it.
    let mut roomy = driver("a");
    let mut log = log();
    let mut at_ms = 10;
    let others = |make: fn(&'static str, usize) -> Step| (1..6).map(move |i| make("edge", i));
    let steps: Vec<Step> = others(Step::Undesire)
        .chain([Step::Execute])
        .chain(others(Step::Desire))
        .chain([Step::Execute])
        .chain(others(Step::Undesire))
        .chain([Step::Wait(600), Step::Execute])
        .chain(others(Step::Desire))
        .chain([Step::Execute])
        .collect();
    for step in &steps {
        at_ms = apply(&mut log, &mut roomy, at_ms + 1, step);
    }
    // The same journal opened twice with a retention of 8 entries.
    let reopened = || {
        let store = roomy.engine().store().clone();
        let engine = NodeEngine::open("a", store).expect("memory").with_retention(8);
        let mut driver = NodeDriver::new(engine, registry(), DriverOptions::default());
        driver.follow(&log).expect("readable");
        driver
    };
    let (mut whole, mut sliced) = (reopened(), reopened());
    let keys = |driver: &NodeDriver<MemoryJournalStore>| -> Vec<String> {
        driver.engine().entries().map(|e| e.action.idempotency_key().to_string()).collect()
    };
    let view = whole.view().clone();
    let before = whole.engine().entries().count();
    let report = whole.engine_mut().reconcile(&view, &view).expect("memory");
    assert!(report.compacted > 0, "the whole reconcile compacts: {before} entries, {report:?}");
    let (mut cursor, mut slices, mut compacted) = (PlanCursor::default(), 0, 0);
    let mut dropping_slices = 0;
    while compacted < report.compacted {
        let (slice, next) = sliced.engine_mut().reconcile_slice(&view, &view, &cursor, 2).expect("memory");
        // Each slice drops at once what its look found (at most the 2 entries it looked at), the
        // oldest first: what is dropped stays dropped, whatever happens to the look.
        assert!(slice.compacted <= 2, "dropped {} in one slice", slice.compacted);
        dropping_slices += usize::from(slice.compacted > 0);
        compacted += slice.compacted;
        cursor = if next.is_done() { PlanCursor::default() } else { next };
        slices += 1;
        assert!(slices < 200, "compacted {compacted} of {} in {slices} slices", report.compacted);
    }
    assert!(slices > 1, "a look of 2 entries at a time takes more than one slice");
    assert!(dropping_slices > 1, "dropped slice by slice, not at the look's end");
    assert_eq!(compacted, report.compacted);
    assert_eq!(keys(&sliced), keys(&whole), "the same entries dropped");
}

/// A node that may not reconcile has no pass under way: a caller that comes back while one is
/// would spin on a frozen node.
#[test]
fn a_paused_node_has_no_requeue_pass_under_way() {
    let mut log = log();
    let mut a = driver("a");
    apply(&mut log, &mut a, 11, &Step::Execute);
    a.follow(&log).expect("readable");
    a.reconcile().expect("memory").expect("not blocked");
    a.begin_requeue();
    assert!(!a.requeue(2).expect("memory").expect("not blocked").done);
    assert!(a.requeue_under_way());
    a.pause();
    assert!(!a.requeue_under_way(), "paused: nothing under way");
    assert!(a.requeue(2).expect("memory").is_err(), "blocked");
    a.resume().expect("paused");
    a.finish_resume();
    assert!(!a.requeue_under_way(), "the blocked turn ended the pass");
}

/// The retries of failed entries run once per pass, on its first slice: a failed on-prem call
/// (no backoff) is approved again by that slice, and a failure of it after does not make every
/// later slice of the pass approve it again (each would be a retry at once, in a loop:
/// `RETRY_WITHOUT_BACKOFF_MS` spaces them).
#[test]
fn the_retries_of_a_pass_run_on_its_first_slice_only() {
    let registry = Federation::new(
        &[NodeSpec { provider: "lan".into(), ..node("a", 10) }],
        &[ProviderSpec { name: "lan".into(), kind: ProviderKind::SimOnprem }],
    );
    let mut a = NodeDriver::new(
        NodeEngine::open("a", MemoryJournalStore::new()).expect("memory"),
        registry,
        DriverOptions::default(),
    );
    let mut log = MemoryLog::new();
    let lan = PoolSpec {
        provider: "lan".into(),
        members: vec!["a".into()],
        ..pool("lan", 0..6, 0, Approval::Auto)
    };
    append(&mut log, 0, EventKind::PoolApplied { spec: Box::new(lan) });
    append(&mut log, 1, EventKind::Heartbeat { node: "a".into() });
    a.follow(&log).expect("readable");
    a.reconcile().expect("memory").expect("not blocked");
    a.start_execution().expect("memory").expect("not blocked");
    let first = a.poll_actions(1, None).expect("memory").remove(0).idempotency_key();
    a.handle_result(&first, ActionOutcome::Failed, "refused".into()).expect("in flight");
    assert!(!a.reconcile_due(), "the retry waits RETRY_WITHOUT_BACKOFF_MS of stream time");
    a.begin_requeue();
    let (mut retried, mut slices) = (Vec::new(), 0);
    loop {
        let turn = a.requeue(1).expect("memory").expect("not blocked");
        slices += 1;
        retried.extend(turn.report.retried.clone());
        if slices == 1 {
            assert_eq!(turn.report.retried, vec![first.clone()], "the first slice sweeps: {turn:?}");
            // It fails again at once.
            a.start_execution().expect("memory").expect("not blocked");
            let again = a.poll_actions(1, None).expect("memory");
            assert_eq!(again.iter().map(|x| x.idempotency_key()).collect::<Vec<_>>(), vec![first.clone()]);
            a.handle_result(&first, ActionOutcome::Failed, "refused".into()).expect("in flight");
        }
        if turn.done {
            break;
        }
    }
    assert!(slices > 2, "{slices} slices");
    assert_eq!(retried, vec![first], "approved again once in the pass");
}

/// A pass sweeps the open entries its first slice found a window at a time
/// ([`SWEEP_ENTRIES_PER_POSITION`] × `max` a slice), and does not end before its sweep did: no
/// slice goes through more (early in a capture of a million addresses, millions are open), and
/// together the slices sweep what one whole reconcile sweeps. Approved entries made stale by
/// changes planned position by position stay open until a pass's sweep (the gate refuses them
/// before any call): here ten desire cycles of two addresses leave forty, for a walk of two
/// positions.
#[test]
fn a_pass_sweeps_the_open_entries_a_window_a_slice_and_ends_after_its_sweep() {
    let mut log = MemoryLog::new();
    append(&mut log, 0, EventKind::PoolApplied { spec: Box::new(pool("pair", 0..2, 0, Approval::Auto)) });
    append(&mut log, 1, EventKind::Heartbeat { node: "a".into() });
    append(&mut log, 1, EventKind::Heartbeat { node: "b".into() });
    let (mut whole, mut sliced) = (driver("a"), driver("a"));
    for d in [&mut whole, &mut sliced] {
        d.follow(&log).expect("readable");
        d.reconcile().expect("memory").expect("not blocked");
    }
    for cycle in 0..10 {
        for i in 0..2 {
            let at_ms = 2 + cycle * 4 + i * 2;
            append(
                &mut log,
                at_ms,
                EventKind::Undesire { pool: "pair".into(), address: address(i as usize) },
            );
            append(
                &mut log,
                at_ms + 1,
                EventKind::Desire { pool: "pair".into(), address: address(i as usize) },
            );
        }
        for d in [&mut whole, &mut sliced] {
            d.follow(&log).expect("readable");
            while d.requeue_under_way() {
                d.requeue(1).expect("memory").expect("not blocked");
            }
        }
    }
    assert!(!sliced.whole_plan_due(), "named changes: no pass");
    let open = sliced.engine().entries().filter(|e| e.state == EntryState::Approved).count();
    assert_eq!(open, 44, "each cycle journaled two new acquires per address, none executed");
    let mut expected = whole.reconcile().expect("memory").expect("not blocked").swept;
    sliced.begin_requeue();
    let (mut swept, mut calls) = (Vec::new(), 0);
    loop {
        let requeued = sliced.requeue(1).expect("memory").expect("not blocked");
        calls += 1;
        let looked = requeued.report.swept.len() + requeued.report.promoted.len();
        assert!(looked <= SWEEP_ENTRIES_PER_POSITION, "one window a slice: {requeued:?}");
        swept.extend(requeued.report.swept);
        if requeued.done {
            break;
        }
        assert!(calls < 50, "the pass ends");
    }
    // The pass imports nothing new: its sweep goes through the 44 open entries, a window of
    // four a slice, and outlasts the plan's two slices of one position.
    assert_eq!(
        calls,
        44_usize.div_ceil(SWEEP_ENTRIES_PER_POSITION),
        "one window a slice until the sweep is done"
    );
    swept.sort();
    expected.sort();
    assert_eq!(expected.len(), 40, "the whole reconcile swept every entry of the old lines");
    assert_eq!(swept, expected, "the slices sweep what the whole reconcile swept");
    assert!(!sliced.reconcile_due() && sliced.engine().sweep_done());
}

/// Results the log never confirmed are re-reported by a pass of slices, each by the slice whose
/// part of the captured set holds it, once: together what a whole reconcile re-reports.
#[test]
fn a_pass_of_slices_re_reports_every_unconfirmed_result_once() {
    let mut a = NodeDriver::new(
        NodeEngine::open("a", MemoryJournalStore::new()).expect("memory"),
        registry(),
        DriverOptions { report_results: true },
    );
    let mut log = log();
    a.follow(&log).expect("readable");
    a.reconcile().expect("memory").expect("not blocked");
    a.start_execution().expect("memory").expect("not blocked");
    for action in a.poll_actions(64, None).expect("memory") {
        a.handle_result(&action.idempotency_key(), ActionOutcome::Executed, "ok".into()).expect("in flight");
    }
    // The results are lost (never appended): the log confirms nothing.
    while a.poll_append().is_some() {}
    append(&mut log, 20, EventKind::Heartbeat { node: "a".into() });
    a.follow(&log).expect("readable");
    let outbox = |a: &mut NodeDriver<MemoryJournalStore>| -> Vec<String> {
        std::iter::from_fn(|| a.poll_append())
            .map(|kind| match kind {
                EventKind::ActionResult { idempotency_key, .. } => idempotency_key,
                other => panic!("only results: {other:?}"),
            })
            .collect()
    };
    let mut whole = a.engine().unconfirmed_results(a.view());
    assert_eq!(whole.len(), 6, "edge's six addresses, each its last holding verb: {whole:?}");
    a.begin_requeue();
    let mut sliced = Vec::new();
    loop {
        let turn = a.requeue(4).expect("memory").expect("not blocked");
        sliced.extend(outbox(&mut a));
        if turn.done {
            break;
        }
    }
    whole.sort();
    sliced.sort();
    assert_eq!(sliced, whole);
}
