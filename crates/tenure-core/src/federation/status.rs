//! Where each address is in its hand-over, from the log alone: who holds it by the results and
//! inventories the log carries, and a phase — what `tenure ownership`, `GET /v1/ownership`, the
//! replay report and the status page show beside the arbitrated owner (which says who *should*
//! hold an address, not who does).

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::{Federation, NodeId};
use crate::model::{ActionStamp, Approval, CaptureDomain, CaptureEpoch, Verb};
use crate::planner::{self, CaptureRef, Release};
use crate::state::{AddressState, Confirmation, PoolState};

/// An address's phase, derived from the view: the desired holder, the nodes' last confirmed
/// holding verbs (`action-result: executed`), and the pool's approval mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// An action of the hand-over waits for an operator's approval (`approval: manual`): the
    /// desired holder's first acquire verb, or, once that is confirmed, a later one
    /// (enable-forwarding, garp) without which the address is not in service; or, once the
    /// desired holder is not acquiring, the due release of a node that still holds it.
    PendingApproval,
    /// Desired for a node that has not confirmed its acquire in the current epoch.
    Acquiring,
    /// The desired holder confirmed its acquire in the current epoch, and no other node's last
    /// confirmation is an acquire.
    Held,
    /// The desired holder holds it (or none is desired), and another node's last confirmation is
    /// still an acquire: its release is held back by the pool's deprovision hold, or due and
    /// approved (or its pool approves automatically).
    Releasing,
    /// Not desired for anyone, and no node's last confirmation is an acquire.
    Released,
}

impl Phase {
    /// Every phase, in hand-over order.
    pub const ALL: [Phase; 5] =
        [Phase::PendingApproval, Phase::Acquiring, Phase::Held, Phase::Releasing, Phase::Released];

    /// The wire name (`pending-approval`, `acquiring`, `held`, `releasing`, `released`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PendingApproval => "pending-approval",
            Self::Acquiring => "acquiring",
            Self::Held => "held",
            Self::Releasing => "releasing",
            Self::Released => "released",
        }
    }
}

/// One address's hand-over, as the log tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddressStatus {
    /// Its phase.
    pub phase: Phase,
    /// The nodes whose last confirmed holding verb for it is an acquire, in node order.
    pub holders: Vec<NodeId>,
    /// The NICs holding it, whichever pool's acquire put it there (a NIC holds an address, not a
    /// pool's copy of it: SPEC 13): the NICs of the nodes that hold it by any pool of the
    /// provider ([`Federation::holders_of`] of each), and, with drift repair on, every NIC the
    /// latest inventory of the provider showed holding it (an unknown NIC included), sorted. So
    /// every row of one address shows the same NICs.
    pub nics: Vec<String>,
}

/// What a leaving holder's release means for an address's phase ([`Federation::phase`]).
enum ReleaseWait {
    /// Due, and a verb of it waits for an approval.
    Approval,
    /// Held back until this stream time.
    HeldUntil(u64),
    /// Neither: it runs (or nothing is planned).
    None,
}

impl Federation {
    /// The hand-over state of `address` in `pool` (applied or deleted); `None` when the pool
    /// never listed it.
    #[must_use]
    pub fn address_status(&self, pool: &str, address: IpAddr) -> Option<AddressStatus> {
        let pool_state = self.pools().get(pool)?;
        let state = pool_state.addresses.get(&address)?;
        let holders = self.holders_of(pool, pool_state, address, state);
        let nics = self.nics_holding(pool, &pool_state.spec.provider, address, &holders);
        let (phase, _) = self.phase(pool, pool_state, address, state, &holders);
        Some(AddressStatus { phase, holders, nics })
    }

