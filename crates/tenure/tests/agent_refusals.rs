//! `tenure agent` as a real process, refusing what it must refuse and nothing more: a pool reload
//! too large for one log record is a refused reload (the agent serves on); a store that holds data
//! without its identity file is refused whatever the config file is called, unless the operator
//! says so.

mod process;

use std::path::{Path, PathBuf};

use process::{Agent, TOKEN, TempDir, free_port, http, pool_yaml, tenure, wait_for};
use serde_json::Value;

/// The simulated cloud's provider entry.
const SIM: &str = "{name: sim1, kind: sim-cloud}";

/// Writes config file `name` in `dir` for nodes a (priority 10) and b on provider `provider`
/// (declared by `providers`), with the store in `./store` and pools from `pools.yaml`; its path.
fn config_named(
    dir: &TempDir,
    name: &str,
    listen: std::net::SocketAddr,
    provider: &str,
    providers: &str,
) -> PathBuf {
    dir.write("token", &format!("{TOKEN}\n"));
    let text = format!(
        "nodes:\n  - {{name: a, provider: {provider}, placementGroup: g1, nic: eni-a, priority: 10}}\n  - {{name: b, provider: {provider}, placementGroup: g1, nic: eni-b}}\nstore: {{kind: embedded, path: ./store}}\nproviders: [{providers}]\npools: [pools.yaml]\nlisten: {listen}\nheartbeatInterval: 100ms\nrequeueInterval: 200ms\napiTokenFile: ./token\n"
    );
    dir.write(name, &text)
}

/// The agent's health: (status, body).
fn health(agent: &Agent) -> (u16, Value) {
    let (status, body) = http(agent.listen, "GET", "/v1/health", None, None).expect("answers");
    (status, serde_json::from_str(&body).expect("JSON"))
}

/// The addresses of the map.
fn addresses(agent: &Agent) -> Vec<String> {
    agent.get("/v1/ownership")["ownership"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| row["address"].as_str().expect("address").to_owned())
        .collect()
}

/// A valid pool file of 40,000 scattered IPv6 addresses (no two merge into a CIDR block): its
/// `pool-applied` record is far over the 1 MiB one log record holds.
fn pool_too_large_for_one_record() -> String {
    let addresses: Vec<String> = (0..40_000u32)
        .map(|i| {
            format!("'2001:db8:1111:2222:3333:4444:{:x}:{:x}'", 0x1000 + i / 1000, 0x1000 + (i % 1000) * 2)
        })
        .collect();
    let refs: Vec<&str> = addresses.iter().map(String::as_str).collect();
    pool_yaml("edge", &refs, &["a", "b"], "sim1", "")
}

#[test]
fn a_pool_reload_too_large_for_one_record_is_refused_and_the_agent_serves_on() {
    let dir = TempDir::new("reload-too-large");
    let listen = free_port();
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.10"], &["a", "b"], "sim1", ""));
    let config = config_named(&dir, "agent.yaml", listen, "sim1", SIM);
    let agent = Agent::start(&dir, &config, listen);
    wait_for("the pool applied", || addresses(&agent) == ["10.0.0.10"]);

    // `tenure validate` refuses the file in one line naming it.
    let big = dir.write("big.yaml", &pool_too_large_for_one_record());
    let (code, stdout, stderr) = tenure(&["validate", big.to_str().expect("utf-8")]);
    assert_eq!((code, stdout.as_str()), (2, ""), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!("{}:", big.display())) && stderr.contains("does not fit one log record"),
        "{stderr}"
    );

    // The agent refuses it on SIGHUP and serves on: health 200, heartbeats landing.
    std::fs::rename(&big, dir.path().join("pools.yaml")).expect("rename");
    agent.hangup();
    wait_for("the reload refused", || agent.log().contains("does not fit one log record"));
    let head = health(&agent).1["logHead"].as_u64().expect("logHead");
    wait_for("heartbeats land after the refused reload", || {
        let (status, body) = health(&agent);
        assert_eq!(status, 200, "a refused reload is no failed store: {body}");
        body["logHead"].as_u64().expect("logHead") >= head + 6
    });
    assert_eq!(addresses(&agent), ["10.0.0.10"], "nothing applied");

    // The good file, grown by one address, applies.
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.10", "10.0.0.11"], &["a", "b"], "sim1", ""));
    agent.hangup();
    wait_for("the good file applied", || addresses(&agent) == ["10.0.0.10", "10.0.0.11"]);
    assert_eq!(health(&agent).0, 200);
    assert!(agent.terminate().success());
}

