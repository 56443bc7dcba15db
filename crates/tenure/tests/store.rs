//! The durable embedded store (`tenure::store`): the log and journals through the core's
//! interfaces, group commit, the refusals (each with its own message, files unchanged after
//! each), backup beside a writer, and restore's raise.
//!
//! A second process is this test binary run again with `TENURE_STORE_TEST_CHILD` set (see
//! [`child_process`]).

use std::collections::BTreeMap;
use std::io::{BufRead as _, Write as _};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tenure::store::{self, EmbeddedStore, StoreError, StoreIdentity};
use tenure_core::codec;
use tenure_core::federation::Federation;
use tenure_core::fence::{self, FenceVerdict, StaleReason};
use tenure_core::journal::{EntryState, JournalChange, JournalEntry, JournalStore};
use tenure_core::log::{ActionOutcome, Event, EventKind};
use tenure_core::log_store::{Log, LogIndex, LogRecord};
use tenure_core::model::{
    Approval, Authority, CaptureDomain, CaptureEpoch, NodeSpec, OwnershipEpoch, PoolSpec, ProviderKind,
    ProviderSpec, StampedAction, Verb,
};
use tenure_core::node::NodeEngine;

/// A directory under the system temp dir, unique to this test, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("tenure-store-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self(path)
    }

    fn store(&self) -> PathBuf {
        self.0.join("store")
    }

    fn identity(&self) -> PathBuf {
        self.0.join("identity.json")
    }

    fn open(&self) -> Result<EmbeddedStore, StoreError> {
        EmbeddedStore::open(&self.store(), &self.identity())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn heartbeat(at_ms: u64, node: &str) -> Event {
    Event { at_ms, kind: EventKind::Heartbeat { node: node.to_owned() } }
}

fn ip(text: &str) -> IpAddr {
    text.parse().expect("address")
}

fn read_all(log: &impl Log) -> Vec<LogRecord> {
    let mut all = Vec::new();
    let mut next = LogIndex::FIRST;
    loop {
        let records = log.read_from(next, 7).expect("readable");
        let Some(last) = records.last() else { return all };
        next = last.index.next();
        all.extend(records);
    }
}

fn indices(records: &[LogRecord]) -> Vec<u64> {
    records.iter().map(|r| r.index.get()).collect()
}

/// Every file under `dir` with its bytes (to show that a refusal changed nothing).
fn snapshot(dir: &Path) -> Snapshot {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(next) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&next) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.insert(path.clone(), std::fs::read(&path).expect("read"));
            }
        }
    }
    Snapshot(files)
}

/// Files and their bytes; compared by content, shown by name and length.
#[derive(PartialEq, Eq)]
struct Snapshot(BTreeMap<PathBuf, Vec<u8>>);

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut list = f.debug_map();
        for (path, bytes) in &self.0 {
            let sum = bytes.iter().fold(0u64, |acc, b| acc.wrapping_mul(31).wrapping_add(u64::from(*b)));
            list.entry(path, &format!("{} bytes, sum {sum:x}", bytes.len()));
        }
        list.finish()
    }
}

fn action(node: &str, address: &str, capture: u64, ownership: u64) -> StampedAction {
    StampedAction::new(
        "p",
        ip(address),
        Verb::AssignSecondaryIp,
        node,
        "sim1",
        &format!("eni-{node}"),
        CaptureDomain::new("sim1", "g1"),
        CaptureEpoch::from_stored(capture),
        OwnershipEpoch::from_stored(ownership),
    )
}

fn entry(seq: u64, action: StampedAction) -> JournalEntry {
    JournalEntry { seq, action, state: EntryState::Approved, detail: None, executed_seq: None }
}

