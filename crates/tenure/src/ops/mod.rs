//! The operator commands — `drain`, `undrain`, `approve`, `desire`, `undesire`, `node retire` — one
//! module each,
//! holding in one place what the command is: its route, where its input arrives and how it is
//! checked, the event it appends, and the line the CLI prints when it is done.
//!
//! Both sides go through them, with nothing per command of their own: the API serves each
//! [`OperatorCommand::ROUTE`] with one handler (`api/mutate.rs`: authorize, read the input as
//! [`OperatorCommand::INPUT`] says, [`OperatorCommand::event`], submit), and the CLI runs each
//! with one function (`cli/remote.rs`, `run_change`: [`OperatorCommand::check`], send
//! [`OperatorCommand::values`] to the route, print [`OperatorCommand::done`]). Every operator
//! command is a `POST` that appends one event through the agent loop, which checks the event
//! against its view before anything is appended (`tenure_core::agent::check_submit`: the node,
//! the pool and address, or the pending action must exist).
//!
//! # Layout
//! - [`drain`], [`undrain`] — a node's drain, on and off (`undrain` takes `drain`'s input).
//! - [`approve`] — one action of a manual pool, by its idempotency key.
//! - [`desire`], [`undesire`] — an address marked desired or undesired (`undesire` takes
//!   `desire`'s body).
//! - [`retire`] — a node out of the fleet's registry (`retire` takes `drain`'s input).

pub mod approve;
pub mod desire;
pub mod drain;
pub mod retire;
pub mod undesire;
pub mod undrain;

use tenure_core::log::EventKind;

pub use approve::Approve;
pub use desire::Desire;
pub use drain::Drain;
pub use retire::{Retire, RetireForced};
pub use undesire::Undesire;
pub use undrain::Undrain;

use crate::api::ApiFailure;

/// Where an operator command's input arrives in its API request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// In the route's one path parameter, called this in errors (`{node}`, `{*key}`); the body
    /// takes no fields.
    Path(&'static str),
    /// In the JSON body's string fields, in this order.
    Body(&'static [&'static str]),
}

/// One operator command: `tenure NAME …` on the command line, `POST ROUTE` on the API, one event
/// appended through the agent loop.
pub trait OperatorCommand {
    /// The verb: the CLI's subcommand, and the `tenure NAME:` of its one-line errors.
    const NAME: &'static str;
    /// The API's route (a `POST`), as axum writes it.
    const ROUTE: &'static str;
    /// Where the API request carries the input.
    const INPUT: Input;

    /// The input as the CLI sends it, as given: one value per field of [`Self::INPUT`].
    fn values(&self) -> Vec<&str>;

    /// The CLI's own check, before anything is read or sent: `Err` is the one-line reason (exit
    /// 2). approve (an empty key), drain and undrain (the node, by the agent's name rule: a bad one
    /// would make another route) have one; desire and undesire leave their body to the agent.
    fn check(&self) -> Result<(), String> {
        Ok(())
    }

    /// The event an API request asks for, from its input (one value per field of
    /// [`Self::INPUT`], in order), each value checked: a 400 naming the field at fault otherwise.
    fn event(values: Vec<String>) -> Result<EventKind, ApiFailure>;

    /// What the CLI prints when the agent appended the event: `node/a drained`.
    fn done(&self) -> String;
}

/// The `N` values of an input with `N` fields (the API's handler reads one value per field).
fn fields<const N: usize>(values: Vec<String>) -> [String; N] {
    values.try_into().unwrap_or_else(|given: Vec<String>| panic!("{} values for {N} fields", given.len()))
}
