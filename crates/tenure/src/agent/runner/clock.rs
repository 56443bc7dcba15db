//! This host's clocks for the clock-lead rule ([`tenure_core::agent::clock`], the rule itself):
//! the wall clock every stamp starts from, and a monotonic clock, in ms since the agent started,
//! that projects the other nodes' heartbeat stamps to now. The loop and the heartbeat thread
//! stamp through one [`HostStamper`], behind the heartbeat's lock.

use tokio::time::Instant;
use tracing::warn;

pub(super) use tenure_core::agent::clock::{PeerClocks, Stamper};

use super::wall_clock_ms;

/// The core's stamper on this host's clocks.
#[derive(Debug)]
pub(super) struct HostStamper {
    /// The rule's state: the last stamp, the peers' clocks.
    pub(super) stamper: Stamper,
    /// Where this agent's monotonic milliseconds count from (its start: one per agent, so that
    /// tests running many agents, some on a paused clock, never share an origin).
    origin: Instant,
}

impl HostStamper {
    pub(super) fn new(stamper: Stamper) -> Self {
        Self { stamper, origin: Instant::now() }
    }

    /// `now` on this agent's monotonic clock, in ms.
    pub(super) fn mono_ms(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.origin).as_millis()).unwrap_or(u64::MAX)
    }

    /// The `at` of a new event, stamped now by this host's clocks; says so (the first time, then
    /// at every power of two) when the rule held this host's clock back.
    pub(super) fn stamp(&mut self) -> u64 {
        let mono_ms = self.mono_ms(Instant::now());
        let stamp = self.stamper.stamp(wall_clock_ms(), mono_ms);
        if self.stamper.worth_saying(&stamp)
            && let Some(ahead_ms) = stamp.held_back_ms
        {
            warn!(ahead_ms, "this host's clock runs ahead of the other agents' median: stamping at the cap");
        }
        stamp.at_ms
    }
}
