//! The agent loop's history (`GET /v1/history`'s source), in-process over the in-memory store
//! double and the simulated cloud: the loop folds the log it follows, so a drain shows as an
//! ownership move with cause `drain` and the new epochs, followed by the executed results the
//! nodes appended.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tenure::agent::listing::{HistoryAnswer, HistoryQuery, ListFilter};
use tenure::agent::memory::MemoryStore;
use tenure::agent::request::AgentHandle;
use tenure::agent::runner::{NoObserver, run};
use tenure::agent::{ProviderExecutor, Settings};
use tenure::exec::SimExecutor;
use tenure_core::federation::history::{Cause, EntryKind};
use tenure_core::log::EventKind;
use tenure_core::model::{Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec};
use tokio::sync::{mpsc, oneshot};

/// Most time any condition below may take; the loop itself is much faster.
const WAIT_MAX: Duration = Duration::from_secs(10);

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
        addresses: vec!["10.0.0.10".parse().expect("literal")],
        provider: "sim1".into(),
        placement_group: "g1".into(),
        members: vec!["a".into(), "b".into()],
        authority: Authority::None,
        approval: Approval::Auto,
        deprovision_hold_ms: 0,
        heartbeat_ttl_ms: 3_000,
        promotion_hold_ms: 0,
        epoch_locking: true,
        prefer_nodes: vec!["a".into()],
        preempt: false,
        auto_failover: true,
    }
}

/// The history for `filter`, asked until `done` says it is complete (bounded by [`WAIT_MAX`]).
async fn history_until(
    handle: &AgentHandle,
    filter: ListFilter,
    done: impl Fn(&HistoryAnswer) -> bool,
) -> HistoryAnswer {
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    loop {
        let answer = handle
            .history(HistoryQuery { filter: filter.clone(), after: None, limit: None })
            .await
            .expect("answers");
        if done(&answer) {
            return answer;
        }
        assert!(tokio::time::Instant::now() < deadline, "not within {WAIT_MAX:?}: {answer:#?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_shows_in_the_history_with_its_cause_epochs_and_results() {
    let cloud = SimExecutor::new(ProviderKind::SimCloud);
    let mut executors = BTreeMap::new();
    executors.insert(
        "sim1".to_owned(),
        ProviderExecutor {
            executor: Arc::new(cloud.clone()),
            call_timeout: Duration::from_secs(5),
            inventory_interval: None,
            garp_refresh: None,
        },
    );
    let settings = Settings {
        peers: Vec::new(),
        nodes: vec![node("a", 10), node("b", 0)],
        providers: vec![ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }],
        executors,
        heartbeat_interval: Duration::from_millis(50),
        requeue_interval: Duration::from_millis(200),
        journal_retention: 10_000,
        pools: Box::new(move || Ok(vec![pool()])),
        vrrp: None,
    };
    let (handle, requests) = AgentHandle::channel();
    let (_reload_tx, reload) = mpsc::channel(1);
    let (stop, stopped) = oneshot::channel::<()>();
    let done =
        tokio::spawn(run(MemoryStore::new(), settings, requests, reload, Arc::new(NoObserver), async move {
            let _ = stopped.await;
        }));

    let executed_by = |node: &'static str, count: usize| {
        move |answer: &HistoryAnswer| {
            answer
                .entries
                .iter()
                .filter(|(_, e)| e.kind == EntryKind::Executed && e.node.as_deref() == Some(node))
                .count()
                == count
        }
    };
    // a captures: its two acquire verbs are reported executed.
    let placed = history_until(&handle, ListFilter::default(), executed_by("a", 2)).await;
    assert_eq!(placed.reaches_back_to, 1, "the in-memory log keeps every record");
    let first = &placed.entries[0].1;
    assert_eq!(
        (first.kind, first.to.as_deref(), first.ownership_epoch),
        (EntryKind::Ownership, Some("a"), Some(1))
    );

    let receipt =
        handle.submit(EventKind::Drain { node: "a".into() }).await.expect("answers").expect("appended");
    // b's acquires and a's releases reported: the move is done.
    let after = history_until(&handle, ListFilter::default(), |answer| {
        executed_by("b", 2)(answer) && executed_by("a", 4)(answer)
    })
    .await;
    let moves: Vec<_> =
        after.entries.iter().filter(|(_, e)| e.kind == EntryKind::Ownership).map(|(_, e)| e).collect();
    assert_eq!(moves.len(), 2, "{moves:#?}");
    let drained = moves[1];
    assert_eq!(
        (drained.log_index, drained.cause, drained.from.as_deref(), drained.to.as_deref()),
        (receipt.index, Some(Cause::Drain), Some("a"), Some("b"))
    );
    assert_eq!((drained.ownership_epoch, drained.capture_epoch), (Some(2), Some(2)));
    assert!(drained.wall_time_ms > 1_000_000_000_000, "an agent's wall time is ms since the Unix epoch");
    // After the drain only results follow; b's are stamped with the epochs the drain made.
    let results: Vec<_> =
        after.entries.iter().filter(|(_, e)| e.log_index > receipt.index).map(|(_, e)| e).collect();
    assert!(results.iter().all(|e| e.kind == EntryKind::Executed), "{results:#?}");
    assert!(
        results
            .iter()
            .filter(|e| e.node.as_deref() == Some("b"))
            .all(|e| (e.ownership_epoch, e.capture_epoch) == (Some(2), Some(2))),
        "{results:#?}"
    );
    let positions: Vec<_> = after.entries.iter().map(|(p, _)| *p).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "in log order: {positions:?}");
    // The node filter: b is in the drain's move and its own results only.
    let of_b =
        history_until(&handle, ListFilter { node: Some("b".into()), ..ListFilter::default() }, |_| true)
            .await;
    assert!(of_b.entries.iter().all(|(_, e)| e.involves("b")));
    assert_eq!(of_b.entries.len(), 3, "{:#?}", of_b.entries);

    stop.send(()).expect("running");
    done.await.expect("joins").expect("stops cleanly");
}
