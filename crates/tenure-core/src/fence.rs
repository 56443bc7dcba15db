//! The one fence rule (SPEC 6), applied on import, on every sweep and right before the provider
//! call, always against the **current** tokens read from the log head.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use crate::federation::Federation;
use crate::model::{CaptureDomain, CaptureEpoch, OwnershipEpoch, StampedAction};

/// Why an action is stale. When several hold, the first in this order is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StaleReason {
    /// Its captureEpoch is not the current captureEpoch of its key (or is below the node's
    /// durable high-water mark for that key).
    StaleEpoch,
    /// The pool has `epochLocking: true` and its ownershipEpoch is not current.
    StaleOwnerEpoch,
    /// An acquire whose holder is not the current desired holder.
    HolderMismatch,
    /// A release whose holder is the current desired holder.
    ReleaseOfCurrent,
}

impl StaleReason {
    /// The wire name recorded in the journal.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StaleEpoch => "stale-epoch",
            Self::StaleOwnerEpoch => "stale-owner-epoch",
            Self::HolderMismatch => "holder-mismatch",
            Self::ReleaseOfCurrent => "release-of-current",
        }
    }

    /// Parses a wire name.
    #[must_use]
    pub fn from_wire(text: &str) -> Option<Self> {
        [Self::StaleEpoch, Self::StaleOwnerEpoch, Self::HolderMismatch, Self::ReleaseOfCurrent]
            .into_iter()
            .find(|r| r.as_str() == text)
    }
}

impl fmt::Display for StaleReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The gate's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum FenceVerdict {
    /// The action may proceed.
    Current,
    /// The action must never run.
    Stale {
        /// The first rule that holds.
        reason: StaleReason,
    },
}

/// The tokens of the log head the gate reads. The federation state implements it; a node that
/// cannot read the head has no `HeadTokens` and therefore cannot act.
pub trait HeadTokens {
    /// Current captureEpoch of (pool, address, domain).
    fn capture_epoch(&self, pool: &str, address: IpAddr, domain: &CaptureDomain) -> CaptureEpoch;
    /// Current ownershipEpoch of (pool, address).
    fn ownership_epoch(&self, pool: &str, address: IpAddr) -> OwnershipEpoch;
    /// Current desired holder on the line of `domain`.
    fn desired_holder(&self, pool: &str, address: IpAddr, domain: &CaptureDomain) -> Option<&str>;
    /// Whether the pool fences on ownershipEpoch.
    fn epoch_locking(&self, pool: &str) -> bool;
    /// Whether an `approve` event named `key`.
    fn is_approved(&self, key: &str) -> bool;
}

impl HeadTokens for Federation {
    fn capture_epoch(&self, pool: &str, address: IpAddr, domain: &CaptureDomain) -> CaptureEpoch {
        Federation::capture_epoch(self, pool, address, domain)
    }
    fn ownership_epoch(&self, pool: &str, address: IpAddr) -> OwnershipEpoch {
        Federation::ownership_epoch(self, pool, address)
    }
    fn desired_holder(&self, pool: &str, address: IpAddr, domain: &CaptureDomain) -> Option<&str> {
        Federation::desired_holder(self, pool, address, domain)
    }
    fn epoch_locking(&self, pool: &str) -> bool {
        Federation::epoch_locking(self, pool)
    }
    fn is_approved(&self, key: &str) -> bool {
        Federation::is_approved(self, key)
    }
}

/// Key of a capture line.
pub type CaptureKey = (String, IpAddr, CaptureDomain);
/// Key of an ownership line.
pub type OwnershipKey = (String, IpAddr);

/// The highest tokens a node has seen, per key; kept durably, so a restarted node never executes
/// below what it saw before the crash.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HighWater {
    /// Highest captureEpoch seen per capture line.
    pub capture: BTreeMap<CaptureKey, CaptureEpoch>,
    /// Highest ownershipEpoch seen per (pool, address).
    pub ownership: BTreeMap<OwnershipKey, OwnershipEpoch>,
}

impl HighWater {
    /// Highest captureEpoch seen for a line.
    #[must_use]
    pub fn capture(&self, action: &StampedAction) -> CaptureEpoch {
        self.capture
            .get(&(action.pool.clone(), action.address, action.capture_domain.clone()))
            .copied()
            .unwrap_or_default()
    }

    /// Highest ownershipEpoch seen for (pool, address).
    #[must_use]
    pub fn ownership(&self, action: &StampedAction) -> OwnershipEpoch {
        self.ownership.get(&(action.pool.clone(), action.address)).copied().unwrap_or_default()
    }
}

