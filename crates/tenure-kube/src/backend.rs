//! The `kubernetes` backend (SPEC 8): the lease is a `coordination.k8s.io/v1` Lease; the term is
//! the annotation [`TERM_ANNOTATION`] on it.
//!
//! One attempt reads the Lease, then writes at most once:
//!
//! - **Takeover** — the Lease is missing, has no holder, or has expired: the new term is the
//!   highest this process has seen, plus one. A missing Lease is created (`POST`;
//!   `409 AlreadyExists` means another contender created it first: `Follower`); an existing one is
//!   replaced (`PUT`) carrying the `resourceVersion` and `uid` that were read, so the API server
//!   accepts exactly one of several racing takeovers and answers the others `409 Conflict`:
//!   `Follower`. Every takeover also writes this process's nonce ([`NONCE_ANNOTATION`], random per
//!   backend) beside the holder.
//! - **Renewal** — this process holds the Lease (holder, nonce, term and `uid` all as it wrote
//!   them): the same guarded `PUT` moves `renewTime` and keeps the term. A `409` here is a renewal
//!   that did not happen (`Unavailable`); the elector's renew deadline decides, and the next
//!   attempt re-reads. Another holder, nonce, term or `uid` on the Lease means the lease was lost:
//!   `Follower`.
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
//! did not write (a restarted process, or two processes given one identity: the nonce differs) is
//! treated like anyone else's: waited out, then taken over under a new term, so that two processes
//! never hold the same term.
//!
//! # A takeover whose answer was lost
//!
//! A takeover `POST` or `PUT` may commit while its answer is lost (a cut connection, a timeout,
//! the elector dropping an attempt that outlasted its budget). Until its outcome is known, the
//! backend remembers it as *unsettled*: the term it wrote, and when (its `renewTime`, and the
//! monotonic instant just before it was sent). The next read that finds the Lease naming this
//! identity, carrying this process's nonce and that term adopts it: the process leads under that
//! very term, with no term skipped and no lease duration waited. Identity alone would not do: a
//! second process given the same identity has another nonce, and its unsettled takeover is never
//! adopted by this one, nor this one's by it. The adoption leads without another write when the
//! Lease, counted from the instant the adopted write was sent, outlasts the renew deadline from the
//! start of this attempt (set with [`KubernetesBackend::with_renew_deadline`]); otherwise it renews
//! first, and that renewal is remembered as unsettled too. So a takeover that always takes longer
//! than the elector's retry budget still ends in leadership: the write commits after the attempt
//! was given up, and the next attempt, a read, adopts it.
//!
//! # A term that went back
//!
//! The backend remembers the highest term it has seen on the Lease, as holder or as follower, and
//! [`tenure_lead::memory::Remembering`] seeds it with the floor this node keeps in its state
//! directory ([`LeaseBackend::remember_at_least`]). A Lease whose annotation is below that floor (a
//! Lease deleted and recreated, an edited or restored annotation), or no Lease at all once a term
//! has been seen, is refused with [`BackendError::TermWentBack`] (`found` 0 for a missing Lease)
//! before anything is written: the elector steps down and stops. A fenced sink refuses only epochs
//! *below* its high-water mark, so leading again from a lower term could hand out an epoch that
//! was already used. To recover, set the annotation on the Lease at or above the term named in the
//! error (`kubectl annotate lease NAME tenure.dev/leader-term=N --overwrite`, creating the Lease
//! first if it is gone), then restart the contenders. A term annotation that is not a number is
//! refused too (`Unavailable`, naming the annotation) and nothing is written: that is corruption,
//! and guessing could lower the epoch.
//!
//! What no contender can do: a deletion loses the cluster's record of the term. A process that
//! never saw a term (a newcomer with an empty state directory) creates the Lease again at term 1;
//! the contenders that had seen more refuse it, but the newcomer leads, and a term can be held a
//! second time. Do not delete the Lease of a running election; to recreate one, set the annotation
//! at or above the last term in use (the fenced sinks' high-water mark is a safe value).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::core::Status;
use rand::Rng;
use tenure_core::model::LeaderEpoch;
use tenure_lead::backend::{Attempt, BackendError, LeaseBackend};
use tokio::time::Instant;

use crate::names;
use crate::record::{self, NONCE_ANNOTATION, TERM_ANNOTATION};

/// How long connecting and each request may take, for clients built by [`client_for_url`].
pub use tenure_lead::backend::REQUEST_TIMEOUT;

pub use crate::client::{SetupError, client_for_url, client_inferred};

const BACKEND: &str = "kubernetes";

/// How many takeover writes under one term are remembered while their outcome is unknown (one
/// per lost answer; the oldest is forgotten first, and a forgotten one is adopted by a renewal).
const UNSETTLED_WRITES_MAX: usize = 4;

