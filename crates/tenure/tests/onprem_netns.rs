//! The on-prem executor on a real L2 segment (issue 10), in the lab of `onprem_lab`: two
//! routers and a client on one bridge, each in its own network namespace.
//!
//! The executor runs in the test process, on a thread moved into the router's namespace
//! (`setns`), with a runtime of its own: netlink and raw sockets opened there belong to that
//! namespace, as they would in an agent started inside it.

#![cfg(all(target_os = "linux", feature = "onprem"))]

mod onprem_lab;
mod process;

use std::net::IpAddr;
use std::time::Duration;

use tenure::exec::onprem::{OnpremExecutor, proxy_entries};
use tenure::exec::{ExecutionOutcome, execute_within};
use tenure_core::model::{CaptureDomain, CaptureEpoch, OwnershipEpoch, StampedAction, Verb};

use onprem_lab::{Capture, Lab};

/// Runs `verb` for the address on router `ns`'s executor, in that namespace.
fn call(lab: &Lab, ns: &str, verb: Verb) -> ExecutionOutcome {
    let action = action(lab.address(), verb, ns);
    lab.inside(ns, move || async move {
        let executor = OnpremExecutor::new("lan", 3, Duration::from_millis(50));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        execute_within(&executor, &action, deadline).await
    })
}

/// The proxy entries on router `ns`'s `lan`, read in that namespace.
fn entries(lab: &Lab, ns: &str) -> Vec<IpAddr> {
    lab.inside(ns, || async { proxy_entries("lan").await.expect("listed") })
}

fn action(address: IpAddr, verb: Verb, holder: &str) -> StampedAction {
    StampedAction::new(
        "edge",
        address,
        verb,
        holder,
        "lan",
        "lan",
        CaptureDomain::new("lan", "g1"),
        CaptureEpoch::from_stored(1),
        OwnershipEpoch::from_stored(1),
    )
}

fn executed(outcome: ExecutionOutcome) -> String {
    match outcome {
        ExecutionOutcome::Executed { detail } => detail,
        other => panic!("not executed: {other:?}"),
    }
}

/// The whole hand-over on one family: only the holder answers; the new holder's announcements
/// reach the client's wire, move its neighbour entry, and its pings follow.
fn hand_over(lab: &Lab) {
    let address = lab.address();
    let r2 = lab.mac("r2");
    assert!(!lab.ping(), "nobody answers for {address} before an acquire");

    // r1 acquires: its entry, then its announcements.
    let added = executed(call(lab, "r1", Verb::ProxyArpAdd));
    assert!(added.contains("proxy entry"), "{added}");
    assert_eq!(entries(lab, "r1"), vec![address], "inventory shows the entry");
    assert!(entries(lab, "r2").is_empty());
    lab.answered_by("r1");

    // r1 releases (idempotent), r2 acquires and announces: the client's entry moves at once.
    executed(call(lab, "r1", Verb::ProxyArpDel));
    let again = executed(call(lab, "r1", Verb::ProxyArpDel));
    assert!(again.contains("already removed"), "a missing entry is success: {again}");
    assert!(entries(lab, "r1").is_empty());
    executed(call(lab, "r2", Verb::ProxyArpAdd));
    executed(call(lab, "r2", Verb::ProxyArpAdd)); // an entry already there is success
    let capture = Capture::start(lab);
    let announced = executed(call(lab, "r2", Verb::Garp));
    assert!(announced.starts_with("3 "), "three announcements: {announced}");
    capture.until(lab.announcement("r2"), Duration::from_secs(5));
    assert_eq!(lab.client_entry().as_deref(), Some(r2.as_str()), "the announcement moved the client's entry");
    assert!(lab.ping(), "the client reaches {address} through r2");
}

#[test]
fn ipv4_proxy_arp_and_gratuitous_arp_move_the_address_between_routers() {
    let lab = Lab::new("a4", false);
    hand_over(&lab);
}

#[test]
fn ipv6_proxy_ndp_and_unsolicited_na_move_the_address_between_routers() {
    let lab = Lab::new("a6", true);
    hand_over(&lab);
}
