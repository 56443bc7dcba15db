//! One signed HTTPS request, retried within a deadline: the transport under [`crate::Core`] and
//! the instance principal's federation.
//!
//! | answer | what happens |
//! |---|---|
//! | 2xx | the answer |
//! | 429, 409 `Conflict` / `IncorrectState` (not for a create) | waited for (`Retry-After` when given, else a doubling backoff from [`BACKOFF_FIRST`]) and sent again, unless the wait would pass the deadline: then [`OciError::Refused`] saying so (logged at warn with OCI's code); 429 and `IncorrectState` are counted in [`Http::throttled`], `Conflict` is not (OCI also uses it for lasting states) |
//! | 5xx | the same, not counted as throttling; a write (not a GET) answered 5xx may have taken effect, so giving it up afterwards is [`OciError::InDoubt`] |
//! | 401, 404 `NotAuthorizedOrNotFound` | [`OciError::Permission`] at once (OCI answers 404 for "not authorised" too) |
//! | any other (412 included) | [`OciError::Refused`] at once |
//! | no answer | [`OciError::NoAnswer`] (the request may have taken effect) |
//!
//! A call made with [`Call::resend`] false is never sent twice: its 429, 409 or 5xx comes back as
//! [`OciError::Busy`] (with `Retry-After`), for the caller to read the object again before it
//! decides anything (a conditional delete). Nothing is sent once the deadline has passed, the
//! first try included: [`OciError::NotSent`] (or [`OciError::InDoubt`] after a 5xx to a write).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt as _, Full};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::time::Instant;

use crate::sign::{self, SigningKey};

/// The first wait before resending after a throttle or server error without `Retry-After`.
pub const BACKOFF_FIRST: Duration = Duration::from_millis(100);
/// The longest such wait.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Longest wait for one answer (a call's own deadline bounds it first when nearer).
const ANSWER_MAX: Duration = Duration::from_secs(30);

/// Why an OCI call did not do what was asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OciError {
    /// Not authenticated, or not authorised (OCI's 404 `NotAuthorizedOrNotFound` is both "no such
    /// object" and "not allowed to see it"): retrying will not help.
    #[error("{operation}: HTTP {status} {code}: {message} ({hint})")]
    Permission {
        /// The API operation.
        operation: &'static str,
        /// The HTTP status.
        status: u16,
        /// OCI's error code.
        code: String,
        /// OCI's message.
        message: String,
        /// What to check: the IAM policy statements the provider needs.
        hint: &'static str,
    },
    /// OCI refused the request, or kept throttling until the deadline.
    #[error("{operation}: HTTP {status} {code}: {message}")]
    Refused {
        /// The API operation.
        operation: &'static str,
        /// The HTTP status (0 when no answer was read).
        status: u16,
        /// OCI's error code.
        code: String,
        /// OCI's message.
        message: String,
    },
    /// A write (not a GET) answered 5xx — it may have taken effect — and then given up without
    /// an answer saying what happened: the deadline came, or the later tries were throttled.
    #[error(
        "{operation}: HTTP {status} {code}: {message} (in doubt: an earlier try was answered {first}, and may have taken effect)"
    )]
    InDoubt {
        /// The API operation.
        operation: &'static str,
        /// The HTTP status of the last answer.
        status: u16,
        /// OCI's error code of the last answer.
        code: String,
        /// OCI's message, and why it was given up.
        message: String,
        /// The 5xx status that put the write in doubt.
        first: u16,
    },
    /// Not sent: the call's deadline had passed before it could be (first try or resend).
    #[error("{operation}: not sent: {message}")]
    NotSent {
        /// The API operation.
        operation: &'static str,
        /// Why.
        message: String,
    },
    /// A 429, 409 or 5xx to a call made with [`Call::resend`] false: not resent here.
    #[error("{operation}: HTTP {status} {code}: {message}")]
    Busy {
        /// The API operation.
        operation: &'static str,
        /// The HTTP status.
        status: u16,
        /// OCI's error code.
        code: String,
        /// OCI's message.
        message: String,
        /// The `Retry-After` OCI asked for, if any.
        retry_after: Option<Duration>,
    },
    /// No answer (connection refused, reset, timed out): the call may or may not have taken
    /// effect.
    #[error("{operation}: no answer from OCI: {message}")]
    NoAnswer {
        /// The API operation.
        operation: &'static str,
        /// What failed.
        message: String,
    },
    /// The signing key or the instance principal's credentials could not be had.
    #[error("{operation}: cannot sign: {message}")]
    Credentials {
        /// The API operation.
        operation: &'static str,
        /// Why.
        message: String,
    },
}

/// The IAM policy hint of a permission error (docs/operations.md, "OCI", lists them).
pub const POLICY_HINT: &str = "the caller needs, in the VNICs' and subnets' compartment: `use vnics`, `use private-ips`, `use subnets` \
     (e.g. `Allow dynamic-group <dg> to use private-ips in compartment <c>`; see docs/operations.md, OCI)";

