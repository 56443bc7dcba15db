//! The etcd client: appends, head reads, the initial load, and the watch that fills the replica.
//! Every request is a future of the runtime the store was opened on (the agent's), awaited by
//! the store's async methods with a deadline each; the watch and snapshot writes are tasks of
//! that runtime. Nothing here blocks a thread: the agent's loop runs on the thread that blocks on
//! the runtime (`tenure agent`), its heartbeats on a thread of their own, and both await these
//! futures while the runtime's workers drive them (docs/decisions.md, "Issue 22: async store
//! seams").

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, EventType, Txn, TxnOp, WatchOptions};
use tenure_lead::etcd_connection::EtcdConnection;
use tokio::task::AbortHandle;
use tracing::{debug, warn};

use super::{Anchor, EtcdError, Shared};

mod append;
mod load;
mod snapshot;
use append::append;
use load::load;
use snapshot::{decode_manifest, read_snapshot, write_snapshot};

/// Keys and values the client reads and writes, by role.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    /// `<prefix>/log/`: one key per batch.
    pub(crate) log: String,
    /// `<prefix>/head`: rewritten by every append, so its mod revision is the last batch's.
    pub(crate) head: String,
    /// `<prefix>/fleet`: the fleet's nodes, as the first agent wrote them.
    pub(crate) fleet: String,
    /// `<prefix>/snapshot`: the newest snapshot's manifest.
    pub(crate) snapshot: String,
    /// `<prefix>/snapshots/`: snapshot chunks, `<revision>/<chunk>`.
    pub(crate) snapshots: String,
    /// This process's writer key (`<prefix>/writers/<instance>`), created empty at start.
    pub(crate) writer: String,
    /// `<prefix>/nodes/`: which agent's store runs each node (`claim.rs`).
    pub(crate) nodes: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str, instance: &str) -> Self {
        let prefix = prefix.trim_end_matches('/');
        Self {
            log: format!("{prefix}/log/"),
            head: format!("{prefix}/head"),
            fleet: format!("{prefix}/fleet"),
            snapshot: format!("{prefix}/snapshot"),
            snapshots: format!("{prefix}/snapshots/"),
            writer: format!("{prefix}/writers/{instance}"),
            nodes: format!("{prefix}/nodes/"),
        }
    }

    /// The key prefix of the chunks of the snapshot at `revision` (zero-padded: keys sort as
    /// numbers).
    fn chunks_of(&self, revision: i64) -> String {
        format!("{}{revision:020}/", self.snapshots)
    }
}

/// A linearizable read of the log's head, with what tells whether the log went back below the
/// agent's [`Anchor`], all at one revision (one read-only transaction).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HeadRead {
    /// The etcd cluster answering.
    pub(crate) cluster_id: u64,
    /// The cluster's revision at the read.
    pub(crate) revision: i64,
    /// The revision of the last batch appended (0: none yet).
    pub(crate) head_revision: i64,
    /// The revision the head key was created at (0: no head).
    pub(crate) head_created: i64,
    /// The mod revision of the batch key asked about (the newest this agent applied), when it
    /// is there.
    pub(crate) batch_revision: Option<i64>,
    /// The revision the newest snapshot covers, when there is one.
    pub(crate) snapshot_revision: Option<i64>,
}

/// What an append came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Appended {
    /// The batch is in the log at `revision` (committed now, or by an earlier try); the head key
    /// was created at `head_created`.
    Committed { revision: i64, head_created: i64 },
    /// Not appended: etcd no longer holds what the agent applied ([`super::anchor::check_anchor`]'s
    /// reason).
    WentBack(String),
}

/// Sees the first head read; a reason refuses the log (the binding does not match).
pub(crate) type Refuse = Box<dyn FnOnce(&HeadRead) -> Option<String> + Send>;

