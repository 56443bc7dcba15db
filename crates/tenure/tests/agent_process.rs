//! `tenure agent` as a real process on a temporary embedded store, on loopback: ownership over
//! HTTP and the CLI, changes compared with `replay` of the same events, the exec hook with a
//! stale action that never reaches it, SIGHUP, SIGTERM with a call in flight, refusals.
//!
//! Over 600 lines: one rig (an agent process and its API), many cases;
//! a second binary would cost a link.

mod process;

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt as _;

#[cfg(feature = "sim")]
use process::NODES;
use process::{Agent, TOKEN, TempDir, agent_config as config, free_port, pool_yaml, tenure, wait_for};
use serde_json::{Value, json};

/// An operator step: runs it, answers (exit code, what it said).
#[cfg(feature = "sim")]
type Step<'a> = Box<dyn Fn() -> (i32, String) + 'a>;

/// (owner, ownershipEpoch, captureEpoch, desired) per "pool/address".
fn map(rows: &Value) -> BTreeMap<String, (Value, u64, u64, bool)> {
    rows.as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                format!("{}/{}", r["pool"].as_str().expect("pool"), r["address"].as_str().expect("address")),
                (
                    r["owner"].clone(),
                    r["ownershipEpoch"].as_u64().expect("epoch"),
                    r["captureEpoch"].as_u64().expect("epoch"),
                    r["desired"].as_bool().expect("desired"),
                ),
            )
        })
        .collect()
}

#[cfg(feature = "sim")]
/// The ownership `replay` computes for the same pool and the same operator events.
fn replayed(dir: &TempDir, pool: &str, events: &[String]) -> BTreeMap<String, (Value, u64, u64, bool)> {
    let indented: String = pool.lines().map(|l| format!("    {l}\n")).collect();
    let mut text = format!(
        "{}providers:\n  - {{name: sim1, kind: sim-cloud}}\npools:\n  -\n{indented}timeline:\n  - {{at: 0, event: heartbeat, node: a}}\n  - {{at: 0, event: heartbeat, node: b}}\n",
        NODES.replace("PROVIDER", "sim1")
    );
    for (i, event) in events.iter().enumerate() {
        text.push_str(&format!("  - {{at: {}, {event}}}\n", 10 + i));
    }
    let path = dir.write("replayed.yaml", &text);
    let (code, stdout, stderr) = tenure(&["replay", path.to_str().expect("utf-8"), "-o", "json"]);
    assert_eq!(code, 0, "replay: {stderr}\n{text}");
    let report: Value = serde_json::from_str(&stdout).expect("JSON");
    map(&report["ownership"])
}

