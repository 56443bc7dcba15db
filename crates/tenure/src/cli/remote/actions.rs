//! `tenure actions` as a table: one row per journal entry with its state and attempts; `-o wide`
//! adds when the last call was made, when a failed one is retried, and the last failure's
//! reason, shortened to one cell.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::Value;

use super::{Rendered, rows, table};

/// The longest REASON cell (characters): the reason's start, which says what failed
/// (`outcome unknown: …` first, when the call may have acted); `-o json` has it whole.
pub const REASON_CELL_MAX_CHARS: usize = 60;

/// A row of `GET /v1/actions` (fields the table does not show are ignored; an agent from before
/// attempts were reported sends none of theirs).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ActionLine {
    node: String,
    state: String,
    reason: Option<String>,
    verb: String,
    pool: String,
    address: String,
    holder: String,
    ownership_epoch: u64,
    capture_epoch: u64,
    idempotency_key: String,
    #[serde(default)]
    attempts: Option<u32>,
    #[serde(default)]
    last_attempt_ms: Option<u64>,
    #[serde(default)]
    last_attempt_wall_ms: Option<u64>,
    #[serde(default)]
    last_error: Option<String>,
    #[serde(default)]
    next_attempt_ms: Option<u64>,
}

/// Milliseconds since the Unix epoch by this host's clock (what `LAST-ATTEMPT` is an age from).
pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The table of `value`'s actions; `wide` adds LAST-ATTEMPT and NEXT-ATTEMPT (relative to
/// `now_ms`, unix ms) and REASON.
pub(super) fn actions_table(value: &Value, wide: bool, now_ms: u64) -> Result<Rendered, String> {
    let lines: Vec<ActionLine> = rows(value, "actions")?;
    let body = lines
        .into_iter()
        .map(|l| {
            let state = match &l.reason {
                Some(reason) => format!("{} ({reason})", l.state),
                None => l.state.clone(),
            };
            let mut row = vec![
                l.node.clone(),
                state,
                l.attempts.map_or_else(|| "<unknown>".to_owned(), |n| n.to_string()),
                l.verb.clone(),
                l.pool.clone(),
                l.address.clone(),
                l.holder.clone(),
                l.ownership_epoch.to_string(),
                l.capture_epoch.to_string(),
                l.idempotency_key.clone(),
            ];
            if wide {
                row.extend([last_attempt(&l, now_ms), next_attempt(&l, now_ms), reason_cell(l.last_error)]);
            }
            row
        })
        .collect();
    let mut headers = vec![
        "NODE",
        "STATE",
        "ATTEMPTS",
        "VERB",
        "POOL",
        "ADDRESS",
        "HOLDER",
        "OWNERSHIP-EPOCH",
        "CAPTURE-EPOCH",
        "KEY",
    ];
    if wide {
        headers.extend(["LAST-ATTEMPT", "NEXT-ATTEMPT", "REASON"]);
    }
    Ok(table(&headers, body))
}

/// When the last call was handed out, as an age: by the agent's wall clock, else its stream
/// time (unix ms in an agent).
fn last_attempt(line: &ActionLine, now_ms: u64) -> String {
    match line.last_attempt_wall_ms.or(line.last_attempt_ms) {
        Some(at) => format!("{} ago", short_duration(now_ms.saturating_sub(at))),
        None => "<none>".to_owned(),
    }
}

/// When a failed action is tried again: its backoff (next − last, in stream time) from the last
/// call's wall time, relative to now; `due` once passed (the next sweep retries it).
fn next_attempt(line: &ActionLine, now_ms: u64) -> String {
    let (Some(next), Some(last)) = (line.next_attempt_ms, line.last_attempt_ms) else {
        return "<none>".to_owned();
    };
    let at = line.last_attempt_wall_ms.unwrap_or(last).saturating_add(next.saturating_sub(last));
    if at <= now_ms { "due".to_owned() } else { format!("in {}", short_duration(at - now_ms)) }
}

