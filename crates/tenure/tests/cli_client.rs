//! The real `tenure` binary's verbs against the API in front of a test-double agent loop
//! (`support`): table, json and yaml output, exit codes 0 (done), 1 (refused, no agent) and 2
//! (bad input), and the one-line messages.
//!
//! Over 600 lines: one rig (the CLI against a running agent), many cases;
//! a second binary would cost a link.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;
use support::{Mode, Server, TOKEN, start};

const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
const GATED_KEY: &str = "gated/10.0.0.20/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1";

/// A running double and API, on a runtime of their own (the test thread runs the binary).
struct Agent {
    server: Server,
    runtime: tokio::runtime::Runtime,
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
        let dir = std::env::temp_dir().join(format!("tenure-cli-client-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        std::fs::write(dir.join("token"), format!("{TOKEN}\n")).expect("writes the token file");
        std::fs::write(dir.join("wrong-token"), "not-the-token").expect("writes a wrong token file");
        std::fs::write(dir.join("empty-token"), " \n").expect("writes an empty token file");
        Self { server, runtime, dir }
    }

    fn token_file(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// `tenure ARGS… --endpoint THIS`, with no TENURE_* variables inherited.
    fn tenure(&self, args: &[&str]) -> Output {
        tenure_with_env(args, &[("TENURE_ENDPOINT", &self.server.base)])
    }

    fn log_len(&self) -> u64 {
        self.server.state.log_len()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = &self.runtime;
    }
}

fn tenure_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tenure"));
    command.args(args).env_remove("TENURE_ENDPOINT").env_remove("TENURE_TOKEN_FILE");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("the tenure binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("UTF-8 stdout")
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("UTF-8 stderr")
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("exited, not killed")
}

#[test]
fn ownership_prints_an_aligned_table_json_and_yaml() {
    let agent = Agent::start("ownership");
    let table = agent.tenure(&["ownership"]);
    assert_eq!(code(&table), 0, "{}", stderr(&table));
    let text = stdout(&table);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "a header and three addresses:\n{text}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["POOL", "ADDRESS", "OWNER", "PHASE", "NICS"]);
    // Aligned: each column starts at the same offset on every line.
    let column = |line: &str, n: usize| {
        let mut starts = Vec::new();
        let mut previous_space = true;
        for (i, c) in line.char_indices() {
            if c != ' ' && previous_space {
                starts.push(i);
            }
            previous_space = c == ' ';
        }
        starts[n]
    };
    for n in 0..5 {
        let at = column(lines[0], n);
        assert!(lines.iter().all(|l| column(l, n) == at), "column {n} is aligned:\n{text}");
    }
    // The double plans but runs no provider: a owns the address, no result says it holds it.
    assert!(lines.iter().any(
        |l| l.split_whitespace().collect::<Vec<_>>() == ["edge", "10.0.0.10", "a", "acquiring", "<none>"]
    ));
    assert!(
        lines.iter().any(|l| l.split_whitespace().collect::<Vec<_>>()
            == ["gated", "10.0.0.20", "a", "pending-approval", "<none>"]),
        "an address whose acquire waits for approval is held by no NIC:\n{text}"
    );
    assert!(lines.iter().all(|l| !l.ends_with(' ')), "no trailing spaces");

    let json = agent.tenure(&["ownership", "-o", "json"]);
    assert_eq!(code(&json), 0);
    let value: Value = serde_json::from_str(&stdout(&json)).expect("JSON on stdout");
    assert_eq!(value["ownership"].as_array().expect("a list").len(), 3);
    assert!(stdout(&json).contains("\n  \"ownership\": ["), "pretty-printed");

    let yaml = agent.tenure(&["ownership", "-o", "yaml"]);
    assert_eq!(code(&yaml), 0, "{}", stderr(&yaml));
    let from_yaml: Value = serde_saphyr::from_str(&stdout(&yaml)).expect("YAML on stdout");
    assert_eq!(from_yaml, value, "the YAML holds the same document as the JSON");
}

/// A list from an agent that is not healthy (its store refused its log, it cannot follow the log)
/// is printed as asked, exit 0, with one warning line on stderr naming why and as of which log
/// index; a healthy agent's has none.
#[test]
fn a_list_from_an_unhealthy_agent_says_it_may_be_out_of_date() {
    let agent = Agent::start("unhealthy");
    let healthy = agent.tenure(&["ownership"]);
    assert_eq!(code(&healthy), 0, "{}", stderr(&healthy));
    assert!(stderr(&healthy).is_empty(), "no warning from a healthy agent: {}", stderr(&healthy));
    agent.server.state.set_healthy(false);
    for verb in ["ownership", "actions"] {
        let out = agent.tenure(&[verb]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(!stdout(&out).is_empty(), "the list is printed");
        let warning = stderr(&out);
        assert_eq!(warning.lines().count(), 1, "one line: {warning}");
        assert!(
            warning.starts_with(&format!(
                "tenure {verb}: warning: this agent is not healthy (cannot read the log head (test double)); the above \
                 is its view as of log index "
            )),
            "{warning}"
        );
        assert!(warning.trim_end().ends_with("which may be out of date: ask a healthy agent"), "{warning}");
    }
}

/// `-o wide` adds the holding nodes, desire and both epochs; addresses as arguments, `--pool` and
/// `--node` filter on the agent's side; a bad filter is bad input (exit 2).
#[test]
fn ownership_wide_and_its_filters() {
    let agent = Agent::start("ownership-wide");
    let wide = agent.tenure(&["ownership", "-o", "wide", "10.0.0.10"]);
    assert_eq!(code(&wide), 0, "{}", stderr(&wide));
    let text = stdout(&wide);
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        lines,
        vec![
            vec![
                "POOL",
                "ADDRESS",
                "OWNER",
                "PHASE",
                "NICS",
                "HELD-BY",
                "DESIRED",
                "OWNERSHIP-EPOCH",
                "CAPTURE-EPOCH"
            ],
            vec!["edge", "10.0.0.10", "a", "acquiring", "<none>", "<none>", "true", "1", "1"],
        ],
        "{text}"
    );
    let pool = agent.tenure(&["ownership", "--pool", "gated", "-o", "json"]);
    let value: Value = serde_json::from_str(&stdout(&pool)).expect("JSON on stdout");
    let rows = value["ownership"].as_array().expect("a list");
    assert_eq!(rows.len(), 1, "{value}");
    assert_eq!(rows[0]["phase"], "pending-approval");
    let two = agent.tenure(&["ownership", "10.0.0.10", "10.0.0.11", "--node", "a"]);
    assert_eq!(stdout(&two).lines().count(), 3, "a header and two addresses:\n{}", stdout(&two));
    let none = agent.tenure(&["ownership", "--node", "b"]);
    assert_eq!((code(&none), stdout(&none).as_str()), (0, ""), "b owns and holds nothing");
    assert_eq!(stderr(&none), "No resources found.\n");
    let bad = agent.tenure(&["ownership", "10.0.0.300"]);
    assert_eq!(code(&bad), 2, "{}", stderr(&bad));
    assert!(stderr(&bad).starts_with("tenure ownership: "), "{}", stderr(&bad));
    assert_eq!(stderr(&bad).lines().count(), 1, "{}", stderr(&bad));
}

#[test]
fn actions_filters_and_the_empty_answer() {
    let agent = Agent::start("actions");
    let pending = agent.tenure(&["actions", "--state", "pending", "--pool", "gated"]);
    assert_eq!(code(&pending), 0, "{}", stderr(&pending));
    let text = stdout(&pending);
    let header: Vec<&str> = text.lines().next().expect("a header").split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NODE",
            "STATE",
            "ATTEMPTS",
            "VERB",
            "POOL",
            "ADDRESS",
            "HOLDER",
            "OWNERSHIP-EPOCH",
            "CAPTURE-EPOCH",
            "KEY"
        ]
    );
    assert!(text.lines().skip(1).all(|l| l.contains(" pending ") && l.contains(" gated ")), "{text}");
    assert!(text.contains(GATED_KEY), "the key is shown, for approve:\n{text}");

