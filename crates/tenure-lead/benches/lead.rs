//! Leadership benchmarks: the epoch bridge against a raw tokio channel, and the fenced sink's
//! admit check. `scripts/bench` runs them and writes their table to `docs/benchmarks.md`.
//!
//! - `leadership/raw_mpsc/100k`, `leadership/raw_mpsc_batched/100k`: the baselines, 100k `u64`
//!   messages from a producer task to a consumer task through one raw `tokio::sync::mpsc`
//!   channel of 128, received one at a time (`recv`) or in batches (`recv_many`), on a
//!   current-thread runtime (one thread, as every benchmark here). The target is measured
//!   against the faster of the two.
//! - `leadership/bridge/100k`: the same producer, its channel of 128, and the epoch bridge
//!   (capacity 128, stamping epoch 7) delivering to a [`Handler`] pipeline that consumes each
//!   stamped message as the baseline's consumer does: the bridge is the one hop, as in the seed.
//! - `leadership/bridge_to_channel/100k`: the bridge delivering into a second channel of 128 read
//!   by a consumer task (two hops). Every iteration includes spawning and building the channels.
//! - `leadership/hop_baseline/100k`: the floor of any one-hop design, in the same run: a bare
//!   forwarding task between the same two channels (`recv_many` then `try_reserve_many`; no
//!   stamping, no cancellation, no select). Bridge ÷ hop is the bridge's own cost; hop ÷ raw is
//!   the cost of the extra hop itself.
//! - `leadership/sink_admit_unsigned/100k` and `leadership/sink_admit_signed/100k`: 100k
//!   [`FencedSink::admit`] calls at the sink's current epoch (the steady state of one term: no
//!   mark write), without and with HMAC-SHA256 verification of a precomputed signature.
//!
//! Every figure is criterion's mean of one iteration (100k messages or 100k admits).

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput};
use tenure_lead::LeaderEpoch;
use tenure_lead::bridge::{BRIDGE_CAPACITY_DEFAULT, BridgeOptions, Handler, Stamped, spawn_epoch_bridge};
use tenure_lead::sink::{FencedSink, Stamp, StampKey, StampSignature, StampSigner, StampVerifier};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Messages per bridge iteration, and admits per sink iteration.
const MESSAGES_COUNT: u64 = 100_000;
/// The epoch every benchmark stamps.
const EPOCH: LeaderEpoch = LeaderEpoch::from_stored(7);
/// Samples per benchmark.
const SAMPLES_COUNT: usize = 20;
/// Warm-up per benchmark.
const WARM_UP_TIME: Duration = Duration::from_millis(500);
/// Measurement per benchmark.
const MEASUREMENT_TIME: Duration = Duration::from_secs(3);
/// The shared signing key of the signed sink benchmark.
const KEY: &[u8] = b"benchmark stamp key, 32 bytes or more";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime")
}

async fn produce(tx: mpsc::Sender<u64>) {
    for n in 0..MESSAGES_COUNT {
        if tx.send(n).await.is_err() {
            return;
        }
    }
}

async fn raw_mpsc() -> u64 {
    let (tx, mut rx) = mpsc::channel(BRIDGE_CAPACITY_DEFAULT);
    let producer = tokio::spawn(produce(tx));
    let mut sum = 0u64;
    while let Some(n) = rx.recv().await {
        sum = sum.wrapping_add(n);
    }
    producer.await.expect("the producer ends");
    sum
}

async fn raw_mpsc_batched() -> u64 {
    let (tx, mut rx) = mpsc::channel(BRIDGE_CAPACITY_DEFAULT);
    let producer = tokio::spawn(produce(tx));
    let mut sum = 0u64;
    let mut batch = Vec::with_capacity(BRIDGE_CAPACITY_DEFAULT);
    while rx.recv_many(&mut batch, BRIDGE_CAPACITY_DEFAULT).await > 0 {
        for n in batch.drain(..) {
            sum = sum.wrapping_add(n);
        }
    }
    producer.await.expect("the producer ends");
    sum
}

/// Forwards `rx` to `tx` until `rx` ends, reserving the pipeline's free slots at once.
async fn forward(mut rx: mpsc::Receiver<u64>, tx: mpsc::Sender<u64>) {
    let mut batch = Vec::with_capacity(BRIDGE_CAPACITY_DEFAULT);
    while rx.recv_many(&mut batch, BRIDGE_CAPACITY_DEFAULT).await > 0 {
        let mut messages = batch.drain(..);
        while messages.len() > 0 {
            let free = tx.capacity().min(messages.len());
            let permits = if free == 0 { tx.reserve_many(1).await } else { tx.reserve_many(free).await };
            let Ok(permits) = permits else { return };
            for (permit, message) in permits.zip(&mut messages) {
                permit.send(message);
            }
        }
    }
}

