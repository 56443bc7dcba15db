//! The order of an agent's step, once (quinn-proto style): [`AgentCore::begin_step`], then
//! [`AgentCore::poll_step`] until it answers `None`, each [`StepOp`] done by the shell and, where
//! it asks, answered ([`AgentCore::followed`], [`AgentCore::head_confirmed`]). The daemon's loop
//! runs a step's operations one after the other; the simulator runs the same operations with the
//! world moving between them (other nodes appending, calls landing, faults).
//!
//! A step: append what is queued (the results the last calls reported) · the local withdrawal, if
//! due · follow the log · plan (a slice per due node, then promotion) · append what planning
//! reported · follow again (what those appends and others' changed) · the local withdrawal, if due
//! (the addresses under VRRP authority as the view now has them, before any add starts) · confirm
//! the head, when calls wait for it or a failing confirmation is to be cleared · gate and call.
//! A follow that fails, or a head that cannot be confirmed, ends the step there: nothing is called
//! on a view the agent cannot stand behind.

use super::{AgentCore, HeadConfirmed, HeadWanted, Planned};
use crate::journal::JournalStore;

/// One operation of a step, for the shell to do.
#[derive(Debug)]
pub enum StepOp {
    /// Append what is queued and every node's outbox ([`crate::driver::NodeDriver::poll_append`]).
    Append,
    /// The local withdrawal's round, on an on-prem host keepalived demoted, while a node still
    /// records a capture of an address under VRRP authority with no call in flight
    /// ([`AgentCore::captured_without_call`]); nothing elsewhere.
    Withdraw,
    /// Follow the log with every node (the replica the store keeps: it may be behind the head),
    /// cancel the calls the views now fence ([`AgentCore::poll_stale_calls`]); then
    /// [`AgentCore::followed`].
    Follow,
    /// What each node's planning did ([`AgentCore::plan`]), for the shell to log and check.
    Planned(Vec<(usize, Planned)>),
    /// Confirm the log head (a linearizable read) and follow to it; then
    /// [`AgentCore::head_confirmed`] with the proof of [`AgentCore::confirmed_at`].
    ConfirmHead(HeadWanted),
    /// Gate and call the nodes' ready actions ([`AgentCore::poll_calls`]) as far as the shell has
    /// room, with the step's proof of a confirmed head: `None` when the step confirmed none
    /// (nothing was ready to call), and then nothing is gated.
    Call(Option<HeadConfirmed>),
}

/// How a step runs.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    /// The most addresses of each walk a node plans in this step ([`AgentCore::plan`]).
    pub slice: usize,
    /// Whether the step may end in calls: `false` when the agent is shutting down (it follows
    /// and plans, and calls nothing new).
    pub calls: bool,
    /// Whether the head confirmation of the last step failed (then it is asked again to clear
    /// it, even with nothing to call).
    pub head_failing: bool,
}

/// Where a step is.
#[derive(Debug)]
pub(super) struct StepState {
    step: Step,
    next: Phase,
    /// The head confirmation's proof, for the step's calls.
    confirmed: Option<HeadConfirmed>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Append,
    Withdraw,
    Follow,
    /// Waiting for [`AgentCore::followed`]; then the phase after.
    Following(After),
    Plan,
    AppendPlanned,
    FollowAgain,
    WithdrawAgain,
    Head,
    /// Waiting for [`AgentCore::head_confirmed`].
    Confirming(HeadWanted),
    Call,
    /// The calls were handed to the shell: the next poll ends the step.
    Done,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    Plan,
    WithdrawAgain,
}

impl<J: JournalStore> AgentCore<J> {
    /// Begins a step (one under way is abandoned: the shell begins a step only once the last
    /// answered `None`).
    /// A proof of a confirmed head made before ([`HeadConfirmed`]) gates nothing from now on.
    pub fn begin_step(&mut self, step: Step) {
        self.steps += 1;
        self.step = Some(StepState { step, next: Phase::Append, confirmed: None });
        self.sync_at_end = true;
    }

    /// Ends the step under way, if any, where it is (the agent restarted: a new process begins
    /// with no step under way).
    pub fn abandon_step(&mut self) {
        self.step = None;
        self.sync_at_end = false;
    }

    /// Whether a step is under way (begun, and not yet answered `None`).
    #[must_use]
    pub fn step_under_way(&self) -> bool {
        self.step.is_some()
    }

