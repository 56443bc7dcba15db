//! The execute half of a node's engine: approved entries promoted, gated against the head in
//! batches right before the provider call (one durable sync per batch), one call per
//! (provider, address) at a time, and the provider's answers recorded.

use std::collections::BTreeSet;

use super::{NodeEngine, NodeError};
use crate::fence::{self, FenceVerdict, HeadTokens, StaleReason};
use crate::journal::{
    COUNTED_AS_HELD, EntryState, JournalChange, JournalSeq, JournalStore, OUTCOME_UNKNOWN,
    agent_stopped_detail, call_started, call_started_detail, outcome_unknown,
};
use crate::log::ActionOutcome;
use crate::model::{IdempotencyKey, StampedAction};

/// A call in flight whose action the fence rule now refuses against the head (SPEC 9): the
/// runtime cancels it — drops its future, which stops an SDK's retries and kills a hook's
/// process group — and reports it back through [`NodeEngine::handle_execution_result`] as the
/// call's outcome: `failed`, its detail saying the outcome is unknown (the provider may have
/// acted before the future was dropped). A call that finished before it could be cancelled is
/// reported with its own outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaleCall {
    /// The entry's idempotency key.
    pub idempotency_key: IdempotencyKey,
    /// The first fence rule that refuses it now.
    pub reason: StaleReason,
}

impl<S: JournalStore> NodeEngine<S> {
    /// The calls in flight that the fence rule ([`fence::check`], the gate's one rule) refuses
    /// against `head` now, each named once: call it after every catch-up while calls are in
    /// flight, and cancel what it names. Linear in the calls in flight. Changes nothing durable:
    /// the entry stays in flight until its result comes back.
    pub fn poll_stale_in_flight(&mut self, head: &impl HeadTokens) -> Vec<StaleCall> {
        let stale: Vec<(JournalSeq, StaleCall)> = self
            .in_flight
            .iter()
            .filter(|seq| !self.cancelling.contains(seq))
            .filter_map(|seq| {
                let action = &self.state.entries[seq].action;
                match fence::check(action, head, &self.state.high_water) {
                    FenceVerdict::Current => None,
                    FenceVerdict::Stale { reason } => {
                        Some((*seq, StaleCall { idempotency_key: action.idempotency_key(), reason }))
                    }
                }
            })
            .collect();
        self.cancelling.extend(stale.iter().map(|(seq, _)| *seq));
        let mut calls: Vec<StaleCall> = stale.into_iter().map(|(_, call)| call).collect();
        calls.extend(self.poll_stale_refreshes(head));
        self.check_sets();
        calls
    }

    /// Promotes pending entries that the head shows approved (the start of an execute pass).
    /// Returns their keys.
    pub fn promote_approved(
        &mut self,
        head: &impl HeadTokens,
    ) -> Result<Vec<IdempotencyKey>, NodeError<S::Error>> {
        let mut written = String::with_capacity(128);
        let approved: Vec<JournalSeq> = self
            .pending
            .iter()
            .copied()
            // One buffer for every pending entry's key (there may be a pool's worth).
            .filter(|seq| head.is_approved(self.state.entries[seq].action.stamp().key_in(&mut written)))
            .collect();
        let mut keys = Vec::with_capacity(approved.len());
        for seq in approved {
            self.set_state(seq, EntryState::Approved, None)?;
            keys.push(self.state.entries[&seq].action.idempotency_key());
        }
        self.check_sets();
        Ok(keys)
    }

    /// The next ready entry that passes the gate against `head`, handed to the driver for the
    /// provider call; stale entries met on the way become `skipped`. With `only`, just the
    /// entries whose sequence numbers it holds are considered (a resume's zombie pass: nothing
    /// is approved while a node is paused, so the ready entries are almost all in it, and the
    /// walk stays linear). One call per (provider, address) is in flight at a time: a release
    /// must never overtake an acquire still in flight (or the reverse).
    pub fn poll_execution(
        &mut self,
        head: &impl HeadTokens,
        only: Option<&BTreeSet<JournalSeq>>,
    ) -> Result<Option<StampedAction>, NodeError<S::Error>> {
        Ok(self.poll_executions(head, only, 1, None)?.pop())
    }

