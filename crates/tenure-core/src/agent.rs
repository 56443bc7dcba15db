//! The agent's core: the rules of an agent's step that the daemon (`tenure agent`) and the
//! simulator both run, sans-IO (docs/architecture.md, "One agent core").
//!
//! An agent runs one or more nodes. [`AgentCore`] owns their drivers and what decides, at each
//! step, what they do: which nodes plan and how much ([`AgentCore::plan`]: a due node plans a
//! slice, a node frozen by the test hook plans whole and then freezes), when what the view shows
//! approved is promoted, when the journal's failure stops all planning and calling for good
//! ([`AgentCore::fail`]), whether a head confirmation must come first
//! ([`AgentCore::head_wanted`]) and that it was made ([`HeadConfirmed`]), which calls a batch
//! gates ([`AgentCore::poll_calls`], only at a confirmed head) and which
//! calls in flight the view now fences ([`AgentCore::poll_stale_calls`]), and what an operator
//! may append ([`AgentCore::check_submit`]). The shell (the agent's
//! tokio loop, or the simulator's world) reads the log, confirms the head, makes the calls and
//! logs what the core reports; the simulator draws the sizes the agent takes from its settings.
//!
//! [`clock`] is the clock-lead rule every stamp of an agent follows (the daemon's loop and
//! heartbeat thread, and each simulated node).

mod approve;
pub mod clock;
mod confirm;
mod step;
mod submit;

pub use confirm::HeadConfirmed;
pub use step::{Step, StepOp};
pub use submit::{SubmitRefusal, check_submit};

use std::collections::BTreeSet;

use crate::driver::{Blocked, NodeDriver, OutranAcquire, Requeued};
use crate::journal::JournalStore;
use crate::node::{NodeError, StaleCall};

/// What [`AgentCore::plan`] did for one node, for the shell to log.
#[derive(Debug)]
pub enum Planned {
    /// The node planned a slice (or the whole map): `report.done` says whether a pass ended.
    Planned(Requeued),
    /// The node may not plan now (paused, partitioned).
    Blocked(Blocked),
    /// The node's journal failed: nothing is planned or called any more ([`AgentCore::failed`]
    /// says why).
    Failed,
    /// The node was frozen after its plan, as the test hook asked
    /// ([`AgentCore::freeze_after_plan`]).
    Frozen,
}

/// Why the shell should confirm the log head before going on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadWanted {
    /// A node has actions ready: they are gated only against a confirmed head.
    BeforeCalls,
    /// Nothing to call, but the last confirmation failed: confirming again clears the agent's
    /// fail-closed health once the log answers (a quiet agent reads nothing otherwise).
    ToClear,
}

/// Why an agent stops when its node left the registry: the log retired it (`tenure node retire`)
/// while this agent ran it. It acts for the node no more; a restart registers the node again.
#[must_use]
pub fn retired_reason(node: &str) -> String {
    format!(
        "node `{node}` was retired from the fleet (`node-retired` in the log) while this agent ran it: it \
         plans, calls and heartbeats no more; stop this agent (a restart registers the node again)"
    )
}

/// The core of one agent: its nodes' drivers and the rules of its step.
#[derive(Debug)]
pub struct AgentCore<J: JournalStore> {
    drivers: Vec<NodeDriver<J>>,
    /// Why the agent may not plan or call any more (a journal that failed to commit, a log that
    /// went back, a heartbeat thread that died): sticky, until the agent is restarted.
    failed: Option<String>,
    /// Nodes to freeze right after their next plan (a test hook).
    freeze_after_plan: BTreeSet<usize>,
    /// The step under way, if one is ([`Self::begin_step`]).
    step: Option<step::StepState>,
    /// How many steps began: a [`HeadConfirmed`] is good only in the step it was made in.
    steps: u64,
    /// A step began and its end has not synced the journals yet ([`Self::poll_step`]): set by
    /// [`Self::begin_step`], whatever way the step then ends.
    sync_at_end: bool,
    /// This core, among the cores of a process (the simulator runs one per node): a
    /// [`HeadConfirmed`] is good only for the core that made it.
    id: u64,
}

impl<J: JournalStore> AgentCore<J> {
    /// The core of an agent running `drivers` (at least one).
    ///
    /// # Panics
    ///
    /// When `drivers` is empty: an agent runs at least one node.
    #[must_use]
    pub fn new(drivers: Vec<NodeDriver<J>>) -> Self {
        assert!(!drivers.is_empty(), "an agent runs at least one node");
        Self {
            drivers,
            failed: None,
            freeze_after_plan: BTreeSet::new(),
            step: None,
            steps: 0,
            sync_at_end: false,
            id: confirm::next_core_id(),
        }
    }

