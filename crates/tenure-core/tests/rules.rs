//! One test per rule of SPEC sections 1–6 and 13 that the scenario files do not already pin.
//!
//! Over 600 lines: one test per rule, sharing one rig (`World`); a second binary would cost a link.

use std::collections::BTreeSet;
use std::net::IpAddr;

use tenure_core::arbitration;
use tenure_core::federation::{EventRejected, Federation};
use tenure_core::fence::{FenceVerdict, StaleReason};
use tenure_core::journal::{EntryState, JournalStore, MemoryJournalStore};
use tenure_core::log::{ActionOutcome, Event, EventKind};
use tenure_core::model::{
    Approval, Authority, CaptureDomain, NodeSpec, PoolSpec, ProviderKind, ProviderSpec, Verb,
};
use tenure_core::node::NodeEngine;
use tenure_core::retry::RetryBackoff;

fn node(name: &str, priority: i64, capacity: Option<u64>) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        provider: "sim1".into(),
        placement_group: "g1".into(),
        priority,
        nic: format!("eni-{name}"),
        capacity,
    }
}

fn pool(name: &str, addresses: &[&str], members: &[&str]) -> PoolSpec {
    PoolSpec {
        name: name.into(),
        addresses: addresses.iter().map(|a| a.parse().expect("address")).collect(),
        provider: "sim1".into(),
        placement_group: "g1".into(),
        members: members.iter().map(|m| (*m).to_owned()).collect(),
        authority: Authority::None,
        approval: Approval::Auto,
        deprovision_hold_ms: 1_000,
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

struct World {
    fed: Federation,
}

impl World {
    fn new(nodes: &[NodeSpec]) -> Self {
        let providers = [
            ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud },
            ProviderSpec { name: "sim2".into(), kind: ProviderKind::SimCloud },
        ];
        Self { fed: Federation::new(nodes, &providers) }
    }

    fn apply(&mut self, at_ms: u64, kind: EventKind) {
        self.fed.apply(&Event { at_ms, kind }).expect("accepted");
    }

    fn pool(&mut self, at_ms: u64, spec: PoolSpec) {
        self.apply(at_ms, EventKind::PoolApplied { spec: Box::new(spec) });
    }

    fn hb(&mut self, at_ms: u64, node: &str) {
        self.apply(at_ms, EventKind::Heartbeat { node: node.into() });
    }

    fn owner(&self, pool: &str, address: &str) -> Option<String> {
        let state = self.fed.address(pool, ip(address)).expect("address");
        state.owner.map(|id| self.fed.node_name(id).to_owned())
    }

    fn epochs(&self, pool: &str, address: &str) -> (u64, u64) {
        let domain = CaptureDomain::new("sim1", "g1");
        (
            self.fed.ownership_epoch(pool, ip(address)).get(),
            self.fed.capture_epoch(pool, ip(address), &domain).get(),
        )
    }
}

#[test]
fn capture_epoch_bumps_on_every_holder_change_including_back_and_to_none() {
    let mut w = World::new(&[node("a", 10, None), node("b", 0, None)]);
    w.pool(0, pool("p", &["10.0.0.1"], &["a", "b"]));
    assert_eq!(w.epochs("p", "10.0.0.1"), (0, 0), "never held");
    w.hb(0, "a");
    w.hb(0, "b");
    assert_eq!(w.epochs("p", "10.0.0.1"), (1, 1), "first holder gets 1");
    w.apply(1, EventKind::Drain { node: "a".into() });
    assert_eq!(w.epochs("p", "10.0.0.1"), (2, 2));
    w.apply(2, EventKind::Undrain { node: "a".into() });
    w.apply(3, EventKind::Drain { node: "b".into() });
    assert_eq!(w.owner("p", "10.0.0.1").as_deref(), Some("a"));
    assert_eq!(w.epochs("p", "10.0.0.1"), (3, 3), "back to an earlier holder still bumps");
    w.apply(4, EventKind::Undesire { pool: "p".into(), address: ip("10.0.0.1") });
    assert_eq!(w.epochs("p", "10.0.0.1"), (3, 4), "to none: capture bumps, owner stays");
    assert_eq!(w.owner("p", "10.0.0.1").as_deref(), Some("a"), "an undesired address keeps its owner");
    w.apply(5, EventKind::Undesire { pool: "p".into(), address: ip("10.0.0.1") });
    assert_eq!(w.epochs("p", "10.0.0.1"), (3, 4), "undesiring an undesired address bumps nothing");
    w.apply(6, EventKind::Desire { pool: "p".into(), address: ip("10.0.0.1") });
    w.apply(7, EventKind::Desire { pool: "p".into(), address: ip("10.0.0.1") });
    assert_eq!(w.epochs("p", "10.0.0.1"), (3, 5));
}

#[test]
fn stream_time_and_heartbeats_never_go_backwards() {
    let mut w = World::new(&[node("a", 0, None)]);
    w.pool(0, pool("p", &["10.0.0.1"], &["a"]));
    w.hb(5_000, "a");
    w.hb(100, "a");
    assert_eq!(w.fed.stream_time_ms(), 5_000, "a late event does not move stream time back");
    assert_eq!(w.fed.nodes()[0].last_heartbeat_ms, Some(5_000), "nor a heartbeat");
    assert_eq!(w.owner("p", "10.0.0.1").as_deref(), Some("a"));
}

#[test]
fn a_heartbeat_stamped_behind_the_stream_counts_as_of_the_stream_time_the_log_took_it() {
    // Fleet mode: the appending host's clock is 10 s behind the others'. Its heartbeat is not
    // old news: the node was alive when the log took it (SPEC 3, "Time in a fleet").
    let mut pool = pool("p", &["10.0.0.1"], &["a", "b"]);
    pool.heartbeat_ttl_ms = 1_000;
    let mut w = World::new(&[node("a", 10, None), node("b", 0, None)]);
    w.pool(0, pool);
    w.hb(19_500, "a");
    w.hb(19_500, "b");
    assert_eq!(w.owner("p", "10.0.0.1").as_deref(), Some("a"));
    w.hb(20_000, "b");
    w.hb(10_000, "a");
    assert_eq!(w.fed.nodes()[0].last_heartbeat_ms, Some(20_000), "counted at the stream time");
    assert_eq!(w.fed.nodes()[0].heartbeat_stamp_ms, Some(19_500), "the newest stamp is kept");
    // TTL 1 s + promotion hold 1 s from 20_000 (by its stamps alone a expired at 21_500).
    w.hb(21_900, "b");
    assert_eq!(w.owner("p", "10.0.0.1").as_deref(), Some("a"), "a is alive: it keeps the address");
    w.hb(22_000, "b");
    assert_eq!(
        w.owner("p", "10.0.0.1").as_deref(),
        Some("b"),
        "and expires counting from when the log took it"
    );
}

#[test]
fn a_rejected_event_changes_nothing() {
    let mut w = World::new(&[node("a", 0, None)]);
    w.pool(0, pool("p", &["10.0.0.1"], &["a"]));
    w.hb(10, "a");
    let before = format!("{:?}", w.fed);
    let err = w.fed.apply(&Event { at_ms: 99, kind: EventKind::Drain { node: "zed".into() } });
    assert!(matches!(err, Err(EventRejected::UnknownNode { .. })));
    let mut overlapping = pool("q", &["10.0.0.1"], &["a"]);
    overlapping.name = "q".into();
    let err = w.fed.apply(&Event { at_ms: 99, kind: EventKind::PoolApplied { spec: Box::new(overlapping) } });
    assert!(matches!(err, Err(EventRejected::Overlap { .. })));
    let mut unknown = pool("r", &["10.0.0.2"], &["a"]);
    unknown.provider = "nope".into();
    let err = w.fed.apply(&Event { at_ms: 99, kind: EventKind::PoolApplied { spec: Box::new(unknown) } });
    assert!(matches!(err, Err(EventRejected::UnknownProvider { .. })));
    assert_eq!(format!("{:?}", w.fed), before, "no partial apply, not even stream time");
}

#[test]
fn events_naming_no_current_target_only_move_stream_time() {
    let mut w = World::new(&[node("a", 0, None)]);
    w.pool(0, pool("p", &["10.0.0.1"], &["a"]));
    w.apply(50, EventKind::Desire { pool: "nope".into(), address: ip("10.0.0.1") });
    w.apply(60, EventKind::Undesire { pool: "p".into(), address: ip("10.9.9.9") });
    assert_eq!(w.fed.stream_time_ms(), 60);
    assert!(w.fed.address("p", ip("10.0.0.1")).expect("a").desired);
}

#[test]
fn auto_failover_off_keeps_an_expired_owner_but_not_a_drained_one() {
    let mut w = World::new(&[node("a", 10, None), node("b", 0, None)]);
    let mut spec = pool("p", &["10.0.0.1", "10.0.0.2"], &["a", "b"]);
    spec.auto_failover = false;
    w.pool(0, spec);
    w.hb(0, "a");
    assert_eq!(w.owner("p", "10.0.0.1").as_deref(), Some("a"));
    w.hb(100_000, "b");
    assert_eq!(w.owner("p", "10.0.0.1").as_deref(), Some("a"), "expiry does not move ownership");
    w.apply(100_001, EventKind::Health { node: "a".into(), healthy: false });
    assert_eq!(w.owner("p", "10.0.0.1").as_deref(), Some("b"), "health still does");
    w.apply(100_002, EventKind::Health { node: "a".into(), healthy: true });
    w.apply(100_003, EventKind::Drain { node: "b".into() });
    assert_eq!(w.owner("p", "10.0.0.1"), None, "a new placement needs full eligibility: a is expired");
}

#[test]
fn preempt_takes_back_sticky_does_not() {
    for preempt in [false, true] {
        let mut w = World::new(&[node("a", 10, None), node("b", 0, None)]);
        let mut spec = pool("p", &["10.0.0.1"], &["a", "b"]);
        spec.preempt = preempt;
        w.pool(0, spec);
        w.hb(0, "b");
        assert_eq!(w.owner("p", "10.0.0.1").as_deref(), Some("b"));
        w.hb(1, "a");
        let expected = if preempt { "a" } else { "b" };
        assert_eq!(w.owner("p", "10.0.0.1").as_deref(), Some(expected), "preempt={preempt}");
    }
}

#[test]
fn cold_placement_picks_the_highest_rendezvous_score_of_the_canonical_text() {
    // Octets of every digit count (0, 9, 10, 99, 100, 255) in every position, and IPv6 forms
    // (compressed, IPv4-mapped, full): the score's input is the address's canonical text, however
    // arbitration writes it, checked against the plain `format!` of `rendezvous_score`.
    let names = ["a", "b", "c", "d", "e"];
    let octets = [0_u8, 9, 10, 99, 100, 255];
    let mut v4 = Vec::new();
    for a in octets {
        for b in octets {
            for c in octets {
                for d in octets {
                    v4.push(IpAddr::from([a, b, c, d]));
                }
            }
        }
    }
    let v6: Vec<IpAddr> = [
        "::",
        "::1",
        "2001:db8::1",
        "2001:db8:0:1::ff",
        "fe80::1:2:3:4",
        "::ffff:10.0.0.1",
        "64:ff9b::a00:1",
        "2001:db8:1:2:3:4:5:6",
    ]
    .into_iter()
    .map(ip)
    .collect();
    let nodes: Vec<NodeSpec> = names.iter().map(|n| node(n, 0, None)).collect();
    let mut w = World::new(&nodes);
    for name in names {
        w.hb(0, name);
    }
    for (pool_name, addresses) in [("p4", &v4), ("p6", &v6)] {
        let mut spec = pool(pool_name, &[], &names);
        spec.addresses = addresses.clone();
        spec.addresses.sort();
        spec.preempt = true;
        w.pool(0, spec);
        for address in addresses {
            let expected = names
                .iter()
                .max_by_key(|n| {
                    (arbitration::rendezvous_score(pool_name, *address, n), std::cmp::Reverse(**n))
                })
                .expect("five nodes");
            let state = w.fed.address(pool_name, *address).expect("address");
            let owner = state.owner.map(|id| w.fed.node_name(id));
            assert_eq!(owner, Some(*expected), "{pool_name}/{address}");
        }
    }
}

#[test]
fn sticky_owners_count_against_capacity_before_new_placements_across_pools() {
    // b (capacity 1) owns q's address stickily; when p's address needs a home, b is full.
    let mut w = World::new(&[node("a", 10, None), node("b", 0, Some(1))]);
    let mut p = pool("p", &["10.0.0.1"], &["a", "b"]);
    p.prefer_nodes = vec!["b".into()];
    w.pool(0, p);
    w.pool(0, pool("q", &["10.0.1.1"], &["b"]));
    w.hb(0, "b");
    // Canonical order: p first, so p's address takes b's only slot and q has no owner.
    assert_eq!(w.owner("p", "10.0.0.1").as_deref(), Some("b"));
    assert_eq!(w.owner("q", "10.0.1.1"), None);
    assert_eq!(w.fed.pools()["q"].conditions.capacity_exhausted, 1);
    w.hb(1, "a");
    // Sticky p/10.0.0.1 stays on b (preempt false); q still has no room.
    assert_eq!(w.owner("p", "10.0.0.1").as_deref(), Some("b"));
    assert_eq!(w.owner("q", "10.0.1.1"), None);
}

#[test]
fn deleting_and_reapplying_a_pool_continues_its_tokens() {
    let mut w = World::new(&[node("a", 0, None)]);
    w.pool(0, pool("p", &["10.0.0.1", "10.0.0.2"], &["a"]));
    w.hb(0, "a");
    w.apply(1, EventKind::Undesire { pool: "p".into(), address: ip("10.0.0.2") });
    assert_eq!(w.epochs("p", "10.0.0.1"), (1, 1));
    w.apply(2, EventKind::PoolDeleted { pool: "p".into() });
    assert_eq!(w.owner("p", "10.0.0.1"), None);
    assert_eq!(w.epochs("p", "10.0.0.1"), (2, 2), "deletion bumps as usual");
    assert!(w.fed.pools()["p"].deleted);
    w.pool(3, pool("p", &["10.0.0.1", "10.0.0.2", "10.0.0.3"], &["a"]));
    assert_eq!(w.epochs("p", "10.0.0.1"), (3, 3), "re-applying continues, never resets");
    assert!(w.fed.address("p", ip("10.0.0.2")).expect("a").desired, "a re-added address starts desired");
    // Re-apply without 10.0.0.3: it retires like a deletion; survivors keep owner and flags.
    w.apply(4, EventKind::Undesire { pool: "p".into(), address: ip("10.0.0.1") });
    w.pool(5, pool("p", &["10.0.0.1", "10.0.0.2"], &["a"]));
    assert!(!w.fed.address("p", ip("10.0.0.1")).expect("a").desired, "a surviving address keeps its flag");
    assert_eq!(w.owner("p", "10.0.0.1").as_deref(), Some("a"));
    assert!(!w.fed.address("p", ip("10.0.0.3")).expect("a").active);
    assert_eq!(w.owner("p", "10.0.0.3"), None);
}

#[test]
fn a_changed_capture_domain_retires_the_old_epoch_line() {
    let mut w = World::new(&[node("a", 0, None)]);
    w.pool(0, pool("p", &["10.0.0.1"], &["a"]));
    w.hb(0, "a");
    let g1 = CaptureDomain::new("sim1", "g1");
    assert_eq!(w.fed.capture_epoch("p", ip("10.0.0.1"), &g1).get(), 1);
    let mut moved = pool("p", &["10.0.0.1"], &["a"]);
    moved.provider = "sim2".into();
    w.pool(1, moved);
    assert_eq!(w.fed.capture_epoch("p", ip("10.0.0.1"), &g1).get(), 2, "old line: holder gone, bumped");
    assert_eq!(w.fed.desired_holder("p", ip("10.0.0.1"), &g1), None);
    assert_eq!(w.owner("p", "10.0.0.1"), None, "a is not in the new domain");
}

#[test]
fn capacity_zero_holds_nothing() {
    let mut w = World::new(&[node("a", 0, Some(0))]);
    w.pool(0, pool("p", &["10.0.0.1"], &["a"]));
    w.hb(0, "a");
    assert_eq!(w.owner("p", "10.0.0.1"), None);
    assert_eq!(w.fed.pools()["p"].conditions.capacity_exhausted, 1);
}

fn engine(name: &str) -> NodeEngine<MemoryJournalStore> {
    NodeEngine::open(name, MemoryJournalStore::new()).expect("memory")
}

fn run_all(engine: &mut NodeEngine<MemoryJournalStore>, head: &Federation) -> Vec<Verb> {
    let mut verbs = Vec::new();
    while let Some(action) = engine.poll_execution(head, None).expect("memory") {
        verbs.push(action.verb);
        engine
            .handle_execution_result(&action.idempotency_key(), ActionOutcome::Executed, None)
            .expect("in flight");
    }
    verbs
}

#[test]
fn release_waits_for_the_hold_with_equality_meaning_met() {
    let mut w = World::new(&[node("a", 0, None)]);
    w.pool(0, pool("p", &["10.0.0.1"], &["a"]));
    w.hb(0, "a");
    let mut a = engine("a");
    a.reconcile(&w.fed, &w.fed).expect("ok");
    assert_eq!(run_all(&mut a, &w.fed), vec![Verb::AssignSecondaryIp, Verb::EnableForwarding]);
    w.apply(100, EventKind::Undesire { pool: "p".into(), address: ip("10.0.0.1") });
    w.hb(1_099, "a");
    a.reconcile(&w.fed, &w.fed).expect("ok");
    assert_eq!(run_all(&mut a, &w.fed), vec![], "999 ms < 1 s hold");
    w.hb(1_100, "a");
    a.reconcile(&w.fed, &w.fed).expect("ok");
    assert_eq!(run_all(&mut a, &w.fed), vec![Verb::DisableForwarding, Verb::UnassignSecondaryIp]);
    assert!(a.captured().is_empty(), "the last executed verb is a release");
    let report = a.reconcile(&w.fed, &w.fed).expect("ok");
    assert!(report.imported.is_empty(), "nothing captured, nothing to release again");
}

/// SPEC 13: on the on-prem family the hold never applies. A hand-over from a to b plans a's
/// `proxy-arp-del` at a's next reconcile, whatever the pool's hold: two routers answering ARP
/// through the hold is the failure the hold would cause there.
#[test]
fn on_prem_releases_are_never_held() {
    for kind in [ProviderKind::SimOnprem, ProviderKind::Onprem] {
        let nodes = [node("a", 10, None), node("b", 0, None)];
        let providers = [ProviderSpec { name: "sim1".into(), kind }];
        let mut w = World { fed: Federation::new(&nodes, &providers) };
        let mut spec = pool("p", &["10.0.0.1"], &["a", "b"]);
        spec.deprovision_hold_ms = 60_000;
        w.pool(0, spec);
        w.hb(0, "a");
        w.hb(0, "b");
        let mut a = engine("a");
        a.reconcile(&w.fed, &w.fed).expect("ok");
        assert_eq!(run_all(&mut a, &w.fed), vec![Verb::ProxyArpAdd, Verb::Garp], "{kind:?}");
        w.apply(10, EventKind::Drain { node: "a".into() });
        assert_eq!(w.owner("p", "10.0.0.1").as_deref(), Some("b"));
        a.reconcile(&w.fed, &w.fed).expect("ok");
        assert_eq!(run_all(&mut a, &w.fed), vec![Verb::ProxyArpDel], "{kind:?}: 0 ms into a 60 s hold");
        assert!(a.captured().is_empty());
    }
}

/// SPEC 7 (`onprem` under `authority: vrrp`): a release the desired holder made on its own
/// authority in its current epoch (keepalived said not MASTER; the log has not heard) is
/// recorded outside the gate and, once its result is in the log, re-captures the address with
/// drift repair on: a fresh epoch and a fresh acquire, or the holder would never add it again
/// (its acquire of that epoch is executed already).
#[test]
fn a_local_release_of_the_desired_holder_re_captures() {
    for drift_repair in [true, false] {
        let nodes = [node("a", 10, None)];
        let providers = [ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimOnprem }];
        let mut w = World { fed: Federation::new(&nodes, &providers).with_drift_repair(drift_repair) };
        w.pool(0, pool("p", &["10.0.0.1"], &["a"]));
        w.hb(0, "a");
        let mut a = engine("a");
        a.reconcile(&w.fed, &w.fed).expect("ok");
        assert_eq!(run_all(&mut a, &w.fed), vec![Verb::ProxyArpAdd, Verb::Garp]);
        let keys = a.record_local_release(&w.fed, "sim1", ip("10.0.0.1"), "withdrawn").expect("memory");
        assert_eq!(keys.len(), 1, "one proxy-arp-del");
        assert!(a.captured().is_empty(), "the local release leaves nothing captured");
        for key in &keys {
            w.apply(
                10,
                EventKind::ActionResult {
                    node: "a".into(),
                    idempotency_key: key.to_string(),
                    outcome: ActionOutcome::Executed,
                    detail: "withdrawn".into(),
                },
            );
        }
        let expected = if drift_repair { (1, 2) } else { (1, 1) };
        assert_eq!(w.epochs("p", "10.0.0.1"), expected, "drift repair {drift_repair}");
        a.reconcile(&w.fed, &w.fed).expect("ok");
        let verbs = run_all(&mut a, &w.fed);
        if drift_repair {
            assert_eq!(verbs, vec![Verb::ProxyArpAdd, Verb::Garp], "a fresh acquire in the new epoch");
        } else {
            assert_eq!(verbs, vec![], "without a new epoch nothing adds the address again");
        }
    }
}

