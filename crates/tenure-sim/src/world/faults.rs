//! Injecting the discrete faults: crashes, pauses, partitions, operator actions, pool churn.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use rand::Rng;
use tenure_core::log::{Event, EventKind};
use tenure_core::model::{PoolSpec, ProviderKind};
use tenure_core::pool_changes::plan_pool_changes;

use super::World;
use crate::config::Fault;

/// The chance that a `pool-move` renames a pool instead of moving addresses between two.
const RENAME_CHANCE: f64 = 0.25;

impl World {
    pub(super) fn inject(&mut self, fault: Fault) {
        self.count_fault(fault);
        // The plot marks the fault where it began, described with the node it hit.
        let at = self.head.stream_time_ms();
        let described = self.inject_described(fault);
        self.mark_fault(at, || described.unwrap_or_else(|| fault.name().to_owned()));
    }

    /// Injects `fault`; returns how the plot describes it, when it names more than the kind.
    fn inject_described(&mut self, fault: Fault) -> Option<String> {
        match fault {
            Fault::Crash | Fault::CrashLossy => {
                let node = self.random_node();
                self.crash(node, fault == Fault::CrashLossy);
                Some(format!("{} {}", fault.name(), self.name(node)))
            }
            Fault::Pause => {
                let node = self.random_node();
                let verb = if self.nodes[node].driver().is_paused() {
                    self.resume(node);
                    "resume"
                } else {
                    self.pause(node);
                    "pause"
                };
                Some(format!("{verb} {}", self.name(node)))
            }
            Fault::Partition => {
                let node = self.random_node();
                let driver = self.nodes[node].driver_mut();
                let verb = if driver.is_partitioned() {
                    driver.heal();
                    "heal"
                } else {
                    driver.partition();
                    "partition"
                };
                Some(format!("{verb} {}", self.name(node)))
            }
            Fault::Drain => {
                let node = self.random_node();
                let drain = self.rng.random_bool(0.5);
                if !self.writer_holds() {
                    return Some("drain (refused: every store refused the log)".to_owned());
                }
                let kind = if drain {
                    EventKind::Drain { node: self.name(node) }
                } else {
                    EventKind::Undrain { node: self.name(node) }
                };
                let line = kind.to_string();
                self.append(Event { at_ms: self.now_ms, kind });
                Some(line)
            }
            Fault::Health => {
                let node = self.random_node();
                let healthy = self.rng.random_bool(0.6);
                if !self.anchor_holds(node) {
                    return Some(format!("health {} (its store refused the log)", self.name(node)));
                }
                let at_ms = self.stamp(node);
                self.append(Event { at_ms, kind: EventKind::Health { node: self.name(node), healthy } });
                Some(format!("health {} {}", self.name(node), if healthy { "ok" } else { "failing" }))
            }
            Fault::Vrrp => {
                let node = self.random_node();
                if self.topology.provider.kind != ProviderKind::SimOnprem {
                    return Some("vrrp (no effect off on-prem)".to_owned());
                }
                self.set_vrrp_master(node);
                Some(format!("vrrp master {}", self.name(node)))
            }
            Fault::StoreRollback => Some(self.roll_back_log()),
            Fault::SlowStep => Some(self.slow_step()),
            Fault::PoolMove => Some(self.move_addresses()),
            // A store on a new path has no record of how far the log went: one started while the
            // log went back follows the shorter log (docs/safety.md, "Fleet mode: a log that
            // went back"). Not injected then: what `store-rollback` checks is every node's refusal.
            Fault::Rebuild if self.went_back => Some("rebuild (not while the log went back)".to_owned()),
            Fault::Rebuild => {
                let node = self.random_node();
                self.rebuild(node);
                Some(format!("rebuild {}", self.name(node)))
            }
            Fault::PoolChurn => {
                self.churn_pool();
                None
            }
            Fault::DesireBurst => {
                // Among the pools the log has applied now (renamed ones and moved addresses too).
                let applied: Vec<(String, Vec<IpAddr>)> = self
                    .head
                    .pools()
                    .iter()
                    .filter(|(_, p)| !p.deleted && !p.spec.addresses.is_empty())
                    .map(|(name, p)| (name.clone(), p.spec.addresses.clone()))
                    .collect();
                let desired = self.rng.random_bool(0.5);
                if !self.writer_holds() || applied.is_empty() {
                    return Some(
                        "desire-burst (refused: no pool, or every store refused the log)".to_owned(),
                    );
                }
                let (name, range) = &applied[self.rng.random_range(0..applied.len())];
                let mut burst = "";
                for _ in 0..self.rng.random_range(1..6) {
                    let address = range[self.rng.random_range(0..range.len())];
                    let kind = if desired {
                        EventKind::Desire { pool: name.clone(), address }
                    } else {
                        EventKind::Undesire { pool: name.clone(), address }
                    };
                    burst = kind.wire_name();
                    self.append(Event { at_ms: self.now_ms, kind });
                }
                Some(format!("{burst} burst {name}"))
            }
            _ => None,
        }
    }

