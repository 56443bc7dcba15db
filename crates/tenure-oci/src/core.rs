//! [`Core`]: the Core Services (API 20160918) calls of the `oci` provider.
//!
//! | call | request |
//! |---|---|
//! | [`Core::vnic`] | `GET /20160918/vnics/{vnicId}` (GetVnic) |
//! | [`Core::private_ip_by_address`] | `GET /20160918/privateIps?subnetId=…&ipAddress=…` (ListPrivateIps) |
//! | [`Core::private_ip`] | `GET /20160918/privateIps/{id}` (GetPrivateIp), with its `etag` |
//! | [`Core::move_private_ip`] | `PUT /20160918/privateIps/{id}` `{"vnicId"}` (UpdatePrivateIp) |
//! | [`Core::create_private_ip`] | `POST /20160918/privateIps` `{"vnicId","ipAddress"}` (CreatePrivateIp) |
//! | [`Core::delete_private_ip`] | `DELETE /20160918/privateIps/{id}` with `if-match` (DeletePrivateIp); never resent here |
//! | [`Core::detach_private_ip`] | `POST /20160918/privateIps/{id}/actions/detach` with `if-match` (PrivateIpVnicDetach: a RESERVED private IP leaves its VNIC and is kept); never resent here |
//! | [`Core::private_ips_in_subnet`] | `GET /20160918/privateIps?subnetId=…`, every page (`opc-next-page`) |
//! | [`Core::set_skip_source_dest_check`] | `PUT /20160918/vnics/{vnicId}` `{"skipSourceDestCheck"}` (UpdateVnic) |

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use serde::Deserialize;
use tokio::time::Instant;

use crate::http::{Call, Http, OciError};
use crate::principal::{Endpoints, InstancePrincipal};
use crate::profile::{self, ApiKey, ProfileError};
use crate::sign::SigningKey;

/// Most private IPs one list page asks for.
pub const PAGE_LIMIT: u32 = 100;

/// Bound of one background federation.
const FEDERATION_MAX: Duration = Duration::from_secs(30);

/// Wait before the background refresh tries again after a failure.
const RENEW_RETRY: Duration = Duration::from_secs(10);

/// How requests are signed.
#[derive(Debug)]
pub enum Auth {
    /// An API key (from an OCI config file's profile).
    ApiKey(ApiKey),
    /// Instance principals.
    InstancePrincipal(InstancePrincipal),
}

impl Auth {
    /// The API key of `profile` in the OCI config file at `path`.
    ///
    /// # Errors
    ///
    /// [`ProfileError`] when the file, the profile, a key or the key file is missing.
    pub fn config_file(path: &Path, profile: &str) -> Result<Self, ProfileError> {
        profile::api_key(path, profile).map(Self::ApiKey)
    }
}

/// A VNIC as GetVnic answers (the fields the provider reads).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Vnic {
    /// Its OCID.
    pub id: String,
    /// Its subnet's OCID.
    pub subnet_id: String,
    /// Its primary private IP address.
    #[serde(default)]
    pub private_ip: Option<String>,
    /// Whether it forwards for addresses that are not its own.
    #[serde(default)]
    pub skip_source_dest_check: bool,
}

/// A private IP object.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PrivateIp {
    /// Its OCID.
    pub id: String,
    /// The VNIC it is on: none for a RESERVED private IP assigned to no VNIC, or for one on a
    /// VLAN (Oracle Cloud VMware Solution).
    #[serde(default)]
    pub vnic_id: Option<String>,
    /// The address.
    #[serde(default)]
    pub ip_address: String,
    /// `EPHEMERAL` (deleted when released) or `RESERVED` (kept, and its OCID with it, when it
    /// leaves a VNIC); absent in older answers (ephemeral).
    #[serde(default)]
    pub lifetime: Option<String>,
    /// Whether it is its VNIC's primary address (never moved or deleted by tenure).
    #[serde(default)]
    pub is_primary: bool,
    /// Its subnet.
    #[serde(default)]
    pub subnet_id: Option<String>,
}

impl PrivateIp {
    /// Whether it is a RESERVED private IP (released by leaving its VNIC, never deleted).
    #[must_use]
    pub fn is_reserved(&self) -> bool {
        self.lifetime.as_deref().is_some_and(|l| l.eq_ignore_ascii_case("RESERVED"))
    }
}

/// The Core Services client for one region (or one test endpoint).
#[derive(Clone, Debug)]
pub struct Core {
    base: String,
    auth: Arc<Auth>,
    http: Http,
}

impl Core {
    /// A client of `https://iaas.{region}.oraclecloud.com`, or of `endpoint_url` when given.
    ///
    /// # Errors
    ///
    /// [`OciError::Credentials`] when TLS cannot be set up.
    pub fn new(region: &str, endpoint_url: Option<&str>, auth: Auth) -> Result<Self, OciError> {
        let base = endpoint_url.map_or_else(
            || format!("https://iaas.{region}.oraclecloud.com"),
            |u| u.trim_end_matches('/').to_owned(),
        );
        Ok(Self { base, auth: Arc::new(auth), http: Http::new()? })
    }

