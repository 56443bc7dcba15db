//! A node's steps, as the agent takes them through the one driver API
//! (`tenure_core::driver`): follow, reconcile when due, gate in batches and call, pause,
//! resume, crash — with what the agent leaves to timing drawn from the seed
//! (docs/simulation.md, "How a node is driven").

use rand::Rng;
use tenure_core::agent::Planned;
use tenure_core::log::Event;

use super::{
    FOLLOW_BATCH_DRAW_MAX, GATE_BATCH_DRAW_MAX, HEARTBEAT_INTERVAL_MS, LAGGING_RECONCILE_CHANCE,
    REQUEUE_CHANCE, World,
};
use crate::checker::{self, ViolationKind};

impl World {
    /// Follows the log with the node's driver (the agent's `follow`), reading a random number of
    /// records at a time. `lagging`: the node's replica has not received everything yet, and it
    /// applies a random part of what it has not applied; otherwise it follows to the head.
    pub(super) fn follow(&mut self, node: usize, lagging: bool, head_read: bool) {
        let applied = self.applied(node);
        let batch = self.rng.random_range(1..=FOLLOW_BATCH_DRAW_MAX);
        let max = if lagging {
            // (A view past the end of a log that went back, unchecked, has nothing to read.)
            let unread = self.log.len().saturating_sub(applied);
            let least = self.nodes[node].floor.saturating_sub(applied).min(unread);
            self.rng.random_range(least..=unread)
        } else {
            usize::MAX
        };
        self.follow_up_to(node, batch, max, head_read);
    }

    /// Applies at most `max` records, `batch` per read, then what every follow does: the view is
    /// checked against the head at its prefix, and the calls it now fences are cancelled. As the
    /// fleet store: a live watch applies what it receives unchecked; a head read (`head_read`:
    /// before calls, at start) or a watch that reconnects (a restore breaks it) first checks the
    /// log against the node's anchor (a log that went back is refused: nothing is applied). The
    /// anchor then moves onto what was applied.
    fn follow_up_to(&mut self, node: usize, batch: usize, max: usize, head_read: bool) {
        let reconnect = std::mem::take(&mut self.nodes[node].watch_broken);
        if self.refused(node) || ((head_read || reconnect) && !self.anchor_holds(node)) {
            return;
        }
        self.nodes[node]
            .driver_mut()
            .follow_at_most(&self.log, batch, max)
            .expect("an event log cannot fail");
        self.move_anchor(node);
        let cursor = self.applied(node);
        let name = self.name(node);
        // A node whose log went back under it (its anchor is gone; it has not checked since) has
        // a view that is no prefix of the head by the fault, not by its doing: what it does with
        // it is judged (stale calls, tokens below what it executed), not the view.
        let lost = self.went_back && !self.log_holds_anchor(node);
        if !lost
            && self.head_fingerprints.get(cursor)
                != Some(&checker::fingerprint(self.nodes[node].driver().view()))
        {
            let detail = format!("{name} at log prefix {cursor} differs from the head");
            self.violation(ViolationKind::DivergentMaps, detail);
        }
        self.checker.after_catch_up(&name, self.nodes[node].driver().view());
        // As the agent's follow: the peers' clocks it now sees, then the calls it fences.
        let n = &mut self.nodes[node];
        n.stamper.peers.observe(n.core.drivers()[0].view(), &n.own, self.now_ms);
        self.cancel_stale_calls(node);
    }

    /// How many events of the log the node's view applied.
    pub(super) fn applied(&self, node: usize) -> usize {
        self.nodes[node]
            .driver()
            .applied_index()
            .map_or(0, |index| usize::try_from(index.get()).expect("a simulated log fits memory"))
    }

    /// Appends what the node's driver wants appended (its outbox), at the node's time.
    pub(super) fn drain_outbox(&mut self, node: usize) {
        if !self.anchor_holds(node) {
            return;
        }
        while let Some(kind) = self.nodes[node].driver_mut().poll_append() {
            let event = Event { at_ms: self.stamp(node), kind };
            self.append(event);
        }
    }

    /// The agent's reconcile: follow (perhaps only part of the way: a lagging replica), then plan
    /// when the driver says a plan is due or the requeue interval came round.
    pub(super) fn reconcile(&mut self, node: usize) {
        if self.nodes[node].cut_off() || self.nodes[node].driver().is_paused() || self.refused(node) {
            return;
        }
        let lagging = self.rng.random_bool(LAGGING_RECONCILE_CHANCE);
        // The watch's replica: no head read before a plan.
        self.follow(node, lagging, false);
        if self.refused(node) {
            return;
        }
        if self.rng.random_bool(REQUEUE_CHANCE) {
            self.nodes[node].core.begin_requeue();
        }
        // The agent's step's planning, by the agent's core (`AgentCore::plan`): a due node plans
        // a slice of a pass and promotes what its (possibly lagging) view shows approved; the
        // gate before each call reads the head. A pass takes 1 to 4 slices (as the agent's slices
        // of 1,024 over a map of up to 4,096 addresses), their number taken from the log's
        // length, not the seed's draws.
        let positions: usize = self.topology.pools.iter().map(|p| p.addresses.len()).sum();
        let slice = positions.div_ceil(1 + self.log.len() % 4).max(1);
        let planned = self.nodes[node].core.plan(slice);
        debug_assert!(
            planned.iter().all(|(_, p)| matches!(p, Planned::Planned(_))),
            "an acting node plans: {planned:?}"
        );
        // At the head, planned now or (nothing due) before, no pass under way: a hand-over it
        // saw is planned. A missed re-plan (`reconcile_due` wrong) shows here as a kept entry.
        let driver = self.nodes[node].driver();
        if self.applied(node) == self.log.len() && !driver.requeue_under_way() && !driver.reconcile_due() {
            self.check_kept_entries(node);
        }
        // The outbox of results: what the log has not confirmed is reported again.
        self.drain_outbox(node);
    }

