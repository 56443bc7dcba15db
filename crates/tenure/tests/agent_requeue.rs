//! The requeue pass of the agent loop, a slice at a time (issue 24), in-process over the
//! in-memory store double and the simulated cloud: with more addresses than a slice and two
//! nodes in one agent, every pass takes several slices and ends, the loop rests between passes
//! (it does not spin on a pass that never ends), and the agent answers all along; while call
//! results keep the loop busy (a capture), an ask waits for one step at most; and a change of one
//! address is planned alone, without a pass over the map.

#[path = "support/wait.rs"]
mod wait;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tenure::agent::map::OwnershipQuery;
use tenure::agent::memory::MemoryStore;
use tenure::agent::request::{ActionFilter, AgentHandle};
use tenure::agent::runner::{Observe, REQUEUE_SLICE, run};
use tenure::agent::{ProviderExecutor, Settings};
use tenure::exec::SimExecutor;
use tenure_core::log::EventKind;
use tenure_core::model::{Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec};
use tokio::sync::{mpsc, oneshot};
use wait::wait_until;

/// Addresses: three slices of the pools' walk (and of a's captured set).
const ADDRESSES: usize = 2 * REQUEUE_SLICE + 500;

/// The requeue interval: a pass begins this long after the last one ended.
const REQUEUE: Duration = Duration::from_millis(100);

/// Counts the loop's reconciles (whole, or a slice of a pass) and its steps.
#[derive(Default)]
struct Reconciles(AtomicU64, AtomicU64);

impl Observe for Reconciles {
    fn reconcile(&self, _duration: Duration) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    fn step(&self) {
        self.1.fetch_add(1, Ordering::Relaxed);
    }
}

fn node(name: &str, priority: i64) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        provider: "sim1".into(),
        placement_group: "g1".into(),
        priority,
        nic: format!("eni-{name}"),
        capacity: None,
    }
}

fn address(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a01_0000_u32 + u32::try_from(i).expect("small")))
}

fn pool(addresses: usize, approval: Approval) -> PoolSpec {
    PoolSpec {
        name: "edge".into(),
        addresses: (0..addresses).map(address).collect(),
        provider: "sim1".into(),
        placement_group: "g1".into(),
        members: vec!["a".into(), "b".into()],
        authority: Authority::None,
        approval,
        deprovision_hold_ms: 0,
        heartbeat_ttl_ms: 3_000,
        promotion_hold_ms: 0,
        epoch_locking: true,
        prefer_nodes: vec!["a".into()],
        preempt: false,
        auto_failover: true,
    }
}

/// An agent running nodes a and b over one pool of `addresses` on the simulated cloud (calls
/// answer at once), requeue every [`REQUEUE`]. Returns its handle, its observer, and what stops it.
fn start(
    addresses: usize,
) -> (AgentHandle, Arc<Reconciles>, oneshot::Sender<()>, tokio::task::JoinHandle<impl Sized>) {
    start_with(addresses, REQUEUE, Approval::Auto)
}

