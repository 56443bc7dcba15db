//! The history fold: causes, kinds, epochs, bounds; and, over random logs, that every ownership
//! change appears once, in order, and that the same log gives the same history.

use std::collections::BTreeMap;
use std::net::IpAddr;

use proptest::prelude::*;

use super::*;
use crate::model::{
    ActionStamp, Approval, Authority, CaptureDomain, CaptureEpoch, NodeSpec, OwnershipEpoch, PoolSpec,
    ProviderKind, ProviderSpec, Verb, VrrpState,
};

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

fn pool(name: &str, addresses: &[&str]) -> PoolSpec {
    PoolSpec {
        name: name.into(),
        addresses: addresses.iter().map(|a| ip(a)).collect(),
        provider: "sim1".into(),
        placement_group: "g1".into(),
        members: vec!["a".into(), "b".into(), "c".into()],
        authority: Authority::None,
        approval: Approval::Auto,
        deprovision_hold_ms: 0,
        heartbeat_ttl_ms: 3_000,
        promotion_hold_ms: 1_000,
        epoch_locking: true,
        prefer_nodes: vec![],
        preempt: false,
        auto_failover: true,
    }
}

fn ip(text: &str) -> IpAddr {
    text.parse().expect("address")
}

fn registry() -> Federation {
    let nodes = [node("a", 10), node("b", 5), node("c", 0)];
    let providers = [ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }];
    Federation::new(&nodes, &providers)
}

/// A history fed events with dense indices.
struct Fold {
    history: History,
    next: u64,
}

impl Fold {
    fn new() -> Self {
        Self { history: History::new(registry()), next: 1 }
    }

    /// Applies `kind` at `at_ms`; returns the entries it made.
    fn apply(&mut self, at_ms: u64, kind: EventKind) -> Vec<HistoryEntry> {
        let before = self.history.entries().len();
        let index = LogIndex::from_stored(self.next).expect("not 0");
        self.next += 1;
        self.history.apply(index, &Event { at_ms, kind });
        self.history.entries().skip(before).cloned().collect()
    }

    fn heartbeat(&mut self, at_ms: u64, node: &str) -> Vec<HistoryEntry> {
        self.apply(at_ms, EventKind::Heartbeat { node: node.into() })
    }
}

/// `(kind, cause, from, to, ownershipEpoch, captureEpoch)`: what the tests compare.
type Summary<'a> = (EntryKind, Option<Cause>, Option<&'a str>, Option<&'a str>, u64, u64);

/// The [`Summary`] of each entry.
fn summary(entries: &[HistoryEntry]) -> Vec<Summary<'_>> {
    entries
        .iter()
        .map(|e| {
            (
                e.kind,
                e.cause,
                e.from.as_deref(),
                e.to.as_deref(),
                e.ownership_epoch.unwrap_or(0),
                e.capture_epoch.unwrap_or(0),
            )
        })
        .collect()
}

/// a (priority 10) and b alive at 0, pool `p` with one address applied at 0: a owns it.
fn placed() -> Fold {
    let mut fold = Fold::new();
    fold.heartbeat(0, "a");
    fold.heartbeat(0, "b");
    let placed = fold.apply(0, EventKind::PoolApplied { spec: Box::new(pool("p", &["10.0.0.10"])) });
    assert_eq!(summary(&placed), [(EntryKind::Ownership, Some(Cause::PoolApplied), None, Some("a"), 1, 1)]);
    fold
}

#[test]
fn a_drain_moves_ownership_with_cause_drain_and_new_epochs() {
    let mut fold = placed();
    let drained = fold.apply(100, EventKind::Drain { node: "a".into() });
    assert_eq!(summary(&drained), [(EntryKind::Ownership, Some(Cause::Drain), Some("a"), Some("b"), 2, 2)]);
    let entry = &drained[0];
    assert_eq!((entry.log_index, entry.stream_time_ms, entry.wall_time_ms), (4, 100, 100));
    assert_eq!((entry.pool.as_deref(), entry.address), (Some("p"), Some(ip("10.0.0.10"))));
    // The wire form: stable camelCase names, absent fields left out.
    assert_eq!(
        serde_json::to_value(entry).expect("serializes"),
        serde_json::json!({"logIndex": 4, "streamTime": 100, "wallTime": 100, "kind": "ownership",
            "pool": "p", "address": "10.0.0.10", "cause": "drain", "from": "a", "to": "b",
            "ownershipEpoch": 2, "captureEpoch": 2})
    );
}