    /// Up to `max` entries that pass the gate against `head`, as [`NodeEngine::poll_execution`]
    /// hands out one, with **one** sync for the batch: the high-water marks of every action
    /// handed out are durable before any of them leaves (group commit). If the sync fails, no
    /// action leaves and the entries stay approved. Each action handed out counts as an attempt
    /// at the head's stream time and at `wall_ms`, the caller's wall clock (unix ms; recorded
    /// for operators, never read to decide anything).
    pub fn poll_executions(
        &mut self,
        head: &impl HeadTokens,
        only: Option<&BTreeSet<JournalSeq>>,
        max: usize,
        wall_ms: Option<u64>,
    ) -> Result<Vec<StampedAction>, NodeError<S::Error>> {
        let mut batch: Vec<(JournalSeq, StampedAction)> = Vec::new();
        while batch.len() < max {
            let next = self
                .ready
                .iter()
                .copied()
                .filter(|seq| only.is_none_or(|seqs| seqs.contains(seq)))
                .find(|seq| !self.is_busy(*seq));
            let Some(seq) = next else { break };
            let action = self.state.entries[&seq].action.clone();
            let current = head.view(&action);
            match fence::check_view(&action, &current, &self.state.high_water) {
                FenceVerdict::Stale { reason } => {
                    let successor = self.blocked.get(&seq).copied();
                    if !self.count_in_doubt_acquire(seq, head)? {
                        self.set_state(seq, EntryState::Skipped(reason), None)?;
                    }
                    // Its successor can never run now: gate it too, so the pass leaves no stale
                    // entry behind (it is never handed out from `blocked`).
                    if let Some(next) = successor {
                        let next_action = &self.state.entries[&next].action;
                        if let FenceVerdict::Stale { reason } =
                            fence::check(next_action, head, &self.state.high_water)
                        {
                            self.set_state(next, EntryState::Skipped(reason), None)?;
                        }
                    }
                }
                FenceVerdict::Current => {
                    self.raise_high_water(&action, &current)?;
                    self.mark_call_started(seq)?;
                    self.commit(JournalChange::Attempt { seq, at_ms: head.stream_time_ms(), wall_ms })?;
                    self.withdraw(seq);
                    self.in_flight.insert(seq);
                    self.busy.entry(action.address).or_default().push(action.provider.clone());
                    batch.push((seq, action));
                }
            }
        }
        if batch.is_empty() {
            self.check_sets();
            return Ok(Vec::new());
        }
        if let Err(error) = self.store.sync() {
            for (seq, _) in &batch {
                self.release_busy(*seq);
                self.in_flight.remove(seq);
                self.admit(*seq);
            }
            self.check_sets();
            return Err(NodeError::Store(error));
        }
        self.check_sets();
        Ok(batch.into_iter().map(|(_, action)| action).collect())
    }

    /// Before every call: [`CALL_STARTED`](crate::journal::CALL_STARTED) in its detail ([`call_started_detail`]: after the
    /// in-doubt mark it may carry, which stays), synced with the batch, so that a restart knows
    /// the call may have run ([`NodeEngine::recover_in_flight`]; for a holding acquire, that it
    /// may hold the address).
    fn mark_call_started(&mut self, seq: JournalSeq) -> Result<(), NodeError<S::Error>> {
        let entry = &self.state.entries[&seq];
        let detail = call_started_detail(outcome_unknown(entry.detail.as_deref()));
        if entry.detail.as_deref() == Some(detail.as_str()) {
            return Ok(());
        }
        self.commit(JournalChange::SetState {
            seq,
            state: EntryState::Approved,
            detail: Some(crate::names::shared(&detail)),
            executed_seq: None,
        })
    }

