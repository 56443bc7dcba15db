//! The wire types of a node's journal: entries (their state and attempts) and the durable
//! changes. Built by borrowing (`of`) and turned back with the
//! checks of the in-memory types (`into_*`), as the rest of [`super`].

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::super::{CodecError, RECORD_JOURNAL_CHANGE};
use super::{ActionWire, MarkWire};
use crate::fence::StaleReason;
use crate::journal::{Attempts, EntryState, JournalChange, JournalEntry, JournalSeq};

/// The name of a journal state; `skipped` carries its reason in a field beside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(in crate::codec) enum StateName {
    /// `pending`.
    Pending,
    /// `approved`.
    Approved,
    /// `executed`.
    Executed,
    /// `failed`.
    Failed,
    /// `skipped`, with a `reason`.
    Skipped,
}

/// The name and reason of a state.
fn state_to_wire(state: EntryState) -> (StateName, Option<StaleReason>) {
    match state {
        EntryState::Pending => (StateName::Pending, None),
        EntryState::Approved => (StateName::Approved, None),
        EntryState::Executed => (StateName::Executed, None),
        EntryState::Failed => (StateName::Failed, None),
        EntryState::Skipped(reason) => (StateName::Skipped, Some(reason)),
    }
}

/// The state of a name, reason and execution order, which must agree: a reason exactly for
/// `skipped`, an execution order (1 or more) exactly for `executed` (as `NodeEngine` writes them).
fn state_from_wire(
    record: &'static str,
    name: StateName,
    reason: Option<StaleReason>,
    executed_seq: Option<u64>,
) -> Result<EntryState, CodecError> {
    let inconsistent = |reason: String| CodecError::Inconsistent { record, reason };
    let state = match (name, reason) {
        (StateName::Skipped, Some(reason)) => EntryState::Skipped(reason),
        (StateName::Skipped, None) => {
            return Err(inconsistent("a `skipped` state without its `reason`".into()));
        }
        (name, Some(reason)) => {
            return Err(inconsistent(format!("a `{name:?}` state with a skip reason `{reason}`")));
        }
        (StateName::Pending, None) => EntryState::Pending,
        (StateName::Approved, None) => EntryState::Approved,
        (StateName::Executed, None) => EntryState::Executed,
        (StateName::Failed, None) => EntryState::Failed,
    };
    match (state == EntryState::Executed, executed_seq) {
        (true, Some(seq)) if seq >= 1 => Ok(state),
        (true, Some(_)) => Err(inconsistent("an execution order of 0 (it starts at 1)".into())),
        (true, None) => Err(inconsistent("an `executed` state without its `executedSeq`".into())),
        (false, Some(_)) => Err(inconsistent(format!("`executedSeq` on a `{}` state", state.as_str()))),
        (false, None) => Ok(state),
    }
}

/// A sequence number (the journal's key, SPEC 13 "bounded journals"): 1 or more.
fn check_seq(record: &'static str, seq: JournalSeq) -> Result<JournalSeq, CodecError> {
    if seq == JournalSeq::NONE {
        return Err(CodecError::Inconsistent {
            record,
            reason: "sequence number 0 (they start at 1)".into(),
        });
    }
    Ok(seq)
}

/// The sequence numbers of a compaction, as the engine writes them: each 1 or more, ascending,
/// none twice.
fn check_seqs(record: &'static str, seqs: &[JournalSeq]) -> Result<(), CodecError> {
    if let Some(&first) = seqs.first() {
        check_seq(record, first)?;
    }
    match seqs.windows(2).find(|pair| pair[0] >= pair[1]) {
        Some(pair) => Err(CodecError::Inconsistent {
            record,
            reason: format!("compacted sequence numbers {} then {} are not ascending", pair[0], pair[1]),
        }),
        None => Ok(()),
    }
}

