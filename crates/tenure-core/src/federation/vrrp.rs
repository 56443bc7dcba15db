//! `vrrp{node, state}`: the log records each node's latest report and, for a MASTER, where the log
//! took it, so that among a pool's members that say MASTER the newest report counts
//! ([`crate::eligibility::vrrp_floor`]; issue 24, `docs/decisions.md`, "The newest MASTER report
//! counts").

use super::Federation;
use crate::model::VrrpState;
use crate::state::MasterReport;

impl Federation {
    /// Records `node`'s report: its state, and for a MASTER the log order (this event's
    /// `events_applied`, already counted) and stream time it was taken at.
    pub(super) fn apply_vrrp(&mut self, node: &str, state: VrrpState) {
        let report = MasterReport { seq: self.events_applied, taken_ms: self.stream_time_ms };
        let reporter = self.node_mut(node);
        reporter.vrrp = Some(state);
        reporter.vrrp_master = (state == VrrpState::Master).then_some(report);
    }

    /// Before a heartbeat of `node` is applied: if the node has a MASTER report and this
    /// heartbeat finds it expired ([`Federation::node_alive`] at the stream time that took it),
    /// records the revival, so that the report from before it sets no pool's floor.
    pub(super) fn note_revival(&mut self, node: &str) {
        let id = self.node_ids[node];
        if self.nodes[id as usize].vrrp_master.is_some() && self.node_alive(id) == Some(false) {
            self.nodes[id as usize].revived_seq = self.events_applied;
        }
    }

    /// Before an `undrain` or a healthy `health` of `node` is applied: a node with a MASTER
    /// report that was drained or unhealthy comes back like a revived one — its report from
    /// before sets no pool's floor, so an undrain takes addresses only as others fail (with
    /// `preempt: false`), as it does without VRRP.
    pub(super) fn note_return(&mut self, node: &str) {
        let id = self.node_ids[node];
        let state = &mut self.nodes[id as usize];
        if state.vrrp_master.is_some() && (state.drained || !state.healthy) {
            state.revived_seq = self.events_applied;
        }
    }
}

#[cfg(test)]
mod tests;
