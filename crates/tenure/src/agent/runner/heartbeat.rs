//! Heartbeats on their own thread: liveness never waits for work (issue 24).
//!
//! A node's heartbeat says "this node's agent is alive"; other agents fail the node over once
//! its newest heartbeat is `heartbeatTTL` old in stream time (SPEC 3). When the loop appended
//! heartbeats at the start of a step, a long step (a requeue pass over a million addresses), a
//! slow fsync or a slow etcd round trip of the loop's own appends delayed them, and a healthy
//! node could be failed over. So heartbeats go out from a thread of their own, every
//! `heartbeatInterval`, whatever the loop is doing: a plain OS thread, not a task of the loop's
//! runtime, so that a step holding a worker (a test's loop is a task; `tenure agent`'s runs on
//! the thread blocking on the runtime) cannot hold them either. The thread awaits each append
//! itself ([`tokio::runtime::Handle::block_on`]); what the store's future needs of the runtime
//! (the fleet store's etcd requests) the runtime's workers drive.
//!
//! What the thread may not decide alone, the loop tells it ([`Beat`]):
//! - which of the agent's nodes beat (a frozen node does not: `Control::FreezeAfterReconcile`);
//! - that nothing may be appended now: the store failed or was refused, or the agent is
//!   shutting down;
//! - that the loop still turns. A loop that has not turned for [`LOOP_STALL_MAX`] (wedged, not
//!   merely busy) gets no more heartbeats: its nodes fail over, as an operator expects of an
//!   agent that stopped working. Safety never depended on this: every action is fenced.
//!
//! Heartbeats are stamped by the same [`Stamper`] as every other event of the agent (the
//! clock-lead rule, stamps only rise). A heartbeat append that fails is not retried: the next
//! interval's heartbeat replaces it. After one lands, the loop is woken to follow the log.
//! Heartbeats go on while a batch of the loop whose append failed waits for its retry
//! (`appends.rs`, `unappended`): the store appends them so that the retry still lands once
//! ([`AgentStore::append_heartbeats`]; the fleet store leaves its writer key alone).

use std::sync::mpsc::{self as std_mpsc, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant as StdInstant};

use tenure_core::log::{Event, EventKind};
use tenure_core::log_store::{LogError, LogIndex};
use tracing::{error, info, warn};

use super::clock::{HostStamper, Stamper};
use crate::agent::AgentStore;

/// How long the loop may go without turning before its nodes stop beating.
pub const LOOP_STALL_MAX: Duration = Duration::from_secs(60);

/// What the loop and the heartbeat thread share.
#[derive(Debug)]
pub(super) struct Beat {
    stamper: Mutex<HostStamper>,
    state: Mutex<State>,
    /// Woken after heartbeats landed: the loop follows the log then.
    pub(super) landed: tokio::sync::Notify,
    /// Whether a failed append may be tried again (the store's
    /// [`StoreCapabilities`](super::super::StoreCapabilities)); if not, a heartbeat that cannot
    /// be appended means the store failed.
    retries_appends: bool,
}

#[derive(Debug)]
struct State {
    /// The nodes that beat.
    nodes: Vec<String>,
    /// Nothing more is appended: shutting down, or the store failed.
    stopped: bool,
    /// When the loop last turned (this host's monotonic clock, not the runtime's: a paused
    /// test clock must not make a loop look stalled or alive).
    turned_at: StdInstant,
    /// Whether the stall was said.
    stall_said: bool,
    /// Heartbeats appended.
    appended: u64,
    /// Why the last heartbeat could not be appended (cleared by the next that lands).
    last_error: Option<String>,
    /// Why the store takes nothing more (a store that does not retry failed a heartbeat).
    failure: Option<String>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Beat {
    pub(super) fn new(stamper: Stamper, retries_appends: bool) -> Self {
        Self {
            stamper: Mutex::new(HostStamper::new(stamper)),
            state: Mutex::new(State {
                nodes: Vec::new(),
                stopped: false,
                turned_at: StdInstant::now(),
                stall_said: false,
                appended: 0,
                last_error: None,
                failure: None,
            }),
            landed: tokio::sync::Notify::new(),
            retries_appends,
        }
    }

    /// The stamper, for the loop's own stamps and the clock-lead rule's observations.
    pub(super) fn stamper(&self) -> MutexGuard<'_, HostStamper> {
        lock(&self.stamper)
    }

