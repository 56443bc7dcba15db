//! Signed stamps: HMAC-SHA256 over (election, key id, epoch, message id) with a shared key, so
//! that a sink can tell a stamp from a forgery, and a stamp of one election from one of another
//! election that shares the key. The exact bytes are in the [module docs](super).

use std::fmt;
use std::sync::Arc;

use hmac::{KeyInit, Mac};

use tenure_core::model::LeaderEpoch;

use super::{HmacSha256, hex, hex_value};

/// The shortest shared key [`StampKey::new`] accepts (HMAC-SHA256's output size).
pub const SIGNING_KEY_LENGTH_MIN_BYTES: usize = 32;
/// The length of a signature's MAC.
pub const SIGNATURE_LENGTH_BYTES: usize = 32;
/// The domain-separation prefix of every signed byte string (see the module docs). `v2`: the
/// election name and the key id are signed too (`v1` signed only the epoch and the message id).
pub const SIGNATURE_DOMAIN: &[u8] = b"tenure-leader-epoch-stamp-v2\0";
/// The longest key id: it travels in every signature header.
pub const KEY_ID_LENGTH_MAX: usize = 64;
/// The longest election name a signer or verifier accepts.
pub const ELECTION_NAME_LENGTH_MAX_BYTES: usize = 255;
/// The most keys one [`StampVerifier`] holds (two during a rotation; a little room beyond).
pub const VERIFIER_KEYS_MAX: usize = 4;
/// Default name of the signature header (the epoch travels under
/// [`EPOCH_HEADER_DEFAULT`](crate::bridge::EPOCH_HEADER_DEFAULT)).
pub const SIGNATURE_HEADER_DEFAULT: &str = "x-tenure-leader-epoch-signature";

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

/// The name of a shared key: `1..=KEY_ID_LENGTH_MAX` characters of `A-Z a-z 0-9 . _ -`. It is
/// signed, and carried in the signature so that a sink holding two keys (a rotation) knows which
/// one to check. Cloning is cheap (shared).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyId(Arc<str>);

impl KeyId {
    /// Checks and wraps a key id.
    pub fn new(id: &str) -> Result<Self, SigningKeyError> {
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if id.is_empty() || id.len() > KEY_ID_LENGTH_MAX || !id.chars().all(allowed) {
            return Err(SigningKeyError::BadKeyId { key_id: printable(id), max: KEY_ID_LENGTH_MAX });
        }
        Ok(Self(Arc::from(id)))
    }

    /// The id.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({:?})", self.as_str())
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// At most [`KEY_ID_LENGTH_MAX`] characters of `text`, for an error message about a value that
/// came from outside.
pub(super) fn printable(text: &str) -> String {
    text.chars().take(KEY_ID_LENGTH_MAX).collect()
}

/// A signature as the signer made it: the key's id and the MAC.
#[derive(Clone, PartialEq, Eq)]
pub struct StampSignature {
    key_id: KeyId,
    mac: [u8; SIGNATURE_LENGTH_BYTES],
}

impl StampSignature {
    /// Wraps a signature received from the wire.
    #[must_use]
    pub const fn from_parts(key_id: KeyId, mac: [u8; SIGNATURE_LENGTH_BYTES]) -> Self {
        Self { key_id, mac }
    }

    /// The id of the key that made it.
    #[must_use]
    pub fn key_id(&self) -> &KeyId {
        &self.key_id
    }

    /// The MAC bytes.
    #[must_use]
    pub const fn mac(&self) -> &[u8; SIGNATURE_LENGTH_BYTES] {
        &self.mac
    }

    /// The form a [`FencedSink`](super::FencedSink) judges.
    #[must_use]
    pub fn received(&self) -> ReceivedSignature<'_> {
        ReceivedSignature { key_id: self.key_id.as_str(), mac: &self.mac }
    }

    /// The header value: `<key id>:<64 lowercase hex digits of the MAC>`.
    #[must_use]
    pub fn to_header_value(&self) -> String {
        format!("{}:{}", self.key_id, hex(&self.mac))
    }

    /// Parses the form [`StampSignature::to_header_value`] writes (hex in either case).
    pub fn from_header_value(text: &str) -> Result<Self, SignatureFormatError> {
        let Some((key_id, digits)) = text.split_once(':') else {
            return Err(SignatureFormatError::NoKeyId);
        };
        let key_id =
            KeyId::new(key_id).map_err(|_| SignatureFormatError::BadKeyId { key_id: printable(key_id) })?;
        let digits = digits.as_bytes();
        if digits.len() != 2 * SIGNATURE_LENGTH_BYTES {
            return Err(SignatureFormatError::Length { length: digits.len() });
        }
        let mut mac = [0u8; SIGNATURE_LENGTH_BYTES];
        for (byte, pair) in mac.iter_mut().zip(digits.chunks_exact(2)) {
            let high = hex_value(pair[0]).ok_or(SignatureFormatError::NotHex)?;
            let low = hex_value(pair[1]).ok_or(SignatureFormatError::NotHex)?;
            *byte = high << 4 | low;
        }
        Ok(Self { key_id, mac })
    }
}

