//! `tenure sink-mark show PATH` and `tenure sink-mark reset PATH --to N
//! --yes-i-know-this-reopens-fencing`: an operator's view and recovery of a fenced sink's durable
//! high-water mark (`tenure_lead::sink`, `docs/leadership.md`).
//!
//! A stamp with an absurd epoch (signed by any holder of the key, on a sink without an epoch
//! ceiling) raises the mark past every real term and the sink refuses all real work; `reset`
//! lowers it again. That reopens fencing, so it needs its confirmation flag, and it takes the
//! sink's lock, so it refuses while a sink has the mark open. Exit 0 with one line on stdout; 1
//! when refused because a sink holds the mark; 2 on bad input (a missing or damaged mark for
//! `show`, no confirmation for `reset`), with one line on stderr naming the file. A refusal
//! changes nothing.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use tenure_lead::LeaderEpoch;
use tenure_lead::sink::{PreviousMark, SinkError, read_mark, reset_mark};

use super::EXIT_BAD_INPUT;

/// Exit code when a running sink holds the mark, or the file system refuses.
const EXIT_REFUSED: u8 = 1;

/// The flag that confirms a reset.
const CONFIRMATION_FLAG: &str = "--yes-i-know-this-reopens-fencing";

/// `tenure sink-mark …`.
#[derive(Debug, Args)]
pub struct SinkMarkArgs {
    #[command(subcommand)]
    command: SinkMarkCommand,
}

#[derive(Debug, Subcommand)]
enum SinkMarkCommand {
    /// Print the high-water epoch stored in a fenced sink's mark file (works beside a running
    /// sink: it takes no lock).
    #[command(after_help = super::examples::SINK_MARK_SHOW)]
    Show {
        /// The mark file (the path the sink was created with).
        path: PathBuf,
    },
    /// Replace the mark with another epoch: the recovery from a mark raised past every real term.
    /// It reopens fencing (the sink admits anything from that epoch up, a deposed leader's work
    /// included) and refuses while a sink holds the mark.
    #[command(after_help = super::examples::SINK_MARK_RESET)]
    Reset {
        /// The mark file (the path the sink was created with).
        path: PathBuf,
        /// The new high-water epoch: the highest term the backend has really issued.
        #[arg(long, value_name = "EPOCH")]
        to: u64,
        /// Confirms that lowering the mark reopens fencing.
        #[arg(long)]
        yes_i_know_this_reopens_fencing: bool,
    },
}

/// Runs `tenure sink-mark …`.
pub fn run(args: &SinkMarkArgs) -> ExitCode {
    match &args.command {
        SinkMarkCommand::Show { path } => show(path),
        SinkMarkCommand::Reset { path, to, yes_i_know_this_reopens_fencing } => {
            reset(path, LeaderEpoch::from_stored(*to), *yes_i_know_this_reopens_fencing)
        }
    }
}

fn show(path: &Path) -> ExitCode {
    match read_mark(path) {
        Ok(epoch) => {
            println!("{}: high-water epoch {epoch}", path.display());
            ExitCode::SUCCESS
        }
        Err(error) => refused(&error),
    }
}

fn reset(path: &Path, to: LeaderEpoch, confirmed: bool) -> ExitCode {
    if !confirmed {
        eprintln!(
            "tenure sink-mark reset: {}: refusing without {CONFIRMATION_FLAG}: setting the mark to {to} \
             lets the sink admit any message stamped {to} or above, a deposed leader's included; \
             stop the sink and pass the flag to confirm (nothing was changed)",
            path.display()
        );
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    // A path that names no mark is a typo, not a mark to create: the real one would stay as it is.
    if !path.exists() {
        return refused(&SinkError::Missing { path: path.to_owned() });
    }
    match reset_mark(path, to) {
        Ok(previous) => {
            let was = match previous {
                PreviousMark::Epoch(epoch) => epoch.to_string(),
                PreviousMark::Missing => "a missing mark".to_owned(),
                PreviousMark::Corrupt { reason } => format!("a damaged mark ({reason})"),
            };
            println!("{}: high-water epoch reset from {was} to {to}", path.display());
            ExitCode::SUCCESS
        }
        Err(error) => refused(&error),
    }
}

/// One line naming the file; exit 2 for a missing or damaged mark, 1 otherwise (a sink holds
/// the mark, or the file system refused).
fn refused(error: &SinkError) -> ExitCode {
    match error {
        SinkError::Missing { path } => {
            eprintln!("tenure sink-mark: {}: no high-water mark file", path.display());
            ExitCode::from(EXIT_BAD_INPUT)
        }
        SinkError::Corrupt { .. } => {
            eprintln!("tenure sink-mark: {error}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
        SinkError::InUse { .. } => {
            eprintln!("tenure sink-mark: {error}; stop the sink first (nothing was changed)");
            ExitCode::from(EXIT_REFUSED)
        }
        _ => {
            eprintln!("tenure sink-mark: {error}");
            ExitCode::from(EXIT_REFUSED)
        }
    }
}
