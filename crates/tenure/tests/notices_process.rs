//! `maintenanceNotices: drain` in real `tenure agent` processes: a fleet of two agents (nodes a
//! and b, one each, sharing one log on a real 3-member etcd), their `aws` provider against
//! moto's EC2 server, each agent with its own FAKE instance metadata service
//! (`scripts/metadata-fake/metadata_fake.py`: IMDSv2 from its published reference; not a cloud),
//! as each host has its own. A spot interruption announced to a's host drains a through the
//! agent's own drain path: the address moves to b's ENI at EC2 before the interruption's time,
//! b's quiet service drains nothing, the metrics count one notice and one drain, and a stays
//! drained when the notice goes.
//!
//! Fails, never skips, when etcd, moto or the fake cannot start (scripts/install-deps).

#![cfg(all(feature = "aws", feature = "etcd"))]

mod process;

#[path = "../../tenure-lead/tests/support/etcd_cluster.rs"]
mod etcd_cluster;
#[path = "support/metadata_fake.rs"]
#[allow(dead_code, reason = "each test file uses part of the harness")]
mod metadata_fake;
#[path = "support/moto.rs"]
#[allow(dead_code, reason = "each test file uses part of the harness")]
mod moto;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, SystemTime};

use etcd_cluster::Cluster;
use metadata_fake::MetadataFake;
use moto::Moto;
use process::{Agent, TOKEN, TempDir, free_port, http, wait_for};
use serde_json::json;

const ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 10);

/// A counter of `/metrics` with exactly these labels (0 when absent).
fn counter(listen: SocketAddr, series: &str) -> u64 {
    let (_, body) = http(listen, "GET", "/metrics", None, None).expect("metrics answer");
    body.lines().find_map(|l| l.strip_prefix(series).and_then(|rest| rest.trim().parse().ok())).unwrap_or(0)
}

fn node_drained(listen: SocketAddr, node: &str) -> bool {
    let (status, body) = http(listen, "GET", "/", None, None).expect("the status page answers");
    assert_eq!(status, 200);
    body.contains(&format!("data-node=\"{node}\"")) && {
        let row = body.split(&format!("data-node=\"{node}\"")).nth(1).unwrap_or("");
        row.split('>').next().unwrap_or("").contains("data-drained=\"true\"")
    }
}

