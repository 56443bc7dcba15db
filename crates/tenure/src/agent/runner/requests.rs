//! The loop's answers to requests (the API's and the CLI's): reads of its state, operator events
//! checked against the head and appended, and the test-only controls (freeze, resume).

use std::collections::BTreeSet;
use std::net::IpAddr;

use tenure_core::log::EventKind;
use tenure_core::log_store::Log as _;
use tracing::{info, warn};

use super::super::AgentStore;
use super::super::answers;
use super::super::request::{
    Control, Health, Receipt, Request, Requests, SubmitError, no_eligible_member_note,
};

use super::Agent;

/// What health says before the agent's first step: it is opening its store and following the log.
pub const STARTING: &str = "starting: opening the store and following the log";

/// What health says while the start appends (its registration, first heartbeats and pool files)
/// before any wait for the log: the agent acts on nothing yet.
pub const APPENDING: &str = "starting: appending this agent's registration, first heartbeats and pool files";

/// What health says during the agent's first step (a pass over every address it serves).
pub const FIRST_STEP: &str = "starting: the first step (planning every address)";

/// Most requests answered between two turns of the loop, over the one its branch took
/// ([`Agent::answer_waiting`]).
pub const REQUESTS_BETWEEN_STEPS_MAX: usize = 16;

/// How long the loop goes on answering waiting requests between two turns: it stops after the
/// request that took it past this ([`Agent::answer_waiting`]).
pub const REQUESTS_BETWEEN_STEPS_BUDGET: std::time::Duration = std::time::Duration::from_millis(10);

/// The health posted before the agent opens its store (seconds at a million addresses): not ok,
/// [`STARTING`], naming the nodes it runs.
pub(super) fn starting(nodes: &[tenure_core::model::NodeSpec]) -> Health {
    Health {
        ok: false,
        reason: Some(STARTING.to_owned()),
        nodes: nodes.iter().map(|n| n.name.clone()).collect(),
        log_index: 0,
        log_head: 0,
        stream_time_ms: 0,
    }
}

impl<S: AgentStore> Agent<S> {
    pub(super) fn health(&self) -> Health {
        let head = self.log.head().ok().flatten().map_or(0, |i| i.get());
        let reason = if self.shutting_down {
            Some("shutting down: taking no new work".to_owned())
        } else {
            self.core
                .failed()
                .map(str::to_owned)
                .or_else(|| self.starting.as_ref().map(super::start::Starting::reason))
                .or_else(|| self.unhealthy.clone())
                .or_else(|| self.head_failure.clone())
                .or_else(|| self.append_failure.clone())
                // A heartbeat failing now is said at the loop's next turn (the health it posts); one
                // that landed since counts once a step followed past it.
                .or_else(|| self.beat.last_error().or_else(|| self.heartbeat_failure.clone()))
        };
        Health {
            ok: reason.is_none(),
            reason,
            nodes: self.core.drivers().iter().map(|d| d.name().to_owned()).collect(),
            log_index: self.core.drivers()[0].applied_index().map_or(0, |i| i.get()),
            log_head: head,
            stream_time_ms: self.view().stream_time_ms(),
        }
    }

    /// Answers the requests already waiting, up to [`REQUESTS_BETWEEN_STEPS_MAX`] or for about
    /// [`REQUESTS_BETWEEN_STEPS_BUDGET`], after whatever branch the loop took: an ask waits for
    /// one step at most behind the asks before it, however busy the loop is (its `select!` picks
    /// among ready branches at random, and call results are ready all through a capture), and a
    /// flood of asks cannot hold results back. One that changed the state ends
    /// it: the step it needs runs before the next ask is answered (an ask sees what the one
    /// before it did). Returns whether the state changed.
    pub(super) async fn answer_waiting(&mut self, requests: &mut Requests) -> bool {
        let started = std::time::Instant::now();
        for request in std::iter::from_fn(|| requests.try_recv()).take(REQUESTS_BETWEEN_STEPS_MAX) {
            if self.answer(request).await {
                return true;
            }
            // A list of every journal entry at a million addresses takes a while: a burst of
            // those is answered across steps, not in one go.
            if started.elapsed() >= REQUESTS_BETWEEN_STEPS_BUDGET {
                break;
            }
        }
        false
    }

    /// Answers one request. Returns whether the state changed (a step is due).
    pub(super) async fn answer(&mut self, request: Request) -> bool {
        match request {
            Request::Metrics { reply } => {
                self.counters.stamps_capped = self.beat.stamper().stamper.capped();
                let health = self.health();
                let mut snapshot =
                    answers::metrics(self.core.drivers(), &self.counters, health.log_head, health.ok);
                snapshot.provider_throttled = self
                    .executors
                    .iter()
                    .map(|(provider, executor)| (provider.clone(), executor.executor.throttled_calls()))
                    .collect();
                let _ = reply.send(snapshot);
                false
            }
            Request::Backup { reply } => {
                // A read transaction: the loop goes on while the backup is written.
                let store = self.store.clone();
                tokio::task::spawn_blocking(move || {
                    let _ = reply.send(store.backup());
                });
                false
            }
            // A caller that gave up (its wait timed out while the loop was busy) was told the
            // request failed: it must not land later.
            Request::Control { ref reply, .. } if reply.is_closed() => {
                warn!("a control request whose caller stopped waiting was dropped, not run");
                false
            }
            Request::Submit { ref reply, .. } if reply.is_closed() => {
                warn!("a submitted event whose caller stopped waiting was dropped, not appended");
                false
            }
            // A freeze or a wake is noted before its answer goes out: a read asked after the
            // answer waits for the end of the step that follows (`HealthBoard::note_change`: the
            // frozen node's last plans, the woken one's zombie pass).
            Request::Control { control, reply } => {
                let result = self.control(control).await;
                self.board.note_change();
                let _ = reply.send(result);
                true
            }
            // An operator's event is answered once the view applied it (`submit` follows the log
            // and posts): the map shows it; what the nodes plan from it shows after the step that
            // follows. Not noted: reads never wait for a busy loop because others write.
            Request::Submit { submit, reply } => {
                let result = self.submit(submit.event).await;
                let changed = result.is_ok();
                let _ = reply.send(result);
                changed
            }
        }
    }

