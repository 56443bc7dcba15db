//! A provider call in flight whose action the view has since fenced (SPEC 9): the loop drops its
//! future, so that a slow (throttled, retried) assign of the old holder never lands after a drain
//! moved the address and the new holder took it. Driven on tokio's paused clock: the executor's
//! delay, the heartbeats and the waits below are all virtual time, so the run is deterministic
//! and takes milliseconds.

#[path = "support/in_process.rs"]
mod in_process;
#[path = "support/wait.rs"]
mod wait;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure::agent::memory::MemoryStore;
use tenure::agent::request::{ActionFilter, AgentHandle};
use tenure::agent::runner::RunSummary;
use tenure::agent::{ProviderExecutor, Settings};
use tenure::exec::{ExecuteFuture, Executor, InventoryFuture, InventoryRequest, SimExecutor};
use tenure_core::log::EventKind;
use tenure_core::model::{
    Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec, StampedAction, Verb,
};
use tokio::sync::oneshot;
use tokio::time::Instant;
use wait::wait_until;

/// Most virtual time any condition below may take.
const WAIT_MAX: Duration = Duration::from_secs(30);

/// How long the old holder's assign takes (a throttled call retried inside the SDK): far longer
/// than the drain and the new holder's assign, shorter than the call's deadline.
const SLOW_ASSIGN: Duration = Duration::from_secs(3);

/// The call deadline (`actionTimeout`) of the provider.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

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

fn pool() -> PoolSpec {
    PoolSpec {
        name: "edge".into(),
        addresses: vec!["10.0.0.10".parse().expect("literal")],
        provider: "sim1".into(),
        placement_group: "g1".into(),
        members: vec!["a".into(), "b".into()],
        authority: Authority::None,
        approval: Approval::Auto,
        deprovision_hold_ms: 0,
        heartbeat_ttl_ms: 6_000,
        promotion_hold_ms: 0,
        epoch_locking: true,
        prefer_nodes: vec!["a".into()],
        preempt: false,
        auto_failover: true,
    }
}

/// A **test double** of a provider: the simulated cloud behind a call that, for node `a`'s
/// assigns, first sleeps [`SLOW_ASSIGN`] (a throttled call). It records every action it hands
/// to the simulated cloud, which is what the provider saw; and counts inventory reads.
struct SlowForA {
    cloud: SimExecutor,
    slow_started: AtomicUsize,
    reached: Mutex<Vec<String>>,
    inventory_reads: AtomicUsize,
}

impl Executor for SlowForA {
    fn execute<'a>(&'a self, action: &'a StampedAction, deadline: Instant) -> ExecuteFuture<'a> {
        Box::pin(async move {
            if &*action.holder == "a" && action.verb == Verb::AssignSecondaryIp {
                self.slow_started.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(SLOW_ASSIGN).await;
            }
            self.reached.lock().expect("not poisoned").push(action.idempotency_key().to_string());
            self.cloud.execute(action, deadline).await
        })
    }

    fn inventory<'a>(&'a self, request: &'a InventoryRequest) -> Option<InventoryFuture<'a>> {
        self.inventory_reads.fetch_add(1, Ordering::SeqCst);
        self.cloud.inventory(request)
    }
}

type Done = tokio::task::JoinHandle<Result<RunSummary, tenure::agent::runner::AgentError>>;

/// Runs the loop over `store` with those of nodes a (preferred) and b named in `nodes` (the other
/// is a peer, run elsewhere), provider `sim1` run by `executor`.
fn spawn_agent(
    store: MemoryStore,
    executor: Arc<SlowForA>,
    nodes: &[&str],
    inventory_interval: Option<Duration>,
) -> (AgentHandle, oneshot::Sender<()>, Done) {
    let mut executors = BTreeMap::new();
    executors.insert(
        "sim1".to_owned(),
        ProviderExecutor { executor, call_timeout: CALL_TIMEOUT, inventory_interval, garp_refresh: None },
    );
    let (nodes, peers): (Vec<NodeSpec>, Vec<NodeSpec>) =
        [node("a", 10), node("b", 0)].into_iter().partition(|n| nodes.contains(&n.name.as_str()));
    let settings = Settings {
        peers,
        nodes,
        providers: vec![ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }],
        executors,
        heartbeat_interval: Duration::from_millis(200),
        requeue_interval: Duration::from_millis(500),
        journal_retention: 10_000,
        pools: Box::new(|| Ok(vec![pool()])),
        vrrp: None,
    };
    in_process::spawn_agent(store, settings)
}

