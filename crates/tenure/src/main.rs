//! The `tenure` binary: parses the command line and runs it; everything else lives in the
//! library (`tenure::cli`).

use std::process::ExitCode;

use clap::Parser as _;

/// mimalloc, not glibc's malloc: the agent's work is many small, short-lived allocations (actions,
/// journal changes, log records), where it is faster and returns memory sooner
/// (docs/benchmarks.md, "The allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    tenure::cli::run(tenure::cli::Cli::parse())
}
