//! The agent with `kind: oci` against the OCI FAKE (`scripts/oci-fake/oci_fake.py`: a fake of the
//! published Core Services private IP API, not OCI; issue 23): three nodes in one agent on the
//! embedded store (a real redb store in a scratch folder), each with its own VNIC. A frozen node
//! is what a killed or hung router is to the others: its heartbeats stop. Calls are counted at the
//! fake (`/_fake/calls`), so a fenced call is one that never arrived.
//!
//! Fails, never skips, when the fake cannot start (python3).

#![cfg(feature = "oci")]

#[path = "support/inventory_log.rs"]
mod inventory_log;
#[path = "support/oci_fake.rs"]
mod oci_fake;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use oci_fake::OciFake;
use serde_json::json;
use tenure::agent::request::{ActionFilter, AgentHandle, Control};
use tenure::agent::runner::{NoObserver, RunSummary, run};
use tenure::agent::{ProviderExecutor, Settings};
use tenure::exec::oci::{OciExecutor, SkipSourceDestCheck};
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
    fake: OciFake,
    /// The VNICs of a, b, c, and one no node has (all in one subnet).
    enis: Vec<String>,
    handle: AgentHandle,
    stop: oneshot::Sender<()>,
    done: tokio::task::JoinHandle<Result<RunSummary, tenure::agent::runner::AgentError>>,
}

