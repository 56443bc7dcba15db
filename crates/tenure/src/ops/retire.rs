//! `node retire`: a router leaves the fleet. `tenure node retire NODE [--force]`,
//! `POST /v1/nodes/{node}/retire` (`…/retire/force`), appends `node-retired{node, force}`; done:
//! `node/NODE retired`. The agent refuses it (409) while the node was heard from lately, owns or is
//! the desired holder of an address, is one this agent runs, or — without `--force` — still
//! holds an address by the log (`tenure_core::agent::check_submit`); the log applies the owning
//! rule. A node comes back by starting an agent for it: it registers itself.

use tenure_core::log::EventKind;

use super::drain::{NODE, check_node, node};
use super::{Input, OperatorCommand};
use crate::api::ApiFailure;

/// `tenure node retire NODE`, and with `FORCE` `tenure node retire NODE --force`: the router is
/// gone for good with what the log says it holds (nothing will release it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRetire<const FORCE: bool> {
    /// The node, as given.
    pub node: String,
}

/// `tenure node retire NODE`.
pub type Retire = NodeRetire<false>;

/// `tenure node retire NODE --force`.
pub type RetireForced = NodeRetire<true>;

impl<const FORCE: bool> OperatorCommand for NodeRetire<FORCE> {
    const NAME: &'static str = "node retire";
    const ROUTE: &'static str =
        if FORCE { "/v1/nodes/{node}/retire/force" } else { "/v1/nodes/{node}/retire" };
    const INPUT: Input = NODE;

    fn values(&self) -> Vec<&str> {
        vec![&self.node]
    }

    fn check(&self) -> Result<(), String> {
        check_node(&self.node)
    }

    fn event(values: Vec<String>) -> Result<EventKind, ApiFailure> {
        Ok(EventKind::NodeRetired { node: node(values)?, force: FORCE })
    }

    fn done(&self) -> String {
        if FORCE {
            format!("node/{} retired (forced: what the log said it held is forgotten)", self.node)
        } else {
            format!("node/{} retired", self.node)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retire_names_its_node_by_a_valid_name() {
        assert_eq!(
            Retire::event(vec!["r3".into()]),
            Ok(EventKind::NodeRetired { node: "r3".into(), force: false })
        );
        assert_eq!(
            RetireForced::event(vec!["r3".into()]),
            Ok(EventKind::NodeRetired { node: "r3".into(), force: true })
        );
        let refused = Retire::event(vec!["a/b".into()]).expect_err("not a name");
        assert_eq!((refused.status.as_u16(), refused.field.as_deref()), (400, Some("node")));
        assert!(Retire { node: String::new() }.check().is_err());
        assert_eq!(Retire { node: "r3".into() }.done(), "node/r3 retired");
    }
}
