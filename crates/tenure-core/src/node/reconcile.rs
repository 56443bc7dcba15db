//! A node's reconcile: plan from its view, import the plan through the gate against the head,
//! sweep open entries the head fences, compact finished ones (SPEC 5, 6, 13).

use super::{NodeEngine, NodeError, ReconcileReport, provider_address};
use crate::federation::{Federation, NodeId};
use crate::fence::{self, FenceVerdict, HeadTokens, StaleReason};
use crate::journal::{
    Attempts, EntryState, JOURNAL_ENTRIES_MAX, JournalChange, JournalEntry, JournalSeq, JournalStore,
    outcome_unknown,
};
use crate::model::Approval;
use crate::planner::{self, PlanCursor};

impl<S: JournalStore> NodeEngine<S> {
    /// Plan from `view`, import through the gate against `head`, sweep open entries, compact.
    pub fn reconcile(
        &mut self,
        view: &Federation,
        head: &impl HeadTokens,
    ) -> Result<ReconcileReport, NodeError<S::Error>> {
        self.reconcile_slice(view, head, &PlanCursor::default(), usize::MAX).map(|(report, _)| report)
    }

    /// [`NodeEngine::reconcile`] with a slice of the plan ([`planner::plan_slice`] from `cursor`,
    /// `max` positions of each walk): what the slice plans is imported; the sweep is a whole
    /// reconcile's; the compaction of a slice (`max` not `usize::MAX`) looks at `max` entries at
    /// most, from where the last slice's look stopped (round the journal, oldest first), where a
    /// whole reconcile's looks from the oldest entry until it found enough. Returns where the next
    /// slice resumes.
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
        // Acquires in doubt that went stale count as held before the plan, so that it releases
        // them in this reconcile.
        self.count_stale_in_doubt(head, &mut report)?;
        // The plan borrows the captured set while the import below commits: it is taken out for
        // the import (nothing there executes, so nothing there changes it) and always put back.
        let captured = std::mem::take(&mut self.captured);
        let (plan, next) = planner::plan_slice(view, node, &captured, cursor, max);
        // Only a plan of everything plans the releases of what was counted as held.
        if *cursor == PlanCursor::default() && next.is_done() {
            self.replan = false;
        }
        report.wake_at_ms = plan.wake_at_ms;
        let imported = self.import(&plan.actions, head, &mut report);
        drop(plan);
        self.captured = captured;
        imported?;
        self.sweep(head, &mut report)?;
        self.compact(head, (max != usize::MAX).then_some(max), &mut report)?;
        self.store.sync().map_err(NodeError::Store)?;
        self.check_sets();
        Ok((report, next))
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
            if let Some(seq) = self.index.get(key.as_str())
                && !self.refused_release_replanned(*seq, head)
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
                FenceVerdict::Current
                    if planned.approval == Approval::Manual && !head.is_approved(&action.idempotency_key) =>
                {
                    EntryState::Pending
                }
                FenceVerdict::Current => EntryState::Approved,
            };
            self.raise_high_water(&action, &current)?;
            let key = action.idempotency_key.clone();
            let seq = self.state.last_seq.next();
            self.commit(JournalChange::Append(JournalEntry {
                seq,
                action,
                state,
                detail: None,
                executed_seq: None,
                attempts: Attempts::default(),
            }))?;
            self.index.insert(key.clone(), seq);
            match state {
                EntryState::Pending => {
                    self.pending.insert(seq);
                }
                EntryState::Approved => self.admit(seq),
                _ => {}
            }
            report.imported.push(key);
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

    /// The sweep: failed entries that are still current are approved again (a retry) once their
    /// backoff is over at the head's stream time (else the earliest end goes into the report),
    /// those stale by an epoch leave the retry set at once; then every open entry goes through
    /// the gate, and pending entries approved at the head move on.
    fn sweep(
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
                        report.retry_at_ms = Some(report.retry_at_ms.map_or(due_ms, |at| at.min(due_ms)));
                        continue;
                    }
                    let key = entry.action.idempotency_key.clone();
                    // An acquire in doubt keeps its mark through the retry.
                    let keep = entry.detail.clone().filter(|d| outcome_unknown(Some(d)));
                    self.set_state(seq, EntryState::Approved, keep)?;
                    report.retried.push(key);
                }
                FenceVerdict::Stale { reason: StaleReason::StaleEpoch | StaleReason::StaleOwnerEpoch } => {
                    self.failed.remove(&seq);
                }
                FenceVerdict::Stale { .. } => {}
            }
        }
        let open: Vec<JournalSeq> = self.pending.iter().chain(&self.approved).copied().collect();
        for seq in open {
            let entry = &self.state.entries[&seq];
            let key = &entry.action.idempotency_key;
            if let FenceVerdict::Stale { reason } = fence::check(&entry.action, head, &self.state.high_water)
            {
                let key = key.clone();
                self.set_state(seq, EntryState::Skipped(reason), None)?;
                report.swept.push(key);
            } else if entry.state == EntryState::Pending
                && (head.is_approved(key) || !head.approval_required(&entry.action.pool))
            {
                let key = key.clone();
                self.set_state(seq, EntryState::Approved, None)?;
                report.promoted.push(key);
            }
        }
        Ok(())
    }

    /// Counts every acquire in doubt (`failed` or `approved`) that the fence rule refuses
    /// against `head` as held ([`NodeEngine::count_in_doubt_acquire`]).
    fn count_stale_in_doubt(
        &mut self,
        head: &impl HeadTokens,
        report: &mut ReconcileReport,
    ) -> Result<(), NodeError<S::Error>> {
        let candidates: Vec<JournalSeq> = self
            .failed
            .iter()
            .chain(&self.approved)
            .copied()
            .filter(|seq| self.is_acquire_in_doubt(*seq))
            .collect();
        for seq in candidates {
            if self.count_in_doubt_acquire(seq, head)? {
                report.counted.push(self.state.entries[&seq].action.idempotency_key.clone());
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

    /// Compaction (SPEC 13 "bounded journals"): past the retention limit, the oldest entries
    /// that are finished (executed, skipped, or failed and stale) and superseded (neither the
    /// last executed verb of their (provider, address), nor its last executed holding verb, nor
    /// stamped with the current captureEpoch of their line) are dropped until the journal is
    /// back at the limit. Open entries are never dropped. `scan`: look at that many entries at
    /// most, from where the last bounded look stopped (a requeue slice: a journal of a million
    /// entries none of which may go is not walked whole at every slice).
    fn compact(
        &mut self,
        head: &impl HeadTokens,
        scan: Option<usize>,
        report: &mut ReconcileReport,
    ) -> Result<(), NodeError<S::Error>> {
        let excess = self.state.entries.len().saturating_sub(self.retention);
        if excess == 0 {
            return Ok(());
        }
        let from = if scan.is_some() { self.compact_from.take() } else { None };
        let window = self.state.entries.range(from.unwrap_or(JournalSeq::NONE)..);
        let mut seqs = Vec::new();
        for (looked, (seq, entry)) in window.enumerate() {
            if seqs.len() == excess {
                break;
            }
            if scan.is_some_and(|scan| looked == scan) {
                self.compact_from = Some(*seq);
                break;
            }
            let finished = match entry.state {
                EntryState::Executed | EntryState::Skipped(_) => true,
                EntryState::Failed => !self.failed.contains(&entry.seq),
                EntryState::Pending | EntryState::Approved => false,
            };
            if !finished {
                continue;
            }
            let key = provider_address(&entry.action);
            let last = self.last_executed.get(&key) == Some(&entry.seq)
                || self.last_holding.get(&key) == Some(&entry.seq);
            if last || head.view(&entry.action).capture_epoch == entry.action.capture_epoch {
                continue;
            }
            seqs.push(entry.seq);
        }
        if seqs.is_empty() {
            return Ok(());
        }
        for seq in &seqs {
            let key = &self.state.entries[seq].action.idempotency_key;
            if self.index.get(key) == Some(seq) {
                self.index.remove(key);
            }
            self.predecessors.remove(seq);
        }
        report.compacted = seqs.len() as u64;
        self.commit(JournalChange::Compact { seqs })
    }
}
