//! Bounded waits, the one copy every test uses: poll a condition until it holds, and panic naming
//! it once the bound passes; never a bare sleep for synchronisation. The blocking ones are for
//! tests that drive real processes (re-exported by `process/mod.rs`); [`wait_until`] is for tests
//! that run the agent loop in-process on tokio, on tokio's clock (virtual time under
//! `start_paused`).

#![allow(dead_code)]

use std::time::Duration;

/// Most time an agent may take to answer health after it starts, or any condition below.
pub const WAIT_MAX: Duration = Duration::from_secs(30);

/// How often a condition is looked at.
const POLL: Duration = Duration::from_millis(20);

/// How often [`wait_until`] looks at its condition: the in-process loop is fast.
const POLL_IN_PROCESS: Duration = Duration::from_millis(10);

/// Waits until `condition` holds, at most [`WAIT_MAX`].
pub fn wait_for(what: &str, condition: impl FnMut() -> bool) {
    wait_for_within(WAIT_MAX, what, condition);
}

/// [`wait_for`] with another bound.
pub fn wait_for_within(bound: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + bound;
    while !condition() {
        assert!(std::time::Instant::now() < deadline, "not within {bound:?}: {what}");
        std::thread::sleep(POLL);
    }
}

/// Asserts that `condition` holds at every look during `period` (every 50 ms).
pub fn stays_for(period: Duration, what: &str, condition: impl Fn() -> bool) {
    let until = std::time::Instant::now() + period;
    while std::time::Instant::now() < until {
        assert!(condition(), "not so at every look for {period:?}: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `condition` holds, at most `bound` of tokio's clock, looking every 10 ms.
pub async fn wait_until(bound: Duration, what: &str, mut condition: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + bound;
    while !condition().await {
        assert!(tokio::time::Instant::now() < deadline, "not within {bound:?}: {what}");
        tokio::time::sleep(POLL_IN_PROCESS).await;
    }
}
