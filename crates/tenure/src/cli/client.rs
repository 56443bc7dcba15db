//! The HTTP client of the verbs that talk to a running agent (`tenure ownership`, `drain`, …):
//! `http://` on hyper-util's client, or `https://` to a TLS proxy in front of the agent (rustls,
//! through hyper-rustls), one request per call, bounded in time and size.
//!
//! # Which certificates an `https://` endpoint's must chain to
//!
//! The system's trust store (rustls-native-certs: `/etc/ssl/certs` on Debian, `SSL_CERT_FILE` /
//! `SSL_CERT_DIR` when set), or, with `--ca-file FILE`, only the CA certificates (PEM) in that
//! file: a private CA that signed the proxy's certificate, trusted for this call alone. The name
//! checked is the endpoint's host (a DNS name or an IP address, which the certificate must list
//! as a subjectAltName). TLS 1.2 and 1.3, on ring.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

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
    /// `--endpoint` is not an `http://host:port` or `https://host:port` URL.
    #[error("--endpoint `{endpoint}`: {reason}")]
    BadEndpoint {
        /// What was given.
        endpoint: String,
        /// Why it is refused.
        reason: String,
    },
    /// The certificates to trust could not be had: `--ca-file` unreadable or holding no
    /// certificate, no trust store on the system, or `--ca-file` with a plain `http://` endpoint.
    #[error("{reason}")]
    Trust {
        /// Why, in one line.
        reason: String,
    },
    /// The TLS handshake with the endpoint failed (its certificate does not chain to a trusted
    /// CA, does not name the host, has expired; or it does not speak TLS).
    #[error("TLS with {endpoint} failed: {cause}{hint}")]
    Tls {
        /// The endpoint tried.
        endpoint: String,
        /// What rustls said.
        cause: String,
        /// What to try, or nothing.
        hint: String,
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
    /// `http://host:port` or `https://host:port`, without a trailing `/`.
    endpoint: String,
    /// The bearer token sent on every call, when given.
    token: Option<String>,
    /// Whether `--ca-file` chose the trusted CAs (for the hint of a failed handshake).
    private_ca: bool,
    inner: HyperClient<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Client {
    /// A client of the agent at `endpoint` (`http://host:port` or `https://host:port`, an optional
    /// trailing `/`). An `https://` endpoint's certificate must chain to a CA of `ca_file` (PEM)
    /// when given, else to one of the system's trust store; `ca_file` with `http://` is refused.
    pub fn new(endpoint: &str, token: Option<String>, ca_file: Option<&Path>) -> Result<Self, ClientError> {
        let endpoint = checked_endpoint(endpoint)?;
        let https = endpoint.starts_with("https://");
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.enforce_http(false);
        let builder = HttpsConnectorBuilder::new();
        let builder = match (https, ca_file) {
            (false, Some(file)) => {
                return Err(ClientError::Trust {
                    reason: format!(
                        "--ca-file {}: the endpoint {endpoint} is plain http; --ca-file is for https endpoints",
                        file.display()
                    ),
                });
            }
            // Plain http: no trust store is read (nothing would use it).
            (false, None) => builder.with_tls_config(tls_config(rustls::RootCertStore::empty())?),
            (true, Some(file)) => builder.with_tls_config(tls_config(ca_file_roots(file)?)?),
            (true, None) => builder.with_tls_config(tls_config(system_roots()?)?),
        };
        let connector = builder.https_or_http().enable_http1().wrap_connector(connector);
        let inner = HyperClient::builder(TokioExecutor::new()).build(connector);
        Ok(Self { endpoint, token, private_ca: ca_file.is_some(), inner })
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
        if let Some(tls) = tls_error(error) {
            let hint = match tls {
                rustls::Error::InvalidCertificate(_) if !self.private_ca => {
                    " (a proxy certificate signed by a private CA? give --ca-file FILE)".to_owned()
                }
                // What came back is no TLS record: a plain-http server answering the hello.
                rustls::Error::InvalidMessage(_) => format!(
                    " (the server did not speak TLS; is it plain http? then --endpoint {})",
                    self.endpoint.replacen("https://", "http://", 1)
                ),
                _ => String::new(),
            };
            return ClientError::Tls { endpoint: self.endpoint.clone(), cause: tls.to_string(), hint };
        }
        ClientError::NoAnswer { endpoint: self.endpoint.clone(), cause: innermost(error) }
    }
}

/// rustls's configuration: TLS 1.2 and 1.3 on ring (named, not the process default: a build with
/// the AWS SDK links a second provider), trusting `roots`, no client certificate.
fn tls_config(roots: rustls::RootCertStore) -> Result<rustls::ClientConfig, ClientError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Trust { reason: format!("cannot set up TLS: {e}") })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// The CA certificates of the system's trust store.
fn system_roots() -> Result<rustls::RootCertStore, ClientError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        return Err(ClientError::Trust {
            reason: format!(
                "no CA certificates in the system's trust store{}; give --ca-file FILE (the CA that signed the proxy's certificate)",
                if errors.is_empty() { String::new() } else { format!(" ({})", errors.join("; ")) }
            ),
        });
    }
    Ok(roots)
}

