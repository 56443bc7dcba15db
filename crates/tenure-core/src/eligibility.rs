//! Eligibility and liveness (SPEC 3), relative to stream time only.

use crate::model::{Authority, CaptureDomain, PoolSpec, VrrpState};
use crate::state::{NodeState, PoolState};

/// True when the node's last heartbeat still covers stream time `now_ms`:
/// `lastHeartbeat + heartbeatTTL + promotionHold > now` (equality means expired).
/// A node that never sent a heartbeat is not alive.
#[must_use]
pub fn is_alive(node: &NodeState, pool: &PoolSpec, now_ms: u64) -> bool {
    node.last_heartbeat_ms.is_some_and(|heartbeat_ms| {
        heartbeat_ms.saturating_add(pool.heartbeat_ttl_ms).saturating_add(pool.promotion_hold_ms) > now_ms
    })
}

/// The pool-wide part of VRRP authority (issue 24; `docs/decisions.md`, "The newest MASTER report
/// counts"): the log order of the newest MASTER report, among the pool's members that could hold
/// (alive, not drained, healthy, in the pool's capture domain), that the log took at least
/// `promotionHold` ago and after the member's last revival (a heartbeat that found it expired:
/// its keepalived may have left MASTER while it could not write). A member whose own MASTER
/// report is older does not count as master in this pool: keepalived elected the newer one (a
/// killed router never reports BACKUP itself). `None` when the pool is not under `authority:
/// vrrp` on an on-prem provider ([`PoolState::newest_master_counts`]) or no such report exists.
/// Compute it once per pool and pass it to [`is_admissible`], [`is_eligible`] and [`may_keep`].
#[must_use]
pub fn vrrp_floor(nodes: &[NodeState], pool: &PoolState, now_ms: u64) -> Option<u64> {
    if !pool.newest_master_counts {
        return None;
    }
    pool.member_ids
        .iter()
        .map(|id| &nodes[*id as usize])
        .filter(|node| could_hold(node, &pool.capture_domain) && is_alive(node, &pool.spec, now_ms))
        .filter_map(|node| node.vrrp_master.filter(|report| report.seq > node.revived_seq))
        .filter(|report| report.taken_ms.saturating_add(pool.spec.promotion_hold_ms) <= now_ms)
        .map(|report| report.seq)
        .max()
}

/// Not drained, not unhealthy, in the pool's capture domain.
fn could_hold(node: &NodeState, pool_domain: &CaptureDomain) -> bool {
    !node.drained && node.healthy && node.capture_domain == *pool_domain
}

/// Everything of eligibility except liveness: not drained, not unhealthy, VRRP master when the
/// pool's authority is `vrrp` (no report means not master; a MASTER report older than the pool's
/// `vrrp_floor` does not count), and in the pool's capture domain.
#[must_use]
pub fn is_admissible(
    node: &NodeState,
    pool: &PoolSpec,
    pool_domain: &CaptureDomain,
    vrrp_floor: Option<u64>,
) -> bool {
    if pool.authority == Authority::Vrrp && !is_vrrp_master(node, vrrp_floor) {
        return false;
    }
    could_hold(node, pool_domain)
}

/// Whether the log counts `node` as VRRP master in a pool whose [`vrrp_floor`] is `floor`: its
/// latest report is MASTER and not older than the floor.
#[must_use]
pub fn is_vrrp_master(node: &NodeState, floor: Option<u64>) -> bool {
    debug_assert_eq!(node.vrrp_master.is_some(), node.vrrp == Some(VrrpState::Master));
    node.vrrp_master.is_some_and(|report| floor.is_none_or(|floor| report.seq >= floor))
}

/// Full eligibility at stream time `now_ms` (SPEC 3). Membership is checked by the caller.
#[must_use]
pub fn is_eligible(
    node: &NodeState,
    pool: &PoolSpec,
    pool_domain: &CaptureDomain,
    vrrp_floor: Option<u64>,
    now_ms: u64,
) -> bool {
    is_admissible(node, pool, pool_domain, vrrp_floor) && is_alive(node, pool, now_ms)
}

/// Whether a current owner may keep its addresses. With `autoFailover: false` an expired
/// heartbeat does not take addresses away; drain, health and VRRP still do.
#[must_use]
pub fn may_keep(
    node: &NodeState,
    pool: &PoolSpec,
    pool_domain: &CaptureDomain,
    vrrp_floor: Option<u64>,
    now_ms: u64,
) -> bool {
    if pool.auto_failover {
        is_eligible(node, pool, pool_domain, vrrp_floor, now_ms)
    } else {
        is_admissible(node, pool, pool_domain, vrrp_floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeState {
        NodeState::new(crate::fixtures::node_a())
    }

    fn pool() -> PoolSpec {
        PoolSpec {
            name: "p".into(),
            addresses: vec![],
            provider: "sim1".into(),
            placement_group: "g1".into(),
            members: vec!["a".into()],
            authority: Authority::None,
            approval: crate::model::Approval::Auto,
            deprovision_hold_ms: 5_000,
            heartbeat_ttl_ms: 3_000,
            promotion_hold_ms: 1_000,
            epoch_locking: true,
            prefer_nodes: vec![],
            preempt: false,
            auto_failover: true,
        }
    }

    #[test]
    fn liveness_expires_at_ttl_plus_hold_with_equality_meaning_expired() {
        let mut n = node();
        let p = pool();
        let d = p.capture_domain();
        assert!(!is_eligible(&n, &p, &d, None, 0), "no heartbeat: not alive");
        n.last_heartbeat_ms = Some(100);
        assert!(is_eligible(&n, &p, &d, None, 4_099));
        assert!(!is_eligible(&n, &p, &d, None, 4_100), "equality means expired");
    }

    #[test]
    fn drain_health_vrrp_and_domain_exclude() {
        let mut n = node();
        n.last_heartbeat_ms = Some(0);
        let mut p = pool();
        let d = p.capture_domain();
        assert!(is_eligible(&n, &p, &d, None, 1));
        n.drained = true;
        assert!(!is_eligible(&n, &p, &d, None, 1));
        n.drained = false;
        n.healthy = false;
        assert!(!is_eligible(&n, &p, &d, None, 1));
        n.healthy = true;
        p.authority = Authority::Vrrp;
        assert!(!is_eligible(&n, &p, &d, None, 1), "no VRRP report: fail closed");
        n.vrrp = Some(VrrpState::Backup);
        assert!(!is_eligible(&n, &p, &d, None, 1));
        n.vrrp = Some(VrrpState::Master);
        n.vrrp_master = Some(crate::state::MasterReport { seq: 7, taken_ms: 0 });
        assert!(is_eligible(&n, &p, &d, None, 1));
        assert!(is_eligible(&n, &p, &d, Some(7), 1), "its own report is the floor");
        assert!(!is_eligible(&n, &p, &d, Some(8), 1), "a newer MASTER report of another member");
        assert!(!is_eligible(&n, &p, &CaptureDomain::new("sim1", "g2"), None, 1));
    }

    #[test]
    fn without_auto_failover_an_expired_owner_may_keep() {
        let mut n = node();
        n.last_heartbeat_ms = Some(0);
        let mut p = pool();
        p.auto_failover = false;
        let d = p.capture_domain();
        assert!(may_keep(&n, &p, &d, None, 1_000_000));
        n.drained = true;
        assert!(!may_keep(&n, &p, &d, None, 1));
    }
}
