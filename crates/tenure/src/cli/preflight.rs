//! What `tenure agent` checks before it touches its store, in one place: `tenure validate` of an
//! agent config runs the same function, so that a unit's `ExecStartPre=tenure validate` passing
//! means the agent gets past these checks too. (The store itself — its lock, its identity, etcd —
//! is only checked by opening it, which `validate` never does.)
//!
//! The config file first, parsed and validated: a config that does not parse is refused alone.
//! Then, all reported together, one line each naming the file (with `line:column` where there is
//! one):
//! - a part this build lacks: an etcd store in a build without `--features etcd`, a provider kind
//!   with no executor in this build (its `build()`, through `executors.rs` and the registry
//!   `exec/registry.rs`);
//! - `apiTokenFile`: unreadable, empty, too long, or holding a character a header cannot carry;
//! - an etcd store's `passwordFile` and `tls` files: unreadable, or not text where text is needed;
//! - the pool files: read, checked together and against the config (`config::load_pools`).
//!
//! Exit code of a refusal: 2 (bad input) when any line is bad input, else 3 (a part this build
//! does not have).

use std::path::Path;
use std::time::Duration;

use tenure_core::input::InputError;

use super::executors::executor;
use super::{EXIT_BAD_INPUT, EXIT_NOT_BUILT};
use crate::api::ApiToken;
use crate::config::{AgentConfig, load_config, load_pools};

/// Why an agent config would not start: the exit code and one line per refusal.
#[derive(Debug)]
pub(super) struct Refusal {
    /// [`EXIT_BAD_INPUT`] or [`EXIT_NOT_BUILT`].
    pub(super) code: u8,
    /// One line per refusal, each naming its file (`file:line:column: message` where there is a
    /// place).
    pub(super) lines: Vec<String>,
}

/// A config that passed every check, with what the checks read.
pub(super) struct Checked {
    /// The validated config.
    pub(super) config: AgentConfig,
    /// The API token (`apiTokenFile`), if any.
    pub(super) token: Option<ApiToken>,
    /// An etcd store's password and TLS material, read from their files.
    pub(super) store_secrets: StoreSecrets,
}

/// An etcd store's secrets, read from the files its config names (nothing for an embedded store,
/// nothing in a build without `--features etcd`).
#[derive(Default)]
pub(super) struct StoreSecrets {
    /// The etcd user and its password (`store.user`, `store.passwordFile`).
    #[cfg(feature = "etcd")]
    pub(super) user: Option<(String, crate::store::fleet::Secret)>,
    /// TLS to etcd (`store.tls`).
    #[cfg(feature = "etcd")]
    pub(super) tls: Option<crate::store::fleet::EtcdTlsPem>,
}

/// Every check `tenure agent --config PATH` makes before it opens its store (see the module
/// documentation); `tenure validate PATH` runs it too.
pub(super) fn check_before_store(path: &Path) -> Result<Checked, Refusal> {
    let config = load_config(path).map_err(|lines| Refusal { code: EXIT_BAD_INPUT, lines })?;
    let file = config.path.display().to_string();
    let not_built = parts_not_built(&config, &file);
    let mut bad = Vec::new();
    let token = match &config.api_token_file {
        Some(token_file) => match ApiToken::from_file(token_file) {
            Ok(token) => Some(token),
            Err(e) => {
                bad.push(InputError::at(config.source.at("apiTokenFile"), e.to_string()).render(&file));
                None
            }
        },
        None => None,
    };
    let store_secrets = read_store_secrets(&config, &file).unwrap_or_else(|mut lines| {
        bad.append(&mut lines);
        StoreSecrets::default()
    });
    if let Err(mut lines) = load_pools(&config) {
        bad.append(&mut lines);
    }
    let code = if !bad.is_empty() {
        EXIT_BAD_INPUT
    } else if !not_built.is_empty() {
        EXIT_NOT_BUILT
    } else {
        return Ok(Checked { config, token, store_secrets });
    };
    Err(Refusal { code, lines: not_built.into_iter().chain(bad).collect() })
}

/// One line per part of `config` this build does not have: the etcd store, provider kinds
/// without an executor here.
fn parts_not_built(config: &AgentConfig, file: &str) -> Vec<String> {
    let mut lines = Vec::new();
    #[cfg(not(feature = "etcd"))]
    if matches!(config.store, crate::config::StoreConfig::Etcd { .. }) {
        lines.push(
            InputError::at(
                config.source.at("store.kind"),
                "this build has no etcd store (fleet mode); rebuild with --features etcd",
            )
            .render(file),
        );
    }
    let action_timeout = Duration::from_millis(config.action_timeout_ms);
    for (index, provider) in config.providers.iter().enumerate() {
        if let Err(message) = executor(provider, action_timeout, "", None) {
            let at = config.source.provider_kinds.get(index).copied().unwrap_or_default();
            lines.push(InputError::at(at, message).render(file));
        }
    }
    lines
}

