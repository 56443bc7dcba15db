//! The stored form of what the log and a node's journal keep: log events, pool specs, stamped
//! actions, journal entries and changes, and the fence's high-water marks. The embedded store
//! (redb) and etcd hold these bytes, so the form is stable and versioned, and a record that does
//! not decode is a [`CodecError`], never a panic.
//!
//! # Format, version 1
//!
//! A record is one JSON object (UTF-8, one line, no insignificant whitespace) whose **first key
//! is the format version** `"v"`, followed by the record's own fields. A reader looks at `v`
//! before anything else: an unknown version is [`CodecError::UnknownVersion`], not a guess.
//! Names are the SPEC's wire names: event kinds in kebab-case (SPEC 2), fields in camelCase;
//! addresses are their canonical text (RFC 5952, no prefix length); tokens are plain integers
//! (0 = never held); durations are whole milliseconds with the unit in the field name. Every
//! field is written, except the optional ones of a journal entry (`reason`, `detail`,
//! `executedSeq`, and its attempts: `attempts`, `lastAttemptMs`, `lastAttemptWallMs`,
//! `lastError`), which are left out when absent (0 attempts: absent). A reader refuses unknown
//! fields.
//!
//! Fields added to version 1 are optional, so every record an older build wrote still reads
//! (an entry written before attempts were kept reads as never attempted); a record that carries
//! them is refused by an older build, naming the field, rather than read without it.
//!
//! One record of each kind (the golden tests in `codec/tests.rs` hold these exact bytes):
//!
//! ```text
//! {"v":1,"event":"heartbeat","at":1000,"node":"a"}                  also drain, undrain
//! {"v":1,"event":"health","at":1000,"node":"a","healthy":false}
//! {"v":1,"event":"vrrp","at":1000,"node":"a","state":"master"}      master | backup | fault
//! {"v":1,"event":"pool-applied","at":0,"spec":{"name":"edge","addresses":["10.0.0.10",
//!   "10.0.0.16/29","2001:db8::1"],"provider":"sim1","placementGroup":"g1","members":["a","b"],
//!   "authority":"none","approval":"auto","deprovisionHoldMs":5000,"heartbeatTtlMs":3000,
//!   "promotionHoldMs":1000,"epochLocking":true,"preferNodes":["a"],"preempt":false,
//!   "autoFailover":true}}
//! {"v":1,"event":"pool-deleted","at":1000,"pool":"edge"}
//! {"v":1,"event":"desire","at":1000,"pool":"edge","address":"10.0.0.10"}   also undesire
//! {"v":1,"event":"approve","at":1000,"idempotencyKey":"edge/10.0.0.10/…"}
//! {"v":1,"event":"action-result","at":1000,"node":"a","idempotencyKey":"edge/10.0.0.10/…",
//!   "outcome":"executed","detail":"ok"}                              executed | failed
//! {"v":1,"event":"inventory","at":1000,"provider":"sim1","address":"2001:db8::1",
//!   "holders":["eni-a"]}                   "scope":["lan-a"] too when the read saw only those NICs
//! {"v":1,"event":"tokens-raised","at":1000,"by":1000000}            appended by a restore
//!
//! a stamped action:
//! {"v":1,"pool":"edge","address":"10.0.0.10","verb":"assign-secondary-ip","holder":"a",
//!   "provider":"sim1","nic":"eni-a","captureDomain":"provider:sim1:placement:g1",
//!   "captureEpoch":1,"ownershipEpoch":1,"idempotencyKey":"edge/10.0.0.10/…/owner:1:epoch:1"}
//! a journal entry (state: pending | approved | executed | failed | skipped):
//! {"v":1,"seq":1,"action":{…as above, without "v"…},"state":"executed","detail":"ok",
//!   "executedSeq":1}
//! {"v":1,"seq":2,"action":{…},"state":"skipped","reason":"stale-epoch"}
//! {"v":1,"seq":3,"action":{…},"state":"failed","detail":"exit status 1: no route",
//!   "attempts":2,"lastAttemptMs":1000,"lastAttemptWallMs":1700000000000,
//!   "lastError":"exit status 1: no route"}
//! a journal change:
//! {"v":1,"change":"append","seq":1,"action":{…},"state":"approved"}
//! {"v":1,"change":"set-state","seq":1,"state":"executed","detail":"ok","executedSeq":1}
//! {"v":1,"change":"raise-high-water","pool":"edge","address":"10.0.0.10",
//!   "captureDomain":"provider:sim1:placement:g1","captureEpoch":2,"ownershipEpoch":1}
//! {"v":1,"change":"attempt","seq":1,"atMs":1000,"wallMs":1700000000000}   wallMs optional
//! {"v":1,"change":"compact","seqs":[3,4]}
//! the high-water marks, as plain rows sorted by pool, address, capture domain:
//! {"v":1,"marks":[{"pool":"edge","address":"10.0.0.10",
//!   "captureDomain":"provider:sim1:placement:g1","captureEpoch":2,"ownershipEpoch":1}]}
//! a pool spec alone: the object under "spec" above, with "v":1 first.
//! ```
//!
//! A pool's addresses are stored as the fewest CIDR blocks that cover exactly its set (a single
//! address without a prefix length), so a full pool of 65,536 addresses in one `/16` is one short
//! string rather than a megabyte, and fits an etcd value.
//!
//! # What decoding checks
//!
//! Decoding only builds values through the rules of their types, so a damaged or foreign store
//! cannot smuggle anything past them:
//! - a pool spec is rebuilt by the pool parser itself ([`crate::spec::parse_pool_documents`]), so
//!   every rule of parsing (names, the 65,536-address limit, members, `preferNodes`, a
//!   `heartbeatTTL` above 0, …) holds for a decoded pool or the record is
//!   [`CodecError::InvalidPool`]; encoding checks the same before it writes;
//! - tokens are read through `from_stored`, which is all their rules allow for stored values;
//! - a capture domain must read `provider:<name>:placement:<name>`; an action's idempotency key
//!   must be the one its fields give; a journal state must agree with its reason and execution
//!   order; an entry's attempt times come with a count above 0 and only then; sequence numbers are 1 or more, and a compaction's ascending; high-water rows must be in canonical order, one ownershipEpoch per address. A record
//!   that breaks one of these is [`CodecError::Inconsistent`].
//!
//! The in-memory types are not serialized directly: the records go through private wire types
//! (`codec/wire.rs`, `codec/pool.rs`), so a field renamed or a type restructured in memory cannot
//! silently change what the stores hold, and there is no `Deserialize` that skips the checks.
//! Why JSON and not a binary format: `docs/decisions.md`, "The stored form".

