//! [`AwsExecutor`]: the `aws` provider (SPEC 7) — EC2 secondary private IPv4 addresses, through
//! `tenure-aws` (cargo feature `aws`).
//!
//! | verb | calls | reports `executed` when |
//! |---|---|---|
//! | `assign-secondary-ip` | `AssignPrivateIpAddresses` (with `AllowReassignment`) on the holder's ENI, then `DescribeNetworkInterfaces` until the address shows there | the address is confirmed on the ENI; `failed` if it is not by the confirmation bound |
//! | `enable-forwarding` | `ModifyNetworkInterfaceAttribute` source/dest check off | EC2 accepted it |
//! | `disable-forwarding` | none: the check is per interface and other addresses may need it off | always (it says so) |
//! | `unassign-secondary-ip` | `UnassignPrivateIpAddresses` on the leaving node's own ENI (and one describe if EC2 refuses it) | accepted, or refused because the address is not there (taken by a seize, or released already) |
//!
//! Inventory ([`Executor::inventory`]): [`Ec2::holders`] — every ENI, in the VPCs of the
//! provider's nodes, that holds one of the pools' IPv4 addresses (IPv6 addresses are not
//! reported: this provider does not move them).
//!
//! The fence gate ran immediately before [`Executor::execute`] is called; this executor never
//! judges staleness. Throttling and server errors are retried inside the SDK (jittered backoff);
//! the whole call is bounded by the action's deadline ([`crate::exec::execute_within`]). A credential
//! or permission error is `failed` at once, logged at error the first time each distinct error
//! is seen and at debug after that (the sweep retries the action at the requeue interval; the
//! log does not repeat it).

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

/// The EC2 calls this executor makes (and, for tests' fixtures, the SDK: `tenure_aws::sdk`).
pub use tenure_aws::{self, Ec2, Ec2Error, Unassigned};
use tenure_core::model::{StampedAction, Verb};
use tokio::time::Instant;

use crate::exec::{ExecuteFuture, ExecutionOutcome, Executor, InventoryFuture, InventoryRequest};

/// Time between confirmation reads after an assign.
pub const CONFIRM_INTERVAL: Duration = Duration::from_millis(200);

/// Room kept before the deadline for the confirmation's last read to answer.
const CONFIRM_MARGIN: Duration = Duration::from_millis(500);

/// The `aws` provider for one region.
#[derive(Debug)]
pub struct AwsExecutor {
    region: String,
    endpoint_url: Option<String>,
    /// The client, made on the first call (loading the credential chain is async).
    client: tokio::sync::OnceCell<Ec2>,
    /// Permission errors already logged at error.
    reported: Mutex<HashSet<String>>,
}

impl AwsExecutor {
    /// Calls EC2 in `region`, at `endpoint_url` when given (moto in tests), with the SDK's
    /// standard credential chain.
    #[must_use]
    pub fn new(region: &str, endpoint_url: Option<&str>) -> Self {
        Self {
            region: region.to_owned(),
            endpoint_url: endpoint_url.map(str::to_owned),
            client: tokio::sync::OnceCell::new(),
            reported: Mutex::new(HashSet::new()),
        }
    }

    /// Calls EC2 through `ec2` (a client made elsewhere, e.g. with fixed credentials in tests).
    #[must_use]
    pub fn with_client(ec2: Ec2) -> Self {
        Self {
            region: String::new(),
            endpoint_url: None,
            client: tokio::sync::OnceCell::new_with(Some(ec2)),
            reported: Mutex::new(HashSet::new()),
        }
    }

    async fn ec2(&self) -> &Ec2 {
        self.client.get_or_init(|| Ec2::connect(&self.region, self.endpoint_url.as_deref())).await
    }

