//! The `etcd` backend: the leader key is bound to an etcd lease; the term is a counter key
//! incremented in the same transaction that takes leadership, guarded by revisions; renewal
//! keeps the lease alive and keeps the term.
//!
//! Keys, under `<prefix>/elections/<election>/`: `leader` (value: the holder's name, bound to its
//! lease) and `term` (value: the decimal term). Takeover is one transaction:
//! `if leader.version == 0 && term.mod_revision == <read> then put(leader, lease) put(term, n+1)`,
//! so two contenders can never both hold a term, and every takeover adds exactly one.
//!
//! An attempt whose answer is lost (the connection failed, or the elector's timeout dropped it)
//! may still have committed. The contender remembers the lease it granted for that attempt; the
//! next attempt that finds the leader key bound to that lease, written by the same transaction
//! as the term key (equal `mod_revision`s), adopts the takeover instead of waiting for the lease
//! to expire and taking the term after it. Terms are skipped only when an adoption is impossible
//! (the lease expired first); they are never repeated.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use tenure_core::model::LeaderEpoch;

use crate::backend::{Attempt, BackendError, LeaseBackend, REQUEST_TIMEOUT, lease_whole_seconds};
use crate::etcd_connection::EtcdConnection;

/// One contender in an etcd election.
pub struct EtcdBackend {
    client: Client,
    leader_key: String,
    term_key: String,
    name: String,
    lease_ttl_s: i64,
    held: Option<Held>,
    highest_seen: u64,
    /// The lease granted for a takeover whose outcome this contender does not know.
    unsettled: Option<i64>,
}

/// The election's two keys as read at one revision.
#[derive(Default)]
struct Election {
    /// Holder name, lease and mod revision of the leader key, if present.
    leader: Option<(String, i64, i64)>,
    /// The term and the term key's mod revision (0 and 0 if never taken).
    term: (u64, i64),
}

#[derive(Clone, Copy)]
struct Held {
    lease: i64,
    term: LeaderEpoch,
}

impl std::fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend").field("leader_key", &self.leader_key).field("name", &self.name).finish()
    }
}

fn unavailable(e: impl std::fmt::Display) -> BackendError {
    BackendError::Unavailable { backend: "etcd", message: e.to_string() }
}

/// An etcd client error, with its causes (see [`crate::backend::with_causes`]).
fn failed(e: etcd_client::Error) -> BackendError {
    unavailable(crate::backend::with_causes(&e))
}

impl EtcdBackend {
    /// Connects to `endpoints` and campaigns in `election` as `name` with a lease of
    /// `lease_duration` (whole seconds, at least 1).
    pub async fn connect(
        endpoints: &[String],
        prefix: &str,
        election: &str,
        name: &str,
        lease_duration: Duration,
    ) -> Result<Self, BackendError> {
        Self::connect_with(
            &EtcdConnection::plain(endpoints.to_vec(), REQUEST_TIMEOUT),
            prefix,
            election,
            name,
            lease_duration,
        )
        .await
    }

    /// As [`EtcdBackend::connect`], through `connection` (TLS, authentication: see
    /// [`crate::etcd_connection`]).
    pub async fn connect_with(
        connection: &EtcdConnection,
        prefix: &str,
        election: &str,
        name: &str,
        lease_duration: Duration,
    ) -> Result<Self, BackendError> {
        let client = connection.connect().await.map_err(failed)?;
        let base = format!("{}/elections/{election}", prefix.trim_end_matches('/'));
        Ok(Self {
            client,
            leader_key: format!("{base}/leader"),
            term_key: format!("{base}/term"),
            name: name.to_owned(),
            lease_ttl_s: i64::try_from(lease_whole_seconds(lease_duration)).unwrap_or(i64::MAX),
            held: None,
            highest_seen: 0,
            unsettled: None,
        })
    }

    /// The current term stored in etcd (0 if never taken).
    pub async fn stored_term(&mut self) -> Result<u64, BackendError> {
        Ok(self.read_election().await?.term.0)
    }