/// A journal entry: its sequence number, the action, nested, then the state and its details.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(in crate::codec) struct EntryWire<'a> {
    /// The sequence number: the journal's key.
    seq: JournalSeq,
    /// The stamped action.
    action: ActionWire<'a>,
    /// The state's name.
    state: StateName,
    /// Why a `skipped` entry was fenced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<StaleReason>,
    /// The executor's detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    detail: Option<Cow<'a, str>>,
    /// Execution order, for executed entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    executed_seq: Option<u64>,
    /// Provider calls handed out (absent: none; a record written before attempts were kept).
    #[serde(default, skip_serializing_if = "is_zero")]
    attempts: u32,
    /// Stream time of the last call's gate (ms), with `attempts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_attempt_ms: Option<u64>,
    /// The caller's wall clock at the last call (unix ms), if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_attempt_wall_ms: Option<u64>,
    /// The detail of the last failed call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_error: Option<Cow<'a, str>>,
}

/// Whether a count is 0 (left out of a record).
fn is_zero(count: &u32) -> bool {
    *count == 0
}

/// An entry's attempts from their stored fields, which must agree: a time exactly when there
/// was an attempt (a wall time only beside a stream time).
fn attempts_from_wire(
    record: &'static str,
    count: u32,
    last_at_ms: Option<u64>,
    last_wall_ms: Option<u64>,
    last_error: Option<&str>,
) -> Result<Attempts, CodecError> {
    let inconsistent = |reason: &str| CodecError::Inconsistent { record, reason: reason.to_owned() };
    match (count, last_at_ms, last_wall_ms) {
        (0, None, None) | (1.., Some(_), _) => {
            // A stored wall time of 0 (the epoch's own millisecond, which no clock gives) reads
            // as none.
            Ok(Attempts::handed_out(
                count,
                last_at_ms.unwrap_or(0),
                last_wall_ms,
                last_error.map(crate::names::shared),
            ))
        }
        (0, _, _) => Err(inconsistent("a `lastAttemptMs` or `lastAttemptWallMs` without `attempts`")),
        (1.., None, _) => Err(inconsistent("`attempts` without its `lastAttemptMs`")),
    }
}

impl<'a> EntryWire<'a> {
    /// The wire form of `entry` (its sequence number checked first).
    pub(in crate::codec) fn of(record: &'static str, entry: &'a JournalEntry) -> Result<Self, CodecError> {
        let (state, reason) = state_to_wire(entry.state);
        Ok(Self {
            seq: check_seq(record, entry.seq)?,
            action: ActionWire::of(&entry.action),
            state,
            reason,
            detail: entry.detail.as_deref().map(Cow::Borrowed),
            executed_seq: entry.executed_seq.map(std::num::NonZeroU64::get),
            attempts: entry.attempts.count,
            last_attempt_ms: entry.attempts.last_at_ms(),
            last_attempt_wall_ms: entry.attempts.last_wall_ms(),
            last_error: entry.attempts.last_error.as_deref().map(Cow::Borrowed),
        })
    }

    /// The entry, with the checks of its sequence number, action and state.
    pub(in crate::codec) fn into_entry(self, record: &'static str) -> Result<JournalEntry, CodecError> {
        Ok(JournalEntry {
            seq: check_seq(record, self.seq)?,
            state: state_from_wire(record, self.state, self.reason, self.executed_seq)?,
            action: self.action.into_action(record)?,
            detail: self.detail.as_deref().map(crate::names::shared),
            executed_seq: self.executed_seq.and_then(std::num::NonZeroU64::new),
            attempts: attempts_from_wire(
                record,
                self.attempts,
                self.last_attempt_ms,
                self.last_attempt_wall_ms,
                self.last_error.as_deref(),
            )?,
        })
    }
}