#[test]
fn an_owner_whose_heartbeat_expired_moves_for_liveness_whatever_event_moved_stream_time() {
    let mut fold = placed();
    assert!(fold.heartbeat(3_500, "b").is_empty(), "a is alive until 0 + 3000 + 1000");
    // The drain of c (no owner) moves stream time past a's TTL: the move is a's expiry.
    let moved = fold.apply(5_000, EventKind::Drain { node: "c".into() });
    assert_eq!(summary(&moved), [(EntryKind::Ownership, Some(Cause::Liveness), Some("a"), Some("b"), 2, 2)]);
    // a's heartbeat brings it back; it does not preempt (preempt: false): nothing moves.
    assert!(fold.heartbeat(5_100, "a").is_empty());
}

#[test]
fn desire_moves_only_the_capture_line_and_a_wall_clock_behind_keeps_stream_time() {
    let mut fold = placed();
    let undesired = fold.apply(200, EventKind::Undesire { pool: "p".into(), address: ip("10.0.0.10") });
    assert_eq!(summary(&undesired), [(EntryKind::Capture, Some(Cause::Undesire), Some("a"), None, 1, 2)]);
    // A late event (its `at` below stream time): stream time stays, wall time is its own.
    let desired = fold.apply(150, EventKind::Desire { pool: "p".into(), address: ip("10.0.0.10") });
    assert_eq!(summary(&desired), [(EntryKind::Capture, Some(Cause::Desire), None, Some("a"), 1, 3)]);
    assert_eq!((desired[0].stream_time_ms, desired[0].wall_time_ms), (200, 150));
    // Desiring a desired address bumps nothing (SPEC 13), so it is no entry.
    assert!(fold.apply(300, EventKind::Desire { pool: "p".into(), address: ip("10.0.0.10") }).is_empty());
}

#[test]
fn node_events_name_their_cause_and_pool_deletion_retires() {
    let mut fold = placed();
    let unhealthy = fold.apply(10, EventKind::Health { node: "a".into(), healthy: false });
    assert_eq!(summary(&unhealthy)[0].1, Some(Cause::Health));
    let healthy = fold.apply(20, EventKind::Health { node: "b".into(), healthy: false });
    assert_eq!(summary(&healthy), [(EntryKind::Ownership, Some(Cause::Health), Some("b"), None, 3, 3)]);
    let back = fold.apply(30, EventKind::Health { node: "a".into(), healthy: true });
    assert_eq!(summary(&back), [(EntryKind::Ownership, Some(Cause::Health), None, Some("a"), 4, 4)]);
    let vrrp = fold.apply(40, EventKind::Vrrp { node: "a".into(), state: VrrpState::Fault });
    assert!(vrrp.is_empty(), "the pool's authority is none: VRRP moves nothing");
    let deleted = fold.apply(50, EventKind::PoolDeleted { pool: "p".into() });
    assert_eq!(summary(&deleted), [(EntryKind::Ownership, Some(Cause::PoolDeleted), Some("a"), None, 5, 5)]);
}

fn key(verb: Verb, holder: &str, ownership: u64, capture: u64) -> String {
    ActionStamp {
        pool: "p",
        address: ip("10.0.0.10"),
        verb,
        holder,
        provider: "sim1",
        nic: &format!("eni-{holder}"),
        capture_domain: &CaptureDomain::new("sim1", "g1"),
        capture_epoch: CaptureEpoch::from_stored(capture),
        ownership_epoch: OwnershipEpoch::from_stored(ownership),
    }
    .key()
}

