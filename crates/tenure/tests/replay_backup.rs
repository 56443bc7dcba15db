//! `tenure replay BACKUP` and `--plot` on a real agent's backup: the timeline, ownership and
//! actions it prints are what the agent reported; a backup cut short is one line with its line
//! number and exit 2.

mod process;

use process::{Agent, TempDir, agent_config, free_port, pool_yaml, tenure, wait_for};
use serde_json::Value;

/// The rows of `answer[key]`.
fn rows(answer: &Value, key: &str) -> Vec<Value> {
    answer[key].as_array().unwrap_or_else(|| panic!("no `{key}` in {answer}")).clone()
}

/// Every address held by `owner` alone, by the log's results.
fn settled_on(agent: &Agent, owner: &str) -> bool {
    let nic = format!("eni-{owner}");
    rows(&agent.get("/v1/ownership"), "ownership").iter().all(|r| {
        r["owner"] == owner && r["phase"] == "held" && r["nics"] == serde_json::json!([nic.as_str()])
    })
}

/// (node, key, state) of action rows.
fn action_states(rows: &[Value]) -> Vec<(String, String, String)> {
    let mut states: Vec<_> = rows
        .iter()
        .map(|r| {
            let text = |k: &str| r[k].as_str().unwrap_or_else(|| panic!("{k} in {r}")).to_owned();
            (text("node"), text("idempotencyKey"), text("state"))
        })
        .collect();
    states.sort();
    states
}

