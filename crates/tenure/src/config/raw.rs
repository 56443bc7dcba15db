//! The agent config as written (SPEC 10), before validation: every value [`Spanned`], so that a
//! check made after parsing can still name its `line:column`; unknown keys are errors.
//!
//! A provider entry is read here only for its `name` and `kind`: its settings are read again
//! into its kind's own struct (`providers.rs`, `exec/registry.rs`), so that `command` under a
//! `sim-cloud` provider is refused by name instead of by a generic "unknown field".

use serde::Deserialize;
use serde_saphyr::Spanned;
use tenure_core::fleet_spec::RawNode;
use tenure_core::model::ProviderKind;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawConfig {
    pub(super) node: Option<Spanned<RawNode>>,
    pub(super) nodes: Option<Spanned<Vec<Spanned<RawNode>>>>,
    pub(super) peers: Option<Spanned<Vec<Spanned<RawNode>>>>,
    pub(super) store: Spanned<RawStore>,
    pub(super) identity_file: Option<Spanned<String>>,
    pub(super) providers: Spanned<Vec<Spanned<RawProvider>>>,
    pub(super) vrrp: Option<Spanned<RawVrrp>>,
    #[serde(default)]
    pub(super) pools: Vec<Spanned<String>>,
    pub(super) listen: Option<Spanned<String>>,
    pub(super) heartbeat_interval: Option<Spanned<String>>,
    pub(super) requeue_interval: Option<Spanned<String>>,
    pub(super) action_timeout: Option<Spanned<String>>,
    pub(super) api_token_file: Option<Spanned<String>>,
    // Signed, so that a negative count is told the same range as 0 (not "a whole number, 0 or more").
    pub(super) journal_retention: Option<Spanned<i64>>,
}

/// `store:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawStore {
    pub(super) kind: Option<Spanned<RawStoreKind>>,
    pub(super) path: Spanned<String>,
    pub(super) endpoints: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) prefix: Option<Spanned<String>>,
    pub(super) snapshot_every: Option<Spanned<u64>>,
    pub(super) tls: Option<Spanned<RawTls>>,
    pub(super) user: Option<Spanned<String>>,
    pub(super) password_file: Option<Spanned<String>>,
}

/// `store.tls`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub(super) ca: Spanned<String>,
    pub(super) cert: Option<Spanned<String>>,
    pub(super) key: Option<Spanned<String>>,
}

/// `store.kind`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum RawStoreKind {
    Embedded,
    Etcd,
}

/// One `providers:` entry's name and kind; its other keys are its kind's settings, read in a
/// second step (`providers.rs`), so they are let through here.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RawProvider {
    pub(super) name: Spanned<String>,
    pub(super) kind: Spanned<ProviderKind>,
}

/// `vrrp:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawVrrp {
    pub(super) notify_fifo: Spanned<String>,
    pub(super) instance: Spanned<String>,
}
