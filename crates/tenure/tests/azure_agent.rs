//! The agent with `kind: azure` against the ARM fake (issue 23; `scripts/azure-fake`: a FAKE of
//! the ARM network interface API, not Azure): three nodes in one agent on the embedded store,
//! each with its own NIC. A frozen node is what a killed or hung router is to the others: its
//! heartbeats stop. Calls are counted at the fake (`/_fake/calls`), so a fenced call is one that
//! never arrived.
//!
//! Fails, never skips, when the fake cannot start.

#![cfg(feature = "azure")]

#[path = "support/azure_fake.rs"]
mod azure_fake;
#[path = "support/cloud_rig.rs"]
mod cloud_rig;
#[path = "support/in_process.rs"]
mod in_process;

use std::time::Duration;

use azure_fake::AzureFake;
use cloud_rig::{address, wait_until};
use serde_json::json;
use tenure::agent::request::Control;
use tenure::exec::azure::{AzureExecutor, IpForwarding};
use tenure_core::log::EventKind;
use tenure_core::model::ProviderKind;

type Rig = cloud_rig::Rig<AzureFake>;

impl cloud_rig::Fake for AzureFake {
    async fn holders(&self, nics: &[String]) -> Vec<String> {
        nics.iter().filter(|n| self.holds(n, address())).cloned().collect()
    }
}

/// The fake, four NICs in one resource group (forwarding on), and the agent of [`cloud_rig::start`].
async fn start(test: &str, inventory: Option<Duration>) -> Rig {
    let fake = AzureFake::start();
    fake.config(&json!({"lroDelayMs": 100, "pollMs": 50}));
    let enis: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .enumerate()
        .map(|(i, name)| fake.nic("rg", name, &format!("10.0.0.{}", 4 + i), &[]))
        .collect();
    for nic in &enis {
        fake.set_forwarding(nic, true);
    }
    let dir = cloud_rig::scratch("azure_agent", test);
    let executor = std::sync::Arc::new(AzureExecutor::with_client(fake.arm(), IpForwarding::Check));
    cloud_rig::start(&dir, fake, enis, ProviderKind::Azure, executor, inventory)
}

impl Rig {
    /// The calls since the last reset, polls left out: (op, NIC name).
    fn ops(&self) -> Vec<(String, String)> {
        self.fake
            .calls()
            .iter()
            .filter(|c| c["op"] != "poll")
            .map(|c| (c["op"].as_str().expect("op").to_owned(), c["nic"].as_str().unwrap_or("").to_owned()))
            .collect()
    }

    /// PUTs of NIC `name` since the last reset.
    fn puts_of(&self, name: &str) -> usize {
        self.ops().iter().filter(|(op, nic)| op == "put" && nic == name).count()
    }
}

