//! Delays put into the loop on purpose, by tests only: a step made as long as a requeue pass
//! over a million addresses, an append of the loop as slow as an etcd round trip under load.
//! They show that such a loop still keeps its nodes alive (`runner/heartbeat.rs`). Read once at
//! start from the environment; unset in production, where they cost one branch each.
//!
//! - [`STEP_DELAY_ENV`]: milliseconds every step blocks its thread before it starts;
//! - [`APPEND_DELAY_ENV`]: milliseconds every append of the loop blocks before it is sent
//!   (heartbeats, appended by their own thread, are not delayed);
//! - [`IDENTITY_TICK_ENV`]: milliseconds between the loop's identity writes, in place of
//!   [`super::IDENTITY_FLUSH_INTERVAL`] (a test that must see the write before a batch of calls
//!   alone, not the tick's).

use std::time::Duration;

/// Milliseconds every step of the loop blocks (a test hook).
pub const STEP_DELAY_ENV: &str = "TENURE_TEST_STEP_DELAY_MS";

/// Milliseconds every append of the loop blocks (a test hook).
pub const APPEND_DELAY_ENV: &str = "TENURE_TEST_APPEND_DELAY_MS";

/// Milliseconds between the loop's identity writes (a test hook).
pub const IDENTITY_TICK_ENV: &str = "TENURE_TEST_IDENTITY_TICK_MS";

/// The delays; zero when the variables are unset.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Slow {
    step: Duration,
    append: Duration,
    identity_tick: Duration,
}

impl Slow {
    /// The delays the environment asks for.
    ///
    /// # Errors
    ///
    /// A variable that is set but not a number of milliseconds, in one line naming it.
    pub(super) fn from_env() -> Result<Self, String> {
        let slow = Self {
            step: read(STEP_DELAY_ENV)?,
            append: read(APPEND_DELAY_ENV)?,
            identity_tick: read(IDENTITY_TICK_ENV)?,
        };
        for (name, delay) in [
            (STEP_DELAY_ENV, slow.step),
            (APPEND_DELAY_ENV, slow.append),
            (IDENTITY_TICK_ENV, slow.identity_tick),
        ] {
            if !delay.is_zero() {
                tracing::warn!(
                    variable = name,
                    delay_ms = delay.as_millis(),
                    "a test hook slows this agent on purpose: unset it outside tests"
                );
            }
        }
        Ok(slow)
    }

    /// Blocks as long as a step is asked to take.
    pub(super) fn step(self) {
        if !self.step.is_zero() {
            std::thread::sleep(self.step);
        }
    }

    /// The interval between the loop's identity writes: `default` unless a test asks otherwise.
    pub(super) fn identity_tick(self, default: Duration) -> Duration {
        if self.identity_tick.is_zero() { default } else { self.identity_tick }
    }

    /// Blocks as long as an append of the loop is asked to take.
    pub(super) fn append(self) {
        if !self.append.is_zero() {
            std::thread::sleep(self.append);
        }
    }
}

fn read(name: &str) -> Result<Duration, String> {
    match std::env::var(name) {
        Err(std::env::VarError::NotPresent) => Ok(Duration::ZERO),
        Ok(value) => value.trim().parse::<u64>().map(Duration::from_millis).map_err(|_| {
            format!("{name}: `{value}` is not a number of milliseconds (a test hook; unset it)")
        }),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!("{name}: not UTF-8 (a test hook; unset it)")),
    }
}
