//! A log that goes back under the running fleet (`store-rollback`: etcd's prefix wiped, or etcd
//! restored from a snapshot older than what every node applied), each node's store checking the
//! log against its anchor with the fleet store's own check (`tenure_core::anchor`), and the
//! operator's recovery (docs/operations.md: a new log for the whole fleet).
//!
//! The model's log positions are log indices and each record's key is its serial (a number no
//! other record ever had, as etcd's batch keys): a record appended after the log went back is
//! another record at the same index. As the fleet store, a node checks at a head read (before its
//! calls, and when it starts), before it appends (an append's transaction: heartbeats, VRRP
//! reports, results; operators' requests and inventory reads through some agent's store) and
//! when its watch reconnects (a restore breaks it); a live watch applies what it receives
//! unchecked. A refused node appends nothing and calls nothing again, as the agent
//! (its core fails for good, `AgentCore::fail`), until the operator's recovery.

use rand::Rng;
use tenure_core::anchor::{Anchor, HeadSeen, Newest, check_anchor};
use tenure_core::driver::{DriverOptions, NodeDriver};
use tenure_core::log::{Event, EventKind};
use tenure_core::log_store::EventLog;
use tenure_core::node::NodeEngine;
use tenure_core::retry::RetryBackoff;

use super::{RETRY_BASE_MS, World};
use crate::checker;
use crate::store::LossyJournalStore;

/// The chance that a `store-rollback` wipes the log (the prefix deleted) rather than restoring
/// an older copy of it.
pub const WIPE_CHANCE: f64 = 0.3;

/// A fresh node driver over an empty journal (a new `store.path`).
pub(super) fn fresh_driver(
    name: &str,
    registry: &tenure_core::federation::Federation,
) -> NodeDriver<LossyJournalStore> {
    NodeDriver::new(
        NodeEngine::open(name, LossyJournalStore::new())
            .expect("memory store")
            .with_retry_backoff(RetryBackoff::from_base(RETRY_BASE_MS)),
        registry.clone(),
        DriverOptions { report_results: true },
    )
}

impl World {
    /// Where the log's head was created (0: no head): the serial of its first record.
    fn head_created(&self) -> i64 {
        self.serials.first().map_or(0, |serial| i64::try_from(*serial).expect("a serial fits"))
    }

    /// The key of the record at `index` (1-based), if the log has one there.
    fn key_at(&self, index: usize) -> Option<Vec<u8>> {
        let serial = self.serials.get(index.checked_sub(1)?)?;
        Some(serial.to_string().into_bytes())
    }

    /// What a head read sees of the log, looking for `anchor`'s record.
    fn head_seen(&self, anchor: &Anchor) -> HeadSeen {
        let batch_revision = anchor.batch_key().and_then(|key| {
            let index = usize::try_from(anchor.revision).ok()?;
            (self.key_at(index).as_deref() == Some(key)).then_some(anchor.revision)
        });
        HeadSeen {
            head_created: self.head_created(),
            head_revision: i64::try_from(self.log.len()).expect("a simulated log fits"),
            batch_revision,
            snapshot_revision: None,
        }
    }

    /// Whether the log still holds what the node applied (the rule as an oracle: nothing is
    /// refused).
    pub(super) fn log_holds_anchor(&self, node: usize) -> bool {
        let anchor = &self.nodes[node].anchor;
        check_anchor(anchor, &self.head_seen(anchor)).is_ok()
    }

    /// The node's store checks the log against its anchor (a head read, an append's
    /// transaction, a watch that reconnects, a start); a log that went back is refused for good.
    /// Whether the node may go on.
    pub(super) fn anchor_holds(&mut self, node: usize) -> bool {
        if self.nodes[node].refused.is_some() {
            return false;
        }
        // A log that never went back holds every anchor: nothing to compare (every follow and
        // append asks; the comparison allocates the anchor's key).
        if !self.config.check_anchor || !self.went_back {
            return true;
        }
        let seen = self.head_seen(&self.nodes[node].anchor);
        match check_anchor(&self.nodes[node].anchor, &seen) {
            Ok(()) => true,
            Err(reason) => {
                self.nodes[node].refused = Some(reason);
                self.refusals += 1;
                false
            }
        }
    }

    /// Whether the node's store refused the log (it does nothing more until the recovery).
    pub(super) fn refused(&self, node: usize) -> bool {
        self.nodes[node].refused.is_some()
    }