/// The CA certificates (PEM) of `--ca-file`, and only those.
fn ca_file_roots(file: &Path) -> Result<rustls::RootCertStore, ClientError> {
    let refuse = |why: String| ClientError::Trust { reason: format!("--ca-file {}: {why}", file.display()) };
    let certificates = CertificateDer::pem_file_iter(file)
        .map_err(|e| refuse(pem_error(&e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| refuse(pem_error(&e)))?;
    let mut roots = rustls::RootCertStore::empty();
    for certificate in certificates {
        roots.add(certificate).map_err(|e| refuse(format!("not a CA certificate rustls accepts: {e}")))?;
    }
    if roots.is_empty() {
        return Err(refuse("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned()));
    }
    Ok(roots)
}

/// A PEM reading error in words (`cannot read: No such file or directory`).
fn pem_error(error: &rustls::pki_types::pem::Error) -> String {
    match error {
        rustls::pki_types::pem::Error::Io(io) => format!("cannot read: {io}"),
        other => format!("not PEM: {other:?}"),
    }
}

/// The rustls error somewhere in `error`'s chain. hyper-rustls wraps it in an `io::Error` inside
/// another `io::Error`, whose `source` skips both: an `io::Error` is followed into what it wraps.
fn tls_error<'e>(error: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        current = match e.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
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

/// `http://host:port` or `https://host:port` from what the user gave, or why not.
fn checked_endpoint(given: &str) -> Result<String, ClientError> {
    let bad =
        |reason: &str| ClientError::BadEndpoint { endpoint: given.to_owned(), reason: reason.to_owned() };
    let uri: Uri = given.parse().map_err(|_| bad("not a URL; write it like http://127.0.0.1:9464"))?;
    let scheme = match uri.scheme_str() {
        Some(scheme @ ("http" | "https")) => scheme.to_owned(),
        _ => return Err(bad("must start with http:// or https://, like http://127.0.0.1:9464")),
    };
    let authority = uri.authority().ok_or_else(|| bad("has no host"))?;
    if authority.as_str().contains('@') {
        return Err(bad("must not hold user information; use --token-file"));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(bad("must be just http(s)://host:port, without a path or query"));
    }
    Ok(format!("{scheme}://{authority}"))
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
    fn endpoints_are_http_or_https_host_and_port() {
        assert_eq!(checked_endpoint("http://127.0.0.1:9464").expect("valid"), "http://127.0.0.1:9464");
        assert_eq!(
            checked_endpoint("https://agent.example:443/").expect("valid"),
            "https://agent.example:443"
        );
        assert_eq!(checked_endpoint("http://localhost:1/").expect("valid"), "http://localhost:1");
        assert_eq!(checked_endpoint("http://[::1]:9464").expect("valid"), "http://[::1]:9464");
        for bad in [
            "",
            "127.0.0.1:9464",
            "https://h:1/v1",
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
