//! The agent's path through the driver: follow a [`Log`] to its head, reconcile and gate against
//! the node's own view, hand out actions in batches with one durable sync per batch.

use std::convert::Infallible;

use tenure_core::driver::{DriverOptions, NodeDriver, RETRY_WITHOUT_BACKOFF_MS};
use tenure_core::federation::Federation;
use tenure_core::journal::{DurableNodeState, EntryState, JournalChange, JournalStore, MemoryJournalStore};
use tenure_core::log::{ActionOutcome, Event, EventKind};
use tenure_core::log_store::{Log, MemoryLog};
use tenure_core::model::{
    Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec, StampedAction, Verb,
};
use tenure_core::node::NodeEngine;
use tenure_core::retry::RetryBackoff;

/// A memory store that counts syncs (a test double of the durable store).
#[derive(Debug, Default)]
struct CountingStore {
    inner: MemoryJournalStore,
    syncs: u64,
}

impl JournalStore for CountingStore {
    type Error = Infallible;
    fn load(&self) -> Result<DurableNodeState, Infallible> {
        self.inner.load()
    }
    fn commit(&mut self, change: &JournalChange) -> Result<(), Infallible> {
        self.inner.commit(change)
    }
    fn sync(&mut self) -> Result<(), Infallible> {
        self.syncs += 1;
        Ok(())
    }
}

fn node() -> NodeSpec {
    NodeSpec {
        name: "a".into(),
        provider: "sim1".into(),
        placement_group: "g1".into(),
        priority: 0,
        nic: "eni-a".into(),
        capacity: None,
    }
}

