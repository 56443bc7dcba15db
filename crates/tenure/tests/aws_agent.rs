//! The agent with `kind: aws` against moto's EC2 server (issue 11): three nodes in one agent on
//! the embedded store (a real redb store in a scratch folder), each with its own ENI. A frozen
//! node is what a killed or hung router is to the others: its heartbeats stop. Calls are counted
//! at the server (`/_tenure/calls`), so a fenced call is one that never arrived.
//!
//! A spot interruption announced by the FAKE metadata service (`scripts/metadata-fake`, IMDSv2
//! from its published reference; not a cloud) drains the node it names through the agent loop.
//!
//! Fails, never skips, when moto or the fake cannot start (scripts/install-deps installs moto).

#![cfg(feature = "aws")]

#[path = "support/cloud_rig.rs"]
mod cloud_rig;
#[path = "support/in_process.rs"]
mod in_process;
#[path = "support/metadata_fake.rs"]
#[allow(dead_code, reason = "each test file uses part of the harness")]
mod metadata_fake;
#[path = "support/moto.rs"]
#[allow(dead_code, reason = "each test file uses part of the harness")]
mod moto;

use std::sync::Arc;
use std::time::Duration;

use cloud_rig::{ADDRESS, WAIT_MAX, address, wait_until};
use moto::Moto;
use serde_json::json;
use tenure::agent::request::Control;
use tenure::exec::aws::{AwsExecutor, Ec2};
use tenure_core::log::EventKind;
use tenure_core::model::ProviderKind;

/// moto and a client of it.
struct Ec2Fake {
    moto: Moto,
    ec2: Ec2,
}

impl cloud_rig::Fake for Ec2Fake {
    /// The ENIs of `nics` that hold the address, at the server (a counted describe).
    async fn holders(&self, nics: &[String]) -> Vec<String> {
        let found = self.ec2.holders(nics, &[ADDRESS]).await.expect("describe");
        found.get(&ADDRESS).cloned().unwrap_or_default()
    }
}

