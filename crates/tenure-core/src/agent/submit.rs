//! What an operator may append through an agent (`POST /v1/…`, the CLI's commands, the demo's
//! controls): the one check an event passes against the agent's view and the journals of the
//! nodes it runs before anything is appended. A refused event changes nothing. How each
//! command's input was read before it became the event is the daemon's (`ops`); what the event
//! may name is the core's, so that the simulator's operator goes through the same check.

use super::AgentCore;
use super::approve::check_approve;
use crate::driver::NodeDriver;
use crate::federation::Federation;
use crate::journal::JournalStore;
use crate::log::EventKind;

/// Why an operator's event is not appended.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitRefusal {
    /// The event names something the agent does not know: a node not in the registry, a pool
    /// not applied, an address not in the pool (HTTP 404).
    #[error("{0}")]
    NotFound(String),
    /// The event is well formed but not allowed now (HTTP 409): an approval of a key that is not
    /// pending approval (the message says why), an event kind operators do not submit.
    #[error("{0}")]
    Refused(String),
}

impl<J: JournalStore> AgentCore<J> {
    /// Checks `event`, which an operator asked this agent to append, against its view and the
    /// journals of its nodes ([`check_submit`]).
    ///
    /// # Errors
    ///
    /// Why it is refused, in one line.
    pub fn check_submit(&self, event: &EventKind) -> Result<(), SubmitRefusal> {
        check_submit(self.drivers[0].view(), &self.drivers, event)
    }
}

/// Checks `event`, which an operator asked an agent to append, against `view` and the journals
/// of the nodes the agent runs (`local`): a node must be in the registry; a pool must be applied
/// and list the address; an approval must name an action pending approval now (`approve.rs`: it
/// may be approved before it is journaled, SPEC 13); no other kind is an operator's. (An API
/// double with no journals passes none.)
///
/// # Errors
///
/// Why it is refused, in one line.
pub fn check_submit<J: JournalStore>(
    view: &Federation,
    local: &[NodeDriver<J>],
    event: &EventKind,
) -> Result<(), SubmitRefusal> {
    match event {
        EventKind::Drain { node } | EventKind::Undrain { node } => {
            if view.node_id(node).is_none() {
                return Err(SubmitRefusal::NotFound(format!(
                    "node \"{node}\" is not in the registry (the log's nodes: {}; a pool may list a \
                     member the log does not have)",
                    registry_names(view)
                )));
            }
        }
        EventKind::Desire { pool, address } | EventKind::Undesire { pool, address } => {
            let applied = view.pools().get(pool).filter(|p| !p.deleted);
            let Some(state) = applied else {
                return Err(SubmitRefusal::NotFound(format!("pool \"{pool}\" is not applied")));
            };
            if !state.addresses.get(address).is_some_and(|a| a.active) {
                return Err(SubmitRefusal::NotFound(format!("pool \"{pool}\" does not list {address}")));
            }
        }
        EventKind::Approve { idempotency_key } => check_approve(view, local, idempotency_key)?,
        EventKind::NodeRetired { node, force } => check_retire(view, local, node, *force)?,
        other => {
            return Err(SubmitRefusal::Refused(format!(
                "{} cannot be submitted through the API",
                other.wire_name()
            )));
        }
    }
    Ok(())
}

/// A `node-retired` an operator asks for: the node is in the registry, not run by this agent (an
/// agent does not retire its own node: it would stop acting for it), not heard from lately (its
/// agent is stopped: a running one would heartbeat into a registry without its node), owns and
/// is the desired holder of nothing ([`Federation::retirement_refused`], the rule the log
/// applies), and — unless `force` — holds nothing by the log ([`Federation::held_by_log`]: once
/// retired, nothing would release it, on-prem nothing would take its entries down).
fn check_retire<J: JournalStore>(
    view: &Federation,
    local: &[NodeDriver<J>],
    node: &str,
    force: bool,
) -> Result<(), SubmitRefusal> {
    let Some(id) = view.node_id(node) else {
        return Err(SubmitRefusal::NotFound(format!(
            "node \"{node}\" is not in the registry (retired already, or never registered; the log's nodes: {})",
            registry_names(view)
        )));
    };
    if local.iter().any(|driver| driver.name() == node) {
        return Err(SubmitRefusal::Refused(format!(
            "node \"{node}\" is run by this agent: stop it, then retire the node through another agent of the fleet"
        )));
    }
    if let Some(wait_ms) = view.heard_from_within(id) {
        return Err(SubmitRefusal::Refused(format!(
            "node \"{node}\" was heard from {wait_ms} ms ago by the log (its agent may still run): stop its agent \
             first; a node is retired once its heartbeats are older than its pools' heartbeatTTL + promotionHold"
        )));
    }
    if let Some(refused) = view.retirement_refused(node) {
        return Err(SubmitRefusal::Refused(format!(
            "{refused}: a node is retired once it owns and is the desired holder of nothing (stop or drain it, and \
             wait until its addresses have moved)"
        )));
    }
    if !force && let Some(held) = view.held_by_log(id) {
        return Err(SubmitRefusal::Refused(format!(
            "node \"{node}\" still holds {held} by the log (its last confirmed verb there is an acquire, and nothing \
             since says it is gone): start its agent again, on any store, and it releases what it held; if the \
             router is gone for good with its addresses, retire it with --force"
        )));
    }
    Ok(())
}

/// The registry's node names for a refusal: the first few, and how many more.
fn registry_names(view: &Federation) -> String {
    const SHOWN: usize = 8;
    let nodes = view.nodes();
    let mut names: Vec<&str> = nodes.iter().take(SHOWN).map(|n| n.spec.name.as_str()).collect();
    let more = nodes.len().saturating_sub(SHOWN);
    let more = (more > 0).then(|| format!("{more} more"));
    names.extend(more.as_deref());
    names.join(", ")
}
