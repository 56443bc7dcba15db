//! Fleet mode with `kind: azure`: a 3-member etcd cluster (`scripts/etcd-cluster`, Debian's
//! etcd-server), three `tenure agent` processes with one node each, and the ARM fake
//! (`scripts/azure-fake`: a FAKE of the ARM network interface API, not Azure) as their cloud.
//! A killed holder's address moves to a survivor's NIC, on exactly one NIC; the old holder
//! restarted writes nothing. With `maintenanceNotices: drain` and a FAKE instance metadata
//! service per host (`scripts/metadata-fake`), an Azure `Preempt` of a's VM drains a, its address
//! moves before the event's `NotBefore`, and a's agent acknowledges the event once a holds nothing,
//! exactly once. Nothing here skips: a cluster, fake or agent that cannot start fails the test.

#![cfg(all(feature = "azure", feature = "etcd"))]

#[path = "support/azure_fake.rs"]
mod azure_fake;
#[path = "../../tenure-lead/tests/support/etcd_cluster.rs"]
mod etcd_cluster;
#[path = "support/metadata_fake.rs"]
#[allow(dead_code, reason = "each test file uses part of the harness")]
mod metadata_fake;
mod process;

use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime};

use azure_fake::{AzureFake, SUBSCRIPTION};
use etcd_cluster::Cluster;
use metadata_fake::MetadataFake;
use process::{Agent, TOKEN, TempDir, free_port, http, wait_for};
use serde_json::json;

const NODES: [&str; 3] = ["a", "b", "c"];

struct Fleet {
    dir: TempDir,
    _cluster: Cluster,
    fake: AzureFake,
    nics: Vec<String>,
    listen: Vec<SocketAddr>,
}

impl Fleet {
    /// Three agents' configs; `provider_extra` is appended to the provider's settings.
    fn new(tag: &str, base_port: u16, provider_extra: &str) -> Self {
        let cluster = Cluster::start(tag, base_port);
        let fake = AzureFake::start();
        fake.config(&json!({"lroDelayMs": 100, "pollMs": 50}));
        let nics: Vec<String> = NODES
            .iter()
            .enumerate()
            .map(|(i, n)| fake.nic("rg", n, &format!("10.0.0.{}", 4 + i), &[]))
            .collect();
        for nic in &nics {
            fake.set_forwarding(nic, true);
        }
        let dir = TempDir::new(tag);
        dir.write("token", TOKEN);
        dir.write(
            "pools.yaml",
            "apiVersion: tenure.dev/v1alpha1\nkind: MobilityPool\nmetadata: {name: edge}\nspec:\n  addresses: [10.0.0.10]\n  \
             provider: cloud\n  placementGroup: g1\n  members: [a, b, c]\n  heartbeatTTL: 3s\n  promotionHold: 0s\n  \
             deprovisionHoldDuration: 0s\n",
        );
        let listen: Vec<SocketAddr> = NODES.iter().map(|_| free_port()).collect();
        let endpoints = cluster.endpoints.join(", ");
        let spec = |i: usize| {
            let priority = if i == 0 { 10 } else { 0 };
            format!(
                "{{name: {}, provider: cloud, placementGroup: g1, nic: '{}', priority: {priority}}}",
                NODES[i], nics[i]
            )
        };
        for (i, name) in NODES.iter().enumerate() {
            let peers: Vec<String> = (0..3).filter(|j| *j != i).map(|j| format!("  - {}", spec(j))).collect();
            dir.write(
                &format!("{name}.yaml"),
                &format!(
                    "node: {}\npeers:\n{}\nstore: {{kind: etcd, endpoints: [{endpoints}], prefix: /azure-fleet, path: ./data-{name}}}\n\
                     providers:\n  - {{name: cloud, kind: azure, subscriptionId: {SUBSCRIPTION}, endpointUrl: '{}'{provider_extra}}}\npools: [pools.yaml]\n\
                     listen: {}\nheartbeatInterval: 100ms\nrequeueInterval: 300ms\nactionTimeout: 2s\napiTokenFile: token\n",
                    spec(i),
                    peers.join("\n"),
                    fake.url(),
                    listen[i],
                ),
            );
        }
        Self { dir, _cluster: cluster, fake, nics, listen }
    }

