//! The durable embedded store (`tenure::store`): the log and journals through the core's
//! interfaces, group commit, and the refusals (each with its own message, files unchanged after
//! each). Backups and restores: `store_backup.rs`.
//!
//! A second process is this test binary run again with `TENURE_STORE_TEST_CHILD` set (see
//! [`child_process`]).

#[path = "support/store_fixture.rs"]
mod support;

use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use support::*;
use tenure::store::{self, EmbeddedStore, StoreError};
use tenure_core::codec;
use tenure_core::journal::{Attempts, EntryState, JournalChange, JournalSeq, JournalStore};
use tenure_core::log::{ActionOutcome, Event, EventKind};
use tenure_core::log_store::{Log, LogIndex};
use tenure_core::node::NodeEngine;

#[test]
fn the_log_appends_reads_and_survives_a_reopen() {
    let dir = TempDir::new("log");
    let store = dir.open().expect("a new store");
    let mut log = store.log();
    assert_eq!(log.head(), Ok(None));
    assert_eq!(log.read_from(LogIndex::FIRST, 10), Ok(vec![]));
    let events: Vec<Event> = (0..20).map(|i| heartbeat(i, &format!("n{}", i % 3))).collect();
    for (i, event) in events[..12].iter().enumerate() {
        assert_eq!(log.append(event).map(LogIndex::get), Ok(i as u64 + 1));
    }
    let batch = store.append_batch(&events[12..]).expect("appends");
    assert_eq!(batch.iter().map(|i| i.get()).collect::<Vec<_>>(), (13..=20).collect::<Vec<_>>());
    assert_eq!(log.head().expect("head").map(LogIndex::get), Some(20));
    let read = read_all(&log);
    assert_eq!(indices(&read), (1..=20).collect::<Vec<_>>());
    assert_eq!(read.iter().map(|r| r.event.clone()).collect::<Vec<_>>(), events);
    let cluster = store.cluster_id().to_owned();
    assert_eq!(cluster.len(), 32);
    store.close().expect("closes");
    assert_eq!(
        log.head(),
        Err(tenure_core::log_store::LogError::Unavailable {
            reason: format!("store {} is closed", dir.store().display()),
        }),
        "a handle that outlives close fails"
    );

    let reopened = dir.reopen().expect("reopens");
    assert_eq!(reopened.cluster_id(), cluster, "the cluster id is kept");
    let read = read_all(&reopened.log());
    assert_eq!(read.into_iter().map(|r| r.event).collect::<Vec<_>>(), events);
    assert_eq!(reopened.head().expect("head").map(LogIndex::get), Some(20));
    assert_eq!(reopened.identity().highest_index, 20);
    let identity = std::fs::read_to_string(dir.identity()).expect("identity file");
    assert!(
        identity.starts_with(&format!("{{\"v\":1,\"clusterId\":\"{cluster}\",\"highestIndex\":20,")),
        "{identity}"
    );
    reopened.close().expect("closes");
}