    /// The loop turned: it is alive, and `nodes` beat.
    pub(super) fn turned(&self, nodes: Vec<String>) {
        let mut state = lock(&self.state);
        state.turned_at = StdInstant::now();
        if state.stall_said {
            info!("the agent loop turns again: heartbeats resume");
            state.stall_said = false;
        }
        state.nodes = nodes;
    }

    /// No heartbeat from now on (shutting down, or the store failed).
    pub(super) fn stop(&self) {
        lock(&self.state).stopped = true;
    }

    /// Heartbeats appended so far.
    pub(super) fn appended(&self) -> u64 {
        lock(&self.state).appended
    }

    /// Why the last heartbeat could not be appended, if it could not.
    pub(super) fn last_error(&self) -> Option<String> {
        lock(&self.state).last_error.clone()
    }

    /// Why the store takes nothing more, if a heartbeat found it failed.
    pub(super) fn failure(&self) -> Option<String> {
        lock(&self.state).failure.clone()
    }

    /// The heartbeats to append now, stamped; `None` when none may go out.
    fn due(&self, now: StdInstant) -> Option<Vec<Event>> {
        let nodes = {
            let mut state = lock(&self.state);
            if state.stopped || state.failure.is_some() || state.nodes.is_empty() {
                return None;
            }
            let quiet = now.saturating_duration_since(state.turned_at);
            if quiet > LOOP_STALL_MAX {
                if !state.stall_said {
                    error!(
                        quiet_s = quiet.as_secs(),
                        "the agent loop has not turned for over {} s: no heartbeats until it does (its nodes fail over)",
                        LOOP_STALL_MAX.as_secs()
                    );
                    state.stall_said = true;
                }
                return None;
            }
            state.nodes.clone()
        };
        let at_ms = self.stamper().stamp();
        Some(nodes.into_iter().map(|node| Event { at_ms, kind: EventKind::Heartbeat { node } }).collect())
    }

    /// What became of an append of `count` heartbeats.
    fn appended_or_not(&self, count: usize, result: Result<Vec<LogIndex>, LogError>) {
        let mut state = lock(&self.state);
        match result {
            Ok(_) => {
                state.appended += count as u64;
                state.last_error = None;
                drop(state);
                self.landed.notify_one();
            }
            Err(e @ LogError::Unavailable { .. }) if self.retries_appends => {
                let reason = format!("cannot append heartbeats to the log: {e}");
                let first = state.last_error.is_none();
                if state.last_error.as_deref() != Some(reason.as_str()) {
                    warn!(%reason, "heartbeat not appended; the next one is sent at its interval");
                }
                state.last_error = Some(reason);
                drop(state);
                if first {
                    // Health says so now, not at the loop's next turn.
                    self.landed.notify_one();
                }
            }
            Err(e) => {
                let reason = format!("cannot append to the log: {e}");
                error!(%reason, "heartbeat not appended: the store takes nothing more");
                state.failure.get_or_insert(reason);
                drop(state);
                self.landed.notify_one();
            }
        }
    }
}

