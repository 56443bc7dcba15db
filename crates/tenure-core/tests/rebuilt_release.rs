//! A router rebuilt on an empty store (its journal lost, its node name kept) still releases what
//! the log says it holds: its newest confirmed verb of an address is an acquire, it is not the
//! desired holder any more, and its journal has no record of the address. Before this, only its
//! journal (and, with drift repair, inventory of its own NIC) counted as captured, so on a cloud
//! its old lines stayed `releasing`, and on-prem without inventory two hosts answered.

mod common;

use common::{address, append, log, registry};
use tenure_core::driver::{DriverOptions, NodeDriver};
use tenure_core::journal::MemoryJournalStore;
use tenure_core::log::{ActionOutcome, EventKind};
use tenure_core::log_store::MemoryLog;
use tenure_core::node::NodeEngine;
use tenure_core::planner;

fn driver(name: &str, drift_repair: bool) -> NodeDriver<MemoryJournalStore> {
    let engine = NodeEngine::open(name, MemoryJournalStore::new()).expect("memory");
    NodeDriver::new(
        engine,
        registry().with_drift_repair(drift_repair),
        DriverOptions { report_results: true },
    )
}

/// `node` follows the log, plans, and runs its calls until none is ready (each succeeds; an
/// address's verbs one after the other); its results are appended at `at_ms`.
fn execute(log: &mut MemoryLog, node: &mut NodeDriver<MemoryJournalStore>, at_ms: u64) {
    for _ in 0..8 {
        node.follow(log).expect("readable");
        node.reconcile().expect("memory").expect("not blocked");
        node.start_execution().expect("memory").expect("not blocked");
        let ready = node.poll_actions(64, None).expect("memory");
        for action in &ready {
            node.handle_result(&action.idempotency_key(), ActionOutcome::Executed, "ok".into())
                .expect("in flight");
        }
        while let Some(kind) = node.poll_append() {
            append(log, at_ms, kind);
        }
        if ready.is_empty() {
            return;
        }
    }
    panic!("{} still had calls after 8 rounds", node.name());
}

/// The release keys `node` plans now, from its view and its journal.
fn releases(log: &MemoryLog, node: &mut NodeDriver<MemoryJournalStore>) -> Vec<String> {
    node.follow(log).expect("readable");
    let view = node.view();
    let id = view.node_id(node.name()).expect("registered");
    let plan = planner::plan(view, id, node.engine().captured());
    let mut keys: Vec<String> = plan
        .actions
        .iter()
        .filter(|a| !a.stamp.verb.is_acquire())
        .map(|a| {
            let mut key = String::new();
            a.stamp.write_key(&mut key);
            key
        })
        .collect();
    keys.sort();
    keys
}

#[test]
fn a_router_rebuilt_on_an_empty_store_releases_what_the_log_says_it_holds() {
    for drift_repair in [false, true] {
        let mut log = log();
        let mut a = driver("a", drift_repair);
        execute(&mut log, &mut a, 10);
        // a (priority 10) holds edge's six addresses; it is drained, b becomes desired holder,
        // and edge's 500 ms deprovision hold passes.
        append(&mut log, 20, EventKind::Drain { node: "a".into() });
        append(&mut log, 600, EventKind::Heartbeat { node: "b".into() });
        let kept = releases(&log, &mut a);
        assert_eq!(kept.len(), 6 * 2, "a (its journal kept) releases edge's six, two verbs each: {kept:?}");
        assert!(kept.iter().all(|k| k.starts_with("edge/") && k.contains("/a/sim1/eni-a/")), "{kept:?}");
        // The same router on an empty store plans the same releases, from the log alone.
        let mut rebuilt = driver("a", drift_repair);
        assert_eq!(releases(&log, &mut rebuilt), kept, "drift repair {drift_repair}");
        // Once a ran them and the log has its release confirmations, nothing is left to release.
        execute(&mut log, &mut a, 700);
        assert_eq!(releases(&log, &mut a), Vec::<String>::new());
        let mut rebuilt = driver("a", drift_repair);
        assert_eq!(releases(&log, &mut rebuilt), Vec::<String>::new(), "drift repair {drift_repair}");
        // b, which holds them now and never confirmed a release, plans none of them.
        let mut b = driver("b", drift_repair);
        execute(&mut log, &mut b, 800);
        assert_eq!(releases(&log, &mut b), Vec::<String>::new());
        assert!(b.view().address("edge", address(0)).is_some_and(|s| s.confirmations.len() == 2));
    }
}
