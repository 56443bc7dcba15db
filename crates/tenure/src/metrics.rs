//! The agent's Prometheus metrics (`GET /metrics`), in the OpenMetrics text format.
//!
//! Two kinds of families:
//! - **observed here** and kept in a prometheus-client [`Registry`]: the reconcile duration, the
//!   executor call duration by provider, and the HTTP requests the API rejected by reason;
//! - **read from the agent loop** at scrape time, as a [`MetricsSnapshot`]: per-address epochs,
//!   owner and desired flag, journal entries by verb and state, fenced actions and rejected events
//!   by reason, log index and lag, health. They are encoded from the snapshot by a collector in a
//!   registry built for that one scrape, so the loop's state is never copied into long-lived
//!   metric handles and a removed address disappears from the next scrape.
//!
//! prometheus-client writes every name, `# HELP`, `# TYPE` and `# UNIT` line, the `_total` suffix
//! of counters and the escaping of label values (`\\`, `"`, newline).
//!
//! # Layout
//!
//! - this file — [`Metrics`]: the observed families, the registries, [`Metrics::encode`].
//! - `metrics/snapshot.rs` — the collector of one scrape's [`MetricsSnapshot`].

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::agent::request::MetricsSnapshot;

mod snapshot;

use snapshot::SnapshotCollector;

/// The `Content-Type` of [`Metrics::encode`]'s text (OpenMetrics 1.0, which Prometheus prefers).
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Smallest bucket of the reconcile duration histogram, in seconds (0.5 ms); each next bucket
/// doubles it.
const RECONCILE_BUCKET_FIRST_SECONDS: f64 = 0.000_5;
/// How many buckets the reconcile duration histogram has (0.5 ms … 16 s).
const RECONCILE_BUCKETS_COUNT: u16 = 16;
/// Smallest bucket of the executor call duration histogram, in seconds (1 ms); each next bucket
/// doubles it.
const EXECUTOR_CALL_BUCKET_FIRST_SECONDS: f64 = 0.001;
/// How many buckets the executor call duration histogram has (1 ms … 65 s).
const EXECUTOR_CALL_BUCKETS_COUNT: u16 = 17;

/// The label set `{provider}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabels {
    provider: String,
}

/// The label set `{reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

// --- Maintenance notices (`maintenanceNotices: drain`): their own block, observed here. ---

/// The label set `{cloud, kind}` of a maintenance notice (`cloud`: `aws`, `azure`, `oci`, the
/// metadata service's; not a provider's name, which `provider` is in every other family).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NoticeLabels {
    cloud: String,
    kind: String,
}

/// The label set `{cloud}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CloudLabels {
    cloud: String,
}

/// The families of the maintenance notice watcher.
#[derive(Debug)]
struct NoticeMetrics {
    /// `tenure_maintenance_notices_total{cloud,kind}`.
    notices: Family<NoticeLabels, Counter>,
    /// `tenure_maintenance_notice_drains_total{cloud}`.
    drains: Family<CloudLabels, Counter>,
    /// `tenure_maintenance_notice_acknowledgements_total{cloud}`.
    acknowledgements: Family<CloudLabels, Counter>,
}

impl NoticeMetrics {
    fn register(registry: &mut Registry) -> Self {
        let notices = Family::<NoticeLabels, Counter>::default();
        registry.register(
            "tenure_maintenance_notices",
            "Maintenance notices the instance metadata service announced for this instance, by cloud and kind",
            notices.clone(),
        );
        let drains = Family::<CloudLabels, Counter>::default();
        registry.register(
            "tenure_maintenance_notice_drains",
            "Drains of this agent's node a maintenance notice started, by cloud",
            drains.clone(),
        );
        let acknowledgements = Family::<CloudLabels, Counter>::default();
        registry.register(
            "tenure_maintenance_notice_acknowledgements",
            "Maintenance notices acknowledged to the metadata service once the node held nothing, by cloud",
            acknowledgements.clone(),
        );
        Self { notices, drains, acknowledgements }
    }
}

// --- End of the maintenance notices' block. ---

fn reconcile_histogram() -> Histogram {
    Histogram::new(exponential_buckets(RECONCILE_BUCKET_FIRST_SECONDS, 2.0, RECONCILE_BUCKETS_COUNT))
}

