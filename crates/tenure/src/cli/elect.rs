//! `tenure elect ELECTION --name NAME --backend noop|embedded|etcd|kubernetes`: campaigns like
//! `etcdctl elect`, printing one JSON line per change of its own state —
//! `{"election": …, "name": …, "leader": true|false, "epoch": N}` (epoch null when not leader) —
//! starting with its initial state, until SIGTERM, SIGINT, SIGHUP or SIGQUIT (steps down,
//! releases, prints the final line, exits 0), its stdout's reader going away (the same, without
//! the line, noticed at once) or SIGKILL.

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
use tenure_lead::memory::{Remembering, TermMemory};
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
    /// embedded: the folder of the lock and term files (default: `STATE_DIR/elections`). Every
    /// contender of one election on this host must name the same folder.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Where this node keeps the highest term it has seen per election (default:
    /// `$XDG_STATE_HOME/tenure`, else `$HOME/.local/state/tenure`).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Serve the election's Prometheus metrics on `GET http://ADDR/metrics` (e.g.
    /// 127.0.0.1:9465); off by default.
    #[arg(long)]
    metrics_listen: Option<std::net::SocketAddr>,
    /// etcd only: the key prefix [default: /tenure].
    #[arg(long = "prefix")]
    prefix_flag: Option<String>,
    /// kubernetes only: the namespace of the Lease [default: default].
    #[arg(long = "namespace")]
    namespace_flag: Option<String>,
    /// etcd only: the CA certificate (PEM) that signed etcd's, for https endpoints.
    #[arg(long)]
    cacert: Option<PathBuf>,
    /// etcd only: this contender's client certificate (PEM), with --key and --cacert.
    #[arg(long)]
    cert: Option<PathBuf>,
    /// etcd only: the private key (PEM) of --cert.
    #[arg(long)]
    key: Option<PathBuf>,
    /// etcd only: the etcd user, with --password-file.
    #[arg(long)]
    user: Option<String>,
    /// etcd only: the file holding --user's password (its line end is not part of it).
    #[arg(long)]
    password_file: Option<PathBuf>,
}

impl ElectArgs {
    /// `--prefix`, or its default.
    #[cfg(feature = "etcd")]
    fn prefix(&self) -> &str {
        self.prefix_flag.as_deref().unwrap_or("/tenure")
    }

    /// How to reach etcd: `--endpoints`, and TLS and authentication from `--cacert`, `--cert`,
    /// `--key`, `--user`, `--password-file` (their files read now).
    #[cfg(feature = "etcd")]
    fn etcd_connection(&self) -> Result<tenure_lead::etcd_connection::EtcdConnection, String> {
        use tenure_lead::etcd_connection::{EtcdConnection, EtcdTlsPem, Secret, password_of, read_file};
        let read = |flag: &str, path: &PathBuf, text: bool| {
            read_file(path, text).map_err(|why| format!("{flag} {why}"))
        };
        let mut connection =
            EtcdConnection::plain(self.endpoints.clone(), tenure_lead::backend::REQUEST_TIMEOUT);
        if let (Some(user), Some(file)) = (&self.user, &self.password_file) {
            let password = password_of(&read("--password-file", file, true)?);
            if password.0.is_empty() {
                return Err(format!("--password-file {}: the password is empty", file.display()));
            }
            connection.user = Some((user.clone(), password));
        }
        if let Some(ca) = &self.cacert {
            let identity = match (&self.cert, &self.key) {
                (Some(cert), Some(key)) => Some((
                    read("--cert", cert, false)?,
                    Secret(String::from_utf8_lossy(&read("--key", key, true)?).into_owned()),
                )),
                _ => None,
            };
            connection.tls = Some(EtcdTlsPem { ca: read("--cacert", ca, false)?, identity });
        }
        Ok(connection)
    }

