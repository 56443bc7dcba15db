//! Calls in flight whose action went stale (SPEC 9): the driver names, after a catch-up, the calls
//! in flight that the fence rule now refuses — exactly those the gate would refuse if the call
//! were about to start, each once — so the runtime can cancel them. And an executed acquire that
//! outran a hand-over is noted for an inventory read at once.

use std::collections::BTreeSet;
use std::net::IpAddr;

use proptest::prelude::*;
use tenure_core::driver::{DriverOptions, NodeDriver, OutranAcquire};
use tenure_core::federation::Federation;
use tenure_core::fence::{self, FenceVerdict, StaleReason};
use tenure_core::journal::{COUNTED_AS_HELD, EntryState, JournalSeq, MemoryJournalStore, OUTCOME_UNKNOWN};
use tenure_core::log::{ActionOutcome, Event, EventKind};
use tenure_core::log_store::{Log, MemoryLog};
use tenure_core::model::{
    Approval, Authority, IdempotencyKey, NodeSpec, PoolSpec, ProviderKind, ProviderSpec, Verb,
};
use tenure_core::node::{NodeEngine, StaleCall};

const ADDRESSES: [&str; 3] = ["10.0.0.1", "10.0.0.2", "10.0.0.3"];

fn node(name: &str, priority: i64) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        provider: "sim1".into(),
        placement_group: "g1".into(),
        priority,
        nic: format!("eni-{name}"),
        capacity: None,
    }
}

fn registry() -> Federation {
    Federation::new(
        &[node("a", 10), node("b", 0)],
        &[ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }],
    )
    .with_drift_repair(true)
}

fn pool() -> PoolSpec {
    PoolSpec {
        name: "edge".into(),
        addresses: ADDRESSES.iter().map(|a| a.parse().expect("address")).collect(),
        provider: "sim1".into(),
        placement_group: "g1".into(),
        members: vec!["a".into(), "b".into()],
        authority: Authority::None,
        approval: Approval::Auto,
        deprovision_hold_ms: 0,
        heartbeat_ttl_ms: 3_000,
        promotion_hold_ms: 0,
        epoch_locking: true,
        prefer_nodes: vec![],
        preempt: false,
        auto_failover: true,
    }
}

fn driver(name: &str) -> NodeDriver<MemoryJournalStore> {
    let engine = NodeEngine::open(name, MemoryJournalStore::new()).expect("memory");
    NodeDriver::new(engine, registry(), DriverOptions { report_results: true })
}

/// A log with the pool applied and both nodes alive: `a` (priority 10) owns every address.
fn log() -> MemoryLog {
    let mut log = MemoryLog::new();
    append(&mut log, 0, EventKind::PoolApplied { spec: Box::new(pool()) });
    append(&mut log, 1, EventKind::Heartbeat { node: "a".into() });
    append(&mut log, 1, EventKind::Heartbeat { node: "b".into() });
    log
}

/// The keys of the actions `a` hands out now (up to 64).
fn polled_keys(a: &mut NodeDriver<MemoryJournalStore>) -> Vec<String> {
    a.poll_actions(64, None).expect("memory").into_iter().map(|x| x.idempotency_key().to_string()).collect()
}

fn append(log: &mut MemoryLog, at_ms: u64, kind: EventKind) {
    log.append(&Event { at_ms, kind }).expect("append");
}

/// `a` follows, plans and hands out its first batch: every address's assign is in flight.
fn in_flight(log: &MemoryLog) -> (NodeDriver<MemoryJournalStore>, Vec<String>) {
    let mut a = driver("a");
    a.follow(log).expect("readable");
    a.reconcile().expect("memory").expect("not blocked");
    a.start_execution().expect("memory").expect("not blocked");
    let batch = a.poll_actions(64, None).expect("memory");
    assert!(batch.iter().all(|action| action.verb == Verb::AssignSecondaryIp), "{batch:?}");
    assert_eq!(batch.len(), ADDRESSES.len());
    (a, batch.into_iter().map(|action| action.idempotency_key().to_string()).collect())
}