    let none = agent.tenure(&["actions", "--node", "b"]);
    assert_eq!(code(&none), 0);
    assert_eq!(stdout(&none), "", "nothing on stdout");
    assert_eq!(stderr(&none), "No resources found.\n");

    let bad = agent.tenure(&["actions", "--state", "bogus"]);
    assert_eq!(code(&bad), 2, "bad input");
    assert_eq!(
        stderr(&bad),
        "tenure actions: --state `bogus` is not a state; one of pending, approved, executed, failed, skipped\n"
    );
}

/// One reading of an address filter (`ListFilter::set`) on the CLI, the list calls and the status
/// page: a CIDR range is a range filter everywhere, an empty value filters nothing, a bad one is
/// one line naming the flag; `tenure actions --address` filters as `ownership`'s addresses do;
/// `approve --address` takes the same forms but one address (it changes something).
#[test]
fn address_filters_read_the_same_everywhere() {
    let agent = Agent::start("filters");
    let addresses = |args: &[&str]| -> Vec<String> {
        let mut args = args.to_vec();
        args.extend(["-o", "json"]);
        let out = agent.tenure(&args);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        let value: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
        let key = if args[0] == "actions" { "actions" } else { "ownership" };
        let mut seen: Vec<String> = value[key]
            .as_array()
            .expect("a list")
            .iter()
            .map(|row| row["address"].as_str().expect("an address").to_owned())
            .collect();
        seen.dedup();
        seen
    };
    assert_eq!(addresses(&["ownership", "10.0.0.0/28"]), ["10.0.0.10", "10.0.0.11"]);
    assert_eq!(addresses(&["ownership", "10.0.0.20/32", " 10.0.0.11 "]), ["10.0.0.11", "10.0.0.20"]);
    assert_eq!(addresses(&["ownership", "--pool", "", "--node", ""]).len(), 3, "empty: no filter");
    assert_eq!(addresses(&["actions", "--address", "10.0.0.20"]), ["10.0.0.20"]);
    assert_eq!(addresses(&["actions", "--address", "10.0.0.16/28", "--pool", "gated"]), ["10.0.0.20"]);
    let history = agent.tenure(&["history", "10.0.0.0/24", "-o", "json"]);
    assert_eq!(code(&history), 0, "a range is a history filter too: {}", stderr(&history));

    for (args, line) in [
        (&["ownership", "10.0.0.7/33"][..], "tenure ownership: ADDRESS `10.0.0.7/33`: "),
        (&["history", "10.0.0.300"], "tenure history: ADDRESS `10.0.0.300` is not an IPv4/IPv6 address"),
        (&["actions", "--address", "nope"], "tenure actions: --address `nope` is not an IPv4/IPv6 address"),
        (&["actions", "--node", "a b"], "tenure actions: --node `a b` contains"),
        (
            &["approve", "--pool", "gated", "--address", "10.0.0.0/24"],
            "tenure approve: --address `10.0.0.0/24` is a range",
        ),
        (&["approve", "--pool", "", "--address", "10.0.0.20"], "tenure approve: --pool must not be empty"),
        (
            &["approve", "--pool", "gated", "--address", "10.0.0.0020"],
            "tenure approve: --address `10.0.0.0020` is not",
        ),
    ] {
        let token = agent.token_file("token");
        let mut args = args.to_vec();
        if args[0] == "approve" {
            args.extend(["--token-file", &token]);
        }
        let out = agent.tenure(&args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).starts_with(line), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    }
    // approve --address in another form of the same address finds its pending actions.
    let before = agent.log_len();
    let token = agent.token_file("token");
    let approve =
        agent.tenure(&["approve", "--pool", "gated", "--address", "10.0.0.20/32", "--token-file", &token]);
    assert_eq!(code(&approve), 0, "{}", stderr(&approve));
    assert!(agent.log_len() > before, "{}", stdout(&approve));
}

