//! `undrain`: a node's drain ends. `tenure undrain NODE`, `POST /v1/undrain/{node}`, appends
//! `undrain{node}`; done: `node/NODE undrained`. Its input is `drain`'s (`drain::node`).

use tenure_core::log::EventKind;

use super::drain::{NODE, check_node, node};
use super::{Input, OperatorCommand};
use crate::api::ApiFailure;

/// `tenure undrain NODE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Undrain {
    /// The node, as given.
    pub node: String,
}

impl OperatorCommand for Undrain {
    const NAME: &'static str = "undrain";
    const ROUTE: &'static str = "/v1/undrain/{node}";
    const INPUT: Input = NODE;

    fn values(&self) -> Vec<&str> {
        vec![&self.node]
    }

    fn check(&self) -> Result<(), String> {
        check_node(&self.node)
    }

    fn event(values: Vec<String>) -> Result<EventKind, ApiFailure> {
        Ok(EventKind::Undrain { node: node(values)? })
    }

    fn done(&self) -> String {
        format!("node/{} undrained", self.node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_undrain_appends_undrain_and_says_undrained() {
        assert_eq!(Undrain::event(vec!["a".into()]), Ok(EventKind::Undrain { node: "a".into() }));
        assert!(Undrain::event(vec!["a b".into()]).is_err());
        assert_eq!(Undrain { node: "a".into() }.done(), "node/a undrained");
        assert!(Undrain { node: String::new() }.check().is_err(), "refused before anything is sent");
    }
}
