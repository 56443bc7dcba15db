//! The journal (outbox) of one node: its actions keyed by idempotencyKey, their state machine,
//! and the durable high-water marks of the fence (SPEC 6).
//!
//! ```text
//!   import ─┬─ stale ──────────────────────────────► skipped{reason}
//!           ├─ approval: manual ─► pending ─approve─► approved
//!           └─ approval: auto ───────────────────────► approved ─gate─┬─► executed | failed
//!                                                                     └─► skipped{reason}
//!   failed ─ still current at a sweep, its backoff over ─► approved   (a retry: level-triggered)
//! ```
//!
//! Every entry also keeps its [`Attempts`]: the provider calls the gate handed out for it, when
//! the last one was gated, and why the last failed one failed ([`crate::retry`] spaces retries
//! from them).
//!
//! Persistence sits behind [`JournalStore`]: the node writes every change through it as a
//! [`JournalChange`] before it changes its memory, and a restart rebuilds memory from
//! [`JournalStore::load`]. [`MemoryJournalStore`] is the in-memory implementation.

use std::convert::Infallible;
use std::sync::Arc;

use crate::fence::{HighWater, StaleReason};
use crate::model::{CaptureEpoch, OwnershipEpoch, StampedAction};

mod rules;

pub use rules::{JournalFacts, JournalRuleError, check_change};

/// Most entries one node journal holds: past it a reconcile defers importing what it planned
/// (imported at a later reconcile, once execution and compaction made room); it never fails.
pub const JOURNAL_ENTRIES_MAX: usize = 16 * 1024 * 1024;

/// Entries a journal keeps before compaction starts (SPEC 13 "bounded journals"). Configurable
/// per engine ([`crate::node::NodeEngine::with_retention`]).
pub const JOURNAL_RETENTION_DEFAULT: usize = 10_000;

/// The sequence number of a journal entry: the journal's key, given in journal order (1-based,
/// never reused; compaction leaves gaps). Its own type so that it is never confused with the
/// other counters an entry carries (execution order, attempts, stream times). Stored as the bare
/// number (the codec and the store's row keys write [`JournalSeq::get`]), and displayed as it.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct JournalSeq(u64);

impl JournalSeq {
    /// Before the first entry (what a new journal's `last_seq` is).
    pub const NONE: Self = Self(0);

    /// The sequence number `seq` as stored (or as a test writes it).
    #[must_use]
    pub const fn new(seq: u64) -> Self {
        Self(seq)
    }

    /// The number, as stored.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The sequence number after this one (what the next append gets).
    #[must_use]
    pub const fn next(self) -> Self {
        Self(self.0 + 1)
    }
}

impl std::fmt::Display for JournalSeq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The state of a journal entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryState {
    /// Waiting for an `approve` event (pools with `approval: manual`).
    Pending,
    /// May run once it passes the gate.
    Approved,
    /// The provider call succeeded.
    Executed,
    /// The provider call failed. A sweep retries it (back to `approved`) while it is current,
    /// once its backoff ([`crate::retry::RetryBackoff`]) is over.
    Failed,
    /// Fenced: never to run.
    Skipped(StaleReason),
}

impl EntryState {
    /// The wire name (`pending`, `approved`, `executed`, `failed`, `skipped`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Executed => "executed",
            Self::Failed => "failed",
            Self::Skipped(_) => "skipped",
        }
    }

    /// Pending and approved entries are still open; the others are final.
    #[must_use]
    pub fn is_open(self) -> bool {
        matches!(self, Self::Pending | Self::Approved)
    }

    /// Whether an entry in this state may move to `next`: an open entry may move anywhere; a
    /// final one never leaves its state, but for two moves out of `failed` — a retry
    /// (`approved`), and an acquire in doubt counted as held (`executed`, see
    /// [`OUTCOME_UNKNOWN`]). The one rule every journal store checks.
    #[must_use]
    pub fn may_become(self, next: Self) -> bool {
        self.is_open() || (self == Self::Failed && matches!(next, Self::Approved | Self::Executed))
    }
}

