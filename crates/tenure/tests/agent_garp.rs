//! Announcements repeated for held addresses (issue 25), in-process over the in-memory store and
//! `sim-onprem`, with an executor that records every call: `garpRefresh` announces every held
//! address at its interval and nothing else, never for a deposed holder (the fence), never while
//! keepalived says not MASTER (pools under `authority: vrrp`), and keepalived's MASTER after
//! anything else announces the held addresses once. The network-namespace version, with real
//! gratuitous ARPs on a bridge, is `onprem_netns.rs`.

#[path = "support/wait.rs"]
mod wait;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure::agent::authority::LocalAuthority;
use tenure::agent::keepalived::VrrpReport;
use tenure::agent::memory::MemoryStore;
use tenure::agent::request::{ActionFilter, AgentHandle};
use tenure::agent::runner::{NoObserver, RunSummary, run};
use tenure::agent::{ProviderExecutor, Settings, VrrpFollow};
use tenure::exec::{
    ExecuteFuture, ExecutionOutcome, Executor, InventoryFuture, InventoryRequest, SimExecutor,
    WithdrawFuture, WithdrawRequest,
};
use tenure_core::log::EventKind;
use tenure_core::model::{
    Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec, StampedAction, Verb, VrrpState,
};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use wait::wait_until;

/// Most time any condition below may take; the loop itself is much faster.
const WAIT_MAX: Duration = Duration::from_secs(10);

/// The refresh interval of these tests (the config's floor of 1 s is for files; a test may go
/// faster).
const REFRESH: Duration = Duration::from_millis(200);

const ADDRESSES: [&str; 2] = ["192.0.2.10", "192.0.2.11"];

/// One provider call as the executor saw it.
#[derive(Clone, Debug)]
struct Call {
    verb: Verb,
    address: IpAddr,
    nic: String,
    /// Whether keepalived said MASTER when the call reached the executor.
    master: bool,
    at: Instant,
}

/// `sim-onprem` that records every call; optionally fails every `proxy-arp-del` of one NIC and
/// every local withdrawal (a router whose entry cannot be removed keeps answering: what the
/// gate and keepalived's guard must still hold back).
#[derive(Clone)]
struct Recorder {
    lan: SimExecutor,
    calls: Arc<Mutex<Vec<Call>>>,
    authority: Option<Arc<LocalAuthority>>,
    failing_release_nic: Option<String>,
    withdraw_fails: bool,
}

impl Recorder {
    fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("not poisoned").clone()
    }

    /// The `garp` calls from `nic` for `address`.
    fn garps(&self, nic: &str, address: &str) -> Vec<Call> {
        let address: IpAddr = address.parse().expect("literal");
        self.calls()
            .into_iter()
            .filter(|c| c.verb == Verb::Garp && c.nic == nic && c.address == address)
            .collect()
    }
}

impl Executor for Recorder {
    fn execute<'a>(&'a self, action: &'a StampedAction, deadline: Instant) -> ExecuteFuture<'a> {
        self.calls.lock().expect("not poisoned").push(Call {
            verb: action.verb,
            address: action.address,
            nic: action.nic.to_string(),
            master: self.authority.as_ref().is_none_or(|a| a.is_master()),
            at: Instant::now(),
        });
        if action.verb == Verb::ProxyArpDel && self.failing_release_nic.as_deref() == Some(&*action.nic) {
            return Box::pin(async {
                ExecutionOutcome::Failed { reason: "injected: netlink refused".into() }
            });
        }
        self.lan.execute(action, deadline)
    }

    fn inventory<'a>(&'a self, request: &'a InventoryRequest) -> Option<InventoryFuture<'a>> {
        self.lan.inventory(request)
    }

    fn withdraw<'a>(&'a self, request: &'a WithdrawRequest) -> Option<WithdrawFuture<'a>> {
        if self.withdraw_fails {
            return Some(Box::pin(async { Err("injected: netlink refused".to_owned()) }));
        }
        self.lan.withdraw(request)
    }
}