#[test]
fn the_high_water_mark_survives_a_restart_and_fences_a_lagging_head() {
    let mut w = World::new(&[node("a", 0, None)]);
    w.pool(0, pool("p", &["10.0.0.1"], &["a"]));
    w.hb(0, "a");
    let stale_head = w.fed.clone();
    let mut a = engine("a");
    a.reconcile(&w.fed, &w.fed).expect("ok");
    // The epoch moves on (1 -> 3) and a sees it while importing the new acquire.
    w.apply(1, EventKind::Undesire { pool: "p".into(), address: ip("10.0.0.1") });
    w.apply(2, EventKind::Desire { pool: "p".into(), address: ip("10.0.0.1") });
    a.reconcile(&w.fed, &w.fed).expect("ok");
    a.restart().expect("memory");
    let hw = a.store().load().expect("memory").high_water;
    assert_eq!(Some(hw.highest_capture().get()), Some(3), "kept across the restart");
    // A lagging replica still shows epoch 1: the epoch-1 entries would pass against it, but the
    // durable high-water mark says 3, so nothing below 3 runs.
    let ran = {
        let mut verbs = Vec::new();
        while let Some(action) = a.poll_execution(&stale_head, None).expect("memory") {
            verbs.push(action.capture_epoch.get());
            a.handle_execution_result(&action.idempotency_key(), ActionOutcome::Executed, None).expect("ok");
        }
        verbs
    };
    assert!(ran.is_empty(), "ran {ran:?} against a lagging head");
    assert!(a.entries().all(|e| e.state == EntryState::Skipped(StaleReason::StaleEpoch)));
}