/// How the detail of a call whose outcome is unknown begins (cancelled in flight, past its
/// deadline, its answer lost): the provider may have acted (SPEC 6: at-least-once). Such an
/// entry is journaled `failed`, and retried while it is current; an acquire of that kind that
/// the fence rule refuses is counted as held — moved to `executed`, its detail saying so — so
/// that the node plans its release (an idempotent call) instead of leaving a second holder on a
/// provider with no inventory to tell ([`crate::node::NodeEngine::handle_in_doubt_result`]).
pub const OUTCOME_UNKNOWN: &str = "outcome unknown: ";

/// Whether an executor's detail says the call's outcome is unknown (it begins with
/// [`OUTCOME_UNKNOWN`]): the one test of that mark, wherever a detail or a last error is read.
#[must_use]
pub fn outcome_unknown(detail: Option<&str>) -> bool {
    detail.is_some_and(|d| d.starts_with(OUTCOME_UNKNOWN))
}

/// The detail of an entry whose call is about to start, written (and synced with its batch)
/// before the call: at a restart, an `approved` entry with it was in flight when the process
/// died, in doubt (SPEC 6). An entry already in doubt carries it after its mark
/// ([`call_started`]).
pub const CALL_STARTED: &str = "call started";

/// The gate's detail for the call it hands out: [`CALL_STARTED`], after the in-doubt mark when
/// the entry carries one (an earlier attempt may have acted; the mark stays).
#[must_use]
pub fn call_started_detail(in_doubt: bool) -> String {
    if in_doubt {
        format!("{OUTCOME_UNKNOWN}an earlier attempt may have acted; {CALL_STARTED}")
    } else {
        CALL_STARTED.to_owned()
    }
}

/// Whether an entry's detail is the gate's mark of a call handed out ([`call_started_detail`]).
#[must_use]
pub fn call_started(detail: Option<&str>) -> bool {
    // Exactly the gate's two forms: a failure's text that happens to end the same way (a hook's
    // stderr kept by a retry) is not a call in flight.
    detail.is_some_and(|d| d == CALL_STARTED || d == call_started_detail(true))
}

/// What follows [`OUTCOME_UNKNOWN`] in the detail a restart gives an entry whose call was in
/// flight when the agent stopped: `outcome unknown: the agent stopped during attempt N`.
const AGENT_STOPPED: &str = "the agent stopped during attempt ";

/// The detail (and last error) of an entry whose attempt `attempt` was in flight when its agent
/// stopped: its outcome is unknown (SPEC 6: it is gated and run again while current).
#[must_use]
pub fn agent_stopped_detail(attempt: u32) -> String {
    format!("{OUTCOME_UNKNOWN}{AGENT_STOPPED}{attempt}")
}

/// Whether `detail` is [`agent_stopped_detail`]'s.
#[must_use]
pub fn agent_stopped(detail: Option<&str>) -> bool {
    detail.and_then(|d| d.strip_prefix(OUTCOME_UNKNOWN)).is_some_and(|rest| rest.starts_with(AGENT_STOPPED))
}

/// The detail of an acquire in doubt once it is counted as held.
pub const COUNTED_AS_HELD: &str =
    "counted as held (its outcome was unknown and it is stale): its release is planned";

/// One journaled action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalEntry {
    /// Its sequence number: the journal's key, given in journal order (1-based, never reused;
    /// compaction leaves gaps).
    pub seq: JournalSeq,
    /// The stamped action.
    pub action: StampedAction,
    /// Where it is in its life.
    pub state: EntryState,
    /// Executor's detail for executed and failed entries (shared: a million entries say the same
    /// few things, `assigned to eni-a`; [`crate::names::shared`]).
    pub detail: Option<crate::names::Name>,
    /// Order of execution among this node's executed entries (1-based), once executed.
    pub executed_seq: Option<std::num::NonZeroU64>,
    /// The provider calls made for it and how the last failed one ended.
    pub attempts: Attempts,
}

