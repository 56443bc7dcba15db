//! The agent's HTTP API (SPEC 10), on axum. It holds no state of its own: every answer comes
//! from the agent loop through an [`AgentHandle`].
//!
//! | route | answer |
//! |---|---|
//! | `GET /?pool=&node=&address=&phase=&page=&refresh=` | 200, the status page (HTML + SVG, [`page`]); no token |
//! | `GET /v1/ownership?pool=&node=&address=` | 200 `{"ownership": [rows as in the replay report]}` (owner, phase, holders, NICs); 400 for an unknown key or a bad address |
//! | `GET /v1/actions?node=&state=&pool=&address=` | 200 `{"actions": [...]}`; 400 for an unknown key or state |
//! | `GET /v1/history?pool=&node=&address=` | 200 `{"history": [entries], "reachesBackTo": N}` ([`HistoryEntry`]) |
//!
//! The three lists page ([`list`]; the loop pages the ownership map and the history, writing out
//! only the rows it returns): `&limit=N` gives at most N rows and a `continue` token when
//! more follow, `&continue=TOKEN` the rows after it; 400 for a bad limit or a malformed token (or
//! one of other filters), 410 for a history token older than the history reaches back to.
//! | `GET /v1/health` | 200 with the [`Health`] JSON when ok, 503 with it when not |
//! | `GET /metrics?addresses=auto\|all\|none` | 200, OpenMetrics text ([`Metrics::encode`]); the per-address series as `addresses` asks ([`AddressSeries`]); 400 for another key or value |
//! | `POST /v1/drain/{node}`, `/v1/undrain/{node}`, `/v1/approve/{key}` | 200 `{"index": N}` |
//! | `POST /v1/desire`, `/v1/undesire` with `{"pool": …, "address": …}` | 200 `{"index": N}` |
//! | `POST /v1/store/backup` | 200, the bytes of a consistent backup file (`tenure store backup`) |
//!
//! The `POST`s need `Authorization: Bearer <token>` ([`ApiToken`]): 401 without, 403 with a wrong
//! one or when the agent has no token (fail closed). Their inputs are checked strictly before
//! anything is submitted (see [`body`], [`mutate`] and each command's module in [`crate::ops`]; an
//! operator command's query string is a 400 naming its first key, not ignored): a 4xx changes
//! nothing. Every error is JSON `{"error": "…", "field": "…"}` ([`ApiFailure`]),
//! counted in `tenure_requests_rejected_total{reason}` and logged at info; every request is
//! logged at debug. The token is never logged.
//!
//! # Layout
//! - [`auth`] — [`ApiToken`], the constant-time compare, the `Authorization` header.
//! - [`body`] — size, time and content-type limits; strict JSON object fields.
//! - [`list`] — the list calls' query, continue tokens and pages.
//! - [`mutate`] — the mutating routes: one handler for every operator command of
//!   [`crate::ops`] (each module names its route and checks its input), and the backup.
//! - [`failure`] — the error answer and its reasons.
//! - [`page`] — the status page (`GET /`).

pub mod auth;
pub mod body;
pub mod failure;
pub mod list;
pub mod mutate;
pub mod page;

use std::future::Future;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::{HeaderValue, StatusCode, header};
use serde::Serialize;
use serde_json::json;
use tenure_core::federation::history::HistoryEntry;
use tenure_core::rows::{ActionRow, OwnershipRow};

pub use auth::{API_TOKEN_BYTES_MAX, ApiError, ApiToken};
pub use body::{API_BODY_BYTES_MAX, API_BODY_READ_TIMEOUT};
pub use failure::ApiFailure;
pub use list::{ACTION_STATES, ListKind, ListQuery, Position, list_query};

use crate::agent::answers::ActionsQuery;
use crate::agent::listing::HistoryQuery;
use crate::agent::map::{ADDRESS_SERIES_AUTO_MAX, AddressSeries, MapFilter, OwnershipQuery};
use crate::agent::request::{ActionFilter, AgentHandle, HandleError, Health};
use crate::metrics::{METRICS_CONTENT_TYPE, Metrics};
use crate::ops::{self, OperatorCommand as _};
use failure::{Rejected, reason};

/// What every handler shares.
#[derive(Clone, Debug)]
pub struct ApiState {
    /// The way to the agent loop.
    handle: AgentHandle,
    /// Counters and the scrape.
    metrics: Arc<Metrics>,
    /// The bearer token of the mutating routes; `None` refuses them all.
    token: Option<Arc<ApiToken>>,
}