fn pool(addresses: &[&str]) -> PoolSpec {
    PoolSpec {
        name: "edge".into(),
        addresses: addresses.iter().map(|a| a.parse().expect("address")).collect(),
        provider: "sim1".into(),
        placement_group: "g1".into(),
        members: vec!["a".into()],
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

fn driver() -> NodeDriver<CountingStore> {
    let registry =
        Federation::new(&[node()], &[ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }]);
    let engine = NodeEngine::open("a", CountingStore::default()).expect("memory");
    NodeDriver::new(engine, registry, DriverOptions { report_results: true })
}

fn log_with_pool() -> MemoryLog {
    let mut log = MemoryLog::new();
    let spec = pool(&["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]);
    log.append(&Event { at_ms: 0, kind: EventKind::PoolApplied { spec: Box::new(spec) } }).expect("append");
    log.append(&Event { at_ms: 10, kind: EventKind::Heartbeat { node: "a".into() } }).expect("append");
    log
}

fn verbs(actions: &[StampedAction]) -> Vec<Verb> {
    actions.iter().map(|a| a.verb).collect()
}

#[test]
fn a_batch_is_gated_at_the_head_and_made_durable_with_one_sync() {
    let log = log_with_pool();
    let mut driver = driver();
    assert_eq!(driver.follow(&log).expect("readable"), 2);
    let report = driver.reconcile().expect("memory").expect("not blocked");
    assert_eq!(report.imported.len(), 8, "two verbs per address");
    driver.start_execution().expect("memory").expect("not blocked");
    let syncs_before = driver.engine().store().syncs;
    let batch = driver.poll_actions(16, None).expect("memory");
    assert_eq!(
        verbs(&batch),
        vec![Verb::AssignSecondaryIp; 4],
        "first verbs only: each waits for its predecessor"
    );
    assert_eq!(driver.engine().store().syncs - syncs_before, 1, "one sync for the whole batch");
    assert_eq!(driver.engine().in_flight_count(), 4);
    assert!(driver.poll_actions(16, None).expect("memory").is_empty(), "every address has a call in flight");
    for action in &batch {
        driver
            .handle_result(&action.idempotency_key(), ActionOutcome::Executed, "ok".into())
            .expect("in flight");
    }
    let second = driver.poll_actions(3, None).expect("memory");
    assert_eq!(verbs(&second), vec![Verb::EnableForwarding; 3], "at most `max` per batch");
    let mut appended = 0;
    while driver.poll_append().is_some() {
        appended += 1;
    }
    assert_eq!(appended, 4, "one action-result per reported call");
}

#[test]
fn an_action_that_went_stale_at_the_head_is_skipped_not_handed_out() {
    let mut log = log_with_pool();
    let mut driver = driver();
    driver.follow(&log).expect("readable");
    driver.reconcile().expect("memory").expect("not blocked");
    // The node is drained after it planned: following the log right before the call fences
    // every planned acquire (holder-mismatch or stale-epoch), none reaches the provider.
    log.append(&Event { at_ms: 20, kind: EventKind::Drain { node: "a".into() } }).expect("append");
    driver.follow(&log).expect("readable");
    assert!(driver.poll_actions(16, None).expect("memory").is_empty());
    let skipped = driver.engine().entries().filter(|e| matches!(e.state, EntryState::Skipped(_))).count();
    assert_eq!(skipped, 8, "both verbs of every address are gated out");
}

/// A node that reconciles only when [`NodeDriver::reconcile_due`] says so journals exactly what a
/// node that reconciles after every event journals, event by event: through another node's
/// heartbeats, its expiry (a failover to `a`), a drain with a deprovision hold (the releases come
/// due with stream time alone), an undrain and a desire flip.
#[test]
fn reconciling_only_when_due_journals_what_reconciling_always_does() {
    let two = |name: &str| NodeSpec { name: name.into(), ..node() };
    let registry = Federation::new(
        &[two("a"), two("b")],
        &[ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }],
    );
    let new_driver = || {
        let engine = NodeEngine::open("a", CountingStore::default()).expect("memory");
        NodeDriver::new(engine, registry.clone(), DriverOptions { report_results: true })
    };
    let (mut eager, mut lazy) = (new_driver(), new_driver());
    let (mut eager_log, mut lazy_log) = (MemoryLog::new(), MemoryLog::new());
    let spec = PoolSpec {
        members: vec!["a".into(), "b".into()],
        deprovision_hold_ms: 450,
        ..pool(&["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"])
    };
    let heartbeat = |node: &str| EventKind::Heartbeat { node: node.into() };
    let mut script: Vec<(u64, EventKind)> = vec![(0, EventKind::PoolApplied { spec: Box::new(spec) })];
    // Both alive; then `b` stops at 1,000 and expires at 4,000 (ttl 3,000): `a` takes its half.
    for t in (10..6_000).step_by(100) {
        script.push((t, heartbeat("a")));
        if t < 1_000 {
            script.push((t, heartbeat("b")));
        }
    }
    script.push((6_000, EventKind::Drain { node: "a".into() }));
    // The releases wait 450 ms of stream time: heartbeats alone bring them due.
    for t in (6_010..7_000).step_by(100) {
        script.push((t, heartbeat("a")));
    }
    script.push((7_000, EventKind::Undrain { node: "a".into() }));
    script
        .push((7_010, EventKind::Undesire { pool: "edge".into(), address: "10.0.0.1".parse().expect("ip") }));
    for t in (7_020..7_700).step_by(100) {
        script.push((t, heartbeat("a")));
    }

    let mut lazy_reconciles = 0;
    for (step, (at_ms, kind)) in script.into_iter().enumerate() {
        for (driver, log, always) in [(&mut eager, &mut eager_log, true), (&mut lazy, &mut lazy_log, false)] {
            log.append(&Event { at_ms, kind: kind.clone() }).expect("append");
            driver.follow(&*log).expect("readable");
            if always || driver.reconcile_due() {
                driver.reconcile().expect("memory").expect("not blocked");
                driver.start_execution().expect("memory").expect("not blocked");
                lazy_reconciles += usize::from(!always);
            }
            // Every ready action is called and succeeds; its result goes to the node's own log.
            loop {
                let batch = driver.poll_actions(64, None).expect("memory");
                if batch.is_empty() {
                    break;
                }
                for action in batch {
                    driver
                        .handle_result(&action.idempotency_key(), ActionOutcome::Executed, "ok".into())
                        .expect("in flight");
                }
            }
            while let Some(result) = driver.poll_append() {
                log.append(&Event { at_ms, kind: result }).expect("append");
            }
            driver.follow(&*log).expect("readable");
        }
        let journal = |d: &NodeDriver<CountingStore>| {
            d.engine().entries().map(|e| (e.action.idempotency_key(), e.state)).collect::<Vec<_>>()
        };
        assert_eq!(journal(&lazy), journal(&eager), "journals differ after step {step} (at {at_ms} ms)");
    }
    let executed = lazy.engine().entries().filter(|e| e.state == EntryState::Executed).count();
    let releases = lazy.engine().entries().filter(|e| !e.action.verb.is_acquire()).count();
    assert!(
        executed >= 12 && releases >= 6,
        "the script moved addresses: {executed} executed, {releases} releases"
    );
    assert!(lazy_reconciles < 20, "the lazy node planned {lazy_reconciles} times, for ~100 events");
    let undesired: std::net::IpAddr = "10.0.0.1".parse().expect("ip");
    let released = lazy
        .engine()
        .entries()
        .filter(|e| {
            e.action.address == undesired && !e.action.verb.is_acquire() && e.state == EntryState::Executed
        })
        .count();
    assert_eq!(released, 4, "released (two verbs) at the drain and again after the undesire's hold");
}

/// The same comparison with calls in flight across events: each step's calls answer only at the
/// next step, after its event. An address undesired while its acquire is in flight is captured
/// only when the result arrives — after the reconcile that followed the undesire — and the node
/// must plan its release then, not at some later requeue.
#[test]
fn reconciling_only_when_due_keeps_up_with_results_that_land_after_the_view_moved() {
    let registry =
        Federation::new(&[node()], &[ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }]);
    let new_driver = || {
        let engine = NodeEngine::open("a", CountingStore::default()).expect("memory");
        NodeDriver::new(engine, registry.clone(), DriverOptions { report_results: true })
    };
    let (mut eager, mut lazy) = (new_driver(), new_driver());
    let (mut eager_log, mut lazy_log) = (MemoryLog::new(), MemoryLog::new());
    let spec = PoolSpec { deprovision_hold_ms: 250, ..pool(&["10.0.0.1", "10.0.0.2"]) };
    let address: std::net::IpAddr = "10.0.0.1".parse().expect("ip");
    let mut script: Vec<(u64, EventKind)> = vec![
        (0, EventKind::PoolApplied { spec: Box::new(spec) }),
        (10, EventKind::Heartbeat { node: "a".into() }),
        // The assign of 10.0.0.1 is in flight now: undesired before its result lands.
        (20, EventKind::Undesire { pool: "edge".into(), address }),
    ];
    for t in (30..1_000).step_by(50) {
        script.push((t, EventKind::Heartbeat { node: "a".into() }));
    }
    script.push((1_000, EventKind::Desire { pool: "edge".into(), address }));
    for t in (1_010..1_500).step_by(50) {
        script.push((t, EventKind::Heartbeat { node: "a".into() }));
    }
    let mut in_flight: [Vec<String>; 2] = [Vec::new(), Vec::new()];
    for (step, (at_ms, kind)) in script.into_iter().enumerate() {
        for (side, (driver, log)) in
            [(&mut eager, &mut eager_log), (&mut lazy, &mut lazy_log)].into_iter().enumerate()
        {
            let always = side == 0;
            log.append(&Event { at_ms, kind: kind.clone() }).expect("append");
            driver.follow(&*log).expect("readable");
            let plan = |driver: &mut NodeDriver<CountingStore>| {
                if always || driver.reconcile_due() {
                    driver.reconcile().expect("memory").expect("not blocked");
                    driver.start_execution().expect("memory").expect("not blocked");
                }
            };
            plan(driver);
            // Last step's calls answer now, after this step's event.
            for key in std::mem::take(&mut in_flight[side]) {
                driver.handle_result(&key, ActionOutcome::Executed, "ok".into()).expect("in flight");
            }
            while let Some(result) = driver.poll_append() {
                log.append(&Event { at_ms, kind: result }).expect("append");
            }
            driver.follow(&*log).expect("readable");
            plan(driver);
            in_flight[side] = driver
                .poll_actions(64, None)
                .expect("memory")
                .into_iter()
                .map(|a| a.idempotency_key().to_string())
                .collect();
        }
        let journal = |d: &NodeDriver<CountingStore>| {
            d.engine().entries().map(|e| (e.action.idempotency_key(), e.state)).collect::<Vec<_>>()
        };
        assert_eq!(journal(&lazy), journal(&eager), "journals differ after step {step} (at {at_ms} ms)");
    }
    let released = lazy
        .engine()
        .entries()
        .filter(|e| e.action.address == address && e.action.verb == Verb::UnassignSecondaryIp)
        .filter(|e| e.state == EntryState::Executed)
        .count();
    assert_eq!(released, 1, "the address undesired in flight was released after its hold");
}

/// A failed call wakes its node when its backoff ends, not before: the agent reconciles only
/// when [`NodeDriver::reconcile_due`] says so (or at its requeue interval), and a heartbeat
/// alone does not make it plan.
#[test]
fn a_failed_call_makes_a_reconcile_due_when_its_backoff_ends() {
    let mut log = MemoryLog::new();
    let spec = pool(&["10.0.0.1"]);
    log.append(&Event { at_ms: 0, kind: EventKind::PoolApplied { spec: Box::new(spec) } }).expect("append");
    log.append(&Event { at_ms: 1_000, kind: EventKind::Heartbeat { node: "a".into() } }).expect("append");
    let registry =
        Federation::new(&[node()], &[ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }]);
    let engine = NodeEngine::open("a", CountingStore::default())
        .expect("memory")
        .with_retry_backoff(RetryBackoff::from_base(500));
    let mut driver = NodeDriver::new(engine, registry, DriverOptions { report_results: true });
    driver.follow(&log).expect("readable");
    driver.reconcile().expect("memory").expect("not blocked");
    let batch = driver.poll_actions(16, Some(1_700_000_000_000)).expect("memory");
    assert_eq!(verbs(&batch), vec![Verb::AssignSecondaryIp]);
    let key = &batch[0].idempotency_key();
    driver.handle_result(key, ActionOutcome::Failed, "throttled".into()).expect("in flight");
    let entry = driver.engine().entry(key).expect("journaled");
    assert_eq!(entry.attempts.last_wall_ms(), Some(1_700_000_000_000));
    let due = driver.engine().next_attempt_ms(entry).expect("retryable");
    assert!(!driver.reconcile_due(), "a failure does not re-plan at once");
    log.append(&Event { at_ms: due - 1, kind: EventKind::Heartbeat { node: "a".into() } }).expect("append");
    driver.follow(&log).expect("readable");
    assert!(!driver.reconcile_due(), "nor before its backoff ends");
    log.append(&Event { at_ms: due, kind: EventKind::Heartbeat { node: "a".into() } }).expect("append");
    driver.follow(&log).expect("readable");
    assert!(driver.reconcile_due(), "its backoff ended at {due}: a reconcile retries it");
    let report = driver.reconcile().expect("memory").expect("not blocked");
    assert_eq!(report.retried, vec![key.clone()]);
    assert!(!driver.reconcile_due(), "retried: nothing more is due");
}

