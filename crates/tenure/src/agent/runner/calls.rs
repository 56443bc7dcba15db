//! Provider calls: a batch of a node's ready actions gated against the head and spawned, each
//! with its deadline; a finished (or panicked, or cancelled) call's outcome recorded in the
//! node's journal, to be appended as an `action-result`.

use std::net::IpAddr;
use std::time::Duration;

use tenure_core::agent::{CallOutcome, HeadConfirmed};
use tenure_core::model::{IdempotencyKey, StampedAction};
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use super::{Agent, CALLS_IN_FLIGHT_MAX, GATE_BATCH_MAX, wall_clock_ms};
use crate::agent::AgentStore;
use crate::exec::{ExecutionOutcome, execute_within};

/// A finished provider call.
pub(super) struct CallDone {
    pub(super) outcome: ExecutionOutcome,
    pub(super) elapsed: Duration,
}

/// Which call a task makes, so that a task that panicked or was cancelled still ends its call.
pub(super) struct CallTask {
    pub(super) node: usize,
    pub(super) key: IdempotencyKey,
    pub(super) provider: tenure_core::names::Name,
    /// A refresh of this address: ended in the engine, never journaled.
    pub(super) refresh: Option<IpAddr>,
}

impl<S: AgentStore> Agent<S> {
    /// Gates batches of node `index`'s ready actions against its view, at the head `proof`
    /// confirmed, and spawns their calls as far as there is room.
    pub(super) fn start_calls(&mut self, proof: &HeadConfirmed, index: usize) {
        loop {
            let room = CALLS_IN_FLIGHT_MAX.saturating_sub(self.calls.len()).min(GATE_BATCH_MAX);
            if room == 0 {
                return;
            }
            let failed_before = self.core.failed().is_some();
            let batch = self.core.poll_calls(proof, index, room, Some(wall_clock_ms()));
            if batch.is_empty() {
                if !failed_before && let Some(reason) = self.core.failed() {
                    error!(reason, "not acting");
                }
                return;
            }
            for action in batch {
                self.spawn_call(index, action, false);
            }
        }
    }

    /// Spawns the provider call of `action` (a refresh of its address with `refresh`).
    pub(super) fn spawn_call(&mut self, node: usize, action: StampedAction, refresh: bool) {
        let refresh = refresh.then_some(action.address);
        let Some(provider) = self.executors.get(&*action.provider).cloned() else {
            let reason = format!("no executor for provider `{}` in this agent", action.provider);
            warn!(key = %action.idempotency_key(), %reason);
            let task = CallTask { node, key: action.idempotency_key(), provider: action.provider, refresh };
            self.end_call(&task, &ExecutionOutcome::Failed { reason });
            return;
        };
        self.summary.calls += 1;
        // The key is written once here (an action keeps no text of it): the task keeps it, and a
        // call's end is told by its task's id.
        let key = action.idempotency_key();
        debug!(node = self.core.drivers()[node].name(), key = %key, "calling the provider");
        let deadline = self.call_deadline(provider.call_timeout);
        let task = CallTask { node, key: key.clone(), provider: action.provider.clone(), refresh };
        let authority = self.guarding(&action);
        let handle = self.calls.spawn(async move {
            let started = Instant::now();
            let call = execute_within(&*provider.executor, &action, deadline);
            let outcome = match authority {
                Some(authority) => authority.guard(call).await,
                None => call.await,
            };
            CallDone { outcome, elapsed: started.elapsed() }
        });
        self.call_tasks.insert(handle.id(), task);
        self.call_aborts.track(node, key, handle);
    }

    pub(super) fn finish_call(&mut self, done: Result<(tokio::task::Id, CallDone), tokio::task::JoinError>) {
        match done {
            Ok((id, done)) => {
                let Some(task) = self.call_tasks.remove(&id) else {
                    error!(%id, "a provider call ended that the loop did not start; its result is ignored");
                    return;
                };
                // Finished before a cancellation took effect: its own outcome stands.
                let _ = self.call_aborts.finished(task.node, &task.key, id);
                self.observer.executor_call(&task.provider, done.elapsed);
                self.end_call(&task, &done.outcome);
            }
            // A call task panicked (an executor's bug) or was cancelled: the provider may have
            // acted. Recorded as `unknown`, as a call past its deadline is: the entry leaves
            // flight and the address is free for the gate's next decision.
            Err(e) => {
                let Some(task) = self.call_tasks.remove(&e.id()) else {
                    error!(error = %e, "a provider call task failed; its call is unknown to the loop");
                    return;
                };
                if let Some(stale) = self.call_aborts.finished(task.node, &task.key, e.id())
                    && e.is_cancelled()
                {
                    self.end_call(&task, &Self::cancelled_outcome(stale));
                    return;
                }
                error!(error = %e, key = %task.key, provider = %task.provider, "a provider call task failed; recorded as unknown");
                let reason = format!("the call's task failed: {e}");
                self.end_call(&task, &ExecutionOutcome::Unknown { reason });
            }
        }
    }

    /// A call ended with `outcome`: a journaled call's result is recorded, a refresh's ends in
    /// the engine.
    pub(super) fn end_call(&mut self, task: &CallTask, outcome: &ExecutionOutcome) {
        match task.refresh {
            Some(address) => self.refresh_ended(task.node, &task.provider, address, outcome),
            None => self.record_result(task.node, &task.key, outcome),
        }
    }

    pub(super) fn record_result(&mut self, node: usize, key: &str, outcome: &ExecutionOutcome) {
        let (outcome_kind, detail) = outcome.for_journal();
        match outcome {
            ExecutionOutcome::Executed { .. } => {
                info!(node = self.core.drivers()[node].name(), key, "executed")
            }
            ExecutionOutcome::Failed { reason } | ExecutionOutcome::Unknown { reason } => {
                warn!(node = self.core.drivers()[node].name(), key, %reason, "call failed");
            }
        }
        let outcome = match outcome {
            ExecutionOutcome::Unknown { reason } => CallOutcome::InDoubt { reason },
            _ => CallOutcome::Result { outcome: outcome_kind, detail },
        };
        match self.core.handle_result(node, key, outcome) {
            Ok(true) => {}
            Ok(false) => warn!(key, "result of a call no longer in flight: ignored"),
            Err(reason) => error!(%reason, "not acting"),
        }
    }
}
