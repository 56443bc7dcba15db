//! tenure (runtime): the only crate of the workspace with tokio, processes, files and SDKs around
//! the pure core (`tenure-core`). The `tenure` binary is a thin `main` over this library, so tests
//! can start what the binary starts in-process.
//!
//! # Layout
//!
//! - [`cli`] — the command line of SPEC 10: parsing ([`cli::Cli`]) and dispatch ([`cli::run`]),
//!   one file per subcommand, and the exit codes.

pub mod cli;
