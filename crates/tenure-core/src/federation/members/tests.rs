use std::net::IpAddr;

use super::super::EventRejected;
use super::*;
use crate::log::{Event, EventKind};
use crate::model::{Approval, Authority, PoolSpec, ProviderSpec};

fn node(name: &str) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        provider: "cloud".into(),
        placement_group: "g1".into(),
        priority: 0,
        nic: format!("eni-{name}"),
        capacity: None,
    }
}

/// Pool `p`: 32 addresses, members `a`…`d` (`c` and `d` not registered at first), TTL 1 s,
/// `preempt: true` (each address goes to its best-ranked member: a new one takes its share).
fn pool() -> PoolSpec {
    PoolSpec {
        name: "p".into(),
        addresses: (0..32).map(|i| IpAddr::from([10, 0, 0, i])).collect(),
        provider: "cloud".into(),
        placement_group: "g1".into(),
        members: ["a", "b", "c", "d"].map(str::to_owned).into(),
        authority: Authority::None,
        approval: Approval::Auto,
        deprovision_hold_ms: 0,
        heartbeat_ttl_ms: 1_000,
        promotion_hold_ms: 0,
        epoch_locking: true,
        prefer_nodes: vec![],
        preempt: true,
        auto_failover: true,
    }
}

/// Nodes `a`, `b` registered from the start, pool `p` applied, both alive at 0.
fn fleet() -> Federation {
    let providers = [ProviderSpec { name: "cloud".into(), kind: ProviderKind::SimCloud }];
    let mut fed = Federation::new(&[node("a"), node("b")], &providers);
    apply(&mut fed, 0, EventKind::PoolApplied { spec: Box::new(pool()) });
    for name in ["a", "b"] {
        apply(&mut fed, 0, EventKind::Heartbeat { node: name.into() });
    }
    fed
}

fn apply(fed: &mut Federation, at_ms: u64, kind: EventKind) {
    fed.apply(&Event { at_ms, kind }).expect("accepted");
}

fn register(spec: NodeSpec) -> EventKind {
    EventKind::NodeRegistered { spec, provider_kind: ProviderKind::SimCloud }
}

/// How many of `p`'s addresses each node owns, by name.
fn shares(fed: &Federation) -> Vec<(String, usize)> {
    let mut shares: Vec<(String, usize)> = fed.nodes().iter().map(|n| (n.spec.name.clone(), 0)).collect();
    for state in fed.pools()["p"].addresses.values() {
        if let Some(owner) = state.owner {
            shares[owner as usize].1 += 1;
        }
    }
    shares
}

/// An address, its owner and desired holder by name, its ownershipEpoch and captureEpoch.
type Named = (IpAddr, Option<String>, Option<String>, u64, u64);

/// Every address's owner and desired holder by name, with its tokens.
fn by_name(fed: &Federation) -> Vec<Named> {
    let name = |id: Option<NodeId>| id.map(|id| fed.node_name(id).to_owned());
    fed.pools()["p"]
        .addresses
        .iter()
        .map(|(a, s)| {
            (*a, name(s.owner), name(s.line.desired_holder), s.ownership_epoch.get(), s.line.epoch.get())
        })
        .collect()
}

#[test]
fn a_registered_node_becomes_a_member_and_takes_its_share() {
    let mut fed = fleet();
    assert_eq!(fed.pools()["p"].member_ids.len(), 2, "c and d are listed, not registered");
    apply(&mut fed, 100, register(node("c")));
    assert_eq!(fed.node_id("c"), Some(2), "the next id");
    assert_eq!(fed.pools()["p"].member_ids.len(), 3);
    apply(&mut fed, 200, EventKind::Heartbeat { node: "c".into() });
    let shares = shares(&fed);
    assert!(shares.iter().all(|(_, n)| *n > 0), "each of the three owns some: {shares:?}");
    // A restart of the same router registers it again: nothing changes.
    let before = fed.snapshot();
    let events = fed.events_applied();
    apply(&mut fed, 300, register(node("c")));
    assert_eq!(fed.events_applied(), events + 1);
    assert_eq!(by_name(&fed), {
        let restored = fed.restore(&before).expect("restores");
        by_name(&restored)
    });
}