#[test]
fn kept_approvals_and_reported_results_are_entries_stale_approvals_are_not() {
    let mut fold = placed();
    let current = key(Verb::AssignSecondaryIp, "a", 1, 1);
    let approved = fold.apply(10, EventKind::Approve { idempotency_key: current.clone() });
    assert_eq!(approved.len(), 1);
    assert_eq!(
        (approved[0].kind, approved[0].node.as_deref(), approved[0].verb.as_deref()),
        (EntryKind::Approval, Some("a"), Some("assign-secondary-ip"))
    );
    assert_eq!(approved[0].idempotency_key.as_deref(), Some(current.as_str()));
    // The same key approved again (a retried request, a second operator, another agent of the
    // fleet): the log held it already, nothing changed, no second `approval` line.
    assert!(fold.apply(10, EventKind::Approve { idempotency_key: current.clone() }).is_empty());
    // Stale (epoch 0 is below the line's 1) or not a key: the log keeps nothing, nothing shown.
    let stale = key(Verb::AssignSecondaryIp, "a", 0, 0);
    assert!(fold.apply(11, EventKind::Approve { idempotency_key: stale }).is_empty());
    assert!(fold.apply(12, EventKind::Approve { idempotency_key: "junk".into() }).is_empty());
    let executed = fold.apply(
        13,
        EventKind::ActionResult {
            node: "a".into(),
            idempotency_key: current.clone(),
            outcome: ActionOutcome::Executed,
            detail: String::new(),
        },
    );
    assert_eq!(summary(&executed), [(EntryKind::Executed, None, None, None, 1, 1)]);
    assert_eq!((executed[0].node.as_deref(), executed[0].detail.as_deref()), (Some("a"), None));
    let failed = fold.apply(
        14,
        EventKind::ActionResult {
            node: "a".into(),
            idempotency_key: key(Verb::EnableForwarding, "a", 1, 1),
            outcome: ActionOutcome::Failed,
            detail: "throttled".into(),
        },
    );
    assert_eq!((failed[0].kind, failed[0].detail.as_deref()), (EntryKind::Failed, Some("throttled")));
    // A rejected event (unknown node) changed nothing and is no entry.
    assert!(
        fold.apply(
            15,
            EventKind::ActionResult {
                node: "zz".into(),
                idempotency_key: current,
                outcome: ActionOutcome::Executed,
                detail: String::new(),
            }
        )
        .is_empty()
    );
    let raised = fold.apply(16, EventKind::TokensRaised { by: 1_000 });
    assert_eq!((raised[0].kind, raised[0].pool.as_deref()), (EntryKind::TokensRaised, None));
    // Tokens raised: the next move starts from the raised values.
    let drained = fold.apply(17, EventKind::Drain { node: "a".into() });
    assert_eq!(summary(&drained)[0].4, 1_002);
}

#[test]
fn a_bounded_history_drops_whole_records_and_says_how_far_back_it_reaches() {
    let mut fold = placed();
    fold.history = fold.history.clone().with_entries_max(3);
    assert_eq!(fold.history.reaches_back_to(), 1);
    // Pool `q` with three addresses: record 4 makes three entries; record 3's goes.
    fold.apply(
        1,
        EventKind::PoolApplied { spec: Box::new(pool("q", &["10.0.1.1", "10.0.1.2", "10.0.1.3"])) },
    );
    assert_eq!(fold.history.entries().len(), 3);
    assert_eq!(fold.history.reaches_back_to(), 4);
    // Draining a moves all four addresses in record 5: record 4 goes; record 5, the newest, is
    // kept whole although it alone passes the bound.
    fold.apply(2, EventKind::Drain { node: "a".into() });
    assert_eq!(fold.history.entries().len(), 4);
    assert!(fold.history.entries().all(|e| e.log_index == 5));
    assert_eq!(fold.history.reaches_back_to(), 5);
    // A history that starts at a snapshot reaches back to the record after it.
    let snapshot = fold.history.view().snapshot();
    let five = LogIndex::from_stored(5).expect("not 0");
    let mut after = History::new(registry());
    assert!(after.restart_from_snapshot(b"junk", five).is_err());
    assert_eq!((after.reaches_back_to(), after.applied_index()), (1, None), "a bad snapshot changes nothing");
    after.restart_from_snapshot(&snapshot, five).expect("restores");
    assert_eq!((after.reaches_back_to(), after.entries().len(), after.applied_index()), (6, 0, Some(five)));
    // It goes on from there: the next record's moves are entries again.
    after.apply(five.next(), &Event { at_ms: 3, kind: EventKind::Undrain { node: "a".into() } });
    assert_eq!(after.view().stream_time_ms(), fold.history.view().stream_time_ms().max(3));
}