/// One contender for a Kubernetes Lease. See the [module documentation](self) for the protocol.
pub struct KubernetesBackend {
    api: Api<Lease>,
    namespace: String,
    lease_name: String,
    identity: String,
    /// Random per backend: tells this process's writes from those of another process given the
    /// same identity.
    nonce: String,
    lease_duration_s: i32,
    /// How long the elector leads after the start of an attempt that returned `Leader`.
    renew_deadline: Duration,
    held: Option<Held>,
    highest_seen: u64,
    observed: Option<Observed>,
    unsettled: Option<Unsettled>,
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

/// Takeover writes whose answer never came: they may have committed.
#[derive(Debug)]
struct Unsettled {
    /// The term they wrote.
    term: LeaderEpoch,
    /// Each write's `renewTime` (microseconds, as the API stores it) and the instant just before
    /// it was stamped; at most [`UNSETTLED_WRITES_MAX`], oldest first.
    writes: Vec<(i64, Instant)>,
}

impl std::fmt::Debug for KubernetesBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubernetesBackend")
            .field("lease", &format_args!("{}/{}", self.namespace, self.lease_name))
            .field("identity", &self.identity)
            .field("nonce", &self.nonce)
            .field("held", &self.held)
            .field("highest_seen", &self.highest_seen)
            .field("unsettled", &self.unsettled)
            .finish_non_exhaustive()
    }
}

