//! What a run prints: per seed, a JSON line or, for a failing seed, `SEED=<s>` with the command
//! that reproduces it; then the summary, whose last line is `seeds=N violations=V` followed by
//! the failing seeds.

use std::collections::BTreeMap;

use crate::checker::ViolationKind;
use crate::config::{Fault, SimConfig};
use crate::world::SeedReport;

/// Failing seeds print at most this many of their kept unexpected violations.
pub const VIOLATIONS_PRINTED_MAX: usize = 5;

/// The whole stdout of a run. Every violation counts, kept for display or not.
#[must_use]
pub fn render(config: &SimConfig, reports: &[SeedReport], json: bool) -> String {
    let mut out = String::new();
    let mut predicted: BTreeMap<ViolationKind, u64> = BTreeMap::new();
    let mut unexpected = 0u64;
    let mut failing = Vec::new();
    for r in reports {
        // A seed that did not converge counts at least once, even without a recorded violation.
        unexpected += r.unexpected_count().max(u64::from(r.converged_after_rounds.is_none()));
        for (kind, count) in r.violation_counts.iter().filter(|(k, _)| k.predicted_in(config.mode)) {
            *predicted.entry(*kind).or_default() += count;
        }
        if json {
            out.push_str(&serde_json::to_string(r).expect("a report is plain data"));
            out.push('\n');
        }
        if r.failed() {
            failing.push(r.seed);
            if !json {
                out.push_str(&failure(config, r));
            }
        }
    }
    if !json {
        let calls: u64 = reports.iter().map(|r| r.provider_calls).sum();
        let events: u64 = reports.iter().map(|r| r.events).sum();
        let recaptures: u64 = reports.iter().map(|r| r.recaptures).sum();
        let in_doubt: u64 = reports.iter().map(|r| r.calls_in_doubt).sum();
        out.push_str(&format!(
            "mode={} nodes={} addresses={} faults={}: {events} events, {calls} provider calls ({in_doubt} in doubt), \
             {recaptures} re-captures{rollbacks}\n",
            config.mode,
            config.nodes,
            config.addresses,
            config.faults,
            rollbacks = gone_back(config, reports)
        ));
        let total: u64 = predicted.values().sum();
        if total > 0 {
            out.push_str(&format!(
                "predicted violations (the documented limit this mode demonstrates): {total} ({})\n",
                per_kind(&predicted)
            ));
        }
    }
    out.push_str(&format!("seeds={} violations={unexpected}", reports.len()));
    if !failing.is_empty() {
        let list: Vec<String> = failing.iter().map(u64::to_string).collect();
        out.push_str(&format!(" failing: {}", list.join(" ")));
    }
    out.push('\n');
    out
}

/// With `store-rollback`: how often the log went back, and how many nodes refused it.
fn gone_back(config: &SimConfig, reports: &[SeedReport]) -> String {
    if !config.faults.has(Fault::StoreRollback) {
        return String::new();
    }
    let rollbacks: u64 = reports.iter().map(|r| r.rollbacks).sum();
    let refusals: u64 = reports.iter().map(|r| r.refusals).sum();
    format!(", the log went back {rollbacks} times ({refusals} node refusals)")
}

/// A failing seed: `SEED=<s>`, the command that reproduces it, its unexpected counts per kind
/// and the first of them.
fn failure(config: &SimConfig, r: &SeedReport) -> String {
    let mut out = format!("SEED={}\n  reproduce: {}\n", r.seed, config.reproduce_command(r.seed));
    let unexpected: BTreeMap<ViolationKind, u64> = r
        .violation_counts
        .iter()
        .filter(|(k, _)| !k.predicted_in(config.mode))
        .map(|(k, n)| (*k, *n))
        .collect();
    if !unexpected.is_empty() {
        out.push_str(&format!("  unexpected: {}\n", per_kind(&unexpected)));
    }
    for v in r.unexpected().take(VIOLATIONS_PRINTED_MAX) {
        out.push_str(&format!("  {} at step {}: {}\n", v.kind, v.step, v.detail));
    }
    if r.converged_after_rounds.is_none() {
        out.push_str("  no convergence within the liveness bound\n");
    }
    out
}

/// `kind count, kind count` in kind order.
fn per_kind(counts: &BTreeMap<ViolationKind, u64>) -> String {
    let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::Violations;
    use crate::config::Mode;
    use crate::world::VIOLATIONS_KEPT_PER_KIND_MAX;

    /// A seed's report as the world builds it: non-convergence is itself a violation.
    fn report(seed: u64, mode: Mode, kinds: &[(ViolationKind, u64)], converged: Option<u32>) -> SeedReport {
        let mut seen = Violations::new(VIOLATIONS_KEPT_PER_KIND_MAX);
        let mut step = 0;
        for (kind, count) in kinds {
            for _ in 0..*count {
                step += 1;
                seen.record(step, *kind, format!("{kind} number {step}"));
            }
        }
        if converged.is_none() {
            seen.record(step + 1, ViolationKind::NoConvergence, "still moving".into());
        }
        let mut report = SeedReport::new(mode, seen, converged);
        report.seed = seed;
        report.events = 1;
        report.provider_calls = 1;
        report
    }

    #[test]
    fn failing_seeds_print_their_reproduction_and_the_last_line_lists_them() {
        let config = SimConfig::default();
        let reports = vec![
            report(1, Mode::Cloud, &[], Some(3)),
            report(2, Mode::Cloud, &[(ViolationKind::StaleExecution, 1)], Some(3)),
            report(3, Mode::Cloud, &[], None),
        ];
        let text = render(&config, &reports, false);
        assert!(text.contains(
            "SEED=2\n  reproduce: tenure sim --seed 2 --nodes 5 --addresses 100 --faults all --mode cloud\n"
        ));
        assert!(text.contains("SEED=3\n"));
        assert!(!text.contains("SEED=1"));
        assert_eq!(text.lines().last(), Some("seeds=3 violations=2 failing: 2 3"));
        let json = render(&config, &reports, true);
        assert_eq!(json.lines().count(), 4);
        assert_eq!(json.lines().last(), Some("seeds=3 violations=2 failing: 2 3"));
    }

    #[test]
    fn an_unexpected_violation_after_many_predicted_ones_fails_the_seed() {
        let config = SimConfig { mode: Mode::PausedCall, ..SimConfig::default() };
        let many = [(ViolationKind::StaleExecution, 100), (ViolationKind::DoubleAssignment, 1)];
        let late = report(7, Mode::PausedCall, &many, Some(3));
        assert!(late.failed(), "the double assignment after 100 stale calls is judged");
        assert_eq!((late.unexpected_count(), late.predicted_count(), late.violations_total), (1, 100, 101));
        let text = render(&config, &[late], false);
        assert!(text.contains("  unexpected: double-assignment 1\n"), "{text}");
        assert!(text.contains("  double-assignment at step 101: double-assignment number 101\n"), "{text}");
        assert!(text.contains("predicted violations (the documented limit this mode demonstrates): 100 (stale-execution 100)\n"), "{text}");
        assert_eq!(text.lines().last(), Some("seeds=1 violations=1 failing: 7"));
        // The same predicted flood alone passes.
        let flood = report(8, Mode::PausedCall, &many[..1], Some(3));
        assert!(!flood.failed());
        assert_eq!(render(&config, &[flood], false).lines().last(), Some("seeds=1 violations=0"));
    }
}
