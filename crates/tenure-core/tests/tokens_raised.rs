//! A restore's `tokens-raised{by}` (federation/raise.rs): every token line goes up by `by`, lines
//! created later start at the raised floor, the arithmetic is checked, and the highest token is
//! tracked where tokens move.

use std::net::IpAddr;

use tenure_core::federation::{EventRejected, Federation};
use tenure_core::fence::{FenceVerdict, StaleReason};
use tenure_core::journal::{EntryState, MemoryJournalStore};
use tenure_core::log::{Event, EventKind};
use tenure_core::model::{
    Approval, Authority, CaptureDomain, NodeSpec, PoolSpec, ProviderKind, ProviderSpec,
};
use tenure_core::node::NodeEngine;

fn node(name: &str, priority: i64, group: &str) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        provider: "sim1".into(),
        placement_group: group.into(),
        priority,
        nic: format!("eni-{name}"),
        capacity: None,
    }
}

fn pool(name: &str, addresses: &[&str], members: &[&str], group: &str) -> PoolSpec {
    PoolSpec {
        name: name.into(),
        addresses: addresses.iter().map(|a| a.parse().expect("address")).collect(),
        provider: "sim1".into(),
        placement_group: group.into(),
        members: members.iter().map(|m| (*m).to_owned()).collect(),
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

fn g(group: &str) -> CaptureDomain {
    CaptureDomain::new("sim1", group)
}

struct World {
    fed: Federation,
}

impl World {
    fn new() -> Self {
        let nodes = [node("a", 10, "g1"), node("b", 0, "g1"), node("c", 0, "g2")];
        let providers = [ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }];
        Self { fed: Federation::new(&nodes, &providers) }
    }

    fn apply(&mut self, at_ms: u64, kind: EventKind) {
        self.fed.apply(&Event { at_ms, kind }).expect("accepted");
    }

    /// (ownershipEpoch, captureEpoch on the `group` line) of `pool`/`address`.
    fn epochs(&self, pool: &str, address: &str, group: &str) -> (u64, u64) {
        (
            self.fed.ownership_epoch(pool, ip(address)).get(),
            self.fed.capture_epoch(pool, ip(address), &g(group)).get(),
        )
    }

    /// Every token the federation holds: (pool, address, which, value), in canonical order.
    fn all_tokens(&self) -> Vec<(String, IpAddr, String, u64)> {
        let mut tokens = Vec::new();
        for (name, pool) in self.fed.pools() {
            for (address, state) in &pool.addresses {
                tokens.push((name.clone(), *address, "owner".to_owned(), state.ownership_epoch.get()));
                tokens.push((
                    name.clone(),
                    *address,
                    pool.capture_domain.to_string(),
                    state.line.epoch.get(),
                ));
                for (domain, line) in &state.retired_lines {
                    tokens.push((name.clone(), *address, format!("retired {domain}"), line.epoch.get()));
                }
            }
        }
        tokens
    }

    /// A log with live, drained, deleted, undesired and retired-line addresses.
    fn busy() -> Self {
        let mut w = Self::new();
        w.apply(
            0,
            EventKind::PoolApplied {
                spec: Box::new(pool("p", &["10.0.0.1", "10.0.0.2"], &["a", "b"], "g1")),
            },
        );
        w.apply(0, EventKind::PoolApplied { spec: Box::new(pool("gone", &["10.0.1.1"], &["a"], "g1")) });
        w.apply(
            0,
            EventKind::PoolApplied { spec: Box::new(pool("moved", &["10.0.2.1"], &["a", "c"], "g1")) },
        );
        w.apply(1, EventKind::Heartbeat { node: "a".into() });
        w.apply(1, EventKind::Heartbeat { node: "b".into() });
        w.apply(1, EventKind::Heartbeat { node: "c".into() });
        w.apply(2, EventKind::Drain { node: "a".into() });
        w.apply(3, EventKind::Undesire { pool: "p".into(), address: ip("10.0.0.2") });
        w.apply(4, EventKind::PoolDeleted { pool: "gone".into() });
        // `moved` leaves g1 for g2: its g1 line is retired with its tokens.
        w.apply(
            5,
            EventKind::PoolApplied { spec: Box::new(pool("moved", &["10.0.2.1"], &["a", "c"], "g2")) },
        );
        w
    }
}

#[test]
fn tokens_raised_adds_by_to_every_token_retired_and_deleted_included() {
    let mut w = World::busy();
    let before = w.all_tokens();
    assert!(
        before.iter().any(|(_, _, which, value)| which.starts_with("retired") && *value > 0),
        "{before:?}"
    );
    assert!(w.fed.pools()["gone"].deleted);
    let highest_before = w.fed.highest_token();
    assert_eq!(
        highest_before,
        before.iter().map(|t| t.3).max().expect("tokens"),
        "highest is the largest token"
    );
    let owners_before: Vec<_> =
        ["10.0.0.1", "10.0.0.2"].iter().map(|a| w.fed.address("p", ip(a)).expect("listed").owner).collect();

    w.apply(6, EventKind::TokensRaised { by: 1_000 });

    let after = w.all_tokens();
    assert_eq!(after.len(), before.len());
    for (old, new) in before.iter().zip(&after) {
        assert_eq!((&old.0, old.1, &old.2), (&new.0, new.1, &new.2));
        assert_eq!(new.3, old.3 + 1_000, "{old:?} -> {new:?}");
    }
    assert_eq!(w.fed.highest_token(), highest_before + 1_000);
    assert_eq!(w.fed.token_floor(), 1_000);
    assert_eq!(w.fed.stream_time_ms(), 6);
    let owners_after: Vec<_> =
        ["10.0.0.1", "10.0.0.2"].iter().map(|a| w.fed.address("p", ip(a)).expect("listed").owner).collect();
    assert_eq!(owners_after, owners_before, "only the numbers move");
}

#[test]
fn a_failover_after_the_raise_bumps_from_the_raised_value() {
    let mut w = World::new();
    w.apply(0, EventKind::PoolApplied { spec: Box::new(pool("p", &["10.0.0.1"], &["a", "b"], "g1")) });
    w.apply(1, EventKind::Heartbeat { node: "a".into() });
    w.apply(1, EventKind::Heartbeat { node: "b".into() });
    assert_eq!(w.epochs("p", "10.0.0.1", "g1"), (1, 1));
    w.apply(2, EventKind::TokensRaised { by: 500 });
    assert_eq!(w.epochs("p", "10.0.0.1", "g1"), (501, 501));
    w.apply(3, EventKind::Drain { node: "a".into() });
    assert_eq!(w.epochs("p", "10.0.0.1", "g1"), (502, 502), "the next holder gets raised + 1");
    assert_eq!(w.fed.desired_holder("p", ip("10.0.0.1"), &g("g1")), Some("b"));
    assert_eq!(w.fed.highest_token(), 502, "kept where settle moves tokens");
}

#[test]
fn a_line_created_after_the_raise_starts_at_the_floor() {
    let mut w = World::new();
    w.apply(0, EventKind::Heartbeat { node: "a".into() });
    w.apply(0, EventKind::Heartbeat { node: "c".into() });
    w.apply(1, EventKind::TokensRaised { by: 700 });
    assert_eq!(w.fed.highest_token(), 700, "no token yet: the floor");
    w.apply(
        2,
        EventKind::PoolApplied { spec: Box::new(pool("late", &["10.0.3.1", "10.0.3.2"], &["a", "c"], "g1")) },
    );
    assert_eq!(w.epochs("late", "10.0.3.1", "g1"), (701, 701), "its first holder gets floor + 1, not 1");
    // An address added to the pool later, and a new capture domain's line, start there too.
    w.apply(3, EventKind::Undesire { pool: "late".into(), address: ip("10.0.3.2") });
    assert_eq!(w.epochs("late", "10.0.3.2", "g1"), (701, 702));
    w.apply(
        4,
        EventKind::PoolApplied {
            spec: Box::new(pool("late", &["10.0.3.1", "10.0.3.2", "10.0.3.3"], &["a", "c"], "g1")),
        },
    );
    assert_eq!(w.epochs("late", "10.0.3.3", "g1"), (701, 701));
    w.apply(
        5,
        EventKind::PoolApplied {
            spec: Box::new(pool("late", &["10.0.3.1", "10.0.3.2", "10.0.3.3"], &["a", "c"], "g2")),
        },
    );
    assert_eq!(w.epochs("late", "10.0.3.1", "g2"), (702, 701), "new line: floor + 1; owner a -> c");
    assert_eq!(w.epochs("late", "10.0.3.1", "g1"), (702, 702), "old line: holder gone, bumped");
    // A second raise stacks on the floor.
    w.apply(6, EventKind::TokensRaised { by: 10 });
    assert_eq!(w.fed.token_floor(), 710);
    w.apply(7, EventKind::PoolApplied { spec: Box::new(pool("later", &["10.0.4.1"], &["a"], "g1")) });
    assert_eq!(w.epochs("later", "10.0.4.1", "g1"), (711, 711));
}

#[test]
fn a_raise_that_would_overflow_is_rejected_and_changes_nothing() {
    let mut w = World::busy();
    let highest = w.fed.highest_token();
    let before = format!("{:?}", w.fed);
    let by = u64::MAX - highest + 1;
    let err = w.fed.apply(&Event { at_ms: 99, kind: EventKind::TokensRaised { by } });
    assert_eq!(err, Err(EventRejected::TokensOverflow { by, highest }));
    assert_eq!(format!("{:?}", w.fed), before, "not even stream time");
    // The largest raise that fits is accepted: the highest token is then u64::MAX.
    w.apply(99, EventKind::TokensRaised { by: by - 1 });
    assert_eq!(w.fed.highest_token(), u64::MAX);
    assert!(w.all_tokens().iter().all(|t| t.3 >= by - 1));
}

#[test]
fn actions_stamped_before_the_raise_are_stale_and_fresh_ones_planned() {
    let mut w = World::new();
    w.apply(0, EventKind::PoolApplied { spec: Box::new(pool("p", &["10.0.0.1"], &["a", "b"], "g1")) });
    w.apply(0, EventKind::Heartbeat { node: "a".into() });
    let mut engine = NodeEngine::open("a", MemoryJournalStore::new()).expect("opens");
    let _ = engine.reconcile(&w.fed, &w.fed).expect("reconciles");
    let planned: Vec<_> = engine.entries().map(|e| (e.action.capture_epoch.get(), e.state)).collect();
    assert!(
        !planned.is_empty()
            && planned.iter().all(|(epoch, state)| *epoch == 1 && *state == EntryState::Approved)
    );
    w.apply(1, EventKind::TokensRaised { by: 1_000 });
    let first = engine.entries().next().expect("an entry").action.clone();
    assert_eq!(
        tenure_core::fence::check(&first, &w.fed, &engine.durable().high_water),
        FenceVerdict::Stale { reason: StaleReason::StaleEpoch }
    );
    let _ = engine.reconcile(&w.fed, &w.fed).expect("reconciles");
    let states: Vec<_> = engine.entries().map(|e| (e.action.capture_epoch.get(), e.state)).collect();
    assert!(
        states
            .iter()
            .any(|(epoch, state)| *epoch == 1 && *state == EntryState::Skipped(StaleReason::StaleEpoch)),
        "{states:?}"
    );
    assert!(
        states.iter().any(|(epoch, state)| *epoch == 1_001 && *state == EntryState::Approved),
        "{states:?}"
    );
}
