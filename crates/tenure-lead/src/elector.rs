//! The campaign loop: try to acquire or renew every `retry_period` (with jitter); publish every
//! change of leadership once; step down as soon as `renew_deadline` has passed since the start of
//! the last successful renewal — which is before the lease can expire in the store, so a deposed
//! leader stops before a new leader's term begins to be used. On shutdown: step down, then
//! release.
//!
//! The clock here is the process's monotonic clock and only decides liveness (when to retry,
//! when to give up). Safety comes from the term: a backend increments it on every takeover.

use std::time::Duration;

use rand::Rng;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::{Attempt, BackendError, LeaseBackend};
use crate::config::ElectionConfig;
use crate::handle::{LeaderState, LeadershipHandle, LeadershipPublisher};

/// How long a release may take on shutdown before it is abandoned (the lease expires anyway).
pub const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// Starts campaigning. The handle reflects the state; the task ends on `shutdown` (after stepping
/// down and releasing), or with an error when the backend reports a term that went back.
pub fn spawn<B: LeaseBackend>(
    backend: B,
    config: ElectionConfig,
    shutdown: CancellationToken,
) -> (LeadershipHandle, JoinHandle<Result<(), BackendError>>) {
    let (publisher, handle) = LeadershipHandle::new();
    let task = tokio::spawn(campaign(backend, config, publisher, shutdown));
    (handle, task)
}

async fn campaign<B: LeaseBackend>(
    mut backend: B,
    config: ElectionConfig,
    publisher: LeadershipPublisher,
    shutdown: CancellationToken,
) -> Result<(), BackendError> {
    let mut last_renewal: Option<Instant> = None;
    let backend_name = backend.name();
    let result = loop {
        let started = Instant::now();
        let started_unix_ms = unix_ms_now();
        // While leading, an attempt may not outlast the renew deadline.
        let budget = match (publisher.current().leader, last_renewal) {
            (true, Some(at)) => (at + config.renew_deadline).saturating_duration_since(started),
            _ => config.retry_period,
        };
        let attempt = tokio::select! {
            () = shutdown.cancelled() => break Ok(()),
            attempt = tokio::time::timeout(budget, backend.try_acquire_or_renew()) => attempt,
        };
        publisher.record_term_seen(backend.highest_seen());
        match attempt {
            Ok(Ok(Attempt::Leader { term })) => {
                publisher.record_term_seen(term.get());
                last_renewal = Some(started);
                publisher.record_renewal(started_unix_ms);
                if publisher.publish(LeaderState::leading(term)) {
                    tracing::info!(backend = backend_name, term = term.get(), "leading");
                }
            }
            Ok(Ok(Attempt::Follower { holder })) => {
                last_renewal = None;
                if publisher.publish(LeaderState::following()) {
                    tracing::info!(backend = backend_name, holder = holder.as_deref(), "following");
                }
            }
            Ok(Err(fatal @ (BackendError::TermWentBack { .. } | BackendError::TermOverflow { .. }))) => {
                // Returned to the caller, which reports it (tenure elect prints it as its last line).
                tracing::debug!(error = %fatal, "election stopped");
                break Err(fatal);
            }
            // An error or a timeout is a renewal that did not happen; the deadline decides.
            Ok(Err(error @ BackendError::Unavailable { .. })) => {
                publisher.record_failed_attempt();
                tracing::warn!(error = %error, "acquire or renew failed");
            }
            Err(_) => {
                publisher.record_failed_attempt();
                tracing::warn!(
                    backend = backend_name,
                    budget_ms = u64::try_from(budget.as_millis()).unwrap_or(u64::MAX),
                    "acquire or renew got no answer in time"
                );
            }
        }
        let leading = publisher.current().leader;
        let deadline = last_renewal.map(|at| at + config.renew_deadline);
        if leading && deadline.is_none_or(|d| Instant::now() >= d) {
            tracing::warn!(
                backend = backend_name,
                renew_deadline_ms = u64::try_from(config.renew_deadline.as_millis()).unwrap_or(u64::MAX),
                "no renewal within the renew deadline: stepping down"
            );
            publisher.publish(LeaderState::following());
            last_renewal = None;
        }
        let mut wait = jittered(config.retry_period, config.jitter);
        if let (true, Some(d)) = (publisher.current().leader, deadline) {
            wait = wait.min(d.saturating_duration_since(Instant::now()));
        }
        tokio::select! {
            () = shutdown.cancelled() => break Ok(()),
            () = tokio::time::sleep(wait) => {}
        }
    };
    publisher.publish(LeaderState::following());
    let _ = tokio::time::timeout(RELEASE_TIMEOUT, backend.release()).await;
    result
}

fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn jittered(period: Duration, jitter: f64) -> Duration {
    if jitter <= 0.0 {
        return period;
    }
    period.mul_f64(1.0 + jitter * rand::rng().random::<f64>())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use tenure_core::model::LeaderEpoch;

    use super::*;

    /// A test double: leads under term 7 while `renewing` is true, errors otherwise.
    struct Flaky {
        renewing: Arc<AtomicBool>,
        attempts: Arc<AtomicU64>,
    }

    impl LeaseBackend for Flaky {
        async fn try_acquire_or_renew(&mut self) -> Result<Attempt, BackendError> {
            self.attempts.fetch_add(1, Ordering::SeqCst);
            if self.renewing.load(Ordering::SeqCst) {
                Ok(Attempt::Leader { term: LeaderEpoch::from_stored(7) })
            } else {
                Err(BackendError::Unavailable { backend: "flaky", message: "unreachable".into() })
            }
        }
        async fn release(&mut self) -> Result<(), BackendError> {
            Ok(())
        }
        fn name(&self) -> &'static str {
            "flaky"
        }
    }

    fn fast() -> ElectionConfig {
        ElectionConfig {
            lease_duration: Duration::from_secs(3),
            renew_deadline: Duration::from_millis(400),
            retry_period: Duration::from_millis(50),
            jitter: 0.2,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_that_cannot_renew_steps_down_at_the_deadline() {
        let renewing = Arc::new(AtomicBool::new(true));
        let attempts = Arc::new(AtomicU64::new(0));
        let shutdown = CancellationToken::new();
        let backend = Flaky { renewing: renewing.clone(), attempts: attempts.clone() };
        let (handle, task) = spawn(backend, fast(), shutdown.clone());
        let mut watch = handle.watch();
        watch.wait_for(|s| s.leader).await.expect("open");
        assert_eq!(handle.leader_epoch(), Some(LeaderEpoch::from_stored(7)));
        let cut = Instant::now();
        renewing.store(false, Ordering::SeqCst);
        let led = handle.stats();
        assert_eq!(led.transitions, 1, "became leader once");
        assert_eq!(led.failed_attempts, 0);
        assert!(led.last_renewal_unix_ms > 0, "a renewal is timestamped");
        watch.wait_for(|s| !s.leader).await.expect("open");
        let after = cut.elapsed();
        assert!(after <= Duration::from_millis(400), "stepped down {after:?} after the last renewal");
        let lost = handle.stats();
        assert_eq!(lost.transitions, 2, "and stepped down once");
        assert!(lost.failed_attempts >= 1, "the failed renewals are counted: {lost:?}");
        assert!(lost.last_renewal_unix_ms >= led.last_renewal_unix_ms);
        shutdown.cancel();
        task.await.expect("joins").expect("clean");
        assert!(attempts.load(Ordering::SeqCst) > 3);
    }

    #[tokio::test(start_paused = true)]
    async fn renewal_keeps_the_epoch_and_publishes_nothing_new() {
        let renewing = Arc::new(AtomicBool::new(true));
        let shutdown = CancellationToken::new();
        let backend = Flaky { renewing, attempts: Arc::new(AtomicU64::new(0)) };
        let (handle, task) = spawn(backend, fast(), shutdown.clone());
        let mut watch = handle.watch();
        watch.wait_for(|s| s.leader).await.expect("open");
        watch.mark_unchanged();
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(!watch.has_changed().expect("open"), "many renewals, no transition re-emitted");
        shutdown.cancel();
        task.await.expect("joins").expect("clean");
        assert!(!handle.is_leader());
    }
}