/// Reads an etcd store's password and TLS files; one line per file that cannot be used.
#[cfg(feature = "etcd")]
fn read_store_secrets(config: &AgentConfig, file: &str) -> Result<StoreSecrets, Vec<String>> {
    use crate::store::fleet::{EtcdTlsPem, Secret};
    let crate::config::StoreConfig::Etcd { tls, user, .. } = &config.store else {
        return Ok(StoreSecrets::default());
    };
    let mut lines = Vec::new();
    let mut read = |key: &str, path: &Path, text: bool| -> Option<Vec<u8>> {
        tenure_lead::etcd_connection::read_file(path, text)
            .map_err(|why| {
                lines.push(InputError::at(config.source.at(key), format!("{key} {why}")).render(file))
            })
            .ok()
    };
    let user = user.as_ref().and_then(|(name, password_file)| {
        let bytes = read("store.passwordFile", password_file, true)?;
        Some((name.clone(), tenure_lead::etcd_connection::password_of(&bytes)))
    });
    let tls = tls.as_ref().and_then(|tls| {
        let ca = read("store.tls.ca", &tls.ca, false);
        let identity = match (&tls.cert, &tls.key) {
            (Some(cert), Some(key)) => {
                let cert = read("store.tls.cert", cert, false);
                let key = read("store.tls.key", key, true);
                Some((cert?, Secret(String::from_utf8_lossy(&key?).into_owned())))
            }
            _ => None,
        };
        Some(EtcdTlsPem { ca: ca?, identity })
    });
    if let Some((_, Secret(password))) = &user
        && password.is_empty()
    {
        lines.push(
            InputError::at(
                config.source.at("store.passwordFile"),
                "store.passwordFile: the password is empty",
            )
            .render(file),
        );
    }
    if lines.is_empty() { Ok(StoreSecrets { user, tls }) } else { Err(lines) }
}

/// A build without `--features etcd` reads no store secrets (an etcd store is refused as a part
/// this build does not have).
#[cfg(not(feature = "etcd"))]
fn read_store_secrets(_config: &AgentConfig, _file: &str) -> Result<StoreSecrets, Vec<String>> {
    Ok(StoreSecrets::default())
}

#[cfg(all(test, feature = "etcd"))]
mod tests {
    use super::*;

    /// An etcd store's password and TLS files are read before the store is opened: each one that
    /// cannot be used is one line at its key; the password never appears.
    #[test]
    fn an_etcd_stores_secret_files_are_read_before_the_store() {
        let dir = std::env::temp_dir().join(format!("tenure-preflight-etcd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let config = dir.join("agent.yaml");
        std::fs::write(
            &config,
            "node: {name: a, provider: sim1, placementGroup: g1, nic: eni-a}\n\
             store: {kind: etcd, endpoints: [https://127.0.0.1:1], path: ./data, user: u, passwordFile: pw,\n  \
             tls: {ca: ca.pem}}\n\
             providers: [{name: sim1, kind: sim-cloud}]\n",
        )
        .expect("write");
        let refusal = check_before_store(&config).err().expect("refused");
        assert_eq!(refusal.code, EXIT_BAD_INPUT);
        let file = config.display();
        assert_eq!(refusal.lines.len(), 2, "{:?}", refusal.lines);
        assert!(
            refusal.lines[0].starts_with(&format!("{file}:2:92: store.passwordFile ")),
            "{:?}",
            refusal.lines
        );
        assert!(refusal.lines[1].starts_with(&format!("{file}:3:13: store.tls.ca ")), "{:?}", refusal.lines);
        std::fs::write(dir.join("pw"), "\n").expect("write");
        std::fs::write(dir.join("ca.pem"), "not checked here").expect("write");
        let refusal = check_before_store(&config).err().expect("refused");
        assert_eq!(refusal.lines, [format!("{file}:2:92: store.passwordFile: the password is empty")]);
        std::fs::write(dir.join("pw"), "s3cret\n").expect("write");
        let checked = check_before_store(&config).expect("passes");
        let (user, password) = checked.store_secrets.user.expect("a user");
        assert_eq!((user.as_str(), password.0.as_str()), ("u", "s3cret"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
