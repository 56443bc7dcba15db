//! The fenced sink (SPEC 8): the enforcement the epoch stamp exists for.
//!
//! A [`FencedSink`] admits a message only if its leader epoch is at least the highest epoch it has
//! admitted before (equal is admitted: one term sends many messages), so a deposed leader's
//! in-flight work is rejected once the new leader's first message has been seen. The high-water
//! mark is durable: it is written to a file (temporary file, fsync, rename, fsync of the
//! directory) *before* the message that raised it is admitted, and read back by
//! [`FencedSink::open`], so a restarted sink still rejects what it rejected before. A file that
//! cannot be read or parsed is an error, never a silent reset to epoch 0.
//!
//! # Signed stamps
//!
//! A stamp is only a number; anything that can write to the pipeline can forge one. With a shared
//! key, [`StampSigner`] signs each stamp and a sink opened with
//! [`FencedSink::requiring_signatures`] rejects stamps that are unsigned, forged or altered. The
//! signature is HMAC-SHA256 with the shared key over this canonical byte string:
//!
//! ```text
//! SIGNATURE_DOMAIN (b"tenure-leader-epoch-stamp-v1\0", 29 bytes)
//! || epoch as 8 bytes, big-endian
//! || message id bytes (the rest; the epoch is fixed-length, so the split is unambiguous)
//! ```
//!
//! The domain prefix keeps these MACs from ever being valid for another use of the same key.
//! Verification compares in constant time (the `hmac` crate's `verify_slice`).
//!
//! # The mark file
//!
//! Three lines of text, every one ending in `\n`:
//!
//! ```text
//! tenure-fenced-sink v1
//! high-water-epoch <decimal u64>
//! sha256 <64 lowercase hex digits: SHA-256 of the first two lines, newlines included>
//! ```
//!
//! A sibling `<path>.lock` file is locked exclusively while a sink is open, so two sinks never
//! share one mark.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use hmac::Hmac;
use sha2::{Digest, Sha256};

use tenure_core::model::LeaderEpoch;

use crate::durable;

mod signing;

pub use signing::{
    MessageId, SIGNATURE_DOMAIN, SIGNATURE_LENGTH_BYTES, SIGNING_KEY_LENGTH_MIN_BYTES, SignatureFormatError,
    SigningKeyError, StampSignature, StampSigner,
};

/// The largest mark file [`FencedSink::open`] reads; anything longer is corrupt.
pub const MARK_FILE_LENGTH_MAX_BYTES: u64 = 4_096;

const MARK_FILE_HEADER: &str = "tenure-fenced-sink v1";

type HmacSha256 = Hmac<Sha256>;

/// What the sink judges: the epoch stamp of one message, its id, and its signature if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp<'a> {
    /// The leader epoch the message was stamped with.
    pub epoch: LeaderEpoch,
    /// The message's id (covered by the signature; unused by an unsigned sink).
    pub message_id: &'a [u8],
    /// The signature bytes as received, if any.
    pub signature: Option<&'a [u8]>,
}

impl<'a> Stamp<'a> {
    /// An unsigned stamp.
    #[must_use]
    pub fn unsigned(epoch: LeaderEpoch, message_id: &'a [u8]) -> Self {
        Self { epoch, message_id, signature: None }
    }

    /// A signed stamp.
    #[must_use]
    pub fn signed(epoch: LeaderEpoch, message_id: &'a [u8], signature: &'a [u8]) -> Self {
        Self { epoch, message_id, signature: Some(signature) }
    }
}

/// A message the sink admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// Its epoch.
    pub epoch: LeaderEpoch,
    /// Whether it raised the high-water mark (the first message of a newer term); the mark file
    /// was written and synced before this was returned.
    pub raised: bool,
}