struct Agent {
    handle: AgentHandle,
    recorder: Recorder,
    keepalived: Option<mpsc::Sender<VrrpReport>>,
    authority: Arc<LocalAuthority>,
    _stop: oneshot::Sender<()>,
    _done: tokio::task::JoinHandle<Result<RunSummary, tenure::agent::runner::AgentError>>,
}

struct Setup {
    /// The nodes the agent runs (each on `eth-NAME`); the first is preferred.
    nodes: &'static [&'static str],
    authority: Authority,
    garp_refresh: Option<Duration>,
    failing_release_nic: Option<&'static str>,
    withdraw_fails: bool,
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

fn start(setup: &Setup) -> Agent {
    let authority = LocalAuthority::new();
    let vrrp = setup.authority == Authority::Vrrp;
    let recorder = Recorder {
        lan: SimExecutor::new(ProviderKind::SimOnprem),
        calls: Arc::default(),
        authority: vrrp.then(|| Arc::clone(&authority)),
        failing_release_nic: setup.failing_release_nic.map(str::to_owned),
        withdraw_fails: setup.withdraw_fails,
    };
    let mut executors = BTreeMap::new();
    executors.insert(
        "lan".to_owned(),
        ProviderExecutor {
            executor: Arc::new(recorder.clone()),
            call_timeout: Duration::from_secs(5),
            inventory_interval: None,
            garp_refresh: setup.garp_refresh,
        },
    );
    let spec = PoolSpec {
        name: "vip".into(),
        addresses: ADDRESSES.iter().map(|a| a.parse().expect("literal")).collect(),
        provider: "lan".into(),
        placement_group: "rack1".into(),
        members: setup.nodes.iter().map(|n| (*n).to_owned()).collect(),
        authority: setup.authority,
        approval: Approval::Auto,
        deprovision_hold_ms: 5_000,
        heartbeat_ttl_ms: 3_000,
        promotion_hold_ms: 0,
        epoch_locking: true,
        prefer_nodes: vec![setup.nodes[0].to_owned()],
        preempt: false,
        auto_failover: true,
    };
    let (keepalived, reports) = mpsc::channel(16);
    let settings = Settings {
        peers: Vec::new(),
        nodes: setup.nodes.iter().map(|n| node(n)).collect(),
        providers: vec![ProviderSpec { name: "lan".into(), kind: ProviderKind::SimOnprem }],
        executors,
        heartbeat_interval: Duration::from_millis(50),
        // Long: nothing below may depend on a requeue pass.
        requeue_interval: Duration::from_secs(60),
        journal_retention: 10_000,
        pools: Box::new(move || Ok(vec![spec.clone()])),
        vrrp: vrrp.then(|| VrrpFollow { reports, authority: Arc::clone(&authority) }),
    };
    let (handle, requests) = AgentHandle::channel();
    let (_reload_tx, reload) = mpsc::channel(1);
    let (stop, stopped) = oneshot::channel::<()>();
    let done =
        tokio::spawn(run(MemoryStore::new(), settings, requests, reload, Arc::new(NoObserver), async move {
            let _ = stopped.await;
        }));
    Agent { handle, recorder, keepalived: vrrp.then_some(keepalived), authority, _stop: stop, _done: done }
}

impl Agent {
    /// What keepalived says, as the follower passes it on: the flag first, then the loop.
    async fn keepalived_says(&self, report: VrrpReport) {
        self.authority.observe(&report);
        self.keepalived.as_ref().expect("vrrp").send(report).await.expect("the loop listens");
    }

    /// (node, verb, state) of every journal entry, in journal order.
    async fn journal(&self) -> Vec<(String, String, String)> {
        let filter = ActionFilter { node: None, state: None, pool: None };
        let rows = self.handle.actions(filter).await.expect("answers");
        rows.into_iter().map(|r| (r.node, r.verb, r.state)).collect()
    }

    async fn epochs(&self) -> Vec<(u64, u64)> {
        let rows = self.handle.ownership().await.expect("answers");
        rows.iter().map(|r| (r.ownership_epoch, r.capture_epoch)).collect()
    }

