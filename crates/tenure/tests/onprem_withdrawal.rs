//! The local withdrawal on a real L2 segment (issue 21 item 1, SPEC 7 and 13): in the
//! `onprem_lab` (two routers with keepalived and `tenure agent` on a 3-member etcd, a client),
//! with the pool's DEFAULT `deprovisionHoldDuration` (5 s: the line is left out), a router that
//! keepalived no longer calls MASTER removes its proxy entry itself, at once — even cut off from
//! etcd — and a client asking for the address every 100 ms never hears two routers answer.
//!
//! Nothing here skips: without root, iproute2, keepalived, tcpdump or etcd the test fails,
//! naming what is missing (scripts/install-deps installs them).

#![cfg(all(target_os = "linux", feature = "onprem", feature = "etcd"))]

mod onprem_lab;
mod process;

use std::time::{Duration, Instant};

use onprem_lab::Keepalived;
use onprem_lab::probes::{Probe, Probes, summary};
use onprem_lab::routers::{BOUND, HEARTBEAT_INTERVAL, Mode, Routers};
use process::{stays_for, wait_for_within};

/// What the lab's 2-core machine may add to the agent's reaction (reading keepalived's FIFO
/// line, one netlink dump and delete) and to the test's own look (`ip neigh`, forked).
const SCHEDULING_MARGIN: Duration = Duration::from_millis(100);

/// Within how long of the demotion the demoted router's entry must be gone: one heartbeat
/// interval (the bound) plus the scheduling margin.
const WITHDRAWAL_BOUND: Duration = HEARTBEAT_INTERVAL.saturating_add(SCHEDULING_MARGIN);

/// r1 (keepalived MASTER) holds the address, r2 is a settled BACKUP; the pool has the default
/// hold.
fn r1_holds(tag: &str, base_port: u16) -> Routers {
    let mut routers =
        Routers::with_hold(tag, false, base_port, Mode::Vrrp { advert_int: "0.1" }, "1500ms", None);
    let pools = std::fs::read_to_string(routers.dir.path().join("pools.yaml")).expect("the pool file");
    assert!(!pools.contains("deprovisionHoldDuration"), "the default hold applies: {pools}");
    routers.start_keepalived(1);
    routers.start_agent(1);
    routers.wait_held_by(1, "r1 (keepalived master) holds the address");
    routers.start_keepalived(2);
    routers.start_agent(2);
    wait_for_within(BOUND, "both agents see r1 as the owner", || {
        routers.owner(1).as_deref() == Some("r1") && routers.owner(2).as_deref() == Some("r1")
    });
    wait_for_within(BOUND, "r2's agent heard BACKUP", || routers.agent(2).log().contains("state=Backup"));
    routers
}

/// Asserts that router `i`'s IPv4 proxy entry is gone within [`WITHDRAWAL_BOUND`] of `demoted`
/// (what keepalived was made to do, for the messages), looking without pause; prints the figure.
fn withdrawn_in_time(routers: &Routers, i: usize, demoted: Instant, how: &str) {
    let ns = format!("r{i}");
    let look = Duration::from_secs(6);
    let mut gone = None;
    while demoted.elapsed() < look {
        if routers.lab.exec(&ns, &["ip", "-4", "neigh", "show", "proxy", "dev", "lan"]).trim().is_empty() {
            gone = Some(demoted.elapsed());
            break;
        }
    }
    eprintln!("r{i}'s entry gone {gone:?} after {how} (bound {WITHDRAWAL_BOUND:?})");
    match gone {
        Some(after) => {
            assert!(
                after <= WITHDRAWAL_BOUND,
                "r{i}'s entry went {after:?} after {how}, not within {WITHDRAWAL_BOUND:?}"
            );
        }
        None => panic!("r{i}'s entry still there {look:?} after {how} (bound {WITHDRAWAL_BOUND:?})"),
    }
}

