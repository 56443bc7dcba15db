//! The etcd fleet store against raw etcd-client calls, on a real 3-member cluster on loopback
//! (`scripts/etcd-cluster`), in the same run. `scripts/bench` runs it and writes its rows to
//! `docs/benchmarks.md`.
//!
//! - `fleet/raw_put_baseline`: one `put` of a value the size of a one-heartbeat batch through
//!   etcd-client (the least a durable append can cost: one raft round and fsync).
//! - `fleet/append`: `EtcdStore::append_batch` of one heartbeat: the local journal sync, the
//!   create-if-absent transaction with the head key (complete at etcd's answer; the watch delivery
//!   is waited for by the next log read, which the bench does not make).
//! - `fleet/head_confirm`: `confirm_head` with nothing new: the linearizable head read and the
//!   replica's check (the read the gate makes before each batch of calls).
//!
//! The head confirmation's p50 and p99 over 1,000 reads are printed as a line
//! `tenure-bench fleet-head: p50_us=N p99_us=N`.
//!
//! Then the log's throughput with [`WRITERS`] writers at once, as a fleet appends: that many
//! stores (agents) each appending one-heartbeat batches in a loop, against as many threads each
//! putting raw values through one etcd-client; three rounds of each, alternating, the median
//! rounds printed as `tenure-bench fleet-throughput: writers=N raw_per_s=X append_per_s=Y`.
//!
//! Last, the initial load: for each N of `TENURE_BENCH_FLEET_LOAD` (default `10000,100000`), a
//! snapshot and then N one-heartbeat batches written by raw puts under a prefix of their own
//! (keys in random order against their revisions, as many writers' are), then the time a new
//! store takes to open there (connect, head read, the load of the N batches into its replica),
//! printed as `tenure-bench fleet-load: batches=N seconds=S`.

#[path = "../../tenure-lead/tests/support/etcd_cluster.rs"]
mod etcd_cluster;

use std::time::{Duration, Instant};

