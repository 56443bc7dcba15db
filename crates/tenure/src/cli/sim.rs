//! `tenure sim`: seeded fault simulation (tenure-sim) from the command line.
//!
//! stdout is a pure function of the arguments (byte-identical across runs); the progress bar
//! goes to stderr and only on a terminal. The last line is `seeds=N violations=V`, followed by
//! the failing seeds; each failing seed is printed as `SEED=<s>` with the command reproducing it.
//!
//! `--backup FILE --config AGENT.yaml --plot OUT.svg` plots a store backup instead of a seed: the
//! one implementation behind `tenure replay BACKUP --plot` (`replay_backup.rs`).
//!
//! The simulator is behind the cargo feature `sim` (the runtime does not depend on it): this file
//! has the arguments, always (so that `--help` lists them), and `sim/seeds.rs` runs them; a build
//! without the feature refuses with exit 3 (`simulator_not_built` in `cli/mod.rs`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

#[cfg(feature = "sim")]
mod seeds;

/// Arguments of `tenure sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// First seed; alone, runs just that seed.
    #[arg(long)]
    pub(super) seed: Option<u64>,
    /// How many seeds, from --seed (default 0) upwards [default: 1 with --seed, else 100].
    #[arg(long)]
    pub(super) seeds: Option<u64>,
    /// Nodes per seed.
    #[arg(long, default_value_t = 5)]
    pub(super) nodes: usize,
    /// Addresses per seed.
    #[arg(long, default_value_t = 100)]
    pub(super) addresses: usize,
    /// `all`, `none`, or a comma-separated list of faults (`all` leaves out `store-rollback`: add it
    /// by name, `all,store-rollback`).
    #[arg(long, default_value = "all")]
    pub(super) faults: String,
    /// cloud | onprem | onprem-no-authority | paused-call (the last three may show documented limits, counted apart as predicted).
    #[arg(long, default_value = "cloud")]
    pub(super) mode: String,
    /// Output: `text`, or `json` (one JSON report per seed per line, then the summary line).
    #[arg(short = 'o', long = "output", default_value = "text")]
    pub(super) output: String,
    /// Draw the first seed's timeline (holders and epochs per address, faults marked) as SVG; with
    /// --backup, the backup's.
    #[arg(long)]
    pub(super) plot: Option<PathBuf>,
    /// Plot a store backup's log instead of a seed (with --plot and --config): the same as
    /// `tenure replay BACKUP --config AGENT.yaml --plot OUT.svg`, whose report it prints.
    #[arg(long, value_name = "BACKUP", requires_all = ["plot", "config"], conflicts_with_all = ["seed", "seeds"])]
    pub(super) backup: Option<PathBuf>,
    /// With --backup: the config of the agent that wrote it.
    #[arg(long, value_name = "AGENT.yaml", requires = "backup")]
    pub(super) config: Option<PathBuf>,
}

/// Runs `tenure sim` (exit 3 in a build without the simulator).
pub fn run(args: &SimArgs) -> ExitCode {
    #[cfg(feature = "sim")]
    return seeds::run(args);
    #[cfg(not(feature = "sim"))]
    {
        let _ = args;
        super::simulator_not_built("sim")
    }
}
