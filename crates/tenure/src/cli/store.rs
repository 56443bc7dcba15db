//! `tenure store backup FILE` and `tenure store restore FILE` (the embedded store's backups).
//!
//! The store is named by the agent's config (`--config FILE`: `store.path` and `identityFile`),
//! or directly by `--store-dir DIR --identity-file FILE`. A backup of a store that a running agent
//! holds goes through that agent's API (`POST /v1/store/backup` at the config's `listen`, with its
//! `apiTokenFile`): a consistent snapshot taken while the agent works. Exit 0 with a one-line
//! summary; 1 when the store refuses (locked, behind, another cluster, …) or the agent does not
//! answer; 2 on bad arguments, a bad config or a bad backup file.

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
    /// The agent config naming the store (`store.path`, `identityFile`, and for a running agent
    /// `listen` and `apiTokenFile`).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["store_dir", "identity_file"],
          required_unless_present_all = ["store_dir", "identity_file"])]
    config: Option<PathBuf>,
    /// The store directory (`store.path` of the agent config).
    #[arg(long, value_name = "DIR", requires = "identity_file")]
    store_dir: Option<PathBuf>,
    /// The identity file (`identityFile` of the agent config).
    #[arg(long, value_name = "FILE", requires = "store_dir")]
    identity_file: Option<PathBuf>,
}

/// The store's paths, and the config they came from, if any.
struct Located {
    store_dir: PathBuf,
    identity_file: PathBuf,
    config: Option<crate::config::AgentConfig>,
}

fn locate(location: &StoreLocation) -> Result<Located, ExitCode> {
    if let Some(path) = &location.config {
        let config = crate::config::load_config(path).map_err(|lines| {
            for line in lines {
                eprintln!("{line}");
            }
            ExitCode::from(EXIT_BAD_INPUT)
        })?;
        let crate::config::StoreConfig::Embedded { path: store_dir } = &config.store else {
            eprintln!(
                "tenure store: {}: the store is not embedded; etcd has its own backups",
                path.display()
            );
            return Err(ExitCode::from(EXIT_BAD_INPUT));
        };
        return Ok(Located {
            store_dir: store_dir.clone(),
            identity_file: config.identity_file.clone(),
            config: Some(config),
        });
    }
    match (&location.store_dir, &location.identity_file) {
        (Some(store_dir), Some(identity_file)) => {
            Ok(Located { store_dir: store_dir.clone(), identity_file: identity_file.clone(), config: None })
        }
        _ => {
            eprintln!("tenure store: give --config FILE, or --store-dir DIR and --identity-file FILE");
            Err(ExitCode::from(EXIT_BAD_INPUT))
        }
    }
}

#[derive(Debug, Subcommand)]
enum StoreCommand {
    /// Write a consistent backup of a stopped agent's store to FILE (a running agent is backed
    /// up through its API).
    #[command(after_help = super::examples::STORE_BACKUP)]
    Backup {
        /// The backup file to write (replaced atomically).
        file: PathBuf,
        #[command(flatten)]
        location: StoreLocation,
    },
    /// Restore a backup into a stopped agent's store, raising the log index and every token by
    /// a margin above anything issued since the backup; the current store is moved aside.
    #[command(after_help = super::examples::STORE_RESTORE)]
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
        StoreCommand::Backup { file, location } => match locate(location) {
            Ok(located) => backup(file, &located),
            Err(code) => code,
        },
        StoreCommand::Restore { file, location, margin } => match locate(location) {
            Ok(located) => restore(file, &located, *margin),
            Err(code) => code,
        },
    }
}

fn backup(file: &std::path::Path, location: &Located) -> ExitCode {
    // Only an existing store is backed up: a mistyped path must not create a new cluster.
    if !location.store_dir.join(store::STORE_FILE_NAME).exists() {
        eprintln!("tenure store backup: {}: no store there", location.store_dir.display());
        return ExitCode::from(EXIT_REFUSED);
    }
    let store = match EmbeddedStore::open(&location.store_dir, &location.identity_file) {
        Ok(store) => store,
        Err(StoreError::Locked { dir, holder }) => {
            let Some(config) = &location.config else {
                eprintln!(
                    "tenure store backup: store {} is locked by {holder}; back a running agent up with --config (through its API)",
                    dir.display()
                );
                return ExitCode::from(EXIT_REFUSED);
            };
            return backup_through_api(file, config);
        }
        Err(e) => return refused("backup", &e),
    };
    if let Some(config) = &location.config {
        store.set_fleet(config.fleet_text());
    }
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

/// Asks the running agent of `config` for a backup and writes it to `file` atomically.
fn backup_through_api(file: &std::path::Path, config: &crate::config::AgentConfig) -> ExitCode {
    let token = match &config.api_token_file {
        Some(path) => match crate::api::ApiToken::from_file(path) {
            Ok(token) => Some(token.secret().to_owned()),
            Err(e) => {
                eprintln!("tenure store backup: {e}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        },
        None => {
            eprintln!(
                "tenure store backup: the agent holds the store and its config has no apiTokenFile to ask it with"
            );
            return ExitCode::from(EXIT_REFUSED);
        }
    };
    let endpoint = format!("http://{}", config.listen);
    let answer = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|runtime| {
            runtime.block_on(async {
                let client = super::client::Client::new(&endpoint, token, None).map_err(|e| e.to_string())?;
                client
                    .call_within(
                        http::Method::POST,
                        "/v1/store/backup",
                        None,
                        crate::agent::request::BACKUP_TIMEOUT,
                    )
                    .await
                    .map_err(|e| e.to_string())
            })
        });
    let answer = match answer {
        Ok(answer) if answer.status.is_success() => answer,
        Ok(answer) => {
            eprintln!(
                "tenure store backup: the agent at {endpoint} refused ({}): {}",
                answer.status.as_u16(),
                String::from_utf8_lossy(&answer.body).trim()
            );
            return ExitCode::from(EXIT_REFUSED);
        }
        Err(e) => {
            eprintln!("tenure store backup: {e}");
            return ExitCode::from(EXIT_REFUSED);
        }
    };
    match store::write_file_atomically(file, &answer.body) {
        Ok(()) => {
            println!(
                "backed up the running agent's store through {endpoint}: {} bytes to {}",
                answer.body.len(),
                file.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tenure store backup: {e}");
            ExitCode::from(EXIT_REFUSED)
        }
    }
}

fn restore(file: &std::path::Path, location: &Located, margin: u64) -> ExitCode {
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