fn op(op: &str, nic: &str) -> (String, String) {
    (op.to_owned(), nic.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_holder_fails_over_with_two_gets_a_list_and_two_puts_and_the_address_ends_on_one_nic() {
    let rig = start("failover", None).await;
    rig.wait_settled_on(0, None).await;
    let (owner, _, epoch) = rig.owner().await;
    assert_eq!(owner.as_deref(), Some("a"));

    rig.fake.reset_calls();
    let killed = tokio::time::Instant::now();
    rig.handle
        .control(Control::FreezeAfterReconcile { node: "a".into(), events: vec![] })
        .await
        .expect("answers")
        .expect("frozen");
    rig.wait_executed("b", "enable-forwarding", epoch).await;
    let failover = killed.elapsed();
    // The new holder's seize (GET own, list, PUT a without it, PUT b with it, GET b to confirm)
    // and its forwarding check (GET b). Nothing else, polls aside.
    assert_eq!(
        rig.ops(),
        vec![op("get", "b"), op("list", ""), op("put", "a"), op("put", "b"), op("get", "b"), op("get", "b")],
        "calls for the failover ({failover:?} from the freeze to b's forwarding check)"
    );
    assert_eq!(rig.owner().await.0.as_deref(), Some("b"), "b (priority 5) before c");
    assert_eq!(rig.holders().await, [rig.enis[1].clone()], "moved, not copied");

    // The old holder comes back: it releases on its own NIC, one read, and takes nothing from b.
    rig.fake.reset_calls();
    rig.handle.control(Control::Resume { node: "a".into() }).await.expect("answers").expect("woke");
    rig.wait_executed("a", "unassign-secondary-ip", 0).await;
    assert_eq!(rig.ops(), vec![op("get", "a")]);
    rig.wait_settled_on(1, None).await;
    assert_eq!(rig.holders().await, [rig.enis[1].clone()], "on exactly one NIC");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombies_stale_acquire_is_fenced_before_the_call_and_never_reaches_the_fake() {
    // Inventory on: the hand-over below must not look like drift.
    let rig = start("zombie", Some(Duration::from_millis(100))).await;
    rig.wait_settled_on(0, None).await;
    let (_, _, epoch) = rig.owner().await;
    rig.fake.reset_calls();
    let events = vec![
        EventKind::Undesire { pool: "edge".into(), address: address() },
        EventKind::Desire { pool: "edge".into(), address: address() },
    ];
    rig.handle
        .control(Control::FreezeAfterReconcile { node: "a".into(), events })
        .await
        .expect("answers")
        .expect("frozen");
    let approved: Vec<String> =
        rig.entries(Some("a"), Some("approved")).await.into_iter().map(|e| e.idempotency_key).collect();
    assert!(
        approved.iter().any(|k| k.contains("/assign-secondary-ip/")),
        "a approved a fresh acquire and froze before calling it: {approved:?}"
    );
    rig.wait_executed("b", "enable-forwarding", epoch).await;
    let writes = |rig: &Rig| (rig.puts_of("a"), rig.puts_of("b"));
    assert_eq!(writes(&rig), (1, 1), "b's seize only: a's NIC without it, b's with it");

    rig.handle.control(Control::Resume { node: "a".into() }).await.expect("answers").expect("woke");
    wait_until("a's approved entries fenced", || async {
        let skipped: Vec<String> =
            rig.entries(Some("a"), Some("skipped")).await.into_iter().map(|e| e.idempotency_key).collect();
        approved.iter().all(|k| skipped.contains(k))
    })
    .await;
    rig.wait_settled_on(1, None).await;
    assert_eq!(writes(&rig), (1, 1), "the zombie's acquire never reached the fake");
    assert_eq!(rig.owner().await.0.as_deref(), Some("b"));
    assert_eq!(rig.recaptures().await, 0, "a hand-over, with inventory read all along, is no drift");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_removed_or_moved_by_hand_is_recaptured_once_each_and_repaired() {
    let rig = start("drift", Some(Duration::from_millis(200))).await;
    rig.wait_settled_on(0, None).await;
    let (_, _, epoch) = rig.owner().await;
    assert_eq!(rig.recaptures().await, 0);

    // Removed by hand from the holder's NIC: re-captured once, put back by a.
    rig.fake.set(&rig.enis[0], &[]);
    wait_until("one re-capture", || async { rig.recaptures().await == 1 }).await;
    rig.wait_settled_on(0, None).await;
    assert_eq!(rig.owner().await, (Some("a".to_owned()), 1, epoch + 1));

    // Moved by hand to a NIC no node has: repaired once (a seizes it back from d).
    rig.fake.set(&rig.enis[0], &[]);
    rig.fake.set(&rig.enis[3], &["10.0.0.10"]);
    assert_eq!(rig.holders().await, [rig.enis[3].clone()], "moved off a's NIC");
    wait_until("a second re-capture", || async { rig.recaptures().await == 2 }).await;
    rig.wait_settled_on(0, None).await;
    assert_eq!(rig.owner().await, (Some("a".to_owned()), 1, epoch + 2));
    let reads = |m: &tenure::agent::request::MetricsSnapshot| {
        m.inventory_reads.iter().filter(|((_, o), _)| o == "ok").map(|(_, n)| *n).sum::<u64>()
    };
    let before = reads(&rig.handle.metrics().await.expect("answers"));
    wait_until("five more inventory reads", || async {
        reads(&rig.handle.metrics().await.expect("answers")) >= before + 5
    })
    .await;
    assert_eq!(rig.recaptures().await, 2, "quiet again: no more re-captures");
    assert!(
        rig.inventory_holders().contains(&vec![rig.enis[3].clone()]),
        "the NIC no node has is reported in the log"
    );

    // Throttled reads: waited out, counted by provider in the metrics.
    rig.fake.fault(&json!({"op": "list", "status": 429, "retryAfter": 1, "count": 2}));
    wait_until("two throttled answers counted", || async {
        rig.handle.metrics().await.expect("answers").provider_throttled == [("cloud".to_owned(), 2)]
    })
    .await;
    assert_eq!(rig.recaptures().await, 2);
    rig.stop().await;
}
