//! `tenure agent` on a real L2 segment under keepalived's authority (issue 10): two routers and
//! a client in the `onprem_lab`, each router running keepalived (VRRPv3, a placeholder address
//! only) and a `tenure agent` (provider `onprem`, `authority: vrrp`), the agents sharing one log
//! on a real 3-member etcd in the switch namespace. keepalived elects; tenure adds the fenced
//! proxy entry and announces it.
//!
//! Nothing here skips: without root, iproute2, keepalived, tcpdump, ping or etcd the test fails,
//! naming what is missing (scripts/install-deps installs them).

#![cfg(all(target_os = "linux", feature = "onprem", feature = "etcd"))]

mod onprem_lab;
mod process;

#[path = "../../tenure-lead/tests/support/etcd_cluster.rs"]
mod etcd_cluster;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use etcd_cluster::Cluster;
use onprem_lab::{Capture, Keepalived, Lab, Vrrp};
use process::{Agent, TOKEN, TempDir, http, wait_for_within};

/// How long a hand-over may take in these tests: generous for a loaded 2-core CI machine; the
/// figures themselves are measured by `scripts/onprem-bench`, not asserted here.
const BOUND: Duration = Duration::from_secs(20);

/// Two routers `r1` (priority 100) and `r2` (90) with keepalived and an agent each.
struct Routers {
    lab: Lab,
    dir: TempDir,
    // Dropped after the agents and keepalived (fields drop in order): etcd outlives its clients.
    keepalived: [Option<Keepalived>; 2],
    agents: [Option<Agent>; 2],
    _cluster: Cluster,
}

impl Routers {
    fn new(tag: &str, v6: bool, base_port: u16) -> Self {
        let lab = Lab::fleet(tag, v6);
        let cluster = Cluster::start_at(tag, base_port, Lab::ETCD_HOST, Some(&lab.ns("sw")));
        let dir = TempDir::new(tag);
        dir.write("token", TOKEN);
        dir.write(
            "pools.yaml",
            &format!(
                "apiVersion: tenure.dev/v1alpha1\nkind: MobilityPool\nmetadata: {{name: edge}}\nspec:\n  \
                 addresses: [{}]\n  provider: lan\n  placementGroup: g1\n  members: [r1, r2]\n  \
                 heartbeatTTL: 300ms\n  promotionHold: 0s\n  deprovisionHoldDuration: 0s\n  authority: vrrp\n",
                lab.address()
            ),
        );
        let endpoints = cluster.endpoints.join(", ");
        for i in 1..=2 {
            let spec = |n: usize| {
                format!(
                    "{{name: r{n}, provider: lan, placementGroup: g1, nic: lan-r{n}, priority: {}}}",
                    10 - n
                )
            };
            dir.write(
                &format!("r{i}.yaml"),
                &format!(
                    "node: {}\npeers:\n  - {}\nstore: {{kind: etcd, endpoints: [{endpoints}], prefix: /onprem, path: ./data-r{i}}}\n\
                     providers:\n  - {{name: lan, kind: onprem, interface: lan, garpCount: 3, garpInterval: 50ms}}\n\
                     vrrp: {{notifyFifo: ./r{i}.fifo, instance: {}}}\npools: [pools.yaml]\nlisten: {}:9464\n\
                     heartbeatInterval: 100ms\nrequeueInterval: 500ms\napiTokenFile: token\n",
                    spec(i),
                    spec(3 - i),
                    Keepalived::INSTANCE,
                    Lab::mgmt(i),
                ),
            );
        }
        Self { lab, dir, keepalived: [None, None], agents: [None, None], _cluster: cluster }
    }

    fn listen(i: usize) -> SocketAddr {
        format!("{}:9464", Lab::mgmt(i)).parse().expect("literal")
    }

