//! Pool files to log events: what a (re)load appends so that the log's applied pools become the
//! files' pools, in an order that lets an address go before it is taken (SPEC 13).
//!
//! The files are the truth for the pools of this agent's log: a pool applied in the log and in
//! no file is deleted; a new or changed pool is applied. (Except when a fleet agent starts: its
//! files then only seed the pools the shared log never had — [`seed_pools`]; its reloads apply
//! them whole.) Every `pool-applied` is checked for
//! overlap against the pools applied at that moment, so two changed pools that trade addresses
//! cannot be applied one after the other as they are: whichever goes first still finds its new
//! address in the other. The plan therefore has two phases:
//!
//! 1. **Let go.** Every removed pool is deleted; every changed pool that loses addresses is
//!    re-applied with its *old* settings and only the addresses it keeps (or deleted when it
//!    keeps none). After this phase no applied pool lists an address it will not list at the end.
//! 2. **Take.** Every new or changed pool is applied with its new spec.
//!
//! If the new set is valid as a whole (the files were checked together first), every event of
//! the plan passes the overlap check when it is applied: in phase 1 pools only shrink, and in
//! phase 2 an address a pool takes is either free or listed by a pool whose new spec (already
//! applied, or about to be) also lists it — which the set check refused. Planning is pure; the
//! caller appends the events in order and reports rejects. The agent plans its start and its
//! reloads with it (`runner/start.rs`, `runner/appends.rs`); the simulator's operators move
//! addresses between pools with it (`pool-move`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::log::EventKind;
use crate::model::PoolSpec;

/// The events that turn `applied` (the pools the log has applied now, by name) into `wanted`
/// (the files' pools), in the order to append them. Unchanged pools produce nothing.
#[must_use]
pub fn plan_pool_changes(applied: &BTreeMap<String, PoolSpec>, wanted: &[PoolSpec]) -> Vec<EventKind> {
    let wanted_by_name: BTreeMap<&str, &PoolSpec> = wanted.iter().map(|p| (p.name.as_str(), p)).collect();
    let mut events = Vec::new();
    // Pools phase 1 left as the files want them (one that only shrinks): phase 2 skips them.
    let mut done: BTreeSet<&str> = BTreeSet::new();
    // Phase 1: let go.
    for (name, old) in applied {
        match wanted_by_name.get(name.as_str()) {
            None => events.push(EventKind::PoolDeleted { pool: name.clone() }),
            Some(new) if *new != old => {
                let kept_set: BTreeSet<IpAddr> = if same_domain(old, new) {
                    new.addresses.iter().copied().collect()
                } else {
                    // A pool moving to another capture domain lets go, in its old domain, only
                    // what another pool of that domain takes; deleting it would reset the
                    // desired flags of the addresses it keeps (SPEC 13: a re-applied pool keeps
                    // them), so it is shrunk like any other.
                    let taken: BTreeSet<IpAddr> = wanted
                        .iter()
                        .filter(|p| p.name != old.name && same_domain(p, old))
                        .flat_map(|p| p.addresses.iter().copied())
                        .collect();
                    old.addresses.iter().copied().filter(|a| !taken.contains(a)).collect()
                };
                let kept: Vec<IpAddr> =
                    old.addresses.iter().copied().filter(|a| kept_set.contains(a)).collect();
                if kept.is_empty() {
                    events.push(EventKind::PoolDeleted { pool: name.clone() });
                } else if kept.len() < old.addresses.len() {
                    let mut shrunk = old.clone();
                    shrunk.addresses = kept;
                    if shrunk == **new {
                        done.insert(name.as_str());
                    }
                    events.push(EventKind::PoolApplied { spec: Box::new(shrunk) });
                }
            }
            Some(_) => {}
        }
    }
    // Phase 2: take. Pools leaving their capture domain go first: applying them retires their
    // old line, which frees what they still listed there for the pools applied after.
    let moving = |new: &&PoolSpec| applied.get(&new.name).is_some_and(|old| !same_domain(old, new));
    let (first, rest): (Vec<&PoolSpec>, Vec<&PoolSpec>) = wanted.iter().partition(moving);
    for new in first.into_iter().chain(rest) {
        if applied.get(&new.name) != Some(new) && !done.contains(new.name.as_str()) {
            events.push(EventKind::PoolApplied { spec: Box::new(new.clone()) });
        }
    }
    events
}

