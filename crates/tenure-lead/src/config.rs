//! Election timing, in the Kubernetes manner: a leader renews every `retry_period`, steps down
//! when it has not renewed for `renew_deadline`, and a lease is free to take `lease_duration`
//! after its last renewal. `renew_deadline < lease_duration` is what makes stepping down happen
//! before anyone else can take over.

use std::time::Duration;

/// Default lease duration (Kubernetes' 15 s).
pub const LEASE_DURATION_DEFAULT: Duration = Duration::from_secs(15);
/// Default renew deadline (Kubernetes' 10 s).
pub const RENEW_DEADLINE_DEFAULT: Duration = Duration::from_secs(10);
/// Default retry period (Kubernetes' 2 s).
pub const RETRY_PERIOD_DEFAULT: Duration = Duration::from_secs(2);
/// Default jitter factor on the retry period (Kubernetes' 1.2 → up to +20 %).
pub const JITTER_DEFAULT: f64 = 0.2;

/// Election timing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ElectionConfig {
    /// How long a lease lasts after its last renewal.
    pub lease_duration: Duration,
    /// How long a leader keeps leading without a successful renewal.
    pub renew_deadline: Duration,
    /// Time between attempts to acquire or renew.
    pub retry_period: Duration,
    /// Each wait is `retry_period × (1 + jitter × random[0, 1))`.
    pub jitter: f64,
}

impl Default for ElectionConfig {
    fn default() -> Self {
        Self {
            lease_duration: LEASE_DURATION_DEFAULT,
            renew_deadline: RENEW_DEADLINE_DEFAULT,
            retry_period: RETRY_PERIOD_DEFAULT,
            jitter: JITTER_DEFAULT,
        }
    }
}

/// A timing that cannot be safe.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The renew deadline must be shorter than the lease, or a leader could outlive its lease.
    #[error(
        "renew deadline ({renew_deadline:?}) must be shorter than the lease duration ({lease_duration:?})"
    )]
    DeadlineNotBelowLease {
        /// Given deadline.
        renew_deadline: Duration,
        /// Given lease.
        lease_duration: Duration,
    },
    /// The retry period must be shorter than the renew deadline, or no renewal fits in it.
    #[error("retry period ({retry_period:?}) must be shorter than the renew deadline ({renew_deadline:?})")]
    RetryNotBelowDeadline {
        /// Given period.
        retry_period: Duration,
        /// Given deadline.
        renew_deadline: Duration,
    },
    /// Durations must be above zero and jitter within [0, 1].
    #[error("{0}")]
    OutOfRange(String),
}

impl ElectionConfig {
    /// Checks the ordering `retry_period < renew_deadline < lease_duration`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.retry_period.is_zero() {
            return Err(ConfigError::OutOfRange("retry period must be above zero".into()));
        }
        if self.lease_duration.as_secs() < 1 {
            return Err(ConfigError::OutOfRange(
                "lease duration must be at least 1s (etcd and Kubernetes leases count whole seconds)".into(),
            ));
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Err(ConfigError::OutOfRange(format!(
                "jitter must be within 0 and 1 (got {})",
                self.jitter
            )));
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(ConfigError::DeadlineNotBelowLease {
                renew_deadline: self.renew_deadline,
                lease_duration: self.lease_duration,
            });
        }
        if self.retry_period >= self.renew_deadline {
            return Err(ConfigError::RetryNotBelowDeadline {
                retry_period: self.retry_period,
                renew_deadline: self.renew_deadline,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kubernetes_and_valid() {
        let c = ElectionConfig::default();
        assert_eq!(
            (c.lease_duration.as_secs(), c.renew_deadline.as_secs(), c.retry_period.as_secs()),
            (15, 10, 2)
        );
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn unsafe_orderings_are_refused() {
        let c = ElectionConfig { renew_deadline: Duration::from_secs(15), ..ElectionConfig::default() };
        assert!(matches!(c.validate(), Err(ConfigError::DeadlineNotBelowLease { .. })));
        let c = ElectionConfig { retry_period: Duration::from_secs(10), ..ElectionConfig::default() };
        assert!(matches!(c.validate(), Err(ConfigError::RetryNotBelowDeadline { .. })));
        let c = ElectionConfig { jitter: 2.0, ..ElectionConfig::default() };
        assert!(matches!(c.validate(), Err(ConfigError::OutOfRange(_))));
    }
}
