//! Inventory reads for drift repair: when each provider's is read next (one at a time per
//! provider, by the provider's reader only: `Federation::inventory_reader`), and what a finished
//! read appends (one `inventory` event per change the log does not know yet).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::Duration;

use tenure_core::log::{Event, EventKind};
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use super::Agent;
use crate::agent::AgentStore;
use crate::exec::{Inventory, InventoryRequest};

/// A finished inventory read (its provider is [`InventorySchedule::tasks`]' entry for the task).
pub(super) struct InventoryDone {
    /// The stamp taken when the read started: the `at` of the events it yields, so that a call
    /// confirmed while the read was under way is never contradicted by it.
    pub(super) started_at_ms: u64,
    /// `None`: the executor takes no inventory.
    pub(super) inventory: Option<Inventory>,
    /// The NICs the read could see, when it saw only this host's (`onprem`); `None`: the
    /// provider's whole view.
    pub(super) scope: Option<Vec<String>>,
}

/// When each provider's inventory is read next, and which reads are under way.
#[derive(Default)]
pub(super) struct InventorySchedule {
    /// Provider → (interval, next read).
    pub(super) due: BTreeMap<String, (Duration, Instant)>,
    /// The reads under way: which provider each task reads (a task that panicked is
    /// rescheduled too).
    pub(super) tasks: HashMap<tokio::task::Id, String>,
    /// The last failure logged at warn per provider (a repeat is logged at debug).
    pub(super) last_failure: BTreeMap<String, String>,
    /// Providers to read again as soon as their read under way ends ([`Self::read_now`]).
    pub(super) rushed: BTreeSet<String>,
    /// Providers whose next read was asked for at once ([`Self::read_now`]): made by this agent
    /// even when another node is the provider's reader.
    pub(super) urgent: BTreeSet<String>,
    /// Per provider, the reader this agent last saw in the view ([`Self::reader_seen`]).
    pub(super) readers: BTreeMap<String, Option<String>>,
}

impl InventorySchedule {
    /// Whether a read of `provider` is under way.
    pub(super) fn reading(&self, provider: &str) -> bool {
        self.tasks.values().any(|p| p == provider)
    }

    /// The next read that is not under way, if any.
    pub(super) fn next(&self) -> Option<Instant> {
        self.due.iter().filter(|(p, _)| !self.reading(p)).map(|(_, (_, at))| *at).min()
    }

    /// Records `reader` as `provider`'s inventory reader; `true` when it differs from the one
    /// seen before (to log the hand-over once).
    pub(super) fn reader_seen(&mut self, provider: &str, reader: Option<&str>) -> bool {
        let reader = reader.map(str::to_owned);
        self.readers.insert(provider.to_owned(), reader.clone()) != Some(reader)
    }

    /// The next read of `provider` one interval from now (now, when it was rushed meanwhile).
    pub(super) fn reschedule(&mut self, provider: &str) {
        let rushed = self.rushed.remove(provider);
        if let Some((interval, next)) = self.due.get_mut(provider) {
            *next = if rushed { Instant::now() } else { Instant::now() + *interval };
        }
    }
}

