//! [`OciExecutor`]: the `oci` provider (SPEC 7) — OCI secondary private IPs on VNICs, through
//! `tenure-oci` (cargo feature `oci`).
//!
//! | verb | calls | reports `executed` when |
//! |---|---|---|
//! | `assign-secondary-ip` | GetVnic (once per VNIC: its subnet, cached), ListPrivateIps by subnet and address; then UpdatePrivateIp `{vnicId: own}` when another VNIC has the object or none does (a RESERVED one), CreatePrivateIp when there is no object, nothing when the own VNIC has it; then GetPrivateIp until it shows the own VNIC | the object is confirmed on the own VNIC; `unknown` if not by the deadline, or when the write was accepted and its confirmation failed; `failed` when the address is another VNIC's primary IP |
//! | `enable-forwarding` | GetVnic (and UpdateVnic with `skipSourceDestCheck: set`) | `skipSourceDestCheck` is true; `failed`, naming the VNIC, when it is off and not to be set |
//! | `disable-forwarding` | none: the flag is per VNIC and other addresses may need it | always (it says so) |
//! | `unassign-secondary-ip` | ListPrivateIps by subnet and address; GetPrivateIp of the object (where it is now, and its `etag`); then, only when it is on the own VNIC and not its primary, DeletePrivateIp — PrivateIpVnicDetach for a RESERVED one — with `if-match: <etag>`, so that it cannot act on the object once anything moved it; a 412, 429, 409 or 5xx reads it again and decides again, never resending blind | deleted (detached), or not there / on no VNIC / on another VNIC (taken by a seize) |
//!
//! Inventory ([`Executor::inventory`]): ListPrivateIps of every subnet of the provider's VNICs
//! (every page), reduced to the pools' addresses.
//!
//! The fence gate ran immediately before [`Executor::execute`]; this executor never judges
//! staleness. 429 and 409 `Conflict`/`IncorrectState` are resent after `Retry-After` within the
//! action's deadline (429 and `IncorrectState` counted: [`OciExecutor::throttled_calls`]); 5xx
//! too; nothing is sent past the deadline. 401 and 404 `NotAuthorizedOrNotFound` are `failed` at
//! once with the IAM policy hint, logged at error the first time each distinct error is seen and
//! at debug after that. A write that may have taken effect (no answer, or a 5xx not cleared by a
//! later answer) is `unknown`, not `failed` (SPEC 6: a call in doubt). IPv6 addresses are refused
//! before any call: OCI keeps them as `Ipv6` objects, which this provider does not move.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// Whether the instance principal's background refresh was started.
    refreshing: AtomicBool,
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
            refreshing: AtomicBool::new(false),
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
            refreshing: AtomicBool::new(false),
        }
    }

    /// The client; the first time, with instance principals, the session's background refresh is
    /// started (its first federation runs beside the first call, later ones off the call path).
    async fn core(&self) -> Result<&Core, OciError> {
        let core = self.client_core().await?;
        if !self.refreshing.swap(true, Ordering::Relaxed) {
            core.keep_session_fresh();
        }
        Ok(core)
    }

    async fn client_core(&self) -> Result<&Core, OciError> {
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
                Some(object) if object.vnic_id.as_deref() == Some(vnic) => {
                    return Ok(ExecutionOutcome::Executed {
                        detail: format!("{address} is on {vnic} ({}, read)", object.id),
                    });
                }
                Some(object) if object.is_primary => {
                    return Ok(ExecutionOutcome::Failed {
                        reason: format!(
                            "{address} is the primary IP of {}: never moved",
                            object.vnic_id.as_deref().unwrap_or("a VNIC")
                        ),
                    });
                }
                // On another VNIC, or on none (a RESERVED private IP): UpdatePrivateIp assigns it.
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

    /// GetPrivateIp until the object shows `vnic` (OCI's reads lag its writes). The write was
    /// accepted: a confirmation that cannot be had is `unknown`, never `failed`.
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
                Ok((object, _)) if object.vnic_id.as_deref() == Some(vnic) => {
                    return Ok(ExecutionOutcome::Executed {
                        detail: format!("{address} assigned to {vnic} (confirmed)"),
                    });
                }
                Ok((object, _)) => object.vnic_id.unwrap_or_else(|| "no VNIC".to_owned()),
                // A read that does not see the object just created yet.
                Err(OciError::Permission { status: 404, .. }) => "no such object yet".to_owned(),
                Err(e) => {
                    return Ok(ExecutionOutcome::Unknown {
                        reason: format!(
                            "{address}: the write to {vnic} was accepted, but not confirmed: {e}"
                        ),
                    });
                }
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

    /// The release: the object is read (GetPrivateIp, after the list found it) and written only
    /// with `if-match` on the etag of that read, so that a list that lags, or a write answered 429,
    /// 409 or 5xx and then waited for, cannot delete the object from the VNIC that took it
    /// meanwhile. Every write that is not answered 2xx is followed by a new read before another
    /// is sent.
    async fn release(
        &self,
        vnic: &str,
        address: IpAddr,
        deadline: Instant,
    ) -> Result<ExecutionOutcome, OciError> {
        let core = self.core().await?;
        let subnet = self.subnet_of(core, vnic, deadline).await?;
        let Some(listed) = core.private_ip_by_address(&subnet, address, deadline).await? else {
            return Ok(ExecutionOutcome::Executed {
                detail: format!("{address} was on no VNIC (released already)"),
            });
        };
        let id = listed.id;
        let mut turn = ReleaseTurns::default();
        loop {
            let (object, etag) = match core.private_ip(&id, deadline).await {
                Ok(found) => found,
                // The list showed it and GetPrivateIp needs no more than ListPrivateIps: gone.
                Err(OciError::Permission { status: 404, .. }) => {
                    return Ok(ExecutionOutcome::Executed {
                        detail: format!("{address} is gone ({id}): released already"),
                    });
                }
                Err(e) => return Err(turn.in_doubt(e)),
            };
            match object.vnic_id.as_deref() {
                None => {
                    return Ok(ExecutionOutcome::Executed {
                        detail: format!("{address} is on no VNIC ({id}): released already"),
                    });
                }
                Some(other) if other != vnic => {
                    return Ok(ExecutionOutcome::Executed {
                        detail: format!("{address} is on {other} (taken by a seize): not deleted"),
                    });
                }
                Some(_) => {}
            }
            // A write of ours answered 404 and the object still reads as ours: no write is sent
            // again; read until a read says gone (a lagging read) or the deadline says unknown.
            if turn.not_found.is_some() {
                if Instant::now() + CONFIRM_INTERVAL >= deadline {
                    return Ok(turn.not_found_at_deadline(address, vnic));
                }
                tokio::time::sleep(CONFIRM_INTERVAL).await;
                continue;
            }
            if object.is_primary {
                return Ok(ExecutionOutcome::Failed {
                    reason: format!("{address} is the primary IP of {vnic}: never deleted"),
                });
            }
            // Without the etag the delete would act on the object wherever it is by then (a seize
            // may move it between this read and the delete): never sent unconditionally.
            let Some(etag) = etag else {
                return Ok(ExecutionOutcome::Failed {
                    reason: format!(
                        "GetPrivateIp of {id} answered no etag: {address} not released (a delete without if-match \
                         could remove it from the VNIC that seizes it meanwhile); not called"
                    ),
                });
            };
            let reserved = object.is_reserved();
            let sent = if reserved {
                core.detach_private_ip(&id, Some(&etag), deadline).await.map(|_| ())
            } else {
                core.delete_private_ip(&id, Some(&etag), deadline).await
            };
            turn.writes += 1;
            let wait = match sent {
                Ok(()) if reserved => {
                    return Ok(ExecutionOutcome::Executed {
                        detail: format!("{address} detached from {vnic} ({id}, reserved: kept)"),
                    });
                }
                Ok(()) => {
                    return Ok(ExecutionOutcome::Executed {
                        detail: format!("{address} deleted from {vnic} ({id})"),
                    });
                }
                // Changed since the read (moved, or an earlier try of ours landed): read again.
                Err(OciError::Refused { status: 412, .. }) => CONFIRM_INTERVAL,
                // 404 NotAuthorizedOrNotFound: gone (an earlier try, ours or of an earlier attempt,
                // did it, and the last read lagged) or not permitted; the next read decides.
                Err(e @ OciError::Permission { status: 404, .. }) => {
                    turn.not_found = Some(e);
                    CONFIRM_INTERVAL
                }
                Err(OciError::Busy { operation, status, code, message, retry_after }) => {
                    if status >= 500 {
                        turn.doubt = turn.doubt.or(Some(status));
                    }
                    turn.last = Some(OciError::Refused { operation, status, code, message });
                    retry_after.unwrap_or_else(|| turn.backoff())
                }
                Err(e) => return Err(turn.in_doubt(e)),
            };
            if Instant::now() + wait >= deadline {
                if turn.not_found.is_some() {
                    return Ok(turn.not_found_at_deadline(address, vnic));
                }
                return Err(turn.give_up(wait));
            }
            tokio::time::sleep(wait).await;
        }
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
            OciError::Refused { .. } | OciError::NotSent { .. } => ExecutionOutcome::Failed { reason },
            OciError::Busy { status, .. } if status < 500 => ExecutionOutcome::Failed { reason },
            // The request may have reached OCI, or been applied.
            OciError::NoAnswer { .. } | OciError::InDoubt { .. } | OciError::Busy { .. } => {
                ExecutionOutcome::Unknown { reason }
            }
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
        // IPv4 only: OCI's IPv6 addresses are other objects, which this provider does not move.
        let mut found: BTreeMap<IpAddr, BTreeSet<String>> =
            request.addresses.iter().filter(|a| a.is_ipv4()).map(|a| (*a, BTreeSet::new())).collect();
        for subnet in subnets {
            for object in core.private_ips_in_subnet(&subnet, deadline).await? {
                // An object on no VNIC (RESERVED, unassigned) is held nowhere.
                if let Ok(address) = object.ip_address.parse::<IpAddr>()
                    && let Some(holders) = found.get_mut(&address)
                    && let Some(vnic) = object.vnic_id
                {
                    holders.insert(vnic);
                }
            }
        }
        Ok(found.into_iter().map(|(a, h)| (a, h.into_iter().collect())).collect())
    }
}

