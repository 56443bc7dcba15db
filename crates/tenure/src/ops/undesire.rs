//! `undesire`: an address should be held by no one. `tenure undesire POOL ADDRESS`,
//! `POST /v1/undesire` with `{"pool": …, "address": …}`, appends `undesire{pool, address}`; done:
//! `address/POOL/ADDRESS undesired`. Its body is `desire`'s (`desire::pool_address`).

use tenure_core::log::EventKind;

use super::desire::{POOL_ADDRESS, pool_address};
use super::{Input, OperatorCommand};
use crate::api::ApiFailure;

/// `tenure undesire POOL ADDRESS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Undesire {
    /// The pool, as given.
    pub pool: String,
    /// The address, as given.
    pub address: String,
}

impl OperatorCommand for Undesire {
    const NAME: &'static str = "undesire";
    const ROUTE: &'static str = "/v1/undesire";
    const INPUT: Input = POOL_ADDRESS;

    fn values(&self) -> Vec<&str> {
        vec![&self.pool, &self.address]
    }

    fn event(values: Vec<String>) -> Result<EventKind, ApiFailure> {
        let (pool, address) = pool_address(values)?;
        Ok(EventKind::Undesire { pool, address })
    }

    fn done(&self) -> String {
        format!("address/{}/{} undesired", self.pool, self.address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_undesire_appends_undesire_and_says_undesired() {
        let address = "10.0.0.10".parse().expect("an address");
        assert_eq!(
            Undesire::event(vec!["p".into(), "10.0.0.10".into()]),
            Ok(EventKind::Undesire { pool: "p".into(), address })
        );
        assert!(Undesire::event(vec!["p".into(), " 10.0.0.10".into()]).is_err());
        let done = Undesire { pool: "p".into(), address: "10.0.0.10".into() }.done();
        assert_eq!(done, "address/p/10.0.0.10 undesired");
    }
}
