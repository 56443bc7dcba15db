//! The list calls' query and paging (SPEC 10), as Kubernetes lists page: `GET /v1/ownership`,
//! `/v1/actions` and `/v1/history` take `?limit=N&continue=TOKEN` besides their filters (`pool`,
//! `node`, `address` repeatable; `state` for actions). Without `limit` the whole list; with it,
//! at most N rows and, when more match, a `continue` token in the answer that asks for the rows
//! after the last one given. The CLI follows the tokens itself (`cli/list.rs`).
//!
//! A token is opaque to clients: base64url of a small JSON record naming the list, a
//! fingerprint of the query's filters, and the position of the last row given (ownership:
//! pool and address; actions: node and journal sequence number; history: log index and place in
//! its record). Rows are listed in that order, so the next page starts after the position even
//! when rows came or went in between (a live list, not a snapshot of the first page). A token
//! that does not decode, is of another list or was issued for other filters is a 400 naming
//! `continue`; a history token whose position the history no longer reaches back to (older
//! entries dropped or compacted into a snapshot) is a 410.

use std::net::IpAddr;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::StatusCode;
use serde::{Deserialize, Serialize};

use super::ApiFailure;
use super::failure::reason;
use crate::agent::listing::{HistoryPosition, ListFilter};

/// Largest `limit` a list call takes.
pub const LIST_LIMIT_MAX: usize = 10_000;

/// Longest `continue` token read (a real one is far shorter).
pub const CONTINUE_TOKEN_BYTES_MAX: usize = 1024;

/// The journal entry states `?state=` accepts (actions only).
pub const ACTION_STATES: &[&str] = &["pending", "approved", "executed", "failed", "skipped"];

/// Which list a query is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ListKind {
    /// `GET /v1/ownership`.
    Ownership,
    /// `GET /v1/actions`.
    Actions,
    /// `GET /v1/history`.
    History,
}

impl ListKind {
    fn keys(self) -> &'static str {
        match self {
            Self::Actions => "`pool`, `node`, `address`, `state`, `limit` or `continue`",
            Self::Ownership | Self::History => "`pool`, `node`, `address`, `limit` or `continue`",
        }
    }
}

/// Where a row is in its list; rows are listed in this order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Position {
    /// An ownership row: pool, then address.
    Ownership {
        /// The pool.
        pool: String,
        /// The address.
        address: IpAddr,
    },
    /// A journal entry: node, then its sequence number.
    Actions {
        /// The journaling node.
        node: String,
        /// The entry's sequence number in that journal.
        seq: u64,
    },
    /// A history entry: its record's log index, then its place in that record.
    History {
        /// The log index.
        log_index: u64,
        /// The place among that record's entries.
        place: u32,
    },
}

impl Position {
    /// The position of a history entry.
    #[must_use]
    pub fn of_history((log_index, place): HistoryPosition) -> Self {
        Self::History { log_index, place }
    }

    /// The history position, for a history position.
    #[must_use]
    pub fn history(&self) -> Option<HistoryPosition> {
        match self {
            Self::History { log_index, place } => Some((*log_index, *place)),
            _ => None,
        }
    }
}

/// A parsed list query.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListQuery {
    /// The filters.
    pub filter: ListFilter,
    /// `state` (actions only).
    pub state: Option<String>,
    /// `limit`: at most this many rows.
    pub limit: Option<usize>,
    /// From `continue`: only rows after this position.
    pub after: Option<Position>,
}

/// The stored form of a continue token.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Token {
    v: u64,
    list: ListKind,
    /// The query's fingerprint ([`fingerprint`]).
    query: String,
    after: Position,
}

/// The token format's version.
const TOKEN_VERSION: u64 = 1;

/// A fingerprint of the filters: a token is good only for the query that it was issued for.
fn fingerprint(kind: ListKind, filter: &ListFilter, state: Option<&String>) -> String {
    let mut addresses: Vec<String> = filter.addresses.iter().map(ToString::to_string).collect();
    addresses.sort();
    addresses.dedup();
    let canonical = serde_json::json!([kind, filter.pool, filter.node, addresses, state]).to_string();
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(canonical.as_bytes()))
}

