//! Honest answers to `approve` and `drain`, from the real agent loop in-process over the
//! in-memory store and the simulated cloud: an approve of something the view does not know is
//! 404, of a key not pending approval now 409 saying why, and neither appends anything; a pending
//! key is approved and runs; every action imported `pending` is logged and counted in a gauge; a
//! drain that leaves addresses with no eligible member says how many.

#[path = "support/in_process.rs"]
mod in_process;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tenure::agent::memory::MemoryStore;
use tenure::agent::request::{ActionFilter, AgentHandle, SubmitError};
use tenure::agent::runner::RunSummary;
use tenure::agent::{AgentStore as _, ProviderExecutor, Settings};
use tenure::exec::SimExecutor;
use tenure::metrics::Metrics;
use tenure_core::log::EventKind;
use tenure_core::log_store::{Log as _, LogIndex};
use tenure_core::model::{Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec};
use tenure_core::rows::ActionRow;
use tokio::sync::oneshot;

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

fn pool(name: &str, addresses: &[&str], members: &[&str], approval: Approval) -> PoolSpec {
    PoolSpec {
        name: name.into(),
        addresses: addresses.iter().map(|a| a.parse().expect("literal")).collect(),
        provider: "sim1".into(),
        placement_group: "g1".into(),
        members: members.iter().map(|m| (*m).to_owned()).collect(),
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

/// An agent running nodes a (priority 10) and b, with `gated` (manual, 10.0.0.20-21),
/// `edge` (auto, 10.0.0.10) and `solo` (auto, 10.0.0.30, a its only member).
struct Running {
    handle: AgentHandle,
    store: MemoryStore,
    stop: oneshot::Sender<()>,
    done: tokio::task::JoinHandle<Result<RunSummary, tenure::agent::runner::AgentError>>,
}

fn start() -> Running {
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
    let pools = vec![
        pool("gated", &["10.0.0.20", "10.0.0.21"], &["a", "b"], Approval::Manual),
        pool("edge", &["10.0.0.10"], &["a", "b"], Approval::Auto),
        pool("solo", &["10.0.0.30"], &["a"], Approval::Auto),
    ];
    let settings = Settings {
        peers: Vec::new(),
        nodes: vec![node("a", 10), node("b", 0)],
        providers: vec![ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }],
        executors,
        heartbeat_interval: Duration::from_millis(50),
        requeue_interval: Duration::from_millis(200),
        journal_retention: 10_000,
        pools: Box::new(move || Ok(pools.clone())),
        vrrp: None,
    };
    let store = MemoryStore::new();
    let (handle, stop, done) = in_process::spawn_agent(store.clone(), settings);
    Running { handle, store, stop, done }
}

impl Running {
    async fn rows(&self, node: &str, state: &str) -> Vec<ActionRow> {
        let filter = ActionFilter { node: Some(node.into()), state: Some(state.into()), pool: None };
        self.handle.actions(filter).await.expect("answers")
    }

    async fn keys(&self, node: &str, state: &str) -> Vec<String> {
        self.rows(node, state).await.into_iter().map(|r| r.idempotency_key).collect()
    }

    /// Waits until `node` has exactly `count` entries in `state`; their keys.
    async fn wait_keys(&self, node: &str, state: &str, count: usize) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + WAIT_MAX;
        loop {
            let keys = self.keys(node, state).await;
            if keys.len() == count {
                return keys;
            }
            assert!(tokio::time::Instant::now() < deadline, "{node}: {count} {state} entries, not {keys:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn approve(&self, key: &str) -> Result<u64, SubmitError> {
        let event = EventKind::Approve { idempotency_key: key.to_owned() };
        self.handle.submit(event).await.expect("answers").map(|receipt| receipt.index)
    }

    /// How many `approve` events the store's log holds.
    fn approvals_in_log(&self) -> usize {
        let log = self.store.log();
        let mut count = 0;
        let mut next = LogIndex::FIRST;
        loop {
            let records = log.read_from(next, 1024).expect("the memory log reads");
            let Some(last) = records.last() else { return count };
            next = last.index.next();
            count += records.iter().filter(|r| matches!(r.event.kind, EventKind::Approve { .. })).count();
        }
    }

    async fn stop(self) {
        self.stop.send(()).expect("running");
        tokio::time::timeout(WAIT_MAX, self.done).await.expect("stops").expect("joins").expect("ran");
    }
}

fn not_found(result: Result<u64, SubmitError>) -> String {
    match result {
        Err(SubmitError::NotFound(message)) => message,
        other => panic!("expected 404 (NotFound), got {other:?}"),
    }
}

fn refused(result: Result<u64, SubmitError>) -> String {
    match result {
        Err(SubmitError::Refused(message)) => message,
        other => panic!("expected 409 (Refused), got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_refuses_what_is_not_pending_now_and_appends_nothing() {
    let agent = start();
    // a owns both gated addresses: two verbs each, pending.
    let pending = agent.wait_keys("a", "pending", 4).await;
    let assign_20 = "gated/10.0.0.20/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1";
    assert!(pending.iter().any(|k| k == assign_20), "{pending:?}");

    // 404: names the view does not know.
    for (key, says) in [
        (
            "nosuchpool/10.9.9.9/assign-secondary-ip/zz/sim9/eni-q/owner:1:epoch:1",
            "pool \"nosuchpool\" is not applied",
        ),
        ("gated/10.9.9.9/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1", "does not list 10.9.9.9"),
        (
            "gated/10.0.0.20/assign-secondary-ip/zz/sim1/eni-a/owner:1:epoch:1",
            "node \"zz\" is not in the registry",
        ),
        ("gated/10.0.0.20/assign-secondary-ip/a/sim9/eni-a/owner:1:epoch:1", "provider \"sim9\" is not pool"),
        (
            "gated/10.0.0.20/assign-secondary-ip/a/sim1/eni-q/owner:1:epoch:1",
            "NIC \"eni-q\" is not node \"a\"'s",
        ),
    ] {
        let message = not_found(agent.approve(key).await);
        assert!(message.contains(says), "{key}: {message}");
    }
    // 409: not pending approval now, saying why.
    let auto =
        refused(agent.approve("edge/10.0.0.10/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1").await);
    assert_eq!(auto, "not pending approval: pool \"edge\" approves automatically (approval: auto)");
    let future =
        refused(agent.approve("gated/10.0.0.20/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:5").await);
    assert!(future.contains("above what the log has issued"), "{future}");
    let not_holder =
        refused(agent.approve("gated/10.0.0.20/assign-secondary-ip/b/sim1/eni-b/owner:1:epoch:1").await);
    assert!(not_holder.contains("stale (holder-mismatch)"), "{not_holder}");
    assert_eq!(agent.approvals_in_log(), 0, "nothing appended for a refused approve");

    // A pending key is approved, runs, and is then refused as what it is.
    for key in pending.iter().filter(|k| k.starts_with("gated/10.0.0.20/")) {
        agent.approve(key).await.expect("pending: approved");
    }
    assert_eq!(agent.approvals_in_log(), 2);
    let executed = agent.wait_keys("a", "executed", 2 + 2 * 2).await;
    assert!(executed.iter().any(|k| k == assign_20), "{executed:?}");
    assert_eq!(refused(agent.approve(assign_20).await), "not pending approval: already executed");

    // a drained: b owns gated now; a's pending acquires of 10.0.0.21 are stale and skipped.
    agent.handle.submit(EventKind::Drain { node: "a".into() }).await.expect("answers").expect("drained");
    let assign_21 = "gated/10.0.0.21/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1";
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    while !agent.keys("a", "skipped").await.iter().any(|k| k == assign_21) {
        assert!(tokio::time::Instant::now() < deadline, "a's pending acquire of 10.0.0.21 was not swept");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        refused(agent.approve(assign_21).await),
        "not pending approval: skipped (stale-epoch): it never runs"
    );
    // b's acquires wait for approval under the new tokens; a stale spelling of them is refused.
    let waiting_b = agent.wait_keys("b", "pending", 4).await;
    let stale_b = "gated/10.0.0.21/assign-secondary-ip/b/sim1/eni-b/owner:1:epoch:1";
    assert_eq!(
        refused(agent.approve(stale_b).await),
        "not pending approval: stale (stale-epoch): its captureEpoch is 1, its line's is now 2"
    );
    assert_eq!(agent.approvals_in_log(), 2, "still nothing more appended");
    for key in &waiting_b {
        agent.approve(key).await.expect("b's pending keys are approved");
    }
    agent.stop().await;
}

/// Every formatted log line since the subscriber was installed.
static LOGS: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct Captured;

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        LOGS.lock().unwrap_or_else(PoisonError::into_inner).extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_waiting_for_approval_are_logged_and_counted() {
    // The only test of this binary that installs a subscriber (the loop runs on other threads).
    tracing_subscriber::fmt().with_writer(|| Captured).with_ansi(false).init();
    let agent = start();
    let pending = agent.wait_keys("a", "pending", 4).await;
    let logs = || String::from_utf8_lossy(&LOGS.lock().unwrap_or_else(PoisonError::into_inner)).into_owned();
    for key in &pending {
        let line = logs()
            .lines()
            .find(|l| l.contains("waiting for approval") && l.contains(key.as_str()))
            .map(str::to_owned);
        let line = line.unwrap_or_else(|| panic!("{key} logged as waiting:\n{}", logs()));
        assert!(line.contains(" INFO "), "at INFO: {line}");
    }
    let scrape = Metrics::new().encode(Some(agent.handle.metrics().await.expect("answers")));
    assert!(scrape.contains("\ntenure_actions_waiting_for_approval 4\n"), "{scrape}");
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_says_how_many_addresses_it_left_with_no_eligible_member() {
    let agent = start();
    // a owns everything (solo's only member; edge and gated by priority).
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    loop {
        let rows = agent.handle.ownership().await.expect("answers");
        if rows.len() == 4 && rows.iter().all(|r| r.owner.as_deref() == Some("a")) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "a never owned everything: {rows:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let drain = |node: &str| EventKind::Drain { node: node.into() };
    // b drained first: it held nothing, nothing loses its holder.
    let receipt = agent.handle.submit(drain("b")).await.expect("answers").expect("drained");
    assert_eq!(receipt.addresses_with_no_eligible_member, Some(0));
    // a drained: only b's drain stands in the way of edge and gated, and solo has no one else.
    let receipt = agent.handle.submit(drain("a")).await.expect("answers").expect("drained");
    assert_eq!(receipt.addresses_with_no_eligible_member, Some(4), "{receipt:?}");
    let json = serde_json::to_value(&receipt).expect("serializes");
    assert_eq!(json["addressesWithNoEligibleMember"], 4);
    assert_eq!(json["index"], receipt.index, "the index stays where it was");
    // Other events say nothing of it.
    let receipt =
        agent.handle.submit(EventKind::Undrain { node: "b".into() }).await.expect("answers").expect("ok");
    assert_eq!(receipt.addresses_with_no_eligible_member, None);
    assert_eq!(
        serde_json::to_value(&receipt).expect("serializes"),
        serde_json::json!({"index": receipt.index})
    );
    // The same command again: appended, and said to change nothing (the first undrain of b and
    // drain of a changed something, so their receipts said nothing of it).
    let again =
        agent.handle.submit(EventKind::Undrain { node: "b".into() }).await.expect("answers").expect("ok");
    assert!(again.index > receipt.index, "appended all the same: {again:?}");
    assert_eq!(
        serde_json::to_value(&again).expect("serializes"),
        serde_json::json!({"index": again.index, "unchanged": true})
    );
    let again = agent.handle.submit(drain("a")).await.expect("answers").expect("drained");
    assert!(again.unchanged, "{again:?}");
    agent.stop().await;
}