    async fn control(&mut self, control: Control) -> Result<String, String> {
        let name = match &control {
            Control::FreezeAfterReconcile { node, .. } | Control::Resume { node } => node.clone(),
        };
        let index = self
            .core
            .drivers()
            .iter()
            .position(|d| d.name() == name)
            .ok_or_else(|| format!("node \"{name}\" does not run in this agent"))?;
        match control {
            Control::FreezeAfterReconcile { events, .. } => {
                self.follow().await?;
                for event in &events {
                    self.core.check_submit(event).map_err(|e| e.to_string())?;
                }
                let count = events.len();
                self.append(events).await?;
                self.core.freeze_after_plan(index);
                // The map readers see shows the events before the answer.
                let _ = self.follow().await;
                Ok(format!("{count} event(s) appended; {name} freezes after its next reconcile"))
            }
            Control::Resume { .. } => {
                // A stopping agent starts no call, a zombie pass's neither.
                if self.shutting_down {
                    return Err(format!("{name} stays frozen: the agent is shutting down"));
                }
                self.follow().await?;
                let approved =
                    self.core.drivers_mut()[index].resume().map_err(|blocked| blocked.as_str().to_owned())?;
                let before = self.core.drivers()[index].engine().fenced().values().sum::<u64>();
                // Like every call: only at a confirmed head (an unconfirmed one calls nothing; the
                // next step gates what is still approved, after its own confirmation).
                let confirmed = self.start_calls_at_confirmed_head(index..index + 1).await;
                self.core.drivers_mut()[index].finish_resume();
                let fenced = self.core.drivers()[index].engine().fenced().values().sum::<u64>() - before;
                if !confirmed {
                    warn!(node = %name, approved, "woke up at a log head it cannot confirm: calling nothing");
                    return Ok(format!(
                        "{name} woke up: the log head cannot be confirmed, so none of its {approved} \
                         approved action(s) was called"
                    ));
                }
                warn!(node = %name, approved, fenced, "woke up: what it approved before it froze met the gate");
                Ok(format!(
                    "{name} woke up: {approved} action(s) approved before it froze met the gate, {fenced} fenced"
                ))
            }
        }
    }

    async fn submit(&mut self, event: EventKind) -> Result<Receipt, SubmitError> {
        if self.shutting_down {
            return Err(SubmitError::ShuttingDown);
        }
        // Check against the head: follow first, so a pool applied an instant ago is known.
        self.follow().await.map_err(SubmitError::Unavailable)?;
        // An agent that does not act (its node retired, its store refused, a journal failed)
        // takes no operator's event either: its view may be the reason.
        if let Some(reason) = self.core.failed() {
            return Err(SubmitError::Unavailable(format!(
                "this agent does not act ({reason}); ask another agent"
            )));
        }
        self.core.check_submit(&event)?;
        let drained = match &event {
            EventKind::Drain { node } => Some((node.clone(), answers::with_desired_holder(self.view()))),
            _ => None,
        };
        let unchanged = answers::changes_nothing(self.view(), &event);
        let event_name = event.wire_name();
        info!(event = event_name, "appending a submitted event");
        let indices = self.append(vec![event]).await.map_err(|e| SubmitError::Unavailable(e.reason))?;
        let index = indices.first().copied().expect("one event appended, one index");
        // Answered once the view applied it, so that the map readers see (posted at every
        // follow) shows it: an ask after this answer sees what it did. A log that cannot be read
        // back now does not undo the append.
        let _ = self.follow().await;
        let mut receipt = Receipt::at(index);
        receipt.unchanged = unchanged;
        if unchanged {
            info!(event = %event_name, index, "the event changed nothing: {}", answers::UNCHANGED_NOTE);
        }
        if let Some((node, before)) = drained {
            receipt.addresses_with_no_eligible_member = self.left_without_holder(index, &before).await;
            let count = receipt.addresses_with_no_eligible_member;
            let note = count.map(no_eligible_member_note).unwrap_or_default();
            if count.unwrap_or(0) > 0 {
                warn!(node = %node, index, "node/{node} drained (log index {index}){note}");
            } else {
                info!(node = %node, index, "node/{node} drained (log index {index})");
            }
        }
        Ok(receipt)
    }

    /// After a drain appended at `index`: how many of `before` (the addresses that had a desired
    /// holder) have none now, from the view once it applied the drain; `None` when it cannot
    /// follow the log that far now.
    async fn left_without_holder(&mut self, index: u64, before: &BTreeSet<(String, IpAddr)>) -> Option<u64> {
        self.follow().await.ok()?;
        let applied = self.core.drivers()[0].applied_index().map_or(0, |i| i.get());
        (applied >= index).then(|| answers::lost_their_desired_holder(before, self.view()))
    }
}
