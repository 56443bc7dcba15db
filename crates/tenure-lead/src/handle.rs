//! The leadership handle: what a leader-only component asks before it acts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;

use tenure_core::model::LeaderEpoch;

/// This process's view of an election.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaderState {
    /// Whether this process leads now.
    pub leader: bool,
    /// The term it leads under; `None` when not leader.
    pub epoch: Option<LeaderEpoch>,
}

impl LeaderState {
    /// Leading under `epoch`.
    #[must_use]
    pub fn leading(epoch: LeaderEpoch) -> Self {
        Self { leader: true, epoch: Some(epoch) }
    }

    /// Not leading.
    #[must_use]
    pub fn following() -> Self {
        Self { leader: false, epoch: None }
    }
}

/// A cheap, cloneable view of the election, updated by the elector.
#[derive(Clone, Debug)]
pub struct LeadershipHandle {
    state: watch::Receiver<LeaderState>,
    counters: Arc<Counters>,
}

/// The writing side, held by the elector.
#[derive(Debug)]
pub struct LeadershipPublisher {
    state: watch::Sender<LeaderState>,
    counters: Arc<Counters>,
}

/// What an operator graphs about an election (see [`LeadershipHandle::stats`]).
#[derive(Debug, Default)]
struct Counters {
    transitions: AtomicU64,
    failed_attempts: AtomicU64,
    last_renewal_unix_ms: AtomicU64,
    highest_term_seen: AtomicU64,
}

/// A snapshot of an election's counters, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ElectionStats {
    /// Changes of this process's state published (became leader, stepped down, new term).
    pub transitions: u64,
    /// Attempts to acquire or renew that failed (an error, or no answer within the budget).
    pub failed_attempts: u64,
    /// Wall-clock time (ms since the Unix epoch) of the start of the last attempt that led; 0
    /// when it never led.
    pub last_renewal_unix_ms: u64,
    /// The highest term this process has seen in the election's store, led or not (0: none yet).
    pub highest_term_seen: u64,
}

impl LeadershipHandle {
    /// A handle and its publisher, starting as not leader.
    #[must_use]
    pub fn new() -> (LeadershipPublisher, Self) {
        let (state, receiver) = watch::channel(LeaderState::following());
        let counters = Arc::new(Counters::default());
        (LeadershipPublisher { state, counters: counters.clone() }, Self { state: receiver, counters })
    }

    /// The election's counters now.
    #[must_use]
    pub fn stats(&self) -> ElectionStats {
        ElectionStats {
            transitions: self.counters.transitions.load(Ordering::Relaxed),
            failed_attempts: self.counters.failed_attempts.load(Ordering::Relaxed),
            last_renewal_unix_ms: self.counters.last_renewal_unix_ms.load(Ordering::Relaxed),
            highest_term_seen: self.counters.highest_term_seen.load(Ordering::Relaxed),
        }
    }

    /// Whether this process leads now.
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.state.borrow().leader
    }

    /// The term this process leads under, if it leads.
    #[must_use]
    pub fn leader_epoch(&self) -> Option<LeaderEpoch> {
        self.state.borrow().epoch
    }

    /// The current state.
    #[must_use]
    pub fn state(&self) -> LeaderState {
        *self.state.borrow()
    }

    /// A watch of changes (each change of leader flag or epoch is published once).
    #[must_use]
    pub fn watch(&self) -> watch::Receiver<LeaderState> {
        self.state.clone()
    }
}

impl LeadershipPublisher {
    /// Publishes `state` if it differs from the current one; returns whether it did.
    pub fn publish(&self, state: LeaderState) -> bool {
        let changed = self.state.send_if_modified(|current| {
            if *current == state {
                false
            } else {
                *current = state;
                true
            }
        });
        if changed {
            self.counters.transitions.fetch_add(1, Ordering::Relaxed);
        }
        changed
    }

    /// Counts an attempt that failed (an error, or no answer in time).
    pub fn record_failed_attempt(&self) {
        self.counters.failed_attempts.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a term seen in the election's store (the backend's highest, after an attempt).
    pub fn record_term_seen(&self, term: u64) {
        self.counters.highest_term_seen.fetch_max(term, Ordering::Relaxed);
    }

    /// Records a successful lead or renewal whose attempt started at `unix_ms`.
    pub fn record_renewal(&self, unix_ms: u64) {
        self.counters.last_renewal_unix_ms.fetch_max(unix_ms, Ordering::Relaxed);
    }

    /// The state last published.
    #[must_use]
    pub fn current(&self) -> LeaderState {
        *self.state.borrow()
    }
}

/// A publisher that goes away — its elector finished, panicked or was aborted — leaves every
/// handle reading not-leader: nothing renews the lease any more, so nothing may act on it.
impl Drop for LeadershipPublisher {
    fn drop(&mut self) {
        self.state.send_replace(LeaderState::following());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_published_once() {
        let (publisher, handle) = LeadershipHandle::new();
        let mut watch = handle.watch();
        assert!(!handle.is_leader());
        assert!(publisher.publish(LeaderState::leading(LeaderEpoch::from_stored(3))));
        assert!(
            !publisher.publish(LeaderState::leading(LeaderEpoch::from_stored(3))),
            "a retry re-emits nothing"
        );
        assert!(watch.has_changed().expect("open"));
        assert_eq!(handle.leader_epoch().map(LeaderEpoch::get), Some(3));
        watch.mark_unchanged();
        assert!(!watch.has_changed().expect("open"));
    }

    #[tokio::test]
    async fn a_handle_reads_not_leader_once_its_elector_panicked_or_was_aborted() {
        let (publisher, handle) = LeadershipHandle::new();
        let task = tokio::spawn(async move {
            publisher.publish(LeaderState::leading(LeaderEpoch::from_stored(7)));
            panic!("an elector's bug");
        });
        assert!(task.await.is_err(), "the task panicked");
        assert!(!handle.is_leader(), "a panicked elector leaves no leader behind");

        let (publisher, handle) = LeadershipHandle::new();
        let (led, leading) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            publisher.publish(LeaderState::leading(LeaderEpoch::from_stored(8)));
            let _ = led.send(());
            std::future::pending::<()>().await;
            drop(publisher);
        });
        leading.await.expect("led");
        assert!(handle.is_leader());
        task.abort();
        assert!(task.await.is_err_and(|e| e.is_cancelled()));
        assert!(!handle.is_leader(), "an aborted elector leaves no leader behind");
    }
}
