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
}
