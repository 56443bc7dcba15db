//! The real `tenure` binary's `history` verb and the list verbs' paging (`--limit`,
//! `--continue`; without them the whole list, followed page by page) against the API in front
//! of the test-double agent loop (`support`, the real core and its history fold).

mod support;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;
use support::{Mode, Server, TOKEN, start};

const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// A running double and API, on a runtime of their own (the test thread runs the binary).
struct Agent {
    server: Server,
    _runtime: tokio::runtime::Runtime,
    dir: PathBuf,
}

impl Agent {
    fn start(name: &str) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let server = runtime.block_on(start(Mode::Answering, Some(TOKEN), ANSWER_TIMEOUT));
        let dir = std::env::temp_dir().join(format!("tenure-cli-history-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        std::fs::write(dir.join("token"), format!("{TOKEN}\n")).expect("writes the token file");
        Self { server, _runtime: runtime, dir }
    }

    /// `tenure ARGS…` against this agent, with no other TENURE_* variables inherited.
    fn tenure(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_tenure"))
            .args(args)
            .env("TENURE_ENDPOINT", &self.server.base)
            .env("TENURE_TOKEN_FILE", self.dir.join("token"))
            .output()
            .expect("the tenure binary runs")
    }

    /// `tenure ARGS…`, which must exit 0; its stdout and stderr.
    fn ok(&self, args: &[&str]) -> (String, String) {
        let output = self.tenure(args);
        let (out, err) = (text(&output.stdout), text(&output.stderr));
        assert_eq!(output.status.code(), Some(0), "tenure {args:?}: {err}");
        (out, err)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}

#[test]
fn history_prints_a_drain_with_its_cause_as_a_table_and_json() {
    let agent = Agent::start("table");
    agent.ok(&["drain", "a"]);
    let (table, _) = agent.ok(&["history", "10.0.0.10"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "a header, the placement and the drain:\n{table}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "INDEX",
            "WALL-TIME",
            "STREAM-TIME",
            "KIND",
            "POOL",
            "ADDRESS",
            "CHANGE",
            "CAUSE",
            "OWNERSHIP-EPOCH",
            "CAPTURE-EPOCH"
        ]
    );
    let drain: Vec<&str> = lines[2].split_whitespace().collect();
    // INDEX WALL STREAM KIND POOL ADDRESS a → b CAUSE EPOCHS
    assert_eq!(drain[3..], ["ownership", "edge", "10.0.0.10", "a", "→", "b", "drain", "2", "2"], "{table}");
    assert!(drain[1].starts_with("1970-01-01T00:00:00.") && drain[1].ends_with('Z'), "{table}");
    assert!(!table.contains("history starts at"), "the double's log is whole: no footer");

    let (json, _) = agent.ok(&["history", "--node", "b", "-o", "json"]);
    let value: Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(value["reachesBackTo"], 1);
    let entries = value["history"].as_array().expect("a list");
    assert!(!entries.is_empty() && entries.iter().all(|e| e["to"] == "b" || e["from"] == "b"), "{json}");
    assert!(value.get("continue").is_none(), "the whole list: no token left");
    // Read one row per request, following the tokens: the same document.
    let (chunked, _) = agent.ok(&["history", "--node", "b", "-o", "json", "--chunk-size", "1"]);
    assert!(entries.len() > 1, "a list of several pages: {json}");
    assert_eq!(serde_json::from_str::<Value>(&chunked).expect("JSON"), value);

    // Bad input: exit 2, with one line from the agent's 400 (clap words a bad --limit itself).
    for args in
        [&["history", "10.0.0.300"][..], &["history", "--continue", "junk"], &["history", "--limit", "0"]]
    {
        let output = agent.tenure(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", text(&output.stderr));
        if args[1] != "--limit" {
            assert_eq!(text(&output.stderr).lines().count(), 1, "{args:?}: {}", text(&output.stderr));
        }
    }
    // A bad number of rows is named as such, a negative one too (not "unexpected argument").
    for (flag, value) in [("--limit", "-1"), ("--limit", "+5"), ("--limit", "10001"), ("--chunk-size", "-5")]
    {
        let output = agent.tenure(&["history", flag, value]);
        assert_eq!(output.status.code(), Some(2), "{flag} {value}");
        let stderr = text(&output.stderr);
        assert!(
            stderr.starts_with(&format!("error: invalid value '{value}' for '{flag} "))
                && stderr.contains("expected a number of rows from 1 to 10000"),
            "{flag} {value}: {stderr}"
        );
    }
}

#[test]
fn limit_prints_one_page_and_the_token_continue_prints_the_next() {
    let agent = Agent::start("paging");
    let (whole, _) = agent.ok(&["ownership", "-o", "json"]);
    let whole: Value = serde_json::from_str(&whole).expect("JSON");
    let (first, note) = agent.ok(&["ownership", "-o", "json", "--limit", "2"]);
    let first: Value = serde_json::from_str(&first).expect("JSON");
    assert_eq!(first["ownership"].as_array().expect("a list").len(), 2);
    let token = first["continue"].as_str().expect("more rows follow").to_owned();
    assert!(note.contains(&format!("--continue {token}")), "{note}");
    let (rest, note) = agent.ok(&["ownership", "-o", "json", "--limit", "2", "--continue", &token]);
    let rest: Value = serde_json::from_str(&rest).expect("JSON");
    assert!(rest.get("continue").is_none() && note.is_empty(), "the last page: {note}");
    let walked: Vec<Value> = first["ownership"]
        .as_array()
        .expect("a list")
        .iter()
        .chain(rest["ownership"].as_array().expect("a list"))
        .cloned()
        .collect();
    assert_eq!(&walked, whole["ownership"].as_array().expect("a list"));
    // A table with --limit: the page's rows only.
    let (table, _) = agent.ok(&["actions", "--limit", "1"]);
    assert_eq!(table.lines().count(), 2, "a header and one row:\n{table}");
}
