//! Calls in flight whose action went stale (SPEC 9): the loop's half of the rule.
//!
//! The rule itself is the core's: after every follow, each node's driver names the calls in
//! flight that the fence rule now refuses against its view
//! ([`tenure_core::driver::NodeDriver::poll_stale_calls`]); the loop only aborts the
//! tasks it names. Aborting a call's task drops its future: an AWS call stops retrying inside
//! the SDK, an exec hook's process group is killed (its child is `kill_on_drop` and the group is
//! killed on drop), a simulated call never lands. The result is recorded as
//! [`ExecutionOutcome::Unknown`] (journaled `failed`, its detail saying why): the provider may
//! have acted before the future was dropped, and a failed entry that is stale is never retried.
//! A call that finished before the abort took effect keeps its own outcome.
//!
//! The same place starts the inventory reads the log asks for at once: an executed acquire
//! that may have outrun a hand-over ([`tenure_core::driver::NodeDriver::poll_outran_acquire`]).
//!
//! And it sets every call's deadline: the head confirmation that authorised the call plus the
//! provider's call timeout (`actionTimeout`), so that no call starts or retries later than its
//! head confirmation plus that bound ([`super::super::super::exec::execute_within`] refuses to
//! start a call past its deadline and drops it at the deadline).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tenure_core::fence::StaleReason;
use tenure_core::model::IdempotencyKey;
use tenure_core::node::StaleCall;
use tokio::task::{AbortHandle, Id};
use tokio::time::Instant;
use tracing::{info, warn};

use super::Agent;
use crate::agent::AgentStore;
use crate::exec::ExecutionOutcome;

/// The tasks of the calls in flight, by node and key, so that a call the view fenced can be
/// cancelled; and the calls cancelled so, until their task reports back.
#[derive(Debug, Default)]
pub(super) struct CallAborts {
    /// Each call's task, by (node index, idempotency key).
    tasks: HashMap<(usize, IdempotencyKey), AbortHandle>,
    /// Tasks aborted because the view fenced their call, with the fence's reason.
    cancelled: HashMap<Id, StaleReason>,
}

impl CallAborts {
    /// A call's task was spawned.
    pub(super) fn track(&mut self, node: usize, key: IdempotencyKey, task: AbortHandle) {
        self.tasks.insert((node, key), task);
    }

    /// A call's task ended (`id`): forgets it, and says why it was cancelled if the loop
    /// cancelled it.
    pub(super) fn finished(&mut self, node: usize, key: &IdempotencyKey, id: Id) -> Option<StaleReason> {
        self.tasks.remove(&(node, key.clone()));
        self.cancelled.remove(&id)
    }

    /// Aborts the task of `call` on node `node`. `false` when no such task is tracked.
    fn cancel(&mut self, node: usize, call: &StaleCall) -> bool {
        let Some(task) = self.tasks.get(&(node, call.idempotency_key.clone())) else { return false };
        task.abort();
        self.cancelled.insert(task.id(), call.reason);
        true
    }
}

impl<S: AgentStore> Agent<S> {
    /// After every follow: cancels the calls in flight that each node's view now fences, and
    /// asks for the inventory reads the log calls for at once.
    pub(super) fn after_follow(&mut self) {
        let mut rushed = BTreeSet::new();
        let (stale, outran) = self.core.poll_stale_calls();
        for (index, call) in stale {
            if self.call_aborts.cancel(index, &call) {
                warn!(
                    node = self.core.drivers()[index].name(),
                    key = %call.idempotency_key,
                    reason = %call.reason,
                    "cancelling a call in flight: the view fenced its action"
                );
                self.counters.calls_cancelled += 1;
                // A cancelled acquire may have reached the provider before it was dropped:
                // its result is unknown, so no executed result will ever ask for a read.
                if let Some(entry) = self.core.drivers()[index].engine().entry(&call.idempotency_key)
                    && entry.action.verb.is_acquire()
                    && entry.action.verb.changes_holding()
                {
                    rushed.insert((entry.action.provider.to_string(), entry.action.address));
                }
            }
        }
        rushed.extend(outran.into_iter().map(|o| (o.provider, o.address)));
        for (provider, address) in rushed {
            if self.inventory.read_now(&provider) {
                info!(
                    %provider, %address,
                    "an acquire may have outrun a hand-over: reading the provider's inventory now"
                );
            }
        }
    }

    /// The outcome recorded for a call the loop cancelled because the view fenced it.
    pub(super) fn cancelled_outcome(reason: StaleReason) -> ExecutionOutcome {
        ExecutionOutcome::Unknown {
            reason: format!(
                "cancelled in flight: the view fenced it ({reason}); the provider may have acted"
            ),
        }
    }

    /// The deadline of a call with `timeout`, authorised by the last head confirmation: no call
    /// starts or retries later than its head confirmation plus its timeout. Without a
    /// confirmation, now (a call with that deadline is not started).
    pub(super) fn call_deadline(&self, timeout: Duration) -> Instant {
        self.head_confirmed_at.map_or_else(Instant::now, |confirmed| confirmed + timeout)
    }
}

impl super::InventorySchedule {
    /// Reads `provider`'s inventory as soon as possible: now, or right after the read under
    /// way (which started too early to count), whichever node is the provider's reader. `false`
    /// when the provider's inventory is not read (none configured, or the executor takes none).
    pub(super) fn read_now(&mut self, provider: &str) -> bool {
        if !self.due.contains_key(provider) {
            return false;
        }
        // Made by this agent even when another node is the provider's reader.
        self.urgent.insert(provider.to_owned());
        if self.reading(provider) {
            self.rushed.insert(provider.to_owned());
        } else if let Some((_, next)) = self.due.get_mut(provider) {
            *next = Instant::now();
        }
        true
    }
}
