//! The agent with `kind: oci` against the OCI FAKE (`scripts/oci-fake/oci_fake.py`: a fake of the
//! published Core Services private IP API, not OCI; issue 23): three nodes in one agent on the
//! embedded store (a real redb store in a scratch folder), each with its own VNIC. A frozen node
//! is what a killed or hung router is to the others: its heartbeats stop. Calls are counted at the
//! fake (`/_fake/calls`), so a fenced call is one that never arrived.
//!
//! Fails, never skips, when the fake cannot start (python3).

#![cfg(feature = "oci")]

#[path = "support/cloud_rig.rs"]
mod cloud_rig;
#[path = "support/in_process.rs"]
mod in_process;
#[path = "support/oci_fake.rs"]
mod oci_fake;

use std::time::Duration;

use cloud_rig::{address, wait_until};
use oci_fake::OciFake;
use serde_json::json;
use tenure::agent::request::Control;
use tenure::exec::oci::{OciExecutor, SkipSourceDestCheck};
use tenure_core::log::EventKind;
use tenure_core::model::ProviderKind;

type Rig = cloud_rig::Rig<OciFake>;

impl cloud_rig::Fake for OciFake {
    /// The VNIC that holds the address, at the fake (its own state: not a counted call).
    async fn holders(&self, _: &[String]) -> Vec<String> {
        self.holder(&address().to_string()).into_iter().collect()
    }
}

