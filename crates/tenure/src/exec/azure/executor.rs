//! [`AzureExecutor`]: the `azure` provider (SPEC 7) — a static secondary ipConfiguration on an
//! Azure NIC, through `tenure-azure` (cargo feature `azure`).
//!
//! | verb | ARM calls | reports `executed` when |
//! |---|---|---|
//! | `assign-secondary-ip` | [`Arm::seize`]: GET own NIC; list the NICs of its resource group; PUT each other holder in the NIC's virtual network without the ipConfiguration (If-Match) and poll its operation; PUT own NIC with it (If-Match), poll; GET own NIC | a read shows the address on the NIC, `provisioningState` `Succeeded` |
//! | `enable-forwarding` | GET own NIC; with `ipForwarding: set` and `enableIPForwarding` off, a PUT (If-Match), polled | `enableIPForwarding` is on (after a PUT: its operation `Succeeded`); `failed` naming it when off under `ipForwarding: check` |
//! | `disable-forwarding` | none: the setting is per NIC and other addresses may need it | always (it says so) |
//! | `unassign-secondary-ip` | GET own NIC; PUT without the ipConfiguration (If-Match) only if still there, polled | removed (its operation `Succeeded`: that is the confirmation), or not there (released already, or taken by a seize); the primary address is never removed (`failed`) |
//!
//! Every NIC is judged settled (`provisioningState` `Succeeded`: `Updating` read again, `Failed`
//! written back as read first). An error after a write was accepted (its operation `Failed` or
//! `Canceled`, a poll refused, a confirming read refused) is `unknown`, not `failed`: the write may
//! have applied (SPEC 6).
//!
//! The holder of an address is looked for in the resource group of the node's own NIC (one
//! list, paged): the NICs that can hold an address of the node's subnet are in the subnet's
//! virtual network, which in the deployments this provider is written for share the NICs'
//! resource group (docs/decisions.md). Inventory ([`Executor::inventory`]) lists the resource
//! groups of every node's NIC the same way.
//!
//! Retries are this executor's, within the action's deadline (the SDK pipeline's are off):
//! `Retry-After` on 429 and on a busy NIC (counted: [`Executor::throttled_calls`]), backoff on 5xx,
//! a re-read on 412. A permission error (401/403) is `failed` at once, naming the role, logged at
//! error the first time each distinct error is seen and at debug after that.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::{Mutex, OnceLock};

pub use tenure_azure::{self, Arm, ArmError, Forwarding, Released, Seized};
use tenure_core::model::{StampedAction, Verb};
use tokio::time::Instant;

use super::IpForwarding;
use crate::exec::{ExecuteFuture, ExecutionOutcome, Executor, InventoryFuture, InventoryRequest};

/// The `azure` provider.
#[derive(Debug)]
pub struct AzureExecutor {
    endpoint_url: Option<String>,
    ip_forwarding: IpForwarding,
    /// The client, made on the first call (or given).
    client: OnceLock<Result<Arm, ArmError>>,
    /// Permission errors already logged at error.
    reported: Mutex<HashSet<String>>,
}

impl AzureExecutor {
    /// Calls ARM at `endpoint_url` (the public endpoint when `None`), authorised by the
    /// environment ([`Arm::from_environment`]).
    #[must_use]
    pub fn new(endpoint_url: Option<&str>, ip_forwarding: IpForwarding) -> Self {
        Self {
            endpoint_url: endpoint_url.map(str::to_owned),
            ip_forwarding,
            client: OnceLock::new(),
            reported: Mutex::new(HashSet::new()),
        }
    }

    /// Calls ARM through `arm` (a client made elsewhere, e.g. with the fake's token in tests).
    #[must_use]
    pub fn with_client(arm: Arm, ip_forwarding: IpForwarding) -> Self {
        let client = OnceLock::new();
        let _ = client.set(Ok(arm));
        Self { endpoint_url: None, ip_forwarding, client, reported: Mutex::new(HashSet::new()) }
    }

    fn arm(&self) -> Result<&Arm, ArmError> {
        self.client
            .get_or_init(|| Arm::from_environment(self.endpoint_url.as_deref()))
            .as_ref()
            .map_err(Clone::clone)
    }

    async fn acquire(
        &self,
        nic: &str,
        address: IpAddr,
        deadline: Instant,
    ) -> Result<ExecutionOutcome, ArmError> {
        let Some(group) = super::group_of(nic) else {
            return Ok(ExecutionOutcome::Failed {
                reason: format!("`{nic}` is not an Azure NIC resource id; not called"),
            });
        };
        let detail = match self.arm()?.seize(nic, &group, address, deadline).await? {
            Seized::Already => format!("{address} is on {nic} already (confirmed by a read)"),
            Seized::Added { moved_from } if moved_from.is_empty() => {
                format!("{address} added to {nic} (confirmed)")
            }
            Seized::Added { moved_from } => {
                format!("{address} moved to {nic} from {} (confirmed)", moved_from.join(", "))
            }
        };
        Ok(ExecutionOutcome::Executed { detail })
    }

