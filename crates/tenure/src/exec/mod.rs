//! Executors (SPEC 7): the one interface every provider call goes through — a stamped action in,
//! an [`ExecutionOutcome`] out, within a deadline.
//!
//! # Where the fence gate is
//!
//! Not here. The gate runs in the core's node driver (`tenure_core::node::NodeEngine::
//! poll_execution`) immediately before the driver calls [`Executor::execute`]: an action that
//! reaches an executor passed the gate an instant ago, against the log's head. An executor never
//! re-checks tokens and never decides whether an action is stale; it only performs the call and
//! says what became of it. Keeping the gate out of the executors keeps it in one place, in the
//! pure core, where it is tested exhaustively and simulated.
//!
//! # Deadlines
//!
//! Every call has a deadline (a [`tokio::time::Instant`]). An executor should stop at it on its
//! own (a command killed, a request timed out); [`execute_within`] enforces it around any
//! executor: past the deadline the call's future is dropped and the outcome is
//! [`ExecutionOutcome::Unknown`], because the call may or may not have reached the provider.
//! The core's `tenure_core::log::ActionOutcome` knows only executed and failed:
//! [`ExecutionOutcome::for_journal`] records an unknown outcome as `failed` with its reason, so
//! the sweep retries it while it is current (provider calls are idempotent), and if it did land,
//! inventory shows it and drift repair counts the address as captured for the release
//! (`docs/decisions.md`).
//!
//! # Layout
//!
//! - this file — [`Executor`], [`ExecutionOutcome`], [`execute_within`], [`InventoryRequest`].
//! - [`registry`] — every provider kind once: [`ProviderSettings`] (one variant per kind), the
//!   [`registry::Provider`] trait each kind's module implements (its settings as written, their
//!   check, its `build()`), and why a build has no executor for a kind ([`registry::NotBuilt`]).
//! - One module per provider kind, each compiled in every build (its settings are read and
//!   checked everywhere), its executor behind the kind's cargo feature:
//!   - [`aws`] — `aws`: `AwsExecutor`, EC2 secondary private IPs (cargo feature `aws`).
//!   - [`onprem`] — `onprem`: `OnpremExecutor`, proxy neighbour entries and gratuitous ARP /
//!     unsolicited NA (Linux, cargo feature `onprem`).
//!   - [`hook`] — `exec`: [`ExecHook`], the operator's command fed the stamped action (SPEC 7's
//!     exec contract), killed with its process group past its timeout.
//!   - [`sim`] — `sim-cloud`, `sim-onprem`: [`SimExecutor`], the simulated providers behind a
//!     shared, lock-protected handle.
//!   - [`azure`] — `azure`: `AzureExecutor`, static secondary ipConfigurations on Azure NICs
//!     (cargo feature `azure`).
//!   - [`oci`] — `oci`: `OciExecutor`, OCI secondary private IPs on VNICs (cargo feature `oci`).
//! - [`notices`] — `maintenanceNotices` of the cloud kinds: the setting's check, and the readers
//!   of each cloud's instance metadata service (spot interruption, scheduled events, …).
//! - [`hook_groups`] — `HookGroups`: every hook's process group recorded durably before it can
//!   act, and killed by that record at the next start (Linux).

pub mod aws;
pub mod azure;
#[cfg(unix)]
pub mod hook;
#[cfg(unix)]
pub mod hook_groups;
pub mod notices;
pub mod oci;
pub mod onprem;
pub mod registry;
pub mod sim;

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;

use tenure_core::model::StampedAction;
use tokio::time::Instant;

#[cfg(unix)]
pub use hook::ExecHook;
pub use registry::ProviderSettings;
pub use sim::SimExecutor;

/// What became of one provider call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecutionOutcome {
    /// The provider confirmed the call.
    Executed {
        /// What the provider did, for the journal and the operator (e.g. `assigned to eni-a`).
        detail: String,
    },
    /// The call did not take effect: the provider refused it, or it was never made.
    Failed {
        /// Why, in one line.
        reason: String,
    },
    /// The call may or may not have taken effect: the deadline passed while it was under way, or
    /// the answer was lost. Only inventory (drift detection) can tell what happened.
    Unknown {
        /// Why the outcome is unknown, in one line.
        reason: String,
    },
}

