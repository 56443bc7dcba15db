//! The agent's HTTP API (SPEC 10), on axum. It holds no state of its own: every answer comes
//! from the agent loop through an [`AgentHandle`].
//!
//! | route | answer |
//! |---|---|
//! | `GET /?pool=&node=&address=&phase=&page=&refresh=` | 200, the status page (HTML + SVG, [`page`]); no token |
//! | `GET /v1/ownership?pool=&node=&address=` | 200 `{"ownership": [rows as in the replay report]}` (owner, phase, holders, NICs); 400 for an unknown key or a bad address |
//! | `GET /v1/actions?node=&state=&pool=` | 200 `{"actions": [...]}`; 400 for an unknown key or state |
//! | `GET /v1/health` | 200 with the [`Health`] JSON when ok, 503 with it when not |
//! | `GET /metrics` | 200, OpenMetrics text ([`Metrics::encode`]) |
//! | `POST /v1/drain/{node}`, `/v1/undrain/{node}`, `/v1/approve/{key}` | 200 `{"index": N}` |
//! | `POST /v1/desire`, `/v1/undesire` with `{"pool": …, "address": …}` | 200 `{"index": N}` |
//! | `POST /v1/store/backup` | 200, the bytes of a consistent backup file (`tenure store backup`) |
//!
//! The `POST`s need `Authorization: Bearer <token>` ([`ApiToken`]): 401 without, 403 with a wrong
//! one or when the agent has no token (fail closed). Their inputs are checked strictly before
//! anything is submitted (see [`body`] and [`mutate`]): a 4xx changes nothing. Every error is JSON
//! `{"error": "…", "field": "…"}` ([`ApiFailure`]), counted in
//! `tenure_requests_rejected_total{reason}` and logged at info; every request is logged at debug.
//! The token is never logged.
//!
//! # Layout
//! - [`auth`] — [`ApiToken`], the constant-time compare, the `Authorization` header.
//! - [`body`] — size, time and content-type limits; strict JSON object fields.
//! - [`mutate`] — the mutating routes.
//! - [`failure`] — the error answer and its reasons.
//! - [`page`] — the status page (`GET /`).

pub mod auth;
pub mod body;
pub mod failure;
pub mod mutate;
pub mod page;

use std::future::Future;
use std::net::IpAddr;
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
use tenure_core::input::check_name;
use tenure_sim::replay::{ActionRow, OwnershipRow};
use tenure_sim::scenario::parse_one_address;

pub use auth::{API_TOKEN_BYTES_MAX, ApiError, ApiToken};
pub use body::{API_BODY_BYTES_MAX, API_BODY_READ_TIMEOUT};
pub use failure::ApiFailure;

use crate::agent::request::{ActionFilter, AgentHandle, HandleError, Health};
use crate::metrics::{METRICS_CONTENT_TYPE, Metrics};
use failure::{Rejected, reason};

/// The journal entry states `?state=` accepts.
pub const ACTION_STATES: &[&str] = &["pending", "approved", "executed", "failed", "skipped"];

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
        .route("/v1/health", get(health))
        .route("/metrics", get(scrape))
        .route("/v1/drain/{node}", post(mutate::drain))
        .route("/v1/undrain/{node}", post(mutate::undrain))
        .route("/v1/approve/{*key}", post(mutate::approve))
        .route("/v1/desire", post(mutate::desire))
        .route("/v1/undesire", post(mutate::undesire))
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
}

#[derive(Serialize)]
struct ActionsBody {
    actions: Vec<ActionRow>,
}

/// `GET /v1/ownership?pool=&node=&address=`.
async fn ownership(
    State(state): State<ApiState>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<OwnershipBody>, ApiFailure> {
    let Query(pairs) = query.map_err(|e| ApiFailure::bad_request(e.body_text()))?;
    let filter = ownership_filter(pairs)?;
    let ownership = state.handle.ownership().await.map_err(|e| not_answering(&e))?;
    Ok(Json(OwnershipBody { ownership: ownership.into_iter().filter(|row| filter.matches(row)).collect() }))
}

/// Which rows of the ownership map a query asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnershipFilter {
    /// `pool`: only this pool's addresses.
    pub pool: Option<String>,
    /// `node`: only addresses this node owns or holds (by the log's results and inventories).
    pub node: Option<String>,
    /// `address` (repeatable): only these addresses.
    pub addresses: Vec<IpAddr>,
}

