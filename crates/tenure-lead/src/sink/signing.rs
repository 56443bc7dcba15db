//! Signed stamps: HMAC-SHA256 over (epoch, message id) with a shared key, so that a sink can
//! tell a stamp from a forgery.

use std::fmt;

use hmac::{KeyInit, Mac};

use tenure_core::model::LeaderEpoch;

use super::{HmacSha256, hex, hex_value};

/// The shortest shared key [`StampSigner::new`] accepts (HMAC-SHA256's output size).
pub const SIGNING_KEY_LENGTH_MIN_BYTES: usize = 32;
/// The length of a [`StampSignature`].
pub const SIGNATURE_LENGTH_BYTES: usize = 32;
/// The domain-separation prefix of every signed byte string (see the module docs).
pub const SIGNATURE_DOMAIN: &[u8] = b"tenure-leader-epoch-stamp-v1\0";

/// A message that has an identity the signature can cover (a UUID, a sequence number's bytes…).
pub trait MessageId {
    /// The message's id, as the bytes that are signed.
    fn message_id(&self) -> &[u8];
}

impl MessageId for String {
    fn message_id(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl MessageId for Vec<u8> {
    fn message_id(&self) -> &[u8] {
        self
    }
}

/// An HMAC-SHA256 over (epoch, message id); see the module docs for the exact bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct StampSignature([u8; SIGNATURE_LENGTH_BYTES]);

impl StampSignature {
    /// Wraps signature bytes received from the wire.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; SIGNATURE_LENGTH_BYTES]) -> Self {
        Self(bytes)
    }

    /// The raw bytes.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; SIGNATURE_LENGTH_BYTES] {
        &self.0
    }

    /// Lowercase hex, for a header value.
    #[must_use]
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// Parses the form [`StampSignature::to_hex`] writes (either case).
    pub fn from_hex(text: &str) -> Result<Self, SignatureFormatError> {
        let digits = text.as_bytes();
        if digits.len() != 2 * SIGNATURE_LENGTH_BYTES {
            return Err(SignatureFormatError::Length { length: digits.len() });
        }
        let mut bytes = [0u8; SIGNATURE_LENGTH_BYTES];
        for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
            let high = hex_value(pair[0]).ok_or(SignatureFormatError::NotHex)?;
            let low = hex_value(pair[1]).ok_or(SignatureFormatError::NotHex)?;
            *byte = high << 4 | low;
        }
        Ok(Self(bytes))
    }
}

impl fmt::Debug for StampSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StampSignature({})", self.to_hex())
    }
}

/// A signature header that is not 64 hex digits.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureFormatError {
    /// Not exactly 64 characters.
    #[error("a stamp signature is {expected} hex digits, not {length}", expected = 2 * SIGNATURE_LENGTH_BYTES)]
    Length {
        /// The length found.
        length: usize,
    },
    /// A character outside `0-9a-fA-F`.
    #[error("a stamp signature is hex digits only")]
    NotHex,
}

/// A shared key that is too weak to sign with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SigningKeyError {
    /// Shorter than [`SIGNING_KEY_LENGTH_MIN_BYTES`].
    #[error("a stamp signing key needs at least {min} bytes, got {length}")]
    TooShort {
        /// The length given.
        length: usize,
        /// The minimum.
        min: usize,
    },
}

/// Signs and verifies stamps with one shared key. Cloning shares nothing mutable.
#[derive(Clone)]
pub struct StampSigner {
    /// The MAC keyed once; every signature starts from a clone of this state.
    keyed: HmacSha256,
}

impl fmt::Debug for StampSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StampSigner { key: <redacted> }")
    }
}

impl StampSigner {
    /// A signer for `key` (at least [`SIGNING_KEY_LENGTH_MIN_BYTES`] bytes).
    pub fn new(key: &[u8]) -> Result<Self, SigningKeyError> {
        if key.len() < SIGNING_KEY_LENGTH_MIN_BYTES {
            return Err(SigningKeyError::TooShort { length: key.len(), min: SIGNING_KEY_LENGTH_MIN_BYTES });
        }
        let keyed = HmacSha256::new_from_slice(key).map_err(|_| SigningKeyError::TooShort {
            length: key.len(),
            min: SIGNING_KEY_LENGTH_MIN_BYTES,
        })?;
        Ok(Self { keyed })
    }

    fn mac_of(&self, epoch: LeaderEpoch, message_id: &[u8]) -> HmacSha256 {
        let mut mac = self.keyed.clone();
        mac.update(SIGNATURE_DOMAIN);
        mac.update(&epoch.get().to_be_bytes());
        mac.update(message_id);
        mac
    }

    /// The signature of (`epoch`, `message_id`).
    #[must_use]
    pub fn sign(&self, epoch: LeaderEpoch, message_id: &[u8]) -> StampSignature {
        StampSignature(self.mac_of(epoch, message_id).finalize().into_bytes().into())
    }

    /// Whether `signature` is this key's signature of (`epoch`, `message_id`), compared in
    /// constant time. A signature of the wrong length is simply not valid.
    #[must_use]
    pub fn verify(&self, epoch: LeaderEpoch, message_id: &[u8], signature: &[u8]) -> bool {
        self.mac_of(epoch, message_id).verify_slice(signature).is_ok()
    }
}
