//! Fleet mode with `kind: azure`: a 3-member etcd cluster (`scripts/etcd-cluster`, Debian's
//! etcd-server), three `tenure agent` processes with one node each, and the ARM fake
//! (`scripts/azure-fake`: a FAKE of the ARM network interface API, not Azure) as their cloud.
//! A killed holder's address moves to a survivor's NIC, on exactly one NIC; the old holder
//! restarted writes nothing. Nothing here skips: a cluster, fake or agent that cannot start fails
//! the test.

#![cfg(all(feature = "azure", feature = "etcd"))]

#[path = "support/azure_fake.rs"]
mod azure_fake;
#[path = "../../tenure-lead/tests/support/etcd_cluster.rs"]
mod etcd_cluster;
mod process;

use std::net::SocketAddr;
use std::time::Instant;

use azure_fake::{AzureFake, SUBSCRIPTION};
use etcd_cluster::Cluster;
use process::{Agent, TOKEN, TempDir, free_port, wait_for};
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
    fn new(tag: &str, base_port: u16) -> Self {
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
                     providers:\n  - {{name: cloud, kind: azure, subscriptionId: {SUBSCRIPTION}, endpointUrl: '{}'}}\npools: [pools.yaml]\n\
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
        let config = self.dir.path().join(format!("{}.yaml", NODES[i]));
        let agent = Agent::spawn_wrapped(
            &self.dir,
            &config,
            self.listen[i],
            &[],
            &[("TENURE_AZURE_TEST_TOKEN", azure_fake::TOKEN)],
        );
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
    let fleet = Fleet::new("azure-fleet", 29740);
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

    // The old holder restarted takes nothing back (no preemption) and writes no NIC.
    fleet.fake.reset_calls();
    agents[0] = Some(fleet.start(0));
    std::thread::sleep(std::time::Duration::from_secs(2));
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
