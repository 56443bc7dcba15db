//! The agent configuration (`tenure agent --config FILE`, SPEC 10): strict parsing with located
//! errors, defaults, and paths resolved against the config file's folder.
//!
//! Parsing is separated from I/O: [`parse_config`] turns text into an [`AgentConfig`] without
//! touching the file system; [`load_config`] reads the file first, and [`load_pools`] reads and
//! checks the pool files the config names. Every error is one `file:line:column: message` line
//! (SPEC 12): unknown keys (typos), wrong types, bad durations and addresses, names declared
//! twice, references to undeclared providers, settings of the wrong provider kind.
//!
//! Decisions where SPEC is silent (also in `docs/operations.md`, "Configuration reference"):
//! - `store` is required (the operator says where the durable state lives); `kind` defaults to
//!   `embedded`.
//! - `identityFile` defaults to `<store folder name>.identity` beside the config file (named
//!   after the store, never after the config file: a copy of the config under another name finds
//!   the same file), and must not be inside `store.path` (compared lexically, after resolving `.` and
//!   `..`; symbolic links are not followed), so that a plain copy of an old store cannot carry its
//!   identity with it.
//! - Provider kinds `aws`, `azure`, `oci` and `onprem` are parsed and checked
//!   in every build. Whether this build can run a kind is decided by the agent's start checks
//!   (`cli/preflight.rs`, also run by `tenure validate`, through the registry's `build()`): exit
//!   3, not 2.
//! - An exec provider's `timeout` may not exceed `actionTimeout` (which bounds every provider
//!   call); when omitted it is 10 s, or `actionTimeout` when that is shorter (`exec/hook/settings.rs`).
//! - `actionTimeout` (default 2 s) must be shorter than `heartbeatTTL + promotionHold` of every
//!   pool this agent serves (SPEC 9); [`load_pools`] refuses a pool file that breaks it.
//!
//! # Layout
//!
//! - this file — [`AgentConfig`] and its parts, the defaults, [`parse_config`], [`load_config`].
//! - `raw.rs` — the config as written (every value spanned), for serde.
//! - `paths.rs` — paths resolved against the config's folder; "inside the store" decided lexically.
//! - `providers.rs` — `providers:` entries, read in two steps (name and kind, then the kind's own
//!   settings struct, chosen through `exec/registry.rs`), and [`SettingsCheck`], what each kind's
//!   check reports to. What a kind takes, its defaults and checks are its module's, in `exec/`.
//! - `nodes.rs` — `node:`/`nodes:` and `peers:`, checked against the providers and each other.
//! - `store.rs` — the `store` section (embedded or etcd) and `identityFile` with its default.
//! - `pools.rs` — [`load_pools`]: the pool files, checked together and against the config.
//! - `reload.rs` — [`reload_pools`]: what a reload (SIGHUP) takes from the edited config file (its
//!   `pools` list), and [`changed_keys`]: the keys it names as needing a restart.

mod nodes;
mod paths;
mod pools;
mod providers;
mod raw;
mod reload;
mod store;

use std::collections::BTreeMap;
use std::io::Read as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_saphyr::Spanned;
use tenure_core::input::{InputError, Position, parse_duration_ms, utf8_text};
use tenure_core::journal::{JOURNAL_ENTRIES_MAX, JOURNAL_RETENTION_DEFAULT};
use tenure_core::model::{NodeSpec, ProviderKind};

pub use crate::exec::registry::ProviderSettings;
pub use pools::{POOL_FILE_BYTES_MAX, check_record_size, load_pools};
pub use providers::SettingsCheck;
pub use reload::{changed_keys, reload_pools};

use nodes::validate_node_keys;
use paths::path_field;
#[cfg(test)]
pub(crate) use paths::resolve;
use raw::RawConfig;
use store::{validate_identity_file, validate_store};

/// Largest config file read, in bytes: a config is a few hundred bytes; anything this large is
/// the wrong file.
pub const CONFIG_FILE_BYTES_MAX: u64 = 1024 * 1024;
/// Default `listen`: loopback only (SPEC 10).
pub const LISTEN_DEFAULT: &str = "127.0.0.1:9464";
/// Default `heartbeatInterval`.
pub const HEARTBEAT_INTERVAL_DEFAULT_MS: u64 = 500;
/// Default `requeueInterval`: the agent reconciles at least this often, even when nothing changes.
pub const REQUEUE_INTERVAL_DEFAULT_MS: u64 = 5_000;