    /// Refreshes counted by the metrics, by outcome.
    async fn refreshes(&self, outcome: &str) -> u64 {
        let metrics = self.handle.metrics().await.expect("answers");
        metrics.garp_refreshes.iter().filter(|((_, o), _)| o == outcome).map(|(_, n)| n).sum()
    }

    /// Every address's journaled `garp` executed on `node`.
    async fn announced(&self, node: &str) -> bool {
        let journal = self.journal().await;
        journal.iter().filter(|(n, verb, state)| n == node && verb == "garp" && state == "executed").count()
            == ADDRESSES.len()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garp_refresh_announces_every_held_address_at_its_interval_and_nothing_else() {
    let agent = start(&Setup {
        nodes: &["a", "b"],
        authority: Authority::None,
        garp_refresh: Some(REFRESH),
        failing_release_nic: None,
        withdraw_fails: false,
    });
    wait_until(WAIT_MAX, "a announced both addresses", async || agent.announced("a").await).await;
    let journal = agent.journal().await;
    for address in ADDRESSES {
        wait_until(WAIT_MAX, "three refreshes", async || agent.recorder.garps("eth-a", address).len() >= 4)
            .await;
    }
    for address in ADDRESSES {
        // The acquire's own, then the refreshes: one per interval, not one per step. (A timer
        // never fires early; the margin is for the time from the timer to the call, which a
        // loaded machine stretches for one refresh and not the next. The first refresh is due
        // one interval after the agent started, not after the acquire.)
        // Counted over the whole span rather than gap by gap: a call a loaded machine delays
        // shortens the gap after it (the next one is due an interval after the timer fired),
        // but never adds a refresh.
        let garps = agent.recorder.garps("eth-a", address);
        let refreshes = &garps[1..];
        let span = refreshes[refreshes.len() - 1].at - refreshes[0].at;
        let most = span.as_millis() / REFRESH.as_millis() + 1;
        assert!(
            (refreshes.len() as u128 - 1) <= most,
            "{address}: {} refreshes in {span:?}, at most {most} at one per {REFRESH:?}",
            refreshes.len()
        );
        assert!(agent.recorder.garps("eth-b", address).is_empty(), "b holds nothing: it announces nothing");
    }
    assert_eq!(agent.journal().await, journal, "refreshes are never journaled");
    assert!(agent.refreshes("executed").await >= 6);
    let other: Vec<Call> = agent.recorder.calls().into_iter().filter(|c| c.verb != Verb::Garp).collect();
    assert_eq!(other.len(), ADDRESSES.len(), "only the two adds besides announcements: {other:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_holder_never_refreshes_even_while_its_entry_stays() {
    let agent = start(&Setup {
        nodes: &["a", "b"],
        authority: Authority::None,
        garp_refresh: Some(REFRESH),
        // a cannot remove its entries: it still holds them when the log moves them to b.
        failing_release_nic: Some("eth-a"),
        withdraw_fails: false,
    });
    wait_until(WAIT_MAX, "a announced both addresses", async || agent.announced("a").await).await;
    wait_until(WAIT_MAX, "a refreshed", async || agent.recorder.garps("eth-a", ADDRESSES[0]).len() >= 2)
        .await;
    let receipt = agent.handle.submit(EventKind::Drain { node: "a".into() }).await.expect("answers");
    assert!(receipt.is_ok(), "{receipt:?}");
    wait_until(WAIT_MAX, "b announced both addresses", async || agent.announced("b").await).await;
    // b's first announcement came after the one view both nodes share applied the drain: from
    // then on, every refresh of a is gated against it.
    let moved = agent.recorder.garps("eth-b", ADDRESSES[0])[0].at;
    wait_until(WAIT_MAX, "a's release failed", async || {
        agent
            .journal()
            .await
            .iter()
            .any(|(n, verb, state)| n == "a" && verb == "proxy-arp-del" && state == "failed")
    })
    .await;
    // Five refresh intervals of b's refreshes, while a still has its entries.
    for address in ADDRESSES {
        wait_until(WAIT_MAX, "b refreshes", async || agent.recorder.garps("eth-b", address).len() >= 6).await;
    }
    assert!(agent.recorder.lan.with_provider(|p| p.holdings().values().all(|nics| nics.contains("eth-a"))));
    for address in ADDRESSES {
        let late: Vec<Call> =
            agent.recorder.garps("eth-a", address).into_iter().filter(|c| c.at > moved).collect();
        assert!(late.is_empty(), "{address}: a announced after it was deposed: {late:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_refresh_while_keepalived_says_not_master() {
    let agent = start(&Setup {
        nodes: &["a"],
        authority: Authority::Vrrp,
        garp_refresh: Some(REFRESH),
        failing_release_nic: None,
        // The entries stay on a demoted host, and so does its capture: only the guard holds the
        // refresh back.
        withdraw_fails: true,
    });
    agent.keepalived_says(VrrpReport::State(VrrpState::Master)).await;
    agent.keepalived_says(VrrpReport::Running).await;
    wait_until(WAIT_MAX, "a announced both addresses", async || agent.announced("a").await).await;
    wait_until(WAIT_MAX, "a refreshed", async || agent.refreshes("executed").await >= 2).await;
    // keepalived demotes the host; the loop is not told (its report is still on its way), so
    // the log still has a as the holder and the fence passes: keepalived's guard alone refuses.
    agent.authority.observe(&VrrpReport::State(VrrpState::Backup));
    wait_until(WAIT_MAX, "refreshes refused", async || agent.refreshes("refused").await >= 5).await;
    let calls = agent.recorder.calls();
    let unguarded: Vec<&Call> = calls.iter().filter(|c| c.verb == Verb::Garp && !c.master).collect();
    assert!(unguarded.is_empty(), "announced while not MASTER: {unguarded:?}");
    // MASTER again (the loop never heard of the demotion): the refreshes go on.
    agent.authority.observe(&VrrpReport::State(VrrpState::Master));
    let refreshed = agent.refreshes("executed").await;
    wait_until(WAIT_MAX, "refreshing again", async || agent.refreshes("executed").await > refreshed).await;
}

// One thread: the three reports below are all waiting when the loop next runs (nothing yields
// between the sends), so the log never hears of the demotion, no new acquire is planned, and
// the withdrawal task never sees the demotion either.
#[tokio::test(flavor = "current_thread")]
async fn master_again_announces_the_held_addresses_once() {
    let agent = start(&Setup {
        nodes: &["a"],
        authority: Authority::Vrrp,
        garp_refresh: None,
        failing_release_nic: None,
        withdraw_fails: true,
    });
    agent.keepalived_says(VrrpReport::State(VrrpState::Master)).await;
    agent.keepalived_says(VrrpReport::Running).await;
    wait_until(WAIT_MAX, "a announced both addresses", async || agent.announced("a").await).await;
    let journal = agent.journal().await;
    let epochs = agent.epochs().await;
    for address in ADDRESSES {
        assert_eq!(agent.recorder.garps("eth-a", address).len(), 1, "the acquire's own announcement");
    }
    agent.authority.observe(&VrrpReport::State(VrrpState::Backup));
    agent
        .keepalived
        .as_ref()
        .expect("vrrp")
        .send(VrrpReport::State(VrrpState::Backup))
        .await
        .expect("listens");
    agent.keepalived_says(VrrpReport::State(VrrpState::Master)).await;
    for address in ADDRESSES {
        wait_until(WAIT_MAX, "the burst", async || agent.recorder.garps("eth-a", address).len() >= 2).await;
    }
    // Heartbeats go on (every 50 ms) and steps with them: still one burst.
    let settled = agent.handle.metrics().await.expect("answers").log_index;
    wait_until(WAIT_MAX, "ten more log events", async || {
        agent.handle.metrics().await.expect("answers").log_index >= settled + 10
    })
    .await;
    for address in ADDRESSES {
        assert_eq!(agent.recorder.garps("eth-a", address).len(), 2, "{address}: one burst, once");
    }
    assert_eq!(agent.journal().await, journal, "no new acquire was planned");
    assert_eq!(agent.epochs().await, epochs, "nothing moved in the log");
    assert!(agent.recorder.calls().iter().all(|c| c.master), "announced only as MASTER");
}
