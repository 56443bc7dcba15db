//! The level-triggered planner (SPEC 5): from the node's view of the log and what it has
//! captured, the acquire and release sets, every reconcile, from scratch. No edge logic and no
//! cancel: re-desiring an address takes it out of the release set and moves its captureEpoch on,
//! which makes every older action stale at the gate.

use std::net::IpAddr;
use std::ops::Bound;
use std::sync::Arc;

use crate::federation::{Federation, NodeId};
use crate::journal::{JournalEntry, JournalSeq};
use crate::model::{ActionStamp, Approval, CaptureDomain, ProviderAddress, StampedAction, VerbFamily};

/// A planned action and how it is to be imported. Borrowed from the view (and the node's
/// captured set): see [`ActionStamp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedAction<'a> {
    /// The stamp.
    pub stamp: ActionStamp<'a>,
    /// The pool's approval mode.
    pub approval: Approval,
}

/// What a node's journal says of each (provider, address) it executed a verb of: its last
/// executed entry and its last executed entry that changed holding (assign/unassign, proxy-ARP
/// add/del). One map for the two (a node holding a million addresses kept three maps of a
/// million keys): what "captured" is, what the outbox of results and the announcements walk, and
/// what compaction keeps. Read as "what a node captured" ([`Captured::get`],
/// [`Captured::iter`]...) by the planner and everyone else; written only by the node's engine,
/// from its executed entries.
///
/// Captured — SPEC 13: a NIC holds an address, not a pool's copy of it — is "the last executed
/// verb for the address on that provider, in any pool, was an acquire verb"; that entry's action
/// holds what the release needs (the pool, the NIC and the line of the acquire it undoes). The
/// map shares the last executed entry with the journal (an executed entry never changes again,
/// and compaction keeps it): no copy of its names.
#[derive(Clone, Debug, Default)]
pub struct Captured {
    /// Filled in address order as a capture goes: chunks, not a half-full B-tree
    /// ([`crate::chunked_map`]).
    by_address: crate::chunked_map::ChunkedMap<ProviderAddress, Executed>,
}

/// One (provider, address) of [`Captured`].
#[derive(Clone, Debug)]
struct Executed {
    /// The last executed entry, shared with the journal.
    last: Arc<JournalEntry>,
    /// The last executed entry that changed holding ([`JournalSeq::NONE`]: none).
    holding: JournalSeq,
}

impl Executed {
    /// The acquire the address is captured by: the last executed entry's action, when its verb
    /// is an acquire verb.
    fn capture(&self) -> Option<&StampedAction> {
        Some(&self.last.action).filter(|action| action.verb.is_acquire())
    }
}

impl Captured {
    /// Nothing captured, nothing executed.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The capture of (provider, address), if the node's last executed verb for it is an acquire.
    #[must_use]
    pub fn get(&self, at: &ProviderAddress) -> Option<&StampedAction> {
        self.by_address.get(at)?.capture()
    }

    /// The capture of (provider, address) with the key as kept.
    #[must_use]
    pub fn get_key_value(&self, at: &ProviderAddress) -> Option<(&ProviderAddress, &StampedAction)> {
        let (key, executed) = self.by_address.get_key_value(at)?;
        Some((key, executed.capture()?))
    }

    /// Whether (provider, address) is captured.
    #[must_use]
    pub fn contains_key(&self, at: &ProviderAddress) -> bool {
        self.get(at).is_some()
    }