/// The longest `requeueInterval`: the safety net's pass and every failed call's retry backoff run
/// from it, so a longer one (`100000h`, an operator trial's) turns both off without saying so.
pub const REQUEUE_INTERVAL_MAX_MS: u64 = 3_600_000;
/// Default `actionTimeout`: the deadline of one provider call, counted from the head
/// confirmation that authorised it. Below the default pool's `heartbeatTTL + promotionHold`
/// (4 s), as every served pool's must be (SPEC 9; checked by [`load_pools`]).
pub const ACTION_TIMEOUT_DEFAULT_MS: u64 = 2_000;
/// Shortest `garpRefresh` of an on-prem provider (`0s` turns the refresh off): a refresh is a
/// gated call per held address, and switches age their MAC tables out in minutes.
pub const GARP_REFRESH_MIN_MS: u64 = 1_000;
/// Longest `garpRefresh`: an hour. Switches age MAC tables out in minutes (300 s by default), so
/// a longer refresh protects nothing and is most likely a typo (`99999999999h` was accepted).
pub const GARP_REFRESH_MAX_MS: u64 = 3_600_000;
/// Default `store.snapshotEvery` of an etcd store.
pub const SNAPSHOT_EVERY_DEFAULT: u64 = 10_000;
/// Default `store.prefix` of an etcd store.
pub const ETCD_PREFIX_DEFAULT: &str = "/tenure";
/// Extension of the default identity file, beside the config file.
pub const IDENTITY_FILE_EXTENSION: &str = "identity";

/// A validated agent configuration. Every path is resolved against the config file's folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentConfig {
    /// The config file, as given.
    pub path: PathBuf,
    /// The nodes this process runs: one from `node:` (a host), or several from `nodes:` (several
    /// nodes over one embedded log in one process: demos and tests).
    pub nodes: Vec<NodeSpec>,
    /// The fleet's other nodes (`peers:`, only with an etcd store): run by other agents, known
    /// here so that every agent computes the same map. Every agent of a fleet lists the same
    /// set of nodes (its own and its peers); the etcd store refuses a fleet whose agents differ.
    pub peers: Vec<NodeSpec>,
    /// Where the durable state lives.
    pub store: StoreConfig,
    /// The store's identity kept outside the store (`identityFile`), to catch a plain copy of an
    /// old store. Default: `<store folder name>.identity` beside the config file.
    pub identity_file: PathBuf,
    /// The configured providers, in the order written; names are unique.
    pub providers: Vec<ProviderConfig>,
    /// keepalived's notify FIFO, for pools with `authority: vrrp`.
    pub vrrp: Option<VrrpConfig>,
    /// The pool files (`pools`), resolved; read them with [`load_pools`].
    pub pool_files: Vec<PathBuf>,
    /// The HTTP API's address (`listen`). Default [`LISTEN_DEFAULT`].
    pub listen: SocketAddr,
    /// How often each node appends its heartbeat (`heartbeatInterval`), > 0.
    pub heartbeat_interval_ms: u64,
    /// The agent reconciles at least this often (`requeueInterval`), > 0.
    pub requeue_interval_ms: u64,
    /// The deadline of one provider call (`actionTimeout`), > 0.
    pub action_timeout_ms: u64,
    /// The bearer token file for mutating HTTP calls (`apiTokenFile`), if any.
    pub api_token_file: Option<PathBuf>,
    /// Entries a node's journal keeps before compaction (`journalRetention`), ≥ 1.
    pub journal_retention: usize,
    /// Where parts of the config were written, for errors found later ([`load_pools`]).
    pub source: ConfigSource,
}

impl AgentConfig {
    /// The configured provider named `name`.
    #[must_use]
    pub fn provider(&self, name: &str) -> Option<&ProviderConfig> {
        self.providers.iter().find(|p| p.name == name)
    }

