//! What an operator may approve now (`POST /v1/approve/{key}`, `tenure approve`): the one check an
//! `approve{key}` passes before the agent appends it, so that "approved" means an action is
//! waiting for this approval. (The log itself stays bounded whatever is appended: SPEC 13,
//! "Bounded approvals"; this check is about what the operator is told.)
//!
//! The first that holds answers:
//! - **404** (`SubmitRefusal::NotFound`): the key names a pool never applied; an address the pool
//!   never listed; an acquire of a deleted pool or of an address the pool no longer lists (a
//!   release of one may still wait: its holder releases it with the last spec, SPEC 13); a holder
//!   not in the registry; a provider that is not the pool's; a verb the provider's kind never runs;
//!   a NIC that is not the holder's
//!   (unless the holder is a node this agent runs and its journal holds the key: a release
//!   carries the NIC of the acquire it undoes).
//! - **409** (`SubmitRefusal::Refused`), the key is not pending approval now: the pool approves
//!   automatically (`approval: auto`) and no journal here holds the key pending (a pool switched
//!   to `auto` leaves what it imported `pending` waiting); a release by a node that holds the
//!   address neither by the log's results and inventories nor by its journal here; the holder is
//!   a node this agent runs
//!   and its journal entry is not `pending` (already approved or executed, failed, skipped); the
//!   log already holds an approval of it; its tokens are above what the log has issued for its
//!   address (no such action was planned yet); it is stale by the one fence rule
//!   ([`crate::fence::check_view`]) against the view, with the holder's high-water marks
//!   when this agent runs it.
//!
//! A key that is current but not journaled yet is accepted: it may be approved before it is
//! imported (SPEC 13), e.g. for a holder that another agent of the fleet runs.

use super::submit::SubmitRefusal;
use crate::driver::NodeDriver;
use crate::federation::Federation;
use crate::fence::{self, FenceVerdict, HeadTokens as _, HeadView, HighWater, StaleReason};
use crate::journal::{EntryState, JournalEntry, JournalStore};
use crate::model::{Approval, ParsedKey, StampedAction};

/// How a refusal of a key not pending approval begins.
const NOT_PENDING: &str = "not pending approval";