    /// The agent's calls: follow to the head (the agent confirms it first), gate what the last
    /// reconcile promoted in batches, call; then the refreshes.
    pub(super) fn execute(&mut self, node: usize) {
        if self.nodes[node].cut_off() || self.nodes[node].driver().is_paused() || self.refused(node) {
            return;
        }
        self.follow(node, false, true);
        if self.refused(node) {
            return;
        }
        // The agent spawns every call of its pass (all batches, then the refreshes) before it
        // handles any result: what takes no time lands once the pass went out.
        self.issuing = Some(Vec::new());
        self.execute_polled(node);
        self.refresh(node);
        self.land_issued();
    }

    /// Gates the node's ready actions in batches of a random size and calls them: a normal pass,
    /// or the zombie pass of a resume (the caller holds the landings: [`World::land_issued`]). A
    /// node frozen between a batch's gate and its calls makes the batch's remaining calls when it
    /// wakes up; what it called before lands.
    pub(super) fn execute_polled(&mut self, node: usize) {
        loop {
            let max = self.rng.random_range(1..=GATE_BATCH_DRAW_MAX);
            let batch = self.nodes[node].core.poll_calls(0, max, None);
            assert!(self.nodes[node].core.failed().is_none(), "a memory journal cannot fail");
            if batch.is_empty() {
                return;
            }
            let mut batch = batch.into_iter();
            while let Some(action) = batch.next() {
                if self.rng.random_bool(self.chances.stall_at_call) {
                    // Frozen between the gate check and the call: the calls go out on resume.
                    self.land_issued();
                    self.nodes[node].stalled.push(action);
                    self.nodes[node].stalled.extend(batch);
                    self.pause(node);
                    return;
                }
                self.call(node, action);
            }
        }
    }

    pub(super) fn pause(&mut self, node: usize) {
        self.nodes[node].driver_mut().pause();
    }

    pub(super) fn resume(&mut self, node: usize) {
        if !self.nodes[node].driver().is_paused() {
            return;
        }
        let woken = self.nodes[node].driver_mut().resume();
        // The agent handles the VRRP transition it slept through: not MASTER, no proxy entry.
        self.fail_closed(node);
        // A frozen process that wakes up finishes the call it was making, connected or not.
        for action in std::mem::take(&mut self.nodes[node].stalled) {
            self.call(node, action);
        }
        if woken.is_err() {
            return;
        }
        // As the agent's resume: follow to the head, gate what was approved before the pause
        // (catching up changes no journal entry), then act again.
        self.follow(node, false, true);
        if self.refused(node) {
            self.nodes[node].driver_mut().finish_resume();
            return;
        }
        self.issuing = Some(Vec::new());
        self.execute_polled(node);
        self.land_issued();
        self.nodes[node].driver_mut().finish_resume();
    }

    pub(super) fn crash(&mut self, node: usize, lossy: bool) {
        let applied = self.applied(node);
        let n = &mut self.nodes[node];
        n.floor = n.floor.max(applied);
        if lossy {
            n.driver_mut().engine_mut().store_mut().lose_unsynced();
        }
        n.driver_mut().restart().expect("memory store");
        n.stalled.clear();
        n.incarnation += 1;
        let name = self.name(node);
        self.checker.after_restart(&name);
        // The agent follows its store's log before anything else (what it had applied is there,
        // whether or not the head can be read now), then starts fail-closed: not MASTER here, no
        // proxy entry (a host that crashed while frozen slept through its transition). A release
        // recorded from the empty view would carry epoch 0 and leave the address unanswered.
        let floor = self.nodes[node].floor;
        let batch = self.rng.random_range(1..=FOLLOW_BATCH_DRAW_MAX);
        self.follow_up_to(node, batch, floor, true);
        // A new agent's stamper: the stamps its view holds vote for three heartbeat intervals.
        let until_ms = self.now_ms + 3 * HEARTBEAT_INTERVAL_MS;
        self.nodes[node].restart_stamper(until_ms);
        if self.refused(node) {
            // A store that refuses the log stops the agent at start: nothing more, no withdrawal
            // from an empty view.
            return;
        }
        self.fail_closed(node);
    }
}
