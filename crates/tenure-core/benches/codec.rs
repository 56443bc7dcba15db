//! The stored form: JSON (the codec, `tenure_core::codec`) against one compact binary format,
//! postcard, for what redb and etcd will hold. Run with `cargo bench -p tenure-core --bench codec`;
//! the figures and the decision are in `docs/decisions.md` ("The stored form").
//!
//! - `codec/{json,postcard}/event-mix`: encode and decode, one after the other, each event of a
//!   mix of 100 shaped like a running fleet's log (mostly heartbeats, then action results,
//!   inventory, health, VRRP, desire/undesire, drain/undrain, an approval, one pool applied and
//!   one deleted). Criterion's figure is per mix; per record is that ÷ 100.
//! - `codec/{json,postcard}/heartbeat`: the same for one heartbeat, the most frequent record.
//! - `codec/{json,postcard}/pool-applied`: the same for the mix's `pool-applied` (9 addresses),
//!   most of which is re-parsing the pool, which both sides do.
//! - `codec/{json,postcard}/journal-entry`: one executed journal entry.
//!
//! Both sides do the same work: the binary side uses wire types of the same shape, built by
//! borrowing, and it runs the checks the codec runs (a pool re-parsed by `check_pool_spec` before
//! it is written and after it is read, the idempotency key recomputed on read), so the difference
//! is the format alone. The
//! bytes per record are counted outside the timing and printed as `tenure-bench codec:` lines.

use std::borrow::Cow;
use std::hint::black_box;
use std::net::IpAddr;
use std::time::Duration;

use criterion::{Criterion, Throughput};
use serde::{Deserialize, Serialize};
use tenure_core::codec;
use tenure_core::fence::StaleReason;
use tenure_core::journal::{EntryState, JournalEntry};
use tenure_core::log::{ActionOutcome, Event, EventKind};
use tenure_core::model::{
    Approval, Authority, CaptureDomain, CaptureEpoch, OwnershipEpoch, PoolSpec, StampedAction, Verb,
    VrrpState,
};

/// Events in the mix.
const MIX_EVENTS_COUNT: usize = 100;
/// Warm-up per benchmark.
const WARM_UP_TIME: Duration = Duration::from_millis(500);
/// Measurement per benchmark.
const MEASUREMENT_TIME: Duration = Duration::from_secs(3);

fn ip(text: &str) -> IpAddr {
    text.parse().expect("literal address")
}

/// A pool as a pool file gives it: 9 addresses in two entries, three members.
fn pool() -> PoolSpec {
    let yaml = "apiVersion: tenure.dev/v1alpha1\nkind: MobilityPool\nmetadata: {name: edge-vips}\n\
                spec: {addresses: [10.0.0.10/32, 10.0.0.16/29], provider: aws-use1, placementGroup: g1,\n\
                members: [router-a, router-b, router-c], ipOwnershipPolicy: {preferNodes: [router-a]}}\n";
    tenure_core::spec::parse_pool_documents(yaml).expect("valid").remove(0).0
}

fn action(capture: u64) -> StampedAction {
    StampedAction::new(
        "edge-vips",
        ip("10.0.0.17"),
        Verb::AssignSecondaryIp,
        "router-b",
        "aws-use1",
        "eni-0a1b2c3d4e5f60789",
        CaptureDomain::new("aws-use1", "g1"),
        CaptureEpoch::from_stored(capture),
        OwnershipEpoch::from_stored(capture),
    )
}

