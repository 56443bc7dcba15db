//! The fenced sink (SPEC 8): the enforcement the epoch stamp exists for.
//!
//! A [`FencedSink`] admits a message only if its leader epoch is at least the highest epoch it has
//! admitted before (equal is admitted: one term sends many messages), so a deposed leader's
//! in-flight work is rejected once the new leader's first message has been seen. The high-water
//! mark is durable: it is written to a file (temporary file, fsync, rename, fsync of the
//! directory) *before* the message that raised it is admitted, and read back by
//! [`FencedSink::open_existing`], so a restarted sink still rejects what it rejected before.
//!
//! A mark is made once, by [`FencedSink::create`] (which refuses if one exists), and reopened by
//! [`FencedSink::open_existing`] (which refuses a missing one: a deleted mark file must not quietly
//! reopen fencing at epoch 0). A file that cannot be read or parsed is an error, never a silent
//! reset.
//!
//! # Signed stamps
//!
//! A stamp is only a number; anything that can write to the pipeline can forge one. With a shared
//! key, [`StampSigner`] signs each stamp and a sink opened with
//! [`FencedSink::requiring_signatures`] rejects stamps that are unsigned, forged, altered, signed
//! for another election, or signed with a key it does not hold. The signature is HMAC-SHA256 with
//! the shared key over this canonical byte string, where `len(x)` is the length of `x` in bytes
//! as 8 bytes, big-endian:
//!
//! ```text
//! SIGNATURE_DOMAIN (b"tenure-leader-epoch-stamp-v2\0", 29 bytes)
//! || len(election) || election name (UTF-8)
//! || len(key id)   || key id (ASCII)
//! || epoch as 8 bytes, big-endian
//! || len(message id) || message id bytes
//! ```
//!
//! Every variable-length field carries its length, so no two (election, key id, epoch, message
//! id) tuples give the same bytes; the domain prefix keeps these MACs from ever being valid for
//! another use of the same key. The election name binds a stamp to its election: a stamp of
//! election X is a bad signature to a sink of election Y, even when both share a key.
//! Verification compares in constant time (the `hmac` crate's `verify_slice`).
//!
//! The key id travels with the signature, so a sink can hold two keys during a rotation
//! ([`StampVerifier`]) and pick the one the stamp names; a key id it does not hold is
//! [`Rejected::UnknownKeyId`]. On the wire (the bridge's adapters), a stamp is two headers:
//!
//! ```text
//! x-tenure-leader-epoch: <epoch, decimal>
//! x-tenure-leader-epoch-signature: <key id>:<64 lowercase hex digits of the MAC>
//! ```
//!
//! ([`EPOCH_HEADER_DEFAULT`](crate::bridge::EPOCH_HEADER_DEFAULT), [`SIGNATURE_HEADER_DEFAULT`];
//! [`StampSignature::to_header_value`] and [`StampSignature::from_header_value`]). A key id is
//! 1 to 64 characters of `A-Z a-z 0-9 . _ -`.
//!
//! # Implausible epochs
//!
//! A holder of the key can sign any epoch, `u64::MAX` included, and one such stamp would raise
//! the durable mark past every term the backend will ever issue: the sink would refuse all real
//! work from then on. A sink given an [`EpochCeiling`] (the highest epoch a genuine leader can
//! hold now, e.g. from the election's observed term) refuses an epoch above it
//! ([`Rejected::ImplausibleEpoch`]) without raising the mark. A mark raised too far anyway (no
//! ceiling, or a wrong one) is recovered by the operator with `tenure sink-mark reset` (which
//! calls [`reset_mark`]), with the sink stopped.
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
//! share one mark (and `tenure sink-mark reset` refuses to run beside a sink).

use std::fs::File;
use std::path::{Path, PathBuf};

use hmac::Hmac;
use sha2::Sha256;

use tenure_core::model::LeaderEpoch;

use crate::durable;

mod ceiling;
mod mark;
mod signing;

pub use ceiling::EpochCeiling;
pub use mark::{MARK_FILE_LENGTH_MAX_BYTES, PreviousMark, read_mark, reset_mark};
pub use signing::{
    ELECTION_NAME_LENGTH_MAX_BYTES, KEY_ID_LENGTH_MAX, KeyId, MessageId, ReceivedSignature, SIGNATURE_DOMAIN,
    SIGNATURE_HEADER_DEFAULT, SIGNATURE_LENGTH_BYTES, SIGNING_KEY_LENGTH_MIN_BYTES, SignatureFormatError,
    SigningKeyError, StampKey, StampSignature, StampSigner, StampVerifier, VERIFIER_KEYS_MAX, Verification,
};

