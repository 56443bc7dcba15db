//! What a run prints: per seed, a JSON line or, for a failing seed, `SEED=<s>` with the command
//! that reproduces it; then the summary, whose last line is `seeds=N violations=V` followed by
//! the failing seeds.

use crate::config::SimConfig;
use crate::world::SeedReport;

/// The whole stdout of a run.
#[must_use]
pub fn render(config: &SimConfig, reports: &[SeedReport], json: bool) -> String {
    let mut out = String::new();
    let mut predicted = 0u64;
    let mut unexpected = 0u64;
    let mut failing = Vec::new();
    for r in reports {
        let own_unexpected = r.unexpected().count() as u64 + u64::from(r.converged_after_rounds.is_none());
        let own_predicted = r.violations.len() as u64 - r.unexpected().count() as u64;
        predicted += own_predicted;
        unexpected += own_unexpected;
        if json {
            out.push_str(&serde_json::to_string(r).expect("a report is plain data"));
            out.push('\n');
        }
        if r.failed() {
            failing.push(r.seed);
            if !json {
                out.push_str(&format!(
                    "SEED={}\n  reproduce: {}\n",
                    r.seed,
                    config.reproduce_command(r.seed)
                ));
                for v in r.unexpected().take(5) {
                    out.push_str(&format!("  {} at step {}: {}\n", v.kind, v.step, v.detail));
                }
                if r.converged_after_rounds.is_none() {
                    out.push_str("  no convergence within the liveness bound\n");
                }
            }
        }
    }
    if !json {
        let calls: u64 = reports.iter().map(|r| r.provider_calls).sum();
        let events: u64 = reports.iter().map(|r| r.events).sum();
        let recaptures: u64 = reports.iter().map(|r| r.recaptures).sum();
        out.push_str(&format!(
            "mode={} nodes={} addresses={} faults={}: {events} events, {calls} provider calls, {recaptures} re-captures\n",
            config.mode, config.nodes, config.addresses, config.faults
        ));
        if predicted > 0 {
            out.push_str(&format!(
                "predicted violations (the documented limit this mode demonstrates): {predicted}\n"
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::{Violation, ViolationKind};

    fn report(seed: u64, kind: Option<ViolationKind>, converged: Option<u32>) -> SeedReport {
        SeedReport {
            seed,
            mode: "cloud".into(),
            violations: kind
                .map(|kind| vec![Violation { step: 7, kind, detail: "x".into() }])
                .unwrap_or_default(),
            violations_total: u64::from(kind.is_some()),
            converged_after_rounds: converged,
            events: 1,
            provider_calls: 1,
            stale_calls: 0,
            recaptures: 0,
            faults: Default::default(),
        }
    }

    #[test]
    fn failing_seeds_print_their_reproduction_and_the_last_line_lists_them() {
        let config = SimConfig::default();
        let reports = vec![
            report(1, None, Some(3)),
            report(2, Some(ViolationKind::StaleExecution), Some(3)),
            report(3, None, None),
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
}
