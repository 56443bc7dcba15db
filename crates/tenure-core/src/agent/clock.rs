//! The clock-lead rule (`docs/architecture.md`, "Time in a fleet"): an agent never stamps an
//! event more than `lead_max` ahead of the lower median of the clocks it can see — its own and
//! each other node's, projected to now from that node's newest heartbeat stamp by this host's
//! monotonic clock. One agent whose clock runs ahead cannot drag stream time (and so everyone's
//! liveness) with it while most clocks are right; a clock behind is harmless, since a heartbeat
//! counts as of the stream time the log took it (SPEC 3).
//!
//! Sans-IO: both clocks are passed in, in milliseconds — the host's wall clock (`wall_ms`, what a
//! stamp would be without the rule) and a monotonic clock (`mono_ms`, any origin, never going
//! back) to project the peers' stamps by. The agent passes its host's clocks; the simulator its
//! stream time and each node's skewed view of it.

use std::collections::{BTreeMap, BTreeSet};

use crate::federation::Federation;

/// The `at` of every event an agent stamps: one per agent (the agent's loop and its heartbeat
/// thread share one, behind a lock), so that stamps only rise.
#[derive(Debug)]
pub struct Stamper {
    /// Other nodes' clocks.
    pub peers: PeerClocks,
    /// The `at` of the last event this agent stamped.
    last_ms: u64,
    /// Stamps the clock-lead rule held back (`tenure_stamps_capped_total`).
    capped: u64,
}

/// One stamp: its `at`, and how far the rule held it back when it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// The event's `at`.
    pub at_ms: u64,
    /// How far ahead of the cap this host's clock ran, when the rule held the stamp back.
    pub held_back_ms: Option<u64>,
    /// Whether the stamps found in the log at start still voted, unprojected (right after a
    /// start: they are as old as the peers' last heartbeat).
    pub baseline: bool,
}

impl Stamper {
    /// A stamper with no stamp yet.
    #[must_use]
    pub fn new(peers: PeerClocks) -> Self {
        Self { peers, last_ms: 0, capped: 0 }
    }

    /// The `at` of a new event, given this host's clocks now: held to the clock-lead rule, and
    /// above the last stamp (an inventory read stamped at its start must come strictly before
    /// every confirmation this agent appends after it). Not raised to the stream time: a
    /// heartbeat counts as of the stream time the log took it (SPEC 3), so a clock behind makes
    /// no node look old, and echoing a stream time that one fast clock pushed would let it drag
    /// every stamp along.
    pub fn stamp(&mut self, wall_ms: u64, mono_ms: u64) -> Stamp {
        let (at_ms, held_back_ms) = match self.peers.cap(wall_ms, mono_ms) {
            Some(cap) if cap < wall_ms => {
                self.capped += 1;
                (cap, Some(wall_ms - cap))
            }
            _ => (wall_ms, None),
        };
        let at_ms = at_ms.max(self.last_ms.saturating_add(1));
        self.last_ms = at_ms;
        let baseline = self.peers.baseline_until_ms.is_some_and(|until| mono_ms < until);
        Stamp { at_ms, held_back_ms, baseline }
    }

    /// Whether `stamp` (the last one) is one to tell the operator about: the first one held back,
    /// then only every power of two of them. Right after a start, while the log's stamps vote
    /// unprojected, only a hold-back of more than twice the lead: those stamps are up to a
    /// heartbeat interval old on an honest fleet, so a host in step with its peers is held back
    /// by up to that much (a new agent beside live peers warned of a clock `124 ms` ahead).
    #[must_use]
    pub fn worth_saying(&self, stamp: &Stamp) -> bool {
        let Some(held_back_ms) = stamp.held_back_ms else { return false };
        if stamp.baseline && held_back_ms <= 2 * self.peers.lead_max_ms {
            return false;
        }
        self.capped == 1 || self.capped.is_power_of_two()
    }

    /// Stamps the rule held back so far.
    #[must_use]
    pub fn capped(&self) -> u64 {
        self.capped
    }
}

/// Other nodes' clocks, as their heartbeats showed them.
#[derive(Debug)]
pub struct PeerClocks {
    /// Node → (its newest heartbeat stamp, the monotonic time this agent first saw that stamp;
    /// `None` for a stamp already in the log when the agent started: it says nothing about that
    /// clock now).
    seen: BTreeMap<String, (u64, Option<u64>)>,
    /// How far ahead of the median an agent may stamp.
    lead_max_ms: u64,
    /// A node not heard from for this long no longer votes.
    window_ms: u64,
    /// Until then (monotonic), the stamps found in the log at start vote as they are (not
    /// projected): an agent whose clock runs ahead must not stamp its first events before it
    /// heard a peer. After it they vote only once they move (after a fleet-wide restart they are
    /// as old as the downtime, and projecting them would hold every agent back).
    baseline_until_ms: Option<u64>,
}

impl PeerClocks {
    /// No peer heard yet; stamps at most `lead_max_ms` ahead of the median; a peer silent for
    /// `window_ms` no longer votes.
    #[must_use]
    pub fn new(lead_max_ms: u64, window_ms: u64) -> Self {
        Self { seen: BTreeMap::new(), lead_max_ms, window_ms, baseline_until_ms: None }
    }

    /// Takes note of the stamps in the log when the agent starts: they vote, unprojected, until
    /// monotonic time `until_ms` (a few heartbeat intervals: time to hear the live peers), then
    /// only once they move.
    pub fn baseline(&mut self, view: &Federation, own: &BTreeSet<String>, until_ms: u64) {
        self.baseline_until_ms = Some(until_ms);
        for node in view.nodes().iter().filter(|n| !own.contains(&n.spec.name)) {
            if let Some(stamp) = node.heartbeat_stamp_ms {
                self.seen.insert(node.spec.name.clone(), (stamp, None));
            }
        }
    }

