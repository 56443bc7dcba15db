//! The agent's path through the driver: follow a [`Log`] to its head, reconcile and gate against
//! the node's own view, hand out actions in batches with one durable sync per batch.

use std::convert::Infallible;

use tenure_core::driver::{DriverOptions, NodeDriver};
use tenure_core::federation::Federation;
use tenure_core::journal::{DurableNodeState, EntryState, JournalChange, JournalStore, MemoryJournalStore};
use tenure_core::log::{ActionOutcome, Event, EventKind};
use tenure_core::log_store::{Log, MemoryLog};
use tenure_core::model::{
    Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec, StampedAction, Verb,
};
use tenure_core::node::NodeEngine;

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
    let report = driver.reconcile_at_head().expect("memory").expect("not blocked");
    assert_eq!(report.imported.len(), 8, "two verbs per address");
    driver.start_execution_at_head().expect("memory").expect("not blocked");
    let syncs_before = driver.engine().store().syncs;
    let batch = driver.poll_actions_at_head(16).expect("memory");
    assert_eq!(
        verbs(&batch),
        vec![Verb::AssignSecondaryIp; 4],
        "first verbs only: each waits for its predecessor"
    );
    assert_eq!(driver.engine().store().syncs - syncs_before, 1, "one sync for the whole batch");
    assert_eq!(driver.engine().in_flight_count(), 4);
    assert!(
        driver.poll_actions_at_head(16).expect("memory").is_empty(),
        "every address has a call in flight"
    );
    for action in &batch {
        driver
            .handle_result(&action.idempotency_key, ActionOutcome::Executed, "ok".into())
            .expect("in flight");
    }
    let second = driver.poll_actions_at_head(3).expect("memory");
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
    driver.reconcile_at_head().expect("memory").expect("not blocked");
    // The node is drained after it planned: following the log right before the call fences
    // every planned acquire (holder-mismatch or stale-epoch), none reaches the provider.
    log.append(&Event { at_ms: 20, kind: EventKind::Drain { node: "a".into() } }).expect("append");
    driver.follow(&log).expect("readable");
    assert!(driver.poll_actions_at_head(16).expect("memory").is_empty());
    let skipped = driver.engine().entries().filter(|e| matches!(e.state, EntryState::Skipped(_))).count();
    assert_eq!(skipped, 8, "both verbs of every address are gated out");
}
