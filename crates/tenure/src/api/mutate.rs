//! The mutating routes: the operator commands' (`POST /v1/drain/{node}`, `/v1/undrain/{node}`,
//! `/v1/approve/{key}`, `/v1/desire`, `/v1/undesire`: one handler, [`operator`], for every
//! [`OperatorCommand`] of `ops/`) and `POST /v1/store/backup`. Each authorizes, checks every
//! input, and only then submits one event to the agent loop. Nothing is submitted for any 4xx.

use axum::Json;
use axum::extract::{FromRequestParts as _, Path, Query, Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode, header};
use tenure_core::log::EventKind;

use super::ApiState;
use super::auth::{Presented, presented};
use super::body::{read, string_fields};
use super::failure::{ApiFailure, reason};
use crate::agent::request::{Receipt, SubmitError};
use crate::ops::{Input, OperatorCommand};

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

/// `POST C::ROUTE`: authorize, read `C`'s input where [`Input`] says (a path parameter checked
/// before the body is read, which then takes no fields; or the body's fields), turn it into `C`'s
/// event ([`OperatorCommand::event`] checks every value), and submit that.
pub async fn operator<C: OperatorCommand>(
    State(state): State<ApiState>,
    request: Request,
) -> Result<Json<Receipt>, ApiFailure> {
    let (mut parts, body) = request.into_parts();
    authorize(&state, &parts.headers)?;
    no_query(&parts.uri)?;
    let event = match C::INPUT {
        Input::Path(field) => {
            let Path(value) = Path::<String>::from_request_parts(&mut parts, &state)
                .await
                .map_err(|e| ApiFailure::bad_field(field, e.body_text()))?;
            let event = C::event(vec![value])?;
            string_fields(&read(&parts.headers, body).await?, &[])?;
            event
        }
        Input::Body(fields) => C::event(string_fields(&read(&parts.headers, body).await?, fields)?)?,
    };
    submit(&state, event).await
}

/// An operator command takes its input from its path or its body: a query string is refused
/// (400 naming its first key, decoded as the lists decode theirs; `query` when it has none), not
/// ignored (`?force=true` must not read as if it were obeyed).
fn no_query(uri: &http::Uri) -> Result<(), ApiFailure> {
    if uri.query().is_none_or(str::is_empty) {
        return Ok(());
    }
    let first = Query::<Vec<(String, String)>>::try_from_uri(uri)
        .ok()
        .and_then(|Query(pairs)| pairs.into_iter().map(|(key, _)| key).find(|key| !key.is_empty()));
    Err(ApiFailure::bad_field(
        first.as_deref().unwrap_or("query"),
        "this call takes no query parameters: its input is its path or its JSON body",
    ))
}

/// Why a backup was not given: 409 when this store never gives one (a fleet agent's log is in
/// etcd: asking again will not help), 503 when this one failed.
fn backup_failure(error: crate::store::StoreError) -> ApiFailure {
    match error {
        crate::store::StoreError::NoBackup { .. } => {
            ApiFailure::new(StatusCode::CONFLICT, reason::REFUSED, format!("no backup here: {error}"))
        }
        error => ApiFailure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            reason::UNAVAILABLE,
            format!("backup failed: {error}"),
        ),
    }
}

/// `POST /v1/store/backup`: a consistent backup of the running agent's store, as the bytes of a
/// backup file (what `tenure store backup` writes). Needs the token: a backup holds everything.
pub async fn backup(State(state): State<ApiState>, headers: HeaderMap) -> Result<Response, ApiFailure> {
    authorize(&state, &headers)?;
    let bytes = state.handle.backup().await.map_err(|e| super::not_answering(&e))?.map_err(backup_failure)?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_that_keeps_no_backup_is_a_refusal_and_a_failed_backup_is_unavailable() {
        let refused = backup_failure(crate::store::StoreError::NoBackup { why: "the log is in etcd" });
        assert_eq!((refused.status, refused.reason), (StatusCode::CONFLICT, reason::REFUSED));
        assert_eq!(refused.message, "no backup here: the log is in etcd");
        let failed = backup_failure(crate::store::StoreError::Closed { dir: "/s".into() });
        assert_eq!((failed.status, failed.reason), (StatusCode::SERVICE_UNAVAILABLE, reason::UNAVAILABLE));
        assert_eq!(failed.message, "backup failed: store /s is closed");
    }
}
