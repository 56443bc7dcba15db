//! Maintenance notices (`maintenanceNotices: drain`) against the FAKE instance metadata service
//! (`scripts/metadata-fake/metadata_fake.py`: AWS IMDSv2, Azure Scheduled Events and OCI IMDS
//! v2 from their published references; not a cloud):
//!
//! - each cloud's reader: no notice → none; a notice → read with its deadline; Azure: an event of
//!   another VM, and a `Freeze`, are ignored; IMDSv2: a token is required and renewed after a 401;
//!   a service that does not answer is an error in one line;
//! - the watcher in an agent loop (sim-cloud executor, the real drain path through the loop):
//!   an Azure `Preempt` drains the node, its addresses move before the event's `NotBefore`, the
//!   acknowledgement is sent exactly once and only once the node holds nothing, and the node
//!   stays drained when the event goes away; a node that still holds at `NotBefore` acknowledges
//!   then, and a service that answers 503 for a while stops nothing.
//!
//! Fails, never skips, when python3 cannot start the fake.

#[path = "support/in_process.rs"]
mod in_process;
#[path = "support/metadata_fake.rs"]
mod metadata_fake;
#[path = "support/wait.rs"]
mod wait;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use metadata_fake::MetadataFake;
use serde_json::json;
use tenure::agent::memory::MemoryStore;
use tenure::agent::notices::{NoticeWatch, watch};
use tenure::agent::request::{ActionFilter, AgentHandle};
use tenure::agent::status::StatusQuery;
use tenure::agent::{ProviderExecutor, Settings};
use tenure::exec::SimExecutor;
use tenure::exec::notices::{NoticeReader, NoticeSource, parse_time};
use tenure::metrics::Metrics;
use tenure_core::model::{Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// Most time any condition below may take.
const WAIT_MAX: Duration = Duration::from_secs(20);

fn reader(fake: &MetadataFake, source: NoticeSource) -> NoticeReader {
    NoticeReader::new(source, &fake.url()).expect("an http URL")
}

/// `seconds` from now, as RFC 1123 (Azure's `NotBefore`) and as a time.
fn rfc1123_in(seconds: u64) -> (String, SystemTime) {
    let at = SystemTime::now() + Duration::from_secs(seconds);
    let whole = jiff::Timestamp::try_from(at).expect("in range");
    let text =
        jiff::fmt::rfc2822::DateTimePrinter::new().timestamp_to_rfc9110_string(&whole).expect("prints");
    (text.clone(), parse_time(&text).expect("reads back"))
}

#[tokio::test]
async fn aws_imdsv2_spot_rebalance_and_scheduled_events_are_read_with_their_deadlines() {
    let fake = MetadataFake::start();
    let mut imds = reader(&fake, NoticeSource::Aws);
    assert_eq!(imds.poll().await.expect("answers"), vec![], "no notice");
    fake.set(&json!({"awsSpot": {"action": "terminate", "time": "2030-01-02T03:04:05Z"}}));
    let notices = imds.poll().await.expect("answers");
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0].kind, "spot-interruption");
    assert_eq!(notices[0].deadline, Some(parse_time("2030-01-02T03:04:05Z").expect("a time")));
    assert!(!notices[0].acknowledge, "AWS waits for no acknowledgement");
    fake.set(&json!({
        "awsSpot": null,
        "awsRebalance": {"noticeTime": "2030-01-02T03:00:00Z"},
        "awsScheduled": [
            {"Code": "system-reboot", "EventId": "instance-event-1", "NotBefore": "21 Jan 2030 09:00:43 GMT",
             "NotAfter": "21 Jan 2030 09:17:23 GMT", "State": "active", "Description": "scheduled reboot"},
            {"Code": "system-reboot", "EventId": "instance-event-0", "NotBefore": "21 Jan 2019 09:00:43 GMT",
             "State": "completed", "Description": "[Completed] scheduled reboot"},
        ],
    }));
    let notices = imds.poll().await.expect("answers");
    let kinds: Vec<(&str, Option<SystemTime>)> = notices.iter().map(|n| (n.kind, n.deadline)).collect();
    assert_eq!(
        kinds,
        vec![
            ("rebalance-recommendation", None),
            ("scheduled-event", Some(parse_time("2030-01-21T09:00:43Z").expect("a time"))),
        ],
        "the completed event is no notice"
    );
    assert_eq!(fake.counters()["tokenPuts"], 1, "one session token for every poll");
}

