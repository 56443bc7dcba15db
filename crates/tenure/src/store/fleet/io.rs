//! The etcd client's own thread: a current-thread tokio runtime that owns the client, answers the
//! store's requests (append, head read) and runs the watch that fills the replica. The store's
//! methods are synchronous (the core's `Log` is); they send a request here and wait for the
//! answer with a deadline, so the agent's runtime never runs etcd's futures and a store works
//! from any thread.

use std::sync::Arc;
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, SortOrder, SortTarget, Txn, TxnOp,
    WatchOptions,
};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::Shared;

/// Keys and values the I/O thread reads and writes, by role.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    /// `<prefix>/log/`: one key per batch.
    pub(crate) log: String,
    /// `<prefix>/head`: rewritten by every append, so its mod revision is the last batch's.
    pub(crate) head: String,
    /// `<prefix>/fleet`: the fleet's nodes, as the first agent wrote them.
    pub(crate) fleet: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Self {
        let prefix = prefix.trim_end_matches('/');
        Self {
            log: format!("{prefix}/log/"),
            head: format!("{prefix}/head"),
            fleet: format!("{prefix}/fleet"),
        }
    }
}

/// A linearizable read of the log's head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HeadRead {
    /// The etcd cluster answering.
    pub(crate) cluster_id: u64,
    /// The cluster's revision at the read.
    pub(crate) revision: i64,
    /// The revision of the last batch appended (0: none yet).
    pub(crate) head_revision: i64,
}

/// Sees the first head read; a reason refuses the log (the binding does not match).
pub(crate) type Refuse = Box<dyn FnOnce(&HeadRead) -> Option<String> + Send>;

/// A request to the I/O thread; each answers on its own channel.
pub(crate) enum Command {
    /// Put one batch under `key` unless it is there already (a retried append whose first
    /// answer was lost); answers the batch's revision.
    Append { key: String, value: Vec<u8>, reply: std_mpsc::SyncSender<Result<i64, String>> },
    /// A linearizable read of the head key.
    Head { reply: std_mpsc::SyncSender<Result<HeadRead, String>> },
}

/// How the thread connects.
#[derive(Clone, Debug)]
pub(crate) struct ConnectSettings {
    pub(crate) endpoints: Vec<String>,
    /// Per request (connect, append, read).
    pub(crate) request_timeout: Duration,
    /// `user`, `password`, when etcd has authentication on.
    pub(crate) user: Option<(String, String)>,
    /// This agent's fleet ([`super::fleet_text`]), which must be the one in etcd.
    pub(crate) fleet: String,
}

/// The handle on the I/O thread: dropping every handle ends the thread.
#[derive(Debug)]
pub(crate) struct Io {
    commands: mpsc::UnboundedSender<Command>,
    request_timeout: Duration,
}