#[test]
fn a_registration_that_is_another_router_is_rejected_and_changes_nothing() {
    let mut fed = fleet();
    let before = fed.snapshot();
    let other_nic = NodeSpec { nic: "eni-other".into(), ..node("a") };
    let cases: Vec<(EventKind, &str)> = vec![
        (register(other_nic), "node `a` names nic `eni-other`, but the log has `eni-a`"),
        (register(NodeSpec { nic: "eni-b".into(), ..node("c") }), "which is node `b`'s"),
        (
            register(NodeSpec { placement_group: "g2".into(), ..node("b") }),
            "placementGroup `g2`, but the log has `g1`",
        ),
        (
            EventKind::NodeRegistered { spec: node("c"), provider_kind: ProviderKind::Aws },
            "provider `cloud` is of kind `sim-cloud` in the log, not `aws`",
        ),
    ];
    for (kind, says) in cases {
        let err = fed.apply(&Event { at_ms: 50, kind }).expect_err("rejected");
        assert!(err.to_string().contains(says), "{err}");
        assert_eq!(fed.snapshot(), before, "a rejected event changes nothing");
    }
    // The same router with another priority and capacity is an update.
    apply(&mut fed, 60, register(NodeSpec { priority: 7, capacity: Some(3), ..node("b") }));
    let b = &fed.nodes()[fed.node_id("b").expect("b") as usize].spec;
    assert_eq!((b.priority, b.capacity), (7, Some(3)));
    assert_eq!(shares(&fed)[1].1, 3, "b's new capacity is in force");
}

#[test]
fn a_node_is_retired_only_once_it_holds_nothing_and_then_is_forgotten() {
    let mut fed = fleet();
    apply(&mut fed, 0, register(node("c")));
    apply(&mut fed, 0, register(node("d")));
    for name in ["c", "d"] {
        apply(&mut fed, 0, EventKind::Heartbeat { node: name.into() });
    }
    assert!(shares(&fed).iter().all(|(_, n)| *n > 0));
    let err =
        fed.apply(&Event { at_ms: 10, kind: EventKind::NodeRetired { node: "b".into(), force: false } });
    assert!(
        matches!(&err, Err(EventRejected::NodeHolds { node, what: "owns", .. }) if node == "b"),
        "{err:?}"
    );
    assert_eq!(fed.retirement_refused("b"), err.err());
    // b stops; a, c and d go on and take its addresses once its heartbeat expires.
    for at in [500, 1_000, 1_500] {
        for name in ["a", "c", "d"] {
            apply(&mut fed, at, EventKind::Heartbeat { node: name.into() });
        }
    }
    assert_eq!(shares(&fed)[1], ("b".to_owned(), 0));
    assert_eq!(fed.retirement_refused("b"), None);
    let kept = by_name(&fed);
    apply(&mut fed, 1_600, EventKind::NodeRetired { node: "b".into(), force: false });
    assert_eq!(fed.node_id("b"), None);
    assert_eq!(fed.node_id("d"), Some(2), "later ids moved down");
    assert_eq!(by_name(&fed), kept, "every owner and holder by name, every token, as before");
    assert_eq!(
        fed.pools()["p"].member_ids.iter().map(|id| fed.node_name(*id)).collect::<Vec<_>>(),
        ["a", "c", "d"]
    );
    let err = fed.apply(&Event { at_ms: 1_700, kind: EventKind::Heartbeat { node: "b".into() } });
    assert!(matches!(err, Err(EventRejected::UnknownNode { .. })), "{err:?}");
    let snapshot = String::from_utf8(fed.snapshot()).expect("UTF-8");
    assert!(!snapshot.contains("\"b\"") && !snapshot.contains("eni-b"), "the snapshot forgets b: {snapshot}");
    // It may come back: a new registration, the next id.
    apply(&mut fed, 1_800, register(node("b")));
    assert_eq!(fed.node_id("b"), Some(3));
}