    /// The nodes' drivers, in the agent's order.
    #[must_use]
    pub fn drivers(&self) -> &[NodeDriver<J>] {
        &self.drivers
    }

    /// The nodes' drivers, to follow the log, record results and report to it.
    pub fn drivers_mut(&mut self) -> &mut [NodeDriver<J>] {
        &mut self.drivers
    }

    /// Why the agent does not plan or call any more, if it does not.
    #[must_use]
    pub fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// The agent stops planning and calling for good, for `reason` (the first reason stays).
    /// `true` when this is the first.
    pub fn fail(&mut self, reason: String) -> bool {
        let first = self.failed.is_none();
        self.failed.get_or_insert(reason);
        first
    }

    /// Node `index`'s journal failed with `error`: [`Self::fail`] with the node named. Returns
    /// the reason, for the shell to log.
    pub fn journal_failed<E: std::fmt::Display>(&mut self, index: usize, error: &E) -> String {
        let reason = format!("node `{}`: journal: {error}", self.drivers[index].name());
        self.fail(reason.clone());
        reason
    }

    /// Begins a requeue pass on every node that has none under way (the requeue interval came
    /// round); [`Self::plan`] takes its slices.
    pub fn begin_requeue(&mut self) {
        for driver in &mut self.drivers {
            driver.begin_requeue();
        }
    }

    /// Whether planning is left for the shell to come back for at once: a node has a pass under
    /// way or positions to plan, and the agent has not failed (then nothing is planned).
    #[must_use]
    pub fn planning_left(&self) -> bool {
        self.failed.is_none() && self.drivers.iter().any(NodeDriver::requeue_under_way)
    }

    /// Whether a node has a requeue pass under way: the requeue interval runs from its end.
    #[must_use]
    pub fn pass_under_way(&self) -> bool {
        self.drivers.iter().any(NodeDriver::pass_under_way)
    }

    /// Node `index` plans whole at its next [`Self::plan`], then freezes (a test hook: what it
    /// then keeps is its plan).
    pub fn freeze_after_plan(&mut self, index: usize) {
        self.freeze_after_plan.insert(index);
    }

    /// One step's planning. A node plans when its view changed what it plans from, a failed
    /// action's backoff ended, or a requeue pass is under way ([`NodeDriver::step_due`]), one
    /// slice of at most `slice` addresses of each walk ([`NodeDriver::requeue`]) — never the
    /// whole map in one step. Then what its view shows approved is promoted: at the end of a
    /// pass, and when the view moved since the last promotion while entries are pending (an
    /// approval is not held up by a long pass). A failed journal plans nothing more.
    pub fn plan(&mut self, slice: usize) -> Vec<(usize, Planned)> {
        let mut planned = Vec::new();
        for index in 0..self.drivers.len() {
            if self.failed.is_some() {
                break;
            }
            let whole = self.freeze_after_plan.contains(&index);
            let driver = &mut self.drivers[index];
            if !whole && !driver.step_due() {
                continue;
            }
            let reconciled = if whole {
                driver.reconcile().map(|r| r.map(|report| Requeued { report, done: true }))
            } else {
                driver.requeue(slice)
            };
            let done = match reconciled {
                Ok(Ok(requeued)) => {
                    let done = requeued.done;
                    planned.push((index, Planned::Planned(requeued)));
                    done
                }
                Ok(Err(blocked)) => {
                    planned.push((index, Planned::Blocked(blocked)));
                    false
                }
                Err(NodeError::UnknownNode(node)) => {
                    self.fail(retired_reason(&node));
                    planned.push((index, Planned::Failed));
                    false
                }
                Err(e) => {
                    self.journal_failed(index, &e);
                    planned.push((index, Planned::Failed));
                    false
                }
            };
            let promote = self.failed.is_none() && (done || self.drivers[index].promotion_due());
            if promote && let Err(e) = self.drivers[index].start_execution() {
                self.journal_failed(index, &e);
                planned.push((index, Planned::Failed));
            }
        }
        for index in std::mem::take(&mut self.freeze_after_plan) {
            self.drivers[index].pause();
            planned.push((index, Planned::Frozen));
        }
        planned
    }

    /// Whether the shell must confirm the log head now, and why; `None`: it need not (nothing to
    /// call and no failing confirmation to clear, or the agent failed: it calls nothing more).
    #[must_use]
    pub fn head_wanted(&self, head_failing: bool) -> Option<HeadWanted> {
        if self.failed.is_some() {
            None
        } else if self.drivers.iter().any(NodeDriver::has_ready_actions) {
            Some(HeadWanted::BeforeCalls)
        } else if head_failing {
            Some(HeadWanted::ToClear)
        } else {
            None
        }
    }

