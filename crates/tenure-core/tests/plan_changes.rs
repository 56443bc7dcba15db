//! Incremental planning (issue 24): the projection names the (provider, address) positions
//! whose plan an event may have changed ([`Federation::take_plan_changes`]), or moves its whole
//! generation when it cannot name them. Over random logs, after every step: every position it
//! did not name plans exactly what it planned before the step (but for a release whose hold
//! ended with stream time: the plan's wake), and planning the named positions alone
//! ([`planner::plan_keys`]) plans what a whole plan plans for them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use proptest::prelude::*;
use tenure_core::federation::Federation;
use tenure_core::model::Approval;
use tenure_core::planner::{self, Captured};

mod common;
use common::{apply, driver_with_drift, follow, log, registry, step};

type Key = tenure_core::model::ProviderAddress;

/// A plan as rows per (provider, address): each action's key and approval, in key order.
fn by_key(actions: &[planner::PlannedAction<'_>]) -> BTreeMap<Key, Vec<(String, Approval)>> {
    let mut rows: BTreeMap<Key, Vec<(String, Approval)>> = BTreeMap::new();
    for planned in actions {
        let mut key = String::new();
        planned.stamp.write_key(&mut key);
        rows.entry((tenure_core::names::shared(planned.stamp.provider), planned.stamp.address))
            .or_default()
            .push((key, planned.approval));
    }
    for row in rows.values_mut() {
        row.sort_by(|x, y| x.0.cmp(&y.0));
    }
    rows
}

/// Every position of the view and the captured set.
fn every_key(view: &Federation, captured: &Captured) -> BTreeSet<Key> {
    let pools = view.pools().values().flat_map(|pool| {
        pool.addresses.keys().map(|address| (tenure_core::names::shared(&pool.spec.provider), *address))
    });
    pools.chain(captured.keys().cloned()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_position_the_projection_does_not_name_plans_as_it_did(
        steps in prop::collection::vec(step(), 0..24),
        drift_repair in any::<bool>(),
    ) {
        let mut log = log();
        let mut a = driver_with_drift("a", drift_repair);
        let mut view = registry().with_drift_repair(drift_repair);
        let mut applied = None;
        follow(&mut view, &log, &mut applied);
        view.take_plan_changes();
        let mut at_ms = 10;
        for step in &steps {
            let before = view.clone();
            // `b` captured nothing (it releases only what drift repair saw on its NIC, or the log
            // says it holds); nor did `a` rebuilt on an empty store (it releases what the log
            // says it holds: its confirmed acquires, which every `action-result` names).
            let captured =
                [("a", a.engine().captured().clone()), ("b", Captured::new()), ("a rebuilt", Captured::new())];
            at_ms = apply(&mut log, &mut a, at_ms + 1, step);
            follow(&mut view, &log, &mut applied);
            let changed = view.take_plan_changes();
            let whole = view.whole_plan_generation() != before.whole_plan_generation();
            for (name, captured) in &captured {
                let node = view.node_id(&name[..1]).expect("known");
                let after = by_key(&planner::plan(&view, node, captured).actions);
                // The named positions alone plan what the whole plan plans for them.
                let keyed = by_key(&planner::plan_keys(&view, node, captured, &changed).actions);
                let expected: BTreeMap<Key, _> =
                    after.iter().filter(|(k, _)| changed.contains(*k)).map(|(k, v)| (k.clone(), v.clone())).collect();
                prop_assert_eq!(&keyed, &expected, "{}: the named positions, after {:?}", name, step);
                let all = every_key(&view, captured);
                let every = by_key(&planner::plan_keys(&view, node, captured, &all).actions);
                prop_assert_eq!(&every, &after, "{}: every position by key, after {:?}", name, step);
                if whole {
                    continue;
                }
                let earlier = by_key(&planner::plan(&before, node, captured).actions);
                for key in every_key(&view, captured).union(&every_key(&before, captured)) {
                    if changed.contains(key) {
                        continue;
                    }
                    // A release held back before the step whose hold has ended since.
                    let wake = planner::plan_keys(&before, node, captured, [key]).wake_at_ms();
                    if wake.is_some_and(|due| view.stream_time_ms() >= due) {
                        continue;
                    }
                    prop_assert_eq!(
                        after.get(key), earlier.get(key),
                        "{}: {:?} was not named, but plans differently after {:?}", name, key, step
                    );
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A driver that plans only through [`NodeDriver::requeue`] while it says planning is under
    /// way (the changed positions alone, passes when a plan of everything is due) journals, after
    /// every step of a random log, every action a whole plan of its view plans.
    #[test]
    fn a_node_planning_changes_and_passes_journals_what_a_whole_plan_plans(
        steps in prop::collection::vec(step(), 0..24),
        max in 1..5_usize,
        drift_repair in any::<bool>(),
    ) {
        let mut log = log();
        let mut a = driver_with_drift("a", drift_repair);
        let mut at_ms = 10;
        for step in &steps {
            at_ms = apply(&mut log, &mut a, at_ms + 1, step);
            a.follow(&log).expect("readable");
            let mut calls = 0;
            while a.requeue_under_way() || a.reconcile_due() {
                a.requeue(max).expect("memory").expect("not blocked");
                calls += 1;
                prop_assert!(calls < 100, "planning ends");
            }
            let view = a.view();
            let node = view.node_id("a").expect("a is known");
            let whole = planner::plan(view, node, a.engine().captured());
            for planned in &whole.actions {
                let mut key = String::new();
                planned.stamp.write_key(&mut key);
                prop_assert!(a.engine().entry(&key).is_some(), "{} is not journaled after {:?}", key, step);
            }
        }
    }
}

/// More positions named than [`PLAN_CHANGES_MAX`] before anyone took them (a drain of a node
/// holding two pools of 40,000 addresses): the view forgets them and moves its whole plan
/// generation instead, so a reader plans everything, and what it keeps stays bounded.
#[test]
fn more_changes_than_the_view_keeps_are_a_whole_change() {
    use tenure_core::federation::PLAN_CHANGES_MAX;
    use tenure_core::log::{Event, EventKind};
    let addresses = |from: u32| -> Vec<IpAddr> {
        (0..40_000_u32).map(|i| IpAddr::V4(std::net::Ipv4Addr::from(from + i))).collect()
    };
    let mut view = registry();
    for (name, from) in [("big1", 0x0a10_0000_u32), ("big2", 0x0a20_0000_u32)] {
        let spec = tenure_core::model::PoolSpec {
            name: name.into(),
            addresses: addresses(from),
            ..common::pool(name, 0..0, 0, Approval::Auto)
        };
        view.apply(&Event { at_ms: 1, kind: EventKind::PoolApplied { spec: Box::new(spec) } })
            .expect("applies");
    }
    for node in ["a", "b"] {
        view.apply(&Event { at_ms: 2, kind: EventKind::Heartbeat { node: node.into() } }).expect("applies");
    }
    view.take_plan_changes();
    let whole = view.whole_plan_generation();
    view.apply(&Event { at_ms: 3, kind: EventKind::Drain { node: "a".into() } }).expect("applies");
    assert_eq!(view.whole_plan_generation(), whole + 1, "80,000 positions moved to b: a whole change");
    let kept = view.take_plan_changes().len();
    assert!(kept < PLAN_CHANGES_MAX, "{kept} positions kept");
    // A change of one position is named again.
    view.apply(&Event {
        at_ms: 4,
        kind: EventKind::Undesire { pool: "big1".into(), address: addresses(0x0a10_0000)[5] },
    })
    .expect("applies");
    assert_eq!(view.take_plan_changes().len(), 1);
    assert_eq!(view.whole_plan_generation(), whole + 1);
}
