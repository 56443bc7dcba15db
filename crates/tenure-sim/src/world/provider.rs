//! The provider side of the world: calls on their way, landing them, the data-plane checks,
//! and inventory observations.

use std::net::IpAddr;

use rand::Rng;
use tenure_core::log::{ActionOutcome, Event, EventKind};
use tenure_core::model::{ProviderKind, StampedAction, Verb};

use tenure_core::agent::{CallOutcome, HeadConfirmed};

use super::{CALL_DEADLINE_MS, Heard, IN_DOUBT_ACTED_CHANCE, PendingCall, World};
use crate::checker::{self, Answerer, ViolationKind};
use crate::config::Mode;
use crate::topology::PROVIDER;

/// What a simulated provider error says.
const PROVIDER_ERROR: &str = "provider error (simulated)";
/// What the on-prem executor's local authority check says when it refuses a call.
const NOT_MASTER: &str = "refused: keepalived is not MASTER on this host";

impl World {
    pub(super) fn call(&mut self, node: usize, action: StampedAction) {
        let incarnation = self.nodes[node].incarnation;
        if self.refused_locally(node, &action) {
            // The executor's local authority check, right before the call: nothing reaches the
            // host's neighbour table.
            let call = PendingCall {
                land_at_ms: self.now_ms,
                node,
                incarnation,
                action,
                failure: Some(NOT_MASTER),
                heard: Heard::Result,
            };
            self.land_or_hold(call);
            return;
        }
        self.provider_calls += 1;
        let name = self.name(node);
        let cut_off = self.nodes[node].cut_off();
        if self.checker.before_provider_call(&name, &action, &self.head, cut_off) {
            self.stale_calls += 1;
        }

        let fail = self.rng.random_bool(self.chances.provider_fail);
        let mut latency_ms = if self.rng.random_bool(self.chances.provider_slow) {
            self.rng.random_range(200..3_000)
        } else {
            0
        };
        if action.verb == Verb::AssignSecondaryIp && !fail {
            if self.rng.random_bool(self.chances.azure_two_step) {
                // Azure: remove the ipConfig from the other NICs now, add it to ours later.
                let others: Vec<String> = self
                    .provider
                    .holdings()
                    .get(&action.address)
                    .map(|nics| nics.iter().filter(|n| **n != *action.nic).cloned().collect())
                    .unwrap_or_default();
                for nic in others {
                    self.provider.inject_loss(action.address, &nic);
                }
                latency_ms = latency_ms.max(self.rng.random_range(50..1_000));
            } else if self.rng.random_bool(self.chances.async_assign) {
                latency_ms = latency_ms.max(self.rng.random_range(50..1_500));
            }
        }
        let failure = fail.then_some(PROVIDER_ERROR);
        if latency_ms > CALL_DEADLINE_MS {
            // The agent gives the call up at its deadline, in doubt; the provider may still act.
            let given_up = self.now_ms + CALL_DEADLINE_MS;
            if failure.is_none() && self.rng.random_bool(IN_DOUBT_ACTED_CHANCE) {
                let late = self.now_ms + latency_ms;
                let effect = PendingCall {
                    land_at_ms: late,
                    node,
                    incarnation,
                    action: action.clone(),
                    failure: None,
                    heard: Heard::Nothing,
                };
                self.calls.push(effect);
            }
            let call = PendingCall {
                land_at_ms: given_up,
                node,
                incarnation,
                action,
                failure,
                heard: Heard::GivenUp,
            };
            self.calls.push(call);
            return;
        }
        let call = PendingCall {
            land_at_ms: self.now_ms + latency_ms,
            node,
            incarnation,
            action,
            failure,
            heard: Heard::Result,
        };
        if latency_ms == 0 {
            self.land_or_hold(call);
        } else {
            self.calls.push(call);
        }
    }

    /// After a follow: the calls in flight that the node's view now fences
    /// (`NodeDriver::poll_stale_calls`) are cancelled, as the agent aborts their tasks
    /// (`runner/stale.rs`): the call never lands (nor its deadline: a slow call is cancelled as
    /// any other; a late effect already on its way stays); it may have reached the provider
    /// first (it acts now); the node records it in doubt when the aborted task reports back,
    /// with the next landing of calls, not within this follow. (Reported here, the
    /// result's append — its stamp moves the log's time — would change the head between this
    /// follow, a head confirmation's, and the calls it authorises: the agent appends nothing
    /// there.)
    pub(super) fn cancel_stale_calls(&mut self, node: usize) {
        let incarnation = self.nodes[node].incarnation;
        // (The inventory read an outrun acquire asks for: the simulator reads inventories at random.)
        let (stale, _outran) = self.nodes[node].core.poll_stale_calls();
        for (_, stale) in stale {
            let Some(position) = self.calls.iter().position(|c| {
                c.node == node
                    && c.incarnation == incarnation
                    && matches!(c.heard, Heard::Result | Heard::GivenUp)
                    && c.action.idempotency_key() == stale.idempotency_key
            }) else {
                continue;
            };
            let call = self.calls.remove(position);
            self.calls_in_doubt += 1;
            if call.failure.is_none() && self.rng.random_bool(IN_DOUBT_ACTED_CHANCE) {
                self.take_effect(&call);
            }
            let heard = Heard::Cancelled(stale.reason);
            self.calls.push(PendingCall { land_at_ms: self.now_ms, failure: None, heard, ..call });
        }
    }