/// A durable journal change: the change as the tag `change`, then its fields.
#[derive(Serialize, Deserialize)]
#[expect(
    clippy::large_enum_variant,
    reason = "a transient wire form; appends, the largest, are also the most frequent"
)]
#[serde(tag = "change", rename_all = "kebab-case", rename_all_fields = "camelCase", deny_unknown_fields)]
pub(in crate::codec) enum ChangeWire<'a> {
    /// `append`: the entry's fields beside the tag.
    Append(EntryWire<'a>),
    /// `set-state`.
    SetState {
        /// The entry's sequence number.
        seq: JournalSeq,
        /// The new state's name.
        state: StateName,
        /// Why, for `skipped`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<StaleReason>,
        /// The executor's detail.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<Cow<'a, str>>,
        /// Execution order, for `executed`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        executed_seq: Option<u64>,
    },
    /// `raise-high-water`: one row's fields beside the tag.
    RaiseHighWater(MarkWire<'a>),
    /// `attempt`: a provider call handed out.
    Attempt {
        /// The entry's sequence number.
        seq: JournalSeq,
        /// Stream time of its gate (ms).
        at_ms: u64,
        /// The caller's wall clock (unix ms), if it gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wall_ms: Option<u64>,
    },
    /// `compact`: finished, superseded entries dropped.
    Compact {
        /// Their sequence numbers, ascending.
        seqs: Cow<'a, [JournalSeq]>,
    },
}

impl<'a> ChangeWire<'a> {
    /// The wire form of `change`.
    pub(in crate::codec) fn of(change: &'a JournalChange) -> Result<Self, CodecError> {
        Ok(match change {
            JournalChange::Append(entry) => Self::Append(EntryWire::of(RECORD_JOURNAL_CHANGE, entry)?),
            JournalChange::SetState { seq, state, detail, executed_seq } => {
                let (state, reason) = state_to_wire(*state);
                Self::SetState {
                    seq: check_seq(RECORD_JOURNAL_CHANGE, *seq)?,
                    state,
                    reason,
                    detail: detail.as_deref().map(Cow::Borrowed),
                    executed_seq: *executed_seq,
                }
            }
            JournalChange::RaiseHighWater {
                pool,
                address,
                capture_domain,
                capture_epoch,
                ownership_epoch,
            } => Self::RaiseHighWater(MarkWire {
                pool: Cow::Borrowed(pool),
                address: *address,
                capture_domain: Cow::Borrowed(capture_domain.as_str()),
                capture_epoch: capture_epoch.get(),
                ownership_epoch: ownership_epoch.get(),
            }),
            JournalChange::Attempt { seq, at_ms, wall_ms } => Self::Attempt {
                seq: check_seq(RECORD_JOURNAL_CHANGE, *seq)?,
                at_ms: *at_ms,
                wall_ms: *wall_ms,
            },
            JournalChange::Compact { seqs } => {
                check_seqs(RECORD_JOURNAL_CHANGE, seqs)?;
                Self::Compact { seqs: Cow::Borrowed(seqs) }
            }
        })
    }

    /// The change, with the checks of its parts.
    pub(in crate::codec) fn into_change(self) -> Result<JournalChange, CodecError> {
        let record = RECORD_JOURNAL_CHANGE;
        Ok(match self {
            Self::Append(entry) => JournalChange::Append(entry.into_entry(record)?),
            Self::SetState { seq, state, reason, detail, executed_seq } => JournalChange::SetState {
                seq: check_seq(record, seq)?,
                state: state_from_wire(record, state, reason, executed_seq)?,
                detail: detail.as_deref().map(crate::names::shared),
                executed_seq,
            },
            Self::RaiseHighWater(row) => {
                let (capture_domain, capture_epoch, ownership_epoch) = row.parts(record)?;
                JournalChange::RaiseHighWater {
                    pool: row.pool.into_owned(),
                    address: row.address,
                    capture_domain,
                    capture_epoch,
                    ownership_epoch,
                }
            }
            Self::Attempt { seq, at_ms, wall_ms } => {
                JournalChange::Attempt { seq: check_seq(record, seq)?, at_ms, wall_ms }
            }
            Self::Compact { seqs } => {
                check_seqs(record, &seqs)?;
                JournalChange::Compact { seqs: seqs.into_owned() }
            }
        })
    }
}