impl KubernetesBackend {
    /// Campaigns for the Lease `namespace/lease_name` as `identity` through `client`, writing
    /// `lease_duration` (rounded up to whole seconds) as the Lease's `leaseDurationSeconds`. Pass
    /// the election's `ElectionConfig::lease_duration`. The namespace must be a DNS-1123 label and
    /// the Lease name a DNS-1123 subdomain, as the API server requires.
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
        if !names::is_dns1123_label(namespace) {
            let value = namespace.to_owned();
            return Err(SetupError::BadName { field: "namespace", value, rule: names::LABEL_RULE });
        }
        if !names::is_dns1123_subdomain(lease_name) {
            let value = lease_name.to_owned();
            return Err(SetupError::BadName { field: "lease name", value, rule: names::SUBDOMAIN_RULE });
        }
        if lease_duration < Duration::from_secs(1) {
            return Err(SetupError::LeaseTooShort(lease_duration));
        }
        Ok(Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            lease_name: lease_name.to_owned(),
            identity: identity.to_owned(),
            nonce: format!("{:032x}", rand::rng().random::<u128>()),
            lease_duration_s: record::whole_seconds(lease_duration),
            // Unknown until told: assume the elector may lead for a whole lease, so that an
            // adopted takeover is always renewed before it is led under.
            renew_deadline: lease_duration,
            held: None,
            highest_seen: 0,
            observed: None,
            unsettled: None,
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

    /// Tells the backend the elector's renew deadline (pass `ElectionConfig::renew_deadline`), so
    /// that a takeover whose answer was lost is adopted without another write while its Lease
    /// outlasts that deadline. Without it, an adoption always renews first.
    #[must_use]
    pub fn with_renew_deadline(mut self, renew_deadline: Duration) -> Self {
        self.renew_deadline = renew_deadline;
        self
    }

    /// The nonce this backend writes beside its identity ([`NONCE_ANNOTATION`]).
    #[must_use]
    pub fn nonce(&self) -> &str {
        &self.nonce
    }

    /// A kube error, with its causes (the "connection refused" under "client error (Connect)").
    fn failed(&self, error: &kube::Error) -> BackendError {
        self.unavailable(tenure_lead::backend::with_causes(error))
    }

    fn unavailable(&self, error: impl std::fmt::Display) -> BackendError {
        BackendError::Unavailable {
            backend: BACKEND,
            message: format!("lease {}/{}: {error}", self.namespace, self.lease_name),
        }
    }

    /// Reads the Lease and its term, and records the version as observed.
    async fn fetch(&mut self) -> Result<Option<(Lease, u64)>, BackendError> {
        let found = self.api.get_opt(&self.lease_name).await.map_err(|e| self.failed(&e))?;
        let Some(lease) = found else {
            self.observed = None;
            return Ok(None);
        };
        let term = record::term_of(&lease).map_err(|e| self.unavailable(e))?;
        self.observe(&lease);
        Ok(Some((lease, term)))
    }

    /// [`Self::fetch`], refusing a term below the highest seen (a missing Lease is term 0), and
    /// recording the term as seen.
    async fn read(&mut self) -> Result<Option<(Lease, u64)>, BackendError> {
        let current = self.fetch().await?;
        let found = current.as_ref().map_or(0, |(_, term)| *term);
        if found < self.highest_seen {
            return Err(BackendError::TermWentBack { backend: BACKEND, seen: self.highest_seen, found });
        }
        self.highest_seen = found;
        Ok(current)
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
        let duration = declared_duration(lease, self.lease_duration_s);
        let watched_expire = self.observed.as_ref().is_some_and(|o| o.since.elapsed() >= duration);
        let duration_s = record::duration_s_of(lease, self.lease_duration_s);
        watched_expire && record::renewal_passed(lease, duration_s, Timestamp::now())
    }

    fn won(&mut self, term: LeaderEpoch, written: &Lease) -> Attempt {
        self.highest_seen = self.highest_seen.max(term.get());
        self.held = Some(Held { term, uid: written.metadata.uid.clone() });
        self.unsettled = None;
        self.observe(written);
        Attempt::Leader { term }
    }

    fn lost(&mut self, holder: Option<String>) -> Attempt {
        self.held = None;
        Attempt::Follower { holder }
    }

    /// Whether this process wrote the holder of `lease`: its identity *and* its nonce.
    fn written_here(&self, lease: &Lease) -> bool {
        record::holder_of(lease) == Some(self.identity.as_str())
            && record::nonce_of(lease) == Some(self.nonce.as_str())
    }

    fn holds(&self, held: &Held, lease: &Lease, term: u64) -> bool {
        self.written_here(lease) && term == held.term.get() && lease.metadata.uid == held.uid
    }

    /// Whether `lease` (at `term`) is this process's unsettled takeover, committed.
    fn is_unsettled_takeover(&self, lease: &Lease, term: u64) -> bool {
        self.unsettled.as_ref().is_some_and(|u| u.term.get() == term) && self.written_here(lease)
    }

    /// Records a takeover (or the renewal adopting one) under `term` about to be sent and returns
    /// its `renewTime`: from here until its outcome is known, a lost answer may hide a committed
    /// takeover.
    fn stamp_unsettled(&mut self, term: LeaderEpoch) -> MicroTime {
        let sent = Instant::now();
        // The API keeps microseconds: stamp in microseconds, to know the write when read back.
        let micros = Timestamp::now().as_microsecond();
        let unsettled = match self.unsettled.take() {
            Some(same) if same.term == term => same,
            _ => Unsettled { term, writes: Vec::new() },
        };
        let mut writes = unsettled.writes;
        if writes.len() >= UNSETTLED_WRITES_MAX {
            writes.remove(0);
        }
        writes.push((micros, sent));
        self.unsettled = Some(Unsettled { term, writes });
        MicroTime(Timestamp::from_microsecond(micros).expect("a time read from the clock is in range"))
    }

    /// Whether this process's unsettled write, found committed as `lease`, may be led under
    /// without another write: the Lease, counted from the instant that write was sent, lasts
    /// beyond `started` plus the renew deadline (the elector leads until then).
    fn outlasts_renew_deadline(&self, lease: &Lease, started: Instant) -> bool {
        let renewed = lease.spec.as_ref().and_then(|s| s.renew_time.as_ref()).map(|t| t.0.as_microsecond());
        let sent = self.unsettled.as_ref().and_then(|u| {
            u.writes.iter().find(|(micros, _)| Some(*micros) == renewed).map(|(_, sent)| *sent)
        });
        let duration = declared_duration(lease, self.lease_duration_s);
        sent.is_some_and(|sent| {
            let left = duration.saturating_sub(started.saturating_duration_since(sent));
            left > self.renew_deadline
        })
    }

    /// Adopts this process's unsettled takeover, found committed as `lease` at `term`: leads at
    /// once if it [outlasts the renew deadline](Self::outlasts_renew_deadline), otherwise renews
    /// it first — a write recorded as unsettled too, so that if its answer is lost as well, the
    /// next read adopts the renewal.
    async fn adopt(
        &mut self,
        mut lease: Lease,
        term: u64,
        started: Instant,
    ) -> Result<Attempt, BackendError> {
        let term = LeaderEpoch::from_stored(term);
        if self.outlasts_renew_deadline(&lease, started) {
            return Ok(self.won(term, &lease));
        }
        let now = self.stamp_unsettled(term);
        let spec = lease.spec.get_or_insert_default();
        spec.renew_time = Some(now);
        spec.lease_duration_seconds = Some(self.lease_duration_s);
        match self.api.replace(&self.lease_name, &PostParams::default(), &lease).await {
            Ok(written) => Ok(self.won(term, &written)),
            Err(e) if is_api(&e, Status::is_conflict) => Err(self.unavailable(
                "adopting a takeover raced another write to the Lease; it is re-read on the next attempt",
            )),
            Err(e) => Err(self.failed(&e)),
        }
    }

    fn next_term(&self) -> Result<LeaderEpoch, BackendError> {
        tenure_lead::backend::next_term(BACKEND, self.highest_seen).map(LeaderEpoch::from_stored)
    }

    async fn create(&mut self) -> Result<Attempt, BackendError> {
        let term = self.next_term()?;
        let now = self.stamp_unsettled(term);
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.lease_name.clone()),
                namespace: Some(self.namespace.clone()),
                annotations: Some(BTreeMap::from([
                    (TERM_ANNOTATION.to_owned(), term.get().to_string()),
                    (NONCE_ANNOTATION.to_owned(), self.nonce.clone()),
                ])),
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
            Err(e) => Err(self.failed(&e)),
        }
    }

    async fn take(&mut self, current: Option<(Lease, u64)>) -> Result<Attempt, BackendError> {
        let Some((mut lease, _)) = current else { return self.create().await };
        if let Some(holder) = record::holder_of(&lease)
            && !self.expired(&lease)
        {
            return Ok(Attempt::Follower { holder: Some(holder.to_owned()) });
        }
        // `read` made the highest seen at least the term found.
        let term = self.next_term()?;
        let now = self.stamp_unsettled(term);
        let annotations = lease.metadata.annotations.get_or_insert_default();
        annotations.insert(TERM_ANNOTATION.to_owned(), term.get().to_string());
        annotations.insert(NONCE_ANNOTATION.to_owned(), self.nonce.clone());
        let spec = lease.spec.get_or_insert_default();
        spec.holder_identity = Some(self.identity.clone());
        spec.acquire_time = Some(now.clone());
        spec.renew_time = Some(now);
        spec.lease_duration_seconds = Some(self.lease_duration_s);
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        // Carries the resourceVersion and uid just read: exactly one racing takeover is accepted.
        match self.api.replace(&self.lease_name, &PostParams::default(), &lease).await {
            Ok(written) => Ok(self.won(term, &written)),
            // Lost the race (perhaps to an earlier takeover of this process whose answer was
            // lost: the unsettled record stays, and the next read adopts it).
            Err(e) if is_api(&e, |s| s.is_conflict() || s.is_not_found()) => {
                Ok(Attempt::Follower { holder: None })
            }
            Err(e) => Err(self.failed(&e)),
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
            Err(e) => Err(self.failed(&e)),
        }
    }
}