fn executor_call_histogram() -> Histogram {
    Histogram::new(exponential_buckets(EXECUTOR_CALL_BUCKET_FIRST_SECONDS, 2.0, EXECUTOR_CALL_BUCKETS_COUNT))
}

/// The agent's metrics: what the runtime observes, plus the loop's state at scrape time.
/// Shared as an `Arc<Metrics>` by the agent loop (durations) and the HTTP API (rejections,
/// scrapes); every method takes `&self`.
#[derive(Debug)]
pub struct Metrics {
    /// The families observed here (never changes after [`Metrics::new`]).
    registry: Registry,
    /// `tenure_reconcile_duration_seconds`.
    reconcile_duration: Histogram,
    /// `tenure_executor_call_duration_seconds{provider}`.
    executor_call_duration: Family<ProviderLabels, Histogram, fn() -> Histogram>,
    /// `tenure_requests_rejected_total{reason}`.
    requests_rejected: Family<ReasonLabels, Counter>,
    /// The maintenance notices' families (`exec/notices`, `agent/notices.rs`).
    notices: NoticeMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Empty metrics with every observed family registered.
    #[must_use]
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let reconcile_duration = reconcile_histogram();
        registry.register_with_unit(
            "tenure_reconcile_duration",
            "Time one reconcile took (catch up, plan, import, sweep)",
            Unit::Seconds,
            reconcile_duration.clone(),
        );
        let executor_call_duration: Family<ProviderLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(executor_call_histogram);
        registry.register_with_unit(
            "tenure_executor_call_duration",
            "Time one executor call took, by provider, deadline included",
            Unit::Seconds,
            executor_call_duration.clone(),
        );
        let requests_rejected = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "tenure_requests_rejected",
            "HTTP API requests answered with an error, by reason",
            requests_rejected.clone(),
        );
        let notices = NoticeMetrics::register(&mut registry);
        Self { registry, reconcile_duration, executor_call_duration, requests_rejected, notices }
    }

    /// Records how long one reconcile took.
    pub fn observe_reconcile(&self, took: Duration) {
        self.reconcile_duration.observe(took.as_secs_f64());
    }

    /// Records how long one call to `provider`'s executor took.
    pub fn observe_executor_call(&self, provider: &str, took: Duration) {
        self.executor_call_duration
            .get_or_create(&ProviderLabels { provider: provider.to_owned() })
            .observe(took.as_secs_f64());
    }

    /// Counts one HTTP request the API answered with an error. `reason` should come from a small
    /// fixed set (the API's reasons are listed in `docs/operations.md`): every value is a series.
    pub fn count_rejected_request(&self, reason: &str) {
        self.requests_rejected.get_or_create(&ReasonLabels { reason: reason.to_owned() }).inc();
    }

    /// Counts one maintenance notice the metadata service announced (each notice once, when first
    /// seen): `cloud` (`aws`, `azure`, `oci`), `kind` the notice's kind.
    pub fn count_maintenance_notice(&self, cloud: &str, kind: &str) {
        let labels = NoticeLabels { cloud: cloud.to_owned(), kind: kind.to_owned() };
        self.notices.notices.get_or_create(&labels).inc();
    }

    /// Counts one drain a maintenance notice of `cloud` started.
    pub fn count_notice_drain(&self, cloud: &str) {
        self.notices.drains.get_or_create(&CloudLabels { cloud: cloud.to_owned() }).inc();
    }

    /// Counts one acknowledgement of a maintenance notice the metadata service took (Azure).
    pub fn count_notice_acknowledgement(&self, cloud: &str) {
        self.notices.acknowledgements.get_or_create(&CloudLabels { cloud: cloud.to_owned() }).inc();
    }

    /// The whole scrape: the observed families, then the families of `snapshot` (the agent
    /// loop's state), then `# EOF`. With `None` (the loop did not answer) the loop's families are
    /// left out except `tenure_healthy`, which is 0.
    #[must_use]
    pub fn encode(&self, snapshot: Option<MetricsSnapshot>) -> String {
        self.encode_with(snapshot, false)
    }

    /// [`Metrics::encode`], with `tenure_healthy` set from `healthy` when `snapshot` is `None`:
    /// what `GET /v1/health` says of a loop that is busy (the health it posted, while under the
    /// handle's timeout old), so that the gauge and the route agree.
    #[must_use]
    pub fn encode_with(&self, snapshot: Option<MetricsSnapshot>, healthy: bool) -> String {
        let rows = snapshot.as_ref().and_then(|s| s.ownership.as_ref()).map_or(0, Vec::len);
        let mut text = String::with_capacity(SCRAPE_BYTES_FIXED + rows * SCRAPE_BYTES_PER_ADDRESS);
        let mut loop_state = Registry::default();
        loop_state.register_collector(Box::new(SnapshotCollector { snapshot, healthy_when_busy: healthy }));
        encode_registry(&mut text, &self.registry)
            .and_then(|()| encode_registry(&mut text, &loop_state))
            .and_then(|()| encode_eof(&mut text))
            .expect("writing to a String cannot fail");
        text
    }
}

