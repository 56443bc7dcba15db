//! Who reads a provider's inventory (SPEC 7) in a fleet: one reader per provider, chosen from
//! the view alone, so that every agent that follows the same log agrees on it without talking.
//! `docs/architecture.md`, "One inventory reader per provider".

use super::{Federation, NodeId};
use crate::eligibility::is_alive;

impl Federation {
    /// Whether node `id` is alive (SPEC 3, [`is_alive`]) at stream time under every applied pool
    /// that lists it as a member — each pool judges by its own `heartbeatTTL` and
    /// `promotionHold`, so the shortest decides. `None` when no applied pool lists it: there is
    /// no TTL to judge its heartbeats by. The status page's "alive" is this.
    #[must_use]
    pub fn node_alive(&self, id: NodeId) -> Option<bool> {
        let node = self.nodes.get(id as usize)?;
        let mut pools = self
            .pools
            .values()
            .filter(|pool| !pool.deleted && pool.spec.members.contains(&node.spec.name))
            .peekable();
        pools.peek()?;
        Some(pools.all(|pool| is_alive(node, &pool.spec, self.stream_time_ms)))
    }

    /// How long ago the log took node `id`'s last heartbeat, when that is recent enough that its
    /// agent may still run: within the longest `heartbeatTTL + promotionHold` of the applied
    /// pools (3 s when none is applied, SPEC 3's default TTL). `None`: not heard from lately, or
    /// never. The operator's guard before a retire (`check_submit`), for a node in no pool too.
    #[must_use]
    pub fn heard_from_within(&self, id: NodeId) -> Option<u64> {
        let last = self.nodes.get(id as usize)?.last_heartbeat_ms?;
        let window = self
            .pools
            .values()
            .filter(|pool| !pool.deleted)
            .map(|pool| pool.spec.heartbeat_ttl_ms.saturating_add(pool.spec.promotion_hold_ms))
            .max()
            .unwrap_or(3_000);
        let age = self.stream_time_ms.saturating_sub(last);
        (age < window).then_some(age)
    }

