//! One node's engine: planning, importing, sweeping and gating its journal.
//!
//! The engine is sans-IO in the quinn-proto manner. The driver calls:
//! - [`NodeEngine::reconcile`] with the node's view of the log (after catching up) and the log
//!   head: plan, import through the gate, sweep the journal through the gate;
//! - [`NodeEngine::poll_execution`] with the head: the next approved entry that passes the gate,
//!   or `None` when nothing is left; stale entries met on the way become `skipped`;
//! - [`NodeEngine::handle_execution_result`] with what the provider said.
//!
//! A node that cannot read the head has nothing to pass to these calls and so cannot act.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::federation::{Federation, NodeId};
use crate::fence::{self, FenceVerdict, HeadTokens, HeadView};
use crate::journal::{
    DurableNodeState, EntryState, JOURNAL_ENTRIES_MAX, JournalChange, JournalEntry, JournalStore,
};
use crate::log::ActionOutcome;
use crate::model::{Approval, StampedAction};
use crate::planner::{self, CaptureRecord};

/// What one reconcile did, for narration and metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Keys newly journaled (in any state).
    pub imported: Vec<String>,
    /// Open entries the sweep turned into `skipped`.
    pub swept: Vec<String>,
    /// Pending entries promoted because the head shows their approval.
    pub promoted: Vec<String>,
    /// Failed entries still current, approved again for a retry.
    pub retried: Vec<String>,
}

/// Errors of the engine.
#[derive(Debug, thiserror::Error)]
pub enum NodeError<E: std::error::Error + 'static> {
    /// The journal store failed; nothing was changed in memory.
    #[error("journal store: {0}")]
    Store(#[source] E),
    /// The journal is full (`JOURNAL_ENTRIES_MAX`).
    #[error("journal holds {JOURNAL_ENTRIES_MAX} entries; refusing to import more")]
    JournalFull,
    /// The node is not in the federation's registry.
    #[error("node `{0}` is not in the registry")]
    UnknownNode(String),
    /// A result names a key that is not in flight.
    #[error("no action `{0}` is in flight")]
    NotInFlight(String),
}

/// One node's planning and gating engine over a durable journal.
#[derive(Debug)]
pub struct NodeEngine<S: JournalStore> {
    name: String,
    store: S,
    state: DurableNodeState,
    index: BTreeMap<String, usize>,
    /// Open entries (pending or approved), by index.
    open: BTreeSet<usize>,
    /// Entries handed to the driver by `poll_execution` and not yet reported back.
    in_flight: BTreeSet<usize>,
    /// Failed entries, retried by a sweep while they are current.
    failed: BTreeSet<usize>,
    captured: BTreeMap<(String, IpAddr), CaptureRecord>,
}

impl<S: JournalStore> NodeEngine<S> {
    /// Opens the engine over a store, reading back what it holds.
    pub fn open(name: &str, store: S) -> Result<Self, NodeError<S::Error>> {
        let state = store.load().map_err(NodeError::Store)?;
        let mut engine = Self {
            name: name.to_owned(),
            store,
            state: DurableNodeState::default(),
            index: BTreeMap::new(),
            open: BTreeSet::new(),
            in_flight: BTreeSet::new(),
            failed: BTreeSet::new(),
            captured: BTreeMap::new(),
        };
        engine.rebuild(state);
        Ok(engine)
    }

    /// A crash and restart: memory is lost and rebuilt from the store.
    pub fn restart(&mut self) -> Result<(), NodeError<S::Error>> {
        let state = self.store.load().map_err(NodeError::Store)?;
        self.rebuild(state);
        Ok(())
    }