/// [`start`] with a requeue interval of `requeue` and the pool's `approval`.
fn start_with(
    addresses: usize,
    requeue: Duration,
    approval: Approval,
) -> (AgentHandle, Arc<Reconciles>, oneshot::Sender<()>, tokio::task::JoinHandle<impl Sized>) {
    let cloud = SimExecutor::new(ProviderKind::SimCloud);
    let mut executors = BTreeMap::new();
    executors.insert(
        "sim1".to_owned(),
        ProviderExecutor {
            executor: Arc::new(cloud),
            call_timeout: Duration::from_secs(5),
            inventory_interval: None,
            garp_refresh: None,
        },
    );
    let settings = Settings {
        peers: Vec::new(),
        nodes: vec![node("a", 10), node("b", 0)],
        providers: vec![ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }],
        executors,
        heartbeat_interval: Duration::from_millis(100),
        requeue_interval: requeue,
        journal_retention: 10_000,
        pools: Box::new(move || Ok(vec![pool(addresses, approval)])),
        vrrp: None,
    };
    let (handle, requests) = AgentHandle::channel();
    let (_reload_tx, reload) = mpsc::channel(1);
    let (stop, stopped) = oneshot::channel::<()>();
    let reconciles = Arc::new(Reconciles::default());
    let observer: Arc<dyn Observe> = reconciles.clone();
    let done = tokio::spawn(run(MemoryStore::new(), settings, requests, reload, observer, async move {
        let _reload_tx = _reload_tx;
        let _ = stopped.await;
    }));
    (handle, reconciles, stop, done)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_passes_of_several_slices_end_and_the_loop_rests_between_them() {
    let (handle, reconciles, stop, done) = start(ADDRESSES);
    wait_until(Duration::from_secs(120), "a captures every address", async || {
        handle.ownership().await.is_ok_and(|rows| {
            rows.len() == ADDRESSES
                && rows.iter().all(|r| r.owner.as_deref() == Some("a") && r.phase.as_deref() == Some("held"))
        })
    })
    .await;

    // Idle: only requeue passes reconcile. Each takes three slices on each node (a's captured set
    // is three slices too), then rests `REQUEUE`: over 2 s at most 20 passes, 6 slices each, and
    // a due pass or two. A pass that never ended would reconcile as fast as the loop turns.
    let window = Duration::from_secs(2);
    let before = reconciles.0.load(Ordering::Relaxed);
    let started = tokio::time::Instant::now();
    while started.elapsed() < window {
        assert!(handle.health().await.expect("answers").ok);
        assert_eq!(handle.ownership().await.expect("answers").len(), ADDRESSES);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let during = reconciles.0.load(Ordering::Relaxed) - before;
    let passes_max = u64::try_from(window.as_millis() / REQUEUE.as_millis()).expect("small");
    assert!(during >= 6, "at least one pass of 3 slices on each node in {window:?}: {during} reconciles");
    assert!(
        during <= passes_max * 6 + 10,
        "{during} reconciles in {window:?}: the loop does not rest between passes (at most {passes_max} passes of 6 slices)"
    );
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), done).await.expect("stops");
}

/// Addresses of the busy loop's capture: 4,096 calls, their results a few hundred at a time.
const CAPTURED: usize = 2_048;

/// Asks made while the capture keeps the loop busy.
const ASKS: usize = 40;

/// While call results are ready at every turn of the loop (a capture on a cloud that answers at
/// once), a page of the map is answered after the step under way when it was asked (the loop
/// answers waiting asks after every step, whatever branch it took): the median ask sees at most
/// one step begin. Without that, the loop's `select!` picks among its ready branches at random,
/// and an ask waited past the handle's 5 s timeout (a debug build).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_waits_for_one_step_at_most_while_results_keep_the_loop_busy() {
    let (handle, observer, stop, done) = start(CAPTURED);
    let page = || OwnershipQuery { filter: Default::default(), after: None, limit: Some(10) };
    // The first page answers once the start's first step (the whole initial plan) is over.
    handle.ownership_page(page()).await.expect("answers");
    let mut waits = Vec::new();
    let mut captured = false;
    while waits.len() < ASKS && !captured {
        let before = observer.1.load(Ordering::Relaxed);
        let answer = handle.ownership_page(page()).await.expect("answers");
        waits.push(observer.1.load(Ordering::Relaxed) - before);
        assert_eq!(answer.rows.len(), 10);
        // The last address is among the last captured (the plan and the journal go in the map's
        // order).
        let last = OwnershipQuery { after: Some(("edge".into(), address(CAPTURED - 2))), ..page() };
        let last = handle.ownership_page(last).await.expect("answers");
        captured = last.rows.iter().all(|r| r.phase.as_deref() == Some("held"));
    }
    assert!(waits.len() >= 2, "the capture kept the loop busy for {} asks only: {waits:?}", waits.len());
    // Per ask: one step may begin between reading the count and asking, one after the answer
    // before the count is read again, more when this thread is slow to run (a loaded machine):
    // the typical ask waits for one step, and none for the handle's timeout (every ask answered).
    let mut sorted = waits.clone();
    sorted.sort_unstable();
    assert!(sorted[sorted.len() / 2] <= 1, "steps begun while a page was asked: {waits:?}");
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), done).await.expect("stops");
}

