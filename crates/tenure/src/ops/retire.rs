//! `node retire`: a router leaves the fleet. `tenure node retire NODE`,
//! `POST /v1/nodes/{node}/retire`, appends `node-retired{node}`; done: `node/NODE retired`. The
//! agent refuses it (409) while the node is alive, owns or is the desired holder of an address, or
//! is one this agent runs (`tenure_core::agent::check_submit`); the log applies the same holding
//! rule. A node comes back by starting an agent for it: it registers itself.

use tenure_core::log::EventKind;

use super::drain::{NODE, check_node, node};
use super::{Input, OperatorCommand};
use crate::api::ApiFailure;

/// `tenure node retire NODE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retire {
    /// The node, as given.
    pub node: String,
}

impl OperatorCommand for Retire {
    const NAME: &'static str = "node retire";
    const ROUTE: &'static str = "/v1/nodes/{node}/retire";
    const INPUT: Input = NODE;

    fn values(&self) -> Vec<&str> {
        vec![&self.node]
    }

    fn check(&self) -> Result<(), String> {
        check_node(&self.node)
    }

    fn event(values: Vec<String>) -> Result<EventKind, ApiFailure> {
        Ok(EventKind::NodeRetired { node: node(values)? })
    }

    fn done(&self) -> String {
        format!("node/{} retired", self.node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retire_names_its_node_by_a_valid_name() {
        assert_eq!(Retire::event(vec!["r3".into()]), Ok(EventKind::NodeRetired { node: "r3".into() }));
        let refused = Retire::event(vec!["a/b".into()]).expect_err("not a name");
        assert_eq!((refused.status.as_u16(), refused.field.as_deref()), (400, Some("node")));
        assert!(Retire { node: String::new() }.check().is_err());
        assert_eq!(Retire { node: "r3".into() }.done(), "node/r3 retired");
    }
}
