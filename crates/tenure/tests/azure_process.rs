//! `tenure agent` with `kind: azure` as a real process against the ARM fake
//! (`scripts/azure-fake`: a FAKE of the ARM network interface API, not Azure), and `tenure
//! validate` on azure configs.
//!
//! The crashes: the agent is killed (-9) between the two writes of a seize (the fake holds the
//! second PUT, unapplied): the address is then on no NIC, never on two; the next agent on the
//! same store completes the seize. And the at-least-once side: the second PUT applied, the agent
//! killed before it recorded that: the next agent reads the NIC and writes nothing. Fails, never
//! skips, when the fake cannot start.

#![cfg(feature = "azure")]

#[path = "support/azure_fake.rs"]
mod azure_fake;
mod process;

use azure_fake::{AzureFake, SUBSCRIPTION, TOKEN};
use process::{Agent, TempDir, agent_config_on, free_port, pool_yaml, tenure, wait_for};
use serde_json::json;

/// `agent.yaml` for nodes a (priority 10) and b on NICs `a` and `b`, provider `cloud` with
/// `provider` (its keys after the kind).
fn config(
    dir: &TempDir,
    listen: std::net::SocketAddr,
    nics: (&str, &str),
    provider: &str,
) -> std::path::PathBuf {
    dir.write("pools.yaml", &pool_yaml("edge", &["10.0.0.10"], &["a", "b"], "cloud", ""));
    let providers = format!("[{{name: cloud, kind: azure{provider}}}]");
    let (a, b) = (format!("'{}'", nics.0), format!("'{}'", nics.1));
    agent_config_on(dir, listen, "cloud", &providers, &["pools.yaml"], (&a, &b))
}

fn start(dir: &TempDir, config: &std::path::Path, listen: std::net::SocketAddr) -> Agent {
    let agent = Agent::spawn_wrapped(dir, config, listen, &[], &[("TENURE_AZURE_TEST_TOKEN", TOKEN)]);
    agent.wait_healthy();
    agent
}

#[test]
fn a_kill_between_the_two_writes_leaves_the_address_on_no_nic_and_the_next_agent_completes_it() {
    let fake = AzureFake::start();
    fake.config(&json!({"lroDelayMs": 100, "pollMs": 50}));
    let a = fake.nic("rg", "a", "10.0.0.4", &[]);
    let b = fake.nic("rg", "b", "10.0.0.5", &[]);
    let z = fake.nic("rg", "z", "10.0.0.9", &["10.0.0.10"]);
    for nic in [&a, &b] {
        fake.set_forwarding(nic, true);
    }
    let address = azure_fake::address();
    let holders = || [&a, &b, &z].into_iter().filter(|n| fake.holds(n, address)).cloned().collect::<Vec<_>>();
    fake.http("POST", "/_fake/hold", &json!({"op": "put", "nic": "a"}));

    let dir = TempDir::new("azure-crash");
    let listen = free_port();
    let provider = format!(", subscriptionId: {SUBSCRIPTION}, endpointUrl: '{}'", fake.url());
    let config = config(&dir, listen, (&a, &b), &provider);
    let agent = start(&dir, &config, listen);
    wait_for("a's PUT held by the fake, z's done", || fake.held() == 1);
    assert!(holders().is_empty(), "removed from z, not yet on a: {:?}", holders());
    agent.kill9();
    fake.http("POST", "/_fake/release", &json!({"apply": false}));
    assert!(holders().is_empty(), "the killed agent's second write never applied: {:?}", holders());

    fake.reset_calls();
    let agent = start(&dir, &config, listen);
    wait_for("the next agent completed the seize", || holders() == [a.clone()]);
    let puts: Vec<String> = fake
        .calls()
        .iter()
        .filter(|c| c["op"] == "put")
        .map(|c| c["nic"].as_str().expect("a NIC").to_owned())
        .collect();
    assert_eq!(puts, ["a"], "only the addition: nothing left to remove; log:\n{}", agent.log());
    assert_eq!(holders(), std::slice::from_ref(&a), "on one NIC");
    let status = agent.terminate();
    assert!(status.success(), "{status:?}");
}

/// Node `a`'s acquire rows (`assign-secondary-ip`) in `agent`'s journal.
fn a_acquires(agent: &Agent) -> Vec<serde_json::Value> {
    let actions = agent.get("/v1/actions?node=a&address=10.0.0.10")["actions"].clone();
    actions.as_array().into_iter().flatten().filter(|r| r["verb"] == "assign-secondary-ip").cloned().collect()
}

