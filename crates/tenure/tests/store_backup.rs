//! Backups and restores of the embedded store (`tenure::store`): a backup taken beside a writer
//! is a consistent prefix; a restore raises every token above anything issued before it, keeps
//! the old store aside, and refuses another cluster's backup and a truncated one.

#[path = "support/store_fixture.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use support::*;
use tenure::store::{self, StoreError};
use tenure_core::fence::{self, FenceVerdict, StaleReason};
use tenure_core::journal::{JournalChange, JournalStore};
use tenure_core::log::{Event, EventKind};
use tenure_core::model::StampedAction;
use tenure_core::node::NodeEngine;

/// The lines of a backup file, parsed.
fn backup_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("read")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

#[test]
fn a_backup_taken_beside_a_writer_is_a_consistent_prefix() {
    let dir = TempDir::new("backup");
    let store = dir.open().expect("opens");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let store = store.clone();
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut journal = store.journal("a");
            let mut seq = 0;
            while !stop.load(Ordering::Relaxed) {
                seq += 1;
                journal
                    .commit(&JournalChange::Append(entry(seq, action("a", "10.0.0.1", seq, seq))))
                    .expect("buffers");
                store.append_batch(&[heartbeat(seq, "a")]).expect("appends");
            }
            seq
        })
    };
    while store.head().expect("head").is_none_or(|h| h.get() < 20) {
        std::thread::yield_now();
    }
    let mut sizes = Vec::new();
    for round in 0..5 {
        let file = dir.0.join(format!("backup-{round}.jsonl"));
        let summary = store.backup_to(&file).expect("backs up");
        let lines = backup_lines(&file);
        let header = &lines[0];
        assert_eq!(header["format"], "tenure-store-backup");
        assert_eq!(header["clusterId"], store.cluster_id());
        let highest = header["highestIndex"].as_u64().expect("highestIndex");
        let logged: Vec<u64> = lines.iter().filter_map(|l| l["log"]["index"].as_u64()).collect();
        assert_eq!(logged, (1..=highest).collect::<Vec<_>>(), "a dense prefix up to the header's index");
        let entries = lines.iter().filter(|l| l.get("entry").is_some()).count() as u64;
        assert_eq!(entries, highest, "journal and log from the same snapshot");
        assert_eq!(
            (summary.highest_index, summary.log_records, summary.journal_entries),
            (highest, highest, entries)
        );
        assert_eq!(lines.last().expect("end")["end"]["records"].as_u64(), Some(lines.len() as u64 - 2));
        sizes.push(highest);
    }
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().expect("the writer");
    assert!(sizes.windows(2).all(|w| w[0] <= w[1]), "{sizes:?}");
    assert!(written >= *sizes.last().expect("five"), "the writer kept writing");
    store.close().expect("closes");
}

/// A store with a failover history, backed up part way: returns the dir, the backup file, the
/// highest token issued before the restore, and the keys node a journaled before the backup.
fn history() -> (TempDir, PathBuf, u64, Vec<StampedAction>) {
    let dir = TempDir::new("restore");
    let store = dir.open().expect("opens");
    let mut fed = registry();
    append_and_apply(
        &store,
        &mut fed,
        &[
            Event {
                at_ms: 0,
                kind: EventKind::PoolApplied { spec: Box::new(pool_spec(&["10.0.0.1", "10.0.0.2"])) },
            },
            heartbeat(0, "a"),
            heartbeat(0, "b"),
        ],
    );
    let mut engine = NodeEngine::open("a", store.journal("a")).expect("opens");
    let _ = engine.reconcile(&fed, &fed).expect("reconciles");
    let journaled: Vec<StampedAction> = engine.entries().map(|e| e.action.clone()).collect();
    assert!(!journaled.is_empty());
    let backup = dir.0.join("backup.jsonl");
    store.backup_to(&backup).expect("backs up");
    // After the backup: failovers that issue higher tokens.
    for round in 0..4u64 {
        let node = if round % 2 == 0 { "a" } else { "b" };
        let events = [
            Event { at_ms: 10 + round, kind: EventKind::Drain { node: node.into() } },
            Event { at_ms: 10 + round, kind: EventKind::Undrain { node: node.into() } },
        ];
        append_and_apply(&store, &mut fed, &events);
    }
    let issued = fed.highest_token();
    assert!(issued >= 4, "{issued}");
    store.record_highest_token(issued);
    drop(engine);
    store.close().expect("closes");
    (dir, backup, issued, journaled)
}