#[test]
fn importing_an_existing_key_changes_nothing_and_final_states_are_final() {
    let mut w = World::new(&[node("a", 0, None)]);
    w.pool(0, pool("p", &["10.0.0.1"], &["a"]));
    w.hb(0, "a");
    let mut a = engine("a");
    let first = a.reconcile(&w.fed, &w.fed).expect("ok");
    assert_eq!(first.imported.len(), 2);
    let second = a.reconcile(&w.fed, &w.fed).expect("ok");
    assert!(second.imported.is_empty() && second.swept.is_empty());
    run_all(&mut a, &w.fed);
    let states: BTreeSet<&str> = a.entries().map(|e| e.state.as_str()).collect();
    assert_eq!(states, BTreeSet::from(["executed"]));
    let first_key = a.entries().next().expect("an entry").action.idempotency_key();
    assert!(a.handle_execution_result(&first_key, ActionOutcome::Failed, None).is_err());
}

#[test]
fn the_gate_checks_right_before_the_call_in_journal_order() {
    let mut w = World::new(&[node("a", 10, None), node("b", 0, None)]);
    w.pool(0, pool("p", &["10.0.0.1", "10.0.0.2"], &["a", "b"]));
    w.hb(0, "a");
    w.hb(0, "b");
    let mut a = engine("a");
    a.reconcile(&w.fed, &w.fed).expect("ok");
    let first = a.poll_execution(&w.fed, None).expect("ok").expect("an action");
    assert_eq!(first.address, ip("10.0.0.1"));
    a.handle_execution_result(&first.idempotency_key(), ActionOutcome::Executed, None).expect("ok");
    // Ownership moves between two provider calls: the next one is gated against the new head.
    w.apply(1, EventKind::Drain { node: "a".into() });
    assert_eq!(a.poll_execution(&w.fed, None).expect("ok"), None);
    let skipped: Vec<_> = a.entries().filter(|e| matches!(e.state, EntryState::Skipped(_))).collect();
    assert_eq!(skipped.len(), 3);
    assert!(matches!(
        tenure_core::fence::check(&skipped[0].action, &w.fed, &Default::default()),
        FenceVerdict::Stale { reason: StaleReason::StaleEpoch }
    ));
}

