//! One simulated node: the agent's core over the node's driver, its stamper, and what only the
//! simulated world knows of it.

use std::collections::BTreeSet;

use tenure_core::agent::AgentCore;
use tenure_core::agent::clock::{PeerClocks, Stamper};
use tenure_core::anchor::Anchor;
use tenure_core::driver::NodeDriver;
use tenure_core::model::{StampedAction, VrrpState};

use super::appends::Batch;
use super::{CLOCK_VOTE_WINDOW_MS, HEARTBEAT_INTERVAL_MS};
use crate::store::LossyJournalStore;

/// A stamper as an agent starts with: no peer heard.
pub(super) fn new_stamper() -> Stamper {
    Stamper::new(PeerClocks::new(HEARTBEAT_INTERVAL_MS / 2, CLOCK_VOTE_WINDOW_MS))
}

/// One node of the simulation: the agent's core over the node's driver (what `tenure agent` runs,
/// [`AgentCore`]), its stamper (the agent's clock-lead rule over the node's skewed clock), and
/// what only the simulated world knows of the node.
pub(super) struct SimNode {
    /// The core of the node's agent (one node per agent).
    pub(super) core: AgentCore<LossyJournalStore>,
    /// The agent's stamper: every event the node appends is stamped by it.
    pub(super) stamper: Stamper,
    /// The node's own name, as the clock-lead rule leaves it out of the peers.
    pub(super) own: BTreeSet<String>,
    /// Calls that passed the gate just before the node froze (paused-call mode).
    pub(super) stalled: Vec<StampedAction>,
    /// A step's batch the node did not hear land (`append-in-doubt`): appended again, alone and
    /// unchanged, before anything else of its loop (in memory: a crash forgets it).
    pub(super) unappended: Option<Batch>,
    /// The node's loop is stuck in a slow store call until this stream time (`slow-step`): its
    /// step under way waits; its heartbeat thread goes on.
    pub(super) stuck_until_ms: u64,
    /// Bumped at every crash: results of calls from an earlier life are not delivered.
    pub(super) incarnation: u64,
    /// How much of the log the node had applied when it last crashed: its replica (the embedded
    /// store's file, or etcd's range loaded at start) holds at least that much when it restarts,
    /// so a lagging follow never leaves its view behind what it planned from before.
    pub(super) floor: usize,
    /// How far this host's clock runs from stream time (`clock-skew`: ±300 ms).
    pub(super) skew_ms: i64,
    /// The VRRP state this node's agent last appended to the log (on-prem fleets): the agent
    /// reports its keepalived's transitions itself, so not while paused or cut off.
    pub(super) vrrp_reported: Option<VrrpState>,
    /// How far the node applied the log, as its store records it (durable: kept by a crash).
    pub(super) anchor: Anchor,
    /// Why the node's store refused the log (it went back): the node does nothing more until
    /// the operator's recovery (`world/rollback.rs`).
    pub(super) refused: Option<String>,
    /// The node's watch of the log broke (a restore breaks it): its next follow reconnects and
    /// checks the anchor first.
    pub(super) watch_broken: bool,
}

impl SimNode {
    /// The node's driver (its agent runs one node).
    pub(super) fn driver(&self) -> &NodeDriver<LossyJournalStore> {
        &self.core.drivers()[0]
    }

    /// The node's driver, to follow the log and act on it.
    pub(super) fn driver_mut(&mut self) -> &mut NodeDriver<LossyJournalStore> {
        &mut self.core.drivers_mut()[0]
    }

    /// A new agent's stamper (at the start of a run, or a restart): the stamps in its view vote
    /// until `until_ms` (the agent's three heartbeat intervals), then only once they move.
    /// The agent started again on a new, empty `store.path` (its name kept): a fresh core over
    /// the empty registry, no binding, nothing kept of the old process. Its replica holds at
    /// least `floor` records once it loaded. (The stamper is restarted once the view is followed.)
    pub(super) fn start_on_new_store(
        &mut self,
        name: &str,
        registry: &tenure_core::federation::Federation,
        floor: usize,
    ) {
        self.core = AgentCore::new(vec![super::rollback::fresh_driver(name, registry)]);
        self.stalled.clear();
        self.unappended = None;
        self.stuck_until_ms = 0;
        self.incarnation += 1;
        self.floor = floor;
        self.anchor = Anchor::default();
        self.refused = None;
        self.watch_broken = false;
        self.vrrp_reported = None;
    }

    pub(super) fn restart_stamper(&mut self, until_ms: u64) {
        self.stamper = new_stamper();
        let view = self.core.drivers()[0].view();
        self.stamper.peers.baseline(view, &self.own, until_ms);
    }

    /// The process is frozen (paused and not in a resume's zombie pass).
    pub(super) fn frozen(&self) -> bool {
        self.driver().is_paused() && !self.driver().is_resuming()
    }

    /// The node cannot read the log head.
    pub(super) fn cut_off(&self) -> bool {
        self.driver().is_partitioned()
    }
}
