//! OCI's request signature, version 1 (the "Request Signatures" page of the OCI documentation,
//! after draft-cavage-http-signatures-08): RSA PKCS#1 v1.5 with SHA-256 over the signing string
//! `date`, `(request-target)` and `host`, plus `content-length`, `content-type` and
//! `x-content-sha256` for a request with a body (POST, PUT), carried in
//! `Authorization: Signature version="1",keyId="…",algorithm="rsa-sha256",headers="…",signature="…"`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use rsa::PrivateKey;
use rsa::pkcs1::DecodeRsaPrivateKey as _;
use rsa::pkcs8::DecodePrivateKey as _;
use rsa::sha2::Sha256;
use sha2::Digest as _;

/// Why a key could not be read or used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The PEM text is neither a PKCS#1 (`RSA PRIVATE KEY`) nor a PKCS#8 (`PRIVATE KEY`) RSA
    /// private key (an encrypted key is not read: tenure takes no pass phrase).
    #[error("not an unencrypted RSA private key in PEM (PKCS#1 or PKCS#8): {0}")]
    Unreadable(String),
    /// Signing failed.
    #[error("RSA signing failed: {0}")]
    Sign(String),
}

/// An RSA private key that signs OCI requests.
#[derive(Clone)]
pub struct SigningKey {
    key: PrivateKey,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(…)")
    }
}

impl SigningKey {
    /// Reads a PEM private key, PKCS#1 or PKCS#8.
    ///
    /// # Errors
    ///
    /// [`KeyError::Unreadable`] when it is neither.
    pub fn from_pem(pem: &str) -> Result<Self, KeyError> {
        let pem = pem.trim();
        let key = if pem.starts_with("-----BEGIN RSA PRIVATE KEY-----") {
            PrivateKey::from_pkcs1_pem(pem).map_err(|e| KeyError::Unreadable(e.to_string()))?
        } else {
            PrivateKey::from_pkcs8_pem(pem).map_err(|e| KeyError::Unreadable(e.to_string()))?
        };
        Ok(Self { key })
    }

    /// A fresh 2048-bit key (an instance principal's session key). Slow (a prime search): call
    /// it off the async threads.
    ///
    /// # Errors
    ///
    /// [`KeyError::Sign`] when the system's random source fails.
    pub fn generate() -> Result<Self, KeyError> {
        PrivateKey::new(&mut getrandom::SysRng, 2048)
            .map(|key| Self { key })
            .map_err(|e| KeyError::Sign(e.to_string()))
    }

    /// The public key as DER SubjectPublicKeyInfo.
    ///
    /// # Errors
    ///
    /// [`KeyError::Sign`] when it cannot be encoded.
    pub fn public_key_der(&self) -> Result<Vec<u8>, KeyError> {
        use rsa::pkcs8::EncodePublicKey as _;
        self.key
            .to_public_key()
            .to_public_key_der()
            .map(|d| d.as_bytes().to_vec())
            .map_err(|e| KeyError::Sign(e.to_string()))
    }

    /// The base64 RSASSA-PKCS1-v1_5 SHA-256 signature of `message`.
    ///
    /// # Errors
    ///
    /// [`KeyError::Sign`] when the key cannot sign.
    pub fn sign_base64(&self, message: &[u8]) -> Result<String, KeyError> {
        self.key
            .pkcs1v15_sign::<Sha256>(message)
            .map(|s| BASE64.encode(s))
            .map_err(|e| KeyError::Sign(e.to_string()))
    }
}

/// What a request to sign carries.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The method, upper case (`GET`).
    pub method: &'a str,
    /// The path and query, as sent (`/20160918/vnics/ocid1…`).
    pub path_and_query: &'a str,
    /// The `host` header (`iaas.us-ashburn-1.oraclecloud.com`, with `:port` when not the
    /// scheme's default).
    pub host: &'a str,
    /// The `date` header (an HTTP date).
    pub date: &'a str,
    /// The body and its content type, for POST and PUT.
    pub body: Option<(&'a [u8], &'a str)>,
}

/// The headers a signed request adds (besides `host`, which the caller sends as given).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signed {
    /// `(name, value)` in order: `date`, then for a body `content-length`, `content-type`,
    /// `x-content-sha256`, and last `authorization`.
    pub headers: Vec<(&'static str, String)>,
}

/// The base64 SHA-256 of a body (`x-content-sha256`).
#[must_use]
pub fn content_sha256(body: &[u8]) -> String {
    BASE64.encode(sha2::Sha256::digest(body))
}

/// The signing string of `request` and the `headers` list it covers.
#[must_use]
pub fn signing_string(request: &Request<'_>) -> (String, &'static str) {
    let mut lines = vec![
        format!("date: {}", request.date),
        format!("(request-target): {} {}", request.method.to_ascii_lowercase(), request.path_and_query),
        format!("host: {}", request.host),
    ];
    match request.body {
        None => (lines.join("\n"), "date (request-target) host"),
        Some((body, content_type)) => {
            lines.push(format!("content-length: {}", body.len()));
            lines.push(format!("content-type: {content_type}"));
            lines.push(format!("x-content-sha256: {}", content_sha256(body)));
            (lines.join("\n"), "date (request-target) host content-length content-type x-content-sha256")
        }
    }
}

/// Signs `request` with `key` as `key_id` (`<tenancy>/<user>/<fingerprint>` for an API key,
/// `ST$<token>` for a session token).
///
/// # Errors
///
/// [`KeyError::Sign`] when the key cannot sign.
pub fn sign(request: &Request<'_>, key_id: &str, key: &SigningKey) -> Result<Signed, KeyError> {
    let (text, covered) = signing_string(request);
    let signature = key.sign_base64(text.as_bytes())?;
    let mut headers = vec![("date", request.date.to_owned())];
    if let Some((body, content_type)) = request.body {
        headers.push(("content-length", body.len().to_string()));
        headers.push(("content-type", content_type.to_owned()));
        headers.push(("x-content-sha256", content_sha256(body)));
    }
    headers.push((
        "authorization",
        format!(
            "Signature version=\"1\",keyId=\"{key_id}\",algorithm=\"rsa-sha256\",headers=\"{covered}\",signature=\"{signature}\""
        ),
    ));
    Ok(Signed { headers })
}

#[cfg(test)]
mod tests;