/// A server that answers every request with `response` and closes: something at the endpoint
/// that is not a tenure agent. Its port on 127.0.0.1.
fn foreign_server(response: &'static str) -> u16 {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("bound").port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut request = [0_u8; 4096];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(response.as_bytes());
        }
    });
    port
}

/// An endpoint that answers but is not a tenure agent (a web server's 404 page, a text answer)
/// is said so in one line, exit 1 — not a JSON parse error.
#[test]
fn an_endpoint_that_is_not_an_agent_is_said_so_in_one_line() {
    let html = foreign_server(
        "HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: 46\r\nConnection: close\r\n\r\n<!DOCTYPE html>\n<html><body>nope</body></html>",
    );
    let text = foreign_server(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 12\r\nConnection: close\r\n\r\nhello world\n",
    );
    for (port, what) in [(html, "404 Not Found with an HTML page"), (text, "200 OK with `hello world`")] {
        let endpoint = format!("http://127.0.0.1:{port}");
        for args in [&["ownership"][..], &["history", "10.0.0.10"]] {
            let mut args = args.to_vec();
            args.extend(["--endpoint", &endpoint]);
            let out = tenure_with_env(&args, &[]);
            assert_eq!(code(&out), 1, "{}", stderr(&out));
            assert_eq!(
                stderr(&out),
                format!(
                    "tenure {}: {endpoint} answered {what}, not a tenure agent's JSON; is --endpoint a tenure \
                     agent's API (or did a proxy in front of it fail)?\n",
                    args[0]
                )
            );
        }
    }
}

