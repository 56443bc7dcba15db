//! What `--help` promises and the shell gets: every verb's "Examples:" parse as written, the
//! read-only verbs that talk to an agent do not offer `--token-file` (the mutating ones do), and
//! `tenure completion` prints a script for bash, zsh and fish (exit 0) and refuses any other
//! shell in one line (exit 2).

use std::process::{Command, Output};

use clap::{CommandFactory as _, Parser as _};
use tenure::cli::Cli;

/// The verbs that change something through a running agent: the only ones with `--token-file`.
const MUTATING: [&str; 6] = ["drain", "undrain", "approve", "desire", "undesire", "node"];

fn tenure(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(args)
        .env_remove("TENURE_ENDPOINT")
        .env_remove("TENURE_TOKEN_FILE")
        .output()
        .expect("the tenure binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Every verb a user runs: the path of each visible subcommand (`["store"]`, `["store",
/// "backup"]`: a parent's `--help` is read too), and its command.
fn verbs() -> Vec<(Vec<String>, clap::Command)> {
    fn walk(command: &clap::Command, path: &[String], out: &mut Vec<(Vec<String>, clap::Command)>) {
        for sub in command.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
            let mut path = path.to_vec();
            path.push(sub.get_name().to_owned());
            out.push((path.clone(), sub.clone()));
            walk(sub, &path, out);
        }
    }
    let mut out = Vec::new();
    walk(&Cli::command(), &[], &mut out);
    out
}

/// The example command lines of a help text: the lines after `Examples:` that are not `#`
/// comments, cut before a shell redirection or pipe.
fn example_lines(help: &str) -> Vec<Vec<String>> {
    let Some((_, examples)) = help.split_once("Examples:\n") else { return Vec::new() };
    examples
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            line.split_whitespace()
                .take_while(|word| !matches!(*word, ">" | ">>" | "|" | "&&" | ";"))
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

#[test]
fn every_verb_has_examples_that_parse_as_written() {
    let verbs = verbs();
    assert!(
        verbs.len() >= 20 && verbs.iter().any(|(path, _)| path == &["sink-mark"]),
        "the walk finds the verbs: {:?}",
        verbs.iter().map(|v| &v.0).collect::<Vec<_>>()
    );
    for (path, command) in verbs {
        let help = command.get_after_help().map(ToString::to_string).unwrap_or_default();
        let examples = example_lines(&help);
        assert!(!examples.is_empty(), "tenure {} --help has no examples: {help:?}", path.join(" "));
        for words in examples {
            assert_eq!(
                words[0],
                "tenure",
                "an example of `{}` is a tenure command: {words:?}",
                path.join(" ")
            );
            assert_eq!(
                &words[1..=path.len()],
                path.as_slice(),
                "an example in `tenure {} --help` is of that verb: {words:?}",
                path.join(" ")
            );
            if let Err(e) = Cli::try_parse_from(&words) {
                panic!("the example `{}` does not parse: {e}", words.join(" "));
            }
        }
    }
}

#[test]
fn the_examples_are_in_the_help_the_binary_prints() {
    let drain = tenure(&["drain", "--help"]);
    assert_eq!(drain.status.code(), Some(0), "{}", stderr(&drain));
    assert!(
        stdout(&drain).contains("Examples:\n  # Before maintenance: node a gives up its addresses\n  tenure drain a --token-file /etc/tenure/token"),
        "{}",
        stdout(&drain)
    );
    let backup = tenure(&["store", "backup", "-h"]);
    assert!(
        stdout(&backup).contains("tenure store backup /tmp/a.backup --config /etc/tenure/agent.yaml"),
        "{}",
        stdout(&backup)
    );
    for parent in ["store", "sink-mark"] {
        let help = tenure(&[parent, "--help"]);
        assert!(stdout(&help).contains("Examples:\n  # "), "tenure {parent} --help: {}", stdout(&help));
    }
}

#[test]
fn only_the_verbs_that_change_something_offer_a_token_file() {
    let mut read_only = Vec::new();
    for (path, _) in verbs() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = tenure(&args);
        assert_eq!(help.status.code(), Some(0), "tenure {}: {}", args.join(" "), stderr(&help));
        let text = stdout(&help);
        if !text.contains("--endpoint") {
            continue; // does not talk to an agent
        }
        let mutating = MUTATING.contains(&path[0].as_str());
        assert_eq!(text.contains("--token-file"), mutating, "tenure {}:\n{text}", args.join(" "));
        if !mutating {
            read_only.push(path.join(" "));
        }
    }
    assert!(
        read_only.contains(&"ownership".to_owned()) && read_only.contains(&"actions".to_owned()),
        "{read_only:?}"
    );
    // A read-only verb does not take the flag either, and reads no token file from the
    // environment: an unreadable one is not its concern (here: nothing answers, exit 1).
    let flag = tenure(&["ownership", "--token-file", "/etc/tenure/token"]);
    assert_eq!(flag.status.code(), Some(2), "{}", stderr(&flag));
    let env = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["actions", "--endpoint", "http://127.0.0.1:9"])
        .env("TENURE_TOKEN_FILE", "/nonexistent/tenure-token")
        .output()
        .expect("the tenure binary runs");
    assert_eq!(env.status.code(), Some(1), "{}", stderr(&env));
    assert!(
        stderr(&env).starts_with("tenure actions: no agent answers at http://127.0.0.1:9"),
        "{}",
        stderr(&env)
    );
    // A mutating verb still needs it.
    let drain = tenure(&["drain", "a", "--endpoint", "http://127.0.0.1:9"]);
    assert_eq!(drain.status.code(), Some(2), "{}", stderr(&drain));
    assert!(stderr(&drain).contains("--token-file FILE or TENURE_TOKEN_FILE"), "{}", stderr(&drain));
}

