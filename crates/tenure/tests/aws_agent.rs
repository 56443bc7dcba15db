//! The agent with `kind: aws` against moto's EC2 server (issue 11): three nodes in one agent on
//! the embedded store (a real redb store in a scratch folder), each with its own ENI. A frozen
//! node is what a killed or hung router is to the others: its heartbeats stop. Calls are counted
//! at the server (`/_tenure/calls`), so a fenced call is one that never arrived.
//!
//! A spot interruption announced by the FAKE metadata service (`scripts/metadata-fake`, IMDSv2
//! from its published reference; not a cloud) drains the node it names through the agent loop.
//!
//! Fails, never skips, when moto or the fake cannot start (scripts/install-deps installs moto).

#![cfg(feature = "aws")]

#[path = "support/inventory_log.rs"]
mod inventory_log;
#[path = "support/metadata_fake.rs"]
#[allow(dead_code, reason = "each test file uses part of the harness")]
mod metadata_fake;
#[path = "support/moto.rs"]
#[allow(dead_code, reason = "each test file uses part of the harness")]
mod moto;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use moto::Moto;
use serde_json::json;
use tenure::agent::request::{ActionFilter, AgentHandle, Control};
use tenure::agent::runner::{NoObserver, RunSummary, run};
use tenure::agent::{ProviderExecutor, Settings};
use tenure::exec::aws::{AwsExecutor, Ec2};
use tenure::store::EmbeddedStore;
use tenure_core::log::EventKind;
use tenure_core::model::{Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec};
use tokio::sync::{mpsc, oneshot};

/// Most time any condition below may take (a failover is 1 s of TTL plus a few calls).
const WAIT_MAX: Duration = Duration::from_secs(20);

const ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 10);

fn address() -> IpAddr {
    IpAddr::V4(ADDRESS)
}

struct Rig {
    store: EmbeddedStore,
    moto: Moto,
    ec2: Ec2,
    /// The ENIs of a, b, c, and one no node has.
    enis: Vec<String>,
    handle: AgentHandle,
    stop: oneshot::Sender<()>,
    done: tokio::task::JoinHandle<Result<RunSummary, tenure::agent::runner::AgentError>>,
}

