//! `tenure agent --config FILE`: the daemon on the embedded store.
//!
//! Exit codes: 0 after a clean stop (SIGTERM or SIGINT: no new work, calls in flight finished or
//! timed out, results recorded, store closed); 1 when the agent cannot start (the store refuses,
//! the address is in use) or stops on an error; 2 for a bad config, token or pool file; 3 for a
//! part this build does not have (the etcd store, a provider kind without an executor here). The
//! checks behind 2 and 3 are `preflight.rs`, which `tenure validate` runs too.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tenure_core::model::ProviderSpec;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::executors::executors;
use super::preflight::{Checked, Refusal, StoreSecrets, check_before_store};
use super::{EXIT_BAD_INPUT, EXIT_NOT_BUILT};
use crate::agent::notices::NoticeWatch;
use crate::agent::request::AgentHandle;
use crate::agent::runner::{AgentError, run};
use crate::agent::{ProviderExecutor, Settings};
use crate::api::{self, ApiToken};
use crate::config::{AgentConfig, StoreConfig, reload_pools};
use crate::exec::hook_groups::HookGroups;
use crate::metrics::Metrics;
use crate::store::{EmbeddedStore, MissingIdentity};

/// Log formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `tenure agent` arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct AgentArgs {
    /// The agent configuration file (SPEC 10).
    #[arg(long)]
    pub config: PathBuf,
    /// Log format on stderr. The level comes from `RUST_LOG` (default `info`).
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Open a store that holds data although its identity file does not exist, and write the
    /// file from it. The risk: a stale copy of a store issues again tokens it issued before.
    /// Only for a store known to be the current one (its identity file was lost).
    #[arg(long)]
    pub accept_store_without_identity: bool,
}

/// Sets up `tracing` on stderr. Safe to call once per process.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // The Azure SDK logs each failed HTTP answer at info in its own words; tenure says what
        // matters once, with the cause (RUST_LOG overrides all of it).
        .unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(
                "info,typespec_client_core=warn,azure_core=warn,azure_identity=warn",
            )
        });
    // Colours only on a terminal: journald and files get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // A closed stderr (the terminal or pipe gone) must not end the agent: the subscriber's own
    // report of a failed write goes to stderr too, and printing to a closed stderr panics.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .log_internal_errors(false);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// The mark of this agent's hook processes: the store's cluster id (random at creation) and its
/// folder's canonical path — no other agent's, however the path was spelled.
fn hook_owner(store_path: &std::path::Path, cluster_id: &str) -> String {
    let path = std::fs::canonicalize(store_path)
        .or_else(|_| std::path::absolute(store_path))
        .unwrap_or_else(|_| store_path.to_owned());
    format!("{cluster_id}@{}", path.display())
}

