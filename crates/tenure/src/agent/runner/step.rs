//! One step of the loop and what it is made of: follow the log (and start over from a snapshot),
//! reconcile the nodes that are due, confirm the head, gate and call; snapshots, the identity
//! record, and the end of a run.

use std::time::Duration;

use tenure_core::agent::{HeadConfirmed, HeadWanted, Planned, Step, StepOp};
use tenure_core::driver::{NodeDriver, Requeued};
use tenure_core::federation::Federation;
use tenure_core::journal::{EntryState, JournalStore};
use tenure_core::log_store::{Log as _, LogError};
use tenure_core::model::IdempotencyKey;
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use super::super::{AgentStore, HeadUnconfirmed};
use super::{Agent, HEAD_CONFIRM_BOUND_DEFAULT};

/// Addresses (of each of the planner's two walks) one step of a requeue pass re-plans per node
/// ([`NodeDriver::requeue`]): a pass over a million addresses is a thousand short steps, with
/// requests, results and heartbeats answered between them.
pub const REQUEUE_SLICE: usize = 1024;

impl<S: AgentStore> Agent<S> {
    /// Follows the log to its head with every node's driver, once the log holds what this
    /// process appended ([`AgentStore::read_own_appends`]). A log that cannot be read makes the
    /// agent unhealthy: it does not act until it can read the head again.
    pub(super) async fn follow(&mut self) -> Result<(), String> {
        self.store.read_own_appends().await;
        self.follow_log()
    }

    /// [`Self::follow`] without the wait: at start, before this process appended anything.
    pub(super) fn follow_log(&mut self) -> Result<(), String> {
        if self.core.failed().is_none()
            && let Some(reason) = self.store.refusal()
        {
            error!(%reason, "refusing the store from now on: never acting until restarted");
            self.core.fail(reason);
        }
        let applied_before = self.core.drivers().iter().map(NodeDriver::applied_index).min().flatten();
        for index in 0..self.core.drivers().len() {
            let mut followed = self.follow_node(index);
            // A node whose next record was compacted away (the watch fell behind an etcd
            // compaction) starts again from the store's newest snapshot.
            if matches!(followed, Err(LogError::Compacted { .. })) {
                self.restore_snapshot()?;
                followed = self.follow_node(index);
            }
            if let Err(e) = followed {
                let reason = format!("cannot follow the log: {e}");
                if self.unhealthy.as_deref() != Some(reason.as_str()) {
                    error!(%reason, "not acting");
                }
                self.unhealthy = Some(reason.clone());
                return Err(reason);
            }
        }
        self.unhealthy = None;
        let mut stamper = self.beat.stamper();
        let mono_ms = stamper.mono_ms(Instant::now());
        stamper.stamper.peers.observe(self.core.drivers()[0].view(), &self.own_nodes, mono_ms);
        drop(stamper);
        if let Some(upto) = self.core.drivers().iter().map(NodeDriver::applied_index).min().flatten() {
            self.store.followed(upto);
            // On a shared log the anchor moved (other agents' batches, the heartbeat thread's):
            // written within the next identity tick, as after the loop's own appends — an idle
            // agent killed -9 kept an anchor from its last append, tens of seconds old (an
            // operator trial). A store of its own moves only by its own heartbeats then, which
            // decide nothing a restore could hide: no write a second for them.
            if self.capabilities.shared_log && applied_before != Some(upto) {
                self.identity_dirty = true;
            }
        }
        // Within a step the readers' indexes follow at its end, after its calls started (a
        // failover's whole re-read of the map at 1M takes seconds: not before the calls).
        if !self.in_step {
            self.post_reads(false);
        }
        self.after_follow();
        Ok(())
    }

    /// Brings the readers' map up to the first node's view and their journals up to the
    /// engines, and posts them ([`super::super::request::HealthBoard::post_reads`]; `step_done`:
    /// at the end of a step, which covers the changes answered before it).
    pub(super) fn post_reads(&mut self, step_done: bool) {
        self.core.drivers_mut()[0].follow_map(&mut self.map_index);
        let drivers = self.core.drivers_mut();
        if self.journal_indexes.len() != drivers.len() {
            self.journal_indexes =
                drivers.iter().map(|d| tenure_core::journal_index::JournalIndex::new(d.name())).collect();
        }
        for (index, driver) in self.journal_indexes.iter_mut().zip(drivers.iter_mut()) {
            index.follow(driver.engine_mut());
        }
        self.board.post_reads(self.reads(), step_done);
    }

