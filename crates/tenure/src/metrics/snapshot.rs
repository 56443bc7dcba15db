//! The families read from the agent loop at scrape time: one [`MetricsSnapshot`] encoded by a
//! collector registered for that one scrape (see the module documentation of [`super`]).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use tenure_core::rows::OwnershipRow;

use crate::agent::request::MetricsSnapshot;

/// Encodes one scrape's [`MetricsSnapshot`].
#[derive(Debug)]
pub(super) struct SnapshotCollector {
    pub(super) snapshot: Option<MetricsSnapshot>,
    /// `tenure_healthy` when there is no snapshot (the loop is busy).
    pub(super) healthy_when_busy: bool,
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(s) = &self.snapshot else {
            return gauge(&mut encoder, "tenure_healthy", HEALTHY_HELP, u64::from(self.healthy_when_busy));
        };
        let mut family = encoder.encode_descriptor(
            "tenure_addresses",
            "Addresses the map shows, by pool and phase (pending-approval, acquiring, held, releasing, released).",
            None,
            MetricType::Gauge,
        )?;
        for ((pool, phase), count) in &s.addresses {
            let labels = [("pool", pool.as_str()), ("phase", phase.as_str())];
            ConstGauge::new(*count).encode(family.encode_family(&labels)?)?;
        }
        gauge(
            &mut encoder,
            "tenure_address_series_omitted",
            "Addresses whose per-address series this scrape left out (by default past 10,000 \
             addresses, or with ?addresses=none; ?addresses=all writes them; 0 when written).",
            s.address_series_omitted,
        )?;
        // Four series an address, written only as the scrape asked (`AddressSeries`): left
        // out, their families are not declared either.
        if let Some(rows) = &s.ownership {
            address_series(&mut encoder, rows)?;
        }
        let mut family = encoder.encode_descriptor(
            "tenure_actions",
            "Journal entries now, by verb and state.",
            None,
            MetricType::Gauge,
        )?;
        for ((verb, state), count) in &s.actions {
            let labels = [("verb", verb.as_str()), ("state", state.as_str())];
            ConstGauge::new(*count).encode(family.encode_family(&labels)?)?;
        }
        gauge(
            &mut encoder,
            "tenure_actions_waiting_for_approval",
            "Journal entries waiting for an approval now (state pending: pools with approval: manual, and what a pool \
             switched to auto left pending).",
            s.actions.iter().filter(|((_, state), _)| state == "pending").map(|(_, count)| count).sum(),
        )?;
        reason_counters(
            &mut encoder,
            "tenure_actions_fenced",
            "Actions the fence gate skipped since the agent started, by reason.",
            &s.fenced,
        )?;
        reason_counters(
            &mut encoder,
            "tenure_events_rejected",
            "Log events the projection rejected since the agent started, by reason.",
            &s.rejected_events,
        )?;
        gauge(
            &mut encoder,
            "tenure_log_index",
            "Index of the last log record applied (0: none).",
            s.log_index,
        )?;
        gauge(
            &mut encoder,
            "tenure_log_lag",
            "Log records between the head and the last one applied.",
            s.log_lag,
        )?;
        ConstCounter::new(s.drift_recaptures).encode(encoder.encode_descriptor(
            "tenure_drift_recaptures",
            "Re-captures drift repair made (inventory contradicted a confirmed execution), as the \
             log's projection counts them.",
            None,
            MetricType::Counter,
        )?)?;
        let mut family = encoder.encode_descriptor(
            "tenure_inventory_reads",
            "Inventory reads of each provider since the agent started, by outcome (ok, failed).",
            None,
            MetricType::Counter,
        )?;
        for ((provider, outcome), count) in &s.inventory_reads {
            let labels = [("provider", provider.as_str()), ("outcome", outcome.as_str())];
            ConstCounter::new(*count).encode(family.encode_family(&labels)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "tenure_garp_refreshes",
            "Announcements of held addresses repeated since the agent started (garpRefresh, and the \
             burst when keepalived says MASTER again), by provider and outcome (executed, refused: \
             keepalived said not MASTER, failed).",
            None,
            MetricType::Counter,
        )?;
        for ((provider, outcome), count) in &s.garp_refreshes {
            let labels = [("provider", provider.as_str()), ("outcome", outcome.as_str())];
            ConstCounter::new(*count).encode(family.encode_family(&labels)?)?;
        }
        ConstCounter::new(s.stamps_capped).encode(encoder.encode_descriptor(
            "tenure_stamps_capped",
            "Event stamps held back because this host's clock ran ahead of the other agents' median \
             (the clock-lead rule).",
            None,
            MetricType::Counter,
        )?)?;
        ConstCounter::new(s.head_unconfirmed).encode(encoder.encode_descriptor(
            "tenure_head_unconfirmed",
            "Times the agent could not confirm the log head in time before calls, and so did not act \
             (fail-closed).",
            None,
            MetricType::Counter,
        )?)?;
        ConstCounter::new(s.calls_cancelled).encode(encoder.encode_descriptor(
            "tenure_calls_cancelled",
            "Provider calls cancelled in flight because the view fenced their action (their outcome \
             is unknown: recorded failed, never retried while stale; a cancelled acquire is then counted \
             as held and released).",
            None,
            MetricType::Counter,
        )?)?;
        let mut family = encoder.encode_descriptor(
            "tenure_provider_throttled",
            "Answers of each provider that asked its executor to wait (throttling: HTTP 429, a \
             resource busy with another operation) since the agent started; each was waited out \
             within the action's deadline.",
            None,
            MetricType::Counter,
        )?;
        for (provider, count) in &s.provider_throttled {
            ConstCounter::new(*count).encode(family.encode_family(&[("provider", provider.as_str())])?)?;
        }
        gauge(&mut encoder, "tenure_healthy", HEALTHY_HELP, u64::from(s.healthy))
    }
}