impl OwnershipFilter {
    /// Whether `row` is asked for.
    #[must_use]
    pub fn matches(&self, row: &OwnershipRow) -> bool {
        self.pool.as_ref().is_none_or(|pool| *pool == row.pool)
            && self.node.as_ref().is_none_or(|node| {
                row.owner.as_ref() == Some(node) || row.held_by.iter().flatten().any(|n| n == node)
            })
            && (self.addresses.is_empty()
                || row.address.parse::<IpAddr>().is_ok_and(|address| self.addresses.contains(&address)))
    }
}

/// The filter of an ownership query: `pool` and `node` at most once, `address` any number of
/// times; anything else is a 400 naming it.
pub fn ownership_filter(pairs: Vec<(String, String)>) -> Result<OwnershipFilter, ApiFailure> {
    let mut filter = OwnershipFilter::default();
    for (key, value) in pairs {
        let slot = match key.as_str() {
            "pool" => &mut filter.pool,
            "node" => &mut filter.node,
            "address" => {
                let address = parse_one_address(&value).map_err(|e| ApiFailure::bad_field("address", e))?;
                filter.addresses.push(address);
                continue;
            }
            _ => {
                return Err(ApiFailure::bad_field(
                    &key,
                    "unknown query parameter; expected `pool`, `node` or `address`",
                ));
            }
        };
        if slot.is_some() {
            return Err(ApiFailure::bad_field(&key, "given twice"));
        }
        check_name(&key, &value).map_err(|e| ApiFailure::bad_field(&key, e))?;
        *slot = Some(value);
    }
    Ok(filter)
}

/// `GET /v1/actions?node=&state=&pool=`.
async fn actions(
    State(state): State<ApiState>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<ActionsBody>, ApiFailure> {
    let Query(pairs) = query.map_err(|e| ApiFailure::bad_request(e.body_text()))?;
    let filter = action_filter(pairs)?;
    let actions = state.handle.actions(filter).await.map_err(|e| not_answering(&e))?;
    Ok(Json(ActionsBody { actions }))
}

/// The filter a query asks for: `node`, `state` and `pool`, each at most once; anything else is
/// a 400 naming it.
pub fn action_filter(pairs: Vec<(String, String)>) -> Result<ActionFilter, ApiFailure> {
    let mut filter = ActionFilter::default();
    for (key, value) in pairs {
        let slot = match key.as_str() {
            "node" => &mut filter.node,
            "state" => &mut filter.state,
            "pool" => &mut filter.pool,
            _ => {
                return Err(ApiFailure::bad_field(
                    &key,
                    "unknown query parameter; expected `node`, `state` or `pool`",
                ));
            }
        };
        if slot.is_some() {
            return Err(ApiFailure::bad_field(&key, "given twice"));
        }
        if key == "state" {
            if !ACTION_STATES.contains(&value.as_str()) {
                return Err(ApiFailure::bad_field(
                    "state",
                    format!("unknown state `{value}`; expected one of {}", ACTION_STATES.join(", ")),
                ));
            }
        } else {
            check_name(&key, &value).map_err(|e| ApiFailure::bad_field(&key, e))?;
        }
        *slot = Some(value);
    }
    Ok(filter)
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

/// `GET /metrics`: encoded off the async workers (a large map takes a while).
async fn scrape(State(state): State<ApiState>) -> Response {
    let snapshot = state.handle.metrics().await.ok();
    let metrics = Arc::clone(&state.metrics);
    let text = match tokio::task::spawn_blocking(move || metrics.encode(snapshot)).await {
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
