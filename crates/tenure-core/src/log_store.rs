//! The federation log as storage (SPEC 2): append an event, read a bounded batch of events from an
//! index, and the head. The events themselves are [`crate::log`]; their stored bytes are
//! [`crate::codec`]'s. [`MemoryLog`] is the in-memory implementation; the embedded store (redb)
//! and etcd implement [`Log`] in the runtime crate.
//!
//! # Indices
//!
//! Every record has a [`LogIndex`]: 1 or more, strictly increasing in log order, never reused.
//! [`MemoryLog`] and the embedded store hand out **dense** indices (1, 2, 3, …). etcd cannot: its
//! revision is shared by every key in the cluster (leases, leadership, the other prefixes), so the
//! revisions of consecutive log records have gaps. The trait therefore promises order, not
//! density, and a reader never computes an index from a count: it resumes from
//! `last.index.next()`, which is right with or without gaps. A gap is not a lost record; a lost
//! record shows up as [`LogError::Compacted`] or [`LogError::Corrupt`], never as a silent skip.
//!
//! # Reading
//!
//! [`Log::read_from`] returns the records whose index is `from` or more, in order, at most
//! `max_records` of them (clamped to 1 ..= [`LOG_READ_BATCH_MAX`], so one read is bounded).
//! Reading past the head is not an error: it returns no record, which means "caught up, nothing
//! new yet" — the normal state of a reader that polls or waits for a watch. An empty batch is
//! only ever returned when `from` is past the head.
//!
//! # Errors
//!
//! [`LogError`] is one enum for every backend, because the driver reacts to the case, not to the
//! backend: `Unavailable` means "you cannot read the head, do not act" (SPEC 6: retry later);
//! `Compacted` means "what you need is gone, restore from a snapshot"; `Corrupt` means "this
//! node's copy is damaged, stop and alarm" — applying the records after it without it would give
//! this node a state no other node has, so the reader stays at the corrupt record; `Rejected`,
//! `TooLarge` and `Full` refuse an append and change nothing. (SPEC 2's "a malformed event is
//! rejected, counted, and never stops the log" is about events offered for appending: those are
//! checked by the codec and `Rejected` before they are stored.)
//!
//! The trait is synchronous and takes `&mut self` to append, like
//! [`crate::journal::JournalStore`]: the core stays free of I/O and async; an async backend
//! (etcd) can implement it on a blocking thread, or the runtime can read the log itself and hand
//! the events to the core — the index, batch and error rules here hold either way.

use std::fmt;
use std::num::NonZeroU64;

use crate::codec::{self, CodecError};
use crate::log::Event;

/// Most records one [`Log::read_from`] returns, whatever the caller asks for.
pub const LOG_READ_BATCH_MAX: usize = 1024;

/// Largest stored record, in bytes: 1 MiB, under etcd's default request limit (1.5 MiB) with room
/// for the request's own framing, so that a log that works in memory works on etcd. A pool of
/// CIDR blocks is small; only a pool of tens of thousands of scattered addresses comes near it.
pub const LOG_RECORD_BYTES_MAX: usize = 1024 * 1024;

/// The stored record of `event`: its codec encoding, refused when the codec refuses the event
/// ([`LogError::Rejected`]) or when it is larger than [`LOG_RECORD_BYTES_MAX`]
/// ([`LogError::TooLarge`]). Every backend checks every event of an append with it before it
/// writes anything, so such a refusal leaves the log as it was.
pub fn encode_record(event: &Event) -> Result<Vec<u8>, LogError> {
    let record = codec::encode_event(event).map_err(LogError::Rejected)?;
    if record.len() > LOG_RECORD_BYTES_MAX {
        return Err(LogError::TooLarge { bytes: record.len(), limit: LOG_RECORD_BYTES_MAX });
    }
    Ok(record)
}

