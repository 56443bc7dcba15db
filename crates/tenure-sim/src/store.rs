//! A journal store that loses what was not synced when the simulated machine crashes — the
//! page cache of a real disk. It proves the engine's fsync ordering: the engine must sync before
//! an action leaves it, or a crash could forget the high-water mark that authorised the call.

use std::convert::Infallible;

use tenure_core::journal::{DurableNodeState, JournalChange, JournalStore};

/// Most unsynced changes the store buffers; the engine syncs long before.
pub const UNSYNCED_CHANGES_MAX: usize = 1 << 20;

/// Durable state plus a buffer of changes not yet synced.
#[derive(Clone, Debug, Default)]
pub struct LossyJournalStore {
    synced: DurableNodeState,
    unsynced: Vec<JournalChange>,
}

impl LossyJournalStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A crash of the machine: every change since the last sync is gone.
    pub fn lose_unsynced(&mut self) {
        self.unsynced.clear();
    }
}

impl JournalStore for LossyJournalStore {
    type Error = Infallible;

    /// What a reader sees: synced state plus the buffered changes (the page cache).
    fn load(&self) -> Result<DurableNodeState, Self::Error> {
        let mut state = self.synced.clone();
        for change in &self.unsynced {
            state.apply(change);
        }
        Ok(state)
    }

    fn commit(&mut self, change: &JournalChange) -> Result<(), Self::Error> {
        assert!(self.unsynced.len() < UNSYNCED_CHANGES_MAX, "the engine syncs at every reconcile");
        self.unsynced.push(change.clone());
        Ok(())
    }

    fn sync(&mut self) -> Result<(), Self::Error> {
        for change in self.unsynced.drain(..) {
            self.synced.apply(&change);
        }
        Ok(())
    }
}
