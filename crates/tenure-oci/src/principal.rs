//! Instance principals: the instance's identity certificate, its intermediate and its private key
//! from the instance metadata service (`/opc/v2/identity/{cert,intermediate,key}.pem`, header
//! `Authorization: Bearer Oracle`), exchanged at the federation endpoint
//! (`https://auth.{region}.oraclecloud.com/v1/x509`, a request signed with the instance key as
//! `<tenancy>/fed-x509/<certificate SHA-1 fingerprint>`) for a session token bound to a session
//! key generated here; requests are then signed with the session key as `ST$<token>`. The token
//! is refreshed before it expires (its JWT `exp`: at the earlier of five minutes before it and
//! half its lifetime), and at once after a 401. [`crate::Core::keep_session_fresh`] does it off
//! the call path, a minute earlier still (at the latest a quarter into its lifetime), so that a
//! call rarely waits for a federation.
//!
//! Written from the OCI SDKs' published behaviour and tested against the project's fake only:
//! unverified against real OCI (docs/operations.md, OCI, gives the manual check).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD as BASE64, URL_SAFE_NO_PAD};
use http::Method;
use sha1::Digest as _;
use tokio::time::Instant;
use x509_cert::der::DecodePem as _;

use crate::http::{Call, Http, OciError};
use crate::sign::SigningKey;

/// The instance metadata service's identity folder.
pub const METADATA_URL: &str = "http://169.254.169.254/opc/v2";

/// Longest time before a token's expiry at which it is refreshed.
const REFRESH_BEFORE: Duration = Duration::from_secs(300);

/// How much earlier than a call would, at most, the background refresh renews it.
const AHEAD: Duration = Duration::from_secs(60);

/// Where an instance principal gets its credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoints {
    /// The metadata service's base (`http://169.254.169.254/opc/v2`).
    pub metadata: String,
    /// The federation endpoint (`https://auth.{region}.oraclecloud.com/v1/x509`).
    pub federation: String,
}

impl Endpoints {
    /// OCI's own, for `region`.
    #[must_use]
    pub fn for_region(region: &str) -> Self {
        Self {
            metadata: METADATA_URL.into(),
            federation: format!("https://auth.{region}.oraclecloud.com/v1/x509"),
        }
    }
}

#[derive(Clone, Debug)]
struct Session {
    token: String,
    key: SigningKey,
    /// When a call renews it.
    refresh_at: SystemTime,
    /// When the background refresh renews it (earlier).
    ahead_at: SystemTime,
    /// When it expires (its `exp`): until then a call signs with it while a renewal is under way.
    expires_at: SystemTime,
}

impl Session {
    fn signer(&self) -> (String, SigningKey) {
        (format!("ST${}", self.token), self.key.clone())
    }
}

/// An instance principal's session, fetched on first use and refreshed before expiry. The
/// session is read and swapped under a short lock that is never held across a call; one renewal
/// runs at a time (`renewal`), and calls keep signing with the current token, while it has not
/// expired, as long as one is under way.
#[derive(Debug)]
pub struct InstancePrincipal {
    endpoints: Endpoints,
    session: std::sync::Mutex<Option<Session>>,
    renewal: tokio::sync::Mutex<()>,
    federations: std::sync::atomic::AtomicU64,
}

