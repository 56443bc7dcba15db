//! The `oci` executor's acquire against the OCI FAKE (`scripts/oci-fake/oci_fake.py`: a fake of
//! the published Core Services private IP API, not OCI), with the same signed calls made straight
//! through `tenure-oci` as the baseline, in the same run against the same fake. `scripts/bench`
//! runs it and writes its rows to `docs/benchmarks.md`.
//!
//! - `oci/raw_list_update_get_baseline`: ListPrivateIps (by subnet and address), UpdatePrivateIp
//!   `{vnicId}` and GetPrivateIp, raw signed calls: the least a seize that confirms can cost.
//! - `oci/acquire`: `OciExecutor` running a stamped `assign-secondary-ip` to `executed` (call to
//!   confirmed; the VNICs' subnets cached by a warm-up acquire each).
//!
//! Each iteration moves the address to the other of two VNICs (a seize every time). After the
//! timing, one failover is run through the executor (every verb of the new holder and the old
//! holder's release) with the fake's counters reset, and a line `tenure-bench oci-calls:
//! list=N update=N get=N getvnic=N delete=N other=N` reports its calls.

#[path = "../tests/support/oci_fake.rs"]
mod oci_fake;

use std::time::Duration;

use criterion::Criterion;
use oci_fake::{action, address, temp_dir};
use tenure::exec::oci::{OciExecutor, SkipSourceDestCheck};
use tenure::exec::{ExecutionOutcome, execute_within};
use tenure_core::model::Verb;

/// Samples per benchmark.
const SAMPLES_COUNT: usize = 20;
/// Measurement per benchmark.
const MEASUREMENT_TIME: Duration = Duration::from_secs(5);

fn executed(outcome: ExecutionOutcome) {
    assert!(matches!(outcome, ExecutionOutcome::Executed { .. }), "{outcome:?}");
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let fake = oci_fake::OciFake::start();
    let vnics = fake.vnics(2);
    let (a, b) = (vnics[0].clone(), vnics[1].clone());
    let core = fake.core(&temp_dir("bench"));
    let executor =
        OciExecutor::with_client(fake.core(&temp_dir("bench-executor")), SkipSourceDestCheck::Check);
    let far = || tokio::time::Instant::now() + Duration::from_secs(20);
    let run = |verb: Verb, holder: &str, vnic: &str, epoch: u64| {
        executed(runtime.block_on(execute_within(&executor, &action(verb, holder, vnic, epoch), far())));
    };
    // Warm-up: the address exists (created on a), both VNICs' subnets are cached.
    run(Verb::AssignSecondaryIp, "a", &a, 1);
    run(Verb::AssignSecondaryIp, "b", &b, 2);
    let subnet = runtime.block_on(core.vnic(&a, far())).expect("GetVnic").subnet_id;
    let mut criterion = Criterion::default()
        .sample_size(SAMPLES_COUNT)
        .measurement_time(MEASUREMENT_TIME)
        .configure_from_args();
    let mut group = criterion.benchmark_group("oci");
    let mut turn = 0_usize;
    group.bench_function("raw_list_update_get_baseline", |bench| {
        bench.iter(|| {
            turn += 1;
            let vnic = &vnics[turn % 2];
            runtime.block_on(async {
                let found = core
                    .private_ip_by_address(&subnet, address(), far())
                    .await
                    .expect("list")
                    .expect("exists");
                let moved = core.move_private_ip(&found.id, vnic, far()).await.expect("update");
                let (shown, _) = core.private_ip(&moved.id, far()).await.expect("get");
                assert_eq!(shown.vnic_id.as_deref(), Some(vnic.as_str()));
            });
        });
    });
    let mut epoch = 10_u64;
    group.bench_function("acquire", |bench| {
        bench.iter(|| {
            epoch += 1;
            let vnic = &vnics[usize::try_from(epoch % 2).expect("0 or 1")];
            let assign = action(Verb::AssignSecondaryIp, "n", vnic, epoch);
            executed(runtime.block_on(execute_within(&executor, &assign, far())));
        });
    });
    group.finish();

    // One failover's calls, every verb: a holds; b seizes (list, move, confirm) and checks its
    // skipSourceDestCheck; a, back, disables forwarding (no call) and releases (a list: the
    // object is on b, nothing deleted).
    run(Verb::AssignSecondaryIp, "a", &a, 1_000);
    fake.reset_calls();
    run(Verb::AssignSecondaryIp, "b", &b, 1_001);
    run(Verb::EnableForwarding, "b", &b, 1_001);
    run(Verb::DisableForwarding, "a", &a, 1_001);
    run(Verb::UnassignSecondaryIp, "a", &a, 1_001);
    let calls = fake.calls();
    let count = |name: &str| calls.get(name).and_then(serde_json::Value::as_u64).unwrap_or(0);
    let all: u64 =
        calls.as_object().map_or(0, |all| all.values().filter_map(serde_json::Value::as_u64).sum());
    let (list, update, get, getvnic, delete) = (
        count("ListPrivateIps"),
        count("UpdatePrivateIp"),
        count("GetPrivateIp"),
        count("GetVnic"),
        count("DeletePrivateIp"),
    );
    println!(
        "tenure-bench oci-calls: list={list} update={update} get={get} getvnic={getvnic} delete={delete} other={}",
        all - list - update - get - getvnic - delete
    );
    criterion.final_summary();
}