    fn rebuild(&mut self, state: DurableNodeState) {
        self.index =
            state.entries.iter().enumerate().map(|(i, e)| (e.action.idempotency_key.clone(), i)).collect();
        self.open =
            state.entries.iter().enumerate().filter(|(_, e)| e.state.is_open()).map(|(i, _)| i).collect();
        self.failed = state
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.state == EntryState::Failed)
            .map(|(i, _)| i)
            .collect();
        self.in_flight.clear();
        let mut executed: Vec<&JournalEntry> =
            state.entries.iter().filter(|e| e.executed_seq.is_some()).collect();
        executed.sort_by_key(|e| e.executed_seq);
        self.captured.clear();
        for entry in executed {
            Self::track_capture(&mut self.captured, &entry.action);
        }
        self.state = state;
    }

    fn track_capture(captured: &mut BTreeMap<(String, IpAddr), CaptureRecord>, action: &StampedAction) {
        let key = (action.pool.clone(), action.address);
        if action.verb.is_acquire() {
            captured.insert(
                key,
                CaptureRecord {
                    provider: action.provider.clone(),
                    nic: action.nic.clone(),
                    capture_domain: action.capture_domain.clone(),
                },
            );
        } else {
            captured.remove(&key);
        }
    }

    /// The node's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every journal entry, in the order journaled.
    #[must_use]
    pub fn entries(&self) -> &[JournalEntry] {
        &self.state.entries
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

    /// What this node has captured, per (pool, address).
    #[must_use]
    pub fn captured(&self) -> &BTreeMap<(String, IpAddr), CaptureRecord> {
        &self.captured
    }

    /// Results the log has not confirmed yet: per (pool, address), this node's last executed
    /// holding verb (assign/unassign, proxy-arp add/del) whose `action-result` the view does not
    /// show. The agent re-reports them (the outbox of results), so that a result lost with a
    /// partition or a crash still reaches the log and drift repair can rely on confirmations.
    #[must_use]
    pub fn unconfirmed_results(&self, view: &Federation) -> Vec<String> {
        let Some(node) = view.node_id(&self.name) else { return Vec::new() };
        let mut last: BTreeMap<(&str, IpAddr), (u64, &StampedAction)> = BTreeMap::new();
        for entry in &self.state.entries {
            let (Some(seq), true) = (entry.executed_seq, entry.action.verb.changes_holding()) else {
                continue;
            };
            let slot = last
                .entry((entry.action.pool.as_str(), entry.action.address))
                .or_insert((seq, &entry.action));
            if seq >= slot.0 {
                *slot = (seq, &entry.action);
            }
        }
        last.into_values()
            .filter(|(_, action)| {
                let confirmed = view
                    .address(&action.pool, action.address)
                    .and_then(|state| state.confirmations.iter().find(|c| c.node == node));
                confirmed.is_none_or(|c| {
                    c.capture_epoch != action.capture_epoch || c.acquired != action.verb.is_acquire()
                })
            })
            .map(|(_, action)| action.idempotency_key.clone())
            .collect()
    }

    /// Keys of entries that are `approved` now (for `resume`'s "approved before the pause").
    #[must_use]
    pub fn approved_keys(&self) -> BTreeSet<String> {
        self.open
            .iter()
            .filter(|i| self.state.entries[**i].state == EntryState::Approved)
            .map(|i| self.state.entries[*i].action.idempotency_key.clone())
            .collect()
    }

    fn commit(&mut self, change: JournalChange) -> Result<(), NodeError<S::Error>> {
        self.store.commit(&change).map_err(NodeError::Store)?;
        self.state.apply(&change);
        Ok(())
    }

    fn set_state(
        &mut self,
        index: usize,
        state: EntryState,
        detail: Option<String>,
    ) -> Result<(), NodeError<S::Error>> {
        let executed_seq = (state == EntryState::Executed).then(|| self.state.executions + 1);
        self.commit(JournalChange::SetState { index, state, detail, executed_seq })?;
        if state.is_open() {
            self.open.insert(index);
            self.failed.remove(&index);
        } else {
            self.open.remove(&index);
        }
        if state == EntryState::Failed {
            self.failed.insert(index);
        }
        if state == EntryState::Executed {
            let action = self.state.entries[index].action.clone();
            Self::track_capture(&mut self.captured, &action);
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
        let hw = &self.state.high_water;
        let capture_seen = hw.capture(action);
        let ownership_seen = hw.ownership(action);
        if capture_epoch <= capture_seen && ownership_epoch <= ownership_seen {
            return Ok(());
        }
        self.commit(JournalChange::RaiseHighWater {
            pool: action.pool.clone(),
            address: action.address,
            capture_domain: action.capture_domain.clone(),
            capture_epoch,
            ownership_epoch,
        })
    }

    /// Plan from `view`, import through the gate against `head`, then sweep open entries.
    pub fn reconcile(
        &mut self,
        view: &Federation,
        head: &impl HeadTokens,
    ) -> Result<ReconcileReport, NodeError<S::Error>> {
        let node: NodeId =
            view.node_id(&self.name).ok_or_else(|| NodeError::UnknownNode(self.name.clone()))?;
        let mut report = ReconcileReport::default();
        for planned in planner::plan(view, node, &self.captured) {
            if self.index.contains_key(&planned.action.idempotency_key) {
                continue;
            }
            if self.state.entries.len() >= JOURNAL_ENTRIES_MAX {
                return Err(NodeError::JournalFull);
            }
            let action = &planned.action;
            let current = head.view(&action.pool, action.address, &action.capture_domain);
            let state = match fence::check_view(action, &current, &self.state.high_water) {
                FenceVerdict::Stale { reason } => EntryState::Skipped(reason),
                FenceVerdict::Current
                    if planned.approval == Approval::Manual
                        && !head.is_approved(&planned.action.idempotency_key) =>
                {
                    EntryState::Pending
                }
                FenceVerdict::Current => EntryState::Approved,
            };
            self.raise_high_water(&planned.action, &current)?;
            let key = planned.action.idempotency_key.clone();
            let index = self.state.entries.len();
            self.commit(JournalChange::Append(JournalEntry {
                action: planned.action,
                state,
                detail: None,
                executed_seq: None,
            }))?;
            self.index.insert(key.clone(), index);
            if state.is_open() {
                self.open.insert(index);
            }
            report.imported.push(key);
        }
        self.sweep(head, &mut report)?;
        self.store.sync().map_err(NodeError::Store)?;
        Ok(report)
    }

    /// The sweep: failed entries that are still current are approved again (a retry); then every
    /// open entry goes through the gate, and pending entries approved at the head move on.
    fn sweep(
        &mut self,
        head: &impl HeadTokens,
        report: &mut ReconcileReport,
    ) -> Result<(), NodeError<S::Error>> {
        let failed: Vec<usize> = self.failed.iter().copied().collect();
        for index in failed {
            let action = &self.state.entries[index].action;
            if fence::check(action, head, &self.state.high_water) == FenceVerdict::Current {
                let key = action.idempotency_key.clone();
                self.set_state(index, EntryState::Approved, None)?;
                report.retried.push(key);
            }
        }
        let open: Vec<usize> = self.open.iter().copied().filter(|i| !self.in_flight.contains(i)).collect();
        for index in open {
            let action = self.state.entries[index].action.clone();
            if let FenceVerdict::Stale { reason } = fence::check(&action, head, &self.state.high_water) {
                self.set_state(index, EntryState::Skipped(reason), None)?;
                report.swept.push(action.idempotency_key);
            } else if self.state.entries[index].state == EntryState::Pending
                && head.is_approved(&action.idempotency_key)
            {
                self.set_state(index, EntryState::Approved, None)?;
                report.promoted.push(action.idempotency_key);
            }
        }
        Ok(())
    }

    /// The next approved entry that passes the gate against `head`, handed to the driver for
    /// the provider call; stale entries met on the way become `skipped`. With `only`, just the
    /// entries whose keys it holds are considered. Pending entries approved at the head are
    /// promoted first.
    pub fn poll_execution(
        &mut self,
        head: &impl HeadTokens,
        only: Option<&BTreeSet<String>>,
    ) -> Result<Option<StampedAction>, NodeError<S::Error>> {
        let candidates: Vec<usize> =
            self.open.iter().copied().filter(|i| !self.in_flight.contains(i)).collect();
        // One call per address at a time: a release must never overtake an acquire still in
        // flight (or the reverse), or the provider ends in the state of the older call.
        for index in candidates {
            let entry = &self.state.entries[index];
            if only.is_some_and(|keys| !keys.contains(&entry.action.idempotency_key)) {
                continue;
            }
            let busy = self.in_flight.iter().any(|&i| {
                let other = &self.state.entries[i].action;
                other.address == entry.action.address && other.pool == entry.action.pool
            });
            if busy {
                continue;
            }
            if entry.state == EntryState::Pending {
                if !head.is_approved(&entry.action.idempotency_key) {
                    continue;
                }
                self.set_state(index, EntryState::Approved, None)?;
            }
            let action = self.state.entries[index].action.clone();
            let current = head.view(&action.pool, action.address, &action.capture_domain);
            match fence::check_view(&action, &current, &self.state.high_water) {
                FenceVerdict::Stale { reason } => self.set_state(index, EntryState::Skipped(reason), None)?,
                FenceVerdict::Current => {
                    self.raise_high_water(&action, &current)?;
                    self.store.sync().map_err(NodeError::Store)?;
                    self.in_flight.insert(index);
                    return Ok(Some(action));
                }
            }
        }
        Ok(None)
    }

    /// Records what the provider said about an action handed out by `poll_execution`.
    pub fn handle_execution_result(
        &mut self,
        idempotency_key: &str,
        outcome: ActionOutcome,
        detail: Option<String>,
    ) -> Result<(), NodeError<S::Error>> {
        let index = self
            .index
            .get(idempotency_key)
            .copied()
            .filter(|i| self.in_flight.contains(i))
            .ok_or_else(|| NodeError::NotInFlight(idempotency_key.to_owned()))?;
        let state = match outcome {
            ActionOutcome::Executed => EntryState::Executed,
            ActionOutcome::Failed => EntryState::Failed,
        };
        self.set_state(index, state, detail)?;
        self.in_flight.remove(&index);
        Ok(())
    }
}