/// The fake, a subnet with four VNICs, and an agent running a (priority 10), b (5) and c (0) over one
/// address of pool `edge` (TTL 1 s, no holds), reading inventory every `inventory` if given.
async fn start(test: &str, inventory: Option<Duration>) -> Rig {
    let fake = OciFake::start();
    let enis = fake.vnics(4);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("oci_agent-{test}-{}", std::process::id()));
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
            executor: Arc::new(OciExecutor::with_client(fake.core(&dir), SkipSourceDestCheck::Check)),
            call_timeout: Duration::from_secs(10),
            inventory_interval: inventory,
            garp_refresh: None,
        },
    );
    let settings = Settings {
        peers: Vec::new(),
        nodes,
        providers: vec![ProviderSpec { name: "cloud".into(), kind: ProviderKind::Oci }],
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
    Rig { store, fake, enis, handle, stop, done }
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
    /// The VNIC that holds the address, at the fake (its own state: not a counted call).
    async fn holders(&self) -> Vec<String> {
        self.fake.holder("10.0.0.10").into_iter().collect()
    }

    async fn entries(&self, node: Option<&str>, state: Option<&str>) -> Vec<tenure_core::rows::ActionRow> {
        let filter =
            ActionFilter { node: node.map(str::to_owned), state: state.map(str::to_owned), pool: None };
        self.handle.actions(filter).await.expect("answers")
    }

    /// Every journal entry of the nodes not `frozen` is final (executed or skipped), and the
    /// address is on `eni` alone.
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
    /// only: no call reaches the fake).
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
async fn a_killed_holder_fails_over_with_one_list_one_update_one_read_and_the_address_ends_on_one_vnic() {
    let rig = start("failover", None).await;
    rig.wait_settled_on(0, None).await;
    let (owner, _, epoch) = rig.owner().await;
    assert_eq!(owner.as_deref(), Some("a"));

    rig.fake.reset_calls();
    let killed = tokio::time::Instant::now();
    rig.handle
        .control(Control::FreezeAfterReconcile { node: "a".into(), events: vec![] })
        .await
        .expect("answers")
        .expect("frozen");
    rig.wait_executed("b", "enable-forwarding", epoch).await;
    let failover = killed.elapsed();
    // The new holder: one list (the object is on a's VNIC), one update moving it, one read
    // confirming it; its VNIC's subnet read once (GetVnic, then cached), and its
    // skipSourceDestCheck read for enable-forwarding (GetVnic). Nothing else.
    assert_eq!(
        rig.fake.calls(),
        json!({"GetVnic": 2, "ListPrivateIps": 1, "UpdatePrivateIp": 1, "GetPrivateIp": 1}),
        "calls for the failover ({failover:?} from the kill to b's confirmed acquire)"
    );
    assert_eq!(rig.owner().await.0.as_deref(), Some("b"), "b (priority 5) before c");
    assert_eq!(rig.holders().await, [rig.enis[1].clone()], "moved, not copied");

    // The old holder comes back: it lists and reads the object on b's VNIC and deletes nothing.
    rig.fake.reset_calls();
    rig.handle.control(Control::Resume { node: "a".into() }).await.expect("answers").expect("woke");
    rig.wait_executed("a", "unassign-secondary-ip", 0).await;
    assert_eq!(rig.fake.calls(), json!({"ListPrivateIps": 1, "GetPrivateIp": 1}));
    rig.wait_settled_on(1, None).await;
    assert_eq!(rig.holders().await, [rig.enis[1].clone()], "on exactly one VNIC");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombies_stale_acquire_is_fenced_before_the_call_and_never_reaches_the_fake() {
    // Inventory on: the hand-over below must not look like drift.
    let rig = start("zombie", Some(Duration::from_millis(100))).await;
    rig.wait_settled_on(0, None).await;
    let (_, _, epoch) = rig.owner().await;
    rig.fake.reset_calls();
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
    assert_eq!(rig.fake.calls()["UpdatePrivateIp"], 1, "b's seize only");
    let calls = rig.fake.calls();

    // The zombie wakes up: what it approved meets the gate against the head, and dies there.
    rig.handle.control(Control::Resume { node: "a".into() }).await.expect("answers").expect("woke");
    wait_until("a's approved entries fenced", || async {
        let skipped: Vec<String> =
            rig.entries(Some("a"), Some("skipped")).await.into_iter().map(|e| e.idempotency_key).collect();
        approved.iter().all(|k| skipped.contains(k))
    })
    .await;
    rig.wait_settled_on(1, None).await;
    assert_eq!(rig.fake.calls()["UpdatePrivateIp"], 1, "the zombie's acquire never reached the fake");
    assert!(rig.fake.calls().get("CreatePrivateIp").is_none(), "nor as a create");
    assert_eq!(calls["UpdatePrivateIp"], rig.fake.calls()["UpdatePrivateIp"]);
    assert_eq!(rig.owner().await.0.as_deref(), Some("b"));
    assert_eq!(rig.recaptures().await, 0, "a hand-over, with inventory read all along, is no drift");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_on_oci_is_recaptured_once_and_repaired() {
    let rig = start("drift", Some(Duration::from_millis(200))).await;
    rig.wait_settled_on(0, None).await;
    let (_, _, epoch) = rig.owner().await;
    assert_eq!(rig.recaptures().await, 0);

    // Removed by hand from the holder's VNIC: re-captured once, put back by a.
    rig.fake.drift("10.0.0.10", None);
    wait_until("one re-capture", || async { rig.recaptures().await == 1 }).await;
    rig.wait_settled_on(0, None).await;
    assert_eq!(rig.owner().await, (Some("a".to_owned()), 1, epoch + 1));

    // Moved by hand to a VNIC no node has (another tool's stale call): repaired once.
    rig.fake.drift("10.0.0.10", Some(&rig.enis[3]));
    assert_eq!(rig.holders().await, [rig.enis[3].clone()], "moved off a's VNIC");
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
        "the VNIC no node has is reported in the log"
    );

    // Reads refused (a policy without `use private-ips`: OCI's 404): counted as failed, nothing
    // appended, nothing re-captured.
    let events = rig.inventory_holders().len();
    let failed = |m: &tenure::agent::request::MetricsSnapshot| {
        m.inventory_reads.iter().filter(|((_, o), _)| o == "failed").map(|(_, n)| *n).sum::<u64>()
    };
    rig.fake.fault("ListPrivateIps", 404, "NotAuthorizedOrNotFound", 10_000, None);
    wait_until("two failed reads", || async { failed(&rig.handle.metrics().await.expect("answers")) >= 2 })
        .await;
    assert_eq!(rig.inventory_holders().len(), events, "a failed read appends nothing");
    assert_eq!(rig.recaptures().await, 2);
    assert!(rig.handle.health().await.expect("answers").ok, "a blind inventory does not stop the agent");
    rig.fake.clear_faults();
    rig.stop().await;
}