/// Why the sink refused a message. The message must not be applied.
#[derive(Debug, thiserror::Error)]
pub enum Rejected {
    /// Stamped with an epoch below the highest admitted (a deposed leader's work), or with
    /// epoch 0, which no leader holds.
    #[error("stale leader epoch {epoch}: this sink has admitted epoch {high_water}")]
    StaleEpoch {
        /// The message's epoch.
        epoch: LeaderEpoch,
        /// The highest epoch admitted so far.
        high_water: LeaderEpoch,
    },
    /// The sink requires signed stamps and this one has no signature.
    #[error("stamp for epoch {epoch} is not signed and this sink requires signatures")]
    MissingSignature {
        /// The claimed epoch.
        epoch: LeaderEpoch,
    },
    /// The signature does not match (epoch, message id) under the shared key: forged or altered.
    #[error("stamp for epoch {epoch} has a bad signature (forged or altered)")]
    BadSignature {
        /// The claimed epoch.
        epoch: LeaderEpoch,
    },
    /// The epoch would raise the mark, but the new mark could not be made durable; admitting it
    /// anyway would let a restarted sink accept older work.
    #[error("epoch {epoch} would raise the high-water mark, which could not be persisted: {source}")]
    MarkNotPersisted {
        /// The message's epoch.
        epoch: LeaderEpoch,
        /// The persistence failure.
        source: SinkError,
    },
}

/// Rejections counted by reason since the sink was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RejectionCounts {
    /// [`Rejected::StaleEpoch`].
    pub stale_epoch: u64,
    /// [`Rejected::BadSignature`].
    pub bad_signature: u64,
    /// [`Rejected::MissingSignature`].
    pub missing_signature: u64,
    /// [`Rejected::MarkNotPersisted`].
    pub mark_not_persisted: u64,
}

impl RejectionCounts {
    /// All rejections.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.stale_epoch + self.bad_signature + self.missing_signature + self.mark_not_persisted
    }
}

/// Why a sink could not open or persist its mark.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// A file operation failed.
    #[error("{path}: {operation}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        operation: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The mark file exists but is not a valid mark: refusing to guess (a reset to 0 would admit
    /// stale work).
    #[error("{path}: corrupt high-water mark file: {reason}")]
    Corrupt {
        /// The mark file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// [`FencedSink::open_existing`] found no mark file.
    #[error("{path}: no high-water mark file")]
    Missing {
        /// The mark file.
        path: PathBuf,
    },
    /// Another sink holds this mark's lock.
    #[error("{path}: the mark is in use by another sink")]
    InUse {
        /// The lock file.
        path: PathBuf,
    },
    /// The mark read back after a write is not the mark written.
    #[error("{path}: wrote high-water epoch {wrote} but read back {read}")]
    ReadBackMismatch {
        /// The mark file.
        path: PathBuf,
        /// The epoch written.
        wrote: u64,
        /// The epoch read back.
        read: u64,
    },
}

/// A sink that rejects stale leader epochs, with a durable high-water mark.
#[derive(Debug)]
pub struct FencedSink {
    path: PathBuf,
    temporary_path: PathBuf,
    directory: PathBuf,
    /// Held (exclusively locked) for the sink's lifetime.
    _lock: File,
    high_water: LeaderEpoch,
    verifier: Option<StampSigner>,
    rejections: RejectionCounts,
    admitted_total: u64,
    mark_writes_total: u64,
}

