//! `tenure elect` as an operator uses it: one JSON line per change, SIGTERM steps down and
//! releases, SIGKILL leaves the lease to expire, and the next contender takes over with the next
//! epoch — on the embedded backend, on a real 3-member etcd cluster (cargo feature `etcd`) and
//! against the Lease API double (cargo feature `kubernetes`). A build without one of those
//! features refuses its backend in one line, exit 3.
//!
//! Over 600 lines: one rig (`tenure elect` processes against each backend), many cases; a second
//! binary would cost a link.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::Value;

#[cfg(feature = "etcd")]
#[path = "../../tenure-lead/tests/support/etcd_cluster.rs"]
mod etcd_cluster;

#[cfg(feature = "etcd")]
use etcd_cluster::Cluster;

/// Failovers here are driven by a release (SIGTERM) or the kernel dropping a lock (SIGKILL), never
/// by expiry: the lease outlasts any stall of a loaded machine, so a leader never loses it and
/// takes it again (which would skip an epoch).
const FAST: [&str; 6] = ["--lease-duration", "4s", "--renew-deadline", "2s", "--retry-period", "200ms"];
/// Bounds waiting for a contender to exit and for its last lines, so that a bug fails the test.
const EXIT_TIMEOUT: Duration = Duration::from_secs(30);

struct Contender {
    child: Child,
    lines: Receiver<Value>,
}

/// A state directory of its own for each contender that does not name one: no test reads or
/// raises the term floor of another (nor the runner's `~/.local/state`).
fn fresh_state() -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    temp(&format!("state-{}", NEXT.fetch_add(1, Ordering::SeqCst)))
}

impl Contender {
    fn start(args: &[&str]) -> Self {
        Self::start_in(&fresh_state(), args)
    }

    /// Starts a contender whose `XDG_STATE_HOME` is `state` (so its state directory is
    /// `state/tenure`).
    fn start_in(state: &Path, args: &[&str]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tenure"));
        command.arg("elect").args(args).args(FAST).env("XDG_STATE_HOME", state);
        Self::spawn(command)
    }

