//! The one fence rule (SPEC 6), applied on import, on every sweep and right before the provider
//! call, always against the **current** tokens read from the log head.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use crate::model::{CaptureDomain, CaptureEpoch, OwnershipEpoch, StampedAction};

/// Why an action is stale. When several hold, the first in this order is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
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

/// The tokens of the log head the gate reads. The federation state implements it (beside
/// [`crate::federation::Federation`]); a node that cannot read the head has no `HeadTokens` and
/// therefore cannot act.
pub trait HeadTokens {
    /// Every token the gate needs for one action, read at once.
    fn view(&self, action: &StampedAction) -> HeadView<'_>;
    /// Whether an `approve` event named `key`.
    fn is_approved(&self, key: &str) -> bool;
    /// Whether `pool`'s actions wait for an operator's approval now (`approval: manual`). A
    /// pool switched to `auto` frees the entries that were waiting. By default every pool
    /// waits (a head that cannot say keeps entries pending: the safe side).
    fn approval_required(&self, pool: &str) -> bool {
        let _ = pool;
        true
    }
    /// The head's stream time (ms): when an attempt is gated, and whether a failed action's
    /// backoff is over ([`crate::retry`]). Never part of the fence rule.
    fn stream_time_ms(&self) -> u64;
}

/// The head's tokens for one action's keys, read in one go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadView<'a> {
    /// Current captureEpoch of the action's line.
    pub capture_epoch: CaptureEpoch,
    /// Current ownershipEpoch of (pool, address).
    pub ownership_epoch: OwnershipEpoch,
    /// Current desired holder on the action's line.
    pub desired_holder: Option<&'a str>,
    /// Whether the pool fences on ownershipEpoch.
    pub epoch_locking: bool,
    /// For a release: whether its holder is now the desired holder of the address on the same
    /// provider through any applied pool (SPEC 13: a NIC holds an address, not a pool's copy).
    /// Always false for an acquire.
    pub holder_desired_on_provider: bool,
}

/// The marks of one (pool, address): the highest ownershipEpoch, and the highest captureEpoch of
/// each line, by interned capture domain. The first line is held inline (an address almost always
/// has one), so the gate reads it without following a pointer.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Marks {
    ownership: OwnershipEpoch,
    first: (DomainIx, CaptureEpoch),
    others: thin_vec::ThinVec<(DomainIx, CaptureEpoch)>,
}

impl Marks {
    fn capture(&self, domain: DomainIx) -> CaptureEpoch {
        if self.first.0 == domain {
            return self.first.1;
        }
        self.others.iter().find(|(d, _)| *d == domain).map_or(CaptureEpoch::NEVER, |(_, e)| *e)
    }

    fn lines(&self) -> impl Iterator<Item = CaptureEpoch> + '_ {
        std::iter::once(self.first.1).chain(self.others.iter().map(|(_, e)| *e))
    }
}

/// The index of an interned capture domain.
type DomainIx = u32;

/// The highest tokens a node has seen, per key; kept durably, so a restarted node never executes
/// below what it saw before the crash. Indexed pool → address so that the gate looks marks up
/// with borrowed keys, without building a key; capture domains are interned (a fleet has a few),
/// so a mark names its line by a small index instead of a string of its own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HighWater {
    domains: Vec<CaptureDomain>,
    /// Per pool, by address: chunks filled in address order as a capture goes, not a half-full
    /// B-tree ([`crate::chunked_map`]).
    marks: BTreeMap<String, crate::chunked_map::ChunkedMap<IpAddr, Marks>>,
}

impl HighWater {
    fn marks(&self, pool: &str, address: IpAddr) -> Option<&Marks> {
        self.marks.get(pool)?.get(&address)
    }

    fn domain(&self, domain: &CaptureDomain) -> Option<DomainIx> {
        let position = self.domains.iter().position(|d| d == domain)?;
        DomainIx::try_from(position).ok()
    }

    fn capture_seen(&self, marks: Option<&Marks>, domain: &CaptureDomain) -> CaptureEpoch {
        match (marks, self.domain(domain)) {
            (Some(marks), Some(domain)) => marks.capture(domain),
            _ => CaptureEpoch::NEVER,
        }
    }

    /// The marks of the action's key, with one lookup: the highest captureEpoch seen for its line
    /// and the highest ownershipEpoch seen for its (pool, address).
    #[must_use]
    pub fn seen(&self, action: &StampedAction) -> (CaptureEpoch, OwnershipEpoch) {
        let marks = self.marks(&action.pool, action.address);
        (
            self.capture_seen(marks, &action.capture_domain),
            marks.map_or(OwnershipEpoch::NEVER, |m| m.ownership),
        )
    }

