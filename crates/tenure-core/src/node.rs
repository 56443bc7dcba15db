//! One node's engine: planning, importing, sweeping, gating and compacting its journal.
//!
//! The engine is sans-IO in the quinn-proto manner. The driver ([`crate::driver`]) calls:
//! - [`NodeEngine::reconcile`] with the node's view of the log (after catching up) and the log
//!   head: plan, import through the gate, sweep the journal through the gate, compact;
//! - [`NodeEngine::promote_approved`] once at the start of an execute pass: pending entries
//!   that the head shows approved become approved (SPEC 13: only in reconcile or execute);
//! - [`NodeEngine::poll_execution`] with the head: the next ready entry that passes the gate,
//!   or `None` when nothing is left; stale entries met on the way become `skipped`;
//! - [`NodeEngine::poll_stale_in_flight`] with the head, after every catch-up while calls are
//!   in flight: the calls the fence rule now refuses, for the runtime to cancel (SPEC 9);
//! - [`NodeEngine::handle_execution_result`] with what the provider said;
//! - [`NodeEngine::poll_refreshes`] with the head, when the runtime repeats the announcement of
//!   addresses the node holds (`garpRefresh`), and [`NodeEngine::handle_refresh_result`].
//!
//! A node that cannot read the head has nothing to pass to these calls and so cannot act.
//!
//! # Cost
//!
//! An execute pass is linear in the entries it hands out or skips: approved entries sit in a
//! `ready` index once their predecessor verb executed (SPEC 5: an address's verbs are a
//! sequence) and in `blocked`, keyed by that predecessor, until then; nothing rescans the journal.
//! A reconcile is linear in what it plans plus the open entries it sweeps.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::ops::Bound;

use crate::federation::Federation;
use crate::fence::{HeadView, StaleReason};
use crate::journal::{
    COUNTED_AS_HELD, DurableNodeState, EntryState, JOURNAL_RETENTION_DEFAULT, JournalChange, JournalEntry,
    JournalSeq, JournalStore, outcome_unknown,
};
use crate::model::{IdempotencyKey, ProviderAddress, StampedAction};
use crate::planner::Captured;
use crate::retry::RetryBackoff;

mod execute;
mod key_index;
mod local;
mod reconcile;
mod refresh;
mod report;
mod sharded;

pub use execute::StaleCall;
pub(crate) use reconcile::earlier;
pub use reconcile::{KEYS_SWEEP_PENDING_MAX, SWEEP_ENTRIES_PER_POSITION};
pub use report::ReconcileReport;

/// Errors of the engine.
#[derive(Debug, thiserror::Error)]
pub enum NodeError<E: std::error::Error + 'static> {
    /// The journal store failed; nothing was changed in memory.
    #[error("journal store: {0}")]
    Store(#[source] E),
    /// The node is not in the federation's registry.
    #[error("node `{0}` is not in the registry")]
    UnknownNode(String),
    /// A result names a key that is not in flight.
    #[error("no action `{0}` is in flight")]
    NotInFlight(String),
}

/// Where an address is on a provider: the unit of "one call in flight at a time" and of
/// "captured" (SPEC 13: a NIC holds an address, not a pool's copy of it).
fn provider_address(action: &StampedAction) -> ProviderAddress {
    (action.provider.clone(), action.address)
}

/// How many changed entries an engine keeps untaken before it counts the lot as a whole change
/// ([`NodeEngine::take_row_changes`]).
pub const ROW_CHANGES_MAX: usize = 65_536;

/// What changed in a journal's rows since a reader last took them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RowChanges {
    /// These entries (appended, changed, or gone).
    Seqs(BTreeSet<JournalSeq>),
    /// Every entry (the first take, a restart from the store, more than [`ROW_CHANGES_MAX`]).
    Whole,
}