/// Most records a [`MemoryLog`] holds by default (16M, as many as one node journal).
pub const MEMORY_LOG_RECORDS_MAX: usize = 16 * 1024 * 1024;

/// The position of a record in the log: 1 or more; a later record has a larger index. Dense in
/// [`MemoryLog`] and the embedded store; with gaps on etcd (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogIndex(NonZeroU64);

impl LogIndex {
    /// The index of the first record of a dense log, and where a new reader starts.
    pub const FIRST: Self = Self(NonZeroU64::MIN);

    /// Wraps an index read back from storage or a backend (an etcd revision); `None` for 0,
    /// which is no record's index.
    #[must_use]
    pub const fn from_stored(value: u64) -> Option<Self> {
        match NonZeroU64::new(value) {
            Some(value) => Some(Self(value)),
            None => None,
        }
    }

    /// The raw value, for printing and storage.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0.get()
    }

    /// Where a reader resumes after the record at this index. Panics only at index 2^64 − 1,
    /// which no log reaches.
    #[must_use]
    pub fn next(self) -> Self {
        Self(self.0.checked_add(1).expect("a log never reaches index u64::MAX"))
    }
}

impl fmt::Display for LogIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One event of the log with its position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRecord {
    /// Where the event is in the log.
    pub index: LogIndex,
    /// The event.
    pub event: Event,
}

/// What can go wrong appending to or reading the log, for every backend.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// The stored record at `index` does not decode (damaged, or written by a newer format). The
    /// reader must not skip it: this node's copy of the log can no longer be trusted.
    #[error("log record {index} does not decode: {source}")]
    Corrupt {
        /// The record's index.
        index: LogIndex,
        /// What the codec found.
        #[source]
        source: CodecError,
    },
    /// The event was refused before it was stored (the codec could not write it, for example a
    /// pool spec that breaks the rules). Nothing was appended.
    #[error("event not appended: {0}")]
    Rejected(#[source] CodecError),
    /// The encoded event is larger than the backend stores in one record. Nothing was appended.
    #[error("event not appended: its record is {bytes} bytes, more than the {limit} one record may hold")]
    TooLarge {
        /// The record's size.
        bytes: usize,
        /// The backend's limit.
        limit: usize,
    },
    /// The log holds as many records as it may. Nothing was appended.
    #[error("event not appended: the log is full ({limit} records)")]
    Full {
        /// The number of records it holds.
        limit: usize,
    },
    /// The records before `oldest` were compacted away (an etcd compaction, a pruned embedded
    /// store), so `requested` cannot be read: the reader needs a snapshot, not a retry.
    /// [`MemoryLog`] never compacts.
    #[error("log index {requested} was compacted; the oldest record kept is {oldest}")]
    Compacted {
        /// The index asked for.
        requested: LogIndex,
        /// The oldest index still readable.
        oldest: LogIndex,
    },
    /// The backend cannot be reached or failed (a network partition, an etcd error, an I/O
    /// error). A node that cannot read the head does not act (SPEC 6); it retries later.
    /// [`MemoryLog`] is never unavailable.
    #[error("the log is unavailable: {reason}")]
    Unavailable {
        /// The backend's account.
        reason: String,
    },
}

/// The federation log's storage: totally ordered events, each at a [`LogIndex`].
pub trait Log {
    /// Appends `event` at the end of the log and returns its index, which is larger than every
    /// index appended before. The event is encoded first; an event that cannot be stored is
    /// refused whole ([`LogError::Rejected`], [`LogError::TooLarge`], [`LogError::Full`]).
    fn append(&mut self, event: &Event) -> Result<LogIndex, LogError>;

    /// The records with index `from` or more, in log order, at most `max_records` of them
    /// (clamped to 1 ..= [`LOG_READ_BATCH_MAX`]). Empty exactly when `from` is past the head.
    /// A record that does not decode fails the read with [`LogError::Corrupt`] naming it.
    fn read_from(&self, from: LogIndex, max_records: usize) -> Result<Vec<LogRecord>, LogError>;