    /// Raises the marks of one key; never lowers them.
    pub fn raise(
        &mut self,
        pool: &str,
        address: IpAddr,
        domain: &CaptureDomain,
        capture: CaptureEpoch,
        ownership: OwnershipEpoch,
    ) {
        let ix = match self.domain(domain) {
            Some(ix) => ix,
            None => {
                self.domains.push(domain.clone());
                // More than 2^32 distinct capture domains cannot be configured (they come from
                // validated pool specs), so the index always fits.
                DomainIx::try_from(self.domains.len() - 1).unwrap_or(DomainIx::MAX)
            }
        };
        // The pool's name is copied only the first time it is seen (a raise per call).
        if !self.marks.contains_key(pool) {
            self.marks.insert(pool.to_owned(), crate::chunked_map::ChunkedMap::new());
        }
        let addresses = self.marks.get_mut(pool).expect("inserted above");
        let marks = addresses.get_or_insert_with(address, || Marks {
            ownership: OwnershipEpoch::NEVER,
            first: (ix, CaptureEpoch::NEVER),
            others: thin_vec::ThinVec::new(),
        });
        #[cfg(debug_assertions)]
        let before = (marks.ownership, marks.capture(ix));
        marks.ownership = marks.ownership.max(ownership);
        if marks.first.0 == ix {
            marks.first.1 = marks.first.1.max(capture);
        } else {
            match marks.others.iter_mut().find(|(d, _)| *d == ix) {
                Some((_, epoch)) => *epoch = (*epoch).max(capture),
                None => crate::state::push_exact(&mut marks.others, (ix, capture)),
            }
        }
        #[cfg(debug_assertions)]
        {
            let after = (marks.ownership, marks.capture(ix));
            debug_assert!(
                after.0 >= before.0 && after.0 >= ownership,
                "the ownershipEpoch mark of {pool} {address} went from {:?} to {:?} (raised to {ownership:?})",
                before.0,
                after.0
            );
            debug_assert!(
                after.1 >= before.1 && after.1 >= capture,
                "the captureEpoch mark of {pool} {address} line {domain:?} went from {:?} to {:?} (raised to {capture:?})",
                before.1,
                after.1
            );
        }
    }

    /// The highest captureEpoch over every key (for reports and tests).
    #[must_use]
    pub fn highest_capture(&self) -> CaptureEpoch {
        self.marks.values().flat_map(|a| a.values()).flat_map(Marks::lines).max().unwrap_or_default()
    }
}

/// The fence rule. `high_water` is the node's durable memory of the highest tokens it saw.
pub fn check(action: &StampedAction, head: &impl HeadTokens, high_water: &HighWater) -> FenceVerdict {
    check_view(action, &head.view(action), high_water)
}

/// The fence rule against the head's tokens for the action, already read (a caller that needs
/// them afterwards, to raise its high-water marks, reads the head once).
pub fn check_view(action: &StampedAction, current: &HeadView<'_>, high_water: &HighWater) -> FenceVerdict {
    let marks = high_water.marks(&action.pool, action.address);
    let capture_seen = high_water.capture_seen(marks, &action.capture_domain);
    if action.capture_epoch != current.capture_epoch || action.capture_epoch < capture_seen {
        return FenceVerdict::Stale { reason: StaleReason::StaleEpoch };
    }
    if current.epoch_locking {
        let ownership_seen = marks.map_or(OwnershipEpoch::NEVER, |m| m.ownership);
        if action.ownership_epoch != current.ownership_epoch || action.ownership_epoch < ownership_seen {
            return FenceVerdict::Stale { reason: StaleReason::StaleOwnerEpoch };
        }
    }
    let is_current_holder = current.desired_holder == Some(&*action.holder);
    if action.verb.is_acquire() && !is_current_holder {
        return FenceVerdict::Stale { reason: StaleReason::HolderMismatch };
    }
    if !action.verb.is_acquire() && (is_current_holder || current.holder_desired_on_provider) {
        return FenceVerdict::Stale { reason: StaleReason::ReleaseOfCurrent };
    }
    FenceVerdict::Current
}

/// One high-water mark as a plain row: (pool, address, capture domain, captureEpoch,
/// ownershipEpoch). The ownershipEpoch is per (pool, address), so every row of one address carries
/// the same value.
pub type HighWaterRow<'a> = (&'a str, IpAddr, &'a CaptureDomain, CaptureEpoch, OwnershipEpoch);