#[test]
fn one_sync_commits_every_nodes_changes_and_unsynced_ones_are_lost_in_a_crash() {
    let dir = TempDir::new("group");
    let store = dir.open().expect("opens");
    let mut a = store.journal("a");
    let mut b = store.journal("b");
    a.commit(&JournalChange::Append(entry(1, action("a", "10.0.0.1", 3, 2)))).expect("buffers");
    a.commit(&raise("10.0.0.1", 3, 2)).expect("buffers");
    b.commit(&JournalChange::Append(entry(1, action("b", "10.0.0.2", 5, 4)))).expect("buffers");
    b.commit(&raise("10.0.0.2", 5, 4)).expect("buffers");
    a.commit(&JournalChange::SetState {
        seq: JournalSeq::new(1),
        state: EntryState::Executed,
        detail: Some("ok".into()),
        executed_seq: Some(1),
    })
    .expect("buffers");
    // One log append commits every node's buffered changes with it.
    store.append_batch(&[heartbeat(1, "a")]).expect("appends");
    b.commit(&JournalChange::Append(entry(2, action("b", "10.0.0.3", 6, 6)))).expect("buffers");
    a.sync().expect("syncs b's change too");
    // Committed, never synced: lost in the crash below.
    a.commit(&JournalChange::Append(entry(2, action("a", "10.0.0.4", 9, 9)))).expect("buffers");
    b.commit(&raise("10.0.0.3", 7, 7)).expect("buffers");
    drop((a, b, store));

    let store = dir.reopen().expect("reopens after the crash");
    let a = store.journal("a").load().expect("loads");
    let b = store.journal("b").load().expect("loads");
    assert_eq!(a.entries.keys().copied().collect::<Vec<_>>(), [JournalSeq::new(1)]);
    assert_eq!(a.entries[&JournalSeq::new(1)].state, EntryState::Executed);
    assert_eq!(a.entries[&JournalSeq::new(1)].detail.as_deref(), Some("ok"));
    assert_eq!((a.last_seq, a.executions), (JournalSeq::new(1), 1));
    assert_eq!(
        b.entries.keys().copied().collect::<Vec<_>>(),
        [JournalSeq::new(1), JournalSeq::new(2)],
        "b's second entry came with a's sync"
    );
    assert_eq!((b.last_seq, b.executions), (JournalSeq::new(2), 0));
    let marks = |state: &tenure_core::journal::DurableNodeState| {
        String::from_utf8(codec::encode_high_water(&state.high_water).expect("encodes")).expect("utf-8")
    };
    assert!(marks(&a).contains(r#""address":"10.0.0.1","captureDomain":"provider:sim1:placement:g1","captureEpoch":3,"ownershipEpoch":2"#), "{}", marks(&a));
    assert!(!marks(&b).contains("10.0.0.3"), "the unsynced raise is lost: {}", marks(&b));
    assert_eq!(store.log().head().expect("head").map(LogIndex::get), Some(1));
    assert!(store.identity().highest_token >= 6, "tokens in synced journal changes count");
    store.close().expect("closes");
}

/// One commit writes each row it touches once, as the batch's last change left it: an entry
/// appended, handed out, attempted and executed in one batch, and a mark raised and then offered
/// a lower one, load as the changes made one at a time would have left them; entries compacted
/// in the batch (one appended in it, one written by an earlier commit) leave no row.
#[test]
fn a_batch_that_changes_a_row_several_times_leaves_its_last_state() {
    let dir = TempDir::new("batch");
    let store = dir.open().expect("opens");
    let mut a = store.journal("a");
    let set =
        |seq: u64, state: EntryState, detail: &str, executed_seq: Option<u64>| JournalChange::SetState {
            seq: JournalSeq::new(seq),
            state,
            detail: Some(detail.into()),
            executed_seq,
        };
    // An earlier commit's row, compacted below.
    a.commit(&JournalChange::Append(entry(1, action("a", "10.0.0.9", 1, 1)))).expect("buffers");
    a.commit(&set(1, EntryState::Executed, "ok", Some(1))).expect("buffers");
    a.sync().expect("syncs");
    a.commit(&JournalChange::Append(entry(2, action("a", "10.0.0.1", 3, 2)))).expect("buffers");
    a.commit(&JournalChange::Append(entry(3, action("a", "10.0.0.2", 3, 2)))).expect("buffers");
    a.commit(&raise("10.0.0.1", 5, 4)).expect("buffers");
    a.commit(&raise("10.0.0.1", 3, 2)).expect("buffers");
    a.commit(&set(2, EntryState::Approved, "call started", None)).expect("buffers");
    a.commit(&JournalChange::Attempt { seq: JournalSeq::new(2), at_ms: 70, wall_ms: Some(80) })
        .expect("buffers");
    a.commit(&set(2, EntryState::Executed, "ok", Some(2))).expect("buffers");
    a.commit(&set(3, EntryState::Skipped(tenure_core::fence::StaleReason::StaleOwnerEpoch), "stale", None))
        .expect("buffers");
    a.commit(&JournalChange::Compact { seqs: vec![JournalSeq::new(1), JournalSeq::new(3)] })
        .expect("buffers");
    a.sync().expect("syncs");
    drop((a, store));

    let store = dir.reopen().expect("reopens");
    let a = store.journal("a").load().expect("loads");
    assert_eq!(a.entries.keys().copied().collect::<Vec<_>>(), [JournalSeq::new(2)], "1 and 3 were compacted");
    let two = &a.entries[&JournalSeq::new(2)];
    assert_eq!(
        (two.state, two.detail.as_deref(), two.executed_seq.map(std::num::NonZeroU64::get)),
        (EntryState::Executed, Some("ok"), Some(2))
    );
    assert_eq!(
        (two.attempts.count, two.attempts.last_at_ms(), two.attempts.last_wall_ms()),
        (1, Some(70), Some(80))
    );
    assert_eq!((a.last_seq, a.executions), (JournalSeq::new(3), 2));
    let marks = String::from_utf8(codec::encode_high_water(&a.high_water).expect("encodes")).expect("utf-8");
    assert!(marks.contains(r#""address":"10.0.0.1","captureDomain":"provider:sim1:placement:g1","captureEpoch":5,"ownershipEpoch":4"#), "the higher raise stays: {marks}");
    store.close().expect("closes");
}

#[test]
fn a_journal_change_that_contradicts_the_store_fails_the_store() {
    let dir = TempDir::new("inconsistent");
    let store = dir.open().expect("opens");
    let mut a = store.journal("a");
    a.commit(&JournalChange::SetState {
        seq: JournalSeq::new(7),
        state: EntryState::Executed,
        detail: None,
        executed_seq: Some(1),
    })
    .expect("buffers");
    assert!(matches!(a.sync(), Err(StoreError::Inconsistent { .. })));
    assert!(matches!(
        store.append_batch(&[heartbeat(1, "a")]),
        Err(tenure_core::log_store::LogError::Unavailable { .. })
    ));
    assert!(matches!(a.sync(), Err(StoreError::Failed { .. })), "the store refuses writes once failed");
}

#[test]
fn a_node_engine_round_trips_through_the_store() {
    let dir = TempDir::new("engine");
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
        ],
    );
    let mut engine = NodeEngine::open("a", store.journal("a")).expect("opens");
    let _ = engine.reconcile(&fed, &fed).expect("reconciles");
    let first = engine.poll_execution(&fed, None).expect("gates").expect("an action");
    engine
        .handle_execution_result(&first.idempotency_key(), ActionOutcome::Executed, Some("done".into()))
        .expect("reports");
    engine.store_mut().sync().expect("syncs");
    let before = engine.durable().clone();
    assert!(before.entries.len() >= 2 && before.executions == 1, "{before:?}");
    drop(engine);
    store.close().expect("closes");

    let store = dir.reopen().expect("reopens");
    let engine = NodeEngine::open("a", store.journal("a")).expect("opens");
    let after = engine.durable();
    assert_eq!(after.entries, before.entries);
    assert_eq!((after.last_seq, after.executions), (before.last_seq, before.executions));
    assert_eq!(
        codec::encode_high_water(&after.high_water).expect("encodes"),
        codec::encode_high_water(&before.high_water).expect("encodes"),
        "the marks read back are the ones written"
    );
    assert_eq!(engine.entry(&first.idempotency_key()).map(|e| e.state), Some(EntryState::Executed));
    store.close().expect("closes");
}

#[test]
fn a_second_open_in_this_process_is_refused_naming_the_holder() {
    let dir = TempDir::new("locked");
    let store = dir.open().expect("opens");
    store.append_batch(&[heartbeat(1, "a")]).expect("appends");
    let before = snapshot(&dir.0);
    match dir.open() {
        Err(StoreError::Locked { holder, .. }) => {
            assert!(holder.contains(&format!("pid {}", std::process::id())), "{holder}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(snapshot(&dir.0), before, "the refused open changed nothing");
    assert!(store::restore(&dir.0.join("none"), &dir.store(), &dir.identity(), 10).is_err());
    match store::restore(&dir.0.join("none"), &dir.store(), &dir.identity(), 10) {
        Err(StoreError::Locked { .. }) => {}
        other => panic!("a restore of a locked store is refused: {other:?}"),
    }
    store.close().expect("closes");
    // Released at close; but a child another test of this binary forks at that moment holds a
    // copy of the descriptor (and so of the flock) until its exec closes it: a bounded wait.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match dir.open() {
            Ok(store) => break store.close().expect("closes"),
            Err(StoreError::Locked { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("the lock was released: {e:?}"),
        }
    }
}

/// Runs this test binary again as a child holding or crashing a store (see [`child_process`]).
fn spawn_child(mode: &str, dir: &TempDir) -> std::process::Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "child_process", "--nocapture", "--test-threads", "1"])
        .env("TENURE_STORE_TEST_CHILD", mode)
        .env("TENURE_STORE_TEST_DIR", &dir.0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child")
}

/// Not a test of its own: the child side of the two-process tests. `hold` opens the store, says
/// `ready <pid>` and holds it until its stdin closes; `crash` opens it, appends 50 events
/// durably and aborts without closing.
#[test]
fn child_process() {
    let Some(mode) = std::env::var_os("TENURE_STORE_TEST_CHILD") else { return };
    let dir = PathBuf::from(std::env::var_os("TENURE_STORE_TEST_DIR").expect("the dir"));
    let store = EmbeddedStore::open(&dir.join("store"), &dir.join("identity.json")).expect("the child opens");
    match mode.to_str() {
        Some("hold") => {
            println!("ready {}", std::process::id());
            std::io::stdout().flush().expect("flush");
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
            store.close().expect("closes");
        }
        Some("crash") => {
            for i in 0..50 {
                store.append_batch(&[heartbeat(i, "a")]).expect("appends");
            }
            println!("ready {}", std::process::id());
            std::io::stdout().flush().expect("flush");
            std::process::abort();
        }
        // Ten durable appends, then five deferred ones (a step's results): lost in the crash
        // unless something synced them — here the identity file's flush, which writes only what
        // is durable and so commits them durably first.
        Some(mode @ ("deferred" | "deferred-flushed" | "deferred-synced")) => {
            for i in 0..10 {
                store.append_batch(&[heartbeat(i, "a")]).expect("appends");
            }
            store.flush_identity().expect("writes the identity file");
            for i in 10..15 {
                store.append_deferred(&[heartbeat(i, "a")]).expect("appends");
            }
            if mode == "deferred-flushed" {
                store.flush_identity().expect("writes the identity file");
            }
            // A journal's sync with nothing buffered: durable all the same (the gate's, the
            // step's end).
            if mode == "deferred-synced" {
                store.journal("a").sync().expect("syncs");
            }
            println!("ready {}", std::process::id());
            std::io::stdout().flush().expect("flush");
            std::process::abort();
        }
        other => panic!("unknown child mode {other:?}"),
    }
}

/// Reads the child's stdout up to its `ready <pid>` line (the test harness prints before it).
fn wait_ready(child: &mut std::process::Child) -> u32 {
    let mut reader = std::io::BufReader::new(child.stdout.as_mut().expect("stdout"));
    loop {
        let mut line = String::new();
        assert!(reader.read_line(&mut line).expect("read") > 0, "the child ended before it was ready");
        // The harness prints `test child_process ... ` on the same line, before it.
        if let Some((_, pid)) = line.split_once("ready ") {
            let pid: u32 = pid.trim().parse().expect("a pid");
            assert_eq!(pid, child.id());
            return pid;
        }
    }
}

#[test]
fn an_open_while_another_process_holds_the_store_is_refused_naming_it() {
    let dir = TempDir::new("locked-process");
    dir.open().expect("creates").close().expect("closes");
    let mut child = spawn_child("hold", &dir);
    let pid = wait_ready(&mut child);
    let before = snapshot(&dir.0);
    match dir.open() {
        Err(e @ StoreError::Locked { .. }) => {
            let message = e.to_string();
            assert!(message.contains(&format!("pid {pid}")), "{message}");
            assert!(!message.contains('\n'), "one line: {message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(snapshot(&dir.0), before, "the refused open changed nothing");
    // The CLI says the same, in one line, exit 1.
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["store", "backup"])
        .arg(dir.0.join("backup.jsonl"))
        .arg("--store-dir")
        .arg(dir.store())
        .arg("--identity-file")
        .arg(dir.identity())
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("is locked by pid {pid}")) && stderr.contains("through its API"),
        "{stderr}"
    );
    drop(child.stdin.take());
    assert!(child.wait().expect("waits").success());
    dir.open().expect("released when the holder exits").close().expect("closes");
}

#[test]
fn a_store_left_by_a_crashed_process_opens_with_everything_it_committed() {
    let dir = TempDir::new("crash");
    let mut child = spawn_child("crash", &dir);
    wait_ready(&mut child);
    assert!(!child.wait().expect("waits").success(), "the child aborted");
    let store = dir.open().expect("repaired and opened");
    assert_eq!(indices(&read_all(&store.log())), (1..=50).collect::<Vec<_>>());
    store.close().expect("closes");
}

/// A deferred append (a step's action results, `EmbeddedStore::append_deferred`) is read at
/// once and made durable by the next durable commit; a crash before loses it, and the identity
/// file never names what the crash lost (the store would then be refused as a stale copy).
#[test]
fn a_deferred_append_is_durable_only_once_a_durable_commit_follows() {
    let dir = TempDir::new("deferred");
    let store = dir.open().expect("opens");
    store.append_batch(&[heartbeat(1, "a")]).expect("appends");
    let deferred = store.append_deferred(&[heartbeat(2, "a"), heartbeat(3, "b")]).expect("appends");
    assert_eq!(deferred.iter().map(|i| i.get()).collect::<Vec<_>>(), [2, 3]);
    assert_eq!(indices(&read_all(&store.log())), [1, 2, 3], "read at once");
    store.close().expect("a close syncs");
    let store = dir.reopen().expect("reopens");
    assert_eq!(indices(&read_all(&store.log())), [1, 2, 3]);
    store.close().expect("closes");

    for (mode, kept) in [("deferred", 10), ("deferred-flushed", 15), ("deferred-synced", 15)] {
        let dir = TempDir::new(mode);
        let mut child = spawn_child(mode, &dir);
        wait_ready(&mut child);
        assert!(!child.wait().expect("waits").success(), "the child aborted");
        let store = dir.open().unwrap_or_else(|e| panic!("{mode}: the identity file is not ahead: {e}"));
        assert_eq!(indices(&read_all(&store.log())), (1..=kept).collect::<Vec<_>>(), "{mode}");
        assert_eq!(store.identity().highest_index, kept, "{mode}");
        store.close().expect("closes");
    }
}

/// Opens, expects a refusal, checks the files did not change, returns its message.
fn refused(dir: &TempDir) -> (StoreError, String) {
    let before = snapshot(&dir.0);
    let e = dir.open().expect_err("refused");
    let message = e.to_string();
    assert!(!message.contains('\n'), "one line: {message}");
    assert_eq!(snapshot(&dir.0), before, "the refusal changed nothing: {message}");
    (e, message)
}

#[test]
fn a_plain_copy_of_an_old_store_is_refused_as_behind() {
    let dir = TempDir::new("behind");
    let store = dir.open().expect("opens");
    store.append_batch(&[heartbeat(1, "a"), heartbeat(2, "a"), heartbeat(3, "a")]).expect("appends");
    store.close().expect("closes");
    let old = dir.0.join("old-copy");
    copy_dir(&dir.store(), &old);
    let store = dir.open().expect("opens");
    store.append_batch(&[heartbeat(4, "a"), heartbeat(5, "a"), heartbeat(6, "a")]).expect("appends");
    store.record_highest_token(42);
    store.close().expect("closes");
    std::fs::remove_dir_all(dir.store()).expect("remove");
    copy_dir(&old, &dir.store());
    let (e, message) = refused(&dir);
    assert!(
        matches!(
            e,
            StoreError::Behind { store_index: 3, identity_index: 6, store_token: 0, identity_token: 42, .. }
        ),
        "{e:?}"
    );
    assert!(message.contains("a plain copy of an old store"), "{message}");
    assert!(message.contains(": highest log index 3 < 6 and highest token 0 < 42 ("), "{message}");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create");
    for entry in std::fs::read_dir(from).expect("read dir").flatten() {
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy");
    }
}

#[test]
fn a_store_of_another_cluster_is_refused() {
    let first = TempDir::new("cluster-a");
    let second = TempDir::new("cluster-b");
    let a = first.open().expect("opens");
    let cluster_a = a.cluster_id().to_owned();
    a.close().expect("closes");
    let b = second.open().expect("opens");
    let cluster_b = b.cluster_id().to_owned();
    b.close().expect("closes");
    assert_ne!(cluster_a, cluster_b, "128 random bits");
    std::fs::copy(first.identity(), second.identity()).expect("copy the identity of A over B's");
    let (e, message) = refused(&second);
    assert!(matches!(e, StoreError::OtherCluster { .. }), "{e:?}");
    assert!(message.contains(&cluster_a) && message.contains(&cluster_b), "{message}");
}

/// A store with some records, closed.
fn written_store(name: &str) -> TempDir {
    let dir = TempDir::new(name);
    let store = dir.open().expect("opens");
    let events: Vec<Event> = (0..200).map(|i| heartbeat(i, "a")).collect();
    store.append_batch(&events).expect("appends");
    let mut a = store.journal("a");
    a.commit(&JournalChange::Append(entry(1, action("a", "10.0.0.1", 1, 1)))).expect("buffers");
    a.sync().expect("syncs");
    store.close().expect("closes");
    dir
}

#[test]
fn a_truncated_store_file_is_refused() {
    let dir = written_store("truncated");
    let file = dir.store().join(store::STORE_FILE_NAME);
    let bytes = std::fs::read(&file).expect("read");
    std::fs::write(&file, &bytes[..bytes.len() / 2]).expect("truncate");
    let (e, message) = refused(&dir);
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e:?}");
    assert!(message.contains("is not a readable store"), "{message}");
}

#[test]
fn garbage_in_the_store_file_is_refused() {
    let dir = written_store("garbage");
    let file = dir.store().join(store::STORE_FILE_NAME);
    let len = std::fs::metadata(&file).expect("stat").len();
    std::fs::write(&file, (0..len).map(|i| (i * 7 + 3) as u8).collect::<Vec<_>>()).expect("overwrite");
    let (e, message) = refused(&dir);
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e:?}");
    assert!(message.contains(&file.display().to_string()), "{message}");
}

#[test]
fn a_stored_record_that_does_not_decode_is_refused_naming_table_and_key() {
    let dir = written_store("record");
    {
        let db = redb::Database::open(dir.store().join(store::STORE_FILE_NAME)).expect("opens");
        let txn = db.begin_write().expect("txn");
        {
            let mut table = txn
                .open_table(redb::TableDefinition::<(&str, u64), &[u8]>::new("journal_entries"))
                .expect("table");
            table.insert(("a", 1), br#"{"v":1,"seq":1,"broken":true}"#.as_slice()).expect("insert");
        }
        txn.commit().expect("commit");
    }
    let (e, message) = refused(&dir);
    assert!(matches!(e, StoreError::RecordCorrupt { table: "journal_entries", .. }), "{e:?}");
    assert!(message.contains("key (a, 1)"), "{message}");
}

/// A journal row as a build before attempts were kept wrote it reads as never attempted, and the
/// attempts recorded after it survive a reopen.
#[test]
fn a_journal_row_written_before_attempts_were_kept_loads_and_keeps_the_attempts_made_since() {
    let dir = written_store("old-row");
    let action = action("a", "10.0.0.1", 1, 1);
    let action_json = String::from_utf8(codec::encode_stamped_action(&action).expect("encodes"))
        .expect("utf-8")
        .replacen(r#"{"v":1,"#, "{", 1);
    let old = format!(r#"{{"v":1,"seq":1,"action":{action_json},"state":"failed","detail":"no route"}}"#);
    {
        let db = redb::Database::open(dir.store().join(store::STORE_FILE_NAME)).expect("opens");
        let txn = db.begin_write().expect("txn");
        {
            let mut table = txn
                .open_table(redb::TableDefinition::<(&str, u64), &[u8]>::new("journal_entries"))
                .expect("table");
            table.insert(("a", 1), old.as_bytes()).expect("insert");
        }
        txn.commit().expect("commit");
    }
    let store = dir.open().expect("an old row does not stop the store");
    let mut a = store.journal("a");
    let loaded = a.load().expect("loads");
    let entry = &loaded.entries[&JournalSeq::new(1)];
    assert_eq!((entry.state, entry.detail.as_deref()), (EntryState::Failed, Some("no route")));
    assert_eq!(entry.attempts, Attempts::default(), "never attempted, as far as it says");

    // A retry: approved again, handed out, failed again.
    for change in [
        JournalChange::SetState {
            seq: JournalSeq::new(1),
            state: EntryState::Approved,
            detail: None,
            executed_seq: None,
        },
        JournalChange::Attempt { seq: JournalSeq::new(1), at_ms: 5_000, wall_ms: Some(1_700_000_000_000) },
        JournalChange::SetState {
            seq: JournalSeq::new(1),
            state: EntryState::Failed,
            detail: Some("no route, again".into()),
            executed_seq: None,
        },
    ] {
        a.commit(&change).expect("buffers");
    }
    a.sync().expect("syncs");
    store.close().expect("closes");
    let store = dir.reopen().expect("reopens");
    let loaded = store.journal("a").load().expect("loads");
    let attempts = &loaded.entries[&JournalSeq::new(1)].attempts;
    assert_eq!(
        (attempts.count, attempts.last_at_ms(), attempts.last_wall_ms(), attempts.last_error.as_deref()),
        (1, Some(5_000), Some(1_700_000_000_000), Some("no route, again")),
    );
    // An attempt of a finished entry contradicts the journal: the store refuses it.
    let mut a = store.journal("a");
    a.commit(&JournalChange::Attempt { seq: JournalSeq::new(1), at_ms: 6_000, wall_ms: None })
        .expect("buffers");
    assert!(matches!(a.sync(), Err(StoreError::Inconsistent { .. })), "only an open entry is called");
}

#[test]
fn a_store_of_an_unknown_format_version_is_refused() {
    let dir = written_store("version");
    {
        let db = redb::Database::open(dir.store().join(store::STORE_FILE_NAME)).expect("opens");
        let txn = db.begin_write().expect("txn");
        {
            let mut table = txn.open_table(redb::TableDefinition::<&str, &[u8]>::new("meta")).expect("table");
            table.insert("identity", br#"{"v":2,"teleport":true}"#.as_slice()).expect("insert");
        }
        txn.commit().expect("commit");
    }
    let (e, message) = refused(&dir);
    assert!(matches!(e, StoreError::UnknownFormat { version: 2, .. }), "{e:?}");
    assert!(message.contains("format version 2"), "{message}");
}

#[test]
fn an_identity_file_without_its_store_is_refused_as_wiped() {
    let dir = written_store("wiped");
    let cluster = read_identity(&dir).cluster_id;
    std::fs::remove_dir_all(dir.store()).expect("wipe");
    let (e, message) = refused(&dir);
    assert!(matches!(e, StoreError::Wiped { index: 200, .. }), "{e:?}");
    assert!(message.contains(&cluster) && message.contains("tenure store restore"), "{message}");
    assert!(!dir.store().exists(), "the refusal created nothing");
    // An empty store directory (the file gone) is the same refusal.
    std::fs::create_dir_all(dir.store()).expect("mkdir");
    assert!(matches!(refused(&dir).0, StoreError::Wiped { .. }));
}

#[test]
fn a_corrupt_identity_file_is_refused() {
    let dir = written_store("identity");
    std::fs::write(dir.identity(), b"{\"v\":1,\"clusterId\":").expect("corrupt");
    let (e, message) = refused(&dir);
    assert!(matches!(e, StoreError::IdentityUnreadable { .. }), "{e:?}");
    assert!(message.contains(&dir.identity().display().to_string()), "{message}");
}

#[test]
fn a_store_with_data_and_no_identity_file_is_refused_unless_accepted() {
    let dir = written_store("lost-identity");
    let recorded = read_identity(&dir);
    std::fs::remove_file(dir.identity()).expect("lose it");
    let (e, message) = refused(&dir);
    assert!(matches!(e, StoreError::NoIdentity { store_index: 200, .. }), "{e:?}");
    assert!(message.contains("--accept-store-without-identity"), "{message}");
    assert!(!dir.identity().exists(), "the refusal wrote nothing");
    // The operator's word: it opens, and the file is written again from the store.
    EmbeddedStore::open_with(&dir.store(), &dir.identity(), tenure::store::MissingIdentity::Accept)
        .expect("opens with a warning")
        .close()
        .expect("closes");
    assert_eq!(read_identity(&dir), recorded);
}

/// The store's folder renamed (`store` → `renamed`) with the config's identity file following
/// the folder's name: the refusal names the identity file of this store's cluster left beside
/// it with its figures, says one ahead of the store makes it a stale copy, and names no other
/// cluster's file; it writes nothing.
#[test]
fn a_refusal_for_a_missing_identity_names_this_clusters_files_beside_it() {
    let dir = written_store("renamed");
    let other = written_store("renamed-other");
    std::fs::copy(other.identity(), dir.0.join("other.identity")).expect("another cluster's file");
    std::fs::copy(dir.identity(), dir.0.join("store.identity")).expect("the folder's default name");
    let renamed = dir.0.join("renamed");
    std::fs::rename(dir.store(), &renamed).expect("rename the folder");
    let missing = dir.0.join("renamed.identity");
    let before = snapshot(&dir.0);
    let message = EmbeddedStore::open(&renamed, &missing).expect_err("refused").to_string();
    let left = dir.0.join("store.identity").display().to_string();
    let named = format!("does not exist ({left} beside it is this cluster's, at log index 200 and token ");
    assert!(message.contains(&named), "{message}");
    assert!(message.contains("if it is this store's newest identity file"), "{message}");
    assert!(!message.contains("other.identity"), "not another cluster's: {message}");
    assert_eq!(snapshot(&dir.0), before, "the refusal wrote nothing");
    // A file of this cluster ahead of the store: the store is a stale copy, and the hint says so.
    let text = std::fs::read_to_string(dir.0.join("store.identity")).expect("reads");
    let ahead = text.replace("\"highestIndex\":200", "\"highestIndex\":300");
    assert_ne!(ahead, text);
    std::fs::write(dir.0.join("store.identity"), ahead).expect("writes");
    let message = EmbeddedStore::open(&renamed, &missing).expect_err("refused").to_string();
    assert!(
        message.contains("at log index 300") && message.contains("which is then a stale copy"),
        "{message}"
    );
    assert!(!message.contains("if it is this store's newest"), "{message}");
}

/// An entry changed over several commits (appended; handed out and attempted; failed; retried;
/// executed) reloads as the journal in memory holds it; so does one changed after other rows
/// were written in other commits, and one compacted.
#[test]
fn an_entry_changed_over_many_commits_reloads_as_memory_holds_it() {
    let dir = TempDir::new("recent");
    let store = dir.open().expect("opens");
    let mut a = store.journal("a");
    let mut memory = tenure_core::journal::DurableNodeState::default();
    let mut commit = |change: JournalChange, sync: bool| {
        a.commit(&change).expect("buffers");
        memory.apply(&change);
        if sync {
            a.sync().expect("syncs");
        }
    };
    let seq = JournalSeq::new;
    let set =
        |n: u64, state: EntryState, detail: Option<&str>, executed: Option<u64>| JournalChange::SetState {
            seq: seq(n),
            state,
            detail: detail.map(tenure_core::names::shared),
            executed_seq: executed,
        };
    let attempt = |n: u64, at_ms: u64| JournalChange::Attempt {
        seq: seq(n),
        at_ms,
        wall_ms: Some(1_700_000_000_000 + at_ms),
    };
    commit(JournalChange::Append(entry(1, action("a", "10.0.0.1", 1, 1))), true);
    commit(JournalChange::Append(entry(2, action("a", "10.0.0.2", 1, 1))), true);
    commit(set(1, EntryState::Approved, Some("call started"), None), false);
    commit(attempt(1, 10), true);
    commit(set(1, EntryState::Failed, Some("throttled"), None), true);
    commit(set(1, EntryState::Approved, None, None), true);
    commit(attempt(1, 20), true);
    commit(set(1, EntryState::Executed, Some("ok"), Some(1)), true);
    // Entry 2 changed after other rows were written in other commits.
    for n in 3..3 + 64 {
        commit(JournalChange::Append(entry(n, action("a", "10.0.1.1", 1, 1))), n % 16 == 0 || n == 66);
    }
    commit(attempt(2, 30), true);
    commit(set(2, EntryState::Executed, Some("ok too"), Some(2)), true);
    commit(set(3, EntryState::Skipped(tenure_core::fence::StaleReason::StaleEpoch), None, None), true);
    commit(JournalChange::Compact { seqs: vec![seq(3)] }, true);
    drop(a);
    store.close().expect("closes");
    let reopened = dir.reopen().expect("reopens");
    let loaded = reopened.journal("a").load().expect("loads");
    assert_eq!(loaded.entries.len(), memory.entries.len());
    for (n, entry) in memory.entries.iter() {
        assert_eq!(loaded.entries.get(n), Some(entry), "entry {n}");
    }
    assert_eq!((loaded.last_seq, loaded.executions), (memory.last_seq, memory.executions));
}