#[test]
fn changes_need_a_token_file_and_say_what_they_did() {
    let agent = Agent::start("changes");
    let token = agent.token_file("token");
    let before = agent.log_len();

    let without = agent.tenure(&["drain", "a"]);
    assert_eq!(code(&without), 2);
    assert!(stderr(&without).contains("--token-file"), "{}", stderr(&without));
    let missing = agent.tenure(&["drain", "a", "--token-file", &agent.token_file("absent")]);
    assert_eq!(code(&missing), 2);
    assert!(stderr(&missing).starts_with("tenure drain: "), "{}", stderr(&missing));
    let empty = agent.tenure(&["drain", "a", "--token-file", &agent.token_file("empty-token")]);
    assert_eq!(code(&empty), 2);
    assert!(stderr(&empty).contains("empty"), "{}", stderr(&empty));
    let wrong = agent.tenure(&["drain", "a", "--token-file", &agent.token_file("wrong-token")]);
    assert_eq!(code(&wrong), 1, "a 403 is a refusal");
    assert!(stderr(&wrong).trim_end().ends_with("(403)"), "{}", stderr(&wrong));
    assert_eq!(agent.log_len(), before, "nothing refused was appended");

    let unknown = agent.tenure(&["drain", "zzz", "--token-file", &token]);
    assert_eq!(code(&unknown), 1);
    assert_eq!(stderr(&unknown), "tenure drain: node \"zzz\" not found (404)\n");
    let range = agent.tenure(&["desire", "edge", "10.0.0.16/29", "--token-file", &token]);
    assert_eq!(code(&range), 2, "a 400 is bad input: {}", stderr(&range));
    assert!(stderr(&range).contains("field `address`"), "{}", stderr(&range));
    assert_eq!(agent.log_len(), before);

    let drain = agent.tenure(&["drain", "a", "--token-file", &token]);
    assert_eq!(code(&drain), 0, "{}", stderr(&drain));
    assert_eq!(stdout(&drain), format!("node/a drained (log index {})\n", before + 1));
    let owners = stdout(&agent.tenure(&["ownership", "-o", "json"]));
    let owners: Value = serde_json::from_str(&owners).expect("JSON");
    assert!(owners["ownership"].as_array().expect("a list").iter().all(|r| r["owner"] == "b"), "{owners}");

    // The token file may come from the environment; the answer as JSON and YAML.
    let env = [("TENURE_ENDPOINT", agent.server.base.as_str()), ("TENURE_TOKEN_FILE", token.as_str())];
    let undrain = tenure_with_env(&["undrain", "a", "-o", "json"], &env);
    assert_eq!(code(&undrain), 0, "{}", stderr(&undrain));
    let receipt: Value = serde_json::from_str(&stdout(&undrain)).expect("JSON");
    assert_eq!(receipt["index"], before + 2);
    let undesire = tenure_with_env(&["undesire", "edge", "10.0.0.11", "-o", "yaml"], &env);
    assert_eq!(code(&undesire), 0, "{}", stderr(&undesire));
    assert_eq!(stdout(&undesire).trim(), format!("index: {}", before + 3));
    let desire = tenure_with_env(&["desire", "edge", "10.0.0.11"], &env);
    assert_eq!(stdout(&desire), format!("address/edge/10.0.0.11 desired (log index {})\n", before + 4));
    // The drain moved gated's address to b: a's key went stale, b's waits.
    let stale = tenure_with_env(&["approve", GATED_KEY], &env);
    assert_eq!(code(&stale), 1, "{}", stderr(&stale));
    assert!(stderr(&stale).contains("not pending approval: stale (stale-epoch)"), "{}", stderr(&stale));
    let waiting = "gated/10.0.0.20/assign-secondary-ip/b/sim1/eni-b/owner:2:epoch:2";
    let approve = tenure_with_env(&["approve", waiting], &env);
    assert_eq!(code(&approve), 0, "{}", stderr(&approve));
    assert_eq!(stdout(&approve), format!("action/{waiting} approved (log index {})\n", before + 5));
}