#[test]
fn a_call_in_flight_is_named_stale_once_the_view_fences_it_and_only_once() {
    let mut log = log();
    let (mut a, keys) = in_flight(&log);
    assert!(a.poll_stale_calls().is_empty(), "nothing moved: every call is current");
    append(&mut log, 20, EventKind::Drain { node: "a".into() });
    assert!(a.poll_stale_calls().is_empty(), "the view has not seen the drain yet");
    a.follow(&log).expect("readable");
    let stale = a.poll_stale_calls();
    let expected: Vec<StaleCall> = keys
        .iter()
        .map(|key| StaleCall {
            idempotency_key: IdempotencyKey::parse(key).expect("a key"),
            reason: StaleReason::StaleEpoch,
        })
        .collect();
    assert_eq!(stale, expected, "the drain moved every line: the first rule that holds is stale-epoch");
    assert!(a.poll_stale_calls().is_empty(), "each call is named once");
    assert_eq!(a.engine().in_flight_count(), 3, "naming a call changes nothing: it stays in flight");
    // The runtime cancels the call and reports its outcome as unknown: the provider may have
    // acted, and a stale entry is never retried, so the acquire is counted as held and its
    // release (an idempotent call) is planned — never left as a possible second holder.
    for key in &keys {
        a.handle_in_doubt_result(key, "cancelled").expect("in flight");
    }
    for key in &keys {
        let entry = a.engine().entry(key).expect("journaled");
        assert_eq!(entry.state, EntryState::Executed, "{key}");
        let detail = entry.detail.as_deref().unwrap_or_default();
        assert!(
            detail.starts_with(COUNTED_AS_HELD) && detail.contains("outcome unknown: cancelled"),
            "{detail}"
        );
    }
    assert!(a.reconcile_due(), "counted as held: the release is planned by the next reconcile");
    let report = a.reconcile().expect("memory").expect("not blocked");
    assert!(report.retried.is_empty(), "{report:?}");
    let releases: Vec<&str> = report
        .imported
        .iter()
        .map(IdempotencyKey::as_str)
        .filter(|k| k.contains("/unassign-secondary-ip/a/"))
        .collect();
    assert_eq!(releases.len(), ADDRESSES.len(), "one release per address in doubt: {report:?}");
    assert_eq!(a.engine().retryable_failures(), 0);
    assert!(a.poll_stale_calls().is_empty(), "nothing in flight, nothing to name");
    // What the log was told: the call failed, its outcome unknown.
    let told: Vec<EventKind> = std::iter::from_fn(|| a.poll_append()).collect();
    assert!(
        told.iter()
            .all(|k| matches!(k, EventKind::ActionResult { outcome: ActionOutcome::Failed, detail, .. }
            if detail.starts_with(OUTCOME_UNKNOWN))),
        "{told:?}"
    );
}

/// A call past its deadline while its action is current: journaled failed and retried (SPEC 6:
/// at-least-once), not counted as held. If the view moves before the retry, the sweep counts it
/// as held and plans its release; an acquire that failed for a known reason is never counted.
#[test]
fn an_acquire_in_doubt_is_retried_while_current_and_released_once_stale() {
    let mut log = log();
    let (mut a, keys) = in_flight(&log);
    a.handle_in_doubt_result(&keys[0], "timed out after 2s").expect("in flight");
    a.handle_result(&keys[1], ActionOutcome::Failed, "refused: InvalidParameterValue".into())
        .expect("in flight");
    a.handle_result(&keys[2], ActionOutcome::Executed, "assigned".into()).expect("in flight");
    assert_eq!(a.engine().entry(&keys[0]).map(|e| e.state), Some(EntryState::Failed), "current: retried");
    let report = a.reconcile().expect("memory").expect("not blocked");
    assert_eq!(report.retried, keys[..2].to_vec(), "both failures are retried while current");
    assert!(report.counted.is_empty());
    a.start_execution().expect("memory").expect("not blocked");
    let batch = a.poll_actions(64, None).expect("memory");
    let retry: Vec<String> = batch
        .iter()
        .filter(|x| x.verb == Verb::AssignSecondaryIp)
        .map(|x| x.idempotency_key().into())
        .collect();
    assert_eq!(retry, vec![keys[0].to_string(), keys[1].to_string()], "{batch:?}");
    for other in batch.iter().filter(|x| x.verb != Verb::AssignSecondaryIp) {
        a.handle_result(&other.idempotency_key(), ActionOutcome::Executed, "forwarding".into())
            .expect("in flight");
    }
    a.handle_in_doubt_result(&keys[0], "timed out after 2s").expect("in flight");
    a.handle_result(&keys[1], ActionOutcome::Failed, "refused: InvalidParameterValue".into())
        .expect("in flight");
    append(&mut log, 20, EventKind::Drain { node: "a".into() });
    a.follow(&log).expect("readable");
    let report = a.reconcile().expect("memory").expect("not blocked");
    assert_eq!(report.counted, vec![keys[0].clone()], "only the acquire in doubt: {report:?}");
    assert_eq!(a.engine().entry(&keys[1]).map(|e| e.state), Some(EntryState::Failed), "a known failure");
    a.reconcile().expect("memory").expect("not blocked");
    let released: BTreeSet<IpAddr> = a
        .engine()
        .entries()
        .filter(|e| e.action.verb == Verb::UnassignSecondaryIp && &*e.action.holder == "a")
        .map(|e| e.action.address)
        .collect();
    let address = |key: &String| a.engine().entry(key).expect("journaled").action.address;
    assert_eq!(
        released,
        BTreeSet::from([address(&keys[0]), address(&keys[2])]),
        "the executed and the in-doubt acquire are released; the refused one is not"
    );
}

