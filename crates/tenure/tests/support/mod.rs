//! A **test-double agent loop** and the real API router in front of it, on 127.0.0.1:0.
//!
//! The double answers [`Request`]s from a small in-memory state: a [`MemoryLog`] that every
//! accepted event is appended to (its length is what the tests watch: a refused request must not
//! change it), and a [`Replay`] (the real core: federation, node drivers, journals) that applies
//! the same events and reconciles every node after each, so ownership and actions move as the
//! agent's would. It runs on its own thread and reads requests with `blocking_recv`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tenure::agent::answers::{lost_their_desired_holder, with_desired_holder};
use tenure::agent::request::{
    ActionFilter, AgentHandle, Health, HealthBoard, MetricsSnapshot, Reads, Receipt, Request, SubmitError,
};
use tenure::api::{ApiToken, router, serve};
use tenure::metrics::Metrics;
use tenure_core::federation::Federation;
use tenure_core::federation::history::History;
use tenure_core::journal::MemoryJournalStore;
use tenure_core::journal_index::JournalIndex;
use tenure_core::log::{Event, EventKind};
use tenure_core::log_store::{Log as _, MemoryLog};
use tenure_core::scenario::{LocalStep, Scenario, parse_scenario};
use tenure_sim::replay::{ActionRow, Replay};
use tokio::sync::oneshot;

/// Two nodes on one simulated cloud; `edge` is automatic, `gated` needs approvals.
pub const SCENARIO: &str = r#"
nodes:
  - {name: a, provider: sim1, placementGroup: g1, priority: 10, nic: eni-a}
  - {name: b, provider: sim1, placementGroup: g1, nic: eni-b}
providers:
  - {name: sim1, kind: sim-cloud}
pools:
  - apiVersion: tenure.dev/v1alpha1
    kind: MobilityPool
    metadata: {name: edge}
    spec: {addresses: [10.0.0.10, 10.0.0.11], provider: sim1, placementGroup: g1, members: [a, b]}
  - apiVersion: tenure.dev/v1alpha1
    kind: MobilityPool
    metadata: {name: gated}
    spec: {addresses: [10.0.0.20], provider: sim1, placementGroup: g1, members: [a, b], approval: manual}
"#;

/// The token the tests' server is given.
pub const TOKEN: &str = "test-token-0123456789";

/// How the double behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Answers every request.
    Answering,
    /// Keeps the channel open and never reads it (a loop that hangs).
    Silent,
    /// Drops the channel at once (a loop that stopped).
    Stopped,
}

/// What the tests can see and change of the double.
#[derive(Clone, Debug, Default)]
pub struct DoubleState {
    /// Records in the double's log.
    pub log_len: Arc<AtomicU64>,
    /// What `health` says; `false` makes it "cannot act" ([`DoubleState::set_healthy`]).
    healthy: Arc<AtomicBool>,
    /// Stream time of the double's view (ms).
    stream_time_ms: Arc<AtomicU64>,
    /// Where the double posts its health, as the agent loop does.
    board: HealthBoard,
}

impl DoubleState {
    /// Records in the double's log now.
    pub fn log_len(&self) -> u64 {
        self.log_len.load(Ordering::SeqCst)
    }

    /// Makes `health` say the double can act, or not, at once.
    pub fn set_healthy(&self, ok: bool) {
        self.healthy.store(ok, Ordering::SeqCst);
        self.post();
    }

    fn health(&self) -> Health {
        let ok = self.healthy.load(Ordering::SeqCst);
        let index = self.log_len();
        Health {
            ok,
            reason: (!ok).then(|| "cannot read the log head (test double)".to_owned()),
            nodes: vec!["a".to_owned(), "b".to_owned()],
            log_index: index,
            log_head: index,
            stream_time_ms: self.stream_time_ms.load(Ordering::SeqCst),
        }
    }

    /// Posts the double's health on the board `GET /v1/health` reads.
    fn post(&self) {
        self.board.post(self.health());
    }
}

/// The test double's log and core.
struct TestDoubleAgentLoop {
    scenario: Scenario,
    replay: Replay,
    log: MemoryLog,
    /// The real core's history of the double's log (what the agent keeps).
    history: History,
    at_ms: u64,
    state: DoubleState,
    /// The nodes' journals as readers see them (`GET /v1/actions`).
    journals: Vec<JournalIndex>,
}