/// Events over a small alphabet: heartbeats, drains, health, desire flips, a second pool
/// applied and deleted, results; `at` moves forward by random steps (sometimes back).
fn event() -> impl Strategy<Value = (u64, EventKind)> {
    let names = prop::sample::select(vec!["a", "b", "c"]);
    let addresses = prop::sample::select(vec!["10.0.0.10", "10.0.0.11", "10.0.0.12"]);
    let kind = prop_oneof![
        4 => names.clone().prop_map(|n| EventKind::Heartbeat { node: n.into() }),
        1 => names.clone().prop_map(|n| EventKind::Drain { node: n.into() }),
        1 => names.clone().prop_map(|n| EventKind::Undrain { node: n.into() }),
        1 => (names, any::<bool>()).prop_map(|(n, healthy)| EventKind::Health { node: n.into(), healthy }),
        1 => addresses.clone().prop_map(|a| EventKind::Desire { pool: "p".into(), address: ip(a) }),
        1 => addresses.prop_map(|a| EventKind::Undesire { pool: "p".into(), address: ip(a) }),
        1 => Just(EventKind::PoolApplied { spec: Box::new(pool("q", &["10.0.1.1"])) }),
        1 => Just(EventKind::PoolDeleted { pool: "q".into() }),
    ];
    (0_u64..3_000, any::<bool>(), kind)
        .prop_map(|(step, back, kind)| (if back { step / 10 } else { step }, kind))
}

/// Pool `p` applied, then `steps`: each `(step, kind)` an event `step` ms after the one before.
fn log_of(steps: Vec<(u64, EventKind)>) -> Vec<Event> {
    let mut log = vec![Event {
        at_ms: 0,
        kind: EventKind::PoolApplied { spec: Box::new(pool("p", &["10.0.0.10", "10.0.0.11", "10.0.0.12"])) },
    }];
    let mut at_ms = 0;
    for (step, kind) in steps {
        at_ms += step;
        log.push(Event { at_ms, kind });
    }
    log
}

/// Every (pool, address) → owner of a projection, by name.
fn owners(view: &Federation) -> BTreeMap<(String, IpAddr), Option<String>> {
    let mut owners = BTreeMap::new();
    for (name, pool) in view.pools() {
        for (address, state) in &pool.addresses {
            owners.insert((name.clone(), *address), state.owner.map(|id| view.node_name(id).to_owned()));
        }
    }
    owners
}

