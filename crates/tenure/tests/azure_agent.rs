//! The agent with `kind: azure` against the ARM fake (issue 23; `scripts/azure-fake`: a FAKE of
//! the ARM network interface API, not Azure): three nodes in one agent on the embedded store,
//! each with its own NIC. A frozen node is what a killed or hung router is to the others: its
//! heartbeats stop. Calls are counted at the fake (`/_fake/calls`), so a fenced call is one that
//! never arrived.
//!
//! Fails, never skips, when the fake cannot start.

#![cfg(feature = "azure")]

#[path = "support/azure_fake.rs"]
mod azure_fake;
#[path = "support/inventory_log.rs"]
mod inventory_log;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use azure_fake::AzureFake;
use serde_json::json;
use tenure::agent::request::{ActionFilter, AgentHandle, Control};
use tenure::agent::runner::{NoObserver, RunSummary, run};
use tenure::agent::{ProviderExecutor, Settings};
use tenure::exec::azure::{AzureExecutor, IpForwarding};
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
    fake: AzureFake,
    /// The NICs of a, b, c, and one no node has.
    enis: Vec<String>,
    handle: AgentHandle,
    stop: oneshot::Sender<()>,
    done: tokio::task::JoinHandle<Result<RunSummary, tenure::agent::runner::AgentError>>,
}

