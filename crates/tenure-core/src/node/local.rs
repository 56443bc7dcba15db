//! Releases a node made on its own authority, outside the gate (SPEC 7: `onprem` under
//! `authority: vrrp`). When keepalived says this host is not MASTER, the agent removes its proxy
//! entries at once, without the log: a release can never add a second answerer, so it needs no
//! token check. The engine then records what happened as what it is — an executed release of
//! what the node had captured — so that "captured" forgets the address, the outbox reports the
//! release to the log, and a crash after the removal never leaves the node believing it holds
//! the address.

use std::net::IpAddr;

use super::{NodeEngine, NodeError};
use crate::federation::Federation;
use crate::journal::{EntryState, JournalChange, JournalEntry, JournalStore};
use crate::model::{IdempotencyKey, StampedAction, VerbFamily};

impl<S: JournalStore> NodeEngine<S> {
    /// Whether a call for (`provider`, `address`) is in flight: its result comes first.
    #[must_use]
    pub fn call_in_flight(&self, provider: &str, address: IpAddr) -> bool {
        self.busy.get(&address).is_some_and(|providers| providers.iter().any(|p| **p == *provider))
    }

    /// Journals the release verbs of what this node captured at (`provider`, `address`) as
    /// executed, with `detail` (the local removal): stamped as the planner stamps a release (the
    /// pool, NIC and line of the acquire it undoes, that line's captureEpoch and the address's
    /// ownershipEpoch in `view`). Synced before it returns: the journal says so before the log
    /// does. Returns the keys recorded; none when the node has not captured the address, or when
    /// a call for it is in flight (its result decides first: the caller withdraws again after it,
    /// so an add that lands late is removed too).
    pub fn record_local_release(
        &mut self,
        view: &Federation,
        provider: &str,
        address: IpAddr,
        detail: &str,
    ) -> Result<Vec<IdempotencyKey>, NodeError<S::Error>> {
        let at = (crate::names::shared(provider), address);
        let Some(record) = self.captured.get(&at).cloned() else { return Ok(Vec::new()) };
        if self.call_in_flight(provider, address) {
            return Ok(Vec::new());
        }
        let family = view.provider_kind(provider).map_or(VerbFamily::Cloud, |k| k.verb_family());
        let capture_epoch = view.capture_epoch(&record.pool, address, &record.capture_domain);
        let ownership_epoch = view.ownership_epoch(&record.pool, address);
        let mut recorded = Vec::new();
        for verb in family.release_verbs() {
            let action = StampedAction::new(
                &record.pool,
                address,
                *verb,
                &self.name,
                provider,
                &record.nic,
                record.capture_domain.clone(),
                capture_epoch,
                ownership_epoch,
            );
            let key = action.idempotency_key();
            let seq = match self
                .index
                .get(&key, &self.state.entries)
                .map(|seq| (seq, self.state.entries[&seq].state))
            {
                Some((_, EntryState::Executed)) => continue,
                // A planned release of this stamp, not started: it is done now.
                Some((seq, EntryState::Pending | EntryState::Approved)) => seq,
                // A failed call of it: taken up again (a retry, one of the two moves out of `failed`), then
                // done.
                Some((seq, EntryState::Failed)) => {
                    self.set_state(seq, EntryState::Approved, None)?;
                    seq
                }
                // Fenced earlier (`release-of-current`: the node was the desired holder) or never
                // journaled: a new entry under the key, as a release planned again is.
                Some((_, EntryState::Skipped(_))) | None => {
                    let seq = self.state.last_seq.next();
                    self.commit(JournalChange::Append(JournalEntry {
                        seq,
                        action,
                        state: EntryState::Approved,
                        detail: None,
                        executed_seq: None,
                        attempts: crate::journal::Attempts::default(),
                    }))?;
                    self.index.insert(&key, seq, &self.state.entries);
                    seq
                }
            };
            self.set_state(seq, EntryState::Executed, Some(crate::names::shared(detail)))?;
            recorded.push(key);
        }
        debug_assert!(
            recorded.is_empty() || !self.captured.contains_key(&at),
            "a recorded release leaves nothing captured"
        );
        self.store.sync().map_err(NodeError::Store)?;
        self.check_sets();
        Ok(recorded)
    }
}
