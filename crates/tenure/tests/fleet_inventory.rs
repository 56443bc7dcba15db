//! One inventory reader per provider in a fleet (`Federation::inventory_reader`): a 3-member etcd
//! cluster (`scripts/etcd-cluster`, Debian's etcd-server), three `tenure agent` processes with
//! one node each (`a`, `b`, `c`) sharing one log, and the OCI FAKE (`scripts/oci-fake`: a fake
//! of the published Core Services private IP API, not OCI) as their provider, read every 200 ms.
//! Each agent's reads are counted by its own `tenure_inventory_reads_total`: only the reader's
//! rises; a killed reader's role passes to the next live node once its heartbeat expired, and
//! comes back to it when it returns. Nothing here skips: a cluster, fake or agent that cannot
//! start fails the test.

#![cfg(all(feature = "oci", feature = "etcd"))]

mod process;

#[path = "../../tenure-lead/tests/support/etcd_cluster.rs"]
mod etcd_cluster;
#[path = "support/oci_fake.rs"]
mod oci_fake;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use etcd_cluster::Cluster;
use oci_fake::OciFake;
use process::{Agent, TOKEN, TempDir, free_port, http, stays_for, wait_for};

const NODES: [&str; 3] = ["a", "b", "c"];
/// heartbeatTTL (promotionHold is 0s): 20 heartbeat intervals, so that a slow moment on a loaded
/// machine does not expire a live reader.
const TTL: Duration = Duration::from_secs(2);

/// The inventory reads of provider `cloud` the agent at `listen` made (ok and failed).
fn reads(listen: SocketAddr) -> u64 {
    let (status, body) = http(listen, "GET", "/metrics", None, None).expect("metrics answer");
    assert_eq!(status, 200, "metrics: {body}");
    body.lines()
        .filter(|l| l.starts_with("tenure_inventory_reads_total{provider=\"cloud\","))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<u64>().ok()))
        .sum()
}

/// Waits until the agent at `listen` has read `more` times beyond now; answers its count then.
fn reads_rise(listen: SocketAddr, more: u64, what: &str) -> u64 {
    let from = reads(listen);
    let mut now = from;
    wait_for(what, || {
        now = reads(listen);
        now >= from + more
    });
    now
}

/// [`wait_for`], printing the agents' logs when it fails.
fn wait_for_or_logs(agents: &[Option<Agent>], what: &str, condition: impl FnMut() -> bool) {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| wait_for(what, condition)));
    if let Err(panic) = outcome {
        for (name, agent) in NODES.iter().zip(agents) {
            if let Some(agent) = agent {
                eprintln!("--- agent {name}:\n{}", agent.log());
            }
        }
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn only_the_live_node_with_the_smallest_name_reads_and_a_killed_readers_role_passes_on() {
    let fake = OciFake::start();
    let vnics = fake.vnics(3);
    let cluster = Cluster::start("inventory-reader", 30200);
    let dir = TempDir::new("inventory-reader");
    fake.config_file(dir.path());
    dir.write("token", TOKEN);
    dir.write(
        "pools.yaml",
        &format!(
            "apiVersion: tenure.dev/v1alpha1\nkind: MobilityPool\nmetadata: {{name: edge}}\nspec:\n  addresses: [10.0.0.10]\n  \
             provider: cloud\n  placementGroup: vcn\n  members: [a, b, c]\n  heartbeatTTL: {}ms\n  promotionHold: 0s\n  \
             deprovisionHoldDuration: 0s\n",
            TTL.as_millis()
        ),
    );
    let listen: Vec<SocketAddr> = NODES.iter().map(|_| free_port()).collect();
    let endpoints = cluster.endpoints.join(", ");
    let spec =
        |i: usize| format!("{{name: {}, provider: cloud, placementGroup: vcn, nic: {}}}", NODES[i], vnics[i]);
    for i in 0..3 {
        let peers: Vec<String> = (0..3).filter(|j| *j != i).map(|j| format!("  - {}", spec(j))).collect();
        dir.write(
            &format!("{}.yaml", NODES[i]),
            &format!(
                "node: {}\npeers:\n{}\nstore: {{kind: etcd, endpoints: [{endpoints}], prefix: /inventory-reader, path: ./data-{}}}\n\
                 providers:\n  - {{name: cloud, kind: oci, region: us-ashburn-1, auth: {{configFile: ./oci-config}}, \
                 endpointUrl: '{}', inventoryInterval: 200ms}}\npools: [pools.yaml]\n\
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
    wait_for_or_logs(&agents, "a node's VNIC holds the address at the fake", || {
        fake.holder("10.0.0.10").is_some_and(|h| vnics.contains(&h))
    });

    // a reads; b and c, which see a alive in the log, read nothing over many intervals. (Before
    // every heartbeat landed an agent may have read once: the baseline is taken after a's reads
    // rose, which needs a's heartbeat in the log, which b and c follow too.)
    reads_rise(listen[0], 2, "a reads the provider's inventory");
    let b_before = reads(listen[1]);
    let c_before = reads(listen[2]);
    let a_before = reads(listen[0]);
    stays_for(Duration::from_secs(2), "b and c read nothing while a is the reader", || {
        reads(listen[1]) == b_before && reads(listen[2]) == c_before
    });
    let a_reads = reads(listen[0]) - a_before;
    assert!(a_reads >= 4, "a read {a_reads} times in 2 s at a 200 ms interval");

    // kill -9 the reader: b (the next name) takes over once a's heartbeat expired in the log, not
    // before; c still reads nothing.
    let killed = Instant::now();
    agents[0].take().expect("a runs").kill9();
    wait_for("b starts reading after a's heartbeat expired", || reads(listen[1]) > b_before);
    let took_over = killed.elapsed();
    eprintln!("inventory reader: kill -9 of a to b's first read in {took_over:?}");
    // a's last heartbeat went out shortly before the kill (one heartbeatInterval, 100 ms, unless
    // its loop ran late): b cannot have seen a expired before most of the TTL passed.
    assert!(took_over >= TTL / 2, "b read {took_over:?} after a's kill, long before a expired");
    reads_rise(listen[1], 3, "b keeps reading");
    assert_eq!(reads(listen[2]), c_before, "c never read: b was alive throughout");

    // a back: it is the reader again, and b stops (at most a read under way still ends).
    agents[0] = Some(start(0));
    reads_rise(listen[0], 2, "the restarted a reads again");
    let b_after = reads(listen[1]);
    stays_for(Duration::from_secs(1), "b stops reading once a is back", || reads(listen[1]) <= b_after + 1);
    let b_settled = reads(listen[1]);
    stays_for(Duration::from_secs(1), "b reads nothing while a is the reader", || {
        reads(listen[1]) == b_settled
    });
    assert_eq!(reads(listen[2]), c_before, "c never read");
    drop(agents);
    drop(cluster);
}
