//! When a node plans (SPEC 5, issue 24): what its last plan planned from, and whether planning
//! again is due — the positions the view named as changed ([`crate::federation::Federation::take_plan_changes`]),
//! planned at once and alone, or everything (a pass of slices: [`NodeDriver::requeue`]).

use std::collections::BTreeSet;

use super::{NodeDriver, RETRY_WITHOUT_BACKOFF_MS};
use crate::journal::{JournalSeq, JournalStore};
use crate::model::StampedAction;
use crate::node::{NodeError, ReconcileReport, earlier};

/// The view's whole plan generation at the last completed plan of everything, and the earliest
/// end of a failed action's backoff since (that plan's sweep, or a failure after). (A release
/// held back is not here: its position is planned again when its hold ends, [`NodeDriver::holds`].)
#[derive(Clone, Copy, Debug)]
pub(super) struct PlannedAt {
    pub(super) generation: u64,
    pub(super) retry_at_ms: Option<u64>,
}

impl<S: JournalStore> NodeDriver<S> {
    /// Whether planning again could change anything the last plans did: positions the view
    /// named as changed wait to be planned ([`crate::federation::Federation::take_plan_changes`]: planned alone,
    /// at the next [`NodeDriver::requeue`]), or everything is due ([`Self::whole_plan_due`]). A
    /// node that reconciles only when this says so (plus on a requeue interval) plans as a node
    /// that reconciles after every event; one that plans in passes ([`NodeDriver::requeue`])
    /// plans the same once the view stops moving, a change the view cannot name during a pass
    /// waiting for the next pass for the positions already passed. Heartbeats alone do not make
    /// it plan anything, nor do its own results but for an executed release verb (its position:
    /// [`Self::released`]) and one that contradicts the view (everything). An approval makes
    /// nothing due here: it is [`NodeDriver::promotion_due`], which a caller asks as well.
    #[must_use]
    pub fn reconcile_due(&self) -> bool {
        self.changes_due() || self.whole_plan_due()
    }

    /// Whether a plan of everything is due: never planned (or restarted, or resumed, or the view
    /// restored) since, the view's [`crate::federation::Federation::whole_plan_generation`] moved (a change it
    /// cannot name by position), stream time reached the end of a failed
    /// action's backoff ([`crate::node::NodeEngine::next_attempt_ms`]), a call result left the node holding
    /// what its view no longer wants (or the reverse: the view moved while the call was in
    /// flight), or an acquire in doubt was counted as held ([`crate::node::NodeEngine::replan_due`]).
    #[must_use]
    pub fn whole_plan_due(&self) -> bool {
        self.engine.replan_due()
            || self.planned_at.is_none_or(|at| {
                let now_ms = self.view.stream_time_ms();
                at.generation != self.view.whole_plan_generation()
                    || at.retry_at_ms.is_some_and(|retry| now_ms >= retry)
            })
    }

    /// Whether positions wait to be planned: named as changed by the view, or a release's hold
    /// ended ([`NodeDriver::holds`]).
    pub(super) fn changes_due(&self) -> bool {
        !self.changed.is_empty()
            || self.view.has_plan_changes()
            || self.holds.first_key_value().is_some_and(|(due, _)| self.view.stream_time_ms() >= *due)
    }

    /// Keeps the positions of the releases a plan held back, by when their hold ends: planned
    /// again then, alone (a hold's end is not a plan of everything).
    pub(super) fn hold(&mut self, report: &ReconcileReport) {
        for (due, provider, address) in &report.held {
            self.holds.entry(*due).or_default().insert((crate::names::shared(provider), *address));
        }
    }

    /// Everything was planned (a whole reconcile): the positions named so far are planned too.
    pub(super) fn planned(&mut self, report: &ReconcileReport) {
        self.planned_at = Some(PlannedAt {
            generation: self.view.whole_plan_generation(),
            retry_at_ms: report.retry_at_ms,
        });
        self.view.take_plan_changes();
        self.changed.clear();
        self.holds.clear();
        self.hold(report);
    }

    /// An executed call: a release verb (any: "captured" is "the last executed verb was an
    /// acquire verb") leaves the node's captured set without the address, which its plan reads
    /// (with drift repair, what the provider last showed on the NIC now counts as captured
    /// through the first pool that lists it): its position is planned again, as a change the view
    /// named. (An acquire that lands where the view no longer wants it makes the node plan
    /// everything: [`NodeDriver::plan_again`].) The position to plan again; `None` for an
    /// acquire verb.
    pub(super) fn released(action: &StampedAction) -> Option<crate::model::ProviderAddress> {
        (!action.verb.is_acquire()).then(|| (action.provider.clone(), action.address))
    }

    /// Plans up to `max` of the positions the view named as changed, alone
    /// ([`crate::node::NodeEngine::reconcile_keys`]), those whose hold ended among them; the
    /// releases it holds back are kept for their hold's end ([`Self::hold`]). Returns the report,
    /// empty when none was waiting.
    pub(super) fn plan_changes(&mut self, max: usize) -> Result<ReconcileReport, NodeError<S::Error>> {
        let taken = self.view.take_plan_changes();
        self.changed.extend(taken);
        let now_ms = self.view.stream_time_ms();
        while let Some(ended) = self.holds.first_entry().filter(|hold| *hold.key() <= now_ms) {
            self.changed.extend(ended.remove());
        }
        if self.changed.is_empty() {
            return Ok(ReconcileReport::default());
        }
        let keys: BTreeSet<crate::model::ProviderAddress> = if self.changed.len() <= max {
            std::mem::take(&mut self.changed)
        } else {
            let rest = self.changed.split_off(&self.changed.iter().nth(max).expect("more than max").clone());
            std::mem::replace(&mut self.changed, rest)
        };
        let report = match self.engine.reconcile_keys(&self.view, &self.view, &keys) {
            Ok(report) => report,
            Err(e) => {
                // Not planned: they stay named for the next call.
                self.changed.extend(keys);
                return Err(e);
            }
        };
        self.hold(&report);
        Ok(report)
    }

    /// After a call's result: a failure that a sweep may retry wakes the node when its backoff
    /// ends ([`NodeDriver::reconcile_due`]). One without a backoff ahead (the on-prem verbs,
    /// [`crate::model::Verb::backs_off`]) wakes it [`RETRY_WITHOUT_BACKOFF_MS`] of stream time
    /// later: not at once (a failing call would be retried in a loop, each failure's own result
    /// moving stream time), and not only at the requeue (a failed on-prem release would leave the
    /// host answering beside the new holder for a whole `requeueInterval`).
    pub(super) fn wake_for_retry(&mut self, seq: JournalSeq) {
        let now_ms = self.view.stream_time_ms();
        let due = self
            .engine
            .entry_at(seq)
            .and_then(|entry| self.engine.next_attempt_ms(entry))
            .map(|due| if due > now_ms { due } else { now_ms.saturating_add(RETRY_WITHOUT_BACKOFF_MS) });
        let pass = self.pass.as_mut().and_then(|pass| pass.planned.as_mut());
        for at in [self.planned_at.as_mut(), pass].into_iter().flatten() {
            if let Some(due) = due {
                at.retry_at_ms = earlier(at.retry_at_ms, Some(due));
            }
        }
    }
}