    /// Takes note of the newest heartbeat stamps of the nodes this agent does not run, seen at
    /// monotonic time `mono_ms`.
    pub fn observe(&mut self, view: &Federation, own: &BTreeSet<String>, mono_ms: u64) {
        for node in view.nodes() {
            let name = &node.spec.name;
            if own.contains(name) {
                continue;
            }
            let Some(stamp) = node.heartbeat_stamp_ms else { continue };
            match self.seen.get_mut(name) {
                Some((seen, _)) if *seen >= stamp => {}
                Some(entry) => *entry = (stamp, Some(mono_ms)),
                None => {
                    self.seen.insert(name.clone(), (stamp, Some(mono_ms)));
                }
            }
        }
    }

    /// The latest stamp the rule allows at monotonic time `mono_ms`, given this host's clock
    /// `own_ms`; `None` when no other node votes (an agent alone has nobody to drag along).
    #[must_use]
    pub fn cap(&self, own_ms: u64, mono_ms: u64) -> Option<u64> {
        let mut clocks: Vec<u64> = self
            .seen
            .values()
            .filter_map(|(stamp, at)| match at {
                Some(at) => Some((*stamp, *at)),
                None => self.baseline_until_ms.filter(|until| mono_ms < *until).map(|_| (*stamp, mono_ms)),
            })
            .filter(|(_, at)| mono_ms.saturating_sub(*at) <= self.window_ms)
            .map(|(stamp, at)| stamp.saturating_add(mono_ms.saturating_sub(at)))
            .collect();
        if clocks.is_empty() {
            return None;
        }
        clocks.push(own_ms);
        clocks.sort_unstable();
        let lower_median = clocks[(clocks.len() - 1) / 2];
        Some(lower_median.saturating_add(self.lead_max_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clocks(peers: &[(&str, u64)], now: u64) -> PeerClocks {
        let mut c = PeerClocks::new(50, 60_000);
        for (name, stamp) in peers {
            c.seen.insert((*name).to_owned(), (*stamp, Some(now)));
        }
        c
    }

    #[test]
    fn one_clock_ahead_is_held_to_the_others() {
        // This agent runs 10 s ahead; two others agree on 1_000.
        let c = clocks(&[("b", 1_000), ("c", 1_010)], 7);
        assert_eq!(c.cap(11_000, 7), Some(1_060), "the lower median (1_010) + 50");
        // An honest agent beside one that runs ahead: the outlier does not move it.
        let c = clocks(&[("b", 11_000), ("c", 1_000)], 7);
        assert_eq!(c.cap(1_005, 7), Some(1_055));
    }

    #[test]
    fn projections_move_with_this_hosts_monotonic_clock_and_old_voices_drop_out() {
        let c = clocks(&[("b", 1_000)], 100);
        assert_eq!(c.cap(1_400, 500), Some(1_450), "b is projected to 1_400");
        assert_eq!(c.cap(1_400, 100 + 61_000), None, "b fell silent: no vote");
    }

    #[test]
    fn stamps_already_in_the_log_at_start_do_not_vote_until_they_move() {
        let mut c = PeerClocks::new(50, 60_000);
        c.baseline_until_ms = Some(300);
        c.seen.insert("b".into(), (1_000, None));
        assert_eq!(
            c.cap(900_000, 0),
            Some(1_050),
            "right after start, the stamps in the log hold a fast clock back"
        );
        assert_eq!(c.cap(900_000, 300), None, "then an old stamp from before the start holds nobody back");
        c.seen.insert("b".into(), (899_990, Some(300)));
        assert_eq!(c.cap(900_000, 300), Some(900_040));
    }

    #[test]
    fn stamps_only_rise_and_a_capped_one_is_counted() {
        let mut s = Stamper::new(clocks(&[("b", 1_000), ("c", 1_000)], 0));
        let first = s.stamp(5_000, 0);
        assert_eq!(first, Stamp { at_ms: 1_050, held_back_ms: Some(3_950), baseline: false }, "median + 50");
        assert_eq!(s.capped(), 1);
        assert!(s.worth_saying(&first));
        assert_eq!(s.stamp(900, 0).at_ms, 1_051, "a clock that stepped back still stamps above the last");
        let mut alone = Stamper::new(PeerClocks::new(50, 60_000));
        assert_eq!(alone.stamp(7, 0), Stamp { at_ms: 7, held_back_ms: None, baseline: false });
        assert_eq!(alone.stamp(7, 0).at_ms, 8);
        assert_eq!(alone.capped(), 0);
    }

    #[test]
    fn alone_there_is_no_cap() {
        assert_eq!(PeerClocks::new(50, 60_000).cap(5, 0), None);
    }

    #[test]
    fn right_after_a_start_a_clock_in_step_with_its_peers_is_not_called_ahead() {
        // The log's newest peer stamp is a heartbeat interval (100) old; lead 50.
        let mut peers = PeerClocks::new(50, 60_000);
        peers.baseline_until_ms = Some(300);
        peers.seen.insert("b".into(), (1_000, None));
        let mut s = Stamper::new(peers);
        let in_step = s.stamp(1_100, 0);
        assert_eq!(in_step.held_back_ms, Some(50), "held to the old stamp + 50");
        assert!(in_step.baseline);
        assert!(!s.worth_saying(&in_step), "an honest clock at start is not called ahead");
        let mut peers = PeerClocks::new(50, 60_000);
        peers.baseline_until_ms = Some(300);
        peers.seen.insert("b".into(), (1_000, None));
        let mut s = Stamper::new(peers);
        let ahead = s.stamp(11_000, 0);
        assert!(s.worth_saying(&ahead), "a clock 10 s ahead is, at start too");
    }
}
