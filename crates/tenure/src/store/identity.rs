//! The store's identity: its cluster id, the highest log index and the highest token it ever
//! recorded, and the restores applied to it. It lives twice: in the store's `meta` table, and in
//! the **identity file** (`identityFile` in the agent config), outside the store's directory, so
//! that a plain copy of an old store over the current one is caught (the store is then behind
//! the file). Both hold the same one-line JSON record:
//!
//! ```text
//! {"v":1,"clusterId":"9f…","highestIndex":1234,"highestToken":17,
//!  "restores":[{"at":1760000000000,"by":1000017,"indexFrom":1001234}]}
//! ```
//!
//! `at` is the restore's wall-clock time in unix milliseconds, `by` what every token was raised
//! by, `indexFrom` the log index of its `tokens-raised` event. The file is written atomically
//! ([`write_file_atomically`]: a temporary file beside it, fsync, rename, fsync of the directory),
//! so a crash leaves the old file or the new one, never half of one.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{STORE_FORMAT_VERSION, StoreError};

/// Largest identity file read, in bytes: a record with thousands of restores still fits.
const IDENTITY_FILE_BYTES_MAX: u64 = 1024 * 1024;

/// One restore applied to a store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RestoreRecord {
    /// When it ran, wall clock, unix milliseconds.
    pub at: u64,
    /// What every token was raised by.
    pub by: u64,
    /// The log index of its `tokens-raised` event (the first index after the jump).
    pub index_from: u64,
}

/// The identity of a store (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoreIdentity {
    /// Made at creation from 128 random bits, 32 lowercase hex digits; kept by a restore.
    pub cluster_id: String,
    /// The highest log index the store committed (0: an empty log).
    pub highest_index: u64,
    /// The highest token the store knows was issued or seen (0: none).
    pub highest_token: u64,
    /// The restores applied, oldest first.
    #[serde(default)]
    pub restores: Vec<RestoreRecord>,
}

/// Just the version of a record, whatever else it holds.
#[derive(Deserialize)]
struct VersionOnly {
    /// The store format version.
    v: u64,
}

/// Why a store record does not decode.
#[derive(Debug)]
pub(crate) enum RecordError {
    /// Another format version.
    UnknownVersion(u64),
    /// Not a record of this kind.
    Malformed(String),
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UnknownVersion(v) => {
                write!(f, "format version {v}; this build reads version {STORE_FORMAT_VERSION}")
            }
            Self::Malformed(reason) => f.write_str(reason),
        }
    }
}

/// Writes one of the store's own records: `{"v":1,…}`, one line, the version first.
pub(crate) fn encode_record<T: Serialize>(record: &T) -> Vec<u8> {
    let body = serde_json::to_vec(record)
        .expect("a store record is a struct of strings and integers: it always serializes");
    debug_assert!(body.starts_with(b"{") && body.ends_with(b"}"), "a record is a JSON object");
    let mut out = format!("{{\"v\":{STORE_FORMAT_VERSION}").into_bytes();
    if body.len() > 2 {
        out.push(b',');
    }
    out.extend_from_slice(&body[1..]);
    out
}

/// Reads one of the store's own records, its version first; unknown fields are refused.
pub(crate) fn decode_record<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, RecordError> {
    let malformed = |e: serde_json::Error| RecordError::Malformed(e.to_string());
    let version: VersionOnly = serde_json::from_slice(bytes).map_err(malformed)?;
    if version.v != STORE_FORMAT_VERSION {
        return Err(RecordError::UnknownVersion(version.v));
    }
    let mut value: serde_json::Value = serde_json::from_slice(bytes).map_err(malformed)?;
    if let Some(object) = value.as_object_mut() {
        object.remove("v");
    }
    serde_json::from_value(value).map_err(malformed)
}

impl StoreIdentity {
    /// A new cluster's identity: a fresh id, nothing written yet.
    pub(crate) fn new_cluster() -> Self {
        Self {
            cluster_id: format!("{:032x}", rand::random::<u128>()),
            highest_index: 0,
            highest_token: 0,
            restores: Vec::new(),
        }
    }

    /// Reads the identity file: `None` when it does not exist; [`StoreError::IdentityUnreadable`]
    /// when it exists but cannot be read or does not decode.
    pub(crate) fn read_file(path: &Path) -> Result<Option<Self>, StoreError> {
        let unreadable = |reason: String| StoreError::IdentityUnreadable { path: path.to_owned(), reason };
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(unreadable(e.to_string())),
        };
        if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > IDENTITY_FILE_BYTES_MAX {
            return Err(unreadable(format!("larger than {IDENTITY_FILE_BYTES_MAX} bytes")));
        }
        let identity: Self = decode_record(&bytes).map_err(|e| unreadable(e.to_string()))?;
        identity.check().map_err(unreadable)?;
        Ok(Some(identity))
    }

    /// Writes the identity file atomically.
    pub(crate) fn write_file(&self, path: &Path) -> Result<(), StoreError> {
        let mut line = encode_record(self);
        line.push(b'\n');
        write_file_atomically(path, &line)
    }

    /// What a decoded identity must satisfy: a cluster id of 32 lowercase hex digits.
    pub(crate) fn check(&self) -> Result<(), String> {
        let hex = self.cluster_id.len() == 32
            && self.cluster_id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if hex {
            Ok(())
        } else {
            Err(format!("cluster id `{}` is not 32 lowercase hex digits", self.cluster_id))
        }
    }
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, fsynced, renamed over it, the
/// directory fsynced. A crash leaves the old file or the new one, never half of one. The one
/// implementation is [`tenure_lead::durable::replace_atomically`]; this gives its error in the
/// store's form (`fsync PATH: …`).
pub fn write_file_atomically(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    Ok(tenure_lead::durable::replace_atomically(path, bytes)?)
}