impl Executor for OciExecutor {
    fn execute<'a>(&'a self, action: &'a StampedAction, deadline: Instant) -> ExecuteFuture<'a> {
        Box::pin(async move {
            let vnic = &*action.nic;
            if action.address.is_ipv6()
                && matches!(action.verb, Verb::AssignSecondaryIp | Verb::UnassignSecondaryIp)
            {
                return ExecutionOutcome::Failed {
                    reason: format!(
                        "{}: the oci provider moves IPv4 secondary private IPs only (OCI keeps IPv6 addresses \
                         as Ipv6 objects); not called",
                        action.address
                    ),
                };
            }
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

    /// Calls answered 429 or 409 `IncorrectState` so far (each waited for and resent, or given
    /// up at the deadline).
    fn throttled_calls(&self) -> u64 {
        self.client.get().map_or(0, Core::throttled)
    }
}

/// What a release's writes have met so far.
#[derive(Debug)]
struct ReleaseTurns {
    /// Writes sent (DeletePrivateIp or PrivateIpVnicDetach).
    writes: u32,
    /// The 5xx status of a write that may have taken effect.
    doubt: Option<u16>,
    /// The last answer that asked to wait (429, 409, 5xx).
    last: Option<OciError>,
    /// A write answered 404 `NotAuthorizedOrNotFound`: reads decide whether it is gone.
    not_found: Option<OciError>,
    next_backoff: Duration,
}

impl Default for ReleaseTurns {
    fn default() -> Self {
        Self {
            writes: 0,
            doubt: None,
            last: None,
            not_found: None,
            next_backoff: tenure_oci::http::BACKOFF_FIRST,
        }
    }
}

impl ReleaseTurns {
    /// The wait before the next read when OCI named none (doubling, as `tenure-oci` waits).
    fn backoff(&mut self) -> Duration {
        let wait = self.next_backoff;
        self.next_backoff = (wait * 2).min(tenure_oci::http::BACKOFF_MAX);
        wait
    }

    /// `error`, or — after a write answered 5xx — the same error as in doubt (`unknown`).
    fn in_doubt(&self, error: OciError) -> OciError {
        match (self.doubt, error) {
            (Some(first), OciError::Refused { operation, status, code, message }) => {
                OciError::InDoubt { operation, status, code, message, first }
            }
            (Some(first), OciError::Permission { operation, status, code, message, hint }) => {
                OciError::InDoubt { operation, status, code, message: format!("{message} ({hint})"), first }
            }
            (Some(first), OciError::NotSent { operation, message }) => {
                OciError::InDoubt { operation, status: first, code: "NotResent".into(), message, first }
            }
            (_, other) => other,
        }
    }

    /// A write answered 404 and every read until the deadline still showed the object on `vnic`:
    /// a read that lags a delete that applied, or no permission to delete. Unknown, not failed:
    /// the object may be gone.
    fn not_found_at_deadline(&mut self, address: IpAddr, vnic: &str) -> ExecutionOutcome {
        let answer = self.not_found.take().map(|e| e.to_string()).unwrap_or_default();
        ExecutionOutcome::Unknown {
            reason: format!(
                "{address}: {answer}; GetPrivateIp still showed it on {vnic} at the deadline: either the reads lag a \
                 delete that applied, or the policy does not allow the delete"
            ),
        }
    }

    /// Given up: the next read and write would not fit before the deadline.
    fn give_up(&mut self, wait: Duration) -> OciError {
        let reason = format!("not resent: waiting {wait:?} would pass the deadline");
        let error = match self.last.take() {
            Some(OciError::Refused { operation, status, code, message }) => {
                OciError::Refused { operation, status, code, message: format!("{message} ({reason})") }
            }
            _ => OciError::Refused {
                operation: "DeletePrivateIp",
                status: 412,
                code: "NoEtagMatch".into(),
                message: format!("the private IP kept changing under the release ({reason})"),
            },
        };
        self.in_doubt(error)
    }
}
