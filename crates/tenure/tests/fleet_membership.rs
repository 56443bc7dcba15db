//! Fleet membership on a real etcd (issue 24): agents list only their own node (no `peers`), a
//! fourth router joins a running fleet of three by starting its agent and takes its share, one
//! is retired (`tenure node retire`, refused while it is alive or run by the agent asked) and the
//! fleet and its snapshots forget it, a retired router comes back by starting again, and a
//! `peers` pin that differs from the log stops an agent at start in one line. The provider is
//! `sim-cloud` (each agent's own in-memory cloud): what is checked is the map every agent
//! computes from the one log. Nothing here skips: a cluster or agent that cannot start fails.

mod process;

#[path = "../../tenure-lead/tests/support/etcd_cluster.rs"]
mod etcd_cluster;
#[path = "support/etcdctl.rs"]
mod etcdctl_support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use etcd_cluster::Cluster;
use etcdctl_support::etcdctl;
use process::{Agent, TOKEN, TempDir, free_port, http, tenure, wait_for};

const PREFIX: &str = "/members-test";

struct Rig {
    dir: TempDir,
    cluster: Cluster,
    listen: BTreeMap<&'static str, SocketAddr>,
}

impl Rig {
    fn new() -> Self {
        let cluster = Cluster::start("fleet-members", 30700);
        let dir = TempDir::new("fleet-members");
        dir.write("token", TOKEN);
        dir.write(
            "pools.yaml",
            "apiVersion: tenure.dev/v1alpha1\nkind: MobilityPool\nmetadata: {name: edge}\nspec:\n  \
             addresses: [10.0.0.16/28]\n  provider: sim1\n  placementGroup: g1\n  members: [a, b, c, d]\n  \
             heartbeatTTL: 1s\n  promotionHold: 0s\n  deprovisionHoldDuration: 0s\n  \
             ipOwnershipPolicy: {preempt: true}\n",
        );
        let endpoints = cluster.endpoints.join(", ");
        let mut listen = BTreeMap::new();
        for name in ["a", "b", "c", "d"] {
            let port = free_port();
            listen.insert(name, port);
            dir.write(
                &format!("{name}.yaml"),
                &format!(
                    "node: {}\nstore: {{kind: etcd, endpoints: [{endpoints}], prefix: {PREFIX}, path: ./data-{name}, \
                     snapshotEvery: 100}}\nproviders:\n  - {{name: sim1, kind: sim-cloud}}\npools: [pools.yaml]\n\
                     listen: {port}\nheartbeatInterval: 100ms\nrequeueInterval: 500ms\nactionTimeout: 800ms\napiTokenFile: token\n",
                    spec(name, 0)
                ),
            );
        }
        Self { dir, cluster, listen }
    }

    fn config(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.yaml"))
    }

    fn start(&self, name: &str) -> Agent {
        Agent::start(&self.dir, &self.config(name), self.listen[name])
    }

    fn endpoints(&self) -> String {
        self.cluster.endpoints.join(",")
    }

    /// The nodes named in the newest snapshot of the log (the manifest `P/snapshot`, its chunks
    /// under `P/snapshots/<revision, 20 digits>/`), with the snapshot's revision; `None` before
    /// the first one.
    fn snapshot_nodes(&self) -> Option<(u64, Vec<String>)> {
        let (revision, snapshot) = self.snapshot()?;
        let nodes =
            snapshot["nodes"].as_array()?.iter().filter_map(|n| n["name"].as_str().map(str::to_owned));
        Some((revision, nodes.collect()))
    }