impl fmt::Debug for StampSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StampSignature({})", self.to_header_value())
    }
}

/// A signature as a sink receives it: the claimed key id and the MAC bytes, neither checked yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceivedSignature<'a> {
    /// The id of the key the sender claims to have used.
    pub key_id: &'a str,
    /// The MAC bytes.
    pub mac: &'a [u8],
}

/// A signature header that is not `<key id>:<64 hex digits>`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureFormatError {
    /// No `:` between the key id and the MAC.
    #[error("a stamp signature is <key id>:<hex MAC>, and this one has no ':'")]
    NoKeyId,
    /// The key id is empty, too long, or has a character outside `A-Z a-z 0-9 . _ -`.
    #[error(
        "stamp signature key id {key_id:?} is not 1..={KEY_ID_LENGTH_MAX} characters of A-Z a-z 0-9 . _ -"
    )]
    BadKeyId {
        /// The key id found (at most [`KEY_ID_LENGTH_MAX`] characters of it).
        key_id: String,
    },
    /// The MAC is not exactly 64 characters.
    #[error("a stamp signature's MAC is {expected} hex digits, not {length}", expected = 2 * SIGNATURE_LENGTH_BYTES)]
    Length {
        /// The length found.
        length: usize,
    },
    /// A character of the MAC outside `0-9a-fA-F`.
    #[error("a stamp signature's MAC is hex digits only")]
    NotHex,
}

/// A key, key id, election name or key set that cannot sign or verify.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SigningKeyError {
    /// The secret is shorter than [`SIGNING_KEY_LENGTH_MIN_BYTES`].
    #[error("a stamp signing key needs at least {min} bytes, got {length}")]
    TooShort {
        /// The length given.
        length: usize,
        /// The minimum.
        min: usize,
    },
    /// The key id is empty, too long, or has a character outside `A-Z a-z 0-9 . _ -`.
    #[error("stamp key id {key_id:?} is not 1..={max} characters of A-Z a-z 0-9 . _ -")]
    BadKeyId {
        /// The key id given (at most [`KEY_ID_LENGTH_MAX`] characters of it).
        key_id: String,
        /// [`KEY_ID_LENGTH_MAX`].
        max: usize,
    },
    /// The election name is empty or longer than [`ELECTION_NAME_LENGTH_MAX_BYTES`].
    #[error("stamp election name is {length} bytes; it must be 1..={max}")]
    BadElection {
        /// The length given.
        length: usize,
        /// [`ELECTION_NAME_LENGTH_MAX_BYTES`].
        max: usize,
    },
    /// A verifier was given no key.
    #[error("a stamp verifier needs at least one key")]
    NoKeys,
    /// A verifier was given more than [`VERIFIER_KEYS_MAX`] keys.
    #[error("a stamp verifier holds at most {max} keys, got {count}")]
    TooManyKeys {
        /// The number given.
        count: usize,
        /// [`VERIFIER_KEYS_MAX`].
        max: usize,
    },
    /// A verifier was given two keys of one id.
    #[error("stamp key id {key_id:?} is given twice")]
    DuplicateKeyId {
        /// The repeated id.
        key_id: String,
    },
}

/// A shared secret and its id. Cloning shares nothing mutable; the secret is never printed.
#[derive(Clone)]
pub struct StampKey {
    id: KeyId,
    /// The MAC keyed once; every signature starts from a clone of this state.
    keyed: HmacSha256,
}

impl fmt::Debug for StampKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StampKey {{ id: {:?}, secret: <redacted> }}", self.id.as_str())
    }
}

impl StampKey {
    /// The key `secret` (at least [`SIGNING_KEY_LENGTH_MIN_BYTES`] bytes) named `id` (see
    /// [`KeyId`]).
    pub fn new(id: &str, secret: &[u8]) -> Result<Self, SigningKeyError> {
        let id = KeyId::new(id)?;
        let too_short = SigningKeyError::TooShort { length: secret.len(), min: SIGNING_KEY_LENGTH_MIN_BYTES };
        if secret.len() < SIGNING_KEY_LENGTH_MIN_BYTES {
            return Err(too_short);
        }
        let keyed = HmacSha256::new_from_slice(secret).map_err(|_| too_short)?;
        Ok(Self { id, keyed })
    }

    /// The key's id.
    #[must_use]
    pub fn id(&self) -> &KeyId {
        &self.id
    }

    /// The MAC of the canonical bytes (module docs): every variable-length field is preceded by
    /// its length as 8 big-endian bytes, so no two field tuples give the same bytes.
    fn mac_of(&self, election: &str, epoch: LeaderEpoch, message_id: &[u8]) -> HmacSha256 {
        let mut mac = self.keyed.clone();
        mac.update(SIGNATURE_DOMAIN);
        update_length_prefixed(&mut mac, election.as_bytes());
        update_length_prefixed(&mut mac, self.id.as_str().as_bytes());
        mac.update(&epoch.get().to_be_bytes());
        update_length_prefixed(&mut mac, message_id);
        mac
    }
}

