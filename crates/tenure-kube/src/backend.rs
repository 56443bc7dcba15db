//! The `kubernetes` backend (SPEC 8): the lease is a `coordination.k8s.io/v1` Lease; the term is
//! the annotation [`TERM_ANNOTATION`] on it.
//!
//! One attempt reads the Lease, then writes at most once:
//!
//! - **Takeover** — the Lease is missing, has no holder, or has expired: the new term is
//!   `max(highest term this process has seen, term on the Lease) + 1`. A missing Lease is created
//!   (`POST`; `409 AlreadyExists` means another contender created it first: `Follower`); an
//!   existing one is replaced (`PUT`) carrying the `resourceVersion` and `uid` that were read, so
//!   the API server accepts exactly one of several racing takeovers and answers the others
//!   `409 Conflict`: `Follower`.
//! - **Renewal** — this process holds the Lease (holder, term and `uid` all as it wrote them): the
//!   same guarded `PUT` moves `renewTime` and keeps the term. A `409` here is a renewal that did not
//!   happen (`Unavailable`); the elector's renew deadline decides, and the next attempt re-reads.
//!   Anything else on the Lease (another holder, another term, another `uid`, no Lease) means the
//!   lease was lost: `Follower`.
//! - **Release** — clears the holder (same guarded `PUT`), keeps the term, so the next contender
//!   takes over at once.
//!
//! # When a Lease has expired
//!
//! Two conditions, both required: by the wall clock, `renewTime + leaseDurationSeconds` has passed
//! (SPEC 8); and this process has seen the Lease unchanged (same `uid` and `resourceVersion`) for
//! `leaseDurationSeconds` of its own monotonic clock, as client-go's leader election does. The
//! second condition makes a contender whose clock runs ahead unable to cut a healthy leader's lease
//! short; its price is that a freshly started contender waits one lease duration before taking
//! over a Lease it has not watched expire. A Lease naming this process's identity that this process
//! did not take in its lifetime (a restarted process, or two processes given one identity) is
//! treated like anyone else's: waited out, then taken over under a new term, so that two processes
//! never hold the same term.
//!
//! # A Lease deleted and recreated
//!
//! The backend remembers the highest term it has seen on the Lease, as holder or as follower. When
//! it creates a missing Lease, or takes over one whose annotation is below that (recreated by
//! someone else, edited, or restored), its term is `max(seen, found) + 1`: the epoch this process
//! has seen never goes back, and a term jumps by more than one instead. The backend never returns
//! [`BackendError::TermWentBack`]: the store's counter going back is an expected event here (a
//! namespace or Lease deleted and recreated), and carrying on above it is both safe for fencing
//! and live, whereas refusing would stop the election for good (the elector treats `TermWentBack`
//! as fatal) until someone repaired the annotation. A term annotation that is not a number is
//! refused (`Unavailable`, naming the annotation) and nothing is written: that is corruption, not
//! history, and guessing could lower the epoch.
//!
//! What no contender can do: a deletion loses the cluster's record of the term. A process that
//! never read the last term before the Lease vanished (a newcomer, or a follower that had not
//! polled yet) starts from what it has seen, so a term can be held a second time, and a fenced
//! sink (which refuses only epochs *below* its high-water mark) cannot tell the two holders apart.
//! Do not delete the Lease of a running election; to recreate one, set the annotation at or above
//! the last term in use (the fenced sinks' high-water mark is a safe value).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::core::Status;
use tenure_core::model::LeaderEpoch;
use tenure_lead::backend::{Attempt, BackendError, LeaseBackend};
use tokio::time::Instant;

use crate::record::{self, TERM_ANNOTATION};

/// How long connecting and each request may take, for clients built by [`client_for_url`].
pub use tenure_lead::backend::REQUEST_TIMEOUT;

const BACKEND: &str = "kubernetes";

/// A backend that could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A namespace, Lease name or identity was empty (an empty holder reads as "no holder").
    #[error("{field} must not be empty")]
    Empty {
        /// Which argument.
        field: &'static str,
    },
    /// The lease duration was below one second (a Lease stores whole seconds).
    #[error("lease duration must be at least 1s (a Lease counts whole seconds), got {0:?}")]
    LeaseTooShort(Duration),
    /// The API server URL could not be parsed.
    #[error("{url}: not an API server URL: {message}")]
    Url {
        /// The URL given.
        url: String,
        /// Why it was refused.
        message: String,
    },
    /// kube could not build a client from the configuration.
    #[error("cannot build a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
}