#[test]
fn no_agent_answers_on_a_closed_port() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener.local_addr().expect("bound").port()
    };
    let endpoint = format!("http://127.0.0.1:{port}");
    let output = tenure_with_env(&["ownership", "--endpoint", &endpoint], &[]);
    assert_eq!(code(&output), 1);
    assert_eq!(
        stderr(&output),
        format!(
            "tenure ownership: no agent answers at {endpoint} (connection refused); is tenure agent running?\n"
        )
    );
    let bad = tenure_with_env(&["ownership", "--endpoint", "http://127.0.0.1:1/v1"], &[]);
    assert_eq!(code(&bad), 2, "a bad endpoint is bad input");
    let bad = tenure_with_env(&["ownership", "-o", "xml"], &[]);
    assert_eq!(code(&bad), 2, "a bad flag is bad input");
    // replay keeps its own formats.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/scenarios/failover.yaml");
    let replay = tenure_with_env(&["replay", &root.display().to_string(), "-o", "yaml"], &[]);
    assert_eq!(code(&replay), 2, "replay has no yaml output");
}

#[test]
fn approve_tells_the_truth_and_approves_an_address_at_once() {
    let agent = Agent::start("approve");
    let token = agent.token_file("token");
    let before = agent.log_len();

    // A key nothing planned, a key of an automatic pool: refused, one line each, nothing appended.
    let unknown = agent.tenure(&[
        "approve",
        "nosuchpool/10.9.9.9/assign-secondary-ip/zz/sim9/eni-q/owner:1:epoch:1",
        "--token-file",
        &token,
    ]);
    assert_eq!(code(&unknown), 1);
    assert_eq!(stderr(&unknown), "tenure approve: pool \"nosuchpool\" is not applied (404)\n");
    let auto = agent.tenure(&[
        "approve",
        "edge/10.0.0.10/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1",
        "--token-file",
        &token,
    ]);
    assert_eq!(code(&auto), 1);
    assert_eq!(
        stderr(&auto),
        "tenure approve: not pending approval: pool \"edge\" approves automatically (approval: auto) (409)\n"
    );
    assert_eq!(agent.log_len(), before, "nothing refused was appended");

    // Every waiting action of one address, one line each, in journal order.
    let all = agent.tenure(&["approve", "--pool", "gated", "--address", "10.0.0.20", "--token-file", &token]);
    assert_eq!(code(&all), 0, "{}", stderr(&all));
    assert_eq!(
        stdout(&all),
        format!(
            "action/{GATED_KEY} approved (log index {})\naction/gated/10.0.0.20/enable-forwarding/a/sim1/eni-a/owner:1:epoch:1 approved (log index {})\n",
            before + 1,
            before + 2
        )
    );
    // None waits any more: said clearly, nothing appended.
    let none =
        agent.tenure(&["approve", "--pool", "gated", "--address", "10.0.0.20", "--token-file", &token]);
    assert_eq!(code(&none), 0, "{}", stderr(&none));
    assert_eq!(stdout(&none), "");
    assert_eq!(
        stderr(&none),
        "No action of pool \"gated\" address 10.0.0.20 is waiting for approval on this agent.\n"
    );
    assert_eq!(agent.log_len(), before + 2);
    // Names the agent does not know are refused (404), not answered as settled.
    let no_pool =
        agent.tenure(&["approve", "--pool", "nosuchpool", "--address", "10.0.0.20", "--token-file", &token]);
    assert_eq!(
        (code(&no_pool), stderr(&no_pool).as_str()),
        (1, "tenure approve: pool \"nosuchpool\" is not applied (404)\n")
    );
    let no_address =
        agent.tenure(&["approve", "--pool", "gated", "--address", "10.9.9.9", "--token-file", &token]);
    assert_eq!(
        (code(&no_address), stderr(&no_address).as_str()),
        (1, "tenure approve: pool \"gated\" has no address 10.9.9.9 (404)\n")
    );
    assert_eq!(agent.log_len(), before + 2);
    // A key and --pool are one or the other.
    let both = agent.tenure(&[
        "approve",
        GATED_KEY,
        "--pool",
        "gated",
        "--address",
        "10.0.0.20",
        "--token-file",
        &token,
    ]);
    assert_eq!(code(&both), 2, "{}", stderr(&both));
    let half = agent.tenure(&["approve", "--pool", "gated", "--token-file", &token]);
    assert_eq!(code(&half), 2, "{}", stderr(&half));
    // An empty key is bad input, not a 404 of a route; -o wide prints the table's lines.
    let empty = agent.tenure(&["approve", " ", "--token-file", &token]);
    assert_eq!((code(&empty), stderr(&empty).lines().count()), (2, 1), "{}", stderr(&empty));
    assert!(stderr(&empty).starts_with("tenure approve: the key is empty"), "{}", stderr(&empty));
    let wide = agent.tenure(&[
        "approve",
        "--pool",
        "gated",
        "--address",
        "10.0.0.20",
        "-o",
        "wide",
        "--token-file",
        &token,
    ]);
    assert_eq!((code(&wide), stdout(&wide).as_str()), (0, ""), "no JSON for -o wide: {}", stdout(&wide));
    assert_eq!(agent.log_len(), before + 2, "nothing appended");
}