/// What a starting agent of a fleet (a shared log) wants: the log's pools as they are, plus the
/// files' pools the log has never had. A fleet's routers restart at any time, some with a pool
/// file older than the one last applied; a start must not revert the fleet's pool, nor bring back
/// one the fleet deleted (`deleted`: the names of pools the log has deleted) — a reload, SIGHUP,
/// is the operator's deliberate "apply these files". Also answers the names of the pools whose
/// file differs from the log (to warn about), sorted.
#[must_use]
pub fn seed_pools(
    applied: &BTreeMap<String, PoolSpec>,
    deleted: &BTreeSet<String>,
    files: &[PoolSpec],
) -> (Vec<PoolSpec>, Vec<String>) {
    let mut wanted: Vec<PoolSpec> = applied.values().cloned().collect();
    let mut differing = Vec::new();
    for file in files {
        match applied.get(&file.name) {
            None if deleted.contains(&file.name) => differing.push(file.name.clone()),
            None => wanted.push(file.clone()),
            Some(spec) if spec != file => differing.push(file.name.clone()),
            Some(_) => {}
        }
    }
    differing.extend(applied.keys().filter(|name| !files.iter().any(|f| &f.name == *name)).cloned());
    differing.sort();
    (wanted, differing)
}

fn same_domain(a: &PoolSpec, b: &PoolSpec) -> bool {
    a.provider == b.provider && a.placement_group == b.placement_group
}

#[cfg(test)]
mod tests {
    use crate::federation::Federation;
    use crate::log::Event;
    use crate::model::{Approval, Authority};

    use super::*;

