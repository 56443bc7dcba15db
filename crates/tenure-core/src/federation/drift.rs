//! Drift repair (SPEC 7): confirmations from `action-result` events, the latest inventory, and
//! the re-capture rule. Off unless [`Federation::with_drift_repair`] turns it on (the agent and
//! the simulator do; `replay` only for a scenario with `driftRepair: true`, SPEC 13).

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::{Federation, NodeId};
use crate::state::Confirmation;

/// What inventory last showed of one address, per NIC: whether the NIC held it, and the `at`
/// of that observation. NICs of no node are kept only while they hold it.
pub(crate) type Observed = BTreeMap<String, (bool, u64)>;

/// Records one read into what is kept of its address: every NIC the read speaks of — its
/// `scope`; for a whole view every NIC (those kept, the holders, `node_nics`) — takes what the
/// read found, unless a newer observation of it is kept. A NIC of no node that does not hold
/// the address is forgotten.
pub(super) fn record(
    kept: &mut Observed,
    node_nics: &[String],
    holders: &[String],
    scope: Option<&[String]>,
    at_ms: u64,
) {
    let covered: std::collections::BTreeSet<String> = match scope {
        Some(scope) => scope.iter().cloned().collect(),
        None => {
            kept.keys().cloned().chain(holders.iter().cloned()).chain(node_nics.iter().cloned()).collect()
        }
    };
    for nic in covered {
        if kept.get(&nic).is_some_and(|(_, at)| *at > at_ms) {
            continue;
        }
        let held = holders.contains(&nic);
        if held || node_nics.contains(&nic) {
            kept.insert(nic, (held, at_ms));
        } else {
            kept.remove(&nic);
        }
    }
}

impl Federation {
    /// Turns drift repair on or off. With it on, an `inventory` event that contradicts what was
    /// confirmed executed in the current epoch bumps the address's captureEpoch (a re-capture),
    /// which yields fresh acquire and release actions through the same planner and gate:
    /// - the desired holder confirmed its acquire in the current epoch, and its NIC is not among
    ///   the holders (it lost the address), or
    /// - a node other than the desired holder confirmed its release in the current epoch, and
    ///   its NIC is among the holders (it still holds what it released).
    ///
    /// An inventory counts against a confirmation only when observed strictly after it (a
    /// greater `at`). Nothing else re-captures: a node that holds the address without having
    /// released it in this epoch gets its release planned in this epoch from the observation,
    /// and an unknown NIC is reported, never released. So an ordinary hand-over never churns
    /// epochs, and a re-capture cannot repeat before the actions of its own epoch confirmed.
    /// The rule in full, with its scenarios: `docs/architecture.md`, "Drift repair's trigger".
    #[must_use]
    pub fn with_drift_repair(mut self, on: bool) -> Self {
        self.drift_repair = on;
        self
    }

    /// With drift repair on, the NICs the latest inventory of `provider` showed holding
    /// `address` (each NIC as its latest observation says), sorted; `None`: never observed.
    #[must_use]
    pub fn observed_holders(&self, provider: &str, address: IpAddr) -> Option<Vec<&str>> {
        let kept = self.observed.get(provider)?.get(&address)?;
        Some(kept.iter().filter(|(_, (held, _))| *held).map(|(nic, _)| nic.as_str()).collect())
    }

    /// With drift repair on, whether the latest inventory of `provider` showed `nic` holding
    /// `address`.
    #[must_use]
    pub fn observed_on(&self, provider: &str, address: IpAddr, nic: &str) -> bool {
        self.observed
            .get(provider)
            .and_then(|kept| kept.get(&address))
            .and_then(|kept| kept.get(nic))
            .is_some_and(|(held, _)| *held)
    }

