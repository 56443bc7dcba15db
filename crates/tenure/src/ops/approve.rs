//! `approve`: one action of a manual pool, by its idempotency key. `tenure approve KEY`,
//! `POST /v1/approve/{key}` (the key's `/`s sent as they are or as `%2F`), appends
//! `approve{idempotencyKey}`; done: `action/KEY approved`. (`tenure approve --pool P --address A`
//! approves every waiting action of one address through this route: `cli/approve.rs`.)

use tenure_core::input::check_name;
use tenure_core::log::EventKind;
use tenure_core::model::{CaptureDomain, ParsedKey, StampedAction};

use super::{Input, OperatorCommand, fields};
use crate::api::ApiFailure;

/// `tenure approve KEY`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Approve {
    /// The idempotency key, as given.
    pub key: String,
}

impl OperatorCommand for Approve {
    const NAME: &'static str = "approve";
    const ROUTE: &'static str = "/v1/approve/{*key}";
    const INPUT: Input = Input::Path("key");

    fn values(&self) -> Vec<&str> {
        vec![&self.key]
    }

    /// An empty key names nothing: refused before anything is sent.
    fn check(&self) -> Result<(), String> {
        if self.key.trim().is_empty() {
            return Err("the key is empty; give one as `tenure actions --state pending` shows it".to_owned());
        }
        Ok(())
    }

    fn event(values: Vec<String>) -> Result<EventKind, ApiFailure> {
        let [key] = fields(values);
        check_key(&key).map_err(|e| ApiFailure::bad_field("key", e))?;
        Ok(EventKind::Approve { idempotency_key: key })
    }

    fn done(&self) -> String {
        format!("action/{} approved", self.key)
    }
}

/// Checks an idempotency key: it must parse as `<pool>/<address>/<verb>/<holder>/<provider>/<nic>
/// /owner:<o>:epoch:<c>` with valid names, and be written the way the planner writes it
/// (canonical address, no leading zeros), since any other spelling could never name an action.
pub fn check_key(key: &str) -> Result<(), String> {
    const FORMAT: &str = "<pool>/<address>/<verb>/<holder>/<provider>/<nic>/owner:<N>:epoch:<N>";
    let parsed =
        ParsedKey::parse(key).ok_or_else(|| format!("`{key}` is not an idempotency key ({FORMAT})"))?;
    for (what, name) in [("pool", &parsed.pool), ("holder", &parsed.holder), ("provider", &parsed.provider)] {
        check_name(what, name).map_err(|e| format!("`{key}`: {e}"))?;
    }
    // A NIC is any non-empty text without `/` (the key's separator), as node declarations say.
    if parsed.nic.is_empty() {
        return Err(format!("`{key}`: nic must not be empty"));
    }
    // The key does not hold the capture domain; any will do to spell the key again.
    let spelled = StampedAction::new(
        &parsed.pool,
        parsed.address,
        parsed.verb,
        &parsed.holder,
        &parsed.provider,
        &parsed.nic,
        CaptureDomain::new(&parsed.provider, ""),
        parsed.capture_epoch,
        parsed.ownership_epoch,
    )
    .idempotency_key();
    if spelled != key {
        return Err(format!("`{key}` is not written canonically; the planner writes it `{spelled}`"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_must_be_spelled_as_the_planner_spells_them() {
        assert_eq!(check_key("p/10.0.0.10/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1"), Ok(()));
        assert_eq!(check_key("p/2001:db8::1/proxy-arp-del/b/lan/eth0/owner:8:epoch:9"), Ok(()));
        for bad in [
            "",
            "p/10.0.0.10",
            "p/10.0.0.10/nope/a/sim1/eni-a/owner:1:epoch:1",
            "p/10.0.0.10/assign-secondary-ip/a/sim1/eni-a/owner:01:epoch:1",
            "p/2001:DB8::1/proxy-arp-del/b/lan/eth0/owner:8:epoch:9",
            "p/10.0.0.10/assign-secondary-ip/a b/sim1/eni-a/owner:1:epoch:1",
            "p/10.0.0.10/assign-secondary-ip//sim1/eni-a/owner:1:epoch:1",
        ] {
            assert!(check_key(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn an_approve_names_a_key_checked_here_and_an_empty_one_is_refused_before_sending() {
        let key = "p/10.0.0.10/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1";
        assert_eq!(Approve::event(vec![key.into()]), Ok(EventKind::Approve { idempotency_key: key.into() }));
        let refused = Approve::event(vec!["p/10.0.0.10".into()]).expect_err("not a key");
        assert_eq!((refused.status.as_u16(), refused.field.as_deref()), (400, Some("key")));
        assert_eq!(Approve { key: key.into() }.check(), Ok(()));
        for empty in ["", " \t"] {
            let refused = Approve { key: empty.into() }.check().expect_err("empty");
            assert!(refused.starts_with("the key is empty"), "{refused}");
        }
        assert_eq!(Approve { key: "k".into() }.done(), "action/k approved");
    }
}
