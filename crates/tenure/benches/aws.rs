//! The `aws` executor's acquire against moto's EC2 server, with the same calls made straight
//! through the SDK as the baseline, in the same run against the same server. `scripts/bench`
//! runs it (it installs moto first) and writes its rows to `docs/benchmarks.md`.
//!
//! - `aws/sdk_assign_describe_baseline`: `AssignPrivateIpAddresses` (with reassignment) and one
//!   `DescribeNetworkInterfaces` of the ENI, raw SDK calls: the least an acquire that confirms
//!   can cost.
//! - `aws/acquire`: `AwsExecutor` running a stamped `assign-secondary-ip` to `executed`: the call
//!   and its confirmation (call to confirmed).
//!
//! Each iteration moves the address to the other of two ENIs (a seize every time). After the
//! timing, one failover is run through the executor (every verb of the new holder's acquire and
//! the old holder's release) with the server's call counters reset, and a line
//! `tenure-bench aws-calls: assign=N describe=N modify=N unassign=N other=N` reports its calls
//! (target: 1, 1, 1, 1, 0).

#[path = "../tests/support/moto.rs"]
#[allow(dead_code, reason = "the bench uses part of the test harness")]
mod moto;

use std::time::Duration;

use criterion::Criterion;
use moto::{action, address};
use tenure::exec::aws::AwsExecutor;
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
    let moto = moto::Moto::start(false);
    let ec2 = runtime.block_on(moto.ec2());
    let (a, b) = runtime.block_on(moto::two_enis(&ec2));
    let executor = AwsExecutor::with_client(ec2.clone());
    let enis = [a.clone(), b.clone()];
    let mut criterion = Criterion::default()
        .sample_size(SAMPLES_COUNT)
        .measurement_time(MEASUREMENT_TIME)
        .configure_from_args();
    let mut group = criterion.benchmark_group("aws");
    let mut turn = 0_usize;
    group.bench_function("sdk_assign_describe_baseline", |bench| {
        bench.iter(|| {
            turn += 1;
            let eni = &enis[turn % 2];
            runtime.block_on(async {
                ec2.assign(eni, address()).await.expect("assign");
                assert!(ec2.addresses(eni).await.expect("describe").contains(&address()));
            });
        });
    });
    let mut epoch = 0_u64;
    group.bench_function("acquire", |bench| {
        bench.iter(|| {
            epoch += 1;
            let eni = &enis[usize::try_from(epoch % 2).expect("0 or 1")];
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            let assign = action(Verb::AssignSecondaryIp, "n", eni, epoch);
            executed(runtime.block_on(execute_within(&executor, &assign, deadline)));
        });
    });
    group.finish();

    // One failover's calls, every verb: a holds; b seizes (assign + confirm) and turns its
    // source/dest check off; a, back, disables forwarding (no call) and unassigns on its own ENI.
    let deadline = || tokio::time::Instant::now() + Duration::from_secs(20);
    let run = |verb: Verb, holder: &str, eni: &str, epoch: u64| {
        executed(runtime.block_on(execute_within(&executor, &action(verb, holder, eni, epoch), deadline())));
    };
    run(Verb::AssignSecondaryIp, "a", &a, 1);
    run(Verb::EnableForwarding, "a", &a, 1);
    moto.http("DELETE", "/_tenure/calls", "");
    run(Verb::AssignSecondaryIp, "b", &b, 2);
    run(Verb::EnableForwarding, "b", &b, 2);
    run(Verb::DisableForwarding, "a", &a, 2);
    run(Verb::UnassignSecondaryIp, "a", &a, 2);
    let calls = moto.calls();
    let count = |name: &str| calls.get(name).and_then(serde_json::Value::as_u64).unwrap_or(0);
    let all: u64 =
        calls.as_object().map_or(0, |all| all.values().filter_map(serde_json::Value::as_u64).sum());
    let (assign, describe, modify, unassign) = (
        count("AssignPrivateIpAddresses"),
        count("DescribeNetworkInterfaces"),
        count("ModifyNetworkInterfaceAttribute"),
        count("UnassignPrivateIpAddresses"),
    );
    println!(
        "tenure-bench aws-calls: assign={assign} describe={describe} modify={modify} unassign={unassign} other={}",
        all - assign - describe - modify - unassign
    );
    criterion.final_summary();
}
