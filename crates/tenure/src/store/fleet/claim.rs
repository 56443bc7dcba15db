//! One node, one agent: each node an agent runs is claimed in etcd (`<prefix>/nodes/<name>`),
//! under a lease of this process, by this agent's local store. A second agent started for a node
//! another agent runs (a config copied with `node.name` left as it was, on another `store.path`;
//! or a copy of the store directory itself) is refused at start: both would send that node's
//! heartbeats, so it would never fail over while either ran, and both would act for it.
//!
//! A claim names the store (its identity's cluster id), its lock file (`device:inode`), this boot
//! of the host's kernel and the claiming process's own random id (with the directory, host and
//! pid, for the refusal's line). The same store starting again on the same boot (a restart,
//! after a kill too) takes its claim over at once: one process owns a store (its `LOCK`, a
//! `flock` the kernel drops when the process dies, on the one file whatever path or mount
//! namespace it is seen through), and this process holds it, so the claimant is gone. Any other
//! claim — another store, or a copy of this one (another lock file), or one of another boot —
//! stands until its lease lapses, [`CLAIM_TTL`] after its agent died, or at once when it stopped
//! cleanly (the lease is revoked).
//!
//! A running agent looks at its claims at every renewal: one gone (deleted by hand, or its lease
//! lapsed while etcd was unreachable) is made again; one that names another agent (it started
//! while this one's claim was gone) refuses this store's log — the agent stops acting and says
//! why.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::EtcdError;
use super::io::Keys;
use super::replica::Shared;

/// How long a claim outlives its agent (the lease's time to live).
pub(crate) const CLAIM_TTL: Duration = Duration::from_secs(10);

/// What a claim holds: which agent runs the node, and where (the same-store takeover's proof, and
/// the refusal's line).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Claim {
    pub(crate) v: u64,
    /// The claiming agent's local store (its identity's cluster id).
    pub(crate) store: String,
    /// The local store's directory, canonical, for the refusal's line.
    #[serde(default)]
    pub(crate) path: String,
    pub(crate) host: String,
    /// The host's boot id (`/proc/sys/kernel/random/boot_id`).
    #[serde(default)]
    pub(crate) boot: String,
    /// The store's lock file, `device:inode` ([`crate::store::lock::lock_file_id`]).
    #[serde(default)]
    pub(crate) lock: String,
    /// The claiming process's own random id (its writer instance): what makes a claim this
    /// process's, whatever else two agents share (containers on one host: one boot id, one host
    /// name, the same paths, pid 1 each).
    #[serde(default)]
    pub(crate) instance: String,
    pub(crate) pid: u32,
}

/// The claim format's version.
const CLAIM_VERSION: u64 = 3;

impl Claim {
    /// This process's claim (writer instance `instance`), for its local store `store` in
    /// directory `dir` (whose lock this process holds).
    pub(crate) fn mine(store: &str, dir: &Path, instance: &str) -> Self {
        let path = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
        Self {
            v: CLAIM_VERSION,
            store: store.to_owned(),
            path: path.display().to_string(),
            host: crate::store::lock::host_name(),
            boot: crate::store::lock::boot_id().unwrap_or_default(),
            lock: crate::store::lock::lock_file_id(dir).unwrap_or_default(),
            instance: instance.to_owned(),
            pid: std::process::id(),
        }
    }

    /// Whether `theirs` is this process's own claim.
    fn is_mine(&self, theirs: &Self) -> bool {
        !self.instance.is_empty() && theirs.instance == self.instance && theirs.store == self.store
    }

    /// Whether `theirs` was made by an earlier process of this very store on this boot: the same
    /// lock file (one inode, whatever path or mount namespace it is seen through), which this
    /// process holds now, so that process is gone. A copy of the store (another lock file) is not.
    fn is_earlier_self(&self, theirs: &Self) -> bool {
        theirs.store == self.store
            && !self.lock.is_empty()
            && theirs.lock == self.lock
            && !self.boot.is_empty()
            && theirs.boot == self.boot
            && theirs.instance != self.instance
    }

