//! `tenure completion bash|zsh|fish`: the shell's completion script for every verb and flag, on
//! stdout (clap_complete, from the same definition the command line is parsed with, its hidden
//! verbs left out: `hook-gate` is the agent's, not an operator's). Flags that take one of a few
//! words offer them: `-o` by its value enum, the others (`actions --state`, `elect --backend`,
//! `sim --mode`, `sim -o`, this verb's SHELL) through [`Offered`], which keeps their one-line
//! errors. Exit 0; 2 with one line naming the shells for any other name.

use std::ffi::OsStr;
use std::io::Write as _;
use std::process::ExitCode;

use clap::builder::{PossibleValue, StringValueParser, TypedValueParser};
use clap::{Args, CommandFactory as _};
use clap_complete::Shell;

use super::{Cli, EXIT_BAD_INPUT};

/// The shells a script is made for, by the name the verb takes.
const SHELLS: [(&str, Shell); 3] = [("bash", Shell::Bash), ("zsh", Shell::Zsh), ("fish", Shell::Fish)];

/// `tenure completion SHELL`.
#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// bash, zsh or fish.
    #[arg(value_name = "SHELL", value_parser = Offered(&["bash", "zsh", "fish"]))]
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
    clap_complete::generate(*shell, &mut without_hidden_verbs(Cli::command()), "tenure", &mut script);
    if let Err(e) = std::io::stdout().lock().write_all(&script) {
        eprintln!("tenure completion: cannot write the script: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// The command line without its hidden verbs (clap_complete lists every subcommand, hidden or
/// not): the root's arguments and visible subcommands, as defined.
fn without_hidden_verbs(root: clap::Command) -> clap::Command {
    let visible: Vec<clap::Command> = root.get_subcommands().filter(|c| !c.is_hide_set()).cloned().collect();
    let command = clap::Command::new("tenure")
        .version(env!("CARGO_PKG_VERSION"))
        .args(root.get_arguments().cloned())
        .subcommands(visible)
        .subcommand_required(true);
    match root.get_about() {
        Some(about) => command.about(about.clone()),
        None => command,
    }
}

/// A string flag's words, offered to completion (and listed in `--help`) but not enforced by
/// clap: the verb checks the value itself and refuses a bad one in its own one line.
#[derive(Clone, Debug)]
pub struct Offered(pub &'static [&'static str]);

impl TypedValueParser for Offered {
    type Value = String;

    fn parse_ref(
        &self,
        command: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<String, clap::Error> {
        StringValueParser::new().parse_ref(command, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(self.0.iter().map(|word| PossibleValue::new(*word))))
    }
}
