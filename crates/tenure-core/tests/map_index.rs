//! The map and the journal readers see outside the agent loop (issue 24: reads never wait for
//! the loop): a [`MapIndex`] that follows a view by the rows it says changed
//! ([`Federation::take_map_changes`]) gives, after every step of random logs, exactly the rows a
//! listing of the whole view gives ([`ownership_rows_with_status`]); a [`JournalIndex`] that
//! follows a node's engine by the entries it says changed ([`NodeEngine::take_row_changes`])
//! gives exactly the rows of its journal; snapshots taken before a step keep what they showed; and
//! a step that names a few positions reads a few rows, not the map.

use proptest::prelude::*;
use tenure_core::federation::Federation;
use tenure_core::journal::JournalStore;
use tenure_core::journal_index::{JournalIndex, JournalSnapshot};
use tenure_core::log_store::MemoryLog;
use tenure_core::map_index::{MapIndex, MapSnapshot};
use tenure_core::node::NodeEngine;
use tenure_core::rows::{ActionRow, OwnershipRow, action_row_with_attempts, ownership_rows_with_status};

mod common;
use common::{Step, apply, driver, follow, log, registry, step};

/// Every row of a snapshot, written out, in its order.
fn written(snapshot: &MapSnapshot) -> Vec<OwnershipRow> {
    snapshot.rows(None, None).map(|(pool, address, row)| snapshot.render(pool, address, row)).collect()
}

/// Every entry of a journal snapshot, written out.
fn journal_rows(snapshot: &JournalSnapshot) -> Vec<ActionRow> {
    snapshot.rows().map(|row| snapshot.render(&row)).collect()
}

/// Every entry of `engine`'s journal as the loop lists it.
fn listed<S: JournalStore>(engine: &NodeEngine<S>) -> Vec<ActionRow> {
    engine
        .entries()
        .map(|entry| action_row_with_attempts("a", entry, engine.next_attempt_ms(entry)))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn an_index_that_follows_the_changes_shows_what_the_view_lists(
        steps in prop::collection::vec(step(), 0..32),
    ) {
        let mut log = log();
        let mut a = driver("a");
        let mut view = registry();
        let mut applied = None;
        let mut index = MapIndex::new();
        let mut journal = JournalIndex::new("a");
        follow(&mut view, &log, &mut applied);
        index.follow(&mut view);
        journal.follow(a.engine_mut());
        let mut at_ms = 10;
        for step in &steps {
            let before = index.snapshot();
            let shown_before = written(&before);
            let journal_before = journal.snapshot();
            let journal_shown_before = journal_rows(&journal_before);
            at_ms = apply(&mut log, &mut a, at_ms + 1, step) ;
            follow(&mut view, &log, &mut applied);
            index.follow(&mut view);
            journal.follow(a.engine_mut());
            prop_assert_eq!(journal_rows(&journal.snapshot()), listed(a.engine()), "journal after {:?}", step);
            prop_assert_eq!(journal_rows(&journal_before), journal_shown_before, "a journal snapshot is immutable");
            let snapshot = index.snapshot();
            prop_assert_eq!(written(&snapshot), ownership_rows_with_status(&view), "after {:?}", step);
            prop_assert_eq!(snapshot.len(), ownership_rows_with_status(&view).len());
            prop_assert_eq!(written(&before), shown_before, "a snapshot is immutable");
        }
    }
}

/// A step naming one address reads that address's rows, not the map's.
#[test]
fn a_change_of_one_position_reads_its_rows_alone() {
    let mut log = log();
    let mut a = driver("a");
    let mut view = registry();
    let mut applied = None;
    let mut index = MapIndex::new();
    follow(&mut view, &log, &mut applied);
    let whole = index.follow(&mut view);
    assert_eq!(whole, ownership_rows_with_status(&view).len(), "the first follow reads every row");
    assert!(whole > 2, "{whole}");
    // 10.0.0.2 is listed by `edge` alone (east is not applied).
    apply(&mut log, &mut a, 20, &Step::Undesire("edge", 1));
    follow(&mut view, &log, &mut applied);
    assert_eq!(index.follow(&mut view), 1);
    assert_eq!(written(&index.snapshot()), ownership_rows_with_status(&view));
    // Nothing changed: nothing read.
    assert_eq!(index.follow(&mut view), 0);
    // A pool applied: every row.
    apply(&mut log, &mut a, 30, &Step::Apply("east"));
    follow(&mut view, &log, &mut applied);
    assert_eq!(index.follow(&mut view), ownership_rows_with_status(&view).len());
}

/// A pool moved to another provider: the old holder's release is stamped with the provider it
/// captured on, and the change names that provider; the pool's row (its holders, its NICs) is
/// read again all the same.
#[test]
fn a_release_stamped_with_a_provider_the_pool_left_reads_the_pool_s_row() {
    use tenure_core::driver::{DriverOptions, NodeDriver};
    use tenure_core::journal::MemoryJournalStore;
    use tenure_core::model::{ProviderKind, ProviderSpec};
    use tenure_core::node::NodeEngine;
    let registry = Federation::new(
        &[common::node("a", 10), common::node("b", 0)],
        &[
            ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud },
            ProviderSpec { name: "sim2".into(), kind: ProviderKind::SimCloud },
        ],
    )
    .with_drift_repair(true);
    let engine = NodeEngine::open("a", MemoryJournalStore::new()).expect("memory");
    let mut a = NodeDriver::new(engine, registry.clone(), DriverOptions { report_results: true });
    let mut log = MemoryLog::new();
    let mut edge = common::pool("edge", 0..2, 0, tenure_core::model::Approval::Auto);
    common::append(&mut log, 0, tenure_core::log::EventKind::PoolApplied { spec: Box::new(edge.clone()) });
    common::append(&mut log, 1, tenure_core::log::EventKind::Heartbeat { node: "a".into() });
    common::append(&mut log, 1, tenure_core::log::EventKind::Heartbeat { node: "b".into() });
    let mut view = registry;
    let mut applied = None;
    let mut index = MapIndex::new();
    apply(&mut log, &mut a, 2, &Step::Execute);
    follow(&mut view, &log, &mut applied);
    index.follow(&mut view);
    assert!(written(&index.snapshot()).iter().all(|row| row.held_by == Some(vec!["a".to_owned()])));
    // The pool moves to sim2 (where no member is): a releases on sim1, its result names sim1.
    edge.provider = "sim2".into();
    common::append(&mut log, 3, tenure_core::log::EventKind::PoolApplied { spec: Box::new(edge) });
    follow(&mut view, &log, &mut applied);
    index.follow(&mut view);
    // disable-forwarding, then unassign (the holding verb: a holds it no more).
    for at_ms in [4, 5] {
        apply(&mut log, &mut a, at_ms, &Step::Execute);
        follow(&mut view, &log, &mut applied);
        index.follow(&mut view);
    }
    let rows = ownership_rows_with_status(&view);
    assert!(rows.iter().all(|row| row.held_by == Some(Vec::new())), "{rows:?}");
    assert_eq!(written(&index.snapshot()), rows);
}