    fn fifo(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("r{i}.fifo"))
    }

    fn start_agent(&mut self, i: usize) {
        let ns = self.lab.ns(&format!("r{i}"));
        let agent = Agent::spawn_wrapped(
            &self.dir,
            &self.dir.path().join(format!("r{i}.yaml")),
            Self::listen(i),
            &["ip", "netns", "exec", &ns],
            &[],
        );
        agent.wait_healthy();
        self.agents[i - 1] = Some(agent);
    }

    fn start_keepalived(&mut self, i: usize) {
        let fifo = self.fifo(i);
        let priority = if i == 1 { 100 } else { 90 };
        self.keepalived[i - 1] = Some(Keepalived::start(
            &self.lab,
            &format!("r{i}"),
            self.dir.path(),
            priority,
            "0.1",
            Vrrp::Authority { fifo: &fifo },
        ));
    }

    fn agent(&self, i: usize) -> &Agent {
        self.agents[i - 1].as_ref().expect("agent running")
    }

    /// The owner agent `i` reports for the address.
    fn owner(&self, i: usize) -> Option<String> {
        match http(Self::listen(i), "GET", "/v1/ownership", None, None) {
            Ok((200, body)) => {
                let v: serde_json::Value = serde_json::from_str(&body).ok()?;
                v["ownership"][0]["owner"].as_str().map(str::to_owned)
            }
            _ => None,
        }
    }

    /// The ownership and capture epochs agent `i` reports for the address.
    fn epochs(&self, i: usize) -> (u64, u64) {
        let v = self.agent(i).get("/v1/ownership");
        let row = &v["ownership"][0];
        (row["ownershipEpoch"].as_u64().unwrap_or(0), row["captureEpoch"].as_u64().unwrap_or(0))
    }

    /// Waits until router `holder` (1 or 2) alone has the proxy entry.
    fn wait_held_by(&self, holder: usize, what: &str) {
        let address = self.lab.address();
        let other = 3 - holder;
        wait_for_within(BOUND, what, || {
            self.lab.proxies(&format!("r{holder}")) == vec![address]
                && self.lab.proxies(&format!("r{other}")).is_empty()
        });
    }

    /// Whether an ARP request / neighbour solicitation from the client is answered by router
    /// `holder`'s MAC alone, and a ping gets through.
    fn answered_by(&self, holder: usize) {
        let lab = &self.lab;
        let address = lab.address();
        let mac = lab.mac(&format!("r{holder}"));
        let capture = Capture::start(lab);
        lab.exec("cl", &["ip", "neigh", "flush", "dev", "lan"]);
        assert!(lab.ping(), "the client reaches {address} through r{holder}");
        assert_eq!(lab.client_entry().as_deref(), Some(mac.as_str()), "resolved to r{holder}'s MAC");
        let answer = if lab.v6 { "neighbor advertisement" } else { "Reply" };
        let about = |l: &str| l.contains(answer) && l.contains(&address.to_string());
        let first = capture.until(about, Duration::from_secs(5));
        let mut answers: Vec<String> = capture.finish().into_iter().filter(|l| about(l)).collect();
        answers.push(first);
        assert!(
            answers.iter().all(|l| l.contains(&format!(" {mac} >"))),
            "only r{holder} answers: {answers:#?}"
        );
    }

    /// An announcement of the address from router `from` on the client's wire.
    fn announcement(&self, from: usize) -> impl Fn(&str) -> bool {
        let mac = self.lab.mac(&format!("r{from}"));
        let address = self.lab.address();
        let v6 = self.lab.v6;
        move |l: &str| {
            l.contains(&format!(" {mac} >"))
                && if v6 {
                    l.contains("neighbor advertisement") && l.contains(&format!("tgt is {address}"))
                } else {
                    l.contains(&format!("Request who-has {address} (ff:ff:ff:ff:ff:ff) tell {address}"))
                }
        }
    }
}

impl Drop for Routers {
    /// A failed test shows what the agents and keepalived said.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for agent in self.agents.iter().flatten() {
            eprintln!("---- agent log ----\n{}", agent.log());
        }
        for i in 1..=2 {
            let log = std::fs::read_to_string(self.dir.path().join(format!("keepalived-r{i}.log")));
            eprintln!("---- keepalived r{i} ----\n{}", log.unwrap_or_default());
        }
    }
}