// A node holding a million addresses keeps two million entries, each in an `Arc` (16 bytes
// more): 144 bytes falls in the allocator's 160-byte class, where 168 (an execution order and two
// attempt times each with an `Option`'s tag) fell in the 192-byte one, and 240 (five `Arc<str>`
// names, the detail and the last error as `String`s) in the 256-byte one (docs/benchmarks.md,
// "Names and details behind one pointer", docs/decisions.md "Issue 24: an entry of 144 bytes").
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<JournalEntry>() <= 144);

/// The provider calls the gate handed out for one entry (SPEC 6: each passed the gate an
/// instant before), kept across restarts so that a retry's backoff and an operator's
/// `tenure actions` see every attempt.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attempts {
    /// How many calls were handed out (0: never called).
    pub count: u32,
    /// When the last one was handed out: the stream time of the head it was gated against
    /// (ms), which the backoff counts from. Read through [`Attempts::last_at_ms`]: it means
    /// something only once a call was handed out (no `Option` of its own: 8 bytes an entry).
    at_ms: u64,
    /// When the last one was handed out by the caller's wall clock (unix ms), for operators:
    /// `None` when the caller gave none (replay, the simulator), and for the epoch's own
    /// millisecond, which no clock gives. Never decides anything.
    wall_ms: Option<std::num::NonZeroU64>,
    /// The detail of the last call that failed (the executor's one-line error; a call whose
    /// outcome is unknown keeps [`OUTCOME_UNKNOWN`] at its start), kept through retries and
    /// after a later success.
    pub last_error: Option<crate::names::Name>,
}

impl Attempts {
    /// `count` calls handed out, the last at stream time `at_ms` and wall time `wall_ms` (none
    /// when `count` is 0: what a stored entry says, checked by the codec).
    #[must_use]
    pub fn handed_out(
        count: u32,
        at_ms: u64,
        wall_ms: Option<u64>,
        last_error: Option<crate::names::Name>,
    ) -> Self {
        if count == 0 {
            return Self { last_error, ..Self::default() };
        }
        Self { count, at_ms, wall_ms: wall_ms.and_then(std::num::NonZeroU64::new), last_error }
    }

    /// When the last call was handed out (stream time, ms); `None` before the first.
    #[must_use]
    pub fn last_at_ms(&self) -> Option<u64> {
        (self.count > 0).then_some(self.at_ms)
    }

    /// When the last call was handed out by the caller's wall clock (unix ms), if it gave one.
    #[must_use]
    pub fn last_wall_ms(&self) -> Option<u64> {
        self.wall_ms.map(std::num::NonZeroU64::get)
    }
}

impl JournalEntry {
    /// Moves the entry to `state` with the executor's `detail` and its execution order, as a
    /// [`JournalChange::SetState`] says: a `failed` state's detail becomes the last error, and so
    /// does a restart's account of a call in flight when the agent stopped
    /// ([`agent_stopped_detail`]; the entry stays `approved`, to run again). The one place a
    /// state change is applied to an entry (memory and every store's rows), after the caller
    /// checked [`EntryState::may_become`].
    pub fn set_state(&mut self, state: EntryState, detail: Option<&str>, executed_seq: Option<u64>) {
        self.set_state_owned(state, detail.map(crate::names::shared), executed_seq);
    }

    /// [`JournalEntry::set_state`] with a detail the caller gives away (not copied).
    pub fn set_state_owned(
        &mut self,
        state: EntryState,
        detail: Option<crate::names::Name>,
        executed_seq: Option<u64>,
    ) {
        self.state = state;
        self.detail = detail;
        self.executed_seq = executed_seq.and_then(std::num::NonZeroU64::new);
        if state == EntryState::Failed || agent_stopped(self.detail.as_deref()) {
            self.attempts.last_error = self.detail.clone();
        }
    }

