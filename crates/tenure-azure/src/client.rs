//! [`Arm`]: one Azure Resource Manager HTTP call at a time, through `azure_core`'s pipeline with
//! its retries off, and the rules this crate retries by, within the caller's deadline:
//!
//! | answer | what happens |
//! |---|---|
//! | 429, or 409 `RetryableErrorDueToAnotherOperation` / `AnotherOperationInProgress` | wait `Retry-After` (counted in [`Arm::throttled_calls`]), then again; [`ArmError::Deadline`] when the wait would pass the deadline |
//! | 5xx, or no answer to a read | wait (doubling from [`BACKOFF_FIRST`] to [`BACKOFF_MAX`], or `Retry-After`), then again |
//! | 401 / 403 | [`ArmError::Permission`] at once, naming the role needed |
//! | any refusal but 412 to a write an earlier try of which was answered 5xx | [`ArmError::InDoubt`] (the first try may have taken effect) |
//! | 412 | given back to the caller (it re-reads the NIC and tries again) |
//! | anything else below 200 or above 299 | [`ArmError::Refused`] |
//!
//! The deadline is checked right before every try, the first one included, and again once the
//! try has its token: past it nothing is sent ([`ArmError::Deadline`], "not sent"), however long a
//! wait overran.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use azure_core::credentials::TokenCredential;
use azure_core::http::headers::HeaderName;
use azure_core::http::{ClientOptions, Context, Method, Pipeline, Request, RetryOptions, Url};
use serde_json::Value;
use tokio::time::Instant;

use crate::ArmError;

/// The token audience of Azure Resource Manager.
pub const ARM_SCOPE: &str = "https://management.azure.com/.default";

/// Azure Resource Manager's public endpoint.
pub const ARM_ENDPOINT: &str = "https://management.azure.com";

/// The `Microsoft.Network` API version of every call.
pub const API_VERSION: &str = "2024-05-01";

/// The environment variable of the test hook: a fixed bearer token, sent instead of any
/// credential's (tests against the fake in `scripts/azure-fake`; never set it in production).
pub const TEST_TOKEN_ENV: &str = "TENURE_AZURE_TEST_TOKEN";

/// First wait after a server error without `Retry-After`.
pub const BACKOFF_FIRST: Duration = Duration::from_millis(200);

/// Longest wait between two tries after server errors.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Wait between two polls of a long-running operation whose answer has no `Retry-After`.
pub const POLL_DEFAULT: Duration = Duration::from_secs(1);

/// ARM error codes that mean "another operation on this resource is under way: try later".
const BUSY_CODES: &[&str] = &["RetryableErrorDueToAnotherOperation", "AnotherOperationInProgress"];

/// How requests are authorised.
enum Auth {
    /// An `azure_identity` credential's token for [`ARM_SCOPE`] (only ever sent over https).
    Credential(Arc<dyn TokenCredential>),
    /// The test hook's fixed token ([`TEST_TOKEN_ENV`]).
    Fixed(String),
}

/// One answer of ARM, read whole.
#[derive(Debug)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The body as JSON (`Null` when empty or not JSON).
    pub body: Value,
    /// `ETag`.
    pub etag: Option<String>,
    /// `Azure-AsyncOperation`.
    pub async_operation: Option<String>,
    /// `Location`.
    pub location: Option<String>,
    /// The wait asked for: `retry-after-ms`, `x-ms-retry-after-ms`, or `Retry-After` (seconds).
    pub retry_after: Option<Duration>,
}

impl Answer {
    /// ARM's error code and message in the body (`{"error": {"code", "message"}}`).
    #[must_use]
    pub fn error(&self) -> (String, String) {
        let error = &self.body["error"];
        let code = error["code"].as_str().unwrap_or("Unknown").to_owned();
        let message = error["message"].as_str().unwrap_or_default().to_owned();
        (code, message)
    }
}