fn update_length_prefixed(mac: &mut HmacSha256, field: &[u8]) {
    let length = u64::try_from(field.len()).expect("a slice is shorter than 2^64 bytes");
    mac.update(&length.to_be_bytes());
    mac.update(field);
}

fn check_election(election: &str) -> Result<Arc<str>, SigningKeyError> {
    if election.is_empty() || election.len() > ELECTION_NAME_LENGTH_MAX_BYTES {
        return Err(SigningKeyError::BadElection {
            length: election.len(),
            max: ELECTION_NAME_LENGTH_MAX_BYTES,
        });
    }
    Ok(Arc::from(election))
}

/// Signs the stamps of one election with one key. Cloning is cheap and shares nothing mutable.
#[derive(Clone)]
pub struct StampSigner {
    election: Arc<str>,
    key: StampKey,
}

impl fmt::Debug for StampSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StampSigner").field("election", &self.election).field("key", &self.key).finish()
    }
}

impl StampSigner {
    /// A signer for the stamps of `election` (the election's name, `1..=255` bytes) with `key`.
    pub fn new(election: &str, key: StampKey) -> Result<Self, SigningKeyError> {
        Ok(Self { election: check_election(election)?, key })
    }

    /// The election whose stamps this signs.
    #[must_use]
    pub fn election(&self) -> &str {
        &self.election
    }

    /// The id of the key it signs with.
    #[must_use]
    pub fn key_id(&self) -> &KeyId {
        &self.key.id
    }

    /// The signature of (this election, this key id, `epoch`, `message_id`).
    #[must_use]
    pub fn sign(&self, epoch: LeaderEpoch, message_id: &[u8]) -> StampSignature {
        let mac = self.key.mac_of(&self.election, epoch, message_id).finalize().into_bytes().into();
        StampSignature { key_id: self.key.id.clone(), mac }
    }
}

/// What a [`StampVerifier`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verification {
    /// The signature is the named key's signature of this election's stamp.
    Valid,
    /// The verifier holds no key of that id.
    UnknownKeyId,
    /// The key is known and the MAC does not match: forged, altered, or another election's.
    BadSignature,
}

/// Verifies the stamps of one election against one or more keys (two during a rotation: the
/// old and the new, each chosen by the key id the signature carries).
#[derive(Clone)]
pub struct StampVerifier {
    election: Arc<str>,
    /// At most [`VERIFIER_KEYS_MAX`], ids distinct.
    keys: Vec<StampKey>,
}

impl fmt::Debug for StampVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StampVerifier").field("election", &self.election).field("keys", &self.keys).finish()
    }
}

impl StampVerifier {
    /// A verifier for the stamps of `election` that accepts any of `keys` (1..=
    /// [`VERIFIER_KEYS_MAX`], distinct ids).
    pub fn new(election: &str, keys: impl IntoIterator<Item = StampKey>) -> Result<Self, SigningKeyError> {
        let election = check_election(election)?;
        let keys: Vec<StampKey> = keys.into_iter().collect();
        if keys.is_empty() {
            return Err(SigningKeyError::NoKeys);
        }
        if keys.len() > VERIFIER_KEYS_MAX {
            return Err(SigningKeyError::TooManyKeys { count: keys.len(), max: VERIFIER_KEYS_MAX });
        }
        for (index, key) in keys.iter().enumerate() {
            if keys[..index].iter().any(|earlier| earlier.id == key.id) {
                return Err(SigningKeyError::DuplicateKeyId { key_id: key.id.to_string() });
            }
        }
        Ok(Self { election, keys })
    }

    /// The verifier of what `signer` signs (its election and its key only).
    #[must_use]
    pub fn of(signer: &StampSigner) -> Self {
        Self { election: signer.election.clone(), keys: vec![signer.key.clone()] }
    }

    /// The election whose stamps this verifies.
    #[must_use]
    pub fn election(&self) -> &str {
        &self.election
    }

    /// Whether `signature` is the signature, by the key it names, of (this election, that key
    /// id, `epoch`, `message_id`); the MAC is compared in constant time. A MAC of the wrong
    /// length is simply not valid.
    #[must_use]
    pub fn verify(
        &self,
        epoch: LeaderEpoch,
        message_id: &[u8],
        signature: ReceivedSignature<'_>,
    ) -> Verification {
        let Some(key) = self.keys.iter().find(|key| key.id.as_str() == signature.key_id) else {
            return Verification::UnknownKeyId;
        };
        match key.mac_of(&self.election, epoch, message_id).verify_slice(signature.mac) {
            Ok(()) => Verification::Valid,
            Err(_) => Verification::BadSignature,
        }
    }
}
