//! `tenure replay BACKUP --config AGENT.yaml [-o table|json] [--plot OUT.svg]` (and
//! `tenure sim --backup BACKUP --config AGENT.yaml --plot OUT.svg`, the same): an incident's store
//! backup, replayed offline.
//!
//! The backup is read by the store's one reader ([`crate::store::BackupReader`]: a file cut short
//! or corrupt is one line naming it and the line, exit 2). Its log is projected over the registry
//! the agent projected it over — the config's nodes, peers and providers
//! ([`crate::agent::runner::registry`]): a backup holds the log and the journals, not the
//! configuration, and the map depends on the nodes' priorities, capacities and placement groups.
//! Then [`tenure_sim::recorded`] folds it through the core's history and checks what a recorded
//! log can show; this file prints it: the timeline as `tenure history` prints it, the ownership
//! with phases and NICs, the journals' actions, a line saying provider holdings are not in a
//! backup, conditions and violations. Exit 0 without violations, 1 with, 2 on bad input.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use serde_json::json;
use tenure_core::fleet_spec::fleet_difference;
use tenure_core::journal::JournalEntry;
use tenure_core::model::ProviderSpec;
use tenure_sim::plot::Timeline;
use tenure_sim::recorded::{Record, RecordedLog, RecordedReport, recorded_addresses, replay_recorded};

use super::history::{history_table, utc_text};
use super::remote::Rendered;
use super::replay::{
    ReplayOptions, actions_section, conditions_and_violations, ownership_section, render_json,
};
use super::{EXIT_BAD_INPUT, Output};
use crate::store::{BackupHeader, BackupReader, BackupRecord};

/// What the table says instead of provider holdings.
const NO_HOLDINGS: &str = "not in a backup: a backup holds the log and the journals, not what the providers hold \
                           (NICS above is what the nodes reported; ask the provider for the rest)";

/// A backup read whole: its header, its log (with each record's line in the file) and journals.
struct ReadBackup {
    header: BackupHeader,
    records: Vec<Record>,
    lines: Vec<u64>,
    journals: BTreeMap<String, Vec<JournalEntry>>,
}