/// 100 events in the proportions of a running fleet's log: 60 heartbeats, 12 action results,
/// 8 inventory reports, 6 health, 4 VRRP, 3 desire, 2 undesire, 1 each of drain, undrain,
/// approve, pool-applied and pool-deleted.
fn event_mix() -> Vec<Event> {
    let node = |i: usize| format!("router-{}", ["a", "b", "c"][i % 3]);
    let mut events = Vec::with_capacity(MIX_EVENTS_COUNT);
    let mut push = |kind: EventKind| {
        let at_ms = 1_700_000_000_000 + 137 * events.len() as u64;
        events.push(Event { at_ms, kind });
    };
    push(EventKind::PoolApplied { spec: Box::new(pool()) });
    for i in 0..60 {
        push(EventKind::Heartbeat { node: node(i) });
        match i {
            _ if i < 12 => push(EventKind::ActionResult {
                node: node(i),
                idempotency_key: action(i as u64 + 1).idempotency_key().to_string(),
                outcome: if i % 5 == 4 { ActionOutcome::Failed } else { ActionOutcome::Executed },
                detail: if i % 5 == 4 { "throttled: RequestLimitExceeded".into() } else { String::new() },
            }),
            _ if i < 20 => push(EventKind::Inventory {
                provider: "aws-use1".into(),
                address: ip("10.0.0.17"),
                holders: vec!["eni-0a1b2c3d4e5f60789".into()],
                scope: None,
            }),
            _ if i < 26 => push(EventKind::Health { node: node(i), healthy: i % 2 == 0 }),
            _ if i < 30 => push(EventKind::Vrrp { node: node(i), state: VrrpState::Backup }),
            _ if i < 33 => push(EventKind::Desire { pool: "edge-vips".into(), address: ip("10.0.0.18") }),
            _ if i < 35 => push(EventKind::Undesire { pool: "edge-vips".into(), address: ip("10.0.0.18") }),
            35 => push(EventKind::Drain { node: node(i) }),
            36 => push(EventKind::Undrain { node: node(i) }),
            37 => push(EventKind::Approve { idempotency_key: action(9).idempotency_key().to_string() }),
            _ => {}
        }
    }
    push(EventKind::PoolDeleted { pool: "edge-vips".into() });
    assert_eq!(events.len(), MIX_EVENTS_COUNT);
    events
}

fn journal_entry() -> JournalEntry {
    JournalEntry {
        seq: tenure_core::journal::JournalSeq::new(4_712),
        action: action(7),
        state: EntryState::Executed,
        detail: Some("assigned".into()),
        executed_seq: std::num::NonZeroU64::new(4_711),
        attempts: Default::default(),
    }
}

// ---- the binary side: postcard, with wire types of the same shape as the codec's ----

#[derive(Serialize, Deserialize)]
enum BinEvent<'a> {
    Heartbeat {
        at: u64,
        node: Cow<'a, str>,
    },
    Drain {
        at: u64,
        node: Cow<'a, str>,
    },
    Undrain {
        at: u64,
        node: Cow<'a, str>,
    },
    Health {
        at: u64,
        node: Cow<'a, str>,
        healthy: bool,
    },
    Vrrp {
        at: u64,
        node: Cow<'a, str>,
        state: VrrpState,
    },
    PoolApplied {
        at: u64,
        spec: BinPool<'a>,
    },
    PoolDeleted {
        at: u64,
        pool: Cow<'a, str>,
    },
    Desire {
        at: u64,
        pool: Cow<'a, str>,
        address: IpAddr,
    },
    Undesire {
        at: u64,
        pool: Cow<'a, str>,
        address: IpAddr,
    },
    Approve {
        at: u64,
        key: Cow<'a, str>,
    },
    ActionResult {
        at: u64,
        node: Cow<'a, str>,
        key: Cow<'a, str>,
        outcome: ActionOutcome,
        detail: Cow<'a, str>,
    },
    Inventory {
        at: u64,
        provider: Cow<'a, str>,
        address: IpAddr,
        holders: Cow<'a, [String]>,
        scope: Option<Cow<'a, [String]>>,
    },
    TokensRaised {
        at: u64,
        by: u64,
    },
}

#[derive(Serialize, Deserialize)]
struct BinPool<'a> {
    name: Cow<'a, str>,
    addresses: Cow<'a, [IpAddr]>,
    provider: Cow<'a, str>,
    placement_group: Cow<'a, str>,
    members: Cow<'a, [String]>,
    authority: Authority,
    approval: Approval,
    deprovision_hold_ms: u64,
    heartbeat_ttl_ms: u64,
    promotion_hold_ms: u64,
    epoch_locking: bool,
    prefer_nodes: Cow<'a, [String]>,
    preempt: bool,
    auto_failover: bool,
}

#[derive(Serialize, Deserialize)]
struct BinAction<'a> {
    pool: Cow<'a, str>,
    address: IpAddr,
    verb: Verb,
    holder: Cow<'a, str>,
    provider: Cow<'a, str>,
    nic: Cow<'a, str>,
    capture_domain: Cow<'a, str>,
    capture_epoch: u64,
    ownership_epoch: u64,
    key: Cow<'a, str>,
}

