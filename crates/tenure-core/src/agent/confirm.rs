//! Calls only at a confirmed head (SPEC 6, SPEC 9): the agent core's half of the rule.
//!
//! The fence gate checks an action against the node's view; the view is as good as the head only
//! right after the shell confirmed the log head (a linearizable read) and followed to it. The
//! shell says so with the index its log held at the confirmed head ([`AgentCore::confirmed_at`]);
//! the core checks what it can see — every node applied the log at least that far — and hands
//! back a [`HeadConfirmed`] for this core and this step, which the core's gating
//! ([`AgentCore::poll_calls`]) and announcing ([`AgentCore::poll_refreshes`]) take. A step hands
//! its proof to the shell with its calls ([`StepOp::Call`](super::StepOp::Call)); a proof made
//! outside a step (a resume's zombie pass, the refresh timer) is made by the same check. The next
//! [`AgentCore::begin_step`] ends a proof, and a proof kept longer, or another core's, gates
//! nothing.
//!
//! What it does not do: the confirmation itself is the store's (`AgentStore::confirm_head`: etcd's
//! linearizable read and the wait for the watch's replica), and the core takes the shell's word
//! for the index; the driver's own `poll_actions` and `poll_refreshes` are the layer below (the
//! replay tool and tests call them directly), not the agent's path. And it says nothing of what
//! others append between the confirmation and the call (SPEC 9's read-to-call window, bounded by
//! `actionTimeout`: docs/safety.md).

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use super::AgentCore;
use crate::journal::JournalStore;
use crate::log_store::LogIndex;
use crate::model::StampedAction;

/// The core's word that every node followed the log to a head the shell confirmed, in the step
/// under way: what gating and announcing take. Made only by [`AgentCore::confirmed_at`]; not
/// `Clone`.
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub struct HeadConfirmed {
    /// The core that made it.
    core: u64,
    /// The step it was made in ([`AgentCore::begin_step`] counts them).
    step: u64,
}

/// The id of a new [`AgentCore`]: unique in the process.
pub(super) fn next_core_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl<J: JournalStore> AgentCore<J> {
    /// The shell confirmed the log head, and the log it follows held `head` then (its
    /// [`Log::head`](crate::log_store::Log::head), read after the confirmation and before the
    /// follow that came next; `None`: an empty log). The proof that calls may be gated now —
    /// `None` when a node has not applied that far (the shell did not follow to the head it
    /// confirmed: nothing is gated on a view behind it).
    pub fn confirmed_at(&self, head: Option<LogIndex>) -> Option<HeadConfirmed> {
        self.drivers
            .iter()
            .all(|driver| driver.applied_index() >= head)
            .then_some(HeadConfirmed { core: self.id, step: self.steps })
    }

    /// Whether `proof` was made by this core in the step under way (or, between steps, since the
    /// last began).
    fn stands(&self, proof: &HeadConfirmed) -> bool {
        self.failed.is_none() && proof.core == self.id && proof.step == self.steps
    }

    /// Gates up to `max` of node `index`'s ready actions against its view and returns them to
    /// call: none once the agent failed, none on a proof of an earlier step. `wall_ms`: this
    /// host's clock, for the actions' deadlines
    /// ([`NodeDriver::poll_actions`](crate::driver::NodeDriver::poll_actions)). A journal that
    /// fails here fails the agent ([`Self::fail`]) and gates nothing.
    pub fn poll_calls(
        &mut self,
        proof: &HeadConfirmed,
        index: usize,
        max: usize,
        wall_ms: Option<u64>,
    ) -> Vec<StampedAction> {
        if !self.stands(proof) {
            return Vec::new();
        }
        match self.drivers[index].poll_actions(max, wall_ms) {
            Ok(batch) => batch,
            Err(e) => {
                self.journal_failed(index, &e);
                Vec::new()
            }
        }
    }

    /// Up to `max` announcements of addresses node `index` holds that `wanted` accepts, each
    /// gated against its view ([`NodeDriver::poll_refreshes`](crate::driver::NodeDriver::poll_refreshes)):
    /// none once the agent failed, none on a proof of an earlier step.
    pub fn poll_refreshes(
        &mut self,
        proof: &HeadConfirmed,
        index: usize,
        wanted: impl Fn(&str, IpAddr) -> bool,
        max: usize,
    ) -> Vec<StampedAction> {
        if !self.stands(proof) {
            return Vec::new();
        }
        self.drivers[index].poll_refreshes(wanted, max)
    }
}
