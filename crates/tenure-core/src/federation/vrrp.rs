//! `vrrp{node, state}` under `authority: vrrp`: a newer MASTER report ends the older one's
//! (issue 24; `docs/decisions.md`, "A newer MASTER report ends the older one's").
//!
//! keepalived elects one master per VRRP instance and every router reports its own transitions.
//! When router B reports MASTER, keepalived has already taken mastership from whichever router
//! held it: a killed router A never reports BACKUP, so SPEC 3's "latest state is master" alone
//! keeps A eligible until its heartbeat expires (failover in max(master-down interval,
//! `heartbeatTTL`)). Here B's MASTER **supersedes** every other member's MASTER in the pools
//! under `authority: vrrp` that B is in: they count as BACKUP until they report MASTER again.
//! Two routers that both say MASTER (a VRRP split) resolve by log order: one answers.
//!
//! The rule only takes eligibility away, so it cannot add an answerer; its risk is liveness: a
//! router that stays MASTER through another's brief mastership (a split healed in its favour)
//! reports no transition. [`Federation::vrrp_reassert_due`] is that router's agent's cue to say
//! MASTER again: it is due only while no other member counted as master is alive, so two masters
//! never take turns superseding each other.

use super::{Federation, NodeId};
use crate::eligibility::{is_alive, is_vrrp_master};
use crate::model::{Authority, VrrpState};

impl Federation {
    /// Records `node`'s report; a MASTER supersedes the MASTER of every other member of the
    /// applied pools under `authority: vrrp` that list `node`.
    pub(super) fn apply_vrrp(&mut self, node: &str, state: VrrpState) {
        let id = self.node_ids[node];
        if state == VrrpState::Master {
            for peer in self.vrrp_peers(id) {
                let peer = &mut self.nodes[peer];
                if peer.vrrp == Some(VrrpState::Master) {
                    peer.vrrp_superseded = true;
                }
            }
        }
        let reporter = &mut self.nodes[id];
        reporter.vrrp = Some(state);
        reporter.vrrp_superseded = false;
    }

    /// Whether `node`'s agent should report MASTER again although its keepalived's state did not
    /// change: the log says its MASTER was superseded, and no other member of its pools under
    /// `authority: vrrp` is counted as master and alive (the router that superseded it stepped
    /// down, or died). An agent whose keepalived says MASTER appends `vrrp{master}` when this
    /// holds; `false` for a node the log does not know.
    #[must_use]
    pub fn vrrp_reassert_due(&self, node: &str) -> bool {
        let Some(&id) = self.node_ids.get(node) else { return false };
        let me = &self.nodes[id];
        if me.vrrp != Some(VrrpState::Master) || !me.vrrp_superseded {
            return false;
        }
        let now_ms = self.stream_time_ms;
        !self.vrrp_pools(id).any(|pool| {
            pool.member_ids.iter().any(|&peer| {
                peer != id
                    && is_vrrp_master(&self.nodes[peer])
                    && is_alive(&self.nodes[peer], &pool.spec, now_ms)
            })
        })
    }

    /// The applied pools under `authority: vrrp` that list node `id`.
    fn vrrp_pools(&self, id: NodeId) -> impl Iterator<Item = &super::PoolState> {
        self.pools.values().filter(move |pool| {
            !pool.deleted && pool.spec.authority == Authority::Vrrp && pool.member_ids.contains(&id)
        })
    }

    /// The other members of the pools [`Federation::vrrp_pools`] names, each once, in id order.
    fn vrrp_peers(&self, id: NodeId) -> Vec<NodeId> {
        let mut peers: Vec<NodeId> = self
            .vrrp_pools(id)
            .flat_map(|pool| pool.member_ids.iter().copied())
            .filter(|&peer| peer != id)
            .collect();
        peers.sort_unstable();
        peers.dedup();
        peers
    }
}

#[cfg(test)]
mod tests;