/// Checks `approve{key}` against the view and the journals of the nodes this agent runs
/// (`local`), before anything is appended (see the module's list).
pub(super) fn check_approve<S: JournalStore>(
    view: &Federation,
    local: &[NodeDriver<S>],
    key: &str,
) -> Result<(), SubmitRefusal> {
    let not_found = |message: String| Err(SubmitRefusal::NotFound(message));
    let refused = |why: String| Err(SubmitRefusal::Refused(format!("{NOT_PENDING}: {why}")));
    let Some(parsed) = ParsedKey::parse(key) else {
        return Err(SubmitRefusal::Refused(format!("\"{key}\" is not an idempotency key tenure plans")));
    };
    let (pool_name, address) = (&parsed.pool, parsed.address);
    let Some(pool) = view.pools().get(pool_name) else {
        return not_found(format!("pool \"{pool_name}\" is not applied"));
    };
    let Some(state) = pool.addresses.get(&address) else {
        return not_found(format!("pool \"{pool_name}\" does not list {address}"));
    };
    if parsed.verb.is_acquire() && pool.deleted {
        return not_found(format!(
            "pool \"{pool_name}\" is not applied (deleted: only releases of what it held can wait for approval)"
        ));
    }
    if parsed.verb.is_acquire() && !state.active {
        return not_found(format!(
            "pool \"{pool_name}\" does not list {address} any more (only its release can wait for approval)"
        ));
    }
    let Some(holder) = view.node_id(&parsed.holder) else {
        return not_found(format!("node \"{}\" is not in the registry", parsed.holder));
    };
    if parsed.provider != pool.spec.provider {
        return not_found(format!(
            "provider \"{}\" is not pool \"{pool_name}\"'s (it is \"{}\")",
            parsed.provider, pool.spec.provider
        ));
    }
    let family = view.provider_kind(&pool.spec.provider).map(|kind| kind.verb_family());
    if family.is_some_and(|f| {
        !f.acquire_verbs().contains(&parsed.verb) && !f.release_verbs().contains(&parsed.verb)
    }) {
        return not_found(format!(
            "verb \"{}\" is not one that provider \"{}\" runs",
            parsed.verb.as_str(),
            pool.spec.provider
        ));
    }
    let journal = local.iter().find(|driver| driver.name() == parsed.holder);
    let entry = journal.and_then(|driver| driver.engine().entry(key));
    // A release waits only where its holder holds the address: by the log's results and
    // inventories, or by the journal of a node this agent runs.
    if !parsed.verb.is_acquire() && entry.is_none() {
        let status = view.address_status(pool_name, address);
        let by_log = status.as_ref().is_some_and(|s| {
            s.holders.contains(&holder) || s.nics.iter().any(|n| *n == view.nodes()[holder as usize].spec.nic)
        });
        let by_journal = journal.is_some_and(|driver| {
            driver.engine().captured().contains_key(&(crate::names::shared(&parsed.provider), address))
        });
        if !by_log && !by_journal {
            return refused(format!(
                "node \"{}\" does not hold {address} (no confirmed acquire of it since its last release): \
                 no release of it waits",
                parsed.holder
            ));
        }
    }
    let nic = &view.nodes()[holder as usize].spec.nic;
    if entry.is_none() && parsed.nic != *nic {
        return not_found(format!(
            "NIC \"{}\" is not node \"{}\"'s (it is \"{nic}\")",
            parsed.nic, parsed.holder
        ));
    }
    // A pool switched to `auto` leaves what it imported `pending` waiting: approvable here.
    let pending_here = entry.is_some_and(|e| e.state == EntryState::Pending);
    if pool.spec.approval == Approval::Auto && !pending_here {
        return refused(format!("pool \"{pool_name}\" approves automatically (approval: auto)"));
    }
    if let Some(entry) = entry.filter(|e| e.state != EntryState::Pending) {
        return refused(journaled(entry));
    }
    if view.is_approved(key) {
        return refused("already approved (the log holds its approval)".to_owned());
    }
    let action = StampedAction::new(
        pool_name,
        address,
        parsed.verb,
        &parsed.holder,
        &parsed.provider,
        &parsed.nic,
        view.capture_domain_of_key(&parsed),
        parsed.capture_epoch,
        parsed.ownership_epoch,
    );
    let current = view.view(&action);
    if action.capture_epoch > current.capture_epoch || action.ownership_epoch > current.ownership_epoch {
        return refused(format!(
            "its tokens (owner:{}:epoch:{}) are above what the log has issued for {pool_name}/{address} \
             (owner:{}:epoch:{}): no such action was planned yet",
            action.ownership_epoch, action.capture_epoch, current.ownership_epoch, current.capture_epoch
        ));
    }
    let none = HighWater::default();
    let high_water = journal.map_or(&none, |driver| &driver.engine().durable().high_water);
    if let FenceVerdict::Stale { reason } = fence::check_view(&action, &current, high_water) {
        return refused(format!("stale ({reason}): {}", stale(reason, &action, &current)));
    }
    Ok(())
}

/// Why a journaled entry that is not pending takes no approval, in words.
fn journaled(entry: &JournalEntry) -> String {
    match entry.state {
        EntryState::Pending => "pending".to_owned(),
        EntryState::Approved => "already approved (it runs once it passes the gate)".to_owned(),
        EntryState::Executed => "already executed".to_owned(),
        EntryState::Failed => format!(
            "approved, then failed ({}); it is retried while it is current",
            // The executor's detail may span lines; the answer is one.
            entry.detail.as_deref().unwrap_or("no detail").replace(char::is_control, " ")
        ),
        EntryState::Skipped(reason) => format!("skipped ({reason}): it never runs"),
    }
}