/// Whether a batch is appended again, unchanged, when its append failed: what decides whether
/// its transaction compares and puts this process's writer key (see [`append()`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retry {
    /// The loop's batches: a failed one is kept and appended again as it was until it lands.
    /// The writer key names each one appended, so a retry whose first try committed finds it
    /// even after a snapshot deleted its key.
    SameBatch,
    /// Heartbeats, an operator's request, the pool files' events: a failed one is never sent
    /// again as it was (the heartbeat thread sends fresh ones at the next interval; the caller
    /// is told). The writer key is neither compared nor put: it keeps naming the loop's last
    /// batch, whatever of these lands before that batch's retry (also one that lands late,
    /// after its own answer was lost).
    Never,
}

/// The largest answer the client decodes (tonic's default is 4 MiB): a page of the log's
/// batches, a watch answer (fragmented by etcd at its request limit, 1.5 MiB by default).
const DECODE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// How the client connects.
#[derive(Clone, Debug)]
pub(crate) struct ConnectSettings {
    pub(crate) endpoints: Vec<String>,
    /// Per request (connect, append, read).
    pub(crate) request_timeout: Duration,
    /// `user`, `password`, when etcd has authentication on.
    pub(crate) user: Option<(String, super::Secret)>,
    /// TLS material, with https endpoints.
    pub(crate) tls: Option<super::EtcdTlsPem>,
    /// This agent's fleet ([`super::fleet_text`]), which must be the one in etcd.
    pub(crate) fleet: String,
}

/// The etcd client of one store, and the watch task that fills its replica (aborted when the
/// last handle goes).
pub(crate) struct Io {
    client: Client,
    keys: Keys,
    request_timeout: Duration,
    /// The runtime the store was opened on: the watch and snapshot writes are its tasks.
    runtime: tokio::runtime::Handle,
    watch: Option<AbortHandle>,
    /// The lease of this agent's node claims and the task keeping it (`claim.rs`).
    claims: Option<(Arc<super::claim::Held>, AbortHandle)>,
}

impl std::fmt::Debug for Io {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Io")
            .field("keys", &self.keys)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl Drop for Io {
    fn drop(&mut self) {
        if let Some(watch) = &self.watch {
            watch.abort();
        }
        if let Some((_, keeper)) = &self.claims {
            keeper.abort();
        }
    }
}

impl Io {
    /// Connects, loads the log from `start` (the snapshot revision: 0 for the whole log) into the
    /// replica, then starts the watch, a task of the current runtime, which must be a
    /// multi-thread one: its workers drive the store's requests while a caller's thread blocks on
    /// one (the heartbeat thread), and the store stays bound to it (its client's connection is
    /// that runtime's). `refuse` sees the first head read: a reason makes the store refused
    /// before it writes or reads anything more (no fleet check, no load, no watch).
    pub(crate) async fn start(
        settings: ConnectSettings,
        keys: Keys,
        shared: Arc<Shared>,
        refuse: Refuse,
        claim: (Vec<String>, super::claim::Claim),
    ) -> Result<(Self, HeadRead), EtcdError> {
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(runtime) if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => runtime,
            _ => return Err(EtcdError::Runtime),
        };
        let (nodes, me) = claim;
        let (client, head, lease) = connect_and_load(&settings, &keys, &shared, refuse, &nodes, &me).await?;
        let claims = lease.map(|lease| {
            let held = Arc::new(super::claim::Held::new(&keys, &nodes, lease));
            let keeper = super::claim::keep(
                client.clone(),
                keys.clone(),
                nodes,
                me,
                Arc::clone(&held),
                Arc::clone(&shared),
            );
            (held, runtime.spawn(keeper).abort_handle())
        });
        let watch =
            shared.lock().refused.is_none().then(|| {
                runtime.spawn(watch(client.clone(), keys.clone(), Arc::clone(&shared))).abort_handle()
            });
        Ok((Self { client, keys, request_timeout: settings.request_timeout, runtime, watch, claims }, head))
    }

    /// Awaits `request`, at most `wait` (a request still under way then is dropped: its outcome
    /// is unknown to the caller, as a lost answer's).
    async fn within<T>(
        what: &'static str,
        wait: Duration,
        request: impl std::future::Future<Output = Result<T, EtcdError>>,
    ) -> Result<T, EtcdError> {
        tokio::time::timeout(wait, request).await.map_err(|_| EtcdError::Timeout { what, waited: wait })?
    }