    async fn holder(&mut self) -> Result<Option<(String, i64)>, BackendError> {
        let response = self.client.get(self.leader_key.as_str(), None).await.map_err(failed)?;
        Ok(response.kvs().first().map(|kv| (kv.value_str().unwrap_or_default().to_owned(), kv.lease())))
    }

    async fn renew(&mut self) -> Result<Attempt, BackendError> {
        let Some(Held { lease, term }) = self.held else { return self.take().await };
        // A fresh keep-alive stream per renewal: its one answer is this renewal's. On a stream
        // kept open, the answer to a renewal the elector's timeout had dropped would be read by
        // the next renewal as its own, and count a refresh that may never have happened.
        match self.client.lease_keep_alive(lease).await {
            Ok(_stream) => {}
            Err(error) if lease_not_found(&error) => {
                self.held = None;
                return Ok(Attempt::Follower { holder: None });
            }
            Err(error) => return Err(failed(error)),
        }
        let ours = self.holder().await?.is_some_and(|(name, bound)| name == self.name && bound == lease);
        if ours {
            return Ok(Attempt::Leader { term });
        }
        self.held = None;
        Ok(Attempt::Follower { holder: None })
    }

    /// The leader key's holder, lease and mod revision, and the term key's term and mod revision,
    /// read at one revision.
    async fn read_election(&mut self) -> Result<Election, BackendError> {
        let prefix = format!("{}/", self.leader_key.rsplit_once('/').map_or("", |(base, _)| base));
        let options = etcd_client::GetOptions::new().with_prefix();
        let response = self.client.get(prefix, Some(options)).await.map_err(failed)?;
        let mut election = Election::default();
        for kv in response.kvs() {
            let key = kv.key_str().map_err(failed)?;
            if key == self.leader_key {
                let holder = kv.value_str().unwrap_or_default().to_owned();
                election.leader = Some((holder, kv.lease(), kv.mod_revision()));
            } else if key == self.term_key {
                let text = kv.value_str().map_err(failed)?;
                let term = text
                    .trim()
                    .parse()
                    .map_err(|_| unavailable(format!("{}: not a term: {text:?}", self.term_key)))?;
                election.term = (term, kv.mod_revision());
            }
        }
        Ok(election)
    }

    /// When the leader key exists: adopts it if it is this contender's unsettled takeover (bound
    /// to the lease granted for it, written in the same transaction as the term key), otherwise
    /// follows and lets the unsettled lease go. `None` when nobody holds the key.
    async fn settle(&mut self, election: Election) -> Result<Option<Attempt>, BackendError> {
        let Some((holder, lease, leader_revision)) = election.leader else { return Ok(None) };
        let (term, term_revision) = election.term;
        if self.unsettled == Some(lease) && holder == self.name && leader_revision == term_revision {
            if term < self.highest_seen {
                return Err(BackendError::TermWentBack {
                    backend: "etcd",
                    seen: self.highest_seen,
                    found: term,
                });
            }
            return self.hold(lease, term).await.map(Some);
        }
        if let Some(stale) = self.unsettled.take() {
            // Someone else holds the key, so no takeover with that lease can commit any more
            // (the term guard fails): let the lease go rather than wait for it to expire.
            let _ = self.client.lease_revoke(stale).await;
        }
        Ok(Some(Attempt::Follower { holder: Some(holder) }))
    }

    /// Refreshes `lease` with one keep-alive (to the full TTL, so the renew deadline, counted
    /// from before this attempt, ends before the lease can) and leads.
    async fn hold(&mut self, lease: i64, term: u64) -> Result<Attempt, BackendError> {
        match self.client.lease_keep_alive(lease).await {
            Ok(_stream) => {
                self.unsettled = None;
                let epoch = LeaderEpoch::from_stored(term);
                self.highest_seen = self.highest_seen.max(term);
                self.held = Some(Held { lease, term: epoch });
                Ok(Attempt::Leader { term: epoch })
            }
            Err(error) if lease_not_found(&error) => {
                // The lease expired before it was kept: its key is gone with it.
                self.unsettled = None;
                Ok(Attempt::Follower { holder: None })
            }
            Err(error) => Err(failed(error)),
        }
    }