fn slow_for_a() -> Arc<SlowForA> {
    Arc::new(SlowForA {
        cloud: SimExecutor::new(ProviderKind::SimCloud),
        slow_started: AtomicUsize::new(0),
        reached: Mutex::new(Vec::new()),
        inventory_reads: AtomicUsize::new(0),
    })
}

fn wall_clock_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970");
    u64::try_from(since.as_millis()).expect("fits")
}

fn holders(cloud: &SimExecutor) -> BTreeMap<String, Vec<String>> {
    cloud.with_provider(|p| {
        p.holdings().iter().map(|(a, nics)| (a.to_string(), nics.iter().cloned().collect())).collect()
    })
}

async fn rows(handle: &AgentHandle, node: &str) -> Vec<tenure_core::rows::ActionRow> {
    let filter = ActionFilter { node: Some(node.into()), state: None, pool: None };
    handle.actions(filter).await.expect("answers")
}

/// a's assign sleeps in the provider; a drain moves the address to b, whose assign lands. The
/// view now fences a's assign (a is not the desired holder): its call is cancelled, the provider
/// never sees it, and the address stays on b's NIC. Before the fix the assign landed after b's
/// (the address back on a's NIC), a then released it, and no NIC held it.
#[tokio::test(start_paused = true)]
async fn a_call_whose_action_the_view_fenced_is_cancelled_and_never_reaches_the_provider() {
    let executor = slow_for_a();
    let (handle, stop, done) = spawn_agent(MemoryStore::new(), Arc::clone(&executor), &["a", "b"], None);
    wait_until(WAIT_MAX, "a's assign is under way", async || {
        executor.slow_started.load(Ordering::SeqCst) == 1
    })
    .await;
    let started = Instant::now();
    let a_assign: Vec<String> = rows(&handle, "a")
        .await
        .into_iter()
        .filter(|r| r.verb == "assign-secondary-ip")
        .map(|r| r.idempotency_key)
        .collect();
    assert_eq!(a_assign.len(), 1, "{a_assign:?}");
    handle.submit(EventKind::Drain { node: "a".into() }).await.expect("answers").expect("appended");
    wait_until(WAIT_MAX, "b holds the address", async || {
        holders(&executor.cloud).get("10.0.0.10") == Some(&vec!["eni-b".into()])
    })
    .await;
    assert!(Instant::now() < started + SLOW_ASSIGN, "b took the address while a's assign slept");
    // Past the moment a's assign would have landed, and past its deadline.
    tokio::time::sleep(CALL_TIMEOUT * 2).await;
    let reached = executor.reached.lock().expect("not poisoned").clone();
    assert!(
        !reached.contains(&a_assign[0]),
        "the stale assign reached the provider after the drain: {reached:?}"
    );
    assert_eq!(
        holders(&executor.cloud).get("10.0.0.10"),
        Some(&vec!["eni-b".to_owned()]),
        "the address stays on b's NIC alone"
    );
    // A cancelled call's outcome is unknown: the log is told it failed, and a — which may hold
    // the address for all it knows (a hook killed after it acted) and will never retry a stale
    // entry — counts it as held and releases it, an idempotent call on its own NIC.
    wait_until(WAIT_MAX, "a's release of the acquire in doubt is executed", async || {
        executor.reached.lock().expect("not poisoned").iter().any(|k| k.contains("/unassign-secondary-ip/a/"))
    })
    .await;
    let a_rows = rows(&handle, "a").await;
    let cancelled = a_rows.iter().find(|r| r.idempotency_key == a_assign[0]).expect("journaled");
    assert_eq!(cancelled.state, "executed", "counted as held ({a_rows:?})");
    assert!(
        a_rows.iter().any(|r| r.verb == "unassign-secondary-ip" && r.state == "executed"),
        "a released what it may have taken: {a_rows:?}"
    );
    assert_eq!(
        holders(&executor.cloud).get("10.0.0.10"),
        Some(&vec!["eni-b".to_owned()]),
        "a's release of its own NIC leaves b's holding alone"
    );
    assert!(handle.health().await.expect("answers").ok);
    stop.send(()).expect("running");
    tokio::time::timeout(WAIT_MAX, done).await.expect("stops").expect("joins").expect("ran");
}