#[test]
fn a_spot_interruption_on_one_host_drains_its_node_and_the_address_moves_before_the_deadline() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let moto = Moto::start(false);
    let ec2 = runtime.block_on(moto.ec2());
    let enis = runtime.block_on(moto::enis(&ec2, 2));
    let holders = || {
        let found = runtime.block_on(ec2.holders(&enis, &[ADDRESS])).expect("describe");
        found.get(&ADDRESS).cloned().unwrap_or_default()
    };
    let fakes = [MetadataFake::start(), MetadataFake::start()];
    let cluster = Cluster::start("notices", 28400);
    let dir = TempDir::new("notices-process");
    dir.write("token", TOKEN);
    dir.write(
        "pools.yaml",
        "apiVersion: tenure.dev/v1alpha1\nkind: MobilityPool\nmetadata: {name: edge}\nspec:\n  addresses: [10.0.0.10]\n  \
         provider: cloud\n  placementGroup: vpc\n  members: [a, b]\n  heartbeatTTL: 60s\n  promotionHold: 0s\n  \
         deprovisionHoldDuration: 0s\n",
    );
    let endpoints = cluster.endpoints.join(", ");
    let spec = |i: usize| {
        let (name, priority) = [("a", 10), ("b", 0)][i];
        format!(
            "{{name: {name}, provider: cloud, placementGroup: vpc, nic: {}, priority: {priority}}}",
            enis[i]
        )
    };
    let listen = [free_port(), free_port()];
    let agents: Vec<Agent> = (0..2)
        .map(|i| {
            let name = ["a", "b"][i];
            let config = dir.write(
                &format!("{name}.yaml"),
                &format!(
                    "node: {}\npeers:\n  - {}\nstore: {{kind: etcd, endpoints: [{endpoints}], prefix: /notices-test, path: ./data-{name}}}\n\
                     providers:\n  - {{name: cloud, kind: aws, region: us-east-1, endpointUrl: {}, maintenanceNotices: drain}}\n\
                     pools: [pools.yaml]\nlisten: {}\nheartbeatInterval: 100ms\nrequeueInterval: 500ms\nactionTimeout: 10s\napiTokenFile: token\n",
                    spec(i),
                    spec(1 - i),
                    moto.url(),
                    listen[i],
                ),
            );
            let url = fakes[i].url();
            let agent = Agent::spawn_wrapped(
                &dir,
                &config,
                listen[i],
                &[],
                &[
                    ("TENURE_METADATA_URL", url.as_str()),
                    ("TENURE_METADATA_POLL_MS", "200"),
                    ("AWS_ACCESS_KEY_ID", "testing"),
                    ("AWS_SECRET_ACCESS_KEY", "testing"),
                    ("AWS_EC2_METADATA_DISABLED", "true"),
                ],
            );
            agent.wait_healthy();
            agent
        })
        .collect();
    wait_for("the address on a's ENI alone", || holders() == [enis[0].clone()]);
    let polls = |i: usize| {
        fakes[i].counters()["requests"]["GET /latest/meta-data/spot/instance-action"].as_u64().unwrap_or(0)
    };
    wait_for("both agents poll their own host's service", || polls(0) >= 2 && polls(1) >= 2);

    // Two minutes' notice, as AWS gives, on a's host only.
    let deadline = SystemTime::now() + Duration::from_secs(120);
    let time = jiff::Timestamp::try_from(deadline).expect("in range").to_string();
    let posted = std::time::Instant::now();
    fakes[0].set(&json!({"awsSpot": {"action": "terminate", "time": time}}));
    wait_for("the address on b's ENI alone", || holders() == [enis[1].clone()]);
    assert!(SystemTime::now() < deadline, "moved before the interruption");
    eprintln!(
        "notice posted → address on b's ENI alone: {} ms (poll every 200 ms)",
        posted.elapsed().as_millis()
    );
    let spot = "tenure_maintenance_notices_total{cloud=\"aws\",kind=\"spot-interruption\"}";
    let drains = "tenure_maintenance_notice_drains_total{cloud=\"aws\"}";
    assert_eq!((counter(listen[0], spot), counter(listen[0], drains)), (1, 1), "a: one notice, one drain");
    assert_eq!((counter(listen[1], spot), counter(listen[1], drains)), (0, 0), "b's host announced nothing");
    let log = agents[0].log();
    assert!(log.contains("drained for a maintenance notice (spot-interruption)"), "a's log:\n{log}");
    for at in listen {
        wait_for("the drain in each agent's view", || node_drained(at, "a"));
        assert!(!node_drained(at, "b"));
    }

    // The notice goes (the instance survived): polled on, a stays drained, nothing moves back.
    fakes[0].set(&json!({"awsSpot": null}));
    let before = polls(0);
    wait_for("five more polls", || polls(0) >= before + 5);
    assert!(node_drained(listen[0], "a"), "an undrain is the operator's");
    assert_eq!(holders(), [enis[1].clone()]);
    assert_eq!(counter(listen[0], drains), 1);
    assert!(agents[0].log().contains("stays drained"), "the log says so");
    for agent in agents {
        assert!(agent.terminate().success());
    }
    drop(cluster);
}

/// A test hook set to something unusable stops the agent before it opens its store: exit 2, one
/// line naming the variable.
#[test]
fn an_unusable_metadata_url_exits_2_in_one_line_before_touching_the_store() {
    let dir = TempDir::new("notices-bad-url");
    dir.write("token", TOKEN);
    dir.write(
        "pools.yaml",
        "apiVersion: tenure.dev/v1alpha1\nkind: MobilityPool\nmetadata: {name: edge}\nspec:\n  addresses: [10.0.0.10]\n  \
         provider: cloud\n  placementGroup: vpc\n  members: [a]\n",
    );
    let listen = free_port();
    let config = dir.write(
        "agent.yaml",
        &format!(
            "node: {{name: a, provider: cloud, placementGroup: vpc, nic: eni-a}}\nstore: {{kind: embedded, path: ./store}}\n\
             providers:\n  - {{name: cloud, kind: aws, region: us-east-1, maintenanceNotices: drain}}\n\
             pools: [pools.yaml]\nlisten: {listen}\napiTokenFile: token\n"
        ),
    );
    for (name, value, says) in [
        (
            "TENURE_METADATA_URL",
            "https://169.254.169.254",
            "TENURE_METADATA_URL: `https://169.254.169.254` is not an http:// URL",
        ),
        (
            "TENURE_METADATA_POLL_MS",
            "soon",
            "TENURE_METADATA_POLL_MS: `soon` is not a positive number of milliseconds",
        ),
    ] {
        let mut agent = Agent::spawn_wrapped(&dir, &config, listen, &[], &[(name, value)]);
        let status = process::wait_exit(&mut agent.child);
        assert_eq!(status.code(), Some(2), "{name}: {}", agent.log());
        let log = agent.log();
        assert_eq!(log.lines().count(), 1, "one line: {log}");
        assert!(log.starts_with(&format!("tenure agent: {says}")), "{log}");
        assert!(!dir.path().join("store").exists(), "nothing changed");
    }
}
