//! [`OciExecutor`]: the `oci` provider (SPEC 7) — OCI secondary private IPs on VNICs, through
//! `tenure-oci` (cargo feature `oci`).
//!
//! | verb | calls | reports `executed` when |
//! |---|---|---|
//! | `assign-secondary-ip` | GetVnic (once per VNIC: its subnet, cached), ListPrivateIps by subnet and address; then UpdatePrivateIp `{vnicId: own}` when another VNIC has it, CreatePrivateIp when no VNIC has it, nothing when the own VNIC has it; then GetPrivateIp until it shows the own VNIC | the object is confirmed on the own VNIC; `unknown` if not by the deadline; `failed` when the address is another VNIC's primary IP |
//! | `enable-forwarding` | GetVnic (and UpdateVnic with `skipSourceDestCheck: set`) | `skipSourceDestCheck` is true; `failed`, naming the VNIC, when it is off and not to be set |
//! | `disable-forwarding` | none: the flag is per VNIC and other addresses may need it | always (it says so) |
//! | `unassign-secondary-ip` | ListPrivateIps by subnet and address, then DeletePrivateIp only when the object is on the own VNIC and not its primary | deleted, or not there / on another VNIC (taken by a seize) |
//!
//! Inventory ([`Executor::inventory`]): ListPrivateIps of every subnet of the provider's VNICs
//! (every page), reduced to the pools' addresses.
//!
//! The fence gate ran immediately before [`Executor::execute`]; this executor never judges
//! staleness. 429 and 409 `Conflict`/`IncorrectState` are resent after `Retry-After` within the
//! action's deadline and counted ([`OciExecutor::throttled_calls`]); 5xx too; 401 and 404
//! `NotAuthorizedOrNotFound` are `failed` at once with the IAM policy hint, logged at error the
//! first time each distinct error is seen and at debug after that.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use tenure_core::model::{StampedAction, Verb};
/// The OCI calls this executor makes.
pub use tenure_oci;
use tenure_oci::{Auth, Core, Endpoints, InstancePrincipal, OciError};
use tokio::time::Instant;

use super::{OciAuth, OciSettings, SkipSourceDestCheck};
use crate::exec::notices::MaintenanceNotices;
use crate::exec::{ExecuteFuture, ExecutionOutcome, Executor, InventoryFuture, InventoryRequest};

/// Time between confirmation reads after a move or a create.
pub const CONFIRM_INTERVAL: Duration = Duration::from_millis(200);

/// Room kept before the deadline for the confirmation's last read to answer.
const CONFIRM_MARGIN: Duration = Duration::from_millis(300);

/// Bound of one inventory read (all its pages).
const INVENTORY_MAX: Duration = Duration::from_secs(30);

/// The `oci` provider for one region.
#[derive(Debug)]
pub struct OciExecutor {
    settings: OciSettings,
    /// The client, made on the first call (reading the key file), or given.
    client: tokio::sync::OnceCell<Core>,
    /// Each VNIC's subnet (a VNIC never changes subnet).
    subnets: Mutex<HashMap<String, String>>,
    /// Permission errors already logged at error.
    reported: Mutex<HashSet<String>>,
}

impl OciExecutor {
    /// The executor of `settings`; its client is made on the first call.
    #[must_use]
    pub fn new(settings: OciSettings) -> Self {
        Self {
            settings,
            client: tokio::sync::OnceCell::new(),
            subnets: Mutex::new(HashMap::new()),
            reported: Mutex::new(HashSet::new()),
        }
    }

    /// An executor calling through `core` (a client made elsewhere: tests, the bench).
    #[must_use]
    pub fn with_client(core: Core, skip_source_dest_check: SkipSourceDestCheck) -> Self {
        let settings = OciSettings {
            region: String::new(),
            auth: OciAuth::InstancePrincipal,
            endpoint_url: None,
            skip_source_dest_check,
            maintenance_notices: MaintenanceNotices::Ignore,
        };
        Self {
            settings,
            client: tokio::sync::OnceCell::new_with(Some(core)),
            subnets: Mutex::new(HashMap::new()),
            reported: Mutex::new(HashSet::new()),
        }
    }

    async fn core(&self) -> Result<&Core, OciError> {
        self.client
            .get_or_try_init(|| async {
                let auth = match &self.settings.auth {
                    OciAuth::InstancePrincipal => Auth::InstancePrincipal(InstancePrincipal::new(
                        Endpoints::for_region(&self.settings.region),
                    )),
                    OciAuth::ConfigFile { path, profile } => {
                        Auth::config_file(path, profile).map_err(|e| OciError::Credentials {
                            operation: "LoadConfigFile",
                            message: e.to_string(),
                        })?
                    }
                };
                Core::new(&self.settings.region, self.settings.endpoint_url.as_deref(), auth)
            })
            .await
    }

