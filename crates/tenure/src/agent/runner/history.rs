//! The loop's history of the log (`GET /v1/history`): the core's fold
//! ([`tenure_core::federation::history::History`]) over the records the agent follows, kept up
//! to date at every follow. It reads the records itself (after the nodes' drivers did), so it
//! needs nothing of theirs; it costs one more decode per record and one more projection.

use tenure_core::log_store::LogError;
use tracing::{debug, info, warn};

use super::super::AgentStore;
use super::Agent;

impl<S: AgentStore> Agent<S> {
    /// Folds the records appended since the last follow into the history. When the records it
    /// needs were compacted away (an etcd fleet's log below its snapshot), it starts again from
    /// the store's newest snapshot: the history then reaches back to the record after it. A log
    /// it cannot read now is tried again at the next follow (the drivers report it in health).
    pub(super) fn follow_history(&mut self) {
        match self.history.catch_up_from(&self.log) {
            Ok(_) => {}
            Err(LogError::Compacted { oldest, .. }) => self.restart_history(oldest.get()),
            Err(e) => debug!(error = %e, "the history cannot follow the log now; trying again later"),
        }
    }

    /// Starts the history over from the store's newest snapshot, then follows the log from it.
    fn restart_history(&mut self, oldest: u64) {
        let Some((index, bytes)) = self.store.snapshot() else {
            warn!(
                oldest,
                "the log was compacted below its oldest record but the store has no snapshot: no history"
            );
            return;
        };
        match self.history.restart_from_snapshot(&bytes, index) {
            Ok(()) => {
                info!(
                    index = index.get(),
                    "the history starts after the log's snapshot (older records were compacted)"
                );
                if let Err(e) = self.history.catch_up_from(&self.log) {
                    debug!(error = %e, "the history cannot follow the log now; trying again later");
                }
            }
            Err(e) => {
                warn!(index = index.get(), error = %e, "cannot start the history from the log's snapshot")
            }
        }
    }
}
