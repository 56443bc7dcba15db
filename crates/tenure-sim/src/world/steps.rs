//! A node's steps, as the agent takes them through the one driver API
//! (`tenure_core::driver`): follow, reconcile when due, gate in batches and call, pause,
//! resume, crash, rebuild — with what the agent leaves to timing drawn from the seed
//! (docs/simulation.md, "How a node is driven").

use rand::Rng;
use tenure_core::agent::{HeadConfirmed, Planned, Step, StepOp};
use tenure_core::log_store::Log as _;
use tenure_core::model::VrrpState;

use super::{
    FOLLOW_BATCH_DRAW_MAX, GATE_BATCH_DRAW_MAX, HEARTBEAT_INTERVAL_MS, LAGGING_RECONCILE_CHANCE,
    REQUEUE_CHANCE, World,
};
use crate::checker::{self, ViolationKind};
use crate::topology::PROVIDER;

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
        // (Its view would move without the cancel of the calls it fences: `poll_stale_calls`
        // names none while frozen.)
        assert!(!self.nodes[node].frozen(), "a frozen node follows the log");
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

    /// Advances the node's agent step ([`AgentCore::poll_step`]: the order `tenure agent` takes)
    /// to its next follow, beginning one when none is under way; the world moves between (other
    /// nodes append, calls land, faults strike), as it does while an agent waits on its store. A
    /// step's first part ends with the follow of its replica, its second with planning, its
    /// appends and a second follow; its last confirms the head (a head read) and calls. A node
    /// that is frozen, cut off from the log or refused takes no step (one under way waits).
    pub(super) fn advance(&mut self, node: usize) {
        let n = &self.nodes[node];
        if n.cut_off() || n.driver().is_paused() || self.refused(node) || self.stuck(node) {
            return;
        }
        if !self.nodes[node].core.step_under_way() {
            let positions: usize = self.topology.pools.iter().map(|p| p.addresses.len()).sum();
            // A pass takes 1 to 4 slices (as the agent's slices of 1,024 over a map of up to
            // 4,096 addresses), their number taken from the log's length, not the seed's draws.
            let slice = positions.div_ceil(1 + self.log.len() % 4).max(1);
            self.nodes[node].core.begin_step(Step { slice, calls: true, head_failing: false });
        }
        while let Some(op) = self.nodes[node].core.poll_step() {
            match op {
                // The outbox of results: what the log has not confirmed is reported again.
                StepOp::Append => self.drain_outbox(node),
                StepOp::Withdraw => self.withdraw_if_due(node),
                StepOp::Follow => {
                    // The watch's replica: no head read; it may lag.
                    let lagging = self.rng.random_bool(LAGGING_RECONCILE_CHANCE);
                    self.follow(node, lagging, false);
                    let ok = !self.refused(node);
                    self.nodes[node].core.followed(ok);
                    if ok {
                        self.after_step_follow(node);
                    }
                    return;
                }
                StepOp::Planned(planned) => debug_assert!(
                    planned.iter().all(|(_, p)| matches!(p, Planned::Planned(_))),
                    "an acting node plans: {planned:?}"
                ),
                StepOp::ConfirmHead(_) => {
                    let proof = self.confirm_head(node);
                    self.nodes[node].core.head_confirmed(proof);
                }
                StepOp::Call(proof) => {
                    // The agent spawns every call of its pass before it handles any result: what
                    // takes no time lands once the pass went out.
                    self.issuing = Some(Vec::new());
                    self.execute_polled(node, proof.as_ref());
                    self.land_issued();
                    if self.nodes[node].frozen() {
                        // Frozen at a call (`paused-call`): the process does nothing more until
                        // it wakes up — no head read, no refresh (a frozen node's follow would
                        // move its view without the cancel of what that view fences).
                        continue;
                    }
                    // Then, as the agent's refresh timer (`runner/refresh.rs`): its own head
                    // confirmation (no head was confirmed when nothing was ready to call), then
                    // the announcements repeated.
                    if let Some(proof) = self.confirm_head(node) {
                        self.issuing = Some(Vec::new());
                        self.refresh(node, &proof);
                        self.land_issued();
                    }
                }
            }
        }
    }

    /// Runs the node's step under way to its end, or a whole new one (the liveness phase).
    pub(super) fn whole_step(&mut self, node: usize) {
        for _ in 0..3 {
            self.advance(node);
            if !self.nodes[node].core.step_under_way() {
                return;
            }
        }
    }

    /// After a step's follow: the requeue interval may come round (a node plans when its driver
    /// says a plan is due, or with [`REQUEUE_CHANCE`] anyway); and at the head, with nothing left
    /// to plan, a hand-over it saw is planned — a missed re-plan (`reconcile_due` wrong) shows
    /// here as a kept entry.
    fn after_step_follow(&mut self, node: usize) {
        if self.rng.random_bool(REQUEUE_CHANCE) {
            self.nodes[node].core.begin_requeue();
        }
        let driver = self.nodes[node].driver();
        if self.applied(node) == self.log.len() && !driver.requeue_under_way() && !driver.reconcile_due() {
            self.check_kept_entries(node);
        }
    }

    /// The agent's local withdrawal goes round again on a host keepalived demoted while the node
    /// still records a capture with no call in flight (`runner/withdraw.rs`).
    fn withdraw_if_due(&mut self, node: usize) {
        if self.honours_vrrp_locally()
            && self.local_vrrp(node) != VrrpState::Master
            && self.nodes[node].core.captured_without_call(|provider, _| provider == PROVIDER)
        {
            self.withdraw(node);
        }
    }

    /// The agent's head confirmation (`runner/step.rs::confirm_head`): the store's head read,
    /// checked against the node's anchor, then a follow to it; the core's proof that calls may be
    /// gated ([`tenure_core::agent::AgentCore::confirmed_at`]), or `None`: the store refused the
    /// log (it went back), and nothing is called.
    pub(super) fn confirm_head(&mut self, node: usize) -> Option<HeadConfirmed> {
        let head = self.log.head().expect("an event log cannot fail");
        self.follow(node, false, true);
        if self.refused(node) {
            return None;
        }
        self.nodes[node].core.confirmed_at(head)
    }

    /// Gates the node's ready actions in batches of a random size and calls them: a normal pass,
    /// or the zombie pass of a resume (the caller holds the landings: [`World::land_issued`]), at
    /// the head `proof` confirmed (none: nothing was confirmed, nothing is gated). A node frozen
    /// between a batch's gate and its calls makes the batch's remaining calls when it wakes up;
    /// what it called before lands.
    pub(super) fn execute_polled(&mut self, node: usize, proof: Option<&HeadConfirmed>) {
        loop {
            let max = self.rng.random_range(1..=GATE_BATCH_DRAW_MAX);
            let batch = match proof {
                Some(proof) => self.nodes[node].core.poll_calls(proof, 0, max, None),
                None => Vec::new(),
            };
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
        // As the agent's resume: follow to a confirmed head, gate what was approved before the
        // pause (catching up changes no journal entry), then act again.
        let Some(proof) = self.confirm_head(node) else {
            self.nodes[node].driver_mut().finish_resume();
            return;
        };
        self.issuing = Some(Vec::new());
        self.execute_polled(node, Some(&proof));
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
        n.core.abandon_step();
        n.stalled.clear();
        n.unappended = None;
        n.stuck_until_ms = 0;
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

    /// `rebuild`: the node's agent is killed and started again on a new, empty `store.path` (a
    /// router rebuilt with its name kept): its journal, high-water marks and store binding are
    /// gone; what its NIC holds at the provider stays. The new store loads the log as it is now
    /// before the agent does anything (a fleet store's initial load), then the agent starts
    /// fail-closed like any restart. What it held before is released from the log's record of
    /// its acquires (`docs/architecture.md`, "What counts as captured").
    pub(super) fn rebuild(&mut self, node: usize) {
        let name = self.name(node);
        let loaded = self.log.len();
        self.nodes[node].start_on_new_store(&name, &self.registry, loaded);
        self.checker.after_restart(&name);
        self.follow_up_to(node, loaded.max(1), loaded, true);
        let until_ms = self.now_ms + 3 * HEARTBEAT_INTERVAL_MS;
        self.nodes[node].restart_stamper(until_ms);
        if self.refused(node) {
            return;
        }
        self.fail_closed(node);
    }
}
