//! Shared support of the tests that run `tenure agent` as a real process: a temporary directory
//! with a config, a running agent, a tiny HTTP/1.1 client on loopback, and the bounded waits of
//! `support/wait.rs`.

#![allow(dead_code, missing_docs)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[path = "../support/wait.rs"]
mod wait;
#[allow(unused_imports)] // each test binary uses some
pub use wait::{WAIT_MAX, stays_for, wait_for, wait_for_within};

/// The API token the tests configure.
pub const TOKEN: &str = "test-token-0123456789";

/// A unique temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("tenure-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("temp dir");
        Self(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A free loopback port (bound, then released for the agent to bind).
pub fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}

/// A pool file with `addresses` for `members` on provider `provider`.
pub fn pool_yaml(name: &str, addresses: &[&str], members: &[&str], provider: &str, extra: &str) -> String {
    format!(
        "apiVersion: tenure.dev/v1alpha1\nkind: MobilityPool\nmetadata: {{name: {name}}}\nspec:\n  addresses: [{}]\n  provider: {provider}\n  placementGroup: g1\n  members: [{}]\n  heartbeatTTL: 60s\n  promotionHold: 0s\n  deprovisionHoldDuration: 0s\n{extra}",
        addresses.join(", "),
        members.join(", "),
    )
}

/// Nodes a (priority 10) and b, NICs eni-a and eni-b, on provider PROVIDER (replaced).
pub const NODES: &str = "nodes:\n  - {name: a, provider: PROVIDER, placementGroup: g1, nic: eni-a, priority: 10}\n  - {name: b, provider: PROVIDER, placementGroup: g1, nic: eni-b}\n";

/// Writes `agent.yaml` for nodes a (priority 10) and b on `provider` with `providers` and pool files.
pub fn agent_config(
    dir: &TempDir,
    listen: std::net::SocketAddr,
    provider: &str,
    providers: &str,
    pools: &[&str],
) -> std::path::PathBuf {
    agent_config_on(dir, listen, provider, providers, pools, ("eni-a", "eni-b"))
}

/// [`agent_config`] with a's and b's NICs `nics` (YAML scalars, as written) for eni-a and eni-b.
pub fn agent_config_on(
    dir: &TempDir,
    listen: std::net::SocketAddr,
    provider: &str,
    providers: &str,
    pools: &[&str],
    nics: (&str, &str),
) -> std::path::PathBuf {
    dir.write("token", &format!("{TOKEN}\n"));
    let nodes = NODES
        .replace("PROVIDER", provider)
        .replace("nic: eni-a,", &format!("nic: {},", nics.0))
        .replace("nic: eni-b}", &format!("nic: {}}}", nics.1));
    let text = format!(
        "{nodes}store: {{kind: embedded, path: ./store}}\nidentityFile: ./agent.identity\nproviders: {providers}\npools: [{}]\nlisten: {listen}\nheartbeatInterval: 100ms\nrequeueInterval: 200ms\nactionTimeout: 10s\napiTokenFile: ./token\n",
        pools.join(", "),
    );
    dir.write("agent.yaml", &text)
}

/// A running `tenure agent`.
pub struct Agent {
    pub child: Child,
    pub listen: SocketAddr,
    pub stderr: PathBuf,
}

impl Agent {
    /// Starts the agent on `config` (whose `listen` is `listen`) and waits for a 200 health.
    pub fn start(dir: &TempDir, config: &Path, listen: SocketAddr) -> Self {
        let agent = Self::spawn(dir, config, listen);
        agent.wait_healthy();
        agent
    }

    /// Starts the agent without waiting.
    pub fn spawn(dir: &TempDir, config: &Path, listen: SocketAddr) -> Self {
        Self::spawn_wrapped(dir, config, listen, &[], &[])
    }