#[tokio::test]
async fn imdsv2_refuses_a_read_without_a_token_and_the_reader_takes_a_new_one_after_a_401() {
    let fake = MetadataFake::start();
    let (status, _) = fake.raw("GET", "/latest/meta-data/spot/instance-action", &[], "");
    assert_eq!(status, 401, "the fake enforces IMDSv2's token");
    let mut imds = reader(&fake, NoticeSource::Aws);
    imds.poll().await.expect("answers");
    fake.revoke_tokens();
    let refused = imds.poll().await.expect_err("the token expired");
    assert!(refused.contains("401") && !refused.contains('\n'), "one line naming the status: {refused}");
    fake.set(&json!({"awsSpot": {"action": "stop", "time": "2030-01-02T03:04:05Z"}}));
    assert_eq!(imds.poll().await.expect("a new token").len(), 1);
    assert_eq!(fake.counters()["tokenPuts"], 2);
}

#[tokio::test]
async fn azure_events_of_this_vm_are_read_and_acknowledged_others_are_ignored() {
    let fake = MetadataFake::start();
    let mut events = reader(&fake, NoticeSource::Azure);
    assert_eq!(events.poll().await.expect("answers"), vec![], "no event");
    let (not_before, deadline) = rfc1123_in(600);
    let event = |id: &str, kind: &str, vm: &str| {
        json!({"EventId": id, "EventType": kind, "ResourceType": "VirtualMachine", "Resources": [vm],
               "EventStatus": "Scheduled", "NotBefore": not_before, "Description": "fake", "EventSource": "Platform",
               "DurationInSeconds": -1})
    };
    fake.set(
        &json!({"azureEvents": [event("E-other", "Reboot", "vm-b"), event("E-freeze", "Freeze", "vm-a")]}),
    );
    assert_eq!(events.poll().await.expect("answers"), vec![], "another VM's event and a freeze are not ours");
    fake.set(&json!({"azureEvents": [event("E-other", "Reboot", "vm-b"), event("E-1", "Preempt", "VM-A")]}));
    let notices = events.poll().await.expect("answers");
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!((notices[0].kind, notices[0].id.as_str()), ("preempt", "E-1"), "names compare as Azure's do");
    assert_eq!(notices[0].deadline, Some(deadline));
    assert!(notices[0].acknowledge);
    assert!(fake.acks().is_empty());
    events.acknowledge(&notices[0]).await.expect("taken");
    assert_eq!(fake.acks(), vec![json!({"StartRequests": [{"EventId": "E-1"}]})]);
    let (status, _) = fake.raw("GET", "/metadata/scheduledevents?api-version=2020-07-01", &[], "");
    assert_eq!(status, 400, "the fake wants `Metadata: true`, as Azure does");
    assert_eq!(
        fake.counters()["requests"]["GET /metadata/instance/compute/name"],
        1,
        "the VM's name is read once"
    );
}

#[tokio::test]
async fn oci_reads_the_maintenance_reboot_due() {
    let fake = MetadataFake::start();
    let mut instance = reader(&fake, NoticeSource::Oci);
    assert_eq!(instance.poll().await.expect("answers"), vec![], "none due");
    fake.set(&json!({"ociRebootDue": "2030-05-06T07:08:09.000Z"}));
    let notices = instance.poll().await.expect("answers");
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0].kind, "maintenance-reboot");
    assert_eq!(notices[0].deadline, Some(parse_time("2030-05-06T07:08:09Z").expect("a time")));
    assert_eq!(fake.raw("GET", "/opc/v2/instance/", &[], "").0, 401, "the fake wants `Bearer Oracle`");
    assert_eq!(fake.counters()["unauthorized"], 1, "and the reader sent it");
}

#[tokio::test]
async fn a_service_that_does_not_answer_is_one_line() {
    let fake = MetadataFake::start();
    fake.set(&json!({"down": true}));
    for source in [NoticeSource::Aws, NoticeSource::Azure, NoticeSource::Oci] {
        let error = reader(&fake, source).poll().await.expect_err("down");
        assert!(error.contains("503") && !error.contains('\n'), "{source:?}: {error}");
    }
    // Nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("a port").local_addr().expect("addr").port();
    let closed = NoticeReader::new(NoticeSource::Oci, &format!("http://127.0.0.1:{port}")).expect("a URL");
    let error = { closed }.poll().await.expect_err("nothing there");
    assert!(!error.contains('\n'), "{error}");
}

// --- The watcher in an agent loop ---

fn node(name: &str, priority: i64) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        provider: "cloud".into(),
        placement_group: "g1".into(),
        priority,
        nic: format!("nic-{name}"),
        capacity: None,
    }
}

fn holders(cloud: &SimExecutor) -> BTreeMap<String, Vec<String>> {
    cloud.with_provider(|p| {
        p.holdings().iter().map(|(a, nics)| (a.to_string(), nics.iter().cloned().collect())).collect()
    })
}