/// What the fence rule's `reason` means for this action, with the tokens it read.
fn stale(reason: StaleReason, action: &StampedAction, current: &HeadView<'_>) -> String {
    match reason {
        StaleReason::StaleEpoch => format!(
            "its captureEpoch is {}, its line's is now {}",
            action.capture_epoch, current.capture_epoch
        ),
        StaleReason::StaleOwnerEpoch => format!(
            "its ownershipEpoch is {}, the address's is now {} (epochLocking)",
            action.ownership_epoch, current.ownership_epoch
        ),
        StaleReason::HolderMismatch => format!(
            "an acquire by {}, which is not the desired holder ({})",
            action.holder,
            current.desired_holder.unwrap_or("none")
        ),
        StaleReason::ReleaseOfCurrent => {
            format!("a release by {}, which is the desired holder of {} again", action.holder, action.address)
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::driver::DriverOptions;
    use crate::journal::MemoryJournalStore;
    use crate::log::{ActionOutcome, Event, EventKind};
    use crate::log_store::EventLog;
    use crate::node::NodeEngine;
    use crate::scenario::parse_scenario;

    use super::*;

    /// a (priority 10) and b on one cloud; `gated` needs approvals, `edge` does not.
    const SCENARIO: &str = r"
nodes:
  - {name: a, provider: sim1, placementGroup: g1, priority: 10, nic: eni-a}
  - {name: b, provider: sim1, placementGroup: g1, nic: eni-b}
providers:
  - {name: sim1, kind: sim-cloud}
  - {name: sim2, kind: sim-cloud}
pools:
  - apiVersion: tenure.dev/v1alpha1
    kind: MobilityPool
    metadata: {name: gated}
    spec: {addresses: [10.0.0.20, 10.0.0.21], provider: sim1, placementGroup: g1, members: [a, b], approval: manual, deprovisionHoldDuration: 0s}
  - apiVersion: tenure.dev/v1alpha1
    kind: MobilityPool
    metadata: {name: edge}
    spec: {addresses: [10.0.0.10], provider: sim1, placementGroup: g1, members: [a, b]}
";

    const ASSIGN_20: &str = "gated/10.0.0.20/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1";
    const ENABLE_20: &str = "gated/10.0.0.20/enable-forwarding/a/sim1/eni-a/owner:1:epoch:1";
    const ASSIGN_21: &str = "gated/10.0.0.21/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1";

    /// Node a's driver over the empty log of [`SCENARIO`].
    fn driver() -> NodeDriver<MemoryJournalStore> {
        let scenario = parse_scenario(SCENARIO).expect("a valid scenario");
        let registry = Federation::new(&scenario.nodes, &scenario.providers);
        let engine = NodeEngine::open("a", MemoryJournalStore::new()).expect("memory");
        NodeDriver::new(engine, registry, DriverOptions { report_results: false })
    }

    /// The log so far and node a's driver (the node this "agent" runs; b runs elsewhere).
    struct Fixture {
        log: EventLog,
        a: NodeDriver<MemoryJournalStore>,
    }

    impl Fixture {
        fn new() -> Self {
            let mut fixture = Self { log: EventLog::new(), a: driver() };
            for pool in parse_scenario(SCENARIO).expect("a valid scenario").pools {
                fixture.append(EventKind::PoolApplied { spec: Box::new(pool) });
            }
            fixture.append(EventKind::Heartbeat { node: "a".into() });
            fixture.append(EventKind::Heartbeat { node: "b".into() });
            fixture
        }

        /// Appends `kind` and lets a follow and reconcile.
        fn append(&mut self, kind: EventKind) {
            self.log.push(Event { at_ms: 1, kind });
            self.a.follow(&self.log).expect("an event log cannot fail");
            self.a.reconcile().expect("memory").expect("not blocked");
        }

        fn check(&self, key: &str) -> Result<(), SubmitRefusal> {
            check_approve(self.a.view(), std::slice::from_ref(&self.a), key)
        }

        fn state(&self, key: &str) -> Option<EntryState> {
            self.a.engine().entry(key).map(|e| e.state)
        }
    }

    fn not_found(result: Result<(), SubmitRefusal>) -> String {
        match result {
            Err(SubmitRefusal::NotFound(message)) => message,
            other => panic!("expected 404, got {other:?}"),
        }
    }

    fn refused(result: Result<(), SubmitRefusal>) -> String {
        match result {
            Err(SubmitRefusal::Refused(message)) => message,
            other => panic!("expected 409, got {other:?}"),
        }
    }

    #[test]
    fn a_pending_key_and_a_current_key_not_journaled_yet_are_accepted() {
        let fixture = Fixture::new();
        assert_eq!(fixture.state(ASSIGN_20), Some(EntryState::Pending));
        assert_eq!(fixture.check(ASSIGN_20), Ok(()));
        // The same log, a's journal empty (it has not reconciled yet): SPEC 13 allows approving
        // before import.
        let mut fresh = driver();
        fresh.follow(&fixture.log).expect("an event log cannot fail");
        assert_eq!(fresh.engine().entry(ASSIGN_20), None);
        assert_eq!(check_approve(fresh.view(), std::slice::from_ref(&fresh), ASSIGN_20), Ok(()));
    }

    #[test]
    fn names_the_view_does_not_know_are_404() {
        let fixture = Fixture::new();
        let cases = [
            (
                "nosuchpool/10.9.9.9/assign-secondary-ip/zz/sim9/eni-q/owner:1:epoch:1",
                "pool \"nosuchpool\" is not applied",
            ),
            ("gated/10.9.9.9/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1", "does not list 10.9.9.9"),
            (
                "gated/10.0.0.20/assign-secondary-ip/zz/sim1/eni-a/owner:1:epoch:1",
                "node \"zz\" is not in the registry",
            ),
            (
                "gated/10.0.0.20/assign-secondary-ip/a/sim2/eni-a/owner:1:epoch:1",
                "provider \"sim2\" is not pool",
            ),
            (
                "gated/10.0.0.20/assign-secondary-ip/a/sim1/eni-q/owner:1:epoch:1",
                "NIC \"eni-q\" is not node \"a\"'s",
            ),
        ];
        for (key, says) in cases {
            let message = not_found(fixture.check(key));
            assert!(message.contains(says), "{key}: {message}");
        }
    }

    #[test]
    fn keys_not_pending_now_are_409_saying_why() {
        let mut fixture = Fixture::new();
        // An automatic pool: nothing of it waits.
        let message =
            refused(fixture.check("edge/10.0.0.10/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1"));
        assert!(message.contains("approves automatically (approval: auto)"), "{message}");
        // Tokens the log has not issued.
        let message =
            refused(fixture.check("gated/10.0.0.20/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:9"));
        assert!(
            message.contains("above what the log has issued") && message.contains("owner:1:epoch:1)"),
            "{message}"
        );
        let message =
            refused(fixture.check("gated/10.0.0.20/assign-secondary-ip/a/sim1/eni-a/owner:7:epoch:1"));
        assert!(message.contains("above what the log has issued"), "{message}");
        // Not the desired holder: the fence rule's holder-mismatch (b is not journaled here).
        let message =
            refused(fixture.check("gated/10.0.0.20/assign-secondary-ip/b/sim1/eni-b/owner:1:epoch:1"));
        assert!(message.contains("stale (holder-mismatch)"), "{message}");

        // Approved in the log: a's entry is approved at its next reconcile.
        fixture.append(EventKind::Approve { idempotency_key: ASSIGN_20.into() });
        assert_eq!(fixture.state(ASSIGN_20), Some(EntryState::Approved));
        let message = refused(fixture.check(ASSIGN_20));
        assert_eq!(message, "not pending approval: already approved (it runs once it passes the gate)");
        // Approved in the log, the journal not promoted yet (a remote holder, or before a sweep).
        fixture.log.push(Event { at_ms: 1, kind: EventKind::Approve { idempotency_key: ENABLE_20.into() } });
        fixture.a.follow(&fixture.log).expect("an event log cannot fail");
        assert_eq!(fixture.state(ENABLE_20), Some(EntryState::Pending));
        assert_eq!(
            refused(fixture.check(ENABLE_20)),
            "not pending approval: already approved (the log holds its approval)"
        );

        // Executed.
        let polled = fixture.a.poll_actions(8, None).expect("memory");
        assert!(polled.iter().any(|a| a.idempotency_key() == ASSIGN_20), "{polled:?}");
        fixture.a.handle_result(ASSIGN_20, ActionOutcome::Executed, "ok".into()).expect("memory");
        assert_eq!(refused(fixture.check(ASSIGN_20)), "not pending approval: already executed");

        // Stale: a drained, b owns 10.0.0.21 now; a's pending acquire is swept.
        fixture.append(EventKind::Drain { node: "a".into() });
        assert_eq!(fixture.state(ASSIGN_21), Some(EntryState::Skipped(StaleReason::StaleEpoch)));
        assert_eq!(
            refused(fixture.check(ASSIGN_21)),
            "not pending approval: skipped (stale-epoch): it never runs"
        );
        // The same stale key for b, whose journal this agent does not run: the fence rule says so.
        let stale_b = "gated/10.0.0.21/assign-secondary-ip/b/sim1/eni-b/owner:1:epoch:1";
        let message = refused(fixture.check(stale_b));
        assert_eq!(
            message,
            "not pending approval: stale (stale-epoch): its captureEpoch is 1, its line's is now 2"
        );
        // b's current acquire is waiting (not journaled here): accepted.
        assert_eq!(fixture.check("gated/10.0.0.21/assign-secondary-ip/b/sim1/eni-b/owner:2:epoch:2"), Ok(()));
    }

    #[test]
    fn a_deleted_pools_release_may_still_be_approved_but_not_an_acquire() {
        let mut fixture = Fixture::new();
        for key in [ASSIGN_20, ENABLE_20] {
            fixture.append(EventKind::Approve { idempotency_key: key.into() });
        }
        let polled = fixture.a.poll_actions(8, None).expect("memory");
        for action in polled.iter().filter(|a| a.address.to_string() == "10.0.0.20") {
            fixture
                .a
                .handle_result(&action.idempotency_key(), ActionOutcome::Executed, "ok".into())
                .expect("memory");
        }
        fixture.append(EventKind::PoolDeleted { pool: "gated".into() });
        let release = "gated/10.0.0.20/disable-forwarding/a/sim1/eni-a/owner:2:epoch:2";
        assert_eq!(fixture.state(release), Some(EntryState::Pending), "released with the last spec: manual");
        assert_eq!(fixture.check(release), Ok(()));
        let message =
            not_found(fixture.check("gated/10.0.0.20/assign-secondary-ip/a/sim1/eni-a/owner:2:epoch:2"));
        assert!(message.contains("is not applied (deleted"), "{message}");
    }

    /// A verb the pool's provider never runs, and a release by a node that does not hold the
    /// address (it never acquired it, or released it already), wait for no approval.
    #[test]
    fn a_verb_of_another_provider_kind_or_a_release_of_what_is_not_held_waits_for_nothing() {
        let mut fixture = Fixture::new();
        let message = not_found(fixture.check("gated/10.0.0.20/proxy-arp-add/a/sim1/eni-a/owner:1:epoch:1"));
        assert!(
            message.contains("verb \"proxy-arp-add\" is not one that provider \"sim1\" runs"),
            "{message}"
        );
        let message = not_found(fixture.check("gated/10.0.0.20/acquire/a/sim1/eni-a/owner:1:epoch:1"));
        assert!(message.contains("is not one that provider"), "{message}");
        // b never held 10.0.0.20: no release of it by b waits.
        let b_release = "gated/10.0.0.20/unassign-secondary-ip/b/sim1/eni-b/owner:1:epoch:1";
        let message = refused(fixture.check(b_release));
        assert!(message.contains("node \"b\" does not hold 10.0.0.20"), "{message}");
        // b takes it and says so; then its release (a drain of b moves it back) may wait.
        fixture.append(EventKind::Drain { node: "a".into() });
        let b_assign = "gated/10.0.0.20/assign-secondary-ip/b/sim1/eni-b/owner:2:epoch:2";
        fixture.append(EventKind::ActionResult {
            node: "b".into(),
            idempotency_key: b_assign.into(),
            outcome: ActionOutcome::Executed,
            detail: "assigned".into(),
        });
        fixture.append(EventKind::Undrain { node: "a".into() });
        fixture.append(EventKind::Drain { node: "b".into() });
        assert_eq!(
            fixture.check("gated/10.0.0.20/unassign-secondary-ip/b/sim1/eni-b/owner:3:epoch:3"),
            Ok(())
        );
    }
}