#[derive(Serialize, Deserialize)]
enum BinState {
    Pending,
    Approved,
    Executed,
    Failed,
    Skipped(StaleReason),
}

#[derive(Serialize, Deserialize)]
struct BinEntry<'a> {
    seq: u64,
    action: BinAction<'a>,
    state: BinState,
    detail: Option<Cow<'a, str>>,
    executed_seq: Option<u64>,
}

fn b(text: &str) -> Cow<'_, str> {
    Cow::Borrowed(text)
}

fn bin_event(event: &Event) -> BinEvent<'_> {
    let at = event.at_ms;
    match &event.kind {
        EventKind::Heartbeat { node } => BinEvent::Heartbeat { at, node: b(node) },
        EventKind::Drain { node } => BinEvent::Drain { at, node: b(node) },
        EventKind::Undrain { node } => BinEvent::Undrain { at, node: b(node) },
        EventKind::Health { node, healthy } => BinEvent::Health { at, node: b(node), healthy: *healthy },
        EventKind::Vrrp { node, state } => BinEvent::Vrrp { at, node: b(node), state: *state },
        EventKind::PoolApplied { spec } => BinEvent::PoolApplied {
            at,
            spec: BinPool {
                name: b(&spec.name),
                addresses: Cow::Borrowed(&spec.addresses),
                provider: b(&spec.provider),
                placement_group: b(&spec.placement_group),
                members: Cow::Borrowed(&spec.members),
                authority: spec.authority,
                approval: spec.approval,
                deprovision_hold_ms: spec.deprovision_hold_ms,
                heartbeat_ttl_ms: spec.heartbeat_ttl_ms,
                promotion_hold_ms: spec.promotion_hold_ms,
                epoch_locking: spec.epoch_locking,
                prefer_nodes: Cow::Borrowed(&spec.prefer_nodes),
                preempt: spec.preempt,
                auto_failover: spec.auto_failover,
            },
        },
        EventKind::PoolDeleted { pool } => BinEvent::PoolDeleted { at, pool: b(pool) },
        EventKind::Desire { pool, address } => BinEvent::Desire { at, pool: b(pool), address: *address },
        EventKind::Undesire { pool, address } => BinEvent::Undesire { at, pool: b(pool), address: *address },
        EventKind::Approve { idempotency_key } => BinEvent::Approve { at, key: b(idempotency_key) },
        EventKind::ActionResult { node, idempotency_key, outcome, detail } => BinEvent::ActionResult {
            at,
            node: b(node),
            key: b(idempotency_key),
            outcome: *outcome,
            detail: b(detail),
        },
        EventKind::Inventory { provider, address, holders, scope } => BinEvent::Inventory {
            at,
            provider: b(provider),
            address: *address,
            holders: Cow::Borrowed(holders),
            scope: scope.as_deref().map(Cow::Borrowed),
        },
        EventKind::TokensRaised { by } => BinEvent::TokensRaised { at, by: *by },
        EventKind::NodeRegistered { .. } | EventKind::NodeRetired { .. } => {
            unreachable!("the mix has no membership events (mix_of: rare, and not what is measured)")
        }
    }
}

