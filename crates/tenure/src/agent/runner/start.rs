//! How the loop starts: the agent's state built from its settings and store (every node's
//! driver over the registry, the snapshot restored, the log followed), and the run's beginning
//! (pools seeded, keepalived settled, the heartbeat thread started).

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tenure_core::agent::AgentCore;
use tenure_core::driver::{DriverOptions, NodeDriver};
use tenure_core::federation::history::History;
use tenure_core::federation::{Federation, registrations};
use tenure_core::log::EventKind;
use tenure_core::model::{NodeSpec, PoolSpec, ProviderSpec};
use tenure_core::node::NodeEngine;
use tenure_core::retry::RetryBackoff;
use tokio::task::JoinSet;
use tokio::time::{Duration, Instant};
use tracing::{error, info, warn};

use super::super::answers::Counters;
use super::super::request::HealthBoard;
use super::super::{AgentStore, Settings};
use super::appends::AppendError;
use super::inventory::InventorySchedule;
use super::{
    Agent, AgentError, CLOCK_VOTE_WINDOW, Observe, RunSummary, clock, heartbeat, refresh, slow, stale,
};
use tenure_core::pool_changes::seed_pools;

/// Where the start is, said in health until the agent's first step is done ([`Agent::starting`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Starting {
    /// Appending its registration, first heartbeats and pool files.
    Appending,
    /// Waiting for the log: what failed and when it is tried again, as health says it.
    Waiting(String),
    /// Its first step (a pass over every address it serves).
    FirstStep,
}

impl Starting {
    /// What health says.
    pub(super) fn reason(&self) -> String {
        match self {
            Self::Appending => super::requests::APPENDING.to_owned(),
            Self::Waiting(reason) => reason.clone(),
            Self::FirstStep => super::requests::FIRST_STEP.to_owned(),
        }
    }

    /// Whether the start's appends are under way or waited for (their failures are said by the
    /// start's wait, [`Agent::retry_start`], not by each append).
    pub(super) fn appending(&self) -> bool {
        matches!(self, Self::Appending | Self::Waiting(_))
    }
}

/// The projection of the empty log an agent follows: its nodes and its peers (the whole fleet),
/// its providers, drift repair on. `tenure replay BACKUP` projects a backup's log over the same.
#[must_use]
pub fn registry(nodes: &[NodeSpec], peers: &[NodeSpec], providers: &[ProviderSpec]) -> Federation {
    let fleet: Vec<NodeSpec> = nodes.iter().chain(peers).cloned().collect();
    Federation::new(&fleet, providers).with_drift_repair(true)
}

/// The projection of the empty log of a fleet that began with `genesis` (the fleet key's text,
/// [`tenure_core::fleet_spec::fleet_text`]): its nodes and the providers they name, and nothing
/// of this agent's config — every agent of the fleet projects the log over the same registry
/// (a provider joins it with the first `node-registered` naming it; this config's providers are
/// checked against the log after the load, [`registrations`]).
fn genesis_registry(genesis: &str) -> Result<Federation, AgentError> {
    let (nodes, kinds) = tenure_core::fleet_spec::parse_fleet_text(genesis).map_err(|e| {
        AgentError::Log(format!("the fleet key in etcd (`<prefix>/fleet`) does not read as a fleet: {e}"))
    })?;
    Ok(Federation::new(&nodes, &kinds).with_drift_repair(true))
}

/// The retry backoff of the agent's nodes: from the requeue interval (the retry interval before
/// there was a backoff), doubling per failed attempt, capped ([`RetryBackoff::from_base`]).
fn retry_backoff(requeue_interval: Duration) -> RetryBackoff {
    RetryBackoff::from_base(u64::try_from(requeue_interval.as_millis()).unwrap_or(u64::MAX))
}