    /// Whether an event written through some agent (an operator's request, an inventory read) is
    /// appended: it goes through an agent's store, whose append checks the log. Once the log went
    /// back, the first agent (by index) that has not refused it writes it, and checks first;
    /// when every agent refused, nothing is written.
    pub(super) fn writer_holds(&mut self) -> bool {
        (0..self.nodes.len()).any(|node| self.anchor_holds(node))
    }

    /// After a follow: the anchor is the newest record the node applied.
    pub(super) fn move_anchor(&mut self, node: usize) {
        let applied = self.applied(node);
        let revision = i64::try_from(applied).expect("a simulated log fits");
        if self.nodes[node].anchor.revision == revision {
            // Nothing applied since it last moved.
            return;
        }
        let Some(key) = self.key_at(applied) else { return };
        // The head's creation is learned once (as the fleet store's `learn_head_created`); a
        // watch that applied the records of a log written anew does not learn it again.
        let head_created = self.nodes[node].anchor.head_created.or(Some(self.head_created()));
        self.nodes[node].anchor = Anchor { revision, newest: Newest::Batch(key), head_created };
    }

    /// The `store-rollback` fault: the log loses its end below what every node applied — wiped
    /// (the prefix deleted) or restored from an older copy. The head is what the shorter log
    /// builds; events on their way to the log are lost with it. Returns how the plot names it.
    pub(super) fn roll_back_log(&mut self) -> String {
        let least = (0..self.nodes.len()).map(|node| self.applied(node)).min().unwrap_or(0);
        if least == 0 || self.log.len() < least {
            return "store-rollback (nothing every node applied)".to_owned();
        }
        let keep =
            if least == 1 || self.rng.random_bool(WIPE_CHANCE) { 0 } else { self.rng.random_range(1..least) };
        let lost = self.log.len() - keep;
        self.went_back = true;
        self.rollbacks += 1;
        if keep > 0 {
            // A restored etcd breaks every watch (a wiped prefix does not: the watch goes on).
            for n in &mut self.nodes {
                n.watch_broken = true;
            }
        }
        self.log.truncate(keep);
        self.serials.truncate(keep);
        self.head_fingerprints.truncate(keep + 1);
        self.delayed.clear();
        self.head = self.registry.clone();
        for event in self.log.events() {
            self.head.apply(event).expect("the head applied it before");
        }
        self.resync_pools();
        self.checker.after_log_reset(&self.head);
        if keep == 0 {
            format!("store-rollback: wiped ({lost} events lost)")
        } else {
            format!("store-rollback to {keep} ({lost} events lost)")
        }
    }

    /// The world's record of each pool's current spec, as the head now has it (the operator's
    /// next churn applies to what the log says).
    pub(super) fn resync_pools(&mut self) {
        for (index, pool) in self.topology.pools.iter().enumerate() {
            self.pools[index] =
                self.head.pools().get(&pool.name).filter(|p| !p.deleted).map(|p| p.spec.as_ref().clone());
        }
    }

    /// The operator's recovery from a log that went back (docs/operations.md): every agent
    /// stopped (its calls in flight land; their results reach no one), the providers' state
    /// checked by hand — modelled as every address taken off every NIC, since tokens start again
    /// from 1 and nothing fences the old epochs any more —, the log cleared, every agent started
    /// again on a new, empty `store.path`, the pool files applied again. The checker's memory of
    /// tokens starts afresh too.
    pub(super) fn recover_fleet(&mut self) {
        self.went_back = false;
        self.land_due(true);
        for node in &self.topology.nodes {
            self.provider.remove_nic(&node.nic);
        }
        self.log = EventLog::new();
        self.serials.clear();
        self.head = self.registry.clone();
        self.head_fingerprints = vec![checker::fingerprint(&self.head)];
        self.delayed.clear();
        self.appends.forget_late();
        self.checker.after_fleet_recovery(&self.head);
        for node in 0..self.nodes.len() {
            let name = self.name(node);
            let n = &mut self.nodes[node];
            n.start_on_new_store(&name, &self.registry, 0);
            n.restart_stamper(0);
        }
        for spec in self.pools.clone().into_iter().flatten() {
            self.append(Event { at_ms: self.now_ms, kind: EventKind::PoolApplied { spec: Box::new(spec) } });
        }
        for node in 0..self.nodes.len() {
            self.report_vrrp(node);
            // A new agent starts fail-closed (not MASTER here, no proxy entry).
            self.fail_closed(node);
            let at_ms = self.stamp(node);
            self.append(Event { at_ms, kind: EventKind::Heartbeat { node: self.name(node) } });
        }
    }
}
