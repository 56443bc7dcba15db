//! How the list verbs (`tenure ownership`, `actions`, `history`) read a list that pages (SPEC 10,
//! `api/list.rs`): like kubectl's `--chunk-size`, they follow the agent's `continue` tokens
//! themselves and print the whole list, asking [`LIST_CHUNK_ROWS`] rows at a time; with
//! `--limit N` they print one page of at most N rows and, when more follow, say on stderr how to
//! ask for the next (`--continue TOKEN`).

use clap::Args;
use http::Method;
use serde_json::Value;

use super::EXIT_BAD_INPUT;
use super::client::path_segment;
use super::remote::{EXIT_REFUSED, Session};
use crate::agent::listing::ListFilter;
use crate::api::list::LIST_LIMIT_MAX;

/// Rows asked per page while following the tokens: the most a page may hold. The agent builds
/// the whole filtered list for every page it answers (`/v1/ownership`, `/v1/actions`), so a
/// small chunk multiplies its work (100k addresses: 10 requests, not 200).
pub const LIST_CHUNK_ROWS: usize = LIST_LIMIT_MAX;

/// Most pages one listing follows (a list of at most this many chunks; a bound on a server that
/// would hand out tokens forever).
pub const LIST_PAGES_MAX: usize = 100_000;

/// `--limit` and `--continue`, for the verbs that list.
#[derive(Debug, Default, Args)]
pub struct ListArgs {
    /// Print one page of at most N rows (1 to 10000), and the token that continues it on stderr
    /// when more rows follow; without it, the whole list.
    // `allow_negative_numbers`: `--limit -1` is a value out of range, not an unknown flag.
    #[arg(long, allow_negative_numbers = true, value_parser = rows)]
    limit: Option<u64>,
    /// Start after the page that printed this token (with the same filters).
    #[arg(long = "continue", value_name = "TOKEN")]
    continue_token: Option<String>,
    /// Without --limit: rows asked per request while reading the whole list [default: 10000].
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        value_parser = rows
    )]
    chunk_size: Option<u64>,
}

/// A number of rows, 1 to [`LIST_LIMIT_MAX`] (`--limit`, `--chunk-size`): clap's message names
/// the flag and the value, this says what is wrong with it.
fn rows(text: &str) -> Result<u64, String> {
    let range = || format!("expected a number of rows from 1 to {LIST_LIMIT_MAX}");
    // Digits only, as the agent reads `limit` (`+5` is not read as 5).
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(range());
    }
    text.parse::<u64>().ok().filter(|n| (1..=LIST_LIMIT_MAX as u64).contains(n)).ok_or_else(range)
}

/// The filter of a list verb's `--pool`, `--node` and addresses (`address_label`: how the verb
/// takes them, `ADDRESS` or `--address`), read as the agent reads its query
/// ([`ListFilter::set`]); `Err` is exit 2 after the one line `tenure COMMAND: …` naming the flag.
pub(super) fn filter(
    command: &str,
    pool: Option<String>,
    node: Option<String>,
    addresses: &[String],
    address_label: &str,
) -> Result<ListFilter, std::process::ExitCode> {
    let mut filter = ListFilter::default();
    let values = pool
        .iter()
        .map(|pool| ("pool", "--pool", pool))
        .chain(node.iter().map(|node| ("node", "--node", node)))
        .chain(addresses.iter().map(|address| ("address", address_label, address)));
    for (key, label, value) in values {
        if let Err(message) = filter.set(key, label, value) {
            eprintln!("tenure {command}: {message}");
            return Err(std::process::ExitCode::from(EXIT_BAD_INPUT));
        }
    }
    Ok(filter)
}

/// `path` (with or without a query) with `limit` and `continue` added.
fn page_path(path: &str, limit: u64, token: Option<&str>) -> String {
    let join = if path.contains('?') { '&' } else { '?' };
    match token {
        Some(token) => format!("{path}{join}limit={limit}&continue={}", path_segment(token)),
        None => format!("{path}{join}limit={limit}"),
    }
}

/// The list at `path` (under `key` in each answer) as one answer: one page with `--limit`, else
/// every page, their rows joined under `key` and no `continue` left. `Err`: the exit code and
/// the one-line error.
pub(super) fn fetch(
    session: &Session,
    path: &str,
    key: &str,
    args: &ListArgs,
) -> Result<Value, (u8, String)> {
    if let Some(limit) = args.limit {
        return session.exchange(Method::GET, &page_path(path, limit, args.continue_token.as_deref()), None);
    }
    let chunk = args.chunk_size.unwrap_or(LIST_CHUNK_ROWS as u64);
    let mut token = args.continue_token.clone();
    let mut whole: Option<Value> = None;
    for _ in 0..LIST_PAGES_MAX {
        let page = session.exchange(Method::GET, &page_path(path, chunk, token.as_deref()), None)?;
        token = page.get("continue").and_then(Value::as_str).map(str::to_owned);
        let rows = page
            .get(key)
            .and_then(Value::as_array)
            .cloned()
            .ok_or_else(|| (EXIT_REFUSED, format!("the agent's answer has no `{key}` list")))?;
        match whole.as_mut().and_then(|w| w.get_mut(key)).and_then(Value::as_array_mut) {
            Some(joined) => joined.extend(rows),
            None => whole = Some(page),
        }
        if token.is_none() {
            let mut whole = whole.expect("a page was read");
            if let Some(object) = whole.as_object_mut() {
                object.remove("continue");
            }
            return Ok(whole);
        }
    }
    Err((EXIT_REFUSED, format!("the agent's list did not end within {LIST_PAGES_MAX} pages")))
}

/// What to say on stderr after one page that more rows follow (`--limit`).
#[must_use]
pub(super) fn more_note(answer: &Value) -> Option<String> {
    let token = answer.get("continue").and_then(Value::as_str)?;
    Some(format!("more rows follow: add --continue {token}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_add_limit_and_the_token_to_the_query() {
        assert_eq!(page_path("/v1/history", 500, None), "/v1/history?limit=500");
        assert_eq!(
            page_path("/v1/ownership?pool=p", 2, Some("ab-_c")),
            "/v1/ownership?pool=p&limit=2&continue=ab-_c"
        );
        assert_eq!(
            more_note(&serde_json::json!({"continue": "T"})).as_deref(),
            Some("more rows follow: add --continue T")
        );
        assert_eq!(more_note(&serde_json::json!({"ownership": []})), None);
    }
}
