//! Seeds per second at 5 nodes × 100 addresses with all faults, beside a baseline in the same
//! run: the same seed with no faults (the cost of the engines and checkers alone).
use criterion::{Criterion, criterion_group, criterion_main};
use tenure_sim::{FaultSet, SimConfig, run_seed};

fn seeds(c: &mut Criterion) {
    let mut group = c.benchmark_group("sim");
    group.sample_size(20);
    for (name, faults) in
        [("all faults", FaultSet::all()), ("no faults (baseline)", FaultSet(Default::default()))]
    {
        let config = SimConfig { faults, ..SimConfig::default() };
        let mut seed = 0u64;
        group.bench_function(format!("one seed, 5 nodes x 100 addresses, {name}"), |b| {
            b.iter(|| {
                seed += 1;
                run_seed(seed, &config)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, seeds);
criterion_main!(benches);