    pub(super) fn churn_pool(&mut self) {
        let pool = self.rng.random_range(0..self.pools.len());
        if !self.writer_holds() {
            return;
        }
        let name = self.topology.pools[pool].name.clone();
        let roll = self.rng.random_range(0..10);
        let current = self.pools[pool].clone();
        // What another pool lists now (moved there or renamed by `pool-move`) is not this pool's
        // to list.
        let elsewhere: BTreeSet<IpAddr> = self
            .head
            .pools()
            .iter()
            .filter(|(other, p)| **other != name && !p.deleted)
            .flat_map(|(_, p)| p.spec.addresses.iter().copied())
            .collect();
        let event = match current {
            Some(_) if roll < 2 => {
                self.pools[pool] = None;
                EventKind::PoolDeleted { pool: name }
            }
            _ => {
                let mut spec = current.unwrap_or_else(|| self.topology.pools[pool].clone());
                let range: Vec<IpAddr> = self.topology.pools[pool]
                    .addresses
                    .iter()
                    .copied()
                    .filter(|a| !elsewhere.contains(a))
                    .collect();
                if range.is_empty() {
                    return;
                }
                let keep: Vec<IpAddr> = range.iter().copied().filter(|_| self.rng.random_bool(0.9)).collect();
                spec.addresses = if keep.is_empty() { range } else { keep };
                if roll >= 8 {
                    spec.preempt = !spec.preempt;
                }
                self.pools[pool] = Some(spec.clone());
                EventKind::PoolApplied { spec: Box::new(spec) }
            }
        };
        self.append(Event { at_ms: self.now_ms, kind: event });
    }

    /// The `pool-move` fault: an operator moves one to three addresses from one applied pool to
    /// another in the pool files and reloads. The events are the ones the agent appends for it
    /// (`tenure_core::pool_changes::plan_pool_changes`: the pool letting them go shrinks first),
    /// over the pools the log has applied; each must pass the head's overlap check. Returns how
    /// the plot names it.
    pub(super) fn move_addresses(&mut self) -> String {
        let applied: BTreeMap<String, PoolSpec> = self
            .head
            .pools()
            .iter()
            .filter(|(_, p)| !p.deleted)
            .map(|(name, p)| (name.clone(), p.spec.as_ref().clone()))
            .collect();
        let names: Vec<&String> = applied.keys().collect();
        if names.is_empty() || !self.writer_holds() {
            return "pool-move (no pool, or every store refused the log)".to_owned();
        }
        let from = names[self.rng.random_range(0..names.len())].clone();
        if names.len() < 2 || self.rng.random_bool(RENAME_CHANCE) {
            return self.rename_pool(&applied, &from);
        }
        let to = loop {
            let to = names[self.rng.random_range(0..names.len())];
            if *to != from {
                break to.clone();
            }
        };
        let mut wanted = applied.clone();
        let listed = &wanted[&from].addresses;
        if listed.len() < 2 {
            return format!("pool-move (pool {from} lists too few addresses)");
        }
        let count = self.rng.random_range(1..=3usize.min(listed.len() - 1));
        let mut moved = Vec::new();
        for _ in 0..count {
            let listed = &mut wanted.get_mut(&from).expect("picked from the map").addresses;
            moved.push(listed.remove(self.rng.random_range(0..listed.len())));
        }
        // In the order the pool parser gives a pool's addresses (sorted, once): the codec stores
        // no other (`tests/snapshot.rs` encodes every applied pool).
        let listed = &mut wanted.get_mut(&to).expect("picked from the map").addresses;
        listed.extend(moved.iter().copied());
        listed.sort_unstable();
        listed.dedup();
        let wanted: Vec<PoolSpec> = wanted.into_values().collect();
        for kind in plan_pool_changes(&applied, &wanted) {
            self.append(Event { at_ms: self.now_ms, kind });
        }
        self.resync_pools();
        let moved: Vec<String> = moved.iter().map(ToString::to_string).collect();
        format!("pool-move {} from {from} to {to}", moved.join(","))
    }

    /// An operator renames pool `from` in its file and reloads (part of `pool-move`): the pool is
    /// deleted and its spec applied under the new name, in the agent's order. The new name is
    /// new (`<topology name>-r<step>`), or, half the time, the topology's own name back when no
    /// pool has it now. Returns how the plot names it.
    fn rename_pool(&mut self, applied: &BTreeMap<String, PoolSpec>, from: &str) -> String {
        let base = from.split_once("-r").map_or(from, |(base, _)| base).to_owned();
        let to = if from != base && !applied.contains_key(&base) && self.rng.random_bool(0.5) {
            base
        } else {
            format!("{base}-r{}", self.step)
        };
        let mut wanted = applied.clone();
        let mut spec = wanted.remove(from).expect("a pool the log applied");
        spec.name.clone_from(&to);
        wanted.insert(to.clone(), spec);
        let wanted: Vec<PoolSpec> = wanted.into_values().collect();
        for kind in plan_pool_changes(applied, &wanted) {
            self.append(Event { at_ms: self.now_ms, kind });
        }
        self.resync_pools();
        format!("pool-move: {from} renamed {to}")
    }
}