async fn hop() -> u64 {
    let (tx, rx) = mpsc::channel(BRIDGE_CAPACITY_DEFAULT);
    let (pipe_tx, mut pipeline) = mpsc::channel(BRIDGE_CAPACITY_DEFAULT);
    let hop = tokio::spawn(forward(rx, pipe_tx));
    let producer = tokio::spawn(produce(tx));
    let mut sum = 0u64;
    while let Some(n) = pipeline.recv().await {
        sum = sum.wrapping_add(n);
    }
    producer.await.expect("the producer ends");
    hop.await.expect("the hop ends");
    sum
}

async fn bridged() -> u64 {
    let (tx, rx) = mpsc::channel(BRIDGE_CAPACITY_DEFAULT);
    let sum = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let total = sum.clone();
    // The consumer's work, as in the baselines: a running sum, published with a plain store.
    let mut running = 0u64;
    let consume = Handler(move |stamped: Stamped<u64>| {
        running = running.wrapping_add(stamped.message ^ stamped.epoch.get());
        total.store(running, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    });
    let bridge = spawn_epoch_bridge(rx, consume, EPOCH, BridgeOptions::default(), CancellationToken::new())
        .expect("default options are valid");
    let producer = tokio::spawn(produce(tx));
    producer.await.expect("the producer ends");
    black_box(bridge.stop().await);
    sum.load(std::sync::atomic::Ordering::Relaxed)
}

async fn bridged_to_channel() -> u64 {
    let (tx, rx) = mpsc::channel(BRIDGE_CAPACITY_DEFAULT);
    let (pipe_tx, mut pipeline) = mpsc::channel(BRIDGE_CAPACITY_DEFAULT);
    let bridge = spawn_epoch_bridge(rx, pipe_tx, EPOCH, BridgeOptions::default(), CancellationToken::new())
        .expect("default options are valid");
    let producer = tokio::spawn(produce(tx));
    let mut sum = 0u64;
    while let Some(stamped) = pipeline.recv().await {
        sum = sum.wrapping_add(stamped.message ^ stamped.epoch.get());
    }
    producer.await.expect("the producer ends");
    black_box(bridge.stop().await);
    sum
}

fn bridge(c: &mut Criterion) {
    let runtime = runtime();
    let mut group = c.benchmark_group("leadership");
    group.sample_size(SAMPLES_COUNT).warm_up_time(WARM_UP_TIME).measurement_time(MEASUREMENT_TIME);
    group.throughput(Throughput::Elements(MESSAGES_COUNT));
    group.bench_function("raw_mpsc/100k", |b| b.to_async(&runtime).iter(raw_mpsc));
    group.bench_function("raw_mpsc_batched/100k", |b| b.to_async(&runtime).iter(raw_mpsc_batched));
    group.bench_function("bridge/100k", |b| b.to_async(&runtime).iter(bridged));
    group.bench_function("hop_baseline/100k", |b| b.to_async(&runtime).iter(hop));
    group.bench_function("bridge_to_channel/100k", |b| b.to_async(&runtime).iter(bridged_to_channel));
    group.finish();
}

fn sink(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("tenure-bench-sink-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let key = StampKey::new("bench", KEY).expect("a long enough key");
    let signer = StampSigner::new("bench-election", key).expect("a good election name");
    let ids: Vec<String> = (0..MESSAGES_COUNT).map(|n| format!("message-{n}")).collect();
    let signatures: Vec<StampSignature> = ids.iter().map(|id| signer.sign(EPOCH, id.as_bytes())).collect();

    let mut group = c.benchmark_group("leadership");
    group.sample_size(SAMPLES_COUNT).warm_up_time(WARM_UP_TIME).measurement_time(MEASUREMENT_TIME);
    group.throughput(Throughput::Elements(MESSAGES_COUNT));

    let mut unsigned = FencedSink::create(dir.join("unsigned")).expect("opens");
    unsigned.admit(&Stamp::unsigned(EPOCH, b"first")).expect("raises the mark once");
    group.bench_function("sink_admit_unsigned/100k", |b| {
        b.iter(|| {
            for id in &ids {
                black_box(unsigned.admit(&Stamp::unsigned(EPOCH, id.as_bytes())).is_ok());
            }
        })
    });

    let mut signed = FencedSink::create(dir.join("signed"))
        .expect("opens")
        .requiring_signatures(StampVerifier::of(&signer));
    let first = signer.sign(EPOCH, b"first");
    signed.admit(&Stamp::signed(EPOCH, b"first", first.received())).expect("raises the mark once");
    group.bench_function("sink_admit_signed/100k", |b| {
        b.iter(|| {
            for (id, signature) in ids.iter().zip(&signatures) {
                let stamp = Stamp::signed(EPOCH, id.as_bytes(), signature.received());
                black_box(signed.admit(&stamp).is_ok());
            }
        })
    });
    group.finish();
    assert_eq!(unsigned.rejected_total() + signed.rejected_total(), 0, "every admit was accepted");
    drop((unsigned, signed));
    let _ = std::fs::remove_dir_all(&dir);
}

criterion::criterion_group!(benches, bridge, sink);
criterion::criterion_main!(benches);
