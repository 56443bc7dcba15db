//! A random log for the planning tests (`plan_slices`, `plan_changes`): two nodes, three pools
//! (two listing the same addresses on one provider, one in another capture domain), drift
//! repair's observations, holds, approvals and executed calls.

#![allow(dead_code)] // each test crate uses a part

use std::net::IpAddr;

use proptest::prelude::*;
use tenure_core::driver::{DriverOptions, NodeDriver};
use tenure_core::federation::Federation;
use tenure_core::journal::MemoryJournalStore;
use tenure_core::log::{ActionOutcome, Event, EventKind};
use tenure_core::log_store::{Log, MemoryLog};
use tenure_core::model::{Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec};
use tenure_core::node::NodeEngine;
use tenure_core::planner;

/// Addresses 10.0.0.1 to 10.0.0.9: `edge` has the first six, `west` the last three, `east` (in
/// another capture domain of the same provider) the middle six.
pub fn address(i: usize) -> IpAddr {
    format!("10.0.0.{}", i + 1).parse().expect("address")
}

pub fn node(name: &str, priority: i64) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        provider: "sim1".into(),
        placement_group: "g1".into(),
        priority,
        nic: format!("eni-{name}"),
        capacity: None,
    }
}

pub fn registry() -> Federation {
    Federation::new(
        &[node("a", 10), node("b", 0)],
        &[ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }],
    )
    .with_drift_repair(true)
}

pub fn pool(name: &str, addresses: std::ops::Range<usize>, hold_ms: u64, approval: Approval) -> PoolSpec {
    PoolSpec {
        name: name.into(),
        addresses: addresses.map(address).collect(),
        provider: "sim1".into(),
        placement_group: "g1".into(),
        members: vec!["a".into(), "b".into()],
        authority: Authority::None,
        approval,
        deprovision_hold_ms: hold_ms,
        heartbeat_ttl_ms: 3_000,
        promotion_hold_ms: 0,
        epoch_locking: true,
        prefer_nodes: vec![],
        preempt: false,
        auto_failover: true,
    }
}

pub fn driver(name: &str) -> NodeDriver<MemoryJournalStore> {
    driver_with_drift(name, true)
}

/// [`driver`] with drift repair on or off.
pub fn driver_with_drift(name: &str, drift_repair: bool) -> NodeDriver<MemoryJournalStore> {
    let engine = NodeEngine::open(name, MemoryJournalStore::new()).expect("memory");
    // It reports results, as an agent does: the log then has its confirmations.
    NodeDriver::new(
        engine,
        registry().with_drift_repair(drift_repair),
        DriverOptions { report_results: true },
    )
}

