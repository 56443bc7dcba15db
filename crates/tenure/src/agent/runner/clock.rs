//! The clock-lead rule (`docs/architecture.md`, "Time in a fleet"): an agent never stamps an
//! event more than `lead_max` ahead of the lower median of the clocks it can see — its own and
//! each other node's, projected to now from that node's newest heartbeat stamp by this host's
//! monotonic clock. One agent whose clock runs ahead cannot drag stream time (and so everyone's
//! liveness) with it while most clocks are right; a clock behind is harmless, since a heartbeat
//! counts as of the stream time the log took it (SPEC 3).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tenure_core::federation::Federation;
use tokio::time::Instant;
use tracing::warn;

/// The `at` of every event this agent stamps: the loop's and the heartbeat thread's
/// (`heartbeat.rs`) share one, behind a lock, so that stamps only rise.
#[derive(Debug)]
pub(super) struct Stamper {
    /// Other nodes' clocks.
    pub(super) peers: PeerClocks,
    /// The `at` of the last event this agent stamped.
    last_ms: u64,
    /// Stamps the clock-lead rule held back (`tenure_stamps_capped_total`).
    pub(super) capped: u64,
}

impl Stamper {
    pub(super) fn new(peers: PeerClocks) -> Self {
        Self { peers, last_ms: 0, capped: 0 }
    }

    /// The `at` of a new event, given this host's clock `wall_ms` now: held to the clock-lead
    /// rule, and above the last stamp (an inventory read stamped at its start must come strictly
    /// before every confirmation this agent appends after it). Not raised to the stream time: a
    /// heartbeat counts as of the stream time the log took it (SPEC 3), so a clock behind makes
    /// no node look old, and echoing a stream time that one fast clock pushed would let it drag
    /// every stamp along.
    pub(super) fn stamp(&mut self, wall_ms: u64, now: Instant) -> u64 {
        let at_ms = match self.peers.cap(wall_ms, now) {
            Some(cap) if cap < wall_ms => {
                self.capped += 1;
                if self.capped == 1 || self.capped.is_power_of_two() {
                    warn!(
                        ahead_ms = wall_ms - cap,
                        "this host's clock runs ahead of the other agents' median: stamping at the cap"
                    );
                }
                cap
            }
            _ => wall_ms,
        }
        .max(self.last_ms.saturating_add(1));
        self.last_ms = at_ms;
        at_ms
    }
}

/// Other nodes' clocks, as their heartbeats showed them.
#[derive(Debug)]
pub(super) struct PeerClocks {
    /// Node → (its newest heartbeat stamp, when this agent first saw that stamp; `None` for a
    /// stamp already in the log when the agent started: it says nothing about that clock now).
    seen: HashMap<String, (u64, Option<Instant>)>,
    /// How far ahead of the median an agent may stamp.
    lead_max_ms: u64,
    /// A node not heard from for this long no longer votes.
    window: Duration,
    /// Until then, the stamps found in the log at start vote as they are (not projected): an
    /// agent whose clock runs ahead must not stamp its first events before it heard a peer.
    /// After it they vote only once they move (after a fleet-wide restart they are as old as
    /// the downtime, and projecting them would hold every agent back).
    baseline_until: Option<Instant>,
}

impl PeerClocks {
    pub(super) fn new(lead_max: Duration, window: Duration) -> Self {
        Self {
            seen: HashMap::new(),
            lead_max_ms: u64::try_from(lead_max.as_millis()).unwrap_or(u64::MAX),
            window,
            baseline_until: None,
        }
    }

    /// Takes note of the stamps in the log when the agent starts: they vote, unprojected, until
    /// `until` (a few heartbeat intervals: time to hear the live peers), then only once they move.
    pub(super) fn baseline(&mut self, view: &Federation, own: &BTreeSet<String>, until: Instant) {
        self.baseline_until = Some(until);
        for node in view.nodes().iter().filter(|n| !own.contains(&n.spec.name)) {
            if let Some(stamp) = node.heartbeat_stamp_ms {
                self.seen.insert(node.spec.name.clone(), (stamp, None));
            }
        }
    }