/// An Azure Resource Manager client: the pipeline, the endpoint, the credential, and the count
/// of throttled answers.
pub struct Arm {
    pipeline: Pipeline,
    endpoint: Url,
    auth: Auth,
    throttled: AtomicU64,
    /// No request before this instant: ARM's last 429 asked to wait until then (throttling is per
    /// subscription and principal, so every call of this client waits, the next action's too).
    quiet_until: std::sync::Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Arm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arm").field("endpoint", &self.endpoint.as_str()).finish_non_exhaustive()
    }
}

impl Arm {
    /// A client of ARM at `endpoint_url` (the public endpoint when `None`), authorised by the
    /// environment: the test hook's token ([`TEST_TOKEN_ENV`]) when set; else workload identity
    /// (`AZURE_FEDERATED_TOKEN_FILE`); else a service principal's secret (`AZURE_TENANT_ID`,
    /// `AZURE_CLIENT_ID`, `AZURE_CLIENT_SECRET`); else managed identity (user-assigned when
    /// `AZURE_CLIENT_ID` is set). Makes no call.
    ///
    /// # Errors
    ///
    /// [`ArmError::Setup`] for an endpoint that is not a URL, a credential the environment
    /// describes badly, or a credential's token over plain http.
    pub fn from_environment(endpoint_url: Option<&str>) -> Result<Self, ArmError> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let auth = if let Some(token) = env(TEST_TOKEN_ENV) {
            Auth::Fixed(token)
        } else {
            Auth::Credential(credential_from(&env)?)
        };
        Self::with_auth(endpoint_url, auth)
    }

    /// A client of `endpoint_url` that sends `token` as its bearer token (tests and benches
    /// against the fake).
    ///
    /// # Errors
    ///
    /// [`ArmError::Setup`] for an endpoint that is not a URL.
    pub fn with_fixed_token(endpoint_url: &str, token: &str) -> Result<Self, ArmError> {
        Self::with_auth(Some(endpoint_url), Auth::Fixed(token.to_owned()))
    }

    fn with_auth(endpoint_url: Option<&str>, auth: Auth) -> Result<Self, ArmError> {
        let text = endpoint_url.unwrap_or(ARM_ENDPOINT);
        let endpoint: Url =
            text.parse().map_err(|e| ArmError::Setup { message: format!("endpointUrl `{text}`: {e}") })?;
        if matches!(auth, Auth::Credential(_)) && endpoint.scheme() != "https" {
            return Err(ArmError::Setup {
                message: format!(
                    "endpointUrl `{text}` is not https: a credential's token is sent over https only (set {TEST_TOKEN_ENV} for a test endpoint)"
                ),
            });
        }
        let options = ClientOptions { retry: RetryOptions::none(), ..ClientOptions::default() };
        let pipeline = Pipeline::new(
            option_env!("CARGO_PKG_NAME"),
            option_env!("CARGO_PKG_VERSION"),
            options,
            Vec::new(),
            Vec::new(),
            None,
        );
        Ok(Self {
            pipeline,
            endpoint,
            auth,
            throttled: AtomicU64::new(0),
            quiet_until: std::sync::Mutex::new(None),
        })
    }

    /// Answers of ARM that asked to wait (429, or another operation under way) since this client
    /// was made.
    #[must_use]
    pub fn throttled_calls(&self) -> u64 {
        self.throttled.load(Ordering::Relaxed)
    }

    /// The URL of `path` (an ARM resource id or a collection) at this client's endpoint, with
    /// the API version.
    ///
    /// # Errors
    ///
    /// [`ArmError::Setup`] when `path` cannot be joined.
    pub fn url(&self, path: &str) -> Result<Url, ArmError> {
        let mut url = self
            .endpoint
            .join(path)
            .map_err(|e| ArmError::Setup { message: format!("`{path}` is not a URL path: {e}") })?;
        url.query_pairs_mut().append_pair("api-version", API_VERSION);
        Ok(url)
    }

    /// A URL ARM gave back (a `nextLink`, an operation to poll), checked to be on this client's
    /// endpoint: the bearer token goes nowhere else.
    ///
    /// # Errors
    ///
    /// [`ArmError::Refused`] for a URL elsewhere.
    pub fn followed(&self, operation: &'static str, text: &str) -> Result<Url, ArmError> {
        let url: Url = text.parse().map_err(|e| ArmError::Refused {
            operation,
            status: 0,
            code: "BadLink".into(),
            message: format!("`{text}`: {e}"),
        })?;
        if url.scheme() != self.endpoint.scheme()
            || url.host_str() != self.endpoint.host_str()
            || url.port_or_known_default() != self.endpoint.port_or_known_default()
        {
            return Err(ArmError::Refused {
                operation,
                status: 0,
                code: "LinkElsewhere".into(),
                message: format!("ARM pointed at `{text}`, not at {}: not followed", self.endpoint.as_str()),
            });
        }
        Ok(url)
    }

    /// Sends one request, retrying throttling, busy resources and server errors (and a read
    /// with no answer) until `deadline`, and returns the first other answer, 412 included.
    ///
    /// # Errors
    ///
    /// [`ArmError::Permission`] on 401/403, [`ArmError::Deadline`] when the next try would start
    /// past `deadline`, [`ArmError::NoAnswer`] when a write got no answer (it may have taken
    /// effect), [`ArmError::Setup`] when no token could be had.
    pub async fn call(
        &self,
        operation: &'static str,
        method: Method,
        url: &Url,
        body: Option<&Value>,
        if_match: Option<&str>,
        deadline: Instant,
    ) -> Result<Answer, ArmError> {
        let mut backoff = BACKOFF_FIRST;
        // The 5xx status of an earlier try of this write: it may have taken effect, so whatever
        // refusal a resend gets (401/403 from a token that expired meanwhile, a 404, a 400), the
        // write stays in doubt. A 412 is left to the caller, which reads again.
        let mut doubt: Option<u16> = None;
        let in_doubt = |doubt: Option<u16>, cause: ArmError| match doubt {
            Some(first) => ArmError::InDoubt { operation, cause: Box::new(after_server_error(cause, first)) },
            None => cause,
        };
        loop {
            let quiet = *self.quiet_until.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(until) = quiet.filter(|until| *until > Instant::now()) {
                if until >= deadline {
                    return Err(ArmError::Deadline {
                        operation,
                        message: format!(
                            "not sent: ARM asked (HTTP 429) to wait {} ms more, past the deadline",
                            until.saturating_duration_since(Instant::now()).as_millis()
                        ),
                    });
                }
                tokio::time::sleep_until(until).await;
            }
            not_past(operation, deadline)?;
            // Why this try did not do: said when the deadline ends the tries.
            let last;
            let wait = match self.once(operation, method, url, body, if_match, deadline).await {
                Err(ArmError::NoAnswer { operation, message }) => {
                    if method != Method::Get {
                        return Err(ArmError::NoAnswer { operation, message });
                    }
                    tracing::debug!(operation, %message, "azure: no answer to a read; trying again");
                    last = format!("no answer: {message}");
                    next_backoff(&mut backoff)
                }
                Err(other) => return Err(in_doubt(doubt, other)),
                Ok(answer) => {
                    let (code, message) = answer.error();
                    let busy = answer.status == 409 && BUSY_CODES.contains(&code.as_str());
                    if answer.status == 429 || busy {
                        self.throttled.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(operation, status = answer.status, %code, "azure: asked to wait");
                        last = format!("HTTP {} {code}", answer.status);
                        let wait = answer.retry_after.unwrap_or_else(|| next_backoff(&mut backoff));
                        if answer.status == 429 {
                            let until = Instant::now() + wait;
                            let mut quiet =
                                self.quiet_until.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                            *quiet = Some(quiet.map_or(until, |earlier| earlier.max(until)));
                        }
                        wait
                    } else if answer.status >= 500 {
                        if method != Method::Get {
                            doubt = doubt.or(Some(answer.status));
                        }
                        tracing::debug!(operation, status = answer.status, %code, "azure: server error; trying again");
                        last = format!("HTTP {} {code}", answer.status);
                        answer.retry_after.unwrap_or_else(|| next_backoff(&mut backoff))
                    } else if answer.status == 401 || answer.status == 403 {
                        let refused =
                            ArmError::Permission { operation, status: answer.status, code, message };
                        return Err(in_doubt(doubt, refused));
                    } else if doubt.is_some() && answer.status >= 300 && answer.status != 412 {
                        let refused = ArmError::Refused { operation, status: answer.status, code, message };
                        return Err(in_doubt(doubt, refused));
                    } else {
                        return Ok(answer);
                    }
                }
            };
            if Instant::now() + wait >= deadline {
                return Err(ArmError::Deadline {
                    operation,
                    message: format!(
                        "the next try, in {} ms, would start past the deadline (last answer: {last})",
                        wait.as_millis()
                    ),
                });
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// One try.
    async fn once(
        &self,
        operation: &'static str,
        method: Method,
        url: &Url,
        body: Option<&Value>,
        if_match: Option<&str>,
        deadline: Instant,
    ) -> Result<Answer, ArmError> {
        let mut request = Request::new(url.clone(), method);
        let token = match &self.auth {
            Auth::Fixed(token) => token.clone(),
            Auth::Credential(credential) => credential
                .get_token(&[ARM_SCOPE], None)
                .await
                .map_err(|e| ArmError::Setup { message: format!("no token for {ARM_SCOPE}: {e}") })?
                .token
                .secret()
                .to_owned(),
        };
        // Getting a token can take seconds (IMDS, AAD): the deadline is checked again after it.
        not_past(operation, deadline)?;
        request.insert_header("authorization", format!("Bearer {token}"));
        request.insert_header("accept", "application/json");
        if let Some(etag) = if_match {
            request.insert_header("if-match", etag.to_owned());
        }
        if let Some(body) = body {
            request.insert_header("content-type", "application/json");
            let bytes = serde_json::to_vec(body).map_err(|e| ArmError::Setup { message: e.to_string() })?;
            request.set_body(bytes);
        }
        let options = azure_core::http::PipelineSendOptions { skip_checks: true, ..Default::default() };
        let response =
            self.pipeline.send(&Context::new(), &mut request, Some(options)).await.map_err(|e| {
                ArmError::NoAnswer { operation, message: tenure_core::report::with_causes(&e) }
            })?;
        let status = u16::from(response.status());
        let header =
            |name: &'static str| response.headers().get_optional_string(&HeaderName::from_static(name));
        let retry_after = header("retry-after-ms")
            .or_else(|| header("x-ms-retry-after-ms"))
            .and_then(|ms| ms.trim().parse::<u64>().ok())
            .map(Duration::from_millis)
            .or_else(|| {
                header("retry-after").and_then(|s| s.trim().parse::<u64>().ok()).map(Duration::from_secs)
            });
        let etag = header("etag");
        let async_operation = header("azure-asyncoperation");
        let location = header("location");
        let bytes: &[u8] = response.body().as_ref();
        let body = serde_json::from_slice(bytes).unwrap_or(Value::Null);
        Ok(Answer { status, body, etag, async_operation, location, retry_after })
    }
}

/// [`ArmError::Deadline`] when `deadline` has passed: checked right before every request, so
/// that a wait that overran (a starved or stopped process) sends nothing more.
///
/// # Errors
///
/// [`ArmError::Deadline`] naming `operation`, "not sent".
pub fn not_past(operation: &'static str, deadline: Instant) -> Result<(), ArmError> {
    if Instant::now() >= deadline {
        return Err(ArmError::Deadline { operation, message: "not sent: the deadline had passed".into() });
    }
    Ok(())
}

/// `cause`, a refusal of a resend, saying that an earlier try was answered `first` (a 5xx).
fn after_server_error(cause: ArmError, first: u16) -> ArmError {
    let note = |message: String| format!("{message} (an earlier try of the write was answered HTTP {first})");
    match cause {
        ArmError::Permission { operation, status, code, message } => {
            ArmError::Permission { operation, status, code, message: note(message) }
        }
        ArmError::Refused { operation, status, code, message } => {
            ArmError::Refused { operation, status, code, message: note(message) }
        }
        other => other,
    }
}

/// The next wait of a doubling backoff.
fn next_backoff(backoff: &mut Duration) -> Duration {
    let wait = *backoff;
    *backoff = (*backoff * 2).min(BACKOFF_MAX);
    wait
}

/// The credential the environment describes (see [`Arm::from_environment`]).
fn credential_from(env: &dyn Fn(&str) -> Option<String>) -> Result<Arc<dyn TokenCredential>, ArmError> {
    let setup = |what: &str, e: azure_core::Error| ArmError::Setup { message: format!("{what}: {e}") };
    if env("AZURE_FEDERATED_TOKEN_FILE").is_some() {
        let credential = azure_identity::WorkloadIdentityCredential::new(None)
            .map_err(|e| setup("workload identity (AZURE_FEDERATED_TOKEN_FILE)", e))?;
        return Ok(credential);
    }
    if let (Some(tenant), Some(client), Some(secret)) =
        (env("AZURE_TENANT_ID"), env("AZURE_CLIENT_ID"), env("AZURE_CLIENT_SECRET"))
    {
        let credential = azure_identity::ClientSecretCredential::new(&tenant, client, secret.into(), None)
            .map_err(|e| setup("service principal (AZURE_CLIENT_SECRET)", e))?;
        return Ok(credential);
    }
    let options = azure_identity::ManagedIdentityCredentialOptions {
        user_assigned_id: env("AZURE_CLIENT_ID").map(azure_identity::UserAssignedId::ClientId),
        ..Default::default()
    };
    let credential = azure_identity::ManagedIdentityCredential::new(Some(options))
        .map_err(|e| setup("managed identity", e))?;
    Ok(credential)
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;

    use azure_core::credentials::{AccessToken, TokenRequestOptions};
    use azure_core::time::{Duration as AzureDuration, OffsetDateTime};

    use super::*;

    /// A credential whose token takes `delay` to come (IMDS or AAD answering slowly).
    #[derive(Debug)]
    struct Slow {
        delay: Duration,
    }

    impl TokenCredential for Slow {
        fn get_token<'life0, 'life1, 'life2, 'life3, 'async_trait>(
            &'life0 self,
            _scopes: &'life1 [&'life2 str],
            _options: Option<TokenRequestOptions<'life3>>,
        ) -> Pin<Box<dyn Future<Output = azure_core::Result<AccessToken>> + Send + 'async_trait>>
        where
            'life0: 'async_trait,
            'life1: 'async_trait,
            'life2: 'async_trait,
            'life3: 'async_trait,
            Self: 'async_trait,
        {
            Box::pin(async move {
                tokio::time::sleep(self.delay).await;
                Ok(AccessToken::new("slow", OffsetDateTime::now_utc() + AzureDuration::hours(1)))
            })
        }
    }

    /// The deadline passes while the token is being fetched: nothing is sent. (Were the write
    /// sent, to a port nothing listens on, it would come back as no answer.)
    #[tokio::test]
    async fn a_deadline_passed_while_getting_the_token_sends_nothing() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let port = closed.local_addr().expect("its address").port();
        drop(closed);
        let auth = Auth::Credential(Arc::new(Slow { delay: Duration::from_millis(300) }));
        let arm = Arm::with_auth(Some(&format!("https://127.0.0.1:{port}")), auth).expect("a client");
        let url = arm.url("/subscriptions/s/resourceGroups/rg").expect("a URL");
        let body = serde_json::json!({});
        let deadline = Instant::now() + Duration::from_millis(100);
        let answer = arm
            .call("NetworkInterfaces_CreateOrUpdate", Method::Put, &url, Some(&body), None, deadline)
            .await;
        match answer {
            Err(ArmError::Deadline { message, .. }) => assert!(message.contains("not sent"), "{message}"),
            other => panic!("not sent past the deadline: {other:?}"),
        }
    }
}