    /// Counts one call handed out at stream time `at_ms` (and wall time `wall_ms`), as a
    /// [`JournalChange::Attempt`] says.
    pub fn record_attempt(&mut self, at_ms: u64, wall_ms: Option<u64>) {
        self.attempts.count = self.attempts.count.saturating_add(1);
        self.attempts.at_ms = at_ms;
        self.attempts.wall_ms = wall_ms.and_then(std::num::NonZeroU64::new);
    }
}

/// A node's entries by sequence number: chunks filled in order, cloned in O(1) for readers
/// outside the loop ([`crate::chunked_map`], [`crate::journal_index`]).
pub type JournalEntries = crate::chunked_map::ChunkedMap<JournalSeq, Arc<JournalEntry>>;

/// Everything a node keeps across a crash.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DurableNodeState {
    /// Entries by sequence number (journal order), each behind an `Arc` shared with readers:
    /// [`JournalEntries`].
    pub entries: JournalEntries,
    /// The highest sequence number ever given (compacted entries included).
    pub last_seq: JournalSeq,
    /// Highest tokens seen per key.
    pub high_water: HighWater,
    /// Number of executed entries so far.
    pub executions: u64,
}

/// One durable change, written before memory changes. A store applies changes in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JournalChange {
    /// A new entry at the end of the journal; its `seq` is above every earlier one.
    Append(JournalEntry),
    /// Entry `seq` moved to a new state.
    SetState {
        /// The entry's sequence number.
        seq: JournalSeq,
        /// The new state.
        state: EntryState,
        /// Executor detail, if any ([`crate::names::shared`]).
        detail: Option<crate::names::Name>,
        /// Execution order, for executed entries.
        executed_seq: Option<u64>,
    },
    /// The node saw these tokens for one key.
    RaiseHighWater {
        /// The action whose keys they belong to.
        pool: String,
        /// Address.
        address: std::net::IpAddr,
        /// Capture domain.
        capture_domain: crate::model::CaptureDomain,
        /// Capture epoch seen.
        capture_epoch: CaptureEpoch,
        /// Ownership epoch seen.
        ownership_epoch: OwnershipEpoch,
    },
    /// Entry `seq` was handed out for a provider call ([`JournalEntry::record_attempt`]).
    Attempt {
        /// The entry's sequence number.
        seq: JournalSeq,
        /// Stream time of the head it was gated against (ms).
        at_ms: u64,
        /// The caller's wall clock then (unix ms), if it gave one.
        wall_ms: Option<u64>,
    },
    /// Finished, superseded entries dropped by compaction (SPEC 13 "bounded journals").
    Compact {
        /// Their sequence numbers.
        seqs: Vec<JournalSeq>,
    },
}

impl JournalChange {
    /// The sequence numbers of the entries this change names, in order (what [`check_change`]
    /// asks [`JournalFacts::entry`] for): none for an append or a raise.
    #[must_use]
    pub fn named_seqs(&self) -> &[JournalSeq] {
        match self {
            Self::SetState { seq, .. } | Self::Attempt { seq, .. } => std::slice::from_ref(seq),
            Self::Compact { seqs } => seqs,
            Self::Append(_) | Self::RaiseHighWater { .. } => &[],
        }
    }
}

impl DurableNodeState {
    /// Applies one change. Panics on a change that breaks the journal's rules
    /// ([`check_change`]): the engine never makes one.
    pub fn apply(&mut self, change: &JournalChange) {
        self.apply_owned(change.clone());
    }

