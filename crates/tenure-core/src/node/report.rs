//! What a reconcile reports: what it imported, swept, promoted, retried, counted and held.

use std::net::IpAddr;

use super::reconcile::earlier;
use crate::model::IdempotencyKey;

/// What one reconcile did, for narration and metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Keys newly journaled (in any state).
    pub imported: Vec<IdempotencyKey>,
    /// Open entries the sweep turned into `skipped`.
    pub swept: Vec<IdempotencyKey>,
    /// Pending entries promoted because the head shows their approval (or their pool no longer
    /// asks for one: switched to `approval: auto`).
    pub promoted: Vec<IdempotencyKey>,
    /// Failed entries still current whose backoff was over, approved again for a retry.
    pub retried: Vec<IdempotencyKey>,
    /// The earliest stream time at which a failed entry still current, left waiting by this
    /// sweep, may be retried ([`NodeEngine::next_attempt_ms`]): a sweep at or after it retries it.
    pub retry_at_ms: Option<u64>,
    /// Acquires in doubt that the fence rule now refuses, counted as held before the plan
    /// ([`NodeEngine::count_in_doubt_acquire`]): this reconcile plans their release.
    pub counted: Vec<IdempotencyKey>,
    /// Planned actions not imported because the journal is at `JOURNAL_ENTRIES_MAX`.
    pub deferred: u64,
    /// Finished, superseded entries compacted away.
    pub compacted: u64,
    /// The plan's [`planner::Plan::held`]: (due, provider, address) of each release held back.
    pub held: Vec<(u64, String, IpAddr)>,
}

impl ReconcileReport {
    /// The earliest stream time at which a release this plan held back becomes due.
    #[must_use]
    pub fn wake_at_ms(&self) -> Option<u64> {
        self.held.iter().map(|(due, _, _)| *due).min()
    }

    /// Adds what a later plan of the same step did: its lists after this one's, the earlier of
    /// the two retry times, the counts summed.
    pub fn absorb(&mut self, later: Self) {
        self.imported.extend(later.imported);
        self.swept.extend(later.swept);
        self.promoted.extend(later.promoted);
        self.retried.extend(later.retried);
        self.counted.extend(later.counted);
        self.deferred += later.deferred;
        self.compacted += later.compacted;
        self.retry_at_ms = earlier(self.retry_at_ms, later.retry_at_ms);
        self.held.extend(later.held);
    }
}
