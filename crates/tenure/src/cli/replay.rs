//! `tenure replay FILE [-o table|json] [--config AGENT.yaml] [--plot OUT.svg]`.
//!
//! FILE is a scenario (SPEC 11), or a store backup (`tenure store backup`), told apart by the
//! first line: a backup's is its JSON header. A scenario runs through the real core and the
//! simulated providers; a backup's log is projected as the agent projected it
//! (`replay_backup.rs`). Both print the same sections — timeline, ownership, actions, provider
//! holdings, conditions, violations — in a table or as one JSON document with sorted keys.

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Serialize;
use tenure_core::scenario::parse_scenario;
use tenure_sim::replay::{ActionRow, ConditionRow, OwnershipRow, Replay, ReplayReport};

use super::{EXIT_BAD_INPUT, Output, read_input};

/// Bytes of a file's start read to tell a backup from a scenario (the header names its format
/// in its first few dozen bytes).
const SNIFF_BYTES_MAX: u64 = 4_096;

/// What `tenure replay` was asked, besides the file.
#[derive(Clone, Debug, Default)]
pub struct ReplayOptions {
    /// The agent config a backup's log was written over (its nodes and providers).
    pub config: Option<PathBuf>,
    /// Where to draw a backup's timeline as SVG.
    pub plot: Option<PathBuf>,
}

pub fn run(path: &Path, output: Output, options: &ReplayOptions) -> ExitCode {
    match is_backup(path) {
        Ok(true) => return super::replay_backup::run(path, output, options),
        Ok(false) => {}
        Err(code) => return code,
    }
    let file = path.display().to_string();
    for (flag, given) in [("--config", options.config.is_some()), ("--plot", options.plot.is_some())] {
        if given {
            eprintln!(
                "tenure replay: {flag} is for a store backup; {file} is not one (a backup is a regular \
                 file that starts with its header line; a scenario has its nodes and providers in it, and \
                 takes no {flag})"
            );
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    }
    let text = match read_input(path) {
        Ok(text) => text,
        Err(code) => return code,
    };
    let scenario = match parse_scenario(&text) {
        Ok(s) => s,
        Err(errors) => {
            for e in errors {
                eprintln!("{}", e.render(&file));
            }
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let (report, narration) = match Replay::run(&scenario, output == Output::Table) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{}", e.error.render(&file));
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let printed = match output {
        Output::Json => render_json(&report),
        Output::Table => render_table(&report, &narration),
    };
    super::print_out(&printed);
    if report.violations.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

/// Whether the file at `path` starts with a backup's header line.
fn is_backup(path: &Path) -> Result<bool, ExitCode> {
    // A pipe (`tenure replay <(…)`) can be read once: it is read as a scenario, whole.
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return Ok(false);
    }
    let mut start = Vec::new();
    std::fs::File::open(path).and_then(|file| file.take(SNIFF_BYTES_MAX).read_to_end(&mut start)).map_err(
        |e| {
            eprintln!("{}: cannot read: {e}", path.display());
            ExitCode::from(EXIT_BAD_INPUT)
        },
    )?;
    let start = String::from_utf8_lossy(&start);
    Ok(crate::store::is_backup_header(start.lines().next().unwrap_or_default()))
}

/// JSON with sorted keys (serde_json's map is ordered), stable byte for byte.
pub fn render_json(report: &impl Serialize) -> String {
    let value = serde_json::to_value(report).expect("the report is plain data");
    let mut text = serde_json::to_string_pretty(&value).expect("a JSON value always prints");
    text.push('\n');
    text
}

fn render_table(report: &ReplayReport, narration: &[String]) -> String {
    let mut out = String::new();
    out.push_str("== timeline\n");
    for line in narration {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "\n== ownership at stream time {} ms", report.stream_time);
    ownership_section(&mut out, &report.ownership);
    actions_section(&mut out, &report.actions);
    let _ = writeln!(out, "\n== provider holdings");
    for (provider, held) in &report.provider {
        if held.is_empty() {
            let _ = writeln!(out, "{provider}: nothing held");
        }
        for (address, nics) in held {
            let _ = writeln!(out, "{provider}: {address} on {}", nics.join(", "));
        }
    }
    conditions_and_violations(&mut out, &report.conditions, &report.violations);
    out
}

/// The ownership table; with the phase and the NICs holding each address when the rows carry
/// them (a backup's log has its nodes' results), as `tenure ownership` shows them.
pub(super) fn ownership_section(out: &mut String, rows: &[OwnershipRow]) {
    let with_status = rows.iter().any(|r| r.phase.is_some());
    let _ = write!(
        out,
        "{:<16} {:<28} {:<14} {:>9} {:>9} {:<7}",
        "POOL", "ADDRESS", "OWNER", "OWNER-EP", "CAPT-EP", "DESIRED"
    );
    if with_status {
        let _ = write!(out, " {:<16} NICS", "PHASE");
    }
    out.push('\n');
    for row in rows {
        let _ = write!(
            out,
            "{:<16} {:<28} {:<14} {:>9} {:>9} {:<7}",
            row.pool,
            row.address,
            row.owner.as_deref().unwrap_or("-"),
            row.ownership_epoch,
            row.capture_epoch,
            row.desired
        );
        if with_status {
            let nics = match row.nics.as_deref() {
                None => "<unknown>".to_owned(),
                Some([]) => "<none>".to_owned(),
                Some(nics) => nics.join(","),
            };
            let _ = write!(out, " {:<16} {nics}", row.phase.as_deref().unwrap_or("<unknown>"));
        }
        out.push('\n');
    }
}

/// The actions table.
pub(super) fn actions_section(out: &mut String, actions: &[ActionRow]) {
    let _ = writeln!(out, "\n== actions");
    let _ = writeln!(
        out,
        "{:<8} {:<24} {:<22} {:<8} {:>5} {:>5} STATE",
        "NODE", "VERB", "ADDRESS", "HOLDER", "OWN", "CAPT"
    );
    for a in actions {
        let state = match &a.reason {
            Some(r) => format!("{} ({r})", a.state),
            None => a.state.clone(),
        };
        let _ = writeln!(
            out,
            "{:<8} {:<24} {:<22} {:<8} {:>5} {:>5} {state}",
            a.node,
            a.verb,
            format!("{}/{}", a.pool, a.address),
            a.holder,
            a.ownership_epoch,
            a.capture_epoch
        );
    }
}

/// The pool conditions, then the violations.
pub(super) fn conditions_and_violations(
    out: &mut String,
    conditions: &[ConditionRow],
    violations: &[String],
) {
    for c in conditions {
        let _ = writeln!(out, "\ncondition: pool {} {} ({} addresses)", c.pool, c.condition, c.addresses);
    }
    let _ = writeln!(out, "\n== violations: {}", violations.len());
    for v in violations {
        let _ = writeln!(out, "  {v}");
    }
}
