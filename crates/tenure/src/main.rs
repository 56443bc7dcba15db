//! The `tenure` binary: the command-line interface of SPEC 10.

mod cli;

use std::process::ExitCode;

use clap::Parser as _;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    cli::run(args)
}
