//! A NIC holds an address, not a pool's copy of it (SPEC 13): when a pool is renamed (deleted,
//! and its addresses applied again under another name), the holding a node confirmed for the old
//! pool is the new pool's once the node confirms a holding verb there — the old pool's row does
//! not say `releasing … HELD-BY` for ever (an operator trial found it did, after the new pool
//! released the address).

mod common;

use std::net::IpAddr;

use tenure_core::federation::Federation;
use tenure_core::log::{ActionOutcome, Event, EventKind};
use tenure_core::model::{Approval, CaptureDomain, PoolSpec, ProviderKind, ProviderSpec};
use tenure_core::rows::{OwnershipRow, ownership_rows_with_status};

const ADDRESS: &str = "10.0.0.1";

fn ip() -> IpAddr {
    ADDRESS.parse().expect("address")
}

fn pool(name: &str) -> PoolSpec {
    pool_of(name, &["a"])
}

fn pool_of(name: &str, members: &[&str]) -> PoolSpec {
    PoolSpec {
        addresses: vec![ip()],
        members: members.iter().map(|m| (*m).to_owned()).collect(),
        ..common::pool(name, 0..0, 0, Approval::Auto)
    }
}

struct World {
    fed: Federation,
}

impl World {
    /// Pool `old` applied and `a` holding its address (both verbs of the acquire executed).
    fn holding_old() -> Self {
        let mut w = Self::new();
        w.apply(0, EventKind::PoolApplied { spec: Box::new(pool("old")) });
        w.apply(0, EventKind::Heartbeat { node: "a".into() });
        let old = w.epochs("old");
        w.executed(1, "old", "assign-secondary-ip", old);
        w.executed(1, "old", "enable-forwarding", old);
        w
    }

    fn new() -> Self {
        let node = common::node;
        let provider = ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud };
        Self { fed: Federation::new(&[node("a", 10), node("b", 0)], &[provider]) }
    }

    fn apply(&mut self, at_ms: u64, kind: EventKind) {
        self.fed.apply(&Event { at_ms, kind }).expect("accepted");
    }

    /// `a` reports `verb` of `pool`'s address executed, with the tokens of the pool's lines now
    /// (`epochs`: the line it was captured on, for a release).
    fn executed(&mut self, at_ms: u64, pool: &str, verb: &str, epochs: (u64, u64)) {
        self.executed_by(at_ms, "a", pool, verb, epochs);
    }

    fn executed_by(&mut self, at_ms: u64, node: &str, pool: &str, verb: &str, epochs: (u64, u64)) {
        let (o, c) = epochs;
        let idempotency_key = format!("{pool}/{ADDRESS}/{verb}/{node}/sim1/eni-{node}/owner:{o}:epoch:{c}");
        let kind = EventKind::ActionResult {
            node: node.into(),
            idempotency_key,
            outcome: ActionOutcome::Executed,
            detail: "done".into(),
        };
        self.apply(at_ms, kind);
    }

    fn epochs(&self, pool: &str) -> (u64, u64) {
        let domain = CaptureDomain::new("sim1", "g1");
        (self.fed.ownership_epoch(pool, ip()).get(), self.fed.capture_epoch(pool, ip(), &domain).get())
    }

    /// Each pool's row of the address: (pool, phase, held by).
    fn rows(&self) -> Vec<(String, Option<String>, Option<Vec<String>>)> {
        ownership_rows_with_status(&self.fed)
            .into_iter()
            .map(|OwnershipRow { pool, phase, held_by, .. }| (pool, phase, held_by))
            .collect()
    }
}

impl World {
    /// Each pool's row of the address: (pool, NICs).
    fn nics(&self) -> Vec<(String, Option<Vec<String>>)> {
        ownership_rows_with_status(&self.fed).into_iter().map(|r| (r.pool, r.nics)).collect()
    }
}

fn nics_row(pool: &str, nics: &[&str]) -> (String, Option<Vec<String>>) {
    (pool.into(), Some(nics.iter().map(|n| (*n).to_owned()).collect()))
}

fn row(pool: &str, phase: &str, held_by: &[&str]) -> (String, Option<String>, Option<Vec<String>>) {
    (pool.into(), Some(phase.into()), Some(held_by.iter().map(|n| (*n).to_owned()).collect()))
}