/// The API's routes over `handle`. Without a `token` every mutating call is refused (403).
pub fn router(handle: AgentHandle, metrics: Arc<Metrics>, token: Option<ApiToken>) -> Router {
    let state = ApiState { handle, metrics, token: token.map(Arc::new) };
    Router::new()
        .route("/", get(page::status_page))
        .route("/v1/ownership", get(ownership))
        .route("/v1/actions", get(actions))
        .route("/v1/history", get(history))
        .route("/v1/health", get(health))
        .route("/metrics", get(scrape))
        .route(ops::Drain::ROUTE, post(mutate::operator::<ops::Drain>))
        .route(ops::Undrain::ROUTE, post(mutate::operator::<ops::Undrain>))
        .route(ops::Approve::ROUTE, post(mutate::operator::<ops::Approve>))
        .route(ops::Desire::ROUTE, post(mutate::operator::<ops::Desire>))
        .route(ops::Undesire::ROUTE, post(mutate::operator::<ops::Undesire>))
        .route(ops::Retire::ROUTE, post(mutate::operator::<ops::Retire>))
        .route(ops::RetireForced::ROUTE, post(mutate::operator::<ops::RetireForced>))
        .route("/v1/store/backup", post(mutate::backup))
        .fallback(no_such_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .with_state(state)
}

/// Serves `router` on `listener` until `shutdown` completes, then lets requests in flight finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router).with_graceful_shutdown(shutdown).await
}

/// Logs each request at debug, and each error answer at info with its reason, which it counts.
async fn observe(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    tracing::debug!(%method, %path, "api request");
    let response = next.run(request).await;
    if let Some(rejected) = response.extensions().get::<Rejected>() {
        state.metrics.count_rejected_request(rejected.reason);
        tracing::info!(
            %method,
            %path,
            status = response.status().as_u16(),
            reason = rejected.reason,
            message = %rejected.message,
            "api request rejected"
        );
    }
    response
}

/// The 503 for a loop that stopped or did not answer.
pub(crate) fn not_answering(error: &HandleError) -> ApiFailure {
    ApiFailure::new(
        StatusCode::SERVICE_UNAVAILABLE,
        reason::AGENT_NOT_ANSWERING,
        format!("agent loop not answering: {error}"),
    )
}