#[test]
fn a_frozen_node_cancels_nothing() {
    let mut log = log();
    let (mut a, _keys) = in_flight(&log);
    a.pause();
    append(&mut log, 20, EventKind::Drain { node: "a".into() });
    a.follow(&log).expect("readable");
    assert!(a.poll_stale_calls().is_empty(), "a frozen process does not act, not even to cancel");
    assert!(a.resume().is_ok());
    a.finish_resume();
    assert_eq!(a.poll_stale_calls().len(), 3, "awake, it names what the view fenced meanwhile");
}

/// A resume's zombie pass is awake: having followed past a fence, it names the calls in flight
/// the view now fences (the simulator found a call that landed after the pass had followed past
/// its fence: cloud seed 60, before the zombie pass could cancel).
#[test]
fn a_resumed_node_cancels_in_its_zombie_pass() {
    let mut log = log();
    let (mut a, _keys) = in_flight(&log);
    a.pause();
    append(&mut log, 20, EventKind::Drain { node: "a".into() });
    assert!(a.resume().is_ok());
    a.follow(&log).expect("readable");
    assert_eq!(a.poll_stale_calls().len(), 3, "the zombie pass names what the view fenced");
    a.finish_resume();
    assert!(a.poll_stale_calls().is_empty(), "each call is named once");
}

/// The desired holder confirmed; then another node's executed acquire is reported, run after the
/// line moved away from it: the driver notes the provider for an inventory read at once — in
/// either order of the two results. A normal hand-over (the old holder's acquire confirmed before
/// the move) notes nothing.
#[test]
fn an_acquire_reported_after_the_hand_over_it_outran_is_noted_in_either_order() {
    let late = |order_b_first: bool| {
        let mut log = log();
        let (a, keys) = in_flight(&log);
        let a_assign = keys[0].clone();
        let address = a.engine().entry(&a_assign).expect("journaled").action.address;
        append(&mut log, 20, EventKind::Drain { node: "a".into() });
        let mut b = driver("b");
        b.follow(&log).expect("readable");
        b.reconcile().expect("memory").expect("not blocked");
        b.start_execution().expect("memory").expect("not blocked");
        let b_assign = b
            .poll_actions(64, None)
            .expect("memory")
            .into_iter()
            .find(|action| action.address == address)
            .expect("b acquires what a held")
            .idempotency_key();
        let result = |node: &str, key: &str| EventKind::ActionResult {
            node: node.into(),
            idempotency_key: key.into(),
            outcome: ActionOutcome::Executed,
            detail: "assigned".into(),
        };
        let (first, second) = if order_b_first {
            (result("b", &b_assign), result("a", &a_assign))
        } else {
            (result("a", &a_assign), result("b", &b_assign))
        };
        append(&mut log, 30, first);
        append(&mut log, 31, second);
        let mut watcher = driver("b");
        watcher.follow(&log).expect("readable");
        let mut noted = Vec::new();
        while let Some(outran) = watcher.poll_outran_acquire() {
            noted.push(outran);
        }
        (noted, address)
    };
    for order_b_first in [true, false] {
        let (noted, address) = late(order_b_first);
        assert_eq!(
            noted,
            vec![OutranAcquire { provider: "sim1".into(), address }],
            "b's result first: {order_b_first}"
        );
    }

    // The ordinary hand-over: a's acquire confirmed before the drain.
    let mut log = log();
    let (mut a, keys) = in_flight(&log);
    for key in &keys {
        a.handle_result(key, ActionOutcome::Executed, "assigned".into()).expect("in flight");
    }
    while let Some(kind) = a.poll_append() {
        append(&mut log, 5, kind);
    }
    append(&mut log, 20, EventKind::Drain { node: "a".into() });
    let mut b = driver("b");
    b.follow(&log).expect("readable");
    b.reconcile().expect("memory").expect("not blocked");
    b.start_execution().expect("memory").expect("not blocked");
    for action in b.poll_actions(64, None).expect("memory") {
        b.handle_result(&action.idempotency_key(), ActionOutcome::Executed, "assigned".into())
            .expect("in flight");
    }
    while let Some(kind) = b.poll_append() {
        append(&mut log, 30, kind);
    }
    let mut watcher = driver("b");
    watcher.follow(&log).expect("readable");
    assert_eq!(watcher.poll_outran_acquire(), None, "an ordinary hand-over reads nothing at once");
}