/// `tenure agent --config FILE`.
pub fn run_cli(args: &AgentArgs) -> ExitCode {
    init_logging(args.log_format);
    // Every check made before the store is opened, the same `tenure validate` makes: a config
    // this agent refuses changes nothing.
    let Checked { config, token, store_secrets } = match check_before_store(&args.config) {
        Ok(checked) => checked,
        Err(Refusal { code, lines }) => {
            for line in lines {
                eprintln!("{line}");
            }
            return ExitCode::from(code);
        }
    };
    // The maintenance notice watches (`maintenanceNotices: drain`), their test hooks read now: a
    // bad one changes nothing.
    let watches = match notice_watches(&config) {
        Ok(watches) => watches,
        Err(line) => {
            eprintln!("tenure agent: {line}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    // The API's port before the store: an agent that cannot listen (the port in use) leaves no
    // store or identity file behind.
    let listener = match std::net::TcpListener::bind(config.listen).and_then(|listener| {
        listener.set_nonblocking(true)?;
        Ok(listener)
    }) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("tenure agent: cannot listen on {}: {e}", config.listen);
            return ExitCode::FAILURE;
        }
    };
    // The runtime before the store: the fleet store's etcd requests and watch are its tasks. Two
    // workers at least, also on a one-core router: a worker busy with an inventory listing or a
    // page must not hold the heartbeats' etcd requests (the loop itself runs on this thread).
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
    let runtime =
        match tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build() {
            Ok(runtime) => runtime,
            Err(e) => {
                eprintln!("tenure agent: cannot start the runtime: {e}");
                return ExitCode::FAILURE;
            }
        };
    // Signals before the store: opening a large store takes seconds, and a SIGHUP then (a
    // `systemctl reload` right after a restart) would end the process, a SIGTERM kill it
    // uncleanly. A reload asked meanwhile is taken once the agent runs; a stop stops it then.
    let stop = CancellationToken::new();
    let (reload_tx, reload_rx) = mpsc::channel(4);
    let signals = {
        let _entered = runtime.enter();
        watch_signals(stop.clone(), reload_tx)
    };
    if let Err(e) = signals {
        eprintln!("tenure agent: cannot install signal handlers: {e}");
        return ExitCode::FAILURE;
    }
    let store_path = config.store.path().to_owned();
    let missing =
        if args.accept_store_without_identity { MissingIdentity::Accept } else { MissingIdentity::Refuse };
    let store = match runtime.block_on(Opened::open(&config, store_secrets, missing)) {
        Ok(store) => store,
        Err(e) => {
            // A refusal for a missing identity file names one of this store's cluster beside
            // where it was looked for (an earlier version's default name, a renamed folder).
            eprintln!("tenure agent: {e}");
            return ExitCode::FAILURE;
        }
    };
    // This process owns the store now: hooks a killed agent on it left running go before
    // anything is gated (docs/operations.md, "Exec hooks"), whatever providers this config has.
    let owner = hook_owner(&store_path, store.cluster_id());
    let groups = HookGroups::in_store(&store_path);
    let executors = match executors(&config, &owner, Some(&groups)) {
        Ok(executors) => executors,
        Err(line) => {
            eprintln!("tenure agent: {line}");
            let _ = runtime.block_on(store.close());
            return ExitCode::from(EXIT_NOT_BUILT);
        }
    };
    // First by the durable records of the hooks' process groups (any mount namespace), then by
    // the environment mark (what a hook left behind after its leader exited).
    match groups.kill_recorded(crate::exec::hook::ORPHAN_KILL_WAIT) {
        Ok(0) => {}
        Ok(n) => eprintln!(
            "tenure agent: killed {n} recorded hook process group(s) a previous agent on this store left running"
        ),
        Err(line) => {
            eprintln!("tenure agent: {line}");
            let _ = runtime.block_on(store.close());
            return ExitCode::FAILURE;
        }
    }
    match crate::exec::hook::kill_orphans(&owner) {
        Ok(0) => {}
        Ok(n) => {
            eprintln!("tenure agent: killed {n} hook process(es) a previous agent on this store left running")
        }
        Err(e) => {
            eprintln!("tenure agent: {e}");
            let _ = runtime.block_on(store.close());
            return ExitCode::FAILURE;
        }
    }
    let serving = Serving { config, listener, executors, token, watches, stop, reload_rx };
    let code = match &store {
        Opened::Embedded(store) => runtime.block_on(serve(serving, store.clone())),
        #[cfg(feature = "etcd")]
        Opened::Etcd(store) => runtime.block_on(serve(serving, store.clone())),
    };
    if let Err(e) = runtime.block_on(store.close()) {
        eprintln!("tenure agent: closing the store: {e}");
        return ExitCode::FAILURE;
    }
    code
}

/// A watch for each of this agent's nodes whose provider polls for maintenance notices.
fn notice_watches(config: &AgentConfig) -> Result<Vec<NoticeWatch>, String> {
    let sources = config
        .nodes
        .iter()
        .filter_map(|node| {
            let provider = config.providers.iter().find(|p| p.name == node.provider)?;
            Some((node.name.clone(), provider.settings.maintenance_notices()?))
        })
        .collect();
    crate::agent::notices::watches(sources)
}

/// The store an agent runs on, by the config's `store.kind`.
enum Opened {
    Embedded(EmbeddedStore),
    #[cfg(feature = "etcd")]
    Etcd(crate::store::fleet::EtcdStore),
}

impl Opened {
    async fn open(
        config: &AgentConfig,
        secrets: StoreSecrets,
        missing: MissingIdentity,
    ) -> Result<Self, String> {
        match &config.store {
            StoreConfig::Embedded { path } => EmbeddedStore::open_with(path, &config.identity_file, missing)
                .map(|store| {
                    // Its backups record what the log is projected over (`tenure replay BACKUP`).
                    store.set_fleet(config.fleet_text());
                    Self::Embedded(store)
                })
                .map_err(|e| e.to_string()),
            #[cfg(feature = "etcd")]
            StoreConfig::Etcd { endpoints, prefix, path, snapshot_every, .. } => {
                let StoreSecrets { user, tls } = secrets;
                let options = crate::store::fleet::EtcdOptions {
                    endpoints: endpoints.clone(),
                    prefix: prefix.clone(),
                    request_timeout: crate::store::fleet::REQUEST_TIMEOUT_DEFAULT,
                    user,
                    tls,
                    snapshot_every: *snapshot_every,
                    fleet: config.fleet_text(),
                    nodes: config.nodes.iter().map(|n| n.name.clone()).collect(),
                };
                crate::store::fleet::EtcdStore::open_with(path, &config.identity_file, &options, missing)
                    .await
                    .map(Self::Etcd)
                    .map_err(|e| e.to_string())
            }
            #[cfg(not(feature = "etcd"))]
            StoreConfig::Etcd { .. } => {
                let StoreSecrets {} = secrets;
                Err("this build has no etcd store; rebuild with --features etcd".into())
            }
        }
    }

    fn cluster_id(&self) -> &str {
        match self {
            Self::Embedded(store) => store.cluster_id(),
            #[cfg(feature = "etcd")]
            Self::Etcd(store) => store.local().cluster_id(),
        }
    }

    async fn close(self) -> Result<(), crate::store::StoreError> {
        match self {
            Self::Embedded(store) => store.close(),
            #[cfg(feature = "etcd")]
            Self::Etcd(store) => store.close().await,
        }
    }
}

/// What the agent serves with, whatever its store: made before the store opens.
struct Serving {
    config: AgentConfig,
    listener: std::net::TcpListener,
    executors: BTreeMap<String, ProviderExecutor>,
    token: Option<ApiToken>,
    watches: Vec<NoticeWatch>,
    /// Cancelled by SIGTERM/SIGINT (handlers installed before the store opens).
    stop: CancellationToken,
    /// A message per SIGHUP.
    reload_rx: mpsc::Receiver<()>,
}

async fn serve<S: crate::agent::AgentStore>(serving: Serving, store: S) -> ExitCode {
    let Serving { config, listener, executors, token, watches, stop, reload_rx } = serving;
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("tenure agent: cannot listen on {}: {e}", config.listen);
            return ExitCode::FAILURE;
        }
    };
    let metrics = Arc::new(Metrics::new());
    let (handle, requests) = AgentHandle::channel();
    for watch in watches {
        tokio::spawn(crate::agent::notices::watch(watch, handle.clone(), Arc::clone(&metrics), stop.clone()));
    }
    let router = api::router(handle, Arc::clone(&metrics), token);
    let api_stop = CancellationToken::new();
    let api_stopped = api_stop.clone();
    // The address the API got: `listen: 127.0.0.1:0` asks the kernel for a port, said in the
    // start's log line or the API could not be found.
    let bound = listener.local_addr().unwrap_or(config.listen);
    let api = tokio::spawn(api::serve(listener, router, async move { api_stopped.cancelled().await }));
    info!(listen = %bound, nodes = config.nodes.len(), "agent started");
    let vrrp = config.vrrp.as_ref().map(|vrrp| {
        let (reports, receiver) = mpsc::channel(16);
        let authority = crate::agent::authority::LocalAuthority::new();
        info!(fifo = %vrrp.notify_fifo.display(), instance = %vrrp.instance, "following keepalived");
        tokio::spawn(crate::agent::keepalived::follow_fifo(
            vrrp.notify_fifo.clone(),
            vrrp.instance.clone(),
            reports,
            Arc::clone(&authority),
        ));
        crate::agent::VrrpFollow { reports: receiver, authority }
    });

    let settings = Settings {
        nodes: config.nodes.clone(),
        peers: config.peers.clone(),
        providers: config
            .providers
            .iter()
            .map(|p| ProviderSpec { name: p.name.clone(), kind: p.kind })
            .collect(),
        executors,
        heartbeat_interval: Duration::from_millis(config.heartbeat_interval_ms),
        requeue_interval: Duration::from_millis(config.requeue_interval_ms),
        journal_retention: config.journal_retention,
        // At start and on every SIGHUP: the config file read again for its `pools` list (other
        // changed keys are named as needing a restart), then the pool files.
        pools: {
            let config = config.clone();
            Box::new(move || reload_pools(&config))
        },
        vrrp,
    };
    let stopping = stop.clone();
    let outcome =
        run(store, settings, requests, reload_rx, metrics, async move { stopping.cancelled().await }).await;
    api_stop.cancel();
    let _ = api.await;
    match outcome {
        Ok(summary) => {
            info!(calls = summary.calls, appended = summary.appended, "agent stopped");
            ExitCode::SUCCESS
        }
        Err(AgentError::Pools(lines)) => {
            for line in lines {
                eprintln!("{line}");
            }
            ExitCode::from(EXIT_BAD_INPUT)
        }
        Err(e) => {
            error!(error = %e, "agent stopped");
            eprintln!("tenure agent: {e}");
            ExitCode::FAILURE
        }
    }
}

/// SIGTERM and SIGINT stop the agent; SIGHUP reloads the config's `pools` list and the pool files.
fn watch_signals(stop: CancellationToken, reload: mpsc::Sender<()>) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut hangup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = terminate.recv() => { info!("SIGTERM: stopping"); stop.cancel(); }
                _ = interrupt.recv() => { info!("SIGINT: stopping"); stop.cancel(); }
                _ = hangup.recv() => {
                    info!("SIGHUP: reloading the config's pools list and the pool files");
                    let _ = reload.try_send(());
                }
            }
        }
    });
    Ok(())
}
