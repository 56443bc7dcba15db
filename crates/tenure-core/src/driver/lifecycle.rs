//! A node's life as the driver keeps it (SPEC 13's local steps): a freeze and a resume's
//! zombie pass, a crash and restart, a partition and its healing.

use super::{Blocked, NodeDriver};
use crate::journal::JournalStore;
use crate::node::NodeError;

impl<S: JournalStore> NodeDriver<S> {
    /// The process freezes: it stops reading the log but keeps what it planned. Freezing again
    /// during a resume's zombie pass ends that pass: what is approved now is what the next
    /// resume may gate.
    pub fn pause(&mut self) {
        if !self.paused || self.zombie.is_some() {
            self.paused = true;
            self.zombie = None;
            self.approved_before_pause = self.engine.approved_seqs();
        }
    }

    /// The process wakes up. Unless blocked, the caller follows the log to its head, then calls
    /// [`NodeDriver::poll_actions`] until it returns nothing (it gates only what was approved
    /// before the pause: the zombie; catching up changes no journal entry), and then
    /// [`NodeDriver::finish_resume`]. A partitioned node only clears its pause.
    pub fn resume(&mut self) -> Result<usize, Blocked> {
        if !self.paused {
            return Err(Blocked::NotPaused);
        }
        self.paused = false;
        let only = std::mem::take(&mut self.approved_before_pause);
        if self.partitioned {
            return Err(Blocked::Partitioned);
        }
        let count = only.len();
        self.paused = true;
        self.zombie = Some(only);
        Ok(count)
    }

    /// The end of a resume's zombie pass: the node acts again, and plans at its next reconcile.
    pub fn finish_resume(&mut self) {
        if self.zombie.take().is_some() {
            self.paused = false;
            self.start_over();
        }
    }

    /// A crash and restart: memory lost (the view, a pause), the durable journal and
    /// high-water marks kept. A partition is the network's, not the process's: it stays.
    pub fn restart(&mut self) -> Result<(), NodeError<S::Error>> {
        self.engine.restart()?;
        self.view = self.registry.clone();
        self.applied_index = None;
        self.paused = false;
        self.zombie = None;
        self.approved_before_pause.clear();
        self.outbox.clear();
        self.planned_at = None;
        self.changed.clear();
        self.holds.clear();
        self.pass = None;
        self.promoted_at = None;
        self.outran.clear();
        Ok(())
    }

    /// The node is cut off from the log head.
    pub fn partition(&mut self) {
        self.partitioned = true;
    }

    /// The node reads the log head again.
    pub fn heal(&mut self) {
        self.partitioned = false;
    }
}
