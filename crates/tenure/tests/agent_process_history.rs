//! `GET /v1/history` and the lists' paging against `tenure agent` as a real process on a
//! temporary embedded store: a drain over HTTP shows as ownership moves with cause `drain` and
//! the new epochs, then the results; walking a list with `limit=1` gives exactly the unpaged
//! list; a bad token is a one-line 400; `tenure history` prints the move.

mod process;

use process::{Agent, TOKEN, TempDir, free_port, http, pool_yaml, tenure, wait_for};
use serde_json::Value;

const CONFIG: &str = "nodes:\n  - {name: a, provider: sim1, placementGroup: g1, nic: eni-a, priority: 10}\n  - {name: b, provider: sim1, placementGroup: g1, nic: eni-b}\nstore: {kind: embedded, path: ./store}\nidentityFile: ./agent.identity\nproviders: [{name: sim1, kind: sim-cloud}]\npools: [pools.yaml]\nlisten: LISTEN\nheartbeatInterval: 100ms\nrequeueInterval: 200ms\nactionTimeout: 10s\napiTokenFile: ./token\n";

/// The entries of `GET /v1/history` (with `query`).
fn history(agent: &Agent, query: &str) -> Vec<Value> {
    agent.get(&format!("/v1/history{query}"))["history"].as_array().expect("a list").clone()
}

/// Walks `path` with `limit=1`, following `continue`.
fn walk(agent: &Agent, path: &str, key: &str) -> Vec<Value> {
    let join = if path.contains('?') { '&' } else { '?' };
    let mut rows = Vec::new();
    let mut page = format!("{path}{join}limit=1");
    for _ in 0..1_000 {
        let body = agent.get(&page);
        let list = body[key].as_array().expect("a list");
        assert!(list.len() <= 1, "{page}");
        rows.extend(list.iter().cloned());
        let Some(token) = body.get("continue").and_then(Value::as_str) else { return rows };
        page = format!("{path}{join}limit=1&continue={token}");
    }
    panic!("{path}: more than 1000 pages");
}

#[test]
fn a_drain_shows_in_the_history_and_every_list_pages() {
    let dir = TempDir::new("agent-history");
    let listen = free_port();
    dir.write("token", &format!("{TOKEN}\n"));
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.10", "10.0.0.11"], &["a", "b"], "sim1", ""));
    let config = dir.write("agent.yaml", &CONFIG.replace("LISTEN", &listen.to_string()));
    let agent = Agent::start(&dir, &config, listen);
    let executed_by = |node: &str, entries: &[Value]| {
        entries.iter().filter(|e| e["kind"] == "executed" && e["node"] == node).count()
    };
    wait_for("a executed both acquire verbs of both addresses", || {
        executed_by("a", &history(&agent, "")) == 4
    });

    let (status, body) = agent.post("/v1/drain/a", None);
    assert_eq!(status, 200, "{body}");
    let index = serde_json::from_str::<Value>(&body).expect("JSON")["index"].as_u64().expect("an index");
    wait_for("b's acquires and a's releases reported", || {
        let entries = history(&agent, "");
        executed_by("b", &entries) == 4 && executed_by("a", &entries) == 8
    });
    let entries = history(&agent, "?node=b");
    let moves: Vec<&Value> = entries.iter().filter(|e| e["kind"] == "ownership").collect();
    assert_eq!(moves.len(), 2, "both addresses moved to b: {entries:#?}");
    for moved in moves {
        assert_eq!(moved["logIndex"].as_u64(), Some(index), "{moved}");
        assert_eq!(
            (&moved["cause"], &moved["from"], &moved["to"]),
            (&"drain".into(), &"a".into(), &"b".into())
        );
        assert_eq!((moved["ownershipEpoch"].as_u64(), moved["captureEpoch"].as_u64()), (Some(2), Some(2)));
    }
    assert_eq!(agent.get("/v1/history")["reachesBackTo"], 1, "the embedded store keeps its whole log");

    for (path, key) in [
        ("/v1/ownership", "ownership"),
        ("/v1/actions", "actions"),
        ("/v1/actions?node=a&state=executed", "actions"),
        ("/v1/history", "history"),
        ("/v1/history?address=10.0.0.11", "history"),
    ] {
        let whole = agent.get(path)[key].as_array().expect("a list").clone();
        assert!(whole.len() >= 2, "{path}: {} rows", whole.len());
        assert_eq!(walk(&agent, path, key), whole, "{path}");
    }
    let (status, body) =
        http(listen, "GET", "/v1/actions?limit=1&continue=garbage", None, None).expect("answers");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("\"field\":\"continue\"") && !body.trim().contains('\n'), "{body}");

    let endpoint = format!("http://{listen}");
    let (code, table, stderr) = tenure(&["history", "10.0.0.10", "--endpoint", &endpoint]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        table.lines().any(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words.get(3..) == Some(&["ownership", "edge", "10.0.0.10", "a", "→", "b", "drain", "2", "2"][..])
        }),
        "{table}"
    );
    assert!(agent.terminate().success());
}
