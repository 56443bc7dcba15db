//! The status page and `GET /v1/ownership` at 100k addresses: what one request costs the agent
//! loop (the snapshot it answers with) and the handler (rendering, serialising), against the
//! whole-map copy both used to start from. Figures go to `docs/benchmarks.md` ("The status page
//! and the ownership list at 100k").
//!
//! The view: 3 nodes (`a`, `b`, `c`), two pools of 50,000 addresses, every address acquired and
//! confirmed by its owner (phase `held`), then `a` expires (its third of the addresses hands over
//! and is `releasing`). It is built by a real node driver following a memory log, and the agent's
//! history of the same log (bounded: the newest 65,536 entries, the failover's among them).
//!
//! - `page/first_page/100k`: [`status`] (the loop's answer: nodes, one page of the map with the
//!   counts of every phase and node, the timeline's lanes from the history) plus [`render`] (the
//!   HTML), no filter, page 1 of 200 rows.
//! - `page/filtered_page/100k`: the same with `?node=b&address=10.0.1.0/24&phase=held`.
//! - `page/ownership_limit_500/100k`: `GET /v1/ownership?limit=500`: the loop's page of 500 rows
//!   ([`rows_page`]) serialised to JSON as the handler does.
//! - `page/whole_map_baseline/100k`: what both started from before: every row of the map written
//!   out ([`ownership_rows_with_status`]), as `GET /v1/ownership` still does without `limit`.
//! - `page/map_index_whole/100k`: the loop's cost of reading every row of the view into the map
//!   readers see ([`MapIndex::follow`] after a whole change: a pool applied or deleted); a change
//!   of a few positions reads those rows alone. The two list benchmarks above read a snapshot of it.
//!
//! Every figure is criterion's mean of one iteration (one request).

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion};
use tenure::agent::map::{OwnershipQuery, rows_page};
use tenure::agent::request::Health;
use tenure::agent::status::status;
use tenure::api::page::query::PageQuery;
use tenure::api::page::render;
use tenure_core::driver::{DriverOptions, NodeDriver};
use tenure_core::federation::Federation;
use tenure_core::federation::history::History;
use tenure_core::journal::MemoryJournalStore;
use tenure_core::log::{ActionOutcome, Event, EventKind};
use tenure_core::log_store::{Log as _, MemoryLog};
use tenure_core::map_index::MapIndex;
use tenure_core::model::{
    Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec, StampedAction,
};
use tenure_core::node::NodeEngine;
use tenure_core::rows::ownership_rows_with_status;

/// Addresses in the view.
const ADDRESSES_COUNT: u32 = 100_000;
/// Pools the addresses are in.
const POOLS_COUNT: u32 = 2;
/// The nodes.
const NODES: [&str; 3] = ["a", "b", "c"];
/// Stream time of the first events (a Unix time in ms, as an agent's).
const START_MS: u64 = 1_796_221_542_000;
/// Heartbeat TTL of the pools.
const TTL_MS: u64 = 3_000;
/// Samples per benchmark.
const SAMPLES_COUNT: usize = 20;
/// Warm-up per benchmark.
const WARM_UP_TIME: Duration = Duration::from_millis(500);
/// Measurement per benchmark.
const MEASUREMENT_TIME: Duration = Duration::from_secs(4);

fn pool(index: u32) -> PoolSpec {
    let per_pool = ADDRESSES_COUNT / POOLS_COUNT;
    let base = u32::from(Ipv4Addr::new(10, 0, 0, 0)) + (index << 16);
    PoolSpec {
        name: format!("pool-{index}"),
        addresses: (0..per_pool).map(|i| IpAddr::V4(Ipv4Addr::from(base + i))).collect(),
        provider: "sim1".into(),
        placement_group: "g1".into(),
        members: NODES.iter().map(|n| (*n).to_owned()).collect(),
        authority: Authority::None,
        approval: Approval::Auto,
        deprovision_hold_ms: 5_000,
        heartbeat_ttl_ms: TTL_MS,
        promotion_hold_ms: 0,
        epoch_locking: true,
        prefer_nodes: Vec::new(),
        preempt: false,
        auto_failover: true,
    }
}

fn append(log: &mut MemoryLog, view: &mut Federation, at_ms: u64, kind: EventKind) {
    let event = Event { at_ms, kind };
    view.apply(&event).expect("the bench's events apply");
    log.append(&event).expect("the memory log takes them");
}

/// Every owner's acquire of every address, confirmed.
fn confirm_every_acquire(log: &mut MemoryLog, view: &mut Federation, at_ms: u64) {
    let verb = ProviderKind::SimCloud.verb_family().acquire_verbs()[0];
    let mut results = Vec::new();
    for (pool_name, pool) in view.pools() {
        for (address, state) in &pool.addresses {
            let Some(holder) = state.line.desired_holder else { continue };
            let node = &view.nodes()[holder as usize].spec;
            let action = StampedAction::new(
                pool_name,
                *address,
                verb,
                &node.name,
                &node.provider,
                &node.nic,
                pool.capture_domain.clone(),
                state.line.epoch,
                state.ownership_epoch,
            );
            results.push(EventKind::ActionResult {
                node: node.name.clone(),
                idempotency_key: action.idempotency_key().to_string(),
                outcome: ActionOutcome::Executed,
                detail: String::new(),
            });
        }
    }
    for result in results {
        append(log, view, at_ms, result);
    }
}

