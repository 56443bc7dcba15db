//! A node's reconcile: plan from its view, import the plan through the gate against the head,
//! sweep open entries the head fences, compact finished ones (SPEC 5, 6, 13).

use std::collections::BTreeSet;

use super::{NodeEngine, NodeError, ReconcileReport, provider_address};
use crate::federation::{Federation, NodeId};
use crate::fence::{self, FenceVerdict, HeadTokens, StaleReason};
use crate::journal::{
    Attempts, EntryState, JOURNAL_ENTRIES_MAX, JournalChange, JournalEntry, JournalSeq, JournalStore,
    outcome_unknown,
};
use crate::model::{Approval, IdempotencyKey, ProviderAddress};
use crate::planner::{self, PlanCursor};

/// How many entries waiting for an approval [`NodeEngine::reconcile_keys`] looks through for
/// those of its keys that went stale; with more, the next pass's sweep finds them.
pub const KEYS_SWEEP_PENDING_MAX: usize = 4_096;

/// How many open entries a slice of a pass sweeps per position it plans: an entry's check
/// against the head costs a fraction of a position's plan, and an address has two open entries
/// per line (two verbs), so a pass over a journal with a line's entries open for every address
/// ends with its plan's walk, not after it.
pub const SWEEP_ENTRIES_PER_POSITION: usize = 4;

