//! Announcements repeated for an address a node holds (issue 25: `garpRefresh`, and one burst
//! when keepalived says MASTER again): a switch forgets which port an address is behind after
//! its MAC ageing time, and a router that was not MASTER for a while may find the switches
//! learned another router's MAC meanwhile. A refresh repeats the family's announcement verb
//! (`garp` on-prem, [`crate::model::VerbFamily::announcement`]) of the stamp this node holds the
//! address under.
//!
//! A refresh is not planned and not journaled: it repeats an executed action of the journal, so
//! it adds no entry, no `action-result` and no log event (a fleet of thousands of addresses
//! refreshed every minute would otherwise grow the log by that much). It is gated all the same,
//! with the one fence rule against the head, right before the call, so that a deposed holder never
//! announces; it is handed out only for a (provider, address) with no call in flight, and counts
//! as one until its result comes back, so no add or release of the address runs beside it; and
//! the calls in flight that the view fences are named for cancellation as any other
//! ([`NodeEngine::poll_stale_in_flight`]). When a refresh runs is the runtime's business (a
//! timer, keepalived's report): the rule of *what* may be refreshed is this file's.

use std::net::IpAddr;
use std::ops::Bound;

use super::{NodeEngine, ProviderAddress, StaleCall};
use crate::federation::Federation;
use crate::fence::{self, FenceVerdict, HeadTokens};
use crate::journal::{EntryState, JournalStore};
use crate::model::StampedAction;

impl<S: JournalStore> NodeEngine<S> {
    /// Up to `max` announcements to repeat now, each for an address this node holds on a
    /// provider whose family announces (on-prem), among those `wanted` accepts (provider,
    /// address), in (provider, address) order. An address qualifies when
    /// - this node holds it: its last executed holding verb is an acquire (the proxy entry is
    ///   ours), and it is captured;
    /// - the announcement of that acquire's stamp executed (a refresh repeats it and never stands
    ///   in for it: while it waits or failed, the journal's own entry goes first);
    /// - no call of (provider, address) is in flight (a refresh in flight included);
    /// - the repeated action passes the fence rule against `head` and the node's high-water marks
    ///   (a stale holder never announces).
    ///
    /// Each refresh handed out is in flight until [`NodeEngine::handle_refresh_result`]. Nothing
    /// durable changes: the marks were raised when the stamp itself passed the gate, and a refresh
    /// carries the same tokens.
    pub fn poll_refreshes(
        &mut self,
        view: &Federation,
        head: &impl HeadTokens,
        wanted: impl Fn(&str, IpAddr) -> bool,
        max: usize,
    ) -> Vec<StampedAction> {
        let mut refreshes = Vec::new();
        for (at, seq) in self.captured.holding_in((Bound::Unbounded, Bound::Unbounded)) {
            if refreshes.len() >= max {
                break;
            }
            let holding = &self.state.entries[&seq];
            if !holding.action.verb.is_acquire()
                || !self.captured.contains_key(at)
                || !wanted(&at.0, at.1)
                || self.call_in_flight(&at.0, at.1)
            {
                continue;
            }
            let Some(verb) = view.provider_kind(&at.0).and_then(|k| k.verb_family().announcement()) else {
                continue;
            };
            let action = holding.action.with_verb(verb);
            let announced = self
                .index
                .get(&action.idempotency_key(), &self.state.entries)
                .is_some_and(|seq| self.state.entries[&seq].state == EntryState::Executed);
            if announced && fence::check(&action, head, &self.state.high_water) == FenceVerdict::Current {
                refreshes.push(action);
            }
        }
        for action in &refreshes {
            self.busy.entry(action.address).or_default().push(action.provider.clone());
            self.refreshing.insert(super::provider_address(action), action.clone());
        }
        self.check_sets();
        refreshes
    }

    /// A refresh handed out by [`NodeEngine::poll_refreshes`] ended (whatever its outcome: a
    /// refresh is never retried, the next one is due at its time). Frees its (provider, address).
    /// Returns whether it was in flight.
    pub fn handle_refresh_result(&mut self, provider: &str, address: IpAddr) -> bool {
        let at: ProviderAddress = (crate::names::shared(provider), address);
        if self.refreshing.remove(&at).is_none() {
            return false;
        }
        self.refreshes_cancelling.remove(&at);
        self.release_busy_at(provider, address);
        self.check_sets();
        true
    }

    /// How many refreshes are in flight.
    #[must_use]
    pub fn refreshes_in_flight(&self) -> usize {
        self.refreshing.len()
    }

    /// The refreshes in flight that the fence rule refuses against `head` now, each named once
    /// (the refresh half of [`NodeEngine::poll_stale_in_flight`]).
    pub(super) fn poll_stale_refreshes(&mut self, head: &impl HeadTokens) -> Vec<StaleCall> {
        let mut stale = Vec::new();
        for (at, action) in &self.refreshing {
            if self.refreshes_cancelling.contains(at) {
                continue;
            }
            if let FenceVerdict::Stale { reason } = fence::check(action, head, &self.state.high_water) {
                stale.push((at.clone(), StaleCall { idempotency_key: action.idempotency_key(), reason }));
            }
        }
        self.refreshes_cancelling.extend(stale.iter().map(|(at, _)| at.clone()));
        stale.into_iter().map(|(_, call)| call).collect()
    }
}