/// One node's planning and gating engine over a durable journal.
#[derive(Debug)]
pub struct NodeEngine<S: JournalStore> {
    name: String,
    store: S,
    state: DurableNodeState,
    /// Entries kept before compaction starts.
    retention: usize,
    /// How long a failed entry waits before a sweep retries it.
    backoff: RetryBackoff,
    /// The newest entry of each idempotency key, by the key's hash ([`key_index::KeyIndex`],
    /// sharded: a growth of a map of two million keys never holds a step for a second).
    index: key_index::KeyIndex,
    /// Entries waiting for an approval.
    pending: BTreeSet<JournalSeq>,
    /// Approved entries not in flight (ready or blocked or waiting for a predecessor that is
    /// not in the journal).
    approved: BTreeSet<JournalSeq>,
    /// Approved entries whose predecessor verb executed (or that have none).
    ready: BTreeSet<JournalSeq>,
    /// Approved entries by the sequence number of their predecessor, until it executes.
    blocked: BTreeMap<JournalSeq, JournalSeq>,
    /// Entries handed to the driver by `poll_execution` and not yet reported back.
    in_flight: BTreeSet<JournalSeq>,
    /// In-flight entries already named stale by [`NodeEngine::poll_stale_in_flight`] (each is
    /// named once), until their result comes back.
    cancelling: BTreeSet<JournalSeq>,
    /// Addresses with a call in flight, with the providers of those calls (looked up without
    /// building a key: the execute loop asks for every entry it considers). A refresh in flight
    /// counts too: no other call of its address starts before it ends.
    busy: BTreeMap<IpAddr, Vec<crate::names::Name>>,
    /// Announcements repeated for a held address ([`NodeEngine::poll_refreshes`]), in flight,
    /// by (provider, address): in memory only, never journaled.
    refreshing: BTreeMap<ProviderAddress, StampedAction>,
    /// Refreshes in flight already named stale by [`NodeEngine::poll_stale_in_flight`].
    refreshes_cancelling: BTreeSet<ProviderAddress>,
    /// Failed entries a sweep retries while they are current; dropped once stale by an epoch
    /// (tokens only grow, so such an entry is stale for ever).
    failed: BTreeSet<JournalSeq>,
    /// The entries a reader of the journal may see changed since it last took them
    /// ([`NodeEngine::take_row_changes`]); `None` until one takes.
    row_changes: Option<RowChanges>,
    /// Per (provider, address): the last executed entry, the last executed one that changed
    /// holding (assign/unassign, proxy-ARP add/del), and what is captured — what the outbox of
    /// results is derived from, so compaction keeps those entries. One map ([`Captured`]).
    captured: Captured,
    /// Per entry with a predecessor verb: the predecessor's sequence number (none if it is not
    /// in the journal), looked up once while the entry may run; dropped once it is executed or
    /// skipped.
    predecessors: sharded::ShardedMap<JournalSeq, Option<JournalSeq>>,
    /// A predecessor's key is written here to be looked up (one buffer, not one key each).
    predecessor_key: String,
    /// Entries `failed` or `approved` in the journal that are acquires in doubt
    /// ([`NodeEngine::is_acquire_in_doubt`]), kept where entries change (`commit`): what the
    /// count of stale acquires in doubt walks, not every open entry.
    in_doubt: BTreeSet<JournalSeq>,
    /// An acquire in doubt was counted as held since the last plan ([`NodeEngine::replan_due`]).
    replan: bool,
    /// How many times `replan` was set, and that count when the first slice of the pass under
    /// way had counted ([`NodeEngine::end_pass`]).
    replan_marks: (u64, u64),
    /// A requeue pass's compaction look under way ([`NodeEngine::reconcile_slice`]): the next
    /// entry to look at. `None`: none.
    compact_look: Option<JournalSeq>,
    /// A pass's sweep of open entries under way ([`NodeEngine::reconcile_slice`]): the next
    /// entry to sweep, and the last entry the journal held when the pass's first slice swept.
    /// `None`: no sweep is under way.
    sweep_look: Option<(JournalSeq, JournalSeq)>,
    /// Entries fenced (turned `skipped`) since this engine was opened, by reason: in memory only,
    /// for metrics (the journal keeps each entry's reason until compaction).
    fenced: BTreeMap<StaleReason, u64>,
}

impl<S: JournalStore> NodeEngine<S> {
    /// Opens the engine over a store, reading back what it holds.
    pub fn open(name: &str, store: S) -> Result<Self, NodeError<S::Error>> {
        let state = store.load().map_err(NodeError::Store)?;
        let mut engine = Self {
            name: name.to_owned(),
            store,
            state: DurableNodeState::default(),
            retention: JOURNAL_RETENTION_DEFAULT,
            backoff: RetryBackoff::NONE,
            index: key_index::KeyIndex::new(),
            pending: BTreeSet::new(),
            approved: BTreeSet::new(),
            ready: BTreeSet::new(),
            blocked: BTreeMap::new(),
            in_flight: BTreeSet::new(),
            cancelling: BTreeSet::new(),
            busy: BTreeMap::new(),
            refreshing: BTreeMap::new(),
            refreshes_cancelling: BTreeSet::new(),
            failed: BTreeSet::new(),
            row_changes: None,
            captured: Captured::new(),
            predecessors: sharded::ShardedMap::new(),
            predecessor_key: String::with_capacity(128),
            in_doubt: BTreeSet::new(),
            replan: false,
            replan_marks: (0, 0),
            compact_look: None,
            sweep_look: None,
            fenced: BTreeMap::new(),
        };
        engine.rebuild(state);
        engine.recover_in_flight()?;
        Ok(engine)
    }

