//! The mutating routes (`POST /v1/drain/{node}`, `/v1/undrain/{node}`, `/v1/approve/{key}`,
//! `/v1/desire`, `/v1/undesire`): authorize, check every input, and only then submit one event to
//! the agent loop. Nothing is submitted for any 4xx.

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode, header};
use tenure_core::input::check_name;
use tenure_core::input::parse_one_address;
use tenure_core::log::EventKind;
use tenure_core::model::{CaptureDomain, ParsedKey, StampedAction};

use super::ApiState;
use super::auth::{Presented, presented};
use super::body::{read, string_fields};
use super::failure::{ApiFailure, reason};
use crate::agent::request::{Receipt, SubmitError};

/// The fields of a `desire` / `undesire` body.
const POOL_ADDRESS_FIELDS: &[&str] = &["pool", "address"];

/// Checks the bearer token: 403 when the agent has none configured (fail closed), 401 when the
/// request carries none, 403 when it is wrong.
fn authorize(state: &ApiState, headers: &HeaderMap) -> Result<(), ApiFailure> {
    let Some(token) = &state.token else {
        return Err(ApiFailure::new(
            StatusCode::FORBIDDEN,
            reason::NO_TOKEN_CONFIGURED,
            "mutating calls are disabled: this agent has no API token; set `apiTokenFile` in its config",
        ));
    };
    match presented(headers.get(header::AUTHORIZATION)) {
        Presented::Missing => Err(ApiFailure::new(
            StatusCode::UNAUTHORIZED,
            reason::UNAUTHENTICATED,
            "this call needs `Authorization: Bearer <token>` (the agent's apiTokenFile)",
        )),
        Presented::Bearer(given) if token.matches(given) => Ok(()),
        Presented::Bearer(_) => Err(ApiFailure::new(
            StatusCode::FORBIDDEN,
            reason::FORBIDDEN,
            "the bearer token is not this agent's",
        )),
    }
}

/// The path segment `{what}`, decoded, as a name.
fn path_name(what: &str, path: Result<Path<String>, PathRejection>) -> Result<String, ApiFailure> {
    let Path(name) = path.map_err(|e| ApiFailure::bad_field(what, e.body_text()))?;
    check_name(what, &name).map_err(|e| ApiFailure::bad_field(what, e))?;
    Ok(name)
}

/// Checks an idempotency key: it must parse as `<pool>/<address>/<verb>/<holder>/<provider>/<nic>
/// /owner:<o>:epoch:<c>` with valid names, and be written the way the planner writes it
/// (canonical address, no leading zeros), since any other spelling could never name an action.
pub fn check_key(key: &str) -> Result<(), String> {
    const FORMAT: &str = "<pool>/<address>/<verb>/<holder>/<provider>/<nic>/owner:<N>:epoch:<N>";
    let parsed =
        ParsedKey::parse(key).ok_or_else(|| format!("`{key}` is not an idempotency key ({FORMAT})"))?;
    for (what, name) in [("pool", &parsed.pool), ("holder", &parsed.holder), ("provider", &parsed.provider)] {
        check_name(what, name).map_err(|e| format!("`{key}`: {e}"))?;
    }
    // A NIC is any non-empty text without `/` (the key's separator), as node declarations say.
    if parsed.nic.is_empty() {
        return Err(format!("`{key}`: nic must not be empty"));
    }
    // The key does not hold the capture domain; any will do to spell the key again.
    let spelled = StampedAction::new(
        &parsed.pool,
        parsed.address,
        parsed.verb,
        &parsed.holder,
        &parsed.provider,
        &parsed.nic,
        CaptureDomain::new(&parsed.provider, ""),
        parsed.capture_epoch,
        parsed.ownership_epoch,
    )
    .idempotency_key;
    if spelled != key {
        return Err(format!("`{key}` is not written canonically; the planner writes it `{spelled}`"));
    }
    Ok(())
}

/// Sends `event` to the agent loop and turns its answer into a response.
async fn submit(state: &ApiState, event: EventKind) -> Result<Json<Receipt>, ApiFailure> {
    match state.handle.submit(event).await {
        Ok(Ok(receipt)) => Ok(Json(receipt)),
        Ok(Err(SubmitError::NotFound(message))) => {
            Err(ApiFailure::new(StatusCode::NOT_FOUND, reason::NOT_FOUND, message))
        }
        Ok(Err(SubmitError::Refused(message))) => {
            Err(ApiFailure::new(StatusCode::CONFLICT, reason::REFUSED, message))
        }
        Ok(Err(e @ SubmitError::Unavailable(_))) => {
            Err(ApiFailure::new(StatusCode::SERVICE_UNAVAILABLE, reason::UNAVAILABLE, e.to_string()))
        }
        Ok(Err(e @ SubmitError::ShuttingDown)) => {
            Err(ApiFailure::new(StatusCode::SERVICE_UNAVAILABLE, reason::SHUTTING_DOWN, e.to_string()))
        }
        Err(e) => Err(super::not_answering(&e)),
    }
}

