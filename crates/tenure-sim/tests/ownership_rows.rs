//! The agent's ownership rows (`ownership_rows_with_status`): every row carries its phase,
//! holders and NICs, and an address still held after its pool was deleted (or stopped listing it)
//! stays in the map as `releasing` — nothing held is hidden. A replay's rows (`ownership_rows`)
//! carry no phase: its log has no results.

use tenure_core::federation::Federation;
use tenure_core::log::{ActionOutcome, Event, EventKind};
use tenure_core::model::{Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec};
use tenure_core::rows::{ownership_rows, ownership_rows_with_status};

/// A row as the test compares it: address, owner, phase, NICs.
type Row = (String, Option<String>, Option<String>, Option<Vec<String>>);

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

fn pool(addresses: &[&str]) -> PoolSpec {
    PoolSpec {
        name: "edge".into(),
        addresses: addresses.iter().map(|a| a.parse().expect("address")).collect(),
        provider: "sim1".into(),
        placement_group: "g1".into(),
        members: vec!["a".into(), "b".into()],
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

#[test]
fn an_address_held_after_its_pool_went_stays_in_the_agents_map() {
    let mut view = Federation::new(
        &[node("a", 10), node("b", 0)],
        &[ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }],
    );
    let mut apply = |at_ms: u64, kind: EventKind| view.apply(&Event { at_ms, kind }).expect("accepted");
    apply(0, EventKind::PoolApplied { spec: Box::new(pool(&["10.0.0.1", "10.0.0.2"])) });
    apply(1, EventKind::Heartbeat { node: "a".into() });
    apply(1, EventKind::Heartbeat { node: "b".into() });
    for address in ["10.0.0.1", "10.0.0.2"] {
        apply(
            2,
            EventKind::ActionResult {
                node: "a".into(),
                idempotency_key: format!("edge/{address}/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1"),
                outcome: ActionOutcome::Executed,
                detail: "assigned".into(),
            },
        );
    }
    let phases = |view: &Federation| -> Vec<Row> {
        ownership_rows_with_status(view).into_iter().map(|r| (r.address, r.owner, r.phase, r.nics)).collect()
    };
    let held = |address: &str| {
        (address.to_owned(), Some("a".to_owned()), Some("held".to_owned()), Some(vec!["eni-a".to_owned()]))
    };
    assert_eq!(phases(&view), vec![held("10.0.0.1"), held("10.0.0.2")]);
    assert!(ownership_rows(&view).iter().all(|r| r.phase.is_none() && r.nics.is_none()), "a replay's rows");

    // The pool stops listing 10.0.0.2, then goes: a still holds both until it releases them.
    view.apply(&Event { at_ms: 3, kind: EventKind::PoolApplied { spec: Box::new(pool(&["10.0.0.1"])) } })
        .expect("accepted");
    let releasing = |address: &str| {
        (address.to_owned(), None, Some("releasing".to_owned()), Some(vec!["eni-a".to_owned()]))
    };
    assert_eq!(phases(&view), vec![held("10.0.0.1"), releasing("10.0.0.2")]);
    assert_eq!(ownership_rows(&view).len(), 1, "a replay lists what the pool lists");
    view.apply(&Event { at_ms: 4, kind: EventKind::PoolDeleted { pool: "edge".into() } }).expect("accepted");
    assert_eq!(phases(&view), vec![releasing("10.0.0.1"), releasing("10.0.0.2")]);
    view.apply(&Event {
        at_ms: 5,
        kind: EventKind::ActionResult {
            node: "a".into(),
            idempotency_key: "edge/10.0.0.2/unassign-secondary-ip/a/sim1/eni-a/owner:1:epoch:2".into(),
            outcome: ActionOutcome::Executed,
            detail: "unassigned".into(),
        },
    })
    .expect("accepted");
    assert_eq!(phases(&view), vec![releasing("10.0.0.1")], "released: gone from the map");
}