#[test]
fn a_snapshot_carries_the_registry_and_restores_over_any_other() {
    let mut fed = fleet();
    apply(&mut fed, 0, register(node("c")));
    apply(&mut fed, 0, EventKind::Heartbeat { node: "c".into() });
    for name in ["b", "c"] {
        apply(&mut fed, 1_500, EventKind::Heartbeat { node: name.into() });
    }
    apply(&mut fed, 1_600, EventKind::NodeRetired { node: "a".into(), force: false });
    let bytes = fed.snapshot();
    // Over the registry it started from, and over an empty one: the snapshot's registry.
    let providers = [ProviderSpec { name: "cloud".into(), kind: ProviderKind::SimCloud }];
    for fresh in [Federation::new(&[node("a"), node("b")], &providers), Federation::new(&[], &[])] {
        let mut restored = fresh.restore(&bytes).expect("restores");
        assert_eq!(restored.snapshot(), bytes);
        let mut whole = fed.clone();
        for (at, kind) in [
            (1_700, register(node("d"))),
            (1_700, EventKind::Heartbeat { node: "d".into() }),
            (1_800, EventKind::Heartbeat { node: "b".into() }),
        ] {
            apply(&mut restored, at, kind.clone());
            apply(&mut whole, at, kind);
        }
        assert_eq!(restored.snapshot(), whole.snapshot(), "then the same events, the same projection");
    }
    // The registry restored is the snapshot's alone: providers too, whatever this one says.
    let aws = [
        ProviderSpec { name: "cloud".into(), kind: ProviderKind::Aws },
        ProviderSpec { name: "extra".into(), kind: ProviderKind::Exec },
    ];
    let restored = Federation::new(&[], &aws).restore(&bytes).expect("restores");
    assert_eq!(restored.provider_kind("cloud"), Some(ProviderKind::SimCloud));
    assert_eq!(restored.provider_kind("extra"), None);
}

#[test]
fn a_provider_stays_known_after_its_last_node_retired_and_a_snapshot_keeps_it() {
    let mut fed = fleet();
    let lab = NodeSpec { provider: "lab".into(), nic: "lan-x".into(), ..node("x") };
    apply(&mut fed, 0, EventKind::NodeRegistered { spec: lab, provider_kind: ProviderKind::SimOnprem });
    let lab_pool =
        PoolSpec { name: "lab".into(), provider: "lab".into(), members: vec!["x".into()], ..pool() };
    apply(&mut fed, 0, EventKind::PoolApplied { spec: Box::new(lab_pool.clone()) });
    apply(&mut fed, 10, EventKind::NodeRetired { node: "x".into(), force: false });
    let bytes = fed.snapshot();
    let mut restored = Federation::new(&[], &[]).restore(&bytes).expect("restores");
    assert_eq!(restored.provider_kind("lab"), Some(ProviderKind::SimOnprem));
    // The same registration is taken, and one of another kind rejected, by both.
    for (kind, taken) in [(ProviderKind::Aws, false), (ProviderKind::SimOnprem, true)] {
        let event = Event {
            at_ms: 20,
            kind: EventKind::NodeRegistered {
                spec: NodeSpec { provider: "lab".into(), nic: "lan-y".into(), ..node("y") },
                provider_kind: kind,
            },
        };
        assert_eq!(fed.clone().apply(&event).is_ok(), taken);
        assert_eq!(restored.clone().apply(&event).is_ok(), taken);
    }
    apply(&mut restored, 30, EventKind::PoolApplied { spec: Box::new(lab_pool) });
}

#[test]
fn a_starting_agent_registers_its_own_nodes_and_checks_its_pins() {
    let mut fed = fleet();
    let providers = [ProviderSpec { name: "cloud".into(), kind: ProviderKind::SimCloud }];
    let run =
        |fed: &Federation, own: &[NodeSpec], pins: &[NodeSpec]| registrations(fed, own, pins, &providers);
    // Known and the same: nothing. New: registered. A pin the log lacks: left to its own agent.
    assert_eq!(run(&fed, &[node("a")], &[node("b"), node("d")]), Ok(vec![]));
    assert_eq!(run(&fed, &[node("c")], &[]), Ok(vec![register(node("c"))]));
    // Its own node reconfigured: an update; a pin that differs in anything: refused.
    let b7 = NodeSpec { priority: 7, ..node("b") };
    assert_eq!(run(&fed, std::slice::from_ref(&b7), &[]), Ok(vec![register(b7.clone())]));
    let e = run(&fed, &[node("a")], &[b7]).expect_err("a pin differs");
    assert!(
        e.starts_with("peers: pinned node `b`: this config names priority `7`, but the log has `0`"),
        "{e}"
    );
    // Another router by the same name: refused, naming the way out.
    let e = run(&fed, &[NodeSpec { nic: "eni-z".into(), ..node("a") }], &[]).expect_err("another router");
    assert!(e.contains("node `a` names nic `eni-z`, but the log has `eni-a` (retire it first"), "{e}");
    // Another node's NIC: refused at start, not registered and then found missing.
    let e = run(&fed, &[NodeSpec { nic: "eni-b".into(), ..node("c") }], &[]).expect_err("b's NIC");
    assert!(
        e.contains(
            "node `c` names nic `eni-b` of provider `cloud`, which is node `b`'s: this agent does not start"
        ),
        "{e}"
    );
    // What it appends is what the log takes.
    for kind in run(&fed, &[node("c")], &[]).expect("fine") {
        apply(&mut fed, 10, kind);
    }
    assert_eq!(run(&fed, &[node("c")], &[]), Ok(vec![]));
}