impl FencedSink {
    /// Opens the sink whose mark lives at `path`, creating the mark (at epoch 0) if the file does
    /// not exist. An existing file that cannot be read or parsed is an error.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, SinkError> {
        Self::open_with(path.as_ref(), true)
    }

    /// Like [`FencedSink::open`], but a missing mark file is [`SinkError::Missing`]: for a
    /// restart, where the file must already be there.
    pub fn open_existing(path: impl AsRef<Path>) -> Result<Self, SinkError> {
        Self::open_with(path.as_ref(), false)
    }

    fn open_with(path: &Path, create: bool) -> Result<Self, SinkError> {
        let directory = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
            _ => PathBuf::from("."),
        };
        let lock = lock_mark(&with_suffix(path, ".lock"))?;
        let stored = read_mark(path)?;
        let mut sink = Self {
            path: path.to_owned(),
            temporary_path: with_suffix(path, ".tmp"),
            directory,
            _lock: lock,
            high_water: stored.unwrap_or(LeaderEpoch::NEVER),
            verifier: None,
            rejections: RejectionCounts::default(),
            admitted_total: 0,
            mark_writes_total: 0,
        };
        match (stored, create) {
            (Some(_), _) => {}
            (None, true) => sink.persist(LeaderEpoch::NEVER)?,
            (None, false) => return Err(SinkError::Missing { path: path.to_owned() }),
        }
        Ok(sink)
    }

    /// From now on, admits only stamps signed with `verifier`'s key.
    #[must_use]
    pub fn requiring_signatures(mut self, verifier: StampSigner) -> Self {
        self.verifier = Some(verifier);
        self
    }

    /// Judges one message. Order: signature (if required), then epoch; a rising epoch is made
    /// durable before it is admitted, so this blocks on fsync once per new term and never for an
    /// equal epoch. A forged stamp never moves the mark.
    pub fn admit(&mut self, stamp: &Stamp<'_>) -> Result<Admitted, Rejected> {
        let epoch = stamp.epoch;
        if let Some(verifier) = &self.verifier {
            let Some(signature) = stamp.signature else {
                self.rejections.missing_signature += 1;
                return Err(Rejected::MissingSignature { epoch });
            };
            if !verifier.verify(epoch, stamp.message_id, signature) {
                self.rejections.bad_signature += 1;
                return Err(Rejected::BadSignature { epoch });
            }
        }
        // Epoch 0 means "never held": no leader stamps it, so it is stale whatever the mark.
        if epoch == LeaderEpoch::NEVER || epoch < self.high_water {
            self.rejections.stale_epoch += 1;
            return Err(Rejected::StaleEpoch { epoch, high_water: self.high_water });
        }
        let raised = epoch > self.high_water;
        if raised {
            if let Err(source) = self.persist(epoch) {
                self.rejections.mark_not_persisted += 1;
                return Err(Rejected::MarkNotPersisted { epoch, source });
            }
            self.high_water = epoch;
        }
        self.admitted_total += 1;
        Ok(Admitted { epoch, raised })
    }

    /// The highest epoch admitted (as stored durably).
    #[must_use]
    pub fn high_water(&self) -> LeaderEpoch {
        self.high_water
    }

    /// All rejections since the sink was opened.
    #[must_use]
    pub fn rejected_total(&self) -> u64 {
        self.rejections.total()
    }

    /// Rejections by reason since the sink was opened.
    #[must_use]
    pub fn rejections(&self) -> RejectionCounts {
        self.rejections
    }

    /// Messages admitted since the sink was opened.
    #[must_use]
    pub fn admitted_total(&self) -> u64 {
        self.admitted_total
    }

    /// Mark writes (each one fsync'd) since the sink was opened, the initial write of a new mark
    /// included.
    #[must_use]
    pub fn mark_writes_total(&self) -> u64 {
        self.mark_writes_total
    }

    /// The mark file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `epoch` durably: temporary file, fsync, rename, fsync of the directory, then reads
    /// it back as a restarted sink would.
    fn persist(&mut self, epoch: LeaderEpoch) -> Result<(), SinkError> {
        assert!(epoch >= self.high_water, "the mark only rises: {epoch} < {}", self.high_water);
        durable::replace(&self.path, &self.temporary_path, &self.directory, encode_mark(epoch).as_bytes())?;
        self.mark_writes_total += 1;
        let read = read_mark(&self.path)?.unwrap_or(LeaderEpoch::NEVER);
        if read != epoch {
            return Err(SinkError::ReadBackMismatch {
                path: self.path.clone(),
                wrote: epoch.get(),
                read: read.get(),
            });
        }
        Ok(())
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn lock_mark(lock_path: &Path) -> Result<File, SinkError> {
    match durable::try_lock(lock_path)? {
        durable::Lock::Held(lock) => Ok(lock),
        durable::Lock::Busy(_) => Err(SinkError::InUse { path: lock_path.to_owned() }),
    }
}

impl From<durable::FileError> for SinkError {
    fn from(error: durable::FileError) -> Self {
        Self::Io { path: error.path, operation: error.operation, source: error.source }
    }
}

fn mark_body(epoch: LeaderEpoch) -> String {
    format!("{MARK_FILE_HEADER}\nhigh-water-epoch {}\n", epoch.get())
}

fn encode_mark(epoch: LeaderEpoch) -> String {
    let body = mark_body(epoch);
    let sum = hex(&Sha256::digest(body.as_bytes()));
    format!("{body}sha256 {sum}\n")
}

/// The stored mark; `None` if the file does not exist.
fn read_mark(path: &Path) -> Result<Option<LeaderEpoch>, SinkError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(SinkError::Io { path: path.to_owned(), operation: "open", source }),
    };
    let mut bytes = Vec::new();
    file.take(MARK_FILE_LENGTH_MAX_BYTES + 1).read_to_end(&mut bytes).map_err(|source| SinkError::Io {
        path: path.to_owned(),
        operation: "read",
        source,
    })?;
    let corrupt = |reason: String| SinkError::Corrupt { path: path.to_owned(), reason };
    if bytes.len() as u64 > MARK_FILE_LENGTH_MAX_BYTES {
        return Err(corrupt(format!("longer than {MARK_FILE_LENGTH_MAX_BYTES} bytes")));
    }
    let text = String::from_utf8(bytes).map_err(|_| corrupt("not UTF-8".into()))?;
    decode_mark(&text).map(Some).map_err(corrupt)
}