/// The leader-election families of `tenure elect --metrics-listen` for one scrape, labelled
/// `{election, backend}`, then `# EOF`: `tenure_leader_is_leader`, `tenure_leader_term` (the term
/// led under, 0 when following), `tenure_leader_transitions_total`,
/// `tenure_leader_failed_attempts_total` (acquire or renew attempts that failed or got no answer),
/// `tenure_leader_highest_term_seen` and `tenure_leader_last_renewal_timestamp_seconds` (0 when it
/// never led).
#[must_use]
pub fn encode_election(
    election: &str,
    backend: &str,
    state: tenure_lead::LeaderState,
    stats: tenure_lead::ElectionStats,
) -> String {
    let labels = [("election", election.to_owned()), ("backend", backend.to_owned())];
    let mut registry = Registry::with_labels(labels.into_iter().map(|(k, v)| (k.into(), v.into())));
    registry.register(
        "tenure_leader_is_leader",
        "1 while this process leads the election, else 0.",
        ConstGauge::new(i64::from(state.leader)),
    );
    registry.register(
        "tenure_leader_term",
        "The term (leaderEpoch) this process leads under; 0 when it does not lead.",
        ConstGauge::new(i64::try_from(state.epoch.map_or(0, |e| e.get())).unwrap_or(i64::MAX)),
    );
    registry.register(
        "tenure_leader_transitions",
        "Changes of this process's leadership state (became leader, stepped down, new term).",
        ConstCounter::new(stats.transitions),
    );
    registry.register(
        "tenure_leader_failed_attempts",
        "Acquire or renew attempts that failed or got no answer in time.",
        ConstCounter::new(stats.failed_attempts),
    );
    registry.register(
        "tenure_leader_highest_term_seen",
        "The highest term this process has seen in the election's store, led or not.",
        ConstGauge::new(i64::try_from(stats.highest_term_seen).unwrap_or(i64::MAX)),
    );
    #[allow(clippy::cast_precision_loss, reason = "milliseconds since 1970 fit f64 exactly until 2255")]
    let last = stats.last_renewal_unix_ms as f64 / 1000.0;
    registry.register(
        "tenure_leader_last_renewal_timestamp_seconds",
        "Unix time of the start of the last attempt that led (0: never led).",
        ConstGauge::new(last),
    );
    let mut text = String::new();
    encode_registry(&mut text, &registry)
        .and_then(|()| encode_eof(&mut text))
        .expect("writing to a String cannot fail");
    text
}

/// Room reserved for the families that do not grow with the address count, in bytes.
const SCRAPE_BYTES_FIXED: usize = 16 * 1024;
/// Room reserved per address (four samples with pool and address labels), in bytes.
const SCRAPE_BYTES_PER_ADDRESS: usize = 320;

impl crate::agent::runner::Observe for Metrics {
    fn reconcile(&self, duration: Duration) {
        self.observe_reconcile(duration);
    }

