//! `tenure demo`: a self-contained, narrated failover on the embedded default, in one process.
//!
//! Three routers (`a`, `b`, `c`) run in one agent over one store, on the simulated cloud
//! `sim1`. Router `a` (priority 10) captures the pool's three addresses. An operator re-desires
//! one address; `a` plans a fresh acquire for it and freezes before it executes (a GC pause, a
//! hung VM). Its heartbeats stop; after `heartbeatTTL` + `promotionHold` of stream time, `b`
//! (priority 5) seizes every address with fresh epochs. `a` wakes up as a zombie: what it had
//! planned dies at the fence gate. The final map shows each address on exactly one NIC.
//!
//! Everything the agent does here is what `tenure agent` does: the same loop, the same store,
//! the same gate; only the freeze is staged (a control no HTTP route exposes).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tenure_core::log::EventKind;
use tenure_core::model::{Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec};
use tenure_core::rows::OwnershipRow;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::agent::request::{ActionFilter, AgentHandle, Control};
use crate::agent::runner::{NoObserver, run};
use crate::agent::{AgentStore, ProviderExecutor, Settings};
use crate::exec::SimExecutor;
use crate::store::EmbeddedStore;

/// Most time one stage of the demo may take before the demo says it failed.
const STAGE_WAIT_MAX: Duration = Duration::from_secs(30);

/// The demo's arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct DemoArgs {
    /// Keep the store in this directory (a new or empty one; kept afterwards for inspection)
    /// instead of a temporary one, removed at the end.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

const ADDRESSES: [&str; 3] = ["10.0.0.10", "10.0.0.11", "10.0.0.12"];

fn node(name: &str, priority: i64) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        provider: "sim1".into(),
        placement_group: "g1".into(),
        priority,
        nic: format!("eni-{name}"),
        capacity: None,
    }
}

fn pool() -> PoolSpec {
    PoolSpec {
        name: "edge".into(),
        addresses: ADDRESSES.iter().map(|a| a.parse().expect("a literal address")).collect(),
        provider: "sim1".into(),
        placement_group: "g1".into(),
        members: vec!["a".into(), "b".into(), "c".into()],
        authority: Authority::None,
        approval: Approval::Auto,
        deprovision_hold_ms: 2_000,
        heartbeat_ttl_ms: 3_000,
        promotion_hold_ms: 1_000,
        epoch_locking: true,
        prefer_nodes: vec![],
        preempt: false,
        auto_failover: true,
    }
}

/// Why the demo stopped early.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DemoFailed(String);

struct Narrator {
    started: Instant,
}

impl Narrator {
    fn say(&self, text: &str) {
        println!("[{:>5.1}s] {text}", self.started.elapsed().as_secs_f64());
    }
}

fn holdings(cloud: &SimExecutor) -> BTreeMap<String, Vec<String>> {
    cloud.with_provider(|p| {
        p.holdings().iter().map(|(a, nics)| (a.to_string(), nics.iter().cloned().collect())).collect()
    })
}

fn all_on(cloud: &SimExecutor, nic: &str) -> bool {
    let held = holdings(cloud);
    ADDRESSES.iter().all(|a| held.get(*a).is_some_and(|nics| nics.len() == 1 && nics[0] == nic))
}