    /// The index of the last record, `None` for an empty log. A reader that has read every record
    /// up to the head has seen every event appended before this call.
    fn head(&self) -> Result<Option<LogIndex>, LogError>;
}

/// A log in memory, holding each event as its encoded record (so that everything read back went
/// through the codec, as it will with a real store). Dense indices from 1.
#[derive(Clone, Debug)]
pub struct MemoryLog {
    /// The encoded records; the record at index `i` is at position `i - 1`.
    records: Vec<Vec<u8>>,
    /// Most records it may hold.
    records_max: usize,
}

impl Default for MemoryLog {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryLog {
    /// An empty log holding at most [`MEMORY_LOG_RECORDS_MAX`] records.
    #[must_use]
    pub fn new() -> Self {
        Self::with_records_max(MEMORY_LOG_RECORDS_MAX)
    }

    /// An empty log holding at most `records_max` records.
    #[must_use]
    pub fn with_records_max(records_max: usize) -> Self {
        Self { records: Vec::new(), records_max }
    }

    /// A log of records already encoded (read back from somewhere, or damaged on purpose in a
    /// test), at indices 1, 2, …; they are decoded only when read.
    #[must_use]
    pub fn from_records(records: Vec<Vec<u8>>) -> Self {
        let records_max = MEMORY_LOG_RECORDS_MAX.max(records.len());
        Self { records, records_max }
    }

    /// The encoded records, in log order.
    #[must_use]
    pub fn records(&self) -> &[Vec<u8>] {
        &self.records
    }

    /// The index of the record at `position` (0-based) in `records`.
    fn index_at(position: usize) -> LogIndex {
        u64::try_from(position)
            .ok()
            .and_then(|position| position.checked_add(1))
            .and_then(LogIndex::from_stored)
            .expect("a Vec's position plus one fits a u64 and is not 0")
    }
}

impl Log for MemoryLog {
    fn append(&mut self, event: &Event) -> Result<LogIndex, LogError> {
        if self.records.len() >= self.records_max {
            return Err(LogError::Full { limit: self.records_max });
        }
        let record = encode_record(event)?;
        debug_assert_eq!(codec::decode_event(&record).as_ref(), Ok(event), "a record reads back as written");
        self.records.push(record);
        Ok(Self::index_at(self.records.len() - 1))
    }

    fn read_from(&self, from: LogIndex, max_records: usize) -> Result<Vec<LogRecord>, LogError> {
        let Some(start) = usize::try_from(from.get() - 1).ok().filter(|start| *start < self.records.len())
        else {
            return Ok(Vec::new());
        };
        let count = max_records.clamp(1, LOG_READ_BATCH_MAX);
        self.records[start..]
            .iter()
            .take(count)
            .enumerate()
            .map(|(offset, record)| {
                let index = Self::index_at(start + offset);
                codec::decode_event(record)
                    .map(|event| LogRecord { index, event })
                    .map_err(|source| LogError::Corrupt { index, source })
            })
            .collect()
    }

    fn head(&self) -> Result<Option<LogIndex>, LogError> {
        Ok(self.records.len().checked_sub(1).map(Self::index_at))
    }
}

/// A log in memory holding the events themselves, not their encoded records: the log of
/// `replay` and of the simulator, whose events were parsed or generated a moment ago and whose
/// nodes read it millions of times (no codec on the way). Dense indices from 1, never full, never
/// compacted. Read it as a [`Log`] (the one way a node follows a log) or as a slice
/// ([`EventLog::events`]: the checker's and the report's).
#[derive(Clone, Debug, Default)]
pub struct EventLog {
    events: Vec<Event>,
}

impl EventLog {
    /// An empty log.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Every event, in log order (the event at index `i` is at position `i - 1`).
    #[must_use]
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// How many events the log holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether the log holds no event.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Appends `event` (infallible: nothing is encoded, nothing bounds it).
    pub fn push(&mut self, event: Event) -> LogIndex {
        self.events.push(event);
        MemoryLog::index_at(self.events.len() - 1)
    }