    /// Instance principals for `region` with OCI's own metadata and federation endpoints.
    #[must_use]
    pub fn instance_principal(region: &str) -> Auth {
        Auth::InstancePrincipal(InstancePrincipal::new(Endpoints::for_region(region)))
    }

    /// The calls answered 429 or 409 `IncorrectState` so far.
    #[must_use]
    pub fn throttled(&self) -> u64 {
        self.http.throttled()
    }

    /// With instance principals, starts a task that fetches the session token now and renews it
    /// ahead of its refresh time, so that calls find it fresh instead of paying for a federation
    /// inside their deadline (an API key needs none: nothing is started). The task ends once
    /// every clone of this client is dropped. Call it within a tokio runtime, once.
    pub fn keep_session_fresh(&self) {
        if !matches!(self.auth.as_ref(), Auth::InstancePrincipal(_)) {
            return;
        }
        let auth = Arc::downgrade(&self.auth);
        let http = self.http.clone();
        tokio::spawn(async move {
            loop {
                let Some(auth) = auth.upgrade() else { return };
                let Auth::InstancePrincipal(principal) = auth.as_ref() else { return };
                let wait = match principal.refresh_ahead(&http, Instant::now() + FEDERATION_MAX).await {
                    Ok(next) => next.duration_since(std::time::SystemTime::now()).unwrap_or_default(),
                    Err(e) => {
                        tracing::warn!(error = %e, "oci: instance principal session not renewed ahead; calls will try");
                        RENEW_RETRY
                    }
                };
                drop(auth);
                tokio::time::sleep(wait.max(Duration::from_millis(100))).await;
            }
        });
    }

    /// The auth in use.
    #[must_use]
    pub fn auth(&self) -> &Auth {
        &self.auth
    }

    async fn signer(&self, deadline: Instant) -> Result<(String, SigningKey), OciError> {
        match self.auth.as_ref() {
            Auth::ApiKey(key) => Ok((key.key_id.clone(), key.key.clone())),
            Auth::InstancePrincipal(principal) => principal.signer(&self.http, deadline).await,
        }
    }

    async fn call(
        &self,
        operation: &'static str,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
        deadline: Instant,
    ) -> Result<crate::http::Answer, OciError> {
        let body = body.map(|b| b.to_string().into_bytes());
        self.call_with(operation, method, path, body, None, true, deadline).await
    }

    /// One call, with `if-match` when given; resent after 429/409/5xx only when `resend`.
    #[allow(clippy::too_many_arguments)]
    async fn call_with(
        &self,
        operation: &'static str,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        if_match: Option<&str>,
        resend: bool,
        deadline: Instant,
    ) -> Result<crate::http::Answer, OciError> {
        let url = format!("{}/20160918{path}", self.base);
        // A create's 409 means the address is in use: the caller reads again instead.
        let retry_conflict = operation != "CreatePrivateIp";
        let send = || {
            let call = Call {
                operation,
                method: method.clone(),
                url: &url,
                body: body.as_deref(),
                deadline,
                retry_conflict,
                if_match,
                resend,
            };
            self.http.signed(call, || self.signer(deadline))
        };
        match send().await {
            // A session token OCI no longer takes: fetch a new one, once.
            Err(OciError::Permission { status: 401, .. })
                if matches!(self.auth.as_ref(), Auth::InstancePrincipal(_)) =>
            {
                if let Auth::InstancePrincipal(principal) = self.auth.as_ref() {
                    principal.forget().await;
                }
                send().await
            }
            other => other,
        }
    }

    fn parse<T: for<'de> Deserialize<'de>>(operation: &'static str, body: &[u8]) -> Result<T, OciError> {
        serde_json::from_slice(body).map_err(|e| OciError::Refused {
            operation,
            status: 200,
            code: "UnreadableAnswer".into(),
            message: e.to_string(),
        })
    }

    /// GetVnic.
    ///
    /// # Errors
    ///
    /// Any [`OciError`].
    pub async fn vnic(&self, vnic: &str, deadline: Instant) -> Result<Vnic, OciError> {
        let answer = self.call("GetVnic", Method::GET, &format!("/vnics/{vnic}"), None, deadline).await?;
        Self::parse("GetVnic", &answer.body)
    }

    /// The private IP object of `address` in `subnet`, if there is one (ListPrivateIps).
    ///
    /// # Errors
    ///
    /// Any [`OciError`].
    pub async fn private_ip_by_address(
        &self,
        subnet: &str,
        address: IpAddr,
        deadline: Instant,
    ) -> Result<Option<PrivateIp>, OciError> {
        let path = format!("/privateIps?subnetId={subnet}&ipAddress={}", encode(&address.to_string()));
        let answer = self.call("ListPrivateIps", Method::GET, &path, None, deadline).await?;
        let found: Vec<PrivateIp> = Self::parse("ListPrivateIps", &answer.body)?;
        Ok(found.into_iter().find(|p| p.ip_address.parse::<IpAddr>().ok() == Some(address)))
    }

