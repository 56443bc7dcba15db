//! Planning a slice at a time: a node whose plan is due ([`NodeDriver::reconcile_due`]), and the
//! requeue's safety net (the agent re-plans every address at least once per `requeueInterval`,
//! level-triggered, SPEC 5), plan in passes of slices bounded in work per call, so that a plan
//! of a million addresses never holds its loop for seconds.

use super::{Blocked, NodeDriver, PlannedAt};
use crate::journal::JournalStore;
use crate::node::{NodeError, ReconcileReport};
use crate::planner::PlanCursor;

/// What one [`NodeDriver::requeue`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requeued {
    /// The report of the changed positions planned and of the slice.
    pub report: ReconcileReport,
    /// Whether a pass ended (every position was planned since it began), or nothing was to be
    /// done. `false`: call again (for the next slice, or the changed positions left).
    pub done: bool,
}

/// A pass under way: where its next slice begins, and what its end records as planned.
#[derive(Clone, Debug, Default)]
pub(super) struct Pass {
    cursor: PlanCursor,
    /// What the pass planned from, set by its first slice: the view's whole plan generation
    /// then, and the earliest retry (the first slice's sweep, or a failure since). Recorded as
    /// the node's last plan when the pass ends.
    pub(super) planned: Option<PlannedAt>,
    /// Something made the node plan again that positions already passed may have missed (a
    /// result that contradicts the view, a local release): the pass's end records nothing, so
    /// the next call begins another.
    again: bool,
}

impl<S: JournalStore> NodeDriver<S> {
    /// Begins a requeue pass (the requeue interval came round), unless one is under way: the next
    /// [`NodeDriver::requeue`] calls take its slices.
    pub fn begin_requeue(&mut self) {
        if self.pass.is_none() {
            self.pass = Some(Pass::default());
        }
    }

    /// A pass begins: it plans every position from the view as it finds it, so the positions
    /// named as changed so far need no plan of their own when they are more than a call plans
    /// (`max`): a pool of 65,536 addresses applied is one pass, not also 65,536 positions
    /// planned one by one. Fewer are planned at once all the same (the pass may reach them
    /// seconds later); those named during the pass are kept (it may have passed them).
    fn begin_pass(&mut self, max: usize) {
        self.pass = Some(Pass::default());
        self.changed.extend(self.view.take_plan_changes());
        if self.changed.len() > max {
            self.changed.clear();
        }
    }

