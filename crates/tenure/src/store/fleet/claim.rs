//! One node, one agent: each node an agent runs is claimed in etcd (`<prefix>/nodes/<name>`),
//! under a lease of this process, by this agent's local store. A second agent started for a node
//! another store runs (a config copied with `node.name` left as it was, on another `store.path`)
//! is refused at start: both would send that node's heartbeats, so it would never fail over while
//! either ran, and both would act for it. The same store starting again (a restart, after a kill
//! too: one process owns a store, its `LOCK` says so) takes its claim over at once; another
//! store's claim lapses with its lease, [`CLAIM_TTL`] after its agent died, or at once when it
//! stopped cleanly (the lease is revoked).
//!
//! A claim lost while the agent runs (etcd unreachable longer than the lease) is made again when
//! etcd answers; found taken by another store then, the store refuses its log (the agent stops
//! acting and says why).

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::EtcdError;
use super::io::Keys;
use super::replica::Shared;

/// How long a claim outlives its agent (the lease's time to live).
pub(crate) const CLAIM_TTL: Duration = Duration::from_secs(10);

/// What a claim holds: which store runs the node, and where, for the refusal's line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Claim {
    pub(crate) v: u64,
    /// The claiming agent's local store (its identity's cluster id).
    pub(crate) store: String,
    pub(crate) host: String,
    pub(crate) pid: u32,
}

impl Claim {
    /// This process's claim, for its local store `store`.
    pub(crate) fn mine(store: &str) -> Self {
        Self { v: 1, store: store.to_owned(), host: crate::store::lock::host_name(), pid: std::process::id() }
    }
}

/// The key of node `node`'s claim.
fn key(keys: &Keys, node: &str) -> String {
    format!("{}{node}", keys.nodes)
}

/// Claims `nodes` for `me` under a new lease, which it returns. A node claimed by another store
/// (its lease alive) refuses them all: [`EtcdError::NodeTaken`], nothing claimed.
pub(crate) async fn claim(
    client: &mut Client,
    keys: &Keys,
    nodes: &[String],
    me: &Claim,
) -> Result<i64, EtcdError> {
    let ttl = i64::try_from(CLAIM_TTL.as_secs()).unwrap_or(i64::MAX);
    let lease = client.lease_grant(ttl, None).await.map_err(EtcdError::request("node claim lease"))?.id();
    match put_claims(client, keys, nodes, me, lease).await {
        Ok(()) => Ok(lease),
        Err(e) => {
            let _ = client.lease_revoke(lease).await;
            Err(e)
        }
    }
}

/// Puts every claim under `lease` in one transaction, each only where the key is absent or holds
/// `me`'s store (compared by its value as read).
async fn put_claims(
    client: &mut Client,
    keys: &Keys,
    nodes: &[String],
    me: &Claim,
    lease: i64,
) -> Result<(), EtcdError> {
    let value = serde_json::to_vec(me).expect("a claim serializes");
    for _ in 0..3 {
        let mut when = Vec::new();
        for node in nodes {
            let key = key(keys, node);
            let got =
                client.get(key.as_bytes(), None).await.map_err(EtcdError::request("node claim read"))?;
            match got.kvs().first() {
                None => when.push(Compare::create_revision(key.as_bytes(), CompareOp::Equal, 0)),
                Some(kv) => {
                    let theirs: Option<Claim> = serde_json::from_slice(kv.value()).ok();
                    match theirs {
                        Some(theirs) if theirs.store == me.store => {
                            when.push(Compare::mod_revision(
                                key.as_bytes(),
                                CompareOp::Equal,
                                kv.mod_revision(),
                            ));
                        }
                        theirs => {
                            return Err(EtcdError::NodeTaken {
                                node: node.clone(),
                                key,
                                by: theirs.map_or_else(
                                    || String::from_utf8_lossy(kv.value()).into_owned(),
                                    |c| format!("store {}, host {}, pid {}", c.store, c.host, c.pid),
                                ),
                            });
                        }
                    }
                }
            }
        }
        let puts: Vec<TxnOp> = nodes
            .iter()
            .map(|node| TxnOp::put(key(keys, node), value.clone(), Some(PutOptions::new().with_lease(lease))))
            .collect();
        let txn = Txn::new().when(when).and_then(puts);
        if client.txn(txn).await.map_err(EtcdError::request("node claim"))?.succeeded() {
            return Ok(());
        }
        // A claim changed between the read and the transaction: read again.
    }
    Err(EtcdError::Damaged(format!("the node claims under {} keep changing", keys.nodes)))
}

/// Keeps `lease` alive every third of [`CLAIM_TTL`]; a lease that expired (etcd unreachable that
/// long) is replaced and the claims made again, and a node found claimed by another store then
/// refuses the log for good.
pub(crate) async fn keep(
    mut client: Client,
    keys: Keys,
    nodes: Vec<String>,
    me: Claim,
    mut lease: i64,
    shared: Arc<Shared>,
) {
    loop {
        tokio::time::sleep(CLAIM_TTL / 3).await;
        let kept = match tokio::time::timeout(CLAIM_TTL / 3, client.lease_keep_alive(lease)).await {
            Ok(Ok(_)) => true,
            Ok(Err(e)) if e.to_string().contains("lease not found") => false,
            Ok(Err(e)) => {
                warn!(error = %e, "cannot renew this agent's node claims; trying again");
                continue;
            }
            Err(_) => {
                warn!("etcd did not answer the renewal of this agent's node claims; trying again");
                continue;
            }
        };
        if kept {
            continue;
        }
        let claimed = tokio::time::timeout(CLAIM_TTL, claim(&mut client, &keys, &nodes, &me)).await;
        match claimed.unwrap_or(Err(EtcdError::Timeout { waited: CLAIM_TTL })) {
            Ok(renewed) => {
                info!("this agent's node claims lapsed (etcd unreachable) and are made again");
                lease = renewed;
            }
            Err(e @ EtcdError::NodeTaken { .. }) => {
                shared.break_replica(format!("{e}"));
                return;
            }
            Err(e) => warn!(error = %e, "cannot make this agent's node claims again; trying again"),
        }
    }
}