/// The hint of a 401: authentication, not policy.
pub const AUTHENTICATION_HINT: &str = "OCI did not accept the request's signature: check the profile's key_file, its \
     fingerprint, user and tenancy OCIDs, and this host's clock (OCI refuses a request dated more than 5 minutes off); \
     with instancePrincipal, the instance's dynamic group";

/// One signed call to make.
#[derive(Clone, Debug)]
pub struct Call<'a> {
    /// The API operation (for errors and logs).
    pub operation: &'static str,
    /// The method.
    pub method: Method,
    /// The whole URL.
    pub url: &'a str,
    /// The JSON body, for POST and PUT.
    pub body: Option<&'a [u8]>,
    /// Nothing is sent, and no wait begins, that would end after it.
    pub deadline: Instant,
    /// Whether a 409 `Conflict`/`IncorrectState` is waited for and resent.
    pub retry_conflict: bool,
    /// `if-match`: the etag the object must still have for the write to apply (412 otherwise).
    pub if_match: Option<&'a str>,
    /// Whether a 429, 409 or 5xx is waited for and resent here; when false it is returned at
    /// once as [`OciError::Busy`].
    pub resend: bool,
}

/// A signed answer: status, headers, body.
#[derive(Debug)]
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

/// The HTTP(S) client and the throttle counter.
#[derive(Clone, Debug)]
pub struct Http {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    throttled: Arc<AtomicU64>,
}