use mark::MarkPaths;

type HmacSha256 = Hmac<Sha256>;

/// What the sink judges: the epoch stamp of one message, its id, and its signature if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp<'a> {
    /// The leader epoch the message was stamped with.
    pub epoch: LeaderEpoch,
    /// The message's id (covered by the signature; unused by an unsigned sink).
    pub message_id: &'a [u8],
    /// The signature as received (key id and MAC), if any.
    pub signature: Option<ReceivedSignature<'a>>,
}

impl<'a> Stamp<'a> {
    /// An unsigned stamp.
    #[must_use]
    pub fn unsigned(epoch: LeaderEpoch, message_id: &'a [u8]) -> Self {
        Self { epoch, message_id, signature: None }
    }

    /// A signed stamp.
    #[must_use]
    pub fn signed(epoch: LeaderEpoch, message_id: &'a [u8], signature: ReceivedSignature<'a>) -> Self {
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
    /// Stamped with an epoch above the sink's [`EpochCeiling`]: no genuine leader holds it yet.
    /// The mark is not raised.
    #[error("implausible leader epoch {epoch}: no leader can hold more than {highest_plausible} now")]
    ImplausibleEpoch {
        /// The message's epoch.
        epoch: LeaderEpoch,
        /// The ceiling when the message was judged.
        highest_plausible: LeaderEpoch,
    },
    /// The sink requires signed stamps and this one has no signature.
    #[error("stamp for epoch {epoch} is not signed and this sink requires signatures")]
    MissingSignature {
        /// The claimed epoch.
        epoch: LeaderEpoch,
    },
    /// The signature names a key id the sink does not hold (a retired key, or a rotation the
    /// sink has not been given yet).
    #[error("stamp for epoch {epoch} is signed with key id {key_id:?}, which this sink does not hold")]
    UnknownKeyId {
        /// The claimed epoch.
        epoch: LeaderEpoch,
        /// The key id as received (at most [`KEY_ID_LENGTH_MAX`] characters of it).
        key_id: String,
    },
    /// The signature does not match (election, key id, epoch, message id) under the named key:
    /// forged, altered, or signed for another election.
    #[error("stamp for epoch {epoch} has a bad signature (forged, altered, or another election's)")]
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
    /// [`Rejected::ImplausibleEpoch`].
    pub implausible_epoch: u64,
    /// [`Rejected::BadSignature`].
    pub bad_signature: u64,
    /// [`Rejected::UnknownKeyId`].
    pub unknown_key_id: u64,
    /// [`Rejected::MissingSignature`].
    pub missing_signature: u64,
    /// [`Rejected::MarkNotPersisted`].
    pub mark_not_persisted: u64,
}

impl RejectionCounts {
    /// All rejections.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.stale_epoch
            + self.implausible_epoch
            + self.bad_signature
            + self.unknown_key_id
            + self.missing_signature
            + self.mark_not_persisted
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
    #[error(
        "{path}: no high-water mark file; refusing to start at epoch 0, which would reopen fencing \
         (restore the file, or make a new sink's mark with FencedSink::create)"
    )]
    Missing {
        /// The mark file.
        path: PathBuf,
    },
    /// [`FencedSink::create`] found a mark file already there.
    #[error("{path}: a high-water mark file already exists; open it with FencedSink::open_existing")]
    AlreadyExists {
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
    paths: MarkPaths,
    /// Held (exclusively locked) for the sink's lifetime.
    _lock: File,
    high_water: LeaderEpoch,
    verifier: Option<StampVerifier>,
    ceiling: Option<EpochCeiling>,
    rejections: RejectionCounts,
    admitted_total: u64,
    mark_writes_total: u64,
}

impl FencedSink {
    /// Makes a new sink's mark at `path`, at epoch 0, and opens it. Refuses
    /// ([`SinkError::AlreadyExists`]) if a mark file is there, damaged or not: a sink that has
    /// run before is reopened with [`FencedSink::open_existing`].
    pub fn create(path: impl AsRef<Path>) -> Result<Self, SinkError> {
        let paths = MarkPaths::of(path.as_ref());
        let lock = paths.lock()?;
        if std::fs::symlink_metadata(&paths.mark).is_ok() {
            return Err(SinkError::AlreadyExists { path: paths.mark });
        }
        let mut sink = Self::with(paths, lock, LeaderEpoch::NEVER);
        sink.persist(LeaderEpoch::NEVER)?;
        Ok(sink)
    }

