//! keepalived's authority acted on without the log (SPEC 7, `onprem` under `authority: vrrp`),
//! in-process over the in-memory store and `sim-onprem`: a demotion removes the host's entry at
//! once and journals it as an executed release reported to the log; adds are refused while not
//! MASTER; a demotion and promotion that reach the log together still move the epoch, so the
//! address comes back. The network-namespace version with real keepalived and etcd is
//! `onprem_keepalived.rs`.

#[path = "support/wait.rs"]
mod wait;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use std::time::{SystemTime, UNIX_EPOCH};
use tenure::agent::AgentStore;
use tenure::agent::authority::LocalAuthority;
use tenure::agent::keepalived::VrrpReport;
use tenure::agent::memory::MemoryStore;
use tenure::agent::request::{ActionFilter, AgentHandle};
use tenure::agent::runner::{NoObserver, RunSummary, run};
use tenure::agent::{ProviderExecutor, Settings, VrrpFollow};
use tenure::exec::SimExecutor;
use tenure_core::log::{Event, EventKind};
use tenure_core::log_store::{Log, LogIndex};
use tenure_core::model::{Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec, VrrpState};
use tokio::sync::{mpsc, oneshot};
use wait::wait_until;

/// Most time any condition below may take; the loop itself is much faster.
const WAIT_MAX: Duration = Duration::from_secs(10);

const ADDRESS: &str = "192.0.2.10";

struct Router {
    handle: AgentHandle,
    store: MemoryStore,
    lan: SimExecutor,
    keepalived: mpsc::Sender<VrrpReport>,
    authority: Arc<LocalAuthority>,
    _stop: oneshot::Sender<()>,
    _done: tokio::task::JoinHandle<Result<RunSummary, tenure::agent::runner::AgentError>>,
}

/// One router `a` answering on `eth-a` for one address of a pool under VRRP authority, with the
/// default 5 s deprovision hold (never applied on-prem), beside keepalived's reports.
fn start() -> Router {
    start_with(&[])
}

fn node(name: &str) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        provider: "lan".into(),
        placement_group: "rack1".into(),
        priority: 0,
        nic: format!("eth-{name}"),
        capacity: None,
    }
}

/// [`start`], the pool's members also `peers`: routers of the fleet that other agents run (the
/// test writes their events to the log).
fn start_with(peers: &[&str]) -> Router {
    let lan = SimExecutor::new(ProviderKind::SimOnprem);
    let mut executors = BTreeMap::new();
    executors.insert(
        "lan".to_owned(),
        ProviderExecutor {
            executor: Arc::new(lan.clone()),
            call_timeout: Duration::from_secs(5),
            inventory_interval: None,
            garp_refresh: None,
        },
    );
    let spec = PoolSpec {
        name: "vip".into(),
        addresses: vec![ADDRESS.parse().expect("literal")],
        provider: "lan".into(),
        placement_group: "rack1".into(),
        members: std::iter::once("a").chain(peers.iter().copied()).map(str::to_owned).collect(),
        authority: Authority::Vrrp,
        approval: Approval::Auto,
        deprovision_hold_ms: 5_000,
        // With peers the test writes their heartbeats once: a minute covers the whole test.
        heartbeat_ttl_ms: if peers.is_empty() { 3_000 } else { 60_000 },
        promotion_hold_ms: 0,
        epoch_locking: true,
        prefer_nodes: vec![],
        preempt: false,
        auto_failover: true,
    };
    let (keepalived, reports) = mpsc::channel(16);
    let authority = LocalAuthority::new();
    let settings = Settings {
        peers: peers.iter().map(|name| node(name)).collect(),
        nodes: vec![node("a")],
        providers: vec![ProviderSpec { name: "lan".into(), kind: ProviderKind::SimOnprem }],
        executors,
        heartbeat_interval: Duration::from_millis(50),
        // Long: nothing below may depend on a requeue pass.
        requeue_interval: Duration::from_secs(60),
        journal_retention: 10_000,
        pools: Box::new(move || Ok(vec![spec.clone()])),
        vrrp: Some(VrrpFollow { reports, authority: Arc::clone(&authority) }),
    };
    let (handle, requests) = AgentHandle::channel();
    let (_reload_tx, reload) = mpsc::channel(1);
    let (stop, stopped) = oneshot::channel::<()>();
    let store = MemoryStore::new();
    let done =
        tokio::spawn(run(store.clone(), settings, requests, reload, Arc::new(NoObserver), async move {
            let _ = stopped.await;
        }));
    Router { handle, store, lan, keepalived, authority, _stop: stop, _done: done }
}