/// Parses a list call's query: each key at most once but `address`; anything else is a 400
/// naming it.
pub fn list_query(kind: ListKind, pairs: Vec<(String, String)>) -> Result<ListQuery, ApiFailure> {
    let mut query = ListQuery::default();
    let mut token = None;
    for (key, value) in pairs {
        // `pool`, `node`, `address`: the one reading of a filter (`agent/listing.rs`).
        if query.filter.set(&key, &key, &value).map_err(|e| ApiFailure::bad_field(&key, e))? {
            continue;
        }
        match (key.as_str(), kind) {
            ("limit", _) => {
                if query.limit.is_some() {
                    return Err(ApiFailure::bad_field("limit", "given twice"));
                }
                query.limit = Some(parse_limit(&value)?);
            }
            ("continue", _) => {
                if token.replace(value).is_some() {
                    return Err(ApiFailure::bad_field("continue", "given twice"));
                }
            }
            ("state", ListKind::Actions) => {
                if value.is_empty() {
                    // No filter, as for the other filters.
                } else if query.state.is_some() {
                    return Err(ApiFailure::bad_field("state", "given twice"));
                } else if !ACTION_STATES.contains(&value.as_str()) {
                    return Err(ApiFailure::bad_field(
                        "state",
                        format!("unknown state `{value}`; expected one of {}", ACTION_STATES.join(", ")),
                    ));
                } else {
                    query.state = Some(value);
                }
            }
            _ => {
                return Err(ApiFailure::bad_field(
                    &key,
                    format!("unknown query parameter; expected {}", kind.keys()),
                ));
            }
        }
    }
    if let Some(token) = token {
        query.after = Some(decode_token(kind, &query, &token)?);
    }
    Ok(query)
}

fn parse_limit(value: &str) -> Result<usize, ApiFailure> {
    // Digits only: Rust's integer parse also takes a leading `+`, which no list's client writes.
    let digits = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
    match value.parse::<usize>() {
        Ok(limit) if digits && (1..=LIST_LIMIT_MAX).contains(&limit) => Ok(limit),
        _ => Err(ApiFailure::bad_field(
            "limit",
            format!("`{value}` is not a whole number from 1 to {LIST_LIMIT_MAX}"),
        )),
    }
}

/// The position a token asks to continue after; a 400 naming `continue` when it is malformed,
/// of another list, or of other filters.
fn decode_token(kind: ListKind, query: &ListQuery, text: &str) -> Result<Position, ApiFailure> {
    let malformed = |why: &str| {
        ApiFailure::bad_field(
            "continue",
            format!("the token is malformed ({why}); list again without `continue`"),
        )
    };
    if text.len() > CONTINUE_TOKEN_BYTES_MAX {
        return Err(malformed(&format!("longer than {CONTINUE_TOKEN_BYTES_MAX} bytes")));
    }
    let bytes = URL_SAFE_NO_PAD.decode(text).map_err(|_| malformed("not base64url"))?;
    let token: Token = serde_json::from_slice(&bytes).map_err(|_| malformed("not a continue token"))?;
    if token.v != TOKEN_VERSION {
        return Err(malformed(&format!("version {}, not {TOKEN_VERSION}", token.v)));
    }
    let of_list = match token.after {
        Position::Ownership { .. } => ListKind::Ownership,
        Position::Actions { .. } => ListKind::Actions,
        Position::History { .. } => ListKind::History,
    };
    if token.list != kind || of_list != kind {
        return Err(malformed(&format!("it continues another list than {}", list_name(kind))));
    }
    if token.query != fingerprint(kind, &query.filter, query.state.as_ref()) {
        return Err(ApiFailure::bad_field(
            "continue",
            "the token was issued for other filters; keep the filters of the first page, or list again without \
             `continue`",
        ));
    }
    Ok(token.after)
}

fn list_name(kind: ListKind) -> &'static str {
    match kind {
        ListKind::Ownership => "ownership",
        ListKind::Actions => "actions",
        ListKind::History => "history",
    }
}

/// The token that continues `query`'s list after `position`.
#[must_use]
pub fn continue_token(kind: ListKind, query: &ListQuery, after: Position) -> String {
    let token = Token {
        v: TOKEN_VERSION,
        list: kind,
        query: fingerprint(kind, &query.filter, query.state.as_ref()),
        after,
    };
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&token).expect("a token serializes"))
}

