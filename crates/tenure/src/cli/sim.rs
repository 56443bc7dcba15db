//! `tenure sim`: seeded fault simulation (tenure-sim) from the command line.
//!
//! stdout is a pure function of the arguments (byte-identical across runs); the progress bar
//! goes to stderr and only on a terminal. The last line is `seeds=N violations=V`, followed by
//! the failing seeds; each failing seed is printed as `SEED=<s>` with the command reproducing it.
//!
//! `--backup FILE --config AGENT.yaml --plot OUT.svg` plots a store backup instead of a seed: the
//! one implementation behind `tenure replay BACKUP --plot` (`replay_backup.rs`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use tenure_sim::report::render;
use tenure_sim::{FaultSet, Mode, SeedReport, SimConfig, run_seed, run_seed_with_plot};

use super::replay::ReplayOptions;
use super::{EXIT_BAD_INPUT, Output};

/// Arguments of `tenure sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// First seed; alone, runs just that seed.
    #[arg(long)]
    seed: Option<u64>,
    /// How many seeds, from --seed (default 0) upwards [default: 1 with --seed, else 100].
    #[arg(long)]
    seeds: Option<u64>,
    /// Nodes per seed.
    #[arg(long, default_value_t = 5)]
    nodes: usize,
    /// Addresses per seed.
    #[arg(long, default_value_t = 100)]
    addresses: usize,
    /// `all`, `none`, or a comma-separated list of faults.
    #[arg(long, default_value = "all")]
    faults: String,
    /// cloud | onprem | onprem-no-authority | paused-call (the last two show documented limits).
    #[arg(long, default_value = "cloud")]
    mode: String,
    /// Output: `text`, or `json` (one JSON report per seed per line, then the summary line).
    #[arg(short = 'o', long = "output", default_value = "text")]
    output: String,
    /// Draw the first seed's timeline (holders and epochs per address, faults marked) as SVG; with
    /// --backup, the backup's.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Plot a store backup's log instead of a seed (with --plot and --config): the same as
    /// `tenure replay BACKUP --config AGENT.yaml --plot OUT.svg`, whose report it prints.
    #[arg(long, value_name = "BACKUP", requires_all = ["plot", "config"], conflicts_with_all = ["seed", "seeds"])]
    backup: Option<PathBuf>,
    /// With --backup: the config of the agent that wrote it.
    #[arg(long, value_name = "AGENT.yaml", requires = "backup")]
    config: Option<PathBuf>,
}

/// Most seeds one invocation runs.
const SEEDS_MAX: u64 = 10_000_000;

fn config(args: &SimArgs) -> Result<(SimConfig, u64, u64), String> {
    let faults: FaultSet = args.faults.parse().map_err(|e| format!("--faults: {e}"))?;
    let mode: Mode = args.mode.parse().map_err(|e| format!("--mode: {e}"))?;
    let config =
        SimConfig { nodes: args.nodes, addresses: args.addresses, faults, mode, ..SimConfig::default() };
    config.validate()?;
    if !matches!(args.output.as_str(), "text" | "json") {
        return Err(format!("--output must be text or json (got `{}`)", args.output));
    }
    let first = args.seed.unwrap_or(0);
    let count = args.seeds.unwrap_or(if args.seed.is_some() { 1 } else { 100 });
    if count == 0 || count > SEEDS_MAX {
        return Err(format!("--seeds must be between 1 and {SEEDS_MAX} (got {count})"));
    }
    if first.checked_add(count).is_none() {
        return Err("--seed plus --seeds overflows".to_owned());
    }
    Ok((config, first, count))
}

pub fn run(args: &SimArgs) -> ExitCode {
    if let Some(backup) = &args.backup {
        let output = if args.output == "json" { Output::Json } else { Output::Table };
        if !matches!(args.output.as_str(), "text" | "json") {
            eprintln!("tenure sim: --output must be text or json (got `{}`)", args.output);
            return ExitCode::from(EXIT_BAD_INPUT);
        }
        let options = ReplayOptions { config: args.config.clone(), plot: args.plot.clone() };
        return super::replay_backup::run(backup, output, &options);
    }
    let (config, first, count) = match config(args) {
        Ok(c) => c,
        Err(message) => {
            eprintln!("tenure sim: {message}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let progress = ProgressBar::new(count);
    progress.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} seeds  {per_sec}  eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    // With --plot, the first seed runs once, recording its timeline; the others as usual.
    let mut reports = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    if let Some(path) = &args.plot {
        let (report, svg) = run_seed_with_plot(first, &config);
        progress.inc(1);
        reports.push(report);
        if let Err(e) = std::fs::write(path, svg) {
            progress.finish_and_clear();
            eprintln!("tenure sim: cannot write {}: {e}", path.display());
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    }
    let done = reports.len() as u64;
    reports.extend(run_all(&config, first + done, count - done, &progress));
    progress.finish_and_clear();
    super::print_out(&render(&config, &reports, args.output == "json"));
    if reports.iter().any(SeedReport::failed) { ExitCode::from(1) } else { ExitCode::SUCCESS }
}

/// Runs the seeds on every core; the reports come back in seed order whatever the threads did.
fn run_all(config: &SimConfig, first: u64, count: u64, progress: &ProgressBar) -> Vec<SeedReport> {
    let threads =
        std::thread::available_parallelism().map_or(1, |n| n.get()).min(count as usize).max(1) as u64;
    let mut reports: Vec<SeedReport> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut mine = Vec::new();
                    let mut seed = first + t;
                    while seed < first + count {
                        mine.push(run_seed(seed, config));
                        progress.inc(1);
                        seed += threads;
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("a seed never panics")).collect()
    });
    reports.sort_by_key(|r| r.seed);
    reports
}