impl Router {
    /// What keepalived says, as the follower passes it on: the flag first, then the loop.
    async fn keepalived_says(&self, report: VrrpReport) {
        self.authority.observe(&report);
        self.keepalived.send(report).await.expect("the loop listens");
    }

    fn answers(&self) -> bool {
        self.lan.with_provider(|p| {
            p.holdings().get(&ADDRESS.parse().expect("literal")).is_some_and(|n| !n.is_empty())
        })
    }

    /// (verb, state, captureEpoch) of every journal entry of `a`, in journal order.
    async fn journal(&self) -> Vec<(String, String, u64)> {
        let filter = ActionFilter { node: Some("a".into()), state: None, pool: None };
        let rows = self.handle.actions(filter).await.expect("answers");
        rows.into_iter().map(|r| (r.verb, r.state, r.capture_epoch)).collect()
    }

    /// Appends `kind` to the log as another router's agent would.
    fn peer_appends(&self, kind: EventKind) {
        let at_ms = SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_millis();
        let at_ms = u64::try_from(at_ms).expect("fits");
        self.store.log().append(&Event { at_ms, kind }).expect("the memory log appends");
    }

    /// The `vrrp` events of node `name` in the log, in order.
    fn vrrp_reports(&self, name: &str) -> Vec<VrrpState> {
        let records = self.store.log().read_from(LogIndex::FIRST, usize::MAX).expect("reads");
        records
            .into_iter()
            .filter_map(|record| match record.event.kind {
                EventKind::Vrrp { node, state } if node == name => Some(state),
                _ => None,
            })
            .collect()
    }

    async fn owner(&self) -> Option<String> {
        let rows = self.handle.ownership().await.expect("answers");
        rows.into_iter().find(|r| r.address == ADDRESS).expect("row").owner
    }

