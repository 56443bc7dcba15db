//! `desire`: an address should be held. `tenure desire POOL ADDRESS`, `POST /v1/desire` with
//! `{"pool": …, "address": …}`, appends `desire{pool, address}`; done:
//! `address/POOL/ADDRESS desired`.

use std::net::IpAddr;

use tenure_core::input::{check_name, parse_one_address};
use tenure_core::log::EventKind;

use super::{Input, OperatorCommand, fields};
use crate::api::ApiFailure;

/// The input of `desire` and `undesire`: the body's fields.
pub(super) const POOL_ADDRESS: Input = Input::Body(&["pool", "address"]);

/// The pool and address of a `desire` or `undesire` body, checked: a pool name, and one address
/// written without surrounding whitespace.
pub(super) fn pool_address(values: Vec<String>) -> Result<(String, IpAddr), ApiFailure> {
    let [pool, address] = fields(values);
    check_name("pool", &pool).map_err(|e| ApiFailure::bad_field("pool", e))?;
    if address.trim() != address {
        return Err(ApiFailure::bad_field("address", format!("`{address}` has surrounding whitespace")));
    }
    let address = parse_one_address(&address).map_err(|e| ApiFailure::bad_field("address", e))?;
    Ok((pool, address))
}

/// `tenure desire POOL ADDRESS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desire {
    /// The pool, as given.
    pub pool: String,
    /// The address, as given.
    pub address: String,
}

impl OperatorCommand for Desire {
    const NAME: &'static str = "desire";
    const ROUTE: &'static str = "/v1/desire";
    const INPUT: Input = POOL_ADDRESS;

    fn values(&self) -> Vec<&str> {
        vec![&self.pool, &self.address]
    }

    fn event(values: Vec<String>) -> Result<EventKind, ApiFailure> {
        let (pool, address) = pool_address(values)?;
        Ok(EventKind::Desire { pool, address })
    }

    fn done(&self) -> String {
        format!("address/{}/{} desired", self.pool, self.address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused_field(values: [&str; 2]) -> Option<String> {
        let values = values.iter().map(|v| (*v).to_owned()).collect();
        Desire::event(values).expect_err("refused").field
    }

    #[test]
    fn a_desire_names_a_pool_and_one_address_written_plainly() {
        let address: IpAddr = "10.0.0.10".parse().expect("an address");
        assert_eq!(
            Desire::event(vec!["p".into(), "10.0.0.10".into()]),
            Ok(EventKind::Desire { pool: "p".into(), address })
        );
        assert_eq!(refused_field(["p q", "10.0.0.10"]).as_deref(), Some("pool"));
        assert_eq!(refused_field(["p", " 10.0.0.10"]).as_deref(), Some("address"));
        assert_eq!(refused_field(["p", "10.0.0.0/30"]).as_deref(), Some("address"));
        assert_eq!(refused_field(["p", "ten"]).as_deref(), Some("address"));
        let whitespace = Desire::event(vec!["p".into(), "10.0.0.10 ".into()]).expect_err("refused");
        assert_eq!(whitespace.message, "field `address`: `10.0.0.10 ` has surrounding whitespace");
        let done = Desire { pool: "p".into(), address: "10.0.0.10".into() }.done();
        assert_eq!(done, "address/p/10.0.0.10 desired");
    }
}