    async fn release(
        &self,
        nic: &str,
        address: IpAddr,
        deadline: Instant,
    ) -> Result<ExecutionOutcome, ArmError> {
        let detail = match self.arm()?.release(nic, address, deadline).await? {
            Released::Removed => format!("{address} removed from {nic}"),
            Released::NotThere => {
                format!("{address} was not on {nic} (released already, or taken by a seize)")
            }
        };
        Ok(ExecutionOutcome::Executed { detail })
    }

    async fn forwarding(&self, nic: &str, deadline: Instant) -> Result<ExecutionOutcome, ArmError> {
        let set = self.ip_forwarding == IpForwarding::Set;
        Ok(match self.arm()?.forwarding(nic, set, deadline).await? {
            Forwarding::On => {
                ExecutionOutcome::Executed { detail: format!("enableIPForwarding is on for {nic}") }
            }
            Forwarding::TurnedOn => {
                ExecutionOutcome::Executed { detail: format!("enableIPForwarding turned on on {nic}") }
            }
            Forwarding::Off => ExecutionOutcome::Failed {
                reason: format!(
                    "enableIPForwarding is off on {nic}: turn it on (az network nic update --ip-forwarding true), or set ipForwarding: set"
                ),
            },
        })
    }

    /// Logs a permission error at error the first time it is seen, at debug after that.
    fn report_permission(&self, reason: &str) {
        let first = self.reported.lock().map(|mut seen| seen.insert(reason.to_owned())).unwrap_or(true);
        if first {
            tracing::error!(%reason, "azure: not permitted; fix the identity or its role");
        } else {
            tracing::debug!(%reason, "azure: not permitted (reported before)");
        }
    }

    fn outcome_of(&self, error: ArmError) -> ExecutionOutcome {
        let reason = error.to_string();
        match error {
            ArmError::Permission { .. } => {
                self.report_permission(&reason);
                ExecutionOutcome::Failed { reason }
            }
            ArmError::Refused { .. } | ArmError::Setup { .. } => ExecutionOutcome::Failed { reason },
            // A write may have been made, or an operation be under way (SPEC 6: in doubt).
            ArmError::InDoubt { cause, .. } => {
                if matches!(*cause, ArmError::Permission { .. }) {
                    self.report_permission(&reason);
                }
                ExecutionOutcome::Unknown { reason }
            }
            ArmError::NoAnswer { .. } | ArmError::Deadline { .. } => ExecutionOutcome::Unknown { reason },
        }
    }
}

impl Executor for AzureExecutor {
    fn execute<'a>(&'a self, action: &'a StampedAction, deadline: Instant) -> ExecuteFuture<'a> {
        Box::pin(async move {
            let nic = &*action.nic;
            let result = match action.verb {
                Verb::AssignSecondaryIp => self.acquire(nic, action.address, deadline).await,
                Verb::EnableForwarding => self.forwarding(nic, deadline).await,
                Verb::DisableForwarding => Ok(ExecutionOutcome::Executed {
                    detail: format!("enableIPForwarding left as it is on {nic}: it is per NIC"),
                }),
                Verb::UnassignSecondaryIp => self.release(nic, action.address, deadline).await,
                other => Ok(ExecutionOutcome::Failed {
                    reason: format!("verb {} is not an azure verb; not called", other.as_str()),
                }),
            };
            result.unwrap_or_else(|e| self.outcome_of(e))
        })
    }

    fn inventory<'a>(&'a self, request: &'a InventoryRequest) -> Option<InventoryFuture<'a>> {
        Some(Box::pin(async move {
            // The agent bounds the read by the provider's call timeout; this bound only keeps the
            // retries' arithmetic finite.
            let deadline = Instant::now() + std::time::Duration::from_secs(3600);
            // The resource groups of the nodes' NICs, once each (ARM names compare without case).
            let mut groups: Vec<String> = request.nics.iter().filter_map(|n| super::group_of(n)).collect();
            groups.sort_by_key(|g| g.to_ascii_lowercase());
            groups.dedup_by(|a, b| a.eq_ignore_ascii_case(b));
            let result = match self.arm() {
                Ok(arm) => arm.holders(&groups, &request.nics, &request.addresses, deadline).await,
                Err(e) => Err(e),
            };
            match result {
                Ok(found) => Ok(found.into_iter().collect()),
                Err(e) => {
                    let reason = e.to_string();
                    if matches!(e, ArmError::Permission { .. }) {
                        self.report_permission(&reason);
                    }
                    Err(reason)
                }
            }
        }))
    }

    fn throttled_calls(&self) -> u64 {
        self.client.get().and_then(|c| c.as_ref().ok()).map_or(0, Arm::throttled_calls)
    }
}