fn from_bin_event(event: BinEvent<'_>) -> Event {
    let (at_ms, kind) = match event {
        BinEvent::Heartbeat { at, node } => (at, EventKind::Heartbeat { node: node.into_owned() }),
        BinEvent::Drain { at, node } => (at, EventKind::Drain { node: node.into_owned() }),
        BinEvent::Undrain { at, node } => (at, EventKind::Undrain { node: node.into_owned() }),
        BinEvent::Health { at, node, healthy } => {
            (at, EventKind::Health { node: node.into_owned(), healthy })
        }
        BinEvent::Vrrp { at, node, state } => (at, EventKind::Vrrp { node: node.into_owned(), state }),
        BinEvent::PoolApplied { at, spec } => {
            let spec = PoolSpec {
                name: spec.name.into_owned(),
                addresses: spec.addresses.into_owned(),
                provider: spec.provider.into_owned(),
                placement_group: spec.placement_group.into_owned(),
                members: spec.members.into_owned(),
                authority: spec.authority,
                approval: spec.approval,
                deprovision_hold_ms: spec.deprovision_hold_ms,
                heartbeat_ttl_ms: spec.heartbeat_ttl_ms,
                promotion_hold_ms: spec.promotion_hold_ms,
                epoch_locking: spec.epoch_locking,
                prefer_nodes: spec.prefer_nodes.into_owned(),
                preempt: spec.preempt,
                auto_failover: spec.auto_failover,
            };
            codec::check_pool_spec(&spec).expect("the mix's pool is valid");
            (at, EventKind::PoolApplied { spec: Box::new(spec) })
        }
        BinEvent::PoolDeleted { at, pool } => (at, EventKind::PoolDeleted { pool: pool.into_owned() }),
        BinEvent::Desire { at, pool, address } => {
            (at, EventKind::Desire { pool: pool.into_owned(), address })
        }
        BinEvent::Undesire { at, pool, address } => {
            (at, EventKind::Undesire { pool: pool.into_owned(), address })
        }
        BinEvent::Approve { at, key } => (at, EventKind::Approve { idempotency_key: key.into_owned() }),
        BinEvent::ActionResult { at, node, key, outcome, detail } => (
            at,
            EventKind::ActionResult {
                node: node.into_owned(),
                idempotency_key: key.into_owned(),
                outcome,
                detail: detail.into_owned(),
            },
        ),
        BinEvent::Inventory { at, provider, address, holders, scope } => (
            at,
            EventKind::Inventory {
                provider: provider.into_owned(),
                address,
                holders: holders.into_owned(),
                scope: scope.map(Cow::into_owned),
            },
        ),
        BinEvent::TokensRaised { at, by } => (at, EventKind::TokensRaised { by }),
    };
    Event { at_ms, kind }
}

fn bin_entry(entry: &JournalEntry) -> BinEntry<'_> {
    let action = &entry.action;
    BinEntry {
        seq: entry.seq.get(),
        action: BinAction {
            pool: b(&action.pool),
            address: action.address,
            verb: action.verb,
            holder: b(&action.holder),
            provider: b(&action.provider),
            nic: b(&action.nic),
            capture_domain: b(action.capture_domain.as_str()),
            capture_epoch: action.capture_epoch.get(),
            ownership_epoch: action.ownership_epoch.get(),
            key: Cow::Owned(action.idempotency_key().into()),
        },
        state: match entry.state {
            EntryState::Pending => BinState::Pending,
            EntryState::Approved => BinState::Approved,
            EntryState::Executed => BinState::Executed,
            EntryState::Failed => BinState::Failed,
            EntryState::Skipped(reason) => BinState::Skipped(reason),
        },
        detail: entry.detail.as_deref().map(b),
        executed_seq: entry.executed_seq.map(std::num::NonZeroU64::get),
    }
}

fn from_bin_entry(entry: BinEntry<'_>) -> JournalEntry {
    let wire = entry.action;
    let (provider, group) = wire
        .capture_domain
        .strip_prefix("provider:")
        .and_then(|rest| rest.split_once(":placement:"))
        .expect("a capture domain");
    let action = StampedAction::new(
        &wire.pool,
        wire.address,
        wire.verb,
        &wire.holder,
        &wire.provider,
        &wire.nic,
        CaptureDomain::new(provider, group),
        CaptureEpoch::from_stored(wire.capture_epoch),
        OwnershipEpoch::from_stored(wire.ownership_epoch),
    );
    assert_eq!(action.idempotency_key().as_str(), wire.key, "the key its fields give");
    JournalEntry {
        seq: tenure_core::journal::JournalSeq::new(entry.seq),
        action,
        state: match entry.state {
            BinState::Pending => EntryState::Pending,
            BinState::Approved => EntryState::Approved,
            BinState::Executed => EntryState::Executed,
            BinState::Failed => EntryState::Failed,
            BinState::Skipped(reason) => EntryState::Skipped(reason),
        },
        detail: entry.detail.as_deref().map(tenure_core::names::shared),
        executed_seq: entry.executed_seq.and_then(std::num::NonZeroU64::new),
        attempts: Default::default(),
    }
}