impl<S: AgentStore> Agent<S> {
    /// Starts the inventory reads that are due, one per provider at a time, each bounded by the
    /// provider's call timeout. Not while the agent cannot append what they would find.
    pub(super) fn start_inventories(&mut self) {
        let now = Instant::now();
        let due: Vec<String> = self
            .inventory
            .due
            .iter()
            .filter(|(p, (_, at))| *at <= now && !self.inventory.reading(p))
            .map(|(p, _)| p.clone())
            .collect();
        for provider in due {
            let (interval, _) = self.inventory.due[&provider];
            if self.unhealthy.is_some() || self.core.failed().is_some() {
                self.inventory.due.insert(provider, (interval, now + interval));
                continue;
            }
            let Some(executor) = self.executors.get(&provider).cloned() else { continue };
            let view = self.view();
            let addresses: Vec<std::net::IpAddr> = view
                .pools()
                .values()
                // Every address a pool of the provider lists or listed (deleted pools and
                // addresses included): what the federation keeps observations of.
                .filter(|pool| pool.spec.provider == provider)
                .flat_map(|pool| pool.addresses.keys().copied())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let nics: Vec<String> = view
                .nodes()
                .iter()
                .filter(|node| node.spec.provider == provider)
                .map(|node| node.spec.nic.clone())
                .collect();
            let own_nics: Vec<String> = view
                .nodes()
                .iter()
                .filter(|node| node.spec.provider == provider && self.own_nodes.contains(&node.spec.name))
                .map(|node| node.spec.nic.clone())
                .collect();
            // A read that sees only this host's NICs speaks of nothing else (a scoped event).
            let scope = executor.executor.inventory_sees_only_own_nics().then(|| own_nics.clone());
            if scope.as_ref().is_some_and(Vec::is_empty) {
                info!(%provider, "no node of this agent on this provider: its inventory sees only its own host; not read");
                self.inventory.due.remove(&provider);
                continue;
            }
            // One reader per provider for a read of the whole provider (`Federation::
            // inventory_reader`); every agent while the log names none, and a read asked for at
            // once (`read_now`) by the agent that asked.
            let reader = view.inventory_reader(&provider).map(str::to_owned);
            let urgent = self.inventory.urgent.remove(&provider);
            if scope.is_none() {
                let ours = reader.as_ref().is_none_or(|r| self.own_nodes.contains(r));
                if self.inventory.reader_seen(&provider, reader.as_deref()) {
                    let shown = reader.as_deref().unwrap_or("none alive: every agent reads");
                    info!(%provider, reader = shown, ours, "inventory reader");
                }
                if !ours && !urgent {
                    self.inventory.due.insert(provider, (interval, now + interval));
                    continue;
                }
            }
            let started_at_ms = self.stamp();
            // A read of many addresses is several paginated calls: it may take up to its
            // interval, and never less than one call's timeout.
            let deadline = now + executor.call_timeout.max(interval);
            let handle = self.inventories.spawn(async move {
                let request = InventoryRequest { addresses, nics, own_nics };
                let inventory = match executor.executor.inventory(&request) {
                    None => None,
                    Some(read) => Some(match tokio::time::timeout_at(deadline, read).await {
                        Ok(answer) => answer,
                        Err(_elapsed) => Err("no answer before the read's deadline".to_owned()),
                    }),
                };
                InventoryDone { started_at_ms, inventory, scope }
            });
            self.inventory.tasks.insert(handle.id(), provider);
        }
    }

    /// Queues what a read found that the log does not know yet ([`Federation::inventory_is_news`]:
    /// one event per change). Returns whether anything was queued.
    pub(super) fn finish_inventory(
        &mut self,
        done: Result<(tokio::task::Id, InventoryDone), tokio::task::JoinError>,
    ) -> bool {
        let (id, done) = match done {
            Ok((id, done)) => (id, Ok(done)),
            Err(e) => (e.id(), Err(e)),
        };
        let Some(provider) = self.inventory.tasks.remove(&id) else { return false };
        self.inventory.reschedule(&provider);
        let done = match done {
            Ok(done) => done,
            Err(e) => {
                error!(error = %e, %provider, "an inventory read's task failed; read again at its interval");
                *self.counters.inventory_reads.entry((provider, "failed")).or_insert(0) += 1;
                return false;
            }
        };
        let Some(inventory) = done.inventory else {
            info!(%provider, "this provider's executor takes no inventory: drift repair is off for it");
            self.inventory.due.remove(&provider);
            return false;
        };
        match inventory {
            Ok(found) => {
                *self.counters.inventory_reads.entry((provider.clone(), "ok")).or_insert(0) += 1;
                self.inventory.last_failure.remove(&provider);
                let view = self.view();
                let news: Vec<Event> = found
                    .into_iter()
                    .filter(|(address, holders)| {
                        view.inventory_is_news(&provider, *address, holders, done.scope.as_deref())
                    })
                    .map(|(address, holders)| Event {
                        at_ms: done.started_at_ms,
                        kind: EventKind::Inventory {
                            provider: provider.clone(),
                            address,
                            holders,
                            scope: done.scope.clone(),
                        },
                    })
                    .collect();
                if news.is_empty() {
                    return false;
                }
                debug!(%provider, changes = news.len(), "inventory: appending what changed");
                // A newer read supersedes what an earlier one queued for the same addresses (while
                // appends fail, reads would otherwise pile up the same news).
                let addresses: BTreeSet<IpAddr> = news
                    .iter()
                    .filter_map(|e| match &e.kind {
                        EventKind::Inventory { address, .. } => Some(*address),
                        _ => None,
                    })
                    .collect();
                self.queued_stamped.retain(|e| {
                    !matches!(&e.kind, EventKind::Inventory { provider: p, address, .. }
                        if *p == provider && addresses.contains(address))
                });
                self.queued_stamped.extend(news);
                true
            }
            Err(reason) => {
                *self.counters.inventory_reads.entry((provider.clone(), "failed")).or_insert(0) += 1;
                if self.inventory.last_failure.get(&provider) == Some(&reason) {
                    debug!(%provider, %reason, "inventory read failed (as before)");
                } else {
                    warn!(%provider, %reason, "inventory read failed; drift repair waits for the next read");
                    self.inventory.last_failure.insert(provider, reason);
                }
                false
            }
        }
    }
}
