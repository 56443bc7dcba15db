//! The loop's appends: one durable commit per batch, a failed batch kept and retried alone and
//! unchanged before anything else (a store that retries appends), operators' and pool files'
//! events never kept; and the pool files applied as ordered events (start, SIGHUP).

use std::collections::BTreeMap;

use tenure_core::log::{Event, EventKind};
use tenure_core::log_store::LogError;
use tenure_core::model::PoolSpec;
use tracing::{error, info, warn};

use super::Agent;
use crate::agent::AgentStore;
use tenure_core::pool_changes::plan_pool_changes;

impl<S: AgentStore> Agent<S> {
    /// Appends `kinds` in one durable commit. Returns the index of each, or why not.
    /// An operator's or the pool files' events: appended after any batch kept for a retry, and
    /// never kept for a retry themselves (a caller told "unavailable" must not see them land
    /// later).
    pub(super) async fn append(&mut self, kinds: Vec<EventKind>) -> Result<Vec<u64>, AppendError> {
        self.retry_unappended().await?;
        self.append_with(Vec::new(), kinds, Batch::Unretried).await
    }

    /// Appends the batch kept from a failed append, alone and as it was; `Err` while it does not
    /// land (it stays kept).
    pub(super) async fn retry_unappended(&mut self) -> Result<(), AppendError> {
        match self.unappended.take() {
            Some(events) => self.commit(events, Batch::Kept).await.map(drop),
            None => Ok(()),
        }
    }

    /// Appends `stamped` (as they are) and then `kinds` (stamped now) in one commit, as `batch`
    /// says ([`Batch`]: a kept batch that could not be appended to a store that retries is
    /// appended again, alone and unchanged, before anything else).
    pub(super) async fn append_with(
        &mut self,
        mut events: Vec<Event>,
        kinds: Vec<EventKind>,
        batch: Batch,
    ) -> Result<Vec<u64>, AppendError> {
        if events.is_empty() && kinds.is_empty() {
            return Ok(Vec::new());
        }
        if !kinds.is_empty() {
            let at_ms = self.stamp();
            events.extend(kinds.into_iter().map(|kind| Event { at_ms, kind }));
        }
        self.commit(events, batch).await
    }

    pub(super) async fn commit(&mut self, events: Vec<Event>, batch: Batch) -> Result<Vec<u64>, AppendError> {
        self.slow.append();
        let keep = batch != Batch::Unretried;
        // Only a batch kept for a retry is appended as one: a request's events, not retried, must
        // not hide a kept batch from its retry ([`AgentStore::append_unretried`]).
        let appended = match batch {
            Batch::Kept => self.store.append_batch(&events).await,
            Batch::Unretried => self.store.append_unretried(&events).await,
            Batch::Results => self.store.append_results(&events).await,
        };
        match appended {
            Ok(indices) => {
                self.summary.appended += events.len() as u64;
                self.identity_dirty = true;
                self.append_failure = None;
                Ok(indices.into_iter().map(|i| i.get()).collect())
            }
            Err(e @ LogError::Unavailable { .. }) if self.capabilities.retries_appends => {
                let reason = format!("cannot append to the log: {e}");
                // The start's appends are said by its wait, once for each reason (`retry_start`),
                // not at each attempt while etcd is away.
                let starting = self.starting.as_ref().is_some_and(super::start::Starting::appending);
                if self.append_failure.as_deref() != Some(reason.as_str()) && !starting {
                    error!(%reason, keep, "append failed");
                }
                // Health says so while a batch of the loop waits for its retry (cleared when one
                // lands). A request's events are not retried: its caller is told, and health does
                // not stay failed after the log is back until the loop happens to append again.
                if keep {
                    self.append_failure = Some(reason.clone());
                    self.unappended = Some(events);
                }
                Err(AppendError { reason, transient: true })
            }
            // A request's events (a pool reload, an operator's request) that the store will not
            // hold — a record over its size limit, an event the codec refuses — were refused
            // before anything was written: the request is refused, the store is as it was.
            Err(e @ (LogError::TooLarge { .. } | LogError::Rejected(_))) if !keep => {
                let reason = format!("not appended, the store is unchanged: {e}");
                warn!(%reason, "request refused");
                Err(AppendError { reason, transient: false })
            }
            Err(e) => {
                let reason = format!("cannot append to the log: {e}");
                error!(%reason);
                self.core.fail(reason.clone());
                Err(AppendError { reason, transient: false })
            }
        }
    }