#[test]
fn onprem_pools_plan_proxy_arp_verbs() {
    let providers = [ProviderSpec { name: "lan".into(), kind: ProviderKind::SimOnprem }];
    let mut n = node("a", 0, None);
    n.provider = "lan".into();
    let mut fed = Federation::new(&[n], &providers);
    let mut spec = pool("p", &["192.0.2.1"], &["a"]);
    spec.provider = "lan".into();
    spec.deprovision_hold_ms = 0;
    fed.apply(&Event { at_ms: 0, kind: EventKind::PoolApplied { spec: Box::new(spec) } }).expect("ok");
    fed.apply(&Event { at_ms: 0, kind: EventKind::Heartbeat { node: "a".into() } }).expect("ok");
    let mut a = engine("a");
    a.reconcile(&fed, &fed).expect("ok");
    assert_eq!(run_all(&mut a, &fed), vec![Verb::ProxyArpAdd, Verb::Garp]);
    fed.apply(&Event { at_ms: 1, kind: EventKind::Drain { node: "a".into() } }).expect("ok");
    a.reconcile(&fed, &fed).expect("ok");
    assert_eq!(run_all(&mut a, &fed), vec![Verb::ProxyArpDel], "on-prem release is proxy-arp-del alone");
}

#[test]
fn manual_pending_entries_are_promoted_from_the_head_and_stale_ones_skipped_at_sweep() {
    let mut w = World::new(&[node("a", 10, None), node("b", 0, None)]);
    let mut spec = pool("p", &["10.0.0.1"], &["a", "b"]);
    spec.approval = Approval::Manual;
    w.pool(0, spec);
    w.hb(0, "a");
    w.hb(0, "b");
    let mut a = engine("a");
    a.reconcile(&w.fed, &w.fed).expect("ok");
    assert!(a.entries().all(|e| e.state == EntryState::Pending));
    assert_eq!(run_all(&mut a, &w.fed), vec![], "execute gates only approved entries");
    w.apply(1, EventKind::Drain { node: "a".into() });
    let report = a.reconcile(&w.fed, &w.fed).expect("ok");
    assert_eq!(report.swept.len(), 2);
    assert!(a.entries().all(|e| e.state == EntryState::Skipped(StaleReason::StaleEpoch)));
}

/// A pool switched from `approval: auto` to `manual` moves no token: an address held and in
/// service stays `held` (its acquire ran without approvals, and needs none now).
#[test]
fn a_held_address_stays_held_when_its_pool_becomes_manual() {
    use tenure_core::federation::Phase;
    let mut w = World::new(&[node("a", 10, None), node("b", 0, None)]);
    w.pool(0, pool("p", &["10.0.0.1"], &["a", "b"]));
    w.hb(0, "a");
    w.hb(0, "b");
    let mut a = engine("a");
    a.reconcile(&w.fed, &w.fed).expect("ok");
    let verbs = run_all(&mut a, &w.fed);
    assert_eq!(verbs, vec![Verb::AssignSecondaryIp, Verb::EnableForwarding]);
    w.apply(
        1,
        EventKind::ActionResult {
            node: "a".into(),
            idempotency_key: "p/10.0.0.1/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1".into(),
            outcome: ActionOutcome::Executed,
            detail: "done".into(),
        },
    );
    assert_eq!(w.fed.address_status("p", ip("10.0.0.1")).expect("listed").phase, Phase::Held);
    let mut manual = pool("p", &["10.0.0.1"], &["a", "b"]);
    manual.approval = Approval::Manual;
    w.pool(2, manual);
    assert_eq!(w.fed.address_status("p", ip("10.0.0.1")).expect("listed").phase, Phase::Held);
}

/// A pool switched from `approval: manual` to `auto` frees the entries that were waiting (they
/// were stuck pending for ever: the planner plans the same keys, already journaled).
#[test]
fn pending_entries_of_a_pool_switched_to_auto_are_promoted() {
    let mut w = World::new(&[node("a", 10, None), node("b", 0, None)]);
    let mut spec = pool("p", &["10.0.0.1"], &["a", "b"]);
    spec.approval = Approval::Manual;
    w.pool(0, spec);
    w.hb(0, "a");
    w.hb(0, "b");
    let mut a = engine("a");
    a.reconcile(&w.fed, &w.fed).expect("ok");
    assert!(a.entries().all(|e| e.state == EntryState::Pending));
    w.pool(1, pool("p", &["10.0.0.1"], &["a", "b"]));
    let report = a.reconcile(&w.fed, &w.fed).expect("ok");
    assert_eq!(report.promoted.len(), 2, "{report:?}");
    assert_eq!(run_all(&mut a, &w.fed), vec![Verb::AssignSecondaryIp, Verb::EnableForwarding]);
    let status = w.fed.address_status("p", ip("10.0.0.1")).expect("listed");
    assert_eq!(status.phase, tenure_core::federation::Phase::Acquiring, "auto now: no wait shown");
}

#[test]
fn a_failed_action_is_retried_while_current_and_never_once_stale() {
    let mut w = World::new(&[node("a", 10, None), node("b", 0, None)]);
    w.pool(0, pool("p", &["10.0.0.1"], &["a", "b"]));
    w.hb(0, "a");
    w.hb(0, "b");
    let mut a = engine("a");
    a.reconcile(&w.fed, &w.fed).expect("ok");
    let first = a.poll_execution(&w.fed, None).expect("ok").expect("assign");
    a.handle_execution_result(&first.idempotency_key(), ActionOutcome::Failed, Some("throttled".into()))
        .expect("in flight");
    assert_eq!(a.entries().next().expect("an entry").state, EntryState::Failed);
    let report = a.reconcile(&w.fed, &w.fed).expect("ok");
    assert_eq!(report.retried, vec![first.idempotency_key()]);
    assert_eq!(run_all(&mut a, &w.fed), vec![Verb::AssignSecondaryIp, Verb::EnableForwarding]);
    // Fail again, then ownership moves: the stale failed entry is not retried.
    w.apply(1, EventKind::Undesire { pool: "p".into(), address: ip("10.0.0.1") });
    w.apply(2, EventKind::Desire { pool: "p".into(), address: ip("10.0.0.1") });
    a.reconcile(&w.fed, &w.fed).expect("ok");
    let again = a.poll_execution(&w.fed, None).expect("ok").expect("assign of epoch 3");
    a.handle_execution_result(&again.idempotency_key(), ActionOutcome::Failed, None).expect("in flight");
    w.apply(3, EventKind::Drain { node: "a".into() });
    let report = a.reconcile(&w.fed, &w.fed).expect("ok");
    assert!(report.retried.is_empty());
    let restarted = {
        a.restart().expect("memory");
        a.reconcile(&w.fed, &w.fed).expect("ok")
    };
    assert!(restarted.retried.is_empty(), "the failed set is rebuilt from the journal, still stale");
}

