//! Drift repair in the agent loop (issue 11), in-process over the in-memory store double and the
//! simulated providers: the agent reads each provider's inventory at its interval, appends one
//! `inventory` event per change (not per read), and an inventory that contradicts a confirmed
//! execution re-captures the address once; the fresh actions put things right. The same loop
//! against moto's EC2 server is in `aws_agent.rs`.

#[path = "support/in_process.rs"]
mod in_process;
#[path = "support/inventory_log.rs"]
mod inventory_log;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tenure::agent::memory::MemoryStore;
use tenure::agent::request::{ActionFilter, AgentHandle};
use tenure::agent::runner::RunSummary;
use tenure::agent::{AgentStore, ProviderExecutor, Settings};
use tenure::exec::SimExecutor;
use tenure_core::model::{Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec};
use tokio::sync::oneshot;

/// Most time any condition below may take; the loop itself is much faster.
const WAIT_MAX: Duration = Duration::from_secs(10);

/// How often the rig reads inventory.
const INVENTORY_INTERVAL: Duration = Duration::from_millis(30);

fn address() -> IpAddr {
    "10.0.0.10".parse().expect("literal")
}

fn node(name: &str, priority: i64) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        provider: "sim1".into(),
        placement_group: "g1".into(),
        priority,
        nic: format!("nic-{name}"),
        capacity: None,
    }
}

struct Rig {
    handle: AgentHandle,
    provider: SimExecutor,
    store: MemoryStore,
    stop: oneshot::Sender<()>,
    done: tokio::task::JoinHandle<Result<RunSummary, tenure::agent::runner::AgentError>>,
}

/// An agent running a (priority 10) and b over one address on `sim1` of `kind`, reading
/// inventory every [`INVENTORY_INTERVAL`].
fn start(kind: ProviderKind) -> Rig {
    let provider = SimExecutor::new(kind);
    let mut executors = BTreeMap::new();
    executors.insert(
        "sim1".to_owned(),
        ProviderExecutor {
            executor: Arc::new(provider.clone()),
            call_timeout: Duration::from_secs(5),
            inventory_interval: Some(INVENTORY_INTERVAL),
            garp_refresh: None,
        },
    );
    let pool = PoolSpec {
        name: "edge".into(),
        addresses: vec![address()],
        provider: "sim1".into(),
        placement_group: "g1".into(),
        members: vec!["a".into(), "b".into()],
        authority: Authority::None,
        approval: Approval::Auto,
        deprovision_hold_ms: 0,
        heartbeat_ttl_ms: 3_000,
        promotion_hold_ms: 0,
        epoch_locking: true,
        prefer_nodes: vec![],
        preempt: false,
        auto_failover: true,
    };
    let settings = Settings {
        peers: Vec::new(),
        nodes: vec![node("a", 10), node("b", 0)],
        providers: vec![ProviderSpec { name: "sim1".into(), kind }],
        executors,
        heartbeat_interval: Duration::from_millis(50),
        requeue_interval: Duration::from_millis(100),
        journal_retention: 10_000,
        pools: Box::new(move || Ok(vec![pool.clone()])),
        vrrp: None,
    };
    let store = MemoryStore::new();
    let (handle, stop, done) = in_process::spawn_agent(store.clone(), settings);
    Rig { handle, provider, store, stop, done }
}

impl Rig {
    fn holders(&self) -> Vec<String> {
        self.provider
            .with_provider(|p| p.holdings().get(&address()).map(|nics| nics.iter().cloned().collect()))
            .unwrap_or_default()
    }

    /// The holders of every `inventory` event in the log, in log order.
    fn inventory_events(&self) -> Vec<Vec<String>> {
        inventory_log::inventory_holders(&self.store.log())
    }

    /// (owner, ownershipEpoch, captureEpoch) of the address.
    async fn epochs(&self) -> (Option<String>, u64, u64) {
        let rows = self.handle.ownership().await.expect("answers");
        let row = rows.into_iter().find(|r| r.address == "10.0.0.10").expect("a row");
        (row.owner, row.ownership_epoch, row.capture_epoch)
    }

    async fn reads_ok(&self) -> u64 {
        let metrics = self.handle.metrics().await.expect("answers");
        metrics.inventory_reads.iter().filter(|((_, outcome), _)| outcome == "ok").map(|(_, n)| n).sum()
    }

    async fn recaptures(&self) -> u64 {
        self.handle.metrics().await.expect("answers").drift_recaptures
    }