/// (The simulator's `replay` verb is behind the cargo feature `sim`.)
#[cfg(feature = "sim")]
#[test]
fn ownership_and_operator_changes_match_replay_over_http_and_the_cli() {
    let dir = TempDir::new("agent-ownership");
    let listen = free_port();
    let pool = pool_yaml("edge", &["10.0.0.10", "10.0.0.11"], &["a", "b"], "sim1", "");
    dir.write("pools.yaml", &pool);
    let config = config(&dir, listen, "sim1", "[{name: sim1, kind: sim-cloud}]", &["pools.yaml"]);
    let agent = Agent::start(&dir, &config, listen);
    wait_for("a owns both", || {
        map(&agent.get("/v1/ownership")["ownership"]).values().all(|(owner, ..)| owner == "a")
    });
    let endpoint = format!("http://{listen}");
    let token_file = dir.path().join("token");
    let token_file = token_file.to_str().expect("utf-8");

    let (code, stdout, stderr) = tenure(&["ownership", "-o", "json", "--endpoint", &endpoint]);
    assert_eq!(code, 0, "{stderr}");
    let cli: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(map(&cli["ownership"]), map(&agent.get("/v1/ownership")["ownership"]), "CLI and API agree");
    let (code, table, _) = tenure(&["ownership", "--endpoint", &endpoint]);
    assert_eq!(code, 0);
    assert!(table.lines().next().is_some_and(|h| h.contains("POOL") && h.contains("OWNER")), "{table}");

    let mut events = Vec::new();
    let steps: [(&str, Step); 4] = [
        (
            "event: drain, node: a",
            Box::new(|| {
                let (code, _, stderr) =
                    tenure(&["drain", "a", "--endpoint", &endpoint, "--token-file", token_file]);
                (code, stderr)
            }),
        ),
        (
            "event: undesire, pool: edge, address: 10.0.0.11",
            Box::new(|| {
                let (status, body) =
                    agent.post("/v1/undesire", Some(r#"{"pool": "edge", "address": "10.0.0.11"}"#));
                (i32::from(status != 200), body)
            }),
        ),
        (
            "event: undrain, node: a",
            Box::new(|| {
                let (code, _, stderr) =
                    tenure(&["undrain", "a", "--endpoint", &endpoint, "--token-file", token_file]);
                (code, stderr)
            }),
        ),
        (
            "event: desire, pool: edge, address: 10.0.0.11",
            Box::new(|| {
                let (code, _, stderr) = tenure(&[
                    "desire",
                    "edge",
                    "10.0.0.11",
                    "--endpoint",
                    &endpoint,
                    "--token-file",
                    token_file,
                ]);
                (code, stderr)
            }),
        ),
    ];
    for (event, act) in &steps {
        let (code, said) = act();
        assert_eq!(code, 0, "{event}: {said}");
        events.push((*event).to_owned());
        let expected = replayed(&dir, &pool, &events);
        assert_eq!(map(&agent.get("/v1/ownership")["ownership"]), expected, "after {event}");
    }
    drop(steps);
    let status = agent.terminate();
    assert!(status.success(), "SIGTERM: clean exit 0, got {status:?}");
}

#[test]
fn a_stale_action_never_reaches_the_exec_hook_and_a_current_one_does() {
    let dir = TempDir::new("agent-exec");
    let listen = free_port();
    let calls = dir.path().join("calls.log");
    dir.write(
        "hook.sh",
        &format!(
            "#!/bin/sh\nprintf '%s %s\\n' \"$TENURE_IDEMPOTENCY_KEY\" \"$TENURE_VERB\" >> {}\n",
            calls.display()
        ),
    );
    std::process::Command::new("chmod").arg("+x").arg(dir.path().join("hook.sh")).status().expect("chmod");
    let pool = pool_yaml("edge", &["10.0.0.10"], &["a", "b"], "hook", "  approval: manual\n");
    dir.write("pools.yaml", &pool);
    let providers = "[{name: hook, kind: exec, command: [./hook.sh], timeout: 5s}]";
    let config = config(&dir, listen, "hook", providers, &["pools.yaml"]);
    let agent = Agent::start(&dir, &config, listen);
    let pending = |node: &str| -> Vec<String> {
        agent.get(&format!("/v1/actions?node={node}&state=pending"))["actions"]
            .as_array()
            .expect("actions")
            .iter()
            .map(|a| a["idempotencyKey"].as_str().expect("key").to_owned())
            .collect()
    };
    wait_for("a's acquire is pending approval", || pending("a").len() == 1);
    let stale = pending("a");
    let (status, body) = agent.post("/v1/drain/a", None);
    assert_eq!(status, 200, "{body}");
    wait_for("b's acquire is pending approval", || pending("b").len() == 1);
    // Approving a's old plan now is refused: its tokens are behind the head's (it is skipped,
    // or stale until the sweep skips it). Nothing is appended.
    for key in &stale {
        let (status, body) = agent.post(&format!("/v1/approve/{key}"), None);
        assert_eq!(status, 409, "{body}");
        assert!(body.contains("not pending approval"), "{body}");
    }
    for key in pending("b") {
        let (status, body) = agent.post(&format!("/v1/approve/{key}"), None);
        assert_eq!(status, 200, "{body}");
    }
    wait_for("b's actions executed by the hook", || {
        agent.get("/v1/actions?node=b&state=executed")["actions"].as_array().is_some_and(|a| a.len() == 1)
    });
    let skipped = agent.get("/v1/actions?node=a&state=skipped")["actions"].clone();
    assert_eq!(skipped.as_array().map(Vec::len), Some(1), "a's stale plan is skipped: {skipped}");
    let log = std::fs::read_to_string(&calls).expect("the hook ran");
    for key in &stale {
        assert!(!log.contains(key.as_str()), "a stale action reached the hook: {key}\n{log}");
    }
    assert_eq!(log.lines().count(), 1, "b's acquire, once (one call per acquire, SPEC 7):\n{log}");
    assert!(log.lines().all(|l| l.ends_with(" acquire")), "{log}");
    assert!(agent.terminate().success());
}

#[test]
fn sighup_applies_a_good_change_refuses_a_bad_file_and_moves_an_address_between_files() {
    let dir = TempDir::new("agent-sighup");
    let listen = free_port();
    dir.write("x.yaml", &pool_yaml("x", &["10.0.0.1", "10.0.0.2"], &["a", "b"], "sim1", ""));
    dir.write("y.yaml", &pool_yaml("y", &["10.0.0.3"], &["a", "b"], "sim1", ""));
    let config = config(&dir, listen, "sim1", "[{name: sim1, kind: sim-cloud}]", &["x.yaml", "y.yaml"]);
    let agent = Agent::start(&dir, &config, listen);
    let addresses = |pool: &str| -> Vec<String> {
        map(&agent.get("/v1/ownership")["ownership"])
            .keys()
            .filter_map(|k| k.strip_prefix(&format!("{pool}/")).map(str::to_owned))
            .collect()
    };
    wait_for("both pools applied", || addresses("x").len() == 2 && addresses("y").len() == 1);

    // A good change: y gains an address.
    dir.write("y.yaml", &pool_yaml("y", &["10.0.0.3", "10.0.0.4"], &["a", "b"], "sim1", ""));
    agent.hangup();
    wait_for("y gained 10.0.0.4", || addresses("y") == ["10.0.0.3", "10.0.0.4"]);
    // And its acquire landed: the map below must not move by itself while the bad file is read.
    wait_for("every address held", || {
        agent.get("/v1/ownership")["ownership"]
            .as_array()
            .is_some_and(|rows| rows.iter().all(|row| row["phase"] == "held"))
    });

    // A bad file: nothing applied, the agent keeps running and says why.
    dir.write(
        "y.yaml",
        "apiVersion: tenure.dev/v1alpha1\nkind: MobilityPool\nmetadata: {name: y}\nspec:\n  membres: [a]\n",
    );
    let before = agent.get("/v1/ownership");
    agent.hangup();
    wait_for("the refusal is logged", || agent.log().contains("nothing applied"));
    assert_eq!(agent.get("/v1/ownership"), before, "a bad file changes nothing");
    assert_eq!(process::http(listen, "GET", "/v1/health", None, None).expect("answers").0, 200);

    // An address moved from x to y (same capture domain), both files changed at once.
    dir.write("x.yaml", &pool_yaml("x", &["10.0.0.1"], &["a", "b"], "sim1", ""));
    dir.write("y.yaml", &pool_yaml("y", &["10.0.0.2", "10.0.0.3", "10.0.0.4"], &["a", "b"], "sim1", ""));
    agent.hangup();
    wait_for("10.0.0.2 moved to y", || addresses("x") == ["10.0.0.1"] && addresses("y").len() == 3);
    assert!(!agent.log().contains("pool reload not applied"), "{}", agent.log());

    // Nothing changed: the reload says so (an operator's SIGHUP is never met by silence).
    assert!(!agent.log().contains("nothing to apply"), "{}", agent.log());
    agent.hangup();
    wait_for("a reload with nothing to change says so", || agent.log().contains("nothing to apply"));
    assert!(agent.terminate().success());
}

/// A restart after a stop longer than heartbeatTTL + promotionHold, with a pool file edited
/// meanwhile, moves nothing that was held: the agent's nodes say they are alive before the pool
/// change is appended (stream time moves with every event: the change appended first expired
/// the agent's own nodes for one event — their addresses to no owner and back, two epochs each;
/// an operator trial's finding).
#[test]
fn a_restart_after_the_ttl_with_an_edited_pool_moves_no_held_address() {
    let dir = TempDir::new("agent-restart-ttl");
    let listen = free_port();
    let pool = |addresses: &str| {
        format!(
            "apiVersion: tenure.dev/v1alpha1\nkind: MobilityPool\nmetadata: {{name: x}}\nspec:\n  addresses: [{addresses}]\n  provider: sim1\n  placementGroup: g1\n  members: [a, b]\n  heartbeatTTL: 300ms\n  promotionHold: 0s\n  deprovisionHoldDuration: 0s\n"
        )
    };
    dir.write("x.yaml", &pool("10.0.0.1, 10.0.0.2"));
    // A pool that prefers b, the agent's second node: on a first start its pools are applied once
    // both nodes are alive, so b takes it (applied before the heartbeats, the first heartbeat's
    // node took it and kept it).
    dir.write(
        "y.yaml",
        &pool_yaml("y", &["10.0.1.1"], &["a", "b"], "sim1", "  ipOwnershipPolicy: {preferNodes: [b]}\n"),
    );
    let config = config(&dir, listen, "sim1", "[{name: sim1, kind: sim-cloud}]", &["x.yaml", "y.yaml"]);
    // A TTL this short wants calls cut off sooner than it (the config's own check).
    let text = std::fs::read_to_string(&config)
        .expect("written")
        .replace("actionTimeout: 10s", "actionTimeout: 100ms");
    let config = dir.write("agent.yaml", &text);
    let held = |agent: &Agent, count: usize| {
        let rows = agent.get("/v1/ownership")["ownership"].clone();
        rows.as_array()
            .is_some_and(|rows| rows.len() == count && rows.iter().all(|row| row["phase"] == "held"))
    };
    let agent = Agent::start(&dir, &config, listen);
    wait_for("every address held", || held(&agent, 3));
    let before = map(&agent.get("/v1/ownership")["ownership"]);
    assert_eq!(before["y/10.0.1.1"].0, "b", "the preferred node: {before:?}");
    assert!(agent.terminate().success());
    // Down for longer than the TTL (the downtime is the case, not a wait for something).
    std::thread::sleep(std::time::Duration::from_millis(900));
    dir.write("x.yaml", &pool("10.0.0.1, 10.0.0.2, 10.0.0.3"));
    let agent = Agent::start(&dir, &config, listen);
    wait_for("the added address held", || held(&agent, 4));
    let after = map(&agent.get("/v1/ownership")["ownership"]);
    for key in ["x/10.0.0.1", "x/10.0.0.2", "y/10.0.1.1"] {
        assert_eq!(after[key], before[key], "{key}: owner and tokens kept across the restart");
    }
    assert!(agent.terminate().success());
}

/// SIGHUP reads the config file again: an edited `pools` list is applied (a file added, one
/// removed), each pool applied or deleted is logged by name, every other key that changed is
/// named as needing a restart and not applied, a config that does not parse changes nothing (one
/// line), and the next restart has nothing left to apply.
#[test]
fn sighup_applies_an_edited_pools_list_and_names_the_keys_that_need_a_restart() {
    let dir = TempDir::new("agent-sighup-config");
    let listen = free_port();
    dir.write("x.yaml", &pool_yaml("x", &["10.0.0.1"], &["a", "b"], "sim1", ""));
    dir.write("y.yaml", &pool_yaml("y", &["10.0.0.2"], &["a", "b"], "sim1", ""));
    dir.write("z.yaml", &pool_yaml("z", &["10.0.0.3"], &["a", "b"], "sim1", ""));
    let config = config(&dir, listen, "sim1", "[{name: sim1, kind: sim-cloud}]", &["x.yaml", "y.yaml"]);
    let agent = Agent::start(&dir, &config, listen);
    let owned = |agent: &Agent| -> Vec<String> {
        map(&agent.get("/v1/ownership")["ownership"])
            .into_iter()
            .filter(|(_, (owner, ..))| owner == "a")
            .map(|(key, _)| key)
            .collect()
    };
    wait_for("x and y held", || owned(&agent) == ["x/10.0.0.1", "y/10.0.0.2"]);

    // y's file removed from the list, z's added; heartbeatInterval changed too (a restart's).
    let text = std::fs::read_to_string(&config).expect("config");
    let edited = text
        .replace("pools: [x.yaml, y.yaml]", "pools: [x.yaml, z.yaml]")
        .replace("heartbeatInterval: 100ms", "heartbeatInterval: 150ms");
    assert_ne!(edited, text);
    std::fs::write(&config, &edited).expect("write");
    agent.hangup();
    wait_for("z held, y let go", || owned(&agent) == ["x/10.0.0.1", "z/10.0.0.3"]);
    wait_for("each pool change logged by name", || {
        let log = agent.log();
        log.contains("pool deleted pool=y") && log.contains("pool applied pool=z addresses=1")
    });
    let log = agent.log();
    let restart: Vec<&str> = log.lines().filter(|l| l.contains("only a restart applies")).collect();
    assert_eq!(restart.len(), 1, "{log}");
    assert!(restart[0].contains("keys=heartbeatInterval"), "{}", restart[0]);
    assert_eq!(log.matches("pool applied pool=x").count(), 1, "at start only; x did not change: {log}");

    // A config that does not parse: one line, nothing applied, the agent keeps running.
    // Settled first: y's address released (its row gone), x's and z's held (the map a read
    // sees is the loop's last post: it moves on until then).
    wait_for("y's address released (its row gone), x's and z's held", || {
        let body = agent.get("/v1/ownership");
        let rows = body["ownership"].as_array().expect("rows");
        rows.iter().all(|row| row["phase"] == "held")
            && map(&body["ownership"]).keys().all(|key| !key.starts_with("y/"))
    });
    let before = agent.get("/v1/ownership");
    std::fs::write(&config, "node: {name: a\n").expect("write");
    agent.hangup();
    wait_for("the refusal is logged", || agent.log().contains("not reloaded"));
    let log = agent.log();
    assert_eq!(log.lines().filter(|l| l.contains("not reloaded")).count(), 1, "{log}");
    assert!(log.lines().any(|l| l.contains("not reloaded") && l.contains("nothing applied")), "{log}");
    assert_eq!(agent.get("/v1/ownership"), before, "a bad config changes nothing");
    assert_eq!(process::http(listen, "GET", "/v1/health", None, None).expect("answers").0, 200);
    assert!(agent.terminate().success());

    // Restarted on the edited config: the log already has its pools; nothing to apply.
    std::fs::write(&config, &edited).expect("write");
    let agent = Agent::start(&dir, &config, listen);
    wait_for("x and z held again", || owned(&agent) == ["x/10.0.0.1", "z/10.0.0.3"]);
    assert!(!agent.log().contains("applying pool changes"), "{}", agent.log());
    assert!(agent.terminate().success());
}

#[test]
fn sigterm_lets_a_call_in_flight_finish_and_exits_zero_with_its_result_recorded() {
    let dir = TempDir::new("agent-sigterm");
    let listen = free_port();
    let calls = dir.path().join("calls.log");
    dir.write(
        "hook.sh",
        &format!("#!/bin/sh\necho \"$TENURE_IDEMPOTENCY_KEY\" >> {}\nsleep 1\n", calls.display()),
    );
    std::process::Command::new("chmod").arg("+x").arg(dir.path().join("hook.sh")).status().expect("chmod");
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.10"], &["a", "b"], "hook", ""));
    let config = config(
        &dir,
        listen,
        "hook",
        "[{name: hook, kind: exec, command: [./hook.sh], timeout: 5s}]",
        &["pools.yaml"],
    );
    let agent = Agent::start(&dir, &config, listen);
    wait_for("the hook is running", || calls.exists());
    let status = agent.terminate();
    assert!(status.success(), "clean exit 0 after the call finished: {status:?}");
    // Restart: the call's result survived, so its verb is not run again.
    let agent = Agent::start(&dir, &config, listen);
    wait_for("the acquire executed", || {
        agent.get("/v1/actions?node=a&state=executed")["actions"].as_array().is_some_and(|a| a.len() == 1)
    });
    let log = std::fs::read_to_string(&calls).expect("calls");
    let mut seen = std::collections::BTreeSet::new();
    assert!(log.lines().all(|key| seen.insert(key)), "a key ran twice:\n{log}");
    assert_eq!(seen.len(), 1, "{log}");
    assert!(agent.terminate().success());
}

#[test]
fn a_running_agent_is_backed_up_an_old_copy_refuses_to_start_and_a_restore_raises_every_token() {
    let dir = TempDir::new("agent-backup");
    let listen = free_port();
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.10"], &["a", "b"], "sim1", ""));
    let config = config(&dir, listen, "sim1", "[{name: sim1, kind: sim-cloud}]", &["pools.yaml"]);
    let config_arg = config.to_str().expect("utf-8");
    let agent = Agent::start(&dir, &config, listen);
    wait_for("a owns", || {
        let rows = map(&agent.get("/v1/ownership")["ownership"]);
        !rows.is_empty() && rows.values().all(|(o, ..)| o == "a")
    });
    let backup = dir.path().join("backup.tenure");
    let (code, stdout, stderr) =
        tenure(&["store", "backup", backup.to_str().expect("utf-8"), "--config", config_arg]);
    assert_eq!(code, 0, "backup of a running agent through its API: {stderr}");
    assert!(stdout.contains("through http://"), "{stdout}");
    assert!(agent.terminate().success());

    // A plain copy of the store, taken now, is put back after more has happened: refused.
    let copy = |from: &str, to: &str| {
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(dir.path().join(from))
            .arg(dir.path().join(to))
            .status()
            .expect("cp");
        assert!(status.success());
    };
    copy("store", "store.old");
    let agent = Agent::start(&dir, &config, listen);
    assert_eq!(agent.post("/v1/drain/a", None).0, 200);
    wait_for("b owns", || map(&agent.get("/v1/ownership")["ownership"]).values().all(|(o, ..)| o == "b"));
    let highest_before =
        map(&agent.get("/v1/ownership")["ownership"]).values().map(|(_, o, c, _)| *o.max(c)).max();
    assert!(agent.terminate().success());
    std::fs::remove_dir_all(dir.path().join("store")).expect("rm");
    copy("store.old", "store");
    let mut refused = Agent::spawn(&dir, &config, listen);
    let status = process::wait_exit(&mut refused.child);
    assert_eq!(status.code(), Some(1), "an old copy must not start");
    let log = refused.log();
    assert!(log.contains("is behind its identity file"), "one line naming why: {log}");

    // A restore on purpose raises every token above anything issued since.
    let (code, stdout, stderr) =
        tenure(&["store", "restore", backup.to_str().expect("utf-8"), "--config", config_arg]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("raised"), "{stdout}");
    let agent = Agent::start(&dir, &config, listen);
    let rows = map(&agent.get("/v1/ownership")["ownership"]);
    let highest_before = highest_before.expect("one address");
    assert!(
        rows.values().all(|(_, o, c, _)| *o > highest_before && *c > highest_before),
        "every token above {highest_before} after the restore: {rows:?}"
    );
    assert!(agent.terminate().success());
}

/// Whether process `pid` still runs (a zombie waiting for its reaper does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rfind(')').map(|i| stat[i + 1..].trim_start().starts_with(['Z', 'X'])))
        .is_some_and(|zombie| !zombie)
}

/// `kill -9` of an agent cannot kill the hook it was running (a child of the hook's shell
/// included); the next agent on the same store kills what is left before it gates anything.
#[test]
fn hooks_left_running_by_a_killed_agent_are_killed_by_the_next_one() {
    let dir = TempDir::new("agent-orphans");
    let listen = free_port();
    let pids = dir.path().join("pids");
    // The hook records its shell's pid and a child's, then waits far past the test.
    // Before that, it notes any pid of an earlier run that is still alive (a zombie is not).
    dir.write(
        "hook.sh",
        &format!(
            "#!/bin/sh\nfor p in $(cat {pids} 2>/dev/null); do s=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -c1); [ -n \"$s\" ] && [ \"$s\" != Z ] && echo $p >> {alive}; done\nsleep 600 &\necho $$ $! >> {pids}\nwait\n",
            pids = pids.display(),
            alive = dir.path().join("alive").display(),
        ),
    );
    std::process::Command::new("chmod").arg("+x").arg(dir.path().join("hook.sh")).status().expect("chmod");
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.10"], &["a", "b"], "hook", ""));
    let providers = "[{name: hook, kind: exec, command: [./hook.sh], timeout: 10s}]";
    let config = config(&dir, listen, "hook", providers, &["pools.yaml"]);
    let agent = Agent::start(&dir, &config, listen);
    wait_for("the hook runs", || std::fs::read_to_string(&pids).is_ok_and(|t| t.lines().count() == 1));
    agent.kill9();
    let text = std::fs::read_to_string(&pids).expect("pids");
    let hook: Vec<u32> = text.split_whitespace().map(|p| p.parse().expect("pid")).collect();
    assert!(hook.iter().all(|pid| running(*pid)), "the hook outlives the killed agent: {text}");
    // A process marked for another store must survive the next agent's sweep (in a group of its
    // own, as a hook is: the agent leaves its own group alone).
    let identity: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("agent.identity")).expect("identity"))
            .expect("JSON");
    let store = std::fs::canonicalize(dir.path().join("store")).expect("store");
    let owner = format!("{}@{}", identity["clusterId"].as_str().expect("clusterId"), store.display());
    let mut bystander = std::process::Command::new("sleep")
        .arg("600")
        .env("TENURE_HOOK_OWNER", format!("{owner}-other"))
        .process_group(0)
        .spawn()
        .expect("sleep");
    let agent = Agent::start(&dir, &config, listen);
    wait_for("the next agent killed the hook and its child", || hook.iter().all(|pid| !running(*pid)));
    assert!(running(bystander.id()), "another store's mark is not this agent's");
    let _ = bystander.kill();
    let _ = bystander.wait();
    // The call in doubt runs again in the second agent's hook: the first one's were gone by then.
    wait_for("the call in doubt ran again", || {
        std::fs::read_to_string(&pids).is_ok_and(|t| t.lines().count() == 2)
    });
    let alive = std::fs::read_to_string(dir.path().join("alive")).unwrap_or_default();
    assert!(alive.is_empty(), "the dead agent's hook still ran when the next one called: {alive}");
    // What the operator reads meanwhile: the interrupted attempt's outcome is unknown (SPEC 6),
    // and the action runs again (its second attempt, in the hook now).
    let actions = agent.get("/v1/actions?node=a&address=10.0.0.10")["actions"].clone();
    let acquire = actions.as_array().and_then(|rows| rows.iter().find(|r| r["verb"] == "acquire")).cloned();
    let acquire = acquire.unwrap_or_else(|| panic!("a's acquire: {actions}"));
    assert_eq!(
        (&acquire["state"], &acquire["attempts"], &acquire["lastError"]),
        (&json!("approved"), &json!(2), &json!("outcome unknown: the agent stopped during attempt 1")),
        "{acquire}"
    );
    agent.kill9();
    assert!(
        tenure::exec::hook::kill_orphans(&owner).expect("cleaned up") >= 2,
        "the second hook and its child"
    );
}