impl HighWater {
    /// Every mark as a plain row, by pool and address, each address's lines in the order they were
    /// first seen. This is what the codec stores ([`crate::codec::encode_high_water`]): rows, not
    /// the interned in-memory layout; [`HighWater::raise`] of every row rebuilds the same marks.
    pub fn rows(&self) -> impl Iterator<Item = HighWaterRow<'_>> + '_ {
        self.marks.iter().flat_map(move |(pool, addresses)| {
            addresses.iter().flat_map(move |(address, marks)| {
                std::iter::once(marks.first).chain(marks.others.iter().copied()).map(move |(ix, capture)| {
                    let domain = usize::try_from(ix)
                        .ok()
                        .and_then(|ix| self.domains.get(ix))
                        .expect("a mark's domain index comes from `raise` and points into `domains`");
                    (pool.as_str(), *address, domain, capture, marks.ownership)
                })
            })
        })
    }
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
        elsewhere: bool,
    }

    impl HeadTokens for Head {
        fn view(&self, action: &StampedAction) -> HeadView<'_> {
            HeadView {
                capture_epoch: CaptureEpoch::from_stored(self.capture),
                ownership_epoch: OwnershipEpoch::from_stored(self.ownership),
                desired_holder: self.holder,
                epoch_locking: self.locking,
                holder_desired_on_provider: !action.verb.is_acquire() && self.elsewhere,
            }
        }
        fn is_approved(&self, _: &str) -> bool {
            false
        }
        fn stream_time_ms(&self) -> u64 {
            0
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
        let head = Head { capture: 3, ownership: 2, holder: Some("a"), locking: true, elsewhere: false };
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
        let nobody = Head { capture: 3, ownership: 2, holder: None, locking: true, elsewhere: false };
        assert_eq!(
            verdict(&action(Verb::ProxyArpAdd, "a", 3, 2), &nobody),
            stale(StaleReason::HolderMismatch)
        );
        // SPEC 13: the leaving node is the desired holder of the address through another pool
        // on the same provider; the NIC holds the address, so releasing it is refused.
        let moved = Head { holder: Some("b"), elsewhere: true, ..head };
        assert_eq!(
            verdict(&action(Verb::UnassignSecondaryIp, "a", 3, 2), &moved),
            stale(StaleReason::ReleaseOfCurrent)
        );
        assert_eq!(verdict(&action(Verb::AssignSecondaryIp, "b", 3, 2), &moved), FenceVerdict::Current);
    }

    #[test]
    fn the_high_water_mark_fences_a_lagging_head() {
        let head = Head { capture: 3, ownership: 2, holder: Some("a"), locking: true, elsewhere: false };
        let a = action(Verb::AssignSecondaryIp, "a", 3, 2);
        let mut hw = HighWater::default();
        hw.raise("p", a.address, &a.capture_domain, CaptureEpoch::from_stored(4), OwnershipEpoch::NEVER);
        assert_eq!(check(&a, &head, &hw), FenceVerdict::Stale { reason: StaleReason::StaleEpoch });
        let mut hw = HighWater::default();
        hw.raise("p", a.address, &a.capture_domain, CaptureEpoch::NEVER, OwnershipEpoch::from_stored(3));
        assert_eq!(check(&a, &head, &hw), FenceVerdict::Stale { reason: StaleReason::StaleOwnerEpoch });
    }

    #[test]
    fn marks_are_kept_per_line_and_never_lowered() {
        let a = action(Verb::AssignSecondaryIp, "a", 3, 2);
        let other = CaptureDomain::new("sim2", "g1");
        let unseen = CaptureDomain::new("sim3", "g1");
        let b = StampedAction { capture_domain: other.clone(), ..a.clone() };
        let c = StampedAction { capture_domain: unseen, ..a.clone() };
        let mut hw = HighWater::default();
        let epoch = CaptureEpoch::from_stored;
        hw.raise("p", a.address, &a.capture_domain, epoch(5), OwnershipEpoch::from_stored(2));
        hw.raise("p", a.address, &other, epoch(9), OwnershipEpoch::from_stored(1));
        hw.raise("p", a.address, &a.capture_domain, epoch(4), OwnershipEpoch::NEVER);
        hw.raise("p", a.address, &other, epoch(7), OwnershipEpoch::NEVER);
        let owner = OwnershipEpoch::from_stored(2);
        assert_eq!(
            (hw.seen(&a), hw.seen(&b), hw.seen(&c)),
            ((epoch(5), owner), (epoch(9), owner), (CaptureEpoch::NEVER, owner)),
            "a capture mark per line, one ownership mark per address"
        );
        assert_eq!(hw.highest_capture(), epoch(9));
        let elsewhere = StampedAction { pool: "q".into(), ..a.clone() };
        assert_eq!(hw.seen(&elsewhere), (CaptureEpoch::NEVER, OwnershipEpoch::NEVER));
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
