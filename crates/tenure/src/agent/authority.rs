//! keepalived's authority on this host, acted on without the log (SPEC 7: `onprem` under
//! `authority: vrrp`). The log decides who owns an address; keepalived decides, on this host,
//! whether it may answer at all. When keepalived says this host is not MASTER:
//!
//! - the agent removes its own proxy entries of the pools under `authority: vrrp` at once
//!   ([`withdraw_on_demotion`]), without waiting for the log — a release can never add a second
//!   answerer, so it needs no token. It first waits out, or cancels, every `proxy-arp-add` and
//!   `garp` of those pools in flight ([`LocalAuthority::guard`] holds them under a shared lock
//!   that the withdrawal takes exclusively), so no add lands after the removal;
//! - a `proxy-arp-add` or `garp` of those pools is refused before it starts and cancelled when
//!   the demotion comes during it ([`LocalAuthority::guard`]);
//! - the loop journals each removal as an executed release and reports it to the log when it
//!   can (`tenure_core::node::NodeEngine::record_local_release`).
//!
//! None of this waits for the agent loop: the keepalived follower lowers the flag as it reads
//! the line ([`LocalAuthority::observe`]), and the withdrawal runs in its own task, so a loop
//! blocked on an unreachable etcd delays only the journal, not the removal.
//!
//! At start the flag is unknown (`None`): nothing is added, nothing is withdrawn, until the loop
//! settles it from the follower's first report ([`LocalAuthority::settle`]: an agent restarted
//! beside a running MASTER keeps its entry).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tenure_core::model::VrrpState;
use tokio::sync::{Notify, RwLock, mpsc, watch};
use tracing::{info, warn};

use super::keepalived::VrrpReport;
use crate::exec::{ExecutionOutcome, Executor, WithdrawRequest};

/// What a refused `proxy-arp-add` or `garp` says.
pub const NOT_MASTER: &str = "refused: keepalived says this host is not VRRP MASTER";

/// How long one local withdrawal of one provider may take before it counts as failed.
pub const WITHDRAW_TIMEOUT: Duration = Duration::from_secs(5);

/// How long after a failed withdrawal the next attempt starts (while still not master).
pub const WITHDRAW_RETRY: Duration = Duration::from_millis(200);

/// This host's VRRP mastership as the agent acts on it, shared by the keepalived follower, the
/// agent loop, the calls of `authority: vrrp` pools and the withdrawal task.
#[derive(Debug)]
pub struct LocalAuthority {
    /// `Some(true)`: keepalived says MASTER; `Some(false)`: anything else; `None`: not known yet.
    master: watch::Sender<Option<bool>>,
    /// Held shared by every guarded call while it runs, exclusively by a withdrawal.
    calls: RwLock<()>,
    /// Asks the withdrawal task for another round while not master (a capture the loop
    /// recorded after the last round: an add that was in flight then).
    again: Notify,
}

impl LocalAuthority {
    /// Not known yet: nothing added, nothing withdrawn.
    #[must_use]
    pub fn new() -> Arc<Self> {
        Arc::new(Self { master: watch::Sender::new(None), calls: RwLock::new(()), again: Notify::new() })
    }

    /// What the follower read, as it reads it: a state sets the flag (not master lowers it at
    /// once, whatever the loop is doing); keepalived gone lowers it. `Running` and `Remembered`
    /// need the log's record: the loop settles those ([`LocalAuthority::settle`]).
    pub fn observe(&self, report: &VrrpReport) {
        match report {
            VrrpReport::State(state) => self.set(*state == VrrpState::Master),
            VrrpReport::Down(_) => self.set(false),
            VrrpReport::Running | VrrpReport::Remembered(_) => {}
        }
    }

    /// The loop's first decision, from the follower's first reports and the log's record: taken
    /// only while nothing set the flag yet (a state the follower read since is newer).
    pub fn settle(&self, master: bool) {
        self.master.send_if_modified(|m| {
            if m.is_some() {
                return false;
            }
            *m = Some(master);
            true
        });
    }

    /// Sets the flag.
    pub fn set(&self, master: bool) {
        self.master.send_if_modified(|m| {
            let changed = *m != Some(master);
            *m = Some(master);
            changed
        });
    }

    /// Whether keepalived says MASTER (unknown is not).
    #[must_use]
    pub fn is_master(&self) -> bool {
        *self.master.borrow() == Some(true)
    }

    /// Whether keepalived says this host is not MASTER (known, and not).
    #[must_use]
    pub fn is_demoted(&self) -> bool {
        *self.master.borrow() == Some(false)
    }

    /// Asks the withdrawal task for another round (it does one only while not master).
    pub fn withdraw_again(&self) {
        self.again.notify_one();
    }

    /// Runs `call` (a `proxy-arp-add` or `garp` of a pool under `authority: vrrp`) only while
    /// keepalived says MASTER: refused before it starts otherwise, and dropped (its process
    /// cancelled) the moment a demotion comes during it. A withdrawal waits for it to end.
    pub async fn guard(&self, call: impl Future<Output = ExecutionOutcome>) -> ExecutionOutcome {
        let _running = self.calls.read().await;
        let mut master = self.master.subscribe();
        if *master.borrow_and_update() != Some(true) {
            return ExecutionOutcome::Failed { reason: NOT_MASTER.to_owned() };
        }
        tokio::select! {
            outcome = call => outcome,
            _ = master.wait_for(|m| *m != Some(true)) => ExecutionOutcome::Unknown {
                reason: "cancelled: keepalived said this host is not VRRP MASTER during the call".to_owned(),
            },
        }
    }
}