async fn wait_until<F>(what: &str, mut condition: F) -> Result<(), DemoFailed>
where
    F: AsyncFnMut() -> bool,
{
    let deadline = Instant::now() + STAGE_WAIT_MAX;
    while !condition().await {
        if Instant::now() >= deadline {
            return Err(DemoFailed(format!("not within {STAGE_WAIT_MAX:?}: {what}")));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

fn print_map(rows: &[OwnershipRow], cloud: &SimExecutor) {
    let held = holdings(cloud);
    println!(
        "         {:<8} {:<11} {:<6} {:<16} {:<14} NIC(S)",
        "POOL", "ADDRESS", "OWNER", "OWNERSHIP-EPOCH", "CAPTURE-EPOCH"
    );
    for row in rows {
        let nics = held.get(&row.address).map_or_else(|| "-".to_owned(), |n| n.join(","));
        println!(
            "         {:<8} {:<11} {:<6} {:<16} {:<14} {}",
            row.pool,
            row.address,
            row.owner.as_deref().unwrap_or("-"),
            row.ownership_epoch,
            row.capture_epoch,
            nics
        );
    }
}

fn settings(cloud: &SimExecutor) -> Settings {
    let mut executors = BTreeMap::new();
    executors.insert(
        "sim1".to_owned(),
        ProviderExecutor {
            executor: Arc::new(cloud.clone()),
            // The config's default: below the pool's heartbeatTTL + promotionHold (SPEC 9).
            call_timeout: Duration::from_millis(crate::config::ACTION_TIMEOUT_DEFAULT_MS),
            inventory_interval: None,
            garp_refresh: None,
        },
    );
    Settings {
        peers: Vec::new(),
        nodes: vec![node("a", 10), node("b", 5), node("c", 0)],
        providers: vec![ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }],
        executors,
        heartbeat_interval: Duration::from_millis(250),
        requeue_interval: Duration::from_millis(250),
        journal_retention: tenure_core::journal::JOURNAL_RETENTION_DEFAULT,
        pools: Box::new(|| Ok(vec![pool()])),
        vrrp: None,
    }
}

/// Runs the narrated demo over `store`. Prints as it goes.
pub async fn narrate<S: AgentStore>(store: S) -> Result<(), DemoFailed> {
    let say = Narrator { started: Instant::now() };
    let cloud = SimExecutor::new(ProviderKind::SimCloud);
    let (handle, requests) = AgentHandle::channel();
    let (_reload, reloads) = mpsc::channel(1);
    let (stop, stopped) = oneshot::channel::<()>();
    let agent =
        tokio::spawn(run(store, settings(&cloud), requests, reloads, Arc::new(NoObserver), async move {
            let _ = stopped.await;
        }));
    let result = stages(&say, &handle, &cloud).await;
    let _ = stop.send(());
    let summary = agent.await.map_err(|e| DemoFailed(format!("agent task: {e}")))?;
    let summary = summary.map_err(|e| DemoFailed(format!("agent: {e}")))?;
    result?;
    say.say(&format!(
        "agent stopped cleanly: {} provider calls, {} log events appended",
        summary.calls, summary.appended
    ));
    Ok(())
}

async fn ownership(handle: &AgentHandle) -> Result<Vec<OwnershipRow>, DemoFailed> {
    handle.ownership().await.map_err(|e| DemoFailed(e.to_string()))
}

async fn stages(say: &Narrator, handle: &AgentHandle, cloud: &SimExecutor) -> Result<(), DemoFailed> {
    say.say(
        "three routers a (priority 10), b (5), c (0) on the simulated cloud sim1; pool edge: 10.0.0.10-12",
    );
    say.say("heartbeatTTL 3s, promotionHold 1s, deprovisionHoldDuration 2s; heartbeats every 250 ms");
    wait_until("a holds every address, every call done", async || {
        all_on(cloud, "eni-a")
            && actions(handle, "a", "executed").await.is_ok_and(|rows| rows.len() == 2 * ADDRESSES.len())
    })
    .await?;
    say.say("a captured every address (assign-secondary-ip + enable-forwarding, each through the gate):");
    print_map(&ownership(handle).await?, cloud);

    say.say("operator: undesire + desire 10.0.0.11 → captureEpoch moves; a plans a fresh acquire…");
    let events = vec![
        EventKind::Undesire { pool: "edge".into(), address: ADDRESSES[1].parse().expect("literal") },
        EventKind::Desire { pool: "edge".into(), address: ADDRESSES[1].parse().expect("literal") },
    ];
    control(handle, Control::FreezeAfterReconcile { node: "a".into(), events }).await?;
    let planned = actions(handle, "a", "approved").await?;
    say.say(&format!(
        "…and freezes before executing it (a GC pause): {} action(s) approved, not called:",
        planned.len()
    ));
    for row in &planned {
        println!("         {}", row.idempotency_key);
    }

    say.say("a's heartbeats stop; b and c keep theirs. Waiting for TTL + hold of stream time…");
    let frozen_at = Instant::now();
    wait_until("b seizes every address", async || all_on(cloud, "eni-b")).await?;
    say.say(&format!(
        "b seized every address after {:.1}s, with fresh epochs (reassigned from eni-a):",
        frozen_at.elapsed().as_secs_f64()
    ));
    print_map(&ownership(handle).await?, cloud);

    say.say("a wakes up as a zombie and tries what it approved before it froze:");
    let woke = control(handle, Control::Resume { node: "a".into() }).await?;
    say.say(&woke);
    let fenced = actions(handle, "a", "skipped").await?;
    for row in &fenced {
        println!("         fenced: {} [{}]", row.idempotency_key, row.reason.as_deref().unwrap_or("?"));
    }
    if planned.iter().any(|p| !fenced.iter().any(|f| f.idempotency_key == p.idempotency_key)) {
        return Err(DemoFailed("a planned action of the zombie was not fenced".into()));
    }
    if !all_on(cloud, "eni-b") {
        return Err(DemoFailed(format!("the zombie moved an address: {:?}", holdings(cloud))));
    }

    say.say("a is alive again; preempt is false, so b keeps the addresses. a releases what it held once");
    say.say("deprovisionHoldDuration has passed (unassign on its own ENI only: b's addresses stay):");
    wait_until("a's releases executed", async || {
        actions(handle, "a", "executed").await.is_ok_and(|rows| {
            rows.iter().filter(|r| r.verb == "unassign-secondary-ip").count() == ADDRESSES.len()
        })
    })
    .await?;
    let rows = ownership(handle).await?;
    print_map(&rows, cloud);
    let single = holdings(cloud).values().all(|nics| nics.len() == 1);
    let owners = rows.iter().all(|r| r.owner.as_deref() == Some("b")) && all_on(cloud, "eni-b");
    if !(single && owners) {
        return Err(DemoFailed(format!("the final map is not b's alone: {:?}", holdings(cloud))));
    }
    say.say("each address on exactly one NIC, its owner's; every stale action fenced: violations 0");
    Ok(())
}

async fn control(handle: &AgentHandle, control: Control) -> Result<String, DemoFailed> {
    handle.control(control).await.map_err(|e| DemoFailed(e.to_string()))?.map_err(DemoFailed)
}

async fn actions(
    handle: &AgentHandle,
    node: &str,
    state: &str,
) -> Result<Vec<tenure_core::rows::ActionRow>, DemoFailed> {
    let filter = ActionFilter { node: Some(node.into()), state: Some(state.into()), pool: None };
    handle.actions(filter).await.map_err(|e| DemoFailed(e.to_string()))
}

/// `tenure demo`.
pub fn run_cli(args: &DemoArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tenure demo: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (dir, temporary) = match &args.dir {
        Some(dir) => (dir.clone(), false),
        None => (std::env::temp_dir().join(format!("tenure-demo-{}", std::process::id())), true),
    };
    if !temporary && (dir.join("store").exists() || dir.join("demo.identity").exists()) {
        eprintln!(
            "tenure demo: {} already holds a demo store; give an empty or new directory",
            dir.display()
        );
        return ExitCode::from(super::EXIT_BAD_INPUT);
    }
    let store = match EmbeddedStore::open(&dir.join("store"), &dir.join("demo.identity")) {
        Ok(store) => store,
        Err(e) => {
            eprintln!("tenure demo: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("store: {} (embedded, redb){}", dir.display(), if temporary { ", temporary" } else { "" });
    let outcome = runtime.block_on(narrate(store.clone()));
    let closed = store.close();
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    match (outcome, closed) {
        (Ok(()), Ok(())) => ExitCode::SUCCESS,
        (Err(e), _) => {
            eprintln!("tenure demo: {e}");
            ExitCode::FAILURE
        }
        (Ok(()), Err(e)) => {
            eprintln!("tenure demo: closing the store: {e}");
            ExitCode::FAILURE
        }
    }
}