    /// At a start (open or restart): every `approved` entry still carrying the gate's mark
    /// ([`call_started`]) was in flight when the process stopped, its outcome unknown (SPEC 6).
    /// Its detail, and its last error, become `outcome unknown: the agent stopped during attempt
    /// N` ([`agent_stopped_detail`]), synced; it stays `approved`: gated again and, while current,
    /// run again (executors are idempotent). A holding acquire so marked is in doubt
    /// ([`NodeEngine::is_acquire_in_doubt`]). Returns how many entries it marked.
    pub(super) fn recover_in_flight(&mut self) -> Result<usize, NodeError<S::Error>> {
        let stopped: Vec<(JournalSeq, u32)> = self
            .state
            .entries
            .values()
            .filter(|e| e.state == EntryState::Approved && call_started(e.detail.as_deref()))
            .map(|e| (e.seq, e.attempts.count))
            .collect();
        for (seq, attempt) in &stopped {
            let detail = Some(crate::names::shared(&agent_stopped_detail(*attempt)));
            self.commit(JournalChange::SetState {
                seq: *seq,
                state: EntryState::Approved,
                detail,
                executed_seq: None,
            })?;
        }
        if !stopped.is_empty() {
            self.store.sync().map_err(NodeError::Store)?;
        }
        Ok(stopped.len())
    }

    /// Frees the entry's (provider, address) for the next call.
    fn release_busy(&mut self, seq: JournalSeq) {
        let (provider, address) = super::provider_address(&self.state.entries[&seq].action);
        self.release_busy_at(&provider, address);
    }

    /// Frees (`provider`, `address`) for the next call.
    pub(super) fn release_busy_at(&mut self, provider: &str, address: std::net::IpAddr) {
        if let Some(providers) = self.busy.get_mut(&address) {
            providers.retain(|p| **p != *provider);
            if providers.is_empty() {
                self.busy.remove(&address);
            }
        }
    }

    /// Whether an entry waits for its provider call (ready and not behind a call in flight for
    /// its address): the runtime confirms its head before it polls them.
    #[must_use]
    pub fn has_ready(&self) -> bool {
        self.ready.iter().any(|seq| !self.is_busy(*seq))
    }

    /// Whether a call for the entry's (provider, address) is in flight.
    pub(super) fn is_busy(&self, seq: JournalSeq) -> bool {
        let action = &self.state.entries[&seq].action;
        self.busy.get(&action.address).is_some_and(|providers| providers.contains(&action.provider))
    }

    /// Records what the provider said about an action handed out by `poll_execution`. Returns
    /// the entry's sequence number (the entry stays journaled: a finished entry is compacted by
    /// a later reconcile, never here), so that a caller reads it without looking its key up again.
    pub fn handle_execution_result(
        &mut self,
        idempotency_key: &str,
        outcome: ActionOutcome,
        detail: Option<String>,
    ) -> Result<JournalSeq, NodeError<S::Error>> {
        let seq = self
            .index
            .get(idempotency_key, &self.state.entries)
            .filter(|seq| self.in_flight.contains(seq))
            .ok_or_else(|| NodeError::NotInFlight(idempotency_key.to_owned()))?;
        let state = match outcome {
            ActionOutcome::Executed => EntryState::Executed,
            ActionOutcome::Failed => EntryState::Failed,
        };
        // An acquire in doubt stays in doubt through a later failure: an earlier attempt may
        // have landed.
        let detail = match detail {
            Some(d)
                if state == EntryState::Failed
                    && !outcome_unknown(Some(&d))
                    && outcome_unknown(self.state.entries[&seq].detail.as_deref()) =>
            {
                Some(format!("{OUTCOME_UNKNOWN}an earlier attempt may have acted; this one: {d}"))
            }
            other => other,
        };
        self.in_flight.remove(&seq);
        self.cancelling.remove(&seq);
        self.release_busy(seq);
        self.set_state(seq, state, detail.as_deref().map(crate::names::shared))?;
        self.check_sets();
        Ok(seq)
    }

