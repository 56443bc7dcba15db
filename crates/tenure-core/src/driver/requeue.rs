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
    /// The report of the slice.
    pub report: ReconcileReport,
    /// Whether the pass is over (or none was under way or due): every position was planned
    /// since it began. `false`: call again for the next slice.
    pub done: bool,
}

/// A pass under way: where its next slice begins, and what its end records as planned.
#[derive(Clone, Debug, Default)]
pub(super) struct Pass {
    cursor: PlanCursor,
    /// What the pass planned from, set by its first slice: the view's plan generation then, the
    /// earliest hold ending any slice planned, and the earliest retry (the first slice's sweep,
    /// or a failure since). Recorded as the node's last plan when the pass ends.
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

    /// The next slice of planning. A node that may not reconcile (paused, partitioned) ends its
    /// pass. With no pass under way, one begins when the node's plan is due
    /// ([`NodeDriver::reconcile_due`]); with none under way or due, nothing is done. A slice
    /// plans the next `max` positions of each of the planner's walks
    /// ([`crate::planner::plan_slice`]), imports what the journal lacks and re-reports the results
    /// of its part of the captured set the log has not confirmed; the first slice of a pass also
    /// counts stale acquires in doubt and sweeps ([`crate::node::NodeEngine::reconcile_slice`]).
    ///
    /// The slices of one pass over an unchanged view plan exactly what one whole reconcile plans
    /// ([`NodeDriver::reconcile`]). A change of the view during a pass does not stop it: the
    /// slices after it plan from the new view, and its end records the generation its first
    /// slice planned from, so the plan is due again and the next call begins another pass (what
    /// a whole reconcile does when the view moves while it plans: the positions it passed wait for
    /// the next). A pass of `usize::MAX` is a whole reconcile.
    pub fn requeue(&mut self, max: usize) -> Result<Result<Requeued, Blocked>, NodeError<S::Error>> {
        if let Some(blocked) = self.blocked() {
            self.pass = None;
            return Ok(Err(blocked));
        }
        if self.pass.is_none() && self.reconcile_due() {
            self.pass = Some(Pass::default());
        }
        let Some(mut pass) = self.pass.take() else {
            return Ok(Ok(Requeued { report: ReconcileReport::default(), done: true }));
        };
        let cursor = pass.cursor.clone();
        let (report, next) = self.engine.reconcile_slice(&self.view, &self.view, &cursor, max)?;
        match pass.planned.as_mut() {
            None => {
                pass.planned = Some(PlannedAt {
                    generation: self.view.plan_generation(),
                    wake_at_ms: report.wake_at_ms,
                    retry_at_ms: report.retry_at_ms,
                });
            }
            Some(planned) => {
                if let Some(wake) = report.wake_at_ms {
                    planned.wake_at_ms = Some(planned.wake_at_ms.map_or(wake, |w| w.min(wake)));
                }
            }
        }
        if let Some(window) = cursor.captured_window(&next) {
            self.queue_unconfirmed_in(window);
        }
        let done = next.is_done();
        if done {
            if !pass.again {
                self.planned_at = pass.planned;
                self.engine.end_pass();
            }
            // Still due (the view moved during the pass, or the node must plan again): the next
            // pass begins at once, not at the next wake-up of the caller. It cannot go on for
            // ever with nothing new: what this end recorded is due again only when something
            // arrives (a hold ending and a retry are recorded as times to come).
            if self.reconcile_due() {
                self.pass = Some(Pass::default());
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

    /// Whether a pass is under way: [`NodeDriver::requeue`] has slices left, and the node may
    /// reconcile (a paused or partitioned node has nothing under way to come back for).
    #[must_use]
    pub fn requeue_under_way(&self) -> bool {
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