#[test]
fn a_failed_action_waits_out_its_backoff_and_keeps_its_attempts_and_reason() {
    let mut w = World::new(&[node("a", 10, None), node("b", 0, None)]);
    w.pool(0, pool("p", &["10.0.0.1"], &["a", "b"]));
    w.hb(1_000, "a");
    w.hb(1_000, "b");
    let backoff = RetryBackoff::from_base(500);
    let mut a = engine("a").with_retry_backoff(backoff);
    a.reconcile(&w.fed, &w.fed).expect("ok");
    let first = a.poll_execution(&w.fed, None).expect("ok").expect("assign");
    let key = first.idempotency_key();
    a.handle_execution_result(&key, ActionOutcome::Failed, Some("exit status 1: no route".into()))
        .expect("in flight");
    let entry = a.entry(&key).expect("journaled").clone();
    assert_eq!(entry.attempts.count, 1);
    assert_eq!(entry.attempts.last_at_ms(), Some(1_000), "the head's stream time at the gate");
    assert_eq!(entry.attempts.last_wall_ms(), None, "no wall clock given");
    assert_eq!(entry.attempts.last_error.as_deref(), Some("exit status 1: no route"));
    let due = a.next_attempt_ms(&entry).expect("retryable");
    assert_eq!(due, 1_000 + backoff.delay_ms(&key, 1));
    assert!((1_375..=1_500).contains(&due), "{due}");

    // Before the backoff ends, a sweep leaves it failed and says when it may run.
    w.hb(due - 1, "a");
    let report = a.reconcile(&w.fed, &w.fed).expect("ok");
    assert!(report.retried.is_empty(), "{report:?}");
    assert_eq!(report.retry_at_ms, Some(due));
    assert_eq!(a.entry(&key).map(|e| e.state), Some(EntryState::Failed));

    // From then on it is retried, and the attempt counted; the reason stays through the retry.
    w.hb(due, "a");
    let report = a.reconcile(&w.fed, &w.fed).expect("ok");
    assert_eq!(report.retried, vec![key.clone()]);
    assert_eq!(report.retry_at_ms, None);
    let second = a.poll_executions(&w.fed, None, 1, Some(1_700_000_000_000)).expect("ok");
    assert_eq!(second.len(), 1);
    let entry = a.entry(&key).expect("journaled");
    assert_eq!(entry.attempts.count, 2);
    assert_eq!(entry.attempts.last_at_ms(), Some(due));
    assert_eq!(entry.attempts.last_wall_ms(), Some(1_700_000_000_000));
    assert_eq!(entry.attempts.last_error.as_deref(), Some("exit status 1: no route"), "kept while in flight");
    a.handle_execution_result(&key, ActionOutcome::Failed, Some("timed out".into())).expect("in flight");
    let entry = a.entry(&key).expect("journaled").clone();
    assert_eq!(entry.attempts.last_error.as_deref(), Some("timed out"), "the last failure's reason");
    let next = a.next_attempt_ms(&entry).expect("retryable");
    assert!(next - due > due - 1_000, "the second wait is longer: {} then {}", due - 1_000, next - due);

    // The journal keeps it all across a restart.
    a.restart().expect("memory");
    assert_eq!(a.entry(&key), Some(&entry));
    assert_eq!(a.next_attempt_ms(&entry), Some(next));

    // A fenced action stops at once, backoff or not: drained, its epoch moved on.
    w.apply(due + 1, EventKind::Drain { node: "a".into() });
    let report = a.reconcile(&w.fed, &w.fed).expect("ok");
    assert!(report.retried.is_empty() && report.retry_at_ms.is_none(), "{report:?}");
    assert_eq!(a.next_attempt_ms(a.entry(&key).expect("kept")), None, "never retried");
}

fn result(w: &mut World, at_ms: u64, node: &str, verb: Verb, epoch: u64, owner_epoch: u64) {
    let key = format!("p/10.0.0.1/{verb}/{node}/sim1/eni-{node}/owner:{owner_epoch}:epoch:{epoch}");
    w.apply(
        at_ms,
        EventKind::ActionResult {
            node: node.into(),
            idempotency_key: key,
            outcome: ActionOutcome::Executed,
            detail: String::new(),
        },
    );
}

fn inventory(w: &mut World, at_ms: u64, holders: &[&str]) {
    w.apply(
        at_ms,
        EventKind::Inventory {
            provider: "sim1".into(),
            address: ip("10.0.0.1"),
            holders: holders.iter().map(|h| (*h).to_owned()).collect(),
            scope: None,
        },
    );
}

fn drift_world() -> World {
    let mut w = World::new(&[node("a", 10, None), node("b", 0, None)]);
    w.fed = w.fed.clone().with_drift_repair(true);
    w.pool(0, pool("p", &["10.0.0.1"], &["a", "b"]));
    w.hb(0, "a");
    w.hb(0, "b");
    w
}

#[test]
fn inventory_is_inert_without_drift_repair() {
    let mut w = World::new(&[node("a", 10, None)]);
    w.pool(0, pool("p", &["10.0.0.1"], &["a"]));
    w.hb(0, "a");
    result(&mut w, 1, "a", Verb::AssignSecondaryIp, 1, 1);
    inventory(&mut w, 2, &[]);
    inventory(&mut w, 3, &["eni-zz"]);
    assert_eq!(w.epochs("p", "10.0.0.1"), (1, 1));
    assert_eq!(w.fed.stream_time_ms(), 3, "inventory moves stream time only");
}

#[test]
fn ordinary_hand_overs_never_churn_epochs() {
    let mut w = drift_world();
    result(&mut w, 1, "a", Verb::AssignSecondaryIp, 1, 1);
    inventory(&mut w, 2, &["eni-a"]);
    w.apply(3, EventKind::Drain { node: "a".into() });
    assert_eq!(w.epochs("p", "10.0.0.1"), (2, 2));
    // An observation taken before b's assign landed is ignored once b confirmed later.
    result(&mut w, 5, "b", Verb::AssignSecondaryIp, 2, 2);
    inventory(&mut w, 4, &["eni-a"]);
    inventory(&mut w, 6, &["eni-b"]);
    assert_eq!(w.epochs("p", "10.0.0.1"), (2, 2));
    assert_eq!(w.fed.recaptures(), 0);
}

#[test]
fn drift_that_contradicts_a_confirmation_triggers_a_recapture() {
    let mut w = drift_world();
    result(&mut w, 1, "a", Verb::AssignSecondaryIp, 1, 1);
    // The desired holder confirmed in this epoch, then lost the address.
    inventory(&mut w, 2, &[]);
    assert_eq!(w.epochs("p", "10.0.0.1"), (1, 2), "captureEpoch moves, the owner does not");
    assert_eq!(w.fed.desired_holder("p", ip("10.0.0.1"), &CaptureDomain::new("sim1", "g1")), Some("a"));
    // Not yet repaired: nothing confirmed in epoch 2 to contradict.
    inventory(&mut w, 3, &[]);
    assert_eq!(w.epochs("p", "10.0.0.1"), (1, 2));
    // b holds it beside a without having released it in epoch 2: no new epoch, b's release is
    // planned in this one from the observation.
    result(&mut w, 4, "a", Verb::AssignSecondaryIp, 2, 1);
    inventory(&mut w, 5, &["eni-a", "eni-b"]);
    assert_eq!(w.epochs("p", "10.0.0.1"), (1, 2));
    // b ran that release, and still holds it: only a new epoch can release it again.
    result(&mut w, 6, "b", Verb::UnassignSecondaryIp, 2, 1);
    inventory(&mut w, 7, &["eni-a", "eni-b"]);
    assert_eq!(w.epochs("p", "10.0.0.1"), (1, 3));
    assert_eq!(w.fed.recaptures(), 2);
}

#[test]
fn holdings_without_a_release_in_the_epoch_never_recapture() {
    let mut w = drift_world();
    result(&mut w, 1, "a", Verb::AssignSecondaryIp, 1, 1);
    // An unknown NIC beside the holder (an on-prem entry no node has): reported, no epoch.
    inventory(&mut w, 2, &["eni-a", "eni-zz"]);
    // b, whose acquire result is late or lost, still holding after a hand-over back to a.
    inventory(&mut w, 3, &["eni-a", "eni-b"]);
    // Observed again and again, faster than anyone reconciles.
    for at in 4..10 {
        inventory(&mut w, at, &["eni-a", "eni-b", "eni-zz"]);
    }
    assert_eq!(w.epochs("p", "10.0.0.1"), (1, 1));
    assert_eq!(w.fed.recaptures(), 0);
    // A release b confirmed in an older epoch is not one in this epoch.
    result(&mut w, 10, "b", Verb::UnassignSecondaryIp, 0, 0);
    inventory(&mut w, 11, &["eni-a", "eni-b"]);
    assert_eq!(w.epochs("p", "10.0.0.1"), (1, 1));
    // A release in this epoch observed only at the same millisecond: not contradicted yet.
    result(&mut w, 12, "b", Verb::UnassignSecondaryIp, 1, 1);
    inventory(&mut w, 12, &["eni-a", "eni-b"]);
    assert_eq!(w.epochs("p", "10.0.0.1"), (1, 1));
    inventory(&mut w, 13, &["eni-a", "eni-b"]);
    assert_eq!(w.epochs("p", "10.0.0.1"), (1, 2));
}