    /// Puts one batch (see [`append()`]), waiting at most the request timeout and a margin (the
    /// client's own timeout answers first).
    pub(crate) async fn append(
        &self,
        key: String,
        value: Vec<u8>,
        anchor: Anchor,
        retry: Retry,
    ) -> Result<Appended, EtcdError> {
        let mut client = self.client.clone();
        let held = self.claims.as_ref().map(|(held, _)| held.as_ref());
        Self::within(
            "append",
            self.request_timeout + Duration::from_millis(500),
            append(&mut client, &self.keys, &key, value, &anchor, retry, held),
        )
        .await
    }

    /// Starts writing `bytes` as the snapshot of the log up to `revision` (see
    /// [`write_snapshot`]) as a task, and returns at once: a slow write or compaction must not
    /// hold up the agent. The outcome is logged. Skipped when the newest snapshot is fewer than
    /// `every` events older: every agent offers one, the first to get there writes it.
    pub(crate) fn write_snapshot(&self, revision: i64, events: u64, every: u64, bytes: Arc<Vec<u8>>) {
        let (mut client, keys) = (self.client.clone(), self.keys.clone());
        self.runtime.spawn(async move {
            let started = tokio::time::Instant::now();
            match write_snapshot(&mut client, &keys, revision, events, every, &bytes).await {
                Ok(written) => tracing::info!(
                    revision,
                    events,
                    bytes = bytes.len(),
                    written,
                    took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    "log snapshot (the log below it deleted)"
                ),
                Err(e) => {
                    warn!(error = %e, revision, "cannot write the log's snapshot; the next one will try again")
                }
            }
        });
    }

    /// Deletes this process's writer key and lets its node claims go (a clean stop: another
    /// agent may run them at once), waiting at most the request timeout for each; the first
    /// failure is answered once both were tried. (A keeper stopped while it was making the claims
    /// again may leave a lease no one revokes: its claims lapse with it, [`CLAIM_TTL`] later.)
    ///
    /// [`CLAIM_TTL`]: super::claim::CLAIM_TTL
    pub(crate) async fn forget_writer(&self) -> Result<(), EtcdError> {
        let released = self.release_claims().await;
        let mut client = self.client.clone();
        let deleted = Self::within("writer key delete", self.request_timeout, async {
            client
                .delete(self.keys.writer.as_bytes(), None)
                .await
                .map(drop)
                .map_err(EtcdError::request("writer key delete"))
        })
        .await;
        released.and(deleted)
    }

    /// Lets this agent's node claims go (revokes their current lease), at most the request
    /// timeout; alone, without touching the log, at a refused store's clean stop.
    pub(crate) async fn release_claims(&self) -> Result<(), EtcdError> {
        let Some((held, keeper)) = &self.claims else { return Ok(()) };
        keeper.abort();
        let mut client = self.client.clone();
        let lease = held.lease();
        Self::within("node claim release", self.request_timeout, async move {
            client.lease_revoke(lease).await.map(drop).map_err(EtcdError::request("node claim release"))
        })
        .await
    }

    /// A linearizable read of the head key and of `batch_key` (see [`read_head`]), waited for at
    /// most `wait`.
    pub(crate) async fn head(
        &self,
        wait: Duration,
        batch_key: Option<Vec<u8>>,
    ) -> Result<HeadRead, EtcdError> {
        let mut client = self.client.clone();
        let held = self.claims.as_ref().map(|(held, _)| held.as_ref());
        Self::within("head read", wait, read_head(&mut client, &self.keys, batch_key.as_deref(), held)).await
    }
}

async fn connect(settings: &ConnectSettings) -> Result<Client, EtcdError> {
    // Appends and head reads have their own deadlines, so a cut link fails them (and the agent
    // closes) sooner than the keepalive notices it; the keepalive covers the watch.
    let connection = EtcdConnection {
        endpoints: settings.endpoints.clone(),
        request_timeout: settings.request_timeout,
        user: settings.user.clone(),
        tls: settings.tls.clone(),
    };
    connection.connect().await.map_err(EtcdError::request("connect"))
}