    /// Sets how many entries the journal keeps before compaction starts (at least 1).
    #[must_use]
    pub fn with_retention(mut self, entries: usize) -> Self {
        self.retention = entries.max(1);
        self
    }

    /// Sets how long a failed entry waits before a sweep retries it (default
    /// [`RetryBackoff::NONE`]: retried at the next sweep).
    #[must_use]
    pub fn with_retry_backoff(mut self, backoff: RetryBackoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// A crash and restart: memory is lost and rebuilt from the store.
    pub fn restart(&mut self) -> Result<(), NodeError<S::Error>> {
        let state = self.store.load().map_err(NodeError::Store)?;
        self.rebuild(state);
        self.recover_in_flight()?;
        Ok(())
    }

    fn rebuild(&mut self, state: DurableNodeState) {
        self.state = state;
        if self.row_changes.is_some() {
            self.row_changes = Some(RowChanges::Whole);
        }
        self.index.rebuild(&self.state.entries);
        self.pending.clear();
        self.approved.clear();
        self.ready.clear();
        self.blocked.clear();
        self.in_flight.clear();
        self.cancelling.clear();
        self.busy.clear();
        self.refreshing.clear();
        self.refreshes_cancelling.clear();
        self.failed.clear();
        self.captured.clear();
        self.predecessors.clear();
        self.in_doubt.clear();
        let all: Vec<JournalSeq> = self.state.entries.keys().copied().collect();
        for seq in all {
            self.file_doubt(seq);
        }
        let mut executed: Vec<(u64, JournalSeq)> =
            self.state.entries.values().filter_map(|e| e.executed_seq.map(|x| (x.get(), e.seq))).collect();
        executed.sort_unstable();
        for (_, seq) in executed {
            self.track_execution(seq);
        }
        let seqs: Vec<(JournalSeq, EntryState)> =
            self.state.entries.values().map(|e| (e.seq, e.state)).collect();
        for (seq, state) in seqs {
            match state {
                EntryState::Pending => {
                    self.pending.insert(seq);
                }
                EntryState::Approved => self.admit(seq),
                EntryState::Failed => {
                    self.failed.insert(seq);
                }
                EntryState::Executed | EntryState::Skipped(_) => {}
            }
        }
        self.check_sets();
    }

    /// The rules the execution sets keep between public calls (a no-op without debug
    /// assertions): `pending`, `approved`, `in_flight` and `failed` are disjoint, and each holds
    /// entries of the journal in the matching state; `ready` and the successors in `blocked` are
    /// approved and never both; `cancelling` is in flight; every call in flight and every refresh
    /// keeps its (provider, address) busy; `refreshes_cancelling` is refreshing. Linear in the
    /// open entries (never in the journal's length).
    fn check_sets(&self) {
        #[cfg(debug_assertions)]
        {
            let state = |seq: &JournalSeq| self.state.entries.get(seq).map(|e| e.state);
            for seq in &self.pending {
                debug_assert_eq!(state(seq), Some(EntryState::Pending), "pending entry {seq}");
                debug_assert!(!self.approved.contains(seq), "entry {seq} both pending and approved");
                debug_assert!(!self.in_flight.contains(seq), "entry {seq} both pending and in flight");
                debug_assert!(!self.failed.contains(seq), "entry {seq} both pending and failed");
            }
            for seq in &self.approved {
                debug_assert_eq!(state(seq), Some(EntryState::Approved), "approved entry {seq}");
                debug_assert!(!self.in_flight.contains(seq), "entry {seq} both approved and in flight");
                debug_assert!(!self.failed.contains(seq), "entry {seq} both approved and failed");
            }
            for seq in &self.in_flight {
                debug_assert_eq!(state(seq), Some(EntryState::Approved), "in-flight entry {seq}");
                debug_assert!(!self.failed.contains(seq), "entry {seq} both in flight and failed");
                debug_assert!(self.is_busy(*seq), "in-flight entry {seq} leaves its address free");
            }
            for seq in &self.failed {
                debug_assert_eq!(state(seq), Some(EntryState::Failed), "failed entry {seq}");
            }
            for seq in self.failed.iter().chain(&self.approved) {
                debug_assert_eq!(
                    self.in_doubt.contains(seq),
                    self.is_acquire_in_doubt(*seq),
                    "entry {seq}: the index of acquires in doubt"
                );
            }
            for seq in &self.ready {
                debug_assert!(self.approved.contains(seq), "ready entry {seq} is not approved");
            }
            for (before, seq) in &self.blocked {
                debug_assert!(self.approved.contains(seq), "entry {seq} blocked on {before} is not approved");
                debug_assert!(!self.ready.contains(seq), "entry {seq} both ready and blocked on {before}");
            }
            for seq in &self.cancelling {
                debug_assert!(self.in_flight.contains(seq), "cancelling entry {seq} is not in flight");
            }
            for (provider, address) in self.refreshing.keys() {
                debug_assert!(
                    self.call_in_flight(provider, *address),
                    "refresh of {provider} {address} not busy"
                );
            }
            for at in &self.refreshes_cancelling {
                debug_assert!(self.refreshing.contains_key(at), "cancelling refresh {at:?} is not in flight");
            }
        }
    }

    /// Records an executed entry in "captured" and the last-executed indexes.
    fn track_execution(&mut self, seq: JournalSeq) {
        self.captured.record_execution(&self.state.entries[&seq]);
    }

    /// Entries fenced since this engine was opened, by reason (monotonic while the process runs).
    #[must_use]
    pub fn fenced(&self) -> &BTreeMap<StaleReason, u64> {
        &self.fenced
    }

    /// How many actions are handed out and not reported back (calls in flight).
    #[must_use]
    pub fn in_flight_count(&self) -> usize {
        self.in_flight.len()
    }

    /// The node's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every journal entry kept, in journal order.
    pub fn entries(&self) -> impl DoubleEndedIterator<Item = &JournalEntry> + '_ {
        self.state.entries.values().map(|e| &**e)
    }

