//! The journal's rules, once: what a change may do given what the journal holds ([`check_change`]).
//! The engine's memory ([`super::DurableNodeState::apply`]) and every store's commit call it.

use super::{JournalChange, JournalEntry, JournalSeq};

/// A change that breaks the journal's rules: what [`check_change`] finds. The engine's memory
/// ([`super::DurableNodeState::apply`]) treats it as a bug and panics; a store refuses the commit with
/// it (`tenure::store`'s rows: the store is inconsistent).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JournalRuleError {
    /// An appended entry's sequence number does not grow.
    #[error("appended entry {seq} does not follow the last sequence number {last}")]
    SeqNotAfter {
        /// The appended entry's.
        seq: JournalSeq,
        /// The last one given.
        last: JournalSeq,
    },
    /// A state change of an entry the journal does not hold.
    #[error("set-state of entry {seq}, which the journal does not hold")]
    SetStateOfMissing {
        /// The entry.
        seq: JournalSeq,
    },
    /// A final state left but as [`super::EntryState::may_become`] allows.
    #[error("entry {seq} would leave its final state `{from}` for `{to}`")]
    FinalStateLeft {
        /// The entry.
        seq: JournalSeq,
        /// Its state.
        from: &'static str,
        /// The state asked for.
        to: &'static str,
    },
    /// An execution order that does not grow.
    #[error("entry {seq}'s execution order {executed} does not follow {last}")]
    ExecutionOrder {
        /// The entry.
        seq: JournalSeq,
        /// Its execution order.
        executed: u64,
        /// The last one given.
        last: u64,
    },
    /// An attempt of an entry the journal does not hold.
    #[error("an attempt of entry {seq}, which the journal does not hold")]
    AttemptOfMissing {
        /// The entry.
        seq: JournalSeq,
    },
    /// An attempt of a finished entry.
    #[error("an attempt of entry {seq}, which is `{state}` (only an open entry is called)")]
    AttemptOfFinished {
        /// The entry.
        seq: JournalSeq,
        /// Its state.
        state: &'static str,
    },
    /// Compaction of an entry still open.
    #[error("compaction of entry {seq}, which is still `{state}`")]
    CompactionOfOpen {
        /// The entry.
        seq: JournalSeq,
        /// Its state.
        state: &'static str,
    },
    /// Compaction of an entry the journal does not hold.
    #[error("compaction of entry {seq}, which it does not hold")]
    CompactionOfMissing {
        /// The entry.
        seq: JournalSeq,
    },
}

/// The journal as a change finds it: what [`check_change`] reads.
pub struct JournalFacts<'a> {
    /// The highest sequence number given so far.
    pub last_seq: JournalSeq,
    /// The last execution order given so far.
    pub executions: u64,
    /// The entry under a sequence number, `None` where the journal does not hold it (asked only
    /// for the entries the change names: [`JournalChange::named_seqs`]).
    pub entry: &'a dyn Fn(JournalSeq) -> Option<&'a JournalEntry>,
}

/// The journal's rules, the one place they are written (SPEC 6, 13): sequence numbers only grow;
/// a final state is left only as [`super::EntryState::may_become`] allows; execution order only grows;
/// only an open entry is handed out for a call; only finished entries are compacted; a change
/// names only entries the journal holds. High-water marks are raised by taking maxima, so a
/// raise cannot break a rule. The engine's memory and every store apply a change only after it
/// passed here.
pub fn check_change(change: &JournalChange, facts: &JournalFacts<'_>) -> Result<(), JournalRuleError> {
    match change {
        JournalChange::Append(entry) => {
            if entry.seq <= facts.last_seq {
                return Err(JournalRuleError::SeqNotAfter { seq: entry.seq, last: facts.last_seq });
            }
        }
        JournalChange::SetState { seq, state, executed_seq, .. } => {
            let entry = (facts.entry)(*seq).ok_or(JournalRuleError::SetStateOfMissing { seq: *seq })?;
            if !entry.state.may_become(*state) {
                return Err(JournalRuleError::FinalStateLeft {
                    seq: *seq,
                    from: entry.state.as_str(),
                    to: state.as_str(),
                });
            }
            if let Some(executed) = executed_seq
                && *executed <= facts.executions
            {
                return Err(JournalRuleError::ExecutionOrder {
                    seq: *seq,
                    executed: *executed,
                    last: facts.executions,
                });
            }
        }
        JournalChange::Attempt { seq, .. } => {
            let entry = (facts.entry)(*seq).ok_or(JournalRuleError::AttemptOfMissing { seq: *seq })?;
            if !entry.state.is_open() {
                return Err(JournalRuleError::AttemptOfFinished { seq: *seq, state: entry.state.as_str() });
            }
        }
        JournalChange::Compact { seqs } => {
            let mut seen = std::collections::BTreeSet::new();
            for seq in seqs {
                if !seen.insert(*seq) {
                    return Err(JournalRuleError::CompactionOfMissing { seq: *seq });
                }
                match (facts.entry)(*seq) {
                    None => return Err(JournalRuleError::CompactionOfMissing { seq: *seq }),
                    Some(entry) if entry.state.is_open() => {
                        return Err(JournalRuleError::CompactionOfOpen {
                            seq: *seq,
                            state: entry.state.as_str(),
                        });
                    }
                    Some(_) => {}
                }
            }
        }
        JournalChange::RaiseHighWater { .. } => {}
    }
    Ok(())
}