/// `POST /v1/drain/{node}`.
pub async fn drain(
    State(state): State<ApiState>,
    headers: HeaderMap,
    node: Result<Path<String>, PathRejection>,
    body: Body,
) -> Result<Json<Receipt>, ApiFailure> {
    authorize(&state, &headers)?;
    let node = path_name("node", node)?;
    string_fields(&read(&headers, body).await?, &[])?;
    submit(&state, EventKind::Drain { node }).await
}

/// `POST /v1/undrain/{node}`.
pub async fn undrain(
    State(state): State<ApiState>,
    headers: HeaderMap,
    node: Result<Path<String>, PathRejection>,
    body: Body,
) -> Result<Json<Receipt>, ApiFailure> {
    authorize(&state, &headers)?;
    let node = path_name("node", node)?;
    string_fields(&read(&headers, body).await?, &[])?;
    submit(&state, EventKind::Undrain { node }).await
}

/// `POST /v1/approve/{key}` (the key's `/`s may be sent as they are or as `%2F`).
pub async fn approve(
    State(state): State<ApiState>,
    headers: HeaderMap,
    key: Result<Path<String>, PathRejection>,
    body: Body,
) -> Result<Json<Receipt>, ApiFailure> {
    authorize(&state, &headers)?;
    let Path(key) = key.map_err(|e| ApiFailure::bad_field("key", e.body_text()))?;
    check_key(&key).map_err(|e| ApiFailure::bad_field("key", e))?;
    string_fields(&read(&headers, body).await?, &[])?;
    submit(&state, EventKind::Approve { idempotency_key: key }).await
}

/// The `{"pool": …, "address": …}` body of desire and undesire, checked.
async fn pool_address(headers: &HeaderMap, body: Body) -> Result<(String, std::net::IpAddr), ApiFailure> {
    let bytes = read(headers, body).await?;
    let [pool, address]: [String; 2] = string_fields(&bytes, POOL_ADDRESS_FIELDS)?
        .try_into()
        .expect("string_fields returns one value per expected field");
    check_name("pool", &pool).map_err(|e| ApiFailure::bad_field("pool", e))?;
    if address.trim() != address {
        return Err(ApiFailure::bad_field("address", format!("`{address}` has surrounding whitespace")));
    }
    let address = parse_one_address(&address).map_err(|e| ApiFailure::bad_field("address", e))?;
    Ok((pool, address))
}

/// `POST /v1/desire` with `{"pool": "p", "address": "10.0.0.10"}`.
pub async fn desire(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Receipt>, ApiFailure> {
    authorize(&state, &headers)?;
    let (pool, address) = pool_address(&headers, body).await?;
    submit(&state, EventKind::Desire { pool, address }).await
}

/// `POST /v1/undesire` with `{"pool": "p", "address": "10.0.0.10"}`.
pub async fn undesire(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Receipt>, ApiFailure> {
    authorize(&state, &headers)?;
    let (pool, address) = pool_address(&headers, body).await?;
    submit(&state, EventKind::Undesire { pool, address }).await
}

/// `POST /v1/store/backup`: a consistent backup of the running agent's store, as the bytes of a
/// backup file (what `tenure store backup` writes). Needs the token: a backup holds everything.
pub async fn backup(State(state): State<ApiState>, headers: HeaderMap) -> Result<Response, ApiFailure> {
    authorize(&state, &headers)?;
    let bytes = state.handle.backup().await.map_err(|e| super::not_answering(&e))?.map_err(|reason| {
        ApiFailure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            reason::UNAVAILABLE,
            format!("backup failed: {reason}"),
        )
    })?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_must_be_spelled_as_the_planner_spells_them() {
        assert_eq!(check_key("p/10.0.0.10/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1"), Ok(()));
        assert_eq!(check_key("p/2001:db8::1/proxy-arp-del/b/lan/eth0/owner:8:epoch:9"), Ok(()));
        for bad in [
            "",
            "p/10.0.0.10",
            "p/10.0.0.10/nope/a/sim1/eni-a/owner:1:epoch:1",
            "p/10.0.0.10/assign-secondary-ip/a/sim1/eni-a/owner:01:epoch:1",
            "p/2001:DB8::1/proxy-arp-del/b/lan/eth0/owner:8:epoch:9",
            "p/10.0.0.10/assign-secondary-ip/a b/sim1/eni-a/owner:1:epoch:1",
            "p/10.0.0.10/assign-secondary-ip//sim1/eni-a/owner:1:epoch:1",
        ] {
            assert!(check_key(bad).is_err(), "{bad:?} must be refused");
        }
    }
}