    /// Opens the sink whose mark is at `path`, as written before. A missing file is
    /// [`SinkError::Missing`] (never a silent new mark at epoch 0); a file that cannot be read or
    /// parsed is an error.
    pub fn open_existing(path: impl AsRef<Path>) -> Result<Self, SinkError> {
        let paths = MarkPaths::of(path.as_ref());
        let lock = paths.lock()?;
        let stored = read_mark(&paths.mark)?;
        Ok(Self::with(paths, lock, stored))
    }

    fn with(paths: MarkPaths, lock: File, high_water: LeaderEpoch) -> Self {
        Self {
            paths,
            _lock: lock,
            high_water,
            verifier: None,
            ceiling: None,
            rejections: RejectionCounts::default(),
            admitted_total: 0,
            mark_writes_total: 0,
        }
    }

    /// From now on, admits only stamps of `verifier`'s election signed with one of its keys.
    #[must_use]
    pub fn requiring_signatures(mut self, verifier: StampVerifier) -> Self {
        self.verifier = Some(verifier);
        self
    }

    /// From now on, refuses an epoch above `ceiling` ([`Rejected::ImplausibleEpoch`]) instead of
    /// raising the mark to it.
    #[must_use]
    pub fn with_epoch_ceiling(mut self, ceiling: EpochCeiling) -> Self {
        self.ceiling = Some(ceiling);
        self
    }

    /// Judges one message. Order: signature (if required), then epoch: stale, then (only for an
    /// epoch that would raise the mark) the ceiling. A rising epoch is made durable before it is
    /// admitted, so this blocks on fsync once per new term and never for an equal epoch. A
    /// forged or implausible stamp never moves the mark.
    pub fn admit(&mut self, stamp: &Stamp<'_>) -> Result<Admitted, Rejected> {
        let epoch = stamp.epoch;
        if let Some(verifier) = &self.verifier {
            let Some(signature) = stamp.signature else {
                self.rejections.missing_signature += 1;
                return Err(Rejected::MissingSignature { epoch });
            };
            match verifier.verify(epoch, stamp.message_id, signature) {
                Verification::Valid => {}
                Verification::UnknownKeyId => {
                    self.rejections.unknown_key_id += 1;
                    let key_id = signing::printable(signature.key_id);
                    return Err(Rejected::UnknownKeyId { epoch, key_id });
                }
                Verification::BadSignature => {
                    self.rejections.bad_signature += 1;
                    return Err(Rejected::BadSignature { epoch });
                }
            }
        }
        // Epoch 0 means "never held": no leader stamps it, so it is stale whatever the mark.
        if epoch == LeaderEpoch::NEVER || epoch < self.high_water {
            self.rejections.stale_epoch += 1;
            return Err(Rejected::StaleEpoch { epoch, high_water: self.high_water });
        }
        let raised = epoch > self.high_water;
        if raised {
            if let Some(highest_plausible) = self.ceiling.as_ref().and_then(EpochCeiling::highest)
                && epoch > highest_plausible
            {
                self.rejections.implausible_epoch += 1;
                return Err(Rejected::ImplausibleEpoch { epoch, highest_plausible });
            }
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
        &self.paths.mark
    }

    /// Writes `epoch` durably and reads it back as a restarted sink would.
    fn persist(&mut self, epoch: LeaderEpoch) -> Result<(), SinkError> {
        assert!(epoch >= self.high_water, "the mark only rises: {epoch} < {}", self.high_water);
        self.paths.replace(epoch)?;
        self.mark_writes_total += 1;
        self.paths.check_read_back(epoch)
    }
}

impl From<durable::FileError> for SinkError {
    fn from(error: durable::FileError) -> Self {
        Self::Io { path: error.path, operation: error.operation, source: error.source }
    }
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

    use super::mark::{decode_mark, encode_mark};
    use super::*;