    /// The readers' map, journals and history as they are now.
    pub(super) fn reads(&self) -> super::super::request::Reads {
        super::super::request::Reads {
            map: self.map_index.snapshot(),
            journals: self
                .journal_indexes
                .iter()
                .map(tenure_core::journal_index::JournalIndex::snapshot)
                .collect(),
            history: self.history.snapshot(),
            nodes: super::super::status::node_statuses(
                self.view(),
                &self.core.drivers().iter().map(NodeDriver::name).collect::<Vec<_>>(),
            ),
            stream_time_ms: self.view().stream_time_ms(),
        }
    }

    /// Follows the log with node `index`'s driver; the first node's folds the log's history in
    /// as it goes, and starts it over where its view starts over from the log's snapshot
    /// ([`NodeDriver::follow_recording`]: the one place the two are kept together).
    fn follow_node(&mut self, index: usize) -> Result<usize, LogError> {
        if index == 0 {
            self.core.drivers_mut()[0].follow_recording(&self.log, &mut self.history)
        } else {
            self.core.drivers_mut()[index].follow(&self.log)
        }
    }

    /// Starts every node's view from the store's newest snapshot when it has one and a node has
    /// not applied that far (at start, or after a compaction it fell behind).
    pub(super) fn restore_snapshot(&mut self) -> Result<(), String> {
        let Some((index, bytes)) = self.store.snapshot() else { return Ok(()) };
        for (position, driver) in self.core.drivers_mut().iter_mut().enumerate() {
            if driver.applied_index().is_some_and(|applied| applied >= index) {
                continue;
            }
            driver
                .restore_snapshot(&bytes, index)
                .map_err(|e| format!("cannot start from the log's snapshot at index {index}: {e}"))?;
            info!(node = driver.name(), index = index.get(), "started from the log's snapshot");
            if position == 0 {
                // Its next follow starts the history over after `index` (`follow_node`).
                info!(
                    index = index.get(),
                    "the history starts after the log's snapshot (older records were compacted)"
                );
            }
        }
        Ok(())
    }

    /// Hands the store a snapshot of the view when `snapshotEvery` events were applied since the
    /// last one this agent took (every agent does; the store keeps the newest, and agents that
    /// project the same log write the same bytes). The store writes it in the background.
    pub(super) fn maybe_snapshot(&mut self) {
        let Some(every) = self.capabilities.snapshot_every else { return };
        let events = self.view().events_applied();
        if events < self.snapshot_events.saturating_add(every) || self.core.failed().is_some() {
            return;
        }
        let Some(applied) = self.core.drivers().iter().map(NodeDriver::applied_index).min().flatten() else {
            return;
        };
        let driver = self
            .core
            .drivers()
            .iter()
            .find(|d| d.applied_index() == Some(applied))
            .expect("the min is one of them");
        let bytes = driver.view().snapshot();
        let size = bytes.len();
        self.snapshot_events = events;
        match self.store.write_snapshot(applied, driver.view().events_applied(), bytes) {
            Ok(()) => debug!(events, bytes = size, "log snapshot handed to the store"),
            Err(e) => warn!(error = %e, "cannot write the log's snapshot; trying again later"),
        }
    }

    /// The view all nodes share (they follow the same log).
    pub(super) fn view(&self) -> &Federation {
        self.core.drivers()[0].view()
    }

    /// The `at` of a new event ([`super::clock::HostStamper::stamp`]; the heartbeat thread stamps with the
    /// same stamper).
    pub(super) fn stamp(&mut self) -> u64 {
        self.beat.stamper().stamp()
    }

    /// Begins a requeue pass on every node that has none under way (the requeue interval came
    /// round); [`Self::step`] takes its slices.
    pub(super) fn begin_requeue(&mut self) {
        self.core.begin_requeue();
        self.requeue_pass = self.core.planning_left();
    }

