//! The `azure` executor's acquire against the ARM fake (`scripts/azure-fake`: a FAKE of the ARM
//! network interface API, not Azure), with the same HTTP calls made one after another as the
//! baseline, in the same run against the same fake. `scripts/bench` runs it and writes its rows to
//! `docs/benchmarks.md`.
//!
//! - `azure/raw_calls_baseline`: the five requests of a seize — GET own NIC, list the resource
//!   group, PUT the holder without the ipConfiguration (If-Match), PUT own NIC with it (If-Match),
//!   GET own NIC — each sent once through the same `azure_core` pipeline ([`Arm::call`], no
//!   retries), with nothing between them but the JSON edits: the least a confirmed seize costs.
//! - `azure/acquire`: `AzureExecutor` running a stamped `assign-secondary-ip` to `executed`.
//!
//! The fake finishes writes at once for the timing (`lroDelayMs: 0`: a PUT answers
//! `provisioningState: Succeeded`, nothing to poll), so both sides make the same five calls. Each
//! iteration moves the address to the other of two NICs (a seize every time). After the timing,
//! one failover runs through the executor with the fake's operations taking 200 ms (polled every
//! 100 ms), and a line `tenure-bench azure-calls: get=N list=N put=N poll=N other=N` reports its
//! calls: the new holder's seize and forwarding check, then the old holder's release.

#[path = "../tests/support/azure_fake.rs"]
mod azure_fake;

use std::time::Duration;

use criterion::Criterion;
use serde_json::json;
use tenure::exec::azure::tenure_azure::{Arm, Method, Nic};
use tenure::exec::azure::{AzureExecutor, IpForwarding};
use tenure::exec::{ExecutionOutcome, execute_within};
use tenure_core::model::Verb;
use tokio::time::Instant;

/// Samples per benchmark.
const SAMPLES_COUNT: usize = 20;
/// Measurement per benchmark.
const MEASUREMENT_TIME: Duration = Duration::from_secs(5);

fn executed(outcome: ExecutionOutcome) {
    assert!(matches!(outcome, ExecutionOutcome::Executed { .. }), "{outcome:?}");
}

/// One seize of the address onto `own` from `other`, as bare requests.
async fn raw_seize(arm: &Arm, own: &str, other: &str, group: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let address = azure_fake::address();
    let get = |id: &str| {
        let url = arm.url(id).expect("url");
        async move { arm.call("get", Method::Get, &url, None, None, deadline).await.expect("get") }
    };
    let answer = get(own).await;
    let mine = Nic::from_body(answer.body, answer.etag).expect("a NIC");
    let list_url = arm.url(&format!("{group}/providers/Microsoft.Network/networkInterfaces")).expect("url");
    let list = arm.call("list", Method::Get, &list_url, None, None, deadline).await.expect("list");
    let holder = list.body["value"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|n| Nic::from_body(n.clone(), None))
        .find(|n| n.is(other))
        .expect("the holder");
    let put = |nic: &Nic, body: serde_json::Value| {
        let url = arm.url(&nic.id).expect("url");
        let etag = nic.etag.clone();
        async move {
            let answer = arm
                .call("put", Method::Put, &url, Some(&body), etag.as_deref(), deadline)
                .await
                .expect("put");
            assert_eq!(answer.status, 200, "{:?}", answer.body);
        }
    };
    put(&holder, holder.without(address)).await;
    put(&mine, mine.with(address).expect("a subnet")).await;
    let answer = get(own).await;
    assert!(Nic::from_body(answer.body, None).expect("a NIC").holds(address));
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let fake = azure_fake::AzureFake::start();
    fake.config(&json!({"lroDelayMs": 0}));
    let a = fake.nic("rg", "a", "10.0.0.4", &["10.0.0.10"]);
    let b = fake.nic("rg", "b", "10.0.0.5", &[]);
    for nic in [&a, &b] {
        fake.set_forwarding(nic, true);
    }
    let group = format!("/subscriptions/{}/resourceGroups/rg", azure_fake::SUBSCRIPTION);
    let arm = fake.arm();
    let executor = AzureExecutor::with_client(fake.arm(), IpForwarding::Check);
    let nics = [a.clone(), b.clone()];
    let mut criterion = Criterion::default()
        .sample_size(SAMPLES_COUNT)
        .measurement_time(MEASUREMENT_TIME)
        .configure_from_args();
    let mut group_bench = criterion.benchmark_group("azure");
    // The address is on a: the first seize is onto b.
    let mut turn = 0_usize;
    group_bench.bench_function("raw_calls_baseline", |bench| {
        bench.iter(|| {
            turn += 1;
            let (own, other) = (&nics[turn % 2], &nics[(turn + 1) % 2]);
            runtime.block_on(raw_seize(&arm, own, other, &group));
        });
    });
    let mut epoch = u64::try_from(turn).expect("small");
    group_bench.bench_function("acquire", |bench| {
        bench.iter(|| {
            epoch += 1;
            let nic = &nics[usize::try_from(epoch % 2).expect("0 or 1")];
            let deadline = Instant::now() + Duration::from_secs(20);
            let assign = azure_fake::action(Verb::AssignSecondaryIp, "n", nic, epoch);
            executed(runtime.block_on(execute_within(&executor, &assign, deadline)));
        });
    });
    group_bench.finish();

    // One failover's calls, every verb, with operations that take 200 ms.
    fake.config(&json!({"lroDelayMs": 200, "pollMs": 100}));
    let deadline = || Instant::now() + Duration::from_secs(20);
    let run = |verb: Verb, holder: &str, nic: &str, epoch: u64| {
        let action = azure_fake::action(verb, holder, nic, epoch);
        executed(runtime.block_on(execute_within(&executor, &action, deadline())));
    };
    run(Verb::AssignSecondaryIp, "a", &a, epoch + 1);
    fake.reset_calls();
    let started = std::time::Instant::now();
    run(Verb::AssignSecondaryIp, "b", &b, epoch + 2);
    let seize = started.elapsed();
    run(Verb::EnableForwarding, "b", &b, epoch + 2);
    run(Verb::DisableForwarding, "a", &a, epoch + 2);
    run(Verb::UnassignSecondaryIp, "a", &a, epoch + 2);
    let counts = fake.counts();
    let count = |op: &str| counts.get(op).copied().unwrap_or(0);
    let all: u64 = counts.values().sum();
    let (get, list, put, poll) = (count("get"), count("list"), count("put"), count("poll"));
    println!(
        "tenure-bench azure-calls: get={get} list={list} put={put} poll={poll} other={} seize_ms={}",
        all - get - list - put - poll,
        seize.as_millis()
    );
    criterion.final_summary();
}
