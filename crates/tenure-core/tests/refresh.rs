//! Announcements repeated for held addresses (issue 25: `garpRefresh` and the burst when
//! keepalived says MASTER again): only for an address the node holds, whose announcement of its
//! stamp executed, through the fence rule against the head and the node's high-water marks, one
//! call per (provider, address) at a time, and named for cancellation once the view fences it.

use std::net::IpAddr;

use tenure_core::agent::{AgentCore, Step};
use tenure_core::driver::{DriverOptions, NodeDriver};
use tenure_core::federation::Federation;
use tenure_core::fence::StaleReason;
use tenure_core::journal::MemoryJournalStore;
use tenure_core::log::{ActionOutcome, Event, EventKind};
use tenure_core::log_store::{Log, MemoryLog};
use tenure_core::model::{Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec, Verb};
use tenure_core::node::{NodeEngine, StaleCall};

const ADDRESSES: [&str; 2] = ["10.0.0.1", "10.0.0.2"];

fn node(name: &str, provider: &str, priority: i64) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        provider: provider.into(),
        placement_group: "g1".into(),
        priority,
        nic: format!("eth-{name}"),
        capacity: None,
    }
}

/// `a` (priority 10) and `b` on the on-prem provider `lan`; `c` alone on the cloud `sim1`.
fn registry() -> Federation {
    Federation::new(
        &[node("a", "lan", 10), node("b", "lan", 0), node("c", "sim1", 0)],
        &[
            ProviderSpec { name: "lan".into(), kind: ProviderKind::SimOnprem },
            ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud },
        ],
    )
}