/// The agent process refuses a store of another cluster and a truncated store file, each with
/// its own one-line message and exit 1, and leaves the files as they were.
#[test]
fn the_agent_refuses_a_store_of_another_cluster_and_a_truncated_one() {
    let dir = TempDir::new("agent-refusals");
    let listen = free_port();
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.10"], &["a", "b"], "sim1", ""));
    let config = config(&dir, listen, "sim1", "[{name: sim1, kind: sim-cloud}]", &["pools.yaml"]);
    let agent = Agent::start(&dir, &config, listen);
    wait_for("a owns", || {
        let rows = map(&agent.get("/v1/ownership")["ownership"]);
        !rows.is_empty() && rows.values().all(|(o, ..)| o == "a")
    });
    assert!(agent.terminate().success());
    let refusal = |what: &str| -> String {
        let mut refused = Agent::spawn(&dir, &config, listen);
        let status = process::wait_exit(&mut refused.child);
        assert_eq!(status.code(), Some(1), "{what} must not start: {}", refused.log());
        let log = refused.log();
        let lines: Vec<&str> = log.lines().filter(|l| l.contains("tenure agent:")).collect();
        assert_eq!(lines.len(), 1, "one line naming why ({what}): {log}");
        lines[0].to_owned()
    };

    // Another cluster: the identity file names one, the store holds another.
    let identity_path = dir.path().join("agent.identity");
    let original = std::fs::read_to_string(&identity_path).expect("identity");
    let mut other: Value = serde_json::from_str(&original).expect("JSON");
    other["clusterId"] = "0123456789abcdef0123456789abcdef".into();
    std::fs::write(&identity_path, other.to_string()).expect("write");
    let store_file = dir.path().join("store").join(tenure::store::STORE_FILE_NAME);
    let store_bytes = std::fs::read(&store_file).expect("store");
    let line = refusal("another cluster's store");
    assert!(line.contains("belongs to cluster") && line.contains("0123456789abcdef"), "{line}");
    assert_eq!(std::fs::read(&store_file).expect("store"), store_bytes, "the refusal changed the store");

    // A truncated store file, with its own identity file back.
    std::fs::write(&identity_path, &original).expect("write");
    std::fs::write(&store_file, &store_bytes[..store_bytes.len() / 2]).expect("truncate");
    let line = refusal("a truncated store");
    assert!(line.contains("is not a readable store"), "{line}");
    assert_eq!(std::fs::read(&store_file).expect("store").len(), store_bytes.len() / 2, "left as it was");
}