impl ExecutionOutcome {
    /// The outcome and detail the journal and the `action-result` event record: executed stays
    /// executed; failed and unknown are both `failed` (an unknown outcome is retried through the
    /// gate, never assumed done), the detail saying which.
    #[must_use]
    pub fn for_journal(&self) -> (tenure_core::log::ActionOutcome, String) {
        use tenure_core::log::ActionOutcome;
        match self {
            Self::Executed { detail } => (ActionOutcome::Executed, detail.clone()),
            // A known failure never reads as an unknown outcome, whatever the provider or a hook
            // wrote: the journal's in-doubt mark is that prefix.
            Self::Failed { reason } if tenure_core::journal::outcome_unknown(Some(reason)) => {
                (ActionOutcome::Failed, format!("failed: {reason}"))
            }
            Self::Failed { reason } => (ActionOutcome::Failed, reason.clone()),
            Self::Unknown { reason } => {
                (ActionOutcome::Failed, format!("{}{reason}", tenure_core::journal::OUTCOME_UNKNOWN))
            }
        }
    }
}

/// The future an [`Executor`] returns: boxed, so that `dyn Executor` works (an `async fn` in a
/// trait is not object-safe), and `Send`, so that it can run on any tokio worker.
pub type ExecuteFuture<'a> = Pin<Box<dyn Future<Output = ExecutionOutcome> + Send + 'a>>;

/// What an inventory read asks of a provider: where each of `addresses` is held, among the
/// NICs the provider can see from `nics` (the NICs of every node of that provider: for `aws`,
/// their VPCs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InventoryRequest {
    /// The addresses of the provider's applied pools.
    pub addresses: Vec<IpAddr>,
    /// The NICs of the provider's nodes.
    pub nics: Vec<String>,
    /// The NICs of the provider's nodes this agent runs: all an executor that sees only its own
    /// host ([`Executor::inventory_sees_only_own_nics`]) can answer for.
    pub own_nics: Vec<String>,
}

/// An inventory read's answer: for every address asked, the NICs holding it, sorted (empty:
/// held nowhere the provider can see). Or why the read failed, in one line.
pub type Inventory = Result<Vec<(IpAddr, Vec<String>)>, String>;

/// The future of an inventory read.
pub type InventoryFuture<'a> = Pin<Box<dyn Future<Output = Inventory> + Send + 'a>>;

/// Performs stamped provider actions. Object-safe: the agent holds its executors as
/// `Arc<dyn Executor>`, one per configured provider.
///
/// The fence gate is not an executor's business: it runs in the core's driver right before
/// [`Executor::execute`] is called (see the module documentation).
pub trait Executor: Send + Sync {
    /// Performs `action` and reports its outcome. Nothing happens until the returned future is
    /// first polled. Implementations are idempotent (the same action twice leaves the provider
    /// as once) and should give up at `deadline` with [`ExecutionOutcome::Unknown`] when the
    /// call may have been made, or [`ExecutionOutcome::Failed`] when it surely was not; callers
    /// go through [`execute_within`], which enforces the deadline either way.
    fn execute<'a>(&'a self, action: &'a StampedAction, deadline: Instant) -> ExecuteFuture<'a>;

    /// Reads where the provider holds `request`'s addresses (SPEC 7's inventory), for drift
    /// repair. The answer must be the provider's whole view of those addresses, not one host's:
    /// an address missing from a NIC is read as "not held there". `None` when this executor
    /// cannot take such an inventory (the default): the agent then appends no `inventory`
    /// events for the provider and drift repair never fires for it.
    fn inventory<'a>(&'a self, request: &'a InventoryRequest) -> Option<InventoryFuture<'a>> {
        let _ = request;
        None
    }

    /// Whether this executor's inventory sees only this host (`onprem`: the proxy entries of
    /// its own interface): then its answer speaks of `request.own_nics` alone, and the agent
    /// appends it as a scoped `inventory` event (`scope`: those NICs), which says nothing of
    /// the other hosts' NICs. `false` (the default): the answer is the provider's whole view.
    fn inventory_sees_only_own_nics(&self) -> bool {
        false
    }

    /// Removes, on this host, every entry of `request.addresses` that `request.nics` hold, on
    /// the executor's own authority and outside the gate: the local withdrawal of SPEC 7
    /// (`onprem` under `authority: vrrp`, when keepalived says this host is not MASTER). A
    /// removal never adds an answerer, so it needs no token. Answers the addresses that were
    /// found and removed; `Ok` means none of them is held there any more. `None` (the default):
    /// this provider has no such local step (a cloud provider enforces single assignment
    /// itself).
    fn withdraw<'a>(&'a self, request: &'a WithdrawRequest) -> Option<WithdrawFuture<'a>> {
        let _ = request;
        None
    }