    /// The VNIC's subnet: cached, else GetVnic.
    async fn subnet_of(&self, core: &Core, vnic: &str, deadline: Instant) -> Result<String, OciError> {
        if let Some(subnet) = self.subnets.lock().ok().and_then(|s| s.get(vnic).cloned()) {
            return Ok(subnet);
        }
        let found = core.vnic(vnic, deadline).await?;
        if let Ok(mut subnets) = self.subnets.lock() {
            subnets.insert(vnic.to_owned(), found.subnet_id.clone());
        }
        Ok(found.subnet_id)
    }

    async fn acquire(
        &self,
        vnic: &str,
        address: IpAddr,
        deadline: Instant,
    ) -> Result<ExecutionOutcome, OciError> {
        let core = self.core().await?;
        let subnet = self.subnet_of(core, vnic, deadline).await?;
        let mut found = core.private_ip_by_address(&subnet, address, deadline).await?;
        // At most one re-read: a create refused because the address appeared meanwhile.
        for _ in 0..2 {
            let id = match &found {
                Some(object) if object.vnic_id == vnic => {
                    return Ok(ExecutionOutcome::Executed {
                        detail: format!("{address} is on {vnic} ({}, read)", object.id),
                    });
                }
                Some(object) if object.is_primary => {
                    return Ok(ExecutionOutcome::Failed {
                        reason: format!("{address} is the primary IP of {}: never moved", object.vnic_id),
                    });
                }
                Some(object) => core.move_private_ip(&object.id, vnic, deadline).await?.id,
                None => match core.create_private_ip(vnic, address, deadline).await {
                    Ok(created) => created.id,
                    Err(OciError::Refused { status: 409, .. }) => {
                        found = core.private_ip_by_address(&subnet, address, deadline).await?;
                        continue;
                    }
                    Err(e) => return Err(e),
                },
            };
            return self.confirm(core, &id, vnic, address, deadline).await;
        }
        Ok(ExecutionOutcome::Unknown {
            reason: format!(
                "{address}: CreatePrivateIp refused it as in use, and it is not found in {subnet}"
            ),
        })
    }

    /// GetPrivateIp until the object shows `vnic` (OCI's reads lag its writes).
    async fn confirm(
        &self,
        core: &Core,
        id: &str,
        vnic: &str,
        address: IpAddr,
        deadline: Instant,
    ) -> Result<ExecutionOutcome, OciError> {
        loop {
            let shown = match core.private_ip(id, deadline).await {
                Ok(object) if object.vnic_id == vnic => {
                    return Ok(ExecutionOutcome::Executed {
                        detail: format!("{address} assigned to {vnic} (confirmed)"),
                    });
                }
                Ok(object) => object.vnic_id,
                // A read that does not see the object just created yet.
                Err(OciError::Permission { status: 404, .. }) => "no such object yet".to_owned(),
                Err(e) => return Err(e),
            };
            if Instant::now() + CONFIRM_INTERVAL + CONFIRM_MARGIN >= deadline {
                return Ok(ExecutionOutcome::Unknown {
                    reason: format!(
                        "{address} moved to {vnic}, but GetPrivateIp still showed {shown} at the deadline"
                    ),
                });
            }
            tokio::time::sleep(CONFIRM_INTERVAL).await;
        }
    }

    async fn release(
        &self,
        vnic: &str,
        address: IpAddr,
        deadline: Instant,
    ) -> Result<ExecutionOutcome, OciError> {
        let core = self.core().await?;
        let subnet = self.subnet_of(core, vnic, deadline).await?;
        let outcome = match core.private_ip_by_address(&subnet, address, deadline).await? {
            None => {
                ExecutionOutcome::Executed { detail: format!("{address} was on no VNIC (released already)") }
            }
            Some(object) if object.vnic_id != vnic => ExecutionOutcome::Executed {
                detail: format!("{address} is on {} (taken by a seize): not deleted", object.vnic_id),
            },
            Some(object) if object.is_primary => ExecutionOutcome::Failed {
                reason: format!("{address} is the primary IP of {vnic}: never deleted"),
            },
            Some(object) => {
                core.delete_private_ip(&object.id, deadline).await?;
                ExecutionOutcome::Executed {
                    detail: format!("{address} deleted from {vnic} ({})", object.id),
                }
            }
        };
        Ok(outcome)
    }