/// The whole story on one address family.
fn under_keepalived(tag: &str, v6: bool, base_port: u16) {
    let mut routers = Routers::new(tag, v6, base_port);
    let address = routers.lab.address();

    // r1 first: its agent waits for keepalived (not master: no entry), then keepalived elects it.
    routers.start_agent(1);
    std::thread::sleep(Duration::from_millis(500));
    assert!(routers.lab.proxies("r1").is_empty(), "no entry before keepalived reports MASTER");
    routers.start_keepalived(1);
    routers.wait_held_by(1, "r1 (keepalived master) holds the address");
    routers.start_keepalived(2);
    routers.start_agent(2);
    wait_for_within(BOUND, "both agents see r1 as the owner", || {
        routers.owner(1).as_deref() == Some("r1") && routers.owner(2).as_deref() == Some("r1")
    });
    // r2 is a live, healthy backup: it adds no entry.
    std::thread::sleep(Duration::from_millis(500));
    assert!(routers.lab.proxies("r2").is_empty(), "the BACKUP router adds no entry");
    routers.answered_by(1);

    // r1's agent restarts beside its running keepalived (an upgrade): keepalived said nothing
    // new, so the master stays master — no hand-over, no new epoch, the entry never removed.
    let before = routers.epochs(2);
    let stopped = routers.agents[0].take().expect("running").terminate();
    assert!(stopped.success(), "a clean stop: {stopped:?}");
    assert_eq!(routers.lab.proxies("r1"), vec![address], "a stopped agent leaves the entry");
    routers.start_agent(1);
    wait_for_within(BOUND, "the restarted r1 agent follows the log", || {
        routers.owner(1).as_deref() == Some("r1")
    });
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(routers.epochs(2), before, "no hand-over while r1's agent restarted");
    assert_eq!(routers.lab.proxies("r1"), vec![address]);
    assert!(routers.lab.proxies("r2").is_empty());

    // Kill the holder, keepalived and agent: r2's keepalived takes over, its agent adds the
    // entry and announces; the client's entry moves and its pings follow.
    let capture = Capture::start(&routers.lab);
    routers.keepalived[0].take().expect("running").kill();
    routers.agents[0].take().expect("running").kill9();
    capture.until(routers.announcement(2), BOUND);
    let r2_mac = routers.lab.mac("r2");
    assert_eq!(
        routers.lab.client_entry().as_deref(),
        Some(r2_mac.as_str()),
        "the announcement moved the client's entry"
    );
    assert!(routers.lab.ping(), "the client reaches {address} through r2");
    drop(capture);

    // r1 comes back as BACKUP (nopreempt): its agent removes the entry its killed run left behind.
    routers.start_keepalived(1);
    routers.start_agent(1);
    routers.wait_held_by(2, "the returning BACKUP r1 removes its left-over entry; r2 holds");
    routers.answered_by(2);

    // keepalived on r2 stops (its last line says STOP, then the FIFO closes: not master either
    // way): r1's keepalived takes over, r2's agent, alive, removes its entry.
    routers.keepalived[1].take().expect("running").stop();
    routers.wait_held_by(1, "r2's keepalived gone: r2 removes its entry, r1 (master) holds");

    // A zombie: r1's agent paused while it holds; its keepalived dies, r2's takes over, and r2
    // captures once r1's heartbeats are stale. Resumed, r1 never adds an entry again: it removes
    // its own and stays without.
    routers.start_keepalived(2);
    std::thread::sleep(Duration::from_millis(500));
    let paused = routers.agent(1).child.id().to_string();
    process::run(&["kill", "-STOP", &paused]);
    routers.keepalived[0].take().expect("running").kill();
    wait_for_within(BOUND, "r2 captures while r1 is paused", || routers.lab.proxies("r2") == vec![address]);
    assert_eq!(routers.lab.proxies("r1"), vec![address], "the paused r1's entry is still there");
    process::run(&["kill", "-CONT", &paused]);
    routers.wait_held_by(2, "the resumed zombie removes its entry");
    let watch_until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < watch_until {
        assert!(routers.lab.proxies("r1").is_empty(), "the resumed zombie added an entry again");
        std::thread::sleep(Duration::from_millis(50));
    }
    routers.answered_by(2);
}

#[test]
fn ipv4_under_keepalived_only_the_vrrp_master_answers_and_a_kill_moves_the_address() {
    under_keepalived("k4", false, 23_400);
}

#[test]
fn ipv6_under_keepalived_only_the_vrrp_master_answers_and_a_kill_moves_the_address() {
    under_keepalived("k6", true, 23_430);
}