    /// Waits until `more` further inventory reads have succeeded.
    async fn wait_reads(&self, more: u64) {
        let target = self.reads_ok().await + more;
        let deadline = tokio::time::Instant::now() + WAIT_MAX;
        while self.reads_ok().await < target {
            assert!(
                tokio::time::Instant::now() < deadline,
                "fewer than {more} inventory reads in {WAIT_MAX:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until the provider shows exactly `nics` holding the address and every entry of
    /// the journals is final (executed or skipped).
    async fn wait_settled(&self, nics: &[&str]) {
        let deadline = tokio::time::Instant::now() + WAIT_MAX;
        loop {
            let open = self
                .handle
                .actions(ActionFilter::default())
                .await
                .expect("answers")
                .into_iter()
                .filter(|a| a.state != "executed" && a.state != "skipped")
                .count();
            if self.holders() == nics && open == 0 {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "not settled on {nics:?} in {WAIT_MAX:?}: holders {:?}, {open} open entries",
                self.holders()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn stop(self) {
        self.stop.send(()).expect("running");
        tokio::time::timeout(WAIT_MAX, self.done).await.expect("stops").expect("joins").expect("ran");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_removed_by_hand_is_recaptured_once_and_put_back() {
    let rig = start(ProviderKind::SimCloud);
    rig.wait_settled(&["nic-a"]).await;
    rig.wait_reads(3).await;
    let (owner, ownership_epoch, capture_epoch) = rig.epochs().await;
    assert_eq!((owner.as_deref(), ownership_epoch), (Some("a"), 1));
    assert_eq!(rig.recaptures().await, 0, "capture alone is no drift");

    // Steady state: reads go on, the log does not grow with them.
    let before = rig.inventory_events().len();
    rig.wait_reads(10).await;
    assert_eq!(rig.inventory_events().len(), before, "an unchanged inventory appends nothing");

    assert!(rig.provider.with_provider(|p| p.inject_loss(address(), "nic-a")), "held before");
    rig.wait_settled(&["nic-a"]).await;
    rig.wait_reads(10).await;
    assert_eq!(
        rig.epochs().await,
        (Some("a".to_owned()), 1, capture_epoch + 1),
        "one re-capture, same owner"
    );
    assert_eq!(rig.recaptures().await, 1);
    // (Counted from `before`: the first read at start may have found nothing yet.)
    let lost = rig.inventory_events()[before..].iter().filter(|holders| holders.is_empty()).count();
    assert_eq!(lost, 1, "the loss was appended once, not once per read");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_reassigned_to_a_third_nic_is_reported_and_repaired() {
    let rig = start(ProviderKind::SimCloud);
    rig.wait_settled(&["nic-a"]).await;
    rig.wait_reads(3).await;
    let (_, _, capture_epoch) = rig.epochs().await;
    // Another tool reassigns the address to an interface tenure does not manage.
    rig.provider.with_provider(|p| p.inject_holding(address(), "nic-other"));
    assert_eq!(rig.holders(), ["nic-other"]);
    rig.wait_settled(&["nic-a"]).await;
    rig.wait_reads(10).await;
    assert_eq!(rig.epochs().await, (Some("a".to_owned()), 1, capture_epoch + 1));
    assert_eq!(rig.recaptures().await, 1);
    assert!(
        rig.inventory_events().contains(&vec!["nic-other".to_owned()]),
        "the foreign holding is in the log: {:?}",
        rig.inventory_events()
    );
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_left_over_entry_on_another_node_is_released_by_that_node() {
    let rig = start(ProviderKind::SimOnprem);
    rig.wait_settled(&["nic-a"]).await;
    rig.wait_reads(3).await;
    let (_, _, capture_epoch) = rig.epochs().await;
    // A proxy entry for the address left on b's interface (on-prem: both answer).
    rig.provider.with_provider(|p| p.inject_holding(address(), "nic-b"));
    assert_eq!(rig.holders(), ["nic-a", "nic-b"]);
    rig.wait_settled(&["nic-a"]).await;
    rig.wait_reads(10).await;
    // No new epoch: what inventory shows on b's interface counts as captured, so b's release is
    // planned in the current epoch (re-capturing would fence nothing right, and churn).
    assert_eq!(rig.epochs().await, (Some("a".to_owned()), 1, capture_epoch));
    assert_eq!(rig.recaptures().await, 0);
    let filter = ActionFilter { state: Some("executed".into()), node: Some("b".into()), pool: None };
    let released: Vec<(String, u64)> = rig
        .handle
        .actions(filter)
        .await
        .expect("answers")
        .into_iter()
        .map(|a| (a.verb, a.capture_epoch))
        .collect();
    assert_eq!(
        released,
        [("proxy-arp-del".to_owned(), capture_epoch)],
        "b removed the entry it never captured"
    );
    rig.stop().await;
}
