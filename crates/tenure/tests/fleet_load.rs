//! The fleet store's initial load on a real 3-member etcd cluster (`scripts/etcd-cluster`,
//! Debian's etcd-server): the load lists the log by key, and keys sort by writer, not by
//! revision; the batches must still come out in log (revision) order, as the watch delivers
//! them. A cluster that cannot start fails the test, it never skips.

#[path = "../../tenure-lead/tests/support/etcd_cluster.rs"]
mod etcd_cluster;
#[path = "support/etcd_store.rs"]
mod etcd_store;

use std::time::{Duration, Instant};

use etcd_cluster::Cluster;
use tenure::store::fleet::{EtcdStore, batch};
use tenure_core::codec;
use tenure_core::log::{Event, EventKind};

const PREFIX: &str = "/fleet-load";
/// Batches written one after the other, under keys that sort opposite to their order.
const SEQUENTIAL: usize = 300;
/// Batches written 64 at a time under hashed keys: with the others, more than one page of the
/// load's key listing (8,192 keys).
const CONCURRENT: usize = 9_000;

/// Every record `store`'s replica holds, in its order: (index, the heartbeat's `at_ms`).
fn records(store: &EtcdStore) -> Vec<(u64, u64)> {
    etcd_store::replica_records(store).iter().map(|record| (record.index.get(), record.event.at_ms)).collect()
}

fn heartbeat(at_ms: u64) -> Vec<u8> {
    let event = Event { at_ms, kind: EventKind::Heartbeat { node: "a".into() } };
    batch::encode(&[codec::encode_event(&event).expect("encodes")])
}

/// Puts every batch, then the head key naming the last one.
async fn write_log(endpoints: &[String]) {
    let client = etcd_client::Client::connect(endpoints, None).await.expect("etcd-client connects");
    let mut kv = client.kv_client();
    // Written in order, each its own revision; keys descending.
    for i in 0..SEQUENTIAL {
        let key = format!("{PREFIX}/log/seq-{:04}", SEQUENTIAL - i);
        kv.put(key, heartbeat(i as u64), None).await.expect("put");
    }
    let mut pending = tokio::task::JoinSet::new();
    for i in 0..CONCURRENT {
        if pending.len() >= 64 {
            pending.join_next().await.expect("a put").expect("joins");
        }
        let mut kv = client.kv_client();
        let key = format!("{PREFIX}/log/{:016x}", xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes()));
        let value = heartbeat(1_000_000 + i as u64);
        pending.spawn(async move { kv.put(key, value, None).await.expect("put") });
    }
    while let Some(put) = pending.join_next().await {
        put.expect("joins");
    }
    let last = format!("{PREFIX}/log/last");
    kv.put(last.clone(), heartbeat(9_000_000), None).await.expect("put");
    kv.put(format!("{PREFIX}/head"), last, None).await.expect("head");
}

#[test]
fn the_load_gives_the_batches_in_log_order_whatever_order_their_keys_sort_in() {
    let cluster = Cluster::start("fleet-load", 30100);
    let dir = etcd_store::fresh_dir("fleet-load");
    let options = etcd_store::one_node_options(&cluster.endpoints, PREFIX, 1_000_000);
    let runtime = etcd_store::runtime();
    let open = |name: &str| {
        runtime
            .block_on(EtcdStore::open(&dir.join(name), &dir.join(format!("{name}.identity")), &options))
            .unwrap_or_else(|e| panic!("store {name} opens: {e}"))
    };
    // Follows the log by its watch, which delivers in revision order: the oracle.
    let watching = open("watching");
    runtime.block_on(write_log(&cluster.endpoints));
    let total = SEQUENTIAL + CONCURRENT + 1;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut watched = records(&watching);
    while watched.len() < total {
        assert!(Instant::now() < deadline, "the watch delivered {} of {total} batches", watched.len());
        std::thread::sleep(Duration::from_millis(50));
        watched = records(&watching);
    }

    let loading = open("loading");
    let loaded = records(&loading);
    assert_eq!(loaded.len(), total, "every batch loaded");
    let sequential: Vec<u64> =
        loaded.iter().map(|(_, at_ms)| *at_ms).filter(|at_ms| *at_ms < SEQUENTIAL as u64).collect();
    assert_eq!(
        sequential,
        (0..SEQUENTIAL as u64).collect::<Vec<_>>(),
        "batches written one after the other load in the order written, not in their keys' order"
    );
    assert!(loaded == watched, "the load's order is the watch's (log) order");
    assert_eq!(loaded.last().map(|(_, at_ms)| *at_ms), Some(9_000_000));
    drop((watching, loading));
    let _ = std::fs::remove_dir_all(&dir);
}