    /// The entry journaled under `key`, if it is kept.
    #[must_use]
    pub fn entry(&self, key: &str) -> Option<&JournalEntry> {
        self.index.get(key, &self.state.entries).and_then(|seq| self.entry_at(seq))
    }

    /// The entry `seq`, if it is kept.
    #[must_use]
    pub fn entry_at(&self, seq: JournalSeq) -> Option<&JournalEntry> {
        self.state.entries.get(&seq).map(|e| &**e)
    }

    /// The durable state as the engine holds it in memory.
    #[must_use]
    pub fn durable(&self) -> &DurableNodeState {
        &self.state
    }

    /// The store, for inspection.
    #[must_use]
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The store, for a driver that simulates what happens to it in a crash. Memory is stale
    /// after a change made through this: call [`NodeEngine::restart`].
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    /// What this node has captured, per (provider, address).
    #[must_use]
    pub fn captured(&self) -> &Captured {
        &self.captured
    }

    /// How many entries wait for an approval.
    #[must_use]
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// How many failed entries a sweep may still retry.
    #[must_use]
    pub fn retryable_failures(&self) -> usize {
        self.failed.len()
    }

    /// When a failed entry that a sweep may still retry may be tried again (stream time, ms):
    /// its last attempt's gate plus the backoff of its attempt count ([`RetryBackoff`]; none for
    /// a verb that does not back off, [`crate::model::Verb::backs_off`]); a sweep before it
    /// leaves the entry failed. `None` for any other entry (a stale failure is never retried).
    #[must_use]
    pub fn next_attempt_ms(&self, entry: &JournalEntry) -> Option<u64> {
        (entry.state == EntryState::Failed && self.failed.contains(&entry.seq)).then(|| {
            let attempts = &entry.attempts;
            let backoff = if entry.action.verb.backs_off() { self.backoff } else { RetryBackoff::NONE };
            backoff.next_attempt_ms(
                &entry.action.idempotency_key(),
                attempts.count,
                attempts.last_at_ms().unwrap_or(0),
            )
        })
    }