    /// The newest snapshot of the log, whole, with its revision.
    fn snapshot(&self) -> Option<(u64, serde_json::Value)> {
        let manifest =
            etcdctl(&self.endpoints(), &["get", &format!("{PREFIX}/snapshot"), "--print-value-only"]);
        let manifest: serde_json::Value = serde_json::from_str(manifest.trim()).ok()?;
        let revision = manifest["revision"].as_u64()?;
        let chunks = etcdctl(
            &self.endpoints(),
            &["get", "--prefix", &format!("{PREFIX}/snapshots/{revision:020}/"), "--print-value-only"],
        );
        Some((revision, serde_json::from_str(&chunks.lines().collect::<String>()).ok()?))
    }

    /// The priority the newest snapshot registers `node` at.
    fn snapshot_priority(&self, node: &str) -> Option<i64> {
        let (_, snapshot) = self.snapshot()?;
        snapshot["nodes"].as_array()?.iter().find(|n| n["name"] == node)?["spec"]["priority"].as_i64()
    }
}

fn spec(name: &str, priority: i64) -> String {
    format!("{{name: {name}, provider: sim1, placementGroup: g1, nic: eni-{name}, priority: {priority}}}")
}

/// `GET /v1/ownership`: the owner of every address (`-` for none), raw body too.
fn owners(listen: SocketAddr) -> Option<(String, BTreeMap<String, String>)> {
    let (200, body) = http(listen, "GET", "/v1/ownership", None, None).ok()? else { return None };
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    let rows = v["ownership"].as_array()?;
    let owners = rows
        .iter()
        .map(|r| {
            let address = r["address"].as_str().unwrap_or_default().to_owned();
            (address, r["owner"].as_str().unwrap_or("-").to_owned())
        })
        .collect();
    Some((body, owners))
}