/// The earlier of two optional times (either when the other is `None`).
pub(crate) fn earlier(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl<S: JournalStore> NodeEngine<S> {
    /// Plan from `view`, import through the gate against `head`, sweep open entries, compact;
    /// then sync the journal: what it did is durable when it returns.
    pub fn reconcile(
        &mut self,
        view: &Federation,
        head: &impl HeadTokens,
    ) -> Result<ReconcileReport, NodeError<S::Error>> {
        let (report, _) = self.reconcile_slice(view, head, &PlanCursor::default(), usize::MAX)?;
        self.store.sync().map_err(NodeError::Store)?;
        Ok(report)
    }

    /// [`NodeEngine::reconcile`] with a slice of the plan ([`planner::plan_slice`] from `cursor`,
    /// `max` positions of each walk): what the slice plans is imported. The first slice of a
    /// pass (`cursor` at the start) also counts stale acquires in doubt and retries or lets go
    /// failed entries, as a whole reconcile does, once per pass, and begins the pass's sweep of
    /// the open entries the journal then holds; every slice sweeps the next `max` ×
    /// [`SWEEP_ENTRIES_PER_POSITION`] of those
    /// ([`NodeEngine::sweep_done`]: the pass ends when its plan and its sweep are both done), so
    /// that no slice walks a million open entries early in a capture. The compaction of a slice
    /// (`max` not `usize::MAX`) looks at `max` entries at most (a window of 4 a position made a
    /// capture of 300k 10 % slower: every slice walks entries none of which may go), oldest
    /// first from where the last slice's look stopped, and drops at once the droppable ones it
    /// found (the oldest), down to the limit; a whole reconcile's looks from the oldest
    /// entry until it found enough. Returns where the next slice resumes.
    ///
    /// Its changes are committed, not synced: the caller syncs (the agent's step ends with a
    /// sync of every journal, [`crate::agent::AgentCore::poll_step`]; the gate syncs before any
    /// call leaves). Nothing a slice records leaves the process before either: lost in a crash,
    /// it is planned again from the log (docs/decisions.md, "one fsync a step").
    pub fn reconcile_slice(
        &mut self,
        view: &Federation,
        head: &impl HeadTokens,
        cursor: &PlanCursor,
        max: usize,
    ) -> Result<(ReconcileReport, PlanCursor), NodeError<S::Error>> {
        let node: NodeId =
            view.node_id(&self.name).ok_or_else(|| NodeError::UnknownNode(self.name.clone()))?;
        let mut report = ReconcileReport::default();
        let first = *cursor == PlanCursor::default();
        // Acquires in doubt that went stale count as held before the plan, so that it releases
        // them in this reconcile.
        if first {
            self.count_stale_in_doubt(head, &mut report, None)?;
            self.replan_marks.1 = self.replan_marks.0;
        }
        // The plan borrows the captured set while the import below commits: it is taken out for
        // the import (nothing there executes, so nothing there changes it) and always put back.
        let captured = std::mem::take(&mut self.captured);
        let (plan, next) = planner::plan_slice(view, node, &captured, cursor, max);
        // Only a plan of everything plans the releases of what was counted as held.
        if first && next.is_done() {
            self.replan = false;
        }
        let imported = self.import_plan(&plan, head, &mut report);
        drop(plan);
        self.captured = captured;
        imported?;
        if first {
            self.sweep_failed(head, &mut report)?;
            self.sweep_look = Some((JournalSeq::NONE, self.state.last_seq));
        }
        self.sweep_open(head, max.saturating_mul(SWEEP_ENTRIES_PER_POSITION), &mut report)?;
        if max == usize::MAX {
            self.compact_look = None;
            self.compact(head, &mut report)?;
        } else {
            self.compact_a_slice(head, max, &mut report)?;
        }
        self.check_sets();
        Ok((report, next))
    }

    /// Plans the positions of `keys` alone — (provider, address) keys whose plan the view's
    /// events may have changed ([`Federation::take_plan_changes`]) — and imports what the journal
    /// lacks, each through the gate against `head` ([`planner::plan_keys`]): incremental
    /// planning, between the passes. First the acquires in doubt of those keys that the fence
    /// rule now refuses are counted as held, so that this plan releases them (as a pass's first
    /// slice does for every key); then, when the entries waiting for an approval are few
    /// ([`KEYS_SWEEP_PENDING_MAX`]), those of the keys that went stale are swept (more are left
    /// to the next pass's sweep; an approved one goes through the gate before its call anyway).
    /// No compaction, no retry: those are the passes'. Committed, not synced, as
    /// [`NodeEngine::reconcile_slice`].
    pub fn reconcile_keys(
        &mut self,
        view: &Federation,
        head: &impl HeadTokens,
        keys: &BTreeSet<ProviderAddress>,
    ) -> Result<ReconcileReport, NodeError<S::Error>> {
        let node: NodeId =
            view.node_id(&self.name).ok_or_else(|| NodeError::UnknownNode(self.name.clone()))?;
        let mut report = ReconcileReport::default();
        let replan = self.replan;
        self.count_stale_in_doubt(head, &mut report, Some(keys))?;
        // What was counted here is released by this plan: no other plan is due for it.
        self.replan = replan;
        let captured = std::mem::take(&mut self.captured);
        let plan = planner::plan_keys(view, node, &captured, keys);
        let imported = self.import_plan(&plan, head, &mut report);
        drop(plan);
        self.captured = captured;
        imported?;
        if self.pending.len() <= KEYS_SWEEP_PENDING_MAX {
            let stale: Vec<(JournalSeq, StaleReason)> = self
                .pending
                .iter()
                .map(|seq| &self.state.entries[seq])
                .filter(|entry| keys.contains(&provider_address(&entry.action)))
                .filter_map(|entry| match fence::check(&entry.action, head, &self.state.high_water) {
                    FenceVerdict::Stale { reason } => Some((entry.seq, reason)),
                    FenceVerdict::Current => None,
                })
                .collect();
            for (seq, reason) in stale {
                let key = self.state.entries[&seq].action.idempotency_key();
                self.set_state(seq, EntryState::Skipped(reason), None)?;
                report.swept.push(key);
            }
        }
        self.check_sets();
        Ok(report)
    }

    /// Imports `plan` ([`Self::import`]); the releases it held back go into `report`.
    fn import_plan(
        &mut self,
        plan: &planner::Plan<'_>,
        head: &impl HeadTokens,
        report: &mut ReconcileReport,
    ) -> Result<(), NodeError<S::Error>> {
        report.held = plan
            .held
            .iter()
            .map(|(due, provider, address)| (*due, (*provider).to_owned(), *address))
            .collect();
        self.import(&plan.actions, head, report)
    }

    /// Journals what `planned` holds that the journal does not (by key), each through the gate
    /// against `head`. A planned action already journaled costs a key written into one reused
    /// buffer and a lookup: no allocation.
    fn import(
        &mut self,
        planned: &[planner::PlannedAction<'_>],
        head: &impl HeadTokens,
        report: &mut ReconcileReport,
    ) -> Result<(), NodeError<S::Error>> {
        let mut key = String::with_capacity(128);
        for planned in planned {
            key.clear();
            planned.stamp.write_key(&mut key);
            if let Some(seq) = self.index.get_stamp(&key, &planned.stamp, &self.state.entries)
                && !self.refused_release_replanned(seq, head)
            {
                continue;
            }
            if self.state.entries.len() >= JOURNAL_ENTRIES_MAX {
                report.deferred += 1;
                continue;
            }
            let action = planned.stamp.to_action();
            let current = head.view(&action);
            let state = match fence::check_view(&action, &current, &self.state.high_water) {
                FenceVerdict::Stale { reason } => EntryState::Skipped(reason),
                FenceVerdict::Current if planned.approval == Approval::Manual && !head.is_approved(&key) => {
                    EntryState::Pending
                }
                FenceVerdict::Current => EntryState::Approved,
            };
            self.raise_high_water(&action, &current)?;
            let seq = self.state.last_seq.next();
            self.commit(JournalChange::Append(JournalEntry {
                seq,
                action,
                state,
                detail: None,
                executed_seq: None,
                attempts: Attempts::default(),
            }))?;
            self.index.insert(&key, seq, &self.state.entries);
            match state {
                EntryState::Pending => {
                    self.pending.insert(seq);
                }
                EntryState::Approved => self.admit(seq),
                _ => {}
            }
            report.imported.push(IdempotencyKey::written(key.clone()));
        }
        Ok(())
    }

    /// Whether an existing entry is a release that the gate refused as `release-of-current` and
    /// that passes the gate now: the one stale reason that is not final (SPEC 13 made it depend
    /// on other pools — the holder was desired through another pool, and is not any more). Such
    /// a release is planned again under its key as a new entry, or the address would stay on
    /// the NIC for ever (its old line's epoch may never move again).
    fn refused_release_replanned(&self, seq: JournalSeq, head: &impl HeadTokens) -> bool {
        let entry = &self.state.entries[&seq];
        entry.state == EntryState::Skipped(StaleReason::ReleaseOfCurrent)
            && fence::check(&entry.action, head, &self.state.high_water) == FenceVerdict::Current
    }

    /// The sweep's first part: failed entries that are still current are approved again (a
    /// retry) once their backoff is over at the head's stream time (else the earliest end goes
    /// into the report), those stale by an epoch leave the retry set at once.
    fn sweep_failed(
        &mut self,
        head: &impl HeadTokens,
        report: &mut ReconcileReport,
    ) -> Result<(), NodeError<S::Error>> {
        let failed: Vec<JournalSeq> = self.failed.iter().copied().collect();
        let now_ms = head.stream_time_ms();
        // Acquires in doubt that are stale were counted as held before the plan
        // (`count_stale_in_doubt`, same head): what is left here is retried or let go.
        for seq in failed {
            let entry = &self.state.entries[&seq];
            match fence::check(&entry.action, head, &self.state.high_water) {
                FenceVerdict::Current => {
                    let due_ms = self.next_attempt_ms(entry).expect("a failed entry of the retry set");
                    if due_ms > now_ms {
                        report.retry_at_ms = earlier(report.retry_at_ms, Some(due_ms));
                        continue;
                    }
                    let key = entry.action.idempotency_key();
                    // An acquire in doubt keeps its mark through the retry.
                    let keep = entry.detail.clone().filter(|d| outcome_unknown(Some(d)));
                    self.set_state(seq, EntryState::Approved, keep)?;
                    report.retried.push(key);
                }
                FenceVerdict::Stale { reason: StaleReason::StaleEpoch | StaleReason::StaleOwnerEpoch } => {
                    self.failed.remove(&seq);
                    self.row_changed(seq);
                }
                FenceVerdict::Stale { .. } => {}
            }
        }
        Ok(())
    }

    /// The sweep's second part, `max` entries at a time: the next `max` open entries (pending or
    /// approved, oldest first) of the sweep under way go through the gate, and pending entries
    /// approved at the head (or whose pool no longer asks for an approval) move on. An entry
    /// opened after the sweep began is not its business (it went through the gate at its import,
    /// and goes through it again before its call).
    fn sweep_open(
        &mut self,
        head: &impl HeadTokens,
        max: usize,
        report: &mut ReconcileReport,
    ) -> Result<(), NodeError<S::Error>> {
        let Some((from, until)) = self.sweep_look.take() else {
            return Ok(());
        };
        // The first `max + 1` of each set hold the first `max + 1` of both: the window, and
        // whether anything is left after it.
        let look = max.saturating_add(1);
        let mut window: Vec<JournalSeq> = self
            .pending
            .range(from..=until)
            .take(look)
            .chain(self.approved.range(from..=until).take(look))
            .copied()
            .collect();
        window.sort_unstable();
        if window.len() > max {
            self.sweep_look = Some((window[max], until));
            window.truncate(max);
        }
        // A key is written only for an entry that changes (and, for a pending one of a pool that
        // wants approvals, into one reused buffer to ask the head): the window is thousands.
        let mut written = String::with_capacity(128);
        for seq in window {
            let entry = &self.state.entries[&seq];
            if let FenceVerdict::Stale { reason } = fence::check(&entry.action, head, &self.state.high_water)
            {
                let key = entry.action.idempotency_key();
                self.set_state(seq, EntryState::Skipped(reason), None)?;
                report.swept.push(key);
            } else if entry.state == EntryState::Pending
                && (!head.approval_required(&entry.action.pool)
                    || head.is_approved(entry.action.stamp().key_in(&mut written)))
            {
                let key = entry.action.idempotency_key();
                self.set_state(seq, EntryState::Approved, None)?;
                report.promoted.push(key);
            }
        }
        Ok(())
    }

    /// Whether no sweep of open entries is under way: the last pass's sweep went through every
    /// open entry its first slice found ([`NodeEngine::reconcile_slice`]).
    #[must_use]
    pub fn sweep_done(&self) -> bool {
        self.sweep_look.is_none()
    }

    /// Counts every acquire in doubt (`failed` or `approved`; of `keys` only, when given) that
    /// the fence rule refuses against `head` as held ([`NodeEngine::count_in_doubt_acquire`]).
    fn count_stale_in_doubt(
        &mut self,
        head: &impl HeadTokens,
        report: &mut ReconcileReport,
        keys: Option<&BTreeSet<ProviderAddress>>,
    ) -> Result<(), NodeError<S::Error>> {
        let candidates: Vec<JournalSeq> = self
            .in_doubt
            .iter()
            .copied()
            .filter(|seq| self.failed.contains(seq) || self.approved.contains(seq))
            .filter(|seq| {
                keys.is_none_or(|keys| keys.contains(&provider_address(&self.state.entries[seq].action)))
            })
            .collect();
        for seq in candidates {
            if self.count_in_doubt_acquire(seq, head)? {
                report.counted.push(self.state.entries[&seq].action.idempotency_key());
            }
        }
        Ok(())
    }

    /// Whether an acquire in doubt was counted as held since the last plan (at the gate, or when
    /// its result came back): planning again releases it.
    #[must_use]
    pub fn replan_due(&self) -> bool {
        self.replan
    }

    /// The last slice of a pass of [`NodeEngine::reconcile_slice`] planned: the pass planned the
    /// releases of what was counted as held before its first slice, so no plan is due for them
    /// (one counted since may not have been planned: it stays due).
    pub fn end_pass(&mut self) {
        if self.replan_marks.0 == self.replan_marks.1 {
            self.replan = false;
        }
    }

    /// Whether `entry` may be compacted: finished (executed, skipped, or failed and stale) and
    /// superseded (neither the last executed verb of its (provider, address), nor its last
    /// executed holding verb, nor stamped with the current captureEpoch of its line).
    fn droppable(&self, entry: &JournalEntry, head: &impl HeadTokens) -> bool {
        let finished = match entry.state {
            EntryState::Executed | EntryState::Skipped(_) => true,
            EntryState::Failed => !self.failed.contains(&entry.seq),
            EntryState::Pending | EntryState::Approved => false,
        };
        if !finished {
            return false;
        }
        let key = provider_address(&entry.action);
        let last = self.captured.last_executed(&key) == Some(entry.seq)
            || self.captured.last_holding(&key) == Some(entry.seq);
        !last && head.view(&entry.action).capture_epoch != entry.action.capture_epoch
    }

    /// Compaction (SPEC 13 "bounded journals"): past the retention limit, the oldest droppable
    /// entries ([`Self::droppable`]) are dropped until the journal is back at the limit. Open
    /// entries are never dropped.
    fn compact(
        &mut self,
        head: &impl HeadTokens,
        report: &mut ReconcileReport,
    ) -> Result<(), NodeError<S::Error>> {
        let excess = self.state.entries.len().saturating_sub(self.retention);
        if excess == 0 {
            return Ok(());
        }
        let seqs: Vec<JournalSeq> = self
            .state
            .entries
            .values()
            .filter(|entry| self.droppable(entry, head))
            .map(|entry| entry.seq)
            .take(excess)
            .collect();
        self.drop_entries(seqs, report)
    }

    /// The compaction of a requeue slice: the same rule as [`Self::compact`], looked at `scan`
    /// entries at a time (a journal of a million entries none of which may go is not walked
    /// whole at every slice). The look goes on from where the last slice's stopped, oldest
    /// first, and drops at once the droppable entries it found, up to what the journal is over
    /// its limit: the oldest droppable entries, which a whole compaction would drop first, bar
    /// those that became droppable behind the look. What a slice dropped stays dropped: a
    /// journal far over its limit (a restart's churn, an operator trial found 343k entries over
    /// a limit of 10k) shrinks slice by slice, even when the process restarts before a look
    /// reaches the end (the look's place is memory's; the drops are the store's).
    fn compact_a_slice(
        &mut self,
        head: &impl HeadTokens,
        scan: usize,
        report: &mut ReconcileReport,
    ) -> Result<(), NodeError<S::Error>> {
        let excess = self.state.entries.len().saturating_sub(self.retention);
        if excess == 0 {
            self.compact_look = None;
            return Ok(());
        }
        let from = self.compact_look.take().unwrap_or(JournalSeq::NONE);
        let mut found = Vec::new();
        for (looked, (seq, entry)) in self.state.entries.range(from..).enumerate() {
            if found.len() >= excess {
                break;
            }
            if looked == scan {
                self.compact_look = Some(*seq);
                break;
            }
            if self.droppable(entry, head) {
                found.push(*seq);
            }
        }
        self.drop_entries(found, report)
    }

    fn drop_entries(
        &mut self,
        seqs: Vec<JournalSeq>,
        report: &mut ReconcileReport,
    ) -> Result<(), NodeError<S::Error>> {
        if seqs.is_empty() {
            return Ok(());
        }
        let mut key = String::with_capacity(128);
        for seq in &seqs {
            self.index.remove(self.state.entries[seq].action.stamp().key_in(&mut key), *seq);
            self.predecessors.remove(seq);
        }
        report.compacted = seqs.len() as u64;
        self.commit(JournalChange::Compact { seqs })
    }
}