    fn executor_call(&self, provider: &str, duration: Duration) {
        self.observe_executor_call(provider, duration);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use tenure_core::rows::OwnershipRow;

    use super::*;

    /// One sample line: its name, its labels (unescaped) and its value text.
    #[derive(Debug)]
    struct Sample {
        name: String,
        labels: Vec<(String, String)>,
        value: String,
    }

    /// Reads the label set after a sample's name, undoing the text format's escapes; `None` when a
    /// value is not properly quoted or escaped.
    fn parse_labels(text: &str) -> Option<(Vec<(String, String)>, &str)> {
        let mut labels = Vec::new();
        let mut rest = text.strip_prefix('{')?;
        loop {
            if let Some(after) = rest.strip_prefix('}') {
                return Some((labels, after));
            }
            let (key, after) = rest.split_once("=\"")?;
            let mut value = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next()? {
                    (i, '"') => break i,
                    (_, '\\') => match chars.next()?.1 {
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        'n' => value.push('\n'),
                        _ => return None,
                    },
                    (_, '\n') => return None,
                    (_, c) => value.push(c),
                }
            };
            labels.push((key.trim_start_matches(',').to_owned(), value));
            rest = &after[end + 1..];
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
    }

    /// Checks the whole text: `# EOF` last, every sample's family declared by a `# HELP` and a
    /// `# TYPE` line before it, each family declared once; returns the samples and the types.
    fn check(text: &str) -> (Vec<Sample>, BTreeMap<String, String>) {
        assert!(text.ends_with("# EOF\n"), "the text ends with # EOF");
        let mut helps = BTreeSet::new();
        let mut types = BTreeMap::new();
        let mut samples = Vec::new();
        for line in text.lines() {
            if line == "# EOF" {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().expect("a name");
                assert!(helps.insert(name.to_owned()), "{name} has one HELP line");
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("name and type");
                assert!(helps.contains(name), "TYPE of {name} follows its HELP");
                assert!(types.insert(name.to_owned(), kind.to_owned()).is_none(), "{name} has one TYPE");
                continue;
            }
            if line.starts_with("# UNIT ") {
                continue;
            }
            assert!(!line.starts_with('#'), "unexpected comment: {line}");
            let name_end = line.find(['{', ' ']).expect("a sample has a value");
            let name = &line[..name_end];
            let (labels, rest) = if line[name_end..].starts_with('{') {
                parse_labels(&line[name_end..]).unwrap_or_else(|| panic!("bad labels in {line:?}"))
            } else {
                (Vec::new(), &line[name_end..])
            };
            let value = rest.trim().to_owned();
            assert!(value.parse::<f64>().is_ok(), "numeric value in {line:?}");
            let family = [
                ("counter", "_total"),
                ("counter", "_created"),
                ("histogram", "_bucket"),
                ("histogram", "_sum"),
                ("histogram", "_count"),
                ("histogram", "_created"),
            ]
            .iter()
            .find_map(|(kind, suffix)| {
                let base = name.strip_suffix(suffix)?;
                (types.get(base).map(String::as_str) == Some(kind)).then(|| base.to_owned())
            })
            .unwrap_or_else(|| name.to_owned());
            assert!(types.contains_key(&family), "sample {name} belongs to a declared family ({line:?})");
            samples.push(Sample { name: name.to_owned(), labels, value });
        }
        (samples, types)
    }

    fn row(
        pool: &str,
        address: &str,
        owner: Option<&str>,
        epochs: (u64, u64),
        desired: bool,
    ) -> OwnershipRow {
        OwnershipRow {
            pool: pool.to_owned(),
            address: address.to_owned(),
            owner: owner.map(str::to_owned),
            ownership_epoch: epochs.0,
            capture_epoch: epochs.1,
            desired,
            phase: Some(if desired { "held" } else { "released" }.to_owned()),
            held_by: Some(owner.iter().map(|o| (*o).to_owned()).collect()),
            nics: Some(Vec::new()),
        }
    }

    fn snapshot() -> MetricsSnapshot {
        MetricsSnapshot {
            ownership: Some(vec![
                row("edge", "10.0.0.10", Some("a"), (3, 4), true),
                row("edge", "10.0.0.11", None, (2, 2), false),
                // Not a name the core accepts, but the encoder must escape whatever it is given.
                row("edge", "2001:db8::1", Some("we\"ird\\node\nx"), (1, 1), true),
            ]),
            addresses: vec![
                (("edge".to_owned(), "held".to_owned()), 2),
                (("edge".to_owned(), "released".to_owned()), 1),
            ],
            address_series_omitted: 0,
            actions: vec![
                (("assign-secondary-ip".to_owned(), "executed".to_owned()), 2),
                (("unassign-secondary-ip".to_owned(), "skipped".to_owned()), 1),
                (("assign-secondary-ip".to_owned(), "pending".to_owned()), 3),
                (("enable-forwarding".to_owned(), "pending".to_owned()), 2),
            ],
            fenced: vec![("stale-epoch".to_owned(), 5)],
            rejected_events: vec![("no-such-node".to_owned(), 1)],
            log_index: 42,
            log_lag: 3,
            healthy: true,
            drift_recaptures: 2,
            inventory_reads: vec![(("aws1".to_owned(), "ok".to_owned()), 7)],
            garp_refreshes: vec![(("lan".to_owned(), "executed".to_owned()), 9)],
            stamps_capped: 4,
            head_unconfirmed: 6,
            calls_cancelled: 8,
            provider_throttled: vec![("az1".to_owned(), 11)],
        }
    }

    fn values<'a>(samples: &'a [Sample], name: &str) -> Vec<&'a Sample> {
        samples.iter().filter(|s| s.name == name).collect()
    }

    /// A scrape that left the per-address series out declares none of their families and says
    /// how many addresses it left out; the counts by pool and phase stay.
    #[test]
    fn a_scrape_without_address_series_says_so() {
        let mut without = snapshot();
        without.ownership = None;
        without.address_series_omitted = 3;
        let (samples, types) = check(&Metrics::new().encode(Some(without)));
        for family in [
            "tenure_ownership_epoch",
            "tenure_capture_epoch",
            "tenure_address_owner",
            "tenure_address_desired",
        ] {
            assert!(!types.contains_key(family), "{family} declared");
        }
        assert_eq!(values(&samples, "tenure_address_series_omitted")[0].value, "3");
        let counts = values(&samples, "tenure_addresses");
        assert_eq!(
            counts.iter().map(|s| (s.labels.clone(), s.value.as_str())).collect::<Vec<_>>(),
            [
                (vec![("pool".to_owned(), "edge".to_owned()), ("phase".to_owned(), "held".to_owned())], "2"),
                (
                    vec![("pool".to_owned(), "edge".to_owned()), ("phase".to_owned(), "released".to_owned())],
                    "1"
                ),
            ]
        );
        let (samples, _) = check(&Metrics::new().encode(Some(snapshot())));
        assert_eq!(values(&samples, "tenure_address_series_omitted")[0].value, "0");
        assert_eq!(values(&samples, "tenure_address_owner").len(), 3);
    }

    #[test]
    fn a_scrape_declares_every_family_and_escapes_labels() {
        let metrics = Metrics::new();
        metrics.observe_reconcile(Duration::from_millis(3));
        metrics.observe_executor_call("sim1", Duration::from_millis(40));
        metrics.observe_executor_call("sim1", Duration::from_millis(50));
        metrics.count_rejected_request("unauthenticated");
        metrics.count_rejected_request("unauthenticated");
        metrics.count_rejected_request("bad-request");
        let (samples, types) = check(&metrics.encode(Some(snapshot())));

        for (family, kind) in [
            ("tenure_reconcile_duration_seconds", "histogram"),
            ("tenure_executor_call_duration_seconds", "histogram"),
            ("tenure_requests_rejected", "counter"),
            ("tenure_ownership_epoch", "gauge"),
            ("tenure_capture_epoch", "gauge"),
            ("tenure_address_owner", "gauge"),
            ("tenure_address_desired", "gauge"),
            ("tenure_addresses", "gauge"),
            ("tenure_address_series_omitted", "gauge"),
            ("tenure_actions", "gauge"),
            ("tenure_actions_waiting_for_approval", "gauge"),
            ("tenure_actions_fenced", "counter"),
            ("tenure_events_rejected", "counter"),
            ("tenure_log_index", "gauge"),
            ("tenure_log_lag", "gauge"),
            ("tenure_healthy", "gauge"),
            ("tenure_drift_recaptures", "counter"),
            ("tenure_inventory_reads", "counter"),
            ("tenure_garp_refreshes", "counter"),
            ("tenure_stamps_capped", "counter"),
            ("tenure_head_unconfirmed", "counter"),
            ("tenure_calls_cancelled", "counter"),
            ("tenure_provider_throttled", "counter"),
        ] {
            assert_eq!(types.get(family).map(String::as_str), Some(kind), "{family}");
        }

        let owners = values(&samples, "tenure_address_owner");
        assert_eq!(owners.len(), 3, "one owner sample per address");
        let owner_of = |address: &str| {
            let sample = owners
                .iter()
                .find(|s| s.labels.iter().any(|(k, v)| k == "address" && v == address))
                .expect("the address has a sample");
            sample.labels.iter().find(|(k, _)| k == "owner").map(|(_, v)| v.clone()).expect("owner label")
        };
        assert_eq!(owner_of("10.0.0.10"), "a");
        assert_eq!(owner_of("10.0.0.11"), "", "no owner is the empty owner");
        assert_eq!(owner_of("2001:db8::1"), "we\"ird\\node\nx", "quotes, backslashes, newlines round-trip");

        let epochs = values(&samples, "tenure_ownership_epoch");
        assert_eq!(epochs.len(), 3);
        assert_eq!(epochs[0].value, "3");
        let captures = values(&samples, "tenure_capture_epoch");
        assert_eq!(captures.iter().map(|s| s.value.as_str()).collect::<Vec<_>>(), ["4", "2", "1"]);
        let desired = values(&samples, "tenure_address_desired");
        assert_eq!(desired.iter().map(|s| s.value.as_str()).collect::<Vec<_>>(), ["1", "0", "1"]);
        assert_eq!(values(&samples, "tenure_actions").len(), 4);
        assert_eq!(
            values(&samples, "tenure_actions_waiting_for_approval")[0].value,
            "5",
            "every pending entry"
        );
        assert_eq!(values(&samples, "tenure_actions_fenced_total")[0].value, "5");
        assert_eq!(values(&samples, "tenure_events_rejected_total")[0].value, "1");
        assert_eq!(values(&samples, "tenure_log_index")[0].value, "42");
        assert_eq!(values(&samples, "tenure_log_lag")[0].value, "3");
        assert_eq!(values(&samples, "tenure_healthy")[0].value, "1");
        assert_eq!(values(&samples, "tenure_drift_recaptures_total")[0].value, "2");
        assert_eq!(values(&samples, "tenure_stamps_capped_total")[0].value, "4");
        assert_eq!(values(&samples, "tenure_head_unconfirmed_total")[0].value, "6");
        let reads = values(&samples, "tenure_inventory_reads_total");
        assert_eq!(
            reads[0].labels,
            [("provider".to_owned(), "aws1".to_owned()), ("outcome".to_owned(), "ok".to_owned())]
        );
        assert_eq!(reads[0].value, "7");
        let refreshes = values(&samples, "tenure_garp_refreshes_total");
        assert_eq!(
            refreshes[0].labels,
            [("provider".to_owned(), "lan".to_owned()), ("outcome".to_owned(), "executed".to_owned())]
        );
        assert_eq!(refreshes[0].value, "9");
        let throttled = values(&samples, "tenure_provider_throttled_total");
        assert_eq!(throttled[0].labels, [("provider".to_owned(), "az1".to_owned())]);
        assert_eq!(throttled[0].value, "11");

        let rejected = values(&samples, "tenure_requests_rejected_total");
        let count = |reason: &str| {
            rejected
                .iter()
                .find(|s| s.labels == [("reason".to_owned(), reason.to_owned())])
                .map(|s| s.value.clone())
        };
        assert_eq!(count("unauthenticated").as_deref(), Some("2"));
        assert_eq!(count("bad-request").as_deref(), Some("1"));
        let calls = values(&samples, "tenure_executor_call_duration_seconds_count");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].labels, [("provider".to_owned(), "sim1".to_owned())]);
        assert_eq!(calls[0].value, "2");
        assert_eq!(values(&samples, "tenure_reconcile_duration_seconds_count")[0].value, "1");
    }

    #[test]
    fn without_an_answer_only_health_is_reported_from_the_loop() {
        let (samples, types) = check(&Metrics::new().encode(None));
        assert_eq!(values(&samples, "tenure_healthy")[0].value, "0");
        assert!(!types.contains_key("tenure_ownership_epoch"));
        assert!(!types.contains_key("tenure_log_index"));
    }
}