    /// Results the log has not confirmed yet: per (provider, address), this node's last executed
    /// holding verb (assign/unassign, proxy-arp add/del) whose `action-result` the view does not
    /// show. The agent re-reports them (the outbox of results), so that a result lost with a
    /// partition or a crash still reaches the log and drift repair can rely on confirmations.
    #[must_use]
    pub fn unconfirmed_results(&self, view: &Federation) -> Vec<IdempotencyKey> {
        self.unconfirmed_results_in(view, (Bound::Unbounded, Bound::Unbounded))
    }

    /// [`NodeEngine::unconfirmed_results`] of the (provider, address) keys in `window` (a requeue
    /// slice's part of the captured walk, [`crate::planner::PlanCursor::captured_window`]).
    #[must_use]
    pub fn unconfirmed_results_in(
        &self,
        view: &Federation,
        window: crate::planner::KeyWindow,
    ) -> Vec<IdempotencyKey> {
        let Some(node) = view.node_id(&self.name) else { return Vec::new() };
        self.captured
            .holding_in(window)
            .map(|(_, seq)| &self.state.entries[&seq])
            // An acquire in doubt counted as held: the log was told the truth (failed, outcome
            // unknown); it is counted only so that this node releases it.
            .filter(|entry| !entry.detail.as_deref().is_some_and(|d| d.starts_with(COUNTED_AS_HELD)))
            .map(|entry| &entry.action)
            .filter(|action| {
                let confirmed = view
                    .address(&action.pool, action.address)
                    .and_then(|state| state.confirmations.iter().find(|c| c.node == node));
                confirmed.is_none_or(|c| {
                    c.capture_epoch != action.capture_epoch || c.acquired != action.verb.is_acquire()
                })
            })
            .map(|action| action.idempotency_key())
            .collect()
    }

    /// Sequence numbers of the entries that are `approved` now, in flight included (for
    /// `resume`'s "approved before the pause").
    #[must_use]
    pub fn approved_seqs(&self) -> BTreeSet<JournalSeq> {
        self.approved.iter().chain(&self.in_flight).copied().collect()
    }

    /// What changed in the journal's rows since the last take ([`crate::journal_index`]): the
    /// entries appended, moved, attempted, compacted away, or whose retry the engine dropped (a
    /// row's next attempt). The first take of an engine is [`RowChanges::Whole`]; from then on it
    /// keeps them (an engine nobody reads this way keeps none).
    pub fn take_row_changes(&mut self) -> RowChanges {
        self.row_changes.replace(RowChanges::Seqs(BTreeSet::new())).unwrap_or(RowChanges::Whole)
    }

    /// The row of entry `seq` may have changed ([`NodeEngine::take_row_changes`]).
    pub(crate) fn row_changed(&mut self, seq: JournalSeq) {
        if let Some(RowChanges::Seqs(seqs)) = &mut self.row_changes {
            if seqs.len() >= ROW_CHANGES_MAX {
                self.row_changes = Some(RowChanges::Whole);
            } else {
                seqs.insert(seq);
            }
        }
    }

    fn commit(&mut self, change: JournalChange) -> Result<(), NodeError<S::Error>> {
        self.store.commit(&change).map_err(NodeError::Store)?;
        if let JournalChange::Compact { seqs } = &change {
            let seqs = seqs.clone();
            self.state.apply_owned(change);
            for seq in &seqs {
                self.row_changed(*seq);
                self.in_doubt.remove(seq);
            }
            return Ok(());
        }
        // The entry the change names, and what becomes of its doubt, read before the change is
        // given away: a new state's doubt is its state and its detail, both in the change (the
        // entry is looked up only when the detail says the outcome is unknown); an attempt
        // changes neither.
        let (row, doubt) = match &change {
            JournalChange::Append(entry) => (Some(entry.seq), Some(true)),
            JournalChange::SetState { seq, state, detail, .. } => (
                Some(*seq),
                Some(
                    matches!(state, EntryState::Failed | EntryState::Approved)
                        && outcome_unknown(detail.as_deref()),
                ),
            ),
            JournalChange::Attempt { seq, .. } => (Some(*seq), None),
            JournalChange::RaiseHighWater { .. } | JournalChange::Compact { .. } => (None, None),
        };
        self.state.apply_owned(change);
        if let Some(seq) = row {
            self.row_changed(seq);
            match doubt {
                Some(true) => self.file_doubt(seq),
                Some(false) => {
                    self.in_doubt.remove(&seq);
                }
                None => {}
            }
        }
        Ok(())
    }