/// Waits until `condition` holds, at most [`WAIT_MAX`] (the shared bounded wait).
async fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    wait::wait_until(WAIT_MAX, what, async || condition()).await;
}

async fn drained(handle: &AgentHandle, node: &str) -> bool {
    let status = handle.status(StatusQuery::default()).await.expect("answers");
    status.nodes.iter().any(|n| n.name == node && n.drained)
}

/// An agent loop running a (priority 10) and b over two addresses of pool `edge` on a sim-cloud
/// provider, a letting go `hold_ms` after a hand-over; once a holds both. Its handle, the cloud,
/// the stop switch and the run.
async fn start_agent(hold_ms: u64) -> (AgentHandle, SimExecutor, oneshot::Sender<()>, Done) {
    let cloud = SimExecutor::new(ProviderKind::SimCloud);
    let mut executors = BTreeMap::new();
    executors.insert(
        "cloud".to_owned(),
        ProviderExecutor {
            executor: Arc::new(cloud.clone()),
            call_timeout: Duration::from_secs(5),
            inventory_interval: None,
            garp_refresh: None,
        },
    );
    let pool = PoolSpec {
        name: "edge".into(),
        addresses: vec!["10.0.0.10".parse().expect("literal"), "10.0.0.11".parse().expect("literal")],
        provider: "cloud".into(),
        placement_group: "g1".into(),
        members: vec!["a".into(), "b".into()],
        authority: Authority::None,
        approval: Approval::Auto,
        deprovision_hold_ms: hold_ms,
        heartbeat_ttl_ms: 3_000,
        promotion_hold_ms: 0,
        epoch_locking: true,
        prefer_nodes: vec!["a".into()],
        preempt: false,
        auto_failover: true,
    };
    let settings = Settings {
        peers: Vec::new(),
        nodes: vec![node("a", 10), node("b", 0)],
        providers: vec![ProviderSpec { name: "cloud".into(), kind: ProviderKind::SimCloud }],
        executors,
        heartbeat_interval: Duration::from_millis(50),
        requeue_interval: Duration::from_millis(100),
        journal_retention: 10_000,
        pools: Box::new(move || Ok(vec![pool.clone()])),
        vrrp: None,
    };
    let (handle, stop, done) = in_process::spawn_agent(MemoryStore::new(), settings);
    wait_for("a holds both addresses", || {
        let held = holders(&cloud);
        held.len() == 2 && held.values().all(|nics| nics == &["nic-a"])
    })
    .await;
    (handle, cloud, stop, done)
}

type Done =
    tokio::task::JoinHandle<Result<tenure::agent::runner::RunSummary, tenure::agent::runner::AgentError>>;