    async fn acquire(&self, eni: &str, action: &StampedAction, deadline: Instant) -> ExecutionOutcome {
        if let Err(e) = self.ec2().await.assign(eni, action.address).await {
            return self.outcome_of(e);
        }
        // EC2 answers before every reader sees the change: confirm on the ENI itself.
        loop {
            match self.ec2().await.addresses(eni).await {
                Ok(held) if held.contains(&action.address) => {
                    return ExecutionOutcome::Executed {
                        detail: format!("{} assigned to {eni} (confirmed)", action.address),
                    };
                }
                Ok(_) => {}
                Err(e) => return self.outcome_of(e),
            }
            if Instant::now() + CONFIRM_INTERVAL + CONFIRM_MARGIN >= deadline {
                return ExecutionOutcome::Unknown {
                    reason: format!(
                        "{} assigned to {eni}, but DescribeNetworkInterfaces did not show it before the deadline",
                        action.address
                    ),
                };
            }
            tokio::time::sleep(CONFIRM_INTERVAL).await;
        }
    }

    async fn release(&self, eni: &str, action: &StampedAction) -> ExecutionOutcome {
        match self.ec2().await.unassign(eni, action.address).await {
            Ok(Unassigned::Accepted) => ExecutionOutcome::Executed {
                detail: format!("{} is not on {eni} (unassign accepted)", action.address),
            },
            Ok(Unassigned::NotThere) => ExecutionOutcome::Executed {
                detail: format!(
                    "{} was not on {eni} (released already, or taken by a seize)",
                    action.address
                ),
            },
            Err(e) => self.outcome_of(e),
        }
    }

    /// Logs a permission error at error the first time it is seen, at debug after that.
    fn report_permission(&self, reason: &str) {
        let first = self.reported.lock().map(|mut seen| seen.insert(reason.to_owned())).unwrap_or(true);
        if first {
            tracing::error!(%reason, "aws: not permitted; fix the credentials or the IAM policy");
        } else {
            tracing::debug!(%reason, "aws: not permitted (reported before)");
        }
    }

    fn outcome_of(&self, error: Ec2Error) -> ExecutionOutcome {
        let reason = error.to_string();
        match error {
            Ec2Error::Permission { .. } => {
                self.report_permission(&reason);
                ExecutionOutcome::Failed { reason }
            }
            Ec2Error::Refused { .. } => ExecutionOutcome::Failed { reason },
            // The request may have reached EC2.
            Ec2Error::NoAnswer { .. } => ExecutionOutcome::Unknown { reason },
        }
    }
}

impl Executor for AwsExecutor {
    fn execute<'a>(&'a self, action: &'a StampedAction, deadline: Instant) -> ExecuteFuture<'a> {
        Box::pin(async move {
            let eni = &*action.nic;
            match action.verb {
                Verb::AssignSecondaryIp => self.acquire(eni, action, deadline).await,
                Verb::EnableForwarding => match self.ec2().await.set_source_dest_check(eni, false).await {
                    Ok(()) => {
                        ExecutionOutcome::Executed { detail: format!("source/dest check off on {eni}") }
                    }
                    Err(e) => self.outcome_of(e),
                },
                Verb::DisableForwarding => ExecutionOutcome::Executed {
                    detail: format!("source/dest check left off on {eni}: it is per interface"),
                },
                Verb::UnassignSecondaryIp => self.release(eni, action).await,
                other => ExecutionOutcome::Failed {
                    reason: format!("verb {} is not an aws verb; not called", other.as_str()),
                },
            }
        })
    }

    fn inventory<'a>(&'a self, request: &'a InventoryRequest) -> Option<InventoryFuture<'a>> {
        Some(Box::pin(async move {
            let addresses: Vec<std::net::Ipv4Addr> = request
                .addresses
                .iter()
                .filter_map(|a| match a {
                    std::net::IpAddr::V4(v4) => Some(*v4),
                    std::net::IpAddr::V6(_) => None,
                })
                .collect();
            match self.ec2().await.holders(&request.nics, &addresses).await {
                Ok(found) => {
                    Ok(found.into_iter().map(|(a, holders)| (std::net::IpAddr::V4(a), holders)).collect())
                }
                Err(e) => {
                    let reason = e.to_string();
                    if matches!(e, Ec2Error::Permission { .. }) {
                        self.report_permission(&reason);
                    }
                    Err(reason)
                }
            }
        }))
    }
}