    /// Takes note of the newest heartbeat stamps of the nodes this agent does not run.
    pub(super) fn observe(&mut self, view: &Federation, own: &BTreeSet<String>, now: Instant) {
        for node in view.nodes() {
            let name = &node.spec.name;
            if own.contains(name) {
                continue;
            }
            let Some(stamp) = node.heartbeat_stamp_ms else { continue };
            match self.seen.get_mut(name) {
                Some((seen, _)) if *seen >= stamp => {}
                Some(entry) => *entry = (stamp, Some(now)),
                None => {
                    self.seen.insert(name.clone(), (stamp, Some(now)));
                }
            }
        }
    }

    /// The latest stamp the rule allows now, given this host's clock `own_ms`; `None` when no
    /// other node votes (an agent alone has nobody to drag along).
    pub(super) fn cap(&self, own_ms: u64, now: Instant) -> Option<u64> {
        let mut clocks: Vec<u64> = self
            .seen
            .values()
            .filter_map(|(stamp, at)| match at {
                Some(at) => Some((*stamp, *at)),
                None => self.baseline_until.filter(|until| now < *until).map(|_| (*stamp, now)),
            })
            .filter(|(_, at)| now.saturating_duration_since(*at) <= self.window)
            .map(|(stamp, at)| {
                let elapsed =
                    u64::try_from(now.saturating_duration_since(at).as_millis()).unwrap_or(u64::MAX);
                stamp.saturating_add(elapsed)
            })
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

    fn clocks(peers: &[(&str, u64)], now: Instant) -> PeerClocks {
        let mut c = PeerClocks::new(Duration::from_millis(50), Duration::from_secs(60));
        for (name, stamp) in peers {
            c.seen.insert((*name).to_owned(), (*stamp, Some(now)));
        }
        c
    }

    #[test]
    fn one_clock_ahead_is_held_to_the_others() {
        let now = Instant::now();
        // This agent runs 10 s ahead; two others agree on 1_000.
        let c = clocks(&[("b", 1_000), ("c", 1_010)], now);
        assert_eq!(c.cap(11_000, now), Some(1_060), "the lower median (1_010) + 50");
        // An honest agent beside one that runs ahead: the outlier does not move it.
        let c = clocks(&[("b", 11_000), ("c", 1_000)], now);
        assert_eq!(c.cap(1_005, now), Some(1_055));
    }

    #[test]
    fn projections_move_with_this_hosts_monotonic_clock_and_old_voices_drop_out() {
        let then = Instant::now();
        let c = clocks(&[("b", 1_000)], then);
        let later = then + Duration::from_millis(400);
        assert_eq!(c.cap(1_400, later), Some(1_450), "b is projected to 1_400");
        assert_eq!(c.cap(1_400, then + Duration::from_secs(61)), None, "b fell silent: no vote");
    }

    #[test]
    fn stamps_already_in_the_log_at_start_do_not_vote_until_they_move() {
        let now = Instant::now();
        let mut c = PeerClocks::new(Duration::from_millis(50), Duration::from_secs(60));
        c.baseline_until = Some(now + Duration::from_millis(300));
        c.seen.insert("b".into(), (1_000, None));
        assert_eq!(
            c.cap(900_000, now),
            Some(1_050),
            "right after start, the stamps in the log hold a fast clock back"
        );
        let later = now + Duration::from_millis(300);
        assert_eq!(c.cap(900_000, later), None, "then an old stamp from before the start holds nobody back");
        c.seen.insert("b".into(), (899_990, Some(later)));
        assert_eq!(c.cap(900_000, later), Some(900_040));
    }

    #[test]
    fn stamps_only_rise_and_a_capped_one_is_counted() {
        let now = Instant::now();
        let mut s = Stamper::new(clocks(&[("b", 1_000), ("c", 1_000)], now));
        assert_eq!(s.stamp(5_000, now), 1_050, "held to the median + 50");
        assert_eq!(s.capped, 1);
        assert_eq!(s.stamp(900, now), 1_051, "a clock that stepped back still stamps above the last");
        let mut alone = Stamper::new(PeerClocks::new(Duration::from_millis(50), Duration::from_secs(60)));
        assert_eq!(alone.stamp(7, now), 7);
        assert_eq!(alone.stamp(7, now), 8);
        assert_eq!(alone.capped, 0);
    }

    #[test]
    fn alone_there_is_no_cap() {
        let c = PeerClocks::new(Duration::from_millis(50), Duration::from_secs(60));
        assert_eq!(c.cap(5, Instant::now()), None);
    }
}
