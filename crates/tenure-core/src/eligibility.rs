//! Eligibility and liveness (SPEC 3), relative to stream time only.

use crate::model::{Authority, CaptureDomain, PoolSpec, VrrpState};
use crate::state::NodeState;

/// True when the node's last heartbeat still covers stream time `now_ms`:
/// `lastHeartbeat + heartbeatTTL + promotionHold > now` (equality means expired).
/// A node that never sent a heartbeat is not alive.
#[must_use]
pub fn is_alive(node: &NodeState, pool: &PoolSpec, now_ms: u64) -> bool {
    node.last_heartbeat_ms.is_some_and(|heartbeat_ms| {
        heartbeat_ms.saturating_add(pool.heartbeat_ttl_ms).saturating_add(pool.promotion_hold_ms) > now_ms
    })
}

/// Everything of eligibility except liveness: not drained, not unhealthy, VRRP master when the
/// pool's authority is `vrrp` (no report means not master; a MASTER that another member's newer
/// MASTER report superseded is not: [`is_vrrp_master`]), and in the pool's capture domain.
#[must_use]
pub fn is_admissible(node: &NodeState, pool: &PoolSpec, pool_domain: &CaptureDomain) -> bool {
    if node.drained || !node.healthy {
        return false;
    }
    if pool.authority == Authority::Vrrp && !is_vrrp_master(node) {
        return false;
    }
    node.capture_domain == *pool_domain
}

/// Whether the log counts `node` as VRRP master: its latest report says MASTER and no member of
/// a pool under `authority: vrrp` it is in reported MASTER since.
#[must_use]
pub fn is_vrrp_master(node: &NodeState) -> bool {
    node.vrrp == Some(VrrpState::Master) && !node.vrrp_superseded
}

/// Full eligibility at stream time `now_ms` (SPEC 3). Membership is checked by the caller.
#[must_use]
pub fn is_eligible(node: &NodeState, pool: &PoolSpec, pool_domain: &CaptureDomain, now_ms: u64) -> bool {
    is_admissible(node, pool, pool_domain) && is_alive(node, pool, now_ms)
}

/// Whether a current owner may keep its addresses. With `autoFailover: false` an expired
/// heartbeat does not take addresses away; drain, health and VRRP still do.
#[must_use]
pub fn may_keep(node: &NodeState, pool: &PoolSpec, pool_domain: &CaptureDomain, now_ms: u64) -> bool {
    if pool.auto_failover {
        is_eligible(node, pool, pool_domain, now_ms)
    } else {
        is_admissible(node, pool, pool_domain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NodeSpec;

    fn node() -> NodeState {
        NodeState::new(NodeSpec {
            name: "a".into(),
            provider: "sim1".into(),
            placement_group: "g1".into(),
            priority: 0,
            nic: "eni-a".into(),
            capacity: None,
        })
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
        assert!(!is_eligible(&n, &p, &d, 0), "no heartbeat: not alive");
        n.last_heartbeat_ms = Some(100);
        assert!(is_eligible(&n, &p, &d, 4_099));
        assert!(!is_eligible(&n, &p, &d, 4_100), "equality means expired");
    }

    #[test]
    fn drain_health_vrrp_and_domain_exclude() {
        let mut n = node();
        n.last_heartbeat_ms = Some(0);
        let mut p = pool();
        let d = p.capture_domain();
        assert!(is_eligible(&n, &p, &d, 1));
        n.drained = true;
        assert!(!is_eligible(&n, &p, &d, 1));
        n.drained = false;
        n.healthy = false;
        assert!(!is_eligible(&n, &p, &d, 1));
        n.healthy = true;
        p.authority = Authority::Vrrp;
        assert!(!is_eligible(&n, &p, &d, 1), "no VRRP report: fail closed");
        n.vrrp = Some(VrrpState::Backup);
        assert!(!is_eligible(&n, &p, &d, 1));
        n.vrrp = Some(VrrpState::Master);
        assert!(is_eligible(&n, &p, &d, 1));
        n.vrrp_superseded = true;
        assert!(!is_eligible(&n, &p, &d, 1), "a newer MASTER report of another member");
        n.vrrp_superseded = false;
        assert!(!is_eligible(&n, &p, &CaptureDomain::new("sim1", "g2"), 1));
    }

    #[test]
    fn without_auto_failover_an_expired_owner_may_keep() {
        let mut n = node();
        n.last_heartbeat_ms = Some(0);
        let mut p = pool();
        p.auto_failover = false;
        let d = p.capture_domain();
        assert!(may_keep(&n, &p, &d, 1_000_000));
        n.drained = true;
        assert!(!may_keep(&n, &p, &d, 1));
    }
}
