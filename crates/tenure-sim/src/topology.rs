//! The fleet of one seed: nodes, the provider and pools, all drawn from the seed.

use std::net::IpAddr;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tenure_core::model::{Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec};

use crate::config::{Mode, SimConfig};

/// The provider every simulated node and pool uses.
pub const PROVIDER: &str = "sim";
/// The placement group every simulated node and pool uses.
pub const PLACEMENT_GROUP: &str = "g1";

/// A generated fleet.
#[derive(Clone, Debug)]
pub struct Topology {
    /// Nodes, sorted by name.
    pub nodes: Vec<NodeSpec>,
    /// The one provider.
    pub provider: ProviderSpec,
    /// Pools as first applied: each lists every address it may ever list (pool churn picks
    /// subsets of these).
    pub pools: Vec<PoolSpec>,
}

/// The address of index `i` of pool `pool`: `10.<pool>.<i / 256>.<i % 256>`.
#[must_use]
pub fn address(pool: usize, i: usize) -> IpAddr {
    IpAddr::from([10, u8::try_from(pool).unwrap_or(u8::MAX), (i / 256) as u8, (i % 256) as u8])
}

/// Draws a fleet from the seed's generator.
pub fn generate(rng: &mut ChaCha8Rng, config: &SimConfig) -> Topology {
    let onprem = matches!(config.mode, Mode::Onprem | Mode::OnpremNoAuthority);
    let kind = if onprem { ProviderKind::SimOnprem } else { ProviderKind::SimCloud };
    let per_node = config.addresses.div_ceil(config.nodes) as u64;
    let nodes: Vec<NodeSpec> = (0..config.nodes)
        .map(|i| NodeSpec {
            name: format!("n{i:02}"),
            provider: PROVIDER.into(),
            placement_group: PLACEMENT_GROUP.into(),
            priority: rng.random_range(0..3),
            nic: if onprem { format!("eth-{i:02}") } else { format!("eni-{i:02}") },
            capacity: rng.random_bool(0.3).then(|| rng.random_range(per_node..=per_node * 3)),
        })
        .collect();
    let pool_count = rng.random_range(1..=3).min(config.addresses);
    let mut pools = Vec::new();
    for p in 0..pool_count {
        let share = config.addresses / pool_count + usize::from(p < config.addresses % pool_count);
        let addresses: Vec<IpAddr> = (0..share).map(|i| address(p, i)).collect();
        let mut members: Vec<String> =
            nodes.iter().filter(|_| rng.random_bool(0.85)).map(|n| n.name.clone()).collect();
        if members.is_empty() {
            members.push(nodes[rng.random_range(0..nodes.len())].name.clone());
        }
        let prefer_count = rng.random_range(0..=2usize).min(members.len());
        let prefer_nodes = members.iter().take(prefer_count).cloned().collect();
        pools.push(PoolSpec {
            name: format!("pool{p}"),
            addresses,
            provider: PROVIDER.into(),
            placement_group: PLACEMENT_GROUP.into(),
            members,
            authority: if config.mode == Mode::Onprem { Authority::Vrrp } else { Authority::None },
            approval: if rng.random_bool(0.1) { Approval::Manual } else { Approval::Auto },
            deprovision_hold_ms: rng.random_range(0..=4) * 500,
            heartbeat_ttl_ms: rng.random_range(2..=6) * 500,
            promotion_hold_ms: rng.random_range(0..=2) * 500,
            epoch_locking: rng.random_bool(0.8),
            prefer_nodes,
            preempt: rng.random_bool(0.3),
            auto_failover: rng.random_bool(0.85),
        });
    }
    Topology { nodes, provider: ProviderSpec { name: PROVIDER.into(), kind }, pools }
}