    /// Runs `command` (a `tenure elect` with its arguments and environment), reading its lines.
    fn spawn(mut command: Command) -> Self {
        let mut child =
            command.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("run tenure elect");
        let stdout = child.stdout.take().expect("piped");
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let value: Value = serde_json::from_str(&line).expect("every line is JSON");
                if send.send(value).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    /// The next line, within `timeout`.
    fn next(&self, timeout: Duration) -> Option<Value> {
        self.lines.recv_timeout(timeout).ok()
    }

    /// Waits for a line with `leader == want`.
    fn until(&self, want: bool, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        while let Some(line) = self.next(deadline.saturating_duration_since(Instant::now())) {
            if line["leader"] == want {
                return line;
            }
        }
        panic!("no line with leader={want} within {timeout:?}");
    }

    fn signal(&self, signal: &str) {
        let status =
            Command::new("kill").args([signal, &self.child.id().to_string()]).status().expect("kill");
        assert!(status.success());
    }

    /// Waits for the exit, then for every line up to the end of its output.
    fn wait(mut self) -> (i32, Vec<Value>) {
        let deadline = Instant::now() + EXIT_TIMEOUT;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            assert!(Instant::now() < deadline, "tenure elect did not exit within {EXIT_TIMEOUT:?}");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut rest = Vec::new();
        // The reader thread drops its sender at the end of the output.
        loop {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => rest.push(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => panic!("the output did not end within {EXIT_TIMEOUT:?}"),
            }
        }
        (status.code().unwrap_or(-1), rest)
    }
}

impl Drop for Contender {
    /// A failed test leaves no contender running (nor holding the test runner's stderr open).
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn temp(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tenure-elect-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn noop_leads_at_epoch_one_and_sigterm_steps_down() {
    let c = Contender::start(&["e", "--name", "solo", "--backend", "noop"]);
    let first = c.next(Duration::from_secs(5)).expect("initial line");
    assert_eq!(first, serde_json::json!({"election": "e", "name": "solo", "leader": false, "epoch": null}));
    let leading = c.until(true, Duration::from_secs(5));
    assert_eq!(leading["epoch"], 1);
    c.signal("-TERM");
    let (code, rest) = c.wait();
    assert_eq!(code, 0);
    assert_eq!(
        rest.last().map(|l| l["leader"].clone()),
        Some(Value::Bool(false)),
        "the step-down is printed"
    );
}

#[test]
fn embedded_failover_after_sigkill_takes_the_next_epoch() {
    let dir = temp("embedded");
    let d = dir.to_str().expect("utf-8");
    let a = Contender::start(&["e", "--name", "a", "--backend", "embedded", "--dir", d]);
    assert_eq!(a.until(true, Duration::from_secs(5))["epoch"], 1);
    let b = Contender::start(&["e", "--name", "b", "--backend", "embedded", "--dir", d]);
    assert_eq!(b.next(Duration::from_secs(5)).expect("initial")["leader"], false);
    assert!(b.next(Duration::from_millis(800)).is_none(), "b follows while a holds the lock");
    a.signal("-KILL");
    assert_eq!(b.until(true, Duration::from_secs(5))["epoch"], 2);
    b.signal("-TERM");
    assert_eq!(b.wait().0, 0);
    let _ = a.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sighup_and_sigquit_step_down_and_release_like_sigterm() {
    for signal in ["-HUP", "-QUIT"] {
        let c = Contender::start(&["e", "--name", "solo", "--backend", "noop"]);
        assert_eq!(c.until(true, Duration::from_secs(5))["epoch"], 1);
        c.signal(signal);
        let (code, rest) = c.wait();
        assert_eq!(code, 0, "{signal}: step down, release, exit 0");
        assert_eq!(rest.last().map(|l| l["leader"].clone()), Some(Value::Bool(false)), "{signal}");
    }
}

#[test]
fn a_closed_stdout_ends_the_campaign_cleanly() {
    let dir = temp("closed-stdout");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["elect", "e", "--name", "a", "--backend", "embedded", "--dir"])
        .arg(&dir)
        .args(FAST)
        .env("XDG_STATE_HOME", fresh_state())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tenure elect");
    // The reader goes away after the first line. Whether the contender leads before it notices
    // (its next line then meets a closed pipe) or notices first (it never leads) depends on the
    // machine's load: the test asserts what each order leaves behind, never one order.
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).expect("the initial line");
    drop(stdout);
    let deadline = Instant::now() + EXIT_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "tenure elect kept running with its stdout closed");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("piped"), &mut stderr).expect("stderr");
    assert_eq!(status.code(), Some(0), "a clean exit: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // The term it reached, if it led at all (the election's term file; none: it never led).
    let reached = match std::fs::read_to_string(dir.join("e.term")) {
        Ok(text) => text.trim().parse::<u64>().expect("a term counter"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => panic!("the term file: {e}"),
    };
    assert!(reached <= 1, "one campaign takes at most term 1, got {reached}");
    // It released: another contender takes the lease with the next term (the embedded lease is
    // an OS lock with no expiry, so the bound is only for a new process and its fsync'd term
    // write on a loaded disk).
    let b_dir = dir.to_str().expect("utf-8").to_owned();
    let b = Contender::start(&["e", "--name", "b", "--backend", "embedded", "--dir", &b_dir]);
    assert_eq!(b.until(true, Duration::from_secs(10))["epoch"], reached + 1);
    b.signal("-TERM");
    assert_eq!(b.wait().0, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `tenure elect` with `env` until it exits on its own (bounded): exit code, stdout,
/// stderr.
fn run_to_exit(env: &[(&str, &Path)], args: &[&str]) -> (Option<i32>, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tenure"));
    command.arg("elect").args(args).args(FAST).env_remove("XDG_STATE_HOME").env_remove("HOME");
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run tenure elect");
    let deadline = Instant::now() + EXIT_TIMEOUT;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("tenure elect {args:?} did not exit within {EXIT_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Leads once in `state` and steps down on SIGTERM; returns the epoch.
fn lead_once(state: &Path, args: &[&str]) -> u64 {
    let c = Contender::start_in(state, args);
    let epoch = c.until(true, Duration::from_secs(10))["epoch"].as_u64().expect("epoch");
    c.signal("-TERM");
    assert_eq!(c.wait().0, 0);
    epoch
}

#[test]
fn a_restarted_contender_refuses_a_term_file_restored_from_a_backup() {
    let state = temp("restored-state");
    let dir = temp("restored-dir");
    let d = dir.to_str().expect("utf-8");
    let args = ["e", "--name", "a", "--backend", "embedded", "--dir", d];
    assert_eq!(lead_once(&state, &args), 1);
    assert_eq!(lead_once(&state, &args), 2);
    // The election's folder is restored from a backup taken at term 1.
    std::fs::write(dir.join("e.term"), "1\n").expect("restore");
    let (code, stdout, stderr) = run_to_exit(&[("XDG_STATE_HOME", &state)], &args);
    assert_eq!(code, Some(1), "refused: {stderr}");
    assert!(!stdout.contains("\"leader\":true"), "it never led: {stdout}");
    let refusals: Vec<&str> = stderr.lines().filter(|l| !l.contains(" INFO ")).collect();
    assert_eq!(refusals.len(), 1, "one line: {stderr}");
    let last = refusals[0];
    assert!(last.starts_with("tenure elect: embedded: term went back from 2 to 1;"), "{stderr}");
    let term_file = dir.canonicalize().expect("canonical").join("e.term");
    assert!(last.contains(&format!("restore the term file {} to at least 2", term_file.display())), "{last}");
    let floor = state.join("tenure/terms");
    assert!(
        last.contains(&format!("remove {}/embedded-e-", floor.display())),
        "names the floor file: {last}"
    );
    assert_eq!(std::fs::read_to_string(dir.join("e.term")).expect("read"), "1\n", "nothing written");
    let _ = std::fs::remove_dir_all(&state);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_default_state_and_election_folders_are_under_home_whatever_the_working_directory() {
    let home = temp("home");
    let args = ["e", "--name", "a", "--backend", "embedded"];
    let start = |cwd: &Path| {
        std::fs::create_dir_all(cwd).expect("mkdir");
        let mut command = Command::new(env!("CARGO_BIN_EXE_tenure"));
        command
            .arg("elect")
            .args(args)
            .args(FAST)
            .env_remove("XDG_STATE_HOME")
            .env("HOME", &home)
            .current_dir(cwd);
        Contender::spawn(command)
    };
    // Two contenders started from two folders contend for one lease (a relative default would
    // have given each its own, and both would lead at term 1).
    let a = start(&home.join("one"));
    assert_eq!(a.until(true, Duration::from_secs(10))["epoch"], 1);
    let b = start(&home.join("two"));
    assert_eq!(b.next(Duration::from_secs(10)).expect("initial")["leader"], false);
    a.signal("-TERM");
    assert_eq!(a.wait().0, 0);
    assert_eq!(b.until(true, Duration::from_secs(10))["epoch"], 2);
    b.signal("-TERM");
    assert_eq!(b.wait().0, 0);
    let state = home.join(".local/state/tenure");
    assert!(state.join("elections/e.term").is_file(), "the election folder is STATE/elections");
    let terms: Vec<_> = std::fs::read_dir(state.join("terms"))
        .expect("the term memory folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".term"))
        .collect();
    assert_eq!(terms.len(), 1, "one floor for the one election: {terms:?}");
    assert!(terms[0].starts_with("embedded-e-"), "{terms:?}");
    let floor = std::fs::read_to_string(state.join("terms").join(&terms[0])).expect("read");
    assert!(floor.starts_with("2\n"), "{floor}");
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn bad_state_and_backend_arguments_are_refused_in_one_line() {
    let (code, stdout, stderr) = run_to_exit(&[], &["e", "--name", "a", "--backend", "embedded"]);
    assert_eq!((code, stdout.as_str()), (Some(2), ""), "{stderr}");
    assert_eq!(
        stderr,
        "tenure elect: no state directory: give --state-dir (neither XDG_STATE_HOME nor HOME is an absolute path)\n"
    );
    let cases: [(&[&str], &str); 6] = [
        (
            &["--backend", "noop", "--prefix", "/x"],
            "tenure elect: --prefix is for the etcd backend; --backend noop takes none\n",
        ),
        (
            &["--backend", "embedded", "--namespace", "ops"],
            "tenure elect: --namespace is for the kubernetes backend; --backend embedded takes none\n",
        ),
        (
            &["--backend", "noop", "--state-dir", "/tmp/x"],
            "tenure elect: --state-dir: the noop backend keeps no state (always term 1)\n",
        ),
        (
            &["--backend", "embedded", "--endpoints", "http://127.0.0.1:2379"],
            "tenure elect: --endpoints is for the etcd and kubernetes backends; --backend embedded takes none\n",
        ),
        (
            &["--backend", "noop", "--endpoints", "http://127.0.0.1:2379"],
            "tenure elect: --endpoints is for the etcd and kubernetes backends; --backend noop takes none\n",
        ),
        (
            &["--backend", "noop", "--dir", "/tmp/x"],
            "tenure elect: --dir is for the embedded backend; --backend noop takes none\n",
        ),
    ];
    for (extra, want) in cases {
        let mut args = vec!["e", "--name", "a"];
        args.extend_from_slice(extra);
        let (code, stdout, stderr) = run_to_exit(&[], &args);
        assert_eq!((code, stdout.as_str(), stderr.as_str()), (Some(2), "", want), "{extra:?}");
    }
}

/// Starts `tenure elect ARGS` with `XDG_STATE_HOME=state` and returns its first `count` warn
/// lines on stderr (bounded wait), then kills it.
fn warn_lines(state: &Path, args: &[&str], count: usize) -> Vec<String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .arg("elect")
        .args(args)
        .args(FAST)
        .env("XDG_STATE_HOME", state)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run");
    let stderr = child.stderr.take().expect("piped");
    let (send, lines) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if send.send(line).is_err() {
                break;
            }
        }
    });
    let mut warned = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while warned.len() < count {
        let Ok(line) = lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) else {
            let _ = child.kill();
            panic!("fewer than {count} warn lines within 15 s: {warned:#?}");
        };
        if line.contains("WARN") {
            warned.push(line);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    warned
}

#[test]
fn every_backend_error_is_logged_at_warn_with_its_cause() {
    let state = temp("warn-state");
    let dir = temp("warn-dir");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("e.term"), "garbage\n").expect("corrupt");
    let d = dir.to_str().expect("utf-8");
    let warned = warn_lines(&state, &["e", "--name", "a", "--backend", "embedded", "--dir", d], 2);
    for line in &warned {
        assert!(line.contains("acquire or renew failed"), "{line}");
        assert!(line.contains("e.term: not a term counter"), "the cause: {line}");
        assert!(!line.contains('\u{1b}'), "no colour codes off a terminal: {line:?}");
    }
    let _ = std::fs::remove_dir_all(&state);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An unreachable API server is logged with the reason under kube's "client error (Connect)";
/// and `https://` gets as far as connecting: the build has a TLS stack.
#[cfg(feature = "kubernetes")]
#[test]
fn an_unreachable_api_server_is_logged_with_its_cause_over_http_and_https() {
    let state = temp("kube-unreachable");
    let closed =
        std::net::TcpListener::bind("127.0.0.1:0").expect("a port").local_addr().expect("addr").port();
    for scheme in ["http", "https"] {
        let url = format!("{scheme}://127.0.0.1:{closed}");
        let warned =
            warn_lines(&state, &["e", "--name", "a", "--backend", "kubernetes", "--endpoints", &url], 1);
        let line = &warned[0];
        assert!(line.contains("acquire or renew failed"), "{line}");
        assert!(line.contains("Connection refused"), "the cause ({scheme}): {line}");
        assert!(!line.contains("TLS required"), "a TLS stack is built in: {line}");
    }
    let _ = std::fs::remove_dir_all(&state);
}

#[test]
fn the_election_metrics_follow_the_leadership() {
    let port =
        std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("addr").port();
    let listen = format!("127.0.0.1:{port}");
    let c = Contender::start(&["e", "--name", "solo", "--backend", "noop", "--metrics-listen", &listen]);
    assert_eq!(c.until(true, Duration::from_secs(5))["epoch"], 1);
    let scrape = || {
        use std::io::{Read as _, Write as _};
        let mut stream = std::net::TcpStream::connect(&listen).expect("the metrics listener");
        stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").expect("request");
        let mut text = String::new();
        stream.read_to_string(&mut text).expect("response");
        text
    };
    let text = scrape();
    let labels = "{election=\"e\",backend=\"noop\"}";
    for line in [
        format!("tenure_leader_is_leader{labels} 1"),
        format!("tenure_leader_term{labels} 1"),
        format!("tenure_leader_transitions_total{labels} 1"),
        format!("tenure_leader_failed_attempts_total{labels} 0"),
        format!("tenure_leader_highest_term_seen{labels} 1"),
    ] {
        assert!(text.lines().any(|l| l == line), "missing `{line}` in:\n{text}");
    }
    let renewed = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("tenure_leader_last_renewal_timestamp_seconds{labels} ")))
        .and_then(|v| v.parse::<f64>().ok())
        .expect("the last renewal");
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs_f64();
    assert!((now - renewed).abs() < 60.0, "a recent renewal: {renewed} vs {now}");
    c.signal("-TERM");
    assert_eq!(c.wait().0, 0);
}

/// A leader whose reader dies while nothing changes steps down and releases at once (not at its
/// next line, which may never come): the next contender takes over well before the lease expires.
#[test]
fn a_leader_whose_reader_goes_away_releases_at_once() {
    let dir = temp("reader-gone");
    let d = dir.to_str().expect("utf-8").to_owned();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["elect", "e", "--name", "a", "--backend", "embedded", "--dir", &d])
        .args(FAST)
        .env("XDG_STATE_HOME", fresh_state())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run tenure elect");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    while !line.contains("\"leader\":true") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut stdout, &mut line).expect("a line") > 0, "output ended");
    }
    let b = Contender::start(&["e", "--name", "b", "--backend", "embedded", "--dir", &d]);
    assert_eq!(b.next(Duration::from_secs(5)).expect("initial")["leader"], false);
    // The consumer dies; a leads on, printing nothing new.
    drop(stdout);
    let deadline = Instant::now() + Duration::from_secs(3);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "a kept leading for 3 s with nobody reading");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    // The embedded lease is an OS lock: it has no expiry to wait out, so what this bounds is only
    // b's next attempt and its fsync'd term write, which a loaded disk can make slow (2 s failed
    // once in CI while etcd clusters of other tests were starting). a's prompt exit is the point,
    // checked above.
    assert_eq!(b.until(true, Duration::from_secs(10))["epoch"], 2, "a released; b took the next term");
    b.signal("-TERM");
    assert_eq!(b.wait().0, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_failover_after_sigterm_on_a_real_cluster() {
    let cluster = Cluster::start("elect", 24700);
    let endpoints = cluster.endpoints.join(",");
    let args = |name: &'static str| {
        ["e", "--name", name, "--backend", "etcd", "--endpoints", &endpoints].map(str::to_owned)
    };
    let a_args = args("a");
    let a = Contender::start(&a_args.iter().map(String::as_str).collect::<Vec<_>>());
    let a_epoch = a.until(true, Duration::from_secs(10))["epoch"].as_u64().expect("epoch");
    let b_args = args("b");
    let b = Contender::start(&b_args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(b.next(Duration::from_secs(10)).expect("initial")["leader"], false);
    a.signal("-TERM");
    let (code, _) = a.wait();
    assert_eq!(code, 0, "SIGTERM: step down, release, exit 0");
    assert_eq!(b.until(true, Duration::from_secs(10))["epoch"].as_u64(), Some(a_epoch + 1));
    b.signal("-TERM");
    assert_eq!(b.wait().0, 0);
}

#[cfg(feature = "etcd")]
#[test]
fn a_restarted_contender_refuses_a_wiped_etcd_prefix_naming_both_terms() {
    let cluster = Cluster::start("wiped", 24800);
    let endpoints = cluster.endpoints.join(",");
    let state = temp("wiped-state");
    let args = ["e", "--name", "a", "--backend", "etcd", "--endpoints", &endpoints];
    assert_eq!(lead_once(&state, &args), 1);
    assert_eq!(lead_once(&state, &args), 2);
    // The prefix is wiped (an etcd restored from an old snapshot, or a careless `del --prefix`).
    let wiped = Command::new("etcdctl")
        .args(["--endpoints", &endpoints, "del", "--prefix", "/tenure/"])
        .env("ETCDCTL_API", "3")
        .output()
        .expect("run etcdctl (scripts/install-deps installs it)");
    assert!(wiped.status.success(), "{}", String::from_utf8_lossy(&wiped.stderr));
    let (code, stdout, stderr) = run_to_exit(&[("XDG_STATE_HOME", &state)], &args);
    assert_eq!(code, Some(1), "refused: {stderr}");
    assert!(!stdout.contains("\"leader\":true"), "it never led: {stdout}");
    let refusals: Vec<&str> = stderr.lines().filter(|l| !l.contains(" INFO ")).collect();
    assert_eq!(refusals.len(), 1, "one line: {stderr}");
    assert!(refusals[0].starts_with("tenure elect: etcd: term went back from 2 to 0;"), "{stderr}");
    assert!(refusals[0].contains("restore the etcd key /tenure/elections/e/term to at least 2"), "{stderr}");
    // Another node, which never saw the old terms, may take term 1: that is what the floor of
    // each node is for, and why the docs tell operators to restore the term, not to wipe.
    let _ = std::fs::remove_dir_all(&state);
}

#[cfg(feature = "kubernetes")]
#[test]
fn kubernetes_names_the_api_server_would_refuse_exit_2_before_connecting() {
    let state = temp("kube-names");
    let endpoint = "http://127.0.0.1:1";
    let base = |election: &'static str, namespace: &'static str| {
        [
            election,
            "--name",
            "a",
            "--backend",
            "kubernetes",
            "--endpoints",
            endpoint,
            "--namespace",
            namespace,
        ]
    };
    for (args, want) in [
        (
            base("Bad_Name", "ops"),
            "tenure elect: election `Bad_Name` is the Lease's name and must be a DNS-1123 subdomain",
        ),
        (base("vip", "Ops"), "tenure elect: --namespace `Ops` must be a DNS-1123 label"),
    ] {
        let (code, stdout, stderr) = run_to_exit(&[("XDG_STATE_HOME", &state)], &args);
        assert_eq!((code, stdout.as_str()), (Some(2), ""), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with(want), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&state);
}

#[cfg(feature = "kubernetes")]
#[test]
fn kubernetes_failover_against_the_lease_api_double() {
    // No API server can run here: the Lease API double enforces resourceVersion like one.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let double = runtime.block_on(tenure_kube::double::LeaseApiDouble::start()).expect("double starts");
    let url = double.url();
    let args = |name: &'static str| {
        ["e", "--name", name, "--backend", "kubernetes", "--endpoints", url.as_str(), "--namespace", "ops"]
            .map(str::to_owned)
    };
    let a_args = args("a");
    let a = Contender::start(&a_args.iter().map(String::as_str).collect::<Vec<_>>());
    let a_epoch = a.until(true, Duration::from_secs(10))["epoch"].as_u64().expect("epoch");
    assert_eq!(a_epoch, 1);
    let b_args = args("b");
    let b = Contender::start(&b_args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(b.next(Duration::from_secs(10)).expect("initial")["leader"], false);
    a.signal("-TERM");
    assert_eq!(a.wait().0, 0, "SIGTERM: step down, release, exit 0");
    assert_eq!(b.until(true, Duration::from_secs(10))["epoch"].as_u64(), Some(2));
    b.signal("-TERM");
    assert_eq!(b.wait().0, 0);
    drop(double);
}

#[cfg(feature = "kubernetes")]
#[test]
fn kubernetes_without_endpoints_finds_the_cluster_in_the_kubeconfig() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let double = runtime.block_on(tenure_kube::double::LeaseApiDouble::start()).expect("double starts");
    let dir = temp("kubeconfig");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let kubeconfig = dir.join("config");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: double\n  cluster: {{server: \"{}\"}}\n\
         users:\n- name: nobody\n  user: {{}}\ncontexts:\n- name: here\n  context: {{cluster: double, user: nobody}}\n\
         current-context: here\n",
        double.url()
    );
    std::fs::write(&kubeconfig, text).expect("kubeconfig written");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["elect", "e", "--name", "a", "--backend", "kubernetes", "--namespace", "ops"])
        .args(FAST)
        .env("KUBECONFIG", &kubeconfig)
        .env("XDG_STATE_HOME", fresh_state())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run tenure elect");
    let stdout = child.stdout.take().expect("piped");
    let (send, lines) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if send.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let led =
        std::iter::from_fn(|| lines.recv_timeout(deadline.saturating_duration_since(Instant::now())).ok())
            .map(|line| serde_json::from_str::<Value>(&line).expect("every line is JSON"))
            .find(|line| line["leader"] == true);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(led.expect("leads through the kubeconfig's server")["epoch"].as_u64(), Some(1));
    let lease = double.lease("ops", "e").expect("the Lease was created in the namespace given");
    assert_eq!(lease.spec.and_then(|s| s.holder_identity).as_deref(), Some("a"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(feature = "kubernetes")]
#[test]
fn kubernetes_refuses_more_than_one_endpoint_in_one_line() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["elect", "e", "--name", "a", "--backend", "kubernetes"])
        .args(["--endpoints", "http://127.0.0.1:1,http://127.0.0.1:2"])
        .env("XDG_STATE_HOME", fresh_state())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tenure elect");
    // Bounded: a build that accepted the URLs would campaign forever.
    let deadline = Instant::now() + EXIT_TIMEOUT;
    while child.try_wait().expect("waitable").is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let output = child.wait_with_output().expect("its output");
    assert_eq!(output.status.code(), Some(2), "bad input, refused at once");
    assert!(output.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "tenure elect: --backend kubernetes takes one --endpoints URL (the API server), got 2\n"
    );
}

/// Runs `tenure elect` on a backend this build left out: it must refuse at once, before
/// connecting anywhere (the endpoint is a closed port), with one line naming the feature.
#[cfg(any(not(feature = "etcd"), not(feature = "kubernetes")))]
fn refused_backend(backend: &str) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["elect", "e", "--name", "a", "--backend", backend, "--endpoints", "http://127.0.0.1:1"])
        .output()
        .expect("run tenure elect");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[cfg(not(feature = "etcd"))]
