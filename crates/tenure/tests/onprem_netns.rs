//! The on-prem executor on a real L2 segment (issue 10), in the lab of `onprem_lab`: two
//! routers and a client on one bridge, each in its own network namespace.
//!
//! The executor runs in the test process, on a thread moved into the router's namespace
//! (`setns`), with a runtime of its own: netlink and raw sockets opened there belong to that
//! namespace, as they would in an agent started inside it. The `garpRefresh` tests run a
//! `tenure agent` process inside the router's namespace (embedded store, one node).

#![cfg(all(target_os = "linux", feature = "onprem"))]

mod onprem_lab;
mod process;

use std::net::IpAddr;
use std::time::Duration;

use process::{Agent, TOKEN, TempDir, wait_for_within};
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

/// `garpRefresh` on a real segment: an agent in `r1` holds the address and announces it every
/// second (`garpCount: 1`); the client's wire shows the acquire's announcement and then one per
/// refresh, at least the interval apart; and a client neighbour entry moved to another MAC
/// behind tenure's back (a switch or host that learned the other router during a split) is
/// moved back to the holder's by the next refresh, with no new acquire.
fn refresh(lab: &Lab, tag: &str) {
    const REFRESH: Duration = Duration::from_secs(1);
    let address = lab.address();
    let (r1, r2) = (lab.mac("r1"), lab.mac("r2"));
    let dir = TempDir::new(tag);
    dir.write("token", TOKEN);
    dir.write(
        "pools.yaml",
        &format!(
            "apiVersion: tenure.dev/v1alpha1\nkind: MobilityPool\nmetadata: {{name: edge}}\nspec:\n  \
             addresses: [{address}]\n  provider: lan\n  placementGroup: g1\n  members: [r1]\n  \
             heartbeatTTL: 3s\n  promotionHold: 0s\n  deprovisionHoldDuration: 0s\n"
        ),
    );
    let config = dir.write(
        "r1.yaml",
        "node: {name: r1, provider: lan, placementGroup: g1, nic: lan-r1}\n\
         store: {kind: embedded, path: ./data-r1}\n\
         providers:\n  - {name: lan, kind: onprem, interface: lan, garpCount: 1, garpInterval: 50ms, garpRefresh: 1s}\n\
         pools: [pools.yaml]\nlisten: 127.0.0.1:9464\nheartbeatInterval: 100ms\napiTokenFile: token\n",
    );
    let capture = Capture::start(lab);
    let ns = lab.ns("r1");
    // Its API listens inside r1's namespace: readiness is the entry itself.
    let agent = Agent::spawn_wrapped(
        &dir,
        &config,
        "127.0.0.1:9464".parse().expect("literal"),
        &["ip", "netns", "exec", &ns],
        &[],
    );
    let announced = lab.announcement("r1");
    // tcpdump -tt: each line starts with its time in seconds.
    let at =
        |line: &str| -> f64 { line.split_whitespace().next().and_then(|t| t.parse().ok()).expect("a time") };
    let mut times = Vec::new();
    for _ in 0..4 {
        let line = capture.until(&announced, Duration::from_secs(20));
        times.push(at(&line));
    }
    assert_eq!(lab.proxies("r1"), vec![address], "r1 holds the address; log:\n{}", agent.log());
    // The acquire's, then one per refresh (due one interval after the agent started, not after
    // the acquire): never two in one interval. The margin is for the time from the timer to the
    // call, which a loaded machine stretches for one refresh and not the next.
    for pair in times[1..].windows(2) {
        assert!(pair[1] - pair[0] >= 0.5, "announcements {times:?}: refreshes closer than garpRefresh");
    }
    // Another router's MAC in the client's table: the next refresh takes it back.
    let family = if lab.v6 { "-6" } else { "-4" };
    let text = address.to_string();
    lab.exec("cl", &["ip", family, "neigh", "replace", &text, "lladdr", &r2, "dev", "lan", "nud", "stale"]);
    assert_eq!(lab.client_entry().as_deref(), Some(r2.as_str()));
    wait_for_within(REFRESH * 5, "the client's entry back on r1's MAC", || {
        lab.client_entry().as_deref() == Some(r1.as_str())
    });
    assert!(lab.ping(), "the client reaches {address} through r1");
    let log = agent.log();
    assert_eq!(log.matches("executed").count(), 2, "the add and its garp, nothing journaled since:\n{log}");
}

#[test]
fn ipv4_garp_refresh_repeats_the_holders_gratuitous_arp() {
    let lab = Lab::new("g4", false);
    refresh(&lab, "garp4");
}

#[test]
fn ipv6_garp_refresh_repeats_the_holders_unsolicited_na() {
    let lab = Lab::new("g6", true);
    refresh(&lab, "garp6");
}