mod pool;
mod wire;

#[cfg(test)]
pub(crate) mod tests;

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, DeserializeOwned, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::fence::HighWater;
use crate::journal::{JournalChange, JournalEntry};
use crate::log::Event;
use crate::model::{PoolSpec, StampedAction};

pub use pool::check_pool_spec;
pub(crate) use wire::parse_capture_domain;

/// The format version this build writes, and the only one it reads.
pub const FORMAT_VERSION: u64 = 1;

/// The record kinds, as errors name them.
const RECORD_EVENT: &str = "event";
/// See [`RECORD_EVENT`].
const RECORD_POOL_SPEC: &str = "pool spec";
/// See [`RECORD_EVENT`].
const RECORD_ACTION: &str = "stamped action";
/// See [`RECORD_EVENT`].
const RECORD_JOURNAL_ENTRY: &str = "journal entry";
/// See [`RECORD_EVENT`].
const RECORD_JOURNAL_CHANGE: &str = "journal change";
/// See [`RECORD_EVENT`].
const RECORD_HIGH_WATER: &str = "high-water marks";

/// What went wrong encoding or decoding a record. Each variant names the kind of record.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The bytes are not a record of this kind: not UTF-8 JSON, truncated, trailing bytes, no
    /// leading `v`, a field missing, unknown, or of the wrong type, an unknown event kind or verb.
    #[error("a stored {record} does not decode: {reason}")]
    Malformed {
        /// The kind of record being read.
        record: &'static str,
        /// The decoder's account, with the byte position (`line 1 column N`) where it stopped.
        reason: String,
    },
    /// The record is well-formed but written in a format version this build does not read (a
    /// newer agent wrote it, or the bytes are from something else).
    #[error("a stored {record} is in format version {version}; this build reads version {current}", current = FORMAT_VERSION)]
    UnknownVersion {
        /// The kind of record being read.
        record: &'static str,
        /// The version the record declares.
        version: u64,
    },
    /// A pool spec breaks a rule that parsing a MobilityPool enforces (SPEC 10, 12): on decode, a
    /// damaged store; on encode, a spec that never came from the parser.
    #[error("pool `{pool}` breaks the rules of a pool spec: {reason}")]
    InvalidPool {
        /// The pool's name as stored.
        pool: String,
        /// Every rule it breaks, as the parser words them, separated by `; `.
        reason: String,
    },
    /// The record decodes but contradicts itself or the rules of its types: an idempotency key
    /// that is not the one its fields give, a capture domain not of the form
    /// `provider:<name>:placement:<name>`, a `skipped` entry without a reason, an executed entry
    /// without its execution order, a sequence number 0 or a compaction's out of order,
    /// high-water rows out of order or disagreeing. Encoding refuses the same.
    #[error("a stored {record} is inconsistent: {reason}")]
    Inconsistent {
        /// The kind of record being read or written.
        record: &'static str,
        /// What contradicts what.
        reason: String,
    },
    /// The serializer refused a value. Not expected with the current types (every map key is a
    /// string, every number an integer); kept so that a future field that cannot be written is
    /// an error on the write path, not a panic.
    #[error("a {record} cannot be written: {reason}")]
    Unwritable {
        /// The kind of record being written.
        record: &'static str,
        /// The serializer's account.
        reason: String,
    },
}