#[test]
fn a_restore_raises_every_token_above_anything_issued_and_keeps_the_old_store() {
    let (dir, backup, issued, journaled) = history();
    let before = read_identity(&dir);
    assert_eq!(before.highest_token, issued);
    // A hook a killed agent left running: its record goes with the restored store, where the
    // next start kills it (left in the store moved aside, nothing would).
    let groups = dir.store().join("hook-groups");
    std::fs::create_dir_all(&groups).expect("mkdir");
    std::fs::write(groups.join("4242"), "record").expect("record");
    let summary = store::restore(&backup, &dir.store(), &dir.identity(), 1_000).expect("restores");
    assert!(dir.store().join("hook-groups/4242").is_file(), "the hook record carried over");
    assert_eq!(summary.backup_highest_index, 3);
    assert_eq!(summary.index_from, before.highest_index.max(3) + 1_000);
    assert_eq!(summary.by, issued + 1_000);
    let aside = summary.moved_aside.clone().expect("the old store moved aside");
    assert!(
        aside.file_name().expect("name").to_string_lossy().starts_with("store.before-restore-"),
        "{aside:?}"
    );
    assert!(aside.join(store::STORE_FILE_NAME).exists(), "never deleted");

    let after = read_identity(&dir);
    assert_eq!(after.cluster_id, before.cluster_id, "the cluster id is kept");
    assert_eq!(after.highest_index, summary.index_from);
    assert_eq!(after.restores.len(), 1);
    assert_eq!((after.restores[0].by, after.restores[0].index_from), (summary.by, summary.index_from));

    let store = dir.open().expect("the restored store opens");
    let records = read_all(&store.log());
    let mut expected: Vec<u64> = (1..=3).collect();
    expected.push(summary.index_from);
    assert_eq!(indices(&records), expected, "the backup's records, then the raise after the jump");
    assert_eq!(records.last().expect("raise").event.kind, EventKind::TokensRaised { by: summary.by });
    let mut fed = registry();
    for record in &records {
        fed.apply(&record.event).expect("accepted");
    }
    for (pool, state) in fed.pools() {
        for (address, state) in &state.addresses {
            assert!(state.ownership_epoch.get() > issued, "{pool}/{address}: {state:?}");
            assert!(state.line.epoch.get() > issued, "{pool}/{address}: {state:?}");
        }
    }
    // The journal came back from the backup, and every entry in it is stale now.
    let engine = NodeEngine::open("a", store.journal("a")).expect("opens");
    assert_eq!(engine.entries().map(|e| e.action.clone()).collect::<Vec<_>>(), journaled);
    for action in &journaled {
        assert_eq!(
            fence::check(action, &fed, &engine.durable().high_water),
            FenceVerdict::Stale { reason: StaleReason::StaleEpoch }
        );
    }
    // The log goes on after the jump.
    let next = store.append_batch(&[heartbeat(100, "a")]).expect("appends");
    assert_eq!(next[0].get(), summary.index_from + 1);
    drop(engine);
    store.close().expect("closes");
}

#[test]
fn a_restore_refuses_another_clusters_backup_and_a_truncated_one() {
    let (dir, backup, _, _) = history();
    let other = TempDir::new("restore-other");
    let other_store = other.open().expect("opens");
    let other_backup = other.0.join("other.jsonl");
    other_store.backup_to(&other_backup).expect("backs up");
    other_store.close().expect("closes");
    let before = snapshot(&dir.0);
    match store::restore(&other_backup, &dir.store(), &dir.identity(), 10) {
        Err(e @ StoreError::BackupOfOtherCluster { .. }) => {
            assert!(e.to_string().contains("remove the identity file"))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(snapshot(&dir.0), before, "nothing moved");

    let text = std::fs::read_to_string(&backup).expect("read");
    let cut = dir.0.join("cut.jsonl");
    let lines: Vec<&str> = text.lines().collect();
    // Cut inside the third line.
    let mut partial = format!("{}\n{}\n", lines[0], lines[1]);
    partial.push_str(&lines[2][..lines[2].len() / 2]);
    std::fs::write(&cut, &partial).expect("write");
    let before = (snapshot(&dir.store()), std::fs::read(dir.identity()).expect("identity"));
    match store::restore(&cut, &dir.store(), &dir.identity(), 10) {
        Err(StoreError::BadBackup { line: 3, .. }) => {}
        other => panic!("{other:?}"),
    }
    // Cut at a line boundary: the end line is missing.
    std::fs::write(&cut, format!("{}\n", lines[..lines.len() - 1].join("\n"))).expect("write");
    match store::restore(&cut, &dir.store(), &dir.identity(), 10) {
        Err(e @ StoreError::BadBackup { .. }) => {
            assert!(
                e.to_string().contains(&format!(":{}: ", lines.len())) && e.to_string().contains("truncated"),
                "{e}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        (snapshot(&dir.store()), std::fs::read(dir.identity()).expect("identity")),
        before,
        "nothing moved"
    );
    let mut names: Vec<String> = std::fs::read_dir(&dir.0)
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["backup.jsonl", "cut.jsonl", "identity.json", "store"],
        "nothing moved aside, nothing half-built left"
    );
    // The CLI: exit 2 on a bad backup file, one line naming file and line.
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["store", "restore"])
        .arg(&cut)
        .arg("--store-dir")
        .arg(dir.store())
        .arg("--identity-file")
        .arg(dir.identity())
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(&format!("{}:{}:", cut.display(), lines.len())), "{stderr}");
    // And exit 0 with a one-line summary on success.
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["store", "restore"])
        .arg(&backup)
        .arg("--store-dir")
        .arg(dir.store())
        .arg("--identity-file")
        .arg(dir.identity())
        .args(["--margin", "5"])
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(stdout.contains("every token is raised by"), "{stdout}");
}

/// The identity file is written about once a second: a crash can leave it behind what the store
/// committed. A restore then counts what the replaced store holds too, so no token or index it
/// issued is reused.
#[test]
fn a_restore_counts_what_the_replaced_store_committed_past_a_lagging_identity_file() {
    let (dir, backup, issued, _) = history();
    let current = read_identity(&dir);
    // The identity file as it was at the backup: before the four failovers.
    let mut lagging: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.identity()).expect("read")).expect("JSON");
    lagging["highestIndex"] = 3.into();
    lagging["highestToken"] = 1.into();
    std::fs::write(dir.identity(), lagging.to_string()).expect("writes");
    let summary = store::restore(&backup, &dir.store(), &dir.identity(), 1_000).expect("restores");
    assert_eq!(summary.index_from, current.highest_index + 1_000, "above the replaced store's index");
    assert_eq!(summary.by, issued + 1_000, "above the replaced store's highest token");
}
