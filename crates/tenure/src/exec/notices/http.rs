//! Plain-HTTP requests to the instance metadata service, each bounded by
//! [`super::REQUEST_TIMEOUT`] (the service is link-local: no TLS, no proxy, no redirects).

use bytes::Bytes;
use http::{Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::REQUEST_TIMEOUT;

/// The metadata service at one base URL.
#[derive(Clone)]
pub(super) struct Metadata {
    /// `http://host[:port]`, without a trailing `/`.
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl std::fmt::Debug for Metadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metadata").field("base", &self.base).finish_non_exhaustive()
    }
}

/// One answer: its status and body.
pub(super) struct Answer {
    pub status: u16,
    pub body: Bytes,
}

impl Answer {
    /// The body as text (lossy: the services answer ASCII).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl Metadata {
    /// The service at `base_url`, which must be `http://` with a host.
    pub fn new(base_url: &str) -> Result<Self, String> {
        let base = base_url.trim_end_matches('/');
        let uri: Uri = base.parse().map_err(|e| format!("`{base_url}` is not a URL: {e}"))?;
        if uri.scheme_str() != Some("http") || uri.host().is_none() {
            return Err(format!(
                "`{base_url}` is not an http:// URL with a host (the metadata service is plain HTTP)"
            ));
        }
        let port = uri.authority().and_then(|a| a.as_str().rsplit_once(':')).map(|(_, port)| port);
        if port.is_some_and(|port| !port.contains(']') && !matches!(port.parse::<u16>(), Ok(1..))) {
            return Err(format!("`{base_url}`: the port is not a number from 1 to 65535"));
        }
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(REQUEST_TIMEOUT));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Self { base: base.to_owned(), client })
    }

    /// `method` of `path_and_query` with `headers` (and `body`), within [`REQUEST_TIMEOUT`].
    pub async fn call(
        &self,
        method: Method,
        path_and_query: &str,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Result<Answer, String> {
        let url = format!("{}{path_and_query}", self.base);
        let mut request = Request::builder().method(method.clone()).uri(&url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if body.is_some() {
            request = request.header(http::header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| format!("{method} {url}: {e}"))?;
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| format!("{method} {url}: {e}"))?;
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("{method} {url}: reading the answer: {e}"))?
                .to_bytes();
            Ok(Answer { status, body })
        };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| format!("{method} {url}: no answer within {} ms", REQUEST_TIMEOUT.as_millis()))?
    }

    /// A GET.
    pub async fn get(&self, path_and_query: &str, headers: &[(&str, &str)]) -> Result<Answer, String> {
        self.call(Method::GET, path_and_query, headers, None).await
    }
}

/// `what`'s answer refused for its status, in one line (with the start of its body).
pub(super) fn unexpected(what: &str, answer: &Answer) -> String {
    let text = answer.text();
    let mut short: String = text.chars().take(200).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    format!("{what}: HTTP {}: {}", answer.status, short.trim())
}
