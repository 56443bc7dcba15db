//! A profiling harness for arbitration: builds the benchmark federation (`benches/fixture`) and
//! runs one thing under it, so that a profiler sees that thing and not criterion nor the other
//! benchmarks' set-up. Instruction counts under callgrind are repeatable where wall-clock figures
//! on a shared machine are not:
//!
//! ```text
//! cargo build --release -p tenure-core --example arbitration_profile
//! valgrind --tool=callgrind --toggle-collect='*measured_*' \
//!     target/release/examples/arbitration_profile rehash 100000
//! valgrind --tool=callgrind --toggle-collect='*measured_*' \
//!     target/release/examples/arbitration_profile baseline 100000
//! callgrind_annotate --inclusive=yes callgrind.out.<pid>
//! ```
//!
//! Arguments: `rehash` (cold placement, `preempt: true`), `sticky` (`preempt: false`, steady
//! state) or `baseline` (the bare scoring loop `arbitration/rehash` is compared with), then the
//! address count (100,000 by default).

#[allow(dead_code)]
#[path = "../benches/fixture/mod.rs"]
mod fixture;

use std::hint::black_box;
use std::net::IpAddr;
use std::process::ExitCode;

use tenure_core::arbitration::{self, OwnerMap};
use tenure_core::federation::Federation;

/// The address count when none is given.
const ADDRESSES_DEFAULT_COUNT: usize = 100_000;

/// The one measured call of `compute_owners` (building the federation calls it too, once per
/// pool applied): collect with `--toggle-collect='*measured_*'`.
#[inline(never)]
fn measured_compute_owners(federation: &Federation) -> OwnerMap {
    arbitration::compute_owners(
        black_box(federation.nodes()),
        black_box(federation.pools()),
        federation.stream_time_ms(),
    )
}

/// The one measured run of the baseline.
#[inline(never)]
fn measured_score_baseline(pools: &[(String, Vec<IpAddr>)], node_names: &[String], best: &mut Vec<usize>) {
    fixture::score_baseline(black_box(pools), black_box(node_names), best);
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let what = args.next().unwrap_or_else(|| "rehash".to_owned());
    let addresses_count = match args.next().map(|a| a.parse::<usize>()) {
        None => ADDRESSES_DEFAULT_COUNT,
        Some(Ok(count)) if count > 0 => count,
        Some(_) => {
            eprintln!("usage: arbitration_profile [rehash|sticky|baseline] [ADDRESSES]");
            return ExitCode::FAILURE;
        }
    };
    let preempt = what != "sticky";
    let federation = fixture::federation(addresses_count, preempt);
    match what.as_str() {
        "rehash" | "sticky" => {
            let map = measured_compute_owners(&federation);
            println!("{what}: {addresses_count} addresses, {} owner changes", map.changes.len());
        }
        "baseline" => {
            let pools = fixture::pool_addresses(&federation);
            let node_names: Vec<String> = (0..fixture::NODES_COUNT).map(fixture::node_name).collect();
            let mut best = Vec::with_capacity(addresses_count);
            measured_score_baseline(&pools, &node_names, &mut best);
            println!("baseline: {} addresses scored", best.len());
        }
        _ => {
            eprintln!("usage: arbitration_profile [rehash|sticky|baseline] [ADDRESSES]");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