impl InstancePrincipal {
    /// An instance principal getting its credentials at `endpoints`.
    #[must_use]
    pub fn new(endpoints: Endpoints) -> Self {
        Self {
            endpoints,
            session: std::sync::Mutex::new(None),
            renewal: tokio::sync::Mutex::new(()),
            federations: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// How many session tokens it has fetched.
    #[must_use]
    pub fn federations(&self) -> u64 {
        self.federations.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Drops the session: the next call fetches a new token (after a 401).
    pub async fn forget(&self) {
        *self.lock() = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Session>> {
        self.session.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The current session, if any.
    fn current(&self) -> Option<Session> {
        self.lock().clone()
    }

    /// The key id (`ST$<token>`) and session key to sign with, fetching or refreshing the token
    /// when due. While another renewal is under way, the current token is used if it has not
    /// expired; with none usable, it waits for that renewal (at most until `deadline`).
    ///
    /// # Errors
    ///
    /// [`OciError::Credentials`] (and the federation call's errors); [`OciError::NotSent`] when
    /// the deadline comes while waiting for another renewal.
    pub async fn signer(&self, http: &Http, deadline: Instant) -> Result<(String, SigningKey), OciError> {
        let current = self.current();
        if let Some(current) = &current
            && SystemTime::now() < current.refresh_at
        {
            return Ok(current.signer());
        }
        let _renewing = match self.renewal.try_lock() {
            Ok(guard) => guard,
            Err(_) => {
                if let Some(current) = &current
                    && SystemTime::now() < current.expires_at
                {
                    return Ok(current.signer());
                }
                tokio::time::timeout_at(deadline, self.renewal.lock()).await.map_err(|_| {
                    OciError::NotSent {
                        operation: "X509Federation",
                        message: "the deadline came while waiting for a session renewal under way".into(),
                    }
                })?
            }
        };
        // A renewal that ended while this one waited may have left a fresh session.
        if let Some(current) = self.current()
            && SystemTime::now() < current.refresh_at
        {
            return Ok(current.signer());
        }
        let fresh = self.federate(http, deadline).await?;
        let signer = fresh.signer();
        *self.lock() = Some(fresh);
        Ok(signer)
    }

    /// Renews the session when the background refresh is due (or there is none yet), and says
    /// when it is next due. Calls made meanwhile sign with the current token (see
    /// [`InstancePrincipal::signer`]).
    ///
    /// # Errors
    ///
    /// [`OciError::Credentials`] (and the federation call's errors).
    pub async fn refresh_ahead(&self, http: &Http, deadline: Instant) -> Result<SystemTime, OciError> {
        let due = |session: Option<Session>| match session {
            Some(current) if SystemTime::now() < current.ahead_at => Some(current.ahead_at),
            _ => None,
        };
        if let Some(next) = due(self.current()) {
            return Ok(next);
        }
        let _renewing = self.renewal.lock().await;
        if let Some(next) = due(self.current()) {
            return Ok(next);
        }
        let fresh = self.federate(http, deadline).await?;
        let next = fresh.ahead_at;
        *self.lock() = Some(fresh);
        Ok(next)
    }

    async fn federate(&self, http: &Http, deadline: Instant) -> Result<Session, OciError> {
        let operation = "X509Federation";
        let fail = |message: String| OciError::Credentials { operation, message };
        let fetch = |name: &'static str| {
            let url = format!("{}/identity/{name}", self.endpoints.metadata.trim_end_matches('/'));
            async move {
                let body =
                    http.get_plain("InstanceMetadata", &url, &[("Authorization", "Bearer Oracle")]).await?;
                String::from_utf8(body.to_vec())
                    .map_err(|e| OciError::Credentials { operation, message: format!("{name}: {e}") })
            }
        };
        let (leaf, intermediate, instance_key) =
            (fetch("cert.pem").await?, fetch("intermediate.pem").await?, fetch("key.pem").await?);
        let certificate = x509_cert::Certificate::from_pem(leaf.as_bytes())
            .map_err(|e| fail(format!("the instance certificate: {e}")))?;
        let tenancy = tenancy_of(&certificate.tbs_certificate().subject().to_string()).ok_or_else(|| {
            fail("the instance certificate names no tenancy (no `opc-tenant:` in its subject)".into())
        })?;
        let leaf_der = pem_body(&leaf);
        let fingerprint = fingerprint(
            &BASE64.decode(&leaf_der).map_err(|e| fail(format!("the instance certificate: {e}")))?,
        );
        let instance_key =
            SigningKey::from_pem(&instance_key).map_err(|e| fail(format!("the instance key: {e}")))?;
        let session_key = tokio::task::spawn_blocking(SigningKey::generate)
            .await
            .map_err(|e| fail(e.to_string()))?
            .map_err(|e| fail(format!("the session key: {e}")))?;
        let public = session_key.public_key_der().map_err(|e| fail(e.to_string()))?;
        let body = serde_json::json!({
            "certificate": leaf_der,
            "publicKey": BASE64.encode(public),
            "intermediateCertificates": [pem_body(&intermediate)],
            "purpose": "DEFAULT",
        })
        .to_string();
        let key_id = format!("{tenancy}/fed-x509/{fingerprint}");
        let answer = http
            .signed(
                Call {
                    operation,
                    method: Method::POST,
                    url: &self.endpoints.federation,
                    body: Some(body.as_bytes()),
                    deadline,
                    retry_conflict: true,
                    if_match: None,
                    resend: true,
                },
                || {
                    let signer = (key_id.clone(), instance_key.clone());
                    async move { Ok(signer) }
                },
            )
            .await?;
        let value: serde_json::Value =
            serde_json::from_slice(&answer.body).map_err(|e| fail(format!("the federation answer: {e}")))?;
        let token = value
            .get("token")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| fail("the federation answer has no token".into()))?;
        let expiry =
            expiry_of(token).ok_or_else(|| fail("the session token has no readable `exp`".into()))?;
        let now = SystemTime::now();
        let lifetime = expiry.duration_since(now).unwrap_or_default();
        let refresh_at = expiry - REFRESH_BEFORE.min(lifetime / 2);
        let ahead_at = expiry - (REFRESH_BEFORE + AHEAD).min(lifetime * 3 / 4);
        self.federations.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(tenancy, ?lifetime, "oci: instance principal session token fetched");
        Ok(Session { token: token.to_owned(), key: session_key, refresh_at, ahead_at, expires_at: expiry })
    }
}

/// The base64 body of a PEM text (no armour lines, no line breaks).
fn pem_body(pem: &str) -> String {
    pem.lines().filter(|l| !l.starts_with("-----")).map(str::trim).collect()
}

/// The tenancy in a certificate subject: its `OU=opc-tenant:<ocid>` (or `O=opc-identity:<ocid>`).
fn tenancy_of(subject: &str) -> Option<String> {
    ["opc-tenant:", "opc-identity:"].iter().find_map(|prefix| {
        subject.split([',', '+']).find_map(|part| {
            let value = part.split_once('=').map(|(_, v)| v.trim())?;
            value.strip_prefix(prefix).map(str::to_owned)
        })
    })
}

/// The certificate's SHA-1 fingerprint, upper-case hex pairs joined by `:`.
fn fingerprint(der: &[u8]) -> String {
    sha1::Sha1::digest(der).iter().map(|b| format!("{b:02X}")).collect::<Vec<_>>().join(":")
}

/// A JWT's `exp`.
fn expiry_of(token: &str) -> Option<SystemTime> {
    let payload = token.split('.').nth(1)?;
    let json: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?).ok()?;
    let seconds = json.get("exp")?.as_u64()?;
    Some(UNIX_EPOCH + Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tenancy_fingerprint_and_expiry_are_read() {
        assert_eq!(
            tenancy_of(
                "CN=ocid1.instance.oc1..x,OU=opc-certtype:instance,OU=opc-tenant:ocid1.tenancy.oc1..t"
            ),
            Some("ocid1.tenancy.oc1..t".into())
        );
        assert_eq!(
            tenancy_of("CN=x,O=opc-identity:ocid1.tenancy.oc1..u"),
            Some("ocid1.tenancy.oc1..u".into())
        );
        assert_eq!(tenancy_of("CN=x"), None);
        assert_eq!(fingerprint(b"abc"), "A9:99:3E:36:47:06:81:6A:BA:3E:25:71:78:50:C2:6C:9C:D0:D8:9D");
        let payload = URL_SAFE_NO_PAD.encode(br#"{"exp":1700000000}"#);
        assert_eq!(
            expiry_of(&format!("h.{payload}.s")),
            Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
        assert_eq!(expiry_of("nope"), None);
    }
}