    /// Appends what is queued (the first heartbeats, keepalived's state, inventory news) and
    /// every node's outbox (action results). A batch whose append failed goes first, alone and
    /// unchanged (so it lands once); while it does not land, nothing else of the loop is
    /// appended (the heartbeat thread goes on: [`AgentStore::append_heartbeats`]).
    pub(super) async fn flush_appends(&mut self) {
        if self.core.failed().is_none()
            && let Some(reason) = self.beat.failure()
        {
            self.core.fail(reason);
        }
        if self.core.failed().is_some() {
            // A failed or refused store takes nothing more.
            self.queued.clear();
            self.beat.stop();
            return;
        }
        let mut kinds = std::mem::take(&mut self.queued);
        // The nodes' outboxes hold action results alone: a batch of them only is appended as
        // results ([`AgentStore::append_results`]: durable with the step's gate, or at its end
        // with the core's sync of the journals, `AgentCore::poll_step`).
        let results_only = kinds.is_empty() && self.queued_stamped.is_empty();
        for driver in self.core.drivers_mut() {
            while let Some(kind) = driver.poll_append() {
                kinds.push(kind);
            }
        }
        if self.retry_unappended().await.is_err() {
            self.queued = kinds;
            return;
        }
        if results_only {
            debug_assert!(kinds.iter().all(|k| matches!(k, EventKind::ActionResult { .. })));
            let _ = self.append_with(Vec::new(), kinds, Batch::Results).await;
            return;
        }
        let stamped = std::mem::take(&mut self.queued_stamped);
        let _ = self.append_with(stamped, kinds, Batch::Kept).await;
    }

    /// Applies the pool files' set: the ordered events of [`plan_pool_changes`]; returns how many
    /// were appended (0: the log holds the set already). A rejected one is reported (the set was
    /// checked as a whole, so it should not happen).
    pub(super) async fn apply_pools(&mut self, wanted: &[PoolSpec]) -> Result<usize, AppendError> {
        let applied = self.applied_pools();
        let plan = plan_pool_changes(&applied, wanted);
        if plan.is_empty() {
            return Ok(0);
        }
        let events = plan.len();
        info!(events = plan.len(), "applying pool changes");
        // Said once the events are in the log, one line per pool event, by name.
        let said: Vec<(String, Option<usize>, &'static str)> = plan
            .iter()
            .filter_map(|kind| match kind {
                EventKind::PoolDeleted { pool } => Some((pool.clone(), None, "pool deleted")),
                EventKind::PoolApplied { spec } if !wanted.contains(&**spec) => Some((
                    spec.name.clone(),
                    Some(spec.addresses.len()),
                    "pool shrunk first (lets addresses go before another pool takes them)",
                )),
                EventKind::PoolApplied { spec } => {
                    Some((spec.name.clone(), Some(spec.addresses.len()), "pool applied"))
                }
                _ => None,
            })
            .collect();
        self.append(plan).await?;
        for (pool, addresses, what) in said {
            match addresses {
                Some(addresses) => info!(%pool, addresses, "{what}"),
                None => info!(%pool, "{what}"),
            }
        }
        Ok(events)
    }

    /// The pools the log has applied now (not deleted), by name.
    pub(super) fn applied_pools(&self) -> BTreeMap<String, PoolSpec> {
        self.view()
            .pools()
            .iter()
            .filter(|(_, p)| !p.deleted)
            .map(|(name, p)| (name.clone(), p.spec.as_ref().clone()))
            .collect()
    }

    /// SIGHUP: reads the pools again ([`super::Settings::pools`]: for the agent, the config's
    /// `pools` list and the pool files); a bad config or pool file changes nothing and is
    /// reported.
    pub(super) async fn reload(&mut self) {
        match (self.pools)() {
            Ok(wanted) => match self.apply_pools(&wanted).await {
                Ok(0) => info!(
                    pools = wanted.len(),
                    "pool reload: the log already holds these pools; nothing to apply"
                ),
                Ok(_) => {}
                Err(e) => error!(error = %e, "pool reload not applied"),
            },
            Err(lines) => {
                *self.counters.rejected_events.entry("pool-reload".to_owned()).or_insert(0) += 1;
                for line in &lines {
                    error!(error = %line, "pool reload refused: nothing applied");
                }
            }
        }
    }
}

/// Why an append failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct AppendError {
    /// What the store said, as the agent logs and answers it.
    pub(super) reason: String,
    /// The store was unavailable and retries appends (the fleet store: etcd out of reach): the
    /// same append may land if tried again. Otherwise the store refused it (a record over its
    /// size limit) or failed for good (the agent no longer acts).
    pub(super) transient: bool,
}

impl std::fmt::Display for AppendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl From<AppendError> for String {
    fn from(e: AppendError) -> Self {
        e.reason
    }
}

/// How a batch of the loop is appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Batch {
    /// Durably, and kept for a retry if the store retries appends.
    Kept,
    /// Durably, never appended again (an operator's request, the pool files' events).
    Unretried,
    /// Action results alone, kept for a retry: durable with the step's next sync
    /// ([`AgentStore::append_results`]; the step ends with one).
    Results,
}