#[test]
fn a_drain_that_leaves_addresses_with_no_eligible_member_says_so() {
    let agent = Agent::start("drain-orphans");
    let token = agent.token_file("token");
    let before = agent.log_len();
    let drain = agent.tenure(&["drain", "a", "--token-file", &token]);
    assert_eq!(stdout(&drain), format!("node/a drained (log index {})\n", before + 1), "b takes everything");
    let drain = agent.tenure(&["drain", "b", "--token-file", &token]);
    assert_eq!(code(&drain), 0, "{}", stderr(&drain));
    assert_eq!(
        stdout(&drain),
        format!("node/b drained (log index {}); 3 addresses now have no eligible member\n", before + 2)
    );
    // A repeated command is appended (the log keeps what the operator did) and said to change
    // nothing; the first undrain changes something, the second nothing.
    let again = agent.tenure(&["drain", "b", "--token-file", &token]);
    assert_eq!(
        stdout(&again),
        format!("node/b drained (log index {}); it already was so; nothing changed\n", before + 3)
    );
    let undrain = agent.tenure(&["undrain", "a", "--token-file", &token]);
    assert_eq!(stdout(&undrain), format!("node/a undrained (log index {})\n", before + 4));
    let again = agent.tenure(&["undrain", "a", "--token-file", &token]);
    assert_eq!(
        stdout(&again),
        format!("node/a undrained (log index {}); it already was so; nothing changed\n", before + 5)
    );
    let json = agent.tenure(&["undrain", "a", "-o", "json", "--token-file", &token]);
    let answer: serde_json::Value = serde_json::from_str(&stdout(&json)).expect("JSON");
    assert_eq!(answer, serde_json::json!({"index": before + 6, "unchanged": true}));
}