    async fn take(&mut self) -> Result<Attempt, BackendError> {
        let election = self.read_election().await?;
        let (term, revision) = election.term;
        // A term below one seen before (in this process, or recorded in the state directory) is
        // refused whoever holds the key: the prefix was wiped or restored.
        if term < self.highest_seen {
            return Err(BackendError::TermWentBack { backend: "etcd", seen: self.highest_seen, found: term });
        }
        self.highest_seen = term;
        if let Some(attempt) = self.settle(election).await? {
            return Ok(attempt);
        }
        let term_guard = if revision == 0 {
            Compare::version(self.term_key.as_str(), CompareOp::Equal, 0)
        } else {
            Compare::mod_revision(self.term_key.as_str(), CompareOp::Equal, revision)
        };
        let next = crate::backend::next_term("etcd", term)?;
        let mut reusing = self.unsettled.is_some();
        loop {
            // An unsettled lease is reused: if that earlier takeover is still in flight, exactly
            // one of the two transactions wins, and either way the key is bound to this lease.
            let lease = match self.unsettled {
                Some(lease) => lease,
                None => {
                    let lease = self.client.lease_grant(self.lease_ttl_s, None).await.map_err(failed)?.id();
                    // From here until the outcome is known, a lost answer may hide a committed
                    // takeover.
                    self.unsettled = Some(lease);
                    lease
                }
            };
            let txn = Txn::new()
                .when([Compare::version(self.leader_key.as_str(), CompareOp::Equal, 0), term_guard.clone()])
                .and_then([
                    TxnOp::put(
                        self.leader_key.as_str(),
                        self.name.as_str(),
                        Some(PutOptions::new().with_lease(lease)),
                    ),
                    TxnOp::put(self.term_key.as_str(), next.to_string(), None),
                ]);
            return match self.client.txn(txn).await {
                Ok(response) if response.succeeded() => self.hold(lease, next).await,
                // Lost the race, or to an earlier attempt of this contender still in flight.
                Ok(_) => {
                    let election = self.read_election().await?;
                    Ok(self.settle(election).await?.unwrap_or(Attempt::Follower { holder: None }))
                }
                Err(error) if lease_not_found(&error) => {
                    // The lease is gone, so no transaction with it can commit any more.
                    self.unsettled = None;
                    if std::mem::take(&mut reusing) {
                        // The reused lease had expired: try once more with a fresh one.
                        continue;
                    }
                    Err(failed(error))
                }
                Err(error) => Err(failed(error)),
            };
        }
    }
}

/// Whether etcd said the lease does not exist (expired or revoked).
fn lease_not_found(error: &etcd_client::Error) -> bool {
    error.to_string().contains("lease not found")
}

impl LeaseBackend for EtcdBackend {
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, BackendError> {
        if self.held.is_some() { self.renew().await } else { self.take().await }
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        if let Some(unsettled) = self.unsettled.take() {
            // A takeover this contender may have won without learning it ends with its lease.
            let _ = self.client.lease_revoke(unsettled).await;
        }
        let Some(lease) = self.held.as_ref().map(|held| held.lease) else { return Ok(()) };
        // Delete the leader key only if it is still ours, then drop the lease. Until the revoke
        // is answered this contender still holds it: a failed release can be retried.
        let txn = Txn::new()
            .when([Compare::lease(self.leader_key.as_str(), CompareOp::Equal, lease)])
            .and_then([TxnOp::delete(self.leader_key.as_str(), None)]);
        let _ = self.client.txn(txn).await;
        match self.client.lease_revoke(lease).await {
            Err(error) if !lease_not_found(&error) => return Err(failed(error)),
            // Revoked, or expired already.
            _ => self.held = None,
        }
        Ok(())
    }

    fn name(&self) -> &'static str {
        "etcd"
    }

    fn highest_seen(&self) -> u64 {
        self.highest_seen
    }

    fn remember_at_least(&mut self, term: u64) {
        self.highest_seen = self.highest_seen.max(term);
    }
}
