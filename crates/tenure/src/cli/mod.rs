//! Command-line parsing and dispatch. Each subcommand lives in its own file.

mod agent;
mod approve;
mod change_args;
mod client;
mod completion;
mod demo;
mod elect;
mod examples;
mod executors;
pub(crate) mod history;
mod list;
mod preflight;
mod remote;
#[cfg(feature = "sim")]
mod replay;
#[cfg(feature = "sim")]
mod replay_backup;
mod sim;
mod sink_mark;
mod store;
mod validate;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::ops;

/// Exit code for bad input (SPEC 10, 11): a spec, scenario or argument was refused (for the
/// verbs that talk to an agent, also an answer of 400, 413 or 415).
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

pub use remote::{EXIT_REFUSED, RemoteOutput};

/// Output formats of `replay` (`table|json`; `yaml` is refused there: the verbs that talk to an
/// agent take [`RemoteOutput`], which adds it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// A narrated trace and final tables, for people.
    Table,
    /// One JSON document with sorted keys, byte-identical across runs.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a scenario through the real core and simulated providers, offline; or replay a store
    /// backup's log (`tenure store backup`) as its agent projected it.
    #[command(after_help = examples::REPLAY)]
    Replay {
        /// The scenario file (YAML), or a store backup (told apart by its first line).
        scenario: std::path::PathBuf,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: Output,
        /// For a backup: the config of the agent that wrote it (its nodes, peers and providers).
        #[arg(long, value_name = "AGENT.yaml")]
        config: Option<std::path::PathBuf>,
        /// For a backup: draw its timeline (holders, desired holders, captureEpochs, faults and
        /// operator actions) as SVG.
        #[arg(long, value_name = "OUT.svg")]
        plot: Option<std::path::PathBuf>,
    },
    /// Check pool specs, scenarios and agent configs (with their pool files); print
    /// `file:line:column: message` per error.
    #[command(after_help = examples::VALIDATE)]
    Validate {
        /// Files to check together.
        #[arg(required = true)]
        files: Vec<std::path::PathBuf>,
    },
    /// The daemon: follows the log, reconciles, gates and executes; serves the HTTP API.
    #[command(after_help = examples::AGENT)]
    Agent(agent::AgentArgs),
    /// Seeded fault simulation with invariant checking; reproducible byte for byte.
    #[command(after_help = examples::SIM)]
    Sim(sim::SimArgs),
    /// A narrated multi-node failover on the embedded default, in one process.
    #[command(after_help = examples::DEMO)]
    Demo(demo::DemoArgs),
    /// Campaign in an election like `etcdctl elect`; one JSON line per change of own state.
    #[command(after_help = examples::ELECT)]
    Elect(elect::ElectArgs),
    /// Show a running agent's ownership map: who should hold each address (OWNER), where its
    /// hand-over is (PHASE: pending-approval, acquiring, held, releasing, released) and which NICs
    /// hold it by the log's results and inventories (NICS); `-o wide` adds more.
    #[command(after_help = examples::OWNERSHIP)]
    Ownership {
        /// Only these addresses (each one address, or a CIDR range of them).
        addresses: Vec<String>,
        /// Only this pool's addresses.
        #[arg(long)]
        pool: Option<String>,
        /// Only addresses this node owns or holds.
        #[arg(long)]
        node: Option<String>,
        #[command(flatten)]
        list: list::ListArgs,
        #[command(flatten)]
        remote: remote::RemoteArgs,
    },
    /// Show a running agent's journal entries (actions).
    #[command(after_help = examples::ACTIONS)]
    Actions {
        /// Only this node's entries.
        #[arg(long)]
        node: Option<String>,
        /// Only entries in this state.
        #[arg(long, value_parser = completion::Offered(crate::api::list::ACTION_STATES))]
        state: Option<String>,
        /// Only this pool's entries.
        #[arg(long)]
        pool: Option<String>,
        /// Only entries of this address, or of the addresses of this CIDR range (repeatable).
        #[arg(long = "address", value_name = "ADDRESS")]
        addresses: Vec<String>,
        #[command(flatten)]
        list: list::ListArgs,
        #[command(flatten)]
        remote: remote::RemoteArgs,
    },
    /// Show a running agent's history: ownership changes with their cause (drain, liveness,
    /// health, vrrp, desire, re-capture…), captureEpoch moves, approvals and executed or failed
    /// actions, in log order, with wall time and stream time, as far back as the log keeps.
    #[command(after_help = examples::HISTORY)]
    History {
        /// Only these addresses (each one address, or a CIDR range of them).
        addresses: Vec<String>,
        /// Only this pool's entries.
        #[arg(long)]
        pool: Option<String>,
        /// Only entries this node is in (owner or desired holder before or after, reporting node).
        #[arg(long)]
        node: Option<String>,
        #[command(flatten)]
        list: list::ListArgs,
        #[command(flatten)]
        remote: remote::RemoteArgs,
    },
    /// Drain a node (it gives up its addresses) through a running agent.
    #[command(after_help = examples::DRAIN)]
    Drain {
        /// Node name.
        node: String,
        #[command(flatten)]
        remote: change_args::ChangeArgs,
    },
    /// Fleet membership through a running agent: `tenure node retire NODE`.
    #[command(subcommand, after_help = examples::NODE)]
    Node(NodeCommand),
    /// End a node's drain through a running agent.
    #[command(after_help = examples::UNDRAIN)]
    Undrain {
        /// Node name.
        node: String,
        #[command(flatten)]
        remote: change_args::ChangeArgs,
    },
    /// Approve an action of a manual pool through a running agent: one KEY, or every action of
    /// one address waiting for approval (--pool P --address A).
    #[command(after_help = examples::APPROVE)]
    Approve {
        /// Idempotency key (as `tenure actions` shows it).
        #[arg(required_unless_present = "pool", conflicts_with_all = ["pool", "address"])]
        key: Option<String>,
        /// With --address: approve every action of this pool's address that waits for approval.
        #[arg(long, requires = "address")]
        pool: Option<String>,
        /// With --pool: the address whose waiting actions to approve.
        #[arg(long, requires = "pool")]
        address: Option<String>,
        #[command(flatten)]
        remote: change_args::ChangeArgs,
    },
    /// Mark an address desired (it should be held) through a running agent.
    #[command(after_help = examples::DESIRE)]
    Desire {
        /// Pool name.
        pool: String,
        /// One address of the pool.
        address: String,
        #[command(flatten)]
        remote: change_args::ChangeArgs,
    },
    /// Mark an address undesired (held by no one) through a running agent.
    #[command(after_help = examples::UNDESIRE)]
    Undesire {
        /// Pool name.
        pool: String,
        /// One address of the pool.
        address: String,
        #[command(flatten)]
        remote: change_args::ChangeArgs,
    },
    /// Back up or restore the embedded store.
    #[command(after_help = examples::STORE)]
    Store(store::StoreArgs),
    /// Show or reset a fenced sink's durable high-water mark (recovery; see docs/leadership.md).
    #[command(after_help = examples::SINK_MARK)]
    SinkMark(sink_mark::SinkMarkArgs),
    /// Print a shell's completion script for every verb and flag (bash, zsh or fish).
    #[command(after_help = examples::COMPLETION)]
    Completion(completion::CompletionArgs),
    /// Internal: how the agent starts an exec hook (waits until the hook's process group is
    /// recorded, then runs COMMAND in its place; see docs/operations.md, "Exec hooks").
    #[command(name = "hook-gate", hide = true)]
    HookGate {
        /// The hook's command and arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
}

