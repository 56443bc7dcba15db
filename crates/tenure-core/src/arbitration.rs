//! Leaderless, deterministic ownership arbitration (SPEC 4, 13).
//!
//! For every address of every applied pool, in canonical order (pool name, then address):
//! a current owner that may keep its address keeps it while `preempt` is false (sticky owners
//! are counted against capacity first, across all pools); every other address goes to the best
//! eligible member with spare capacity, ranked by `preferNodes` index, then priority (higher
//! first), then the rendezvous score `xxh3_64("<pool>\0<address>\0<node>")` (higher first), then
//! name (smaller first).

use std::cmp::Reverse;
use std::io::Write as _;
use std::net::IpAddr;
use std::ops::Range;

use xxhash_rust::xxh3::xxh3_64;

use crate::eligibility::{is_admissible, is_eligible, may_keep, vrrp_floor};
use std::collections::BTreeMap;

use crate::model::PoolSpec;
use crate::state::{NodeId, NodeState, PoolConditions, PoolState};

/// The arbitration result, as a difference from the current owners: the conditions of each
/// applied (not deleted) pool, and the addresses whose owner changes, both keyed by pool name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnerMap {
    /// Per applied pool, in name order: (name, its conditions).
    pub conditions: Vec<(String, PoolConditions)>,
    /// The addresses whose owner differs from their current one: (pool name, address, new
    /// owner), in canonical order. Applying the map touches only these.
    pub changes: Vec<(String, IpAddr, Option<NodeId>)>,
}

/// Orders a pool's declared members by rank, without the per-address score:
/// `preferNodes` index (unlisted last), priority (higher first), name.
#[must_use]
pub fn rank_members(spec: &PoolSpec, member_ids: &[NodeId], nodes: &[NodeState]) -> Vec<NodeId> {
    let mut ranked = member_ids.to_vec();
    ranked.sort_by_key(|id| rank_key(spec, &nodes[*id as usize]));
    ranked.dedup();
    ranked
}

fn rank_key<'a>(spec: &PoolSpec, node: &'a NodeState) -> (usize, Reverse<i64>, &'a str) {
    let prefer_index =
        spec.prefer_nodes.iter().position(|p| *p == node.spec.name).unwrap_or(spec.prefer_nodes.len());
    (prefer_index, Reverse(node.spec.priority), node.spec.name.as_str())
}

/// What arbitration reads of the eligible sets: per applied pool, per ranked member,
/// bit 0 = eligible, bit 1 = may keep. When this is unchanged and no pool changed, the map is too.
#[must_use]
pub fn eligibility(nodes: &[NodeState], pools: &BTreeMap<String, PoolState>, now_ms: u64) -> Vec<Vec<bool>> {
    pools
        .values()
        .filter(|p| !p.deleted)
        .map(|pool| {
            let floor = vrrp_floor(nodes, pool, now_ms);
            pool.member_ids
                .iter()
                .flat_map(|id| {
                    let node = &nodes[*id as usize];
                    [
                        is_eligible(node, &pool.spec, &pool.capture_domain, floor, now_ms),
                        may_keep(node, &pool.spec, &pool.capture_domain, floor, now_ms),
                        is_admissible(node, &pool.spec, &pool.capture_domain, floor),
                    ]
                })
                .collect()
        })
        .collect()
}

/// Per-pool inputs of one arbitration run.
struct PoolView<'a> {
    pool: &'a PoolState,
    /// Indexed by node id: eligible now.
    eligible: Vec<bool>,
    /// Indexed by node id: a current owner may keep its address.
    keepable: Vec<bool>,
    /// Ranges of `pool.member_ids` with equal (preferNodes index, priority).
    groups: Vec<Range<usize>>,
    any_eligible: bool,
}

