//! Every error answer of the API: a status, a JSON body `{"error": "...", "field": "..."}` with a
//! one-line message, and a reason from a fixed set that is counted
//! (`tenure_requests_rejected_total{reason}`) and logged.

use axum::Json;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde::Serialize;

/// The reasons a request is answered with an error (the `reason` label of
/// `tenure_requests_rejected_total`).
pub mod reason {
    /// 401: no bearer token on a mutating route.
    pub const UNAUTHENTICATED: &str = "unauthenticated";
    /// 403: a wrong bearer token.
    pub const FORBIDDEN: &str = "forbidden";
    /// 403: the agent has no `apiTokenFile`, so it refuses every mutating call.
    pub const NO_TOKEN_CONFIGURED: &str = "no-token-configured";
    /// 400: a bad field, body, path or query.
    pub const BAD_REQUEST: &str = "bad-request";
    /// 408: the body did not arrive in time.
    pub const BODY_TIMEOUT: &str = "body-timeout";
    /// 413: the body is larger than `API_BODY_BYTES_MAX`.
    pub const BODY_TOO_LARGE: &str = "body-too-large";
    /// 415: a body that is not `application/json`.
    pub const UNSUPPORTED_MEDIA_TYPE: &str = "unsupported-media-type";
    /// 404: no such route.
    pub const NO_SUCH_ROUTE: &str = "no-such-route";
    /// 405: the route exists, the method does not.
    pub const METHOD_NOT_ALLOWED: &str = "method-not-allowed";
    /// 404: the agent does not know the node, pool or address named.
    pub const NOT_FOUND: &str = "not-found";
    /// 409: the agent refused a well-formed change.
    pub const REFUSED: &str = "refused";
    /// 503: the log could not take the change.
    pub const UNAVAILABLE: &str = "unavailable";
    /// 503: the agent is shutting down.
    pub const SHUTTING_DOWN: &str = "shutting-down";
    /// 503: the agent loop stopped or did not answer in time.
    pub const AGENT_NOT_ANSWERING: &str = "agent-not-answering";
    /// A list's `continue` token points where the list no longer reaches (410).
    pub const CONTINUE_EXPIRED: &str = "continue-expired";
}

/// An error answer; built by the handlers, turned into a response by axum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiFailure {
    /// The HTTP status.
    pub status: StatusCode,
    /// One of [`reason`]'s constants.
    pub reason: &'static str,
    /// What is wrong, in one line.
    pub message: String,
    /// The request field at fault, if one is.
    pub field: Option<String>,
}

/// Put on every error response, for the logging and counting middleware.
#[derive(Clone, Debug)]
pub(crate) struct Rejected {
    /// One of [`reason`]'s constants.
    pub reason: &'static str,
    /// The one-line message sent.
    pub message: String,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'a str>,
}

impl ApiFailure {
    /// A failure with no field.
    #[must_use]
    pub fn new(status: StatusCode, reason: &'static str, message: impl Into<String>) -> Self {
        Self { status, reason, message: one_line(&message.into()), field: None }
    }

    /// A 400 naming `field`; the message says `field \`F\`: …`.
    #[must_use]
    pub fn bad_field(field: &str, message: impl AsRef<str>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            reason: reason::BAD_REQUEST,
            message: one_line(&format!("field `{field}`: {}", message.as_ref())),
            field: Some(field.to_owned()),
        }
    }

    /// A 400 about the request as a whole.
    #[must_use]
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, reason::BAD_REQUEST, message)
    }
}

impl IntoResponse for ApiFailure {
    fn into_response(self) -> Response {
        let body = ErrorBody { error: &self.message, field: self.field.as_deref() };
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response.extensions_mut().insert(Rejected { reason: self.reason, message: self.message });
        response
    }
}

/// `text` with control characters escaped, so that a message is always one line.
fn one_line(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_owned();
    }
    text.chars()
        .map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() })
        .collect()
}
