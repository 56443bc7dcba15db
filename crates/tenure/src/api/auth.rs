//! The bearer token of the mutating routes: read from `apiTokenFile`, kept out of logs and
//! `Debug`, and compared in constant time.

use std::fmt;
use std::path::{Path, PathBuf};

use subtle::ConstantTimeEq as _;

/// Longest token accepted, in bytes. Every comparison runs over this many bytes, whatever the
/// lengths of the secret and of the presented token, so the time taken tells nothing of either.
pub const API_TOKEN_BYTES_MAX: usize = 4096;

/// Why a token (or the file holding it) was refused.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The token file could not be read.
    #[error("{}: cannot read the API token file: {source}", path.display())]
    TokenUnreadable {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The token is empty once surrounding whitespace is trimmed.
    #[error("{where_}the API token is empty")]
    TokenEmpty {
        /// `"FILE: "` when it came from a file, else empty.
        where_: String,
    },
    /// The token is longer than [`API_TOKEN_BYTES_MAX`].
    #[error("{where_}the API token is {bytes} bytes long; at most {API_TOKEN_BYTES_MAX} are accepted")]
    TokenTooLong {
        /// `"FILE: "` when it came from a file, else empty.
        where_: String,
        /// Its length.
        bytes: usize,
    },
    /// The token holds a character that cannot travel in an `Authorization` header (anything but
    /// printable ASCII without spaces).
    #[error("{where_}the API token holds a character other than printable ASCII (no spaces) at byte {at}")]
    TokenCharacter {
        /// `"FILE: "` when it came from a file, else empty.
        where_: String,
        /// 0-based byte offset of the first bad character.
        at: usize,
    },
}

/// The bearer token the mutating routes require (`Authorization: Bearer <token>`). Its `Debug`
/// never shows the secret.
#[derive(Clone)]
pub struct ApiToken {
    /// The secret, printable ASCII.
    secret: String,
    /// The secret, zero-padded to [`API_TOKEN_BYTES_MAX`] bytes, for the constant-time compare.
    padded: Box<[u8; API_TOKEN_BYTES_MAX]>,
}

impl fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiToken(<redacted>)")
    }
}

impl ApiToken {
    /// Reads the token from `path` (the agent config's `apiTokenFile`, or the CLI's
    /// `--token-file`): the file's text with surrounding whitespace trimmed.
    pub fn from_file(path: &Path) -> Result<Self, ApiError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ApiError::TokenUnreadable { path: path.to_owned(), source })?;
        Self::checked(text.trim(), &format!("{}: ", path.display()))
    }

    /// A token from its text, trimmed of surrounding whitespace.
    pub fn new(secret: String) -> Result<Self, ApiError> {
        Self::checked(secret.trim(), "")
    }

    fn checked(secret: &str, where_: &str) -> Result<Self, ApiError> {
        let where_ = where_.to_owned();
        if secret.is_empty() {
            return Err(ApiError::TokenEmpty { where_ });
        }
        if secret.len() > API_TOKEN_BYTES_MAX {
            return Err(ApiError::TokenTooLong { where_, bytes: secret.len() });
        }
        if let Some(at) = secret.bytes().position(|b| !b.is_ascii_graphic()) {
            return Err(ApiError::TokenCharacter { where_, at });
        }
        let mut padded = Box::new([0u8; API_TOKEN_BYTES_MAX]);
        padded[..secret.len()].copy_from_slice(secret.as_bytes());
        Ok(Self { secret: secret.to_owned(), padded })
    }

    /// The secret, for the CLI to send. Never log it.
    pub(crate) fn secret(&self) -> &str {
        &self.secret
    }

    /// Whether `presented` is this token. The work done does not depend on where the first
    /// difference is, nor on either length: both sides are compared zero-padded to
    /// [`API_TOKEN_BYTES_MAX`] bytes, and the lengths are compared as well.
    #[must_use]
    pub fn matches(&self, presented: &[u8]) -> bool {
        let mut candidate = [0u8; API_TOKEN_BYTES_MAX];
        let kept = presented.len().min(API_TOKEN_BYTES_MAX);
        candidate[..kept].copy_from_slice(&presented[..kept]);
        let same_bytes = candidate.ct_eq(&*self.padded);
        let same_length = (presented.len() as u64).ct_eq(&(self.secret.len() as u64));
        bool::from(same_bytes & same_length)
    }
}

/// What the `Authorization` header of a request says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Presented<'a> {
    /// No header, or not the `Bearer` scheme.
    Missing,
    /// `Bearer <token>`.
    Bearer(&'a [u8]),
}

/// Reads `Authorization: Bearer <token>` (the scheme is case-insensitive, RFC 7235).
pub(crate) fn presented(header: Option<&http::HeaderValue>) -> Presented<'_> {
    let Some(value) = header else { return Presented::Missing };
    let bytes = value.as_bytes();
    const SCHEME: &[u8] = b"bearer ";
    if bytes.len() <= SCHEME.len() || !bytes[..SCHEME.len()].eq_ignore_ascii_case(SCHEME) {
        return Presented::Missing;
    }
    let token = bytes[SCHEME.len()..].trim_ascii();
    if token.is_empty() { Presented::Missing } else { Presented::Bearer(token) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_matches_itself_only() {
        let token = ApiToken::new("  s3cret-token\n".to_owned()).expect("valid");
        assert!(token.matches(b"s3cret-token"));
        for other in [&b"s3cret-toke"[..], b"s3cret-token2", b"S3cret-token", b"", b"s3cret-token\0"] {
            assert!(!token.matches(other), "{:?}", String::from_utf8_lossy(other));
        }
        let long = vec![b'a'; API_TOKEN_BYTES_MAX + 10];
        assert!(!token.matches(&long));
        let max = "b".repeat(API_TOKEN_BYTES_MAX);
        let token = ApiToken::new(max.clone()).expect("the longest token is accepted");
        assert!(token.matches(max.as_bytes()));
        let mut longer = max.into_bytes();
        longer.push(b'b');
        assert!(!token.matches(&longer), "a token past the padding must not match by its prefix");
    }

    #[test]
    fn bad_tokens_are_refused_with_their_reason() {
        assert!(matches!(ApiToken::new(" \n".to_owned()), Err(ApiError::TokenEmpty { .. })));
        assert!(matches!(ApiToken::new("a b".to_owned()), Err(ApiError::TokenCharacter { at: 1, .. })));
        assert!(matches!(
            ApiToken::new("x".repeat(API_TOKEN_BYTES_MAX + 1)),
            Err(ApiError::TokenTooLong { .. })
        ));
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let token = ApiToken::new("hunter2".to_owned()).expect("valid");
        assert!(!format!("{token:?}").contains("hunter2"));
    }

    #[test]
    fn the_bearer_scheme_is_read_case_insensitively() {
        let value = |s: &str| http::HeaderValue::from_str(s).expect("valid header");
        assert_eq!(presented(Some(&value("Bearer abc"))), Presented::Bearer(b"abc"));
        assert_eq!(presented(Some(&value("bearer  abc "))), Presented::Bearer(b"abc"));
        assert_eq!(presented(Some(&value("Basic abc"))), Presented::Missing);
        assert_eq!(presented(Some(&value("Bearer "))), Presented::Missing);
        assert_eq!(presented(None), Presented::Missing);
    }
}