    /// Keeps the first `len` events and drops the rest: the simulator's log that went back (an
    /// etcd wiped, or restored from an older snapshot; `tenure_core::anchor`).
    pub fn truncate(&mut self, len: usize) {
        self.events.truncate(len);
    }

    /// The events, taken out.
    #[must_use]
    pub fn into_events(self) -> Vec<Event> {
        self.events
    }
}

impl Log for EventLog {
    fn append(&mut self, event: &Event) -> Result<LogIndex, LogError> {
        Ok(self.push(event.clone()))
    }

    fn read_from(&self, from: LogIndex, max_records: usize) -> Result<Vec<LogRecord>, LogError> {
        let Some(start) = usize::try_from(from.get() - 1).ok().filter(|start| *start < self.events.len())
        else {
            return Ok(Vec::new());
        };
        let count = max_records.clamp(1, LOG_READ_BATCH_MAX);
        Ok(self.events[start..]
            .iter()
            .take(count)
            .enumerate()
            .map(|(offset, event)| LogRecord {
                index: MemoryLog::index_at(start + offset),
                event: event.clone(),
            })
            .collect())
    }

    fn head(&self) -> Result<Option<LogIndex>, LogError> {
        Ok(self.events.len().checked_sub(1).map(MemoryLog::index_at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::EventKind;
    use crate::model::PoolSpec;

    fn heartbeat(at_ms: u64, node: &str) -> Event {
        Event { at_ms, kind: EventKind::Heartbeat { node: node.to_owned() } }
    }

    fn index(value: u64) -> LogIndex {
        LogIndex::from_stored(value).expect("not 0")
    }

    /// Reads the whole log the way a driver does: from the first index, batch after batch,
    /// resuming after the last record read, until an empty batch.
    fn read_all(log: &impl Log, batch: usize) -> Vec<LogRecord> {
        let mut all = Vec::new();
        let mut next = LogIndex::FIRST;
        loop {
            let records = log.read_from(next, batch).expect("readable");
            let Some(last) = records.last() else { return all };
            next = last.index.next();
            all.extend(records);
        }
    }

    #[test]
    fn indices_start_at_1_and_are_dense() {
        let mut log = MemoryLog::new();
        assert_eq!(log.head(), Ok(None));
        assert_eq!(log.read_from(LogIndex::FIRST, 10), Ok(vec![]));
        let events: Vec<Event> = (0..5).map(|i| heartbeat(i * 10, &format!("n{i}"))).collect();
        for (i, event) in events.iter().enumerate() {
            assert_eq!(log.append(event).map(LogIndex::get), Ok(i as u64 + 1));
        }
        assert_eq!(log.head(), Ok(Some(index(5))));
        let read = read_all(&log, 2);
        assert_eq!(read.iter().map(|r| r.index.get()).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
        assert_eq!(read.into_iter().map(|r| r.event).collect::<Vec<_>>(), events);
        assert!(log.records()[0].starts_with(br#"{"v":1,"event":"heartbeat""#), "records are encoded");
    }

    #[test]
    fn reads_are_bounded_and_past_the_head_is_empty() {
        let mut log = MemoryLog::new();
        for i in 0..(LOG_READ_BATCH_MAX as u64 + 10) {
            log.append(&heartbeat(i, "a")).expect("appends");
        }
        assert_eq!(log.read_from(LogIndex::FIRST, usize::MAX).map(|r| r.len()), Ok(LOG_READ_BATCH_MAX));
        assert_eq!(log.read_from(LogIndex::FIRST, 0).map(|r| r.len()), Ok(1), "0 asks for the least");
        let tail = log.read_from(index(LOG_READ_BATCH_MAX as u64 + 5), 100).expect("readable");
        assert_eq!(
            tail.iter().map(|r| r.event.at_ms).collect::<Vec<_>>(),
            [1028, 1029, 1030, 1031, 1032, 1033]
        );
        let head = log.head().expect("readable").expect("not empty");
        assert_eq!(log.read_from(head.next(), 10), Ok(vec![]));
        assert_eq!(log.read_from(index(u64::MAX), 10), Ok(vec![]));
    }

    #[test]
    fn a_corrupt_record_stops_the_reader_at_it() {
        let good = |at| codec::encode_event(&heartbeat(at, "a")).expect("encodes");
        let mut truncated = good(2);
        truncated.truncate(10);
        let log = MemoryLog::from_records(vec![good(1), truncated, good(3)]);
        assert_eq!(log.head(), Ok(Some(index(3))));
        assert_eq!(log.read_from(LogIndex::FIRST, 1).map(|r| r.len()), Ok(1));
        match log.read_from(LogIndex::FIRST, 10) {
            Err(LogError::Corrupt { index: at, source: CodecError::Malformed { record: "event", .. } }) => {
                assert_eq!(at, index(2));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(log.read_from(index(3), 10).map(|r| r.len()), Ok(1));
        let future = MemoryLog::from_records(vec![br#"{"v":2,"event":"teleport"}"#.to_vec()]);
        assert!(matches!(
            future.read_from(LogIndex::FIRST, 1),
            Err(LogError::Corrupt { source: CodecError::UnknownVersion { version: 2, .. }, .. })
        ));
    }

    #[test]
    fn an_event_that_cannot_be_stored_is_refused_and_changes_nothing() {
        let mut log = MemoryLog::with_records_max(2);
        log.append(&heartbeat(1, "a")).expect("appends");
        let invalid = PoolSpec {
            name: "p".into(),
            addresses: vec!["10.0.0.1".parse().expect("literal")],
            provider: "sim1".into(),
            placement_group: "g1".into(),
            members: vec![],
            authority: Default::default(),
            approval: Default::default(),
            deprovision_hold_ms: 0,
            heartbeat_ttl_ms: 1,
            promotion_hold_ms: 0,
            epoch_locking: true,
            prefer_nodes: vec![],
            preempt: false,
            auto_failover: true,
        };
        let applied = Event { at_ms: 2, kind: EventKind::PoolApplied { spec: Box::new(invalid.clone()) } };
        assert!(matches!(log.append(&applied), Err(LogError::Rejected(CodecError::InvalidPool { .. }))));
        let scattered = PoolSpec {
            members: vec!["a".into()],
            // Every other address of 2001:db8::/111: 65,536 addresses, no two in one block.
            addresses: (0..65_536u128)
                .map(|i| std::net::IpAddr::from(((0x2001_0db8_u128 << 96) + 2 * i).to_be_bytes()))
                .collect(),
            ..invalid
        };
        let huge = Event { at_ms: 2, kind: EventKind::PoolApplied { spec: Box::new(scattered) } };
        match log.append(&huge) {
            Err(LogError::TooLarge { bytes, limit }) => assert!(bytes > limit, "{bytes} {limit}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(log.head(), Ok(Some(index(1))), "nothing was appended");
        assert_eq!(log.append(&heartbeat(3, "a")).map(LogIndex::get), Ok(2));
        assert_eq!(log.append(&heartbeat(4, "a")), Err(LogError::Full { limit: 2 }));
        assert_eq!(read_all(&log, 10).len(), 2);
    }

    #[test]
    fn index_zero_is_no_index() {
        assert_eq!(LogIndex::from_stored(0), None);
        assert_eq!(LogIndex::FIRST.get(), 1);
        assert_eq!(LogIndex::FIRST.next(), index(2));
        assert_eq!(index(41).to_string(), "41");
    }
}