    /// The captured (provider, address) keys and the actions that captured them, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&ProviderAddress, &StampedAction)> + '_ {
        self.by_address.iter().filter_map(|(at, executed)| Some((at, executed.capture()?)))
    }

    /// The captured (provider, address) keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &ProviderAddress> + '_ {
        self.iter().map(|(at, _)| at)
    }

    /// Every (provider, address) the node executed a verb of, from `from` on, in key order, with
    /// its capture when it is captured. A walk bounded in work counts each: a released one
    /// stays here (its last executed entry is kept), and a node that gave most of its addresses
    /// away would otherwise walk all of them to find `max` captured ones.
    pub fn executed_from(
        &self,
        from: Bound<ProviderAddress>,
    ) -> impl Iterator<Item = (&ProviderAddress, Option<&StampedAction>)> + '_ {
        self.by_address
            .range::<ProviderAddress, _>((from, Bound::Unbounded))
            .map(|(at, executed)| (at, executed.capture()))
    }

    /// How many are captured (a walk: for tests and reports, not for a step).
    #[must_use]
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// Whether nothing is captured.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// The last executed entry of (provider, address).
    #[must_use]
    pub(crate) fn last_executed(&self, at: &ProviderAddress) -> Option<JournalSeq> {
        self.by_address.get(at).map(|executed| executed.last.seq)
    }

    /// The last executed entry of (provider, address) that changed holding.
    #[must_use]
    pub(crate) fn last_holding(&self, at: &ProviderAddress) -> Option<JournalSeq> {
        self.by_address.get(at).map(|executed| executed.holding).filter(|seq| *seq != JournalSeq::NONE)
    }

    /// Every (provider, address) with a last executed holding entry, from `window`'s start, in
    /// key order, with that entry.
    pub(crate) fn holding_in(
        &self,
        window: KeyWindow,
    ) -> impl Iterator<Item = (&ProviderAddress, JournalSeq)> + '_ {
        self.by_address
            .range::<ProviderAddress, _>(window)
            .filter(|(_, executed)| executed.holding != JournalSeq::NONE)
            .map(|(at, executed)| (at, executed.holding))
    }

    /// Records `entry`, executed (it never changes again): the last executed of its (provider,
    /// address); the last holding one too when its verb changes holding; captured by an acquire
    /// verb, released by any other.
    pub(crate) fn record_execution(&mut self, entry: &Arc<JournalEntry>) {
        let action = &entry.action;
        let holding = if action.verb.changes_holding() { entry.seq } else { JournalSeq::NONE };
        let executed = self.by_address.get_or_insert_with((action.provider.clone(), action.address), || {
            Executed { last: Arc::clone(entry), holding }
        });
        executed.last = Arc::clone(entry);
        if holding != JournalSeq::NONE {
            executed.holding = holding;
        }
    }

    /// Forgets everything (a restart rebuilds it from the journal).
    pub(crate) fn clear(&mut self) {
        self.by_address = crate::chunked_map::ChunkedMap::new();
    }
}

/// A node's plan.
#[derive(Clone, Debug, Default)]
pub struct Plan<'a> {
    /// The actions, in canonical order (pool, address), each address's verbs in execution order.
    pub actions: Vec<PlannedAction<'a>>,
    /// Every release held back by its pool's deprovision hold, with when it becomes due: (due,
    /// provider, address), the position to plan again then.
    pub held: Vec<(u64, &'a str, IpAddr)>,
}

impl Plan<'_> {
    /// The earliest stream time at which a release held back becomes due: planning again before
    /// it (with nothing else changed) gives the same plan.
    #[must_use]
    pub fn wake_at_ms(&self) -> Option<u64> {
        self.held.iter().map(|(due, _, _)| *due).min()
    }
}

/// A capture record's fields, borrowed: from a node's captured set, from what the provider
/// showed on its NIC (drift repair), or from the log's confirmation of its acquire (the phase,
/// [`Federation::address_status`]).
#[derive(Clone, Copy, Debug)]
pub struct CaptureRef<'a> {
    /// Pool of the acquire.
    pub pool: &'a str,
    /// NIC of the acquire: the release is stamped with it, not with the node's NIC now.
    pub nic: &'a str,
    /// Epoch line of the acquire.
    pub capture_domain: &'a CaptureDomain,
}

/// A node's release of an address it captured ([`release_plan`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Release<'a> {
    /// Held back by the pool's deprovision hold until stream time `due_ms`: nothing is planned
    /// yet (so nothing waits for an approval).
    Held {
        /// When the hold ends.
        due_ms: u64,
    },
    /// Due: the release verbs, in execution order, as the planner plans them.
    Due(Vec<PlannedAction<'a>>),
}