    /// After every follow: the calls in flight that each node's view now fences, by node index
    /// (the shell cancels them and records each as in doubt unless it finished first), and the
    /// executed acquires that may have outrun a hand-over (the shell reads their provider's
    /// inventory at once).
    pub fn poll_stale_calls(&mut self) -> (Vec<(usize, StaleCall)>, Vec<OutranAcquire>) {
        let mut stale = Vec::new();
        let mut outran = Vec::new();
        for (index, driver) in self.drivers.iter_mut().enumerate() {
            stale.extend(driver.poll_stale_calls().into_iter().map(|call| (index, call)));
            while let Some(acquire) = driver.poll_outran_acquire() {
                outran.push(acquire);
            }
        }
        (stale, outran)
    }

    /// Records node `index`'s `outcome` of the call of `key` (a result, or in doubt), failing the
    /// agent when the journal cannot record it. `Ok(false)`: the call was no longer in flight
    /// (its result was recorded already, or it went stale and was cancelled): ignored.
    ///
    /// # Errors
    ///
    /// The reason the agent failed, when the journal could not record it.
    pub fn handle_result(
        &mut self,
        index: usize,
        key: &str,
        outcome: CallOutcome<'_>,
    ) -> Result<bool, String> {
        let driver = &mut self.drivers[index];
        let recorded = match outcome {
            CallOutcome::Result { outcome, detail } => driver.handle_result(key, outcome, detail),
            CallOutcome::InDoubt { reason } => driver.handle_in_doubt_result(key, reason),
        };
        match recorded {
            Ok(_) => Ok(true),
            Err(NodeError::NotInFlight(_)) => Ok(false),
            Err(e) => Err(self.journal_failed(index, &e)),
        }
    }
}

/// What a release made on the host's own authority says in the journal and the log (SPEC 7:
/// keepalived says this host is not MASTER, and the runtime removed the entry itself).
pub const WITHDRAWN: &str = "withdrawn locally: keepalived says this host is not VRRP master";

impl<J: JournalStore> AgentCore<J> {
    /// A local withdrawal removed `addresses` of `provider` from this host: every node's capture
    /// of one of them becomes an executed release in its journal ([`WITHDRAWN`], synced), reported
    /// to the log with the next append ([`NodeDriver::record_local_release`]; a capture whose
    /// call is in flight is left: it is withdrawn again once that call lands). Returns how many
    /// releases were recorded; a journal that fails fails the agent ([`Self::fail`]).
    pub fn record_withdrawal(&mut self, provider: &str, addresses: &BTreeSet<std::net::IpAddr>) -> usize {
        let mut recorded = 0;
        for index in 0..self.drivers.len() {
            let captured: Vec<std::net::IpAddr> = self.drivers[index]
                .engine()
                .captured()
                .keys()
                .filter(|(p, address)| **p == *provider && addresses.contains(address))
                .map(|(_, address)| *address)
                .collect();
            for address in captured {
                match self.drivers[index].record_local_release(provider, address, WITHDRAWN) {
                    Ok(keys) => recorded += keys.len(),
                    Err(e) => {
                        // A failed journal takes nothing more (the agent has failed).
                        self.journal_failed(index, &e);
                        return recorded;
                    }
                }
            }
        }
        recorded
    }

    /// Whether a node still records a capture, with no call in flight for it, of an address that
    /// `wanted` names under `provider`: on a host keepalived demoted, the local withdrawal goes
    /// round again (an add that was in flight during the last round has landed since).
    pub fn captured_without_call(&self, wanted: impl Fn(&str, std::net::IpAddr) -> bool) -> bool {
        self.drivers.iter().any(|driver| {
            driver.engine().captured().keys().any(|(provider, address)| {
                wanted(provider, *address) && !driver.engine().call_in_flight(provider, *address)
            })
        })
    }
}

/// A call's end, as the shell heard it ([`AgentCore::handle_result`]).
#[derive(Clone, Debug)]
pub enum CallOutcome<'a> {
    /// The provider answered: executed or failed.
    Result {
        /// What the journal records.
        outcome: crate::log::ActionOutcome,
        /// The provider's detail (its error, or what it did).
        detail: String,
    },
    /// The provider may or may not have acted: a deadline passed, the call was cancelled, its
    /// task failed (SPEC 6: calls in doubt are at-least-once).
    InDoubt {
        /// Why the outcome is unknown.
        reason: &'a str,
    },
}
