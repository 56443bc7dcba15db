//! Building the kube client the backend talks through: for one API server URL
//! ([`client_for_url`]) or as kubectl finds a cluster ([`client_inferred`]), with
//! [`REQUEST_TIMEOUT`] on every step and no automatic retries; and [`SetupError`], why a backend
//! could not be set up.

use std::time::Duration;

use tenure_lead::backend::REQUEST_TIMEOUT;

/// A backend that could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A namespace, Lease name or identity was empty (an empty holder reads as "no holder").
    #[error("{field} must not be empty")]
    Empty {
        /// Which argument.
        field: &'static str,
    },
    /// A namespace or Lease name the API server would refuse (`422 Invalid`).
    #[error("{field} {value:?} {rule}")]
    BadName {
        /// Which argument.
        field: &'static str,
        /// The name given.
        value: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// The lease duration was below one second (a Lease stores whole seconds).
    #[error("lease duration must be at least 1s (a Lease counts whole seconds), got {0:?}")]
    LeaseTooShort(Duration),
    /// The API server URL could not be parsed.
    #[error("{url}: not an API server URL: {message}")]
    Url {
        /// The URL given.
        url: String,
        /// Why it was refused.
        message: String,
    },
    /// No cluster configuration was found: neither a kubeconfig (`KUBECONFIG`, `~/.kube/config`)
    /// nor an in-cluster service account.
    #[error("no Kubernetes configuration found (KUBECONFIG, ~/.kube/config, in-cluster): {0}")]
    Infer(#[source] kube::config::InferConfigError),
    /// kube could not build a client from the configuration.
    #[error("cannot build a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
}

/// With TLS built in, makes ring the process's default rustls crypto provider unless one is set
/// already: rustls picks a default by itself only when exactly one provider is compiled in, and a
/// binary that also links aws-lc-rs (tenure with the `aws` feature) has two.
fn crypto_provider() {
    #[cfg(feature = "rustls-tls")]
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A kube client for the API server at `url` (plain `http://` unless the crate's `rustls-tls`
/// feature is on; a path in the URL is kept as the prefix of every request), with
/// [`REQUEST_TIMEOUT`] on connect, read and write, and without kube's automatic retries, so that
/// one attempt makes one request per step. Call it inside a Tokio runtime: the client spawns its
/// request buffer there.
pub fn client_for_url(url: &str) -> Result<kube::Client, SetupError> {
    crypto_provider();
    let uri: http::Uri = url.parse().map_err(|e: http::uri::InvalidUri| SetupError::Url {
        url: url.to_owned(),
        message: e.to_string(),
    })?;
    if uri.scheme().is_none() || uri.authority().is_none() {
        return Err(SetupError::Url { url: url.to_owned(), message: "expected scheme://host:port".into() });
    }
    client_for_config(kube::Config::new(uri))
}

/// A kube client configured as kube-rs and kubectl find a cluster ([`kube::Config::infer`]): the
/// kubeconfig named by `KUBECONFIG`, else `~/.kube/config` (its current context), else the
/// in-cluster service account. Timeouts and retries as [`client_for_url`]. TLS (every real
/// cluster) needs the crate's `rustls-tls` feature.
pub async fn client_inferred() -> Result<kube::Client, SetupError> {
    crypto_provider();
    let config = kube::Config::infer().await.map_err(SetupError::Infer)?;
    client_for_config(config)
}

fn client_for_config(mut config: kube::Config) -> Result<kube::Client, SetupError> {
    config.connect_timeout = Some(REQUEST_TIMEOUT);
    config.read_timeout = Some(REQUEST_TIMEOUT);
    config.write_timeout = Some(REQUEST_TIMEOUT);
    config.default_retry = false;
    kube::Client::try_from(config).map_err(SetupError::Client)
}
