//! How long a failed action waits before the sweep approves it again: exponential backoff from
//! a base interval, doubling per failed attempt, capped, with a deterministic jitter.
//!
//! A failed entry is retried by the sweep while it is current (level-triggered, like any
//! reconcile: [`crate::node::NodeEngine::reconcile`]). Without a backoff a hook that always
//! fails runs at every reconcile; with one, attempt `n` (1-based, the calls made so far) is
//! followed by a wait of
//!
//! ```text
//!   nominal(n) = min(max, base × 2^(n−1))          delay(n) = nominal(n) − jitter(key, n)
//!   jitter(key, n) = xxh3_64_with_seed(key, n) mod (nominal(n) / 4 + 1)
//! ```
//!
//! in stream time from the attempt's gate, so that the delay lies in `[¾·nominal, nominal]`.
//! The jitter spreads the retries of many actions that failed together (a provider outage)
//! without a random generator: the core is deterministic, and the simulator replays a seed
//! to the same retries. While the doubled nominal stays below the cap, delays strictly grow
//! (the lowest of `n + 1`, `1.5·nominal(n)`, is above the highest of `n`).
//!
//! The backoff only spaces attempts; each attempt is gated against the head again and, in the
//! runtime, bounded by its own head confirmation plus `actionTimeout` (SPEC 9). A fenced entry
//! is never retried, whatever its backoff says.

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The longest wait between two attempts of one action, unless the base interval is longer
/// (then the base): a minute, which an operator reading "retrying" expects to see move.
pub const RETRY_BACKOFF_MAX_MS: u64 = 60_000;

/// The jitter takes at most `1 / RETRY_JITTER_DIVISOR` off a nominal delay.
pub const RETRY_JITTER_DIVISOR: u64 = 4;

/// The backoff schedule of one node's failed actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryBackoff {
    /// The wait after the first failed attempt (ms); 0: no backoff, a failure is retried at the
    /// next sweep (replay, whose steps are explicit).
    base_ms: u64,
    /// The cap on every wait (ms), at least `base_ms`.
    max_ms: u64,
}

impl RetryBackoff {
    /// No backoff: a failed action is retried at the next sweep.
    pub const NONE: Self = Self { base_ms: 0, max_ms: 0 };

    /// Waits from `base_ms` after the first failure, doubling, capped at
    /// [`RETRY_BACKOFF_MAX_MS`] (or at `base_ms`, when that is longer).
    #[must_use]
    pub fn from_base(base_ms: u64) -> Self {
        Self { base_ms, max_ms: base_ms.max(RETRY_BACKOFF_MAX_MS) }
    }

    /// The wait after the first failure (ms).
    #[must_use]
    pub fn base_ms(&self) -> u64 {
        self.base_ms
    }

    /// The cap on every wait (ms).
    #[must_use]
    pub fn max_ms(&self) -> u64 {
        self.max_ms
    }

    /// The wait after `attempts` calls, before jitter: `min(max, base × 2^(attempts−1))`; 0
    /// for an action never attempted.
    #[must_use]
    pub fn nominal_ms(&self, attempts: u32) -> u64 {
        let Some(doublings) = attempts.checked_sub(1) else { return 0 };
        let factor = 1_u64.checked_shl(doublings).unwrap_or(u64::MAX);
        self.base_ms.saturating_mul(factor).min(self.max_ms)
    }

    /// The wait after `attempts` calls of the action keyed `idempotency_key`: the nominal wait
    /// less a jitter of at most a quarter of it, a function of the key and the attempt alone.
    #[must_use]
    pub fn delay_ms(&self, idempotency_key: &str, attempts: u32) -> u64 {
        let nominal = self.nominal_ms(attempts);
        let spread = nominal / RETRY_JITTER_DIVISOR;
        if spread == 0 {
            return nominal;
        }
        let hash = xxh3_64_with_seed(idempotency_key.as_bytes(), u64::from(attempts));
        nominal - hash % (spread + 1)
    }

    /// When an action whose last of `attempts` calls was gated at stream time
    /// `last_attempt_ms` may be tried again.
    #[must_use]
    pub fn next_attempt_ms(&self, idempotency_key: &str, attempts: u32, last_attempt_ms: u64) -> u64 {
        last_attempt_ms.saturating_add(self.delay_ms(idempotency_key, attempts))
    }
}

impl Default for RetryBackoff {
    fn default() -> Self {
        Self::NONE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: &str = "edge/10.0.0.10/acquire/a/hook/lan0/owner:1:epoch:1";

    #[test]
    fn the_schedule_doubles_from_the_base_up_to_the_cap() {
        let backoff = RetryBackoff::from_base(5_000);
        let nominal: Vec<u64> = (0..8).map(|n| backoff.nominal_ms(n)).collect();
        assert_eq!(nominal, [0, 5_000, 10_000, 20_000, 40_000, 60_000, 60_000, 60_000]);
        assert_eq!(backoff.nominal_ms(u32::MAX), 60_000, "no overflow far out");
        // A base above the cap is the cap: retries never come more often than the base.
        assert_eq!(RetryBackoff::from_base(120_000).nominal_ms(1), 120_000);
        assert_eq!(RetryBackoff::from_base(120_000).nominal_ms(9), 120_000);
        assert_eq!(RetryBackoff::NONE.delay_ms(KEY, 7), 0, "no backoff: retried at the next sweep");
    }

    #[test]
    fn the_jitter_differs_between_keys_and_attempts_but_not_between_runs() {
        let backoff = RetryBackoff::from_base(5_000);
        let delays: Vec<u64> = (1..=6).map(|n| backoff.delay_ms(KEY, n)).collect();
        let again: Vec<u64> = (1..=6).map(|n| backoff.delay_ms(KEY, n)).collect();
        assert_eq!(delays, again, "deterministic");
        let other: Vec<u64> = (1..=6).map(|n| backoff.delay_ms("edge/10.0.0.11/x", n)).collect();
        assert_ne!(delays, other, "another key waits differently");
        assert!(delays.iter().zip(1..).any(|(d, n)| *d != backoff.nominal_ms(n)), "{delays:?}");
        assert_eq!(backoff.next_attempt_ms(KEY, 2, 1_000), 1_000 + delays[1]);
    }

    proptest! {
        #[test]
        fn delays_are_bounded_capped_and_grow_until_the_cap(
            key in "[a-z0-9./:-]{1,80}",
            base_ms in 1_u64..200_000,
            attempts in 1_u32..80,
        ) {
            let backoff = RetryBackoff::from_base(base_ms);
            let nominal = backoff.nominal_ms(attempts);
            let delay = backoff.delay_ms(&key, attempts);
            prop_assert!(delay <= nominal && delay <= backoff.max_ms());
            prop_assert!(delay >= nominal - nominal / RETRY_JITTER_DIVISOR, "{delay} of {nominal}");
            prop_assert!(delay > 0, "a backoff with a base always waits");
            prop_assert_eq!(delay, backoff.delay_ms(&key, attempts), "deterministic");
            let next_nominal = backoff.nominal_ms(attempts + 1);
            prop_assert!(next_nominal >= nominal, "the nominal schedule never goes down");
            if next_nominal == 2 * nominal {
                prop_assert!(backoff.delay_ms(&key, attempts + 1) > delay, "below the cap, waits grow");
            }
        }
    }
}
