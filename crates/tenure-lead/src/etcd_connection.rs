//! How tenure reaches etcd: one rule for every client it makes — the agent's fleet store
//! (`store: {kind: etcd}`) and the election backend (`tenure elect --backend etcd`). Endpoints, a
//! per-request deadline, keepalive pings on idle connections, TLS (a CA, and a client certificate
//! when etcd asks for one) and authentication with a token renewed when etcd says it expired.

use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

/// How often the client pings etcd on a connection. A link that died quietly (a partition) shows
/// within seconds, also on a watch (where nothing else would time out). Not more often: etcd
/// drops a connection that pings more often than its `--grpc-keepalive-min-time` (5 s by default)
/// while no data flows ("too_many_pings"), and a quiet watch would break over and over.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(6);

/// How long a ping may go unanswered before the connection is dropped.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(2);

/// A secret (a password, a private key): never printed (its `Debug` says `<secret>`).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<secret>")
    }
}

/// TLS material for etcd (PEM).
#[derive(Clone)]
pub struct EtcdTlsPem {
    /// The CA certificate that signed etcd's.
    pub ca: Vec<u8>,
    /// This client's certificate and private key, when etcd asks for a client certificate.
    pub identity: Option<(Vec<u8>, Secret)>,
}

impl std::fmt::Debug for EtcdTlsPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdTlsPem")
            .field("client_certificate", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

/// Where etcd is and how to talk to it.
#[derive(Clone, Debug)]
pub struct EtcdConnection {
    /// Client URLs (`http://…`, or `https://…` with [`EtcdConnection::tls`]).
    pub endpoints: Vec<String>,
    /// The deadline of connecting and of each request.
    pub request_timeout: Duration,
    /// `user`, `password`, when etcd has authentication on.
    pub user: Option<(String, Secret)>,
    /// TLS material, with https endpoints.
    pub tls: Option<EtcdTlsPem>,
}

impl EtcdConnection {
    /// Plain endpoints, no authentication, `request_timeout` per request.
    #[must_use]
    pub fn new(endpoints: &[String], request_timeout: Duration) -> Self {
        Self { endpoints: endpoints.to_vec(), request_timeout, user: None, tls: None }
    }

    /// The client options of this connection (see the module documentation).
    #[must_use]
    pub fn options(&self) -> ConnectOptions {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(self.request_timeout)
            .with_timeout(self.request_timeout)
            .with_keep_alive(KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT)
            .with_keep_alive_while_idle(true);
        if let Some((user, password)) = &self.user {
            // An auth token expires (a JWT a fixed time after it was issued, 5 min by default):
            // the client authenticates again when etcd says so, rather than fail every request.
            options = options.with_user(user.clone(), password.0.clone()).with_auto_token_refresh(true);
        }
        if let Some(tls) = &self.tls {
            let mut config = TlsOptions::new().ca_certificate(Certificate::from_pem(&tls.ca));
            if let Some((cert, key)) = &tls.identity {
                config = config.identity(Identity::from_pem(cert, key.0.as_bytes()));
            }
            options = options.with_tls(config);
        }
        options
    }

    /// Connects (and authenticates, when a user is set).
    ///
    /// # Errors
    ///
    /// The client's error: no endpoint answered within the request timeout, TLS or
    /// authentication failed.
    pub async fn connect(&self) -> Result<Client, etcd_client::Error> {
        Client::connect(&self.endpoints, Some(self.options())).await
    }
}

/// Reads a file of etcd material given at `place` (a config key or a flag): its bytes, or one
/// line naming the place and the file. `text`: the file must be UTF-8 (a password, a PEM key).
///
/// # Errors
///
/// `PLACE PATH: cannot read: …` or `PLACE PATH: not text (UTF-8)`.
pub fn read_material(place: &str, path: &std::path::Path, text: bool) -> Result<Vec<u8>, String> {
    match std::fs::read(path) {
        Ok(bytes) if text && std::str::from_utf8(&bytes).is_err() => {
            Err(format!("{place} {}: not text (UTF-8)", path.display()))
        }
        Ok(bytes) => Ok(bytes),
        Err(e) => Err(format!("{place} {}: cannot read: {e}", path.display())),
    }
}

/// A password file's content as the password: its trailing newline dropped.
///
/// # Errors
///
/// `PLACE: the password is empty`.
pub fn password_of(place: &str, bytes: &[u8]) -> Result<Secret, String> {
    let password = String::from_utf8_lossy(bytes).trim_end_matches(['\n', '\r']).to_owned();
    if password.is_empty() { Err(format!("{place}: the password is empty")) } else { Ok(Secret(password)) }
}