/// One provider the withdrawal task removes entries from: its executor and this agent's NICs on
/// it.
#[derive(Clone)]
pub struct WithdrawTarget {
    /// The provider's name.
    pub provider: String,
    /// Its executor.
    pub executor: Arc<dyn Executor>,
    /// This agent's NICs on it.
    pub nics: Vec<String>,
}

/// What one withdrawal of one provider did, for the loop to journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Withdrawal {
    /// The provider.
    pub provider: String,
    /// The addresses asked (none of them is held on this host any more when `removed` is `Ok`).
    pub addresses: Vec<IpAddr>,
    /// The addresses found and removed, or why the withdrawal failed.
    pub removed: Result<Vec<IpAddr>, String>,
}

/// The addresses of the pools under `authority: vrrp`, by provider: what a withdrawal removes.
/// Published by the loop from its view of the log.
pub type VrrpAddresses = Arc<BTreeMap<String, BTreeSet<IpAddr>>>;

/// The withdrawal task: every time keepalived says this host is not MASTER (and again when the
/// loop asks while it still is not), removes this host's entries of the `authority: vrrp` pools'
/// addresses from every target, after the guarded calls in flight ended, and tells the loop.
/// Returns when the loop is gone.
pub async fn withdraw_on_demotion(
    authority: Arc<LocalAuthority>,
    targets: Vec<WithdrawTarget>,
    addresses: watch::Receiver<VrrpAddresses>,
    done: mpsc::Sender<Withdrawal>,
) {
    let mut master = authority.master.subscribe();
    loop {
        if master.wait_for(|m| *m == Some(false)).await.is_err() {
            return;
        }
        let failed = {
            // Every add or announcement of these pools in flight has ended (done or cancelled):
            // none lands after the removal.
            let _exclusive = authority.calls.write().await;
            if !authority.is_demoted() {
                continue;
            }
            let wanted = addresses.borrow().clone();
            let mut failed = false;
            for target in &targets {
                let Some(asked) = wanted.get(&target.provider).filter(|a| !a.is_empty()) else { continue };
                let asked: Vec<IpAddr> = asked.iter().copied().collect();
                let request = WithdrawRequest { addresses: asked.clone(), nics: target.nics.clone() };
                let Some(removal) = target.executor.withdraw(&request) else { continue };
                let removed = match tokio::time::timeout(WITHDRAW_TIMEOUT, removal).await {
                    Ok(removed) => removed,
                    Err(_elapsed) => Err(format!("no answer within {WITHDRAW_TIMEOUT:?}")),
                };
                match &removed {
                    Ok(found) if !found.is_empty() => info!(
                        provider = %target.provider, removed = found.len(),
                        "keepalived says this host is not VRRP master: its proxy entries withdrawn locally"
                    ),
                    Ok(_) => {}
                    Err(reason) => {
                        failed = true;
                        warn!(provider = %target.provider, %reason, "local withdrawal failed; trying again");
                    }
                }
                let withdrawal = Withdrawal { provider: target.provider.clone(), addresses: asked, removed };
                if done.send(withdrawal).await.is_err() {
                    return;
                }
            }
            failed
        };
        if failed {
            tokio::time::sleep(WITHDRAW_RETRY).await;
            continue;
        }
        // Until keepalived says anything else, or the loop asks for another round.
        tokio::select! {
            changed = master.wait_for(|m| *m != Some(false)) => if changed.is_err() { return },
            () = authority.again.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_guarded_call_runs_only_while_master_and_is_cancelled_by_a_demotion() {
        let authority = LocalAuthority::new();
        let executed = || async { ExecutionOutcome::Executed { detail: "added".into() } };
        assert!(
            matches!(authority.guard(executed()).await, ExecutionOutcome::Failed { .. }),
            "unknown is not master"
        );
        authority.settle(true);
        assert!(matches!(authority.guard(executed()).await, ExecutionOutcome::Executed { .. }));
        // A call under way when keepalived demotes the host is dropped.
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&dropped);
        let slow = async move {
            struct OnDrop(Arc<AtomicBool>);
            impl Drop for OnDrop {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::SeqCst);
                }
            }
            let _guard = OnDrop(flag);
            std::future::pending::<()>().await;
            ExecutionOutcome::Executed { detail: "never".into() }
        };
        let call = {
            let authority = Arc::clone(&authority);
            tokio::spawn(async move { authority.guard(slow).await })
        };
        tokio::task::yield_now().await;
        authority.observe(&VrrpReport::State(VrrpState::Backup));
        let outcome = call.await.expect("joined");
        assert!(matches!(outcome, ExecutionOutcome::Unknown { .. }), "{outcome:?}");
        assert!(dropped.load(Ordering::SeqCst), "the call's future was dropped");
        assert!(matches!(authority.guard(executed()).await, ExecutionOutcome::Failed { .. }));
    }

    #[test]
    fn settle_never_overrides_what_the_follower_read() {
        let authority = LocalAuthority::new();
        authority.observe(&VrrpReport::Running);
        assert!(!authority.is_master() && !authority.is_demoted(), "running says nothing by itself");
        authority.observe(&VrrpReport::State(VrrpState::Fault));
        authority.settle(true);
        assert!(authority.is_demoted(), "the follower's FAULT is newer than the loop's record");
        authority.observe(&VrrpReport::State(VrrpState::Master));
        assert!(authority.is_master());
        authority.observe(&VrrpReport::Down("gone".into()));
        assert!(authority.is_demoted());
    }
}