impl Io {
    /// Starts the thread: connects, loads the log from `start` (the snapshot revision: 0 for the
    /// whole log) into the replica, then watches. Returns once the initial load is done or failed.
    /// `refuse` sees the first head read: a reason makes the store refused before it writes or
    /// reads anything more (no fleet check, no load, no watch).
    pub(crate) fn start(
        settings: ConnectSettings,
        keys: Keys,
        shared: Arc<Shared>,
        refuse: Refuse,
    ) -> Result<(Self, HeadRead), String> {
        let (commands, mut receiver) = mpsc::unbounded_channel::<Command>();
        let (ready, started) = std_mpsc::sync_channel::<Result<HeadRead, String>>(1);
        let request_timeout = settings.request_timeout;
        std::thread::Builder::new()
            .name("tenure-etcd".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready.send(Err(format!("cannot start the etcd client's runtime: {e}")));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let (client, head) = match connect_and_load(&settings, &keys, &shared, refuse).await {
                        Ok(loaded) => loaded,
                        Err(e) => {
                            let _ = ready.send(Err(e));
                            return;
                        }
                    };
                    let _ = ready.send(Ok(head));
                    if shared.lock().refused.is_none() {
                        tokio::spawn(watch(client.clone(), keys.clone(), Arc::clone(&shared)));
                    }
                    while let Some(command) = receiver.recv().await {
                        tokio::spawn(answer(client.clone(), keys.clone(), command));
                    }
                });
            })
            .map_err(|e| format!("cannot start the etcd client's thread: {e}"))?;
        let head = started
            .recv()
            .map_err(|_| "the etcd client's thread stopped before it connected".to_owned())??;
        Ok((Self { commands, request_timeout }, head))
    }

    /// Sends `command` built around a reply channel and waits for the answer, at most `wait`.
    fn call<T>(
        &self,
        wait: Duration,
        build: impl FnOnce(std_mpsc::SyncSender<Result<T, String>>) -> Command,
    ) -> Result<T, String> {
        let (reply, answer) = std_mpsc::sync_channel(1);
        self.commands.send(build(reply)).map_err(|_| "the etcd client's thread stopped".to_owned())?;
        super::blocking(|| answer.recv_timeout(wait))
            .map_err(|_| format!("etcd did not answer within {} ms", wait.as_millis()))?
    }

    /// Puts one batch (see [`Command::Append`]), waiting at most the request timeout and a
    /// margin (the client's own timeout answers first).
    pub(crate) fn append(&self, key: String, value: Vec<u8>) -> Result<i64, String> {
        self.call(self.request_timeout + Duration::from_millis(500), |reply| Command::Append {
            key,
            value,
            reply,
        })
    }

    /// A linearizable read of the head key, waited for at most `wait` (a read still under way
    /// then finishes in the background, unheard).
    pub(crate) fn head(&self, wait: Duration) -> Result<HeadRead, String> {
        self.call(wait, |reply| Command::Head { reply })
    }
}

fn failed(what: &str) -> impl Fn(etcd_client::Error) -> String + '_ {
    move |e| format!("etcd {what}: {e}")
}

async fn connect(settings: &ConnectSettings) -> Result<Client, String> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(settings.request_timeout)
        .with_timeout(settings.request_timeout)
        // A link that died quietly (a partition) shows within about two seconds, also on the watch.
        .with_keep_alive(Duration::from_secs(1), Duration::from_secs(1))
        .with_keep_alive_while_idle(true);
    if let Some((user, password)) = &settings.user {
        options = options.with_user(user.clone(), password.clone());
    }
    Client::connect(&settings.endpoints, Some(options)).await.map_err(failed("connect"))
}

async fn read_head(client: &mut Client, keys: &Keys) -> Result<HeadRead, String> {
    let response = retry_quick_failures(|| {
        let mut client = client.clone();
        let key = keys.head.clone();
        async move { client.get(key, None).await }
    })
    .await
    .map_err(failed("head read"))?;
    let header = response.header().ok_or("etcd head read: an answer without a header")?;
    Ok(HeadRead {
        cluster_id: header.cluster_id(),
        revision: header.revision(),
        head_revision: response.kvs().first().map_or(0, etcd_client::KeyValue::mod_revision),
    })
}

/// Connects, reads the head, and loads every batch up to the head read's revision into the
/// replica (in revision order, a page at a time, all at that one revision).
async fn connect_and_load(
    settings: &ConnectSettings,
    keys: &Keys,
    shared: &Shared,
    refuse: Refuse,
) -> Result<(Client, HeadRead), String> {
    let mut client = connect(settings).await?;
    let first = read_head(&mut client, keys).await?;
    if let Some(reason) = refuse(&first) {
        shared.lock().refused = Some(reason);
        return Ok((client, first));
    }
    check_fleet(&mut client, keys, &settings.fleet).await?;
    let head = read_head(&mut client, keys).await?;
    const PAGE: i64 = 512;
    let mut from = 1;
    loop {
        let options = GetOptions::new()
            .with_prefix()
            .with_revision(head.revision)
            .with_min_mod_revision(from)
            .with_sort(SortTarget::Mod, SortOrder::Ascend)
            .with_limit(PAGE);
        let response = client.get(keys.log.as_bytes(), Some(options)).await.map_err(failed("log read"))?;
        let kvs = response.kvs();
        for kv in kvs {
            shared.push_batch(kv.key(), kv.mod_revision(), kv.value());
        }
        match kvs.last() {
            Some(last) if i64::try_from(kvs.len()).unwrap_or(PAGE) >= PAGE => from = last.mod_revision() + 1,
            _ => break,
        }
    }
    shared.loaded(head.revision);
    Ok((client, head))
}

