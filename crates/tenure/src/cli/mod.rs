//! Command-line parsing and dispatch. Each subcommand lives in its own file.

mod demo;
mod elect;
mod replay;
mod sim;
mod store;
mod validate;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// Exit code for bad input (SPEC 10, 11): a spec, scenario or argument was refused.
pub const EXIT_BAD_INPUT: u8 = 2;
/// Exit code for a command this build does not have: not built yet, or left out of this build by
/// its cargo features (the one-line message names the feature to rebuild with).
pub const EXIT_NOT_BUILT: u8 = 3;

/// tenure: fencing tokens for things that must have exactly one holder.
#[derive(Debug, Parser)]
#[command(name = "tenure", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// A narrated trace and final tables, for people.
    Table,
    /// One JSON document with sorted keys, byte-identical across runs.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a scenario through the real core and simulated providers, offline.
    Replay {
        /// The scenario file (YAML).
        scenario: std::path::PathBuf,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: Output,
    },
    /// Check pool specs, scenarios and agent configs (with their pool files); print
    /// `file:line:column: message` per error.
    Validate {
        /// Files to check together.
        #[arg(required = true)]
        files: Vec<std::path::PathBuf>,
    },
    /// The daemon (not built yet).
    Agent {
        /// Agent configuration file.
        #[arg(long)]
        config: Option<std::path::PathBuf>,
    },
    /// Seeded fault simulation with invariant checking; reproducible byte for byte.
    Sim(sim::SimArgs),
    /// A narrated multi-node failover on the embedded default, in one process.
    Demo(demo::DemoArgs),
    /// Campaign in an election like `etcdctl elect`; one JSON line per change of own state.
    Elect(elect::ElectArgs),
    /// Show a running agent's ownership map (not built yet).
    Ownership,
    /// Show a running agent's actions (not built yet).
    Actions,
    /// Drain a node through a running agent (not built yet).
    Drain {
        /// Node name.
        node: String,
    },
    /// Approve an action through a running agent (not built yet).
    Approve {
        /// Idempotency key.
        key: String,
    },
    /// Back up or restore the embedded store.
    Store(store::StoreArgs),
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Replay { scenario, output } => replay::run(&scenario, output),
        Command::Validate { files } => validate::run(&files),
        Command::Agent { .. } => not_built("agent", "the agent (durable store, HTTP API, metrics)"),
        Command::Sim(args) => sim::run(&args),
        Command::Demo(args) => demo::run_cli(&args),
        Command::Elect(args) => elect::run(&args),
        Command::Ownership | Command::Actions | Command::Drain { .. } | Command::Approve { .. } => {
            not_built("ownership/actions/drain/approve", "the agent's HTTP API these commands talk to")
        }
        Command::Store(args) => store::run(&args),
    }
}

fn not_built(command: &str, what: &str) -> ExitCode {
    eprintln!("tenure {command}: not built yet ({what}); see README.md, section Status");
    ExitCode::from(EXIT_NOT_BUILT)
}

/// Reads a file, or prints a one-line error naming it.
fn read_input(path: &std::path::Path) -> Result<String, ExitCode> {
    let bytes = std::fs::read(path).map_err(|e| {
        eprintln!("{}: cannot read: {e}", path.display());
        ExitCode::from(EXIT_BAD_INPUT)
    })?;
    match tenure_core::input::utf8_text(&bytes) {
        Ok(text) => Ok(text.to_owned()),
        Err(e) => {
            eprintln!("{}", e.render(&path.display().to_string()));
            Err(ExitCode::from(EXIT_BAD_INPUT))
        }
    }
}