/// The fake, four NICs in one resource group (forwarding on), and an agent running a (priority 10), b (5) and c (0) over one
/// address of pool `edge` (TTL 1 s, no holds), reading inventory every `inventory` if given.
async fn start(test: &str, inventory: Option<Duration>) -> Rig {
    let fake = AzureFake::start();
    fake.config(&json!({"lroDelayMs": 100, "pollMs": 50}));
    let enis: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .enumerate()
        .map(|(i, name)| fake.nic("rg", name, &format!("10.0.0.{}", 4 + i), &[]))
        .collect();
    for nic in &enis {
        fake.set_forwarding(nic, true);
    }
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("azure_agent-{test}-{}", std::process::id()));
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
            executor: Arc::new(AzureExecutor::with_client(fake.arm(), IpForwarding::Check)),
            call_timeout: Duration::from_secs(10),
            inventory_interval: inventory,
            garp_refresh: None,
        },
    );
    let settings = Settings {
        peers: Vec::new(),
        nodes,
        providers: vec![ProviderSpec { name: "cloud".into(), kind: ProviderKind::Azure }],
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
    /// The NICs (of all four) that hold the address, at the fake.
    async fn holders(&self) -> Vec<String> {
        self.enis.iter().filter(|n| self.fake.holds(n, address())).cloned().collect()
    }

    /// The calls since the last reset, polls left out: (op, NIC name).
    fn ops(&self) -> Vec<(String, String)> {
        self.fake
            .calls()
            .iter()
            .filter(|c| c["op"] != "poll")
            .map(|c| (c["op"].as_str().expect("op").to_owned(), c["nic"].as_str().unwrap_or("").to_owned()))
            .collect()
    }

    /// PUTs of NIC `name` since the last reset.
    fn puts_of(&self, name: &str) -> usize {
        self.ops().iter().filter(|(op, nic)| op == "put" && nic == name).count()
    }

    async fn entries(&self, node: Option<&str>, state: Option<&str>) -> Vec<tenure_core::rows::ActionRow> {
        let filter =
            ActionFilter { node: node.map(str::to_owned), state: state.map(str::to_owned), pool: None };
        self.handle.actions(filter).await.expect("answers")
    }

    /// Every journal entry of the nodes not `frozen` is final (executed or skipped), and the
    /// address is on `eni` alone. Asks the fake only once the journals are final (its calls count).
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

fn op(op: &str, nic: &str) -> (String, String) {
    (op.to_owned(), nic.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_holder_fails_over_with_two_gets_a_list_and_two_puts_and_the_address_ends_on_one_nic() {
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
    // The new holder's seize (GET own, list, PUT a without it, PUT b with it, GET b to confirm)
    // and its forwarding check (GET b). Nothing else, polls aside.
    assert_eq!(
        rig.ops(),
        vec![op("get", "b"), op("list", ""), op("put", "a"), op("put", "b"), op("get", "b"), op("get", "b")],
        "calls for the failover ({failover:?} from the freeze to b's forwarding check)"
    );
    assert_eq!(rig.owner().await.0.as_deref(), Some("b"), "b (priority 5) before c");
    assert_eq!(rig.holders().await, [rig.enis[1].clone()], "moved, not copied");

    // The old holder comes back: it releases on its own NIC, one read, and takes nothing from b.
    rig.fake.reset_calls();
    rig.handle.control(Control::Resume { node: "a".into() }).await.expect("answers").expect("woke");
    rig.wait_executed("a", "unassign-secondary-ip", 0).await;
    assert_eq!(rig.ops(), vec![op("get", "a")]);
    rig.wait_settled_on(1, None).await;
    assert_eq!(rig.holders().await, [rig.enis[1].clone()], "on exactly one NIC");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombies_stale_acquire_is_fenced_before_the_call_and_never_reaches_the_fake() {
    // Inventory on: the hand-over below must not look like drift.
    let rig = start("zombie", Some(Duration::from_millis(100))).await;
    rig.wait_settled_on(0, None).await;
    let (_, _, epoch) = rig.owner().await;
    rig.fake.reset_calls();
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
        "a approved a fresh acquire and froze before calling it: {approved:?}"
    );
    rig.wait_executed("b", "enable-forwarding", epoch).await;
    let writes = |rig: &Rig| (rig.puts_of("a"), rig.puts_of("b"));
    assert_eq!(writes(&rig), (1, 1), "b's seize only: a's NIC without it, b's with it");

    rig.handle.control(Control::Resume { node: "a".into() }).await.expect("answers").expect("woke");
    wait_until("a's approved entries fenced", || async {
        let skipped: Vec<String> =
            rig.entries(Some("a"), Some("skipped")).await.into_iter().map(|e| e.idempotency_key).collect();
        approved.iter().all(|k| skipped.contains(k))
    })
    .await;
    rig.wait_settled_on(1, None).await;
    assert_eq!(writes(&rig), (1, 1), "the zombie's acquire never reached the fake");
    assert_eq!(rig.owner().await.0.as_deref(), Some("b"));
    assert_eq!(rig.recaptures().await, 0, "a hand-over, with inventory read all along, is no drift");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_removed_or_moved_by_hand_is_recaptured_once_each_and_repaired() {
    let rig = start("drift", Some(Duration::from_millis(200))).await;
    rig.wait_settled_on(0, None).await;
    let (_, _, epoch) = rig.owner().await;
    assert_eq!(rig.recaptures().await, 0);

    // Removed by hand from the holder's NIC: re-captured once, put back by a.
    rig.fake.set(&rig.enis[0], &[]);
    wait_until("one re-capture", || async { rig.recaptures().await == 1 }).await;
    rig.wait_settled_on(0, None).await;
    assert_eq!(rig.owner().await, (Some("a".to_owned()), 1, epoch + 1));

    // Moved by hand to a NIC no node has: repaired once (a seizes it back from d).
    rig.fake.set(&rig.enis[0], &[]);
    rig.fake.set(&rig.enis[3], &["10.0.0.10"]);
    assert_eq!(rig.holders().await, [rig.enis[3].clone()], "moved off a's NIC");
    wait_until("a second re-capture", || async { rig.recaptures().await == 2 }).await;
    rig.wait_settled_on(0, None).await;
    assert_eq!(rig.owner().await, (Some("a".to_owned()), 1, epoch + 2));
    let reads = |m: &tenure::agent::request::MetricsSnapshot| {
        m.inventory_reads.iter().filter(|((_, o), _)| o == "ok").map(|(_, n)| *n).sum::<u64>()
    };
    let before = reads(&rig.handle.metrics().await.expect("answers"));
    wait_until("five more inventory reads", || async {
        reads(&rig.handle.metrics().await.expect("answers")) >= before + 5
    })
    .await;
    assert_eq!(rig.recaptures().await, 2, "quiet again: no more re-captures");
    assert!(
        rig.inventory_holders().contains(&vec![rig.enis[3].clone()]),
        "the NIC no node has is reported in the log"
    );

    // Throttled reads: waited out, counted by provider in the metrics.
    rig.fake.fault(&json!({"op": "list", "status": 429, "retryAfter": 1, "count": 2}));
    wait_until("two throttled answers counted", || async {
        rig.handle.metrics().await.expect("answers").provider_throttled == [("cloud".to_owned(), 2)]
    })
    .await;
    assert_eq!(rig.recaptures().await, 2);
    rig.stop().await;
}
