//! Core benchmarks: arbitration, drain and the fence gate. `scripts/bench` runs them and writes
//! their table, with the targets and the ratios, to `docs/benchmarks.md`.
//!
//! - `arbitration/{sticky,rehash}/{100k,1M}`: one full [`arbitration::compute_owners`] over
//!   100k and 1M addresses × 16 equally ranked, alive nodes. `sticky` is the shape SPEC 4 asks
//!   for (`preempt: false`) in its steady state: every owner keeps its address. `rehash` is the
//!   same layout with `preempt: true`, so that every address goes through the rendezvous ranking
//!   of all 16 nodes: the work of a cold placement, the worst case of a full recompute.
//! - `arbitration/score_baseline/{100k,1M}`: the baseline of `rehash`, in the same run: a bare
//!   loop over the same addresses that computes the same 16 rendezvous scores per address
//!   (`xxh3_64("<pool>\0<address>\0<node>")`, the address in canonical text form, written once
//!   per address with arbitration's own writer) and keeps each address's best. Nothing else: no eligibility, no capacity, no
//!   result map. That it picks the owners `rehash` picks is checked outside the timing.
//! - `drain/apply_drain/100k`: [`Federation::apply`] of one `drain` event over 100k addresses ×
//!   16 nodes (eligibility, arbitration and the epoch rules included). How many addresses moved
//!   is counted outside the timing and printed as a `tenure-bench drain:` line.
//! - `fence/check/100k` and `fence/hashmap_baseline/100k`: [`fence::check`] of 100k current
//!   actions against the federation head, and, in the same run, a bare `HashMap<String, u64>`
//!   lookup of the same 100k idempotency keys.
//!
//! Limits are named constants; every figure is criterion's mean of one iteration (one recompute,
//! one drain, one pass over 100k actions).

mod fixture;

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput};
use tenure_core::arbitration;
use tenure_core::federation::{Federation, NodeId};
use tenure_core::fence::{self, FenceVerdict, HighWater};
use tenure_core::log::{Event, EventKind};
use tenure_core::model::{StampedAction, Verb};

use fixture::{
    ADDRESSES_LARGE_COUNT, ADDRESSES_SMALL_COUNT, NODES_COUNT, STREAM_TIME_MS, federation, label, node_name,
    owners, pool_addresses, score_baseline,
};

/// Criterion's smallest sample count; the large benchmarks take about a second per iteration.
const SAMPLES_COUNT: usize = 10;
/// Warm-up per benchmark.
const WARM_UP_TIME: Duration = Duration::from_millis(500);
/// Measurement per benchmark; criterion extends it when ten samples do not fit.
const MEASUREMENT_TIME: Duration = Duration::from_secs(3);

fn bench_arbitration(c: &mut Criterion) {
    let mut group = c.benchmark_group("arbitration");
    group
        .sample_size(SAMPLES_COUNT)
        .warm_up_time(WARM_UP_TIME)
        .measurement_time(MEASUREMENT_TIME)
        .sampling_mode(SamplingMode::Flat);
    for addresses_count in [ADDRESSES_SMALL_COUNT, ADDRESSES_LARGE_COUNT] {
        for (name, preempt) in [("sticky", false), ("rehash", true)] {
            let federation = federation(addresses_count, preempt);
            assert!(owners(&federation).iter().all(Option::is_some), "every address has an owner");
            group.throughput(Throughput::Elements(addresses_count as u64));
            group.bench_function(BenchmarkId::new(name, label(addresses_count)), |b| {
                b.iter(|| {
                    arbitration::compute_owners(
                        black_box(federation.nodes()),
                        black_box(federation.pools()),
                        federation.stream_time_ms(),
                    )
                });
            });
            if !preempt {
                continue;
            }
            // The baseline of `rehash`: the same scores, bare. Outside the timing, it must pick
            // the owners cold placement picked (16 equal nodes, no capacity limit).
            let pools = pool_addresses(&federation);
            let node_names: Vec<String> = (0..NODES_COUNT).map(node_name).collect();
            let mut best = Vec::with_capacity(addresses_count);
            score_baseline(&pools, &node_names, &mut best);
            let rehash_owners: Vec<Option<NodeId>> = owners(&federation);
            let baseline_owners: Vec<Option<NodeId>> =
                best.iter().map(|index| federation.node_id(&node_names[*index])).collect();
            assert!(rehash_owners == baseline_owners, "the baseline picks the owners cold placement picks");
            group.bench_function(BenchmarkId::new("score_baseline", label(addresses_count)), |b| {
                b.iter(|| {
                    score_baseline(black_box(&pools), black_box(&node_names), &mut best);
                    best.len()
                });
            });
        }
    }
    group.finish();
}