#[test]
fn an_observation_counts_only_strictly_after_the_confirmation_and_only_news_is_appended() {
    let mut w = drift_world();
    let address = ip("10.0.0.1");
    assert!(w.fed.inventory_is_news("sim1", address, &[], None), "nothing observed yet");
    result(&mut w, 5, "a", Verb::AssignSecondaryIp, 1, 1);
    // Read at the same millisecond: it may have been taken before the call landed.
    inventory(&mut w, 5, &[]);
    assert_eq!(w.epochs("p", "10.0.0.1"), (1, 1));
    assert!(
        w.fed.inventory_is_news("sim1", address, &[], None),
        "not after the confirmation: worth appending again"
    );
    inventory(&mut w, 6, &[]);
    assert_eq!(w.epochs("p", "10.0.0.1"), (1, 2), "lost, observed after the confirmation");
    assert!(
        !w.fed.inventory_is_news("sim1", address, &[], None),
        "the same holders, after every confirmation"
    );
    assert!(w.fed.inventory_is_news("sim1", address, &["eni-a".to_owned()], None), "changed holders");
}

/// A read that sees only some NICs (`onprem`: each router its own interface).
fn scoped(w: &mut World, at_ms: u64, scope: &str, held: bool) {
    w.apply(
        at_ms,
        EventKind::Inventory {
            provider: "sim1".into(),
            address: ip("10.0.0.1"),
            holders: if held { vec![scope.to_owned()] } else { vec![] },
            scope: Some(vec![scope.to_owned()]),
        },
    );
}

#[test]
fn a_scoped_read_judges_only_the_nics_it_saw() {
    let mut w = drift_world();
    result(&mut w, 1, "a", Verb::AssignSecondaryIp, 1, 1);
    // b sees only its own NIC: that a holds nothing there says nothing of a.
    scoped(&mut w, 2, "eni-b", false);
    assert_eq!(w.epochs("p", "10.0.0.1"), (1, 1), "no loss read from another router's view");
    scoped(&mut w, 3, "eni-a", true);
    assert_eq!(w.fed.observed_holders("sim1", ip("10.0.0.1")), Some(vec!["eni-a"]));
    // Views of different NICs add up; each NIC keeps its own latest observation.
    scoped(&mut w, 4, "eni-b", true);
    assert_eq!(w.fed.observed_holders("sim1", ip("10.0.0.1")), Some(vec!["eni-a", "eni-b"]));
    assert!(w.fed.observed_on("sim1", ip("10.0.0.1"), "eni-b"));
    // An older read of a NIC never overrides a newer one.
    scoped(&mut w, 3, "eni-b", false);
    assert!(w.fed.observed_on("sim1", ip("10.0.0.1"), "eni-b"));
    assert_eq!(w.epochs("p", "10.0.0.1"), (1, 1), "b holding without a release in the epoch");
    // a's own read shows a lost it: a re-capture.
    scoped(&mut w, 5, "eni-a", false);
    assert_eq!(w.epochs("p", "10.0.0.1"), (1, 2));
    // A whole view speaks of every NIC.
    inventory(&mut w, 6, &[]);
    assert_eq!(w.fed.observed_holders("sim1", ip("10.0.0.1")), Some(vec![]));
}

#[test]
fn a_scoped_read_that_shows_a_release_undone_recaptures() {
    let mut w = drift_world();
    result(&mut w, 1, "a", Verb::AssignSecondaryIp, 1, 1);
    result(&mut w, 2, "b", Verb::UnassignSecondaryIp, 1, 1);
    scoped(&mut w, 3, "eni-a", true);
    assert_eq!(w.epochs("p", "10.0.0.1"), (1, 1));
    scoped(&mut w, 4, "eni-b", true);
    assert_eq!(w.epochs("p", "10.0.0.1"), (1, 2), "b still holds what it released in this epoch");
}

#[test]
fn scoped_news_is_judged_per_nic() {
    let mut w = drift_world();
    let address = ip("10.0.0.1");
    let b = Some(vec!["eni-b".to_owned()]);
    assert!(w.fed.inventory_is_news("sim1", address, &[], b.as_deref()), "nothing observed yet");
    scoped(&mut w, 2, "eni-b", false);
    assert!(!w.fed.inventory_is_news("sim1", address, &[], b.as_deref()), "b's NIC: as observed");
    let a = Some(vec!["eni-a".to_owned()]);
    assert!(w.fed.inventory_is_news("sim1", address, &[], a.as_deref()), "a's NIC was never observed");
    // a's confirmation comes after b's last observation: b's next read is worth appending once.
    result(&mut w, 3, "a", Verb::AssignSecondaryIp, 1, 1);
    assert!(w.fed.inventory_is_news("sim1", address, &[], b.as_deref()));
    scoped(&mut w, 4, "eni-b", false);
    assert!(!w.fed.inventory_is_news("sim1", address, &[], b.as_deref()));
    // a's own read after its confirmation, then quiet.
    scoped(&mut w, 5, "eni-a", true);
    assert!(!w.fed.inventory_is_news("sim1", address, &["eni-a".to_owned()], a.as_deref()));
    assert!(w.fed.inventory_is_news("sim1", address, &[], a.as_deref()), "a lost it: news");
    assert_eq!(w.fed.recaptures(), 0);
}

// ---------------------------------------------------------------- SPEC 13: atomic events

#[test]
fn a_desire_met_by_an_owner_expiring_at_that_stream_time_bumps_nothing_for_that_owner() {
    let mut w = World::new(&[node("a", 0, None)]);
    w.pool(0, pool("p", &["10.0.0.1"], &["a"]));
    w.hb(0, "a");
    w.apply(1, EventKind::Undesire { pool: "p".into(), address: ip("10.0.0.1") });
    assert_eq!(w.epochs("p", "10.0.0.1"), (1, 2), "owner a, desired holder gone");
    // a's heartbeat covers stream time up to 0 + 3 s + 1 s (exclusive): at 4 s it has expired.
    // Inside this one event a would be the desired holder for an instant; it must not count.
    w.apply(4_000, EventKind::Desire { pool: "p".into(), address: ip("10.0.0.1") });
    assert_eq!(w.owner("p", "10.0.0.1"), None);
    assert_eq!(w.epochs("p", "10.0.0.1"), (2, 2), "owner a → none once; holder none → none: no bump");
}

#[test]
fn a_desire_met_by_a_failover_bumps_the_capture_line_once() {
    let mut w = World::new(&[node("a", 10, None), node("b", 0, None)]);
    w.pool(0, pool("p", &["10.0.0.1"], &["a", "b"]));
    w.hb(0, "a");
    w.hb(0, "b");
    w.apply(1, EventKind::Undesire { pool: "p".into(), address: ip("10.0.0.1") });
    w.hb(3_999, "b");
    w.apply(4_000, EventKind::Desire { pool: "p".into(), address: ip("10.0.0.1") });
    assert_eq!(w.owner("p", "10.0.0.1").as_deref(), Some("b"));
    assert_eq!(w.epochs("p", "10.0.0.1"), (2, 3), "holder none → b: one bump, never through a");
}

#[test]
fn a_pool_reapplied_on_a_new_capture_domain_gives_the_new_lines_first_holder_one() {
    let mut b = node("b", 0, None);
    b.placement_group = "g2".into();
    let mut w = World::new(&[node("a", 0, None), b]);
    w.pool(0, pool("p", &["10.0.0.1"], &["a", "b"]));
    w.hb(0, "a");
    w.hb(0, "b");
    let (g1, g2) = (CaptureDomain::new("sim1", "g1"), CaptureDomain::new("sim1", "g2"));
    assert_eq!(w.fed.capture_epoch("p", ip("10.0.0.1"), &g1).get(), 1);
    let mut moved = pool("p", &["10.0.0.1"], &["a", "b"]);
    moved.placement_group = "g2".into();
    w.pool(1, moved);
    assert_eq!(w.owner("p", "10.0.0.1").as_deref(), Some("b"));
    assert_eq!(w.fed.capture_epoch("p", ip("10.0.0.1"), &g2).get(), 1, "the new line's first holder");
    assert_eq!(w.fed.capture_epoch("p", ip("10.0.0.1"), &g1).get(), 2, "the old line: a → none");
    assert_eq!(w.fed.ownership_epoch("p", ip("10.0.0.1")).get(), 2, "owner a → b, once");
}

// ---------------------------------------------------------------- SPEC 5: verbs in sequence