fn pool(name: &str, provider: &str, members: &[&str], addresses: &[&str]) -> PoolSpec {
    PoolSpec {
        name: name.into(),
        addresses: addresses.iter().map(|a| a.parse().expect("address")).collect(),
        provider: provider.into(),
        placement_group: "g1".into(),
        members: members.iter().map(|m| (*m).to_owned()).collect(),
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

fn append(log: &mut MemoryLog, at_ms: u64, kind: EventKind) {
    log.append(&Event { at_ms, kind }).expect("append");
}

/// The on-prem pool `vip` (a owns both addresses) and the cloud pool `cloud` (c owns its one).
fn log() -> MemoryLog {
    let mut log = MemoryLog::new();
    append(
        &mut log,
        0,
        EventKind::PoolApplied { spec: Box::new(pool("vip", "lan", &["a", "b"], &ADDRESSES)) },
    );
    append(
        &mut log,
        0,
        EventKind::PoolApplied { spec: Box::new(pool("cloud", "sim1", &["c"], &["10.0.1.1"])) },
    );
    for name in ["a", "b", "c"] {
        append(&mut log, 1, EventKind::Heartbeat { node: name.into() });
    }
    log
}

/// Follow, reconcile and execute until nothing is left, every call executed; `stop_before`:
/// leave actions of that verb approved (not handed out).
fn settle(driver: &mut NodeDriver<MemoryJournalStore>, log: &MemoryLog, stop_before: Option<Verb>) {
    driver.follow(log).expect("readable");
    driver.reconcile().expect("memory").expect("not blocked");
    driver.start_execution().expect("memory").expect("not blocked");
    loop {
        let batch = driver.poll_actions(64, None).expect("memory");
        let batch: Vec<_> = batch.into_iter().collect();
        if batch.is_empty() {
            return;
        }
        let mut ran = false;
        for action in batch {
            if Some(action.verb) == stop_before {
                driver
                    .handle_result(&action.idempotency_key(), ActionOutcome::Failed, "held back".into())
                    .expect("in flight");
                continue;
            }
            ran = true;
            driver
                .handle_result(&action.idempotency_key(), ActionOutcome::Executed, "ok".into())
                .expect("in flight");
        }
        if !ran {
            return;
        }
    }
}

fn everything(_: &str, _: IpAddr) -> bool {
    true
}

fn addresses(refreshes: &[tenure_core::model::StampedAction]) -> Vec<String> {
    refreshes.iter().map(|a| a.address.to_string()).collect()
}

#[test]
fn a_refresh_repeats_the_holders_announcement_one_at_a_time_per_address() {
    let log = log();
    let mut a = driver("a");
    let mut b = driver("b");
    let mut c = driver("c");
    settle(&mut a, &log, None);
    settle(&mut b, &log, None);
    settle(&mut c, &log, None);
    let refreshes = a.poll_refreshes(everything, 16);
    assert_eq!(addresses(&refreshes), ADDRESSES, "both held addresses");
    for refresh in &refreshes {
        assert_eq!(refresh.verb, Verb::Garp);
        let announced = a.engine().entry(&refresh.idempotency_key()).expect("the stamp's own garp");
        assert_eq!(announced.action, *refresh, "the very action the journal executed, repeated");
    }
    assert!(a.poll_refreshes(everything, 16).is_empty(), "one at a time per address");
    assert_eq!(a.engine().refreshes_in_flight(), 2);
    assert!(a.handle_refresh_result("lan", ADDRESSES[0].parse().expect("address")));
    assert!(!a.handle_refresh_result("lan", ADDRESSES[0].parse().expect("address")), "once");
    assert_eq!(addresses(&a.poll_refreshes(everything, 16)), [ADDRESSES[0]]);
    assert!(b.poll_refreshes(everything, 16).is_empty(), "b holds nothing");
    assert!(c.poll_refreshes(everything, 16).is_empty(), "a cloud holder announces nothing");
    // What the caller wants, and at most `max`.
    let mut a = driver("a");
    settle(&mut a, &log, None);
    let second: IpAddr = ADDRESSES[1].parse().expect("address");
    assert_eq!(addresses(&a.poll_refreshes(|_, address| address == second, 16)), [ADDRESSES[1]]);
    assert!(a.poll_refreshes(|provider, _| provider != "lan", 16).is_empty());
    assert_eq!(a.poll_refreshes(everything, 1).len(), 1);
    // Nothing is journaled or told to the log.
    let entries = a.engine().entries().count();
    while a.poll_append().is_some() {}
    a.handle_refresh_result("lan", second);
    assert_eq!(a.engine().entries().count(), entries);
    assert!(a.poll_append().is_none());
}

#[test]
fn no_refresh_before_the_stamps_own_announcement_executed() {
    let log = log();
    let mut a = driver("a");
    settle(&mut a, &log, Some(Verb::Garp));
    assert_eq!(a.engine().captured().len(), 2, "the entries are added");
    assert!(a.poll_refreshes(everything, 16).is_empty(), "the journal's garp goes first");
}

#[test]
fn a_deposed_holder_never_refreshes_and_its_refresh_in_flight_is_named_stale() {
    let mut log = log();
    let mut a = driver("a");
    settle(&mut a, &log, None);
    let before = a.view().clone();
    let in_flight = a.poll_refreshes(|_, address| address.to_string() == ADDRESSES[0], 16);
    assert_eq!(in_flight.len(), 1);
    append(&mut log, 10, EventKind::Drain { node: "a".into() });
    a.follow(&log).expect("readable");
    // The release is not run yet: a still captures both addresses, and its entries answer.
    assert_eq!(a.engine().captured().len(), 2);
    assert!(a.poll_refreshes(everything, 16).is_empty(), "the fence refuses a deposed holder");
    assert_eq!(
        a.poll_stale_calls(),
        vec![StaleCall { idempotency_key: in_flight[0].idempotency_key(), reason: StaleReason::StaleEpoch }],
        "the refresh in flight is named for cancellation"
    );
    assert!(a.poll_stale_calls().is_empty(), "once");
    // Its release waits for the refresh in flight: no announcement after the entry is gone.
    a.reconcile().expect("memory").expect("not blocked");
    // A head that lags behind what the node saw (its high-water marks) is not believed either.
    // (The driver gates against its own view; the engine takes any head.)
    let view = a.view().clone();
    assert!(
        a.engine_mut().poll_refreshes(&view, &before, everything, 16).is_empty(),
        "the high-water marks fence it"
    );
    a.start_execution().expect("memory").expect("not blocked");
    let releases = a.poll_actions(64, None).expect("memory");
    assert_eq!(addresses(&releases), [ADDRESSES[1]], "the address with a refresh in flight waits");
    assert!(a.handle_refresh_result("lan", in_flight[0].address));
    let releases = a.poll_actions(64, None).expect("memory");
    assert_eq!(addresses(&releases), [ADDRESSES[0]]);
    assert!(releases.iter().all(|r| r.verb == Verb::ProxyArpDel));
}

#[test]
fn a_node_that_may_not_act_refreshes_nothing() {
    let log = log();
    let mut a = driver("a");
    settle(&mut a, &log, None);
    a.partition();
    assert!(a.poll_refreshes(everything, 16).is_empty(), "partitioned");
    a.heal();
    a.pause();
    assert!(a.poll_refreshes(everything, 16).is_empty(), "paused");
    a.restart().expect("memory");
    a.follow(&log).expect("readable");
    assert_eq!(a.poll_refreshes(everything, 16).len(), 2, "after a restart, from the journal");
}

/// The agent core announces only on a proof of a confirmed head made by this core in this step
/// (`AgentCore::poll_refreshes`): another core's proof, or one of an earlier step, hands out
/// nothing; a fresh one hands out both held addresses.
#[test]
fn the_agent_core_announces_only_on_a_proof_of_this_core_and_this_step() {
    let log = log();
    let head = log.head().expect("readable");
    let settled = || {
        let mut a = driver("a");
        settle(&mut a, &log, None);
        a
    };
    let mut core = AgentCore::new(vec![settled()]);
    let other = AgentCore::new(vec![settled()]);
    let foreign = other.confirmed_at(head).expect("followed");
    assert!(core.poll_refreshes(&foreign, 0, everything, 16).is_empty(), "another core's proof");
    let proof = core.confirmed_at(head).expect("followed");
    core.begin_step(Step { slice: 16, calls: true, head_failing: false });
    core.abandon_step();
    assert!(core.poll_refreshes(&proof, 0, everything, 16).is_empty(), "a proof of an earlier step");
    let proof = core.confirmed_at(head).expect("followed");
    assert_eq!(addresses(&core.poll_refreshes(&proof, 0, everything, 16)), ADDRESSES, "both held addresses");
}