    /// The node of this process named `name`.
    #[must_use]
    pub fn node(&self, name: &str) -> Option<&NodeSpec> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The fleet this config projects the log over ([`tenure_core::fleet_spec::fleet_text`] of
    /// its nodes, peers and providers): what an etcd fleet must agree on and a backup records.
    #[must_use]
    pub fn fleet_text(&self) -> String {
        let nodes: Vec<NodeSpec> = self.nodes.iter().chain(&self.peers).cloned().collect();
        let providers: Vec<tenure_core::model::ProviderSpec> = self
            .providers
            .iter()
            .map(|p| tenure_core::model::ProviderSpec { name: p.name.clone(), kind: p.kind })
            .collect();
        tenure_core::fleet_spec::fleet_text(&nodes, &providers)
    }
}

/// Where parts of a config were written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigSource {
    /// Position of each `pools` entry, in the order of [`AgentConfig::pool_files`].
    pub pools: Vec<Position>,
    /// Position of each provider's `kind`, in the order of [`AgentConfig::providers`].
    pub provider_kinds: Vec<Position>,
    /// Where each of these keys was written, when it was: `node` or `nodes`, `store.kind` (else
    /// `store`), `apiTokenFile`, `store.passwordFile`, `store.tls.ca`, `store.tls.cert`,
    /// `store.tls.key`.
    pub keys: BTreeMap<&'static str, Position>,
}

impl ConfigSource {
    /// Where `key` (one of [`ConfigSource::keys`]) was written; line 0 (no place) when it was not.
    #[must_use]
    pub fn at(&self, key: &str) -> Position {
        self.keys.get(key).copied().unwrap_or_default()
    }
}

/// Where the federation log and this node's durable state live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreConfig {
    /// The embedded default: the log and all durable state in one local store, owned by this
    /// process.
    Embedded {
        /// The store's folder.
        path: PathBuf,
    },
    /// The log in etcd; this node's journal and marks in a local store.
    Etcd {
        /// etcd client URLs (`http://…` or `https://…`), at least one.
        endpoints: Vec<String>,
        /// The key prefix of the log (default [`ETCD_PREFIX_DEFAULT`]).
        prefix: String,
        /// The local store's folder.
        path: PathBuf,
        /// Events between two snapshots of the log (`snapshotEvery`); the log below a snapshot
        /// is compacted.
        snapshot_every: u64,
        /// TLS to etcd (`tls: {ca, cert, key}`), with https endpoints.
        tls: Option<EtcdTls>,
        /// etcd authentication: the user and the file holding its password (`user`,
        /// `passwordFile`), read when the agent starts.
        user: Option<(String, PathBuf)>,
    },
}

/// `store.tls`: files read when the agent starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTls {
    /// The CA certificate (PEM) that signed etcd's server certificates.
    pub ca: PathBuf,
    /// This agent's client certificate (PEM), when etcd asks for one.
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub key: Option<PathBuf>,
}

impl StoreConfig {
    /// The local store's folder.
    #[must_use]
    pub fn path(&self) -> &Path {
        match self {
            Self::Embedded { path } | Self::Etcd { path, .. } => path,
        }
    }
}

/// One configured provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderConfig {
    /// Its name, referenced by nodes and pools.
    pub name: String,
    /// Its kind (the kind of [`ProviderConfig::settings`]).
    pub kind: ProviderKind,
    /// The settings of its kind, checked by the kind's module (`exec/registry.rs`).
    pub settings: ProviderSettings,
    /// How often its inventory is read for drift repair (`inventoryInterval`); `None`: never
    /// (`0s`, or a kind whose inventory is not read by default: the simulated ones).
    pub inventory_interval_ms: Option<u64>,
    /// How often the announcement of every address this agent holds on it is repeated
    /// (`garpRefresh`, on-prem kinds only); `None`: never (`0s` or absent, the default).
    pub garp_refresh_ms: Option<u64>,
}

/// keepalived's side of pools with `authority: vrrp`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VrrpConfig {
    /// The FIFO keepalived's `notify_fifo` writes to.
    pub notify_fifo: PathBuf,
    /// The VRRP instance whose state this node follows.
    pub instance: String,
}

/// Reads and validates the config file at `path`. Every error is one rendered
/// `file:line:column: message` line (or `file: message` when it has no place), in file order.
pub fn load_config(path: &Path) -> Result<AgentConfig, Vec<String>> {
    let file = path.display().to_string();
    let bytes = read_bounded(path, CONFIG_FILE_BYTES_MAX).map_err(|m| vec![format!("{file}: {m}")])?;
    let text = utf8_text(&bytes).map_err(|e| vec![e.render(&file)])?;
    parse_config(text, path).map_err(|errors| errors.iter().map(|e| e.render(&file)).collect())
}

/// Reads at most `limit` bytes of a file; a longer file is an error.
fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes).map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > limit {
        return Err(format!("larger than {limit} bytes; is this the right file?"));
    }
    Ok(bytes)
}

