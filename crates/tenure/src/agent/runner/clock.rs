//! This host's clocks for the clock-lead rule ([`tenure_core::agent::clock`], the rule itself):
//! the wall clock every stamp starts from, and a monotonic clock, in ms since this process first
//! asked, that projects the other nodes' heartbeat stamps to now. The loop and the heartbeat
//! thread stamp through [`stamp`], with the one [`Stamper`] they share.

use std::sync::OnceLock;

use tokio::time::Instant;
use tracing::warn;

pub(super) use tenure_core::agent::clock::{PeerClocks, Stamper};

use super::wall_clock_ms;

/// `now` on this process's monotonic clock, in ms (from the first time it was asked).
pub(super) fn monotonic_ms(now: Instant) -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    u64::try_from(now.saturating_duration_since(origin).as_millis()).unwrap_or(u64::MAX)
}

/// The `at` of a new event, stamped now by this host's clocks; says so (the first time, then at
/// every power of two) when the rule held this host's clock back.
pub(super) fn stamp(stamper: &mut Stamper) -> u64 {
    let stamp = stamper.stamp(wall_clock_ms(), monotonic_ms(Instant::now()));
    if stamp.worth_saying(stamper.capped())
        && let Some(ahead_ms) = stamp.held_back_ms
    {
        warn!(ahead_ms, "this host's clock runs ahead of the other agents' median: stamping at the cap");
    }
    stamp.at_ms
}
