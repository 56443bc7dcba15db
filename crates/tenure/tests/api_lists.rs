//! The list calls (SPEC 10) against the test-double agent loop (`support`, the real core and its
//! real history fold): `GET /v1/history` after a drain, and paging of `/v1/ownership`,
//! `/v1/actions` and `/v1/history` with `limit` and `continue` — a walk gives exactly the
//! unpaged list; bad tokens are a one-line 400, a history token older than the history a 410.

mod support;

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use support::{Mode, Server, TOKEN, start};
use tenure::api::list::{ListKind, ListQuery, Position, continue_token};

const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

async fn call(server: &Server, method: http::Method, path: &str) -> (u16, Value) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut request = Request::builder().method(method).uri(format!("{}{path}", server.base));
    request = request.header("authorization", format!("Bearer {TOKEN}"));
    let response = client.request(request.body(Empty::new()).expect("a request")).await.expect("answers");
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.expect("a body").to_bytes();
    let value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{path}: JSON body ({e}): {}", String::from_utf8_lossy(&body)));
    (status, value)
}

async fn get(server: &Server, path: &str) -> (u16, Value) {
    call(server, http::Method::GET, path).await
}

/// Walks `path` (a list under `key`) with `limit=2`, following `continue`; the rows in order.
async fn walk(server: &Server, path: &str, key: &str) -> Vec<Value> {
    let join = if path.contains('?') { '&' } else { '?' };
    let mut rows = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..100 {
        let page = match &token {
            None => format!("{path}{join}limit=2"),
            Some(token) => format!("{path}{join}limit=2&continue={token}"),
        };
        let (status, body) = get(server, &page).await;
        assert_eq!(status, 200, "{page}: {body}");
        let list = body[key].as_array().expect("a list").clone();
        assert!(list.len() <= 2, "{page}: at most the limit");
        rows.extend(list);
        match body.get("continue").and_then(Value::as_str) {
            Some(next) => token = Some(next.to_owned()),
            None => return rows,
        }
    }
    panic!("{path}: more than 100 pages");
}

#[tokio::test]
async fn history_shows_a_drain_with_its_cause_and_the_new_epochs() {
    let server = start(Mode::Answering, Some(TOKEN), ANSWER_TIMEOUT).await;
    let (status, before) = get(&server, "/v1/history?address=10.0.0.10").await;
    assert_eq!(status, 200, "{before}");
    assert_eq!(before["reachesBackTo"], 1, "the double's log is whole");
    let entries = before["history"].as_array().expect("a list");
    assert_eq!(entries.len(), 1, "placed once: {before}");
    assert_eq!(
        (&entries[0]["kind"], &entries[0]["to"], &entries[0]["cause"]),
        (&json!("ownership"), &json!("a"), &json!("liveness")),
        "a's heartbeat made it eligible after the pools were applied: {before}"
    );

    let (status, drained) = call(&server, http::Method::POST, "/v1/drain/a").await;
    assert_eq!(status, 200, "{drained}");
    let index = drained["index"].as_u64().expect("an index");
    let (_, after) = get(&server, "/v1/history?address=10.0.0.10&node=b").await;
    let entries = after["history"].as_array().expect("a list");
    assert_eq!(entries.len(), 1, "b is in the drain's move only: {after}");
    let moved = &entries[0];
    assert_eq!(
        (moved["logIndex"].as_u64(), &moved["kind"], &moved["cause"], &moved["from"], &moved["to"]),
        (Some(index), &json!("ownership"), &json!("drain"), &json!("a"), &json!("b")),
        "{after}"
    );
    assert_eq!((moved["ownershipEpoch"].as_u64(), moved["captureEpoch"].as_u64()), (Some(2), Some(2)));
    assert!(moved["streamTime"].is_u64() && moved["wallTime"].is_u64(), "{moved}");
    // Filters narrow: every entry of `?pool=gated` is of pool `gated`.
    let (_, gated) = get(&server, "/v1/history?pool=gated").await;
    assert!(gated["history"].as_array().expect("a list").iter().all(|e| e["pool"] == "gated"));
    for bad in ["/v1/history?state=pending", "/v1/history?address=10.0.0.300", "/v1/history?node=a&node=b"] {
        assert_eq!(get(&server, bad).await.0, 400, "{bad}");
    }
}

#[tokio::test]
async fn a_walk_with_limit_2_gives_exactly_the_unpaged_list() {
    let server = start(Mode::Answering, Some(TOKEN), ANSWER_TIMEOUT).await;
    // Some history and actions to page through.
    for path in ["/v1/drain/a", "/v1/undrain/a", "/v1/drain/b"] {
        assert_eq!(call(&server, http::Method::POST, path).await.0, 200, "{path}");
    }
    for (path, key) in [
        ("/v1/ownership", "ownership"),
        ("/v1/ownership?pool=edge", "ownership"),
        ("/v1/actions", "actions"),
        ("/v1/actions?node=a&state=pending", "actions"),
        ("/v1/history", "history"),
        ("/v1/history?address=10.0.0.10&address=10.0.0.20", "history"),
    ] {
        let (status, whole) = get(&server, path).await;
        assert_eq!(status, 200, "{path}");
        assert!(whole.get("continue").is_none(), "{path}: no limit, no token");
        let whole = whole[key].as_array().expect("a list").clone();
        // Two rows (pool `edge`) fit one page: no token; the others need several.
        assert!(whole.len() >= 2, "{path}: a list long enough to page ({} rows)", whole.len());
        assert_eq!(walk(&server, path, key).await, whole, "{path}");
    }
}

#[tokio::test]
async fn bad_continue_tokens_are_a_one_line_400_and_a_history_token_past_its_reach_410() {
    let server = start(Mode::Answering, Some(TOKEN), ANSWER_TIMEOUT).await;
    let (_, first) = get(&server, "/v1/ownership?limit=1").await;
    let token = first["continue"].as_str().expect("more rows follow").to_owned();
    for (path, says) in [
        ("/v1/ownership?continue=not-a-token".to_owned(), "malformed"),
        (format!("/v1/ownership?pool=edge&continue={token}"), "other filters"),
        (format!("/v1/actions?continue={token}"), "another list"),
        (format!("/v1/history?continue={token}"), "another list"),
        ("/v1/history?limit=0".to_owned(), "from 1 to"),
    ] {
        let (status, body) = get(&server, &path).await;
        assert_eq!(status, 400, "{path}: {body}");
        let error = body["error"].as_str().expect("a message");
        assert!(error.contains(says) && !error.contains('\n'), "{path}: {error}");
    }
    // A history token before the oldest record the history keeps: 410 Gone, one line.
    let stale = continue_token(
        ListKind::History,
        &ListQuery::default(),
        Position::History { log_index: 0, place: 0 },
    );
    let (status, body) = get(&server, &format!("/v1/history?continue={stale}")).await;
    assert_eq!(status, 410, "{body}");
    assert_eq!(body["field"], "continue");
    assert!(
        body["error"].as_str().expect("a message").contains("history now starts at log index 1"),
        "{body}"
    );
}