proptest! {
    #[test]
    fn every_ownership_change_appears_once_in_order_and_the_same_log_gives_the_same_history(
        steps in prop::collection::vec(event(), 1..80)
    ) {
        let log = log_of(steps);
        // What changed owner, event by event, seen from outside: the whole map before and after.
        let mut expected = Vec::new();
        let mut outside = registry();
        for (position, event) in log.iter().enumerate() {
            let before = owners(&outside);
            if outside.apply(event).is_err() {
                continue;
            }
            for (key, owner) in owners(&outside) {
                let was = before.get(&key).cloned().flatten();
                if was != owner {
                    expected.push((position as u64 + 1, key.0, key.1, was, owner));
                }
            }
        }
        let fold = |log: &[Event]| {
            let mut history = History::new(registry());
            for (position, event) in log.iter().enumerate() {
                history.apply(LogIndex::from_stored(position as u64 + 1).expect("not 0"), event);
            }
            history.entries().cloned().collect::<Vec<_>>()
        };
        let entries = fold(&log);
        let seen: Vec<_> = entries
            .iter()
            .filter(|e| e.kind == EntryKind::Ownership)
            .map(|e| (e.log_index, e.pool.clone().expect("a pool"), e.address.expect("an address"), e.from.clone(), e.to.clone()))
            .collect();
        prop_assert_eq!(seen, expected);
        prop_assert_eq!(fold(&log), entries.clone(), "the same log, the same history");
        // Per address, the ownershipEpoch of successive ownership entries goes up by one.
        let mut last: BTreeMap<(String, IpAddr), u64> = BTreeMap::new();
        for e in entries.iter().filter(|e| e.kind == EntryKind::Ownership) {
            let key = (e.pool.clone().expect("a pool"), e.address.expect("an address"));
            let epoch = e.ownership_epoch.expect("an epoch");
            if let Some(previous) = last.insert(key, epoch) {
                prop_assert_eq!(epoch, previous + 1);
            }
            prop_assert!(e.cause.is_some());
        }
    }
}

#[test]
fn a_cause_named_after_an_event_kind_is_spelled_as_the_log_spells_it() {
    let after_events = [
        Cause::Drain,
        Cause::Undrain,
        Cause::Health,
        Cause::Vrrp,
        Cause::Desire,
        Cause::Undesire,
        Cause::PoolApplied,
        Cause::PoolDeleted,
    ];
    for cause in after_events {
        assert!(EventKind::named(cause.as_str()).is_some(), "`{}` is no event kind", cause.as_str());
        assert_eq!(serde_json::to_value(cause).ok(), Some(cause.as_str().into()), "{cause:?}");
    }
    for own in [Cause::Liveness, Cause::Recapture] {
        assert_eq!(EventKind::named(own.as_str()), None, "{own:?}");
    }
}

proptest! {
    /// The agent's history rides on its first node's view (`NodeDriver::follow_recording`),
    /// which may start over from a snapshot part way; the offline fold projects the log itself
    /// and starts over from the same snapshot. Both give the same entries and reach back as far,
    /// followed at any points of the log, with refused records among them.
    #[test]
    fn a_history_fed_by_a_nodes_view_is_the_history_of_its_own_projection(
        steps in prop::collection::vec(prop_oneof![4 => event(), 1 => result()], 1..60),
        restart_at in any::<prop::sample::Index>(),
        read in 1_usize..8,
    ) {
        use crate::driver::{DriverOptions, NodeDriver};
        use crate::journal::MemoryJournalStore;
        use crate::log_store::{EventLog, Log as _};
        use crate::node::NodeEngine;

        let events = log_of(steps);
        let mut log = EventLog::new();
        for event in &events {
            log.push(event.clone());
        }
        let restart = restart_at.index(events.len());
        let index = |position: usize| LogIndex::from_stored(position as u64 + 1).expect("not 0");

        // The offline fold: its own projection, started over from the snapshot after `restart`.
        let mut own = History::new(registry());
        for (position, event) in events.iter().enumerate().take(restart + 1) {
            own.apply(index(position), event);
        }
        let snapshot = own.view().snapshot();
        own.restart_from_snapshot(&snapshot, index(restart)).expect("restores");
        for (position, event) in events.iter().enumerate().skip(restart + 1) {
            own.apply(index(position), event);
        }

        // The agent's: a node's driver following the log, its view restored from that snapshot.
        let engine = NodeEngine::open("a", MemoryJournalStore::new()).expect("memory");
        let mut driver = NodeDriver::new(engine, registry(), DriverOptions::default());
        let mut riding = History::new(registry());
        let mut partial = EventLog::new();
        // The node follows the records before the snapshot's last, then its view jumps to the
        // snapshot (as the agent restores a node behind it).
        for event in &events[..restart] {
            partial.push(event.clone());
            if partial.len().is_multiple_of(read) {
                driver.follow_recording(&partial, &mut riding).expect("an event log");
            }
        }
        driver.follow_recording(&partial, &mut riding).expect("an event log");
        prop_assert_eq!(riding.applied_index(), restart.checked_sub(1).map(index));
        // Restored alone: the next follow starts the history over where the view now is.
        driver.restore_snapshot(&snapshot, index(restart)).expect("restores");
        driver.follow_recording(&log, &mut riding).expect("an event log");
        prop_assert_eq!(log.head().expect("an event log"), riding.applied_index());

        prop_assert_eq!(riding.reaches_back_to(), restart as u64 + 2, "the record after the snapshot");
        prop_assert_eq!(riding.reaches_back_to(), own.reaches_back_to());
        let entries = |history: &History| history.entries().cloned().collect::<Vec<_>>();
        prop_assert_eq!(entries(&riding), entries(&own));
        prop_assert_eq!(driver.view().snapshot(), own.view().snapshot(), "one projection, the same state");
    }
}