/// `tenure node …`.
#[derive(Debug, Subcommand)]
enum NodeCommand {
    /// Take a node out of the fleet's registry (its agent stopped, its addresses moved): the
    /// fleet and its snapshots forget it. It joins again when an agent for it starts.
    #[command(after_help = examples::NODE_RETIRE)]
    Retire {
        /// Node name.
        node: String,
        /// Retire it although the log says it still holds addresses: its router is gone for good
        /// with them (nothing will release them; on-prem, its proxy entries went with the host).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        remote: change_args::ChangeArgs,
    },
}

/// The refusal of a simulator verb (`sim`, `replay`) by a build without the cargo feature `sim`:
/// one line, exit 3 ([`EXIT_NOT_BUILT`]), as a provider kind or an election backend left out of
/// the build is refused.
#[cfg(not(feature = "sim"))]
fn simulator_not_built(verb: &str) -> ExitCode {
    eprintln!("tenure {verb}: this build has no simulator; rebuild with --features sim");
    ExitCode::from(EXIT_NOT_BUILT)
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        #[cfg(feature = "sim")]
        Command::Replay { scenario, output, config, plot } => {
            replay::run(&scenario, output, &replay::ReplayOptions { config, plot })
        }
        #[cfg(not(feature = "sim"))]
        Command::Replay { .. } => simulator_not_built("replay"),
        Command::Validate { files } => validate::run(&files),
        Command::Agent(args) => agent::run_cli(&args),
        Command::Sim(args) => sim::run(&args),
        Command::Demo(args) => demo::run_cli(&args),
        Command::Elect(args) => elect::run(&args),
        Command::Ownership { addresses, pool, node, list, remote } => {
            match list::filter("ownership", pool, node, &addresses, "ADDRESS") {
                Ok(filter) => remote::run_list(&remote::Verb::Ownership { filter }, &remote, &list),
                Err(code) => code,
            }
        }
        Command::Actions { node, state, pool, addresses, list, remote } => {
            let state = state.filter(|state| !state.is_empty());
            if let Some(state) =
                state.as_ref().filter(|s| !crate::api::list::ACTION_STATES.contains(&s.as_str()))
            {
                let states = crate::api::list::ACTION_STATES.join(", ");
                eprintln!("tenure actions: --state `{state}` is not a state; one of {states}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
            match list::filter("actions", pool, node, &addresses, "--address") {
                Ok(filter) => remote::run_list(&remote::Verb::Actions { filter, state }, &remote, &list),
                Err(code) => code,
            }
        }
        Command::History { addresses, pool, node, list, remote } => {
            match list::filter("history", pool, node, &addresses, "ADDRESS") {
                Ok(filter) => remote::run_list(&remote::Verb::History { filter }, &remote, &list),
                Err(code) => code,
            }
        }
        Command::Drain { node, remote } => remote::run_change(&ops::Drain { node }, &remote.into_remote()),
        Command::Node(NodeCommand::Retire { node, force: false, remote }) => {
            remote::run_change(&ops::Retire { node }, &remote.into_remote())
        }
        Command::Node(NodeCommand::Retire { node, force: true, remote }) => {
            remote::run_change(&ops::RetireForced { node }, &remote.into_remote())
        }
        Command::Undrain { node, remote } => {
            remote::run_change(&ops::Undrain { node }, &remote.into_remote())
        }
        Command::Approve { key: Some(key), remote, .. } => {
            remote::run_change(&ops::Approve { key }, &remote.into_remote())
        }
        Command::Approve { key: None, pool: Some(pool), address: Some(address), remote } => {
            approve::run(&pool, &address, &remote.into_remote())
        }
        Command::Approve { .. } => {
            eprintln!("tenure approve: needs a KEY, or --pool P --address A");
            ExitCode::from(EXIT_BAD_INPUT)
        }
        Command::Desire { pool, address, remote } => {
            remote::run_change(&ops::Desire { pool, address }, &remote.into_remote())
        }
        Command::Undesire { pool, address, remote } => {
            remote::run_change(&ops::Undesire { pool, address }, &remote.into_remote())
        }
        Command::Store(args) => store::run(&args),
        Command::SinkMark(args) => sink_mark::run(&args),
        Command::Completion(args) => completion::run(&args),
        Command::HookGate { command } => {
            ExitCode::from(u8::try_from(crate::exec::hook_groups::run_gate(&command)).unwrap_or(u8::MAX))
        }
    }
}

/// Prints `text` to standard output. A reader that went away (`tenure replay … | head`) ends the
/// output quietly, as a filter's would; `print!` would panic and exit 101.
fn print_out(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("tenure: cannot write to standard output: {e}");
    }
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
