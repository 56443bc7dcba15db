//! A step's appends to the shared log as the fleet store makes them, with the store's answer
//! lost (`append-in-doubt`), and a loop stuck in a slow store call (`slow-step`)
//! (docs/simulation.md, "A store that is slow or does not answer").
//!
//! The fleet store puts a batch under a key named by its contents, only while no key of that
//! name exists (`store/fleet/io/append.rs`): a batch retried as it was lands once, whether the
//! first try was lost, landed unheard, or lands after the retry was sent. The agent keeps a batch
//! it did not hear land and appends it again, alone and unchanged, before anything else of its
//! loop (`runner/appends.rs`); its heartbeats go on meanwhile (their own thread).

use std::collections::BTreeSet;

use rand::Rng;
use tenure_core::log::Event;

use super::World;
use crate::config::Fault;

/// Latest a batch whose answer was lost may still land after it was sent, in ms of stream time
/// (etcd's request timeout is 2 s by default; a proposal may commit after its client gave up).
pub const LATE_LANDING_MAX_MS: u64 = 2_500;

/// One step's appends, named as the fleet store names a batch (its key): a retry of it is the
/// same batch.
#[derive(Clone, Debug)]
pub(super) struct Batch {
    id: u64,
    events: Vec<Event>,
}

/// The world's side of the batches whose answer was lost.
#[derive(Debug, Default)]
pub(super) struct InDoubt {
    /// The last batch name given.
    next: u64,
    /// Batches that landed: a retry of one finds its key there and writes nothing.
    landed: BTreeSet<u64>,
    /// Batches that land late: when, the batch, and how many times the log had gone back when it
    /// was sent (a log that went back since fails the put's compare on the sender's anchor).
    late: Vec<(u64, Batch, u64)>,
}

impl InDoubt {
    /// Nothing is on its way to the log.
    pub(super) fn settled(&self) -> bool {
        self.late.is_empty()
    }

    /// The operator's recovery starts a new log: what was on its way to the old one is gone.
    pub(super) fn forget_late(&mut self) {
        self.late.clear();
    }
}

impl World {
    /// The step's `Append`: the node's outbox (the results the log has not confirmed) as one
    /// batch. A batch the node did not hear land goes first, alone and unchanged; while it does
    /// not land, nothing else of the loop is appended (the outbox waits in the driver).
    pub(super) fn drain_outbox(&mut self, node: usize) {
        if !self.anchor_holds(node) {
            return;
        }
        if let Some(kept) = self.nodes[node].unappended.take()
            && !self.append_batch(node, kept)
        {
            return;
        }
        let mut events = Vec::new();
        while let Some(kind) = self.nodes[node].driver_mut().poll_append() {
            events.push(Event { at_ms: self.stamp(node), kind });
        }
        self.send_batch(node, events);
    }

    /// Appends `events` of `node` as one new batch (nothing when there are none).
    pub(super) fn send_batch(&mut self, node: usize, events: Vec<Event>) {
        if events.is_empty() {
            return;
        }
        self.appends.next += 1;
        let batch = Batch { id: self.appends.next, events };
        self.append_batch(node, batch);
    }

    /// Appends `batch` for `node` as the fleet store does. Returns whether the node heard it
    /// land; if not (`append-in-doubt`: the request timed out), it was lost, or it landed all the
    /// same, now or later, and the node keeps it for a retry.
    fn append_batch(&mut self, node: usize, batch: Batch) -> bool {
        // A retry finds the batch's key there: nothing is written, and the store says so.
        if self.appends.landed.contains(&batch.id) {
            return true;
        }
        // A retry of a batch still on its way: one of the two puts lands, here the retry (the
        // late one then finds the key).
        self.appends.late.retain(|(_, late, _)| late.id != batch.id);
        // (No draw without the fault: the seeds of other fault sets keep their runs.)
        if self.chances.append_in_doubt == 0.0 || !self.rng.random_bool(self.chances.append_in_doubt) {
            self.land_batch(batch);
            return true;
        }
        self.count_fault(Fault::AppendInDoubt);
        match self.rng.random_range(0..3) {
            // Lost: the request never reached etcd's leader.
            0 => {}
            // Landed; its answer was lost.
            1 => self.land_batch(batch.clone()),
            // Committed after the client gave up.
            _ => {
                let at = self.now_ms + self.rng.random_range(1..=LATE_LANDING_MAX_MS);
                self.appends.late.push((at, batch.clone(), self.rollbacks));
            }
        }
        self.nodes[node].unappended = Some(batch);
        false
    }

    fn land_batch(&mut self, batch: Batch) {
        self.appends.landed.insert(batch.id);
        for event in batch.events {
            self.append(event);
        }
    }

    /// Lands the late batches now due, in the order they come due — none that was sent before
    /// the log went back.
    pub(super) fn land_late_appends(&mut self) {
        let now = self.now_ms;
        let (mut due, late): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.appends.late).into_iter().partition(|(at, _, _)| *at <= now);
        self.appends.late = late;
        due.sort_by_key(|(at, batch, _)| (*at, batch.id));
        for (_, batch, rollbacks) in due {
            if rollbacks == self.rollbacks {
                self.land_batch(batch);
            }
        }
    }

    /// The `slow-step` fault: `node`'s loop is stuck in a store call (a slow fsync, an etcd
    /// request) for one to three heartbeat TTLs, wherever its step is; its heartbeat thread goes
    /// on. Returns how the plot names it.
    pub(super) fn slow_step(&mut self) -> String {
        let node = self.rng.random_range(0..self.nodes.len());
        let ttl = self.topology.pools.iter().map(|p| p.heartbeat_ttl_ms).max().unwrap_or(1_000);
        let stuck = self.rng.random_range(ttl..=3 * ttl);
        let n = &mut self.nodes[node];
        n.stuck_until_ms = n.stuck_until_ms.max(self.now_ms + stuck);
        format!("slow-step {} for {stuck} ms", self.name(node))
    }

    /// Whether `node`'s loop is stuck in a slow store call now (`slow-step`).
    pub(super) fn stuck(&self, node: usize) -> bool {
        self.now_ms < self.nodes[node].stuck_until_ms
    }
}