/// What can happen to the view while calls are in flight.
#[derive(Clone, Debug)]
enum Step {
    Drain(&'static str),
    Undrain(&'static str),
    Undesire(usize),
    Desire(usize),
    Heartbeat(&'static str),
}

fn step() -> impl Strategy<Value = Step> {
    let node = prop_oneof![Just("a"), Just("b")];
    prop_oneof![
        node.clone().prop_map(Step::Drain),
        node.clone().prop_map(Step::Undrain),
        (0..ADDRESSES.len()).prop_map(Step::Undesire),
        (0..ADDRESSES.len()).prop_map(Step::Desire),
        node.prop_map(Step::Heartbeat),
    ]
}

fn kind(step: &Step) -> EventKind {
    let address = |i: usize| ADDRESSES[i].parse().expect("address");
    match step {
        Step::Drain(n) => EventKind::Drain { node: (*n).into() },
        Step::Undrain(n) => EventKind::Undrain { node: (*n).into() },
        Step::Undesire(i) => EventKind::Undesire { pool: "edge".into(), address: address(*i) },
        Step::Desire(i) => EventKind::Desire { pool: "edge".into(), address: address(*i) },
        Step::Heartbeat(n) => EventKind::Heartbeat { node: (*n).into() },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the log does while calls are in flight, the calls named stale after each
    /// catch-up are exactly those the fence rule refuses now, each named once; and they are
    /// exactly the calls the gate refuses when the same entries meet it again (after a crash: a
    /// call in doubt is gated again at restart) — one rule, not two.
    #[test]
    fn the_calls_named_stale_are_those_the_gate_refuses(steps in prop::collection::vec(step(), 0..12)) {
        let mut log = log();
        let (mut a, keys) = in_flight(&log);
        let mut named: BTreeSet<String> = BTreeSet::new();
        for (at_ms, step) in (10_u64..).zip(&steps) {
            append(&mut log, at_ms, kind(step));
            a.follow(&log).expect("readable");
            for call in a.poll_stale_calls() {
                let entry = a.engine().entry(&call.idempotency_key).expect("journaled");
                let verdict = fence::check(&entry.action, a.view(), &a.engine().durable().high_water);
                prop_assert_eq!(verdict, FenceVerdict::Stale { reason: call.reason });
                prop_assert!(named.insert(call.idempotency_key.to_string()), "named twice: {}", call.idempotency_key);
            }
            for key in keys.iter().filter(|key| !named.contains(*key)) {
                let entry = a.engine().entry(key).expect("journaled");
                let verdict = fence::check(&entry.action, a.view(), &a.engine().durable().high_water);
                prop_assert_eq!(verdict, FenceVerdict::Current, "{} is stale but not named", key);
            }
        }
        // A crash: the calls are in doubt, gated again; a stale one is never run again, and,
        // being an acquire that may have landed, it is counted as held (its release planned).
        a.restart().expect("memory");
        a.follow(&log).expect("readable");
        let handed: BTreeSet<String> = polled_keys(&mut a).into_iter().collect();
        for key in &keys {
            let state = a.engine().entry(key).map(|e| e.state);
            if named.contains(key) {
                prop_assert!(!handed.contains(key), "{key} is stale and never runs again");
                prop_assert_eq!(state, Some(EntryState::Executed), "{}: counted as held", key);
            } else {
                prop_assert!(handed.contains(key), "{key} is current and handed out again: {state:?}");
            }
        }
    }
}

/// A call in flight when the process died is in doubt too (SPEC 6): the entry is `approved` in
/// the journal. If the view fences it before it runs again, it is counted as held and released,
/// not skipped — the orphaned call may have landed.
#[test]
fn an_acquire_in_flight_at_a_crash_that_went_stale_is_released() {
    let mut log = log();
    let (mut a, keys) = in_flight(&log);
    a.restart().expect("memory");
    append(&mut log, 20, EventKind::Drain { node: "a".into() });
    a.follow(&log).expect("readable");
    let report = a.reconcile().expect("memory").expect("not blocked");
    assert_eq!(report.counted, keys, "every call in flight at the crash is in doubt: {report:?}");
    for key in &keys {
        let entry = a.engine().entry(key).expect("journaled");
        assert_eq!(entry.state, EntryState::Executed, "{key}");
        assert!(entry.detail.as_deref().is_some_and(|d| d.starts_with(COUNTED_AS_HELD)), "{entry:?}");
    }
    a.reconcile().expect("memory").expect("not blocked");
    let releases = a.engine().entries().filter(|e| e.action.verb == Verb::UnassignSecondaryIp).count();
    assert_eq!(releases, ADDRESSES.len());
}

/// The in-doubt mark survives a retry and a later known failure: the first attempt may have
/// landed whatever the second says. Fenced while its retry waits (or after it failed for a
/// known reason), the acquire is counted as held.
#[test]
fn an_acquire_in_doubt_stays_in_doubt_through_its_retry() {
    let mut log = log();
    let (mut a, keys) = in_flight(&log);
    a.handle_in_doubt_result(&keys[0], "timed out after 2s").expect("in flight");
    a.handle_in_doubt_result(&keys[1], "timed out after 2s").expect("in flight");
    a.handle_result(&keys[2], ActionOutcome::Failed, "refused: InvalidParameterValue".into())
        .expect("in flight");
    let report = a.reconcile().expect("memory").expect("not blocked");
    assert_eq!(report.retried, keys, "{report:?}");
    // keys[0] retried and failed for a known reason; keys[1] waits approved for its retry.
    a.start_execution().expect("memory").expect("not blocked");
    let batch = a.poll_actions(1, None).expect("memory");
    assert_eq!(batch.iter().map(|x| x.idempotency_key()).collect::<Vec<_>>(), vec![keys[0].clone()]);
    a.handle_result(&keys[0], ActionOutcome::Failed, "refused: throttled".into()).expect("in flight");
    let detail = a.engine().entry(&keys[0]).and_then(|e| e.detail.clone()).unwrap_or_default();
    assert!(detail.starts_with(OUTCOME_UNKNOWN) && detail.ends_with("refused: throttled"), "{detail}");
    append(&mut log, 20, EventKind::Drain { node: "a".into() });
    a.follow(&log).expect("readable");
    let report = a.reconcile().expect("memory").expect("not blocked");
    assert_eq!(report.counted, keys[..2].to_vec(), "the two in doubt, not the known failure: {report:?}");
    assert_eq!(
        a.engine().entry(&keys[2]).map(|e| e.state),
        Some(EntryState::Skipped(StaleReason::StaleEpoch)),
        "a known failure, retried, is fenced like any action"
    );
}

/// An old in-doubt acquire is never counted over a holding verb journaled after it that executed
/// (a journal written before this rule existed holds such pairs): the newer verb says what the
/// node holds, and no release is planned for an address it released already.
#[test]
fn an_acquire_in_doubt_superseded_by_a_newer_holding_verb_is_not_counted() {
    use tenure_core::journal::{JournalChange, JournalEntry, JournalStore};
    let mut log = log();
    let (a, keys) = in_flight(&log);
    let acquire = a.engine().entry(&keys[0]).expect("journaled").clone();
    let mut release = acquire.action.clone();
    release.verb = Verb::UnassignSecondaryIp;
    let mut store = MemoryJournalStore::new();
    let entry = |seq: u64, action: tenure_core::model::StampedAction| JournalEntry {
        seq: JournalSeq::new(seq),
        action,
        state: EntryState::Approved,
        detail: None,
        executed_seq: None,
        attempts: Default::default(),
    };
    for change in [
        JournalChange::Append(entry(1, acquire.action.clone())),
        JournalChange::SetState {
            seq: JournalSeq::new(1),
            state: EntryState::Failed,
            detail: Some(format!("{OUTCOME_UNKNOWN}timed out").into()),
            executed_seq: None,
        },
        JournalChange::Append(entry(2, release)),
        JournalChange::SetState {
            seq: JournalSeq::new(2),
            state: EntryState::Executed,
            detail: None,
            executed_seq: Some(1),
        },
    ] {
        store.commit(&change).expect("memory");
    }
    let engine = NodeEngine::open("a", store).expect("memory");
    let mut a = NodeDriver::new(engine, registry(), DriverOptions { report_results: true });
    append(&mut log, 20, EventKind::Drain { node: "a".into() });
    a.follow(&log).expect("readable");
    let report = a.reconcile().expect("memory").expect("not blocked");
    assert!(report.counted.is_empty(), "{report:?}");
    assert_eq!(a.engine().entry(&keys[0]).map(|e| e.state), Some(EntryState::Failed));
    assert_eq!(a.engine().retryable_failures(), 0, "left out of the retry set");
    assert!(a.engine().captured().is_empty(), "the release said the node holds nothing");
}

/// A call in flight when the process died says so after the restart (SPEC 6: its outcome is
/// unknown; it is gated and run again while current): its detail and its last error — what
/// `tenure actions -o wide` and `/v1/actions` show — read `outcome unknown: the agent stopped
/// during attempt N`, for every verb (here an assign, then an enable-forwarding), and it runs
/// again. A call whose result was recorded is left as it is.
#[test]
fn a_call_in_flight_at_a_crash_says_its_outcome_is_unknown_and_runs_again() {
    use tenure_core::journal::agent_stopped_detail;
    let log = log();
    let (mut a, keys) = in_flight(&log);
    a.handle_result(&keys[0], ActionOutcome::Executed, "done".into()).expect("in flight");
    a.restart().expect("memory");
    let stopped = agent_stopped_detail(1);
    assert_eq!(stopped, "outcome unknown: the agent stopped during attempt 1");
    let entry =
        |a: &NodeDriver<MemoryJournalStore>, key: &str| a.engine().entry(key).expect("journaled").clone();
    assert_eq!(
        (entry(&a, &keys[0]).state, entry(&a, &keys[0]).attempts.last_error),
        (EntryState::Executed, None)
    );
    for key in &keys[1..] {
        let e = entry(&a, key);
        assert_eq!(e.state, EntryState::Approved, "it stays approved: it runs again");
        assert_eq!(
            (e.detail.as_deref(), e.attempts.last_error.as_deref()),
            (Some(stopped.as_str()), Some(stopped.as_str()))
        );
        assert_eq!(e.attempts.count, 1);
    }
    a.restart().expect("memory");
    assert_eq!(
        entry(&a, &keys[1]).attempts.last_error.as_deref(),
        Some(stopped.as_str()),
        "a second start changes nothing"
    );

    a.follow(&log).expect("readable");
    a.reconcile().expect("memory").expect("not blocked");
    a.start_execution().expect("memory").expect("not blocked");
    let again = polled_keys(&mut a);
    assert!(keys[1..].iter().all(|key| again.contains(key)), "run again: {again:?}");
    for key in &keys[1..] {
        a.handle_result(key, ActionOutcome::Executed, "done".into()).expect("in flight");
        let e = entry(&a, key);
        assert_eq!((e.state, e.attempts.count), (EntryState::Executed, 2));
        assert_eq!(e.attempts.last_error.as_deref(), Some(stopped.as_str()), "what failed before stays");
    }

    // A verb that is not a holding acquire: enable-forwarding in flight at a second crash.
    a.reconcile().expect("memory").expect("not blocked");
    a.start_execution().expect("memory").expect("not blocked");
    let forwarding = polled_keys(&mut a);
    assert!(
        !forwarding.is_empty() && forwarding.iter().all(|k| k.contains("/enable-forwarding/")),
        "{forwarding:?}"
    );
    a.restart().expect("memory");
    for key in &forwarding {
        assert_eq!(entry(&a, key).attempts.last_error.as_deref(), Some(stopped.as_str()), "{key}");
    }
}
