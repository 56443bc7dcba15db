//! Property tests (proptest) for arbitration, the epoch rules and the fence, over random logs
//! and random interleavings of log events and local steps.

use std::collections::BTreeMap;
use std::net::IpAddr;

use proptest::prelude::*;
use tenure_core::federation::Federation;
use tenure_core::log::{Event, EventKind};
use tenure_core::model::{
    Approval, Authority, CaptureDomain, NodeSpec, PoolSpec, ProviderKind, ProviderSpec, VrrpState,
};
use tenure_core::scenario::{LocalStep, Scenario, Step, StepKind};
use tenure_sim::replay::{Replay, ReplayReport};

const PROVIDER: &str = "sim1";

fn node_strategy(index: usize) -> impl Strategy<Value = NodeSpec> {
    (0i64..3, prop::option::weighted(0.4, 0u64..4), prop::bool::weighted(0.15)).prop_map(
        move |(priority, capacity, other_group)| NodeSpec {
            name: format!("n{index}"),
            provider: PROVIDER.into(),
            placement_group: if other_group { "g2".into() } else { "g1".into() },
            priority,
            nic: format!("eni-{index}"),
            capacity,
        },
    )
}

fn pool_strategy(index: usize, node_count: usize) -> impl Strategy<Value = PoolSpec> {
    (
        prop::collection::btree_set(0u8..4, 1..4),
        prop::collection::vec(any::<bool>(), node_count),
        (any::<bool>(), any::<bool>(), prop::bool::weighted(0.15), prop::bool::weighted(0.2)),
        (0u64..3, 1u64..4, 0u64..3, any::<bool>()),
        prop::collection::vec(0..node_count, 0..3),
    )
        .prop_map(
            move |(
                hosts,
                member_mask,
                (preempt, auto_failover, manual, vrrp),
                (hold, ttl, promo, locking),
                prefer,
            )| {
                let mut members: Vec<String> = member_mask
                    .iter()
                    .enumerate()
                    .filter(|(_, m)| **m)
                    .map(|(i, _)| format!("n{i}"))
                    .collect();
                if members.is_empty() {
                    members.push("n0".into());
                }
                let mut prefer_nodes: Vec<String> = Vec::new();
                for p in prefer {
                    let name = format!("n{p}");
                    if members.contains(&name) && !prefer_nodes.contains(&name) {
                        prefer_nodes.push(name);
                    }
                }
                PoolSpec {
                    name: format!("p{index}"),
                    addresses: hosts.iter().map(|h| IpAddr::from([10, index as u8, 0, *h])).collect(),
                    provider: PROVIDER.into(),
                    placement_group: "g1".into(),
                    members,
                    authority: if vrrp { Authority::Vrrp } else { Authority::None },
                    approval: if manual { Approval::Manual } else { Approval::Auto },
                    deprovision_hold_ms: hold * 500,
                    heartbeat_ttl_ms: ttl * 1000,
                    promotion_hold_ms: promo * 500,
                    epoch_locking: locking,
                    prefer_nodes,
                    preempt,
                    auto_failover,
                }
            },
        )
}

/// One raw timeline choice; turned into a step by `build_step`.
#[derive(Clone, Debug)]
enum Choice {
    Heartbeat(usize),
    Drain(usize),
    Undrain(usize),
    Health(usize, bool),
    Vrrp(usize, u8),
    Desire(usize, u8, bool),
    DeletePool(usize),
    ReapplyPool(usize),
    Local(usize, u8),
}

fn choice_strategy(nodes: usize, pools: usize) -> impl Strategy<Value = Choice> {
    prop_oneof![
        6 => (0..nodes).prop_map(Choice::Heartbeat),
        1 => (0..nodes).prop_map(Choice::Drain),
        1 => (0..nodes).prop_map(Choice::Undrain),
        1 => (0..nodes, any::<bool>()).prop_map(|(n, h)| Choice::Health(n, h)),
        1 => (0..nodes, 0u8..3).prop_map(|(n, s)| Choice::Vrrp(n, s)),
        5 => (0..pools, 0u8..4, any::<bool>()).prop_map(|(p, a, d)| Choice::Desire(p, a, d)),
        1 => (0..pools).prop_map(Choice::DeletePool),
        1 => (0..pools).prop_map(Choice::ReapplyPool),
        12 => (0..nodes, 0u8..11).prop_map(|(n, s)| Choice::Local(n, s)),
    ]
}

