use super::*;
use crate::log::{Event, EventKind};
use crate::model::{Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec, VrrpState};
use crate::state::MasterReport;

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

/// The registry: routers `a`…`e` on `lan` in `g1`, `x` on `lan` in `g2`, hosts `m`, `n` on
/// `cloud` (`sim-cloud`) in `g1`.
fn registry() -> Federation {
    let mut nodes: Vec<NodeSpec> = ["a", "b", "c", "d", "e"].map(node).into();
    nodes.push(NodeSpec { placement_group: "g2".into(), ..node("x") });
    nodes.push(NodeSpec { provider: "cloud".into(), ..node("m") });
    nodes.push(NodeSpec { provider: "cloud".into(), ..node("n") });
    let providers = [
        ProviderSpec { name: "lan".into(), kind: ProviderKind::SimOnprem },
        ProviderSpec { name: "cloud".into(), kind: ProviderKind::SimCloud },
    ];
    Federation::new(&nodes, &providers)
}

/// Routers `a`, `b` (pool `p`, VRRP), `c`, `d` (pool `q`, VRRP: another instance) and `e`
/// (with `a` in pool `n`, no authority); all heartbeat at 0 (TTL 3 s, promotionHold 0).
fn lan() -> Federation {
    let mut fed = registry();
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

fn with_pool(fed: &mut Federation, spec: PoolSpec) {
    apply(fed, fed.stream_time_ms(), EventKind::PoolApplied { spec: Box::new(spec) });
}

#[test]
fn the_newest_master_report_takes_the_address_while_the_old_master_is_still_alive() {
    let mut fed = lan();
    report(&mut fed, 10, "a", VrrpState::Master);
    assert_eq!(owner(&fed, "p").as_deref(), Some("a"));
    // `a` was killed: no BACKUP from it, its heartbeat (at 0) alive until 3,000. keepalived
    // elected `b`, which says so at 400.
    report(&mut fed, 400, "b", VrrpState::Master);
    assert_eq!(owner(&fed, "p").as_deref(), Some("b"), "at once, not at a's heartbeat expiry");
    assert_eq!(
        fed.nodes()[fed.node_id("a").expect("a") as usize].vrrp,
        Some(VrrpState::Master),
        "a's own report stays"
    );
    // `a` reports MASTER again (its keepalived took mastership back): the newest again.
    report(&mut fed, 500, "a", VrrpState::Master);
    assert_eq!(owner(&fed, "p").as_deref(), Some("a"));
}

#[test]
fn when_the_newer_master_steps_down_or_dies_the_older_one_counts_again_without_a_report() {
    let mut fed = lan();
    report(&mut fed, 10, "a", VrrpState::Master);
    // A split healed in a's favour: b was MASTER briefly, a's keepalived never left MASTER.
    report(&mut fed, 20, "b", VrrpState::Master);
    assert_eq!(owner(&fed, "p").as_deref(), Some("b"));
    report(&mut fed, 30, "b", VrrpState::Backup);
    assert_eq!(owner(&fed, "p").as_deref(), Some("a"), "no report from a needed");
    // b says MASTER again and dies saying nothing more: a counts again once b's heartbeat (at
    // 0) expired, without a report of its own.
    report(&mut fed, 40, "b", VrrpState::Master);
    assert_eq!(owner(&fed, "p").as_deref(), Some("b"));
    apply(&mut fed, 2_999, EventKind::Heartbeat { node: "a".into() });
    assert_eq!(owner(&fed, "p").as_deref(), Some("b"), "b's heartbeat covers 2,999");
    apply(&mut fed, 3_000, EventKind::Heartbeat { node: "a".into() });
    assert_eq!(owner(&fed, "p").as_deref(), Some("a"), "b expired at 3,000");
}

#[test]
fn each_pool_counts_its_own_members_reports() {
    let mut fed = lan();
    // `a` is also in pool `r` with `c`; `c` is in `q` with `d`; `e` shares only `n` (no authority).
    with_pool(&mut fed, pool("r", "10.0.0.40", &["a", "c"], Authority::Vrrp));
    report(&mut fed, 10, "a", VrrpState::Master);
    report(&mut fed, 20, "c", VrrpState::Master);
    assert_eq!(owner(&fed, "p").as_deref(), Some("a"), "c is not in p: a still counts there");
    assert_eq!(owner(&fed, "r").as_deref(), Some("c"), "in r, c's report is the newer");
    assert_eq!(owner(&fed, "q").as_deref(), Some("c"));
    report(&mut fed, 30, "e", VrrpState::Master);
    assert_eq!(owner(&fed, "p").as_deref(), Some("a"), "e shares no pool under vrrp with a");
}

#[test]
fn a_newer_master_that_could_not_hold_does_not_count() {
    for exclude in
        [EventKind::Drain { node: "b".into() }, EventKind::Health { node: "b".into(), healthy: false }]
    {
        let mut fed = lan();
        report(&mut fed, 10, "a", VrrpState::Master);
        apply(&mut fed, 15, exclude.clone());
        report(&mut fed, 20, "b", VrrpState::Master);
        assert_eq!(owner(&fed, "p").as_deref(), Some("a"), "{exclude:?}");
    }
    // A member in another capture domain (`x`, in g2, listed by the g1 pool `p`).
    let mut fed = lan();
    with_pool(&mut fed, pool("p", "10.0.0.10", &["a", "b", "x"], Authority::Vrrp));
    apply(&mut fed, 5, EventKind::Heartbeat { node: "x".into() });
    report(&mut fed, 10, "a", VrrpState::Master);
    report(&mut fed, 20, "x", VrrpState::Master);
    assert_eq!(owner(&fed, "p").as_deref(), Some("a"), "x could never hold p's address");
}

#[test]
fn a_master_report_from_before_its_router_expired_sets_no_floor() {
    let mut fed = lan();
    report(&mut fed, 10, "a", VrrpState::Master);
    report(&mut fed, 20, "b", VrrpState::Master);
    assert_eq!(owner(&fed, "p").as_deref(), Some("b"));
    // b is cut off from the log: its heartbeat (at 0) expires at 3,000 and a counts again.
    apply(&mut fed, 3_000, EventKind::Heartbeat { node: "a".into() });
    assert_eq!(owner(&fed, "p").as_deref(), Some("a"));
    // b's first heartbeat back lands before its BACKUP (its keepalived may have stepped down
    // meanwhile): its old MASTER report does not take the address back.
    apply(&mut fed, 3_500, EventKind::Heartbeat { node: "b".into() });
    assert_eq!(owner(&fed, "p").as_deref(), Some("a"), "b's report predates its revival");
    // A MASTER report after the revival counts as any other.
    report(&mut fed, 3_600, "b", VrrpState::Master);
    assert_eq!(owner(&fed, "p").as_deref(), Some("b"));
    // A heartbeat of a live node is no revival.
    apply(&mut fed, 3_700, EventKind::Heartbeat { node: "b".into() });
    assert_eq!(owner(&fed, "p").as_deref(), Some("b"));
}

#[test]
fn an_undrained_or_healthy_again_master_does_not_take_the_address_back() {
    for (out, back) in [
        (EventKind::Drain { node: "b".into() }, EventKind::Undrain { node: "b".into() }),
        (
            EventKind::Health { node: "b".into(), healthy: false },
            EventKind::Health { node: "b".into(), healthy: true },
        ),
    ] {
        let mut fed = lan();
        report(&mut fed, 10, "a", VrrpState::Master);
        report(&mut fed, 20, "b", VrrpState::Master);
        assert_eq!(owner(&fed, "p").as_deref(), Some("b"));
        apply(&mut fed, 30, out.clone());
        assert_eq!(owner(&fed, "p").as_deref(), Some("a"), "{out:?}");
        apply(&mut fed, 40, back.clone());
        assert_eq!(owner(&fed, "p").as_deref(), Some("a"), "{back:?}: only as others fail (preempt false)");
        // A second healthy verdict or undrain of a node already back is no return.
        apply(&mut fed, 50, back.clone());
        report(&mut fed, 60, "b", VrrpState::Master);
        assert_eq!(owner(&fed, "p").as_deref(), Some("b"), "a MASTER report after the return counts");
    }
}

#[test]
fn off_prem_vrrp_pools_keep_spec_3s_rule() {
    let mut fed = lan();
    let mut spec = pool("c1", "10.0.1.10", &["m", "n"], Authority::Vrrp);
    spec.provider = "cloud".into();
    with_pool(&mut fed, spec);
    apply(&mut fed, 5, EventKind::Heartbeat { node: "m".into() });
    apply(&mut fed, 5, EventKind::Heartbeat { node: "n".into() });
    report(&mut fed, 10, "m", VrrpState::Master);
    report(&mut fed, 20, "n", VrrpState::Master);
    assert_eq!(owner(&fed, "c1").as_deref(), Some("m"), "both count; the owner keeps the address");
}

#[test]
fn a_newer_master_counts_over_the_older_only_after_promotion_hold() {
    let mut fed = lan();
    let mut held = pool("p", "10.0.0.10", &["a", "b"], Authority::Vrrp);
    held.promotion_hold_ms = 500;
    with_pool(&mut fed, held);
    report(&mut fed, 10, "a", VrrpState::Master);
    assert_eq!(
        owner(&fed, "p").as_deref(),
        Some("a"),
        "the only MASTER counts at once: the hold is for a newer one"
    );
    report(&mut fed, 1_000, "b", VrrpState::Master);
    apply(&mut fed, 1_499, EventKind::Heartbeat { node: "a".into() });
    assert_eq!(owner(&fed, "p").as_deref(), Some("a"), "b's report is 499 ms old: both count, a keeps");
    apply(&mut fed, 1_500, EventKind::Heartbeat { node: "a".into() });
    assert_eq!(owner(&fed, "p").as_deref(), Some("b"), "500 ms: b's is the newest that counts");
}

#[test]
fn a_snapshot_keeps_the_reports_order_and_an_older_format_reads_as_ties() {
    let mut fed = lan();
    report(&mut fed, 10, "a", VrrpState::Master);
    // A restored federation applies the rule to what follows (the pool's flag is rebuilt).
    let mut restored = lan_registry().restore(&fed.snapshot()).expect("restores");
    report(&mut restored, 20, "b", VrrpState::Master);
    assert_eq!(owner(&restored, "p").as_deref(), Some("b"));
    report(&mut fed, 20, "b", VrrpState::Master);
    let bytes = fed.snapshot();
    let restored = lan_registry().restore(&bytes).expect("restores");
    assert_eq!(owner(&restored, "p").as_deref(), Some("b"));
    assert_eq!(restored.snapshot(), bytes);
    // Format 2 had no order: both MASTERs tie and count, the owner stays (sticky) as written.
    let text = String::from_utf8(bytes).expect("utf-8");
    let older = strip_master_orders(&strip_specs(&text.replacen("{\"v\":4", "{\"v\":2", 1)));
    let restored = lan_registry().restore(older.as_bytes()).expect("restores");
    let masters: Vec<Option<MasterReport>> = restored
        .nodes()
        .iter()
        .filter(|n| n.vrrp == Some(VrrpState::Master))
        .map(|n| n.vrrp_master)
        .collect();
    assert_eq!(masters, [Some(MasterReport::default()); 2], "a and b: both MASTER, tied at order 0");
    assert_eq!(owner(&restored, "p").as_deref(), Some("b"));
    // Refused: a MASTER order on a node whose state is not MASTER; a format-3 MASTER without
    // one; one in a format-2 snapshot; one past the snapshot's own order.
    for (bad, why) in [
        (
            text.replacen("\"vrrp\":\"master\"", "\"vrrp\":\"backup\"", 1),
            "`vrrpMaster` without a MASTER state",
        ),
        (strip_master_orders(&text), "a MASTER state without `vrrpMaster`"),
        (
            strip_specs(&text.replacen("{\"v\":4", "{\"v\":2", 1)),
            "`vrrpMaster` in a snapshot of format 1 or 2",
        ),
        (text.replacen("{\"v\":4", "{\"v\":3", 1), "`providers` in a snapshot of format 1 to 3"),
        (
            text.replacen("\"vrrpMaster\":{\"seq\":", "\"vrrpMaster\":{\"seq\":9999", 1),
            "outside this snapshot's order",
        ),
    ] {
        let e = lan_registry().restore(bad.as_bytes()).expect_err(why);
        assert!(e.to_string().contains(why), "{e}");
    }
    // A federation restored from format 2 writes its ties back in format 3, and reads them.
    let again = lan_registry().restore(older.as_bytes()).expect("restores").snapshot();
    assert!(lan_registry().restore(&again).is_ok());
}

/// `text` without its `"vrrpMaster":{…}` fields (what format 2 wrote).
/// A format-4 snapshot without its nodes' specs and its providers (older formats had none).
fn strip_specs(text: &str) -> String {
    let mut out = text.to_owned();
    if let Some(start) = out.find(",\"providers\":[") {
        let end = start + out[start..].find(']').expect("closed") + 1;
        out.replace_range(start..end, "");
    }
    while let Some(start) = out.find(",\"spec\":{\"provider\"") {
        let end = start + out[start..].find('}').expect("closed") + 1;
        out.replace_range(start..end, "");
    }
    out
}

fn strip_master_orders(text: &str) -> String {
    let mut out = text.to_owned();
    while let Some(start) = out.find(",\"vrrpMaster\":{") {
        let end = start + out[start..].find('}').expect("closed") + 1;
        out.replace_range(start..end, "");
    }
    out
}

fn lan_registry() -> Federation {
    registry()
}
