//! `tenure replay SCENARIO [-o table|json]`.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use tenure_sim::replay::{Replay, ReplayReport};
use tenure_sim::scenario::parse_scenario;

use super::{EXIT_BAD_INPUT, Output, read_input};

pub fn run(path: &Path, output: Output) -> ExitCode {
    let text = match read_input(path) {
        Ok(text) => text,
        Err(code) => return code,
    };
    let file = path.display().to_string();
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
    print!("{printed}");
    if report.violations.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

/// JSON with sorted keys (serde_json's map is ordered), stable byte for byte.
pub fn render_json(report: &ReplayReport) -> String {
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
    let _ = writeln!(
        out,
        "{:<16} {:<28} {:<14} {:>9} {:>9} {:<7}",
        "POOL", "ADDRESS", "OWNER", "OWNER-EP", "CAPT-EP", "DESIRED"
    );
    for row in &report.ownership {
        let _ = writeln!(
            out,
            "{:<16} {:<28} {:<14} {:>9} {:>9} {:<7}",
            row.pool,
            row.address,
            row.owner.as_deref().unwrap_or("-"),
            row.ownership_epoch,
            row.capture_epoch,
            row.desired
        );
    }
    let _ = writeln!(out, "\n== actions");
    let _ = writeln!(
        out,
        "{:<8} {:<24} {:<22} {:<8} {:>5} {:>5} STATE",
        "NODE", "VERB", "ADDRESS", "HOLDER", "OWN", "CAPT"
    );
    for a in &report.actions {
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
    let _ = writeln!(out, "\n== provider holdings");
    for (provider, held) in &report.provider {
        if held.is_empty() {
            let _ = writeln!(out, "{provider}: nothing held");
        }
        for (address, nics) in held {
            let _ = writeln!(out, "{provider}: {address} on {}", nics.join(", "));
        }
    }
    for c in &report.conditions {
        let _ = writeln!(out, "\ncondition: pool {} {} ({} addresses)", c.pool, c.condition, c.addresses);
    }
    let _ = writeln!(out, "\n== violations: {}", report.violations.len());
    for v in &report.violations {
        let _ = writeln!(out, "  {v}");
    }
    out
}