impl TestDoubleAgentLoop {
    fn new(state: DoubleState) -> Self {
        let scenario = parse_scenario(SCENARIO).expect("the test scenario is valid");
        let replay = Replay::new(&scenario, false);
        let history = History::new(Federation::new(&scenario.nodes, &scenario.providers));
        let journals = scenario.nodes.iter().map(|node| JournalIndex::new(&node.name)).collect();
        let mut double = Self { scenario, replay, log: MemoryLog::new(), history, at_ms: 0, state, journals };
        for pool in double.scenario.pools.clone() {
            double.append(EventKind::PoolApplied { spec: Box::new(pool) });
        }
        for node in ["a", "b"] {
            double.append(EventKind::Heartbeat { node: node.to_owned() });
        }
        double
    }

    /// Appends an event to the log and the core, then reconciles every node; returns its index.
    fn append(&mut self, kind: EventKind) -> u64 {
        let event = Event { at_ms: self.at_ms, kind };
        let index = self.log.append(&event).expect("the memory log takes the event");
        self.history.apply(index, &event);
        let index = index.get();
        // An event the core rejects stays in the log, as it would in the agent's (counted there).
        let _ = self.replay.append(event);
        for node in ["a", "b"] {
            self.replay.local(self.at_ms, node, LocalStep::Reconcile);
        }
        self.state.stream_time_ms.store(self.at_ms, Ordering::SeqCst);
        self.at_ms += 1;
        self.state.log_len.store(index, Ordering::SeqCst);
        self.state.post();
        self.post_reads();
        index
    }

    /// What readers see, posted as the agent loop posts it after every follow: the map (a small
    /// one: read whole from a copy of the double's head) and the nodes' journals.
    fn post_reads(&mut self) {
        let reads = self.reads();
        self.state.board.post_reads(reads, true);
    }

    fn reads(&mut self) -> Reads {
        let mut map = tenure_core::map_index::MapIndex::new();
        map.follow(&mut self.replay.head().clone());
        for journal in &mut self.journals {
            let driver = self.replay.driver_mut(journal.snapshot().node()).expect("a node of the scenario");
            journal.follow(driver.engine_mut());
        }
        Reads {
            map: map.snapshot(),
            journals: self.journals.iter().map(JournalIndex::snapshot).collect(),
            history: self.history.snapshot(),
            nodes: tenure::agent::status::node_statuses(self.replay.head(), &["a", "b"]),
            stream_time_ms: self.replay.head().stream_time_ms(),
        }
    }

    fn submit(&mut self, event: EventKind) -> Result<Receipt, SubmitError> {
        let unchanged = tenure::agent::answers::changes_nothing(self.replay.head(), &event);
        let mut receipt = self.submit_event(event)?;
        receipt.unchanged = unchanged;
        Ok(receipt)
    }

    fn submit_event(&mut self, event: EventKind) -> Result<Receipt, SubmitError> {
        let known_node = |node: &str| self.scenario.nodes.iter().any(|n| n.name == node);
        match &event {
            EventKind::Drain { node } | EventKind::Undrain { node } if !known_node(node) => {
                return Err(SubmitError::NotFound(format!("node \"{node}\" not found")));
            }
            EventKind::Desire { pool, address } | EventKind::Undesire { pool, address } => {
                let Some(spec) = self.scenario.pools.iter().find(|p| &p.name == pool) else {
                    return Err(SubmitError::NotFound(format!("pool \"{pool}\" not found")));
                };
                if !spec.addresses.contains(address) {
                    return Err(SubmitError::NotFound(format!(
                        "address {address} is not in pool \"{pool}\""
                    )));
                }
            }
            // The agent's own check, against the double's head (its journals are the replay's,
            // which the check does not see: as for a holder another agent runs).
            EventKind::Approve { .. } => {
                tenure_core::agent::check_submit::<MemoryJournalStore>(self.replay.head(), &[], &event)?
            }
            EventKind::Drain { .. } => {
                let before = with_desired_holder(self.replay.head());
                let mut receipt = Receipt::at(self.append(event));
                receipt.addresses_with_no_eligible_member =
                    Some(lost_their_desired_holder(&before, self.replay.head()));
                return Ok(receipt);
            }
            EventKind::Undrain { .. } => {}
            other => return Err(SubmitError::Refused(format!("the API does not append {other:?}"))),
        }
        Ok(Receipt::at(self.append(event)))
    }

