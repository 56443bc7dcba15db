//! The `etcd` backend: the leader key is bound to an etcd lease; the term is a counter key
//! incremented in the same transaction that takes leadership, guarded by revisions; renewal
//! keeps the lease alive and keeps the term.
//!
//! Keys, under `<prefix>/elections/<election>/`: `leader` (value: the holder's name, bound to its
//! lease) and `term` (value: the decimal term). Takeover is one transaction:
//! `if leader.version == 0 && term.mod_revision == <read> then put(leader, lease) put(term, n+1)`,
//! so two contenders can never both hold a term, and every takeover adds exactly one.

use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn, TxnOp,
};
use tenure_core::model::LeaderEpoch;

use crate::backend::{Attempt, BackendError, LeaseBackend};

/// How long connecting and each request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// One contender in an etcd election.
pub struct EtcdBackend {
    client: Client,
    leader_key: String,
    term_key: String,
    name: String,
    lease_ttl_s: i64,
    held: Option<Held>,
    highest_seen: u64,
}

struct Held {
    lease: i64,
    keeper: LeaseKeeper,
    responses: LeaseKeepAliveStream,
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
        let options =
            ConnectOptions::new().with_connect_timeout(REQUEST_TIMEOUT).with_timeout(REQUEST_TIMEOUT);
        let client = Client::connect(endpoints, Some(options)).await.map_err(unavailable)?;
        let base = format!("{}/elections/{election}", prefix.trim_end_matches('/'));
        Ok(Self {
            client,
            leader_key: format!("{base}/leader"),
            term_key: format!("{base}/term"),
            name: name.to_owned(),
            lease_ttl_s: i64::try_from(lease_duration.as_secs().max(1)).unwrap_or(i64::MAX),
            held: None,
            highest_seen: 0,
        })
    }

    /// The current term stored in etcd (0 if never taken).
    pub async fn stored_term(&mut self) -> Result<u64, BackendError> {
        Ok(self.read_term().await?.0)
    }

    async fn read_term(&mut self) -> Result<(u64, i64), BackendError> {
        let response = self.client.get(self.term_key.as_str(), None).await.map_err(unavailable)?;
        match response.kvs().first() {
            None => Ok((0, 0)),
            Some(kv) => {
                let text = kv.value_str().map_err(unavailable)?;
                let term = text
                    .trim()
                    .parse()
                    .map_err(|_| unavailable(format!("{}: not a term: {text:?}", self.term_key)))?;
                Ok((term, kv.mod_revision()))
            }
        }
    }

    async fn holder(&mut self) -> Result<Option<(String, i64)>, BackendError> {
        let response = self.client.get(self.leader_key.as_str(), None).await.map_err(unavailable)?;
        Ok(response.kvs().first().map(|kv| (kv.value_str().unwrap_or_default().to_owned(), kv.lease())))
    }

    async fn renew(&mut self) -> Result<Attempt, BackendError> {
        let held = self.held.as_mut().expect("renew is called while holding");
        held.keeper.keep_alive().await.map_err(unavailable)?;
        let alive = match held.responses.message().await.map_err(unavailable)? {
            Some(response) => response.ttl() > 0,
            None => false,
        };
        let lease = held.lease;
        let term = held.term;
        let ours = self.holder().await?.is_some_and(|(name, bound)| name == self.name && bound == lease);
        if alive && ours {
            return Ok(Attempt::Leader { term });
        }
        self.held = None;
        Ok(Attempt::Follower { holder: None })
    }

    async fn take(&mut self) -> Result<Attempt, BackendError> {
        if let Some((holder, _)) = self.holder().await? {
            return Ok(Attempt::Follower { holder: Some(holder) });
        }
        let (term, revision) = self.read_term().await?;
        if term < self.highest_seen {
            return Err(BackendError::TermWentBack { backend: "etcd", seen: self.highest_seen, found: term });
        }
        let lease = self.client.lease_grant(self.lease_ttl_s, None).await.map_err(unavailable)?.id();
        let term_guard = if revision == 0 {
            Compare::version(self.term_key.as_str(), CompareOp::Equal, 0)
        } else {
            Compare::mod_revision(self.term_key.as_str(), CompareOp::Equal, revision)
        };
        let next = term + 1;
        let txn = Txn::new()
            .when([Compare::version(self.leader_key.as_str(), CompareOp::Equal, 0), term_guard])
            .and_then([
                TxnOp::put(
                    self.leader_key.as_str(),
                    self.name.as_str(),
                    Some(PutOptions::new().with_lease(lease)),
                ),
                TxnOp::put(self.term_key.as_str(), next.to_string(), None),
            ]);
        let won = self.client.txn(txn).await.map_err(unavailable)?.succeeded();
        if !won {
            let _ = self.client.lease_revoke(lease).await;
            return Ok(Attempt::Follower { holder: self.holder().await?.map(|(h, _)| h) });
        }
        let (keeper, responses) = self.client.lease_keep_alive(lease).await.map_err(unavailable)?;
        let epoch = LeaderEpoch::from_stored(next);
        self.highest_seen = next;
        self.held = Some(Held { lease, keeper, responses, term: epoch });
        Ok(Attempt::Leader { term: epoch })
    }
}

impl LeaseBackend for EtcdBackend {
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, BackendError> {
        if self.held.is_some() { self.renew().await } else { self.take().await }
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        let Some(held) = self.held.take() else { return Ok(()) };
        // Delete the leader key only if it is still ours, then drop the lease.
        let txn = Txn::new()
            .when([Compare::lease(self.leader_key.as_str(), CompareOp::Equal, held.lease)])
            .and_then([TxnOp::delete(self.leader_key.as_str(), None)]);
        let _ = self.client.txn(txn).await;
        self.client.lease_revoke(held.lease).await.map_err(unavailable)?;
        Ok(())
    }

    fn name(&self) -> &'static str {
        "etcd"
    }
}
