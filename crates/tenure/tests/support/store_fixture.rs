//! Fixtures shared by the embedded store's tests (`store.rs`, `store_backup.rs`): temporary
//! directories, events, journal changes, a two-node registry, and a snapshot of files to show
//! that a refusal changed nothing.

// Each test binary uses a part of this module.
#![allow(dead_code)]

#[path = "wait.rs"]
mod wait;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use tenure::store::{EmbeddedStore, StoreError, StoreIdentity};
use tenure_core::federation::Federation;
use tenure_core::journal::{EntryState, JournalChange, JournalEntry};
use tenure_core::log::Event;
use tenure_core::log::EventKind;
use tenure_core::log_store::{Log, LogIndex, LogRecord};
use tenure_core::model::{
    Approval, Authority, CaptureDomain, CaptureEpoch, NodeSpec, OwnershipEpoch, PoolSpec, ProviderKind,
    ProviderSpec, StampedAction, Verb,
};

/// A directory under the system temp dir, unique to this test, removed at the end.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("tenure-store-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self(path)
    }

    pub fn store(&self) -> PathBuf {
        self.0.join("store")
    }

    pub fn identity(&self) -> PathBuf {
        self.0.join("identity.json")
    }

    pub fn open(&self) -> Result<EmbeddedStore, StoreError> {
        EmbeddedStore::open(&self.store(), &self.identity())
    }

    /// Opens the store again after this process dropped it. The lock is an `flock`, held by an
    /// open file description: a child process another test of this binary forks in the meantime
    /// holds a copy of the descriptor until it execs (`O_CLOEXEC` acts at the exec), so the
    /// dropped store's lock can read as held by this very process for that moment. Waits,
    /// bounded ([`wait::wait_for`]), while it does; any other refusal is returned at once.
    pub fn reopen(&self) -> Result<EmbeddedStore, StoreError> {
        let mine = format!("pid {} ", std::process::id());
        let mut opened = None;
        wait::wait_for("the dropped store's lock to be free (a forked child's copy closed)", || {
            match self.open() {
                Err(StoreError::Locked { holder, .. }) if holder.starts_with(&mine) => false,
                other => {
                    opened = Some(other);
                    true
                }
            }
        });
        opened.expect("the wait ended with an answer")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn heartbeat(at_ms: u64, node: &str) -> Event {
    Event { at_ms, kind: EventKind::Heartbeat { node: node.to_owned() } }
}

pub fn ip(text: &str) -> IpAddr {
    text.parse().expect("address")
}

pub fn read_all(log: &impl Log) -> Vec<LogRecord> {
    let mut all = Vec::new();
    let mut next = LogIndex::FIRST;
    loop {
        let records = log.read_from(next, 7).expect("readable");
        let Some(last) = records.last() else { return all };
        next = last.index.next();
        all.extend(records);
    }
}

pub fn indices(records: &[LogRecord]) -> Vec<u64> {
    records.iter().map(|r| r.index.get()).collect()
}

/// Every file under `dir` with its bytes (to show that a refusal changed nothing).
pub fn snapshot(dir: &Path) -> Snapshot {
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
pub struct Snapshot(BTreeMap<PathBuf, Vec<u8>>);

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

pub fn action(node: &str, address: &str, capture: u64, ownership: u64) -> StampedAction {
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

pub fn entry(seq: u64, action: StampedAction) -> JournalEntry {
    JournalEntry {
        seq: tenure_core::journal::JournalSeq::new(seq),
        action,
        state: EntryState::Approved,
        detail: None,
        executed_seq: None,
        attempts: Default::default(),
    }
}

pub fn raise(address: &str, capture: u64, ownership: u64) -> JournalChange {
    JournalChange::RaiseHighWater {
        pool: "p".into(),
        address: ip(address),
        capture_domain: CaptureDomain::new("sim1", "g1"),
        capture_epoch: CaptureEpoch::from_stored(capture),
        ownership_epoch: OwnershipEpoch::from_stored(ownership),
    }
}

pub fn node(name: &str, priority: i64) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        provider: "sim1".into(),
        placement_group: "g1".into(),
        priority,
        nic: format!("eni-{name}"),
        capacity: None,
    }
}

pub fn pool_spec(addresses: &[&str]) -> PoolSpec {
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

pub fn registry() -> Federation {
    Federation::new(
        &[node("a", 10), node("b", 0)],
        &[ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }],
    )
}

/// Appends `events` to the store and applies them to `fed`.
pub fn append_and_apply(store: &EmbeddedStore, fed: &mut Federation, events: &[Event]) {
    store.append_batch(events).expect("appends");
    for event in events {
        fed.apply(event).expect("accepted");
    }
}

pub fn read_identity(dir: &TempDir) -> StoreIdentity {
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
