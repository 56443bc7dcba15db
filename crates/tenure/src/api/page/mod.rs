//! The status page: `GET /` on the API's listener, read-only, no token. Server-rendered HTML and
//! SVG, one small inline script that reloads it, nothing loaded from elsewhere: everything is in
//! the binary, and the answer's `Content-Security-Policy` holds the browser to that
//! ([`html::security_headers`], on every answer of the route, errors included).
//!
//! Sections, top to bottom: the agent's health; the nodes (live, drained, health, VRRP, last
//! heartbeat, addresses owned and held); the actions waiting for approval; the recent failures;
//! the failover timeline (holders and epochs over stream time per address, faults and operator
//! actions marked, drawn from the core's history entries the agent keeps); the ownership map.
//! The map and the timeline follow the query's filters (`?pool=&node=&address=&phase=`; `pool`,
//! `node` and `address` — repeatable, each an address or a CIDR range — read as on the list
//! calls, by `ListFilter::set`); the loop writes out [`query::PAGE_ROWS`] rows a page (`?page=`) and
//! counts the rest without writing them, so a 100k-address map is never one table.
//! `?refresh=N` reloads every N seconds (0: never; default [`html::REFRESH_DEFAULT_S`]). A bad
//! query is a one-line 400 naming the key, as on the JSON routes; a failure while drawing a 500.
//!
//! # Layout
//! - [`query`] — the query, the filter and the page window.
//! - [`sections`] — the HTML sections.
//! - [`timeline`] — the timeline's model and its SVG.
//! - [`html`] — escaping, the document, the style and the script.

pub mod html;
pub mod query;
pub mod sections;
pub mod timeline;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{Html, IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use super::failure::reason;
use super::{ApiFailure, ApiState, not_answering};
use crate::agent::status::StatusSnapshot;
use query::PageQuery;

/// `GET /`: the status page, with its security headers ([`html::security_headers`]) on every
/// answer, an error's too.
pub async fn status_page(
    State(state): State<ApiState>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let mut response = match page(&state, query).await {
        Ok(page) => Html(page).into_response(),
        Err(failure) => failure.into_response(),
    };
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    for (name, value) in html::security_headers() {
        headers.insert(name, value);
    }
    response
}

/// The page's HTML, or why not: a bad query is a 400 naming the key, a loop that does not answer
/// a 503, a failure while rendering a 500.
async fn page(
    state: &ApiState,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<String, ApiFailure> {
    let Query(pairs) = query.map_err(|e| ApiFailure::bad_request(e.body_text()))?;
    let query = PageQuery::parse(pairs)?;
    let status = state.handle.status(query.status_query()).await.map_err(|e| not_answering(&e))?;
    // Drawing the page is CPU work: off the async workers.
    tokio::task::spawn_blocking(move || render(&status, &query)).await.map_err(|e| {
        ApiFailure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            reason::UNAVAILABLE,
            format!("rendering the status page failed: {e}"),
        )
    })
}

/// The page for `status`, as `query` asks.
#[must_use]
pub fn render(status: &StatusSnapshot, query: &PageQuery) -> String {
    let mut body = String::with_capacity(64 * 1024);
    sections::header(&mut body, &status.health);
    sections::nodes(&mut body, &status.nodes, &status.map.per_node);
    sections::actions(
        &mut body,
        "waiting",
        "Waiting for approval",
        &status.waiting,
        status.waiting_total,
        "nothing waits for approval",
    );
    sections::actions(
        &mut body,
        "failures",
        "Recent failures",
        &status.failed,
        status.failed_total,
        "no failed actions in the journals",
    );
    let nodes: Vec<String> = status.nodes.iter().map(|n| n.name.clone()).collect();
    body.push_str(&timeline::section(&status.timeline, &nodes, status.map.matched));
    sections::ownership(&mut body, status, query);
    html::document(&format!("tenure: {}", status.health.nodes.join(", ")), query.refresh_s, &body)
}