    /// Starts the agent under `wrapper` (a program and its arguments, like `faketime -f +10s`),
    /// with `env` added, without waiting.
    pub fn spawn_wrapped(
        dir: &TempDir,
        config: &Path,
        listen: SocketAddr,
        wrapper: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let stderr = dir.path().join(format!(
            "agent-{}.log",
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
        ));
        let log = std::fs::File::create(&stderr).expect("log file");
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(env!("CARGO_BIN_EXE_tenure"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_tenure")),
        };
        let child = command
            .envs(env.iter().copied())
            .arg("agent")
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("tenure agent starts");
        Self { child, listen, stderr }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    pub fn wait_healthy(&self) {
        let deadline = Instant::now() + WAIT_MAX;
        loop {
            if let Ok((200, _)) = http(self.listen, "GET", "/v1/health", None, None) {
                return;
            }
            assert!(Instant::now() < deadline, "agent not healthy within {WAIT_MAX:?}; log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn get(&self, path: &str) -> serde_json::Value {
        let (status, body) = http(self.listen, "GET", path, None, None).expect("agent answers");
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).expect("JSON")
    }

    pub fn post(&self, path: &str, body: Option<&str>) -> (u16, String) {
        http(self.listen, "POST", path, Some(TOKEN), body).expect("agent answers")
    }

    /// SIGTERM, then the exit status within a bounded wait.
    pub fn terminate(mut self) -> ExitStatus {
        signal(&self.child, "TERM");
        wait_exit(&mut self.child)
    }

    /// SIGKILL (no chance to clean up).
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn hangup(&self) {
        signal(&self.child, "HUP");
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn signal(child: &Child, name: &str) {
    let status =
        Command::new("kill").arg(format!("-{name}")).arg(child.id().to_string()).status().expect("kill");
    assert!(status.success());
}

/// The child's exit status, waited for at most [`WAIT_MAX`]; past it the child is killed (no
/// process outlives the test) and the test fails.
pub fn wait_exit(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("agent did not exit within {WAIT_MAX:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `tenure ARGS…` to completion: (exit code, stdout, stderr).
pub fn tenure(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tenure")).args(args).output().expect("tenure runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One HTTP/1.1 exchange on loopback: (status, body).
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(token) = token {
        request.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    let body = body.unwrap_or("");
    if method == "POST" {
        request.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes())?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Ok((status, body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else { break };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// Runs `args`, panicking with its stderr when it fails; its stdout.
pub fn run(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (scripts/install-deps installs it)", args[0]));
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Removes network namespaces `namespaces` (killing every process in them first) and root-side
/// links `links`, ignoring what is not there: a lab's cleanup, on drop and before it starts.
pub fn remove_lab(namespaces: &[String], links: &[String]) {
    for name in namespaces {
        if let Ok(out) = Command::new("ip").args(["netns", "pids", name]).output() {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
        }
        let _ = Command::new("ip").args(["netns", "del", name]).stderr(Stdio::null()).status();
    }
    for link in links {
        let _ = Command::new("ip").args(["link", "del", link]).stderr(Stdio::null()).status();
    }
}

/// A veth pair: `name_a` in namespace `ns_a`, `name_b` in `ns_b`.
pub fn veth(ns_a: &str, name_a: &str, ns_b: &str, name_b: &str) {
    run(&["ip", "link", "add", name_a, "netns", ns_a, "type", "veth", "peer", "name", name_b, "netns", ns_b]);
}

/// A management link from the root namespace into `ns`: `root_side` (address `root_cidr`) in the
/// root namespace, `mgmt` (address `ns_cidr`) in `ns`, both up.
pub fn mgmt_link(root_side: &str, ns: &str, root_cidr: &str, ns_cidr: &str) {
    run(&["ip", "link", "add", root_side, "type", "veth", "peer", "name", "mgmt", "netns", ns]);
    run(&["ip", "addr", "add", root_cidr, "dev", root_side]);
    run(&["ip", "link", "set", root_side, "up"]);
    run(&["ip", "netns", "exec", ns, "ip", "addr", "add", ns_cidr, "dev", "mgmt"]);
    run(&["ip", "netns", "exec", ns, "ip", "link", "set", "mgmt", "up"]);
}