const HEALTHY_HELP: &str = "1 when the agent follows the log and can read its head (it can act), else 0.";

/// One unlabelled gauge family.
fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> Result<(), std::fmt::Error> {
    ConstGauge::new(value).encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

/// One counter family `NAME_total{reason}`.
fn reason_counters(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    counts: &[(String, u64)],
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (reason, count) in counts {
        let labels = [("reason", reason.as_str())];
        ConstCounter::new(*count).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// The four per-address families: epochs, owner and desired flag, a sample each per address.
fn address_series(encoder: &mut DescriptorEncoder, rows: &[OwnershipRow]) -> Result<(), std::fmt::Error> {
    per_address(
        encoder,
        rows,
        "tenure_ownership_epoch",
        "Current ownershipEpoch per address (0: never owned).",
        |row| row.ownership_epoch,
    )?;
    per_address(
        encoder,
        rows,
        "tenure_capture_epoch",
        "Current captureEpoch per address, on its pool's capture domain (0: never held).",
        |row| row.capture_epoch,
    )?;
    let mut family = encoder.encode_descriptor(
        "tenure_address_owner",
        "1 for the current owner of each address (owner=\"\" when it has none).",
        None,
        MetricType::Gauge,
    )?;
    for row in rows {
        let labels = [
            ("pool", row.pool.as_str()),
            ("address", row.address.as_str()),
            ("owner", row.owner.as_deref().unwrap_or("")),
        ];
        ConstGauge::new(1_i64).encode(family.encode_family(&labels)?)?;
    }
    per_address(
        encoder,
        rows,
        "tenure_address_desired",
        "1 when the address is desired (should be held), 0 after undesire.",
        |row| i64::from(row.desired),
    )
}

/// One gauge family `NAME{pool,address}`, a sample per row.
fn per_address<V: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    rows: &[OwnershipRow],
    name: &str,
    help: &str,
    value: impl Fn(&OwnershipRow) -> V,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for row in rows {
        let labels = [("pool", row.pool.as_str()), ("address", row.address.as_str())];
        ConstGauge::new(value(row)).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}
