//! `tenure elect ELECTION --name NAME --backend noop|embedded|etcd|kubernetes`: campaigns like
//! `etcdctl elect`, printing one JSON line per change of its own state —
//! `{"election": …, "name": …, "leader": true|false, "epoch": N}` (epoch null when not leader) —
//! starting with its initial state, until SIGTERM or SIGINT (steps down, releases, prints the
//! final line, exits 0) or SIGKILL.

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
    /// noop | embedded | etcd | kubernetes.
    #[arg(long)]
    backend: String,
    /// etcd client URLs, or the Kubernetes API server URL (comma-separated).
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

fn duration(flag: &str, text: &str) -> Result<Duration, String> {
    parse_duration_ms(text).map(Duration::from_millis).map_err(|e| format!("--{flag}: {e}"))
}

fn config(args: &ElectArgs) -> Result<ElectionConfig, String> {
    check_name("election", &args.election)?;
    check_name("--name", &args.name)?;
    let config = ElectionConfig {
        lease_duration: duration("lease-duration", &args.lease_duration)?,
        renew_deadline: duration("renew-deadline", &args.renew_deadline)?,
        retry_period: duration("retry-period", &args.retry_period)?,
        ..ElectionConfig::default()
    };
    config.validate().map_err(|e| e.to_string())?;
    match args.backend.as_str() {
        "noop" | "embedded" => {}
        "etcd" | "kubernetes" if args.endpoints.is_empty() => {
            return Err(format!("--backend {} needs --endpoints", args.backend));
        }
        "etcd" | "kubernetes" => {}
        other => return Err(format!("--backend must be noop, embedded, etcd or kubernetes (got `{other}`)")),
    }
    Ok(config)
}

pub fn run(args: &ElectArgs) -> ExitCode {
    let config = match config(args) {
        Ok(c) => c,
        Err(message) => {
            eprintln!("tenure elect: {message}");
            return ExitCode::from(EXIT_BAD_INPUT);
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
        match args.backend.as_str() {
            "noop" => campaign(args, NoopBackend, config).await,
            "embedded" => {
                campaign(args, EmbeddedBackend::new(&args.dir, &args.election, &args.name)?, config).await
            }
            "etcd" => {
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
            _ => {
                let backend = tenure_kube::KubernetesBackend::connect(
                    &args.endpoints[0],
                    &args.namespace,
                    &args.election,
                    &args.name,
                    config.lease_duration,
                )
                .map_err(|e| BackendError::Unavailable { backend: "kubernetes", message: e.to_string() })?;
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

fn print(args: &ElectArgs, leader: bool, epoch: Option<u64>) {
    let line = Line { election: &args.election, name: &args.name, leader, epoch };
    println!("{}", serde_json::to_string(&line).expect("a line is plain data"));
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
    // The initial state, before the elector can change it.
    let mut printed = LeaderState::following();
    print(args, printed.leader, printed.epoch.map(|e| e.get()));
    let shutdown = CancellationToken::new();
    let (handle, task) = elector::spawn(backend, config, shutdown.clone());
    let mut changes = handle.watch();
    // Marked changed: a change published before this watch existed is reported too.
    changes.mark_changed();
    loop {
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    break;
                }
                let now = *changes.borrow_and_update();
                if now != printed {
                    printed = now;
                    print(args, printed.leader, printed.epoch.map(|e| e.get()));
                }
            }
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
        }
    }
    shutdown.cancel();
    let outcome =
        task.await.map_err(|e| BackendError::Unavailable { backend: "elector", message: e.to_string() })?;
    // The elector publishes its step-down before it releases: print it if not printed yet.
    let last = *changes.borrow();
    if last != printed {
        print(args, last.leader, last.epoch.map(|e| e.get()));
    }
    outcome
}