/// `duration` in whole milliseconds.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl<S: AgentStore> Agent<S> {
    pub(super) fn start(
        store: S,
        settings: Settings,
        observer: Arc<dyn Observe>,
    ) -> Result<Self, AgentError> {
        let registry = match store.genesis() {
            Some(text) => genesis_registry(&text)?,
            None => registry(&settings.nodes, &settings.peers, &settings.providers),
        };
        let mut drivers = Vec::with_capacity(settings.nodes.len());
        for node in &settings.nodes {
            let engine = NodeEngine::open(&node.name, store.journal(&node.name))
                .map_err(|e| AgentError::Journal { node: node.name.clone(), reason: e.to_string() })?
                .with_retention(settings.journal_retention)
                .with_retry_backoff(retry_backoff(settings.requeue_interval));
            drivers.push(NodeDriver::new(engine, registry.clone(), DriverOptions { report_results: true }));
        }
        let capabilities = store.capabilities();
        let mut agent = Self {
            history: History::new(registry),
            map_index: tenure_core::map_index::MapIndex::new(),
            journal_indexes: Vec::new(),
            in_step: false,
            board: super::super::request::HealthBoard::default(),
            log: store.log(),
            store,
            core: AgentCore::new(drivers),
            executors: settings.executors,
            pools: settings.pools,
            observer,
            calls: JoinSet::new(),
            call_tasks: HashMap::new(),
            call_aborts: stale::CallAborts::default(),
            head_confirmed_at: None,
            queued: Vec::new(),
            queued_stamped: Vec::new(),
            inventories: JoinSet::new(),
            inventory: InventorySchedule::default(),
            recaptures_seen: 0,
            counters: Counters::default(),
            unhealthy: None,
            append_failure: None,
            starting: None,
            vrrp_settled: false,
            unappended: None,
            heartbeat_failure: None,
            head_failure: None,
            snapshot_events: 0,
            capabilities,
            beat: Arc::new(heartbeat::Beat::new(
                clock::Stamper::new(clock::PeerClocks::new(
                    millis(settings.heartbeat_interval / 2),
                    millis(CLOCK_VOTE_WINDOW),
                )),
                capabilities.retries_appends,
            )),
            beater: None,
            slow: slow::Slow::from_env().map_err(AgentError::Setting)?,
            own_nodes: settings.nodes.iter().map(|n| n.name.clone()).collect(),
            shutting_down: false,
            identity_dirty: true,
            summary: RunSummary::default(),
            vrrp: None,
            vrrp_state: None,
            local: None,
            refresh: refresh::RefreshSchedule::default(),
            heartbeat_interval: settings.heartbeat_interval,
            requeue_interval: settings.requeue_interval,
            requeue_pass: false,
            registering: Vec::new(),
        };
        agent.restore_snapshot().map_err(AgentError::Log)?;
        if let Err(reason) = agent.follow_log() {
            // etcd gone between the store's open and this read (its watch broke): the start
            // waits for it like for its appends (`begin` follows again before it seeds the
            // pools); a store that does not retry has failed for good.
            if !agent.capabilities.retries_appends {
                return Err(AgentError::Log(reason));
            }
            warn!(%reason, "the start waits for the log");
            agent.starting = Some(Starting::Waiting(format!("following the log: {reason}; trying again")));
        }
        // Health is not ok until the first step is done: the start's appends come first.
        agent.starting.get_or_insert(Starting::Appending);
        agent.registering =
            registrations(agent.view(), &settings.nodes, &settings.peers, &settings.providers)
                .map_err(AgentError::Membership)?;
        agent.snapshot_events = agent.view().events_applied();
        let own = agent.own_nodes.clone();
        let mut stamper = agent.beat.stamper();
        let until = stamper.mono_ms(Instant::now() + agent.heartbeat_interval * 3);
        stamper.stamper.peers.baseline(agent.core.drivers()[0].view(), &own, until);
        drop(stamper);
        agent.recaptures_seen = agent.view().recaptures();
        if let Some(follow) = settings.vrrp {
            agent.vrrp = Some(follow.reports);
            agent.local = Some(agent.start_withdrawals(follow.authority));
        }
        let now = Instant::now();
        for (provider, executor) in &agent.executors {
            if let Some(interval) = executor.inventory_interval {
                agent.inventory.due.insert(provider.clone(), (interval, now));
            }
        }
        agent.refresh = refresh::RefreshSchedule::of(&agent.executors, now);
        Ok(agent)
    }

    /// The start of a run: keepalived's state settled, the first heartbeats appended, the pool
    /// files seeded into the log (on a shared log, the log's versions are in force), and the
    /// heartbeat thread started — before the first step (a full pass over every address).
    ///
    /// A store that retries appends (etcd) out of reach does not stop the start: the append that
    /// failed is made again every heartbeat interval, each time from the log as it is then (the
    /// head confirmed and followed first, so one that landed unanswered is seen and not appended
    /// again), with health failing and saying so meanwhile (`board`). A blip of etcd or of the
    /// router's link while it starts must not stop the process: it would answer nothing until
    /// restarted by hand (a fleet soak's finding). `shutdown` ends a wait between attempts
    /// (never an append under way): [`Begun::ShutDown`].
    pub(super) async fn begin<F: Future<Output = ()>>(
        &mut self,
        board: &HealthBoard,
        mut shutdown: Pin<&mut F>,
    ) -> Result<Begun, AgentError> {
        let wanted = (self.pools)().map_err(AgentError::Pools)?;
        if let Some(reason) = self.store.refusal() {
            error!(%reason, "refusing the store: appending nothing, never acting");
            self.core.fail(reason);
        } else {
            let mut stage = Stage::Register;
            let mut waited = false;
            let mut said_differing = false;
            while stage != Stage::Done {
                let attempt = match stage {
                    Stage::Register => self.register().await.map(|()| Stage::Heartbeats),
                    Stage::Heartbeats => self.first_heartbeats().await.map(|()| Stage::Pools),
                    Stage::Pools => self.seed(&wanted, &mut said_differing).await.map(|()| Stage::Done),
                    Stage::Done => unreachable!("the loop ends at done"),
                };
                match attempt {
                    Ok(next) => stage = next,
                    Err(attempt) => {
                        match self.retry_start(board, stage.what(), attempt, shutdown.as_mut()).await? {
                            Waited::Again => waited = true,
                            // The store failed for good or was refused while the start waited: nothing
                            // more is appended, the agent never acts (as for a refusal found first).
                            Waited::Failed => break,
                            Waited::ShutDown => return Ok(Begun::ShutDown),
                        }
                    }
                }
            }
            if waited && self.core.failed().is_none() {
                info!("the start's appends landed");
            }
        }
        if self.core.failed().is_some() {
            self.beat.stop();
        }
        // Heartbeats from now on go out on their own thread, whatever a step is doing: the first
        // step too (a full pass over every address), which also appends the first ones itself.
        self.turned();
        match heartbeat::Beater::start(self.store.clone(), Arc::clone(&self.beat), self.heartbeat_interval) {
            Ok(beater) => self.beater = Some(beater),
            Err(e) => return Err(AgentError::Thread(format!("cannot start the heartbeat thread: {e}"))),
        }
        Ok(Begun::Started)
    }

    /// Applies the pools to seed, made from the log as it is now: followed first (the start's
    /// first read may have failed, [`Self::start`]).
    async fn seed(&mut self, wanted: &[PoolSpec], said_differing: &mut bool) -> Result<(), Attempt> {
        if let Err(reason) = self.follow().await {
            return Err(if self.capabilities.retries_appends {
                Attempt::Retry(reason)
            } else {
                Attempt::Fatal(AgentError::Log(reason))
            });
        }
        let seed = self.pools_to_seed(wanted, said_differing);
        match self.apply_pools(&seed).await {
            Ok(_) => Ok(()),
            Err(e) if e.transient => Err(Attempt::Retry(e.reason)),
            Err(e) => Err(Attempt::Fatal(AgentError::Pools(vec![e.reason]))),
        }
    }

    /// The pools the start applies: the pool files' set, or on a shared log the log's versions
    /// of the pools it holds (a restarted router's old file reverts nothing), made from the log
    /// as it is now — an attempt after a wait sees what other agents changed meanwhile.
    fn pools_to_seed(&self, wanted: &[PoolSpec], said_differing: &mut bool) -> Vec<PoolSpec> {
        if !self.capabilities.shared_log {
            return wanted.to_vec();
        }
        let deleted: BTreeSet<String> =
            self.view().pools().iter().filter(|(_, p)| p.deleted).map(|(name, _)| name.clone()).collect();
        let (seed, differing) = seed_pools(&self.applied_pools(), &deleted, wanted);
        if !differing.is_empty() && !*said_differing {
            *said_differing = true;
            warn!(
                pools = %differing.join(", "),
                "these pools differ between this router's pool files and the fleet's log: the log's \
                 version is in force (a reload, SIGHUP, applies this router's files to the whole fleet)"
            );
        }
        seed
    }

    /// This agent's nodes say they are alive, with keepalived's state (settled once, before the
    /// first attempt; reports that came during a wait are taken before each attempt: the batch
    /// carries the newest state) — before anything of the pool files is appended: stream time
    /// moves with every event, and a pool change appended first, after a stop longer than
    /// heartbeatTTL + promotionHold, expired the agent's own nodes for one event (their addresses
    /// to no owner and back, two epochs each, manual pools' acquires to approve again; an
    /// operator trial's finding). Stamped again at each attempt; the batch stays queued until it
    /// lands.
    async fn first_heartbeats(&mut self) -> Result<(), Attempt> {
        if !self.vrrp_settled {
            // No step before keepalived's state is known.
            self.vrrp_settle().await;
            self.vrrp_settled = true;
        }
        self.vrrp_drain();
        for driver in self.core.drivers() {
            let heartbeat = EventKind::Heartbeat { node: driver.name().to_owned() };
            if !self.queued.contains(&heartbeat) {
                self.queued.push(heartbeat);
            }
        }
        let first = self.queued.clone();
        self.append(first).await.map_err(Attempt::from)?;
        self.queued.clear();
        Ok(())
    }

    /// After a start append that did not land: a failure for good stops the start; one that may
    /// pass is said (health fails with it) and waited out, a heartbeat interval at a time, until
    /// the log's head is confirmed and followed again (so that the next attempt is made from what
    /// the log holds, one that landed unanswered included) — or the store failed meanwhile
    /// (refused: a log that went back), or shutdown came.
    async fn retry_start<F: Future<Output = ()>>(
        &mut self,
        board: &HealthBoard,
        what: &str,
        attempt: Attempt,
        mut shutdown: Pin<&mut F>,
    ) -> Result<Waited, AgentError> {
        let reason = match attempt {
            Attempt::Fatal(AgentError::Log(reason)) => {
                return Err(AgentError::Log(format!("{what}: {reason}")));
            }
            Attempt::Fatal(e) => return Err(e),
            Attempt::Retry(reason) => reason,
        };
        let said = format!("{what}: {reason}; trying again every {:?}", self.heartbeat_interval);
        // Each wait said once (not at each attempt while etcd is away), a later one for another
        // reason too.
        let waiting = Starting::Waiting(said);
        if self.starting.as_ref() != Some(&waiting) {
            warn!(reason = %waiting.reason(), "the start waits for the log");
        }
        self.starting = Some(waiting);
        loop {
            if self.core.failed().is_some() {
                return Ok(Waited::Failed);
            }
            board.post(self.health());
            tokio::select! {
                () = tokio::time::sleep(self.heartbeat_interval) => {}
                () = shutdown.as_mut() => return Ok(Waited::ShutDown),
            }
            if self.confirm_head(false).await.is_some() {
                return Ok(if self.core.failed().is_some() { Waited::Failed } else { Waited::Again });
            }
            // A refusal found by the follow (a log that went back) fails the core.
            if let Err(reason) = self.follow().await {
                warn!(%reason, "the start cannot follow the log yet");
            }
        }
    }

    /// Appends the registrations found at start ([`registrations`]) that the log does not hold
    /// yet: this agent's nodes join the log's registry before its pools and heartbeats are
    /// appended.
    async fn register(&mut self) -> Result<(), Attempt> {
        // A registration the log holds as it is (a priority or capacity changed is registered
        // again: `registrations`' own rule).
        let landed: Vec<bool> = self
            .registering
            .iter()
            .map(|event| {
                matches!(event, EventKind::NodeRegistered { spec, .. }
                    if self.view().node_id(&spec.name).is_some_and(|id| self.view().nodes()[id as usize].spec == *spec))
            })
            .collect();
        let mut landed = landed.into_iter();
        self.registering.retain(|_| !landed.next().unwrap_or(false));
        if self.registering.is_empty() {
            return Ok(());
        }
        let events = self.registering.clone();
        let said: Vec<String> = events.iter().map(ToString::to_string).collect();
        self.append(events).await?;
        // The log decides: a registration another agent's raced ahead of is rejected there.
        self.follow().await.map_err(Attempt::Retry)?;
        self.registering.clear();
        for node in self.own_nodes.clone() {
            if self.view().node_id(&node).is_none() {
                return Err(Attempt::Fatal(AgentError::Membership(format!(
                    "node `{node}`: the fleet's log did not take its registration (another agent registered this name \
                     or this NIC first); see the other agents' status page"
                ))));
            }
        }
        for line in said {
            tracing::info!(event = %line, "registered in the fleet's log");
        }
        Ok(())
    }
}

/// How a start append that did not land goes on.
enum Attempt {
    /// The store may take it soon (etcd out of reach): try again.
    Retry(String),
    /// The start stops.
    Fatal(AgentError),
}

impl From<AppendError> for Attempt {
    fn from(e: AppendError) -> Self {
        if e.transient { Self::Retry(e.reason) } else { Self::Fatal(AgentError::Log(e.reason)) }
    }
}

/// Where the start's appends are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Register,
    Heartbeats,
    Pools,
    Done,
}

impl Stage {
    /// What the stage appends, as health and the log say it.
    fn what(self) -> &'static str {
        match self {
            Self::Register => "registering this agent's nodes",
            Self::Heartbeats => "appending this agent's first heartbeats",
            Self::Pools | Self::Done => "applying the pool files",
        }
    }
}

/// How a wait of the start ended.
enum Waited {
    /// The head is confirmed again: make the append again.
    Again,
    /// The store failed or was refused meanwhile: append nothing more.
    Failed,
    /// Shutdown came.
    ShutDown,
}

/// How [`Agent::begin`] ended.
pub(super) enum Begun {
    /// The heartbeat thread runs; the loop goes on.
    Started,
    /// Shutdown came while the start waited for its log: nothing runs.
    ShutDown,
}