/// Another agent's call escaped cancellation (it was cut off from the log, or finished first): a's
/// assign of the old epoch landed after b took the address and confirmed, and a reports it. This
/// agent runs b, reads inventory every hour (a, alive, is the reader: b reads only when asked at
/// once), and on seeing a's late acquire in the log reads it at once: the read shows the address on a's NIC, drift repair re-captures, and b takes it back —
/// within a second of virtual time, not an inventory interval.
#[tokio::test(start_paused = true)]
async fn an_acquire_reported_after_the_hand_over_reads_inventory_at_once_and_drift_repair_moves_it_back() {
    use tenure::agent::AgentStore as _;
    let executor = slow_for_a();
    let store = MemoryStore::new();
    // a is alive before the pool is applied: it owns the address (captureEpoch 1).
    let heartbeat =
        tenure_core::log::Event { at_ms: wall_clock_ms(), kind: EventKind::Heartbeat { node: "a".into() } };
    store.append_batch(&[heartbeat]).await.expect("memory");
    let hour = Duration::from_secs(3_600);
    let (handle, stop, done) = spawn_agent(store.clone(), Arc::clone(&executor), &["b"], Some(hour));
    let map = handle.ownership().await.expect("answers");
    assert_eq!(map.iter().map(|r| r.owner.as_deref()).collect::<Vec<_>>(), vec![Some("a")], "{map:?}");
    // a, alive in the log and the smaller name, is the provider's inventory reader
    // (`Federation::inventory_reader`): b's agent does not read at its interval.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(executor.inventory_reads.load(Ordering::SeqCst), 0, "a is the reader, not b");

    handle.submit(EventKind::Drain { node: "a".into() }).await.expect("answers").expect("appended");
    wait_until(WAIT_MAX, "b holds the address", async || {
        holders(&executor.cloud).get("10.0.0.10") == Some(&vec!["eni-b".into()])
    })
    .await;
    // b's acquire is confirmed in the log (its result appended).
    let deadline = Instant::now() + WAIT_MAX;
    while rows(&handle, "b").await.iter().filter(|r| r.state == "executed").count() < 2 {
        assert!(Instant::now() < deadline, "b's verbs did not execute");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(executor.inventory_reads.load(Ordering::SeqCst), 0, "an ordinary hand-over reads nothing");

    // a's old assign lands now (moving the address, as AWS's AllowReassignment does) and a reports it.
    let a_assign = StampedAction::new(
        "edge",
        "10.0.0.10".parse().expect("literal"),
        Verb::AssignSecondaryIp,
        "a",
        "sim1",
        "eni-a",
        tenure_core::model::CaptureDomain::new("sim1", "g1"),
        tenure_core::model::CaptureEpoch::from_stored(1),
        tenure_core::model::OwnershipEpoch::from_stored(1),
    );
    let landed = executor.cloud.execute(&a_assign, Instant::now() + CALL_TIMEOUT).await;
    assert!(matches!(landed, tenure::exec::ExecutionOutcome::Executed { .. }), "{landed:?}");
    assert_eq!(holders(&executor.cloud).get("10.0.0.10"), Some(&vec!["eni-a".to_owned()]));
    let stream_time_ms = handle.health().await.expect("answers").stream_time_ms;
    let result = tenure_core::log::Event {
        at_ms: wall_clock_ms().max(stream_time_ms + 1),
        kind: EventKind::ActionResult {
            node: "a".into(),
            idempotency_key: a_assign.idempotency_key().to_string(),
            outcome: tenure_core::log::ActionOutcome::Executed,
            detail: "assigned late".into(),
        },
    };
    store.append_batch(&[result]).await.expect("memory");
    let reported = Instant::now();
    // Read at once by the agent that saw it, though a is the provider's reader.
    wait_until(WAIT_MAX, "an inventory read right after a's late acquire", async || {
        executor.inventory_reads.load(Ordering::SeqCst) >= 1
    })
    .await;
    wait_until(WAIT_MAX, "drift repair moved the address back to b", async || {
        holders(&executor.cloud).get("10.0.0.10") == Some(&vec!["eni-b".into()])
    })
    .await;
    assert!(Instant::now() < reported + Duration::from_secs(2), "read at once, not at the hour");
    let map = handle.ownership().await.expect("answers");
    assert_eq!(map[0].owner.as_deref(), Some("b"));
    assert_eq!(map[0].capture_epoch, 3, "one re-capture (epoch 2 → 3): {map:?}");
    stop.send(()).expect("running");
    tokio::time::timeout(WAIT_MAX, done).await.expect("stops").expect("joins").expect("ran");
}
