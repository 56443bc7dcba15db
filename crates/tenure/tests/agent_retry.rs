//! `tenure agent` as a real process with an `exec` hook that always fails: `GET /v1/actions`
//! and `tenure actions -o wide` say why, how often and when; the retries back off (SPEC-facing
//! rule in docs/decisions.md, "Retry backoff"); and the attempts survive a restart.

mod process;

use std::collections::BTreeMap;

use process::{Agent, TempDir, free_port, pool_yaml, tenure, wait_for_within};
use serde_json::Value;
use std::time::Duration;

/// The agent's `requeueInterval`: the first wait of the backoff.
const BASE_MS: u64 = 1_000;

/// Long enough for three attempts (1 s, then 2 s of backoff) on a loaded machine.
const ATTEMPTS_WAIT_MAX: Duration = Duration::from_secs(40);

/// Writes the hook, the pool and the config: nodes a (priority 10, the owner) and b on `hook`.
fn setup(dir: &TempDir, listen: std::net::SocketAddr) -> std::path::PathBuf {
    let calls = dir.path().join("calls.log");
    dir.write(
        "hook.sh",
        &format!(
            "#!/bin/sh\ndate +%s%3N >> {}\necho 'looking up the route' >&2\necho \"no route to $TENURE_ADDRESS\" >&2\nexit 1\n",
            calls.display()
        ),
    );
    std::process::Command::new("chmod").arg("+x").arg(dir.path().join("hook.sh")).status().expect("chmod");
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.10"], &["a", "b"], "hook", ""));
    dir.write("token", &format!("{}\n", process::TOKEN));
    let text = format!(
        "nodes:\n  - {{name: a, provider: hook, placementGroup: g1, nic: eni-a, priority: 10}}\n  - {{name: b, provider: hook, placementGroup: g1, nic: eni-b}}\n\
         store: {{kind: embedded, path: ./store}}\nidentityFile: ./agent.identity\n\
         providers: [{{name: hook, kind: exec, command: [./hook.sh], timeout: 2s}}]\npools: [pools.yaml]\n\
         listen: {listen}\nheartbeatInterval: 100ms\nrequeueInterval: {BASE_MS}ms\nactionTimeout: 2s\napiTokenFile: ./token\n"
    );
    dir.write("agent.yaml", &text)
}

/// a's one action (the acquire of 10.0.0.10), as `/v1/actions` shows it.
fn acquire_row(agent: &Agent) -> Option<Value> {
    agent.get("/v1/actions?node=a")["actions"].as_array().and_then(|rows| rows.first().cloned())
}

fn field(row: &Value, name: &str) -> u64 {
    row[name].as_u64().unwrap_or_else(|| panic!("`{name}` in {row}"))
}

/// The hook's calls, by this host's clock (ms).
fn call_times(dir: &TempDir) -> Vec<u64> {
    std::fs::read_to_string(dir.path().join("calls.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().parse().expect("a timestamp"))
        .collect()
}

#[test]
fn a_failing_hook_shows_its_reason_and_attempts_retries_later_each_time_and_keeps_them_across_a_restart() {
    let dir = TempDir::new("agent-retry");
    let listen = free_port();
    let config = setup(&dir, listen);
    let agent = Agent::start(&dir, &config, listen);

    // Every failed attempt seen, with the wait it announced: attempts → (lastAttemptMs, nextAttemptMs).
    let mut seen: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut last = Value::Null;
    wait_for_within(ATTEMPTS_WAIT_MAX, "three failed attempts of a's acquire", || {
        if let Some(row) = acquire_row(&agent)
            && row["state"] == "failed"
        {
            seen.insert(
                field(&row, "attempts"),
                (field(&row, "lastAttemptMs"), field(&row, "nextAttemptMs")),
            );
            last = row;
        }
        seen.keys().any(|n| *n >= 3)
    });
    assert_eq!(last["lastError"], "no route to 10.0.0.10", "the hook's last stderr line: {last}");
    assert!(field(&last, "lastAttemptWallMs") > 1_600_000_000_000, "the agent's wall clock: {last}");
    assert_eq!(last["verb"], "acquire");

    // The announced waits: from the base, doubling, less at most a quarter of jitter.
    for (attempts, (at, next)) in &seen {
        let nominal = BASE_MS << (attempts - 1);
        let wait = next - at;
        assert!(
            (nominal - nominal / 4..=nominal).contains(&wait),
            "attempt {attempts}: {wait} ms of {nominal}"
        );
    }
    // The calls themselves: each waited at least its announced wait, and the waits grew.
    let attempt_at: Vec<(u64, u64)> = seen.iter().map(|(n, (at, _))| (*n, *at)).collect();
    for pair in attempt_at.windows(2).filter(|p| p[1].0 == p[0].0 + 1) {
        let (n, at) = pair[0];
        assert!(pair[1].1 >= seen[&n].1, "attempt {} started before attempt {n}'s backoff ended", n + 1);
        assert!(pair[1].1 > at);
    }
    let times = call_times(&dir);
    assert!(times.len() >= 3, "{times:?}");
    let gaps: Vec<u64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    // (That the waits grow is checked above on the stream times, which are exact; by this host's
    // clock a first retry a loaded machine delays can outlast the second.) By this host's clock, give or take the heartbeat the gate's stream time trails it by.
    assert!(gaps[0] >= BASE_MS / 2, "the first retry waited its backoff: {gaps:?} ms");

    // The CLI's wide table shows the attempts and the reason.
    let endpoint = format!("http://{listen}");
    let (code, out, err) = tenure(&["actions", "--node", "a", "-o", "wide", "--endpoint", &endpoint]);
    assert_eq!(code, 0, "{err}");
    let header: Vec<&str> = out.lines().next().expect("a header").split_whitespace().collect();
    assert_eq!(header[2], "ATTEMPTS", "{out}");
    assert_eq!(header.last(), Some(&"REASON"), "{out}");
    assert!(out.lines().nth(1).is_some_and(|l| l.ends_with("no route to 10.0.0.10")), "{out}");

    // A restart keeps what the journal says of the attempts.
    let before = acquire_row(&agent).expect("a row");
    assert!(agent.terminate().success());
    let agent = Agent::start(&dir, &config, listen);
    let after = acquire_row(&agent).expect("a row after the restart");
    assert!(field(&after, "attempts") >= field(&before, "attempts"), "{before}\n{after}");
    assert!(field(&after, "lastAttemptMs") >= field(&before, "lastAttemptMs"), "{before}\n{after}");
    assert_eq!(after["lastError"], "no route to 10.0.0.10", "{after}");
    assert!(agent.terminate().success());
}