/// Encodes one log event.
pub fn encode_event(event: &Event) -> Result<Vec<u8>, CodecError> {
    seal(RECORD_EVENT, &wire::EventWire::of(event)?)
}

/// Decodes one log event; a `pool-applied` spec is rebuilt through the pool parser.
pub fn decode_event(bytes: &[u8]) -> Result<Event, CodecError> {
    open::<wire::EventWire<'static>>(RECORD_EVENT, bytes)?.into_event()
}

/// The event a scenario entry (SPEC 11) names, read through the same wire types as a stored
/// record: `name` is the kind, `fields` its fields besides `event` and `at` as a record writes
/// them. The scenario keeps its own forms to itself (`scenario.rs`), so a kind, a field or a
/// default the store does not know cannot enter a replay.
pub(crate) fn event_from_fields(
    at_ms: u64,
    name: &str,
    fields: serde_json::Map<String, serde_json::Value>,
) -> Result<Event, CodecError> {
    let mut record = serde_json::Map::with_capacity(fields.len() + 2);
    record.insert("event".to_owned(), name.into());
    record.insert("at".to_owned(), at_ms.into());
    record.extend(fields);
    wire::EventWire::deserialize(serde_json::Value::Object(record))
        .map_err(|e| CodecError::Malformed { record: RECORD_EVENT, reason: e.to_string() })?
        .into_event()
}

/// A validated pool spec as a record writes it (the `spec` of a `pool-applied`).
pub(crate) fn pool_spec_value(spec: &PoolSpec) -> Result<serde_json::Value, CodecError> {
    serde_json::to_value(pool::PoolSpecWire::checked(spec)?)
        .map_err(|e| CodecError::Unwritable { record: RECORD_POOL_SPEC, reason: e.to_string() })
}

/// Encodes a validated pool spec (refused with [`CodecError::InvalidPool`] if it is not one).
pub fn encode_pool_spec(spec: &PoolSpec) -> Result<Vec<u8>, CodecError> {
    seal(RECORD_POOL_SPEC, &pool::PoolSpecWire::checked(spec)?)
}

/// Decodes a pool spec, rebuilt through the pool parser.
pub fn decode_pool_spec(bytes: &[u8]) -> Result<PoolSpec, CodecError> {
    open::<pool::PoolSpecWire<'static>>(RECORD_POOL_SPEC, bytes)?.into_spec()
}

/// Encodes a stamped action (for example the one an `exec` provider is fed).
pub fn encode_stamped_action(action: &StampedAction) -> Result<Vec<u8>, CodecError> {
    seal(RECORD_ACTION, &wire::ActionWire::of(action))
}

/// Decodes a stamped action, checking its idempotency key against its fields.
pub fn decode_stamped_action(bytes: &[u8]) -> Result<StampedAction, CodecError> {
    open::<wire::ActionWire<'static>>(RECORD_ACTION, bytes)?.into_action(RECORD_ACTION)
}

/// Encodes one journal entry.
pub fn encode_journal_entry(entry: &JournalEntry) -> Result<Vec<u8>, CodecError> {
    seal(RECORD_JOURNAL_ENTRY, &wire::EntryWire::of(RECORD_JOURNAL_ENTRY, entry)?)
}

