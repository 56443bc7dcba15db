//! The redb tables of a store and the stored form of the rows that are not core codec records
//! (see the table in the module doc of `store`).

use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use tenure_core::codec;
use tenure_core::log::Event;
use tenure_core::log_store::{LogError, LogIndex, LogRecord};

use super::identity::{RecordError, decode_record};

/// `meta`: the store's identity under [`META_IDENTITY_KEY`].
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// The key of the identity record in [`META`].
pub(crate) const META_IDENTITY_KEY: &str = "identity";
/// `log`: index → codec event.
pub(crate) const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
/// `journal_entries`: (node, seq) → codec journal entry.
pub(crate) const ENTRIES: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("journal_entries");
/// `journal_marks`: (node, `<pool> <address> <captureDomain>`) → codec `raise-high-water` change.
pub(crate) const MARKS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("journal_marks");
/// `journal_counters`: node → [`Counters`].
pub(crate) const COUNTERS: TableDefinition<&str, &[u8]> = TableDefinition::new("journal_counters");

/// A node's journal counters: `{"v":1,"lastSeq":…,"executions":…}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Counters {
    /// The highest sequence number ever given (compacted entries included).
    pub(crate) last_seq: u64,
    /// Executed entries so far.
    pub(crate) executions: u64,
}

impl Counters {
    /// Decodes a counters row.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        decode_record(bytes)
    }
}

/// The key of a high-water row within its node: pool, address and capture domain, which hold
/// no space (names are `[A-Za-z0-9._-]`, addresses canonical text).
pub(crate) fn mark_key(pool: &str, address: std::net::IpAddr, capture_domain: &str) -> String {
    format!("{pool} {address} {capture_domain}")
}

/// Reads up to `count` log records from `from` out of an open `log` table.
pub(crate) fn read_log(
    table: &impl ReadableTable<u64, &'static [u8]>,
    from: LogIndex,
    count: usize,
) -> Result<Vec<LogRecord>, LogError> {
    let unavailable = |e: redb::StorageError| LogError::Unavailable { reason: e.to_string() };
    let mut records = Vec::new();
    for row in table.range(from.get()..).map_err(unavailable)?.take(count) {
        let (key, value) = row.map_err(unavailable)?;
        let index = LogIndex::from_stored(key.value())
            .ok_or_else(|| LogError::Unavailable { reason: "the log table holds index 0".into() })?;
        let event: Event =
            codec::decode_event(value.value()).map_err(|source| LogError::Corrupt { index, source })?;
        records.push(LogRecord { index, event });
    }
    Ok(records)
}