/// Plans node `node`'s actions from `view` (its applied prefix of the log), in canonical order
/// (pool, address), each address's verbs in execution order. A captured address that the node is
/// now the desired holder of on the same provider, through any applied pool, is not released;
/// when a release is due and how it is stamped is [`release_plan`]. The whole walk of
/// [`plan_slice`], in one slice.
#[must_use]
pub fn plan<'a>(view: &'a Federation, node: NodeId, captured: &'a Captured) -> Plan<'a> {
    plan_slice(view, node, captured, &PlanCursor::default(), usize::MAX).0
}

/// Where a walk of [`plan_slice`] stands: before a position, or done.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum Walk {
    /// At the first position.
    #[default]
    Start,
    /// At this key (the next to visit).
    At(crate::names::Name, IpAddr),
    /// Every position visited.
    Done,
}

impl Walk {
    /// The lower bound of what is left to visit, `None` when nothing is.
    fn from(&self) -> Option<Bound<ProviderAddress>> {
        match self {
            Self::Start => Some(Bound::Unbounded),
            Self::At(name, address) => Some(Bound::Included((name.clone(), *address))),
            Self::Done => None,
        }
    }
}

/// A window of (provider, address) keys: what a slice of the captured walk visited.
pub type KeyWindow = (Bound<ProviderAddress>, Bound<ProviderAddress>);

/// Where the next [`plan_slice`] resumes: in the walk over every pool's addresses (its
/// acquires, and what drift repair saw on the node's NIC) and in the walk over the node's
/// captured set (its releases). `Default`: both at their start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanCursor {
    pools: Walk,
    captured: Walk,
}

impl PlanCursor {
    /// Whether both walks are done: the slices since the start planned every position once.
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.pools == Walk::Done && self.captured == Walk::Done
    }

    /// The (provider, address) keys of the captured walk a slice from `self` to `next` visited;
    /// `None`: none (the walk was done).
    #[must_use]
    pub fn captured_window(&self, next: &Self) -> Option<KeyWindow> {
        let from = self.captured.from()?;
        let to = match &next.captured {
            Walk::At(provider, address) => Bound::Excluded((provider.clone(), *address)),
            Walk::Start | Walk::Done => Bound::Unbounded,
        };
        Some((from, to))
    }
}

