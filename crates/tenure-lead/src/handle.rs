//! The leadership handle: what a leader-only component asks before it acts.

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
}

/// The writing side, held by the elector.
#[derive(Debug)]
pub struct LeadershipPublisher {
    state: watch::Sender<LeaderState>,
}

impl LeadershipHandle {
    /// A handle and its publisher, starting as not leader.
    #[must_use]
    pub fn new() -> (LeadershipPublisher, Self) {
        let (state, receiver) = watch::channel(LeaderState::following());
        (LeadershipPublisher { state }, Self { state: receiver })
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
        self.state.send_if_modified(|current| {
            if *current == state {
                false
            } else {
                *current = state;
                true
            }
        })
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
