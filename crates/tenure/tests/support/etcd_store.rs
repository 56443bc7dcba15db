//! One fleet store on a test etcd cluster, as the fleet store's own tests open it: node `a` on
//! an exec-hook provider, the store's directory fresh under the system's temporary directory.

use std::path::PathBuf;
use std::time::Duration;

use tenure::store::fleet::{EtcdOptions, fleet_text};
use tenure_core::model::{NodeSpec, ProviderKind, ProviderSpec};

/// A fresh directory for the stores of the test named `tag` (removed first if a run left it).
pub fn fresh_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tenure-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The options of a store of node `a` (provider `hook`, kind `exec`) under `prefix` of
/// `endpoints`, writing a snapshot every `snapshot_every` events.
pub fn one_node_options(endpoints: &[String], prefix: &str, snapshot_every: u64) -> EtcdOptions {
    let node = NodeSpec {
        name: "a".into(),
        provider: "hook".into(),
        placement_group: "g1".into(),
        priority: 0,
        nic: "eni-a".into(),
        capacity: None,
    };
    EtcdOptions {
        endpoints: endpoints.to_vec(),
        prefix: prefix.into(),
        request_timeout: Duration::from_secs(10),
        user: None,
        tls: None,
        snapshot_every,
        fleet: fleet_text(&[node], &[ProviderSpec { name: "hook".into(), kind: ProviderKind::Exec }]),
        nodes: Vec::new(),
    }
}

/// Every record `store`'s replica holds, in log order.
pub fn replica_records(store: &tenure::store::fleet::EtcdStore) -> Vec<tenure_core::log_store::LogRecord> {
    use tenure::agent::AgentStore as _;
    use tenure_core::log_store::{LOG_READ_BATCH_MAX, Log as _, LogIndex};
    let log = store.log();
    let mut all = Vec::new();
    let mut from = LogIndex::FIRST;
    loop {
        let page = log.read_from(from, LOG_READ_BATCH_MAX).expect("the replica reads");
        let Some(last) = page.last() else { return all };
        from = last.index.next();
        all.extend(page);
    }
}

/// The runtime a test's fleet stores are opened on and awaited with: their etcd requests and
/// watches are its tasks, driven by its workers while the test thread waits or sleeps.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}
