//! The fsync ordering, on the engine directly: whatever authorised a provider call survives a
//! crash that loses every unsynced write.

use tenure_core::federation::Federation;
use tenure_core::journal::JournalStore;
use tenure_core::log::{Event, EventKind};
use tenure_core::model::{Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec};
use tenure_core::node::NodeEngine;
use tenure_sim::store::LossyJournalStore;

#[test]
fn the_high_water_mark_of_a_call_survives_a_lossy_crash() {
    let node = NodeSpec {
        name: "a".into(),
        provider: "sim".into(),
        placement_group: "g".into(),
        priority: 0,
        nic: "eni-a".into(),
        capacity: None,
    };
    let pool = PoolSpec {
        name: "p".into(),
        addresses: vec!["10.0.0.1".parse().expect("literal")],
        provider: "sim".into(),
        placement_group: "g".into(),
        members: vec!["a".into()],
        authority: Authority::None,
        approval: Approval::Auto,
        deprovision_hold_ms: 0,
        heartbeat_ttl_ms: 10_000,
        promotion_hold_ms: 0,
        epoch_locking: true,
        prefer_nodes: vec![],
        preempt: false,
        auto_failover: true,
    };
    let mut head =
        Federation::new(&[node], &[ProviderSpec { name: "sim".into(), kind: ProviderKind::SimCloud }]);
    for kind in [
        EventKind::PoolApplied { spec: Box::new(pool) },
        EventKind::Heartbeat { node: "a".into() },
        EventKind::Undesire { pool: "p".into(), address: "10.0.0.1".parse().expect("literal") },
        EventKind::Desire { pool: "p".into(), address: "10.0.0.1".parse().expect("literal") },
    ] {
        head.apply(&Event { at_ms: 0, kind }).expect("accepted");
    }
    let mut engine = NodeEngine::open("a", LossyJournalStore::new()).expect("memory");
    engine.reconcile(&head, &head).expect("memory");
    let action = engine.poll_execution(&head, None).expect("memory").expect("an acquire");
    assert_eq!(action.capture_epoch.get(), 3);
    // The machine dies between the call and recording its result: unsynced writes are lost.
    engine.store_mut().lose_unsynced();
    engine.restart().expect("memory");
    let durable = engine.store().load().expect("memory");
    assert_eq!(durable.entries.len(), 2, "the entries that authorised the call are durable");
    let highest = Some(durable.high_water.highest_capture().get());
    assert_eq!(highest, Some(3), "the high-water mark that authorised the call is durable");
}