    /// Answers of the provider that asked this executor to wait (throttling, a resource busy
    /// with another operation) since it was made: `tenure_provider_throttled_total{provider}`.
    /// 0 (the default) for an executor that does not count them.
    fn throttled_calls(&self) -> u64 {
        0
    }
}

/// What a local withdrawal asks of a provider ([`Executor::withdraw`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WithdrawRequest {
    /// The addresses to let go of (those of the pools under `authority: vrrp`).
    pub addresses: Vec<IpAddr>,
    /// This agent's NICs on the provider.
    pub nics: Vec<String>,
}

/// The future of a local withdrawal: the addresses removed, or why not, in one line.
pub type WithdrawFuture<'a> = Pin<Box<dyn Future<Output = Result<Vec<IpAddr>, String>> + Send + 'a>>;

/// Runs `action` on `executor`, never past `deadline`.
///
/// - Deadline already passed: the executor is not called; [`ExecutionOutcome::Failed`] (the
///   gate's verdict is old, and no call was made).
/// - Deadline passes while the call is under way: its future is dropped (cancelling whatever the
///   executor was awaiting); [`ExecutionOutcome::Unknown`].
/// - Otherwise: the executor's own outcome.
///
/// The clock is read before every poll of the call's future, and a poll at or past the deadline
/// never happens: a process resumed after the deadline (paused, starved) does not take one more
/// step of the call (`tokio::time::timeout_at` polls its future before its timer, so a call
/// whose own wait had ended would have sent its next request first).
pub async fn execute_within<E>(executor: &E, action: &StampedAction, deadline: Instant) -> ExecutionOutcome
where
    E: Executor + ?Sized,
{
    if Instant::now() >= deadline {
        return ExecutionOutcome::Failed {
            reason: "deadline passed before the call started; not called".to_owned(),
        };
    }
    let mut call = executor.execute(action, deadline);
    let expiry = tokio::time::sleep_until(deadline);
    tokio::pin!(expiry);
    let finished = std::future::poll_fn(|cx| {
        if Instant::now() >= deadline {
            return std::task::Poll::Ready(None);
        }
        if let std::task::Poll::Ready(outcome) = call.as_mut().poll(cx) {
            return std::task::Poll::Ready(Some(outcome));
        }
        expiry.as_mut().poll(cx).map(|()| None)
    })
    .await;
    drop(call);
    finished.unwrap_or_else(|| ExecutionOutcome::Unknown {
        reason: "deadline passed during the call; it may or may not have taken effect".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

    use tenure_core::model::{CaptureDomain, CaptureEpoch, OwnershipEpoch, ProviderKind, Verb};

    use super::*;

    pub(super) fn action(verb: Verb, nic: &str) -> StampedAction {
        StampedAction::new(
            "edge",
            "10.0.0.10".parse().expect("literal"),
            verb,
            "a",
            "sim1",
            nic,
            CaptureDomain::new("sim1", "g1"),
            CaptureEpoch::from_stored(1),
            OwnershipEpoch::from_stored(1),
        )
    }

    /// Sets its flag when dropped: shows that a call's future was dropped.
    struct DropFlag(Arc<AtomicBool>);

    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// An executor whose call takes `delay` of tokio time, then succeeds.
    struct SleepingExecutor {
        delay: Duration,
        calls: AtomicUsize,
        completed: AtomicUsize,
        dropped: Arc<AtomicBool>,
    }

    impl SleepingExecutor {
        fn new(delay: Duration) -> Self {
            Self {
                delay,
                calls: AtomicUsize::new(0),
                completed: AtomicUsize::new(0),
                dropped: Arc::new(AtomicBool::new(false)),
            }
        }
    }

    impl Executor for SleepingExecutor {
        fn execute<'a>(&'a self, action: &'a StampedAction, _deadline: Instant) -> ExecuteFuture<'a> {
            Box::pin(async move {
                self.calls.fetch_add(1, Ordering::SeqCst);
                let _flag = DropFlag(Arc::clone(&self.dropped));
                tokio::time::sleep(self.delay).await;
                self.completed.fetch_add(1, Ordering::SeqCst);
                ExecutionOutcome::Executed { detail: format!("slept, then {}", action.verb) }
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_past_its_deadline_is_unknown_and_its_future_dropped() {
        let executor = SleepingExecutor::new(Duration::from_secs(30));
        let started = Instant::now();
        let deadline = started + Duration::from_secs(10);
        let outcome = execute_within(&executor, &action(Verb::AssignSecondaryIp, "eni-a"), deadline).await;
        assert!(matches!(outcome, ExecutionOutcome::Unknown { .. }), "{outcome:?}");
        let (journal, detail) = outcome.for_journal();
        assert_eq!(
            journal,
            tenure_core::log::ActionOutcome::Failed,
            "unknown is retried, never assumed done"
        );
        assert!(detail.starts_with("outcome unknown: "), "{detail}");
        assert_eq!(Instant::now(), deadline, "given up exactly at the deadline (paused clock)");
        // A known failure whose text happens to begin the same way (a hook's stderr) never
        // reads as an unknown outcome: the journal's in-doubt mark is that prefix.
        let (_, known) = ExecutionOutcome::Failed { reason: "outcome unknown: EBUSY".into() }.for_journal();
        assert_eq!(known, "failed: outcome unknown: EBUSY");
        assert_eq!(executor.calls.load(Ordering::SeqCst), 1, "the call was started");
        assert_eq!(executor.completed.load(Ordering::SeqCst), 0, "and never finished");
        assert!(executor.dropped.load(Ordering::SeqCst), "its future was dropped");
    }

    /// A call whose own wait ends exactly when the deadline does (a process resumed after both)
    /// takes no further step: its future is not polled again, so the request it would send next
    /// is never sent.
    #[tokio::test(start_paused = true)]
    async fn a_call_whose_wait_ends_at_the_deadline_takes_no_further_step() {
        let executor = SleepingExecutor::new(Duration::from_secs(10));
        let deadline = Instant::now() + Duration::from_secs(10);
        let outcome = execute_within(&executor, &action(Verb::AssignSecondaryIp, "eni-a"), deadline).await;
        assert!(matches!(outcome, ExecutionOutcome::Unknown { .. }), "{outcome:?}");
        assert_eq!(executor.completed.load(Ordering::SeqCst), 0, "no step after the deadline");
        assert!(executor.dropped.load(Ordering::SeqCst), "its future was dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_within_its_deadline_gives_the_executors_outcome() {
        let executor = SleepingExecutor::new(Duration::from_secs(3));
        let started = Instant::now();
        let deadline = started + Duration::from_secs(10);
        let outcome = execute_within(&executor, &action(Verb::AssignSecondaryIp, "eni-a"), deadline).await;
        assert_eq!(
            outcome,
            ExecutionOutcome::Executed { detail: "slept, then assign-secondary-ip".to_owned() }
        );
        assert_eq!(Instant::now(), started + Duration::from_secs(3), "not held to the deadline");
        assert_eq!(executor.completed.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_already_passed_fails_without_calling() {
        let executor = SleepingExecutor::new(Duration::ZERO);
        tokio::time::advance(Duration::from_secs(1)).await;
        let deadline = Instant::now() - Duration::from_millis(1);
        let outcome = execute_within(&executor, &action(Verb::AssignSecondaryIp, "eni-a"), deadline).await;
        assert!(matches!(outcome, ExecutionOutcome::Failed { .. }), "{outcome:?}");
        assert_eq!(executor.calls.load(Ordering::SeqCst), 0, "the executor was never called");
    }

    /// `Executor` is `Send + Sync` and object-safe.
    fn assert_shareable<T: Send + Sync + ?Sized>() {}

    #[tokio::test(start_paused = true)]
    async fn executors_are_usable_as_arc_dyn_executor_across_tasks() {
        assert_shareable::<dyn Executor>();
        let sim = SimExecutor::new(ProviderKind::SimCloud);
        let executors: Vec<Arc<dyn Executor>> =
            vec![Arc::new(sim.clone()), Arc::new(SleepingExecutor::new(Duration::from_secs(1)))];
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut outcomes = Vec::new();
        for executor in executors {
            // Spawned: the call's future is Send and the executor outlives the caller's borrow.
            let task = tokio::spawn(async move {
                execute_within(executor.as_ref(), &action(Verb::AssignSecondaryIp, "eni-b"), deadline).await
            });
            outcomes.push(task.await.expect("the task does not panic"));
        }
        assert_eq!(
            outcomes,
            vec![
                ExecutionOutcome::Executed { detail: "assigned to eni-b".to_owned() },
                ExecutionOutcome::Executed { detail: "slept, then assign-secondary-ip".to_owned() },
            ]
        );
        let held = sim.with_provider(|provider| provider.holdings().clone());
        assert_eq!(
            held.values().flatten().collect::<Vec<_>>(),
            vec!["eni-b"],
            "the shared handle saw the call"
        );
    }
}