/// Parses and validates a config's text. No I/O: `path` is only the base of relative paths (its
/// folder) and of the default identity file (its stem). Returns every error found, in file order.
pub fn parse_config(text: &str, path: &Path) -> Result<AgentConfig, Vec<InputError>> {
    let raw: RawConfig =
        serde_saphyr::from_str(text).map_err(|e| vec![InputError::from_yaml_in(text, &e)])?;
    let base = path.parent().unwrap_or_else(|| Path::new(""));
    let mut errors = Vec::new();

    let action_timeout_ms = duration_field(
        &mut errors,
        "actionTimeout",
        raw.action_timeout.as_ref(),
        ACTION_TIMEOUT_DEFAULT_MS,
        true,
    );
    let providers =
        providers::validate_providers(text, &raw.providers.value, base, action_timeout_ms, &mut errors)
            .map_err(|e| vec![e])?;
    let (nodes, peers) = validate_node_keys(&raw, text, &providers, &mut errors);
    let store = validate_store(&raw.store, base, &mut errors);
    // A simulated provider lives in this process's memory: in a fleet every agent has its own,
    // and one agent's inventory of it knows nothing of another's calls — each read would say
    // the others' acquires never happened, and drift repair would re-capture for ever.
    if matches!(store, StoreConfig::Etcd { .. }) {
        for provider in &providers {
            let simulated = matches!(provider.kind, ProviderKind::SimCloud | ProviderKind::SimOnprem);
            let written = raw.providers.value.iter().find(|p| p.value.name.value == provider.name);
            if let Some(written) = written.filter(|_| simulated && provider.inventory_interval_ms.is_some()) {
                errors.push(InputError::at(
                    Position::of_spanned(&written.value.kind),
                    format!(
                        "provider `{}`: a {} provider is in each agent's memory, so in a fleet (store kind                          etcd) its inventory contradicts the other agents' calls; leave out `inventoryInterval`",
                        provider.name,
                        provider.kind.as_str()
                    ),
                ));
            }
        }
    }
    let identity_file = validate_identity_file(&raw, base, &store, &mut errors);
    let vrrp = raw.vrrp.as_ref().map(|v| VrrpConfig {
        notify_fifo: path_field(&mut errors, "vrrp.notifyFifo", &v.value.notify_fifo, base),
        instance: {
            let instance = &v.value.instance;
            if instance.value.is_empty()
                || instance.value.chars().any(|c| c.is_whitespace() || c.is_control())
            {
                errors.push(InputError::at(
                    Position::of_spanned(instance),
                    format!("vrrp.instance `{}` must be a non-empty name without spaces", instance.value),
                ));
            }
            instance.value.clone()
        },
    });

    let mut pool_files: Vec<PathBuf> = Vec::new();
    let mut source = ConfigSource {
        provider_kinds: raw.providers.value.iter().map(|p| Position::of_spanned(&p.value.kind)).collect(),
        keys: key_positions(&raw),
        ..ConfigSource::default()
    };
    for entry in &raw.pools {
        let file = path_field(&mut errors, "pools entry", entry, base);
        if pool_files.contains(&file) {
            errors.push(InputError::at(
                Position::of_spanned(entry),
                format!("pool file `{}` is listed twice", entry.value),
            ));
            continue;
        }
        pool_files.push(file);
        source.pools.push(Position::of_spanned(entry));
    }

    let listen = match &raw.listen {
        None => LISTEN_DEFAULT.parse().expect("LISTEN_DEFAULT is an address and port"),
        Some(text) => text.value.trim().parse().unwrap_or_else(|_| {
            errors.push(InputError::at(
                Position::of_spanned(text),
                format!(
                    "listen: `{}` is not an IP address and port like `127.0.0.1:9464` or `[::1]:9464`",
                    text.value
                ),
            ));
            LISTEN_DEFAULT.parse().expect("LISTEN_DEFAULT is an address and port")
        }),
    };
    let heartbeat_interval_ms = duration_field(
        &mut errors,
        "heartbeatInterval",
        raw.heartbeat_interval.as_ref(),
        HEARTBEAT_INTERVAL_DEFAULT_MS,
        true,
    );
    let requeue_interval_ms = duration_field(
        &mut errors,
        "requeueInterval",
        raw.requeue_interval.as_ref(),
        REQUEUE_INTERVAL_DEFAULT_MS,
        true,
    );
    let requeue_interval_ms = match &raw.requeue_interval {
        Some(text) if requeue_interval_ms > REQUEUE_INTERVAL_MAX_MS => {
            errors.push(InputError::at(
                Position::of_spanned(text),
                format!(
                    "requeueInterval must be at most {}h (the safety net's pass and the retries' backoff run from it), not {}",
                    REQUEUE_INTERVAL_MAX_MS / 3_600_000,
                    text.value.trim()
                ),
            ));
            REQUEUE_INTERVAL_DEFAULT_MS
        }
        _ => requeue_interval_ms,
    };
    let api_token_file =
        raw.api_token_file.as_ref().map(|f| path_field(&mut errors, "apiTokenFile", f, base));
    let journal_retention = match &raw.journal_retention {
        None => JOURNAL_RETENTION_DEFAULT,
        Some(n) => match usize::try_from(n.value) {
            Ok(entries) if (1..=JOURNAL_ENTRIES_MAX).contains(&entries) => entries,
            _ => {
                errors.push(InputError::at(
                    Position::of_spanned(n),
                    format!(
                        "journalRetention must be from 1 to {JOURNAL_ENTRIES_MAX} entries, not {}",
                        n.value
                    ),
                ));
                JOURNAL_RETENTION_DEFAULT
            }
        },
    };

    if !errors.is_empty() {
        errors.sort_by_key(|e| e.position);
        return Err(errors);
    }
    Ok(AgentConfig {
        path: path.to_path_buf(),
        nodes,
        peers,
        store,
        identity_file,
        providers,
        vrrp,
        pool_files,
        listen,
        heartbeat_interval_ms,
        requeue_interval_ms,
        action_timeout_ms,
        api_token_file,
        journal_retention,
        source,
    })
}