    /// The next slice of planning. A node that may not reconcile (paused, partitioned) ends its
    /// pass. First the positions the view named as changed ([`crate::federation::Federation::take_plan_changes`])
    /// are planned alone, `max` at most ([`crate::node::NodeEngine::reconcile_keys`]: incremental
    /// planning, a hand-over planned at once whatever the size of the map). Then, with no pass
    /// under way, one begins when a plan of everything is due ([`NodeDriver::whole_plan_due`]);
    /// with none under way or due, nothing more is done. A slice plans the next `max` positions
    /// of each of the planner's walks ([`crate::planner::plan_slice`]), imports what the journal
    /// lacks and re-reports the results of its part of the captured set the log has not
    /// confirmed, and sweeps the next open entries (`max` × [`crate::node::SWEEP_ENTRIES_PER_POSITION`]); the first slice of a pass also counts
    /// stale acquires in doubt and retries failed entries
    /// ([`crate::node::NodeEngine::reconcile_slice`]). A pass ends when its plan and its sweep
    /// are both done.
    ///
    /// The slices of one pass over an unchanged view plan exactly what one whole reconcile plans
    /// ([`NodeDriver::reconcile`]). A change of the view during a pass does not stop it: the
    /// positions it names are planned at the next call, the slices after it plan from the new
    /// view, and a change it cannot name leaves the plan of everything due at the pass's end (the
    /// generation its first slice planned from), so the next call begins another pass. A pass of
    /// `usize::MAX` is a whole reconcile.
    pub fn requeue(&mut self, max: usize) -> Result<Result<Requeued, Blocked>, NodeError<S::Error>> {
        if let Some(blocked) = self.blocked() {
            // A pass dropped before its end planned nothing for good: the plan of everything
            // stays due (its beginning may have dropped named positions).
            if self.pass.take().is_some() {
                self.planned_at = None;
            }
            return Ok(Err(blocked));
        }
        if self.pass.is_none() && self.whole_plan_due() {
            self.begin_pass(max);
        }
        let mut report = self.plan_changes(max)?;
        let keys_planned = report != ReconcileReport::default();
        let Some(mut pass) = self.pass.take() else {
            let done = !keys_planned && self.changed.is_empty();
            return Ok(Ok(Requeued { report, done }));
        };
        let cursor = pass.cursor.clone();
        let (slice, next) = self.engine.reconcile_slice(&self.view, &self.view, &cursor, max)?;
        if pass.planned.is_none() {
            pass.planned = Some(PlannedAt {
                generation: self.view.whole_plan_generation(),
                retry_at_ms: slice.retry_at_ms,
            });
        }
        self.hold(&slice);
        report.absorb(slice);
        if let Some(window) = cursor.captured_window(&next) {
            self.queue_unconfirmed_in(window);
        }
        // The pass's sweep of open entries goes on after its plan is done, if it must.
        let done = next.is_done() && self.engine.sweep_done();
        if done {
            if !pass.again {
                self.planned_at = pass.planned;
                self.engine.end_pass();
            }
            // Still due (the view moved during the pass, or the node must plan again): the next
            // pass begins at once, not at the next wake-up of the caller. It cannot go on for
            // ever with nothing new: what this end recorded is due again only when something
            // arrives (a retry is recorded as a time to come; a hold's end names its position).
            if self.whole_plan_due() {
                self.begin_pass(max);
            }
        } else {
            pass.cursor = next;
            self.pass = Some(pass);
        }
        Ok(Ok(Requeued { report, done }))
    }

    /// Whether pending entries may have been approved since the last promotion
    /// ([`NodeDriver::start_execution`]): some are pending and the view moved since (an
    /// `approve` moves it). The agent promotes then, not only at the end of a pass: an approval
    /// is not held up by a long pass. (Entries of a pool switched to automatic approval are
    /// promoted by the sweep of the pass that the switch begins.)
    #[must_use]
    pub fn promotion_due(&self) -> bool {
        self.engine.pending_count() > 0 && self.promoted_at != Some(self.view.plan_generation())
    }

    /// Whether planning is under way: [`NodeDriver::requeue`] has slices of a pass left, or
    /// positions the view named as changed to plan, and the node may reconcile (a paused or
    /// partitioned node has nothing under way to come back for).
    #[must_use]
    pub fn requeue_under_way(&self) -> bool {
        (self.pass.is_some() || self.changes_due()) && self.blocked().is_none()
    }

    /// Whether a step should take this node: planning is due or under way
    /// ([`Self::reconcile_due`], [`Self::requeue_under_way`]: call [`Self::requeue`]), or
    /// approvals may wait to be promoted ([`Self::promotion_due`]: an `approve` names no
    /// position, so nothing else says so). The agent's step and the simulator ask this.
    #[must_use]
    pub fn step_due(&self) -> bool {
        self.reconcile_due() || self.requeue_under_way() || self.promotion_due()
    }

    /// Whether a pass of slices is under way (changed positions waiting aside) and the node may
    /// reconcile: the agent times its requeue interval from the end of a pass.
    #[must_use]
    pub fn pass_under_way(&self) -> bool {
        self.pass.is_some() && self.blocked().is_none()
    }

    /// Something the last plan did not see changed what the node must do (a result that
    /// contradicts the view, a local release): the plan is due, and a pass under way whose first
    /// slice planned already does not count as the plan at its end (one that has not begun will
    /// see it).
    pub(super) fn plan_again(&mut self) {
        self.planned_at = None;
        if let Some(pass) = self.pass.as_mut()
            && pass.planned.is_some()
        {
            pass.again = true;
        }
    }

    /// The view is not the one the node planned from (a resume, a restored snapshot): the plan
    /// is due, and a pass under way is dropped — the next begins from the first position.
    pub(super) fn start_over(&mut self) {
        self.planned_at = None;
        self.pass = None;
        self.promoted_at = None;
    }
}