fn raise(address: &str, capture: u64, ownership: u64) -> JournalChange {
    JournalChange::RaiseHighWater {
        pool: "p".into(),
        address: ip(address),
        capture_domain: CaptureDomain::new("sim1", "g1"),
        capture_epoch: CaptureEpoch::from_stored(capture),
        ownership_epoch: OwnershipEpoch::from_stored(ownership),
    }
}

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

    let reopened = dir.open().expect("reopens");
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
        seq: 1,
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

    let store = dir.open().expect("reopens after the crash");
    let a = store.journal("a").load().expect("loads");
    let b = store.journal("b").load().expect("loads");
    assert_eq!(a.entries.keys().copied().collect::<Vec<_>>(), [1]);
    assert_eq!(a.entries[&1].state, EntryState::Executed);
    assert_eq!(a.entries[&1].detail.as_deref(), Some("ok"));
    assert_eq!((a.last_seq, a.executions), (1, 1));
    assert_eq!(b.entries.keys().copied().collect::<Vec<_>>(), [1, 2], "b's second entry came with a's sync");
    assert_eq!((b.last_seq, b.executions), (2, 0));
    let marks = |state: &tenure_core::journal::DurableNodeState| {
        String::from_utf8(codec::encode_high_water(&state.high_water).expect("encodes")).expect("utf-8")
    };
    assert!(marks(&a).contains(r#""address":"10.0.0.1","captureDomain":"provider:sim1:placement:g1","captureEpoch":3,"ownershipEpoch":2"#), "{}", marks(&a));
    assert!(!marks(&b).contains("10.0.0.3"), "the unsynced raise is lost: {}", marks(&b));
    assert_eq!(store.log().head().expect("head").map(LogIndex::get), Some(1));
    assert!(store.identity().highest_token >= 6, "tokens in synced journal changes count");
    store.close().expect("closes");
}

#[test]
fn a_journal_change_that_contradicts_the_store_fails_the_store() {
    let dir = TempDir::new("inconsistent");
    let store = dir.open().expect("opens");
    let mut a = store.journal("a");
    a.commit(&JournalChange::SetState {
        seq: 7,
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

fn pool_spec(addresses: &[&str]) -> PoolSpec {
    PoolSpec {
        name: "p".into(),
        addresses: addresses.iter().map(|a| ip(a)).collect(),
        provider: "sim1".into(),
        placement_group: "g1".into(),
        members: vec!["a".into(), "b".into()],
        authority: Authority::None,
        approval: Approval::Auto,
        deprovision_hold_ms: 0,
        heartbeat_ttl_ms: 3_000,
        promotion_hold_ms: 1_000,
        epoch_locking: true,
        prefer_nodes: vec![],
        preempt: false,
        auto_failover: true,
    }
}

fn registry() -> Federation {
    Federation::new(
        &[node("a", 10), node("b", 0)],
        &[ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }],
    )
}

/// Appends `events` to the store and applies them to `fed`.
fn append_and_apply(store: &EmbeddedStore, fed: &mut Federation, events: &[Event]) {
    store.append_batch(events).expect("appends");
    for event in events {
        fed.apply(event).expect("accepted");
    }
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
        .handle_execution_result(&first.idempotency_key, ActionOutcome::Executed, Some("done".into()))
        .expect("reports");
    engine.store_mut().sync().expect("syncs");
    let before = engine.durable().clone();
    assert!(before.entries.len() >= 2 && before.executions == 1, "{before:?}");
    drop(engine);
    store.close().expect("closes");

    let store = dir.open().expect("reopens");
    let engine = NodeEngine::open("a", store.journal("a")).expect("opens");
    let after = engine.durable();
    assert_eq!(after.entries, before.entries);
    assert_eq!((after.last_seq, after.executions), (before.last_seq, before.executions));
    assert_eq!(
        codec::encode_high_water(&after.high_water).expect("encodes"),
        codec::encode_high_water(&before.high_water).expect("encodes"),
        "the marks read back are the ones written"
    );
    assert_eq!(engine.entry(&first.idempotency_key).map(|e| e.state), Some(EntryState::Executed));
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
    dir.open().expect("the lock was released").close().expect("closes");
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
        stderr.contains(&format!("is held by pid {pid}")) && stderr.contains("through its API"),
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
    let cluster = StoreIdentity::clone(&read_identity(&dir)).cluster_id;
    std::fs::remove_dir_all(dir.store()).expect("wipe");
    let (e, message) = refused(&dir);
    assert!(matches!(e, StoreError::Wiped { index: 200, .. }), "{e:?}");
    assert!(message.contains(&cluster) && message.contains("tenure store restore"), "{message}");
    assert!(!dir.store().exists(), "the refusal created nothing");
    // An empty store directory (the file gone) is the same refusal.
    std::fs::create_dir_all(dir.store()).expect("mkdir");
    assert!(matches!(refused(&dir).0, StoreError::Wiped { .. }));
}

fn read_identity(dir: &TempDir) -> StoreIdentity {
    serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(dir.identity()).expect("read"))
        .ok()
        .map(|v| StoreIdentity {
            cluster_id: v["clusterId"].as_str().expect("clusterId").to_owned(),
            highest_index: v["highestIndex"].as_u64().expect("highestIndex"),
            highest_token: v["highestToken"].as_u64().expect("highestToken"),
            restores: serde_json::from_value(v["restores"].clone()).expect("restores"),
        })
        .expect("JSON")
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
fn a_lost_identity_file_is_written_again_from_the_store() {
    let dir = written_store("lost-identity");
    let recorded = read_identity(&dir);
    std::fs::remove_file(dir.identity()).expect("lose it");
    dir.open().expect("opens with a warning").close().expect("closes");
    assert_eq!(read_identity(&dir), recorded);
}

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
    let summary = store::restore(&backup, &dir.store(), &dir.identity(), 1_000).expect("restores");
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