/// The lease duration `lease` declares (or `fallback_s`), as a duration.
fn declared_duration(lease: &Lease, fallback_s: i32) -> Duration {
    Duration::from_secs(u64::from(record::duration_s_of(lease, fallback_s).unsigned_abs()))
}

fn is_api(error: &kube::Error, test: impl Fn(&Status) -> bool) -> bool {
    matches!(error, kube::Error::Api(status) if test(status))
}

impl LeaseBackend for KubernetesBackend {
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, BackendError> {
        let started = Instant::now();
        let current = self.read().await?;
        let adoptable = self.held.is_none()
            && current.as_ref().is_some_and(|(lease, term)| self.is_unsettled_takeover(lease, *term));
        if adoptable && let Some((lease, term)) = current {
            return self.adopt(lease, term, started).await;
        }
        match self.held.clone() {
            Some(held) => self.renew(held, current).await,
            None => self.take(current).await,
        }
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        let held = self.held.take();
        if held.is_none() && self.unsettled.is_none() {
            return Ok(());
        }
        let current = self.fetch().await;
        let Some((mut lease, found)) = current? else {
            self.unsettled = None;
            return Ok(());
        };
        // A takeover that committed unbeknown to this process is released too.
        let ours = match &held {
            Some(held) => self.holds(held, &lease, found),
            None => self.is_unsettled_takeover(&lease, found),
        };
        self.unsettled = None;
        if !ours {
            return Ok(());
        }
        // Keep the term annotation: the next holder counts on from it.
        lease.spec.get_or_insert_default().holder_identity = None;
        if let Some(annotations) = lease.metadata.annotations.as_mut() {
            annotations.remove(NONCE_ANNOTATION);
        }
        match self.api.replace(&self.lease_name, &PostParams::default(), &lease).await {
            Ok(written) => {
                self.observe(&written);
                Ok(())
            }
            Err(e) => Err(self.unavailable(format!(
                "release (the lease will expire instead): {}",
                tenure_lead::backend::with_causes(&e)
            ))),
        }
    }

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn highest_seen(&self) -> u64 {
        self.highest_seen
    }

    fn remember_at_least(&mut self, term: u64) {
        self.highest_seen = self.highest_seen.max(term);
    }
}
