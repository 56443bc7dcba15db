//! The liveness phase: faults stop, and the fleet must converge within a bound.

use std::collections::BTreeSet;
use std::net::IpAddr;

use tenure_core::journal::EntryState;
use tenure_core::log::{Event, EventKind};

use super::{Chances, LIVENESS_ROUND_MS, World};
use crate::checker::{self, ViolationKind};
use crate::config::LIVENESS_ROUNDS_MAX;
use crate::topology::PROVIDER;

impl World {
    /// Faults stop: every node is healed and resumed; then rounds of heartbeats, approvals,
    /// reconciles, executions and inventory until the fleet converges or the bound is reached.
    pub(super) fn liveness(&mut self) -> Option<u32> {
        self.chances = Chances::default();
        if self.went_back {
            self.recover_fleet();
        }
        for node in 0..self.nodes.len() {
            self.nodes[node].driver_mut().heal();
            self.nodes[node].stuck_until_ms = 0;
            self.resume(node);
        }
        for round in 0..LIVENESS_ROUNDS_MAX {
            self.next_step();
            self.now_ms += LIVENESS_ROUND_MS;
            self.deliver_due();
            self.land_due(false);
            for node in 0..self.nodes.len() {
                self.report_vrrp(node);
                if !self.anchor_holds(node) {
                    continue;
                }
                let at_ms = self.stamp(node);
                self.append(Event { at_ms, kind: EventKind::Heartbeat { node: self.name(node) } });
            }
            self.approve_pending();
            for node in 0..self.nodes.len() {
                self.whole_step(node);
            }
            let addresses: Vec<IpAddr> =
                self.topology.pools.iter().flat_map(|p| p.addresses.iter().copied()).collect();
            for address in addresses {
                self.observe_inventory(address, false);
            }
            self.sample();
            if self.converged().is_ok() {
                return Some(round + 1);
            }
        }
        if let Err(why) = self.converged() {
            let detail = format!("{why}; {}", self.explain(&why));
            self.violation(ViolationKind::NoConvergence, detail);
        }
        None
    }

    /// What the head and every journal say about the address named in `why` (for failures).
    pub(super) fn explain(&self, why: &str) -> String {
        let Some((pool, rest)) = why.split_once('/') else { return String::new() };
        let Some(address) = rest.split(':').next().and_then(|a| a.parse::<IpAddr>().ok()) else {
            return String::new();
        };
        let mut out = String::new();
        if let Some(state) = self.head.address(pool, address) {
            out.push_str(&format!(
                "head: active={} desired={} owner={:?} holder={:?} oe={} ce={} confirmations={:?} observed={:?}",
                state.active,
                state.desired,
                state.owner.map(|o| self.head.node_name(o).to_owned()),
                state.line.desired_holder.map(|o| self.head.node_name(o).to_owned()),
                state.ownership_epoch,
                state.line.epoch,
                state.confirmations.iter().map(|c| (c.node, c.capture_epoch.get(), c.acquired, c.at_ms)).collect::<Vec<_>>(),
                self.head.observed_holders(PROVIDER, address),
            ));
        }
        for n in &self.nodes {
            let entries: Vec<String> = n
                .driver()
                .engine()
                .entries()
                .filter(|e| *e.action.pool == *pool && e.action.address == address)
                .map(|e| format!("{}@{}:{:?}", e.action.verb, e.action.capture_epoch, e.state))
                .collect();
            if !entries.is_empty() {
                out.push_str(&format!(" | {} [{}]", n.driver().engine().name(), entries.join(" ")));
            }
        }
        out
    }

    /// The operator approves every action waiting for approval that the head has not approved —
    /// one already stale too (its approval reaches the log; the gate must refuse the action).
    /// Each is asked of the agent that runs its node first, as `tenure approve` asks
    /// (`AgentCore::check_submit`): refusing one that is current and not approved in that
    /// agent's view is an `approval-refused` violation.
    pub(super) fn approve_pending(&mut self) {
        let mut keys = BTreeSet::new();
        let mut refused = Vec::new();
        for n in &self.nodes {
            for entry in n.driver().engine().entries().filter(|e| e.state == EntryState::Pending) {
                let key = &entry.action.idempotency_key();
                if self.head.is_approved(key) {
                    continue;
                }
                let approve = EventKind::Approve { idempotency_key: key.to_string() };
                // Judged by the agent's own view, as its check is: one that lags may still hold
                // an approval the head has since let go (bounded approvals, SPEC 13).
                let view = n.driver().view();
                if let Err(why) = n.core.check_submit(&approve)
                    && !view.is_approved(key)
                    && checker::staleness(&entry.action, view).is_none()
                {
                    refused.push(format!("{key}: {why}"));
                }
                keys.insert(key.to_string());
            }
        }
        for detail in refused {
            self.violation(ViolationKind::ApprovalRefused, detail);
        }
        for key in keys {
            self.append(Event { at_ms: self.now_ms, kind: EventKind::Approve { idempotency_key: key } });
        }
    }

    /// Converged: nothing in flight; every address held exactly by its arbitrated, desired
    /// owner's NIC and by nothing else; no open journal entry is stale.
    pub(super) fn converged(&self) -> Result<(), String> {
        if !self.calls.is_empty() || !self.delayed.is_empty() {
            return Err(format!(
                "{} calls and {} events still in flight",
                self.calls.len(),
                self.delayed.len()
            ));
        }
        if !self.appends.settled() || self.nodes.iter().any(|n| n.unappended.is_some()) {
            return Err("a step's batch is still on its way to the log".to_owned());
        }
        for (pool_index, range) in self.topology.pools.iter().map(|p| &p.addresses).enumerate() {
            let pool_name = &self.topology.pools[pool_index].name;
            for address in range {
                // The pool that lists the address now (`pool-move` moves addresses between
                // pools): its owner's NIC, if it is desired.
                let expected: Vec<String> = self
                    .head
                    .pools()
                    .values()
                    .filter(|p| !p.deleted && p.spec.addresses.contains(address))
                    .find_map(|p| p.addresses.get(address))
                    .filter(|a| a.active && a.desired)
                    .and_then(|a| a.owner)
                    .map(|owner| vec![self.head.nodes()[owner as usize].spec.nic.clone()])
                    .unwrap_or_default();
                let held: Vec<String> = self
                    .provider
                    .holdings()
                    .get(address)
                    .map(|n| n.iter().cloned().collect())
                    .unwrap_or_default();
                if held != expected {
                    return Err(format!("{pool_name}/{address}: held by {held:?}, expected {expected:?}"));
                }
            }
        }
        for n in &self.nodes {
            for entry in n.driver().engine().entries().filter(|e| e.state.is_open()) {
                if checker::staleness(&entry.action, &self.head).is_some() {
                    return Err(format!(
                        "{}: stale open entry {}",
                        n.driver().engine().name(),
                        entry.action.idempotency_key()
                    ));
                }
            }
        }
        Ok(())
    }
}
