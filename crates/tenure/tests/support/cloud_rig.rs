//! The in-process rig of the cloud agent tests (`aws_agent.rs`, `azure_agent.rs`,
//! `oci_agent.rs`): three nodes in one agent loop (`run`) on the embedded store (a real redb store
//! in a scratch folder), each with its own NIC at the test's fake cloud (moto, the ARM fake, the
//! OCI fake: test doubles, see their files), over one address of pool `edge`. Each test file
//! brings its fake, its executor and what it asks its fake; the rest is here.

#![allow(dead_code)]

#[path = "inventory_log.rs"]
mod inventory_log;
#[path = "wait.rs"]
mod wait;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tenure::agent::request::{ActionFilter, AgentHandle};
use tenure::agent::runner::{AgentError, RunSummary};
use tenure::agent::{ProviderExecutor, Settings};
use tenure::exec::Executor;
use tenure::store::EmbeddedStore;
use tenure_core::model::{Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec};
use tokio::sync::oneshot;

/// Most time any condition below may take (a failover is 1 s of TTL plus a few calls).
pub const WAIT_MAX: Duration = Duration::from_secs(20);

/// The address of pool `edge`.
pub const ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 10);

pub fn address() -> IpAddr {
    IpAddr::V4(ADDRESS)
}

/// What the rig asks a test's fake cloud.
pub trait Fake {
    /// The NICs of `nics` that hold [`ADDRESS`], at the fake.
    fn holders(&self, nics: &[String]) -> impl Future<Output = Vec<String>>;
}

/// The fake and the agent running over it.
pub struct Rig<F> {
    pub store: EmbeddedStore,
    pub fake: F,
    /// The NICs of a, b, c, and one no node has.
    pub enis: Vec<String>,
    pub handle: AgentHandle,
    stop: oneshot::Sender<()>,
    done: tokio::task::JoinHandle<Result<RunSummary, AgentError>>,
}

/// An empty scratch folder for test `test` of test file `file`.
pub fn scratch(file: &str, test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{file}-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

/// Starts an agent (its store in `dir`) running a (priority 10), b (5) and c (0) on the first
/// three of `enis` over one address of pool `edge` (TTL 1 s, no holds), on provider `cloud` of
/// `kind` with `executor`, reading inventory every `inventory` if given.
pub fn start<F: Fake>(
    dir: &Path,
    fake: F,
    enis: Vec<String>,
    kind: ProviderKind,
    executor: Arc<dyn Executor>,
    inventory: Option<Duration>,
) -> Rig<F> {
    let store = EmbeddedStore::open(&dir.join("store"), &dir.join("identity")).expect("the store opens");
    let nodes: Vec<NodeSpec> = [("a", 10), ("b", 5), ("c", 0)]
        .iter()
        .zip(&enis)
        .map(|((name, priority), eni)| NodeSpec {
            name: (*name).into(),
            provider: "cloud".into(),
            placement_group: "vpc".into(),
            priority: *priority,
            nic: eni.clone(),
            capacity: None,
        })
        .collect();
    let pool = PoolSpec {
        name: "edge".into(),
        addresses: vec![address()],
        provider: "cloud".into(),
        placement_group: "vpc".into(),
        members: vec!["a".into(), "b".into(), "c".into()],
        authority: Authority::None,
        approval: Approval::Auto,
        deprovision_hold_ms: 0,
        heartbeat_ttl_ms: 1_000,
        promotion_hold_ms: 0,
        epoch_locking: true,
        prefer_nodes: vec![],
        preempt: false,
        auto_failover: true,
    };
    let mut executors = BTreeMap::new();
    executors.insert(
        "cloud".to_owned(),
        ProviderExecutor {
            executor,
            call_timeout: Duration::from_secs(10),
            inventory_interval: inventory,
            garp_refresh: None,
        },
    );
    let settings = Settings {
        peers: Vec::new(),
        nodes,
        providers: vec![ProviderSpec { name: "cloud".into(), kind }],
        executors,
        heartbeat_interval: Duration::from_millis(100),
        requeue_interval: Duration::from_millis(200),
        journal_retention: 10_000,
        pools: Box::new(move || Ok(vec![pool.clone()])),
        vrrp: None,
    };
    let (handle, stop, done) = super::in_process::spawn_agent(store.clone(), settings);
    Rig { store, fake, enis, handle, stop, done }
}

/// Waits until `check` holds, at most [`WAIT_MAX`].
pub async fn wait_until(what: &str, check: impl AsyncFnMut() -> bool) {
    wait::wait_until(WAIT_MAX, what, check).await;
}

impl<F: Fake> Rig<F> {
    /// The NICs (of all four) that hold the address, at the fake.
    pub async fn holders(&self) -> Vec<String> {
        self.fake.holders(&self.enis).await
    }

    pub async fn entries(
        &self,
        node: Option<&str>,
        state: Option<&str>,
    ) -> Vec<tenure_core::rows::ActionRow> {
        let filter =
            ActionFilter { node: node.map(str::to_owned), state: state.map(str::to_owned), pool: None };
        self.handle.actions(filter).await.expect("answers")
    }

    /// Every journal entry of the nodes not `frozen` is final (executed or skipped), and the
    /// address is on `eni` alone. Asks the fake only once the journals are final (its calls may
    /// count).
    pub async fn settled_on(&self, eni: &str, frozen: Option<&str>) -> bool {
        let open = self
            .entries(None, None)
            .await
            .iter()
            .filter(|e| Some(e.node.as_str()) != frozen && e.state != "executed" && e.state != "skipped")
            .count();
        open == 0 && self.holders().await == [eni]
    }

    pub async fn wait_settled_on(&self, node: usize, frozen: Option<&str>) {
        let eni = self.enis[node].clone();
        wait_until(&format!("the address on {eni} alone, every entry final"), || {
            self.settled_on(&eni, frozen)
        })
        .await;
    }

    /// Waits until `node` has executed `verb` in a capture epoch above `above` (asking the agent
    /// only: no call reaches the fake).
    pub async fn wait_executed(&self, node: &str, verb: &str, above: u64) {
        wait_until(&format!("{node} executed {verb} in an epoch above {above}"), || async {
            self.entries(Some(node), Some("executed"))
                .await
                .iter()
                .any(|e| e.verb == verb && e.capture_epoch > above)
        })
        .await;
    }

    pub async fn owner(&self) -> (Option<String>, u64, u64) {
        let rows = self.handle.ownership().await.expect("answers");
        let row = rows.into_iter().find(|r| r.address == ADDRESS.to_string()).expect("a row");
        (row.owner, row.ownership_epoch, row.capture_epoch)
    }

    /// The holders of every `inventory` event in the log, in log order.
    pub fn inventory_holders(&self) -> Vec<Vec<String>> {
        inventory_log::inventory_holders(&self.store.log())
    }

    pub async fn recaptures(&self) -> u64 {
        self.handle.metrics().await.expect("answers").drift_recaptures
    }

    pub async fn stop(self) {
        self.stop.send(()).expect("running");
        tokio::time::timeout(WAIT_MAX, self.done).await.expect("stops").expect("joins").expect("ran");
    }
}
