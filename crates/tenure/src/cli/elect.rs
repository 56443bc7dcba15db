//! `tenure elect ELECTION --name NAME --backend noop|embedded|etcd|kubernetes`: campaigns like
//! `etcdctl elect`, printing one JSON line per change of its own state —
//! `{"election": …, "name": …, "leader": true|false, "epoch": N}` (epoch null when not leader) —
//! starting with its initial state, until SIGTERM, SIGINT, SIGHUP or SIGQUIT (steps down,
//! releases, prints the final line, exits 0), a closed stdout (the same, without the line) or
//! SIGKILL.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde::Serialize;
use tenure_core::input::{check_name, parse_duration_ms};
use tenure_lead::LeaderState;
use tenure_lead::backend::{BackendError, LeaseBackend};
use tenure_lead::config::ElectionConfig;
use tenure_lead::elector;
use tenure_lead::embedded::EmbeddedBackend;
#[cfg(feature = "etcd")]
use tenure_lead::etcd::EtcdBackend;
use tenure_lead::noop::NoopBackend;
use tokio_util::sync::CancellationToken;

use super::EXIT_BAD_INPUT;

/// Arguments of `tenure elect`.
#[derive(Debug, Args)]
pub struct ElectArgs {
    /// The election's name.
    election: String,
    /// This contender's name (its identity in the lease).
    #[arg(long)]
    name: String,
    /// noop | embedded | etcd | kubernetes (etcd and kubernetes only in a build with that cargo
    /// feature).
    #[arg(long)]
    backend: String,
    /// etcd client URLs (comma-separated), or the one Kubernetes API server URL (default for
    /// kubernetes: the kubeconfig from KUBECONFIG or ~/.kube/config, else in-cluster).
    #[arg(long, value_delimiter = ',')]
    endpoints: Vec<String>,
    /// How long a lease lasts after its last renewal.
    #[arg(long, default_value = "15s")]
    lease_duration: String,
    /// How long a leader keeps leading without a successful renewal.
    #[arg(long, default_value = "10s")]
    renew_deadline: String,
    /// Time between attempts.
    #[arg(long, default_value = "2s")]
    retry_period: String,
    /// embedded: the folder of the lock and term files.
    #[arg(long, default_value = "./data/elections")]
    dir: PathBuf,
    /// etcd: the key prefix.
    #[arg(long, default_value = "/tenure")]
    prefix: String,
    /// kubernetes: the namespace of the Lease.
    #[arg(long, default_value = "default")]
    namespace: String,
}

#[derive(Serialize)]
struct Line<'a> {
    election: &'a str,
    name: &'a str,
    leader: bool,
    epoch: Option<u64>,
}

/// The backends of this build; etcd and Kubernetes only with their cargo features.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Noop,
    Embedded,
    #[cfg(feature = "etcd")]
    Etcd,
    #[cfg(feature = "kubernetes")]
    Kubernetes,
}

/// Why `elect` refuses to start.
#[derive(Debug)]
enum Refusal {
    /// Bad arguments (exit 2).
    BadInput(String),
    /// A backend this build left out, and the cargo feature that builds it (exit 3). Only in a
    /// build that leaves one out.
    #[cfg(not(all(feature = "etcd", feature = "kubernetes")))]
    NotBuilt { backend: &'static str, feature: &'static str },
}

impl From<String> for Refusal {
    fn from(message: String) -> Self {
        Self::BadInput(message)
    }
}

/// The backend `--backend` names, if this build has it.
fn backend(name: &str) -> Result<Backend, Refusal> {
    match name {
        "noop" => Ok(Backend::Noop),
        "embedded" => Ok(Backend::Embedded),
        #[cfg(feature = "etcd")]
        "etcd" => Ok(Backend::Etcd),
        #[cfg(not(feature = "etcd"))]
        "etcd" => Err(Refusal::NotBuilt { backend: "etcd", feature: "etcd" }),
        #[cfg(feature = "kubernetes")]
        "kubernetes" => Ok(Backend::Kubernetes),
        #[cfg(not(feature = "kubernetes"))]
        "kubernetes" => Err(Refusal::NotBuilt { backend: "kubernetes", feature: "kubernetes" }),
        other => Err(Refusal::BadInput(format!(
            "--backend must be noop, embedded, etcd or kubernetes (got `{other}`)"
        ))),
    }
}

fn duration(flag: &str, text: &str) -> Result<Duration, String> {
    parse_duration_ms(text).map(Duration::from_millis).map_err(|e| format!("--{flag}: {e}"))
}