    async fn forwarding(&self, vnic: &str, deadline: Instant) -> Result<ExecutionOutcome, OciError> {
        let core = self.core().await?;
        let found = core.vnic(vnic, deadline).await?;
        if found.skip_source_dest_check {
            return Ok(ExecutionOutcome::Executed {
                detail: format!("skipSourceDestCheck is on for {vnic}"),
            });
        }
        match self.settings.skip_source_dest_check {
            SkipSourceDestCheck::Set => {
                let updated = core.set_skip_source_dest_check(vnic, true, deadline).await?;
                Ok(if updated.skip_source_dest_check {
                    ExecutionOutcome::Executed { detail: format!("skipSourceDestCheck turned on for {vnic}") }
                } else {
                    ExecutionOutcome::Unknown {
                        reason: format!("UpdateVnic answered skipSourceDestCheck off for {vnic}"),
                    }
                })
            }
            SkipSourceDestCheck::Check => Ok(ExecutionOutcome::Failed {
                reason: format!(
                    "skipSourceDestCheck is off for {vnic}: turn it on (oci network vnic update --vnic-id {vnic} \
                     --skip-source-dest-check true) or set the provider's skipSourceDestCheck: set"
                ),
            }),
        }
    }

    /// Logs a permission error at error the first time it is seen, at debug after that.
    fn report_permission(&self, reason: &str) {
        let first = self.reported.lock().map(|mut seen| seen.insert(reason.to_owned())).unwrap_or(true);
        if first {
            tracing::error!(%reason, "oci: not permitted; fix the credentials or the IAM policy");
        } else {
            tracing::debug!(%reason, "oci: not permitted (reported before)");
        }
    }

    fn outcome_of(&self, error: OciError) -> ExecutionOutcome {
        let reason = error.to_string();
        match error {
            OciError::Permission { .. } | OciError::Credentials { .. } => {
                self.report_permission(&reason);
                ExecutionOutcome::Failed { reason }
            }
            OciError::Refused { .. } => ExecutionOutcome::Failed { reason },
            // The request may have reached OCI.
            OciError::NoAnswer { .. } => ExecutionOutcome::Unknown { reason },
        }
    }

    async fn holders(&self, request: &InventoryRequest) -> Result<Vec<(IpAddr, Vec<String>)>, OciError> {
        let deadline = Instant::now() + INVENTORY_MAX;
        let core = self.core().await?;
        let mut subnets = BTreeSet::new();
        let mut first_error = None;
        for vnic in &request.nics {
            match self.subnet_of(core, vnic, deadline).await {
                Ok(subnet) => {
                    subnets.insert(subnet);
                }
                // One wrong VNIC in a config does not blind the whole inventory.
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
        if subnets.is_empty()
            && let Some(e) = first_error
        {
            return Err(e);
        }
        let mut found: BTreeMap<IpAddr, BTreeSet<String>> =
            request.addresses.iter().map(|a| (*a, BTreeSet::new())).collect();
        for subnet in subnets {
            for object in core.private_ips_in_subnet(&subnet, deadline).await? {
                if let Ok(address) = object.ip_address.parse::<IpAddr>()
                    && let Some(holders) = found.get_mut(&address)
                {
                    holders.insert(object.vnic_id);
                }
            }
        }
        Ok(found.into_iter().map(|(a, h)| (a, h.into_iter().collect())).collect())
    }
}

impl Executor for OciExecutor {
    fn execute<'a>(&'a self, action: &'a StampedAction, deadline: Instant) -> ExecuteFuture<'a> {
        Box::pin(async move {
            let vnic = action.nic.as_str();
            let result = match action.verb {
                Verb::AssignSecondaryIp => self.acquire(vnic, action.address, deadline).await,
                Verb::EnableForwarding => self.forwarding(vnic, deadline).await,
                Verb::DisableForwarding => Ok(ExecutionOutcome::Executed {
                    detail: format!("skipSourceDestCheck left as it is on {vnic}: it is per VNIC"),
                }),
                Verb::UnassignSecondaryIp => self.release(vnic, action.address, deadline).await,
                other => Ok(ExecutionOutcome::Failed {
                    reason: format!("verb {} is not an oci verb; not called", other.as_str()),
                }),
            };
            result.unwrap_or_else(|e| self.outcome_of(e))
        })
    }

    fn inventory<'a>(&'a self, request: &'a InventoryRequest) -> Option<InventoryFuture<'a>> {
        Some(Box::pin(async move {
            self.holders(request).await.map_err(|e| {
                let reason = e.to_string();
                if matches!(e, OciError::Permission { .. } | OciError::Credentials { .. }) {
                    self.report_permission(&reason);
                }
                reason
            })
        }))
    }

    /// Calls answered 429 or 409 `Conflict`/`IncorrectState` so far (each waited for and resent,
    /// or given up at the deadline).
    fn throttled_calls(&self) -> u64 {
        self.client.get().map_or(0, Core::throttled)
    }
}