#[test]
fn a_build_without_etcd_refuses_the_etcd_backend_in_one_line() {
    let (code, stdout, stderr) = refused_backend("etcd");
    assert_eq!(code, Some(3), "EXIT_NOT_BUILT; stderr: {stderr}");
    assert_eq!(stdout, "", "no state line: it never campaigned");
    assert_eq!(stderr, "tenure elect: this build has no etcd backend; rebuild with --features etcd\n");
}

#[cfg(not(feature = "kubernetes"))]
#[test]
fn a_build_without_kubernetes_refuses_the_kubernetes_backend_in_one_line() {
    let (code, stdout, stderr) = refused_backend("kubernetes");
    assert_eq!(code, Some(3), "EXIT_NOT_BUILT; stderr: {stderr}");
    assert_eq!(stdout, "", "no state line: it never campaigned");
    assert_eq!(
        stderr,
        "tenure elect: this build has no kubernetes backend; rebuild with --features kubernetes\n"
    );
}

/// etcd's TLS and authentication flags: each mistake is one line and exit 2, before connecting
/// (the endpoint is a closed port), and a flag for another backend is refused by name.
#[cfg(feature = "etcd")]
#[test]
fn etcd_tls_and_password_flags_are_checked_before_connecting() {
    let dir = std::env::temp_dir().join(format!("tenure-elect-tls-flags-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let empty = dir.join("empty-password");
    std::fs::write(&empty, "\n").expect("write");
    let missing = dir.join("missing.pem");
    let (d, e, m) = (dir.display(), empty.display(), missing.display());
    let etcd = ["elect", "e", "--name", "a", "--backend", "etcd", "--endpoints", "https://127.0.0.1:1"];
    let cases: Vec<(Vec<String>, String)> = vec![
        (vec!["--cert".into(), format!("{d}/c.pem")], "--cert needs --key".into()),
        (vec!["--key".into(), format!("{d}/k.pem")], "--key needs --cert".into()),
        (
            vec!["--cert".into(), format!("{d}/c.pem"), "--key".into(), format!("{d}/k.pem")],
            "--cert needs --cacert".into(),
        ),
        (vec!["--user".into(), "u".into()], "--user needs --password-file".into()),
        (vec!["--password-file".into(), e.to_string()], "--password-file needs --user".into()),
        (
            vec!["--user".into(), "u".into(), "--password-file".into(), e.to_string()],
            format!("--password-file {e}: the password is empty"),
        ),
        (vec!["--cacert".into(), m.to_string()], format!("--cacert {m}: cannot read: ")),
    ];
    for (flags, expected) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
            .args(etcd)
            .args(&flags)
            .env("XDG_STATE_HOME", &dir)
            .output()
            .expect("run tenure elect");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{flags:?}");
        assert_eq!(stderr.lines().count(), 1, "{flags:?}: {stderr}");
        assert!(stderr.starts_with(&format!("tenure elect: {expected}")), "{flags:?}: {stderr}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["elect", "e", "--name", "a", "--backend", "embedded", "--user", "u"])
        .env("XDG_STATE_HOME", &dir)
        .output()
        .expect("run tenure elect");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "tenure elect: --user is for the etcd backend; --backend embedded takes none\n"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