    fn actions(&mut self, filter: &ActionFilter) -> Vec<ActionRow> {
        tenure::agent::answers::actions(&self.reads().journals, filter)
    }

    fn health(&self) -> Health {
        self.state.health()
    }

    fn metrics(&self) -> MetricsSnapshot {
        let report = self.replay.report();
        let mut actions: BTreeMap<(String, String), u64> = BTreeMap::new();
        let mut fenced: BTreeMap<String, u64> = BTreeMap::new();
        for a in &report.actions {
            *actions.entry((a.verb.clone(), a.state.clone())).or_default() += 1;
            if let Some(reason) = &a.reason {
                *fenced.entry(reason.clone()).or_default() += 1;
            }
        }
        MetricsSnapshot {
            ownership: Some(report.ownership),
            addresses: Vec::new(),
            address_series_omitted: 0,
            actions: actions.into_iter().collect(),
            fenced: fenced.into_iter().collect(),
            rejected_events: Vec::new(),
            log_index: self.state.log_len(),
            log_lag: 0,
            healthy: self.state.healthy.load(Ordering::SeqCst),
            drift_recaptures: 0,
            inventory_reads: Vec::new(),
            garp_refreshes: Vec::new(),
            stamps_capped: 0,
            head_unconfirmed: 0,
            calls_cancelled: 0,
            provider_throttled: Vec::new(),
        }
    }

    fn answer(&mut self, request: Request) {
        // A caller that gave up is no error of the double's.
        match request {
            Request::Metrics { reply } => drop(reply.send(self.metrics())),
            Request::Submit { submit, reply } => drop(reply.send(self.submit(submit.event))),
            // Not on the HTTP API: the double never receives one.
            Request::Control { reply, .. } => drop(reply.send(Err("not in the test double".to_owned()))),
            Request::Backup { reply } => drop(reply.send(Ok(b"backup of the test double".to_vec()))),
        }
    }
}

/// The real router in front of a test double, served on 127.0.0.1:0.
pub struct Server {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The listening address.
    pub address: SocketAddr,
    /// The double's observable state.
    pub state: DoubleState,
    /// Kept so a [`Mode::Silent`] channel stays open.
    _silent: Option<tenure::agent::request::Requests>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

/// Starts a double in `mode` and the API in front of it (with `token`, and a handle that waits
/// `timeout` for each answer), on the current tokio runtime.
pub async fn start(mode: Mode, token: Option<&str>, timeout: Duration) -> Server {
    let (handle, receiver) = AgentHandle::channel();
    let handle = handle.with_timeout(timeout);
    let state = DoubleState { board: receiver.board(), ..DoubleState::default() };
    state.healthy.store(true, Ordering::SeqCst);
    let mut silent = None;
    match mode {
        Mode::Answering => {
            let double_state = state.clone();
            let (ready, built) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut double = TestDoubleAgentLoop::new(double_state);
                ready.send(()).expect("the starter waits");
                let mut receiver = receiver;
                // The loop's turns post its health (reads are answered only while it turns).
                let turning = Arc::new(AtomicBool::new(true));
                let turns = {
                    let (turning, state) = (Arc::clone(&turning), double.state.clone());
                    std::thread::spawn(move || {
                        while turning.load(Ordering::SeqCst) {
                            state.post();
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    })
                };
                while let Some(request) = receiver.blocking_recv() {
                    double.answer(request);
                }
                turning.store(false, Ordering::SeqCst);
                let _ = turns.join();
            });
            built.recv().expect("the double starts");
        }
        Mode::Silent => silent = Some(receiver),
        Mode::Stopped => drop(receiver),
    }
    let token = token.map(|t| ApiToken::new(t.to_owned()).expect("a valid test token"));
    let app = router(handle, Arc::new(Metrics::new()), token);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let address = listener.local_addr().expect("bound");
    let (shutdown, stop) = oneshot::channel::<()>();
    tokio::spawn(serve(listener, app, async move {
        let _ = stop.await;
    }));
    Server { base: format!("http://{address}"), address, state, _silent: silent, shutdown: Some(shutdown) }
}
