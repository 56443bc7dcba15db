//! The fleet store's appends on a real 3-member etcd cluster (`scripts/etcd-cluster`): a batch
//! of the loop that is appended again after its answer was lost lands once, also when a snapshot
//! deleted its key before the retry and appends that are not retried landed in between:
//! heartbeats (they go on while the loop holds a failed batch) and an operator's request (one
//! whose answer was lost may land late). A cluster that cannot start fails the test, it never
//! skips.

#[path = "../../tenure-lead/tests/support/etcd_cluster.rs"]
mod etcd_cluster;
#[path = "support/etcd_store.rs"]
mod etcd_store;
#[path = "support/wait.rs"]
mod wait;

use etcd_cluster::Cluster;
use tenure::agent::AgentStore;
use tenure::store::fleet::EtcdStore;
use tenure_core::log::{Event, EventKind};
use tenure_core::log_store::Log;
use wait::wait_for;

const PREFIX: &str = "/fleet-append";

/// Every event `store`'s replica holds, in log order.
fn events(store: &EtcdStore) -> Vec<Event> {
    etcd_store::replica_records(store).into_iter().map(|record| record.event).collect()
}

/// The keys under `prefix` in etcd, with their values.
fn etcd_keys(runtime: &tokio::runtime::Runtime, endpoints: &[String], prefix: &str) -> Vec<(String, String)> {
    runtime.block_on(async {
        let mut client = etcd_client::Client::connect(endpoints, None).await.expect("etcd-client connects");
        let options = etcd_client::GetOptions::new().with_prefix();
        let response = client.get(prefix, Some(options)).await.expect("get");
        response
            .kvs()
            .iter()
            .map(|kv| {
                (
                    String::from_utf8_lossy(kv.key()).into_owned(),
                    String::from_utf8_lossy(kv.value()).into_owned(),
                )
            })
            .collect()
    })
}

fn heartbeat(at_ms: u64) -> Vec<Event> {
    vec![Event { at_ms, kind: EventKind::Heartbeat { node: "a".into() } }]
}