/// One refused call: (path, token, body, status, a word the error must hold).
type Refusal<'a> = (&'a str, Option<&'a str>, Option<&'a str>, u16, &'a str);

/// The running agent's API refuses a mutating call without the token (401), with a wrong one
/// (403), with a bad body (400, naming the field) and with a body over the limit (413); after
/// each, the map (owners, tokens, desired flags) is as it was.
#[test]
fn the_agent_api_refuses_401_403_400_413_and_changes_nothing() {
    let dir = TempDir::new("agent-api-refusals");
    let listen = free_port();
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.10"], &["a", "b"], "sim1", ""));
    let config = config(&dir, listen, "sim1", "[{name: sim1, kind: sim-cloud}]", &["pools.yaml"]);
    let agent = Agent::start(&dir, &config, listen);
    wait_for("a owns", || {
        let rows = map(&agent.get("/v1/ownership")["ownership"]);
        !rows.is_empty() && rows.values().all(|(o, ..)| o == "a")
    });
    let before = map(&agent.get("/v1/ownership")["ownership"]);
    let cases: [Refusal<'_>; 4] = [
        ("/v1/drain/a", None, None, 401, ""),
        ("/v1/drain/a", Some("wrong-token-0123456789"), None, 403, ""),
        ("/v1/undesire", Some(TOKEN), Some(r#"{"pool": "edge", "address": "not-an-ip"}"#), 400, "address"),
        ("/v1/undesire", Some(TOKEN), Some(r#"{"pool": "edge"}"#), 400, "address"),
    ];
    for (path, token, body, status, field) in cases {
        let (got, text) = process::http(listen, "POST", path, token, body).expect("answers");
        assert_eq!(got, status, "{path} with {token:?}: {text}");
        assert!(text.contains(field), "the error names `{field}`: {text}");
        assert_eq!(map(&agent.get("/v1/ownership")["ownership"]), before, "{path} {status} changed the map");
    }
    // 413: the declared length is over the limit; the agent answers without reading a body (so
    // none is sent: writing one into a closed connection would make the test flaky).
    let mut stream = std::net::TcpStream::connect(listen).expect("connects");
    let head = format!(
        "POST /v1/undesire HTTP/1.1\r\nHost: {listen}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        tenure::api::API_BODY_BYTES_MAX + 1
    );
    std::io::Write::write_all(&mut stream, head.as_bytes()).expect("writes");
    let mut response = String::new();
    let _ = std::io::Read::read_to_string(&mut stream, &mut response);
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    assert_eq!(map(&agent.get("/v1/ownership")["ownership"]), before, "413 changed the map");
    assert!(agent.terminate().success());
}

/// Starts the agent on `config`, which it must refuse before it opens its store with `code`:
/// answers its stderr, which must be exactly what `tenure validate` of the same config prints
/// (one function makes both checks) and must have created no store.
fn refused_before_the_store(
    dir: &TempDir,
    config: &std::path::Path,
    listen: std::net::SocketAddr,
    code: i32,
) -> String {
    let mut agent = Agent::spawn(dir, config, listen);
    let status = process::wait_exit(&mut agent.child);
    let log = agent.log();
    assert_eq!(status.code(), Some(code), "{log}");
    assert!(!dir.path().join("store").exists(), "no store was created");
    let (validate_code, stdout, stderr) = tenure(&["validate", config.to_str().expect("utf-8")]);
    assert_eq!((validate_code, stdout.as_str()), (code, ""), "tenure validate: {stderr}");
    assert_eq!(stderr, log, "tenure validate refuses what the agent refuses, in the same lines");
    log
}

/// A provider kind this build has no executor for stops the agent before it opens its store:
/// exit 3 (a part this build does not have), one line naming the config file, the provider's
/// `kind` and the cargo feature to rebuild with. `scripts/test` runs it in a default build (every
/// kind has an executor in a build with all features).
#[cfg(not(feature = "aws"))]
#[test]
fn a_provider_kind_without_an_executor_exits_3_in_one_line_before_touching_the_store() {
    let dir = TempDir::new("agent-no-executor");
    let listen = free_port();
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.10"], &["a", "b"], "cloud", ""));
    let config =
        config(&dir, listen, "cloud", "[{name: cloud, kind: aws, region: us-east-1}]", &["pools.yaml"]);
    let log = refused_before_the_store(&dir, &config, listen, 3);
    assert_eq!(
        log,
        format!(
            "{}:6:33: provider `cloud`: this build has no aws executor; rebuild with --features aws\n",
            config.display()
        )
    );
}

/// An API token file the agent cannot read stops it before it opens its store: exit 2, one line
/// at the config's `apiTokenFile`, the same as `tenure validate` prints.
#[test]
fn an_unreadable_token_file_exits_2_in_one_line_before_touching_the_store() {
    let dir = TempDir::new("agent-no-token");
    let listen = free_port();
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.10"], &["a", "b"], "sim1", ""));
    let config = config(&dir, listen, "sim1", "[{name: sim1, kind: sim-cloud}]", &["pools.yaml"]);
    std::fs::remove_file(dir.path().join("token")).expect("remove the token file");
    let log = refused_before_the_store(&dir, &config, listen, 2);
    let token = dir.path().join("token");
    assert!(
        log.starts_with(&format!(
            "{}:12:15: {}: cannot read the API token file: ",
            config.display(),
            token.display()
        )),
        "{log}"
    );
    assert_eq!(log.lines().count(), 1, "{log}");
}

/// The simulator's verbs in a build without the `sim` feature: exit 3 in one line each, naming
/// the feature (the runtime does not depend on the simulator).
#[cfg(not(feature = "sim"))]
#[test]
fn a_build_without_the_simulator_refuses_sim_and_replay_in_one_line() {
    let dir = TempDir::new("no-simulator");
    let scenario = dir.write("scenario.yaml", "nodes: []\n");
    for args in [vec!["sim", "--seeds", "1"], vec!["replay", scenario.to_str().expect("utf-8")]] {
        let (code, stdout, stderr) = tenure(&args);
        assert_eq!(code, 3, "{args:?}: {stderr}");
        assert_eq!(stdout, "", "{args:?}");
        assert_eq!(
            stderr,
            format!("tenure {}: this build has no simulator; rebuild with --features sim\n", args[0])
        );
    }
}

/// An etcd store in a build without the `etcd` feature: exit 3 in one line, no store created.
#[cfg(not(feature = "etcd"))]
#[test]
fn a_build_without_etcd_refuses_an_etcd_store_in_one_line() {
    let dir = TempDir::new("agent-no-etcd");
    let listen = free_port();
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.10"], &["a", "b"], "cloud", ""));
    let config = config(&dir, listen, "cloud", "[{name: cloud, kind: sim-cloud}]", &["pools.yaml"]);
    let text = std::fs::read_to_string(&config).expect("config").replace(
        "{kind: embedded, path: ./store}",
        "{kind: etcd, endpoints: [http://127.0.0.1:2379], path: ./store}",
    );
    std::fs::write(&config, text).expect("write");
    let log = refused_before_the_store(&dir, &config, listen, 3);
    assert_eq!(
        log,
        format!(
            "{}:4:15: this build has no etcd store (fleet mode); rebuild with --features etcd\n",
            config.display()
        )
    );
}

/// An agent whose stderr reader goes away (the terminal closed, a pipe's reader killed) logs on
/// into the void: it keeps serving and acting, and SIGTERM still ends it with 0 — a failed log
/// write is not a reason to stop holding addresses (it was a panic, exit 101).
#[test]
fn an_agent_whose_stderr_is_closed_keeps_running_and_exits_zero() {
    use std::io::BufRead as _;
    let dir = TempDir::new("agent-stderr-closed");
    let listen = free_port();
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.10"], &["a", "b"], "sim1", ""));
    let config = config(&dir, listen, "sim1", "[{name: sim1, kind: sim-cloud}]", &["pools.yaml"]);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["agent", "--config"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("tenure agent starts");
    let mut stderr = std::io::BufReader::new(child.stderr.take().expect("piped"));
    let mut first = String::new();
    stderr.read_line(&mut first).expect("a first log line");
    drop(stderr);
    let owner = |want: &str| {
        process::http(listen, "GET", "/v1/ownership", None, None).is_ok_and(|(status, body)| {
            status == 200
                && serde_json::from_str::<Value>(&body)
                    .is_ok_and(|rows| rows["ownership"][0]["owner"].as_str() == Some(want))
        })
    };
    wait_for("a owns the address", || owner("a"));
    // Logging now fails (EPIPE) on every line: a drain makes several.
    let (status, body) = process::http(listen, "POST", "/v1/drain/a", Some(TOKEN), None).expect("answers");
    assert_eq!(status, 200, "{body}");
    wait_for("b owns the address", || owner("b"));
    assert!(child.try_wait().expect("wait").is_none(), "the agent is still running");
    process::signal(&child, "TERM");
    let status = process::wait_exit(&mut child);
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// `listen: 127.0.0.1:0` asks the kernel for a port: the start's log line names the one the API
/// got (it said `:0` before, and the API could not be found).
#[cfg(feature = "sim")]
#[test]
fn an_api_on_port_0_is_found_from_the_start_line() {
    let dir = TempDir::new("agent-port-0");
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().expect("an address");
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.10"], &["a", "b"], "sim1", ""));
    let config = config(&dir, any, "sim1", "[{name: sim1, kind: sim-cloud}]", &["pools.yaml"]);
    let agent = Agent::spawn(&dir, &config, any);
    let mut bound = None;
    wait_for("the start line names the port", || {
        bound = agent.log().lines().find_map(|line| {
            let (_, after) = line.split_once("agent started listen=")?;
            after.split_whitespace().next()?.parse::<std::net::SocketAddr>().ok()
        });
        bound.is_some()
    });
    let bound = bound.expect("found");
    assert_ne!(bound.port(), 0, "{}", agent.log());
    wait_for("the API answers there", || {
        matches!(process::http(bound, "GET", "/v1/health", None, None), Ok((200, _)))
    });
}

/// Health is not ok before the agent's first step is done: while its start appends (slowed here
/// by the append hook) it says so, then while the first step plans (slowed by the step hook) —
/// an operator trial saw 200 between the store's open and the first failed append, with nothing
/// appended and nothing acted on yet.
#[test]
fn health_says_starting_until_the_first_step_is_done() {
    let dir = TempDir::new("agent-starting");
    let listen = free_port();
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.10"], &["a", "b"], "sim1", ""));
    let config = config(&dir, listen, "sim1", "[{name: sim1, kind: sim-cloud}]", &["pools.yaml"]);
    let agent = Agent::spawn_wrapped(
        &dir,
        &config,
        listen,
        &[],
        &[("TENURE_TEST_APPEND_DELAY_MS", "1500"), ("TENURE_TEST_STEP_DELAY_MS", "1500")],
    );
    // Every answer until the first 200, in order, each reason once.
    let mut reasons: Vec<String> = Vec::new();
    wait_for("a 200 health", || match process::http(listen, "GET", "/v1/health", None, None) {
        Ok((200, _)) => true,
        Ok((503, body)) => {
            let reason = serde_json::from_str::<Value>(&body).expect("json")["reason"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if reasons.last() != Some(&reason) {
                reasons.push(reason);
            }
            false
        }
        Ok((status, body)) => panic!("health answered {status}: {body}"),
        Err(_) => false,
    });
    let appending = reasons.iter().position(|r| r.starts_with("starting: appending"));
    let first_step = reasons.iter().position(|r| r.starts_with("starting: the first step"));
    assert!(
        matches!((appending, first_step), (Some(a), Some(f)) if a < f),
        "health before the first 200: {reasons:?}\n{}",
        agent.log()
    );
    agent.terminate();
}

/// A SIGTERM while the start appends stops the agent before its first step: no step, so no call
/// (an operator trial: the first step ran after the signal and started 256 calls).
#[test]
fn sigterm_while_the_start_appends_takes_no_first_step() {
    let dir = TempDir::new("agent-sigterm-start");
    let listen = free_port();
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.10"], &["a", "b"], "sim1", ""));
    let config = config(&dir, listen, "sim1", "[{name: sim1, kind: sim-cloud}]", &["pools.yaml"]);
    let agent = Agent::spawn_wrapped(&dir, &config, listen, &[], &[("TENURE_TEST_APPEND_DELAY_MS", "1500")]);
    wait_for("the start appends", || {
        matches!(process::http(listen, "GET", "/v1/health", None, None),
            Ok((503, body)) if body.contains("starting: appending"))
    });
    let stderr = agent.stderr.clone();
    let status = agent.terminate();
    let log = std::fs::read_to_string(stderr).unwrap_or_default();
    assert!(status.success(), "{status:?}\n{log}");
    assert!(log.contains("no step was taken"), "{log}");
}
