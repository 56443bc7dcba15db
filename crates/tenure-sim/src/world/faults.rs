//! Injecting the discrete faults: crashes, pauses, partitions, operator actions, pool churn.

use std::net::IpAddr;

use rand::Rng;
use tenure_core::log::{Event, EventKind};
use tenure_core::model::ProviderKind;

use super::World;
use crate::config::Fault;

impl World {
    pub(super) fn inject(&mut self, fault: Fault) {
        self.count_fault(fault);
        match fault {
            Fault::Crash | Fault::CrashLossy => {
                let node = self.random_node();
                self.crash(node, fault == Fault::CrashLossy);
            }
            Fault::Pause => {
                let node = self.random_node();
                if self.nodes[node].driver.is_paused() { self.resume(node) } else { self.pause(node) }
            }
            Fault::Partition => {
                let node = self.random_node();
                let driver = &mut self.nodes[node].driver;
                if driver.is_partitioned() { driver.heal() } else { driver.partition() }
            }
            Fault::Drain => {
                let node = self.random_node();
                let kind = if self.rng.random_bool(0.5) {
                    EventKind::Drain { node: self.name(node) }
                } else {
                    EventKind::Undrain { node: self.name(node) }
                };
                self.append(Event { at_ms: self.now_ms, kind });
            }
            Fault::Health => {
                let node = self.random_node();
                let healthy = self.rng.random_bool(0.6);
                let at_ms = self.stamp(node);
                self.append(Event { at_ms, kind: EventKind::Health { node: self.name(node), healthy } });
            }
            Fault::Vrrp => {
                let node = self.random_node();
                if self.topology.provider.kind == ProviderKind::SimOnprem {
                    self.set_vrrp_master(node);
                }
            }
            Fault::PoolChurn => self.churn_pool(),
            Fault::DesireBurst => {
                let (pool, _) = self.random_address();
                let desired = self.rng.random_bool(0.5);
                for _ in 0..self.rng.random_range(1..6) {
                    let range = &self.topology.pools[pool].addresses;
                    let address = range[self.rng.random_range(0..range.len())];
                    let name = self.topology.pools[pool].name.clone();
                    let kind = if desired {
                        EventKind::Desire { pool: name, address }
                    } else {
                        EventKind::Undesire { pool: name, address }
                    };
                    self.append(Event { at_ms: self.now_ms, kind });
                }
            }
            _ => {}
        }
    }

    pub(super) fn churn_pool(&mut self) {
        let pool = self.rng.random_range(0..self.pools.len());
        let name = self.topology.pools[pool].name.clone();
        let roll = self.rng.random_range(0..10);
        let current = self.pools[pool].clone();
        let event = match current {
            Some(_) if roll < 2 => {
                self.pools[pool] = None;
                EventKind::PoolDeleted { pool: name }
            }
            _ => {
                let mut spec = current.unwrap_or_else(|| self.topology.pools[pool].clone());
                let range = &self.topology.pools[pool].addresses;
                let keep: Vec<IpAddr> = range.iter().copied().filter(|_| self.rng.random_bool(0.9)).collect();
                spec.addresses = if keep.is_empty() { range.clone() } else { keep };
                if roll >= 8 {
                    spec.preempt = !spec.preempt;
                }
                self.pools[pool] = Some(spec.clone());
                EventKind::PoolApplied { spec: Box::new(spec) }
            }
        };
        self.append(Event { at_ms: self.now_ms, kind: event });
    }
}