/// The fence rule. `high_water` is the node's durable memory of the highest tokens it saw.
pub fn check(action: &StampedAction, head: &impl HeadTokens, high_water: &HighWater) -> FenceVerdict {
    let current_capture = head.capture_epoch(&action.pool, action.address, &action.capture_domain);
    if action.capture_epoch != current_capture || action.capture_epoch < high_water.capture(action) {
        return FenceVerdict::Stale { reason: StaleReason::StaleEpoch };
    }
    if head.epoch_locking(&action.pool) {
        let current_ownership = head.ownership_epoch(&action.pool, action.address);
        if action.ownership_epoch != current_ownership
            || action.ownership_epoch < high_water.ownership(action)
        {
            return FenceVerdict::Stale { reason: StaleReason::StaleOwnerEpoch };
        }
    }
    let holder = head.desired_holder(&action.pool, action.address, &action.capture_domain);
    let is_current_holder = holder == Some(action.holder.as_str());
    if action.verb.is_acquire() && !is_current_holder {
        return FenceVerdict::Stale { reason: StaleReason::HolderMismatch };
    }
    if !action.verb.is_acquire() && is_current_holder {
        return FenceVerdict::Stale { reason: StaleReason::ReleaseOfCurrent };
    }
    FenceVerdict::Current
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Verb;

    struct Head {
        capture: u64,
        ownership: u64,
        holder: Option<&'static str>,
        locking: bool,
    }

    impl HeadTokens for Head {
        fn capture_epoch(&self, _: &str, _: IpAddr, _: &CaptureDomain) -> CaptureEpoch {
            CaptureEpoch::from_stored(self.capture)
        }
        fn ownership_epoch(&self, _: &str, _: IpAddr) -> OwnershipEpoch {
            OwnershipEpoch::from_stored(self.ownership)
        }
        fn desired_holder(&self, _: &str, _: IpAddr, _: &CaptureDomain) -> Option<&str> {
            self.holder
        }
        fn epoch_locking(&self, _: &str) -> bool {
            self.locking
        }
        fn is_approved(&self, _: &str) -> bool {
            false
        }
    }

    fn action(verb: Verb, holder: &str, capture: u64, ownership: u64) -> StampedAction {
        StampedAction::new(
            "p",
            "10.0.0.1".parse().expect("literal"),
            verb,
            holder,
            "sim1",
            "eni",
            CaptureDomain::new("sim1", "g1"),
            CaptureEpoch::from_stored(capture),
            OwnershipEpoch::from_stored(ownership),
        )
    }

    fn verdict(a: &StampedAction, head: &Head) -> FenceVerdict {
        check(a, head, &HighWater::default())
    }

    #[test]
    fn each_rule_and_their_order() {
        let head = Head { capture: 3, ownership: 2, holder: Some("a"), locking: true };
        let stale = |reason| FenceVerdict::Stale { reason };
        assert_eq!(verdict(&action(Verb::AssignSecondaryIp, "a", 3, 2), &head), FenceVerdict::Current);
        assert_eq!(
            verdict(&action(Verb::AssignSecondaryIp, "b", 2, 1), &head),
            stale(StaleReason::StaleEpoch)
        );
        assert_eq!(
            verdict(&action(Verb::AssignSecondaryIp, "b", 4, 2), &head),
            stale(StaleReason::StaleEpoch)
        );
        assert_eq!(
            verdict(&action(Verb::AssignSecondaryIp, "b", 3, 1), &head),
            stale(StaleReason::StaleOwnerEpoch)
        );
        assert_eq!(
            verdict(&action(Verb::AssignSecondaryIp, "b", 3, 2), &head),
            stale(StaleReason::HolderMismatch)
        );
        assert_eq!(
            verdict(&action(Verb::UnassignSecondaryIp, "a", 3, 2), &head),
            stale(StaleReason::ReleaseOfCurrent)
        );
        assert_eq!(verdict(&action(Verb::ProxyArpDel, "b", 3, 2), &head), FenceVerdict::Current);
        let unlocked = Head { locking: false, ..head };
        assert_eq!(verdict(&action(Verb::Garp, "a", 3, 1), &unlocked), FenceVerdict::Current);
        let nobody = Head { capture: 3, ownership: 2, holder: None, locking: true };
        assert_eq!(
            verdict(&action(Verb::ProxyArpAdd, "a", 3, 2), &nobody),
            stale(StaleReason::HolderMismatch)
        );
    }

    #[test]
    fn the_high_water_mark_fences_a_lagging_head() {
        let head = Head { capture: 3, ownership: 2, holder: Some("a"), locking: true };
        let a = action(Verb::AssignSecondaryIp, "a", 3, 2);
        let mut hw = HighWater::default();
        hw.capture.insert(("p".into(), a.address, a.capture_domain.clone()), CaptureEpoch::from_stored(4));
        assert_eq!(check(&a, &head, &hw), FenceVerdict::Stale { reason: StaleReason::StaleEpoch });
        let mut hw = HighWater::default();
        hw.ownership.insert(("p".into(), a.address), OwnershipEpoch::from_stored(3));
        assert_eq!(check(&a, &head, &hw), FenceVerdict::Stale { reason: StaleReason::StaleOwnerEpoch });
    }

    #[test]
    fn reasons_round_trip() {
        for r in [
            StaleReason::StaleEpoch,
            StaleReason::StaleOwnerEpoch,
            StaleReason::HolderMismatch,
            StaleReason::ReleaseOfCurrent,
        ] {
            assert_eq!(StaleReason::from_wire(r.as_str()), Some(r));
        }
    }
}
