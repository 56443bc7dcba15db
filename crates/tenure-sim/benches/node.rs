//! One node's reconcile + execute pass on `sim-cloud`, and a provider-only baseline in the same
//! run. `scripts/bench` runs it and writes the table, with the targets and ratios, to
//! `docs/benchmarks.md`.
//!
//! - `node/reconcile_execute/{4k,16k,64k}`: one alive node, one pool of a /20, /18 or /16 (4,096,
//!   16,384 or 65,536 addresses) that it owns whole, and an empty journal. One iteration is the
//!   walk the agent makes through [`NodeDriver`]: a full reconcile (plan, import through the gate,
//!   sweep, compact), then an execute pass that hands every action through the gate (in the agent's batches of 256) to the
//!   simulated provider and reports its result (2 verbs per address: `assign-secondary-ip`, then
//!   `enable-forwarding`), the results outbox drained. The driver, its view of the log and the
//!   provider are built fresh per iteration, outside the timing.
//! - `node/provider_only/{4k,16k,64k}`: the baseline: the same 2 verbs per address executed
//!   straight on a fresh [`SimProvider`], no journal, no gate. The pass's cost over this is the
//!   node's own.
//!
//! The bench lives here, not in `tenure-core`, because the provider is the simulator's (and
//! `tenure-sim` depends on the core). Its cost is part of what an agent's pass pays (a map
//! insert and a detail string per call), and the baseline shows how much of the pass it is.
//!
//! Before each size's timing, one pass is checked outside it: 2 actions per address ran, every
//! address is held by the node's NIC alone, every journal entry executed. `scripts/bench` derives
//! the per-address costs and the ratios from criterion's estimates.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use criterion::{BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput};

/// The binary's allocator (`crates/tenure/src/main.rs`): the pass is measured as the agent runs it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use tenure_core::driver::{DriverOptions, NodeDriver};
use tenure_core::federation::Federation;
use tenure_core::journal::{EntryState, MemoryJournalStore};
use tenure_core::log::{ActionOutcome, Event, EventKind};
use tenure_core::log_store::EventLog;
use tenure_core::model::{
    Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec, StampedAction,
};
use tenure_core::node::NodeEngine;
use tenure_core::sim_provider::SimProvider;

/// Pool prefix lengths measured: a /20, a /18 and a /16 (the largest pool, SPEC 10).
const PREFIX_LENGTHS: [u32; 3] = [20, 18, 16];
/// Verbs per address on `sim-cloud`: assign, then enable forwarding.
const VERBS_PER_ADDRESS_COUNT: usize = 2;
/// The one node.
const NODE_NAME: &str = "n00";
/// Its NIC.
const NODE_NIC: &str = "eni-00";
/// Provider and placement group of the node and the pool.
const PROVIDER_NAME: &str = "sim1";
/// See [`PROVIDER_NAME`].
const PLACEMENT_GROUP: &str = "g1";
/// Stream time of the heartbeat and the pool.
const STREAM_TIME_MS: u64 = 1_000;
/// Criterion's smallest sample count: the /16 pass takes a large fraction of a second, plus setup.
const SAMPLES_COUNT: usize = 10;
/// Warm-up per benchmark.
const WARM_UP_TIME: Duration = Duration::from_millis(500);
/// Measurement per benchmark; criterion extends it when ten samples do not fit.
const MEASUREMENT_TIME: Duration = Duration::from_secs(3);

fn addresses(prefix_length: u32) -> Vec<IpAddr> {
    let base = u32::from(Ipv4Addr::new(10, 0, 0, 0));
    (0..1_u32 << (32 - prefix_length)).map(|offset| IpAddr::V4(Ipv4Addr::from(base + offset))).collect()
}

fn pool_spec(prefix_length: u32) -> PoolSpec {
    PoolSpec {
        name: "pool-a".to_owned(),
        addresses: addresses(prefix_length),
        provider: PROVIDER_NAME.to_owned(),
        placement_group: PLACEMENT_GROUP.to_owned(),
        members: vec![NODE_NAME.to_owned()],
        authority: Authority::None,
        approval: Approval::Auto,
        deprovision_hold_ms: 5_000,
        heartbeat_ttl_ms: 3_000,
        promotion_hold_ms: 1_000,
        epoch_locking: true,
        prefer_nodes: Vec::new(),
        preempt: false,
        auto_failover: true,
    }
}

/// The node registry (the empty log's projection), and the log: a heartbeat, then the pool.
fn registry_and_log(prefix_length: u32) -> (Federation, Vec<Event>) {
    let node = NodeSpec {
        name: NODE_NAME.to_owned(),
        provider: PROVIDER_NAME.to_owned(),
        placement_group: PLACEMENT_GROUP.to_owned(),
        priority: 0,
        nic: NODE_NIC.to_owned(),
        capacity: None,
    };
    let provider = ProviderSpec { name: PROVIDER_NAME.to_owned(), kind: ProviderKind::SimCloud };
    let registry = Federation::new(&[node], &[provider]);
    let log = vec![
        Event { at_ms: STREAM_TIME_MS, kind: EventKind::Heartbeat { node: NODE_NAME.to_owned() } },
        Event {
            at_ms: STREAM_TIME_MS,
            kind: EventKind::PoolApplied { spec: Box::new(pool_spec(prefix_length)) },
        },
    ];
    (registry, log)
}