#[test]
fn a_failed_first_verb_stops_the_second_until_it_executes() {
    let mut w = World::new(&[node("a", 0, None)]);
    w.pool(0, pool("p", &["10.0.0.1"], &["a"]));
    w.hb(0, "a");
    let mut a = engine("a");
    a.reconcile(&w.fed, &w.fed).expect("ok");
    let first = a.poll_execution(&w.fed, None).expect("ok").expect("assign");
    assert_eq!(first.verb, Verb::AssignSecondaryIp);
    a.handle_execution_result(&first.idempotency_key(), ActionOutcome::Failed, Some("throttled".into()))
        .expect("in flight");
    assert_eq!(a.poll_execution(&w.fed, None).expect("ok"), None, "enable-forwarding waits for assign");
    assert!(a.captured().is_empty(), "nothing marks the address captured");
    a.reconcile(&w.fed, &w.fed).expect("ok");
    assert_eq!(run_all(&mut a, &w.fed), vec![Verb::AssignSecondaryIp, Verb::EnableForwarding]);
    assert_eq!(a.captured().len(), 1);
}

// ---------------------------------------------------------------- SPEC 13: bounded state

#[test]
fn a_long_run_keeps_the_journal_within_its_retention_and_open_entries_whole() {
    const RETENTION: usize = 40;
    let mut w = World::new(&[node("a", 10, None), node("b", 0, None)]);
    let mut flapping = pool("p", &["10.0.0.1", "10.0.0.2", "10.0.0.3"], &["a", "b"]);
    flapping.preempt = true;
    w.pool(0, flapping);
    let mut a = engine("a").with_retention(RETENTION);
    let mut b = engine("b").with_retention(RETENTION);
    let mut at = 0;
    let mut most = 0;
    for round in 0..300u64 {
        at += 2_000;
        w.hb(at, "a");
        w.hb(at, "b");
        // Flap the addresses: every round moves every token and plans fresh actions.
        let kind = if round % 2 == 0 {
            EventKind::Drain { node: "a".into() }
        } else {
            EventKind::Undrain { node: "a".into() }
        };
        w.apply(at, kind);
        for engine in [&mut a, &mut b] {
            engine.reconcile(&w.fed, &w.fed).expect("ok");
            run_all(engine, &w.fed);
            most = most.max(engine.entries().count());
        }
        // An approval of junk and one of a key already stale leave nothing behind.
        w.apply(at, EventKind::Approve { idempotency_key: format!("junk-{round}") });
        w.apply(
            at,
            EventKind::Approve {
                idempotency_key: format!("p/10.0.0.1/garp/a/sim1/eni-a/owner:0:epoch:{round}"),
            },
        );
    }
    assert!(
        most <= RETENTION + 6,
        "journal grew to {most} entries (retention {RETENTION}, one plan per round)"
    );
    assert_eq!(w.epochs("p", "10.0.0.1").0, 301, "ownership moved every round");
    assert_eq!(w.fed.approvals_kept(), 0, "no approval kept");
    assert_eq!(w.fed.approvals_ignored(), 600);
    // What compaction kept still decides: a holds the addresses it was last given, b releases
    // them once the hold has passed.
    w.hb(at + 1_000, "a");
    w.hb(at + 1_000, "b");
    for engine in [&mut a, &mut b] {
        engine.reconcile(&w.fed, &w.fed).expect("ok");
        run_all(engine, &w.fed);
    }
    let captured = |e: &NodeEngine<MemoryJournalStore>| e.captured().len();
    assert_eq!((captured(&a), captured(&b)), (3, 0));
    let report = a.reconcile(&w.fed, &w.fed).expect("ok");
    assert!(report.imported.is_empty(), "compaction dropped nothing the planner needs again");
}

#[test]
fn failed_entries_stale_by_an_epoch_leave_the_retry_set() {
    let mut w = World::new(&[node("a", 10, None), node("b", 0, None)]);
    w.pool(0, pool("p", &["10.0.0.1"], &["a", "b"]));
    w.hb(0, "a");
    w.hb(0, "b");
    let mut a = engine("a");
    a.reconcile(&w.fed, &w.fed).expect("ok");
    let first = a.poll_execution(&w.fed, None).expect("ok").expect("assign");
    a.handle_execution_result(&first.idempotency_key(), ActionOutcome::Failed, None).expect("in flight");
    assert_eq!(a.retryable_failures(), 1);
    w.apply(1, EventKind::Drain { node: "a".into() });
    a.reconcile(&w.fed, &w.fed).expect("ok");
    assert_eq!(a.retryable_failures(), 0, "stale by its epoch for ever: never swept again");
}

/// `ownership`'s phase and holders (SPEC 10): the arbitrated owner says who *should* hold an
/// address; the phase and the holders say where its hand-over is, from the log's results alone.
#[test]
fn an_address_phase_follows_its_hand_over_from_the_log_results() {
    use tenure_core::federation::Phase;
    let mut w = World::new(&[node("a", 10, None), node("b", 0, None)]);
    let mut spec = pool("p", &["10.0.0.1"], &["a", "b"]);
    spec.approval = Approval::Manual;
    w.pool(0, spec);
    w.hb(0, "a");
    w.hb(0, "b");
    let status = |w: &World| {
        let s = w.fed.address_status("p", ip("10.0.0.1")).expect("listed");
        let holders: Vec<String> = s.holders.iter().map(|id| w.fed.node_name(*id).to_owned()).collect();
        (s.phase, holders, s.nics)
    };
    let key = |w: &World, verb: &str, holder: &str| {
        let (o, c) = w.epochs("p", "10.0.0.1");
        format!("p/10.0.0.1/{verb}/{holder}/sim1/eni-{holder}/owner:{o}:epoch:{c}")
    };
    let executed = |w: &mut World, at: u64, key: String, node: &str| {
        let kind = EventKind::ActionResult {
            node: node.into(),
            idempotency_key: key,
            outcome: ActionOutcome::Executed,
            detail: "done".into(),
        };
        w.apply(at, kind);
    };
    assert_eq!(status(&w), (Phase::PendingApproval, vec![], vec![]), "a's assign waits for approval");
    let a_assign = key(&w, "assign-secondary-ip", "a");
    w.apply(1, EventKind::Approve { idempotency_key: a_assign.clone() });
    assert_eq!(status(&w).0, Phase::Acquiring, "approved, not confirmed");
    executed(&mut w, 2, a_assign, "a");
    assert_eq!(
        status(&w),
        (Phase::PendingApproval, vec!["a".into()], vec!["eni-a".into()]),
        "on a's NIC, but its enable-forwarding waits for approval: not in service yet"
    );
    let a_forwarding = key(&w, "enable-forwarding", "a");
    w.apply(2, EventKind::Approve { idempotency_key: a_forwarding });
    assert_eq!(status(&w), (Phase::Held, vec!["a".into()], vec!["eni-a".into()]));

    w.apply(3, EventKind::Drain { node: "a".into() });
    assert_eq!(status(&w).0, Phase::PendingApproval, "b's assign waits; a still holds it");
    assert_eq!(status(&w).1, vec!["a".to_owned()]);
    let b_assign = key(&w, "assign-secondary-ip", "b");
    w.apply(4, EventKind::Approve { idempotency_key: b_assign.clone() });
    w.apply(4, EventKind::Approve { idempotency_key: key(&w, "enable-forwarding", "b") });
    executed(&mut w, 5, b_assign, "b");
    assert_eq!(
        status(&w),
        (Phase::Releasing, vec!["a".into(), "b".into()], vec!["eni-a".into(), "eni-b".into()]),
        "b holds it, a's release is still due"
    );
    // a's release carries the token of the line it was captured on (epoch 1), not the current.
    executed(&mut w, 6, "p/10.0.0.1/unassign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1".into(), "a");
    assert_eq!(status(&w), (Phase::Held, vec!["b".into()], vec!["eni-b".into()]));

    w.apply(7, EventKind::Undesire { pool: "p".into(), address: ip("10.0.0.1") });
    assert_eq!(status(&w).0, Phase::Releasing, "undesired, b still holds it");
    assert_eq!(w.owner("p", "10.0.0.1").as_deref(), Some("b"), "the owner alone reads as if b held it");
    executed(&mut w, 8, "p/10.0.0.1/unassign-secondary-ip/b/sim1/eni-b/owner:2:epoch:2".into(), "b");
    assert_eq!(status(&w), (Phase::Released, vec![], vec![]));
}

