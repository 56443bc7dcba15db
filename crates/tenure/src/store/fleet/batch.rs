//! The value of one log key in etcd, and the log indices of its events.
//!
//! One append is one etcd transaction putting one key whose value is a **batch**: a header line
//! `{"v":1,"events":N}` and then N core codec event records, one per line (the codec writes
//! compact JSON, which holds no raw newline). Every event of a batch has the batch's etcd
//! revision; its [`LogIndex`] is `revision << 16 | position`, so indices follow log order
//! (revision, then position in the batch) with gaps, as `log_store` allows. A batch holds at most
//! [`BATCH_EVENTS_MAX`] events and [`BATCH_BYTES_MAX`] bytes: [`chunks`] splits a larger append.

use std::ops::Range;

use tenure_core::log_store::{LOG_RECORD_BYTES_MAX, LogIndex};

/// Bits of a log index that hold an event's position in its batch.
pub const POSITION_BITS: u32 = 16;

/// Most events in one batch (positions 0 ..= 65535).
pub const BATCH_EVENTS_MAX: usize = 1 << POSITION_BITS;

/// Most bytes of event records in one batch: one record of the largest size the log takes (1 MiB),
/// which keeps a batch under etcd's default request limit (1.5 MiB).
pub const BATCH_BYTES_MAX: usize = LOG_RECORD_BYTES_MAX;

/// The format version of a batch.
const BATCH_VERSION: u64 = 1;

/// The log index of the event at `position` of the batch written at etcd `revision`; `None`
/// outside the ranges (revision 1 ..< 2^48, position < 2^16).
#[must_use]
pub fn index_of(revision: i64, position: usize) -> Option<LogIndex> {
    let revision = u64::try_from(revision).ok().filter(|r| *r > 0 && *r < (1 << (64 - POSITION_BITS)))?;
    let position = u64::try_from(position).ok().filter(|p| *p < (1 << POSITION_BITS))?;
    LogIndex::from_stored(revision << POSITION_BITS | position)
}

/// The etcd revision of the batch holding the event at `index`.
#[must_use]
pub fn revision_of(index: LogIndex) -> i64 {
    i64::try_from(index.get() >> POSITION_BITS).expect("a 48-bit revision fits an i64")
}

/// The stored value of a batch of encoded event records.
#[must_use]
pub fn encode(records: &[Vec<u8>]) -> Vec<u8> {
    let mut value = format!("{{\"v\":{BATCH_VERSION},\"events\":{}}}", records.len()).into_bytes();
    for record in records {
        debug_assert!(!record.contains(&b'\n'), "a codec record is one line");
        value.push(b'\n');
        value.extend_from_slice(record);
    }
    value
}

/// The event records of a stored batch, or why it is not one (one line).
pub fn decode(value: &[u8]) -> Result<Vec<&[u8]>, String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Header {
        v: u64,
        events: usize,
    }
    let mut lines = value.split(|b| *b == b'\n');
    let header = lines.next().unwrap_or_default();
    let header: Header =
        serde_json::from_slice(header).map_err(|e| format!("not a tenure log batch (header: {e})"))?;
    if header.v != BATCH_VERSION {
        return Err(format!(
            "log batch format version {} is not {BATCH_VERSION} (written by a newer tenure?)",
            header.v
        ));
    }
    let records: Vec<&[u8]> = lines.collect();
    if records.len() != header.events {
        return Err(format!("log batch says {} events but holds {}", header.events, records.len()));
    }
    if records.len() > BATCH_EVENTS_MAX {
        return Err(format!("log batch holds {} events, more than {BATCH_EVENTS_MAX}", records.len()));
    }
    Ok(records)
}

/// Splits `records` into consecutive ranges that each fit one batch: at most
/// [`BATCH_EVENTS_MAX`] events and [`BATCH_BYTES_MAX`] bytes (a single record is never split;
/// the log refused records over that size already).
#[must_use]
pub fn chunks(records: &[Vec<u8>]) -> Vec<Range<usize>> {
    let mut ranges = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (i, record) in records.iter().enumerate() {
        let full = i - start == BATCH_EVENTS_MAX || (i > start && bytes + record.len() > BATCH_BYTES_MAX);
        if full {
            ranges.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += record.len();
    }
    if start < records.len() {
        ranges.push(start..records.len());
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_follow_revision_then_position() {
        let a = index_of(7, 65_535).expect("must hold");
        let b = index_of(8, 0).expect("must hold");
        assert!(a < b);
        assert_eq!(revision_of(a), 7);
        assert_eq!(revision_of(b), 8);
        assert_eq!(index_of(0, 0), None, "revision 0 is no batch's");
        assert_eq!(index_of(1, BATCH_EVENTS_MAX), None);
        assert_eq!(index_of(1 << 48, 0), None);
    }

    #[test]
    fn a_batch_reads_back_and_a_damaged_one_is_named() {
        let records = vec![br#"{"a":1}"#.to_vec(), br#"{"b":"x\ny"}"#.to_vec()];
        let value = encode(&records);
        let back = decode(&value).expect("must hold");
        assert_eq!(back, vec![&records[0][..], &records[1][..]]);
        assert_eq!(decode(&encode(&[])).expect("must hold"), Vec::<&[u8]>::new());
        let short = &value[..value.len() - 9];
        let mut cut = short.to_vec();
        cut.truncate(short.iter().rposition(|b| *b == b'\n').expect("must hold"));
        assert!(decode(&cut).expect_err("must fail").contains("says 2 events but holds 1"));
        assert!(decode(b"{\"v\":2,\"events\":0}").expect_err("must fail").contains("version 2"));
        assert!(decode(b"hello").expect_err("must fail").contains("not a tenure log batch"));
    }

    #[test]
    fn chunks_keep_order_and_bounds() {
        let small = vec![vec![b'x'; 10]; 5];
        assert_eq!(chunks(&small), vec![0..5]);
        let big = vec![vec![b'x'; BATCH_BYTES_MAX / 2 + 1]; 3];
        assert_eq!(chunks(&big), vec![0..1, 1..2, 2..3]);
        let many = vec![vec![b'x'; 1]; BATCH_EVENTS_MAX + 1];
        assert_eq!(chunks(&many), vec![0..BATCH_EVENTS_MAX, BATCH_EVENTS_MAX..BATCH_EVENTS_MAX + 1]);
        assert!(chunks(&[]).is_empty());
    }
}
