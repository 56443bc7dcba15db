//! Fleet mode with `kind: oci`: a 3-member etcd cluster (`scripts/etcd-cluster`, Debian's
//! etcd-server) and three `tenure agent` processes, one node each, sharing one log, each signing
//! its own calls to the OCI FAKE (`scripts/oci-fake/oci_fake.py`: a fake of the published Core
//! Services private IP API, not OCI) with an API key from an OCI config file. Calls are counted at
//! the fake. Nothing here skips: a cluster, fake or agent that cannot start fails the test.

#![cfg(all(feature = "oci", feature = "etcd"))]

mod process;

#[path = "../../tenure-lead/tests/support/etcd_cluster.rs"]
mod etcd_cluster;
#[path = "support/oci_fake.rs"]
mod oci_fake;

use std::net::SocketAddr;
use std::time::Instant;

use etcd_cluster::Cluster;
use oci_fake::OciFake;
use process::{Agent, TOKEN, TempDir, free_port, http, wait_for};

const NODES: [&str; 3] = ["a", "b", "c"];

fn owner(listen: SocketAddr) -> Option<String> {
    let (status, body) = http(listen, "GET", "/v1/ownership", None, None).ok()?;
    if status != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["ownership"][0]["owner"].as_str().map(str::to_owned)
}

/// Whether node a's journal shows its release of the address executed.
fn released(listen: SocketAddr) -> bool {
    let Ok((200, body)) = http(listen, "GET", "/v1/actions?node=a&state=executed", None, None) else {
        return false;
    };
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    v["actions"].as_array().is_some_and(|rows| rows.iter().any(|r| r["verb"] == "unassign-secondary-ip"))
}

fn count(fake: &OciFake, op: &str) -> u64 {
    fake.calls().get(op).and_then(serde_json::Value::as_u64).unwrap_or(0)
}

#[test]
fn three_agents_on_etcd_fail_over_on_oci_and_the_old_holder_takes_nothing_back() {
    let fake = OciFake::start();
    let vnics = fake.vnics(3);
    let cluster = Cluster::start("oci-fleet", 28300);
    let dir = TempDir::new("oci-fleet");
    fake.config_file(dir.path());
    dir.write("token", TOKEN);
    dir.write(
        "pools.yaml",
        "apiVersion: tenure.dev/v1alpha1\nkind: MobilityPool\nmetadata: {name: edge}\nspec:\n  addresses: [10.0.0.10]\n  \
         provider: cloud\n  placementGroup: vcn\n  members: [a, b, c]\n  heartbeatTTL: 1s\n  promotionHold: 0s\n  \
         deprovisionHoldDuration: 0s\n",
    );
    let listen: Vec<SocketAddr> = NODES.iter().map(|_| free_port()).collect();
    let endpoints = cluster.endpoints.join(", ");
    let spec = |i: usize| {
        let priority = if i == 0 { 10 } else { 0 };
        format!(
            "{{name: {}, provider: cloud, placementGroup: vcn, nic: {}, priority: {priority}}}",
            NODES[i], vnics[i]
        )
    };
    for i in 0..3 {
        let peers: Vec<String> = (0..3).filter(|j| *j != i).map(|j| format!("  - {}", spec(j))).collect();
        dir.write(
            &format!("{}.yaml", NODES[i]),
            &format!(
                "node: {}\npeers:\n{}\nstore: {{kind: etcd, endpoints: [{endpoints}], prefix: /oci-fleet, path: ./data-{}}}\n\
                 providers:\n  - {{name: cloud, kind: oci, region: us-ashburn-1, auth: {{configFile: ./oci-config}}, \
                 endpointUrl: '{}', inventoryInterval: 500ms}}\npools: [pools.yaml]\n\
                 listen: {}\nheartbeatInterval: 100ms\nrequeueInterval: 300ms\nactionTimeout: 800ms\napiTokenFile: token\n",
                spec(i),
                peers.join("\n"),
                NODES[i],
                fake.url(),
                listen[i],
            ),
        );
    }
    let start = |i: usize| {
        let agent =
            Agent::spawn_wrapped(&dir, &dir.path().join(format!("{}.yaml", NODES[i])), listen[i], &[], &[]);
        agent.wait_healthy();
        agent
    };
    let mut agents: Vec<Option<Agent>> = (0..3).map(|i| Some(start(i))).collect();
    wait_for("a's VNIC holds the address at the fake", || {
        fake.holder("10.0.0.10").as_deref() == Some(vnics[0].as_str())
    });
    wait_for("every agent shows a as the owner", || listen.iter().all(|l| owner(*l).as_deref() == Some("a")));

    // kill -9 the holder: a survivor moves the object to its VNIC, with one UpdatePrivateIp.
    let updates = count(&fake, "UpdatePrivateIp");
    let killed = Instant::now();
    agents[0].take().expect("a runs").kill9();
    let mut new_vnic = String::new();
    wait_for("a survivor's VNIC holds the address", || match fake.holder("10.0.0.10") {
        Some(h) if h != vnics[0] => {
            new_vnic = h;
            true
        }
        _ => false,
    });
    eprintln!("oci fleet failover: kill -9 to the address on the new VNIC in {:?}", killed.elapsed());
    let new_owner = NODES[vnics.iter().position(|v| *v == new_vnic).expect("a node's VNIC")];
    wait_for("the survivors agree on the new owner", || {
        listen[1..].iter().all(|l| owner(*l).as_deref() == Some(new_owner))
    });
    assert_eq!(count(&fake, "UpdatePrivateIp"), updates + 1, "one move, by one agent");

    // The old holder restarted: it takes nothing back (no move, no create, no delete of the
    // survivor's object), and the address stays on one VNIC.
    let writes =
        |f: &OciFake| (count(f, "UpdatePrivateIp"), count(f, "CreatePrivateIp"), count(f, "DeletePrivateIp"));
    let before = writes(&fake);
    agents[0] = Some(start(0));
    wait_for("the restarted agent shows the new owner", || owner(listen[0]).as_deref() == Some(new_owner));
    // A positive sign that it caught up and acted: its release of the address executed (it read
    // the object on the new holder's VNIC and deleted nothing). Only then are the writes counted.
    wait_for("the restarted old holder's release executed", || released(listen[0]));
    assert_eq!(writes(&fake), before, "the restarted old holder wrote nothing");
    assert_eq!(fake.holder("10.0.0.10").as_deref(), Some(new_vnic.as_str()));
    let state = fake.admin("GET", "state", &serde_json::json!({}));
    let copies = state["privateIps"]
        .as_array()
        .expect("list")
        .iter()
        .filter(|p| p["ipAddress"] == "10.0.0.10")
        .count();
    assert_eq!(copies, 1, "one object for the address");
    drop(cluster);
}