/// Decodes one journal entry, checking its action and that its state, reason and execution
/// order agree.
pub fn decode_journal_entry(bytes: &[u8]) -> Result<JournalEntry, CodecError> {
    open::<wire::EntryWire<'static>>(RECORD_JOURNAL_ENTRY, bytes)?.into_entry(RECORD_JOURNAL_ENTRY)
}

/// Encodes one durable journal change.
pub fn encode_journal_change(change: &JournalChange) -> Result<Vec<u8>, CodecError> {
    seal(RECORD_JOURNAL_CHANGE, &wire::ChangeWire::of(change)?)
}

/// Whether [`encode_journal_change`] would encode `change`: its checks (sequence numbers a
/// record can carry), without the encoding. A store that buffers changes until a commit refuses
/// one here, before anything is buffered.
pub fn check_journal_change(change: &JournalChange) -> Result<(), CodecError> {
    wire::ChangeWire::of(change).map(drop)
}

/// Decodes one durable journal change, with the checks of its parts.
pub fn decode_journal_change(bytes: &[u8]) -> Result<JournalChange, CodecError> {
    open::<wire::ChangeWire<'static>>(RECORD_JOURNAL_CHANGE, bytes)?.into_change()
}

/// Encodes the high-water marks as plain rows, sorted by pool, address and capture domain.
pub fn encode_high_water(high_water: &HighWater) -> Result<Vec<u8>, CodecError> {
    seal(RECORD_HIGH_WATER, &wire::HighWaterWire::of(high_water))
}

/// Decodes high-water marks from their rows (rows out of canonical order, repeated, or giving
/// one address two ownershipEpochs are [`CodecError::Inconsistent`]).
pub fn decode_high_water(bytes: &[u8]) -> Result<HighWater, CodecError> {
    open::<wire::HighWaterWire<'static>>(RECORD_HIGH_WATER, bytes)?.into_high_water()
}

/// The envelope on the write side: `v` first, then the record's fields (flattened).
#[derive(Serialize)]
struct Sealed<'r, T: Serialize> {
    /// The format version.
    v: u64,
    /// The record.
    #[serde(flatten)]
    record: &'r T,
}

/// Writes `value` as a record of version [`FORMAT_VERSION`].
fn seal<T: Serialize>(record: &'static str, value: &T) -> Result<Vec<u8>, CodecError> {
    serde_json::to_vec(&Sealed { v: FORMAT_VERSION, record: value })
        .map_err(|e| CodecError::Unwritable { record, reason: e.to_string() })
}

/// Reads a record of kind `record`: its version first, then, only for [`FORMAT_VERSION`], the rest
/// of the object as a `T`, in one pass.
fn open<T: DeserializeOwned>(record: &'static str, bytes: &[u8]) -> Result<T, CodecError> {
    match serde_json::from_slice::<Opened<T>>(bytes) {
        Ok(Opened::Record(value)) => Ok(value),
        Ok(Opened::UnknownVersion(version)) => Err(CodecError::UnknownVersion { record, version }),
        Err(e) => Err(CodecError::Malformed { record, reason: e.to_string() }),
    }
}

/// A record read as far as its version allows.
enum Opened<T> {
    /// Version 1: the record.
    Record(T),
    /// Another version: the rest was skipped unread.
    UnknownVersion(u64),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Opened<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(OpenVisitor(PhantomData))
    }
}

/// Reads `"v"` first and hands the rest of the object to `T`.
struct OpenVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for OpenVisitor<T> {
    type Value = Opened<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a record: a JSON object whose first key is the format version `v`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        if map.next_key::<VersionKey>()?.is_none() {
            return Err(de::Error::custom(
                "the record is empty; its first key must be the format version `v`",
            ));
        }
        let version: u64 = map.next_value()?;
        if version != FORMAT_VERSION {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(Opened::UnknownVersion(version));
        }
        T::deserialize(MapAccessDeserializer::new(map)).map(Opened::Record)
    }
}

/// The key `v`, and nothing else.
struct VersionKey;

impl<'de> Deserialize<'de> for VersionKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(VersionKeyVisitor)
    }
}

/// See [`VersionKey`].
struct VersionKeyVisitor;

impl Visitor<'_> for VersionKeyVisitor {
    type Value = VersionKey;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the key `v`")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<VersionKey, E> {
        if key == "v" {
            Ok(VersionKey)
        } else {
            Err(E::custom(format!("the first key must be the format version `v`, not `{key}`")))
        }
    }
}