fn decode_mark(text: &str) -> Result<LeaderEpoch, String> {
    let Some(lines) = text.strip_suffix('\n') else {
        return Err("does not end with a newline (truncated?)".into());
    };
    let lines: Vec<&str> = lines.split('\n').collect();
    let [header, mark, sum] = lines.as_slice() else {
        return Err(format!("{} lines, expected 3", lines.len()));
    };
    if *header != MARK_FILE_HEADER {
        return Err(format!("first line {header:?}, expected {MARK_FILE_HEADER:?}"));
    }
    let digits = mark.strip_prefix("high-water-epoch ").ok_or_else(|| format!("bad mark line {mark:?}"))?;
    let epoch = digits.parse::<u64>().map_err(|_| format!("bad epoch {digits:?}"))?;
    let stored_sum = sum.strip_prefix("sha256 ").ok_or_else(|| format!("bad checksum line {sum:?}"))?;
    let epoch = LeaderEpoch::from_stored(epoch);
    // `{digits}` re-rendered must be the canonical form, or the checksum cannot match anyway.
    let expected = hex(&Sha256::digest(mark_body(epoch).as_bytes()));
    if stored_sum != expected {
        return Err("checksum mismatch".into());
    }
    Ok(epoch)
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(2 * bytes.len());
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    text
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use hmac::{KeyInit, Mac};

    use super::*;

    #[test]
    fn the_mark_encoding_round_trips_and_detects_a_flipped_digit() {
        let text = encode_mark(LeaderEpoch::from_stored(42));
        assert_eq!(decode_mark(&text), Ok(LeaderEpoch::from_stored(42)));
        let flipped = text.replacen("42", "43", 1);
        assert_eq!(decode_mark(&flipped), Err("checksum mismatch".to_string()));
        assert!(decode_mark(&text[..text.len() - 1]).is_err(), "a truncated file is refused");
        assert!(decode_mark("").is_err());
    }

    #[test]
    fn a_signature_round_trips_through_hex() {
        let signer = StampSigner::new(&[7u8; 32]).expect("long enough");
        let signature = signer.sign(LeaderEpoch::from_stored(1), b"m-1");
        assert_eq!(StampSignature::from_hex(&signature.to_hex()), Ok(signature));
        assert_eq!(
            StampSignature::from_hex(&signature.to_hex().to_uppercase()),
            Ok(signature),
            "either case"
        );
        assert_eq!(StampSignature::from_hex("abc"), Err(SignatureFormatError::Length { length: 3 }));
        assert_eq!(StampSignature::from_hex(&"g".repeat(64)), Err(SignatureFormatError::NotHex));
    }

    #[test]
    fn the_signed_bytes_are_domain_then_big_endian_epoch_then_id() {
        let key = [9u8; 32];
        let signer = StampSigner::new(&key).expect("long enough");
        let mut mac = HmacSha256::new_from_slice(&key).expect("any length");
        mac.update(b"tenure-leader-epoch-stamp-v1\0");
        mac.update(&[0, 0, 0, 0, 0, 0, 1, 2]);
        mac.update(b"id");
        let expected: [u8; 32] = mac.finalize().into_bytes().into();
        assert_eq!(signer.sign(LeaderEpoch::from_stored(258), b"id").as_bytes(), &expected);
    }

    #[test]
    fn a_short_key_is_refused() {
        assert_eq!(
            StampSigner::new(&[1u8; 31]).map(|_| ()),
            Err(SigningKeyError::TooShort { length: 31, min: 32 })
        );
    }
}