    /// The NICs holding `address` on `provider`, by any pool's holders and the provider's latest
    /// inventory ([`AddressStatus::nics`]), sorted; `holders` are `pool`'s, which the caller has.
    #[must_use]
    pub fn nics_holding(
        &self,
        pool: &str,
        provider: &str,
        address: IpAddr,
        holders: &[NodeId],
    ) -> Vec<String> {
        let nic = |node: NodeId| self.nodes()[node as usize].spec.nic.clone();
        let mut nics: BTreeSet<String> = holders.iter().map(|node| nic(*node)).collect();
        let others =
            self.pools().iter().filter(|(name, p)| name.as_str() != pool && p.spec.provider == provider);
        for (name, pool_state) in others {
            let Some(state) = pool_state.addresses.get(&address) else { continue };
            nics.extend(self.holders_of(name, pool_state, address, state).into_iter().map(nic));
        }
        if let Some(observed) = self.observed_holders(provider, address) {
            nics.extend(observed.into_iter().map(str::to_owned));
        }
        nics.into_iter().collect()
    }

    /// The nodes whose last confirmed holding verb for the address in `pool` is an acquire, in
    /// node order. A pool that no longer lists the address (deleted, or it left the spec) leaves
    /// out a node that has since confirmed a holding verb of the same address, on the same
    /// provider, NIC and capture domain, for another pool: a NIC holds an address, not a pool's
    /// copy of it (SPEC 13), so a renamed pool (deleted, its addresses applied again under another
    /// name) stops showing the old holding once the new pool's acquire or release is confirmed.
    /// Before, the old pool's row said `releasing … HELD-BY` for ever once the new pool released
    /// the address (an operator trial), since no release names the old pool. A pool that lists
    /// the address shows its own confirmations as they are. What reads this: the map, `tenure
    /// status`, and `tenure approve` of a release this agent does not run (for the old pool none
    /// is planned: the holding is the new pool's). Drift repair and the outbox of results read each
    /// pool's own confirmations.
    pub(super) fn holders_of(
        &self,
        pool: &str,
        pool_state: &PoolState,
        address: IpAddr,
        state: &AddressState,
    ) -> Vec<NodeId> {
        let listed = !pool_state.deleted && state.active;
        let mut holders: Vec<NodeId> = state
            .confirmations
            .iter()
            .filter(|c| c.acquired)
            .filter(|c| {
                listed || !self.confirmed_elsewhere_since(pool, &pool_state.spec.provider, address, c)
            })
            .map(|c| c.node)
            .collect();
        holders.sort_unstable();
        holders
    }

    /// Whether the node of `held` confirmed a holding verb of `address` on `provider`, on the same
    /// NIC and capture domain, for a pool other than `pool`, after `held`.
    fn confirmed_elsewhere_since(
        &self,
        pool: &str,
        provider: &str,
        address: IpAddr,
        held: &Confirmation,
    ) -> bool {
        self.pools()
            .iter()
            .filter(|(name, other)| name.as_str() != pool && other.spec.provider == provider)
            .filter_map(|(_, other)| other.addresses.get(&address))
            .flat_map(|state| &state.confirmations)
            .any(|c| {
                c.node == held.node
                    && c.nic == held.nic
                    && c.capture_domain == held.capture_domain
                    && c.at_ms > held.at_ms
            })
    }