/// A failed call of a verb without a backoff (on-prem: this host's own kernel) wakes its node
/// [`RETRY_WITHOUT_BACKOFF_MS`] of stream time later: not at once (a failing call would loop),
/// and not only at the requeue (a failed release would leave the host answering beside the new
/// holder for a whole `requeueInterval`).
#[test]
fn a_failed_onprem_call_makes_a_reconcile_due_a_moment_later() {
    let mut log = MemoryLog::new();
    let spec = PoolSpec { provider: "lan".into(), ..pool(&["10.0.0.1"]) };
    log.append(&Event { at_ms: 0, kind: EventKind::PoolApplied { spec: Box::new(spec) } }).expect("append");
    log.append(&Event { at_ms: 1_000, kind: EventKind::Heartbeat { node: "a".into() } }).expect("append");
    let lan = NodeSpec { provider: "lan".into(), nic: "eth0".into(), ..node() };
    let registry =
        Federation::new(&[lan], &[ProviderSpec { name: "lan".into(), kind: ProviderKind::SimOnprem }]);
    let engine = NodeEngine::open("a", CountingStore::default())
        .expect("memory")
        .with_retry_backoff(RetryBackoff::from_base(5_000));
    let mut driver = NodeDriver::new(engine, registry, DriverOptions { report_results: true });
    driver.follow(&log).expect("readable");
    driver.reconcile().expect("memory").expect("not blocked");
    let batch = driver.poll_actions(16, None).expect("memory");
    assert_eq!(verbs(&batch), vec![Verb::ProxyArpAdd]);
    let key = &batch[0].idempotency_key();
    driver
        .handle_result(key, ActionOutcome::Failed, "netlink: operation not permitted".into())
        .expect("in flight");
    assert!(!driver.reconcile_due(), "a failure does not re-plan at once");
    let wake = 1_000 + RETRY_WITHOUT_BACKOFF_MS;
    log.append(&Event { at_ms: wake - 1, kind: EventKind::Heartbeat { node: "a".into() } }).expect("append");
    driver.follow(&log).expect("readable");
    assert!(!driver.reconcile_due(), "nor a moment too soon");
    log.append(&Event { at_ms: wake, kind: EventKind::Heartbeat { node: "a".into() } }).expect("append");
    driver.follow(&log).expect("readable");
    assert!(
        driver.reconcile_due(),
        "{RETRY_WITHOUT_BACKOFF_MS} ms of stream time later, well before the requeue"
    );
    let report = driver.reconcile().expect("memory").expect("not blocked");
    assert_eq!(report.retried, vec![key.clone()]);
}