/// moto, a VPC with four ENIs, and the agent of [`cloud_rig::start`].
async fn start(test: &str, inventory: Option<Duration>) -> cloud_rig::Rig<Ec2Fake> {
    let moto = Moto::start(false);
    let ec2 = moto.ec2().await;
    let enis = moto::enis(&ec2, 4).await;
    let dir = cloud_rig::scratch("aws_agent", test);
    let executor = Arc::new(AwsExecutor::with_client(ec2.clone()));
    cloud_rig::start(&dir, Ec2Fake { moto, ec2 }, enis, ProviderKind::Aws, executor, inventory)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_fails_over_with_one_call_of_each_kind_and_the_address_ends_on_one_eni() {
    let rig = start("failover", None).await;
    rig.wait_settled_on(0, None).await;
    let (owner, _, epoch) = rig.owner().await;
    assert_eq!(owner.as_deref(), Some("a"));

    rig.fake.moto.http("DELETE", "/_tenure/calls", "");
    let killed = tokio::time::Instant::now();
    rig.handle
        .control(Control::FreezeAfterReconcile { node: "a".into(), events: vec![] })
        .await
        .expect("answers")
        .expect("frozen");
    rig.wait_executed("b", "enable-forwarding", epoch).await;
    let failover = killed.elapsed();
    // The new holder: one assign (its reassignment took the address off a's ENI), one describe
    // to confirm it, one source/dest check change. Nothing else.
    assert_eq!(
        rig.fake.moto.calls(),
        json!({"AssignPrivateIpAddresses": 1, "DescribeNetworkInterfaces": 1, "ModifyNetworkInterfaceAttribute": 1}),
        "calls for the failover ({failover:?} from the kill to b's confirmed acquire)"
    );
    assert_eq!(rig.owner().await.0.as_deref(), Some("b"), "b (priority 5) before c");
    assert_eq!(rig.holders().await, [rig.enis[1].clone()], "moved, not copied");

    // The old holder comes back: it releases on its own ENI, one call, and takes nothing from b.
    rig.fake.moto.http("DELETE", "/_tenure/calls", "");
    rig.handle.control(Control::Resume { node: "a".into() }).await.expect("answers").expect("woke");
    rig.wait_executed("a", "unassign-secondary-ip", 0).await;
    assert_eq!(rig.fake.moto.calls(), json!({"UnassignPrivateIpAddresses": 1}));
    rig.wait_settled_on(1, None).await;
    assert_eq!(rig.holders().await, [rig.enis[1].clone()], "on exactly one ENI");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombies_stale_assign_is_fenced_before_the_call_and_never_reaches_ec2() {
    // Inventory on: the hand-over below must not look like drift.
    let rig = start("zombie", Some(Duration::from_millis(100))).await;
    rig.wait_settled_on(0, None).await;
    let (_, _, epoch) = rig.owner().await;
    rig.fake.moto.http("DELETE", "/_tenure/calls", "");
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
    assert_eq!(rig.fake.moto.calls()["AssignPrivateIpAddresses"], 1, "b's seize only");

    // The zombie wakes up: what it approved meets the gate against the head, and dies there.
    rig.handle.control(Control::Resume { node: "a".into() }).await.expect("answers").expect("woke");
    wait_until("a's approved entries fenced", || async {
        let skipped: Vec<String> =
            rig.entries(Some("a"), Some("skipped")).await.into_iter().map(|e| e.idempotency_key).collect();
        approved.iter().all(|k| skipped.contains(k))
    })
    .await;
    rig.wait_settled_on(1, None).await;
    assert_eq!(rig.fake.moto.calls()["AssignPrivateIpAddresses"], 1, "the zombie's assign never reached EC2");
    assert_eq!(rig.owner().await.0.as_deref(), Some("b"));
    assert_eq!(rig.recaptures().await, 0, "a hand-over, with inventory read all along, is no drift");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_on_ec2_is_recaptured_once_and_repaired() {
    let rig = start("drift", Some(Duration::from_millis(200))).await;
    rig.wait_settled_on(0, None).await;
    let (_, _, epoch) = rig.owner().await;
    assert_eq!(rig.recaptures().await, 0);

    // Removed by hand from the holder's ENI: re-captured once, put back by a.
    rig.fake.ec2.unassign(&rig.enis[0], address()).await.expect("unassign by hand");
    wait_until("one re-capture", || async { rig.recaptures().await == 1 }).await;
    rig.wait_settled_on(0, None).await;
    assert_eq!(rig.owner().await, (Some("a".to_owned()), 1, epoch + 1));

    // Reassigned by hand to an ENI no node has (another tool's stale call): repaired once.
    rig.fake.ec2.assign(&rig.enis[3], address()).await.expect("assign by hand");
    assert_eq!(rig.holders().await, [rig.enis[3].clone()], "moved off a's ENI");
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
        "the ENI no node has is reported in the log"
    );

    // Reads refused (a policy without DescribeNetworkInterfaces): counted as failed, nothing
    // appended, nothing re-captured.
    let events = rig.inventory_holders().len();
    let failed = |m: &tenure::agent::request::MetricsSnapshot| {
        m.inventory_reads.iter().filter(|((_, o), _)| o == "failed").map(|(_, n)| *n).sum::<u64>()
    };
    rig.fake.moto.fault(&json!({"action": "DescribeNetworkInterfaces", "unauthorized": true}));
    wait_until("two failed reads", || async { failed(&rig.handle.metrics().await.expect("answers")) >= 2 })
        .await;
    assert_eq!(rig.inventory_holders().len(), events, "a failed read appends nothing");
    assert_eq!(rig.recaptures().await, 2);
    assert!(rig.handle.health().await.expect("answers").ok, "a blind inventory does not stop the agent");
    rig.fake.moto.http("DELETE", "/_tenure/faults", "");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_interruption_drains_the_node_and_its_address_moves_before_the_deadline() {
    use tenure::agent::notices::{NoticeWatch, watch};
    use tenure::exec::notices::{NoticeReader, NoticeSource};

    let rig = start("spot", None).await;
    rig.wait_settled_on(0, None).await;
    let fake = metadata_fake::MetadataFake::start();
    let metrics = Arc::new(tenure::metrics::Metrics::new());
    let stop = tokio_util::sync::CancellationToken::new();
    let reader = NoticeReader::new(NoticeSource::Aws, &fake.url()).expect("an http URL");
    let watcher = tokio::spawn(watch(
        NoticeWatch { node: "a".into(), reader, interval: Duration::from_millis(100) },
        rig.handle.clone(),
        Arc::clone(&metrics),
        stop.clone(),
    ));
    // Two minutes' notice, as AWS gives.
    let deadline = std::time::SystemTime::now() + Duration::from_secs(120);
    let time = jiff::Timestamp::try_from(deadline).expect("in range").to_string();
    rig.fake.moto.http("DELETE", "/_tenure/calls", "");
    fake.set(&json!({"awsSpot": {"action": "terminate", "time": time}}));
    rig.wait_settled_on(1, None).await;
    assert!(std::time::SystemTime::now() < deadline, "moved before the interruption");
    assert_eq!(rig.owner().await.0.as_deref(), Some("b"), "drained: b (priority 5) takes it");
    assert_eq!(rig.fake.moto.calls()["AssignPrivateIpAddresses"], 1, "one seize");
    let polls =
        || fake.counters()["requests"]["GET /latest/meta-data/spot/instance-action"].as_u64().unwrap_or(0);
    let before = polls();
    wait_until("five more polls", || async { polls() >= before + 5 }).await;
    let scrape = metrics.encode(None);
    for line in [
        "tenure_maintenance_notices_total{cloud=\"aws\",kind=\"spot-interruption\"} 1",
        "tenure_maintenance_notice_drains_total{cloud=\"aws\"} 1",
    ] {
        assert!(scrape.contains(line), "`{line}` once, however often polled:\n{scrape}");
    }
    assert!(!scrape.contains("tenure_maintenance_notice_acknowledgements_total{"), "AWS takes none");
    assert_eq!(fake.counters()["tokenPuts"], 1, "one IMDSv2 session");
    stop.cancel();
    tokio::time::timeout(WAIT_MAX, watcher).await.expect("the watcher stops").expect("joins");
    rig.stop().await;
}