/// The log, a driver that followed it and the history of it.
fn fixture() -> (NodeDriver<MemoryJournalStore>, History) {
    let nodes: Vec<NodeSpec> = NODES
        .iter()
        .map(|name| NodeSpec {
            name: (*name).to_owned(),
            provider: "sim1".into(),
            placement_group: "g1".into(),
            priority: 0,
            nic: format!("eni-{name}"),
            capacity: None,
        })
        .collect();
    let registry =
        Federation::new(&nodes, &[ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }]);
    let mut view = registry.clone();
    let mut log = MemoryLog::new();
    for name in NODES {
        append(&mut log, &mut view, START_MS, EventKind::Heartbeat { node: name.to_owned() });
    }
    for index in 0..POOLS_COUNT {
        append(&mut log, &mut view, START_MS, EventKind::PoolApplied { spec: Box::new(pool(index)) });
    }
    confirm_every_acquire(&mut log, &mut view, START_MS + 100);
    // `a` stops; `b` and `c` beat past its TTL: a third of the map hands over.
    let expired_ms = START_MS + TTL_MS + 1_000;
    for name in ["b", "c"] {
        append(&mut log, &mut view, expired_ms, EventKind::Heartbeat { node: name.to_owned() });
    }
    let engine = NodeEngine::open("b", MemoryJournalStore::new()).expect("an empty journal opens");
    let mut driver = NodeDriver::new(engine, registry.clone(), DriverOptions { report_results: true });
    driver.follow(&log).expect("the driver follows the memory log");
    let mut history = History::new(registry);
    history.catch_up_from(&log).expect("the history follows the memory log");
    (driver, history)
}

fn health(view: &Federation) -> Health {
    Health {
        ok: true,
        reason: None,
        nodes: vec!["b".into()],
        log_index: view.events_applied(),
        log_head: view.events_applied(),
        stream_time_ms: view.stream_time_ms(),
    }
}

fn page_query(pairs: &[(&str, &str)]) -> PageQuery {
    PageQuery::parse(pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect())
        .expect("a good query")
}

fn main() {
    let (driver, history) = fixture();
    let mut drivers = [driver];
    let mut journal = tenure_core::journal_index::JournalIndex::new(drivers[0].name());
    journal.follow(drivers[0].engine_mut());
    let view = drivers[0].view();
    let label = format!("{}k", ADDRESSES_COUNT / 1_000);
    let mut index = MapIndex::new();
    index.follow(&mut view.clone());
    let map = index.snapshot();
    let reads = tenure::agent::request::Reads {
        map: map.clone(),
        journals: vec![journal.snapshot()],
        history: history.snapshot(),
        nodes: tenure::agent::status::node_statuses(view, &["b"]),
        stream_time_ms: view.stream_time_ms(),
    };

    // Outside the timing: what the pages hold, so that the figures are of real pages.
    let first = page_query(&[]);
    let filtered = page_query(&[("node", "b"), ("address", "10.1.0.0/24"), ("phase", "held")]);
    for (name, query) in [("first", &first), ("filtered", &filtered)] {
        let snapshot = status(health(view), &reads, &query.status_query());
        let html = render(&snapshot, query);
        println!(
            "tenure-bench page {name}: rows={} matched={} total={} lanes={} changed={} history_entries={} html_bytes={}",
            snapshot.map.rows.len(),
            snapshot.map.matched,
            snapshot.map.total,
            snapshot.timeline.lanes.len(),
            snapshot.timeline.changed,
            history.entries().len(),
            html.len()
        );
    }

    let mut criterion = Criterion::default().configure_from_args();
    let mut group = criterion.benchmark_group("page");
    group.sample_size(SAMPLES_COUNT).warm_up_time(WARM_UP_TIME).measurement_time(MEASUREMENT_TIME);
    for (name, query) in [("first_page", &first), ("filtered_page", &filtered)] {
        group.bench_function(BenchmarkId::new(name, &label), |b| {
            b.iter(|| {
                let snapshot = status(health(view), &reads, &query.status_query());
                render(black_box(&snapshot), query)
            });
        });
    }
    group.bench_function(BenchmarkId::new("ownership_limit_500", &label), |b| {
        let query = OwnershipQuery { limit: Some(500), ..OwnershipQuery::default() };
        b.iter(|| serde_json::to_vec(&rows_page(&map, black_box(&query)).rows).expect("rows serialise"));
    });
    group.bench_function(BenchmarkId::new("whole_map_baseline", &label), |b| {
        b.iter(|| ownership_rows_with_status(black_box(view)));
    });
    group.bench_function(BenchmarkId::new("map_index_whole", &label), |b| {
        b.iter_batched(
            || (MapIndex::new(), view.clone()),
            |(mut index, mut view)| index.follow(&mut view),
            criterion::BatchSize::LargeInput,
        );
    });
    group.finish();
    criterion.final_summary();
}
