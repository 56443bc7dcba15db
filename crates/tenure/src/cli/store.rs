//! `tenure store backup FILE` and `tenure store restore FILE` (the embedded store's backups).
//!
//! Until the agent's config is wired here, the store is named by `--store-dir DIR
//! --identity-file FILE`. Exit 0 with a one-line summary; 1 when the store refuses (locked,
//! behind, another cluster, …); 2 on bad arguments or a bad backup file.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::EXIT_BAD_INPUT;
use crate::store::{self, EmbeddedStore, RESTORE_MARGIN_DEFAULT, StoreError};

/// Exit code when the store refuses.
const EXIT_REFUSED: u8 = 1;

/// `tenure store …`.
#[derive(Debug, Args)]
pub struct StoreArgs {
    #[command(subcommand)]
    command: StoreCommand,
}

/// Where the store is.
#[derive(Debug, Args)]
struct StoreLocation {
    /// The store directory (`store.path` of the agent config).
    #[arg(long, value_name = "DIR")]
    store_dir: PathBuf,
    /// The identity file (`identityFile` of the agent config).
    #[arg(long, value_name = "FILE")]
    identity_file: PathBuf,
}

#[derive(Debug, Subcommand)]
enum StoreCommand {
    /// Write a consistent backup of a stopped agent's store to FILE (a running agent is backed
    /// up through its API).
    Backup {
        /// The backup file to write (replaced atomically).
        file: PathBuf,
        #[command(flatten)]
        location: StoreLocation,
    },
    /// Restore a backup into a stopped agent's store, raising the log index and every token by
    /// a margin above anything issued since the backup; the current store is moved aside.
    Restore {
        /// The backup file.
        file: PathBuf,
        #[command(flatten)]
        location: StoreLocation,
        /// How far above the highest values known the log index and every token are raised.
        #[arg(long, value_name = "N", default_value_t = RESTORE_MARGIN_DEFAULT,
              value_parser = clap::value_parser!(u64).range(1..))]
        margin: u64,
    },
}

/// Runs `tenure store …`.
pub fn run(args: &StoreArgs) -> ExitCode {
    match &args.command {
        StoreCommand::Backup { file, location } => backup(file, location),
        StoreCommand::Restore { file, location, margin } => restore(file, location, *margin),
    }
}

fn backup(file: &std::path::Path, location: &StoreLocation) -> ExitCode {
    let store = match EmbeddedStore::open(&location.store_dir, &location.identity_file) {
        Ok(store) => store,
        Err(StoreError::Locked { dir, holder }) => {
            eprintln!(
                "tenure store backup: store {} is held by {holder}; a running agent is backed up through its API",
                dir.display()
            );
            return ExitCode::from(EXIT_REFUSED);
        }
        Err(e) => return refused("backup", &e),
    };
    let result = store.backup_to(file);
    let closed = store.close();
    match (result, closed) {
        (Ok(summary), Ok(())) => {
            println!(
                "backed up cluster {}: {} log records (highest index {}, highest token {}), {} journal entries of {} nodes to {}",
                summary.cluster_id,
                summary.log_records,
                summary.highest_index,
                summary.highest_token,
                summary.journal_entries,
                summary.nodes,
                summary.path.display()
            );
            ExitCode::SUCCESS
        }
        (Err(e), _) | (_, Err(e)) => refused("backup", &e),
    }
}

fn restore(file: &std::path::Path, location: &StoreLocation, margin: u64) -> ExitCode {
    match store::restore(file, &location.store_dir, &location.identity_file, margin) {
        Ok(summary) => {
            let aside = summary.moved_aside.map_or_else(
                || "there was no store before".to_owned(),
                |p| format!("the store before is kept at {}", p.display()),
            );
            println!(
                "restored cluster {} from {}: {} log records up to index {}, {} journal entries; the log continues at index {} \
                 and every token is raised by {}; {aside}",
                summary.cluster_id,
                file.display(),
                summary.log_records,
                summary.backup_highest_index,
                summary.journal_entries,
                summary.index_from,
                summary.by
            );
            ExitCode::SUCCESS
        }
        Err(e) => refused("restore", &e),
    }
}

/// Prints the error on one line; exit 2 for a bad backup file, 1 for a refusal.
fn refused(command: &str, e: &StoreError) -> ExitCode {
    eprintln!("tenure store {command}: {e}");
    let bad_input = matches!(e, StoreError::BadBackup { .. })
        || matches!(e, StoreError::Io { what: "open", .. } if command == "restore");
    ExitCode::from(if bad_input { EXIT_BAD_INPUT } else { EXIT_REFUSED })
}