/// Writes this agent's fleet under the fleet key unless one is there; one that is there must be
/// the same (every agent computes the map from the same nodes).
async fn check_fleet(client: &mut Client, keys: &Keys, fleet: &str) -> Result<(), String> {
    let txn = Txn::new()
        .when([Compare::create_revision(keys.fleet.as_bytes(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(keys.fleet.as_bytes(), fleet.as_bytes(), None)])
        .or_else([TxnOp::get(keys.fleet.as_bytes(), None)]);
    let response = client.txn(txn).await.map_err(failed("fleet check"))?;
    if response.succeeded() {
        return Ok(());
    }
    let stored = response
        .op_responses()
        .into_iter()
        .find_map(|op| match op {
            etcd_client::TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        })
        .unwrap_or_default();
    super::compare_fleets(&String::from_utf8_lossy(&stored), fleet, &keys.fleet)
}

async fn answer(mut client: Client, keys: Keys, command: Command) {
    match command {
        Command::Append { key, value, reply } => {
            let txn = Txn::new()
                .when([Compare::create_revision(key.as_bytes(), CompareOp::Equal, 0)])
                .and_then([
                    TxnOp::put(key.as_bytes(), value, None),
                    TxnOp::put(keys.head.as_bytes(), key.as_bytes(), None),
                ])
                .or_else([TxnOp::get(key.as_bytes(), None)]);
            let result = retry_quick_failures(|| {
                let mut client = client.clone();
                let txn = txn.clone();
                async move { client.txn(txn).await }
            })
            .await
            .map_err(failed("append"))
            .and_then(|response| {
                if response.succeeded() {
                    response
                        .header()
                        .map(etcd_client::ResponseHeader::revision)
                        .ok_or_else(|| "etcd append: no header".to_owned())
                } else {
                    // The key is there: an earlier try of this very batch was committed.
                    response
                        .op_responses()
                        .into_iter()
                        .find_map(|op| match op {
                            etcd_client::TxnOpResponse::Get(get) => {
                                get.kvs().first().map(etcd_client::KeyValue::mod_revision)
                            }
                            _ => None,
                        })
                        .ok_or_else(|| "etcd append: the batch key vanished".to_owned())
                }
            });
            let _ = reply.send(result);
        }
        Command::Head { reply } => {
            let _ = reply.send(read_head(&mut client, &keys).await);
        }
    }
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
/// next revision not seen, so nothing is skipped or applied twice.
async fn watch(mut client: Client, keys: Keys, shared: Arc<Shared>) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let from = shared.seen_revision() + 1;
        let options = WatchOptions::new().with_prefix().with_start_revision(from);
        match client.watch(keys.log.as_bytes(), Some(options)).await {
            Ok(mut stream) => {
                shared.set_down(None);
                loop {
                    match stream.message().await {
                        Ok(Some(response)) => {
                            backoff = Duration::from_millis(50);
                            if response.canceled() {
                                let reason = if response.compact_revision() > 0 {
                                    format!(
                                        "the log was compacted past revision {} before this agent read it; restart the agent",
                                        response.compact_revision()
                                    )
                                } else {
                                    format!("etcd cancelled the log's watch: {}", response.cancel_reason())
                                };
                                shared.break_replica(reason);
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
                            break;
                        }
                        Err(e) => {
                            shared.set_down(Some(format!("the log's watch broke: {e}")));
                            warn!(error = %e, "the log's watch broke; watching again");
                            break;
                        }
                    }
                }
            }
            Err(e) => shared.set_down(Some(format!("cannot watch the log: {e}"))),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}