/// The 410 for a history token whose position the history no longer reaches back to.
#[must_use]
pub fn stale_history_token(log_index: u64, reaches_back_to: u64) -> ApiFailure {
    ApiFailure {
        field: Some("continue".to_owned()),
        ..ApiFailure::new(
            StatusCode::GONE,
            reason::CONTINUE_EXPIRED,
            format!(
                "field `continue`: the token continues after log index {log_index}, but the history now starts \
                 at log index {reaches_back_to} (older entries were dropped or compacted into a snapshot); list \
                 again without `continue`"
            ),
        )
    }
}

/// The token that continues `query`'s list after a page whose last row is at `last`, when `more`
/// rows follow it (`None`: the list ends with this page).
#[must_use]
pub fn next_token(kind: ListKind, query: &ListQuery, more: bool, last: Option<Position>) -> Option<String> {
    last.filter(|_| more).map(|after| continue_token(kind, query, after))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &str) -> Vec<(String, String)> {
        text.split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (k.to_owned(), v.to_owned())
            })
            .collect()
    }

    fn ownership(pool: &str, address: &str) -> Position {
        Position::Ownership { pool: pool.into(), address: address.parse().expect("address") }
    }

    #[test]
    fn pages_walk_the_whole_list_once_in_order() {
        let rows: Vec<(Position, u32)> =
            (1..=5).map(|i| (ownership("p", &format!("10.0.0.{i}")), i)).collect();
        // A page as the agent answers one: the rows after the query's position, at most its limit.
        let page = |query: &ListQuery| {
            let after =
                rows.iter().filter(|(position, _)| query.after.as_ref().is_none_or(|after| position > after));
            let page = crate::agent::listing::take_page(after, query.limit, Clone::clone);
            let last = page.rows.last().map(|(position, _)| position.clone());
            let next = next_token(ListKind::Ownership, query, page.more, last);
            (page.rows.into_iter().map(|(_, row)| row).collect::<Vec<_>>(), next)
        };
        let mut query = list_query(ListKind::Ownership, pairs("limit=2&pool=p")).expect("parses");
        let mut seen = Vec::new();
        loop {
            let (rows, next) = page(&query);
            assert!(rows.len() <= 2);
            seen.extend(rows);
            let Some(token) = next else { break };
            query = list_query(ListKind::Ownership, pairs(&format!("pool=p&limit=2&continue={token}")))
                .expect("a token it issued parses");
        }
        assert_eq!(seen, [1, 2, 3, 4, 5]);
        // Without a limit: everything, no token.
        let all = list_query(ListKind::Ownership, Vec::new()).expect("parses");
        assert_eq!(page(&all), ((1..=5).collect::<Vec<_>>(), None));
    }

    #[test]
    fn bad_limits_and_tokens_are_400_naming_the_field() {
        for (query, field) in [
            ("limit=0", "limit"),
            ("limit=-1", "limit"),
            ("limit=+5", "limit"),
            ("limit=10001", "limit"),
            ("limit=1&limit=2", "limit"),
            ("continue=!!!", "continue"),
            ("continue=bm90IGpzb24", "continue"),
            ("state=pending", "state"),
            ("colour=red", "colour"),
        ] {
            let failure = list_query(ListKind::Ownership, pairs(query)).expect_err(query);
            assert_eq!(
                (failure.status, failure.field.as_deref()),
                (StatusCode::BAD_REQUEST, Some(field)),
                "{query}"
            );
            assert!(!failure.message.contains('\n'));
        }
        let first = ListQuery {
            filter: ListFilter { pool: Some("p".into()), ..ListFilter::default() },
            ..ListQuery::default()
        };
        let token = continue_token(ListKind::Ownership, &first, ownership("p", "10.0.0.1"));
        // Another list, or other filters: 400.
        let other_list = list_query(ListKind::History, pairs(&format!("pool=p&continue={token}")));
        assert!(other_list.expect_err("another list").message.contains("another list"));
        let other_filter = list_query(ListKind::Ownership, pairs(&format!("pool=q&continue={token}")));
        assert!(other_filter.expect_err("other filters").message.contains("other filters"));
        let same = list_query(ListKind::Ownership, pairs(&format!("pool=p&continue={token}")));
        assert_eq!(same.expect("the same filters").after, Some(ownership("p", "10.0.0.1")));
        let gone = stale_history_token(3, 10);
        assert_eq!((gone.status, gone.field.as_deref()), (StatusCode::GONE, Some("continue")));
    }
}
