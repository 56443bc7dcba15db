//! `tenure history [ADDRESS…] [--pool P] [--node N]`: the agent's history (`GET /v1/history`) as
//! a table — one line per ownership change, captureEpoch move, approval and reported result, in
//! log order, with the record's wall time (the appending agent's clock) and the log's stream time
//! (the clock that decides), both UTC; and, when older records were compacted away, a last line
//! saying where the history starts.

use serde_json::Value;
use tenure_core::federation::history::HistoryEntry;

use super::remote::{Rendered, rows, table};

/// The table of a `GET /v1/history` answer, with its footer.
pub(super) fn history_table(value: &Value) -> Result<Rendered, String> {
    let entries: Vec<HistoryEntry> = rows(value, "history")?;
    let footer = value.get("reachesBackTo").and_then(Value::as_u64).and_then(reach_note);
    let body = entries
        .iter()
        .map(|e| {
            vec![
                e.log_index.to_string(),
                utc_text(e.wall_time_ms),
                utc_text(e.stream_time_ms),
                e.kind.as_str().to_owned(),
                e.pool.clone().unwrap_or_else(|| "-".to_owned()),
                e.address.map_or_else(|| "-".to_owned(), |a| a.to_string()),
                change(e),
                e.cause.map_or("-", |c| c.as_str()).to_owned(),
                e.ownership_epoch.map_or_else(|| "-".to_owned(), |n| n.to_string()),
                e.capture_epoch.map_or_else(|| "-".to_owned(), |n| n.to_string()),
            ]
        })
        .collect();
    let headers = [
        "INDEX",
        "WALL-TIME",
        "STREAM-TIME",
        "KIND",
        "POOL",
        "ADDRESS",
        "CHANGE",
        "CAUSE",
        "OWNERSHIP-EPOCH",
        "CAPTURE-EPOCH",
    ];
    Ok(match (table(&headers, body), footer) {
        (Rendered::Out(mut text), Some(footer)) => {
            text.push_str(&footer);
            text.push('\n');
            Rendered::Out(text)
        }
        // No entries, but the history does not reach back to the start: "nothing happened" is not
        // what it knows (an operator trial read `No resources found.` as that).
        (Rendered::Empty, Some(footer)) => Rendered::Out(format!("No entries: {footer}\n")),
        (rendered, None) => rendered,
    })
}

/// The footer when the history does not start at the log's first record.
fn reach_note(reaches_back_to: u64) -> Option<String> {
    (reaches_back_to > 1).then(|| {
        format!(
            "history starts at log index {reaches_back_to} (older records were compacted into a snapshot, or \
             their entries dropped past the agent's bound)"
        )
    })
}

/// What changed, in a few words: `a → b` for a move, the verb and node for an action.
fn change(e: &HistoryEntry) -> String {
    let name = |n: &Option<String>| n.clone().unwrap_or_else(|| "<none>".to_owned());
    let verb = e.verb.as_deref().unwrap_or("?");
    match e.kind.as_str() {
        "ownership" | "capture" => format!("{} → {}", name(&e.from), name(&e.to)),
        "approval" => format!("{verb} for {} approved", name(&e.node)),
        _ => match &e.detail {
            Some(detail) if e.verb.is_some() => format!("{verb} by {}: {detail}", name(&e.node)),
            Some(detail) => detail.clone(),
            None => format!("{verb} by {}", name(&e.node)),
        },
    }
}

/// `ms` since the Unix epoch as RFC 3339 UTC with milliseconds (`2026-12-02T14:25:42.123Z`).
pub(crate) fn utc_text(ms: u64) -> String {
    let seconds = ms / 1_000;
    let days = seconds / 86_400;
    let time = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        time / 3_600,
        time % 3_600 / 60,
        time % 60,
        ms % 1_000
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era = (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 { shifted_month + 3 } else { shifted_month - 9 };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_utc_dates() {
        assert_eq!(utc_text(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc_text(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(utc_text(1_796_221_542_007), "2026-12-02T14:25:42.007Z");
        assert_eq!(utc_text(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
    }

    #[test]
    fn the_table_says_where_the_history_starts() {
        let value = serde_json::json!({"history": [
            {"logIndex": 7, "streamTime": 1000, "wallTime": 999, "kind": "ownership", "pool": "p",
             "address": "10.0.0.10", "cause": "drain", "from": "a", "to": "b", "ownershipEpoch": 2,
             "captureEpoch": 2},
            {"logIndex": 9, "streamTime": 1001, "wallTime": 1001, "kind": "failed", "pool": "p",
             "address": "10.0.0.10", "node": "b", "verb": "assign-secondary-ip", "detail": "throttled",
             "ownershipEpoch": 2, "captureEpoch": 2, "idempotencyKey": "k"}
        ], "reachesBackTo": 5});
        let Ok(Rendered::Out(text)) = history_table(&value) else { panic!("a table") };
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(
            lines[1].contains("a → b")
                && lines[1].contains("drain")
                && lines[1].contains("1970-01-01T00:00:00.999Z")
        );
        assert!(lines[2].contains("assign-secondary-ip by b: throttled"), "{text}");
        assert!(lines[3].starts_with("history starts at log index 5"), "{text}");
        let whole = serde_json::json!({"history": [], "reachesBackTo": 1});
        assert_eq!(history_table(&whole), Ok(Rendered::Empty));
        let short = serde_json::json!({"history": [], "reachesBackTo": 5});
        let Ok(Rendered::Out(text)) = history_table(&short) else { panic!("a note") };
        assert!(text.starts_with("No entries: history starts at log index 5"), "{text}");
    }
}