    /// What the log says `node` holds of `address` on `provider` — the one rule, read by the
    /// planner (a node whose journal has no record of the address releases it) and by the retire
    /// guard ([`Self::held_by_log`]): its newest confirmation of a holding verb for the address,
    /// across the provider's pools, is an acquire; no inventory read of that NIC since shows the
    /// address gone; and, on a provider whose assign moves the address (the cloud family), no
    /// other node confirmed an acquire of it since. With the pool, NIC and line of that acquire,
    /// which a release undoes. Covers a router rebuilt on an empty `store.path` or whose journal
    /// was lost — on-prem nothing else would take its proxy entries down.
    #[must_use]
    pub fn confirmed_holding(
        &self,
        node: NodeId,
        provider: &str,
        address: IpAddr,
    ) -> Option<crate::planner::CaptureRef<'_>> {
        let listing = || self.pools.iter().filter(|(_, p)| p.spec.provider == provider);
        let (pool, newest) = listing()
            .filter_map(|(name, p)| {
                let state = p.addresses.get(&address)?;
                state.confirmations.iter().find(|c| c.node == node).map(|c| (name, c))
            })
            .max_by_key(|(_, c)| c.at_ms)?;
        if !newest.acquired {
            return None;
        }
        let seen_gone = self
            .observed
            .get(provider)
            .and_then(|kept| kept.get(&address))
            .and_then(|kept| kept.get(&*newest.nic))
            .is_some_and(|(holds, at_ms)| !holds && *at_ms > newest.at_ms);
        let moves =
            self.providers.get(provider).is_some_and(|k| k.verb_family() == crate::model::VerbFamily::Cloud);
        let taken_since = moves
            && listing()
                .filter_map(|(_, p)| p.addresses.get(&address))
                .flat_map(|s| &s.confirmations)
                .any(|c| c.node != node && c.acquired && c.at_ms > newest.at_ms);
        (!seen_gone && !taken_since).then(|| crate::planner::CaptureRef {
            pool,
            nic: &newest.nic,
            capture_domain: &newest.capture_domain,
        })
    }

    /// One address the log says node `id` still holds ([`Self::confirmed_holding`]), as
    /// `pool/address`, if any: what a retirement would leave unreleased (`check_submit`).
    #[must_use]
    pub fn held_by_log(&self, id: NodeId) -> Option<String> {
        let provider = self.nodes.get(id as usize)?.spec.provider.as_str();
        self.pools
            .iter()
            .filter(|(_, p)| p.spec.provider == provider)
            .flat_map(|(name, p)| {
                p.addresses
                    .iter()
                    .filter(|(_, s)| s.confirmations.iter().any(|c| c.node == id && c.acquired))
                    .map(move |(address, _)| (name, *address))
            })
            .find(|(name, address)| {
                self.confirmed_holding(id, provider, *address).is_some_and(|held| held.pool == name.as_str())
            })
            .map(|(name, address)| format!("{name}/{address}"))
    }

    /// Whether `nic` is the NIC of a node of `provider`.
    fn is_node_nic(&self, provider: &str, nic: &str) -> bool {
        self.nodes.iter().any(|n| n.spec.provider == provider && n.spec.nic == nic)
    }

    /// Whether inventory drives repair (and observed holdings count as captured for releases).
    #[must_use]
    pub fn drift_repair(&self) -> bool {
        self.drift_repair
    }

    /// How many re-captures drift repair triggered.
    #[must_use]
    pub fn recaptures(&self) -> u64 {
        self.recaptures
    }

    /// Records a confirmed holding verb.
    pub(super) fn confirm(&mut self, node: &str, key: &str, at_ms: u64) {
        let Some(parsed) = crate::model::ParsedKey::parse(key) else { return };
        if !parsed.verb.changes_holding() {
            return;
        }
        let acquired = parsed.verb.is_acquire();
        let node_id = self.node_ids[node];
        if parsed.holder != node {
            return;
        }
        let Some(pool) = self.pools.get_mut(&parsed.pool) else { return };
        let domain = pool.capture_domain.clone();
        let Some(state) = pool.addresses.get_mut(&parsed.address) else { return };
        // A release the desired holder executed in its own current epoch: only a release made
        // on the host's own authority, outside the gate (SPEC 7: `onprem` under `authority:
        // vrrp`, keepalived said not MASTER), is that — the planner never releases the desired
        // holder, and the gate refuses it (`release-of-current`). The holder holds nothing now
        // and its acquire of this epoch is executed already, so without a new epoch it would
        // never add the address again (a demotion that never reached the log: a flap collapsed,
        // an agent killed before its append). With drift repair on, a re-capture: a fresh epoch
        // and fresh actions, through the same planner and gate (refused locally while the host
        // is still not MASTER).
        let node_domain = crate::model::CaptureDomain::new(
            &parsed.provider,
            &self.nodes[node_id as usize].spec.placement_group,
        );
        let released_by_holder = !acquired
            && self.drift_repair
            && state.active
            && state.line.desired_holder == Some(node_id)
            && parsed.capture_epoch == state.line.epoch
            && domain == node_domain;
        if released_by_holder {
            self.touched.recapture(&parsed.pool, &domain, parsed.address, state);
            self.recaptures += 1;
        }
        let confirmation = Confirmation {
            node: node_id,
            capture_domain: node_domain,
            nic: crate::names::shared(&parsed.nic),
            capture_epoch: parsed.capture_epoch,
            acquired,
            at_ms,
        };
        match state.confirmations.iter_mut().find(|c| c.node == node_id) {
            // A late or duplicated result never overrides a newer confirmation.
            Some(existing) if existing.at_ms > at_ms => {}
            Some(existing) => *existing = confirmation,
            None => crate::state::push_exact(&mut state.confirmations, confirmation),
        }
        // What the log says the node holds counts as captured when its journal has no record
        // (`Federation::confirmed_holding`): the node's release of the address may change.
        self.plan_changed(&parsed.provider, parsed.address);
    }

    /// Whether an acquire may have outrun a hand-over of `address` in `pool` (SPEC 9): the
    /// desired holder has confirmed its acquire in the current epoch, and another node's last
    /// confirmation is an acquire reported at or after the desired holder moved away from it — a
    /// call that was still under way when the view moved (a throttled, retried assign; a call
    /// that escaped cancellation). On a provider whose assign moves the address
    /// (`AllowReassignment`), that call may have taken it from the desired holder after its
    /// confirmation. Only inventory can tell; the runtime reads the provider's at once, and the
    /// drift rule (a later observation contradicting the confirmation) decides. The two
    /// confirmations may reach the log in either order: asked after either is applied, this
    /// answers the same.
    #[must_use]
    pub fn acquire_outran_handover(&self, pool: &str, address: IpAddr) -> bool {
        let Some(pool_state) = self.pools.get(pool) else { return false };
        let Some(state) = pool_state.addresses.get(&address) else { return false };
        let Some(desired) = state.line.desired_holder.filter(|_| state.active) else { return false };
        let domain = &pool_state.capture_domain;
        let holder_confirmed = state.confirmations.iter().any(|c| {
            c.node == desired
                && c.acquired
                && c.capture_epoch == state.line.epoch
                && c.capture_domain == *domain
        });
        holder_confirmed
            && state.confirmations.iter().any(|c| {
                c.node != desired
                    && c.acquired
                    && state.moved_away_from(c.node).is_some_and(|moved_ms| c.at_ms >= moved_ms)
            })
    }

    /// Applies an `inventory` event: the drift rule, then the observation is kept if a pool of
    /// the provider (applied or deleted) has ever listed the address — so what is kept is
    /// bounded by the address states the federation keeps anyway for their tokens (times the
    /// provider's NICs), and a junk inventory of an unknown address leaves nothing behind.
    ///
    /// `scope`: the NICs the read could see (`None`: the provider's whole view). Each NIC the
    /// read speaks of — its scope; for a whole view every NIC — is updated unless a newer
    /// observation of it is kept.
    pub(super) fn observe_inventory(
        &mut self,
        provider: &str,
        address: IpAddr,
        holders: &[String],
        scope: Option<&[String]>,
        at_ms: u64,
    ) {
        self.repair_drift(provider, address, holders, scope, at_ms);
        // What a NIC shows counts as captured: every node's release of it may change.
        self.plan_changed(provider, address);
        let listed =
            self.pools.values().any(|p| p.spec.provider == provider && p.addresses.contains_key(&address));
        if !listed {
            return;
        }
        let node_nics = self.node_nics(provider);
        let kept = self.observed.entry(provider.to_owned()).or_default().entry(address).or_default();
        record(kept, &node_nics, holders, scope, at_ms);
    }

    /// The NICs of `provider`'s nodes.
    pub(super) fn node_nics(&self, provider: &str) -> Vec<String> {
        self.nodes.iter().filter(|n| n.spec.provider == provider).map(|n| n.spec.nic.clone()).collect()
    }

    /// Whether an inventory read that found `holders` for `address` on `provider` (seeing only
    /// the NICs of `scope`, when given) tells the log anything new: nothing was observed of the
    /// address yet, or for some NIC the read speaks of, what it found differs from the latest
    /// observation of that NIC, or that observation does not come strictly after the newest
    /// confirmation of the address (the drift rule reads only observations strictly after the
    /// confirmation they would contradict). The agent appends only such reads: one event per
    /// change, not per read.
    #[must_use]
    pub fn inventory_is_news(
        &self,
        provider: &str,
        address: IpAddr,
        holders: &[String],
        scope: Option<&[String]>,
    ) -> bool {
        let Some(kept) = self.observed.get(provider).and_then(|kept| kept.get(&address)) else {
            return true;
        };
        let newest_confirmation = self
            .pools
            .values()
            .filter(|pool| pool.spec.provider == provider)
            .filter_map(|pool| pool.addresses.get(&address))
            .flat_map(|state| &state.confirmations)
            .map(|c| c.at_ms)
            .max();
        let covered: Vec<&String> = match scope {
            Some(scope) => scope.iter().collect(),
            None => kept.keys().chain(holders).collect(),
        };
        covered.into_iter().any(|nic| {
            let held = holders.contains(nic);
            match kept.get(nic) {
                None => held || self.is_node_nic(provider, nic),
                Some((was, at)) => *was != held || newest_confirmation.is_some_and(|c| c >= *at),
            }
        })
    }

    /// How many addresses have inventory observations kept (bounded by the applied pools'
    /// addresses).
    #[must_use]
    pub fn observations_kept(&self) -> usize {
        self.observed.values().map(BTreeMap::len).sum()
    }

    /// Applies the drift rule to every applied pool of `provider` that lists `address`. A
    /// re-capture moves the line once, at the end of the event, like every token.
    /// A scoped read (`scope`) judges only the NICs it could see: the desired holder has lost
    /// the address only if its NIC is in the scope.
    fn repair_drift(
        &mut self,
        provider: &str,
        address: IpAddr,
        holders: &[String],
        scope: Option<&[String]>,
        at_ms: u64,
    ) {
        let holder_nodes: Vec<Option<NodeId>> = holders
            .iter()
            .map(|nic| {
                self.nodes
                    .iter()
                    .position(|n| n.spec.provider == provider && n.spec.nic == *nic)
                    .map(crate::state::node_id_of)
            })
            .collect();
        // Which nodes' NICs the read could see.
        let seen: Vec<bool> =
            self.nodes.iter().map(|n| scope.is_none_or(|scope| scope.contains(&n.spec.nic))).collect();
        for (name, pool) in self.pools.iter_mut().filter(|(_, p)| p.spec.provider == provider) {
            let domain = &pool.capture_domain;
            let Some(state) = pool.addresses.get_mut(&address) else { continue };
            let desired = state.line.desired_holder.filter(|_| state.active);
            let confirmation_of = |node: NodeId| state.confirmations.iter().find(|c| c.node == node);
            let lost = desired.and_then(confirmation_of).is_some_and(|c| {
                c.acquired
                    && c.capture_epoch == state.line.epoch
                    && c.capture_domain == *domain
                    && at_ms > c.at_ms
                    && !holder_nodes.contains(&desired)
                    && desired.is_some_and(|node| seen[node as usize])
            });
            // A node's NIC that holds the address although that node ran its release in the
            // current epoch: only a new epoch can release it again. Any other holding by a
            // node that is not the desired holder needs no new epoch (its release is planned in
            // this one from the observation, `planner`), and an unknown NIC is no node's to
            // release (reported, and on a single-assignment provider the desired holder's loss
            // is `lost`).
            let foreign = holder_nodes.iter().flatten().any(|node| {
                Some(*node) != desired
                    && confirmation_of(*node).is_some_and(|c| {
                        !c.acquired
                            && c.capture_epoch == state.line.epoch
                            && c.capture_domain == *domain
                            && at_ms > c.at_ms
                    })
            });
            if lost || foreign {
                self.touched.recapture(name, domain, address, state);
                self.recaptures += 1;
            }
        }
    }
}