    /// The provider acts on a call whose result the node does not hear.
    fn take_effect(&mut self, call: &PendingCall) {
        let _ = self.provider.execute(&call.action);
        if call.action.verb == Verb::ProxyArpAdd && !self.nodes[call.node].frozen() {
            self.fail_closed(call.node);
        }
        self.check_provider(call.action.address);
    }

    /// The agent's `garpRefresh` (and keepalived's MASTER-again burst) after each execute pass:
    /// every held address's announcement that the core hands out
    /// (`AgentCore::poll_refreshes`, gated against the node's view at the head `proof`
    /// confirmed), checked as any call is against the true head — never
    /// stale at the head, never from a node cut off — and refused on its host while keepalived
    /// is not MASTER. Draws nothing from the seed.
    pub(super) fn refresh(&mut self, node: usize, proof: &HeadConfirmed) {
        let refreshes = self.nodes[node].core.poll_refreshes(proof, 0, |_, _| true, usize::MAX);
        let name = self.name(node);
        let cut_off = self.nodes[node].cut_off();
        for action in refreshes {
            if !self.refused_locally(node, &action) {
                if self.checker.before_provider_call(&name, &action, &self.head, cut_off) {
                    self.stale_calls += 1;
                }
                // An announcement changes no holding; the simulated provider counts it.
                let _ = self.provider.execute(&action);
            }
            self.nodes[node].driver_mut().handle_refresh_result(&action.provider, action.address);
        }
    }

    pub(super) fn land_due(&mut self, all: bool) {
        let now = self.now_ms;
        let mut due = Vec::new();
        let mut keep = Vec::new();
        for call in self.calls.drain(..) {
            if all || call.land_at_ms <= now { due.push(call) } else { keep.push(call) }
        }
        self.calls = keep;
        due.sort_by_key(|c| c.land_at_ms);
        for call in due {
            self.land(call);
        }
    }

    /// Lands a call that takes no time now, or, while an execute pass is being issued, once every
    /// call of the pass went out ([`World::land_issued`]): the agent spawns a pass's calls right
    /// after their gates and handles their results only later, so no result of the pass lands
    /// between a gate of the pass and one of its calls.
    fn land_or_hold(&mut self, call: PendingCall) {
        match &mut self.issuing {
            Some(held) => held.push(call),
            None => self.land(call),
        }
    }

    /// The pass went out (or the node froze in it): what it held lands, in the order it was
    /// called.
    pub(super) fn land_issued(&mut self) {
        for call in self.issuing.take().unwrap_or_default() {
            self.land(call);
        }
    }

    /// The call completes: its effect (unless it failed), the result to the node, and the
    /// `action-result` event to the log. A call given up at its deadline is reported in doubt
    /// (the provider did not act by then); the late effect of one reaches the provider only.
    pub(super) fn land(&mut self, call: PendingCall) {
        match call.heard {
            Heard::Nothing => return self.take_effect(&call),
            Heard::GivenUp => {
                if self.nodes[call.node].incarnation == call.incarnation {
                    self.calls_in_doubt += 1;
                    let detail = format!("no answer within its deadline ({CALL_DEADLINE_MS} ms)");
                    let outcome = CallOutcome::InDoubt { reason: &detail };
                    self.report(call.node, &call.action.idempotency_key(), outcome);
                }
                return;
            }
            Heard::Cancelled(reason) => {
                if self.nodes[call.node].incarnation == call.incarnation {
                    let detail = format!(
                        "cancelled in flight: the view fenced it ({reason}); the provider may have acted"
                    );
                    let outcome = CallOutcome::InDoubt { reason: &detail };
                    self.report(call.node, &call.action.idempotency_key(), outcome);
                }
                return;
            }
            Heard::Result => {}
        }
        if call.failure.is_none()
            && self.nodes[call.node].incarnation == call.incarnation
            && let Some(why) = checker::staleness(&call.action, self.nodes[call.node].driver().view())
        {
            let detail = format!(
                "{} landed after {}'s own view fenced it ({why})",
                call.action.idempotency_key(),
                self.name(call.node)
            );
            self.violation(ViolationKind::StaleCallLanded, detail);
        }
        let (outcome, detail) = match call.failure {
            Some(why) => (ActionOutcome::Failed, why.to_owned()),
            None => match self.provider.execute(&call.action) {
                Ok(detail) => (ActionOutcome::Executed, detail),
                Err(e) => (ActionOutcome::Failed, e.to_string()),
            },
        };
        let node = call.node;
        if call.failure.is_none() && call.action.verb == Verb::ProxyArpAdd && !self.nodes[node].frozen() {
            // If the host stopped being MASTER while the call was on its way, its agent handles
            // the transition after the call returns and withdraws what the call added.
            self.fail_closed(node);
        }
        self.check_provider(call.action.address);
        if self.nodes[node].incarnation != call.incarnation {
            return;
        }
        let key = call.action.idempotency_key();
        self.report(node, &key, CallOutcome::Result { outcome, detail });
    }

