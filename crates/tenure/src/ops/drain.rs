//! `drain`: a node gives up its addresses. `tenure drain NODE`, `POST /v1/drain/{node}`, appends
//! `drain{node}`; done: `node/NODE drained`.

use tenure_core::input::check_name;
use tenure_core::log::EventKind;

use super::{Input, OperatorCommand, fields};
use crate::api::ApiFailure;

/// The input of `drain` and `undrain`: the node, in the path.
pub(super) const NODE: Input = Input::Path("node");

/// The node of a `drain` or `undrain`, checked as a name.
pub(super) fn node(values: Vec<String>) -> Result<String, ApiFailure> {
    let [node] = fields(values);
    check_name("node", &node).map_err(|e| ApiFailure::bad_field("node", e))?;
    Ok(node)
}

/// The CLI's check of a `drain` or `undrain` node: the agent's rule, before anything is sent (an
/// empty name or one with a `/` would make another route).
pub(super) fn check_node(node: &str) -> Result<(), String> {
    check_name("node", node)
}

/// `tenure drain NODE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drain {
    /// The node, as given.
    pub node: String,
}

impl OperatorCommand for Drain {
    const NAME: &'static str = "drain";
    const ROUTE: &'static str = "/v1/drain/{node}";
    const INPUT: Input = NODE;

    fn values(&self) -> Vec<&str> {
        vec![&self.node]
    }

    fn check(&self) -> Result<(), String> {
        check_node(&self.node)
    }

    fn event(values: Vec<String>) -> Result<EventKind, ApiFailure> {
        Ok(EventKind::Drain { node: node(values)? })
    }

    fn done(&self) -> String {
        format!("node/{} drained", self.node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_names_its_node_by_a_valid_name() {
        assert_eq!(Drain::event(vec!["a".into()]), Ok(EventKind::Drain { node: "a".into() }));
        for bad in ["", "a b", "a/b"] {
            let refused = Drain::event(vec![bad.into()]).expect_err("not a name");
            assert_eq!((refused.status.as_u16(), refused.field.as_deref()), (400, Some("node")), "{bad:?}");
        }
        assert_eq!(Drain { node: "a".into() }.done(), "node/a drained");
        // The CLI refuses the same names before it sends anything.
        assert_eq!(Drain { node: "a".into() }.check(), Ok(()));
        for bad in ["", "a b", "a/b"] {
            assert!(Drain { node: bad.into() }.check().is_err(), "{bad:?}");
        }
    }
}