/// The first key-value of each `get` of a transaction's answer, in order (`None` for an absent
/// key and for an operation that is not a `get`).
pub(super) fn got(response: etcd_client::TxnResponse) -> Vec<Option<etcd_client::KeyValue>> {
    response
        .op_responses()
        .into_iter()
        .map(|op| match op {
            etcd_client::TxnOpResponse::Get(get) => get.kvs().first().cloned(),
            _ => None,
        })
        .collect()
}

/// Reads etcd's head and the batch of this agent's anchor (sampled before the read) and checks
/// them against it ([`Shared::verify`]: a log that went back refuses the replica for good).
/// `(head, false)`: refused. `Err`: etcd did not answer.
async fn read_verified_head(
    client: &mut Client,
    keys: &Keys,
    shared: &Shared,
) -> Result<(HeadRead, bool), EtcdError> {
    let anchor = shared.anchor();
    let head = read_head(client, keys, anchor.batch_key(), None).await?;
    let kept = shared.verify(&anchor, &head).is_ok();
    Ok((head, kept))
}

/// Reads, in one read-only transaction (linearizable, at one revision), the head key, the
/// snapshot manifest and `batch_key` (the newest batch the agent applied, when it knows it). With
/// `held`, only while this agent's node claims are under their lease: a head confirmation of an
/// agent whose claim lapsed or was taken is refused ([`EtcdError::ClaimLost`]).
async fn read_head(
    client: &mut Client,
    keys: &Keys,
    batch_key: Option<&[u8]>,
    held: Option<&super::claim::Held>,
) -> Result<HeadRead, EtcdError> {
    let mut gets = vec![TxnOp::get(keys.head.as_bytes(), None), TxnOp::get(keys.snapshot.as_bytes(), None)];
    gets.extend(batch_key.map(|key| TxnOp::get(key, None)));
    // etcd-client builds a transaction in order: compares, then success, then failure.
    let fence = held.map(|held| (held, held.lease()));
    let txn = match fence {
        Some((held, lease)) => {
            let claims: Vec<TxnOp> =
                held.keys.iter().map(|(_, key)| TxnOp::get(key.as_bytes(), None)).collect();
            Txn::new().when(held.compares(lease)).and_then(gets).or_else(claims)
        }
        None => Txn::new().and_then(gets),
    };
    let response = retry_quick_failures(|| {
        let mut client = client.clone();
        let txn = txn.clone();
        async move { client.txn(txn).await }
    })
    .await
    .map_err(EtcdError::request("head read"))?;
    if let Some((held, lease)) = fence.filter(|_| !response.succeeded()) {
        let leases: Vec<i64> =
            got(response).iter().map(|kv| kv.as_ref().map_or(0, etcd_client::KeyValue::lease)).collect();
        return Err(held.lost(lease, &leases).unwrap_or(EtcdError::Damaged(
            "a head read compared the node claims and failed, yet each is under this agent's lease".into(),
        )));
    }
    let header = response.header().ok_or(EtcdError::NoHeader { what: "head read" })?;
    let (cluster_id, revision) = (header.cluster_id(), header.revision());
    let kvs = got(response);
    let head = kvs.first().cloned().flatten();
    let snapshot_revision = match kvs.get(1).cloned().flatten() {
        Some(kv) => Some(decode_manifest(keys, kv.value())?.revision),
        None => None,
    };
    Ok(HeadRead {
        cluster_id,
        revision,
        head_revision: head.as_ref().map_or(0, etcd_client::KeyValue::mod_revision),
        head_created: head.as_ref().map_or(0, etcd_client::KeyValue::create_revision),
        batch_revision: kvs.get(2).cloned().flatten().map(|kv| kv.mod_revision()),
        snapshot_revision,
    })
}