    /// [`DurableNodeState::apply`] of a change the caller gives away (the engine's, once its
    /// store has it): an appended entry, and a new state's detail, are moved into the journal,
    /// not copied. The one place a change is applied in memory.
    pub fn apply_owned(&mut self, change: JournalChange) {
        self.check(&change);
        match change {
            JournalChange::Append(entry) => {
                self.last_seq = entry.seq;
                self.entries.insert(entry.seq, Arc::new(entry));
            }
            JournalChange::SetState { seq, state, detail, executed_seq } => {
                self.entry_mut(seq).set_state_owned(state, detail, executed_seq);
                if let Some(executed) = executed_seq {
                    self.executions = executed;
                }
            }
            JournalChange::RaiseHighWater {
                pool,
                address,
                capture_domain,
                capture_epoch,
                ownership_epoch,
            } => {
                self.high_water.raise(&pool, address, &capture_domain, capture_epoch, ownership_epoch);
            }
            JournalChange::Attempt { seq, at_ms, wall_ms } => {
                self.entry_mut(seq).record_attempt(at_ms, wall_ms);
            }
            JournalChange::Compact { seqs } => {
                for seq in seqs {
                    self.entries.remove(&seq);
                }
            }
        }
    }

    /// Entry `seq`, to change: copied first when a reader's snapshot still shares it
    /// (`journal_index`). The caller checked that the journal holds it.
    fn entry_mut(&mut self, seq: JournalSeq) -> &mut JournalEntry {
        Arc::make_mut(self.entries.get_mut(&seq).expect("checked: the journal holds it"))
    }

    /// Panics on a change that breaks the journal's rules ([`check_change`]).
    fn check(&self, change: &JournalChange) {
        let entries = &self.entries;
        let facts = JournalFacts {
            last_seq: self.last_seq,
            executions: self.executions,
            entry: &|seq| entries.get(&seq).map(|e| &**e),
        };
        if let Err(broken) = check_change(change, &facts) {
            panic!("the engine broke a journal rule: {broken}");
        }
    }
}

/// Durable storage of one node's journal.
pub trait JournalStore {
    /// What can go wrong writing or reading.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Reads back everything committed so far.
    fn load(&self) -> Result<DurableNodeState, Self::Error>;

    /// Records one change. A store may buffer it until [`JournalStore::sync`].
    fn commit(&mut self, change: &JournalChange) -> Result<(), Self::Error>;

    /// Makes every change recorded so far durable (fsync). The engine calls it before an action
    /// leaves it for a provider — so the journal entry and the high-water mark that authorised
    /// the call survive a crash — and at the end of a whole reconcile; the agent's step ends
    /// with it (a slice of a pass and a plan of changed positions leave it to the step). Changes recorded after the
    /// last sync may be lost in a crash; the engine is correct either way (a lost `executed`
    /// state only repeats an idempotent, still-gated call).
    fn sync(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// A journal store in memory: survives a simulated restart of the node, not of the process.
#[derive(Clone, Debug, Default)]
pub struct MemoryJournalStore {
    state: DurableNodeState,
}

impl MemoryJournalStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }
}

impl JournalStore for MemoryJournalStore {
    type Error = Infallible;

    fn load(&self) -> Result<DurableNodeState, Self::Error> {
        Ok(self.state.clone())
    }