    /// `--namespace`, or its default.
    #[cfg(feature = "kubernetes")]
    fn namespace(&self) -> &str {
        self.namespace_flag.as_deref().unwrap_or("default")
    }
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
    #[cfg(feature = "kubernetes")]
    if backend == Backend::Kubernetes {
        // The API server would answer 422 for each attempt: refuse before starting (exit 2).
        use tenure_kube::names;
        if !names::is_dns1123_subdomain(&args.election) {
            return Err(Refusal::BadInput(format!(
                "election `{}` is the Lease's name and {}",
                args.election,
                names::SUBDOMAIN_RULE
            )));
        }
        if !names::is_dns1123_label(args.namespace()) {
            return Err(Refusal::BadInput(format!(
                "--namespace `{}` {}",
                args.namespace(),
                names::LABEL_RULE
            )));
        }
    }
    let takes_endpoints = !matches!(backend, Backend::Noop | Backend::Embedded);
    if takes_endpoints && !kubernetes && args.endpoints.is_empty() {
        return Err(Refusal::BadInput(format!("--backend {} needs --endpoints", args.backend)));
    }
    if !takes_endpoints && !args.endpoints.is_empty() {
        return Err(Refusal::BadInput(format!(
            "--endpoints is for the etcd and kubernetes backends; --backend {} takes none",
            args.backend
        )));
    }
    for (flag, given, only) in [
        ("--prefix", args.prefix_flag.is_some(), "etcd"),
        ("--namespace", args.namespace_flag.is_some(), "kubernetes"),
        ("--cacert", args.cacert.is_some(), "etcd"),
        ("--cert", args.cert.is_some(), "etcd"),
        ("--key", args.key.is_some(), "etcd"),
        ("--user", args.user.is_some(), "etcd"),
        ("--password-file", args.password_file.is_some(), "etcd"),
    ] {
        if given && args.backend != only {
            return Err(Refusal::BadInput(format!(
                "{flag} is for the {only} backend; --backend {} takes none",
                args.backend
            )));
        }
    }
    for (flag, given, needs, present) in [
        ("--cert", args.cert.is_some(), "--key", args.key.is_some()),
        ("--key", args.key.is_some(), "--cert", args.cert.is_some()),
        ("--cert", args.cert.is_some(), "--cacert", args.cacert.is_some()),
        ("--user", args.user.is_some(), "--password-file", args.password_file.is_some()),
        ("--password-file", args.password_file.is_some(), "--user", args.user.is_some()),
    ] {
        if given && !present {
            return Err(Refusal::BadInput(format!("{flag} needs {needs}")));
        }
    }
    if backend == Backend::Noop && args.state_dir.is_some() {
        return Err(Refusal::BadInput("--state-dir: the noop backend keeps no state (always term 1)".into()));
    }
    if backend != Backend::Embedded && args.dir.is_some() {
        return Err(Refusal::BadInput(format!(
            "--dir is for the embedded backend; --backend {} takes none",
            args.backend
        )));
    }
    Ok((backend, config))
}

/// The state directory: `--state-dir`, else `$XDG_STATE_HOME/tenure`, else
/// `$HOME/.local/state/tenure` (the XDG base directory rules: a relative `XDG_STATE_HOME` is
/// ignored), made absolute against the working directory so that the path is the same however
/// the process was started.
fn state_dir(flag: Option<&std::path::Path>) -> Result<PathBuf, String> {
    let absolute =
        |p: &std::path::Path| std::path::absolute(p).map_err(|e| format!("--state-dir {}: {e}", p.display()));
    if let Some(dir) = flag {
        return absolute(dir);
    }
    let env = |name| std::env::var_os(name).map(PathBuf::from).filter(|p| p.is_absolute());
    if let Some(xdg) = env("XDG_STATE_HOME") {
        return Ok(xdg.join("tenure"));
    }
    if let Some(home) = env("HOME") {
        return Ok(home.join(".local/state/tenure"));
    }
    Err("no state directory: give --state-dir (neither XDG_STATE_HOME nor HOME is an absolute path)".into())
}

