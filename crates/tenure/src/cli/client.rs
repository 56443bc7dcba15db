//! The HTTP client of the verbs that talk to a running agent (`tenure ownership`, `drain`, …):
//! plain `http://` on hyper-util's client, one request per call, bounded in time and size.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// The agent's address when neither `--endpoint` nor `TENURE_ENDPOINT` says another.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:9464";

/// Longest wait for a whole exchange (connect, send, answer, body).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest wait for the TCP connection alone.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest answer read, in bytes (an ownership map of 1M addresses is under 200 MiB).
const RESPONSE_BYTES_MAX: usize = 256 * 1024 * 1024;

/// Why a call got no answer from the agent.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// `--endpoint` is not an `http://host:port` URL.
    #[error("--endpoint `{endpoint}`: {reason}")]
    BadEndpoint {
        /// What was given.
        endpoint: String,
        /// Why it is refused.
        reason: String,
    },
    /// Nothing answered (connection refused, no route, reset…).
    #[error("no agent answers at {endpoint} ({cause}); is tenure agent running?")]
    NoAnswer {
        /// The endpoint tried.
        endpoint: String,
        /// The innermost cause, in words.
        cause: String,
    },
    /// Something accepted the connection but no full answer came within [`CLIENT_TIMEOUT`].
    #[error("no answer from {endpoint} within {timeout:?}; is the agent stuck?")]
    Timeout {
        /// The endpoint tried.
        endpoint: String,
        /// The bound.
        timeout: Duration,
    },
    /// The answer was larger than the client reads.
    #[error("the answer from {endpoint} is larger than {RESPONSE_BYTES_MAX} bytes")]
    TooLarge {
        /// The endpoint tried.
        endpoint: String,
    },
}

/// An HTTP answer: status and body.
#[derive(Debug)]
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// The whole body.
    pub body: Bytes,
}

/// A client of one agent.
pub struct Client {
    /// `http://host:port`, without a trailing `/`.
    endpoint: String,
    /// The bearer token sent on every call, when given.
    token: Option<String>,
    inner: HyperClient<HttpConnector, Full<Bytes>>,
}

impl Client {
    /// A client of the agent at `endpoint` (`http://host:port`, an optional trailing `/`).
    pub fn new(endpoint: &str, token: Option<String>) -> Result<Self, ClientError> {
        let endpoint = checked_endpoint(endpoint)?;
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let inner = HyperClient::builder(TokioExecutor::new()).build(connector);
        Ok(Self { endpoint, token, inner })
    }

    /// The endpoint, as messages name it.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends one request to `path` (which starts with `/` and is already percent-encoded), with a
    /// JSON body when one is given, and reads the whole answer.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        json: Option<Vec<u8>>,
    ) -> Result<Answer, ClientError> {
        self.call_within(method, path, json, CLIENT_TIMEOUT).await
    }

    /// [`Client::call`] with its own overall timeout (a backup takes longer than a read).
    pub async fn call_within(
        &self,
        method: Method,
        path: &str,
        json: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Answer, ClientError> {
        let uri: Uri = format!("{}{path}", self.endpoint).parse().map_err(|e| ClientError::BadEndpoint {
            endpoint: self.endpoint.clone(),
            reason: format!("cannot form a URL with `{path}`: {e}"),
        })?;
        let mut request =
            Request::builder().method(method).uri(uri).header(header::ACCEPT, "application/json");
        if let Some(token) = &self.token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let body = match json {
            Some(bytes) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Full::new(Bytes::from(bytes))
            }
            None => Full::new(Bytes::new()),
        };
        let request = request.body(body).map_err(|e| ClientError::BadEndpoint {
            endpoint: self.endpoint.clone(),
            reason: format!("cannot form a request: {e}"),
        })?;
        let exchange = async {
            let response = self.inner.request(request).await.map_err(|e| self.no_answer(&e))?;
            let status = response.status();
            let body =
                Limited::new(response.into_body(), RESPONSE_BYTES_MAX).collect().await.map_err(|e| {
                    if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                        ClientError::TooLarge { endpoint: self.endpoint.clone() }
                    } else {
                        ClientError::NoAnswer {
                            endpoint: self.endpoint.clone(),
                            cause: innermost(e.as_ref()),
                        }
                    }
                })?;
            Ok(Answer { status, body: body.to_bytes() })
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| ClientError::Timeout { endpoint: self.endpoint.clone(), timeout })?
    }

    fn no_answer(&self, error: &hyper_util::client::legacy::Error) -> ClientError {
        ClientError::NoAnswer { endpoint: self.endpoint.clone(), cause: innermost(error) }
    }
}

/// The deepest cause of `error`, in words (`connection refused` rather than `client error
/// (Connect)`).
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut deepest = error;
    while let Some(source) = deepest.source() {
        deepest = source;
    }
    if let Some(io) = deepest.downcast_ref::<std::io::Error>() {
        return match io.kind() {
            std::io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
            std::io::ErrorKind::ConnectionReset => "connection reset".to_owned(),
            std::io::ErrorKind::TimedOut => "connect timed out".to_owned(),
            _ => io.to_string(),
        };
    }
    deepest.to_string()
}

/// `http://host:port` from what the user gave, or why not.
fn checked_endpoint(given: &str) -> Result<String, ClientError> {
    let bad =
        |reason: &str| ClientError::BadEndpoint { endpoint: given.to_owned(), reason: reason.to_owned() };
    let uri: Uri = given.parse().map_err(|_| bad("not a URL; write it like http://127.0.0.1:9464"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(bad(
                "https is not supported; the agent serves plain http on loopback (put a TLS proxy in front to reach it remotely)",
            ));
        }
        _ => return Err(bad("must start with http://, like http://127.0.0.1:9464")),
    }
    let authority = uri.authority().ok_or_else(|| bad("has no host"))?;
    if authority.as_str().contains('@') {
        return Err(bad("must not hold user information; use --token-file"));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(bad("must be just http://host:port, without a path or query"));
    }
    Ok(format!("http://{authority}"))
}

/// `text` percent-encoded for one path segment: every byte but unreserved ones (RFC 3986).
pub fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_plain_http_host_and_port() {
        assert_eq!(checked_endpoint("http://127.0.0.1:9464").expect("valid"), "http://127.0.0.1:9464");
        assert_eq!(checked_endpoint("http://localhost:1/").expect("valid"), "http://localhost:1");
        assert_eq!(checked_endpoint("http://[::1]:9464").expect("valid"), "http://[::1]:9464");
        for bad in [
            "",
            "127.0.0.1:9464",
            "https://h:1",
            "http://h:1/v1",
            "http://h:1?x=1",
            "http://u:p@h:1",
            "ftp://h",
        ] {
            assert!(checked_endpoint(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(path_segment("node-a_1.x~"), "node-a_1.x~");
        assert_eq!(path_segment("p/10.0.0.1/a b"), "p%2F10.0.0.1%2Fa%20b");
        assert_eq!(path_segment("é"), "%C3%A9");
    }
}