/// An executor's result, from a node of the registry (an entry) or from one it does not know
/// (refused by the projection: no entry).
fn result() -> impl Strategy<Value = (u64, EventKind)> {
    let node = prop::sample::select(vec!["a", "b", "stranger"]);
    (0_u64..500, node, 1_u64..4).prop_map(|(step, node, epoch)| {
        let idempotency_key = key(Verb::AssignSecondaryIp, node, epoch, epoch);
        let outcome = crate::log::ActionOutcome::Executed;
        (step, EventKind::ActionResult { node: node.into(), idempotency_key, outcome, detail: String::new() })
    })
}

/// A history that is not at its view's index when a follow begins (the view started over from a
/// snapshot and nobody told the history) starts over after the view's last record: no record
/// twice, none skipped silently.
#[test]
fn a_history_behind_its_view_starts_over_where_the_view_is() {
    use crate::driver::{DriverOptions, NodeDriver};
    use crate::journal::MemoryJournalStore;
    use crate::log_store::{EventLog, Log as _};
    use crate::node::NodeEngine;

    let events = log_of(vec![
        (10, EventKind::Heartbeat { node: "a".into() }),
        (10, EventKind::Drain { node: "a".into() }),
        (10, EventKind::Undrain { node: "a".into() }),
        (10, EventKind::Drain { node: "a".into() }),
        (10, EventKind::Undrain { node: "a".into() }),
    ]);
    let index = |position: usize| LogIndex::from_stored(position as u64 + 1).expect("not 0");
    let mut log = EventLog::new();
    let mut own = History::new(registry());
    for (position, event) in events.iter().enumerate() {
        log.push(event.clone());
        own.apply(index(position), event);
        if position == 3 {
            break;
        }
    }
    // The snapshot after record 4; the node has followed only the first two.
    let snapshot = own.view().snapshot();
    let mut first_two = EventLog::new();
    first_two.push(events[0].clone());
    first_two.push(events[1].clone());
    let engine = NodeEngine::open("a", MemoryJournalStore::new()).expect("memory");
    let mut driver = NodeDriver::new(engine, registry(), DriverOptions::default());
    let mut history = History::new(registry());
    driver.follow_recording(&first_two, &mut history).expect("an event log");
    assert_eq!(history.applied_index(), Some(index(1)));
    assert!(history.entries().len() > 0, "the pool's placement and the drain moved addresses");
    driver.restore_snapshot(&snapshot, index(3)).expect("restores");
    for event in &events[4..] {
        log.push(event.clone());
    }
    driver.follow_recording(&log, &mut history).expect("an event log");
    assert_eq!(history.reaches_back_to(), 5, "the record after the view's snapshot");
    assert_eq!(history.applied_index(), log.head().expect("an event log"));
    assert!(history.entries().all(|e| e.log_index >= 5), "nothing kept from before the restart");
    assert!(history.entries().any(|e| e.log_index == 5), "a's second drain moved addresses");
}
