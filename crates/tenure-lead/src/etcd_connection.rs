//! How tenure reaches etcd: one rule for every etcd client it makes (the agent's fleet store and
//! `tenure elect --backend etcd`): endpoints, per-request deadlines, keepalive pings, TLS and
//! authentication. Built only with the cargo feature `etcd`.
//!
//! The secret material (a password, a client key) is read from files by the caller and never
//! printed: [`Secret`]'s `Debug` says `<secret>`. [`read_file`] is the one reader of those files.

use std::path::Path;
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

/// How often a client pings etcd on a connection. A link that died quietly (a partition) shows
/// within seconds, also on a watch (where nothing else would time out). Not more often: etcd drops
/// a connection that pings more often than its `--grpc-keepalive-min-time` (5 s by default) while
/// no data flows ("too_many_pings"), and a quiet watch would break over and over.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(6);

/// How long a ping may go unanswered before the connection counts as dead.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(2);

/// A password or a private key: never printed (its `Debug` says `<secret>`).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<secret>")
    }
}

/// TLS material for etcd (PEM), read from files.
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
    /// Client URLs (`http://…` or, with [`EtcdConnection::tls`], `https://…`).
    pub endpoints: Vec<String>,
    /// The deadline of the connection and of each request.
    pub request_timeout: Duration,
    /// `user`, `password`, when etcd has authentication on.
    pub user: Option<(String, Secret)>,
    /// TLS material, with https endpoints.
    pub tls: Option<EtcdTlsPem>,
}

impl EtcdConnection {
    /// A connection to `endpoints` without TLS or authentication.
    #[must_use]
    pub fn plain(endpoints: Vec<String>, request_timeout: Duration) -> Self {
        Self { endpoints, request_timeout, user: None, tls: None }
    }

    /// The client options of this connection.
    #[must_use]
    pub fn options(&self) -> ConnectOptions {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(self.request_timeout)
            .with_timeout(self.request_timeout)
            .with_keep_alive(KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT)
            .with_keep_alive_while_idle(true);
        if let Some((user, password)) = &self.user {
            // An auth token expires (a JWT a fixed time after it was issued, 5 min by default):
            // the client authenticates again when etcd says so, rather than fail every request
            // after.
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

    /// Connects (within [`EtcdConnection::request_timeout`]).
    ///
    /// # Errors
    ///
    /// The client's error: no endpoint answered, TLS or authentication failed.
    pub async fn connect(&self) -> Result<Client, etcd_client::Error> {
        Client::connect(&self.endpoints, Some(self.options())).await
    }
}

/// Reads a file of etcd secret or TLS material: its bytes, or one phrase saying why not
/// (`PATH: cannot read: …`, `PATH: not text (UTF-8)` when `text` asks for text). The caller puts
/// the phrase at its place (a config key, a flag).
///
/// # Errors
///
/// The file cannot be read, or is not UTF-8 where text is needed.
pub fn read_file(path: &Path, text: bool) -> Result<Vec<u8>, String> {
    match std::fs::read(path) {
        Ok(bytes) if text && std::str::from_utf8(&bytes).is_err() => {
            Err(format!("{}: not text (UTF-8)", path.display()))
        }
        Ok(bytes) => Ok(bytes),
        Err(e) => Err(format!("{}: cannot read: {e}", path.display())),
    }
}

/// A password as stored in a file: its text without the line end.
#[must_use]
pub fn password_of(bytes: &[u8]) -> Secret {
    Secret(String::from_utf8_lossy(bytes).trim_end_matches(['\n', '\r']).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_never_printed() {
        let connection = EtcdConnection {
            user: Some(("u".into(), Secret("hunter2".into()))),
            tls: Some(EtcdTlsPem {
                ca: b"ca".to_vec(),
                identity: Some((b"c".to_vec(), Secret("key!".into()))),
            }),
            ..EtcdConnection::plain(vec!["https://e:2379".into()], Duration::from_secs(1))
        };
        let shown = format!("{connection:?}");
        assert!(!shown.contains("hunter2") && !shown.contains("key!"), "{shown}");
        assert!(shown.contains("<secret>"), "{shown}");
    }

    #[test]
    fn a_password_file_loses_its_line_end_only() {
        assert_eq!(password_of(b" pw \r\n"), Secret(" pw ".into()));
        let missing = read_file(Path::new("/nonexistent/tenure-pw"), true).expect_err("missing");
        assert!(missing.starts_with("/nonexistent/tenure-pw: cannot read: "), "{missing}");
        let dir = std::env::temp_dir().join(format!("tenure-etcd-conn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let binary = dir.join("bin");
        std::fs::write(&binary, [0xff, 0xfe]).expect("write");
        assert_eq!(read_file(&binary, true), Err(format!("{}: not text (UTF-8)", binary.display())));
        assert_eq!(read_file(&binary, false), Ok(vec![0xff, 0xfe]));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