    /// Records a call whose outcome is unknown (cancelled in flight, past its deadline, its
    /// answer lost; `detail` says why): `failed`, its detail beginning with [`OUTCOME_UNKNOWN`],
    /// retried through the gate while it is current (SPEC 6: at-least-once). An acquire that the
    /// fence rule already refuses against `head` is counted as held at once
    /// ([`NodeEngine::count_in_doubt_acquire`]). Returns the entry's sequence number and the
    /// outcome recorded first (what the log is told: the call failed, its outcome unknown).
    pub fn handle_in_doubt_result(
        &mut self,
        idempotency_key: &str,
        detail: &str,
        head: &impl HeadTokens,
    ) -> Result<(JournalSeq, String), NodeError<S::Error>> {
        let detail = format!("{OUTCOME_UNKNOWN}{detail}");
        let seq =
            self.handle_execution_result(idempotency_key, ActionOutcome::Failed, Some(detail.clone()))?;
        self.count_in_doubt_acquire(seq, head)?;
        self.check_sets();
        Ok((seq, detail))
    }

    /// Whether entry `seq` is an acquire in doubt: a holding acquire (assign, proxy-ARP add) that
    /// may have reached the provider without a result saying so — its detail begins with
    /// [`OUTCOME_UNKNOWN`] (a call cancelled, timed out, its answer lost; the mark stays through
    /// retries and later known failures, and a restart gives it to a call in flight when the
    /// process died: [`NodeEngine::recover_in_flight`], which runs at every open and restart
    /// before anything is gated). A bare [`CALL_STARTED`](crate::journal::CALL_STARTED) is not doubt: past recovery it only
    /// stays on an entry whose batch sync failed, so its call never left.
    pub(super) fn is_acquire_in_doubt(&self, seq: JournalSeq) -> bool {
        let entry = &self.state.entries[&seq];
        entry.action.verb.is_acquire()
            && entry.action.verb.changes_holding()
            && outcome_unknown(entry.detail.as_deref())
    }

    /// An acquire in doubt ([`NodeEngine::is_acquire_in_doubt`]), `failed` or `approved`, which
    /// the fence rule now refuses against `head`: the provider may have acted, and a stale entry
    /// is never run again, so the node counts the address as held — the entry moves to
    /// `executed` ([`COUNTED_AS_HELD`]) and the planner plans its release, an idempotent call on
    /// the node's own NIC. Without it a hook killed after it added the address would leave a
    /// second holder for ever on a provider that has no inventory to tell. Not when a holding
    /// verb journaled after it has executed for the same (provider, address): that newer verb
    /// says what the node holds (the entry is only dropped from the retry set). Called when such
    /// a result comes back, at every sweep and at the gate. Returns whether it counted the entry.
    pub(super) fn count_in_doubt_acquire(
        &mut self,
        seq: JournalSeq,
        head: &impl HeadTokens,
    ) -> Result<bool, NodeError<S::Error>> {
        let entry = &self.state.entries[&seq];
        if !matches!(entry.state, EntryState::Failed | EntryState::Approved)
            || !self.is_acquire_in_doubt(seq)
            || fence::check(&entry.action, head, &self.state.high_water) == FenceVerdict::Current
        {
            return Ok(false);
        }
        let superseded = self
            .captured
            .last_holding(&super::provider_address(&entry.action))
            .is_some_and(|last| last > seq);
        if superseded {
            self.failed.remove(&seq);
            self.row_changed(seq);
            return Ok(false);
        }
        let detail = entry
            .detail
            .as_deref()
            .map_or_else(|| COUNTED_AS_HELD.to_owned(), |earlier| format!("{COUNTED_AS_HELD}; {earlier}"));
        self.set_state(seq, EntryState::Executed, Some(crate::names::shared(&detail)))?;
        self.replan = true;
        self.replan_marks.0 += 1;
        Ok(true)
    }
}