/// Runs `openssl ARGS…` in `dir`; it must succeed.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Writes, in `dir`, a test CA (`ca.pem`), another one nothing is signed by (`other-ca.pem`), and
/// a server certificate for `localhost` and `127.0.0.1` signed by the first (`server.pem`,
/// `server.key`), made with the openssl command.
fn certificates(dir: &Path) {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    for name in ["ca", "other-ca"] {
        let subject = format!("/CN=tenure-test-{name}");
        let key = format!("{name}.key");
        let pem = format!("{name}.pem");
        let mut args = vec!["req", "-x509"];
        args.extend(ec);
        args.extend(["-days", "2", "-subj", &subject, "-keyout", &key, "-out", &pem]);
        openssl(dir, &args);
    }
    let mut args = vec!["req"];
    args.extend(ec);
    args.extend(["-subj", "/CN=localhost", "-keyout", "server.key", "-out", "server.csr"]);
    openssl(dir, &args);
    std::fs::write(dir.join("server.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n").expect("ext");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "server.pem",
        ],
    );
}

/// A TLS-terminating proxy in front of `backend` (what docs/operations.md says to put in front of
/// an agent reached from another host), with `server.pem` and `server.key` of `dir`, on the
/// agent's runtime. Answers its port on 127.0.0.1.
fn tls_proxy(runtime: &tokio::runtime::Runtime, dir: &Path, backend: std::net::SocketAddr) -> u16 {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("server.pem"))
        .expect("server.pem")
        .collect::<Result<_, _>>()
        .expect("PEM");
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).expect("server.key");
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .expect("the server certificate");
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("a loopback port");
    let port = listener.local_addr().expect("bound").port();
    runtime.spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let Ok(mut upstream) = tokio::net::TcpStream::connect(backend).await else { return };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut upstream).await;
            });
        }
    });
    port
}