#[test]
fn completion_prints_a_script_per_shell_and_refuses_others_in_one_line() {
    // What each shell's script starts with or defines, and a verb and a flag it completes.
    for (shell, marker) in
        [("bash", "complete -F _tenure"), ("zsh", "#compdef tenure"), ("fish", "complete -c tenure")]
    {
        let script = tenure(&["completion", shell]);
        assert_eq!(script.status.code(), Some(0), "{shell}: {}", stderr(&script));
        let text = stdout(&script);
        assert!(text.contains(marker), "{shell}: {text}");
        assert!(text.contains("ownership") && text.contains("token-file"), "{shell}: {text}");
        assert!(stderr(&script).is_empty(), "{shell}: {}", stderr(&script));
    }
    let bad = tenure(&["completion", "tcsh"]);
    assert_eq!(bad.status.code(), Some(2));
    assert_eq!(stderr(&bad), "tenure completion: unknown shell `tcsh`; one of bash, zsh, fish\n");
    assert!(stdout(&bad).is_empty(), "{}", stdout(&bad));
}

/// The scripts offer the words an enum-valued flag takes (`actions --state`, `-o`), and leave
/// out the hidden `hook-gate` verb (the agent's, not an operator's).
#[test]
fn completion_offers_flag_values_and_hides_the_hidden_verb() {
    let bash = stdout(&tenure(&["completion", "bash"]));
    // The words offered after a flag, in the bash function of a verb.
    let offered = |verb: &str, flag: &str| -> String {
        let function = &bash[bash.find(&format!("tenure__subcmd__{verb})")).expect("the verb's function")..];
        let at = function.find(&format!("{flag})")).unwrap_or_else(|| panic!("{verb} {flag} completes"));
        function[at..].lines().nth(1).unwrap_or_default().to_owned()
    };
    assert!(offered("actions", "--state").contains("\"pending approved executed failed skipped\""));
    assert!(offered("actions", "--output").contains("\"table wide json yaml\""));
    assert!(offered("ownership", "-o").contains("\"table wide json yaml\""));
    let shells = &bash[bash.find("tenure__subcmd__completion)").expect("completion's function")..];
    assert!(shells.lines().nth(1).is_some_and(|l| l.contains("bash zsh fish")), "{}", &shells[..200]);
    for shell in ["bash", "zsh", "fish"] {
        let script = stdout(&tenure(&["completion", shell]));
        assert!(!script.contains("hook-gate") && !script.contains("hook__gate"), "{shell} lists hook-gate");
        assert!(script.contains("sink-mark"), "{shell}: the visible verbs stay");
    }
    let fish = stdout(&tenure(&["completion", "fish"]));
    let state =
        fish.find("using_subcommand actions\" -l state ").map(|at| &fish[at..]).expect("--state in fish");
    let words: String = state.lines().take(6).collect();
    assert!(
        words.contains("-a \"pending") && words.contains("skipped"),
        "fish offers --state's words: {words}"
    );
    // Offered, not enforced by clap: a bad word is still the verb's own one line.
    let bad = tenure(&["completion", "tcsh"]);
    assert_eq!(stderr(&bad), "tenure completion: unknown shell `tcsh`; one of bash, zsh, fish\n");
}