#[test]
fn an_operator_s_retire_waits_for_silence_and_for_what_the_log_says_the_node_holds() {
    use crate::agent::{SubmitRefusal, check_submit};
    use crate::journal::MemoryJournalStore;
    let retire = |fed: &Federation, node: &str, force: bool| {
        check_submit::<MemoryJournalStore>(fed, &[], &EventKind::NodeRetired { node: node.into(), force })
    };
    let mut fed = fleet();
    // A node in no pool that heartbeats: heard from lately, whatever pools say of liveness.
    let z = NodeSpec { nic: "eni-z".into(), ..node("z") };
    apply(&mut fed, 100, register(z));
    apply(&mut fed, 100, EventKind::Heartbeat { node: "z".into() });
    let refused = retire(&fed, "z", false).expect_err("heard from");
    assert!(
        matches!(&refused, SubmitRefusal::Refused(m) if m.contains("was heard from 0 ms ago")),
        "{refused:?}"
    );
    // b holds addresses by the log: an executed acquire of each, confirmed.
    let b = fed.node_id("b").expect("b");
    let (address, _) = fed.pools()["p"]
        .addresses
        .iter()
        .find(|(_, s)| s.owner == Some(b))
        .map(|(a, s)| (*a, s.clone()))
        .expect("b owns one");
    let line = fed.pools()["p"].addresses[&address].line.epoch.get();
    let owner = fed.pools()["p"].addresses[&address].ownership_epoch.get();
    let key = format!("p/{address}/assign-secondary-ip/b/cloud/eni-b/owner:{owner}:epoch:{line}");
    apply(
        &mut fed,
        200,
        EventKind::ActionResult {
            node: "b".into(),
            idempotency_key: key,
            outcome: crate::log::ActionOutcome::Executed,
            detail: String::new(),
        },
    );
    // b stops; a takes everything once b's heartbeat expired (1 s TTL), and z is silent too.
    for at in [600, 1_200, 1_800, 4_000] {
        apply(&mut fed, at, EventKind::Heartbeat { node: "a".into() });
    }
    assert_eq!(retire(&fed, "z", false), Ok(()));
    let refused = retire(&fed, "b", false).expect_err("held by the log");
    assert!(
        matches!(&refused, SubmitRefusal::Refused(m) if m.contains(&format!("still holds p/{address} by the log"))),
        "{refused:?}"
    );
    assert_eq!(retire(&fed, "b", true), Ok(()), "forced");
    // On a cloud, a's confirmed acquire of the address since moved it: b holds nothing more.
    let a = fed.node_id("a").expect("a");
    let state = &fed.pools()["p"].addresses[&address];
    assert_eq!(state.line.desired_holder, Some(a));
    let key = format!(
        "p/{address}/assign-secondary-ip/a/cloud/eni-a/owner:{}:epoch:{}",
        state.ownership_epoch.get(),
        state.line.epoch.get()
    );
    apply(
        &mut fed,
        4_100,
        EventKind::ActionResult {
            node: "a".into(),
            idempotency_key: key,
            outcome: crate::log::ActionOutcome::Executed,
            detail: String::new(),
        },
    );
    assert_eq!(retire(&fed, "b", false), Ok(()));
}