    /// Tells the node's core what became of a call (as the agent does), then appends what it reports:
    /// lost while cut off (the outbox of results reports it again later), late or twice as the
    /// seed draws. A result for an entry no longer in flight (a duplicate) is ignored by the
    /// engine, and nothing is appended.
    fn report(&mut self, node: usize, key: &str, outcome: CallOutcome<'_>) {
        if !self.nodes[node].core.handle_result(0, key, outcome).expect("a memory journal cannot fail") {
            return;
        }
        // A store that refused the log (it went back) appends nothing: the results stay in the
        // outbox, lost with the node's store at the operator's recovery. Nor does a loop stuck in
        // a store call, or one whose batch not heard to land waits for its retry: the results
        // wait in the outbox for the step's `Append` (`runner/appends.rs`).
        if !self.anchor_holds(node) || self.nodes[node].unappended.is_some() || self.stuck(node) {
            return;
        }
        let mut batch = Vec::new();
        while let Some(kind) = self.nodes[node].driver_mut().poll_append() {
            if self.nodes[node].cut_off() {
                continue;
            }
            let event = Event { at_ms: self.stamp(node), kind };
            let copies = if self.rng.random_bool(self.chances.result_duplicate) { 2 } else { 1 };
            for _ in 0..copies {
                if self.rng.random_bool(self.chances.result_delay) {
                    let at = self.now_ms + self.rng.random_range(50..2_000);
                    self.delay(at, event.clone());
                } else {
                    batch.push(event.clone());
                }
            }
        }
        // One batch, as the agent's: its answer may be lost too (`append-in-doubt`).
        self.send_batch(node, batch);
    }

    pub(super) fn check_provider(&mut self, address: IpAddr) {
        self.checker.after_provider_call(PROVIDER, &self.provider, address);
        if self.topology.provider.kind != ProviderKind::SimOnprem {
            return;
        }
        // Every host with a proxy entry for the address answers ARP for it.
        let Some(nics) = self.provider.holdings().get(&address) else { return };
        let answerers: Vec<Answerer<'_>> = nics
            .iter()
            .map(|nic| {
                let node = self.topology.nodes.iter().position(|n| n.nic == *nic);
                Answerer {
                    nic,
                    frozen: node.is_some_and(|n| self.nodes[n].frozen()),
                    vrrp_master: node.is_some_and(|n| self.vrrp_master == Some(n)),
                    cut_off: node.is_some_and(|n| self.nodes[n].cut_off()),
                }
            })
            .collect();
        self.checker.after_onprem_answer(address, &answerers, self.config.mode == Mode::Onprem);
    }

    /// After `node` reconciled at the head (connected, running): the on-prem addresses its NIC
    /// answers beside another NIC, that it captured, is not the desired holder of, and has no
    /// release open for — a split answer that outlasted the hand-over (see
    /// [`crate::checker::Checker::after_onprem_reconcile`]).
    pub(super) fn check_kept_entries(&mut self, node: usize) {
        if self.topology.provider.kind != ProviderKind::SimOnprem {
            return;
        }
        let nic = &self.topology.nodes[node].nic;
        let driver = self.nodes[node].driver();
        let view = driver.view();
        let Some(id) = view.node_id(&self.topology.nodes[node].name) else { return };
        let engine = driver.engine();
        let kept: Vec<(IpAddr, Vec<String>)> = self
            .provider
            .holdings()
            .iter()
            .filter(|(_, nics)| nics.len() > 1 && nics.contains(nic))
            .filter(|(address, _)| {
                engine.captured().contains_key(&(tenure_core::names::shared(PROVIDER), **address))
                    && view.desired_pool_of(id, PROVIDER, **address).is_none()
                    && !engine.entries().any(|e| {
                        // A release that failed and is retried is planned too: the node plans
                        // again within `RETRY_WITHOUT_BACKOFF_MS` (`NodeDriver::reconcile_due`).
                        // A stale failure is not (it is never retried).
                        e.action.address == **address
                            && e.action.verb == Verb::ProxyArpDel
                            && (e.state.is_open() || engine.next_attempt_ms(e).is_some())
                    })
            })
            .map(|(address, nics)| (*address, nics.iter().cloned().collect()))
            .collect();
        let name = self.name(node);
        self.checker.after_onprem_reconcile(&name, &kept);
    }

    pub(super) fn observe_inventory(&mut self, address: IpAddr, delayed: bool) {
        let holders: Vec<String> =
            self.provider.holdings().get(&address).map(|n| n.iter().cloned().collect()).unwrap_or_default();
        let event = Event {
            at_ms: self.now_ms,
            kind: EventKind::Inventory { provider: PROVIDER.into(), address, holders, scope: None },
        };
        if delayed {
            let at = self.now_ms + self.rng.random_range(50..1_500);
            if self.writer_holds() {
                self.delay(at, event);
            }
        } else if self.writer_holds() {
            // The inventory reader is an agent: its store's append checks the log too.
            self.append(event);
        }
    }
}