/// A slice of node `node`'s plan: what [`plan`] plans for the next `max` (pool, address)
/// positions of the walk over every pool (including deleted pools and retired addresses: drift
/// repair may release those) and the next `max` entries of its captured set, from `cursor`, in
/// [`plan`]'s order within the slice; and where the next slice resumes. The slices from the start until
/// [`PlanCursor::is_done`], over one unchanged view and captured set, plan exactly what one
/// [`plan`] does (the requeue's safety net, bounded in work per step: `tests/plan_slices.rs`);
/// each position's plan depends on the view and that position alone. The slice's `held`
/// lists the releases it holds back, with their due times.
#[must_use]
pub fn plan_slice<'a>(
    view: &'a Federation,
    node: NodeId,
    captured: &'a Captured,
    cursor: &PlanCursor,
    max: usize,
) -> (Plan<'a>, PlanCursor) {
    debug_assert!(max > 0, "a slice of nothing never moves on");
    let node_state = &view.nodes()[node as usize];
    let node_name = node_state.spec.name.as_str();
    let provider = node_state.spec.provider.as_str();
    let mut planned: Vec<((&'a str, IpAddr), Vec<PlannedAction<'a>>)> = Vec::new();
    let mut observed_only: Vec<((&'a str, IpAddr), CaptureRef<'a>)> = Vec::new();
    let mut next = PlanCursor { pools: Walk::Done, captured: Walk::Done };

    if let Some(from) = cursor.pools.from() {
        let (first_pool, first_address) = match &from {
            Bound::Included((pool, address)) => (Bound::Included(&**pool), Some((&**pool, *address))),
            _ => (Bound::Unbounded, None),
        };
        let mut visited = 0_usize;
        'pools: for (pool_name, pool) in view.pools().range::<str, _>((first_pool, Bound::Unbounded)) {
            let lower = match first_address {
                Some((first, address)) if first == pool_name => Bound::Included(address),
                _ => Bound::Unbounded,
            };
            for (address, state) in pool.addresses.range((lower, Bound::Unbounded)) {
                if visited == max {
                    next.pools = Walk::At(crate::names::shared(pool_name), *address);
                    break 'pools;
                }
                visited += 1;
                if let Some(actions) = acquires(view, node, node_name, pool_name, pool, *address, state) {
                    planned.push(((pool_name.as_str(), *address), actions));
                }
                let first_listing = || {
                    !view
                        .pools()
                        .range::<str, _>((Bound::Unbounded, Bound::Excluded(pool_name.as_str())))
                        .any(|(_, p)| p.spec.provider == provider && p.addresses.contains_key(address))
                };
                observed_only.extend(observed_release(
                    view,
                    node,
                    captured,
                    (pool_name, pool),
                    (*address, state),
                    first_listing,
                ));
            }
        }
    }

    let mut captured_slice: Vec<((&'a str, IpAddr), CaptureRef<'a>)> = Vec::new();
    if let Some(from) = cursor.captured.from() {
        for (visited, ((record_provider, address), record)) in captured.executed_from(from).enumerate() {
            if visited == max {
                next.captured = Walk::At(record_provider.clone(), *address);
                break;
            }
            let Some(record) = record else { continue };
            let record =
                CaptureRef { pool: &record.pool, nic: &record.nic, capture_domain: &record.capture_domain };
            captured_slice.push(((&**record_provider, *address), record));
        }
    }

    (finish(view, node, planned, captured_slice.into_iter().chain(observed_only)), next)
}

/// A plan's end: the releases of `releases` (what the node captured, as [`release_plan`] rules:
/// due ones planned, held ones listed with their due time) joined to `planned` (the acquires), in
/// canonical order (pool, address).
fn finish<'a>(
    view: &'a Federation,
    node: NodeId,
    mut planned: Vec<((&'a str, IpAddr), Vec<PlannedAction<'a>>)>,
    releases: impl IntoIterator<Item = ((&'a str, IpAddr), CaptureRef<'a>)>,
) -> Plan<'a> {
    let mut held = Vec::new();
    for ((provider, address), record) in releases {
        match release_plan(view, node, provider, address, record) {
            None => {}
            Some(Release::Held { due_ms }) => held.push((due_ms, provider, address)),
            Some(Release::Due(actions)) => planned.push(((record.pool, address), actions)),
        }
    }
    planned.sort_by(|a, b| a.0.cmp(&b.0));
    Plan { actions: planned.into_iter().flat_map(|(_, actions)| actions).collect(), held }
}

/// Node `node`'s plan of the positions of `keys` alone — (provider, address) keys, as
/// [`Federation::take_plan_changes`] names them: for each, the acquires of every pool of the
/// provider that lists the address, and the release of what the node captured of it (or, with
/// drift repair, what its NIC showed) — in [`plan`]'s order. What [`plan`] plans for those
/// positions, and nothing else: incremental planning (`tests/plan_changes.rs`). Costs the pools
/// per key, not the addresses.
#[must_use]
pub fn plan_keys<'a, 'k>(
    view: &'a Federation,
    node: NodeId,
    captured: &'a Captured,
    keys: impl IntoIterator<Item = &'k ProviderAddress>,
) -> Plan<'a> {
    let node_state = &view.nodes()[node as usize];
    let node_name = node_state.spec.name.as_str();
    let mut planned: Vec<((&'a str, IpAddr), Vec<PlannedAction<'a>>)> = Vec::new();
    let mut releases: Vec<((&'a str, IpAddr), CaptureRef<'a>)> = Vec::new();
    for (provider, address) in keys {
        let address = *address;
        let mut first_listing = true;
        for (pool_name, pool) in view.pools() {
            if *pool.spec.provider != **provider {
                continue;
            }
            let Some(state) = pool.addresses.get(&address) else { continue };
            if let Some(actions) = acquires(view, node, node_name, pool_name, pool, address, state) {
                planned.push(((pool_name.as_str(), address), actions));
            }
            // The pools are walked by name: the first that lists it here is the first by name.
            let first = std::mem::take(&mut first_listing);
            releases.extend(observed_release(
                view,
                node,
                captured,
                (pool_name, pool),
                (address, state),
                || first,
            ));
        }
        if let Some(((record_provider, _), record)) = captured.get_key_value(&(provider.clone(), address)) {
            let record =
                CaptureRef { pool: &record.pool, nic: &record.nic, capture_domain: &record.capture_domain };
            releases.push(((&**record_provider, address), record));
        }
    }
    finish(view, node, planned, releases)
}

/// What counts as captured beside the node's journal (its `captured` set), when the journal has
/// no record of the address: with drift repair on, what the provider last showed on the node's
/// NIC (a call that landed while the node crashed before recording it must still be released),
/// once per (provider, address), through the first pool (by name) of the provider that lists the
/// address (`first_listing` says whether `pool` is that one; asked last: it may walk pools); else
/// what the log says the node holds, its newest confirmation of the address being an acquire
/// ([`Federation::confirmed_holding`]: a router rebuilt on an empty store still releases what it
/// held), through the pool of that confirmation. The one rule for [`plan_slice`] and
/// [`plan_keys`]; for an address the node never confirmed or saw, two lookups.
fn observed_release<'a>(
    view: &'a Federation,
    node: NodeId,
    captured: &Captured,
    (pool_name, pool): (&'a str, &'a crate::state::PoolState),
    (address, state): (IpAddr, &crate::state::AddressState),
    first_listing: impl FnOnce() -> bool,
) -> Option<((&'a str, IpAddr), CaptureRef<'a>)> {
    let node_state = &view.nodes()[node as usize];
    let provider = node_state.spec.provider.as_str();
    if pool.spec.provider != provider {
        return None;
    }
    let observed = view.drift_repair() && view.observed_on(provider, address, &node_state.spec.nic);
    let confirmed_here = || state.confirmations.iter().any(|c| c.node == node && c.acquired);
    if !observed && !confirmed_here() {
        return None;
    }
    if captured.contains_key(&(crate::names::shared(provider), address)) {
        return None;
    }
    if observed {
        let record =
            CaptureRef { pool: pool_name, nic: &node_state.spec.nic, capture_domain: &pool.capture_domain };
        return first_listing().then_some(((provider, address), record));
    }
    view.confirmed_holding(node, provider, address)
        .filter(|record| record.pool == pool_name)
        .map(|record| ((provider, address), record))
}

/// Node `node`'s acquire of `address` in `pool`, in execution order, when it is the address's
/// desired holder there (the pool applied and the address active); `None` otherwise.
fn acquires<'a>(
    view: &'a Federation,
    node: NodeId,
    node_name: &'a str,
    pool_name: &'a str,
    pool: &'a crate::state::PoolState,
    address: IpAddr,
    state: &'a crate::state::AddressState,
) -> Option<Vec<PlannedAction<'a>>> {
    if pool.deleted || !state.active || state.line.desired_holder != Some(node) {
        return None;
    }
    let kind = view.provider_kind(&pool.spec.provider)?;
    let node_state = &view.nodes()[node as usize];
    let actions = kind
        .verb_family()
        .acquire_verbs()
        .iter()
        .map(|verb| PlannedAction {
            stamp: ActionStamp {
                pool: pool_name,
                address,
                verb: *verb,
                holder: node_name,
                provider: &pool.spec.provider,
                nic: &node_state.spec.nic,
                capture_domain: &pool.capture_domain,
                capture_epoch: state.line.epoch,
                ownership_epoch: state.ownership_epoch,
            },
            approval: pool.spec.approval,
        })
        .collect();
    Some(actions)
}

/// Node `node`'s release of `address` on `provider`, captured as `record` says — the one rule
/// for when a release is due and how it is stamped, read by the planner and by the phase
/// ([`Federation::address_status`]), so the phase's `pending-approval` names the keys the node
/// plans. `None` when nothing is released: the node is the desired holder of the address on the
/// provider through any applied pool, or the record's pool or address is unknown to the view.
/// Where [`VerbFamily::release_is_held`] (not on the on-prem family: SPEC 13), the release waits
/// out the pool's deprovision hold from when the desired holder last moved away from the node.
/// Stamped with the record's pool, NIC and line (at that line's current epoch) and the address's
/// ownershipEpoch.
#[must_use]
pub fn release_plan<'a>(
    view: &'a Federation,
    node: NodeId,
    provider: &'a str,
    address: IpAddr,
    record: CaptureRef<'a>,
) -> Option<Release<'a>> {
    if view.desired_pool_of(node, provider, address).is_some() {
        return None;
    }
    let pool = view.pools().get(record.pool)?;
    let state = pool.addresses.get(&address)?;
    let family = view.provider_kind(provider).map_or(VerbFamily::Cloud, |k| k.verb_family());
    if family.release_is_held()
        && let Some(moved_ms) = state.moved_away_from(node)
    {
        let due_ms = moved_ms.saturating_add(pool.spec.deprovision_hold_ms);
        if view.stream_time_ms() < due_ms {
            return Some(Release::Held { due_ms });
        }
    }
    let holder = view.nodes()[node as usize].spec.name.as_str();
    let capture_epoch = view.capture_epoch(record.pool, address, record.capture_domain);
    let actions = family
        .release_verbs()
        .iter()
        .map(|verb| PlannedAction {
            stamp: ActionStamp {
                pool: record.pool,
                address,
                verb: *verb,
                holder,
                provider,
                nic: record.nic,
                capture_domain: record.capture_domain,
                capture_epoch,
                ownership_epoch: state.ownership_epoch,
            },
            approval: pool.spec.approval,
        })
        .collect();
    Some(Release::Due(actions))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{action_of_a, view_of_a};
    use crate::model::Verb;

    fn executed(captured: &mut Captured, seq: u64, last: u8, verb: Verb) {
        let action = action_of_a("p", IpAddr::from([10, 0, 0, last]), verb);
        let entry = crate::journal::JournalEntry {
            seq: JournalSeq::new(seq),
            action,
            state: crate::journal::EntryState::Executed,
            detail: None,
            executed_seq: std::num::NonZeroU64::new(seq),
            attempts: crate::journal::Attempts::default(),
        };
        captured.record_execution(&Arc::new(entry));
    }

    /// A node that gave most of its addresses away keeps their last executed entries: a slice of
    /// the captured walk counts each (provider, address) it passes, released or not, so that a
    /// slice's work stays bounded by `max` (a slice once walked every released one to find `max`
    /// captured ones).
    #[test]
    fn a_slice_of_the_captured_walk_counts_the_released_addresses_it_passes() {
        let view = view_of_a();
        let node = view.node_id("a").expect("registered");
        let mut captured = Captured::new();
        for last in 1..=6 {
            executed(&mut captured, u64::from(last), last, Verb::UnassignSecondaryIp);
        }
        executed(&mut captured, 7, 7, Verb::AssignSecondaryIp);
        assert_eq!(captured.len(), 1, "one captured of seven executed");
        let (mut cursor, mut slices) = (PlanCursor::default(), 0);
        while !cursor.is_done() {
            cursor = plan_slice(&view, node, &captured, &cursor, 1).1;
            slices += 1;
            assert!(slices <= 10, "the walk ends");
        }
        assert_eq!(slices, 7, "one executed address a slice");
    }
}