    /// One step, in the order the core sets ([`AgentCore::poll_step`](tenure_core::agent::AgentCore::poll_step):
    /// append, withdraw if due, follow, plan, append, follow, withdraw if due, confirm the head,
    /// call). A node plans when its view changed what it plans from, or a failed action's
    /// backoff ended ([`NodeDriver::reconcile_due`]; a heartbeat alone does not re-plan 100k
    /// addresses), and when the requeue interval came round ([`Self::begin_requeue`]: the
    /// level-triggered safety net): in passes of slices of [`REQUEUE_SLICE`] addresses, one
    /// slice per step, never every address in one step — requests, results and reports are
    /// taken between the slices.
    pub(super) async fn step(&mut self) {
        self.in_step = true;
        self.observer.step();
        self.slow.step();
        self.heartbeat_failure = self.beat.last_error();
        self.core.begin_step(Step {
            slice: REQUEUE_SLICE,
            calls: !self.shutting_down,
            head_failing: self.head_failure.is_some(),
        });
        let mut followed = false;
        let mut called = false;
        loop {
            let started = Instant::now();
            let failed_before = self.core.failed().is_some();
            let Some(op) = self.core.poll_step() else {
                // The step's end syncs the journals (`AgentCore::poll_step`); a sync that failed
                // there stopped the agent acting, and nothing else says so.
                if !failed_before && let Some(reason) = self.core.failed() {
                    error!(reason, "not acting");
                }
                break;
            };
            match op {
                StepOp::Append => self.flush_appends().await,
                // Whatever the log does (an unreachable etcd must not stop a local withdrawal).
                StepOp::Withdraw => self.withdraw_if_due(),
                StepOp::Follow => {
                    let ok = self.follow().await.is_ok();
                    followed |= ok;
                    self.core.followed(ok);
                }
                StepOp::Planned(planned) => {
                    self.observer.reconcile(started.elapsed());
                    self.log_planned(planned);
                }
                StepOp::ConfirmHead(why) => {
                    let proof = self.confirm_head(why == HeadWanted::BeforeCalls).await;
                    self.core.head_confirmed(proof);
                }
                StepOp::Call(proof) => {
                    called = true;
                    if let Some(proof) = proof {
                        for index in 0..self.core.drivers().len() {
                            self.start_calls(&proof, index);
                        }
                    }
                }
            }
        }
        // Readers see the journals as the step left them (planned, gated, calls started), and
        // durable: the core's step ends with a sync of the journals (and of the results
        // appended with them).
        self.in_step = false;
        self.post_reads(true);
        // What the step's follows named (a hold that ended, a change) is planned without waiting
        // for the loop's next wake-up; a step that could not follow the log leaves the pass where
        // it is without the loop coming back for it at once (it does not spin on an unreadable log).
        self.requeue_pass = followed && self.core.planning_left();
        if !followed {
            return;
        }
        self.record_highest_token();
        if !called {
            return;
        }
        self.maybe_snapshot();
        self.burst_if_due().await;
        let recaptures = self.view().recaptures();
        if recaptures > self.recaptures_seen {
            warn!(
                recaptures = recaptures - self.recaptures_seen,
                "drift: inventory contradicted a confirmed execution; re-captured (fresh epochs, fresh actions)"
            );
            self.recaptures_seen = recaptures;
        }
    }

    /// Calls outside a step (a resume's zombie pass): when any node has an action ready, the log
    /// head is confirmed first ([`Self::confirm_head`], as the core's step asks:
    /// `AgentCore::head_wanted`), then the ready actions of `nodes` are gated and called.
    /// `false`: the head could not be confirmed and nothing was called.
    pub(super) async fn start_calls_at_confirmed_head(&mut self, nodes: std::ops::Range<usize>) -> bool {
        match self.core.head_wanted(self.head_failure.is_some()) {
            Some(HeadWanted::BeforeCalls) => {
                let Some(proof) = self.confirm_head(true).await else { return false };
                for index in nodes {
                    self.start_calls(&proof, index);
                }
            }
            // Nothing to call, but health still says fail-closed: confirm again so that it clears
            // once etcd answers (only while failed: a quiet agent reads nothing).
            Some(HeadWanted::ToClear) => {
                let _ = self.confirm_head(false).await;
            }
            None => {}
        }
        true
    }

    /// Before a batch of provider calls: confirms the log head is current (the store's
    /// linearizable read; at once for the embedded store) within half the smallest heartbeat TTL
    /// of the applied pools, then follows to it. The core's proof that calls may be gated
    /// ([`tenure_core::agent::AgentCore::confirmed_at`]: every node applied the log as far as it
    /// held after the read); `None`: the agent does not act now and says why. `before_calls`: a
    /// batch of calls waits on it (only those refusals are counted in
    /// `tenure_head_unconfirmed_total`; a check that only clears health is not).
    pub(super) async fn confirm_head(&mut self, before_calls: bool) -> Option<HeadConfirmed> {
        let bound = self
            .view()
            .pools()
            .values()
            .filter(|p| !p.deleted)
            .map(|p| p.spec.heartbeat_ttl_ms / 2)
            .min()
            .map_or(HEAD_CONFIRM_BOUND_DEFAULT, Duration::from_millis)
            .max(Duration::from_millis(1));
        let asked = Instant::now();
        match self.store.confirm_head(bound).await {
            Ok(()) => {
                self.head_confirmed_at = Some(asked);
                // How far the log held the head, read before the follow (the watch may bring
                // more meanwhile: the follow takes that too).
                let proof = match self.log.head() {
                    Err(e) => Err(format!("cannot read the log's head index: {e}")),
                    Ok(head) => self.follow().await.and_then(|()| {
                        self.core.confirmed_at(head).ok_or_else(|| {
                            format!("a node did not follow the log to the head just confirmed ({head:?})")
                        })
                    }),
                };
                match proof {
                    Ok(proof) => {
                        if self.head_failure.take().is_some() {
                            info!("the log head is confirmed again: acting");
                        }
                        Some(proof)
                    }
                    Err(reason) => {
                        self.counters.head_unconfirmed += u64::from(before_calls);
                        let reason = format!("fail-closed: the log head was confirmed, then: {reason}");
                        if self.head_failure.as_deref() != Some(reason.as_str()) {
                            warn!(%reason, "not acting");
                        }
                        self.head_failure = Some(reason);
                        None
                    }
                }
            }
            Err(HeadUnconfirmed::Behind(reason)) => {
                self.counters.head_unconfirmed += u64::from(before_calls);
                let reason = format!(
                    "fail-closed: cannot confirm the log head within {} ms: {reason}",
                    bound.as_millis()
                );
                if self.head_failure.as_deref() != Some(reason.as_str()) {
                    warn!(%reason, "not acting");
                }
                self.head_failure = Some(reason);
                None
            }
            Err(HeadUnconfirmed::Refused(reason)) => {
                self.counters.head_unconfirmed += u64::from(before_calls);
                error!(%reason, "not acting until restarted");
                self.head_failure = None;
                self.core.fail(reason);
                None
            }
        }
    }