/// A release of a manual pool waits for `tenure approve` as an acquire does: once due (the
/// deprovision hold passed), an address whose leaving holder's release is not approved reads
/// `pending-approval`, not `releasing` — after a drain (the new owner holds it too) and after an
/// `undesire` (no owner).
#[test]
fn a_release_waiting_for_approval_reads_pending_approval() {
    use tenure_core::federation::Phase;
    let mut w = World::new(&[node("a", 10, None), node("b", 0, None)]);
    let mut spec = pool("p", &["10.0.0.1"], &["a", "b"]);
    spec.approval = Approval::Manual;
    w.pool(0, spec);
    w.hb(0, "a");
    w.hb(0, "b");
    let phase = |w: &World| w.fed.address_status("p", ip("10.0.0.1")).expect("listed").phase;
    let key = |w: &World, verb: &str, holder: &str| {
        let (o, c) = w.epochs("p", "10.0.0.1");
        format!("p/10.0.0.1/{verb}/{holder}/sim1/eni-{holder}/owner:{o}:epoch:{c}")
    };
    let approve_and_run = |w: &mut World, at: u64, verbs: &[&str], holder: &str| {
        for verb in verbs {
            let key = key(w, verb, holder);
            w.apply(at, EventKind::Approve { idempotency_key: key.clone() });
            let kind = EventKind::ActionResult {
                node: holder.into(),
                idempotency_key: key,
                outcome: ActionOutcome::Executed,
                detail: String::new(),
            };
            w.apply(at, kind);
        }
    };
    approve_and_run(&mut w, 1, &["assign-secondary-ip", "enable-forwarding"], "a");
    assert_eq!(phase(&w), Phase::Held);

    w.apply(10, EventKind::Drain { node: "a".into() });
    approve_and_run(&mut w, 11, &["assign-secondary-ip", "enable-forwarding"], "b");
    assert_eq!(phase(&w), Phase::Releasing, "a's release is held back (deprovision hold: 1 s)");
    w.hb(1_100, "b");
    assert_eq!(phase(&w), Phase::PendingApproval, "a's release is due and waits for approval");
    w.apply(1_101, EventKind::Approve { idempotency_key: key(&w, "disable-forwarding", "a") });
    assert_eq!(phase(&w), Phase::PendingApproval, "its unassign still waits");
    w.apply(1_102, EventKind::Approve { idempotency_key: key(&w, "unassign-secondary-ip", "a") });
    assert_eq!(phase(&w), Phase::Releasing, "approved: the release may run");
    approve_and_run(&mut w, 1_103, &["disable-forwarding", "unassign-secondary-ip"], "a");
    assert_eq!(phase(&w), Phase::Held);

    w.apply(2_000, EventKind::Undesire { pool: "p".into(), address: ip("10.0.0.1") });
    assert_eq!(phase(&w), Phase::Releasing, "no owner; b's release is held back");
    w.hb(3_100, "b");
    assert_eq!(phase(&w), Phase::PendingApproval, "no owner; b's release waits for approval");
    approve_and_run(&mut w, 3_101, &["disable-forwarding", "unassign-secondary-ip"], "b");
    assert_eq!(phase(&w), Phase::Released);
}

/// The phase and the planner read one release rule ([`tenure_core::planner::release_plan`]):
/// driven through the real node engines, whenever an address reads `pending-approval` for a
/// leaving holder's release, that node's journal holds it `pending`, and approving exactly the
/// journal's pending keys (what `tenure approve` finds) moves the phase on. On a cloud family
/// the release is held back first (`releasing`); on the on-prem family it is due at once. The
/// leaving node's NIC may have changed in the registry since its acquire: its release is stamped
/// with the acquire's NIC, and so is the key the phase waits for.
#[test]
fn a_pending_approval_release_is_pending_in_the_leaving_nodes_journal() {
    use tenure_core::federation::Phase;
    for kind in [ProviderKind::SimCloud, ProviderKind::SimOnprem] {
        for nic_changed in [false, true] {
            let case = format!("{kind:?}, NIC changed: {nic_changed}");
            let mut a_nic = "eni-a".to_owned();
            let mut log: Vec<Event> = Vec::new();
            // The federation every agent folds from the log, over the registry of the moment.
            let view = |log: &[Event], a_nic: &str| {
                let mut a = node("a", 10, None);
                a.nic = a_nic.to_owned();
                let providers = [ProviderSpec { name: "sim1".into(), kind }];
                let mut fed = Federation::new(&[a, node("b", 0, None)], &providers);
                for event in log {
                    fed.apply(event).expect("accepted");
                }
                fed
            };
            // One round of a node: reconcile, the operator approves what is pending (if asked),
            // and what the gate lets through runs and is reported to the log.
            let round = |log: &mut Vec<Event>,
                         engine: &mut NodeEngine<MemoryJournalStore>,
                         a_nic: &str,
                         at_ms,
                         approve| {
                let fed = view(log, a_nic);
                engine.reconcile(&fed, &fed).expect("ok");
                if approve {
                    let pending: Vec<String> = engine
                        .entries()
                        .filter(|e| e.state == EntryState::Pending)
                        .map(|e| e.action.idempotency_key().to_string())
                        .collect();
                    for key in pending {
                        log.push(Event { at_ms, kind: EventKind::Approve { idempotency_key: key } });
                    }
                    let fed = view(log, a_nic);
                    engine.reconcile(&fed, &fed).expect("ok");
                }
                let fed = view(log, a_nic);
                while let Some(action) = engine.poll_execution(&fed, None).expect("memory") {
                    engine
                        .handle_execution_result(&action.idempotency_key(), ActionOutcome::Executed, None)
                        .expect("in flight");
                    let kind = EventKind::ActionResult {
                        node: engine.name().to_owned(),
                        idempotency_key: action.idempotency_key().to_string(),
                        outcome: ActionOutcome::Executed,
                        detail: String::new(),
                    };
                    log.push(Event { at_ms, kind });
                }
            };
            let phase = |log: &[Event], a_nic: &str| {
                view(log, a_nic).address_status("p", ip("10.0.0.1")).expect("listed").phase
            };
            let pending_releases = |engine: &NodeEngine<MemoryJournalStore>| -> Vec<String> {
                engine
                    .entries()
                    .filter(|e| e.state == EntryState::Pending && !e.action.verb.is_acquire())
                    .map(|e| e.action.idempotency_key().to_string())
                    .collect()
            };

            let mut spec = pool("p", &["10.0.0.1"], &["a", "b"]);
            spec.approval = Approval::Manual;
            log.push(Event { at_ms: 0, kind: EventKind::PoolApplied { spec: Box::new(spec) } });
            log.push(Event { at_ms: 0, kind: EventKind::Heartbeat { node: "a".into() } });
            log.push(Event { at_ms: 0, kind: EventKind::Heartbeat { node: "b".into() } });
            let (mut a, mut b) = (engine("a"), engine("b"));
            round(&mut log, &mut a, &a_nic, 1, true);
            assert_eq!(phase(&log, &a_nic), Phase::Held, "{case}");
            if nic_changed {
                a_nic = "eni-a-new".to_owned();
                assert_eq!(phase(&log, &a_nic), Phase::Held, "{case}: a NIC change moves no token");
            }

            log.push(Event { at_ms: 10, kind: EventKind::Drain { node: "a".into() } });
            round(&mut log, &mut b, &a_nic, 11, true);
            round(&mut log, &mut a, &a_nic, 11, false);
            let held = kind == ProviderKind::SimCloud;
            if held {
                assert_eq!(phase(&log, &a_nic), Phase::Releasing, "{case}: within the hold");
                assert!(pending_releases(&a).is_empty(), "{case}: nothing planned within the hold");
                log.push(Event { at_ms: 1_100, kind: EventKind::Heartbeat { node: "b".into() } });
                round(&mut log, &mut a, &a_nic, 1_100, false);
            }
            assert_eq!(phase(&log, &a_nic), Phase::PendingApproval, "{case}: a's release is due");
            let pending = pending_releases(&a);
            assert!(!pending.is_empty(), "{case}: the phase waits, so a's journal has it pending");
            assert!(
                pending.iter().all(|key| key.contains("/sim1/eni-a/")),
                "{case}: stamped with the acquire's NIC: {pending:?}"
            );
            // The operator approves what `tenure approve` finds: the journal's pending keys.
            let at_ms = log.last().map_or(0, |e| e.at_ms);
            for key in &pending {
                log.push(Event { at_ms, kind: EventKind::Approve { idempotency_key: key.clone() } });
            }
            assert_eq!(phase(&log, &a_nic), Phase::Releasing, "{case}: approved, the release may run");
            round(&mut log, &mut a, &a_nic, at_ms, false);
            assert!(a.captured().is_empty(), "{case}: a released it");
            assert_eq!(phase(&log, &a_nic), Phase::Held, "{case}: b alone holds it");
        }
    }
}
