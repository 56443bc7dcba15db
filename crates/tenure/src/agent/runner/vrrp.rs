//! keepalived's reports in the loop (`authority: vrrp`): each change of this host's VRRP state
//! becomes a `vrrp` event of every node the agent runs.

use tenure_core::log::EventKind;
use tenure_core::model::VrrpState;
use tracing::{info, warn};

use super::super::AgentStore;
use super::super::keepalived::VrrpReport;
use super::Agent;

impl<S: AgentStore> Agent<S> {
    /// Acts on one report of the keepalived follower. Returns whether anything was queued.
    pub(super) fn vrrp_report(&mut self, report: VrrpReport) -> bool {
        match report {
            VrrpReport::State(state) => self.vrrp_changed(state, "keepalived reported"),
            VrrpReport::Down(reason) => self.vrrp_changed(VrrpState::Fault, &reason),
            // What the agent's earlier run read last: it may not have reached the log. When it
            // did, "running" (next) keeps the log's state.
            VrrpReport::Remembered(state) => {
                if self.vrrp_state.is_none() && self.recorded_vrrp() != Some(state) {
                    self.vrrp_changed(
                        state,
                        "the last state this agent read from keepalived before it restarted",
                    )
                } else {
                    false
                }
            }
            // keepalived runs and said nothing since the last reader: at start, the state the
            // log recorded for this host (by this agent's earlier run) stands; later, the state
            // already known does.
            VrrpReport::Running => {
                if self.vrrp_state.is_none() {
                    let recorded = self.recorded_vrrp();
                    info!(recorded = ?recorded, "keepalived runs and reported no transition since the last reader: \
                        the state the log recorded for this host stands");
                    self.vrrp_state = recorded;
                }
                false
            }
        }
    }

    /// The VRRP state the log recorded for this agent's (first) node.
    fn recorded_vrrp(&self) -> Option<VrrpState> {
        let name = self.drivers.first().map(|d| d.name().to_owned()).unwrap_or_default();
        self.view().nodes().iter().find(|n| n.spec.name == name).and_then(|n| n.vrrp)
    }

    /// Queues a `vrrp` event of every node of this agent when `state` differs from the last one
    /// queued (an earlier one not appended yet is replaced: only the latest state matters).
    /// Returns whether anything was queued.
    pub(super) fn vrrp_changed(&mut self, state: VrrpState, why: &str) -> bool {
        if self.vrrp_state == Some(state) {
            return false;
        }
        if state == VrrpState::Master {
            info!(state = ?state, "{why}: this host is VRRP master");
        } else {
            warn!(state = ?state, "{why}: this host is not VRRP master; capturing nothing");
        }
        self.vrrp_state = Some(state);
        self.queued.retain(|e| !matches!(e, EventKind::Vrrp { .. }));
        for driver in &self.drivers {
            self.queued.push(EventKind::Vrrp { node: driver.name().to_owned(), state });
        }
        true
    }
}