    /// Who holds a claim, for a refusal's line.
    fn describe(&self, me: &Self) -> String {
        let copy = if self.store == me.store { "a copy of this agent's store: " } else { "" };
        let path = if self.path.is_empty() { "a store" } else { self.path.as_str() };
        format!("{copy}{path} on host {}, pid {}, store id {}", self.host, self.pid, self.store)
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

/// What a node's claim key holds, as `me` reads it; a claim of anyone else is
/// [`EtcdError::NodeTaken`] ([`read_claim`]).
enum Found {
    /// No claim.
    Absent,
    /// `me`'s own, under `lease`.
    Mine { lease: i64, mod_revision: i64 },
    /// An earlier process's of this very store, which is gone ([`Claim::is_earlier_self`]).
    EarlierSelf { mod_revision: i64 },
}

/// Reads node `node`'s claim (at `key`) as `me` sees it: the one reading of a claim, at start and
/// at every look of the keeper.
async fn read_claim(client: &mut Client, key: String, node: &str, me: &Claim) -> Result<Found, EtcdError> {
    let got = client.get(key.as_bytes(), None).await.map_err(EtcdError::request("node claim read"))?;
    let Some(kv) = got.kvs().first() else { return Ok(Found::Absent) };
    match serde_json::from_slice::<Claim>(kv.value()) {
        Ok(theirs) if me.is_mine(&theirs) => {
            Ok(Found::Mine { lease: kv.lease(), mod_revision: kv.mod_revision() })
        }
        Ok(theirs) if me.is_earlier_self(&theirs) => {
            Ok(Found::EarlierSelf { mod_revision: kv.mod_revision() })
        }
        theirs => Err(EtcdError::NodeTaken {
            node: node.to_owned(),
            key,
            by: theirs.map_or_else(|_| String::from_utf8_lossy(kv.value()).into_owned(), |c| c.describe(me)),
        }),
    }
}

/// Puts every claim under `lease` in one transaction, each only where the key is as read: absent,
/// `me`'s, or an earlier self's (compared by its mod revision).
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
            let compare = match read_claim(client, key.clone(), node, me).await? {
                Found::Absent => Compare::create_revision(key.as_bytes(), CompareOp::Equal, 0),
                Found::Mine { mod_revision, .. } | Found::EarlierSelf { mod_revision } => {
                    Compare::mod_revision(key.as_bytes(), CompareOp::Equal, mod_revision)
                }
            };
            when.push(compare);
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

/// This agent's claims as they stand: their keys and the lease they are under now (replaced when
/// they are made again). Every append and head confirmation of the agent compares each key's
/// lease with it ([`Held::compares`]), so etcd itself refuses the requests of an agent whose
/// claim lapsed or was taken: a claim is a fence, not a check made now and then.
#[derive(Debug)]
pub(crate) struct Held {
    /// `(node, key)` of each claim.
    pub(crate) keys: Vec<(String, String)>,
    lease: AtomicI64,
}

impl Held {
    pub(crate) fn new(keys: &Keys, nodes: &[String], lease: i64) -> Self {
        Self { keys: nodes.iter().map(|n| (n.clone(), key(keys, n))).collect(), lease: AtomicI64::new(lease) }
    }

    /// The lease the claims are under now.
    pub(crate) fn lease(&self) -> i64 {
        self.lease.load(Ordering::Acquire)
    }

    /// A request's compares: each claim is under `lease` (read once per request with
    /// [`Held::lease`], and passed to [`Held::lost`] with the answer).
    pub(crate) fn compares(&self, lease: i64) -> Vec<Compare> {
        self.keys.iter().map(|(_, key)| Compare::lease(key.as_bytes(), CompareOp::Equal, lease)).collect()
    }

    /// The first claim of `leases` (each claim key's lease as read, 0 when absent, in
    /// [`Held::keys`]' order) that is not under `lease`, as [`EtcdError::ClaimLost`].
    pub(crate) fn lost(&self, lease: i64, leases: &[i64]) -> Option<EtcdError> {
        self.keys
            .iter()
            .zip(leases)
            .find(|(_, got)| **got != lease)
            .map(|((node, key), _)| EtcdError::ClaimLost { node: node.clone(), key: key.clone() })
    }
}

/// How soon a failed renewal is tried again: well within the lease, so that one slow answer (a
/// hung member waited out) does not let the claims lapse.
const RETRY: Duration = Duration::from_millis(500);

/// Keeps the claims' lease alive every third of [`CLAIM_TTL`] (a failed renewal tried again
/// after [`RETRY`]); a lease that expired (etcd unreachable that long) is replaced and the claims
/// made again, and a node found claimed by another agent then — or at a renewal — refuses the
/// log for good.
pub(crate) async fn keep(
    mut client: Client,
    keys: Keys,
    nodes: Vec<String>,
    me: Claim,
    held: Arc<Held>,
    shared: Arc<Shared>,
) {
    let mut wait = CLAIM_TTL / 3;
    loop {
        tokio::time::sleep(wait).await;
        wait = RETRY;
        let lease = held.lease();
        let kept = match tokio::time::timeout(CLAIM_TTL / 3, client.lease_keep_alive(lease)).await {
            Ok(Ok(_)) => true,
            // The client's answer to a lease etcd no longer has (a time to live of 0).
            Ok(Err(etcd_client::Error::LeaseKeepAliveError(_))) => false,
            Ok(Err(e)) => {
                warn!(error = %e, "cannot renew this agent's node claims; trying again");
                continue;
            }
            Err(_) => {
                warn!("etcd did not answer the renewal of this agent's node claims; trying again");
                continue;
            }
        };
        let taken = if kept {
            match tokio::time::timeout(CLAIM_TTL / 3, check(&mut client, &keys, &nodes, &me, lease)).await {
                Ok(Ok(())) => {
                    wait = CLAIM_TTL / 3;
                    None
                }
                Ok(Err(e @ EtcdError::NodeTaken { .. })) => Some(e),
                Ok(Err(e)) => {
                    warn!(error = %e, "cannot look at this agent's node claims; trying again");
                    None
                }
                Err(_) => {
                    warn!("etcd did not answer a look at this agent's node claims; trying again");
                    None
                }
            }
        } else {
            let claimed = tokio::time::timeout(CLAIM_TTL, claim(&mut client, &keys, &nodes, &me)).await;
            match claimed.unwrap_or(Err(EtcdError::Timeout { what: "node claim", waited: CLAIM_TTL })) {
                Ok(renewed) => {
                    info!(
                        "this agent's node claims lost their lease (etcd unreachable longer than it, or revoked) and are made again"
                    );
                    held.lease.store(renewed, Ordering::Release);
                    wait = CLAIM_TTL / 3;
                    None
                }
                Err(e @ EtcdError::NodeTaken { .. }) => Some(e),
                Err(e) => {
                    warn!(error = %e, "cannot make this agent's node claims again; trying again");
                    None
                }
            }
        };
        if let Some(e) = taken {
            shared.break_replica(format!("while this agent ran, {e}"));
            return;
        }
    }
}

/// Looks at this agent's claims under `lease`: each must be there, `me`'s, under that lease. One
/// gone (deleted by hand) or not under it is made again; one another agent holds is
/// [`EtcdError::NodeTaken`].
async fn check(
    client: &mut Client,
    keys: &Keys,
    nodes: &[String],
    me: &Claim,
    lease: i64,
) -> Result<(), EtcdError> {
    let mut remake = false;
    for node in nodes {
        remake |= match read_claim(client, key(keys, node), node, me).await? {
            Found::Mine { lease: under, .. } => under != lease,
            Found::Absent | Found::EarlierSelf { .. } => true,
        };
    }
    if remake {
        put_claims(client, keys, nodes, me, lease).await?;
        warn!("a claim of this agent's nodes was gone from etcd, or not under its lease, and is made again");
    }
    Ok(())
}