    fn signer(election: &str, key_id: &str, secret: &[u8]) -> StampSigner {
        StampSigner::new(election, StampKey::new(key_id, secret).expect("a good key"))
            .expect("a good election")
    }

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
    fn a_signature_header_round_trips_and_bad_ones_are_refused() {
        let signature = signer("pipeline", "k-2025.1", &[7u8; 32]).sign(LeaderEpoch::from_stored(1), b"m-1");
        let value = signature.to_header_value();
        assert!(value.starts_with("k-2025.1:"), "{value}");
        assert_eq!(value.len(), "k-2025.1:".len() + 64);
        assert_eq!(StampSignature::from_header_value(&value), Ok(signature.clone()));
        assert_eq!(
            StampSignature::from_header_value(&value.to_uppercase().replacen("K", "k", 1)),
            Ok(signature),
            "hex in either case"
        );
        let refused = |text: &str| StampSignature::from_header_value(text).expect_err(text);
        assert_eq!(refused("abc"), SignatureFormatError::NoKeyId);
        assert_eq!(refused("k:abc"), SignatureFormatError::Length { length: 3 });
        assert_eq!(refused(&format!("k:{}", "g".repeat(64))), SignatureFormatError::NotHex);
        assert!(matches!(refused(&format!(":{}", "0".repeat(64))), SignatureFormatError::BadKeyId { .. }));
        assert!(matches!(refused(&format!("k y:{}", "0".repeat(64))), SignatureFormatError::BadKeyId { .. }));
    }

    /// The documented bytes, byte for byte: any change to the format fails here.
    #[test]
    fn the_signed_bytes_are_domain_then_length_prefixed_election_key_id_epoch_and_id() {
        let secret = [9u8; 32];
        let mut mac = HmacSha256::new_from_slice(&secret).expect("any length");
        mac.update(b"tenure-leader-epoch-stamp-v2\0");
        mac.update(&[0, 0, 0, 0, 0, 0, 0, 3]);
        mac.update(b"vip");
        mac.update(&[0, 0, 0, 0, 0, 0, 0, 2]);
        mac.update(b"k1");
        mac.update(&[0, 0, 0, 0, 0, 0, 1, 2]);
        mac.update(&[0, 0, 0, 0, 0, 0, 0, 2]);
        mac.update(b"id");
        let expected: [u8; 32] = mac.finalize().into_bytes().into();
        let signature = signer("vip", "k1", &secret).sign(LeaderEpoch::from_stored(258), b"id");
        assert_eq!(signature.mac(), &expected);
        assert_eq!(signature.key_id().as_str(), "k1");
    }

    /// Without length prefixes these pairs would sign the same bytes: the election/key id boundary
    /// moved by one byte, and a key id byte moved into the epoch, whose last byte moves into the
    /// message id.
    #[test]
    fn moving_bytes_between_fields_changes_the_signature() {
        let secret = [5u8; 32];
        let a = signer("ab", "c", &secret).sign(LeaderEpoch::from_stored(4), b"m");
        let b = signer("a", "bc", &secret).sign(LeaderEpoch::from_stored(4), b"m");
        assert_ne!(a.mac(), b.mac(), "election/key id boundary");
        let c = signer("e", "k1", &secret).sign(LeaderEpoch::from_stored(4), b"m");
        let d = signer("e", "k", &secret).sign(LeaderEpoch::from_stored(0x3100_0000_0000_0000), b"\x04m");
        assert_ne!(c.mac(), d.mac(), "key id/epoch/message id boundaries");
    }

    #[test]
    fn bad_keys_ids_elections_and_key_sets_are_refused() {
        assert_eq!(
            StampKey::new("k", &[1u8; 31]).map(|_| ()),
            Err(SigningKeyError::TooShort { length: 31, min: 32 })
        );
        for id in ["", "a b", "k:1", "ключ", &"k".repeat(65)] {
            assert!(matches!(StampKey::new(id, &[1u8; 32]), Err(SigningKeyError::BadKeyId { .. })), "{id:?}");
        }
        let key = |id: &str| StampKey::new(id, &[1u8; 32]).expect("a good key");
        assert_eq!(
            StampSigner::new("", key("k")).map(|_| ()),
            Err(SigningKeyError::BadElection { length: 0, max: 255 })
        );
        assert!(StampSigner::new(&"e".repeat(256), key("k")).is_err());
        assert_eq!(StampVerifier::new("e", []).map(|_| ()), Err(SigningKeyError::NoKeys));
        assert_eq!(
            StampVerifier::new("e", [key("a"), key("a")]).map(|_| ()),
            Err(SigningKeyError::DuplicateKeyId { key_id: "a".into() })
        );
        assert_eq!(
            StampVerifier::new("e", ["a", "b", "c", "d", "e"].map(key)).map(|_| ()),
            Err(SigningKeyError::TooManyKeys { count: 5, max: 4 })
        );
        let printed = format!("{:?}", key("k"));
        assert!(!printed.contains("1, 1"), "the secret is never printed: {printed}");
    }
}