/// Starts an agent on `config` that must be refused: its one `tenure agent:` line.
fn refused(dir: &TempDir, config: &Path, listen: std::net::SocketAddr, what: &str) -> String {
    let mut agent = Agent::spawn(dir, config, listen);
    let status = process::wait_exit(&mut agent.child);
    let log = agent.log();
    assert_eq!(status.code(), Some(1), "{what} must not start: {log}");
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("tenure agent:")).collect();
    assert_eq!(lines.len(), 1, "one line naming why ({what}): {log}");
    lines[0].to_owned()
}

/// An agent that cannot listen (its port taken) says so in one line and leaves nothing behind:
/// no store, no identity file — the next start, on a free port, is a first start.
#[test]
fn an_agent_that_cannot_listen_leaves_no_store_behind() {
    let dir = TempDir::new("port-taken");
    let listen = free_port();
    let taken = std::net::TcpListener::bind(listen).expect("the port is free");
    let config = config_named(&dir, "agent.yaml", listen, "sim1", SIM);
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.1"], &["a", "b"], "sim1", ""));
    let line = refused(&dir, &config, listen, "an agent whose port is taken");
    assert!(line.contains(&format!("cannot listen on {listen}")), "{line}");
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .expect("readable")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("store") || name.contains("identity"))
        .collect();
    assert!(left.is_empty(), "a refused start left {left:?} behind");
    drop(taken);
    let agent = Agent::start(&dir, &config, listen);
    assert_eq!(health(&agent).0, 200, "the port free again: a first start");
    assert!(agent.terminate().success());
}

/// Copies `from` over `to` in `dir` (`cp -a`, what an operator does), `to` removed first.
fn copy(dir: &TempDir, from: &str, to: &str) {
    let _ = std::fs::remove_dir_all(dir.path().join(to));
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(dir.path().join(from))
        .arg(dir.path().join(to))
        .status()
        .expect("cp");
    assert!(status.success());
}

#[test]
fn a_store_copy_is_refused_under_any_config_name_and_without_an_identity_file_unless_accepted() {
    let dir = TempDir::new("identity");
    let listen = free_port();
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.10"], &["a", "b"], "sim1", ""));
    let config = config_named(&dir, "agent.yaml", listen, "sim1", SIM);
    let identity = dir.path().join("store.identity");

    // An empty store starts, and its identity file goes beside the store's folder.
    let agent = Agent::start(&dir, &config, listen);
    wait_for("a owns", || agent.get("/v1/ownership")["ownership"][0]["owner"] == "a");
    assert!(identity.is_file(), "the default identity file: <store folder name>.identity beside the config");
    assert!(agent.terminate().success());
    copy(&dir, "store", "store.old");
    let agent = Agent::start(&dir, &config, listen);
    assert_eq!(agent.post("/v1/drain/a", None).0, 200);
    wait_for("b owns", || agent.get("/v1/ownership")["ownership"][0]["owner"] == "b");
    assert!(agent.terminate().success());

    // The old copy back: refused under agent.yaml, and under a copy of it named router.yaml.
    copy(&dir, "store", "store.current");
    copy(&dir, "store.old", "store");
    let line = refused(&dir, &config, listen, "an old copy");
    assert!(line.contains("is behind its identity file"), "{line}");
    let router = dir.write("router.yaml", &std::fs::read_to_string(&config).expect("config"));
    let line = refused(&dir, &router, listen, "an old copy under router.yaml");
    assert!(line.contains("is behind its identity file"), "{line}");
    // Only the comparisons that failed: the drain moved the address (a higher token) and
    // appended, so both; neither ever reads `N < N`.
    let numbers = |what: &str| -> Option<(u64, u64)> {
        let rest = &line[line.find(what)? + what.len()..];
        let mut parts = rest.split_whitespace();
        let store = parts.next()?.parse().ok()?;
        assert_eq!(parts.next(), Some("<"), "{line}");
        let recorded = parts.next()?.trim_end_matches(|c: char| !c.is_ascii_digit()).parse().ok()?;
        Some((store, recorded))
    };
    for what in ["highest log index ", "highest token "] {
        if let Some((store, recorded)) = numbers(what) {
            assert!(store < recorded, "a comparison that held is not printed: {line}");
        }
    }

    // No identity file at all: a store that holds data is refused…
    std::fs::remove_file(&identity).expect("rm identity");
    let line = refused(&dir, &config, listen, "a store without its identity file");
    assert!(line.contains("holds data") && line.contains("--accept-store-without-identity"), "{line}");
    assert!(!identity.exists(), "a refusal writes nothing");
    // …unless the operator says so: it starts, says the risk, and writes the file from it.
    copy(&dir, "store.current", "store");
    let log_path = dir.path().join("accepted.log");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["agent", "--accept-store-without-identity", "--config"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log_path).expect("log"))
        .spawn()
        .expect("tenure agent");
    let accepted = Agent { child, listen, stderr: log_path };
    accepted.wait_healthy();
    let log = accepted.log();
    assert!(log.contains("accepting a store that holds data without its identity file"), "{log}");
    assert!(identity.is_file(), "written from the accepted store");
    assert_eq!(accepted.get("/v1/ownership")["ownership"][0]["owner"], "b", "the current store's map");
    assert!(accepted.terminate().success());
}

