//! The highest plausible epoch: an upper bound on the epochs a sink lets raise its mark.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tenure_core::model::LeaderEpoch;

use crate::handle::LeadershipHandle;

type Source = dyn Fn() -> Option<LeaderEpoch> + Send + Sync;

/// Where a [`FencedSink`](super::FencedSink) learns the highest epoch a genuine leader can hold
/// now. A stamp above it is refused ([`Rejected::ImplausibleEpoch`](super::Rejected)) and does
/// not raise the mark: without a bound, one stamp at `u64::MAX` from any holder of the key would
/// raise the durable mark past every term the backend will ever issue and block the sink for
/// good. `None` from the source means "not known yet": the sink then applies no bound (as a sink
/// without a ceiling). The sink asks only when an epoch would raise its mark, never on the
/// steady path of one term.
#[derive(Clone)]
pub struct EpochCeiling {
    source: Arc<Source>,
}

impl fmt::Debug for EpochCeiling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EpochCeiling(now {:?})", self.highest())
    }
}

impl EpochCeiling {
    /// A bound that never moves: for a test, or a deployment that knows its backend's term.
    #[must_use]
    pub fn fixed(highest: LeaderEpoch) -> Self {
        Self::from_fn(move || Some(highest))
    }

    /// A bound the caller computes, e.g. from the term an election's backend reports (the etcd
    /// term key, the Lease's `tenure.dev/leader-term` annotation) plus a margin for the takeovers
    /// the caller has not observed yet.
    #[must_use]
    pub fn from_fn(source: impl Fn() -> Option<LeaderEpoch> + Send + Sync + 'static) -> Self {
        Self { source: Arc::new(source) }
    }

    /// The highest term `leadership`'s election has seen in its store — as leader or follower
    /// (every attempt reads it; [`LeadershipHandle::stats`]) — when the sink asked, raised by
    /// `slack_terms` (takeovers elsewhere since this process last read the store: about one per
    /// retry period at most); `None` until the election has seen a term. The highest is
    /// remembered, so losing leadership does not lower the bound. A stamp refused by it is
    /// refused for now, not for good: the bound rises as the election sees later terms.
    #[must_use]
    pub fn following(leadership: LeadershipHandle, slack_terms: u64) -> Self {
        let highest_seen = AtomicU64::new(0);
        Self::from_fn(move || {
            if let Some(epoch) = leadership.leader_epoch() {
                highest_seen.fetch_max(epoch.get(), Ordering::SeqCst);
            }
            highest_seen.fetch_max(leadership.stats().highest_term_seen, Ordering::SeqCst);
            let seen = LeaderEpoch::from_stored(highest_seen.load(Ordering::SeqCst));
            if seen == LeaderEpoch::NEVER {
                return None;
            }
            Some(seen.raised_by(slack_terms).unwrap_or(LeaderEpoch::from_stored(u64::MAX)))
        })
    }

    /// The bound now (`None`: unknown, no bound).
    #[must_use]
    pub fn highest(&self) -> Option<LeaderEpoch> {
        (self.source)()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_bounds_by_the_term_its_election_has_seen_not_by_what_it_led() {
        let (publisher, handle) = LeadershipHandle::new();
        let ceiling = EpochCeiling::following(handle, 2);
        assert_eq!(ceiling.highest(), None, "nothing seen yet: no bound");
        publisher.record_term_seen(5);
        assert_eq!(ceiling.highest(), Some(LeaderEpoch::from_stored(7)), "seen as a follower, plus slack");
        publisher.record_term_seen(9);
        assert_eq!(ceiling.highest(), Some(LeaderEpoch::from_stored(11)), "it rises with the store");
    }
}