fn build_step(choice: &Choice, at_ms: u64, pools: &[PoolSpec]) -> StepKind {
    let node = |n: &usize| format!("n{n}");
    let log = |kind| StepKind::Log(Event { at_ms, kind });
    match choice {
        Choice::Heartbeat(n) => log(EventKind::Heartbeat { node: node(n) }),
        Choice::Drain(n) => log(EventKind::Drain { node: node(n) }),
        Choice::Undrain(n) => log(EventKind::Undrain { node: node(n) }),
        Choice::Health(n, h) => log(EventKind::Health { node: node(n), healthy: *h }),
        Choice::Vrrp(n, s) => log(EventKind::Vrrp {
            node: node(n),
            state: [VrrpState::Master, VrrpState::Backup, VrrpState::Fault][usize::from(*s)],
        }),
        Choice::Desire(p, a, desired) => {
            let pool = &pools[*p];
            let address = IpAddr::from([10, *p as u8, 0, *a]);
            let name = pool.name.clone();
            if *desired {
                log(EventKind::Desire { pool: name, address })
            } else {
                log(EventKind::Undesire { pool: name, address })
            }
        }
        Choice::DeletePool(p) => log(EventKind::PoolDeleted { pool: pools[*p].name.clone() }),
        Choice::ReapplyPool(p) => {
            // Re-apply with the address list rotated by one: some addresses retire, some return;
            // pools with an even number of addresses move to the other placement group (a new
            // capture domain: every address leaves its line and joins another).
            let mut spec = pools[*p].clone();
            if spec.addresses.len().is_multiple_of(2) {
                spec.placement_group = if spec.placement_group == "g1" { "g2".into() } else { "g1".into() };
            }
            if spec.addresses.len() > 1 {
                spec.addresses.pop();
            } else {
                spec.addresses.push(IpAddr::from([10, *p as u8, 0, 200]));
            }
            log(EventKind::PoolApplied { spec: Box::new(spec) })
        }
        Choice::Local(n, s) => StepKind::Local {
            at_ms,
            node: node(n),
            step: [
                LocalStep::Reconcile,
                LocalStep::Reconcile,
                LocalStep::Reconcile,
                LocalStep::Execute,
                LocalStep::Execute,
                LocalStep::Execute,
                LocalStep::Pause,
                LocalStep::Resume,
                LocalStep::Restart,
                LocalStep::Partition,
                LocalStep::Heal,
            ][usize::from(*s)],
        },
    }
}

fn scenario_strategy() -> impl Strategy<Value = Scenario> {
    (2usize..6, 1usize..4, any::<bool>())
        .prop_flat_map(|(node_count, pool_count, onprem)| {
            let nodes: Vec<_> = (0..node_count).map(node_strategy).collect();
            let pools: Vec<_> = (0..pool_count).map(|i| pool_strategy(i, node_count)).collect();
            let choices = prop::collection::vec(
                (choice_strategy(node_count, pool_count), 0u64..1500, prop::bool::weighted(0.1)),
                0..120,
            );
            (nodes, pools, choices, Just(onprem))
        })
        .prop_map(|(nodes, pools, choices, onprem)| {
            let mut at_ms = 0u64;
            let timeline = choices
                .iter()
                .map(|(choice, delta, late)| {
                    at_ms += delta;
                    // Some events carry a late `at`: applied in log order, stream time holds.
                    let stamped = if *late { at_ms.saturating_sub(2_000) } else { at_ms };
                    Step { position: Default::default(), kind: build_step(choice, stamped, &pools) }
                })
                .collect();
            let kind = if onprem { ProviderKind::SimOnprem } else { ProviderKind::SimCloud };
            Scenario {
                nodes,
                providers: vec![ProviderSpec { name: PROVIDER.into(), kind }],
                pools,
                timeline,
                drift_repair: false,
            }
        })
}