/// `--endpoint https://…` speaks TLS to a proxy in front of the agent: the proxy's certificate
/// must chain to `--ca-file` (or `TENURE_CA_FILE`), else to the system's trust store
/// (`SSL_CERT_FILE` here); an untrusted one is refused in one line that says so.
#[test]
fn the_verbs_speak_https_to_a_tls_proxy_in_front_of_the_agent() {
    let agent = Agent::start("https");
    certificates(&agent.dir);
    let port = tls_proxy(&agent.runtime, &agent.dir, agent.server.address);
    let file = |name: &str| agent.dir.join(name).display().to_string();
    let (ca, other_ca, token) = (file("ca.pem"), file("other-ca.pem"), file("token"));
    let by_name = format!("https://localhost:{port}");
    let by_address = format!("https://127.0.0.1:{port}");

    // A read and a change, trusting the private CA from --ca-file, by host name and by address.
    let read = tenure_with_env(&["ownership", "-o", "json", "--endpoint", &by_name, "--ca-file", &ca], &[]);
    assert_eq!(code(&read), 0, "{}", stderr(&read));
    let rows: Value = serde_json::from_str(&stdout(&read)).expect("JSON");
    assert_eq!(rows["ownership"].as_array().expect("a list").len(), 3, "{rows}");
    let before = agent.log_len();
    let drain = tenure_with_env(
        &["drain", "a", "--endpoint", &by_address, "--token-file", &token],
        &[("TENURE_CA_FILE", &ca)],
    );
    assert_eq!(code(&drain), 0, "{}", stderr(&drain));
    assert_eq!(stdout(&drain), format!("node/a drained (log index {})\n", before + 1));
    assert_eq!(agent.log_len(), before + 1);

    // Without --ca-file: the system's trust store, which SSL_CERT_FILE names.
    let system = tenure_with_env(&["ownership", "--endpoint", &by_name], &[("SSL_CERT_FILE", &ca)]);
    assert_eq!(code(&system), 0, "{}", stderr(&system));
    let untrusted = tenure_with_env(&["ownership", "--endpoint", &by_name], &[("SSL_CERT_FILE", &other_ca)]);
    assert_eq!(code(&untrusted), 1, "a failed handshake is a refusal: {}", stderr(&untrusted));
    assert_eq!(
        stderr(&untrusted),
        format!(
            "tenure ownership: TLS with {by_name} failed: invalid peer certificate: UnknownIssuer \
             (a proxy certificate signed by a private CA? give --ca-file FILE)\n"
        )
    );
    let wrong_ca = tenure_with_env(&["ownership", "--endpoint", &by_name, "--ca-file", &other_ca], &[]);
    assert_eq!(code(&wrong_ca), 1);
    assert_eq!(
        stderr(&wrong_ca),
        format!("tenure ownership: TLS with {by_name} failed: invalid peer certificate: UnknownIssuer\n")
    );

    // https to the agent's own plain-http port: one line, no hang.
    let plain = format!("https://127.0.0.1:{}", agent.server.address.port());
    let mismatch = tenure_with_env(&["ownership", "--endpoint", &plain, "--ca-file", &ca], &[]);
    assert_eq!(code(&mismatch), 1, "{}", stderr(&mismatch));
    assert_eq!(stderr(&mismatch).lines().count(), 1, "{}", stderr(&mismatch));
    assert!(stderr(&mismatch).starts_with(&format!("tenure ownership: TLS with {plain} failed: ")));
    let http = plain.replacen("https://", "http://", 1);
    assert!(
        stderr(&mismatch).ends_with(&format!(
            " (the server did not speak TLS; is it plain http? then --endpoint {http})\n"
        )),
        "{}",
        stderr(&mismatch)
    );

    // --ca-file that cannot be used, or with a plain http endpoint: bad input.
    let missing =
        tenure_with_env(&["ownership", "--endpoint", &by_name, "--ca-file", &file("absent.pem")], &[]);
    assert_eq!(code(&missing), 2);
    assert!(
        stderr(&missing)
            .starts_with(&format!("tenure ownership: --ca-file {}: cannot read: ", file("absent.pem"))),
        "{}",
        stderr(&missing)
    );
    let not_pem = tenure_with_env(&["ownership", "--endpoint", &by_name, "--ca-file", &token], &[]);
    assert_eq!(code(&not_pem), 2);
    assert!(stderr(&not_pem).contains("holds no PEM certificate"), "{}", stderr(&not_pem));
    let http = tenure_with_env(&["ownership", "--endpoint", &agent.server.base, "--ca-file", &ca], &[]);
    assert_eq!(code(&http), 2);
    assert!(stderr(&http).contains("--ca-file is for https endpoints"), "{}", stderr(&http));
    // TENURE_CA_FILE exported in the shell is only a default for https: plain http still works.
    let exported =
        tenure_with_env(&["ownership", "--endpoint", &agent.server.base], &[("TENURE_CA_FILE", &ca)]);
    assert_eq!(code(&exported), 0, "{}", stderr(&exported));
}