    /// The address's phase, of its `holders` ([`Self::holders_of`]), and when stream time alone
    /// may change it: the earliest end of a leaving holder's release hold, after which that
    /// release may wait for an approval (`None`: no time changes it).
    pub(super) fn phase(
        &self,
        pool: &str,
        pool_state: &PoolState,
        address: IpAddr,
        state: &AddressState,
        holders: &[NodeId],
    ) -> (Phase, Option<u64>) {
        let desired = state.line.desired_holder.filter(|_| state.active && !pool_state.deleted);
        // A node that holds the address and should not: its release is what the phase waits
        // for, and under `approval: manual` it may wait for the operator.
        let releasing = || -> (Phase, Option<u64>) {
            let mut waits = false;
            let mut held_until: Option<u64> = None;
            for node in holders.iter().filter(|node| Some(**node) != desired) {
                match self.release_wait(pool, pool_state, address, state, *node) {
                    ReleaseWait::Approval => waits = true,
                    ReleaseWait::HeldUntil(due_ms) => {
                        held_until = Some(held_until.map_or(due_ms, |h| h.min(due_ms)))
                    }
                    ReleaseWait::None => {}
                }
            }
            (if waits { Phase::PendingApproval } else { Phase::Releasing }, held_until)
        };
        let Some(holder) = desired else {
            return if holders.is_empty() { (Phase::Released, None) } else { releasing() };
        };
        let confirmed = state.confirmations.iter().any(|c| {
            c.node == holder
                && c.acquired
                && c.capture_epoch == state.line.epoch
                && c.capture_domain == pool_state.capture_domain
        });
        // Unconfirmed, the first acquire verb decides between waiting and acquiring; confirmed,
        // a later one (enable-forwarding, garp) still waiting for its approval means the address
        // is on the NIC but not yet in service: that wait is what the operator must see.
        // Only an acquire that itself went through approval can wait at a later verb: one that
        // ran while the pool was automatic (switched to manual since; the switch moves no token)
        // has no approvals in the log and is in service.
        let all = self.acquire_verbs(pool_state);
        let line = (&pool_state.capture_domain, state.line.epoch);
        let waits_at =
            |verb: &Verb| self.waits_for_approval(pool, pool_state, address, state, holder, line, *verb);
        let waits = if confirmed {
            all.first().is_some_and(|first| !waits_at(first)) && all.iter().skip(1).any(waits_at)
        } else {
            all.first().is_some_and(waits_at)
        };
        match (confirmed, waits) {
            (_, true) => (Phase::PendingApproval, None),
            (false, false) => (Phase::Acquiring, None),
            (true, false) if holders.iter().any(|node| *node != holder) => releasing(),
            (true, false) => (Phase::Held, None),
        }
    }

    /// Whether `node`'s release of `address` waits for an approval the log does not hold (it is
    /// due and one of its verbs needs one), or is held back until a time: the release the planner
    /// plans ([`planner::release_plan`]) for the acquire the log confirmed (its pool, NIC and
    /// line). During the pool's deprovision hold nothing is planned yet, so nothing waits
    /// (`tenure approve --pool --address` would find nothing); the phase is `releasing` then.
    fn release_wait(
        &self,
        pool: &str,
        pool_state: &PoolState,
        address: IpAddr,
        state: &AddressState,
        node: NodeId,
    ) -> ReleaseWait {
        let Some(confirmation) = state.confirmations.iter().find(|c| c.node == node && c.acquired) else {
            return ReleaseWait::None;
        };
        let record =
            CaptureRef { pool, nic: &confirmation.nic, capture_domain: &confirmation.capture_domain };
        match planner::release_plan(self, node, &pool_state.spec.provider, address, record) {
            Some(Release::Due(actions))
                if actions.iter().any(|action| {
                    action.approval == Approval::Manual && !self.is_approved(&action.stamp.key())
                }) =>
            {
                ReleaseWait::Approval
            }
            Some(Release::Held { due_ms }) => ReleaseWait::HeldUntil(due_ms),
            Some(Release::Due(_)) | None => ReleaseWait::None,
        }
    }

    /// The acquire verbs of the pool's provider, in execution order (none for an unknown one).
    fn acquire_verbs(&self, pool_state: &PoolState) -> &'static [Verb] {
        self.provider_kind(&pool_state.spec.provider).map_or(&[], |kind| kind.verb_family().acquire_verbs())
    }

    /// Whether `holder`'s `verb` stamped on `line` (capture domain and its epoch) waits for an
    /// approval the log does not hold (pools with `approval: manual`), stamped as the planner
    /// stamps an acquire (the node's NIC now).
    #[allow(clippy::too_many_arguments)] // the stamp's parts, borrowed from the caller's view
    fn waits_for_approval(
        &self,
        pool: &str,
        pool_state: &PoolState,
        address: IpAddr,
        state: &AddressState,
        holder: NodeId,
        (capture_domain, capture_epoch): (&CaptureDomain, CaptureEpoch),
        verb: Verb,
    ) -> bool {
        if pool_state.spec.approval != Approval::Manual {
            return false;
        }
        let node = &self.nodes()[holder as usize].spec;
        let stamp = ActionStamp {
            pool,
            address,
            verb,
            holder: &node.name,
            provider: &pool_state.spec.provider,
            nic: &node.nic,
            capture_domain,
            capture_epoch,
            ownership_epoch: state.ownership_epoch,
        };
        !self.is_approved(&stamp.key())
    }
}