    fn start(&self, i: usize) -> Agent {
        self.start_with(i, &[])
    }

    /// Starts agent `i` with `env` besides the ARM fake's token.
    fn start_with(&self, i: usize, env: &[(&str, &str)]) -> Agent {
        let config = self.dir.path().join(format!("{}.yaml", NODES[i]));
        let mut env = env.to_vec();
        env.push(("TENURE_AZURE_TEST_TOKEN", azure_fake::TOKEN));
        let agent = Agent::spawn_wrapped(&self.dir, &config, self.listen[i], &[], &env);
        agent.wait_healthy();
        agent
    }

    /// The nodes whose NIC holds the address, at the fake.
    fn holders(&self) -> Vec<&'static str> {
        (0..3).filter(|i| self.fake.holds(&self.nics[*i], azure_fake::address())).map(|i| NODES[i]).collect()
    }
}

#[test]
fn an_azure_fleet_fails_over_a_killed_holder_onto_exactly_one_nic() {
    let fleet = Fleet::new("azure-fleet", 29740, "");
    let mut agents: Vec<Option<Agent>> = (0..3).map(|i| Some(fleet.start(i))).collect();
    wait_for("a holds the address at the fake", || fleet.holders() == ["a"]);

    let killed = Instant::now();
    agents[0].take().expect("a runs").kill9();
    let mut new_owner = "";
    wait_for("a survivor's NIC holds the address", || match fleet.holders().as_slice() {
        [one] if *one != "a" => {
            new_owner = one;
            true
        }
        _ => false,
    });
    eprintln!("azure fleet failover: kill -9 to the address on {new_owner}'s NIC in {:?}", killed.elapsed());

    // The old holder restarted takes nothing back (no preemption) and writes no NIC: once it has
    // caught up (its view names the new owner) and run its release of the address (a read of its
    // own NIC, which no longer has it), the fake has seen no write.
    fleet.fake.reset_calls();
    let restarted = fleet.start(0);
    wait_for("the restarted old holder caught up and ran its release", || {
        owner(fleet.listen[0]).as_deref() == Some(new_owner) && released(fleet.listen[0])
    });
    agents[0] = Some(restarted);
    let puts: Vec<String> = fleet
        .fake
        .calls()
        .iter()
        .filter(|c| c["op"] == "put")
        .map(|c| c["nic"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(puts.is_empty(), "the restarted old holder wrote {puts:?}");
    assert_eq!(fleet.holders(), [new_owner], "one NIC, the new owner's");
    for agent in agents.into_iter().flatten() {
        agent.kill9();
    }
}

/// The owner of the address in the view of the agent at `listen`.
fn owner(listen: SocketAddr) -> Option<String> {
    let (status, body) = http(listen, "GET", "/v1/ownership", None, None).ok()?;
    let v: serde_json::Value = serde_json::from_str(&body).ok().filter(|_| status == 200)?;
    v["ownership"][0]["owner"].as_str().map(str::to_owned)
}

/// Whether node a's release of the address (`unassign-secondary-ip`) has executed, in the view of
/// the agent at `listen`.
fn released(listen: SocketAddr) -> bool {
    let Ok((200, body)) = http(listen, "GET", "/v1/actions?node=a&address=10.0.0.10", None, None) else {
        return false;
    };
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    v["actions"].as_array().is_some_and(|rows| {
        rows.iter().any(|r| r["verb"] == "unassign-secondary-ip" && r["state"] == "executed")
    })
}

/// A counter of `/metrics` with exactly these labels (0 when absent).
fn counter(listen: SocketAddr, series: &str) -> u64 {
    let (_, body) = http(listen, "GET", "/metrics", None, None).expect("metrics answer");
    body.lines().find_map(|l| l.strip_prefix(series).and_then(|rest| rest.trim().parse().ok())).unwrap_or(0)
}

#[test]
fn an_azure_preempt_hands_the_address_over_before_not_before_and_is_acknowledged_once() {
    let fleet = Fleet::new("azure-notices", 29840, ", maintenanceNotices: drain");
    // One metadata service per host, each naming its own VM.
    let fakes: Vec<MetadataFake> = NODES
        .iter()
        .map(|name| {
            let fake = MetadataFake::start();
            fake.set(&json!({"azureVmName": format!("vm-{name}")}));
            fake
        })
        .collect();
    let urls: Vec<String> = fakes.iter().map(MetadataFake::url).collect();
    let agents: Vec<Agent> = (0..3)
        .map(|i| {
            fleet.start_with(
                i,
                &[("TENURE_METADATA_URL", urls[i].as_str()), ("TENURE_METADATA_POLL_MS", "200")],
            )
        })
        .collect();
    wait_for("a holds the address at the fake", || fleet.holders() == ["a"]);
    let polls =
        |i: usize| fakes[i].counters()["requests"]["GET /metadata/scheduledevents"].as_u64().unwrap_or(0);
    wait_for("every agent polls its own host's Scheduled Events", || (0..3).all(|i| polls(i) >= 2));

    // A spot eviction of a's VM, 30 s ahead (Azure gives a Preempt at least 30 s).
    let deadline = SystemTime::now() + Duration::from_secs(30);
    let whole = jiff::Timestamp::try_from(deadline).expect("in range");
    let not_before =
        jiff::fmt::rfc2822::DateTimePrinter::new().timestamp_to_rfc9110_string(&whole).expect("prints");
    let event = json!({"EventId": "E-a", "EventType": "Preempt", "ResourceType": "VirtualMachine",
                       "Resources": ["vm-a"], "EventStatus": "Scheduled", "NotBefore": not_before,
                       "Description": "fake spot eviction", "EventSource": "Platform", "DurationInSeconds": -1});
    let posted = Instant::now();
    fakes[0].set(&json!({"azureEvents": [event]}));
    let mut new_owner = "";
    wait_for("the address on one survivor's NIC", || match fleet.holders().as_slice() {
        [one] if *one != "a" => {
            new_owner = one;
            true
        }
        _ => false,
    });
    wait_for("a's agent acknowledges the event", || !fakes[0].acks().is_empty());
    // The one wall-clock assertion, kept on purpose with a wide margin: NotBefore is 30 s away and
    // the drain, the seize (operations of 100 ms) and the acknowledgement take about a second here;
    // acting before NotBefore is the behaviour under test, not a speed figure (those are in the
    // benches). The order (moved, then acknowledged) is the waits' order above.
    assert!(SystemTime::now() < deadline, "handed over and acknowledged before NotBefore");
    eprintln!(
        "azure Preempt posted → address on {new_owner}'s NIC and the event acknowledged: {} ms (poll every 200 ms)",
        posted.elapsed().as_millis()
    );
    assert_eq!(fleet.holders(), [new_owner], "one NIC");
    // Polled on while the event stays listed: never acknowledged again.
    let before = polls(0);
    wait_for("ten more polls", || polls(0) >= before + 10);
    assert_eq!(fakes[0].acks(), vec![json!({"StartRequests": [{"EventId": "E-a"}]})], "exactly once");
    assert!(fakes[1].acks().is_empty() && fakes[2].acks().is_empty(), "the other hosts announced nothing");
    for (series, count) in [
        ("tenure_maintenance_notices_total{cloud=\"azure\",kind=\"preempt\"}", 1),
        ("tenure_maintenance_notice_drains_total{cloud=\"azure\"}", 1),
        ("tenure_maintenance_notice_acknowledgements_total{cloud=\"azure\"}", 1),
    ] {
        assert_eq!(counter(fleet.listen[0], series), count, "a: {series}");
        assert_eq!(counter(fleet.listen[1], series), 0, "b: {series}");
    }
    assert!(agents[0].log().contains("drained for a maintenance notice (preempt)"), "{}", agents[0].log());
    for agent in agents {
        agent.kill9();
    }
}
