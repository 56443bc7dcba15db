//! [`Routers`]: the lab's two routers with keepalived and `tenure agent` processes on a real etcd
//! (shared by `tests/onprem_keepalived.rs` and `benches/onprem_failover.rs`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::etcd_cluster::Cluster;
use super::{Keepalived, Lab, Vrrp};
use crate::process::{Agent, TOKEN, TempDir, http, wait_for_within};

/// How long a hand-over may take in the tests: generous for a loaded 2-core CI machine; the
/// figures themselves are measured by `scripts/onprem-bench`, not asserted.
pub const BOUND: Duration = Duration::from_secs(20);

/// How the routers decide who answers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    /// keepalived elects (VRRPv3, `advert_int` seconds), tenure acts (`authority: vrrp`).
    Vrrp { advert_int: &'static str },
    /// tenure alone (`authority: none`): no keepalived.
    TenureOnly,
    /// keepalived alone holds the address on `lan` (no tenure).
    KeepalivedOnly { advert_int: &'static str },
}

/// Two routers `r1` (priority 100) and `r2` (90) with keepalived and an agent each (as `mode`
/// says), the agents on a 3-member etcd in the switch namespace. Pool `edge` holds the lab's
/// address with `heartbeatTTL` as given, `heartbeatInterval: 100ms` ([`HEARTBEAT_INTERVAL`]),
/// `promotionHold: 0s`, and `deprovisionHoldDuration: 0s` unless made with [`Routers::with_hold`];
/// the agents read their proxy entries every second (`inventoryInterval: 1s`) and give a call
/// `actionTimeout` 1 s, or 50 ms under the TTL when that is shorter.
pub struct Routers {
    pub lab: Lab,
    pub dir: TempDir,
    pub mode: Mode,
    // Dropped after the agents and keepalived (fields drop in order): etcd outlives its clients.
    pub keepalived: [Option<Keepalived>; 2],
    pub agents: [Option<Agent>; 2],
    _cluster: Cluster,
}

/// The agents' `heartbeatInterval`.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);

impl Routers {
    pub fn new(tag: &str, v6: bool, base_port: u16, mode: Mode, heartbeat_ttl: &str) -> Self {
        Self::with_hold(tag, v6, base_port, mode, heartbeat_ttl, Some("0s"))
    }

    /// [`Routers::new`] with the pool's `deprovisionHoldDuration` as given (`None`: the line is
    /// left out, so the default, 5 s, applies).
    pub fn with_hold(
        tag: &str,
        v6: bool,
        base_port: u16,
        mode: Mode,
        heartbeat_ttl: &str,
        hold: Option<&str>,
    ) -> Self {
        let lab = Lab::fleet(tag, v6);
        let cluster = Cluster::start_at(tag, base_port, Lab::ETCD_HOST, Some(&lab.ns("sw")));
        let dir = TempDir::new(tag);
        dir.write("token", TOKEN);
        dir.write(
            "pools.yaml",
            &format!(
                "apiVersion: tenure.dev/v1alpha1\nkind: MobilityPool\nmetadata: {{name: edge}}\nspec:\n  \
                 addresses: [{}]\n  provider: lan\n  placementGroup: g1\n  members: [r1, r2]\n  \
                 heartbeatTTL: {heartbeat_ttl}\n  promotionHold: 0s\n{}  authority: {}\n",
                lab.address(),
                hold.map(|h| format!("  deprovisionHoldDuration: {h}\n")).unwrap_or_default(),
                if matches!(mode, Mode::Vrrp { .. }) { "vrrp" } else { "none" },
            ),
        );
        // A call may not outlive the pool's heartbeatTTL (+ promotionHold 0) less one heartbeat
        // interval: the agent refuses an actionTimeout that is not below it. 1 s, or 50 ms under
        // that when it is shorter.
        let ttl_ms: u64 = heartbeat_ttl
            .strip_suffix("ms")
            .and_then(|ms| ms.parse().ok())
            .unwrap_or_else(|| panic!("heartbeatTTL in milliseconds (\"1500ms\"), not {heartbeat_ttl:?}"));
        let action_timeout_ms = ttl_ms
            .saturating_sub(50 + u64::try_from(HEARTBEAT_INTERVAL.as_millis()).expect("small"))
            .min(1000);
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
                     providers:\n  - {{name: lan, kind: onprem, interface: lan, garpCount: 3, garpInterval: 50ms, inventoryInterval: 1s}}\n\
                     {}pools: [pools.yaml]\nlisten: {}:9464\n\
                     heartbeatInterval: {}ms\nrequeueInterval: 500ms\nactionTimeout: {}ms\napiTokenFile: token\n",
                    spec(i),
                    spec(3 - i),
                    if matches!(mode, Mode::Vrrp { .. }) {
                        format!("vrrp: {{notifyFifo: ./r{i}.fifo, instance: {}}}\n", Keepalived::INSTANCE)
                    } else {
                        String::new()
                    },
                    Lab::mgmt(i),
                    HEARTBEAT_INTERVAL.as_millis(),
                    action_timeout_ms,
                ),
            );
        }
        Self { lab, dir, mode, keepalived: [None, None], agents: [None, None], _cluster: cluster }
    }

    pub fn listen(i: usize) -> SocketAddr {
        format!("{}:9464", Lab::mgmt(i)).parse().expect("literal")
    }

    pub fn fifo(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("r{i}.fifo"))
    }

    pub fn start_agent(&mut self, i: usize) {
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

    /// Starts keepalived on router `i` (as the mode says: beside tenure, or holding the address).
    pub fn start_keepalived(&mut self, i: usize) {
        let fifo = self.fifo(i);
        let address = self.lab.address().to_string();
        let (advert_int, vrrp) = match self.mode {
            Mode::Vrrp { advert_int } => (advert_int, Vrrp::Authority { fifo: &fifo }),
            Mode::KeepalivedOnly { advert_int } => (advert_int, Vrrp::Alone { vip: &address }),
            Mode::TenureOnly => panic!("no keepalived in this mode"),
        };
        let priority = if i == 1 { 100 } else { 90 };
        self.keepalived[i - 1] =
            Some(Keepalived::start(&self.lab, &format!("r{i}"), self.dir.path(), priority, advert_int, vrrp));
    }

    /// What keepalived on router `i` logged so far (every start appends).
    pub fn keepalived_log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("keepalived-r{i}.log"))).unwrap_or_default()
    }

    /// SIGKILL to router `i`'s agent, then to keepalived's process group (the agent first, so
    /// that it cannot act on keepalived's end).
    pub fn kill(&mut self, i: usize) {
        if let Some(agent) = self.agents[i - 1].take() {
            agent.kill9();
        }
        if let Some(keepalived) = self.keepalived[i - 1].take() {
            keepalived.kill();
        }
    }

    pub fn agent(&self, i: usize) -> &Agent {
        self.agents[i - 1].as_ref().expect("agent running")
    }

    /// The owner agent `i` reports for the address.
    pub fn owner(&self, i: usize) -> Option<String> {
        match http(Self::listen(i), "GET", "/v1/ownership", None, None) {
            Ok((200, body)) => {
                let v: serde_json::Value = serde_json::from_str(&body).ok()?;
                v["ownership"][0]["owner"].as_str().map(str::to_owned)
            }
            _ => None,
        }
    }

    /// The ownership and capture epochs agent `i` reports for the address.
    pub fn epochs(&self, i: usize) -> (u64, u64) {
        let v = self.agent(i).get("/v1/ownership");
        let row = &v["ownership"][0];
        (row["ownershipEpoch"].as_u64().unwrap_or(0), row["captureEpoch"].as_u64().unwrap_or(0))
    }

    /// Cuts router `i`'s path to etcd (a blackhole route to [`Lab::ETCD_HOST`] in its namespace:
    /// nothing it sends there leaves; VRRP and ARP on `lan` go on), or restores it.
    pub fn cut_from_etcd(&self, i: usize, cut: bool) {
        let verb = if cut { "add" } else { "del" };
        let etcd = format!("{}/32", Lab::ETCD_HOST);
        self.lab.exec(&format!("r{i}"), &["ip", "route", verb, "blackhole", &etcd]);
    }

    /// Waits until router `holder` (1 or 2) alone has the proxy entry.
    pub fn wait_held_by(&self, holder: usize, what: &str) {
        let address = self.lab.address();
        let other = 3 - holder;
        wait_for_within(BOUND, what, || {
            self.lab.proxies(&format!("r{holder}")) == vec![address]
                && self.lab.proxies(&format!("r{other}")).is_empty()
        });
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
            eprintln!("---- keepalived r{i} ----\n{}", self.keepalived_log(i));
        }
    }
}