/// A change of one address in a map of three slices (an undesire, then a desire) is planned by
/// itself: its release, then its new acquire, each executed without a pass over the map (a pass
/// takes three slices on each node; the requeue interval is longer than the test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_of_one_address_is_planned_without_a_pass() {
    let (handle, reconciles, stop, done) = start_with(ADDRESSES, Duration::from_secs(3_600), Approval::Auto);
    let changed = address(7);
    let phase = async |want: &str| {
        let query = OwnershipQuery { filter: Default::default(), after: None, limit: Some(10) };
        handle.ownership_page(query).await.is_ok_and(|page| {
            page.rows.iter().any(|r| r.address == changed.to_string() && r.phase.as_deref() == Some(want))
        })
    };
    wait_until(Duration::from_secs(120), "a captures every address", async || {
        handle.ownership().await.is_ok_and(|rows| {
            rows.len() == ADDRESSES
                && rows.iter().all(|r| r.owner.as_deref() == Some("a") && r.phase.as_deref() == Some("held"))
        })
    })
    .await;
    for (kind, want) in [
        (EventKind::Undesire { pool: "edge".into(), address: changed }, "released"),
        (EventKind::Desire { pool: "edge".into(), address: changed }, "held"),
    ] {
        let before = reconciles.0.load(Ordering::Relaxed);
        handle.submit(kind).await.expect("answers").expect("accepted");
        wait_until(Duration::from_secs(30), want, async || phase(want).await).await;
        // Each node plans the named position once, a once more after its release verb executed:
        // three or four plans of one position; a pass is three slices on each node.
        let during = reconciles.0.load(Ordering::Relaxed) - before;
        assert!(during <= 4, "{during} reconciles for one change of one address: a pass takes 6 slices");
    }
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), done).await.expect("stops");
}

/// An approval reaches an idle agent's calls at once: nothing is due to plan (an `approve` names
/// no position), but the entries waiting for it are promoted at the next step — not at the next
/// requeue pass (an hour here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_is_promoted_without_waiting_for_a_pass() {
    let (handle, observer, stop, done) = start_with(4, Duration::from_secs(3_600), Approval::Manual);
    let pending = ActionFilter { node: None, state: Some("pending".into()), pool: None };
    let first = async || {
        let rows = handle.actions(pending.clone()).await.ok()?;
        rows.into_iter()
            .find(|r| r.address == address(0).to_string() && r.verb == "assign-secondary-ip")
            .map(|r| r.idempotency_key)
    };
    wait_until(Duration::from_secs(30), "a's acquires wait for an approval", async || {
        first().await.is_some()
    })
    .await;
    let key = first().await.expect("a pending acquire");
    // Idle: three steps (heartbeats land every 100 ms) begin with no reconcile among them.
    wait_until(Duration::from_secs(30), "the loop plans nothing", async || {
        let (reconciles, steps) = (observer.0.load(Ordering::Relaxed), observer.1.load(Ordering::Relaxed));
        while observer.1.load(Ordering::Relaxed) < steps + 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        observer.0.load(Ordering::Relaxed) == reconciles
    })
    .await;
    handle
        .submit(EventKind::Approve { idempotency_key: key.clone() })
        .await
        .expect("answers")
        .expect("accepted");
    wait_until(Duration::from_secs(30), "the approved acquire executed", async || {
        let executed = ActionFilter { node: None, state: Some("executed".into()), pool: None };
        handle.actions(executed).await.is_ok_and(|rows| rows.iter().any(|r| r.idempotency_key == key))
    })
    .await;
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), done).await.expect("stops");
}