    /// GetPrivateIp: the object and its `etag` (for a conditional write), when OCI sends one.
    ///
    /// # Errors
    ///
    /// Any [`OciError`].
    pub async fn private_ip(
        &self,
        id: &str,
        deadline: Instant,
    ) -> Result<(PrivateIp, Option<String>), OciError> {
        let answer =
            self.call("GetPrivateIp", Method::GET, &format!("/privateIps/{id}"), None, deadline).await?;
        let etag = answer.headers.get("etag").and_then(|v| v.to_str().ok()).map(str::to_owned);
        Ok((Self::parse("GetPrivateIp", &answer.body)?, etag))
    }

    /// UpdatePrivateIp: moves the object to `vnic`.
    ///
    /// # Errors
    ///
    /// Any [`OciError`].
    pub async fn move_private_ip(
        &self,
        id: &str,
        vnic: &str,
        deadline: Instant,
    ) -> Result<PrivateIp, OciError> {
        let body = serde_json::json!({ "vnicId": vnic });
        let answer = self
            .call("UpdatePrivateIp", Method::PUT, &format!("/privateIps/{id}"), Some(body), deadline)
            .await?;
        Self::parse("UpdatePrivateIp", &answer.body)
    }

    /// CreatePrivateIp: `address` as a secondary private IP of `vnic`.
    ///
    /// # Errors
    ///
    /// Any [`OciError`].
    pub async fn create_private_ip(
        &self,
        vnic: &str,
        address: IpAddr,
        deadline: Instant,
    ) -> Result<PrivateIp, OciError> {
        let body = serde_json::json!({ "vnicId": vnic, "ipAddress": address.to_string() });
        let answer = self.call("CreatePrivateIp", Method::POST, "/privateIps", Some(body), deadline).await?;
        Self::parse("CreatePrivateIp", &answer.body)
    }

    /// DeletePrivateIp, only while the object still has `etag` (`if-match`; 412 otherwise). Sent
    /// once: a 429, 409 or 5xx is [`OciError::Busy`], and the caller reads the object again
    /// before it decides to send another.
    ///
    /// # Errors
    ///
    /// Any [`OciError`].
    pub async fn delete_private_ip(
        &self,
        id: &str,
        etag: Option<&str>,
        deadline: Instant,
    ) -> Result<(), OciError> {
        let path = format!("/privateIps/{id}");
        self.call_with("DeletePrivateIp", Method::DELETE, &path, None, etag, false, deadline)
            .await
            .map(|_| ())
    }

    /// PrivateIpVnicDetach: a RESERVED private IP leaves its VNIC and is kept (its OCID too), only
    /// while it still has `etag` (`if-match`). Sent once, as [`Core::delete_private_ip`].
    ///
    /// # Errors
    ///
    /// Any [`OciError`].
    pub async fn detach_private_ip(
        &self,
        id: &str,
        etag: Option<&str>,
        deadline: Instant,
    ) -> Result<PrivateIp, OciError> {
        let path = format!("/privateIps/{id}/actions/detach");
        let answer = self
            .call_with("PrivateIpVnicDetach", Method::POST, &path, Some(Vec::new()), etag, false, deadline)
            .await?;
        Self::parse("PrivateIpVnicDetach", &answer.body)
    }

    /// Every private IP of `subnet`, page after page.
    ///
    /// # Errors
    ///
    /// Any [`OciError`].
    pub async fn private_ips_in_subnet(
        &self,
        subnet: &str,
        deadline: Instant,
    ) -> Result<Vec<PrivateIp>, OciError> {
        let mut all = Vec::new();
        let mut page: Option<String> = None;
        loop {
            let mut path = format!("/privateIps?subnetId={subnet}&limit={PAGE_LIMIT}");
            if let Some(token) = &page {
                path.push_str("&page=");
                path.push_str(&encode(token));
            }
            let answer = self.call("ListPrivateIps", Method::GET, &path, None, deadline).await?;
            let found: Vec<PrivateIp> = Self::parse("ListPrivateIps", &answer.body)?;
            all.extend(found);
            page = answer.headers.get("opc-next-page").and_then(|v| v.to_str().ok()).map(str::to_owned);
            if page.is_none() {
                return Ok(all);
            }
        }
    }

    /// UpdateVnic: sets `skipSourceDestCheck`.
    ///
    /// # Errors
    ///
    /// Any [`OciError`].
    pub async fn set_skip_source_dest_check(
        &self,
        vnic: &str,
        skip: bool,
        deadline: Instant,
    ) -> Result<Vnic, OciError> {
        let body = serde_json::json!({ "skipSourceDestCheck": skip });
        let answer =
            self.call("UpdateVnic", Method::PUT, &format!("/vnics/{vnic}"), Some(body), deadline).await?;
        Self::parse("UpdateVnic", &answer.body)
    }
}

/// Percent-encodes a query value (everything but unreserved characters).
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}
