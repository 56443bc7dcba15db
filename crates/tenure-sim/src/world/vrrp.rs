//! The keepalived side of an on-prem host, and what its tenure agent does about it (issue 10):
//! one VRRP master on the LAN; each agent reports its own keepalived's state to the log when it
//! can write; with VRRP authority it withdraws its proxy entries on leaving MASTER and refuses to
//! add them while not MASTER. A frozen agent does neither (docs/simulation.md).

use std::collections::BTreeSet;
use std::net::IpAddr;

use tenure_core::log::{Event, EventKind};
use tenure_core::model::{StampedAction, VrrpState};

use super::World;
use crate::config::Mode;
use crate::topology::PROVIDER;

impl World {
    /// keepalived moves mastership to `master`. With VRRP authority, the old master's agent
    /// withdraws its proxy entries at once (a local fail-closed step, like keepalived dropping a
    /// VIP) — unless it is frozen. Every agent that can write reports its new state to the log.
    pub(super) fn set_vrrp_master(&mut self, master: usize) {
        let previous = self.vrrp_master.replace(master);
        if let Some(old) = previous.filter(|old| *old != master)
            && self.honours_vrrp_locally()
            && !self.nodes[old].frozen()
        {
            self.withdraw(old);
        }
        for node in 0..self.nodes.len() {
            self.report_vrrp(node);
        }
    }

    /// Whether the agents honour VRRP authority on their own host (`onprem`): withdraw on a
    /// transition away from MASTER, refuse `proxy-arp-add`/`garp` while not MASTER. The agents of
    /// `onprem-no-authority` ignore keepalived.
    pub(super) fn honours_vrrp_locally(&self) -> bool {
        self.config.mode == Mode::Onprem
    }

    /// What `node`'s own keepalived says.
    pub(super) fn local_vrrp(&self, node: usize) -> VrrpState {
        if self.vrrp_master == Some(node) { VrrpState::Master } else { VrrpState::Backup }
    }

    /// `node`'s agent appends its keepalived state to the log if it changed since its last
    /// report and the agent can write (not paused, not cut off). Its loop appends it: not while
    /// the loop is stuck in a slow store call, nor while a batch it did not hear land waits for
    /// its retry (the withdrawal on a demotion is a task of its own, [`World::withdraw`]).
    pub(super) fn report_vrrp(&mut self, node: usize) {
        let n = &self.nodes[node];
        if self.vrrp_master.is_none() || n.frozen() || n.cut_off() || n.refused.is_some() {
            return;
        }
        if n.unappended.is_some() || self.stuck(node) {
            return;
        }
        let state = self.local_vrrp(node);
        if n.vrrp_reported == Some(state) || !self.anchor_holds(node) {
            return;
        }
        self.nodes[node].vrrp_reported = Some(state);
        let at_ms = self.stamp(node);
        self.append(Event { at_ms, kind: EventKind::Vrrp { node: self.name(node), state } });
    }

    /// With VRRP authority, `node`'s agent withdraws its proxy entries unless its keepalived is
    /// MASTER: what it does when it acts again after missing a transition.
    pub(super) fn fail_closed(&mut self, node: usize) {
        if self.honours_vrrp_locally() && self.local_vrrp(node) != VrrpState::Master {
            self.withdraw(node);
        }
    }

    /// `node`'s agent removes every proxy entry of its host (local, needs no log) and journals
    /// each capture it had as an executed release, reported to the log with its next results —
    /// what the runtime does (`NodeDriver::record_local_release`; a capture whose call is in
    /// flight is withdrawn again once that call lands).
    pub(super) fn withdraw(&mut self, node: usize) {
        let nic = self.topology.nodes[node].nic.clone();
        self.provider.remove_nic(&nic);
        // As the agent records its withdrawal task's report (`AgentCore::record_withdrawal`): the
        // addresses asked are every pool's (all under VRRP authority here).
        let asked: BTreeSet<IpAddr> =
            self.topology.pools.iter().flat_map(|p| p.addresses.iter().copied()).collect();
        self.nodes[node].core.record_withdrawal(PROVIDER, &asked);
        assert!(self.nodes[node].core.failed().is_none(), "a memory journal cannot fail");
    }

    /// Whether `node`'s executor refuses `action` on its own authority: with VRRP authority,
    /// `proxy-arp-add` and `garp` only while the host's keepalived is MASTER.
    pub(super) fn refused_locally(&self, node: usize, action: &StampedAction) -> bool {
        self.honours_vrrp_locally()
            && action.verb.needs_vrrp_master()
            && self.local_vrrp(node) != VrrpState::Master
    }
}