/// The last error, at most [`REASON_CELL_MAX_CHARS`] characters (`…` where it was cut).
fn reason_cell(last_error: Option<String>) -> String {
    let Some(error) = last_error.filter(|e| !e.is_empty()) else { return "<none>".to_owned() };
    if error.chars().count() <= REASON_CELL_MAX_CHARS {
        return error;
    }
    let mut cut: String = error.chars().take(REASON_CELL_MAX_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// An age as kubectl prints one: `850ms`, `12s`, `3m4s`, `2h5m`, `3d4h`.
fn short_duration(ms: u64) -> String {
    let seconds = ms / 1_000;
    let (minutes, hours, days) = (seconds / 60, seconds / 3_600, seconds / 86_400);
    match () {
        () if seconds == 0 => format!("{ms}ms"),
        () if minutes == 0 => format!("{seconds}s"),
        () if hours == 0 => format!("{minutes}m{}s", seconds % 60),
        () if days == 0 => format!("{hours}h{}m", minutes % 60),
        () => format!("{days}d{}h", hours % 24),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        let cases =
            [(850, "850ms"), (12_400, "12s"), (184_000, "3m4s"), (7_500_000, "2h5m"), (273_600_000, "3d4h")];
        for (ms, text) in cases {
            assert_eq!(short_duration(ms), text);
        }
    }

    #[test]
    fn the_wide_table_shows_attempts_times_and_a_short_reason() {
        let long = format!("outcome unknown: {}", "x".repeat(80));
        let value = serde_json::json!({"actions": [
            {"node": "a", "state": "failed", "verb": "acquire", "pool": "p", "address": "10.0.0.1",
             "holder": "a", "ownershipEpoch": 1, "captureEpoch": 2, "idempotencyKey": "k1",
             "attempts": 3, "lastAttemptMs": 100_000, "lastAttemptWallMs": 100_500,
             "lastError": "exit status 1: no route", "nextAttemptMs": 120_000},
            {"node": "a", "state": "failed", "verb": "acquire", "pool": "p", "address": "10.0.0.2",
             "holder": "a", "ownershipEpoch": 1, "captureEpoch": 2, "idempotencyKey": "k2",
             "attempts": 1, "lastAttemptMs": 100_000, "lastError": long, "nextAttemptMs": 101_000},
            {"node": "a", "state": "pending", "verb": "acquire", "pool": "p", "address": "10.0.0.3",
             "holder": "a", "ownershipEpoch": 1, "captureEpoch": 2, "idempotencyKey": "k3",
             "attempts": 0},
        ]});
        let Ok(Rendered::Out(text)) = actions_table(&value, true, 110_000) else { panic!("rows") };
        let lines: Vec<&str> = text.lines().collect();
        let header: Vec<&str> = lines[0].split_whitespace().collect();
        assert_eq!(header[..3], ["NODE", "STATE", "ATTEMPTS"], "{text}");
        assert_eq!(header[9..], ["KEY", "LAST-ATTEMPT", "NEXT-ATTEMPT", "REASON"], "{text}");
        let cells = |line: &str| line.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        let first = cells(lines[1]);
        assert_eq!(first[2], "3", "{text}");
        assert_eq!(first[10..].join(" "), "9s ago in 10s exit status 1: no route", "{text}");
        let cut = format!("{}…", &long[..REASON_CELL_MAX_CHARS - 1]);
        assert_eq!(cells(lines[2])[10..].join(" "), format!("10s ago due {cut}"), "{text}");
        assert_eq!(cells(lines[3])[10..], ["<none>", "<none>", "<none>"], "{text}");
        let Ok(Rendered::Out(narrow)) = actions_table(&value, false, 110_000) else { panic!("rows") };
        assert!(narrow.lines().next().is_some_and(|h| h.ends_with("CAPTURE-EPOCH   KEY")), "{narrow}");
        assert!(!narrow.contains("no route"), "the reason is for -o wide");
    }
}