fn owners_per_node(report: &ReplayReport) -> BTreeMap<String, u64> {
    let mut count = BTreeMap::new();
    for row in &report.ownership {
        if let Some(owner) = &row.owner {
            *count.entry(owner.clone()).or_insert(0) += 1;
        }
    }
    count
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// No stale action is ever executed, no token goes down, a cloud address is never on two
    /// NICs — for random interleavings of log events and local steps (the checker re-derives
    /// each rule from the head independently of the fence).
    #[test]
    fn no_stale_action_is_ever_executed(scenario in scenario_strategy()) {
        let (report, _) = Replay::run(&scenario, false).expect("generated scenarios are well formed");
        prop_assert!(report.violations.is_empty(), "violations: {:?}", report.violations);
        for entry in &report.actions {
            prop_assert!(matches!(entry.state.as_str(), "pending" | "approved" | "executed" | "failed" | "skipped"));
        }
    }

    /// Capacity is never exceeded, and every owner is a member of its pool.
    #[test]
    fn capacity_is_never_exceeded(scenario in scenario_strategy()) {
        let (report, _) = Replay::run(&scenario, false).expect("well formed");
        let capacity: BTreeMap<&str, Option<u64>> =
            scenario.nodes.iter().map(|n| (n.name.as_str(), n.capacity)).collect();
        for (node, held) in owners_per_node(&report) {
            if let Some(Some(cap)) = capacity.get(node.as_str()) {
                prop_assert!(held <= *cap, "{node} owns {held} > capacity {cap}");
            }
        }
        for row in &report.ownership {
            if let Some(owner) = &row.owner {
                let pool = scenario.pools.iter().find(|p| p.name == row.pool);
                if let Some(pool) = pool {
                    let reapplied = pool.members.contains(owner);
                    prop_assert!(reapplied, "{owner} owns {} of {} without being a member", row.address, row.pool);
                }
            }
        }
    }

    /// The same log gives the same map, epochs and journals, whatever the declaration order of
    /// nodes, pool members and addresses.
    #[test]
    fn declaration_order_does_not_matter(scenario in scenario_strategy(), seed in any::<u64>()) {
        let (expected, _) = Replay::run(&scenario, false).expect("well formed");
        let mut shuffled = scenario.clone();
        let mut rng = seed;
        let mut next = move || { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; rng };
        shuffled.nodes.sort_by_key(|_| next());
        for pool in &mut shuffled.pools {
            pool.members.sort_by_key(|_| next());
            pool.addresses.sort_by_key(|_| next());
        }
        for step in &mut shuffled.timeline {
            if let StepKind::Log(Event { kind: EventKind::PoolApplied { spec }, .. }) = &mut step.kind {
                spec.members.sort_by_key(|_| next());
                spec.addresses.sort_by_key(|_| next());
            }
        }
        let (actual, _) = Replay::run(&shuffled, false).expect("well formed");
        prop_assert_eq!(expected, actual);
    }

    /// Tokens never decrease, for any key, after any event.
    #[test]
    fn tokens_never_decrease(scenario in scenario_strategy()) {
        let mut federation = Federation::new(&scenario.nodes, &scenario.providers);
        let mut seen: BTreeMap<(String, IpAddr), (u64, u64)> = BTreeMap::new();
        let events = scenario.pools.iter().map(|p| Event { at_ms: 0, kind: EventKind::PoolApplied { spec: Box::new(p.clone()) } })
            .chain(scenario.timeline.iter().filter_map(|s| match &s.kind { StepKind::Log(e) => Some(e.clone()), StepKind::Local { .. } => None }));
        let mut stream_time = 0;
        for event in events {
            federation.apply(&event).expect("known nodes");
            prop_assert!(federation.stream_time_ms() >= stream_time, "stream time went back");
            stream_time = federation.stream_time_ms();
            for (name, pool) in federation.pools() {
                for (address, state) in &pool.addresses {
                    let now = (state.ownership_epoch.get(), state.line.epoch.get());
                    let before = seen.insert((name.clone(), *address), now).unwrap_or((0, 0));
                    prop_assert!(now.0 >= before.0, "ownershipEpoch of {name}/{address} went down");
                    if pool.capture_domain == CaptureDomain::new(PROVIDER, "g1") {
                        prop_assert!(now.1 >= before.1, "captureEpoch of {name}/{address} went down");
                    }
                }
            }
        }
    }
}

type Lines = BTreeMap<(String, IpAddr, String), (u64, Option<tenure_core::state::NodeId>)>;
type Owners = BTreeMap<(String, IpAddr), (u64, Option<tenure_core::state::NodeId>)>;

