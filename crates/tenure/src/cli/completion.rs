//! `tenure completion bash|zsh|fish`: the shell's completion script for every verb and flag, on
//! stdout (clap_complete, from the same definition the command line is parsed with). Exit 0; 2
//! with one line naming the shells for any other name.

use std::io::Write as _;
use std::process::ExitCode;

use clap::{Args, CommandFactory as _};
use clap_complete::Shell;

use super::{Cli, EXIT_BAD_INPUT};

/// The shells a script is made for, by the name the verb takes.
const SHELLS: [(&str, Shell); 3] = [("bash", Shell::Bash), ("zsh", Shell::Zsh), ("fish", Shell::Fish)];

/// `tenure completion SHELL`.
#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// bash, zsh or fish.
    #[arg(value_name = "SHELL")]
    shell: String,
}

/// Prints the completion script of `args.shell`, or a one-line error.
pub fn run(args: &CompletionArgs) -> ExitCode {
    let Some((_, shell)) = SHELLS.iter().find(|(name, _)| *name == args.shell) else {
        let names: Vec<&str> = SHELLS.iter().map(|(name, _)| *name).collect();
        eprintln!("tenure completion: unknown shell `{}`; one of {}", args.shell, names.join(", "));
        return ExitCode::from(EXIT_BAD_INPUT);
    };
    let mut script = Vec::new();
    clap_complete::generate(*shell, &mut Cli::command(), "tenure", &mut script);
    if let Err(e) = std::io::stdout().lock().write_all(&script) {
        eprintln!("tenure completion: cannot write the script: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