/// Whether process `pid` still runs (a zombie waiting for its reaper does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// A hook that entered another mount namespace (`unshare -m`, as `ip netns exec` does), left
/// running by a `kill -9` of its agent, is killed by the next agent on the store by its durable
/// record, before that agent gates any call; a record that cannot be checked refuses the start.
#[test]
fn a_hook_in_another_mount_namespace_left_by_a_killed_agent_is_killed_before_the_next_one_gates() {
    let dir = TempDir::new("hook-groups");
    let listen = free_port();
    let pids = dir.path().join("pids");
    let alive = dir.path().join("alive");
    // Notes any pid of an earlier run still alive, then becomes a process in a mount namespace
    // of its own (same pid: unshare and sh exec) that records its pid and waits far past the test.
    dir.write(
        "hook.sh",
        &format!(
            "#!/bin/sh\nfor p in $(cat {pids} 2>/dev/null); do s=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -c1); [ -n \"$s\" ] && [ \"$s\" != Z ] && echo $p >> {alive}; done\nexec unshare -m sh -c 'echo $$ >> {pids}; exec sleep 600'\n",
            pids = pids.display(),
            alive = alive.display(),
        ),
    );
    std::process::Command::new("chmod").arg("+x").arg(dir.path().join("hook.sh")).status().expect("chmod");
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.10"], &["a", "b"], "hook", ""));
    let config = config_named(
        &dir,
        "agent.yaml",
        listen,
        "hook",
        "{name: hook, kind: exec, command: [./hook.sh], timeout: 3500ms}",
    );
    // The longest call the pools allow (below heartbeatTTL + promotionHold, 4 s by default), so
    // that no hook is killed by its timeout while the test looks at it.
    let text = std::fs::read_to_string(&config).expect("config") + "actionTimeout: 3500ms\n";
    std::fs::write(&config, text).expect("config");
    let agent = Agent::start(&dir, &config, listen);
    wait_for("the hook runs", || std::fs::read_to_string(&pids).is_ok_and(|t| t.lines().count() == 1));
    let hook: u32 = std::fs::read_to_string(&pids).expect("pids").trim().parse().expect("pid");
    let own_namespace = std::fs::read_link("/proc/self/ns/mnt").expect("own mount namespace");
    let hook_namespace = std::fs::read_link(format!("/proc/{hook}/ns/mnt")).expect("the hook's");
    assert_ne!(own_namespace, hook_namespace, "the hook runs in a mount namespace of its own");
    agent.kill9();
    assert!(running(hook), "the hook outlives the killed agent");

    // The next agent kills it by its record before its own call of the action in doubt.
    let agent = Agent::start(&dir, &config, listen);
    wait_for("the killed agent's hook is gone", || !running(hook));
    wait_for("the call in doubt ran again", || {
        std::fs::read_to_string(&pids).is_ok_and(|t| t.lines().count() == 2)
    });
    let found = std::fs::read_to_string(&alive).unwrap_or_default();
    assert!(found.is_empty(), "the dead agent's hook still ran when the next one called: {found}");
    assert!(agent.log().contains("killed 1 recorded hook process group"), "{}", agent.log());
    let second: u32 = std::fs::read_to_string(&pids)
        .expect("pids")
        .lines()
        .nth(1)
        .expect("two")
        .trim()
        .parse()
        .expect("pid");
    let records = dir.path().join("store/hook-groups");
    assert!(records.join(second.to_string()).is_file(), "the running hook's group is recorded");
    agent.kill9();

    // A record that cannot be checked refuses the start, and leaves the hook as it is.
    let garbage = records.join("999999");
    std::fs::write(&garbage, "not a record").expect("write");
    let mut refused = Agent::spawn(&dir, &config, listen);
    let status = process::wait_exit(&mut refused.child);
    let log = refused.log();
    assert_eq!(status.code(), Some(1), "{log}");
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("tenure agent:")).collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].contains(&format!("cannot check the hook process group recorded in {}", garbage.display())),
        "{log}"
    );
    assert!(running(second), "nothing was killed by a start that refused");
    for pid in std::fs::read_to_string(&pids).expect("pids").split_whitespace() {
        let _ = std::process::Command::new("kill").args(["-KILL", pid]).status();
    }
}