fn json_event(event: &Event) -> Event {
    let bytes = codec::encode_event(event).expect("encodes");
    codec::decode_event(black_box(&bytes)).expect("decodes")
}

fn postcard_event(event: &Event) -> Event {
    if let EventKind::PoolApplied { spec } = &event.kind {
        // The codec checks a pool before it writes it; so does this side.
        codec::check_pool_spec(spec).expect("the mix's pool is valid");
    }
    let bytes = postcard::to_allocvec(&bin_event(event)).expect("encodes");
    from_bin_event(postcard::from_bytes(black_box(&bytes)).expect("decodes"))
}

fn json_entry(entry: &JournalEntry) -> JournalEntry {
    let bytes = codec::encode_journal_entry(entry).expect("encodes");
    codec::decode_journal_entry(black_box(&bytes)).expect("decodes")
}

fn postcard_entry(entry: &JournalEntry) -> JournalEntry {
    let bytes = postcard::to_allocvec(&bin_entry(entry)).expect("encodes");
    from_bin_entry(postcard::from_bytes(black_box(&bytes)).expect("decodes"))
}

/// Checks that both sides round-trip, and prints the bytes per record of each.
fn report_sizes(mix: &[Event], entry: &JournalEntry) {
    for event in mix {
        assert_eq!(&json_event(event), event);
        assert_eq!(&postcard_event(event), event);
    }
    assert_eq!(&json_entry(entry), entry);
    assert_eq!(&postcard_entry(entry), entry);
    let json_sizes: Vec<usize> = mix.iter().map(|e| codec::encode_event(e).expect("encodes").len()).collect();
    let postcard_sizes: Vec<usize> =
        mix.iter().map(|e| postcard::to_allocvec(&bin_event(e)).expect("encodes").len()).collect();
    let heartbeat = mix.iter().position(|e| matches!(e.kind, EventKind::Heartbeat { .. })).expect("one");
    let pool = mix.iter().position(|e| matches!(e.kind, EventKind::PoolApplied { .. })).expect("one");
    let json_entry_len = codec::encode_journal_entry(entry).expect("encodes").len();
    let postcard_entry_len = postcard::to_allocvec(&bin_entry(entry)).expect("encodes").len();
    for (format, sizes, entry_len) in
        [("json", &json_sizes, json_entry_len), ("postcard", &postcard_sizes, postcard_entry_len)]
    {
        let mean = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
        println!(
            "tenure-bench codec: format={format} event_mix_bytes_per_record={mean:.1} heartbeat_bytes={} \
             pool_applied_bytes={} journal_entry_bytes={entry_len}",
            sizes[heartbeat], sizes[pool]
        );
    }
}

fn main() {
    let mut criterion = Criterion::default()
        .warm_up_time(WARM_UP_TIME)
        .measurement_time(MEASUREMENT_TIME)
        .configure_from_args();
    let mix = event_mix();
    let entry = journal_entry();
    report_sizes(&mix, &entry);
    let heartbeat =
        Event { at_ms: 1_700_000_000_000, kind: EventKind::Heartbeat { node: "router-a".into() } };

    let mut group = criterion.benchmark_group("codec");
    group.throughput(Throughput::Elements(MIX_EVENTS_COUNT as u64));
    group.bench_function("json/event-mix", |bench| {
        bench.iter(|| black_box(&mix).iter().map(json_event).count());
    });
    group.bench_function("postcard/event-mix", |bench| {
        bench.iter(|| black_box(&mix).iter().map(postcard_event).count());
    });
    group.throughput(Throughput::Elements(1));
    group.bench_function("json/heartbeat", |bench| bench.iter(|| json_event(black_box(&heartbeat))));
    group.bench_function("postcard/heartbeat", |bench| bench.iter(|| postcard_event(black_box(&heartbeat))));
    group.bench_function("json/pool-applied", |bench| bench.iter(|| json_event(black_box(&mix[0]))));
    group.bench_function("postcard/pool-applied", |bench| bench.iter(|| postcard_event(black_box(&mix[0]))));
    group.bench_function("json/journal-entry", |bench| bench.iter(|| json_entry(black_box(&entry))));
    group.bench_function("postcard/journal-entry", |bench| bench.iter(|| postcard_entry(black_box(&entry))));
    group.finish();
    criterion.final_summary();
}
