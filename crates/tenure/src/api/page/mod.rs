//! The status page: `GET /` on the API's listener, read-only, no token. Server-rendered HTML and
//! SVG, one small inline script that reloads it, nothing loaded from elsewhere: everything is in
//! the binary.
//!
//! Sections, top to bottom: the agent's health; the nodes (live, drained, health, VRRP, last
//! heartbeat); the actions waiting for approval; the recent failures; the failover timeline
//! (holders and epochs over stream time per address, faults and operator actions marked); the
//! ownership map. The map and the timeline follow the query's filters
//! (`?pool=&node=&address=&phase=`, an address or a CIDR range); the map shows
//! [`query::PAGE_ROWS`] rows a page (`?page=`), so a 100k-address map is never one table.
//! `?refresh=N` reloads every N seconds (0: never; default [`html::REFRESH_DEFAULT_S`]). A bad
//! query is a one-line 400 naming the key, as on the JSON routes.
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

use std::collections::BTreeSet;
use std::net::IpAddr;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{Html, IntoResponse, Response};
use http::header;

use super::{ApiFailure, ApiState, not_answering};
use crate::agent::status::StatusSnapshot;
use query::PageQuery;

/// `GET /`: the status page.
pub async fn status_page(
    State(state): State<ApiState>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiFailure> {
    let Query(pairs) = query.map_err(|e| ApiFailure::bad_request(e.body_text()))?;
    let query = PageQuery::parse(pairs)?;
    let status = state.handle.status().await.map_err(|e| not_answering(&e))?;
    // Filtering and drawing a large map is CPU work: off the async workers.
    let page = tokio::task::spawn_blocking(move || render(&status, &query))
        .await
        .map_err(|e| ApiFailure::bad_request(format!("rendering the page failed: {e}")))?;
    Ok(([(header::CACHE_CONTROL, "no-store")], Html(page)).into_response())
}

/// The page for `status`, as `query` asks.
#[must_use]
pub fn render(status: &StatusSnapshot, query: &PageQuery) -> String {
    let mut body = String::with_capacity(64 * 1024);
    sections::header(&mut body, &status.health);
    sections::nodes(&mut body, &status.nodes, &status.ownership);
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
    let filtered: Vec<_> = status.ownership.iter().filter(|row| query.matches(row)).collect();
    let in_map: BTreeSet<(&str, &str)> =
        filtered.iter().map(|row| (row.pool.as_str(), row.address.as_str())).collect();
    let nodes: Vec<String> = status.nodes.iter().map(|n| n.name.clone()).collect();
    body.push_str(&timeline::section(&status.timeline, &nodes, |pool, address, changes| {
        // The timeline follows the map's filters: an address the filtered map shows, or, for a
        // node, one that node held at some time (after a failover the dead node holds nothing
        // now, and its addresses are the ones to look at).
        let node_held = |node: &String| changes.iter().any(|c| c.holder.as_ref() == Some(node));
        in_map.contains(&(pool, address))
            || (query.phase.is_none()
                && query.filter.node.as_ref().is_some_and(node_held)
                && query.filter.pool.as_deref().is_none_or(|p| p == pool)
                && query.addresses.is_none_or(|range| {
                    address.parse::<IpAddr>().is_ok_and(|address| range.contains(&address))
                }))
    }));
    sections::ownership(&mut body, status, query, &filtered);
    html::document(&format!("tenure: {}", status.health.nodes.join(", ")), query.refresh_s, &body)
}