/// The fake, a subnet with four VNICs, and the agent of [`cloud_rig::start`].
async fn start(test: &str, inventory: Option<Duration>) -> Rig {
    let fake = OciFake::start();
    let enis = fake.vnics(4);
    let dir = cloud_rig::scratch("oci_agent", test);
    let executor = std::sync::Arc::new(OciExecutor::with_client(fake.core(&dir), SkipSourceDestCheck::Check));
    cloud_rig::start(&dir, fake, enis, ProviderKind::Oci, executor, inventory)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_fails_over_with_one_list_one_update_one_read_and_the_address_ends_on_one_vnic() {
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
    // The new holder: one list (the object is on a's VNIC), one update moving it, one read
    // confirming it; its VNIC's subnet read once (GetVnic, then cached), and its
    // skipSourceDestCheck read for enable-forwarding (GetVnic). Nothing else.
    assert_eq!(
        rig.fake.calls(),
        json!({"GetVnic": 2, "ListPrivateIps": 1, "UpdatePrivateIp": 1, "GetPrivateIp": 1}),
        "calls for the failover ({failover:?} from the kill to b's confirmed acquire)"
    );
    assert_eq!(rig.owner().await.0.as_deref(), Some("b"), "b (priority 5) before c");
    assert_eq!(rig.holders().await, [rig.enis[1].clone()], "moved, not copied");

    // The old holder comes back: it lists and reads the object on b's VNIC and deletes nothing.
    rig.fake.reset_calls();
    rig.handle.control(Control::Resume { node: "a".into() }).await.expect("answers").expect("woke");
    rig.wait_executed("a", "unassign-secondary-ip", 0).await;
    assert_eq!(rig.fake.calls(), json!({"ListPrivateIps": 1, "GetPrivateIp": 1}));
    rig.wait_settled_on(1, None).await;
    assert_eq!(rig.holders().await, [rig.enis[1].clone()], "on exactly one VNIC");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombies_stale_acquire_is_fenced_before_the_call_and_never_reaches_the_fake() {
    // Inventory on: the hand-over below must not look like drift.
    let rig = start("zombie", Some(Duration::from_millis(100))).await;
    rig.wait_settled_on(0, None).await;
    let (_, _, epoch) = rig.owner().await;
    rig.fake.reset_calls();
    // a plans and approves a fresh acquire (the address re-desired: a new epoch), then freezes
    // before calling it: a GC pause, a hung VM.
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
        "a approved a fresh assign and froze before calling it: {approved:?}"
    );
    rig.wait_executed("b", "enable-forwarding", epoch).await;
    assert_eq!(rig.fake.calls()["UpdatePrivateIp"], 1, "b's seize only");
    let calls = rig.fake.calls();

    // The zombie wakes up: what it approved meets the gate against the head, and dies there.
    rig.handle.control(Control::Resume { node: "a".into() }).await.expect("answers").expect("woke");
    wait_until("a's approved entries fenced", || async {
        let skipped: Vec<String> =
            rig.entries(Some("a"), Some("skipped")).await.into_iter().map(|e| e.idempotency_key).collect();
        approved.iter().all(|k| skipped.contains(k))
    })
    .await;
    rig.wait_settled_on(1, None).await;
    assert_eq!(rig.fake.calls()["UpdatePrivateIp"], 1, "the zombie's acquire never reached the fake");
    assert!(rig.fake.calls().get("CreatePrivateIp").is_none(), "nor as a create");
    assert_eq!(calls["UpdatePrivateIp"], rig.fake.calls()["UpdatePrivateIp"]);
    assert_eq!(rig.owner().await.0.as_deref(), Some("b"));
    assert_eq!(rig.recaptures().await, 0, "a hand-over, with inventory read all along, is no drift");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_on_oci_is_recaptured_once_and_repaired() {
    let rig = start("drift", Some(Duration::from_millis(200))).await;
    rig.wait_settled_on(0, None).await;
    let (_, _, epoch) = rig.owner().await;
    assert_eq!(rig.recaptures().await, 0);

    // Removed by hand from the holder's VNIC: re-captured once, put back by a.
    rig.fake.drift("10.0.0.10", None);
    wait_until("one re-capture", || async { rig.recaptures().await == 1 }).await;
    rig.wait_settled_on(0, None).await;
    assert_eq!(rig.owner().await, (Some("a".to_owned()), 1, epoch + 1));

    // Moved by hand to a VNIC no node has (another tool's stale call): repaired once.
    rig.fake.drift("10.0.0.10", Some(&rig.enis[3]));
    assert_eq!(rig.holders().await, [rig.enis[3].clone()], "moved off a's VNIC");
    wait_until("a second re-capture", || async { rig.recaptures().await == 2 }).await;
    rig.wait_settled_on(0, None).await;
    assert_eq!(rig.owner().await, (Some("a".to_owned()), 1, epoch + 2));
    // Quiet again: more reads, no more re-captures.
    let reads = |m: &tenure::agent::request::MetricsSnapshot| {
        m.inventory_reads.iter().filter(|((_, o), _)| o == "ok").map(|(_, n)| *n).sum::<u64>()
    };
    let before = reads(&rig.handle.metrics().await.expect("answers"));
    wait_until("five more inventory reads", || async {
        reads(&rig.handle.metrics().await.expect("answers")) >= before + 5
    })
    .await;
    assert_eq!(rig.recaptures().await, 2);
    assert!(
        rig.inventory_holders().contains(&vec![rig.enis[3].clone()]),
        "the VNIC no node has is reported in the log"
    );

    // Reads refused (a policy without `use private-ips`: OCI's 404): counted as failed, nothing
    // appended, nothing re-captured.
    let events = rig.inventory_holders().len();
    let failed = |m: &tenure::agent::request::MetricsSnapshot| {
        m.inventory_reads.iter().filter(|((_, o), _)| o == "failed").map(|(_, n)| *n).sum::<u64>()
    };
    rig.fake.fault("ListPrivateIps", 404, "NotAuthorizedOrNotFound", 10_000, None);
    wait_until("two failed reads", || async { failed(&rig.handle.metrics().await.expect("answers")) >= 2 })
        .await;
    assert_eq!(rig.inventory_holders().len(), events, "a failed read appends nothing");
    assert_eq!(rig.recaptures().await, 2);
    assert!(rig.handle.health().await.expect("answers").ok, "a blind inventory does not stop the agent");
    rig.fake.clear_faults();
    rig.stop().await;
}