use criterion::Criterion;
use tenure::agent::AgentStore;
use tenure::store::fleet::{EtcdOptions, EtcdStore, fleet_text};
use tenure_core::codec;
use tenure_core::log::{Event, EventKind};
use tenure_core::log_store::Log;
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
        nodes: Vec::new(),
    };
    // The stores' etcd requests and watches are tasks of this runtime (as of the agent's); each
    // store call is awaited from the calling thread, as the agent's loop and heartbeat thread do.
    let stores_runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let on_stores = stores_runtime.handle().clone();
    let store = on_stores
        .block_on(EtcdStore::open(&dir.join("store"), &dir.join("store.identity"), &options))
        .expect("store");
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
            on_stores.block_on(store.append_batch(&[heartbeat(at_ms)])).expect("append");
        });
    });
    group.bench_function("head_confirm", |bench| {
        bench.iter(|| on_stores.block_on(store.confirm_head(Duration::from_secs(1))).expect("head"));
    });
    group.finish();
    let mut reads: Vec<Duration> = (0..1_000)
        .map(|_| {
            let started = Instant::now();
            on_stores.block_on(store.confirm_head(Duration::from_secs(1))).expect("head");
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

    let stores: Vec<EtcdStore> = (0..WRITERS)
        .map(|i| {
            let path = dir.join(format!("writer-{i}"));
            on_stores
                .block_on(EtcdStore::open(&path.join("store"), &path.join("store.identity"), &options))
                .expect("store")
        })
        .collect();
    let mut raw_rates = Vec::new();
    let mut append_rates = Vec::new();
    for round in 0..3_u64 {
        raw_rates.push(rate(|writer| {
            // A client of its own, on this thread's runtime (a client's connection is driven by
            // the runtime it was made on).
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            let mut client =
                runtime.block_on(etcd_client::Client::connect(&cluster.endpoints, None)).expect("connects");
            for op in 0..OPS_PER_WRITER {
                let key = format!("/bench-raw/{round}/{writer}/{op}");
                runtime.block_on(client.put(key, value.clone(), None)).expect("put");
            }
        }));
        append_rates.push(rate(|writer| {
            let store = &stores[writer];
            for op in 0..OPS_PER_WRITER {
                let at_ms = 10_000_000 * (round + 1) + u64::try_from(op).expect("small");
                on_stores.block_on(store.append_batch(&[heartbeat(at_ms)])).expect("append");
            }
        }));
    }
    raw_rates.sort_by(f64::total_cmp);
    append_rates.sort_by(f64::total_cmp);
    println!(
        "tenure-bench fleet-throughput: writers={WRITERS} raw_per_s={:.0} append_per_s={:.0}",
        raw_rates[1], append_rates[1]
    );
    drop(stores);

    let sizes = std::env::var("TENURE_BENCH_FLEET_LOAD").unwrap_or_else(|_| "10000,100000".into());
    for batches in sizes.split(',').filter(|n| !n.trim().is_empty()) {
        let batches: usize =
            batches.trim().parse().expect("TENURE_BENCH_FLEET_LOAD: numbers, comma-separated");
        let prefix = format!("/bench-load-{batches}");
        runtime.block_on(write_log(&client, &prefix, batches, &value));
        let path = dir.join(format!("load-{batches}"));
        let options = EtcdOptions { prefix, request_timeout: Duration::from_secs(60), ..options.clone() };
        let started = Instant::now();
        let store = on_stores
            .block_on(EtcdStore::open(&path.join("store"), &path.join("store.identity"), &options))
            .expect("store");
        let seconds = started.elapsed().as_secs_f64();
        let head = store.log().head().expect("read").expect("the load holds the batches");
        let records = store.log().read_from(head, 1).expect("read");
        assert_eq!(records.len(), 1, "the last batch is there");
        println!("tenure-bench fleet-load: batches={batches} seconds={seconds:.2}");
        drop(store);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes, under `prefix`, a small snapshot and then `batches` batches of one `record` each (each
/// its own put, so its own revision; keys hashed, so in no order against the revisions) and the
/// head key, 64 puts in flight.
async fn write_log(client: &etcd_client::Client, prefix: &str, batches: usize, record: &[u8]) {
    use tenure::store::fleet::batch;
    let mut kv = client.kv_client();
    let status = kv.get("/", None).await.expect("etcd answers");
    let revision = status.header().expect("header").revision() + 2;
    let bytes = b"{}".to_vec();
    let manifest = format!(
        r#"{{"v":1,"revision":{revision},"events":0,"chunks":1,"bytes":{},"xxh3":"{:016x}"}}"#,
        bytes.len(),
        xxhash_rust::xxh3::xxh3_64(&bytes)
    );
    kv.put(format!("{prefix}/snapshots/{revision:020}/00000"), bytes, None).await.expect("chunk");
    kv.put(format!("{prefix}/snapshot"), manifest, None).await.expect("manifest");
    let value = batch::encode(&[record.to_vec()]);
    let mut pending = tokio::task::JoinSet::new();
    for i in 0..batches {
        if pending.len() >= 64 {
            pending.join_next().await.expect("a put").expect("joins");
        }
        let mut kv = client.kv_client();
        let value = value.clone();
        let key = format!("{prefix}/log/{:016x}", xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes()));
        pending.spawn(async move { kv.put(key, value, None).await.expect("put") });
    }
    while let Some(put) = pending.join_next().await {
        put.expect("joins");
    }
    let last = format!("{prefix}/log/last");
    kv.put(last.clone(), value, None).await.expect("put");
    kv.put(format!("{prefix}/head"), last, None).await.expect("head");
}

/// Writers at once in the throughput measurement.
const WRITERS: usize = 8;
/// Appends (or puts) per writer per round.
const OPS_PER_WRITER: usize = 150;

/// Operations per second of [`WRITERS`] threads each running `work(writer)` (which does
/// [`OPS_PER_WRITER`] operations), from the first start to the last end.
fn rate(work: impl Fn(usize) + Sync) -> f64 {
    let started = Instant::now();
    std::thread::scope(|scope| {
        for writer in 0..WRITERS {
            let work = &work;
            scope.spawn(move || work(writer));
        }
    });
    #[allow(clippy::cast_precision_loss)]
    let ops = (WRITERS * OPS_PER_WRITER) as f64;
    ops / started.elapsed().as_secs_f64()
}