/// Every token of a federation with the value it guards: ownershipEpoch with the owner, and
/// every capture line (current and retired) with its desired holder.
fn tokens(federation: &Federation) -> (Owners, Lines) {
    let mut owners = Owners::new();
    let mut lines = Lines::new();
    for (name, pool) in federation.pools() {
        for (address, state) in &pool.addresses {
            owners.insert((name.clone(), *address), (state.ownership_epoch.get(), state.owner));
            let current = std::iter::once((&pool.capture_domain, &state.line));
            for (domain, line) in current.chain(state.retired_lines.iter().map(|(d, l)| (d, l))) {
                lines.insert(
                    (name.clone(), *address, domain.to_string()),
                    (line.epoch.get(), line.desired_holder),
                );
            }
        }
    }
    (owners, lines)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    /// SPEC 13, events are atomic: applying one event moves a token only when the value it
    /// guards differs after the whole event from before it (owner; desired holder on that line,
    /// none on a line the address left or joined), and then by exactly 1.
    #[test]
    fn an_event_moves_a_token_once_and_only_when_its_value_changed(scenario in scenario_strategy()) {
        let mut federation = Federation::new(&scenario.nodes, &scenario.providers);
        let events = scenario.pools.iter().map(|p| Event { at_ms: 0, kind: EventKind::PoolApplied { spec: Box::new(p.clone()) } })
            .chain(scenario.timeline.iter().filter_map(|s| match &s.kind { StepKind::Log(e) => Some(e.clone()), StepKind::Local { .. } => None }));
        for event in events {
            let (owners_before, lines_before) = tokens(&federation);
            federation.apply(&event).expect("known nodes");
            let (owners_after, lines_after) = tokens(&federation);
            for (key, (epoch, owner)) in &owners_after {
                let (epoch_before, owner_before) = owners_before.get(key).copied().unwrap_or((0, None));
                let moved = epoch - epoch_before;
                prop_assert!(moved <= 1, "ownershipEpoch of {key:?} moved by {moved} in {event:?}");
                prop_assert_eq!(moved == 1, *owner != owner_before, "ownershipEpoch of {:?} in {:?}", key, event);
            }
            for (key, (epoch, holder)) in &lines_after {
                let (epoch_before, holder_before) = lines_before.get(key).copied().unwrap_or((0, None));
                let moved = epoch - epoch_before;
                prop_assert!(moved <= 1, "captureEpoch of {key:?} moved by {moved} in {event:?}");
                prop_assert_eq!(moved == 1, *holder != holder_before, "captureEpoch of {:?} in {:?}", key, event);
            }
        }
    }
}

fn equal_nodes(count: usize) -> Vec<NodeSpec> {
    (0..count)
        .map(|i| NodeSpec {
            name: format!("n{i}"),
            provider: PROVIDER.into(),
            placement_group: "g1".into(),
            priority: 0,
            nic: format!("eni-{i}"),
            capacity: None,
        })
        .collect()
}

fn owners(federation: &Federation) -> BTreeMap<IpAddr, Option<String>> {
    federation.pools()["p"]
        .addresses
        .iter()
        .map(|(a, s)| (*a, s.owner.map(|id| federation.node_name(id).to_owned())))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// With `preempt: true`, removing one of N equally ranked nodes moves only its addresses
    /// (rendezvous hashing), and the map is a pure function of the eligible set.
    #[test]
    fn removing_one_equal_node_moves_only_its_addresses(
        node_count in 2usize..8,
        address_count in 1u32..300,
        removed in 0usize..8,
    ) {
        let removed = removed % node_count;
        let nodes = equal_nodes(node_count);
        let providers = vec![ProviderSpec { name: PROVIDER.into(), kind: ProviderKind::SimCloud }];
        let spec = PoolSpec {
            name: "p".into(),
            addresses: (0..address_count).map(|i| IpAddr::from((0x0a00_0000u32 + i).to_be_bytes())).collect(),
            provider: PROVIDER.into(),
            placement_group: "g1".into(),
            members: nodes.iter().map(|n| n.name.clone()).collect(),
            authority: Authority::None,
            approval: Approval::Auto,
            deprovision_hold_ms: 0,
            heartbeat_ttl_ms: 1_000_000,
            promotion_hold_ms: 0,
            epoch_locking: true,
            prefer_nodes: vec![],
            preempt: true,
            auto_failover: true,
        };
        let mut federation = Federation::new(&nodes, &providers);
        federation.apply(&Event { at_ms: 0, kind: EventKind::PoolApplied { spec: Box::new(spec) } }).expect("ok");
        for n in &nodes {
            federation.apply(&Event { at_ms: 1, kind: EventKind::Heartbeat { node: n.name.clone() } }).expect("ok");
        }
        let before = owners(&federation);
        let gone = format!("n{removed}");
        federation.apply(&Event { at_ms: 2, kind: EventKind::Drain { node: gone.clone() } }).expect("ok");
        let after = owners(&federation);
        for (address, owner) in &before {
            if owner.as_deref() != Some(gone.as_str()) {
                prop_assert_eq!(owner, &after[address], "{} moved although its owner stayed", address);
            } else {
                prop_assert_ne!(after[address].as_deref(), Some(gone.as_str()));
            }
        }
        // Undrain: preempt puts back exactly the map of the full eligible set.
        federation.apply(&Event { at_ms: 3, kind: EventKind::Undrain { node: gone } }).expect("ok");
        prop_assert_eq!(owners(&federation), before);
    }
}