impl<'a> PoolView<'a> {
    fn new(pool: &'a PoolState, nodes: &[NodeState], now_ms: u64) -> Self {
        let mut eligible = vec![false; nodes.len()];
        let mut keepable = vec![false; nodes.len()];
        let floor = vrrp_floor(nodes, pool, now_ms);
        for id in &pool.member_ids {
            eligible[*id as usize] =
                is_eligible(&nodes[*id as usize], &pool.spec, &pool.capture_domain, floor, now_ms);
            keepable[*id as usize] =
                may_keep(&nodes[*id as usize], &pool.spec, &pool.capture_domain, floor, now_ms);
        }
        let mut groups = Vec::new();
        let mut start = 0;
        for index in 1..=pool.member_ids.len() {
            let boundary = index == pool.member_ids.len() || {
                let (p0, r0, _) = rank_key(&pool.spec, &nodes[pool.member_ids[start] as usize]);
                let (p1, r1, _) = rank_key(&pool.spec, &nodes[pool.member_ids[index] as usize]);
                (p0, r0) != (p1, r1)
            };
            if boundary {
                groups.push(start..index);
                start = index;
            }
        }
        let any_eligible = pool.member_ids.iter().any(|id| eligible[*id as usize]);
        Self { pool, eligible, keepable, groups, any_eligible }
    }
}

/// Recomputes the whole ownership map from the nodes and pools at stream time `now_ms`. Pure
/// and deterministic.
#[must_use]
pub fn compute_owners(nodes: &[NodeState], pools: &BTreeMap<String, PoolState>, now_ms: u64) -> OwnerMap {
    let mut remaining: Vec<u64> = nodes.iter().map(|n| n.spec.capacity.unwrap_or(u64::MAX)).collect();
    let views: Vec<PoolView<'_>> =
        pools.values().filter(|p| !p.deleted).map(|p| PoolView::new(p, nodes, now_ms)).collect();
    // Each pool's active addresses with their current owner, walked out of the map once.
    let actives: Vec<Vec<(IpAddr, Option<NodeId>)>> = views
        .iter()
        .map(|v| v.pool.addresses.iter().filter(|(_, a)| a.active).map(|(ip, a)| (*ip, a.owner)).collect())
        .collect();
    // `None`: not decided yet; `Some(owner)`: decided.
    let mut decided: Vec<Vec<Option<Option<NodeId>>>> = actives.iter().map(|a| vec![None; a.len()]).collect();

    // Sticky owners first, across all pools, so that they are counted before new placements.
    for ((view, active), decisions) in views.iter().zip(&actives).zip(decided.iter_mut()) {
        if view.pool.spec.preempt {
            continue;
        }
        for ((_, owner), decision) in active.iter().zip(decisions.iter_mut()) {
            if let Some(owner) = *owner
                && view.keepable[owner as usize]
                && remaining[owner as usize] > 0
            {
                remaining[owner as usize] -= 1;
                *decision = Some(Some(owner));
            }
        }
    }

    let mut score_input: Vec<u8> = Vec::with_capacity(128);
    let mut result = OwnerMap { conditions: Vec::with_capacity(views.len()), changes: Vec::new() };
    for ((view, active), decisions) in views.iter().zip(&actives).zip(decided) {
        let mut conditions = PoolConditions::default();
        for ((address, current_owner), decision) in active.iter().zip(decisions) {
            let owner = match decision {
                Some(owner) => owner,
                None => {
                    let best = choose(view, nodes, *address, *current_owner, &remaining, &mut score_input);
                    match best {
                        Some(id) => remaining[id as usize] -= 1,
                        None if view.any_eligible => conditions.capacity_exhausted += 1,
                        None => conditions.no_eligible_member += 1,
                    }
                    best
                }
            };
            if owner != *current_owner {
                result.changes.push((view.pool.spec.name.clone(), *address, owner));
            }
        }
        result.conditions.push((view.pool.spec.name.clone(), conditions));
    }
    result
}