/// The heartbeat thread; stopped and joined when dropped.
#[derive(Debug)]
pub(super) struct Beater {
    stop: Option<std_mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Beater {
    /// Starts the thread: every `interval` (the first one `interval` from now), the heartbeats
    /// [`Beat`] allows, appended through `store`, each awaited on this thread with the runtime
    /// it was started from (whose time it reads: a test's paused clock too). What the append's
    /// future needs of the runtime (the fleet store's requests and their deadlines) a worker
    /// drives: the loop must leave one free — it runs on the thread blocking on the runtime
    /// (`tenure agent`), or as a task of a runtime with two workers at least (the tests) — or
    /// the join at the end of a run waits for an append no one drives.
    pub(super) fn start<S: AgentStore>(
        store: S,
        beat: Arc<Beat>,
        interval: Duration,
    ) -> std::io::Result<Self> {
        let interval = interval.max(Duration::from_millis(1));
        let runtime = tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
        let (stop, stopped) = std_mpsc::channel::<()>();
        let thread = std::thread::Builder::new().name("tenure-heartbeat".into()).spawn(move || {
            // Entered for its clock (stamps read the runtime's time: a test's paused clock too).
            let _entered = runtime.enter();
            let mut next = StdInstant::now() + interval;
            loop {
                match stopped.recv_timeout(next.saturating_duration_since(StdInstant::now())) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
                let now = StdInstant::now();
                // At most one append in flight; after a slow one, the next goes at once.
                next = (next + interval).max(now);
                if let Some(events) = beat.due(now) {
                    // Awaited here, on this thread: the store's requests are driven by the
                    // runtime's workers (the fleet store's), never by the loop's thread.
                    let result = runtime.block_on(store.append_heartbeats(&events));
                    beat.appended_or_not(events.len(), result);
                }
            }
        })?;
        Ok(Self { stop: Some(stop), thread: Some(thread) })
    }
}

impl Beater {
    /// Why the thread ended though it was not stopped (it panicked), if it did: the agent's
    /// nodes no longer beat, so the agent must say so and not act.
    pub(super) fn died(&self) -> Option<String> {
        let thread = self.thread.as_ref()?;
        (thread.is_finished() && self.stop.is_some()).then(|| {
            "the heartbeat thread stopped unexpectedly: this agent's nodes no longer beat".to_owned()
        })
    }
}

impl Drop for Beater {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            error!("the heartbeat thread panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::clock::PeerClocks;
    use super::*;

    fn beat() -> Beat {
        Beat::new(Stamper::new(PeerClocks::new(50, 60_000)), true)
    }

    #[test]
    fn only_the_nodes_the_loop_names_beat_and_never_while_stopped_or_stalled() {
        let beat = beat();
        assert!(beat.due(StdInstant::now()).is_none(), "no node named yet");
        beat.turned(vec!["a".into(), "b".into()]);
        let events = beat.due(StdInstant::now()).expect("due");
        let nodes: Vec<_> = events
            .iter()
            .map(|e| match &e.kind {
                EventKind::Heartbeat { node } => node.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(nodes, ["a", "b"]);
        assert!(events.iter().all(|e| e.at_ms == events[0].at_ms), "one stamp per batch");
        let later = beat.due(StdInstant::now()).expect("due");
        assert!(later[0].at_ms > events[0].at_ms, "stamps rise");

        beat.turned(vec!["a".into()]);
        assert!(beat.due(StdInstant::now() + LOOP_STALL_MAX + Duration::from_secs(1)).is_none(), "stalled");
        assert!(beat.due(StdInstant::now()).is_some(), "not stalled as of now");
        beat.stop();
        assert!(beat.due(StdInstant::now()).is_none(), "stopped");
    }

    #[test]
    fn a_failed_heartbeat_is_reported_and_a_store_that_does_not_retry_takes_nothing_more() {
        let beat = beat();
        beat.turned(vec!["a".into()]);
        beat.appended_or_not(1, Err(LogError::Unavailable { reason: "etcd down".into() }));
        assert!(beat.last_error().is_some_and(|e| e.contains("etcd down")));
        assert!(beat.failure().is_none(), "a store that retries is not failed by it");
        beat.appended_or_not(1, Ok(Vec::new()));
        assert_eq!((beat.last_error(), beat.appended()), (None, 1));

        let strict = Beat::new(Stamper::new(PeerClocks::new(0, 0)), false);
        strict.turned(vec!["a".into()]);
        strict.appended_or_not(1, Err(LogError::Unavailable { reason: "commit failed".into() }));
        assert!(strict.failure().is_some());
        assert!(strict.due(StdInstant::now()).is_none());
    }
}