/// Where the keys [`ConfigSource::keys`] lists were written.
fn key_positions(raw: &RawConfig) -> BTreeMap<&'static str, Position> {
    let store = &raw.store.value;
    let tls = store.tls.as_ref().map(|t| &t.value);
    let keys: [(&'static str, Option<Position>); 8] = [
        ("node", raw.node.as_ref().map(Position::of_spanned)),
        ("nodes", raw.nodes.as_ref().map(Position::of_spanned)),
        (
            "store.kind",
            Some(store.kind.as_ref().map_or_else(|| Position::of_spanned(&raw.store), Position::of_spanned)),
        ),
        ("apiTokenFile", raw.api_token_file.as_ref().map(Position::of_spanned)),
        ("store.passwordFile", store.password_file.as_ref().map(Position::of_spanned)),
        ("store.tls.ca", tls.map(|t| Position::of_spanned(&t.ca))),
        ("store.tls.cert", tls.and_then(|t| t.cert.as_ref()).map(Position::of_spanned)),
        ("store.tls.key", tls.and_then(|t| t.key.as_ref()).map(Position::of_spanned)),
    ];
    keys.into_iter().filter_map(|(key, position)| Some((key, position?))).collect()
}

/// A duration value (Go style), or `default_ms` when absent; `positive` refuses 0.
fn duration_field(
    errors: &mut Vec<InputError>,
    field: &str,
    value: Option<&Spanned<String>>,
    default_ms: u64,
    positive: bool,
) -> u64 {
    let Some(text) = value else { return default_ms };
    match parse_duration_ms(text.value.trim()) {
        Err(m) => {
            errors.push(InputError::at(Position::of_spanned(text), format!("{field}: {m}")));
            default_ms
        }
        Ok(0) if positive => {
            errors.push(InputError::at(Position::of_spanned(text), format!("{field} must be longer than 0")));
            default_ms
        }
        Ok(ms) => ms,
    }
}

/// An `http://` or `https://` URL with a host.
fn check_url(text: &str) -> Result<(), String> {
    let rest = text.strip_prefix("http://").or_else(|| text.strip_prefix("https://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') && !rest.contains(char::is_whitespace) => {
            Ok(())
        }
        _ => Err(format!("`{text}` is not a URL like `http://127.0.0.1:2379`")),
    }
}

/// A duration in the config's own notation: `10s`, `1500ms`.
pub(crate) fn format_ms(ms: u64) -> String {
    if ms.is_multiple_of(1_000) { format!("{}s", ms / 1_000) } else { format!("{ms}ms") }
}

#[cfg(test)]
mod tests;