/// The durable floor of this election's term, where the backend keeps the election (`scope`).
fn memory(args: &ElectArgs, state: &std::path::Path, scope: &str) -> Result<TermMemory, BackendError> {
    TermMemory::open(state, &args.backend, scope, &args.election)
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
    // etcd's TLS and password files are read before anything starts: a bad one is bad input.
    #[cfg(feature = "etcd")]
    let etcd_connection = match backend {
        Backend::Etcd => match args.etcd_connection() {
            Ok(connection) => Some(connection),
            Err(message) => {
                eprintln!("tenure elect: {message}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        },
        _ => None,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tenure elect: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The noop backend keeps no state: one node, always term 1.
    let state = if backend == Backend::Noop {
        None
    } else {
        match state_dir(args.state_dir.as_deref()) {
            Ok(dir) => Some(dir),
            Err(message) => {
                eprintln!("tenure elect: {message}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        }
    };
    let state = state.as_deref().unwrap_or(std::path::Path::new(""));
    super::agent::init_logging(super::agent::LogFormat::Text);
    // Where the term lives and where this node's floor is, for a `TermWentBack` refusal.
    let mut term_place = String::new();
    let mut floor_file = PathBuf::new();
    let result = runtime.block_on(async {
        match backend {
            Backend::Noop => campaign(args, NoopBackend, config).await,
            Backend::Embedded => {
                let dir = match &args.dir {
                    Some(dir) => std::path::absolute(dir).map_err(|e| BackendError::Unavailable {
                        backend: "embedded",
                        message: format!("--dir {}: {e}", dir.display()),
                    })?,
                    None => state.join("elections"),
                };
                let backend = EmbeddedBackend::new(&dir, &args.election, &args.name)?;
                // The folder exists now: its canonical path names the election's place.
                let scope = std::fs::canonicalize(&dir).unwrap_or(dir);
                let memory = memory(args, state, &scope.display().to_string())?;
                term_place =
                    format!("the term file {}", scope.join(format!("{}.term", args.election)).display());
                floor_file = memory.path().to_owned();
                campaign(args, Remembering::new(backend, memory), config).await
            }
            #[cfg(feature = "etcd")]
            Backend::Etcd => {
                let prefix = args.prefix().trim_end_matches('/');
                let memory = memory(args, state, prefix)?;
                term_place = format!("the etcd key {prefix}/elections/{}/term", args.election);
                floor_file = memory.path().to_owned();
                let connection = etcd_connection.as_ref().ok_or_else(|| BackendError::Unavailable {
                    backend: "etcd",
                    message: "no connection settings".to_owned(),
                })?;
                let backend = EtcdBackend::connect_with(
                    connection,
                    args.prefix(),
                    &args.election,
                    &args.name,
                    config.lease_duration,
                )
                .await?;
                campaign(args, Remembering::new(backend, memory), config).await
            }
            #[cfg(feature = "kubernetes")]
            Backend::Kubernetes => {
                let setup = |e: tenure_kube::SetupError| BackendError::Unavailable {
                    backend: "kubernetes",
                    message: tenure_lead::backend::with_causes(&e),
                };
                // A URL (its path kept), else the kubeconfig or in-cluster account, as kubectl.
                let client = match args.endpoints.first() {
                    Some(url) => tenure_kube::client_for_url(url),
                    None => tenure_kube::client_inferred().await,
                }
                .map_err(setup)?;
                let backend = tenure_kube::KubernetesBackend::new(
                    client,
                    args.namespace(),
                    &args.election,
                    &args.name,
                    config.lease_duration,
                )
                .map_err(setup)?
                .with_renew_deadline(config.renew_deadline);
                let memory = memory(args, state, args.namespace())?;
                term_place = format!(
                    "the annotation {} of Lease {}/{}",
                    tenure_kube::TERM_ANNOTATION,
                    args.namespace(),
                    args.election
                );
                floor_file = memory.path().to_owned();
                campaign(args, Remembering::new(backend, memory), config).await
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ BackendError::TermWentBack { seen, .. }) => {
            eprintln!(
                "tenure elect: {e}; restore {term_place} to at least {seen}, or, if the reset is intended and every fenced sink's mark is reset too, remove {}",
                floor_file.display()
            );
            ExitCode::FAILURE
        }
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
    let listener = match args.metrics_listen {
        Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            BackendError::Unavailable { backend: "metrics", message: format!("--metrics-listen {addr}: {e}") }
        })?),
        None => None,
    };
    // The initial state, before the elector can change it.
    let mut printed = LeaderState::following();
    let mut stdout_open = print(args, printed.leader, printed.epoch.map(|e| e.get()));
    let shutdown = CancellationToken::new();
    let backend_name = backend.name();
    let (handle, task) = elector::spawn(backend, config, shutdown.clone());
    if let Some(listener) = listener {
        tokio::spawn(serve_metrics(
            listener,
            args.election.clone(),
            backend_name,
            handle.clone(),
            shutdown.clone(),
        ));
    }
    let mut changes = handle.watch();
    // Marked changed: a change published before this watch existed is reported too.
    changes.mark_changed();
    let reader_gone = stdout_reader_gone();
    tokio::pin!(reader_gone);
    while stdout_open {
        tokio::select! {
            () = &mut reader_gone => stdout_open = false,
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

/// Resolves when the reader of stdout has gone away — the read end of a pipe closed, which the
/// kernel reports on the write end as an error — so that a leader whose consumer died steps down
/// and releases at once instead of at its next printed line (which may never come). Pending
/// forever when stdout cannot lose its reader (a regular file, a terminal until it hangs up).
///
/// A thread blocks in `poll(2)` on fd 1 asking for no event: only an error or hang-up wakes it.
/// (tokio's `AsyncFd` would do it without a thread, but its safe constructors are deprecated as
/// unsound and the others need `unsafe`.) The thread is detached: it ends with the process.
fn stdout_reader_gone() -> impl std::future::Future<Output = ()> {
    use rustix::event::{PollFd, PollFlags, poll};
    let (gone, watched) = tokio::sync::oneshot::channel::<()>();
    let watcher = std::thread::Builder::new().name("stdout-watch".into()).spawn(move || {
        let stdout = std::io::stdout();
        let mut fds = [PollFd::new(&stdout, PollFlags::empty())];
        loop {
            match poll(&mut fds, None) {
                Ok(_) if fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP | PollFlags::NVAL) => {
                    let _ = gone.send(());
                    return;
                }
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                // Cannot watch: never report the reader gone (a failed print still ends it).
                Err(_) => return,
            }
        }
    });
    async move {
        if watcher.is_ok() && watched.await.is_ok() {
            return;
        }
        std::future::pending::<()>().await;
    }
}

/// `GET /metrics`: the election's families (see [`crate::metrics::encode_election`]), until
/// `shutdown`.
async fn serve_metrics(
    listener: tokio::net::TcpListener,
    election: String,
    backend: &'static str,
    handle: tenure_lead::LeadershipHandle,
    shutdown: CancellationToken,
) {
    let scrape = move || {
        let text = crate::metrics::encode_election(&election, backend, handle.state(), handle.stats());
        std::future::ready(([(http::header::CONTENT_TYPE, crate::metrics::METRICS_CONTENT_TYPE)], text))
    };
    let router = axum::Router::new().route("/metrics", axum::routing::get(scrape));
    let served = axum::serve(listener, router).with_graceful_shutdown(shutdown.cancelled_owned()).await;
    if let Err(error) = served {
        tracing::warn!(%error, "the metrics listener stopped");
    }
}
