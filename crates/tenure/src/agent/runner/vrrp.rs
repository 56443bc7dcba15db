//! keepalived's reports in the loop (`authority: vrrp`): each change of this host's VRRP state
//! becomes a `vrrp` event of every node the agent runs.

use std::time::Duration;

use tenure_core::log::EventKind;
use tenure_core::model::VrrpState;
use tokio::time::Instant;
use tracing::{info, warn};

use super::super::AgentStore;
use super::super::keepalived::VrrpReport;
use super::Agent;

/// How long a starting agent waits for the keepalived follower's first report (it reads the FIFO
/// without waiting, so it answers at once); past this, the host counts as not master.
pub const VRRP_FIRST_REPORT_MAX: Duration = Duration::from_secs(2);

impl<S: AgentStore> Agent<S> {
    /// At start, before the first step: takes the follower's reports up to its first "running"
    /// or "down" (after the states of the lines that waited), so that the state the log recorded
    /// for this host by an earlier run is never acted on unchecked. Nothing without a `vrrp`
    /// section.
    pub(super) async fn vrrp_settle(&mut self) {
        let Some(mut reports) = self.vrrp.take() else { return };
        let until = Instant::now() + VRRP_FIRST_REPORT_MAX;
        loop {
            let report = tokio::time::timeout_at(until, reports.recv()).await.ok().flatten();
            let report = report.unwrap_or_else(|| {
                VrrpReport::Down(format!(
                    "the keepalived follower said nothing within {VRRP_FIRST_REPORT_MAX:?}"
                ))
            });
            let settled = matches!(report, VrrpReport::Running | VrrpReport::Down(_));
            self.vrrp_report(report);
            if settled {
                break;
            }
        }
        self.vrrp = Some(reports);
        // Calls and the local withdrawal act from here on (unless the follower read a state
        // since, which is newer).
        if let Some(local) = &self.local {
            local.authority.settle(self.vrrp_state == Some(VrrpState::Master));
        }
    }

    /// One report from the loop (`None`: the follower stopped), and every report already waiting
    /// behind it, before a step: a step must not act on a MASTER that a BACKUP right behind it
    /// already took back. Returns whether anything was queued.
    pub(super) fn vrrp_received(&mut self, report: Option<VrrpReport>) -> bool {
        let Some(report) = report else {
            self.vrrp = None;
            if let Some(local) = &self.local {
                local.authority.set(false);
            }
            return self.vrrp_changed(VrrpState::Fault, "the keepalived follower stopped");
        };
        let mut queued = self.vrrp_report(report);
        while let Some(report) = self.vrrp.as_mut().and_then(|r| r.try_recv().ok()) {
            queued |= self.vrrp_report(report);
        }
        queued
    }

    /// Takes every report already waiting (the start, between attempts of its first heartbeats:
    /// the batch carries the newest state).
    pub(super) fn vrrp_drain(&mut self) {
        while let Some(report) = self.vrrp.as_mut().and_then(|r| r.try_recv().ok()) {
            self.vrrp_report(report);
        }
    }

    /// Acts on one report of the keepalived follower. Returns whether anything was queued.
    fn vrrp_report(&mut self, report: VrrpReport) -> bool {
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
        let name = self.core.drivers()[0].name().to_owned();
        self.view().nodes().iter().find(|n| n.spec.name == name).and_then(|n| n.vrrp)
    }

    /// Queues a `vrrp` event of every node of this agent when `state` differs from the last one
    /// queued (an earlier one not appended yet is replaced: only the latest state matters; a
    /// demotion collapsed away after the host withdrew its entries locally is still seen by the
    /// log through the withdrawal's own result, which re-captures: `federation/drift.rs`).
    /// Returns whether anything was queued.
    fn vrrp_changed(&mut self, state: VrrpState, why: &str) -> bool {
        if self.vrrp_state == Some(state) {
            return false;
        }
        if state == VrrpState::Master {
            info!(state = ?state, "{why}: this host is VRRP master");
        } else {
            warn!(state = ?state, "{why}: this host is not VRRP master; capturing nothing");
        }
        // MASTER again after anything else: the switches may have learned another router's MAC
        // meanwhile. One burst of the held addresses' announcements (`runner/refresh.rs`); a
        // demotion before it ran takes it back.
        self.refresh.burst = state == VrrpState::Master && self.vrrp_state.is_some();
        self.vrrp_state = Some(state);
        self.queued.retain(|e| !matches!(e, EventKind::Vrrp { .. }));
        for driver in self.core.drivers() {
            self.queued.push(EventKind::Vrrp { node: driver.name().to_owned(), state });
        }
        true
    }
}
