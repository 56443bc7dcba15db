//! `tenure agent` on a real L2 segment under keepalived's authority (issue 10): two routers and
//! a client in the `onprem_lab`, each router running keepalived (VRRPv3, a placeholder address
//! only) and a `tenure agent` (provider `onprem`, `authority: vrrp`), the agents sharing one log
//! on a real 3-member etcd in the switch namespace. keepalived elects; tenure adds the fenced
//! proxy entry and announces it.
//!
//! Nothing here skips: without root, iproute2, keepalived, tcpdump, ping or etcd the test fails,
//! naming what is missing (scripts/install-deps installs them).

#![cfg(all(target_os = "linux", feature = "onprem", feature = "etcd"))]

mod onprem_lab;
mod process;

use std::time::Duration;

use onprem_lab::routers::{BOUND, Mode, Routers};
use onprem_lab::{Capture, Keepalived};
use process::{stays_for, wait_for_within};

/// The whole story on one address family.
fn under_keepalived(tag: &str, v6: bool, base_port: u16) {
    // A heartbeatTTL far above an agent's restart, so that restarting one is no failover.
    let mut routers = Routers::new(tag, v6, base_port, Mode::Vrrp { advert_int: "0.1" }, "1500ms");
    let address = routers.lab.address();

    // r1 first: its agent waits for keepalived (not master: no entry), then keepalived elects it.
    routers.start_agent(1);
    wait_for_within(BOUND, "r1's agent took keepalived for absent", || {
        routers.agent(1).log().contains("keepalived is not running")
    });
    stays_for(Duration::from_millis(500), "no entry before keepalived reports MASTER", || {
        routers.lab.proxies("r1").is_empty()
    });
    routers.start_keepalived(1);
    routers.wait_held_by(1, "r1 (keepalived master) holds the address");
    routers.start_keepalived(2);
    routers.start_agent(2);
    wait_for_within(BOUND, "both agents see r1 as the owner", || {
        routers.owner(1).as_deref() == Some("r1") && routers.owner(2).as_deref() == Some("r1")
    });
    // r2 is a live, healthy backup: it adds no entry.
    wait_for_within(BOUND, "r2's agent heard BACKUP", || routers.agent(2).log().contains("state=Backup"));
    stays_for(Duration::from_millis(500), "the BACKUP router adds no entry", || {
        routers.lab.proxies("r2").is_empty()
    });
    routers.lab.answered_by("r1");

    // r1's agent restarts beside its running keepalived (an upgrade): keepalived said nothing
    // new, so the master stays master — no hand-over, no new epoch, the entry never removed.
    let before = routers.epochs(2);
    let stopped = routers.agents[0].take().expect("running").terminate();
    assert!(stopped.success(), "a clean stop: {stopped:?}");
    assert_eq!(routers.lab.proxies("r1"), vec![address], "a stopped agent leaves the entry");
    routers.start_agent(1);
    wait_for_within(BOUND, "the restarted r1 agent follows the log", || {
        routers.owner(1).as_deref() == Some("r1")
    });
    wait_for_within(BOUND, "the restarted agent kept the recorded state", || {
        routers.agent(1).log().contains("the state the log recorded for this host stands")
    });
    stays_for(Duration::from_millis(1000), "no hand-over while r1's agent restarted", || {
        routers.epochs(2) == before
            && routers.lab.proxies("r1") == vec![address]
            && routers.lab.proxies("r2").is_empty()
    });

    // keepalived on the holder reloads (SIGHUP): it closes its FIFO and opens it again, and a
    // MASTER says nothing after a reload. Still master: no hand-over, the entry stays.
    let before = routers.epochs(2);
    let reloads = routers.keepalived_log(1).matches("Reload complete").count();
    routers.keepalived[0].as_ref().expect("running").reload();
    wait_for_within(BOUND, "r1's keepalived reloaded", || {
        routers.keepalived_log(1).matches("Reload complete").count() > reloads
    });
    stays_for(Duration::from_millis(2000), "a keepalived reload is no hand-over", || {
        routers.epochs(2) == before && routers.lab.proxies("r1") == vec![address]
    });

    // An entry added by hand on the backup: r2's inventory (scoped to its own NIC) shows it, and
    // r2's agent removes it; r1's holding is not questioned by r2's read (no new epoch).
    let before = routers.epochs(1);
    let family = if routers.lab.v6 { "-6" } else { "-4" };
    routers.lab.exec("r2", &["ip", family, "neigh", "add", "proxy", &address.to_string(), "dev", "lan"]);
    assert_eq!(routers.lab.proxies("r2"), vec![address]);
    routers.wait_held_by(1, "r2's agent removes the hand-added entry it saw in its inventory");
    assert_eq!(routers.epochs(1), before, "another router's read never re-captures r1's address");
    assert!(
        routers.agent(2).log().contains("proxy-arp-del/r2"),
        "r2's agent removed it (a planned release): {}",
        routers.agent(2).log()
    );

    // Kill the holder, keepalived and agent: r2's keepalived takes over, its agent adds the
    // entry and announces; the client's entry moves and its pings follow.
    let capture = Capture::start(&routers.lab);
    routers.kill(1);
    capture.until(routers.lab.announcement("r2"), BOUND);
    let r2_mac = routers.lab.mac("r2");
    assert_eq!(
        routers.lab.client_entry().as_deref(),
        Some(r2_mac.as_str()),
        "the announcement moved the client's entry"
    );
    assert!(routers.lab.ping(), "the client reaches {address} through r2");
    drop(capture);

    // r1 comes back as BACKUP (nopreempt): its agent removes the entry its killed run left behind.
    routers.start_keepalived(1);
    routers.start_agent(1);
    routers.wait_held_by(2, "the returning BACKUP r1 removes its left-over entry; r2 holds");
    routers.lab.answered_by("r2");

    // keepalived on r2 stops (its last line says STOP, then the FIFO closes: not master either
    // way): r1's keepalived takes over, r2's agent, alive, removes its entry.
    routers.keepalived[1].take().expect("running").stop();
    routers.wait_held_by(1, "r2's keepalived gone: r2 removes its entry, r1 (master) holds");

    // A zombie: r1's agent paused while it holds; its keepalived dies, r2's takes over, and r2
    // captures once r1's heartbeats are stale. Resumed, r1 never adds an entry again: it removes
    // its own and stays without.
    let backups = routers.keepalived_log(2).matches("Entering BACKUP STATE").count();
    routers.start_keepalived(2);
    wait_for_within(BOUND, "r2's keepalived is a backup again", || {
        routers.keepalived_log(2).matches("Entering BACKUP STATE").count() > backups
    });
    let paused = routers.agent(1).child.id().to_string();
    process::run(&["kill", "-STOP", &paused]);
    routers.keepalived[0].take().expect("running").kill();
    wait_for_within(BOUND, "r2 captures while r1 is paused", || routers.lab.proxies("r2") == vec![address]);
    assert_eq!(routers.lab.proxies("r1"), vec![address], "the paused r1's entry is still there");
    process::run(&["kill", "-CONT", &paused]);
    routers.wait_held_by(2, "the resumed zombie removes its entry");
    stays_for(Duration::from_secs(2), "the resumed zombie never adds an entry again", || {
        routers.lab.proxies("r1").is_empty()
    });
    routers.lab.answered_by("r2");

    // keepalived on the holder goes to FAULT (a tracked file says so; keepalived keeps running):
    // the other router's keepalived takes over, and the FAULT router's agent removes its entry.
    let backups = routers.keepalived_log(1).matches("Entering BACKUP STATE").count();
    routers.start_keepalived(1);
    wait_for_within(BOUND, "r1's keepalived is a backup again", || {
        routers.keepalived_log(1).matches("Entering BACKUP STATE").count() > backups
    });
    let read_fault = "keepalived reported: this host is not VRRP master; capturing nothing state=Fault";
    let faults_read = routers.agent(2).log().matches(read_fault).count();
    std::fs::write(Keepalived::fault_file(routers.dir.path(), "r2"), "1\n").expect("fault r2");
    routers.wait_held_by(1, "r2's keepalived in FAULT: r2 removes its entry, r1 (master) holds");
    assert!(routers.keepalived_log(2).contains("Entering FAULT STATE"), "keepalived itself said FAULT");
    assert!(
        routers.agent(2).log().matches(read_fault).count() > faults_read,
        "r2's agent read keepalived's FAULT"
    );
    routers.lab.answered_by("r1");
}

#[test]
fn ipv4_under_keepalived_only_the_vrrp_master_answers_and_a_kill_moves_the_address() {
    under_keepalived("k4", false, 23_400);
}

#[test]
fn ipv6_under_keepalived_only_the_vrrp_master_answers_and_a_kill_moves_the_address() {
    under_keepalived("k6", true, 23_430);
}
