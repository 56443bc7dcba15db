//! How the loop starts: the agent's state built from its settings and store (every node's
//! driver over the registry, the snapshot restored, the log followed), and the run's beginning
//! (pools seeded, keepalived settled, the heartbeat thread started).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use tenure_core::agent::AgentCore;
use tenure_core::driver::{DriverOptions, NodeDriver};
use tenure_core::federation::history::History;
use tenure_core::federation::{Federation, registrations};
use tenure_core::log::EventKind;
use tenure_core::model::{NodeSpec, ProviderSpec};
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
        agent.follow_log().map_err(AgentError::Log)?;
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
    /// A store that retries appends (etcd) out of reach does not stop the start: each append is
    /// tried again every heartbeat interval, after following the log (one that landed unanswered
    /// is not appended twice), with health failing and saying so meanwhile (`board`). A blip of
    /// etcd or of the router's link while it starts must not stop the process: it would answer
    /// nothing until restarted by hand (a fleet soak's finding). Shutdown ends the wait (`run`).
    pub(super) async fn begin(&mut self, board: &HealthBoard) -> Result<(), AgentError> {
        let wanted = (self.pools)().map_err(AgentError::Pools)?;
        if let Some(reason) = self.store.refusal() {
            error!(%reason, "refusing the store: appending nothing, never acting");
            self.core.fail(reason);
        } else {
            let wanted = if self.capabilities.shared_log {
                let deleted: BTreeSet<String> = self
                    .view()
                    .pools()
                    .iter()
                    .filter(|(_, p)| p.deleted)
                    .map(|(name, _)| name.clone())
                    .collect();
                let (seed, differing) = seed_pools(&self.applied_pools(), &deleted, &wanted);
                if !differing.is_empty() {
                    warn!(
                        pools = %differing.join(", "),
                        "these pools differ between this router's pool files and the fleet's log: the log's \
                         version is in force (a reload, SIGHUP, applies this router's files to the whole fleet)"
                    );
                }
                seed
            } else {
                wanted
            };
            let mut waited = false;
            while let Err(attempt) = self.register().await {
                self.retry_start(board, "registering this agent's nodes", attempt).await?;
                waited = true;
            }
            // No step before keepalived's state is known.
            self.vrrp_settle().await;
            // This agent's nodes say they are alive (after keepalived's state, as before) before
            // anything of the pool files is appended: stream time moves with every event, and a
            // pool change appended first, after a stop longer than heartbeatTTL + promotionHold,
            // expired the agent's own nodes for one event (their addresses to no owner and back,
            // two epochs each, manual pools' acquires to approve again; an operator trial's
            // finding).
            for driver in self.core.drivers() {
                self.queued.push(EventKind::Heartbeat { node: driver.name().to_owned() });
            }
            let first = std::mem::take(&mut self.queued);
            // Stamped again at each attempt; heartbeats and keepalived's state appended twice (one
            // that landed unanswered) say nothing new.
            while let Err(e) = self.append(first.clone()).await {
                self.retry_start(board, "appending this agent's first heartbeats", Attempt::from(e)).await?;
                waited = true;
            }
            // The plan is made again from the log after each failure: a pool event that landed
            // unanswered is not appended again.
            while let Err(e) = self.apply_pools(&wanted).await {
                if !e.transient {
                    return Err(AgentError::Pools(vec![e.reason]));
                }
                self.retry_start(board, "applying the pool files", Attempt::Retry(e.reason)).await?;
                waited = true;
            }
            self.append_failure = None;
            if waited {
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
        Ok(())
    }

    /// After a start append that did not land: a failure for good stops the start; one that may
    /// pass is said (health fails with it, logged once per reason), waited out for a heartbeat
    /// interval, and the log followed so the next attempt sees what landed unanswered.
    async fn retry_start(
        &mut self,
        board: &HealthBoard,
        what: &str,
        attempt: Attempt,
    ) -> Result<(), AgentError> {
        let reason = match attempt {
            Attempt::Fatal(e) => return Err(e),
            Attempt::Retry(reason) => reason,
        };
        let reason = format!("{what}: {reason}; trying again every {:?}", self.heartbeat_interval);
        if self.append_failure.as_deref() != Some(reason.as_str()) {
            warn!(%reason, "the start waits for the log");
            self.append_failure = Some(reason);
        }
        board.post(self.health());
        tokio::time::sleep(self.heartbeat_interval).await;
        if let Err(reason) = self.follow().await {
            warn!(%reason, "the start cannot follow the log yet");
        }
        Ok(())
    }

    /// Appends the registrations found at start ([`registrations`]) that the log does not hold
    /// yet: this agent's nodes join the log's registry before its pools and heartbeats are
    /// appended.
    async fn register(&mut self) -> Result<(), Attempt> {
        let landed: Vec<bool> = self
            .registering
            .iter()
            .map(|event| matches!(event, EventKind::NodeRegistered { spec, .. } if self.view().node_id(&spec.name).is_some()))
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
