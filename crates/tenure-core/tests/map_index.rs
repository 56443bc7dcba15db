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
use tenure_core::log_store::{Log, LogIndex, MemoryLog};
use tenure_core::map_index::{MapIndex, MapSnapshot};
use tenure_core::node::NodeEngine;
use tenure_core::rows::{ActionRow, OwnershipRow, action_row_with_attempts, ownership_rows_with_status};

mod common;
use common::{Step, apply, driver, log, registry, step};

/// Applies the records of `log` after `applied` to `view`.
fn follow(view: &mut Federation, log: &MemoryLog, applied: &mut Option<LogIndex>) {
    loop {
        let from = applied.map_or(LogIndex::FIRST, LogIndex::next);
        let records = log.read_from(from, 64).expect("readable");
        if records.is_empty() {
            return;
        }
        for record in records {
            let _ = view.apply(&record.event);
            *applied = Some(record.index);
        }
    }
}

/// Every row of a snapshot, written out, in its order.
fn written(snapshot: &MapSnapshot) -> Vec<OwnershipRow> {
    snapshot.rows(None, None).map(|(pool, address, row)| snapshot.render(pool, address, row)).collect()
}

/// Every entry of a journal snapshot, written out.
fn journal_rows(snapshot: &JournalSnapshot) -> Vec<ActionRow> {
    snapshot.rows().map(|row| snapshot.render(row)).collect()
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