    fn pool(name: &str, addresses: &[&str]) -> PoolSpec {
        PoolSpec {
            name: name.into(),
            addresses: addresses.iter().map(|a| a.parse().expect("literal")).collect(),
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

    use crate::fixtures::view_of_a as federation;

    /// Applies `events` in order; every one must pass the overlap check.
    fn apply_all(federation: &mut Federation, events: Vec<EventKind>) {
        for kind in events {
            let described = format!("{kind:?}");
            federation.apply(&Event { at_ms: 0, kind }).unwrap_or_else(|e| panic!("{described}: {e}"));
        }
    }

    fn applied(federation: &Federation) -> BTreeMap<String, PoolSpec> {
        federation
            .pools()
            .iter()
            .filter(|(_, p)| !p.deleted)
            .map(|(name, p)| (name.clone(), p.spec.as_ref().clone()))
            .collect()
    }

    #[test]
    fn two_pools_trading_addresses_are_applied_without_an_overlap() {
        let mut f = federation();
        let before = vec![pool("x", &["10.0.0.1", "10.0.0.2"]), pool("y", &["10.0.0.3", "10.0.0.4"])];
        let plan = plan_pool_changes(&applied(&f), &before);
        apply_all(&mut f, plan);
        let after = vec![pool("x", &["10.0.0.1", "10.0.0.3"]), pool("y", &["10.0.0.2", "10.0.0.4"])];
        let plan = plan_pool_changes(&applied(&f), &after);
        assert_eq!(plan.len(), 4, "two shrinks, then two applies: {plan:?}");
        apply_all(&mut f, plan);
        let now = applied(&f);
        assert_eq!(now["x"], after[0]);
        assert_eq!(now["y"], after[1]);
        assert!(plan_pool_changes(&now, &after).is_empty(), "nothing left to do");
    }

    #[test]
    fn a_pool_that_only_shrinks_is_applied_once() {
        let mut f = federation();
        let plan = plan_pool_changes(&applied(&f), &[pool("x", &["10.0.0.1", "10.0.0.2"])]);
        apply_all(&mut f, plan);
        let after = [pool("x", &["10.0.0.1"])];
        let plan = plan_pool_changes(&applied(&f), &after);
        assert_eq!(plan, vec![EventKind::PoolApplied { spec: Box::new(after[0].clone()) }], "one event");
        apply_all(&mut f, plan);
        assert!(plan_pool_changes(&applied(&f), &after).is_empty(), "nothing left to do");
    }

    #[test]
    fn a_removed_pool_is_deleted_before_its_address_is_taken_by_another() {
        let mut f = federation();
        let plan = plan_pool_changes(&applied(&f), &[pool("x", &["10.0.0.1"])]);
        apply_all(&mut f, plan);
        let after = vec![pool("z", &["10.0.0.1"])];
        let plan = plan_pool_changes(&applied(&f), &after);
        assert!(matches!(&plan[0], EventKind::PoolDeleted { pool } if pool == "x"), "{plan:?}");
        apply_all(&mut f, plan);
        assert_eq!(applied(&f).keys().collect::<Vec<_>>(), vec!["z"]);
    }

    #[test]
    fn a_pool_moving_to_another_domain_keeps_its_desired_flags() {
        let mut f = federation();
        let plan = plan_pool_changes(&applied(&f), &[pool("x", &["10.0.0.1", "10.0.0.2"])]);
        apply_all(&mut f, plan);
        let undesire =
            EventKind::Undesire { pool: "x".into(), address: "10.0.0.1".parse().expect("literal") };
        f.apply(&Event { at_ms: 0, kind: undesire }).expect("applies");
        let mut moved = pool("x", &["10.0.0.1", "10.0.0.2"]);
        moved.placement_group = "g2".into();
        let plan = plan_pool_changes(&applied(&f), std::slice::from_ref(&moved));
        assert_eq!(plan.len(), 1, "no delete, one apply: {plan:?}");
        apply_all(&mut f, plan);
        let state = f.address("x", "10.0.0.1".parse().expect("literal")).expect("kept");
        assert!(!state.desired, "the undesired address stays undesired");
    }

    #[test]
    fn a_fleet_start_seeds_new_pools_and_reverts_nothing() {
        let mut federation = federation();
        apply_all(&mut federation, plan_pool_changes(&BTreeMap::new(), &[pool("edge", &["10.0.0.1"])]));
        let applied = applied(&federation);
        // The log has edge and core; this router starts with an old edge file, a new pool and
        // no file for core.
        let mut other = federation.clone();
        apply_all(
            &mut other,
            plan_pool_changes(&applied, &[pool("edge", &["10.0.0.1"]), pool("core", &["10.0.0.9"])]),
        );
        let applied = self::applied(&other);
        // And a pool the fleet deleted, which this router's old files still have.
        let deleted: BTreeSet<String> = ["old".to_owned()].into();
        let files = [pool("edge", &["10.0.0.2"]), pool("dmz", &["10.0.0.5"]), pool("old", &["10.0.0.7"])];
        let (wanted, differing) = seed_pools(&applied, &deleted, &files);
        assert_eq!(differing, vec!["core".to_owned(), "edge".to_owned(), "old".to_owned()]);
        let plan = plan_pool_changes(&applied, &wanted);
        assert_eq!(plan.len(), 1, "only the new pool is applied: {plan:?}");
        assert!(matches!(&plan[0], EventKind::PoolApplied { spec } if spec.name == "dmz"));
        // The plain plan would have reverted edge and deleted core.
        assert!(
            plan_pool_changes(&applied, &[pool("edge", &["10.0.0.2"]), pool("dmz", &["10.0.0.5"])]).len() > 2
        );
    }

    #[test]
    fn the_naive_order_would_be_refused() {
        // The reason for phase 1: applying the new specs directly overlaps.
        let mut f = federation();
        let before = vec![pool("x", &["10.0.0.1"]), pool("y", &["10.0.0.2"])];
        let plan = plan_pool_changes(&applied(&f), &before);
        apply_all(&mut f, plan);
        let naive = EventKind::PoolApplied { spec: Box::new(pool("x", &["10.0.0.2"])) };
        assert!(f.apply(&Event { at_ms: 0, kind: naive }).is_err());
    }
}
