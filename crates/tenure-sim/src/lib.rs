//! tenure-sim drives many nodes' real `tenure-core` engines, the federation log and the
//! simulated providers from **one seed**, injects faults, and checks invariants after every step
//! (TigerBeetle's VOPR, madsim's seed discipline). Every choice — the next step, which fault, how
//! long a delay — comes from a ChaCha8 generator seeded with the seed; nothing reads a clock or
//! iterates a hash map in an order that reaches an output. Same seed and configuration, same run,
//! byte for byte.
//!
//! Each seed has two phases: a **safety** phase under faults, checking after every step, then a
//! **liveness** phase with faults stopped that must converge within a bound.
//!
//! # Layout
//!
//! - [`config`] — sizes, the fault list, the modes (including the documented-limit modes).
//! - [`topology`] — the fleet of a seed: nodes, provider, pools.
//! - [`world`] — the world of a seed and its driver (both phases).
//! - [`replay`] — the offline replay driver of a scenario (SPEC 11; the format is the core's,
//!   `tenure_core::scenario`).
//! - the simulated `sim-cloud` and `sim-onprem` providers are the core's
//!   (`tenure_core::sim_provider`): the agent's `sim-*` executors run them too.
//! - [`checker`] — the one invariant checker (`replay` and the simulator): every invariant its
//!   own kind, re-derived independently of the fence; every violation counted.
//! - [`store`] — a journal store that loses unsynced writes on a crash.
//! - [`recorded`] — the replay of a recorded log (`tenure replay BACKUP`): the timeline, the
//!   ownership and the invariants a log shows without a provider.
//! - [`plot`] — the SVG timeline of `--plot` (a seed's, or a recorded log's).
//! - [`report`] — what a run prints.

pub mod checker;
pub mod config;
pub mod plot;
pub mod recorded;
pub mod replay;
pub mod report;
pub mod store;
pub mod topology;
pub mod world;

pub use config::{Fault, FaultSet, Mode, SimConfig};
pub use world::SeedReport;

/// Runs one seed.
#[must_use]
pub fn run_seed(seed: u64, config: &SimConfig) -> SeedReport {
    let (mut report, _) = world::World::new(seed, config, false).run();
    report.seed = seed;
    report
}

/// Runs one seed and draws its timeline as SVG.
#[must_use]
pub fn run_seed_with_plot(seed: u64, config: &SimConfig) -> (SeedReport, String) {
    let (mut report, timeline) = world::World::new(seed, config, true).run();
    report.seed = seed;
    let title = format!("{} — {} violations", config.reproduce_command(seed), report.violations_total);
    let svg = timeline.map(|t| t.to_svg(&title)).unwrap_or_default();
    (report, svg)
}
