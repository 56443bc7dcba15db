//! The etcd fleet store against raw etcd-client calls, on a real 3-member cluster on loopback
//! (`scripts/etcd-cluster`), in the same run. `scripts/bench` runs it and writes its rows to
//! `docs/benchmarks.md`.
//!
//! - `fleet/raw_put_baseline`: one `put` of a value the size of a one-heartbeat batch through
//!   etcd-client (the least a durable append can cost: one raft round and fsync).
//! - `fleet/append`: `EtcdStore::append_batch` of one heartbeat: the local journal sync, the
//!   create-if-absent transaction with the head key, and the wait until the watch delivered it.
//! - `fleet/head_confirm`: `confirm_head` with nothing new: the linearizable head read and the
//!   replica's check (the read the gate makes before each batch of calls).
//!
//! The head confirmation's p50 and p99 over 1,000 reads are printed as a line
//! `tenure-bench fleet-head: p50_us=N p99_us=N`.

#[path = "../../tenure-lead/tests/support/etcd_cluster.rs"]
mod etcd_cluster;

use std::time::{Duration, Instant};

use criterion::Criterion;
use tenure::agent::AgentStore;
use tenure::store::fleet::{EtcdOptions, EtcdStore, fleet_text};
use tenure_core::codec;
use tenure_core::log::{Event, EventKind};
use tenure_core::model::{NodeSpec, ProviderKind, ProviderSpec};

/// Samples per benchmark.
const SAMPLES_COUNT: usize = 30;
/// Measurement per benchmark.
const MEASUREMENT_TIME: Duration = Duration::from_secs(5);

fn main() {
    let cluster = etcd_cluster::Cluster::start("bench-fleet", 26800);
    let dir = std::env::temp_dir().join(format!("tenure-bench-fleet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let node = NodeSpec {
        name: "a".into(),
        provider: "p".into(),
        placement_group: "g".into(),
        priority: 0,
        nic: "n".into(),
        capacity: None,
    };
    let options = EtcdOptions {
        endpoints: cluster.endpoints.clone(),
        prefix: "/bench".into(),
        request_timeout: Duration::from_secs(5),
        user: None,
        tls: None,
        snapshot_every: u64::MAX,
        fleet: fleet_text(&[node], &[ProviderSpec { name: "p".into(), kind: ProviderKind::Exec }]),
    };
    let store = EtcdStore::open(&dir.join("store"), &dir.join("store.identity"), &options).expect("store");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let mut client = runtime
        .block_on(etcd_client::Client::connect(&cluster.endpoints, None))
        .expect("etcd-client connects");
    let heartbeat = |at_ms| Event { at_ms, kind: EventKind::Heartbeat { node: "a".into() } };
    let value = codec::encode_event(&heartbeat(1_000)).expect("encodes");

    let mut criterion = Criterion::default()
        .sample_size(SAMPLES_COUNT)
        .measurement_time(MEASUREMENT_TIME)
        .configure_from_args();
    let mut group = criterion.benchmark_group("fleet");
    let mut n = 0_u64;
    group.bench_function("raw_put_baseline", |bench| {
        bench.iter(|| {
            n += 1;
            runtime.block_on(client.put(format!("/bench-raw/{n}"), value.clone(), None)).expect("put");
        });
    });
    let mut at_ms = 1_000;
    group.bench_function("append", |bench| {
        bench.iter(|| {
            at_ms += 1;
            store.append_batch(&[heartbeat(at_ms)]).expect("append");
        });
    });
    group.bench_function("head_confirm", |bench| {
        bench.iter(|| store.confirm_head(Duration::from_secs(1)).expect("head"));
    });
    group.finish();
    let mut reads: Vec<Duration> = (0..1_000)
        .map(|_| {
            let started = Instant::now();
            store.confirm_head(Duration::from_secs(1)).expect("head");
            started.elapsed()
        })
        .collect();
    reads.sort_unstable();
    println!(
        "tenure-bench fleet-head: p50_us={} p99_us={}",
        reads[reads.len() / 2].as_micros(),
        reads[reads.len() * 99 / 100].as_micros()
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
