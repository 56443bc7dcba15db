//! The `tenure` binary: parses the command line and runs it; everything else lives in the
//! library (`tenure::cli`).

use std::process::ExitCode;

use clap::Parser as _;

fn main() -> ExitCode {
    tenure::cli::run(tenure::cli::Cli::parse())
}
