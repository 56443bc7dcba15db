use super::*;
use crate::log::{Event, EventKind};
use crate::model::{Approval, NodeSpec, PoolSpec, ProviderKind, ProviderSpec};

fn node(name: &str) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        provider: "lan".into(),
        placement_group: "g1".into(),
        priority: 0,
        nic: format!("eth-{name}"),
        capacity: None,
    }
}

fn pool(name: &str, address: &str, members: &[&str], authority: Authority) -> PoolSpec {
    PoolSpec {
        name: name.into(),
        addresses: vec![address.parse().expect("address")],
        provider: "lan".into(),
        placement_group: "g1".into(),
        members: members.iter().map(|m| (*m).to_owned()).collect(),
        authority,
        approval: Approval::Auto,
        deprovision_hold_ms: 0,
        heartbeat_ttl_ms: 3_000,
        promotion_hold_ms: 0,
        epoch_locking: true,
        prefer_nodes: vec![],
        preempt: false,
        auto_failover: true,
    }
}

/// Routers `a`, `b` (pool `p`, VRRP), `c`, `d` (pool `q`, VRRP: another instance) and `e`
/// (with `a` in pool `n`, no authority); all heartbeat at 0 (TTL 3 s).
fn lan() -> Federation {
    let nodes = ["a", "b", "c", "d", "e"].map(node);
    let providers = [ProviderSpec { name: "lan".into(), kind: ProviderKind::SimOnprem }];
    let mut fed = Federation::new(&nodes, &providers);
    for spec in [
        pool("p", "10.0.0.10", &["a", "b"], Authority::Vrrp),
        pool("q", "10.0.0.20", &["c", "d"], Authority::Vrrp),
        pool("n", "10.0.0.30", &["a", "e"], Authority::None),
    ] {
        apply(&mut fed, 0, EventKind::PoolApplied { spec: Box::new(spec) });
    }
    for name in ["a", "b", "c", "d", "e"] {
        apply(&mut fed, 0, EventKind::Heartbeat { node: name.into() });
    }
    fed
}

fn apply(fed: &mut Federation, at_ms: u64, kind: EventKind) {
    fed.apply(&Event { at_ms, kind }).expect("accepted");
}

fn report(fed: &mut Federation, at_ms: u64, node: &str, state: VrrpState) {
    apply(fed, at_ms, EventKind::Vrrp { node: node.into(), state });
}

fn owner(fed: &Federation, pool: &str) -> Option<String> {
    let p = &fed.pools()[pool];
    let (_, address) = p.addresses.iter().next().expect("one address");
    address.owner.map(|id| fed.node_name(id).to_owned())
}

fn superseded(fed: &Federation, name: &str) -> bool {
    fed.nodes()[fed.node_id(name).expect("node")].vrrp_superseded
}

#[test]
fn a_newer_master_report_moves_the_address_while_the_old_master_is_still_alive() {
    let mut fed = lan();
    report(&mut fed, 10, "a", VrrpState::Master);
    assert_eq!(owner(&fed, "p").as_deref(), Some("a"));
    // `a` was killed: no BACKUP from it, its heartbeat (at 0) alive until 3,000. keepalived
    // elected `b`, which says so at 400.
    report(&mut fed, 400, "b", VrrpState::Master);
    assert_eq!(owner(&fed, "p").as_deref(), Some("b"), "at once, not at a's heartbeat expiry");
    assert!(superseded(&fed, "a"));
    assert_eq!(
        fed.nodes()[fed.node_id("a").expect("a")].vrrp,
        Some(VrrpState::Master),
        "a's own report stays"
    );
    // `a` reports MASTER again (its keepalived took mastership back): it supersedes `b`.
    report(&mut fed, 500, "a", VrrpState::Master);
    assert!(!superseded(&fed, "a"));
    assert!(superseded(&fed, "b"));
    assert_eq!(owner(&fed, "p").as_deref(), Some("a"));
}

#[test]
fn only_members_of_a_shared_pool_under_vrrp_are_superseded() {
    let mut fed = lan();
    report(&mut fed, 10, "a", VrrpState::Master);
    report(&mut fed, 20, "c", VrrpState::Master);
    assert!(!superseded(&fed, "a"), "c is another instance's router (pool q)");
    // `e` shares only a pool without authority with `a`.
    report(&mut fed, 30, "e", VrrpState::Master);
    assert!(!superseded(&fed, "a"));
    assert_eq!(owner(&fed, "p").as_deref(), Some("a"));
    assert_eq!(owner(&fed, "q").as_deref(), Some("c"));
    // A BACKUP supersedes no one; a BACKUP that was MASTER is not marked.
    report(&mut fed, 40, "d", VrrpState::Backup);
    report(&mut fed, 50, "b", VrrpState::Backup);
    assert!(!superseded(&fed, "c") && !superseded(&fed, "a"));
    report(&mut fed, 60, "d", VrrpState::Master);
    assert!(superseded(&fed, "c"));
    assert!(!superseded(&fed, "b"), "b said BACKUP: nothing to supersede");
}

#[test]
fn a_superseded_master_reasserts_only_when_no_other_member_is_master_and_alive() {
    let mut fed = lan();
    report(&mut fed, 10, "a", VrrpState::Master);
    assert!(!fed.vrrp_reassert_due("a"), "not superseded");
    report(&mut fed, 20, "b", VrrpState::Master);
    assert!(!fed.vrrp_reassert_due("b") && !fed.vrrp_reassert_due("a"), "b is master and alive");
    // A split healed in a's favour: b steps down, a's keepalived never left MASTER.
    report(&mut fed, 30, "b", VrrpState::Backup);
    assert!(fed.vrrp_reassert_due("a"));
    assert_eq!(owner(&fed, "p"), None, "no one until a says MASTER again");
    report(&mut fed, 40, "a", VrrpState::Master);
    assert!(!fed.vrrp_reassert_due("a"));
    assert_eq!(owner(&fed, "p").as_deref(), Some("a"));
    // b supersedes a, then dies saying nothing: a may reassert once b's heartbeat expired.
    report(&mut fed, 50, "b", VrrpState::Master);
    apply(&mut fed, 2_999, EventKind::Heartbeat { node: "a".into() });
    assert!(!fed.vrrp_reassert_due("a"), "b's heartbeat (at 0) covers 2,999");
    apply(&mut fed, 3_000, EventKind::Heartbeat { node: "a".into() });
    assert!(fed.vrrp_reassert_due("a"), "b expired at 3,000");
    assert!(!fed.vrrp_reassert_due("nobody"));
}

#[test]
fn a_snapshot_keeps_who_was_superseded() {
    let mut fed = lan();
    report(&mut fed, 10, "a", VrrpState::Master);
    let plain = fed.snapshot();
    assert!(
        !String::from_utf8_lossy(&plain).contains("vrrpSuperseded"),
        "written only when true: older agents read it"
    );
    report(&mut fed, 20, "b", VrrpState::Master);
    let restored = lan_registry().restore(&fed.snapshot()).expect("restores");
    assert!(superseded(&restored, "a"));
    assert_eq!(owner(&restored, "p").as_deref(), Some("b"));
    assert_eq!(restored.snapshot(), fed.snapshot());
}

fn lan_registry() -> Federation {
    let nodes = ["a", "b", "c", "d", "e"].map(node);
    let providers = [ProviderSpec { name: "lan".into(), kind: ProviderKind::SimOnprem }];
    Federation::new(&nodes, &providers)
}