fn bench_drain(c: &mut Criterion) {
    let federation = federation(ADDRESSES_SMALL_COUNT, false);
    let drained = node_name(0);
    let drain = Event { at_ms: STREAM_TIME_MS, kind: EventKind::Drain { node: drained.clone() } };

    // Outside the timing: how many addresses the drain moves, against the 1/N + 1 % bound.
    let before = owners(&federation);
    let mut after_drain = federation.clone();
    after_drain.apply(&drain).expect("the drained node exists");
    let after = owners(&after_drain);
    let drained_id = federation.node_id(&drained).expect("the drained node exists");
    let held = before.iter().filter(|o| **o == Some(drained_id)).count();
    let moved = before.iter().zip(&after).filter(|(b, a)| b != a).count();
    let total = before.len();
    let bound_fraction = 1.0 / NODES_COUNT as f64 + 0.01;
    let moved_fraction = moved as f64 / total as f64;
    println!(
        "tenure-bench drain: addresses={total} nodes={NODES_COUNT} drained_held={held} moved={moved} \
         moved_pct={:.3} bound_pct={:.3} within_bound={}",
        moved_fraction * 100.0,
        bound_fraction * 100.0,
        moved_fraction <= bound_fraction,
    );

    let mut group = c.benchmark_group("drain");
    group.sample_size(SAMPLES_COUNT).warm_up_time(WARM_UP_TIME).measurement_time(MEASUREMENT_TIME);
    group.bench_function(BenchmarkId::new("apply_drain", label(ADDRESSES_SMALL_COUNT)), |b| {
        b.iter_batched(
            || federation.clone(),
            |mut federation| {
                let applied = federation.apply(black_box(&drain));
                (federation, applied)
            },
            BatchSize::PerIteration,
        );
    });
    group.finish();
}

/// One current acquire per address (its desired holder, at the current tokens), and a node's
/// high-water marks for all of them: the gate walks every rule and answers `Current`.
fn current_actions(federation: &Federation) -> (Vec<StampedAction>, HighWater) {
    let mut actions = Vec::new();
    let mut high_water = HighWater::default();
    for (pool_name, pool) in federation.pools() {
        for (address, state) in &pool.addresses {
            let holder = state.line.desired_holder.expect("every address is desired and owned");
            let node = &federation.nodes()[holder as usize].spec;
            let action = StampedAction::new(
                pool_name,
                *address,
                Verb::AssignSecondaryIp,
                &node.name,
                &node.provider,
                &node.nic,
                pool.capture_domain.clone(),
                state.line.epoch,
                state.ownership_epoch,
            );
            high_water.raise(
                pool_name,
                *address,
                &pool.capture_domain,
                state.line.epoch,
                state.ownership_epoch,
            );
            actions.push(action);
        }
    }
    (actions, high_water)
}

fn bench_fence(c: &mut Criterion) {
    let federation = federation(ADDRESSES_SMALL_COUNT, false);
    let (actions, high_water) = current_actions(&federation);
    assert!(
        actions.iter().all(|a| fence::check(a, &federation, &high_water) == FenceVerdict::Current),
        "every benchmark action is current"
    );
    let baseline: HashMap<String, u64> =
        actions.iter().map(|a| (a.idempotency_key().to_string(), a.capture_epoch.get())).collect();

    let mut group = c.benchmark_group("fence");
    group
        .sample_size(SAMPLES_COUNT)
        .warm_up_time(WARM_UP_TIME)
        .measurement_time(MEASUREMENT_TIME)
        .throughput(Throughput::Elements(actions.len() as u64));
    group.bench_function(BenchmarkId::new("check", label(actions.len())), |b| {
        b.iter(|| {
            actions
                .iter()
                .filter(|a| fence::check(a, black_box(&federation), &high_water) == FenceVerdict::Current)
                .count()
        });
    });
    group.bench_function(BenchmarkId::new("hashmap_baseline", label(actions.len())), |b| {
        b.iter(|| {
            actions
                .iter()
                .filter_map(|a| black_box(&baseline).get(a.idempotency_key().as_str()))
                .fold(0_u64, |sum, epoch| sum.wrapping_add(*epoch))
        });
    });
    group.finish();
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench_arbitration(&mut criterion);
    bench_drain(&mut criterion);
    bench_fence(&mut criterion);
    criterion.final_summary();
}