    /// The step's next operation; `None`: the step is over. When the last operation asked for an
    /// answer ([`StepOp::Follow`], [`StepOp::ConfirmHead`]) that was not given — a shell's bug —
    /// the step ends there, calling nothing (and a debug build panics).
    ///
    /// However it ends, a step ends with one sync of every node's journal
    /// ([`JournalStore::sync`]), before `None` is answered: planning commits without syncing
    /// (the gate syncs before any call leaves), so a step's changes are durable when it ends —
    /// one fsync a step where a plan and a gate took two. A journal that cannot sync stops the
    /// agent acting ([`AgentCore::journal_failed`]).
    pub fn poll_step(&mut self) -> Option<StepOp> {
        let op = self.next_op();
        if op.is_none() && std::mem::take(&mut self.sync_at_end) {
            self.sync_journals();
        }
        op
    }

    /// Syncs every node's journal (a store that groups commits syncs once for all).
    fn sync_journals(&mut self) {
        for index in 0..self.drivers.len() {
            if let Err(error) = self.drivers[index].engine_mut().store_mut().sync() {
                self.journal_failed(index, &error);
                return;
            }
        }
    }

    fn next_op(&mut self) -> Option<StepOp> {
        // A phase with nothing to do (no plan reported, no head to confirm) goes on to the next.
        loop {
            let state = self.step.as_mut()?;
            let step = state.step;
            let (op, next) = match state.next {
                Phase::Append => (Some(StepOp::Append), Phase::Withdraw),
                Phase::Withdraw => (Some(StepOp::Withdraw), Phase::Follow),
                Phase::Follow => (Some(StepOp::Follow), Phase::Following(After::Plan)),
                Phase::Following(_) | Phase::Confirming(_) => {
                    self.unanswered("a step's follow or head confirmation was not answered");
                    return None;
                }
                Phase::Plan => {
                    let planned = self.plan(step.slice);
                    let op = (!planned.is_empty()).then_some(StepOp::Planned(planned));
                    (op, Phase::AppendPlanned)
                }
                Phase::AppendPlanned => (Some(StepOp::Append), Phase::FollowAgain),
                Phase::FollowAgain => (Some(StepOp::Follow), Phase::Following(After::WithdrawAgain)),
                Phase::WithdrawAgain if !step.calls => {
                    self.step = None;
                    return None;
                }
                Phase::WithdrawAgain => (Some(StepOp::Withdraw), Phase::Head),
                Phase::Head => match self.head_wanted(step.head_failing) {
                    Some(why) => (Some(StepOp::ConfirmHead(why)), Phase::Confirming(why)),
                    None => (None, Phase::Call),
                },
                Phase::Call => {
                    let confirmed = self.step.as_mut().and_then(|state| state.confirmed.take());
                    (self.failed.is_none().then_some(StepOp::Call(confirmed)), Phase::Done)
                }
                Phase::Done => {
                    self.step = None;
                    return None;
                }
            };
            self.step.as_mut().expect("a step under way").next = next;
            if op.is_some() {
                return op;
            }
        }
    }

    /// A shell's bug: an answer missing, or given where none was asked. The step ends there,
    /// calling nothing; a debug build panics.
    fn unanswered(&mut self, what: &str) {
        self.step = None;
        if cfg!(debug_assertions) {
            panic!("{what}");
        }
    }

    /// The answer to [`StepOp::Follow`]: whether every node followed the log. A follow that
    /// failed ends the step.
    pub fn followed(&mut self, ok: bool) {
        let Some(state) = self.step.as_mut() else { return };
        let Phase::Following(after) = state.next else {
            return self.unanswered("`followed` answers a step's follow");
        };
        if !ok {
            self.step = None;
            return;
        }
        state.next = match after {
            After::Plan => Phase::Plan,
            After::WithdrawAgain => Phase::WithdrawAgain,
        };
    }

    /// The answer to [`StepOp::ConfirmHead`]: the proof that the head was confirmed and every
    /// node followed to it ([`AgentCore::confirmed_at`]), or `None`. Unconfirmed, the step ends:
    /// nothing is called (also after a confirmation asked only to clear a failing one: nothing
    /// was ready then, and nothing is gated on a view the agent could not stand behind).
    pub fn head_confirmed(&mut self, proof: Option<HeadConfirmed>) {
        let Some(state) = self.step.as_mut() else { return };
        let Phase::Confirming(_) = state.next else {
            return self.unanswered("`head_confirmed` answers a step's head confirmation");
        };
        let Some(proof) = proof else {
            self.step = None;
            return;
        };
        state.confirmed = Some(proof);
        state.next = Phase::Call;
    }
}