#[derive(Clone, Debug)]
pub enum Step {
    Drain(&'static str),
    Undrain(&'static str),
    Desire(&'static str, usize),
    Undesire(&'static str, usize),
    Heartbeat(&'static str),
    /// The provider shows the address on these nodes' NICs.
    Inventory(usize, Vec<&'static str>),
    /// `a` calls what it has ready, and each call succeeds.
    Execute,
    /// Stream time moves on by this much (a heartbeat of both nodes).
    Wait(u64),
    /// A pool deleted (its addresses retire, still released by drift repair).
    Delete(&'static str),
    /// A pool applied (refused while another pool claims one of its addresses).
    Apply(&'static str),
    /// `edge` applied again with another approval mode and hold: the plan of every address
    /// changes, and no address is touched.
    ApplyEdgeManual,
    /// A restore's `tokens-raised`: every token moves.
    Raise(u64),
    /// The operator approves what `a`'s journal has pending now (it reconciles first).
    Approve,
    /// `a` calls what it has ready, and each call fails (a sweep retries it after a backoff).
    ExecuteFailing,
}

pub fn spec(name: &str) -> PoolSpec {
    match name {
        "edge" => pool("edge", 0..6, 500, Approval::Auto),
        "west" => pool("west", 6..9, 0, Approval::Manual),
        // Another capture domain (placement group g2, where no node is): it may list edge's
        // addresses while edge is applied.
        _ => PoolSpec { placement_group: "g2".into(), ..pool("east", 3..9, 0, Approval::Auto) },
    }
}

pub fn step() -> impl Strategy<Value = Step> {
    let node = prop_oneof![Just("a"), Just("b")];
    let pool_address =
        prop_oneof![(Just("edge"), 0..6_usize), (Just("west"), 6..9_usize), (Just("east"), 3..9_usize)];
    let pool = prop_oneof![Just("edge"), Just("west"), Just("east")];
    prop_oneof![
        node.clone().prop_map(Step::Drain),
        node.clone().prop_map(Step::Undrain),
        pool_address.clone().prop_map(|(p, i)| Step::Desire(p, i)),
        pool_address.prop_map(|(p, i)| Step::Undesire(p, i)),
        node.clone().prop_map(Step::Heartbeat),
        (0..9_usize, prop::collection::vec(node, 0..2)).prop_map(|(i, on)| Step::Inventory(i, on)),
        Just(Step::Execute),
        Just(Step::Execute),
        (1..2_000_u64).prop_map(Step::Wait),
        pool.clone().prop_map(Step::Delete),
        pool.prop_map(Step::Apply),
        Just(Step::ApplyEdgeManual),
        (1..3_u64).prop_map(Step::Raise),
        Just(Step::Approve),
        Just(Step::ExecuteFailing),
    ]
}

/// Applies the records of `log` after `applied` to `view`.
pub fn follow(
    view: &mut Federation,
    log: &MemoryLog,
    applied: &mut Option<tenure_core::log_store::LogIndex>,
) {
    loop {
        let from =
            applied.map_or(tenure_core::log_store::LogIndex::FIRST, tenure_core::log_store::LogIndex::next);
        let records = log.read_from(from, 64).expect("readable");
        if records.is_empty() {
            return;
        }
        for record in records {
            let _ = view.apply(&record.event);
            *applied = Some(record.index);
        }
    }
}

pub fn append(log: &mut MemoryLog, at_ms: u64, kind: EventKind) {
    log.append(&Event { at_ms, kind }).expect("append");
}

/// A log with both pools applied and both nodes alive; `edge` holds its releases back 500 ms,
/// `west` asks for approval.
pub fn log() -> MemoryLog {
    let mut log = MemoryLog::new();
    append(&mut log, 0, EventKind::PoolApplied { spec: Box::new(spec("edge")) });
    append(&mut log, 0, EventKind::PoolApplied { spec: Box::new(spec("west")) });
    append(&mut log, 1, EventKind::Heartbeat { node: "a".into() });
    append(&mut log, 1, EventKind::Heartbeat { node: "b".into() });
    log
}

/// Applies `step` at `at_ms` (and runs `a`'s calls for [`Step::Execute`]); returns the stream
/// time after it.
pub fn apply(log: &mut MemoryLog, a: &mut NodeDriver<MemoryJournalStore>, at_ms: u64, step: &Step) -> u64 {
    let kind = match step {
        Step::Drain(n) => EventKind::Drain { node: (*n).into() },
        Step::Undrain(n) => EventKind::Undrain { node: (*n).into() },
        Step::Desire(p, i) => EventKind::Desire { pool: (*p).into(), address: address(*i) },
        Step::Undesire(p, i) => EventKind::Undesire { pool: (*p).into(), address: address(*i) },
        Step::Heartbeat(n) => EventKind::Heartbeat { node: (*n).into() },
        Step::Delete(p) => EventKind::PoolDeleted { pool: (*p).into() },
        Step::Apply(p) => EventKind::PoolApplied { spec: Box::new(spec(p)) },
        Step::ApplyEdgeManual => {
            EventKind::PoolApplied { spec: Box::new(pool("edge", 0..6, 300, Approval::Manual)) }
        }
        Step::Raise(by) => EventKind::TokensRaised { by: *by },
        Step::Inventory(i, on) => EventKind::Inventory {
            provider: "sim1".into(),
            address: address(*i),
            holders: on.iter().map(|n| format!("eni-{n}")).collect(),
            scope: None,
        },
        Step::Wait(ms) => {
            let at_ms = at_ms + ms;
            append(log, at_ms, EventKind::Heartbeat { node: "a".into() });
            append(log, at_ms, EventKind::Heartbeat { node: "b".into() });
            return at_ms;
        }
        Step::Approve => {
            a.follow(log).expect("readable");
            a.reconcile().expect("memory").expect("not blocked");
            let pending: Vec<String> = a
                .engine()
                .entries()
                .filter(|entry| entry.state == tenure_core::journal::EntryState::Pending)
                .map(|entry| entry.action.idempotency_key().to_string())
                .collect();
            for idempotency_key in pending {
                append(log, at_ms, EventKind::Approve { idempotency_key });
            }
            return at_ms;
        }
        Step::Execute | Step::ExecuteFailing => {
            let outcome =
                if matches!(step, Step::Execute) { ActionOutcome::Executed } else { ActionOutcome::Failed };
            a.follow(log).expect("readable");
            a.reconcile().expect("memory").expect("not blocked");
            a.start_execution().expect("memory").expect("not blocked");
            for action in a.poll_actions(64, None).expect("memory") {
                a.handle_result(&action.idempotency_key(), outcome, "ok".into()).expect("in flight");
            }
            while let Some(kind) = a.poll_append() {
                append(log, at_ms, kind);
            }
            return at_ms;
        }
    };
    append(log, at_ms, kind);
    at_ms
}

/// A plan as comparable rows: each action's key and approval, in key order; and its wake.
pub fn rows(actions: &[planner::PlannedAction<'_>]) -> Vec<(String, Approval)> {
    let mut rows: Vec<(String, Approval)> = actions
        .iter()
        .map(|planned| {
            let mut key = String::new();
            planned.stamp.write_key(&mut key);
            (key, planned.approval)
        })
        .collect();
    rows.sort_by(|x, y| x.0.cmp(&y.0));
    rows
}