/// Asserts that no question got two answers, that `old` answered before the hand-over and `new`
/// alone at its end; prints what the probes saw.
fn one_answerer_throughout(routers: &Routers, probes: &[Probe], old: usize, new: usize) {
    let (old_mac, new_mac) = (routers.lab.mac(&format!("r{old}")), routers.lab.mac(&format!("r{new}")));
    let seen = summary(probes);
    eprintln!("probes every 100 ms during the hand-over: {seen:?}");
    let doubled: Vec<&Probe> = probes.iter().filter(|p| p.answered_by.len() > 1).collect();
    assert!(
        doubled.is_empty(),
        "two routers answered {} of {} questions: {doubled:#?}",
        doubled.len(),
        seen.asked
    );
    assert!(
        probes.iter().any(|p| p.answered_by.contains(&old_mac)),
        "r{old} answered before the hand-over: {probes:#?}"
    );
    let last = probes.last().expect("questions asked");
    assert_eq!(
        last.answered_by.iter().collect::<Vec<_>>(),
        vec![&new_mac],
        "r{new} alone answers at the end"
    );
}

#[test]
fn a_holder_cut_from_etcd_and_demoted_by_keepalived_withdraws_within_a_heartbeat_interval() {
    let routers = r1_holds("w1", 23_600);
    let probes = Probes::start(&routers.lab);

    // r1 loses etcd: keepalived still calls it MASTER, so it keeps answering.
    routers.cut_from_etcd(1, true);
    stays_for(Duration::from_millis(300), "r1, cut from etcd but VRRP master, keeps its entry", || {
        routers.lab.proxies("r1") == vec![routers.lab.address()]
    });

    // keepalived demotes r1 (FAULT); its agent cannot reach the log, and withdraws anyway.
    let demoted = Instant::now();
    std::fs::write(Keepalived::fault_file(routers.dir.path(), "r1"), "1\n").expect("fault r1");
    withdrawn_in_time(&routers, 1, demoted, "its keepalived was put in FAULT");
    // The agent logs the withdrawal after the kernel dropped the entry: wait for the line.
    wait_for_within(BOUND, "r1's agent logs that it withdrew locally", || {
        routers.agent(1).log().contains("its proxy entries withdrawn locally")
    });

    // r2's keepalived took over; r2 captures once r1's heartbeats are stale, and alone answers.
    routers.wait_held_by(2, "r2 (keepalived master) holds; r1 stays without");
    stays_for(Duration::from_millis(500), "r2 alone holds", || {
        routers.lab.proxies("r2") == vec![routers.lab.address()] && routers.lab.proxies("r1").is_empty()
    });
    one_answerer_throughout(&routers, &probes.finish(), 1, 2);

    // Back on etcd, r1 reports its release; both agents agree r2 owns the address.
    routers.cut_from_etcd(1, false);
    wait_for_within(BOUND, "both agents see r2 as the owner", || {
        routers.owner(1).as_deref() == Some("r2") && routers.owner(2).as_deref() == Some("r2")
    });
    assert!(routers.lab.proxies("r1").is_empty(), "r1 never adds again while in FAULT");
}

#[test]
fn a_planned_keepalived_switch_over_with_the_default_hold_never_has_two_answerers() {
    let mut routers = r1_holds("w2", 23_630);
    let probes = Probes::start(&routers.lab);
    stays_for(Duration::from_millis(300), "r1 answers before the switch-over", || {
        routers.lab.proxies("r1") == vec![routers.lab.address()]
    });

    // The operator stops r1's keepalived cleanly (a priority-0 advert: r2 takes over at once).
    let keepalived = routers.keepalived[0].take().expect("running");
    let stopping = Instant::now();
    keepalived.request_stop();
    withdrawn_in_time(&routers, 1, stopping, "its keepalived was sent SIGTERM");
    keepalived.stop();
    routers.wait_held_by(2, "r2 (keepalived master) holds; r1 (keepalived stopped) removed its entry");
    stays_for(Duration::from_millis(500), "r2 alone holds", || {
        routers.lab.proxies("r2") == vec![routers.lab.address()] && routers.lab.proxies("r1").is_empty()
    });
    one_answerer_throughout(&routers, &probes.finish(), 1, 2);
}