    fn commit(&mut self, change: &JournalChange) -> Result<(), Self::Error> {
        self.state.apply(change);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Verb;

    fn entry(seq: u64, state: EntryState) -> JournalEntry {
        let seq = JournalSeq::new(seq);
        let action = crate::fixtures::action_of_a(
            "edge",
            "10.0.0.10".parse().expect("an address"),
            Verb::AssignSecondaryIp,
        );
        JournalEntry { seq, action, state, detail: None, executed_seq: None, attempts: Attempts::default() }
    }

    fn set_state(seq: u64, state: EntryState, executed_seq: Option<u64>) -> JournalChange {
        JournalChange::SetState { seq: JournalSeq::new(seq), state, detail: None, executed_seq }
    }

    #[test]
    fn attempt_times_mean_something_once_a_call_was_handed_out() {
        // Stream time 0 is a time (a log that starts at 0); a wall time of 0 is none.
        let first = Attempts::handed_out(1, 0, Some(0), None);
        assert_eq!((first.last_at_ms(), first.last_wall_ms()), (Some(0), None));
        let none = Attempts::handed_out(0, 5, Some(7), None);
        assert_eq!((none.last_at_ms(), none.last_wall_ms()), (None, None));
        assert_eq!(none, Attempts::default());
        let mut entry = entry(1, EntryState::Approved);
        entry.record_attempt(0, Some(1_700_000_000_000));
        assert_eq!((entry.attempts.count, entry.attempts.last_at_ms()), (1, Some(0)));
        assert_eq!(entry.attempts.last_wall_ms(), Some(1_700_000_000_000));
    }

    /// Every rule, as a store refuses it (the message a store reports) and as memory takes it.
    #[test]
    fn each_journal_rule_refuses_what_breaks_it_and_takes_what_keeps_it() {
        let open = entry(4, EntryState::Approved);
        let done = entry(5, EntryState::Executed);
        let entries = [&open, &done];
        let lookup = |seq: JournalSeq| entries.iter().copied().find(|e| e.seq == seq);
        let facts = JournalFacts { last_seq: JournalSeq::new(5), executions: 2, entry: &lookup };
        let seqs = |seqs: &[u64]| seqs.iter().copied().map(JournalSeq::new).collect::<Vec<_>>();
        let check = |change: &JournalChange| check_change(change, &facts).map_err(|e| e.to_string());
        let refused = [
            (
                JournalChange::Append(entry(5, EntryState::Pending)),
                "appended entry 5 does not follow the last sequence number 5",
            ),
            (
                set_state(9, EntryState::Executed, Some(3)),
                "set-state of entry 9, which the journal does not hold",
            ),
            (
                set_state(5, EntryState::Approved, None),
                "entry 5 would leave its final state `executed` for `approved`",
            ),
            (set_state(4, EntryState::Executed, Some(2)), "entry 4's execution order 2 does not follow 2"),
            (
                JournalChange::Attempt { seq: JournalSeq::new(9), at_ms: 1, wall_ms: None },
                "an attempt of entry 9, which the journal does not hold",
            ),
            (
                JournalChange::Attempt { seq: JournalSeq::new(5), at_ms: 1, wall_ms: None },
                "an attempt of entry 5, which is `executed` (only an open entry is called)",
            ),
            (
                JournalChange::Compact { seqs: seqs(&[5, 4]) },
                "compaction of entry 4, which is still `approved`",
            ),
            (JournalChange::Compact { seqs: seqs(&[5, 9]) }, "compaction of entry 9, which it does not hold"),
            (JournalChange::Compact { seqs: seqs(&[5, 5]) }, "compaction of entry 5, which it does not hold"),
        ];
        for (change, message) in refused {
            assert_eq!(check(&change), Err(message.to_owned()), "{change:?}");
        }
        let kept = [
            JournalChange::Append(entry(6, EntryState::Pending)),
            set_state(4, EntryState::Executed, Some(3)),
            JournalChange::Attempt { seq: JournalSeq::new(4), at_ms: 1, wall_ms: None },
            JournalChange::Compact { seqs: seqs(&[5]) },
        ];
        for change in kept {
            assert_eq!(check(&change), Ok(()), "{change:?}");
        }
    }

    #[test]
    #[should_panic(expected = "the engine broke a journal rule: entry 1 would leave its final state")]
    fn memory_panics_on_a_broken_rule() {
        let mut state = DurableNodeState::default();
        state.apply(&JournalChange::Append(entry(1, EntryState::Approved)));
        state.apply(&set_state(1, EntryState::Executed, Some(1)));
        state.apply(&set_state(1, EntryState::Approved, None));
    }

    #[test]
    fn only_the_gates_own_marks_are_calls_in_flight() {
        assert!(call_started(Some(&call_started_detail(false))));
        assert!(call_started(Some(&call_started_detail(true))));
        assert!(!call_started(None));
        assert!(!call_started(Some("outcome unknown: the hook printed: call started")));
        assert!(!call_started(Some("exit 1: call started")));
        assert!(!call_started(Some(&agent_stopped_detail(2))));
    }
}