impl Http {
    /// A client trusting the system's CA certificates (plain `http://` for test endpoints).
    ///
    /// # Errors
    ///
    /// [`OciError::Credentials`] when TLS cannot be set up.
    pub fn new() -> Result<Self, OciError> {
        let found = rustls_native_certs::load_native_certs();
        let mut roots = rustls::RootCertStore::empty();
        let _ = roots.add_parsable_certificates(found.certs);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| OciError::Credentials {
                operation: "connect",
                message: format!("cannot set up TLS: {e}"),
            })?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector =
            HttpsConnectorBuilder::new().with_tls_config(config).https_or_http().enable_http1().build();
        Ok(Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
            throttled: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Calls answered 429 or 409 `IncorrectState` so far (each resent or given up).
    #[must_use]
    pub fn throttled(&self) -> u64 {
        self.throttled.load(Ordering::Relaxed)
    }

    /// One unsigned GET with extra headers (instance metadata).
    ///
    /// # Errors
    ///
    /// [`OciError::NoAnswer`] or [`OciError::Refused`] for a non-2xx answer.
    pub async fn get_plain(
        &self,
        operation: &'static str,
        url: &str,
        headers: &[(&str, &str)],
    ) -> Result<Bytes, OciError> {
        let uri: Uri = url.parse().map_err(|e| OciError::Refused {
            operation,
            status: 0,
            code: "BadUrl".into(),
            message: format!("{url}: {e}"),
        })?;
        let mut request = Request::builder().method(Method::GET).uri(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(Bytes::new())).map_err(|e| OciError::Refused {
            operation,
            status: 0,
            code: "BadRequest".into(),
            message: e.to_string(),
        })?;
        let answer = self.send(operation, request, Instant::now() + ANSWER_MAX).await?;
        if answer.status.is_success() { Ok(answer.body) } else { Err(refusal(operation, &answer)) }
    }

    /// Sends `method url` with `body` (JSON), signed by `signer` (which may change between
    /// attempts: a refreshed session token), retried as the module says until `deadline`; a 409
    /// is resent only when `retry_conflict` (a create's 409 means the address is in use: the
    /// caller reads again instead).
    ///
    /// # Errors
    ///
    /// Any [`OciError`].
    pub async fn signed<F, Fut>(&self, call: Call<'_>, signer: F) -> Result<Answer, OciError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<(String, SigningKey), OciError>>,
    {
        let Call { operation, method, url, body, deadline, retry_conflict, if_match, resend } = call;
        let uri: Uri = url.parse().map_err(|e| OciError::Refused {
            operation,
            status: 0,
            code: "BadUrl".into(),
            message: format!("{url}: {e}"),
        })?;
        let host = match (uri.host(), uri.port_u16()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_owned(),
            (None, _) => {
                return Err(OciError::Refused {
                    operation,
                    status: 0,
                    code: "BadUrl".into(),
                    message: url.to_owned(),
                });
            }
        };
        let target = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        let write = method != Method::GET;
        let mut backoff = BACKOFF_FIRST;
        // The 5xx status of an earlier try of this write, which may have taken effect.
        let mut doubt: Option<(u16, String)> = None;
        let mut tries = 0_u32;
        loop {
            let (key_id, key) = signer().await?;
            // Right before the send (a signer may have waited for a federation, a sleep may
            // have overrun): nothing goes out past the deadline (SPEC 9).
            if Instant::now() >= deadline {
                let message = if tries == 0 {
                    "the deadline passed before it was sent".to_owned()
                } else {
                    "the deadline passed before it was sent again".to_owned()
                };
                return Err(match doubt {
                    Some((first, code)) => {
                        OciError::InDoubt { operation, status: first, code, message, first }
                    }
                    None => OciError::NotSent { operation, message },
                });
            }
            tries += 1;
            let date = httpdate::fmt_http_date(std::time::SystemTime::now());
            let to_sign = sign::Request {
                method: method.as_str(),
                path_and_query: &target,
                host: &host,
                date: &date,
                body: body.map(|b| (b, "application/json")),
            };
            let signed = sign::sign(&to_sign, &key_id, &key)
                .map_err(|e| OciError::Credentials { operation, message: e.to_string() })?;
            let mut request = Request::builder()
                .method(method.clone())
                .uri(uri.clone())
                .header("host", &host)
                .header("accept", "application/json");
            for (name, value) in &signed.headers {
                request = request.header(*name, value);
            }
            if let Some(etag) = if_match {
                request = request.header("if-match", etag);
            }
            let request =
                request.body(Full::new(Bytes::copy_from_slice(body.unwrap_or_default()))).map_err(|e| {
                    OciError::Refused {
                        operation,
                        status: 0,
                        code: "BadRequest".into(),
                        message: e.to_string(),
                    }
                })?;
            let answer = self.send(operation, request, deadline).await?;
            let status = answer.status.as_u16();
            if answer.status.is_success() {
                return Ok(answer);
            }
            let (code, message) = error_of(&answer.body);
            // A write answered 5xx may have landed: whatever refusal its resend gets (a 401 from a
            // session that expired meanwhile, a 409 "in use" caused by the first try itself), the
            // call stays in doubt. A 412 is left to the caller, which reads again.
            if let Some((first, _)) =
                doubt.as_ref().filter(|_| status != 412 && !answer.status.is_server_error())
                && !(status == 429 || (status == 409 && retry_conflict))
            {
                return Err(OciError::InDoubt { operation, status, code, message, first: *first });
            }
            if status == 401 {
                return Err(OciError::Permission {
                    operation,
                    status,
                    code,
                    message,
                    hint: AUTHENTICATION_HINT,
                });
            }
            if status == 404 && code == "NotAuthorizedOrNotFound" {
                return Err(OciError::Permission { operation, status, code, message, hint: POLICY_HINT });
            }
            let conflict =
                status == 409 && retry_conflict && matches!(code.as_str(), "Conflict" | "IncorrectState");
            let server = answer.status.is_server_error();
            if !(status == 429 || conflict || server) {
                return Err(OciError::Refused { operation, status, code, message });
            }
            // Only these are throttling: OCI also answers `Conflict` for states that last.
            if status == 429 || (conflict && code == "IncorrectState") {
                self.throttled.fetch_add(1, Ordering::Relaxed);
            }
            if server && write {
                doubt = doubt.or_else(|| Some((status, code.clone())));
            }
            let wait = retry_after(&answer.headers);
            if !resend {
                return Err(OciError::Busy { operation, status, code, message, retry_after: wait });
            }
            let wait = wait.unwrap_or(backoff);
            backoff = (backoff * 2).min(BACKOFF_MAX);
            if Instant::now() + wait >= deadline {
                tracing::warn!(operation, status, %code, ?wait, tries, "oci: given up: resending would pass the deadline");
                let message = format!("{message} (not resent: waiting {wait:?} would pass the deadline)");
                return Err(match doubt {
                    Some((first, _)) => OciError::InDoubt { operation, status, code, message, first },
                    None => OciError::Refused { operation, status, code, message },
                });
            }
            tracing::debug!(
                operation,
                status,
                %code,
                ?wait,
                "oci: resending after a throttle, conflict or server error"
            );
            tokio::time::sleep(wait).await;
        }
    }

    async fn send(
        &self,
        operation: &'static str,
        request: Request<Full<Bytes>>,
        deadline: Instant,
    ) -> Result<Answer, OciError> {
        let bound = deadline.min(Instant::now() + ANSWER_MAX);
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| OciError::NoAnswer { operation, message: with_causes(&e) })?;
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|e| OciError::NoAnswer { operation, message: with_causes(&e) })?
                .to_bytes();
            Ok(Answer { status: parts.status, headers: parts.headers, body })
        };
        tokio::time::timeout_at(bound, exchange).await.unwrap_or_else(|_| {
            Err(OciError::NoAnswer { operation, message: "no answer before the deadline".into() })
        })
    }
}

/// `Retry-After` in seconds (OCI sends whole seconds), if given.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get("retry-after")?.to_str().ok()?.trim();
    value.parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0).map(Duration::from_secs_f64)
}

/// OCI's error body `{"code": …, "message": …}`.
fn error_of(body: &[u8]) -> (String, String) {
    let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let text = |key: &str| value.get(key).and_then(serde_json::Value::as_str).map(str::to_owned);
    (
        text("code").unwrap_or_else(|| "Unknown".into()),
        text("message").unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(200).collect()),
    )
}

fn refusal(operation: &'static str, answer: &Answer) -> OciError {
    let (code, message) = error_of(&answer.body);
    OciError::Refused { operation, status: answer.status.as_u16(), code, message }
}

fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