#[test]
fn a_backup_replays_to_what_the_agent_reported_and_plots_its_failover() {
    let dir = TempDir::new("replay-backup");
    let listen = free_port();
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.10", "10.0.0.11"], &["a", "b"], "sim1", ""));
    let config = agent_config(&dir, listen, "sim1", "[{name: sim1, kind: sim-cloud}]", &["pools.yaml"]);
    let config_arg = config.to_str().expect("utf-8");
    let agent = Agent::start(&dir, &config, listen);
    wait_for("a holds both", || settled_on(&agent, "a"));
    assert_eq!(agent.post("/v1/drain/a", None).0, 200);
    wait_for("b holds both, a released them", || settled_on(&agent, "b"));
    let ownership = rows(&agent.get("/v1/ownership"), "ownership");
    let actions = rows(&agent.get("/v1/actions"), "actions");
    let backup = dir.path().join("incident.backup");
    let backup_arg = backup.to_str().expect("utf-8");
    let (code, _, stderr) = tenure(&["store", "backup", backup_arg, "--config", config_arg]);
    assert_eq!(code, 0, "{stderr}");
    let history = rows(&agent.get("/v1/history"), "history");
    assert_eq!(rows(&agent.get("/v1/ownership"), "ownership"), ownership, "nothing moved around the backup");
    assert!(agent.terminate().success());

    // JSON: the agent's own rows.
    let (code, stdout, stderr) = tenure(&["replay", backup_arg, "--config", config_arg, "-o", "json"]);
    assert_eq!(code, 0, "{stderr}\n{stdout}");
    assert_eq!(stderr, "", "the backup records the agent's fleet, and the config is that fleet");
    let report: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(
        rows(&report, "ownership"),
        ownership,
        "ownership with phases and NICs as the agent showed it"
    );
    assert_eq!(action_states(&rows(&report, "actions")), action_states(&actions), "the journals' actions");
    assert!(report.get("provider").is_none(), "no made-up provider holdings: {report}");
    assert_eq!(rows(&report, "violations"), Vec::<Value>::new());
    let highest: u64 = std::fs::read_to_string(&backup)
        .expect("read")
        .lines()
        .next()
        .and_then(|header| serde_json::from_str::<Value>(header).ok())
        .and_then(|header| header["highestIndex"].as_u64())
        .expect("the header's highestIndex");
    let agents: Vec<Value> =
        history.into_iter().filter(|e| e["logIndex"].as_u64().is_some_and(|i| i <= highest)).collect();
    assert_eq!(rows(&report, "timeline"), agents, "the agent's history up to the backup");
    let drained: Vec<&Value> = agents.iter().filter(|e| e["cause"] == "drain").collect();
    assert_eq!(drained.len(), 2, "both addresses moved by the drain: {agents:?}");
    assert!(
        drained.iter().all(|e| e["from"] == "a" && e["to"] == "b" && e["ownershipEpoch"].as_u64() > Some(1))
    );

    // The table: the same sections as a scenario's, the timeline as `tenure history` prints it.
    let (code, table, stderr) = tenure(&["replay", backup_arg, "--config", config_arg]);
    assert_eq!(code, 0, "{stderr}");
    for section in [
        "== timeline",
        "== ownership at stream time",
        "== actions",
        "== provider holdings",
        "== violations: 0",
    ] {
        assert!(table.contains(section), "{section}:\n{table}");
    }
    let header = table.lines().find(|l| l.starts_with("INDEX")).expect("the history table");
    assert!(header.contains("CAUSE") && header.contains("CAPTURE-EPOCH"), "{header}");
    let moves: Vec<&str> = table.lines().filter(|l| l.contains("ownership") && l.contains("a → b")).collect();
    assert_eq!(moves.len(), 2, "{table}");
    for (line, entry) in moves.iter().zip(&drained) {
        let cells: Vec<&str> = line.split_whitespace().collect();
        let epochs = [entry["ownershipEpoch"].to_string(), entry["captureEpoch"].to_string()];
        assert!(line.contains("drain") && cells[cells.len() - 2..] == epochs, "{line} / {epochs:?}");
    }
    let held =
        table.lines().filter(|l| l.starts_with("edge") && l.contains(" held ") && l.ends_with("eni-b"));
    assert_eq!(held.count(), 2, "{table}");
    let holdings = table.lines().skip_while(|l| *l != "== provider holdings").nth(1).expect("one line");
    assert!(holdings.starts_with("not in a backup"), "{holdings}");

    // --plot, from replay and from sim: one implementation, one drawing.
    let svg_path = dir.path().join("incident.svg");
    let svg_arg = svg_path.to_str().expect("utf-8");
    let (code, _, stderr) = tenure(&["replay", backup_arg, "--config", config_arg, "--plot", svg_arg]);
    assert_eq!(code, 0, "{stderr}");
    let svg = std::fs::read_to_string(&svg_path).expect("the SVG");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for text in ["edge/10.0.0.10", "edge/10.0.0.11", "a (eni-a)", "b (eni-b)", "addresses drawn: 2 of 2"] {
        assert!(svg.contains(text), "{text}: {svg}");
    }
    assert!(
        svg.contains("<title>eni-a (captureEpoch") && svg.contains("<title>eni-b (captureEpoch"),
        "{svg}"
    );
    assert!(svg.contains("operator: drain a → b"), "the drain is marked: {svg}");
    let sim_svg = dir.path().join("sim.svg");
    let (code, _, stderr) = tenure(&[
        "sim",
        "--plot",
        sim_svg.to_str().expect("utf-8"),
        "--backup",
        backup_arg,
        "--config",
        config_arg,
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(std::fs::read_to_string(&sim_svg).expect("the SVG"), svg, "the same drawing");

    // Cut short inside its third line: one line naming the file and the line, exit 2.
    let text = std::fs::read_to_string(&backup).expect("read");
    let lines: Vec<&str> = text.lines().collect();
    let cut =
        dir.write("cut.backup", &format!("{}\n{}\n{}", lines[0], lines[1], &lines[2][..lines[2].len() / 2]));
    let (code, stdout, stderr) = tenure(&["replay", cut.to_str().expect("utf-8"), "--config", config_arg]);
    assert_eq!((code, stdout.as_str()), (2, ""), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(&format!("{}:3: ", cut.display())) && stderr.contains("truncated"), "{stderr}");
    // Without its end line.
    let cut = dir.write("end.backup", &format!("{}\n", lines[..lines.len() - 1].join("\n")));
    let (code, _, stderr) =
        tenure(&["replay", cut.to_str().expect("utf-8"), "--config", config_arg, "-o", "json"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(&format!("{}:{}: ", cut.display(), lines.len())), "{stderr}");
    // A backup without the agent's config, a scenario with backup flags: one line, exit 2.
    let (code, _, stderr) = tenure(&["replay", backup_arg]);
    assert_eq!((code, stderr.lines().count()), (2, 1), "{stderr}");
    assert!(stderr.contains("--config"), "{stderr}");
    let scenario = dir.write("s.yaml", "nodes: []\n");
    let (code, _, stderr) = tenure(&["replay", scenario.to_str().expect("utf-8"), "--plot", svg_arg]);
    assert_eq!((code, stderr.lines().count()), (2, 1), "{stderr}");

    // A config edited since the backup (a's capacity, b's NIC) would project another map and
    // invent violations: the backup records its agent's fleet, so it is refused in one line.
    let text = std::fs::read_to_string(&config).expect("the config");
    for (name, edited) in [
        ("capacity.yaml", text.replacen("priority: 10}", "priority: 10, capacity: 1}", 1)),
        ("nic.yaml", text.replacen("nic: eni-b", "nic: eni-x", 1)),
    ] {
        assert_ne!(edited, text, "{name} edits the config");
        let edited = dir.write(name, &edited);
        let (code, stdout, stderr) =
            tenure(&["replay", backup_arg, "--config", edited.to_str().expect("utf-8")]);
        assert_eq!((code, stdout.as_str(), stderr.lines().count()), (2, "", 1), "{name}: {stderr}");
        assert!(stderr.contains("is not the config of the agent that wrote"), "{name}: {stderr}");
    }
    // A backup taken without a config does not record the fleet: replayed with a note saying so.
    let bare = dir.path().join("bare.backup");
    let (code, _, stderr) = tenure(&[
        "store",
        "backup",
        bare.to_str().expect("utf-8"),
        "--store-dir",
        dir.path().join("store").to_str().expect("utf-8"),
        "--identity-file",
        dir.path().join("agent.identity").to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = tenure(&["replay", bare.to_str().expect("utf-8"), "--config", config_arg]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("does not record its agent's nodes"), "{stderr}");
}