/// A kube client for the API server at `url` (plain `http://` unless the crate's `rustls-tls`
/// feature is on), with [`REQUEST_TIMEOUT`] on connect, read and write, and without kube's
/// automatic retries, so that one attempt makes one request per step. Call it inside a Tokio
/// runtime: the client spawns its request buffer there.
pub fn client_for_url(url: &str) -> Result<kube::Client, SetupError> {
    let uri: http::Uri = url.parse().map_err(|e: http::uri::InvalidUri| SetupError::Url {
        url: url.to_owned(),
        message: e.to_string(),
    })?;
    if uri.scheme().is_none() || uri.authority().is_none() {
        return Err(SetupError::Url { url: url.to_owned(), message: "expected scheme://host:port".into() });
    }
    let mut config = kube::Config::new(uri);
    config.connect_timeout = Some(REQUEST_TIMEOUT);
    config.read_timeout = Some(REQUEST_TIMEOUT);
    config.write_timeout = Some(REQUEST_TIMEOUT);
    config.default_retry = false;
    kube::Client::try_from(config).map_err(SetupError::Client)
}

/// One contender for a Kubernetes Lease. See the [module documentation](self) for the protocol.
pub struct KubernetesBackend {
    api: Api<Lease>,
    namespace: String,
    lease_name: String,
    identity: String,
    lease_duration_s: i32,
    held: Option<Held>,
    highest_seen: u64,
    observed: Option<Observed>,
}

/// The lease as this process took it.
#[derive(Clone, Debug)]
struct Held {
    term: LeaderEpoch,
    uid: Option<String>,
}

/// The version of the Lease last read, and since when (this process's monotonic clock).
#[derive(Debug)]
struct Observed {
    uid: Option<String>,
    resource_version: Option<String>,
    since: Instant,
}

impl std::fmt::Debug for KubernetesBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubernetesBackend")
            .field("lease", &format_args!("{}/{}", self.namespace, self.lease_name))
            .field("identity", &self.identity)
            .field("held", &self.held)
            .field("highest_seen", &self.highest_seen)
            .finish_non_exhaustive()
    }
}

