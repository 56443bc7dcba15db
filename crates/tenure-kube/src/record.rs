//! Reading a Lease as an election record: who holds it, under which term, and whether it has
//! expired. Pure functions of the Lease and the times passed in; no I/O.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;

/// The annotation that carries the leader term (SPEC 8): a decimal `u64`, incremented on every
/// takeover, unchanged on renewal. Missing means 0 (a Lease no contender has written yet).
pub const TERM_ANNOTATION: &str = "tenure.dev/leader-term";

/// The annotation that carries the holder's nonce: random per backend instance, written with
/// every takeover, so that a process can tell its own takeover from one by another process given
/// the same identity (see the backend's "takeover whose answer was lost").
pub const NONCE_ANNOTATION: &str = "tenure.dev/leader-nonce";

/// The annotation holds something that is not a term.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("annotation {TERM_ANNOTATION} is not a term: {found:?}")]
pub struct BadTerm {
    /// The annotation's text.
    pub found: String,
}

/// The term stored on `lease` (0 when the annotation is missing).
pub fn term_of(lease: &Lease) -> Result<u64, BadTerm> {
    match lease.metadata.annotations.as_ref().and_then(|a| a.get(TERM_ANNOTATION)) {
        None => Ok(0),
        Some(text) => text.trim().parse().map_err(|_| BadTerm { found: text.clone() }),
    }
}

/// The nonce written with the holder on `lease`, if any.
#[must_use]
pub fn nonce_of(lease: &Lease) -> Option<&str> {
    lease.metadata.annotations.as_ref().and_then(|a| a.get(NONCE_ANNOTATION)).map(String::as_str)
}

/// The holder named on `lease`; an empty name counts as none (that is how a release looks).
#[must_use]
pub fn holder_of(lease: &Lease) -> Option<&str> {
    lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()).filter(|h| !h.is_empty())
}

/// The lease duration the Lease declares, or `fallback_s` when it declares none (or nonsense).
#[must_use]
pub fn duration_s_of(lease: &Lease, fallback_s: i32) -> i32 {
    lease.spec.as_ref().and_then(|s| s.lease_duration_seconds).filter(|d| *d > 0).unwrap_or(fallback_s)
}

/// Whether `renewTime + leaseDurationSeconds` has passed at `now` by the wall clock. A holder
/// without a renew time has never renewed: expired.
#[must_use]
pub fn renewal_passed(lease: &Lease, duration_s: i32, now: Timestamp) -> bool {
    let Some(renewed) = lease.spec.as_ref().and_then(|s| s.renew_time.as_ref()) else { return true };
    let expires_ms = renewed.0.as_millisecond().saturating_add(i64::from(duration_s).saturating_mul(1000));
    expires_ms <= now.as_millisecond()
}

/// A lease duration in the whole seconds a Lease stores (`leaseDurationSeconds`, an `int32`),
/// rounded up as [`tenure_lead::backend::lease_whole_seconds`] does.
#[must_use]
pub fn whole_seconds(duration: Duration) -> i32 {
    i32::try_from(tenure_lead::backend::lease_whole_seconds(duration)).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

    use super::*;

    fn lease(term: Option<&str>, holder: Option<&str>, renewed_ms: Option<i64>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                annotations: term.map(|t| BTreeMap::from([(TERM_ANNOTATION.to_owned(), t.to_owned())])),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                renew_time: renewed_ms
                    .map(|ms| MicroTime(Timestamp::from_millisecond(ms).expect("in range"))),
                lease_duration_seconds: Some(2),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn the_term_is_the_annotation_and_missing_means_zero() {
        assert_eq!(term_of(&lease(Some("41"), None, None)), Ok(41));
        assert_eq!(term_of(&lease(None, None, None)), Ok(0));
        assert_eq!(term_of(&lease(Some("-1"), None, None)), Err(BadTerm { found: "-1".into() }));
        assert_eq!(term_of(&lease(Some("x"), None, None)), Err(BadTerm { found: "x".into() }));
    }

    #[test]
    fn an_empty_holder_is_no_holder() {
        assert_eq!(holder_of(&lease(None, Some("a"), None)), Some("a"));
        assert_eq!(holder_of(&lease(None, Some(""), None)), None);
        assert_eq!(holder_of(&lease(None, None, None)), None);
    }

    #[test]
    fn a_renewal_passes_exactly_at_renew_time_plus_duration() {
        let l = lease(None, Some("a"), Some(10_000));
        let at = |ms| Timestamp::from_millisecond(ms).expect("in range");
        assert!(!renewal_passed(&l, 2, at(11_999)));
        assert!(renewal_passed(&l, 2, at(12_000)));
        assert!(renewal_passed(&lease(None, Some("a"), None), 2, at(0)), "never renewed");
        assert_eq!(duration_s_of(&l, 9), 2);
        assert_eq!(duration_s_of(&Lease::default(), 9), 9, "no spec: the fallback");
    }

    #[test]
    fn durations_round_up_to_whole_seconds() {
        assert_eq!(whole_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(whole_seconds(Duration::from_secs(15)), 15);
        assert_eq!(whole_seconds(Duration::ZERO), 1);
    }
}
