//! The agent loop in-process over the in-memory store double and the simulated cloud: it
//! captures, fails over on drain, answers requests, refuses bad submits, and stops cleanly; a real
//! exec hook script never sees an action the gate fenced right before the call; a call task that
//! panics does not leave its address stuck.

#[path = "support/wait.rs"]
mod wait;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tenure::agent::memory::MemoryStore;
use tenure::agent::request::{ActionFilter, AgentHandle, SubmitError};
use tenure::agent::runner::{NoObserver, RunSummary, run};
use tenure::agent::{ProviderExecutor, Settings};
use tenure::exec::SimExecutor;
use tenure_core::log::EventKind;
use tenure_core::model::{Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec};
use tokio::sync::{mpsc, oneshot};
use wait::wait_until;

/// Most time any condition below may take; the loop itself is much faster.
const WAIT_MAX: Duration = Duration::from_secs(10);

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

fn pool(approval: Approval) -> PoolSpec {
    PoolSpec {
        name: "edge".into(),
        addresses: vec!["10.0.0.10".parse().expect("literal"), "10.0.0.11".parse().expect("literal")],
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

struct Running {
    handle: AgentHandle,
    cloud: SimExecutor,
    stop: oneshot::Sender<()>,
    done: Done,
}

/// The settings of an agent running a (priority 10) and b on `cloud`, over the pool `pool(approval)`,
/// planning again every `requeue_interval`.
fn settings(cloud: &SimExecutor, approval: Approval, requeue_interval: Duration) -> Settings {
    let mut executors = BTreeMap::new();
    executors.insert(
        "sim1".to_owned(),
        ProviderExecutor {
            executor: Arc::new(cloud.clone()),
            call_timeout: Duration::from_secs(5),
            inventory_interval: None,
            garp_refresh: None,
        },
    );
    Settings {
        peers: Vec::new(),
        nodes: vec![node("a", 10), node("b", 0)],
        providers: vec![ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }],
        executors,
        heartbeat_interval: Duration::from_millis(50),
        requeue_interval,
        journal_retention: 10_000,
        pools: Box::new(move || Ok(vec![pool(approval)])),
        vrrp: None,
    }
}

fn start(approval: Approval) -> Running {
    let cloud = SimExecutor::new(ProviderKind::SimCloud);
    let (handle, stop, done) = spawn_agent(settings(&cloud, approval, Duration::from_millis(200)));
    Running { handle, cloud, stop, done }
}

type Done = tokio::task::JoinHandle<Result<RunSummary, tenure::agent::runner::AgentError>>;

/// Runs the loop over a fresh in-memory store: its handle, its stop switch and the run.
fn spawn_agent(settings: Settings) -> (AgentHandle, oneshot::Sender<()>, Done) {
    let (handle, requests) = AgentHandle::channel();
    let (_reload_tx, reload) = mpsc::channel(1);
    let (stop, stopped) = oneshot::channel::<()>();
    let done =
        tokio::spawn(run(MemoryStore::new(), settings, requests, reload, Arc::new(NoObserver), async move {
            let _ = stopped.await;
        }));
    (handle, stop, done)
}

/// An agent of `members` (a, priority 10, then b) over one address of `edge`, its provider
/// `sim1` of `kind` run by `executor`; the handle, the stop switch and the run.
fn start_one_address(
    members: &[&str],
    kind: ProviderKind,
    executor: Arc<dyn tenure::exec::Executor>,
) -> (AgentHandle, oneshot::Sender<()>, Done) {
    let mut executors = BTreeMap::new();
    executors.insert(
        "sim1".to_owned(),
        ProviderExecutor {
            executor,
            call_timeout: Duration::from_secs(5),
            inventory_interval: None,
            garp_refresh: None,
        },
    );
    let mut spec = pool(Approval::Auto);
    spec.addresses.truncate(1);
    spec.members = members.iter().map(|m| (*m).to_owned()).collect();
    let settings = Settings {
        peers: Vec::new(),
        nodes: members.iter().zip([10, 0]).map(|(name, priority)| node(name, priority)).collect(),
        providers: vec![ProviderSpec { name: "sim1".into(), kind }],
        executors,
        heartbeat_interval: Duration::from_millis(50),
        requeue_interval: Duration::from_millis(100),
        journal_retention: 10_000,
        pools: Box::new(move || Ok(vec![spec.clone()])),
        vrrp: None,
    };
    spawn_agent(settings)
}

fn holders(cloud: &SimExecutor) -> BTreeMap<String, Vec<String>> {
    cloud.with_provider(|p| {
        p.holdings().iter().map(|(a, nics)| (a.to_string(), nics.iter().cloned().collect())).collect()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_captures_fails_over_on_drain_and_stops_cleanly() {
    let agent = start(Approval::Auto);
    let cloud = agent.cloud.clone();
    wait_until(WAIT_MAX, "both addresses on a's NIC", async || {
        holders(&cloud).values().filter(|nics| **nics == vec!["eni-a".to_owned()]).count() == 2
    })
    .await;
    let rows = agent.handle.ownership().await.expect("answers");
    assert!(rows.iter().all(|r| r.owner.as_deref() == Some("a") && r.ownership_epoch == 1), "{rows:?}");
    let health = agent.handle.health().await.expect("answers");
    assert!(health.ok, "{health:?}");
    let executed = |node: &'static str| {
        let handle = agent.handle.clone();
        async move {
            let filter = ActionFilter { state: Some("executed".into()), node: Some(node.into()), pool: None };
            handle.actions(filter).await.expect("answers")
        }
    };
    // Every acquire verb of a answered before the drain: a call still in flight then would be
    // cancelled by it (its action fenced), and a would not have executed it.
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    while executed("a").await.len() != 4 {
        assert!(tokio::time::Instant::now() < deadline, "a: {:?}", executed("a").await);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let receipt =
        agent.handle.submit(EventKind::Drain { node: "a".into() }).await.expect("answers").expect("appended");
    assert!(receipt.index > 0);
    wait_until(WAIT_MAX, "both addresses moved to b's NIC alone", async || {
        holders(&cloud).values().filter(|nics| **nics == vec!["eni-b".to_owned()]).count() == 2
    })
    .await;
    let rows = agent.handle.ownership().await.expect("answers");
    assert!(rows.iter().all(|r| r.owner.as_deref() == Some("b") && r.ownership_epoch == 2), "{rows:?}");
    // The moves are done when b's acquires and a's releases have all answered.
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    while executed("b").await.len() != 4 || executed("a").await.len() != 8 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "b: {:?}\na: {:?}",
            executed("b").await,
            executed("a").await
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Bad submits change nothing.
    let unknown = agent.handle.submit(EventKind::Drain { node: "zz".into() }).await.expect("answers");
    assert!(matches!(unknown, Err(SubmitError::NotFound(_))), "{unknown:?}");
    let not_listed = agent
        .handle
        .submit(EventKind::Undesire { pool: "edge".into(), address: "10.9.9.9".parse().expect("literal") })
        .await
        .expect("answers");
    assert!(matches!(not_listed, Err(SubmitError::NotFound(_))), "{not_listed:?}");

    agent.stop.send(()).expect("running");
    let summary =
        tokio::time::timeout(WAIT_MAX, agent.done).await.expect("stops").expect("joins").expect("ran");
    assert_eq!(
        summary.calls, 12,
        "a acquires (2 verbs × 2), b acquires (2 × 2), a releases (2 × 2): {summary:?}"
    );
}

/// A **test double** of a store with faults switched on demand: writes that fail (a full disk),
/// a log head that cannot be confirmed (etcd unreachable for linearizable reads while the local
/// view still reads).
#[derive(Clone, Debug, Default)]
struct FaultyStore {
    inner: MemoryStore,
    failing: Arc<std::sync::atomic::AtomicBool>,
    unconfirmed: Arc<std::sync::atomic::AtomicBool>,
    /// Says it retries appends that fail as unavailable (as the fleet store on etcd does).
    retries: bool,
}

impl tenure::agent::AgentStore for FaultyStore {
    type Journal = <MemoryStore as tenure::agent::AgentStore>::Journal;
    type Log = <MemoryStore as tenure::agent::AgentStore>::Log;
    fn log(&self) -> Self::Log {
        self.inner.log()
    }
    fn journal(&self, node: &str) -> Self::Journal {
        self.inner.journal(node)
    }
    async fn append_batch(
        &self,
        events: &[tenure_core::log::Event],
    ) -> Result<Vec<tenure_core::log_store::LogIndex>, tenure_core::log_store::LogError> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(tenure_core::log_store::LogError::Unavailable { reason: "disk full".into() });
        }
        self.inner.append_batch(events).await
    }
    fn backup(&self) -> Result<Vec<u8>, tenure::store::StoreError> {
        self.inner.backup()
    }
    fn record_highest_token(&self, token: u64) {
        self.inner.record_highest_token(token);
    }
    fn flush_identity(&self) -> Result<(), tenure::store::StoreError> {
        self.inner.flush_identity()
    }
    async fn confirm_head(&self, _bound: Duration) -> Result<(), tenure::agent::HeadUnconfirmed> {
        if self.unconfirmed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(tenure::agent::HeadUnconfirmed::Behind("etcd unreachable".into()));
        }
        Ok(())
    }
    fn capabilities(&self) -> tenure::agent::StoreCapabilities {
        tenure::agent::StoreCapabilities { retries_appends: self.retries, ..self.inner.capabilities() }
    }
}

/// A **test double** of a store whose log shows what this process appended only once the agent
/// awaited [`AgentStore::read_own_appends`](tenure::agent::AgentStore::read_own_appends): the
/// fleet store's watch, as late as that contract lets it be. Its appends are numbered at once (in
/// order, heartbeats too) and land in the log, in that order, at the next such await.
#[derive(Clone, Debug, Default)]
struct LateStore {
    inner: MemoryStore,
    unseen: Arc<std::sync::Mutex<Vec<tenure_core::log::Event>>>,
}

impl tenure::agent::AgentStore for LateStore {
    type Journal = <MemoryStore as tenure::agent::AgentStore>::Journal;
    type Log = <MemoryStore as tenure::agent::AgentStore>::Log;
    fn log(&self) -> Self::Log {
        self.inner.log()
    }
    fn journal(&self, node: &str) -> Self::Journal {
        self.inner.journal(node)
    }
    async fn append_batch(
        &self,
        events: &[tenure_core::log::Event],
    ) -> Result<Vec<tenure_core::log_store::LogIndex>, tenure_core::log_store::LogError> {
        use tenure_core::log_store::{Log as _, LogIndex};
        for event in events {
            tenure_core::log_store::encode_record(event)?;
        }
        let mut unseen = self.unseen.lock().expect("not poisoned");
        let head = self.inner.log().head()?.map_or(0, LogIndex::get);
        let first = head + unseen.len() as u64 + 1;
        unseen.extend_from_slice(events);
        Ok((first..first + events.len() as u64).map(|i| LogIndex::from_stored(i).expect("from 1")).collect())
    }
    async fn read_own_appends(&self) {
        let unseen = std::mem::take(&mut *self.unseen.lock().expect("not poisoned"));
        self.inner.append_batch(&unseen).await.expect("they were numbered as this log numbers them");
    }
    fn backup(&self) -> Result<Vec<u8>, tenure::store::StoreError> {
        self.inner.backup()
    }
    fn record_highest_token(&self, token: u64) {
        self.inner.record_highest_token(token);
    }
    fn flush_identity(&self) -> Result<(), tenure::store::StoreError> {
        self.inner.flush_identity()
    }
}

/// Counts the loop's plans (slices of planning of a node).
#[derive(Default)]
struct Plans(std::sync::atomic::AtomicU64);

impl tenure::agent::runner::Observe for Plans {
    fn reconcile(&self, _duration: Duration) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Read-your-writes is the loop's: it awaits `read_own_appends` before it follows the log, so a
/// store whose log shows this process's appends late (the fleet store's watch) still shows the
/// loop its own results before it plans again. Were it not awaited, the pool files' events would
/// never be seen (nothing captured) and every result would be re-reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_reads_its_own_appends_from_a_store_that_shows_them_late() {
    use tenure::agent::AgentStore as _;
    use tenure_core::log_store::{LOG_READ_BATCH_MAX, Log as _, LogIndex};
    let store = LateStore::default();
    let cloud = SimExecutor::new(ProviderKind::SimCloud);
    let settings = settings(&cloud, Approval::Auto, Duration::from_millis(100));
    let (handle, requests) = AgentHandle::channel();
    let (_reload_tx, reload) = mpsc::channel(1);
    let (stop, stopped) = oneshot::channel::<()>();
    let plans = Arc::new(Plans::default());
    let done = tokio::spawn(run(store.clone(), settings, requests, reload, plans.clone(), async move {
        let _ = stopped.await;
    }));
    wait_until(WAIT_MAX, "a holds both addresses at the provider", async || {
        holders(&cloud).values().filter(|nics| nics.as_slice() == ["eni-a"]).count() == 2
    })
    .await;
    // Several requeue passes (ten plans of a node, five of each), each planning again from what
    // the loop has read: counted, not slept for, so that a slow machine cannot make it pass
    // without them.
    let before = plans.0.load(std::sync::atomic::Ordering::Relaxed);
    wait_until(WAIT_MAX, "ten more plans", async || {
        plans.0.load(std::sync::atomic::Ordering::Relaxed) >= before + 10
    })
    .await;
    let _ = stop.send(());
    tokio::time::timeout(WAIT_MAX, done).await.expect("stops").expect("joins").expect("ran");
    let log = store.inner.log();
    let mut results: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut from = LogIndex::FIRST;
    loop {
        let page = log.read_from(from, LOG_READ_BATCH_MAX).expect("reads");
        let Some(last) = page.last() else { break };
        from = last.index.next();
        for record in page {
            if let EventKind::ActionResult { idempotency_key, detail, .. } = record.event.kind {
                results.entry(idempotency_key).or_default().push(detail);
            }
        }
    }
    assert_eq!(results.len(), 4, "a's acquires of two addresses, two verbs each: {results:?}");
    assert!(results.values().all(|details| details.len() == 1), "each result appended once: {results:?}");
    drop(handle);
}

/// Node `a` alone, no pool, on `store`: its handle once healthy, its stop and its run.
async fn spawn_on_faulty(store: FaultyStore) -> (AgentHandle, oneshot::Sender<()>, Done) {
    let settings = Settings {
        peers: Vec::new(),
        nodes: vec![node("a", 10)],
        providers: vec![ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }],
        executors: BTreeMap::new(),
        heartbeat_interval: Duration::from_millis(20),
        requeue_interval: Duration::from_millis(50),
        journal_retention: 10_000,
        pools: Box::new(|| Ok(vec![])),
        vrrp: None,
    };
    let (handle, requests) = AgentHandle::channel();
    let (_reload_tx, reload) = mpsc::channel(1);
    let (stop, stopped) = oneshot::channel::<()>();
    let done = tokio::spawn(run(store, settings, requests, reload, Arc::new(NoObserver), async move {
        let _ = stopped.await;
    }));
    wait_until(WAIT_MAX, "healthy once started", async || handle.health().await.is_ok_and(|h| h.ok)).await;
    (handle, stop, done)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_fails_makes_health_503_and_keeps_it() {
    let store = FaultyStore::default();
    let failing = Arc::clone(&store.failing);
    let (handle, stop, done) = spawn_on_faulty(store).await;
    failing.store(true, std::sync::atomic::Ordering::SeqCst);
    // The next heartbeat cannot be appended; the log is still readable, health stays 503.
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    loop {
        let health = handle.health().await.expect("answers");
        if !health.ok {
            assert!(health.reason.as_deref().is_some_and(|r| r.contains("disk full")), "{health:?}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "health never went 503");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The disk recovers, but a store that failed once is not trusted again without a restart:
    // health stays 503 and the loop appends nothing more — not even heartbeats, so that the
    // other nodes take over what this one can no longer act on.
    let at_failure = handle.health().await.expect("answers").log_head;
    failing.store(false, std::sync::atomic::Ordering::SeqCst);
    for _ in 0..15 {
        // 15 heartbeat intervals of 20 ms, answering health all along.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let health = handle.health().await.expect("answers");
        assert!(!health.ok, "sticky: {health:?}");
        assert_eq!(health.log_head, at_failure, "a failed store takes nothing more: {health:?}");
    }
    let _ = stop.send(());
    let _ = tokio::time::timeout(WAIT_MAX, done).await.expect("stops");
}

/// On a store that retries appends (etcd), an operator's event that cannot be appended for a
/// moment is refused to its caller (503) and leaves health alone: once the log is back, an idle
/// agent is healthy, without waiting for the loop to append something of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_event_on_a_store_that_retries_leaves_health_alone() {
    let store = FaultyStore { retries: true, ..FaultyStore::default() };
    let failing = Arc::clone(&store.failing);
    let (handle, stop, done) = spawn_on_faulty(store).await;
    failing.store(true, std::sync::atomic::Ordering::SeqCst);
    let refused = handle.submit(EventKind::Undrain { node: "a".into() }).await.expect("answers");
    assert!(
        matches!(refused, Err(SubmitError::Unavailable(ref r)) if r.contains("disk full")),
        "{refused:?}"
    );
    failing.store(false, std::sync::atomic::Ordering::SeqCst);
    wait_until(WAIT_MAX, "healthy again once the log takes appends", async || {
        handle.health().await.is_ok_and(|h| h.ok)
    })
    .await;
    let _ = stop.send(());
    let _ = tokio::time::timeout(WAIT_MAX, done).await.expect("stops");
}

/// The gate right before the call, with a real exec hook: `a` plans and approves a fresh acquire,
/// freezes before calling it (a GC pause), `b` seizes the address, and `a` wakes up and tries
/// what it approved. The gate against the head fences it: the script never sees its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_approved_before_a_freeze_is_fenced_at_the_call_and_never_reaches_the_hook() {
    use std::os::unix::fs::PermissionsExt as _;
    use tenure::agent::request::Control;

    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("agent_loop-call-gate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let calls = dir.join("calls.log");
    let hook = dir.join("hook.sh");
    std::fs::write(&hook, format!("#!/bin/sh\necho \"$TENURE_IDEMPOTENCY_KEY\" >> '{}'\n", calls.display()))
        .expect("script");
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let exec = tenure::exec::ExecHook::new(vec![hook.display().to_string()], Duration::from_secs(5));
    let (handle, stop, done) = start_one_address(&["a", "b"], ProviderKind::Exec, Arc::new(exec));
    let rows = |node: &'static str, state: &'static str| {
        let handle = handle.clone();
        async move {
            let filter = ActionFilter { node: Some(node.into()), state: Some(state.into()), pool: None };
            handle.actions(filter).await.expect("answers")
        }
    };
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    // One call per acquire (SPEC 7's exec verbs: acquire, release).
    while rows("a", "executed").await.len() != 1 {
        if tokio::time::Instant::now() >= deadline {
            let all = handle.actions(ActionFilter { node: None, state: None, pool: None }).await;
            panic!("a's acquire did not run: {all:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let address = "10.0.0.10".parse().expect("literal");
    let events = vec![
        EventKind::Undesire { pool: "edge".into(), address },
        EventKind::Desire { pool: "edge".into(), address },
    ];
    let frozen = handle
        .control(Control::FreezeAfterReconcile { node: "a".into(), events })
        .await
        .expect("answers")
        .expect("frozen");
    let approved: Vec<String> = rows("a", "approved").await.into_iter().map(|r| r.idempotency_key).collect();
    assert_eq!(approved.len(), 1, "a approved a fresh acquire and froze before calling it ({frozen})");
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    while rows("b", "executed").await.len() != 1 {
        assert!(tokio::time::Instant::now() < deadline, "b did not seize the address while a was frozen");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let woke = handle.control(Control::Resume { node: "a".into() }).await.expect("answers").expect("woke");
    let skipped: Vec<String> = rows("a", "skipped").await.into_iter().map(|r| r.idempotency_key).collect();
    let log = std::fs::read_to_string(&calls).expect("the hook ran");
    for key in &approved {
        assert!(!log.contains(key.as_str()), "a zombie's action reached the hook: {key}\n{log}");
        assert!(skipped.contains(key), "the zombie's {key} is fenced ({woke}): {skipped:?}");
    }
    let lines: Vec<&str> = log.lines().collect();
    let unique: std::collections::BTreeSet<&str> = lines.iter().copied().collect();
    assert_eq!(unique.len(), lines.len(), "every key reached the hook once at most:\n{log}");
    assert_eq!(lines.iter().filter(|l| l.contains("/b/sim1/eni-b/")).count(), 1, "b's acquire:\n{log}");
    // After waking, a may release what it holds (its current release passes the gate).
    assert!(lines.iter().filter(|l| l.contains("/a/sim1/eni-a/owner:1:")).count() == 1, "{log}");
    stop.send(()).expect("running");
    tokio::time::timeout(WAIT_MAX, done).await.expect("stops").expect("joins").expect("ran");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A **test double** of an executor with a bug: its first call panics, later ones succeed.
struct PanicsOnce {
    calls: std::sync::atomic::AtomicU64,
}

impl tenure::exec::Executor for PanicsOnce {
    fn execute<'a>(
        &'a self,
        _action: &'a tenure_core::model::StampedAction,
        _deadline: tokio::time::Instant,
    ) -> tenure::exec::ExecuteFuture<'a> {
        Box::pin(async move {
            let call = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            assert!(call > 0, "an executor's bug: the first call panics");
            tenure::exec::ExecutionOutcome::Executed { detail: "ok".into() }
        })
    }
}

/// A call whose task panicked leaves flight as `unknown` (journaled failed, retried through the
/// gate at the next requeue), so its address is not stuck busy until a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_task_that_panics_is_recorded_and_its_address_retried() {
    let executor = Arc::new(PanicsOnce { calls: std::sync::atomic::AtomicU64::new(0) });
    let (handle, stop, done) = start_one_address(&["a"], ProviderKind::SimCloud, executor.clone());
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    loop {
        let filter = ActionFilter { node: Some("a".into()), state: Some("executed".into()), pool: None };
        if handle.actions(filter).await.expect("answers").len() == 2 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the address stayed stuck after the panic");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        executor.calls.load(std::sync::atomic::Ordering::SeqCst) >= 3,
        "the panicked verb was called again"
    );
    assert!(handle.health().await.expect("answers").ok);
    stop.send(()).expect("running");
    tokio::time::timeout(WAIT_MAX, done).await.expect("stops").expect("joins").expect("ran");
}

/// `edge` (a, b) over 40,000 scattered IPv6 addresses: valid, but its `pool-applied` record is
/// far over the 1 MiB one log record holds.
fn pool_too_large_for_one_record() -> PoolSpec {
    let mut spec = pool(Approval::Auto);
    // Every other address, with no group that compresses: no two merge into a CIDR block.
    spec.addresses = (0..40_000u32)
        .map(|i| {
            format!("2001:db8:1111:2222:3333:4444:{:x}:{:x}", 0x1000 + i / 1000, 0x1000 + (i % 1000) * 2)
                .parse()
                .expect("an IPv6 address")
        })
        .collect();
    spec.addresses.sort();
    spec
}

/// A pool reload whose record the store will not hold is a refused request, not a failed store:
/// health stays 200, heartbeats go on, and the good file applies after it (the binary test in
/// `agent_process.rs` covers `load_pools`, which refuses such a file before any append).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_reload_too_large_for_one_record_is_refused_and_the_agent_serves_on() {
    let cloud = SimExecutor::new(ProviderKind::SimCloud);
    let mut executors = BTreeMap::new();
    executors.insert(
        "sim1".to_owned(),
        ProviderExecutor {
            executor: Arc::new(cloud.clone()),
            call_timeout: Duration::from_secs(5),
            inventory_interval: None,
            garp_refresh: None,
        },
    );
    // 0: the pool as started; 1: the one too large; 2: the first with one more address.
    let wanted = Arc::new(std::sync::atomic::AtomicU8::new(0));
    let which = Arc::clone(&wanted);
    let settings = Settings {
        peers: Vec::new(),
        nodes: vec![node("a", 10), node("b", 0)],
        providers: vec![ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }],
        executors,
        heartbeat_interval: Duration::from_millis(50),
        requeue_interval: Duration::from_millis(200),
        journal_retention: 10_000,
        pools: Box::new(move || {
            Ok(vec![match which.load(std::sync::atomic::Ordering::SeqCst) {
                0 => pool(Approval::Auto),
                1 => pool_too_large_for_one_record(),
                _ => {
                    let mut grown = pool(Approval::Auto);
                    grown.addresses.push("10.0.0.12".parse().expect("literal"));
                    grown
                }
            }])
        }),
        vrrp: None,
    };
    let (handle, requests) = AgentHandle::channel();
    let (reload_tx, reload) = mpsc::channel(1);
    let (stop, stopped) = oneshot::channel::<()>();
    let done =
        tokio::spawn(run(MemoryStore::new(), settings, requests, reload, Arc::new(NoObserver), async move {
            let _ = stopped.await;
        }));
    wait_until(WAIT_MAX, "both addresses on a's NIC", async || holders(&cloud).len() == 2).await;

    wanted.store(1, std::sync::atomic::Ordering::SeqCst);
    reload_tx.send(()).await.expect("running");
    // The loop took the reload (it runs it at once) when the channel has room again; then
    // heartbeats go on landing.
    wait_until(WAIT_MAX, "the loop took the reload", async || reload_tx.capacity() == 1).await;
    let head = handle.health().await.expect("answers").log_head;
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    loop {
        let health = handle.health().await.expect("answers");
        assert!(health.ok, "a refused reload is no failed store: {health:?}");
        if health.log_head >= head + 10 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "heartbeats stopped: {health:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rows = handle.ownership().await.expect("answers");
    assert_eq!(rows.len(), 2, "the refused pool changed nothing: {rows:?}");

    wanted.store(2, std::sync::atomic::Ordering::SeqCst);
    reload_tx.send(()).await.expect("running");
    wait_until(WAIT_MAX, "the good file applied after the refused one", async || holders(&cloud).len() == 3)
        .await;
    assert!(handle.health().await.expect("answers").ok);
    stop.send(()).expect("running");
    tokio::time::timeout(WAIT_MAX, done).await.expect("stops").expect("joins").expect("ran");
}

/// A **test double** of an executor that counts its calls and executes each.
#[derive(Default)]
struct Counting {
    calls: std::sync::atomic::AtomicU64,
}

impl tenure::exec::Executor for Counting {
    fn execute<'a>(
        &'a self,
        _action: &'a tenure_core::model::StampedAction,
        _deadline: tokio::time::Instant,
    ) -> tenure::exec::ExecuteFuture<'a> {
        Box::pin(async move {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tenure::exec::ExecutionOutcome::Executed { detail: "ok".into() }
        })
    }
}

/// A node that wakes up (`Control::Resume`) calls what it approved before it froze only at a
/// confirmed log head, like every other call: while the head cannot be confirmed, nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_node_calls_nothing_while_the_log_head_cannot_be_confirmed() {
    use tenure::agent::request::Control;

    let counting = Arc::new(Counting::default());
    let mut executors = BTreeMap::new();
    executors.insert(
        "sim1".to_owned(),
        ProviderExecutor {
            executor: Arc::clone(&counting) as Arc<dyn tenure::exec::Executor>,
            call_timeout: Duration::from_secs(5),
            inventory_interval: None,
            garp_refresh: None,
        },
    );
    let mut spec = pool(Approval::Auto);
    spec.addresses.truncate(1);
    spec.members = vec!["a".into()];
    let settings = Settings {
        peers: Vec::new(),
        nodes: vec![node("a", 10)],
        providers: vec![ProviderSpec { name: "sim1".into(), kind: ProviderKind::Exec }],
        executors,
        heartbeat_interval: Duration::from_millis(50),
        requeue_interval: Duration::from_millis(100),
        journal_retention: 10_000,
        pools: Box::new(move || Ok(vec![spec.clone()])),
        vrrp: None,
    };
    let store = FaultyStore::default();
    let unconfirmed = Arc::clone(&store.unconfirmed);
    let (handle, requests) = AgentHandle::channel();
    let (_reload_tx, reload) = mpsc::channel(1);
    let (stop, stopped) = oneshot::channel::<()>();
    let done = tokio::spawn(run(store, settings, requests, reload, Arc::new(NoObserver), async move {
        let _ = stopped.await;
    }));
    let calls = || counting.calls.load(std::sync::atomic::Ordering::SeqCst);
    wait_until(WAIT_MAX, "a's acquire ran", async || calls() == 1).await;

    // a approves a fresh acquire and freezes before calling it; then etcd becomes unreachable.
    let address = "10.0.0.10".parse().expect("literal");
    let events = vec![
        EventKind::Undesire { pool: "edge".into(), address },
        EventKind::Desire { pool: "edge".into(), address },
    ];
    handle
        .control(Control::FreezeAfterReconcile { node: "a".into(), events })
        .await
        .expect("answers")
        .expect("frozen");
    let filter = || ActionFilter { node: Some("a".into()), state: Some("approved".into()), pool: None };
    assert_eq!(handle.actions(filter()).await.expect("answers").len(), 1, "approved, not called");
    unconfirmed.store(true, std::sync::atomic::Ordering::SeqCst);
    let woke = handle.control(Control::Resume { node: "a".into() }).await.expect("answers").expect("woke");
    assert!(woke.contains("cannot be confirmed"), "{woke}");
    // Several requeue intervals: nothing is called while the head stays unconfirmed.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(calls(), 1, "a call started at an unconfirmed head ({woke})");
    }
    // The head confirmed again: the approved acquire, still current, is called.
    unconfirmed.store(false, std::sync::atomic::Ordering::SeqCst);
    wait_until(WAIT_MAX, "the approved acquire ran once the head was confirmed", async || calls() >= 2).await;
    stop.send(()).expect("running");
    tokio::time::timeout(WAIT_MAX, done).await.expect("stops").expect("joins").expect("ran");
}