impl KubernetesBackend {
    /// Campaigns for the Lease `namespace/lease_name` as `identity` through `client`, writing
    /// `lease_duration` (rounded up to whole seconds) as the Lease's `leaseDurationSeconds`. Pass
    /// the election's `ElectionConfig::lease_duration`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        lease_name: &str,
        identity: &str,
        lease_duration: Duration,
    ) -> Result<Self, SetupError> {
        for (field, value) in [("namespace", namespace), ("lease name", lease_name), ("identity", identity)] {
            if value.is_empty() {
                return Err(SetupError::Empty { field });
            }
        }
        if lease_duration < Duration::from_secs(1) {
            return Err(SetupError::LeaseTooShort(lease_duration));
        }
        Ok(Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            lease_name: lease_name.to_owned(),
            identity: identity.to_owned(),
            lease_duration_s: record::whole_seconds(lease_duration),
            held: None,
            highest_seen: 0,
            observed: None,
        })
    }

    /// [`KubernetesBackend::new`] with a client for the API server at `url` (see
    /// [`client_for_url`]), e.g. `http://127.0.0.1:8001` behind `kubectl proxy`, or a
    /// [`LeaseApiDouble`](crate::double::LeaseApiDouble)'s URL. Call it inside a Tokio runtime.
    pub fn connect(
        url: &str,
        namespace: &str,
        lease_name: &str,
        identity: &str,
        lease_duration: Duration,
    ) -> Result<Self, SetupError> {
        Self::new(client_for_url(url)?, namespace, lease_name, identity, lease_duration)
    }

    /// The highest term this process has seen on the Lease or held (0 before the first read).
    #[must_use]
    pub fn highest_term_seen(&self) -> u64 {
        self.highest_seen
    }

    fn unavailable(&self, error: impl std::fmt::Display) -> BackendError {
        BackendError::Unavailable {
            backend: BACKEND,
            message: format!("lease {}/{}: {error}", self.namespace, self.lease_name),
        }
    }

    /// Reads the Lease and its term; records the term as seen and the version as observed.
    async fn read(&mut self) -> Result<Option<(Lease, u64)>, BackendError> {
        let found = self.api.get_opt(&self.lease_name).await.map_err(|e| self.unavailable(e))?;
        let Some(lease) = found else {
            self.observed = None;
            return Ok(None);
        };
        let term = record::term_of(&lease).map_err(|e| self.unavailable(e))?;
        self.highest_seen = self.highest_seen.max(term);
        self.observe(&lease);
        Ok(Some((lease, term)))
    }

    fn observe(&mut self, lease: &Lease) {
        let unchanged = self.observed.as_ref().is_some_and(|o| {
            o.uid == lease.metadata.uid && o.resource_version == lease.metadata.resource_version
        });
        if !unchanged {
            self.observed = Some(Observed {
                uid: lease.metadata.uid.clone(),
                resource_version: lease.metadata.resource_version.clone(),
                since: Instant::now(),
            });
        }
    }

    /// Both expiry conditions of the module documentation.
    fn expired(&self, lease: &Lease) -> bool {
        let duration_s = record::duration_s_of(lease, self.lease_duration_s);
        let duration = Duration::from_secs(u64::from(duration_s.unsigned_abs()));
        let watched_expire = self.observed.as_ref().is_some_and(|o| o.since.elapsed() >= duration);
        watched_expire && record::renewal_passed(lease, duration_s, Timestamp::now())
    }

    fn won(&mut self, term: LeaderEpoch, written: &Lease) -> Attempt {
        self.highest_seen = self.highest_seen.max(term.get());
        self.held = Some(Held { term, uid: written.metadata.uid.clone() });
        self.observe(written);
        Attempt::Leader { term }
    }

    fn lost(&mut self, holder: Option<String>) -> Attempt {
        self.held = None;
        Attempt::Follower { holder }
    }

    fn holds(&self, held: &Held, lease: &Lease, term: u64) -> bool {
        record::holder_of(lease) == Some(self.identity.as_str())
            && term == held.term.get()
            && lease.metadata.uid == held.uid
    }

    async fn create(&mut self) -> Result<Attempt, BackendError> {
        let term = LeaderEpoch::from_stored(self.highest_seen)
            .checked_next()
            .ok_or(BackendError::TermOverflow { backend: "kubernetes", term: self.highest_seen })?;
        let now = MicroTime(Timestamp::now());
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.lease_name.clone()),
                namespace: Some(self.namespace.clone()),
                annotations: Some(BTreeMap::from([(TERM_ANNOTATION.to_owned(), term.get().to_string())])),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_duration_seconds: Some(self.lease_duration_s),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(written) => Ok(self.won(term, &written)),
            Err(e) if is_api(&e, Status::is_already_exists) => Ok(Attempt::Follower { holder: None }),
            Err(e) => Err(self.unavailable(e)),
        }
    }

    async fn take(&mut self, current: Option<(Lease, u64)>) -> Result<Attempt, BackendError> {
        let Some((mut lease, found)) = current else { return self.create().await };
        if let Some(holder) = record::holder_of(&lease)
            && !self.expired(&lease)
        {
            return Ok(Attempt::Follower { holder: Some(holder.to_owned()) });
        }
        let highest = self.highest_seen.max(found);
        let term = LeaderEpoch::from_stored(highest)
            .checked_next()
            .ok_or(BackendError::TermOverflow { backend: "kubernetes", term: highest })?;
        let now = MicroTime(Timestamp::now());
        lease
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(TERM_ANNOTATION.to_owned(), term.get().to_string());
        let spec = lease.spec.get_or_insert_default();
        spec.holder_identity = Some(self.identity.clone());
        spec.acquire_time = Some(now.clone());
        spec.renew_time = Some(now);
        spec.lease_duration_seconds = Some(self.lease_duration_s);
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        // Carries the resourceVersion and uid just read: exactly one racing takeover is accepted.
        match self.api.replace(&self.lease_name, &PostParams::default(), &lease).await {
            Ok(written) => Ok(self.won(term, &written)),
            Err(e) if is_api(&e, |s| s.is_conflict() || s.is_not_found()) => {
                Ok(Attempt::Follower { holder: None })
            }
            Err(e) => Err(self.unavailable(e)),
        }
    }

    async fn renew(&mut self, held: Held, current: Option<(Lease, u64)>) -> Result<Attempt, BackendError> {
        let Some((mut lease, found)) = current else { return Ok(self.lost(None)) };
        if !self.holds(&held, &lease, found) {
            let holder = record::holder_of(&lease).map(str::to_owned);
            return Ok(self.lost(holder));
        }
        let spec = lease.spec.get_or_insert_default();
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        spec.lease_duration_seconds = Some(self.lease_duration_s);
        match self.api.replace(&self.lease_name, &PostParams::default(), &lease).await {
            Ok(written) => {
                self.observe(&written);
                Ok(Attempt::Leader { term: held.term })
            }
            Err(e) if is_api(&e, Status::is_conflict) => Err(self
                .unavailable("renewal raced another write to the Lease; it is re-read on the next attempt")),
            Err(e) => Err(self.unavailable(e)),
        }
    }
}

fn is_api(error: &kube::Error, test: impl Fn(&Status) -> bool) -> bool {
    matches!(error, kube::Error::Api(status) if test(status))
}

impl LeaseBackend for KubernetesBackend {
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, BackendError> {
        let current = self.read().await?;
        match self.held.clone() {
            Some(held) => self.renew(held, current).await,
            None => self.take(current).await,
        }
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        let Some(held) = self.held.take() else { return Ok(()) };
        let Some((mut lease, found)) = self.read().await? else { return Ok(()) };
        if !self.holds(&held, &lease, found) {
            return Ok(());
        }
        // Keep the term annotation: the next holder counts on from it.
        lease.spec.get_or_insert_default().holder_identity = None;
        match self.api.replace(&self.lease_name, &PostParams::default(), &lease).await {
            Ok(written) => {
                self.observe(&written);
                Ok(())
            }
            Err(e) => Err(self.unavailable(format!("release (the lease will expire instead): {e}"))),
        }
    }

    fn name(&self) -> &'static str {
        BACKEND
    }
}
