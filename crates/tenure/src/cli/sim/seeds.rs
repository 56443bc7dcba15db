//! `tenure sim`'s seeds (and `--backup`): the simulator's run behind the arguments of
//! [`super::SimArgs`] (cargo feature `sim`).

use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};
use tenure_sim::report::render;
use tenure_sim::{FaultSet, Mode, SeedReport, SimConfig, run_seed, run_seed_with_plot};

use super::SimArgs;
use crate::cli::replay::ReplayOptions;
use crate::cli::{EXIT_BAD_INPUT, Output};

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
        return crate::cli::replay_backup::run(backup, output, &options);
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
    crate::cli::print_out(&render(&config, &reports, args.output == "json"));
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
