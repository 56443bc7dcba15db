//! What an election backend does: one attempt to acquire or renew, and a release.

use std::future::Future;
use std::time::Duration;

use tenure_core::model::LeaderEpoch;

/// How long connecting to a backend's store and each request may take (etcd, Kubernetes).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// A lease duration in the whole seconds etcd leases and Kubernetes Leases store, rounded up (the
/// renew deadline was validated against the exact duration, so the stored lease must not be
/// shorter), at least 1.
#[must_use]
pub fn lease_whole_seconds(duration: Duration) -> u64 {
    duration.as_secs().saturating_add(u64::from(duration.subsec_nanos() > 0)).max(1)
}

/// The outcome of one attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// This process holds the lease under `term` (incremented on takeover, kept on renewal).
    Leader {
        /// The term.
        term: LeaderEpoch,
    },
    /// Someone else holds it (or nobody could be determined).
    Follower {
        /// The current holder, when known.
        holder: Option<String>,
    },
}

/// Why an attempt could not complete. The elector treats every error as "not renewed".
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The store could not be reached or answered with an error.
    #[error("{backend}: {message}")]
    Unavailable {
        /// Backend name.
        backend: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The store holds a term lower than one this process has already seen: refusing to go on.
    #[error("{backend}: term went back from {seen} to {found}; refusing to lead under a lower epoch")]
    TermWentBack {
        /// Backend name.
        backend: &'static str,
        /// Highest term seen before.
        seen: u64,
        /// The lower term found.
        found: u64,
    },
    /// The term is at `u64::MAX`: there is no next one, and wrapping to 0 would reuse every term.
    #[error(
        "{backend}: term {term} has no successor (u64::MAX); refusing to lead; reset the election's store"
    )]
    TermOverflow {
        /// Backend name.
        backend: &'static str,
        /// The term found.
        term: u64,
    },
}

/// `error` and each of its causes on one line (the rule lives in `tenure_core::report`).
pub use tenure_core::report::with_causes;

/// The term after `term`, or [`BackendError::TermOverflow`]: never a wrap to 0.
pub fn next_term(backend: &'static str, term: u64) -> Result<u64, BackendError> {
    term.checked_add(1).ok_or(BackendError::TermOverflow { backend, term })
}

/// One election backend: a lease bound to this process's identity, and a term counter.
///
/// Contract: `Leader { term }` is returned only when this process holds the lease *now*; the
/// term increments by exactly one on every takeover (by anyone) and is unchanged on renewal;
/// two processes never hold the same term.
pub trait LeaseBackend: Send + 'static {
    /// Tries to take the lease if it is free, or to renew it if this process holds it.
    fn try_acquire_or_renew(&mut self) -> impl Future<Output = Result<Attempt, BackendError>> + Send;

    /// Gives the lease up, if held (best effort: the lease expires anyway).
    fn release(&mut self) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// A short name for logs and errors.
    fn name(&self) -> &'static str;

    /// The highest term this contender has seen, held or found in the store (0 before any).
    /// [`crate::memory::Remembering`] keeps it durably. The default reports nothing beyond the
    /// terms it leads under, which `Remembering` records anyway.
    fn highest_seen(&self) -> u64 {
        0
    }

    /// Raises the highest term seen to at least `term` — the floor a restarted node loads from
    /// its state directory — so that a lower term found in the store from now on is
    /// [`BackendError::TermWentBack`], refused *before* anything is written. A backend that keeps
    /// the default (nothing) is still caught after the fact: `Remembering` refuses a lead under a
    /// term below the floor before it is published.
    fn remember_at_least(&mut self, term: u64) {
        let _ = term;
    }
}