#[test]
fn a_retried_batch_lands_once_though_a_snapshot_deleted_its_key_and_unretried_appends_landed() {
    let cluster = Cluster::start("fleet-append", 30400);
    let dir = etcd_store::fresh_dir("fleet-append");
    let options = etcd_store::one_node_options(&cluster.endpoints, PREFIX, 1);
    let runtime = etcd_store::runtime();
    let store = runtime
        .block_on(EtcdStore::open(&dir.join("a"), &dir.join("a.identity"), &options))
        .expect("the store opens");

    // A batch of the loop, appended; say its answer was lost: the agent keeps it and appends it
    // again, unchanged (the same call with the same events, so the same key).
    let batch = vec![
        Event { at_ms: 1_000, kind: EventKind::Health { node: "a".into(), healthy: false } },
        Event { at_ms: 1_000, kind: EventKind::Health { node: "a".into(), healthy: true } },
    ];
    let first = runtime.block_on(store.append_batch(&batch)).expect("the batch is appended");
    let batch_key = etcd_keys(&runtime, &cluster.endpoints, &format!("{PREFIX}/log/"))
        .into_iter()
        .map(|(key, _)| key)
        .next()
        .expect("the batch's key");
    // Meanwhile the heartbeat thread goes on appending.
    for at_ms in 2_000..2_003 {
        runtime.block_on(store.append_heartbeats(&heartbeat(at_ms))).expect("a heartbeat is appended");
    }
    // And an operator's request (a drain), appended after the batch: say it was sent before the
    // batch, its answer lost, and it landed late.
    runtime
        .block_on(
            store.append_unretried(&[Event { at_ms: 2_500, kind: EventKind::Drain { node: "a".into() } }]),
        )
        .expect("the request is appended");
    let appended =
        runtime.block_on(store.append_heartbeats(&heartbeat(2_600))).expect("a heartbeat is appended");
    let newest = *appended.last().expect("one index");
    wait_for("the replica applied the heartbeats", || store.log().head().ok().flatten() >= Some(newest));
    // A snapshot up to the last heartbeat deletes every batch, the loop's too.
    store.write_snapshot(newest, 7, b"not read in this test".to_vec()).expect("a snapshot is written");
    wait_for("the snapshot deleted the log's batches", || {
        etcd_keys(&runtime, &cluster.endpoints, &format!("{PREFIX}/log/")).is_empty()
    });
    let writers = etcd_keys(&runtime, &cluster.endpoints, &format!("{PREFIX}/writers/"));

    let again = runtime.block_on(store.append_batch(&batch)).expect("the retry answers");
    assert_eq!(
        again, first,
        "the retry answers the first try's indices (writer keys {writers:?}, the batch's key {batch_key})"
    );
    let after =
        runtime.block_on(store.append_heartbeats(&heartbeat(3_000))).expect("a heartbeat is appended");
    let after = *after.last().expect("one index");
    wait_for("the replica applied the last heartbeat", || store.log().head().ok().flatten() >= Some(after));
    let health = events(&store).into_iter().filter(|e| matches!(e.kind, EventKind::Health { .. })).count();
    assert_eq!(health, batch.len(), "the batch is in the log once");
    let log = etcd_keys(&runtime, &cluster.endpoints, &format!("{PREFIX}/log/"));
    assert!(!log.iter().any(|(key, _)| *key == batch_key), "the batch's key is not put again: {log:?}");
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The lease of `key` in etcd (0: absent).
fn lease_of(runtime: &tokio::runtime::Runtime, endpoints: &[String], key: &str) -> i64 {
    runtime.block_on(async {
        let mut client = etcd_client::Client::connect(endpoints, None).await.expect("etcd-client connects");
        client.get(key, None).await.expect("get").kvs().first().map_or(0, etcd_client::KeyValue::lease)
    })
}

/// A node's claim is a fence: once the claim is not under the agent's lease (the lease lapsed
/// while etcd was away, stood for here by a revoke), etcd refuses the agent's appends and head
/// confirmations at once — not at the keeper's next look — until the keeper makes the claim again;
/// then they land. A claim another agent made meanwhile refuses the store's log for good. A clean
/// stop lets the claim made again go (its current lease, not the first).
#[test]
fn an_appends_and_head_confirmations_are_fenced_by_the_node_s_claim() {
    let cluster = Cluster::start("fleet-claim-fence", 30500);
    let prefix = "/fleet-fence";
    let claim_key = format!("{prefix}/nodes/a");
    let dir = etcd_store::fresh_dir("fleet-claim-fence");
    let mut options = etcd_store::one_node_options(&cluster.endpoints, prefix, 1_000);
    options.nodes = vec!["a".into()];
    let runtime = etcd_store::runtime();
    let store = runtime
        .block_on(EtcdStore::open(&dir.join("a"), &dir.join("a.identity"), &options))
        .expect("the store opens");
    runtime.block_on(store.append_heartbeats(&heartbeat(1_000))).expect("a heartbeat is appended");
    runtime.block_on(store.confirm_head(std::time::Duration::from_secs(5))).expect("the head is confirmed");
    let first = lease_of(&runtime, &cluster.endpoints, &claim_key);
    assert_ne!(first, 0, "node a is claimed under a lease");

    // The lease revoked, a heartbeat and a head confirmation are refused at once. (Should the
    // keeper's renewal fall between the revoke and them, the claim is made again that quickly:
    // then revoked again, at most three times.)
    let mut revoked = first;
    let refused = (0..3).any(|_| {
        runtime.block_on(async {
            let mut client = etcd_client::Client::connect(&cluster.endpoints, None).await.expect("connects");
            client.lease_revoke(revoked).await.expect("the claim's lease is revoked");
        });
        let heartbeat = runtime.block_on(store.append_heartbeats(&heartbeat(2_000)));
        let confirmed = runtime.block_on(store.confirm_head(std::time::Duration::from_secs(5)));
        if heartbeat.is_err() && confirmed.is_err() {
            return true;
        }
        let now = lease_of(&runtime, &cluster.endpoints, &claim_key);
        assert!(
            now != 0 && now != revoked,
            "appended or confirmed without the claim: {heartbeat:?} {confirmed:?}"
        );
        revoked = now;
        false
    });
    assert!(refused, "the keeper made the claim again before each of three tries");
    wait_for("the claim made again", || {
        let now = lease_of(&runtime, &cluster.endpoints, &claim_key);
        now != 0 && now != revoked
    });
    wait_for("a heartbeat lands again", || {
        runtime.block_on(store.append_heartbeats(&heartbeat(3_000))).is_ok()
    });
    runtime.block_on(store.confirm_head(std::time::Duration::from_secs(5))).expect("confirmed again");
    runtime.block_on(store.close()).expect("the store closes");
    assert_eq!(
        lease_of(&runtime, &cluster.endpoints, &claim_key),
        0,
        "a clean stop lets the claim made again go"
    );

    // Another agent's claim where a's was: refused at once, then the log for good.
    let store = runtime
        .block_on(EtcdStore::open(&dir.join("a"), &dir.join("a.identity"), &options))
        .expect("the store opens again");
    let theirs = r#"{"v":2,"store":"other","path":"/elsewhere","host":"h2","boot":"b2","pid":7}"#;
    runtime.block_on(async {
        let mut client = etcd_client::Client::connect(&cluster.endpoints, None).await.expect("connects");
        client.put(claim_key.as_str(), theirs, None).await.expect("put");
    });
    let refused = runtime.block_on(store.append_heartbeats(&heartbeat(4_000)));
    assert!(refused.is_err(), "a heartbeat is appended under another agent's claim: {refused:?}");
    wait_for("the store refuses its log", || store.refused().is_some());
    let reason = store.refused().expect("refused");
    assert!(reason.contains("node `a` is run by another agent (/elsewhere on host h2, pid 7"), "{reason}");
    runtime.block_on(store.close()).expect("the store closes");
    let _ = std::fs::remove_dir_all(&dir);
}