/// Connects, reads the head, loads every batch up to the head read's revision into the replica
/// (in revision order, a page at a time, all at that one revision), then claims `nodes` for `me`
/// (the lease of the claims, none for no nodes) and writes this process's writer key. A refused
/// log claims nothing (and loads nothing when refused at the first read).
async fn connect_and_load(
    settings: &ConnectSettings,
    keys: &Keys,
    shared: &Shared,
    refuse: Refuse,
    nodes: &[String],
    me: &super::claim::Claim,
) -> Result<(Client, HeadRead, Option<i64>), EtcdError> {
    let mut client = connect(settings).await?;
    let anchor = shared.anchor();
    let first = read_head(&mut client, keys, anchor.batch_key(), None).await?;
    if let Some(reason) = refuse(&first) {
        shared.lock().refused = Some(reason);
        return Ok((client, first, None));
    }
    // A log that went back below what this agent applied is refused before anything is written.
    if shared.verify(&anchor, &first).is_err() {
        return Ok((client, first, None));
    }
    let genesis = read_genesis(&mut client, keys, &settings.fleet).await?;
    shared.lock().genesis = Some(genesis);
    let head = load(&mut client, keys, shared).await?;
    if shared.is_refused() {
        // The log went back between the reads: refused, it runs no node.
        return Ok((client, head, None));
    }
    // The nodes are claimed after the load (which writes nothing, however long it takes: the
    // keeper starts with the claims) and before anything of this agent is written, appended or
    // followed: a second agent for a running node stops here, leaving no writer key behind.
    let lease =
        if nodes.is_empty() { None } else { Some(super::claim::claim(&mut client, keys, nodes, me).await?) };
    if let Err(e) = client.put(keys.writer.as_bytes(), "", None).await {
        // Nothing runs the nodes: let their claims go at once rather than at the lease's end.
        if let Some(lease) = lease {
            let _ = client.lease_revoke(lease).await;
        }
        return Err(EtcdError::request("writer key")(e));
    }
    Ok((client, head, lease))
}