#[test]
fn a_renamed_pools_old_rows_leave_once_the_new_pool_holds_and_stay_gone_after_its_release() {
    let mut w = World::holding_old();
    assert_eq!(w.rows(), vec![row("old", "held", &["a"])]);

    // Renamed: `old` deleted, its address applied as `new`. a's NIC holds it still, for `old`
    // until a confirms a holding verb for `new`; the map shows `new`'s row alone meanwhile (an
    // address no longer listed shows only while its holder holds it where no pool wants it).
    w.apply(2, EventKind::PoolDeleted { pool: "old".into() });
    w.apply(2, EventKind::PoolApplied { spec: Box::new(pool("new")) });
    assert_eq!(w.rows(), vec![row("new", "acquiring", &[])]);
    // Nothing held is hidden: the address is on a's NIC by `old`'s acquire, and `new`'s row, the
    // one the map shows, says so (an operator trial found `<none>` there).
    assert_eq!(w.nics(), vec![nics_row("new", &["eni-a"])]);

    let new = w.epochs("new");
    w.executed(3, "new", "assign-secondary-ip", new);
    w.executed(3, "new", "enable-forwarding", new);
    assert_eq!(w.rows(), vec![row("new", "held", &["a"])], "the holding is `new`'s now");

    // `new` lets the address go: a releases it, and no pool's row says anyone holds it.
    w.apply(4, EventKind::Undesire { pool: "new".into(), address: ip() });
    w.executed(5, "new", "disable-forwarding", new);
    w.executed(5, "new", "unassign-secondary-ip", new);
    let rows = w.rows();
    assert!(rows.iter().all(|(_, _, held_by)| held_by.as_ref().is_none_or(Vec::is_empty)), "{rows:?}");
    assert!(!rows.iter().any(|(pool, _, _)| pool == "old"), "{rows:?}");
}

/// Another node's holding of the old pool is not the new pool's: it stays shown (that node must
/// release it), and a pool that lists the address shows its own holders as they are.
#[test]
fn another_nodes_holding_of_the_old_pool_stays_shown() {
    let mut w = World::new();
    w.apply(0, EventKind::PoolApplied { spec: Box::new(pool_of("old", &["b"])) });
    w.apply(0, EventKind::Heartbeat { node: "a".into() });
    w.apply(0, EventKind::Heartbeat { node: "b".into() });
    let old = w.epochs("old");
    w.executed_by(1, "b", "old", "assign-secondary-ip", old);
    w.executed_by(1, "b", "old", "enable-forwarding", old);
    w.apply(2, EventKind::PoolDeleted { pool: "old".into() });
    w.apply(2, EventKind::PoolApplied { spec: Box::new(pool("new")) });
    let new = w.epochs("new");
    w.executed(3, "new", "assign-secondary-ip", new);
    w.executed(3, "new", "enable-forwarding", new);
    let rows = w.rows();
    assert!(rows.contains(&row("old", "releasing", &["b"])), "b still holds old's address: {rows:?}");
    assert!(rows.contains(&row("new", "held", &["a"])), "the new pool's own holders: {rows:?}");
    // Both rows of the one address show the same NICs (an operator trial found them differ).
    assert_eq!(w.nics(), vec![nics_row("new", &["eni-a", "eni-b"]), nics_row("old", &["eni-a", "eni-b"])]);
}

/// Renamed back: a pool that lists the address again shows its own confirmations as they are,
/// whatever another pool confirmed since (the NIC still holds it).
#[test]
fn a_pool_renamed_back_shows_its_holder() {
    let mut w = World::holding_old();
    w.apply(2, EventKind::PoolDeleted { pool: "old".into() });
    w.apply(2, EventKind::PoolApplied { spec: Box::new(pool("new")) });
    let new = w.epochs("new");
    w.executed(3, "new", "assign-secondary-ip", new);
    w.executed(3, "new", "enable-forwarding", new);
    w.apply(4, EventKind::PoolDeleted { pool: "new".into() });
    w.apply(4, EventKind::PoolApplied { spec: Box::new(pool("old")) });
    let rows = w.rows();
    let shown =
        |pool: &str| rows.iter().find(|(p, _, _)| p == pool).and_then(|(_, _, held_by)| held_by.clone());
    assert_eq!(shown("old"), Some(vec!["a".to_owned()]), "{rows:?}");
}