    /// The node that reads `provider`'s whole inventory now: among the provider's nodes that
    /// are alive ([`Federation::node_alive`]), the one with the smallest name. The name is the
    /// stable key: the registry has no other order (node ids are the order nodes joined in, which
    /// a retirement changes, and arbitration's rendezvous score is per address, not per provider). Drained or unhealthy nodes still
    /// qualify: their agents keep following the log and can read. `None` when no node of the
    /// provider is alive by the log (a fleet starting, or a log no one heartbeats to): the agent
    /// then reads as if every node were the reader.
    ///
    /// Only a read that sees the whole provider follows this rule; a read that sees only its
    /// own host's NICs (`onprem`) is every host's own.
    #[must_use]
    pub fn inventory_reader(&self, provider: &str) -> Option<&str> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(id, node)| {
                node.spec.provider == provider && self.node_alive(crate::state::node_id_of(*id)) == Some(true)
            })
            .map(|(_, node)| node.spec.name.as_str())
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{Event, EventKind};
    use crate::model::{Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec};

    fn node(name: &str, provider: &str) -> NodeSpec {
        NodeSpec {
            name: name.into(),
            provider: provider.into(),
            placement_group: "g1".into(),
            priority: 0,
            nic: format!("eni-{name}"),
            capacity: None,
        }
    }

    fn pool(name: &str, provider: &str, address: &str, members: &[&str], ttl_ms: u64) -> PoolSpec {
        PoolSpec {
            name: name.into(),
            addresses: vec![address.parse().expect("address")],
            provider: provider.into(),
            placement_group: "g1".into(),
            members: members.iter().map(|m| (*m).to_owned()).collect(),
            authority: Authority::None,
            approval: Approval::Auto,
            deprovision_hold_ms: 0,
            heartbeat_ttl_ms: ttl_ms,
            promotion_hold_ms: 1_000,
            epoch_locking: true,
            prefer_nodes: vec![],
            preempt: false,
            auto_failover: true,
        }
    }

    /// Nodes `c`, `b`, `a` (registered out of order) and `z` on `cloud`; `x` on `other`. One pool
    /// per provider, heartbeatTTL 3 s + promotionHold 1 s.
    fn fleet() -> Federation {
        let nodes = [
            node("c", "cloud"),
            node("b", "cloud"),
            node("a", "cloud"),
            node("z", "cloud"),
            node("x", "other"),
        ];
        let providers = [
            ProviderSpec { name: "cloud".into(), kind: ProviderKind::SimCloud },
            ProviderSpec { name: "other".into(), kind: ProviderKind::SimCloud },
        ];
        let mut fed = Federation::new(&nodes, &providers);
        apply(
            &mut fed,
            0,
            EventKind::PoolApplied {
                spec: Box::new(pool("p", "cloud", "10.0.0.10", &["a", "b", "c", "z"], 3_000)),
            },
        );
        apply(
            &mut fed,
            0,
            EventKind::PoolApplied { spec: Box::new(pool("q", "other", "10.0.1.10", &["x"], 3_000)) },
        );
        fed
    }

    fn apply(fed: &mut Federation, at_ms: u64, kind: EventKind) {
        fed.apply(&Event { at_ms, kind }).expect("accepted");
    }

    fn heartbeat(fed: &mut Federation, at_ms: u64, node: &str) {
        apply(fed, at_ms, EventKind::Heartbeat { node: node.into() });
    }

    #[test]
    fn the_live_node_with_the_smallest_name_reads() {
        let mut fed = fleet();
        for name in ["c", "b", "a", "x"] {
            heartbeat(&mut fed, 100, name);
        }
        assert_eq!(fed.inventory_reader("cloud"), Some("a"));
        assert_eq!(fed.inventory_reader("other"), Some("x"), "a reader per provider");
        // Drained and unhealthy nodes still follow the log and read.
        apply(&mut fed, 200, EventKind::Drain { node: "a".into() });
        apply(&mut fed, 200, EventKind::Health { node: "a".into(), healthy: false });
        assert_eq!(fed.inventory_reader("cloud"), Some("a"));
    }

    #[test]
    fn a_dead_reader_hands_over_to_the_next_live_name_and_takes_back_when_it_returns() {
        let mut fed = fleet();
        for name in ["a", "b", "c"] {
            heartbeat(&mut fed, 100, name);
        }
        // b and c keep heartbeating; a's last one was at 100: alive while 100 + 3000 + 1000 > now.
        for at in (1_000..=4_000).step_by(1_000) {
            heartbeat(&mut fed, at, "b");
            heartbeat(&mut fed, at, "c");
        }
        assert_eq!(fed.inventory_reader("cloud"), Some("a"), "at 4000 a is still alive");
        heartbeat(&mut fed, 4_100, "c");
        assert_eq!(fed.inventory_reader("cloud"), Some("b"), "at 4100 a expired (equality is expired)");
        heartbeat(&mut fed, 9_000, "c");
        assert_eq!(fed.inventory_reader("cloud"), Some("c"), "b expired too");
        heartbeat(&mut fed, 9_100, "a");
        assert_eq!(fed.inventory_reader("cloud"), Some("a"), "a is back: the smallest live name again");
    }

    #[test]
    fn no_live_node_no_reader() {
        let mut fed = fleet();
        assert_eq!(fed.inventory_reader("cloud"), None, "no heartbeat yet");
        heartbeat(&mut fed, 100, "x");
        assert_eq!(fed.inventory_reader("cloud"), None, "another provider's node does not read this one");
        heartbeat(&mut fed, 100, "b");
        heartbeat(&mut fed, 10_000, "x");
        assert_eq!(fed.inventory_reader("cloud"), None, "b expired");
        assert_eq!(fed.inventory_reader("nowhere"), None);
    }

    #[test]
    fn liveness_is_judged_by_every_applied_pool_and_a_node_of_none_never_reads() {
        let mut fed = fleet();
        // `z` is a member of `p` only; a second pool with a shorter TTL lists `a`.
        apply(
            &mut fed,
            0,
            EventKind::PoolApplied { spec: Box::new(pool("short", "cloud", "10.0.0.11", &["a"], 500)) },
        );
        heartbeat(&mut fed, 100, "a");
        heartbeat(&mut fed, 100, "b");
        assert_eq!(fed.node_alive(fed.node_id("a").expect("a")), Some(true));
        heartbeat(&mut fed, 1_600, "b");
        // 100 + 500 + 1000 = 1600: a expired under `short`, though alive under `p`.
        assert_eq!(fed.node_alive(fed.node_id("a").expect("a")), Some(false));
        assert_eq!(fed.inventory_reader("cloud"), Some("b"));
        // Deleting `p` leaves b, c and z in no applied pool: no TTL to judge them by.
        apply(&mut fed, 1_700, EventKind::PoolDeleted { pool: "p".into() });
        assert_eq!(fed.node_alive(fed.node_id("b").expect("b")), None);
        assert_eq!(fed.inventory_reader("cloud"), None);
    }
}