/// The fleet the log began with: this agent's fleet, written under the fleet key unless one is
/// there, or the one there. Every agent projects the log over it (its `node-registered` and
/// `node-retired` change the registry from there); an agent's own nodes and peers are checked
/// against the log's registry after the load, not against this text.
async fn read_genesis(client: &mut Client, keys: &Keys, fleet: &str) -> Result<String, EtcdError> {
    let txn = Txn::new()
        .when([Compare::create_revision(keys.fleet.as_bytes(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(keys.fleet.as_bytes(), fleet.as_bytes(), None)])
        .or_else([TxnOp::get(keys.fleet.as_bytes(), None)]);
    let response = client.txn(txn).await.map_err(EtcdError::request("fleet key"))?;
    if response.succeeded() {
        return Ok(fleet.to_owned());
    }
    let stored = response
        .op_responses()
        .into_iter()
        .find_map(|op| match op {
            etcd_client::TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        })
        .unwrap_or_default();
    String::from_utf8(stored).map_err(|_| EtcdError::BadGenesis(format!("{}: not UTF-8 text", keys.fleet)))
}

/// Retries of a request whose failure came back at once.
const QUICK_RETRIES: usize = 2;

/// Runs `request`; a failure that came back within [`QUICK_FAILURE`] (a refused connection to a
/// member that is down: the client balances over every endpoint) is tried again at once, at most
/// [`QUICK_RETRIES`] times, so that one dead member does not fail a share of the requests. Only
/// for requests that are safe to repeat (an append keyed by its batch, a read).
async fn retry_quick_failures<T, F: std::future::Future<Output = Result<T, etcd_client::Error>>>(
    mut request: impl FnMut() -> F,
) -> Result<T, etcd_client::Error> {
    let mut tries = 0;
    loop {
        let started = tokio::time::Instant::now();
        match request().await {
            Err(_) if tries < QUICK_RETRIES && started.elapsed() < QUICK_FAILURE => tries += 1,
            result => return result,
        }
    }
}

/// A failure faster than this was not a timeout: worth one more try on another member.
const QUICK_FAILURE: Duration = Duration::from_millis(200);

/// Follows the log from the replica's revision on; a broken stream is watched again from the
/// next revision not seen, so nothing is skipped or applied twice. Every stream, once open and
/// before any of its batches is applied, is checked against the anchor
/// ([`read_verified_head`]): the watch moves the anchor with every batch it delivers, so an
/// etcd restored below the anchor and pushed past it by other writers (agents that did not see
/// the lost part, or on a new `store.path`) would otherwise be followed, the anchor moved onto
/// one of their batches, and every later check pass. A restore after that read restarts the
/// members, which breaks the stream: the next one is checked again.
async fn watch(mut client: Client, keys: Keys, shared: Arc<Shared>) {
    let mut backoff = Duration::from_millis(50);
    let mut first = true;
    loop {
        if shared.is_refused() {
            // A refused log is never followed again (until the agent restarts).
            return;
        }
        if !std::mem::take(&mut first) {
            // An ordinary read first: it renews an expired auth token (a watch is opened whatever
            // the token and cancelled after), and tells a member that does not answer.
            if let Err(e) = client.get(keys.head.as_bytes(), None).await {
                shared.set_down(Some(format!("cannot read the log's head before watching again: {e}")));
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        }
        let from = shared.seen_revision() + 1;
        // Fragmented: catching up over many large batches, etcd splits its answer at its request
        // limit (each event whole) instead of sending one over the decode limit.
        let options = WatchOptions::new().with_prefix().with_start_revision(from).with_fragment();
        let mut watcher = client.watch_client().max_decoding_message_size(DECODE_BYTES_MAX);
        match watcher.watch(keys.log.as_bytes(), Some(options)).await {
            // Its batches wait in the stream until the check passed.
            Ok(mut stream) => match read_verified_head(&mut client, &keys, &shared).await {
                Ok((_, true)) => {
                    shared.set_down(None);
                    follow(&mut stream, &mut client, &keys, &shared, &mut backoff).await;
                }
                // Refused for good (the reason is logged and in health).
                Ok((_, false)) => return,
                Err(e) => {
                    shared.set_down(Some(format!("cannot check the log's head before following it: {e}")))
                }
            },
            Err(e) => shared.set_down(Some(format!("cannot watch the log: {e}"))),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// Applies the batches `stream` delivers to the replica until it ends, breaks or is cancelled
/// (after a compaction: reloaded from the snapshot, see [`load`]).
async fn follow(
    stream: &mut etcd_client::WatchStream,
    client: &mut Client,
    keys: &Keys,
    shared: &Shared,
    backoff: &mut Duration,
) {
    loop {
        match stream.message().await {
            Ok(Some(response)) => {
                *backoff = Duration::from_millis(50);
                if response.canceled() {
                    if response.compact_revision() > 0 {
                        // etcd compacted its history past what this agent saw: start again from
                        // the newest snapshot and the batches after it.
                        warn!(
                            compacted = response.compact_revision(),
                            "the log's watch fell behind a compaction; reloading from the snapshot"
                        );
                        shared.set_down(Some("reloading the log from the snapshot".into()));
                        match load(client, keys, shared).await {
                            Ok(_) => shared.set_down(None),
                            Err(e) => shared.set_down(Some(format!("cannot reload the log: {e}"))),
                        }
                        return;
                    }
                    // Anything else (an expired auth token — the watch is opened whatever the
                    // token, then cancelled "permission denied"; a member going away): down, not
                    // refused; watched again after a read that renews the token.
                    let reason = format!("etcd cancelled the log's watch: {}", response.cancel_reason());
                    warn!(%reason, "watching the log again");
                    shared.set_down(Some(reason));
                    return;
                }
                for event in response.events() {
                    if event.event_type() != EventType::Put {
                        continue;
                    }
                    if let Some(kv) = event.kv() {
                        shared.push_batch(kv.key(), kv.mod_revision(), kv.value());
                    }
                }
                shared.grew();
            }
            Ok(None) => {
                debug!("the log's watch ended; watching again");
                return;
            }
            Err(e) => {
                shared.set_down(Some(format!("the log's watch broke: {e}")));
                warn!(error = %e, "the log's watch broke; watching again");
                return;
            }
        }
    }
}