    async fn epochs(&self) -> (u64, u64) {
        let rows = self.handle.ownership().await.expect("answers");
        let row = rows.iter().find(|r| r.address == ADDRESS).expect("row");
        (row.ownership_epoch, row.capture_epoch)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demotion_withdraws_without_the_log_and_journals_a_release() {
    let router = start();
    // As the follower starts: the lines that waited in the FIFO, then "running".
    router.keepalived_says(VrrpReport::State(VrrpState::Master)).await;
    router.keepalived_says(VrrpReport::Running).await;
    wait_until(WAIT_MAX, "a answers as master", async || router.answers()).await;
    wait_until(WAIT_MAX, "garp executed", async || {
        router.journal().await.iter().filter(|(_, state, _)| state == "executed").count() == 2
    })
    .await;

    // keepalived demotes the host, and the loop has not heard of it (its report is still on
    // its way): the entry goes all the same, journaled as an executed release stamped with the
    // epoch a held — the log did not move, so no planned release could have done it.
    router.authority.observe(&VrrpReport::State(VrrpState::Backup));
    wait_until(WAIT_MAX, "the entry withdrawn", async || !router.answers()).await;
    wait_until(WAIT_MAX, "the withdrawal journaled", async || {
        router
            .journal()
            .await
            .iter()
            .any(|(verb, state, epoch)| verb == "proxy-arp-del" && state == "executed" && *epoch == 1)
    })
    .await;
    // The log has not heard of the demotion, only of the release: a still owns the address,
    // and the release of the desired holder in its own epoch re-captured it (captureEpoch 2), so
    // that a adds it again once it may (its acquire of epoch 1 is executed already).
    wait_until(WAIT_MAX, "the release re-captured", async || router.epochs().await == (1, 2)).await;
    assert!(!router.answers(), "not while keepalived says BACKUP: the add is refused");

    // The report reaches the loop: the log moves both epochs away from a.
    router.keepalived.send(VrrpReport::State(VrrpState::Backup)).await.expect("listens");
    wait_until(WAIT_MAX, "the epochs moved", async || router.epochs().await == (2, 3)).await;
    assert!(!router.answers());

    // MASTER again: a re-captures in a new epoch.
    router.keepalived_says(VrrpReport::State(VrrpState::Master)).await;
    wait_until(WAIT_MAX, "a answers again", async || router.answers()).await;
    assert_eq!(router.epochs().await, (3, 4));
}

// One thread: the two reports below are both waiting when the loop next runs (nothing yields
// between the two sends), so they reach the log in one batch.
#[tokio::test(flavor = "current_thread")]
async fn a_flap_that_reaches_the_log_in_one_batch_still_brings_the_address_back() {
    let router = start();
    // As the follower starts: the lines that waited in the FIFO, then "running".
    router.keepalived_says(VrrpReport::State(VrrpState::Master)).await;
    router.keepalived_says(VrrpReport::Running).await;
    wait_until(WAIT_MAX, "a answers as master", async || router.answers()).await;
    let before = router.epochs().await;
    // BACKUP and MASTER back to back: the withdrawal runs on BACKUP; both reports reach the loop
    // before its next append, so the log sees neither (MASTER is what it had). The withdrawal's
    // release, reported by the desired holder in its own epoch, re-captures the address, and a
    // adds its entry again (without that rule a would stay the desired holder of an epoch whose
    // acquire it executed, answering for nothing).
    router.authority.observe(&VrrpReport::State(VrrpState::Backup));
    wait_until(WAIT_MAX, "the entry withdrawn", async || !router.answers()).await;
    router.keepalived.send(VrrpReport::State(VrrpState::Backup)).await.expect("listens");
    router.keepalived_says(VrrpReport::State(VrrpState::Master)).await;
    wait_until(WAIT_MAX, "a answers again", async || router.answers()).await;
    let after = router.epochs().await;
    assert!(after.1 > before.1, "the captureEpoch moved: {before:?} -> {after:?}");
}

/// Issue 24, `docs/decisions.md` ("The newest MASTER report counts"): another router's MASTER
/// report takes the address from `a` at once, though `a`'s keepalived never said BACKUP and its
/// heartbeats go on (a VRRP split, or keepalived on `a` starved); when that router steps down,
/// `a` counts again without a report of its own (it has no transition to report) and answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newest_master_report_takes_the_address_and_the_older_counts_again_when_it_steps_down() {
    let router = start_with(&["b"]);
    router.keepalived_says(VrrpReport::State(VrrpState::Master)).await;
    router.keepalived_says(VrrpReport::Running).await;
    wait_until(WAIT_MAX, "a answers as master", async || router.answers()).await;

    // b's agent: alive (the pool's heartbeatTTL is a minute here), its keepalived says MASTER.
    router.peer_appends(EventKind::Heartbeat { node: "b".into() });
    router.peer_appends(EventKind::Vrrp { node: "b".into(), state: VrrpState::Master });
    wait_until(WAIT_MAX, "b owns", async || router.owner().await.as_deref() == Some("b")).await;
    wait_until(WAIT_MAX, "a released its entry", async || !router.answers()).await;

    // b steps down (the split healed in a's favour): a answers again.
    router.peer_appends(EventKind::Vrrp { node: "b".into(), state: VrrpState::Backup });
    wait_until(WAIT_MAX, "a answers again", async || router.answers()).await;
    assert_eq!(router.vrrp_reports("a"), [VrrpState::Master], "a reported nothing more");
}