#[derive(Serialize)]
struct OwnershipBody {
    ownership: Vec<OwnershipRow>,
    /// Continues the list after this page (`?continue=`), when more rows follow.
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

#[derive(Serialize)]
struct ActionsBody {
    actions: Vec<ActionRow>,
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct HistoryBody {
    history: Vec<HistoryEntry>,
    /// The first log index whose entries are all in the history (older records were compacted
    /// into a snapshot, or their entries dropped past the agent's bound).
    reaches_back_to: u64,
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

/// The pairs of a query string, or a 400.
fn query_pairs(
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Vec<(String, String)>, ApiFailure> {
    query.map(|Query(pairs)| pairs).map_err(|e| ApiFailure::bad_request(e.body_text()))
}

/// `GET /v1/ownership?pool=&node=&address=&limit=&continue=`: the loop pages (it writes out only
/// the rows of the page).
async fn ownership(
    State(state): State<ApiState>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<OwnershipBody>, ApiFailure> {
    let query = list_query(ListKind::Ownership, query_pairs(query)?)?;
    let after = match &query.after {
        Some(Position::Ownership { pool, address }) => Some((pool.clone(), *address)),
        _ => None,
    };
    let asked = OwnershipQuery {
        filter: MapFilter { list: query.filter.clone(), ..MapFilter::default() },
        after,
        limit: query.limit,
    };
    let answer = state.handle.ownership_page(asked).await.map_err(|e| not_answering(&e))?;
    let last = answer.rows.last().and_then(|row| {
        Some(Position::Ownership { pool: row.pool.clone(), address: row.address.parse().ok()? })
    });
    let next = list::next_token(ListKind::Ownership, &query, answer.more, last);
    Ok(Json(OwnershipBody { ownership: answer.rows, next }))
}

/// `GET /v1/actions?node=&state=&pool=&address=&limit=&continue=`.
async fn actions(
    State(state): State<ApiState>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<ActionsBody>, ApiFailure> {
    let query = list_query(ListKind::Actions, query_pairs(query)?)?;
    let filter = ActionFilter {
        node: query.filter.node.clone(),
        state: query.state.clone(),
        pool: query.filter.pool.clone(),
    };
    let after = match &query.after {
        Some(Position::Actions { node, seq }) => Some((node.clone(), *seq)),
        _ => None,
    };
    let asked = ActionsQuery { filter, addresses: query.filter.addresses.clone(), after, limit: query.limit };
    let page = state.handle.actions_page(asked).await.map_err(|e| not_answering(&e))?;
    let last = page.rows.last().map(|row| Position::Actions { node: row.node.clone(), seq: row.seq });
    let next = list::next_token(ListKind::Actions, &query, page.more, last);
    Ok(Json(ActionsBody { actions: page.rows, next }))
}

/// `GET /v1/history?pool=&node=&address=&limit=&continue=`: the loop pages (the history is long).
async fn history(
    State(state): State<ApiState>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<HistoryBody>, ApiFailure> {
    let query = list_query(ListKind::History, query_pairs(query)?)?;
    let after = query.after.as_ref().and_then(Position::history);
    let asked = HistoryQuery { filter: query.filter.clone(), after, limit: query.limit };
    let answer = state.handle.history(asked).await.map_err(|e| not_answering(&e))?;
    if let Some((log_index, _)) = after
        && log_index < answer.reaches_back_to
    {
        return Err(list::stale_history_token(log_index, answer.reaches_back_to));
    }
    let last = answer.entries.last().map(|(position, _)| Position::of_history(*position));
    let next = list::next_token(ListKind::History, &query, answer.more, last);
    let history = answer.entries.into_iter().map(|(_, entry)| entry).collect();
    Ok(Json(HistoryBody { history, reaches_back_to: answer.reaches_back_to, next }))
}

/// `GET /v1/health`: the loop's health, 503 when it cannot act or does not answer.
async fn health(State(state): State<ApiState>) -> Response {
    match state.handle.health().await {
        Ok(health) => {
            let status = if health.ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
            (status, Json::<Health>(health)).into_response()
        }
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"ok": false, "reason": format!("agent loop not answering: {e}")})),
        )
            .into_response(),
    }
}

/// `GET /metrics?addresses=auto|all|none`: encoded off the async workers (a large map takes a
/// while). The per-address series are written as `addresses` asks ([`AddressSeries`]; `auto`
/// when not given); any other key, a key given twice or another value is a 400 naming it.
async fn scrape(
    State(state): State<ApiState>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let series = match address_series(query_pairs(query)) {
        Ok(series) => series,
        Err(failure) => return failure.into_response(),
    };
    // A loop too busy to answer is as healthy as `GET /v1/health` says once the ask gave up
    // (the health the loop posted: a loop that posted nothing for the handle's timeout, hung or
    // stopped, is not healthy).
    let snapshot = state.handle.metrics_with(series).await.ok();
    if let Some(omitted) = snapshot.as_ref().map(|s| s.address_series_omitted).filter(|n| *n > 0)
        && matches!(series, AddressSeries::Auto(_))
        && !SERIES_LEFT_OUT_SAID.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        tracing::warn!(
            addresses = omitted,
            "GET /metrics leaves the per-address series out past {ADDRESS_SERIES_AUTO_MAX} addresses \
             (tenure_addresses has the counts by pool and phase; ?addresses=all writes them); said once"
        );
    }
    let healthy = snapshot.is_none() && state.handle.health().await.is_ok_and(|health| health.ok);
    let metrics = Arc::clone(&state.metrics);
    let text = match tokio::task::spawn_blocking(move || metrics.encode_with(snapshot, healthy)).await {
        Ok(text) => text,
        Err(e) => {
            return ApiFailure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                reason::UNAVAILABLE,
                format!("encoding the metrics failed: {e}"),
            )
            .into_response();
        }
    };
    ([(header::CONTENT_TYPE, HeaderValue::from_static(METRICS_CONTENT_TYPE))], text).into_response()
}

/// Whether a default scrape already said it left the per-address series out (once a process:
/// a dashboard that lost them on an upgrade finds why in the log).
static SERIES_LEFT_OUT_SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `/metrics`' query: at most one `addresses` (`auto`, `all`, `none`), nothing else.
fn address_series(pairs: Result<Vec<(String, String)>, ApiFailure>) -> Result<AddressSeries, ApiFailure> {
    let mut series = None;
    for (key, value) in pairs? {
        if key != "addresses" {
            return Err(ApiFailure::bad_field(
                &key,
                format!("unknown query parameter `{key}`; /metrics takes only addresses=auto|all|none"),
            ));
        }
        let parsed = AddressSeries::parse(&value).ok_or_else(|| {
            ApiFailure::bad_field("addresses", format!("`{value}` is not one of auto, all, none"))
        })?;
        if series.replace(parsed).is_some() {
            return Err(ApiFailure::bad_field("addresses", "given twice"));
        }
    }
    Ok(series.unwrap_or(AddressSeries::Auto(ADDRESS_SERIES_AUTO_MAX)))
}

async fn no_such_route(request: Request) -> ApiFailure {
    ApiFailure::new(
        StatusCode::NOT_FOUND,
        reason::NO_SUCH_ROUTE,
        format!("no route {} {}", request.method(), request.uri().path()),
    )
}

async fn method_not_allowed(request: Request) -> ApiFailure {
    ApiFailure::new(
        StatusCode::METHOD_NOT_ALLOWED,
        reason::METHOD_NOT_ALLOWED,
        format!("{} is not allowed on {}", request.method(), request.uri().path()),
    )
}
