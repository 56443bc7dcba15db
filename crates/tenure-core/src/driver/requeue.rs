//! The requeue's safety net, bounded in work per call: the agent re-plans every address at least
//! once per `requeueInterval` (level-triggered, SPEC 5), a slice at a time, so that a pass over a
//! million addresses never holds its loop for seconds.

use super::{Blocked, NodeDriver};
use crate::journal::JournalStore;
use crate::node::{NodeError, ReconcileReport};
use crate::planner::PlanCursor;

/// What one [`NodeDriver::requeue`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requeued {
    /// The reconcile's report (of a slice, or of a whole reconcile).
    pub report: ReconcileReport,
    /// Whether the pass is over: every position was re-planned since it began (or a whole
    /// reconcile just ran). `false`: call again for the next slice.
    pub done: bool,
}

impl<S: JournalStore> NodeDriver<S> {
    /// Begins a requeue pass (the requeue interval came round), unless one is under way: the next
    /// [`NodeDriver::requeue`] calls take its slices.
    pub fn begin_requeue(&mut self) {
        if self.requeue_at.is_none() {
            self.requeue_at = Some(PlanCursor::default());
        }
    }

    /// One turn of the requeue's safety net. A node that may not reconcile (paused,
    /// partitioned) ends its pass. A node whose reconcile is due ([`NodeDriver::reconcile_due`])
    /// reconciles whole, which ends the pass. With no pass under way, nothing is done; with one,
    /// the next slice of the pass re-plans the next `max` positions of each of the planner's
    /// walks ([`crate::planner::plan_slice`]), imports what the journal lacks and re-reports the
    /// results of its part of the captured set the log has not confirmed; the first slice also
    /// sweeps, once per pass ([`crate::node::NodeEngine::reconcile_slice`]). The slices of one
    /// pass over an unchanged view plan exactly what one whole reconcile plans; a change in
    /// between makes the reconcile due, and the next call plans whole. A slice leaves
    /// [`NodeDriver::reconcile_due`]'s record of the last whole plan as it was, but for an
    /// earlier hold ending (none is expected: the slices plan what the last whole plan did) and
    /// the first slice's sweep's earliest retry.
    pub fn requeue(&mut self, max: usize) -> Result<Result<Requeued, Blocked>, NodeError<S::Error>> {
        if let Some(blocked) = self.blocked() {
            self.requeue_at = None;
            return Ok(Err(blocked));
        }
        if self.reconcile_due() {
            return Ok(self.reconcile()?.map(|report| Requeued { report, done: true }));
        }
        let Some(cursor) = self.requeue_at.take() else {
            return Ok(Ok(Requeued { report: ReconcileReport::default(), done: true }));
        };
        let first = cursor == PlanCursor::default();
        let (report, next) = self.engine.reconcile_slice(&self.view, &self.view, &cursor, max)?;
        if let Some(at) = self.planned_at.as_mut() {
            if let Some(wake) = report.wake_at_ms {
                at.wake_at_ms = Some(at.wake_at_ms.map_or(wake, |w| w.min(wake)));
            }
            if first {
                at.retry_at_ms = report.retry_at_ms;
            }
        }
        if let Some(window) = cursor.captured_window(&next) {
            self.queue_unconfirmed_in(window);
        }
        let done = next.is_done();
        if !done {
            self.requeue_at = Some(next);
        }
        Ok(Ok(Requeued { report, done }))
    }

    /// Whether a requeue pass is under way: [`NodeDriver::requeue`] has slices left, and the node
    /// may reconcile (a paused or partitioned node has nothing under way to come back for).
    #[must_use]
    pub fn requeue_under_way(&self) -> bool {
        self.requeue_at.is_some() && self.blocked().is_none()
    }
}