/// An Azure `Preempt` of `vm` with id `id`, not before `not_before`.
fn preempt(id: &str, vm: &str, not_before: &str) -> serde_json::Value {
    json!({"EventId": id, "EventType": "Preempt", "ResourceType": "VirtualMachine", "Resources": [vm],
           "EventStatus": "Scheduled", "NotBefore": not_before, "Description": "fake spot eviction",
           "EventSource": "Platform", "DurationInSeconds": -1})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_azure_preempt_drains_the_node_and_is_acknowledged_once_when_it_holds_nothing() {
    let fake = MetadataFake::start();
    // a lets go of an address 1.5 s after b took it: the acknowledgement must wait for that.
    let (handle, cloud, stop, done) = start_agent(1_500).await;

    let metrics = Arc::new(Metrics::new());
    let watching = CancellationToken::new();
    let interval = Duration::from_millis(100);
    let watcher = tokio::spawn(watch(
        NoticeWatch { node: "a".into(), reader: reader(&fake, NoticeSource::Azure), interval },
        handle.clone(),
        Arc::clone(&metrics),
        watching.clone(),
    ));
    // Another VM's event: polled, and nothing happens.
    let (not_before, deadline) = rfc1123_in(30);
    let event = |id: &str, vm: &str| preempt(id, vm, &not_before);
    fake.set(&json!({"azureEvents": [event("E-b", "vm-b")]}));
    let polls = || fake.counters()["requests"]["GET /metadata/scheduledevents"].as_u64().unwrap_or(0);
    let before = polls();
    wait_for("five polls", || polls() >= before + 5).await;
    assert!(!drained(&handle, "a").await, "another VM's event drains nothing");

    // This VM's event: drained, the addresses move to b, then one acknowledgement.
    fake.set(&json!({"azureEvents": [event("E-b", "vm-b"), event("E-a", "vm-a")]}));
    wait_for("one acknowledgement", || !fake.acks().is_empty()).await;
    let released = handle
        .actions(ActionFilter { node: Some("a".into()), state: Some("executed".into()), pool: None })
        .await
        .expect("answers")
        .iter()
        .filter(|e| e.verb == "unassign-secondary-ip")
        .count();
    assert_eq!(released, 2, "a released both addresses (after its hold) before the acknowledgement");
    let moved = holders(&cloud);
    assert!(
        moved.len() == 2 && moved.values().all(|nics| nics == &["nic-b"]),
        "when the acknowledgement is sent, a holds nothing and b holds both: {moved:?}"
    );
    assert!(SystemTime::now() < deadline, "all of it before the event's NotBefore");
    assert!(drained(&handle, "a").await);
    // The event stays listed (as Azure lists it until it starts): polled on, never acknowledged again.
    let before = polls();
    wait_for("ten more polls", || polls() >= before + 10).await;
    assert_eq!(fake.acks(), vec![json!({"StartRequests": [{"EventId": "E-a"}]})], "exactly once");
    // The event goes: the node stays drained (an undrain is the operator's).
    fake.set(&json!({"azureEvents": []}));
    let before = polls();
    wait_for("five more polls", || polls() >= before + 5).await;
    assert!(drained(&handle, "a").await, "a withdrawn notice undrains nothing");

    let scrape = metrics.encode(None);
    for line in [
        "tenure_maintenance_notices_total{cloud=\"azure\",kind=\"preempt\"} 1",
        "tenure_maintenance_notice_drains_total{cloud=\"azure\"} 1",
        "tenure_maintenance_notice_acknowledgements_total{cloud=\"azure\"} 1",
    ] {
        assert!(scrape.contains(line), "`{line}` in:\n{scrape}");
    }
    watching.cancel();
    tokio::time::timeout(WAIT_MAX, watcher).await.expect("the watcher stops").expect("joins");
    stop.send(()).expect("running");
    tokio::time::timeout(WAIT_MAX, done).await.expect("stops").expect("joins").expect("ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_still_holds_at_not_before_acknowledges_then_and_a_silent_service_stops_nothing() {
    let fake = MetadataFake::start();
    // a keeps what it held for a minute after the hand-over: longer than the event's notice.
    let (handle, cloud, stop, done) = start_agent(60_000).await;
    // The service answers 503 for a while: polled on, nothing happens, the agent serves on. Down
    // before the first poll: a first poll that got this VM's name would keep it (it is read once)
    // and ask it no more, and the polls counted below would never come (a fresh run's failure).
    fake.set(&json!({"down": true}));
    let metrics = Arc::new(Metrics::new());
    let watching = CancellationToken::new();
    let watcher = tokio::spawn(watch(
        NoticeWatch {
            node: "a".into(),
            reader: reader(&fake, NoticeSource::Azure),
            interval: Duration::from_millis(100),
        },
        handle.clone(),
        Arc::clone(&metrics),
        watching.clone(),
    ));
    let polls = || fake.counters()["requests"]["GET /metadata/scheduledevents"].as_u64().unwrap_or(0);
    let names = || fake.counters()["requests"]["GET /metadata/instance/compute/name"].as_u64().unwrap_or(0);
    wait_for("five refused polls", || names() >= 5).await;
    assert!(handle.health().await.expect("answers").ok, "a silent metadata service stops nothing");
    assert!(!watcher.is_finished(), "the watcher polls on");
    // It answers again, with this VM's event 3 s away.
    let (not_before, deadline) = rfc1123_in(3);
    fake.set(&json!({"down": false, "azureEvents": [preempt("E-a", "vm-a", &not_before)]}));
    wait_for("drained", || {
        let held = holders(&cloud);
        held.len() == 2 && held.values().all(|nics| nics.contains(&"nic-b".to_owned()))
    })
    .await;
    assert!(drained(&handle, "a").await);
    wait_for("the acknowledgement at NotBefore", || !fake.acks().is_empty()).await;
    let acked = fake.ack_times()[0];
    assert!(
        acked >= deadline,
        "a still held its addresses (its hold): acknowledged at NotBefore, not before it"
    );
    let mut query = tenure::agent::map::OwnershipQuery::default();
    query.filter.list.node = Some("a".into());
    assert!(
        !handle.ownership_page(query).await.expect("answers").rows.is_empty(),
        "a still holds: the deadline came first"
    );
    let before = polls();
    wait_for("five more polls", || polls() >= before + 5).await;
    assert_eq!(fake.acks().len(), 1, "once");
    watching.cancel();
    tokio::time::timeout(WAIT_MAX, watcher).await.expect("the watcher stops").expect("joins");
    stop.send(()).expect("running");
    tokio::time::timeout(WAIT_MAX, done).await.expect("stops").expect("joins").expect("ran");
}