/// moto, a VPC with four ENIs, and an agent running a (priority 10), b (5) and c (0) over one
/// address of pool `edge` (TTL 1 s, no holds), reading inventory every `inventory` if given.
async fn start(test: &str, inventory: Option<Duration>) -> Rig {
    let moto = Moto::start(false);
    let ec2 = moto.ec2().await;
    let enis = moto::enis(&ec2, 4).await;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("aws_agent-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let store = EmbeddedStore::open(&dir.join("store"), &dir.join("identity")).expect("the store opens");
    let nodes: Vec<NodeSpec> = [("a", 10), ("b", 5), ("c", 0)]
        .iter()
        .zip(&enis)
        .map(|((name, priority), eni)| NodeSpec {
            name: (*name).into(),
            provider: "cloud".into(),
            placement_group: "vpc".into(),
            priority: *priority,
            nic: eni.clone(),
            capacity: None,
        })
        .collect();
    let pool = PoolSpec {
        name: "edge".into(),
        addresses: vec![address()],
        provider: "cloud".into(),
        placement_group: "vpc".into(),
        members: vec!["a".into(), "b".into(), "c".into()],
        authority: Authority::None,
        approval: Approval::Auto,
        deprovision_hold_ms: 0,
        heartbeat_ttl_ms: 1_000,
        promotion_hold_ms: 0,
        epoch_locking: true,
        prefer_nodes: vec![],
        preempt: false,
        auto_failover: true,
    };
    let mut executors = BTreeMap::new();
    executors.insert(
        "cloud".to_owned(),
        ProviderExecutor {
            executor: Arc::new(AwsExecutor::with_client(ec2.clone())),
            call_timeout: Duration::from_secs(10),
            inventory_interval: inventory,
            garp_refresh: None,
        },
    );
    let settings = Settings {
        peers: Vec::new(),
        nodes,
        providers: vec![ProviderSpec { name: "cloud".into(), kind: ProviderKind::Aws }],
        executors,
        heartbeat_interval: Duration::from_millis(100),
        requeue_interval: Duration::from_millis(200),
        journal_retention: 10_000,
        pools: Box::new(move || Ok(vec![pool.clone()])),
        vrrp: None,
    };
    let (handle, requests) = AgentHandle::channel();
    let (_reload_tx, reload) = mpsc::channel(1);
    let (stop, stopped) = oneshot::channel::<()>();
    let done =
        tokio::spawn(run(store.clone(), settings, requests, reload, Arc::new(NoObserver), async move {
            let _ = stopped.await;
        }));
    Rig { store, moto, ec2, enis, handle, stop, done }
}

async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "not within {WAIT_MAX:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Rig {
    /// The ENIs (of all four) that hold the address, at the server.
    async fn holders(&self) -> Vec<String> {
        let found = self.ec2.holders(&self.enis, &[ADDRESS]).await.expect("describe");
        found.get(&ADDRESS).cloned().unwrap_or_default()
    }

    async fn entries(&self, node: Option<&str>, state: Option<&str>) -> Vec<tenure_core::rows::ActionRow> {
        let filter =
            ActionFilter { node: node.map(str::to_owned), state: state.map(str::to_owned), pool: None };
        self.handle.actions(filter).await.expect("answers")
    }

    /// Every journal entry of the nodes not `frozen` is final (executed or skipped), and the
    /// address is on `eni` alone. Asks EC2 only once the journals are final (its calls count).
    async fn settled_on(&self, eni: &str, frozen: Option<&str>) -> bool {
        let open = self
            .entries(None, None)
            .await
            .iter()
            .filter(|e| Some(e.node.as_str()) != frozen && e.state != "executed" && e.state != "skipped")
            .count();
        open == 0 && self.holders().await == [eni]
    }

    async fn wait_settled_on(&self, node: usize, frozen: Option<&str>) {
        let eni = self.enis[node].clone();
        wait_until(&format!("the address on {eni} alone, every entry final"), || {
            self.settled_on(&eni, frozen)
        })
        .await;
    }

    /// Waits until `node` has executed `verb` in a capture epoch above `above` (asking the agent
    /// only: no call reaches EC2).
    async fn wait_executed(&self, node: &str, verb: &str, above: u64) {
        wait_until(&format!("{node} executed {verb} in an epoch above {above}"), || async {
            self.entries(Some(node), Some("executed"))
                .await
                .iter()
                .any(|e| e.verb == verb && e.capture_epoch > above)
        })
        .await;
    }

    async fn owner(&self) -> (Option<String>, u64, u64) {
        let rows = self.handle.ownership().await.expect("answers");
        let row = rows.into_iter().find(|r| r.address == "10.0.0.10").expect("a row");
        (row.owner, row.ownership_epoch, row.capture_epoch)
    }

    /// The holders of every `inventory` event in the log, in log order.
    fn inventory_holders(&self) -> Vec<Vec<String>> {
        inventory_log::inventory_holders(&self.store.log())
    }

    async fn recaptures(&self) -> u64 {
        self.handle.metrics().await.expect("answers").drift_recaptures
    }

    async fn stop(self) {
        self.stop.send(()).expect("running");
        tokio::time::timeout(WAIT_MAX, self.done).await.expect("stops").expect("joins").expect("ran");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_fails_over_with_one_call_of_each_kind_and_the_address_ends_on_one_eni() {
    let rig = start("failover", None).await;
    rig.wait_settled_on(0, None).await;
    let (owner, _, epoch) = rig.owner().await;
    assert_eq!(owner.as_deref(), Some("a"));

    rig.moto.http("DELETE", "/_tenure/calls", "");
    let killed = tokio::time::Instant::now();
    rig.handle
        .control(Control::FreezeAfterReconcile { node: "a".into(), events: vec![] })
        .await
        .expect("answers")
        .expect("frozen");
    rig.wait_executed("b", "enable-forwarding", epoch).await;
    let failover = killed.elapsed();
    // The new holder: one assign (its reassignment took the address off a's ENI), one describe
    // to confirm it, one source/dest check change. Nothing else.
    assert_eq!(
        rig.moto.calls(),
        json!({"AssignPrivateIpAddresses": 1, "DescribeNetworkInterfaces": 1, "ModifyNetworkInterfaceAttribute": 1}),
        "calls for the failover ({failover:?} from the kill to b's confirmed acquire)"
    );
    assert_eq!(rig.owner().await.0.as_deref(), Some("b"), "b (priority 5) before c");
    assert_eq!(rig.holders().await, [rig.enis[1].clone()], "moved, not copied");

    // The old holder comes back: it releases on its own ENI, one call, and takes nothing from b.
    rig.moto.http("DELETE", "/_tenure/calls", "");
    rig.handle.control(Control::Resume { node: "a".into() }).await.expect("answers").expect("woke");
    rig.wait_executed("a", "unassign-secondary-ip", 0).await;
    assert_eq!(rig.moto.calls(), json!({"UnassignPrivateIpAddresses": 1}));
    rig.wait_settled_on(1, None).await;
    assert_eq!(rig.holders().await, [rig.enis[1].clone()], "on exactly one ENI");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombies_stale_assign_is_fenced_before_the_call_and_never_reaches_ec2() {
    // Inventory on: the hand-over below must not look like drift.
    let rig = start("zombie", Some(Duration::from_millis(100))).await;
    rig.wait_settled_on(0, None).await;
    let (_, _, epoch) = rig.owner().await;
    rig.moto.http("DELETE", "/_tenure/calls", "");
    // a plans and approves a fresh acquire (the address re-desired: a new epoch), then freezes
    // before calling it: a GC pause, a hung VM.
    let events = vec![
        EventKind::Undesire { pool: "edge".into(), address: address() },
        EventKind::Desire { pool: "edge".into(), address: address() },
    ];
    rig.handle
        .control(Control::FreezeAfterReconcile { node: "a".into(), events })
        .await
        .expect("answers")
        .expect("frozen");
    let approved: Vec<String> =
        rig.entries(Some("a"), Some("approved")).await.into_iter().map(|e| e.idempotency_key).collect();
    assert!(
        approved.iter().any(|k| k.contains("/assign-secondary-ip/")),
        "a approved a fresh assign and froze before calling it: {approved:?}"
    );
    rig.wait_executed("b", "enable-forwarding", epoch).await;
    assert_eq!(rig.moto.calls()["AssignPrivateIpAddresses"], 1, "b's seize only");

    // The zombie wakes up: what it approved meets the gate against the head, and dies there.
    rig.handle.control(Control::Resume { node: "a".into() }).await.expect("answers").expect("woke");
    wait_until("a's approved entries fenced", || async {
        let skipped: Vec<String> =
            rig.entries(Some("a"), Some("skipped")).await.into_iter().map(|e| e.idempotency_key).collect();
        approved.iter().all(|k| skipped.contains(k))
    })
    .await;
    rig.wait_settled_on(1, None).await;
    assert_eq!(rig.moto.calls()["AssignPrivateIpAddresses"], 1, "the zombie's assign never reached EC2");
    assert_eq!(rig.owner().await.0.as_deref(), Some("b"));
    assert_eq!(rig.recaptures().await, 0, "a hand-over, with inventory read all along, is no drift");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_on_ec2_is_recaptured_once_and_repaired() {
    let rig = start("drift", Some(Duration::from_millis(200))).await;
    rig.wait_settled_on(0, None).await;
    let (_, _, epoch) = rig.owner().await;
    assert_eq!(rig.recaptures().await, 0);

    // Removed by hand from the holder's ENI: re-captured once, put back by a.
    rig.ec2.unassign(&rig.enis[0], address()).await.expect("unassign by hand");
    wait_until("one re-capture", || async { rig.recaptures().await == 1 }).await;
    rig.wait_settled_on(0, None).await;
    assert_eq!(rig.owner().await, (Some("a".to_owned()), 1, epoch + 1));

    // Reassigned by hand to an ENI no node has (another tool's stale call): repaired once.
    rig.ec2.assign(&rig.enis[3], address()).await.expect("assign by hand");
    assert_eq!(rig.holders().await, [rig.enis[3].clone()], "moved off a's ENI");
    wait_until("a second re-capture", || async { rig.recaptures().await == 2 }).await;
    rig.wait_settled_on(0, None).await;
    assert_eq!(rig.owner().await, (Some("a".to_owned()), 1, epoch + 2));
    // Quiet again: more reads, no more re-captures.
    let reads = |m: &tenure::agent::request::MetricsSnapshot| {
        m.inventory_reads.iter().filter(|((_, o), _)| o == "ok").map(|(_, n)| *n).sum::<u64>()
    };
    let before = reads(&rig.handle.metrics().await.expect("answers"));
    wait_until("five more inventory reads", || async {
        reads(&rig.handle.metrics().await.expect("answers")) >= before + 5
    })
    .await;
    assert_eq!(rig.recaptures().await, 2);
    assert!(
        rig.inventory_holders().contains(&vec![rig.enis[3].clone()]),
        "the ENI no node has is reported in the log"
    );

    // Reads refused (a policy without DescribeNetworkInterfaces): counted as failed, nothing
    // appended, nothing re-captured.
    let events = rig.inventory_holders().len();
    let failed = |m: &tenure::agent::request::MetricsSnapshot| {
        m.inventory_reads.iter().filter(|((_, o), _)| o == "failed").map(|(_, n)| *n).sum::<u64>()
    };
    rig.moto.fault(&json!({"action": "DescribeNetworkInterfaces", "unauthorized": true}));
    wait_until("two failed reads", || async { failed(&rig.handle.metrics().await.expect("answers")) >= 2 })
        .await;
    assert_eq!(rig.inventory_holders().len(), events, "a failed read appends nothing");
    assert_eq!(rig.recaptures().await, 2);
    assert!(rig.handle.health().await.expect("answers").ok, "a blind inventory does not stop the agent");
    rig.moto.http("DELETE", "/_tenure/faults", "");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_interruption_drains_the_node_and_its_address_moves_before_the_deadline() {
    use tenure::agent::notices::{NoticeWatch, watch};
    use tenure::exec::notices::{NoticeReader, NoticeSource};

    let rig = start("spot", None).await;
    rig.wait_settled_on(0, None).await;
    let fake = metadata_fake::MetadataFake::start();
    let metrics = Arc::new(tenure::metrics::Metrics::new());
    let stop = tokio_util::sync::CancellationToken::new();
    let reader = NoticeReader::new(NoticeSource::Aws, &fake.url()).expect("an http URL");
    let watcher = tokio::spawn(watch(
        NoticeWatch { node: "a".into(), reader, interval: Duration::from_millis(100) },
        rig.handle.clone(),
        Arc::clone(&metrics),
        stop.clone(),
    ));
    // Two minutes' notice, as AWS gives.
    let deadline = std::time::SystemTime::now() + Duration::from_secs(120);
    let time = jiff::Timestamp::try_from(deadline).expect("in range").to_string();
    rig.moto.http("DELETE", "/_tenure/calls", "");
    fake.set(&json!({"awsSpot": {"action": "terminate", "time": time}}));
    rig.wait_settled_on(1, None).await;
    assert!(std::time::SystemTime::now() < deadline, "moved before the interruption");
    assert_eq!(rig.owner().await.0.as_deref(), Some("b"), "drained: b (priority 5) takes it");
    assert_eq!(rig.moto.calls()["AssignPrivateIpAddresses"], 1, "one seize");
    let polls =
        || fake.counters()["requests"]["GET /latest/meta-data/spot/instance-action"].as_u64().unwrap_or(0);
    let before = polls();
    wait_until("five more polls", || async { polls() >= before + 5 }).await;
    let scrape = metrics.encode(None);
    for line in [
        "tenure_maintenance_notices_total{cloud=\"aws\",kind=\"spot-interruption\"} 1",
        "tenure_maintenance_notice_drains_total{cloud=\"aws\"} 1",
    ] {
        assert!(scrape.contains(line), "`{line}` once, however often polled:\n{scrape}");
    }
    assert!(!scrape.contains("tenure_maintenance_notice_acknowledgements_total{"), "AWS takes none");
    assert_eq!(fake.counters()["tokenPuts"], 1, "one IMDSv2 session");
    stop.cancel();
    tokio::time::timeout(WAIT_MAX, watcher).await.expect("the watcher stops").expect("joins");
    rig.stop().await;
}