    pub(super) fn journal_failed<E: std::error::Error>(&mut self, index: usize, error: &E) {
        let reason = self.core.journal_failed(index, error);
        error!(%reason, "not acting");
    }

    /// Logs what a step's planning did ([`AgentCore::plan`](tenure_core::agent::AgentCore::plan)).
    fn log_planned(&self, planned: Vec<(usize, Planned)>) {
        for (index, planned) in planned {
            let driver = &self.core.drivers()[index];
            match planned {
                Planned::Planned(Requeued { report, .. }) => {
                    log_waiting(driver, &report.imported);
                    if !report.swept.is_empty() {
                        info!(
                            node = driver.name(),
                            fenced = report.swept.len(),
                            "sweep fenced stale entries"
                        );
                    }
                    for key in &report.counted {
                        warn!(
                            node = driver.name(),
                            %key,
                            "an acquire whose outcome is unknown went stale: counted as held, its release is planned"
                        );
                    }
                }
                Planned::Blocked(blocked) => debug!(node = driver.name(), "reconcile: {}", blocked.as_str()),
                Planned::Failed => {
                    error!(reason = self.core.failed().unwrap_or_default(), "not acting");
                }
                Planned::Frozen => {
                    warn!(node = driver.name(), "frozen: no heartbeats, no reconcile, no calls")
                }
            }
        }
    }

    /// Tells the heartbeat thread the loop turned: which nodes beat (not a frozen one).
    pub(super) fn turned(&self) {
        let nodes =
            self.core.drivers().iter().filter(|d| !d.is_paused()).map(|d| d.name().to_owned()).collect();
        self.beat.turned(nodes);
    }

    pub(super) fn record_highest_token(&mut self) {
        self.store.record_highest_token(self.view().highest_token());
    }

    pub(super) fn flush_identity(&mut self) {
        if !self.identity_dirty {
            return;
        }
        match self.store.flush_identity() {
            Ok(()) => self.identity_dirty = false,
            Err(e) => error!(error = %e, "cannot write the identity file"),
        }
    }

    /// The end of a run, whenever it ends: no heartbeat after the last results (the thread is
    /// joined: an append under way ends first), results recorded, journals synced, identity
    /// written.
    pub(super) async fn stop(&mut self) {
        self.beat.stop();
        drop(self.beater.take());
        self.summary.appended += self.beat.appended();
        self.finish().await;
    }

    /// Results recorded, journals synced, identity written.
    async fn finish(&mut self) {
        self.flush_appends().await;
        for index in 0..self.core.drivers().len() {
            if let Err(e) = self.core.drivers_mut()[index].engine_mut().store_mut().sync() {
                self.journal_failed(index, &e);
            }
        }
        self.identity_dirty = true;
        self.flush_identity();
        info!(calls = self.summary.calls, appended = self.summary.appended, "stopped");
    }
}

/// Logs at INFO each of `imported` (keys a reconcile of `driver`'s node just journaled) that
/// waits for approval, with the command that approves it.
fn log_waiting<S: JournalStore>(driver: &NodeDriver<S>, imported: &[IdempotencyKey]) {
    let waiting = imported
        .iter()
        .filter(|key| driver.engine().entry(key).is_some_and(|entry| entry.state == EntryState::Pending));
    for key in waiting {
        info!(node = driver.name(), key = %key, "waiting for approval: tenure approve {key}");
    }
}