pub fn run(path: &Path, output: Output, options: &ReplayOptions) -> ExitCode {
    let file = path.display().to_string();
    let Some(config_path) = &options.config else {
        eprintln!(
            "tenure replay: {file} is a store backup: give --config AGENT.yaml, the config of the agent that \
             wrote it (a backup holds the log, not the nodes and providers it was projected over)"
        );
        return ExitCode::from(EXIT_BAD_INPUT);
    };
    let config = match crate::config::load_config(config_path) {
        Ok(config) => config,
        Err(lines) => {
            for line in lines {
                eprintln!("{line}");
            }
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let backup = match read(path) {
        Ok(backup) => backup,
        Err(e) => {
            eprintln!("tenure replay: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    // The map depends on the nodes' priorities, capacities, placement groups and NICs: a config
    // edited since the backup would invent violations (or hide some). The agent records its fleet
    // in its backups; one taken without a config does not.
    match &backup.header.fleet {
        Some(recorded) => {
            if let Some((theirs, ours)) = fleet_difference(recorded, &config.fleet_text()) {
                eprintln!(
                    "tenure replay: {} is not the config of the agent that wrote {file}: the backup has `{theirs}`, \
                     the config `{ours}` (another fleet projects the log otherwise)",
                    config_path.display()
                );
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        }
        None => eprintln!(
            "tenure replay: note: {file} does not record its agent's nodes (a backup taken with --store-dir \
             alone, or by an older tenure): it is projected over {}'s nodes as they are now",
            config_path.display()
        ),
    }
    let providers: Vec<ProviderSpec> =
        config.providers.iter().map(|p| ProviderSpec { name: p.name.clone(), kind: p.kind }).collect();
    let registry = crate::agent::runner::registry(&config.nodes, &config.peers, &providers);
    let mut timeline = options.plot.as_ref().map(|_| {
        let nodes = registry.nodes().iter().map(|n| (n.spec.name.clone(), n.spec.nic.clone())).collect();
        let origin_ms = backup.records.first().map_or(0, |r| r.event.at_ms);
        Timeline::over(recorded_addresses(&backup.records), nodes).described(
            origin_ms,
            "the backup's pools",
            "event",
            "by the nodes' reports (results, inventories)",
        )
    });
    let log = RecordedLog { registry, records: backup.records, journals: backup.journals };
    let report = match replay_recorded(&log, timeline.as_mut()) {
        Ok(report) => report,
        Err(e) => {
            // The refused record's line; a record the file does not hold (none: the index is in
            // the message) names the file alone.
            let place = log
                .records
                .iter()
                .position(|r| r.index == e.index)
                .map_or_else(|| file.clone(), |i| format!("{file}:{}", backup.lines[i]));
            eprintln!(
                "{place}: {e} (is {} the config of the agent that wrote this backup?)",
                config_path.display()
            );
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    if let (Some(plot), Some(timeline)) = (&options.plot, &timeline) {
        let origin = log.records.first().map_or(0, |r| r.event.at_ms);
        let title = format!(
            "backup {file} (cluster {}), stream time from {} — {} violations",
            backup.header.cluster_id,
            utc_text(origin),
            report.violations.len()
        );
        if let Err(e) = std::fs::write(plot, timeline.to_svg(&title)) {
            eprintln!("tenure replay: --plot: cannot write {}: {e}", plot.display());
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    }
    let printed = match output {
        Output::Json => render_json(&report),
        Output::Table => render_table(&file, &backup.header, &report),
    };
    super::print_out(&printed);
    if report.violations.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

/// Reads the whole backup (marks and counters are not needed to replay it).
fn read(path: &Path) -> Result<ReadBackup, crate::store::StoreError> {
    let mut reader = BackupReader::open(path)?;
    let mut records = Vec::new();
    let mut lines = Vec::new();
    let mut journals: BTreeMap<String, Vec<JournalEntry>> = BTreeMap::new();
    while let Some(record) = reader.next_record()? {
        match record {
            BackupRecord::Log { index, event, .. } => {
                records.push(Record { index, event });
                lines.push(reader.line());
            }
            BackupRecord::Entry { node, entry, .. } => journals.entry(node).or_default().push(entry),
            BackupRecord::Mark { .. } | BackupRecord::Counters { .. } => {}
        }
    }
    Ok(ReadBackup { header: reader.header().clone(), records, lines, journals })
}

fn render_table(file: &str, header: &BackupHeader, report: &RecordedReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "== backup {file}: cluster {}, highest log index {}, taken {}",
        header.cluster_id,
        header.highest_index,
        utc_text(header.created_at_ms)
    );
    out.push_str("\n== timeline\n");
    let history = json!({"history": report.timeline, "reachesBackTo": report.reaches_back_to});
    match history_table(&history) {
        Ok(Rendered::Out(text)) => out.push_str(&text),
        Ok(Rendered::Empty) => out.push_str("(no ownership change, epoch move, approval or result)\n"),
        Err(e) => {
            let _ = writeln!(out, "(the timeline does not print: {e})");
        }
    }
    let _ = writeln!(
        out,
        "\n== ownership at stream time {} ({} ms)",
        utc_text(report.stream_time),
        report.stream_time
    );
    ownership_section(&mut out, &report.ownership);
    actions_section(&mut out, &report.actions);
    let _ = writeln!(out, "\n== provider holdings\n{NO_HOLDINGS}");
    if report.unjudged > 0 {
        let _ = writeln!(
            out,
            "\n{} executed action(s) not judged for staleness: no attempt recorded, or gated at a stream time \
             no record of this log has",
            report.unjudged
        );
    }
    conditions_and_violations(&mut out, &report.conditions, &report.violations);
    out
}