/// The backend and the election timing, or why not. A backend this build left out is refused
/// before anything else: no other argument can make it available.
fn config(args: &ElectArgs) -> Result<(Backend, ElectionConfig), Refusal> {
    let backend = backend(&args.backend)?;
    check_name("election", &args.election)?;
    check_name("--name", &args.name)?;
    let config = ElectionConfig {
        lease_duration: duration("lease-duration", &args.lease_duration)?,
        renew_deadline: duration("renew-deadline", &args.renew_deadline)?,
        retry_period: duration("retry-period", &args.retry_period)?,
        ..ElectionConfig::default()
    };
    config.validate().map_err(|e| e.to_string())?;
    // Kubernetes finds its API server as kubectl does when no URL is given, and takes one at most.
    let kubernetes = args.backend == "kubernetes";
    if kubernetes && args.endpoints.len() > 1 {
        return Err(Refusal::BadInput(format!(
            "--backend kubernetes takes one --endpoints URL (the API server), got {}",
            args.endpoints.len()
        )));
    }
    let needs_endpoints = !matches!(backend, Backend::Noop | Backend::Embedded) && !kubernetes;
    if needs_endpoints && args.endpoints.is_empty() {
        return Err(Refusal::BadInput(format!("--backend {} needs --endpoints", args.backend)));
    }
    Ok((backend, config))
}

/// Runs `tenure elect` until SIGTERM, SIGINT, SIGHUP or SIGQUIT, or until its stdout is closed.
pub fn run(args: &ElectArgs) -> ExitCode {
    let (backend, config) = match config(args) {
        Ok(chosen) => chosen,
        Err(Refusal::BadInput(message)) => {
            eprintln!("tenure elect: {message}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
        #[cfg(not(all(feature = "etcd", feature = "kubernetes")))]
        Err(Refusal::NotBuilt { backend, feature }) => {
            eprintln!("tenure elect: this build has no {backend} backend; rebuild with --features {feature}");
            return ExitCode::from(super::EXIT_NOT_BUILT);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tenure elect: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match backend {
            Backend::Noop => campaign(args, NoopBackend, config).await,
            Backend::Embedded => {
                campaign(args, EmbeddedBackend::new(&args.dir, &args.election, &args.name)?, config).await
            }
            #[cfg(feature = "etcd")]
            Backend::Etcd => {
                let backend = EtcdBackend::connect(
                    &args.endpoints,
                    &args.prefix,
                    &args.election,
                    &args.name,
                    config.lease_duration,
                )
                .await?;
                campaign(args, backend, config).await
            }
            #[cfg(feature = "kubernetes")]
            Backend::Kubernetes => {
                let setup = |e: tenure_kube::SetupError| BackendError::Unavailable {
                    backend: "kubernetes",
                    message: e.to_string(),
                };
                // A URL (its path kept), else the kubeconfig or in-cluster account, as kubectl.
                let client = match args.endpoints.first() {
                    Some(url) => tenure_kube::client_for_url(url),
                    None => tenure_kube::client_inferred().await,
                }
                .map_err(setup)?;
                let backend = tenure_kube::KubernetesBackend::new(
                    client,
                    &args.namespace,
                    &args.election,
                    &args.name,
                    config.lease_duration,
                )
                .map_err(setup)?
                .with_renew_deadline(config.renew_deadline);
                campaign(args, backend, config).await
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tenure elect: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints one state line. Returns whether stdout took it: a reader that went away (a closed
/// pipe) ends the campaign as a signal does — step down, release, exit 0 — never a panic.
fn print(args: &ElectArgs, leader: bool, epoch: Option<u64>) -> bool {
    use std::io::Write as _;
    let line = Line { election: &args.election, name: &args.name, leader, epoch };
    let text = serde_json::to_string(&line).expect("a line is plain data");
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}").and_then(|()| stdout.flush()).is_ok()
}

async fn campaign<B: LeaseBackend>(
    args: &ElectArgs,
    backend: B,
    config: ElectionConfig,
) -> Result<(), BackendError> {
    // Handlers first: a signal that arrives once the initial line is out must step down, not kill.
    let signal = |kind| {
        tokio::signal::unix::signal(kind)
            .map_err(|e| BackendError::Unavailable { backend: "signal", message: e.to_string() })
    };
    let mut terminate = signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut interrupt = signal(tokio::signal::unix::SignalKind::interrupt())?;
    // A closed terminal (SIGHUP) or a quit key (SIGQUIT) releases as SIGTERM does.
    let mut hangup = signal(tokio::signal::unix::SignalKind::hangup())?;
    let mut quit = signal(tokio::signal::unix::SignalKind::quit())?;
    // The initial state, before the elector can change it.
    let mut printed = LeaderState::following();
    let mut stdout_open = print(args, printed.leader, printed.epoch.map(|e| e.get()));
    let shutdown = CancellationToken::new();
    let (handle, task) = elector::spawn(backend, config, shutdown.clone());
    let mut changes = handle.watch();
    // Marked changed: a change published before this watch existed is reported too.
    changes.mark_changed();
    while stdout_open {
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    break;
                }
                let now = *changes.borrow_and_update();
                if now != printed {
                    printed = now;
                    stdout_open = print(args, printed.leader, printed.epoch.map(|e| e.get()));
                }
            }
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
            _ = hangup.recv() => break,
            _ = quit.recv() => break,
        }
    }
    shutdown.cancel();
    let outcome =
        task.await.map_err(|e| BackendError::Unavailable { backend: "elector", message: e.to_string() })?;
    // The elector publishes its step-down before it releases: print it if not printed yet.
    let last = *changes.borrow();
    if last != printed && stdout_open {
        let _ = print(args, last.leader, last.epoch.map(|e| e.get()));
    }
    outcome
}