/// The best candidate for one address, or none.
fn choose(
    view: &PoolView<'_>,
    nodes: &[NodeState],
    address: IpAddr,
    current_owner: Option<NodeId>,
    remaining: &[u64],
    score_input: &mut Vec<u8>,
) -> Option<NodeId> {
    let is_candidate = |id: NodeId| {
        remaining[id as usize] > 0
            && (view.eligible[id as usize] || (current_owner == Some(id) && view.keepable[id as usize]))
    };
    for group in &view.groups {
        let members = &view.pool.member_ids[group.clone()];
        let mut candidates = members.iter().copied().filter(|id| is_candidate(*id));
        let Some(first) = candidates.next() else {
            continue;
        };
        let Some(second) = candidates.next() else {
            return Some(first);
        };
        score_input.clear();
        score_input.extend_from_slice(view.pool.spec.name.as_bytes());
        score_input.push(0);
        write_canonical_address(score_input, address);
        score_input.push(0);
        let prefix_len = score_input.len();
        // One straight loop, the score inlined: higher score first, then smaller name (SPEC 4).
        let mut best = (score(score_input, prefix_len, &nodes[first as usize].spec.name), first);
        for id in std::iter::once(second).chain(candidates) {
            let name = nodes[id as usize].spec.name.as_str();
            let s = score(score_input, prefix_len, name);
            if s > best.0 || (s == best.0 && name < nodes[best.1 as usize].spec.name.as_str()) {
                best = (s, id);
            }
        }
        return Some(best.1);
    }
    None
}

/// Appends the canonical text form of `address` to `out`: exactly what its `Display` writes
/// (IPv4 dotted decimal without leading zeros; IPv6 as RFC 5952, through `Display`). IPv4 is
/// written digit by digit, because the formatting machinery costs about a thousand instructions
/// per address, a third of a cold placement (`docs/benchmarks.md`).
pub fn write_canonical_address(out: &mut Vec<u8>, address: IpAddr) {
    let IpAddr::V4(v4) = address else {
        write!(out, "{address}").expect("writing to a Vec cannot fail");
        return;
    };
    let mut text = [0_u8; 15];
    let mut len = 0;
    for (index, octet) in v4.octets().into_iter().enumerate() {
        if index > 0 {
            text[len] = b'.';
            len += 1;
        }
        if octet >= 100 {
            text[len] = b'0' + octet / 100;
            len += 1;
        }
        if octet >= 10 {
            text[len] = b'0' + octet / 10 % 10;
            len += 1;
        }
        text[len] = b'0' + octet % 10;
        len += 1;
    }
    out.extend_from_slice(&text[..len]);
}

/// The rendezvous score of `node` for the address whose `"<pool>\0<address>\0"` prefix is the
/// first `prefix_len` bytes of `score_input`.
#[inline(always)]
fn score(score_input: &mut Vec<u8>, prefix_len: usize, node: &str) -> u64 {
    score_input.truncate(prefix_len);
    score_input.extend_from_slice(node.as_bytes());
    xxh3_64(score_input)
}

/// The rendezvous score of SPEC 4, for tests and tools: `xxh3_64("<pool>\0<address>\0<node>")`.
#[must_use]
pub fn rendezvous_score(pool: &str, address: IpAddr, node: &str) -> u64 {
    xxh3_64(format!("{pool}\0{address}\0{node}").as_bytes())
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    fn written(address: IpAddr) -> String {
        let mut out = b"x".to_vec();
        write_canonical_address(&mut out, address);
        String::from_utf8(out).expect("ASCII")
    }

    #[test]
    fn canonical_address_text_is_what_display_writes() {
        // Every octet value in every position, and a stride over the whole IPv4 space.
        for position in 0..4 {
            for value in 0..=255_u8 {
                let mut octets = [1, 22, 133, 4];
                octets[position] = value;
                let address = IpAddr::from(octets);
                assert_eq!(written(address), format!("x{address}"));
            }
        }
        for bits in (0..=u32::MAX).step_by(65_537).chain([u32::MAX]) {
            let address = IpAddr::V4(Ipv4Addr::from(bits));
            assert_eq!(written(address), format!("x{address}"));
        }
        for address in
            [Ipv6Addr::UNSPECIFIED, Ipv6Addr::LOCALHOST, Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped()]
        {
            assert_eq!(written(IpAddr::V6(address)), format!("x{address}"));
        }
    }
}