#[test]
fn a_kill_after_the_second_write_applied_leaves_the_next_agent_nothing_to_write() {
    let fake = AzureFake::start();
    fake.config(&json!({"lroDelayMs": 100, "pollMs": 50}));
    let a = fake.nic("rg", "a", "10.0.0.4", &[]);
    let b = fake.nic("rg", "b", "10.0.0.5", &[]);
    let z = fake.nic("rg", "z", "10.0.0.9", &["10.0.0.10"]);
    for nic in [&a, &b] {
        fake.set_forwarding(nic, true);
    }
    let address = azure_fake::address();
    let holders = || [&a, &b, &z].into_iter().filter(|n| fake.holds(n, address)).cloned().collect::<Vec<_>>();
    fake.http("POST", "/_fake/hold", &json!({"op": "put", "nic": "a"}));

    let dir = TempDir::new("azure-applied");
    let listen = free_port();
    let provider = format!(", subscriptionId: {SUBSCRIPTION}, endpointUrl: '{}'", fake.url());
    let config = config(&dir, listen, (&a, &b), &provider);
    let agent = start(&dir, &config, listen);
    wait_for("a's PUT held by the fake, z's done", || fake.held() == 1);
    agent.kill9();
    // The write lands after all; its answer goes to no one.
    fake.http("POST", "/_fake/release", &json!({"apply": true}));
    wait_for("the write applied and its operation ended", || {
        holders() == [a.clone()] && fake.provisioning_state(&a) == "Succeeded"
    });

    fake.reset_calls();
    let agent = start(&dir, &config, listen);
    wait_for("the next agent ran the acquire in doubt again and recorded it executed", || {
        a_acquires(&agent).iter().any(|r| r["state"] == "executed")
    });
    let acquires = a_acquires(&agent);
    assert!(
        acquires.iter().any(|r| r["state"] == "executed" && r["attempts"].as_u64() >= Some(2)),
        "the same entry, attempted again: {acquires:?}"
    );
    let puts: Vec<String> = fake
        .calls()
        .iter()
        .filter(|c| c["op"] == "put")
        .map(|c| c["nic"].as_str().expect("a NIC").to_owned())
        .collect();
    assert!(puts.is_empty(), "the address was on a already: no write; log:\n{}", agent.log());
    assert_eq!(holders(), std::slice::from_ref(&a), "on one NIC");
    let status = agent.terminate();
    assert!(status.success(), "{status:?}");
}

#[test]
fn validate_refuses_bad_azure_settings_and_nic_ids_in_one_line_at_their_place() {
    let dir = TempDir::new("azure-validate");
    let listen = free_port();
    let id = |sub: &str, name: &str| {
        format!("/subscriptions/{sub}/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/{name}")
    };
    let (a, b) = (id(SUBSCRIPTION, "a"), id(SUBSCRIPTION, "b"));
    let run = |config: &std::path::Path| {
        let (code, stdout, stderr) = tenure(&["validate", config.to_str().expect("utf-8")]);
        assert_eq!(code, 2, "exit 2: {stdout}{stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        stderr.trim_end().strip_prefix(&format!("{}:", config.display())).expect("at the config").to_owned()
    };

    let missing = config(&dir, listen, (&a, &b), "");
    assert_eq!(
        run(&missing),
        "6:13: azure provider `cloud` needs `subscriptionId` (the GUID of the NICs' subscription)"
    );

    let provider = format!(", subscriptionId: {SUBSCRIPTION}");
    let not_arm = config(&dir, listen, ("eni-0a1b", &b), &provider);
    assert_eq!(
        run(&not_arm),
        "2:57: node `a`: `eni-0a1b` is not an Azure NIC resource id (/subscriptions/SUBSCRIPTION/resourceGroups/GROUP/providers/Microsoft.Network/networkInterfaces/NAME)"
    );

    let other = id("11111111-2222-3333-4444-555555555555", "b");
    let elsewhere = config(&dir, listen, (&a, &other), &provider);
    let line = run(&elsewhere);
    assert!(line.starts_with("3:57: node `b`: NIC `/subscriptions/11111111-"), "{line}");
    assert!(line.ends_with(&format!("not in the provider's subscriptionId {SUBSCRIPTION}")), "{line}");

    // A plain-http endpoint without the test hook: refused at its value, not at every call.
    let http = config(&dir, listen, (&a, &b), &format!("{provider}, endpointUrl: 'http://127.0.0.1:1'"));
    let line = run(&http);
    assert!(
        line.starts_with("6:107: endpointUrl `http://127.0.0.1:1` is not https: a credential's token is sent over https only"),
        "{line}"
    );
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["validate", http.to_str().expect("utf-8")])
        .env("TENURE_AZURE_TEST_TOKEN", TOKEN)
        .output()
        .expect("tenure runs");
    assert!(output.status.success(), "with the test hook: {}", String::from_utf8_lossy(&output.stderr));
    assert!(!dir.path().join("store").exists(), "nothing made");
}