/// Waits until every agent of `listen` shows the same map, byte for byte, in which the owners
/// are exactly `who` (each owning at least one address); returns the owners by address.
fn shared_by(rig: &Rig, listen: &[&str], who: &[&str]) -> BTreeMap<String, String> {
    let deadline = Instant::now() + process::WAIT_MAX;
    loop {
        let maps: Vec<Option<(String, BTreeMap<String, String>)>> =
            listen.iter().map(|name| owners(rig.listen[name])).collect();
        if let Some(Some((first, owners))) = maps.first()
            && maps.iter().all(|m| m.as_ref().is_some_and(|(body, _)| body == first))
        {
            let mut holding: Vec<&str> = owners.values().map(String::as_str).collect();
            holding.sort_unstable();
            holding.dedup();
            if holding == who {
                return owners.clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "not within {:?}: agents {listen:?} show one map owned by exactly {who:?}; maps: {maps:#?}",
            process::WAIT_MAX
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_fourth_router_joins_a_running_fleet_and_a_retired_one_is_forgotten() {
    let rig = Rig::new();
    let mut agents: BTreeMap<&str, Agent> = ["a", "b", "c"].into_iter().map(|n| (n, rig.start(n))).collect();
    // The pool lists d, which no agent runs yet: three share the map.
    shared_by(&rig, &["a", "b", "c"], &["a", "b", "c"]);

    // d joins: its agent registers the node, the fleet gives it its share (preempt: true).
    agents.insert("d", rig.start("d"));
    let with_d = shared_by(&rig, &["a", "b", "c", "d"], &["a", "b", "c", "d"]);
    eprintln!("with d: {with_d:?}");
    assert!(agents["d"].log().contains("registered in the fleet's log"), "{}", agents["d"].log());
    wait_for("a snapshot that names all four", || {
        rig.snapshot_nodes()
            .is_some_and(|(_, nodes)| ["a", "b", "c", "d"].iter().all(|n| nodes.contains(&(*n).to_owned())))
    });

    // c cannot be retired while it runs: not through another agent (alive), not through its own.
    let (status, body) = agents["a"].post("/v1/nodes/c/retire", None);
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("was heard from"), "{body}");
    let (status, body) = agents["c"].post("/v1/nodes/c/retire", None);
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("is run by this agent"), "{body}");

    // c's router dies for good: its addresses move, then the operator retires it.
    agents.remove("c").expect("c runs").kill9();
    shared_by(&rig, &["a", "b", "d"], &["a", "b", "d"]);
    let endpoint = format!("http://{}", rig.listen["a"]);
    let token = rig.dir.path().join("token");
    // Refused until c is silent past the TTL and the others' acquires of its addresses are
    // confirmed (on a cloud they moved them: c holds nothing more by the log), then retired.
    let retire = || {
        tenure(&[
            "node",
            "retire",
            "c",
            "--endpoint",
            &endpoint,
            "--token-file",
            token.to_str().expect("utf-8"),
        ])
    };
    let mut refusals = Vec::new();
    let stdout = loop {
        let (code, stdout, stderr) = retire();
        if code == 0 {
            break stdout;
        }
        assert!(stderr.contains("was heard from") || stderr.contains("still holds"), "{stderr}");
        refusals.push(stderr);
        assert!(refusals.len() < 100, "c was never retired: {refusals:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(stdout.contains("node/c retired"), "{stdout}");
    // Again: c is not in the registry any more.
    let (code, _, stderr) = retire();
    assert_ne!(code, 0);
    assert!(stderr.contains("not in the registry"), "{stderr}");
    // Every agent's status forgets c, and so do the snapshots written after the retirement.
    for name in ["a", "b", "d"] {
        let (status, page) = http(rig.listen[name], "GET", "/", None, None).expect("the status page");
        assert_eq!(status, 200);
        let nodes: Vec<&str> =
            page.split("<tr data-node=\"").skip(1).filter_map(|rest| rest.split('"').next()).collect();
        assert_eq!(nodes, ["a", "b", "d"], "{name}'s status page lists the registry's nodes");
    }
    // Every snapshot before the retire named c (above): one without it was written after.
    wait_for("a snapshot without c", || {
        rig.snapshot_nodes().is_some_and(|(_, nodes)| !nodes.contains(&"c".to_owned()))
    });

    // A peers pin that differs from the log stops an agent at start, in one line.
    let pinned = std::fs::read_to_string(rig.config("c"))
        .expect("c.yaml")
        .replace("\nstore:", &format!("\npeers: [{}]\nstore:", spec("a", 5)));
    rig.dir.write("c-pinned.yaml", &pinned);
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["agent", "--config", rig.dir.path().join("c-pinned.yaml").to_str().expect("utf-8")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tenure runs");
    let output = wait_output(out);
    assert_eq!(output.status.code(), Some(1), "{}", String::from_utf8_lossy(&output.stderr));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("peers: pinned node `a`: this config names priority `5`, but the log has `0`"),
        "{stderr}"
    );

    // The retired router comes back by starting its agent: it registers again, takes its share.
    agents.insert("c", rig.start("c"));
    shared_by(&rig, &["a", "b", "c", "d"], &["a", "b", "c", "d"]);

    // A router restarted with another priority registers its node again and the log takes it.
    assert_eq!(rig.snapshot_priority("b"), Some(0), "b registered at priority 0");
    let b = agents.remove("b").expect("b runs");
    assert!(b.terminate().success());
    let changed =
        std::fs::read_to_string(rig.config("b")).expect("b.yaml").replace(&spec("b", 0), &spec("b", 7));
    rig.dir.write("b.yaml", &changed);
    let b = rig.start("b");
    wait_for("a snapshot with b at priority 7", || rig.snapshot_priority("b") == Some(7));
    assert!(b.log().contains("registered in the fleet's log"), "{}", b.log());
    agents.insert("b", b);
}

/// The output of a child that must exit within the tests' bound.
fn wait_output(mut child: std::process::Child) -> std::process::Output {
    let status = process::wait_exit(&mut child);
    let mut stderr = Vec::new();
    std::io::Read::read_to_end(&mut child.stderr.take().expect("piped"), &mut stderr).expect("its stderr");
    std::process::Output { status, stdout: Vec::new(), stderr }
}