/// A fresh driver whose view has applied the whole log (so the timed reconcile plans, and does
/// not re-run arbitration over the view), and a fresh provider.
fn fresh(registry: &Federation, log: &[Event]) -> (NodeDriver<MemoryJournalStore>, SimProvider) {
    let engine = NodeEngine::open(NODE_NAME, MemoryJournalStore::new()).expect("a memory store cannot fail");
    let mut driver = NodeDriver::new(engine, registry.clone(), DriverOptions { report_results: true });
    let mut events = EventLog::new();
    for event in log {
        events.push(event.clone());
    }
    driver.follow(&events).expect("an event log cannot fail");
    (driver, SimProvider::new(ProviderKind::SimCloud))
}

/// The measured walk: reconcile, then execute until the gate hands out nothing, results
/// reported and the outbox drained. Returns how many actions ran.
fn reconcile_execute(driver: &mut NodeDriver<MemoryJournalStore>, provider: &mut SimProvider) -> usize {
    let report = driver.reconcile().expect("a memory store cannot fail").expect("not blocked");
    black_box(report);
    let promoted = driver.start_execution().expect("a memory store cannot fail").expect("not blocked");
    black_box(promoted);
    let mut executed = 0;
    loop {
        // The agent's batches (`GATE_BATCH_MAX`): one durable sync per 256 actions.
        let batch = driver.poll_actions(256, None).expect("a memory store cannot fail");
        if batch.is_empty() {
            break;
        }
        for action in batch {
            let (outcome, detail) = match provider.execute(&action) {
                Ok(detail) => (ActionOutcome::Executed, detail),
                Err(e) => (ActionOutcome::Failed, e.to_string()),
            };
            driver
                .handle_result(&action.idempotency_key(), outcome, detail)
                .expect("the action is in flight");
            executed += 1;
        }
    }
    while let Some(append) = driver.poll_append() {
        black_box(append);
    }
    executed
}

/// Outside the timing: one pass leaves every address assigned to the node's NIC, with
/// forwarding on, and every entry executed. Returns the actions of that pass, in execution
/// order, for the baseline.
fn checked_pass(registry: &Federation, log: &[Event], addresses_count: usize) -> Vec<StampedAction> {
    let (mut driver, mut provider) = fresh(registry, log);
    let executed = reconcile_execute(&mut driver, &mut provider);
    assert_eq!(executed, addresses_count * VERBS_PER_ADDRESS_COUNT, "2 verbs per address ran");
    assert_eq!(provider.holdings().len(), addresses_count, "every address is held");
    assert!(
        provider.holdings().values().all(|nics| nics.len() == 1 && nics.contains(NODE_NIC)),
        "held by the node's NIC only"
    );
    assert!(driver.engine().entries().all(|e| e.state == EntryState::Executed), "every entry executed");
    let mut entries: Vec<_> = driver.engine().entries().collect();
    entries.sort_by_key(|e| e.executed_seq);
    entries.into_iter().map(|e| e.action.clone()).collect()
}

fn label(addresses_count: usize) -> String {
    format!("{}k", addresses_count / 1024)
}

fn bench_node(c: &mut Criterion) {
    let mut group = c.benchmark_group("node");
    group
        .sample_size(SAMPLES_COUNT)
        .warm_up_time(WARM_UP_TIME)
        .measurement_time(MEASUREMENT_TIME)
        .sampling_mode(SamplingMode::Flat);
    for prefix_length in PREFIX_LENGTHS {
        let (registry, log) = registry_and_log(prefix_length);
        let addresses_count = 1_usize << (32 - prefix_length);
        let actions = checked_pass(&registry, &log, addresses_count);
        group.throughput(Throughput::Elements(addresses_count as u64));
        group.bench_function(BenchmarkId::new("reconcile_execute", label(addresses_count)), |b| {
            b.iter_batched(
                || fresh(&registry, &log),
                |(mut driver, mut provider)| {
                    let executed = reconcile_execute(&mut driver, &mut provider);
                    (driver, provider, executed)
                },
                BatchSize::PerIteration,
            );
        });
        group.bench_function(BenchmarkId::new("provider_only", label(addresses_count)), |b| {
            b.iter_batched(
                || SimProvider::new(ProviderKind::SimCloud),
                |mut provider| {
                    for action in black_box(&actions) {
                        black_box(provider.execute(action).expect("sim-cloud verbs"));
                    }
                    provider
                },
                BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench_node(&mut criterion);
    criterion.final_summary();
}