    /// Files `seq` in or out of the acquires in doubt, as the journal holds it now.
    fn file_doubt(&mut self, seq: JournalSeq) {
        let open = self
            .state
            .entries
            .get(&seq)
            .is_some_and(|entry| matches!(entry.state, EntryState::Failed | EntryState::Approved));
        if open && self.is_acquire_in_doubt(seq) {
            self.in_doubt.insert(seq);
        } else {
            self.in_doubt.remove(&seq);
        }
    }

    /// The sequence number of the entry whose verb must execute before `seq`'s may run:
    /// `None` for a first verb, `Some(None)` when the predecessor is not in the journal.
    fn predecessor(&mut self, seq: JournalSeq) -> Option<Option<JournalSeq>> {
        if let Some(known) = self.predecessors.get(&seq) {
            return Some(*known);
        }
        let action = &self.state.entries[&seq].action;
        let verb = action.verb.predecessor()?;
        let stamp = crate::model::ActionStamp { verb, ..action.stamp() };
        let before =
            self.index.get_stamp(stamp.key_in(&mut self.predecessor_key), &stamp, &self.state.entries);
        self.predecessors.insert(seq, before);
        Some(before)
    }

    /// Files an approved entry (not in flight) into `ready` or `blocked`.
    fn admit(&mut self, seq: JournalSeq) {
        self.approved.insert(seq);
        match self.predecessor(seq) {
            None => {
                self.ready.insert(seq);
            }
            Some(Some(before)) => match self.state.entries.get(&before).map(|e| e.state) {
                Some(EntryState::Executed) => {
                    self.ready.insert(seq);
                }
                Some(_) => {
                    self.blocked.insert(before, seq);
                }
                // Compacted (it was finished and superseded): this verb never runs.
                None => {}
            },
            // The predecessor is not in the journal: this verb never runs (it stays open until
            // a sweep finds it stale).
            Some(None) => {}
        }
    }

    /// Takes an entry out of the approved indexes.
    fn withdraw(&mut self, seq: JournalSeq) {
        if self.approved.remove(&seq) {
            self.ready.remove(&seq);
            if let Some(Some(before)) = self.predecessor(seq)
                && self.blocked.get(&before) == Some(&seq)
            {
                self.blocked.remove(&before);
            }
        }
    }

    fn set_state(
        &mut self,
        seq: JournalSeq,
        state: EntryState,
        detail: Option<crate::names::Name>,
    ) -> Result<(), NodeError<S::Error>> {
        let executed_seq = (state == EntryState::Executed).then(|| self.state.executions + 1);
        self.commit(JournalChange::SetState { seq, state, detail, executed_seq })?;
        self.pending.remove(&seq);
        self.withdraw(seq);
        if matches!(state, EntryState::Executed | EntryState::Skipped(_)) {
            // Final for good: only an approved entry's predecessor is asked (a million of them
            // kept ~40 bytes an address for nothing).
            self.predecessors.remove(&seq);
        }
        match state {
            EntryState::Pending => {
                self.pending.insert(seq);
            }
            EntryState::Approved => {
                self.failed.remove(&seq);
                self.admit(seq);
            }
            EntryState::Failed => {
                self.failed.insert(seq);
            }
            EntryState::Executed => {
                self.failed.remove(&seq);
                self.track_execution(seq);
                if let Some(next) = self.blocked.remove(&seq) {
                    self.ready.insert(next);
                }
            }
            EntryState::Skipped(reason) => {
                *self.fenced.entry(reason).or_insert(0) += 1;
            }
        }
        Ok(())
    }

    /// Raises the marks of the action's key to the head's tokens (`current`, read for the gate).
    fn raise_high_water(
        &mut self,
        action: &StampedAction,
        current: &HeadView<'_>,
    ) -> Result<(), NodeError<S::Error>> {
        let (capture_epoch, ownership_epoch) = (current.capture_epoch, current.ownership_epoch);
        let (capture_seen, ownership_seen) = self.state.high_water.seen(action);
        if capture_epoch <= capture_seen && ownership_epoch <= ownership_seen {
            return Ok(());
        }
        self.commit(JournalChange::RaiseHighWater {
            pool: action.pool.to_string(),
            address: action.address,
            capture_domain: action.capture_domain.clone(),
            capture_epoch,
            ownership_epoch,
        })
    }
}
