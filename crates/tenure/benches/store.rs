//! The embedded store's durable commit throughput against a raw `write` + `fdatasync` loop in the
//! same run and directory. `scripts/bench` runs it and writes its table to `docs/benchmarks.md`.
//!
//! - `store/fdatasync_baseline`: the baseline: append as many bytes as one journal change's
//!   record to a file and `File::sync_data` it, once per iteration.
//! - `store/commit_single`: one small journal change (a high-water raise, ~150 bytes) buffered
//!   through `EmbeddedJournal::commit`, then `sync`: one redb write transaction with
//!   `Durability::Immediate` per change. Target: at least 0.8× the baseline's rate.
//! - `store/commit_group_256`: 256 such changes (of 8 nodes) buffered, then one `sync`: group
//!   commit. One iteration is 256 changes; its rate per change is compared with
//!   `commit_single`'s (target: at least 10×).
//!
//! The files live under `TENURE_BENCH_DIR`, else cargo's target tmp dir (on the disk the build
//! uses, not a tmpfs, so that an fsync is an fsync). Every figure is criterion's mean of one
//! iteration.

use std::fs::OpenOptions;
use std::hint::black_box;
use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use criterion::Criterion;
use tenure::store::EmbeddedStore;
use tenure_core::codec;
use tenure_core::journal::{JournalChange, JournalStore};
use tenure_core::model::{CaptureDomain, CaptureEpoch, OwnershipEpoch};

/// Changes per group commit.
const GROUP_CHANGES_COUNT: u64 = 256;
/// Nodes the grouped changes come from.
const GROUP_NODES_COUNT: u64 = 8;
/// Distinct addresses the changes cycle over (the marks table stays this large).
const ADDRESSES_COUNT: u64 = 1024;
/// Samples per benchmark.
const SAMPLES_COUNT: usize = 20;
/// Warm-up per benchmark.
const WARM_UP_TIME: Duration = Duration::from_secs(1);
/// Measurement per benchmark.
const MEASUREMENT_TIME: Duration = Duration::from_secs(5);

/// The `n`-th change: a high-water raise of one of [`ADDRESSES_COUNT`] addresses to epoch `n`.
fn change(n: u64) -> JournalChange {
    let address = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + u32::try_from(n % ADDRESSES_COUNT).unwrap_or(0)));
    JournalChange::RaiseHighWater {
        pool: "edge".into(),
        address,
        capture_domain: CaptureDomain::new("sim1", "g1"),
        capture_epoch: CaptureEpoch::from_stored(n + 1),
        ownership_epoch: OwnershipEpoch::from_stored(n + 1),
    }
}

/// A fresh directory for this run's files.
fn bench_dir() -> PathBuf {
    let base = std::env::var_os("TENURE_BENCH_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from);
    let dir = base.join(format!("tenure-store-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the bench dir");
    dir
}

fn commits(c: &mut Criterion) {
    let dir = bench_dir();
    let store = EmbeddedStore::open(&dir.join("store"), &dir.join("identity.json")).expect("opens");
    let record_bytes = codec::encode_journal_change(&change(1_000_000)).expect("encodes").len();
    let mut group = c.benchmark_group("store");
    group.sample_size(SAMPLES_COUNT).warm_up_time(WARM_UP_TIME).measurement_time(MEASUREMENT_TIME);

    let mut raw = OpenOptions::new().create(true).append(true).open(dir.join("raw.log")).expect("opens");
    let bytes = vec![b'x'; record_bytes];
    group.bench_function("fdatasync_baseline", |b| {
        b.iter(|| {
            raw.write_all(black_box(&bytes)).expect("writes");
            raw.sync_data().expect("syncs");
        });
    });

    let mut journal = store.journal("a");
    let mut n: u64 = 0;
    group.bench_function("commit_single", |b| {
        b.iter(|| {
            n += 1;
            journal.commit(&change(n)).expect("buffers");
            journal.sync().expect("syncs");
        });
    });

    let mut journals: Vec<_> = (0..GROUP_NODES_COUNT).map(|i| store.journal(&format!("n{i}"))).collect();
    group.bench_function(format!("commit_group_{GROUP_CHANGES_COUNT}"), |b| {
        b.iter(|| {
            for i in 0..GROUP_CHANGES_COUNT {
                n += 1;
                let node = usize::try_from(i % GROUP_NODES_COUNT).unwrap_or(0);
                journals[node].commit(&change(n)).expect("buffers");
            }
            journals[0].sync().expect("one sync commits every node's changes");
        });
    });
    group.finish();
    drop((journal, journals));
    store.close().expect("closes");
    let _ = std::fs::remove_dir_all(&dir);
    println!("tenure-bench store: record_bytes={record_bytes} group_changes={GROUP_CHANGES_COUNT}");
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    commits(&mut criterion);
    criterion.final_summary();
}
