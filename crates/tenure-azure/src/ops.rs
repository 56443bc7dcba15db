//! The operations of the `azure` provider on top of [`Arm::call`]: read a NIC (settled), write it
//! with `If-Match` and follow the write's long-running operation, list a resource group's NICs,
//! and the verbs release and forwarding (seize and holders: [`crate::seize`]).

use std::net::IpAddr;
use std::time::Duration;

use azure_core::http::{Method, Url};
use serde_json::Value;
use tokio::time::Instant;

use crate::client::{Answer, BACKOFF_FIRST, BACKOFF_MAX, POLL_DEFAULT};
use crate::nic::{Nic, addresses_in_message};
use crate::{Arm, ArmError};

/// Time between confirmation reads after a write.
pub const CONFIRM_INTERVAL: Duration = Duration::from_millis(200);

/// What a write of a NIC came to.
#[derive(Debug)]
pub(crate) enum Put {
    /// Accepted, and its operation succeeded.
    Done,
    /// 412: the NIC changed since it was read.
    EtagMoved,
    /// 400 `PrivateIPAddressInUse`: another NIC in the subnet has the address.
    InUse(String),
}

/// What a release did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    /// The ipConfiguration was removed.
    Removed,
    /// The address was not on the NIC (released already, or taken by a seize).
    NotThere,
}

/// What a forwarding check or set found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forwarding {
    /// `enableIPForwarding` was on.
    On,
    /// It was off and has been turned on.
    TurnedOn,
    /// It is off, and was only to be checked.
    Off,
}

impl Arm {
    /// Reads the NIC `id`.
    ///
    /// # Errors
    ///
    /// [`ArmError::Refused`] for an unknown NIC (404) or another refusal; those of [`Arm::call`].
    pub async fn get_nic(&self, id: &str, deadline: Instant) -> Result<Nic, ArmError> {
        let operation = "NetworkInterfaces_Get";
        let answer = self.call(operation, Method::Get, &self.url(id)?, None, None, deadline).await?;
        if answer.status != 200 {
            return Err(refused(operation, &answer));
        }
        let etag = answer.etag.clone();
        Nic::from_body(answer.body, etag).ok_or_else(|| ArmError::Refused {
            operation,
            status: 200,
            code: "NotANic".into(),
            message: format!("the answer for `{id}` is not a network interface"),
        })
    }

    /// Reads NIC `id` until it is settled (`provisioningState` `Succeeded`), the NIC every
    /// decision is made on: `Updating` (an earlier write's operation still running) is read again
    /// every [`CONFIRM_INTERVAL`]; `Failed` (an operation that failed left it so, its requested
    /// configuration visible) is written back as read, ARM's documented recovery, and read again.
    /// When ARM refuses that write back with `PrivateIPAddressInUse` (the failed operation's
    /// address went to another NIC meanwhile), it is written back without the ipConfigurations
    /// of the addresses the refusal names: ARM assigns an address to one NIC only, so they are
    /// not this NIC's, and writing them back would be refused for ever.
    ///
    /// # Errors
    ///
    /// Those of the calls; [`ArmError::Deadline`] when it has not settled by `deadline`;
    /// [`ArmError::InDoubt`] when the recovery's write was accepted and then failed.
    pub async fn settled(&self, id: &str, deadline: Instant) -> Result<Nic, ArmError> {
        self.settle(id, None, deadline).await
    }

    /// [`Arm::settled`], except that with `dropping`, a `Failed` NIC showing that address (not
    /// as its primary) is returned as read: the caller's write without the address recovers the
    /// NIC as well, where writing it back first could be refused (another NIC has it now).
    async fn settle(&self, id: &str, dropping: Option<IpAddr>, deadline: Instant) -> Result<Nic, ArmError> {
        let mut backoff = BACKOFF_FIRST;
        loop {
            let nic = self.get_nic(id, deadline).await?;
            match nic.provisioning_state() {
                "Succeeded" => return Ok(nic),
                "Failed" if dropping.is_some_and(|a| nic.holds(a) && !nic.is_primary(a)) => return Ok(nic),
                "Failed" => {
                    tracing::info!(nic = %nic.id, "azure: the NIC is Failed; writing it back as read (ARM's recovery)");
                    match self.put_nic(&nic, &nic.body, deadline).await? {
                        Put::Done => {}
                        Put::EtagMoved => pause(&mut backoff, deadline).await?,
                        Put::InUse(message) => self.write_back_without_taken(&nic, message, deadline).await?,
                    }
                }
                state => {
                    if Instant::now() + CONFIRM_INTERVAL >= deadline {
                        return Err(ArmError::Deadline {
                            operation: "NetworkInterfaces_Get",
                            message: format!("{id} was still {state} at the deadline"),
                        });
                    }
                    tokio::time::sleep(CONFIRM_INTERVAL).await;
                }
            }
        }
    }

    /// The write back of a `Failed` NIC was refused with `PrivateIPAddressInUse` `message`:
    /// writes it back without the (non-primary) addresses the message names. A moved etag is left
    /// to the caller's next read.
    async fn write_back_without_taken(
        &self,
        nic: &Nic,
        message: String,
        deadline: Instant,
    ) -> Result<(), ArmError> {
        let taken: Vec<IpAddr> = addresses_in_message(&message)
            .into_iter()
            .filter(|a| nic.holds(*a) && !nic.is_primary(*a))
            .collect();
        if taken.is_empty() {
            return Err(in_use(message));
        }
        tracing::info!(nic = %nic.id, ?taken, "azure: another NIC has an address this Failed NIC shows; writing it back without it");
        match self.put_nic(nic, &nic.without_all(&taken), deadline).await? {
            Put::Done | Put::EtagMoved => Ok(()),
            Put::InUse(message) => Err(in_use(message)),
        }
    }

    /// Writes `body` as NIC `nic` (If-Match its etag) and follows the operation to its end.
    /// Anything that fails after ARM accepted the write is [`ArmError::InDoubt`].
    pub(crate) async fn put_nic(&self, nic: &Nic, body: &Value, deadline: Instant) -> Result<Put, ArmError> {
        let operation = "NetworkInterfaces_CreateOrUpdate";
        let url = self.url(&nic.id)?;
        let answer =
            self.call(operation, Method::Put, &url, Some(body), nic.etag.as_deref(), deadline).await?;
        match answer.status {
            200..=202 => {
                self.follow(&answer, &url, deadline).await.map_err(|e| in_doubt(operation, e))?;
                Ok(Put::Done)
            }
            412 => Ok(Put::EtagMoved),
            400 if answer.error().0 == "PrivateIPAddressInUse" => Ok(Put::InUse(answer.error().1)),
            _ => Err(refused(operation, &answer)),
        }
    }

    /// Follows a write's long-running operation: done at once when the answer's
    /// `provisioningState` is `Succeeded`; else polls `Azure-AsyncOperation` (until `Succeeded`,
    /// `Failed` or `Canceled`), else `Location` (until not 202), else the resource itself, each
    /// after the `Retry-After` asked for ([`POLL_DEFAULT`] when none).
    async fn follow(&self, first: &Answer, resource: &Url, deadline: Instant) -> Result<(), ArmError> {
        let operation = "NetworkInterfaces_CreateOrUpdate (operation)";
        if first.body["properties"]["provisioningState"].as_str() == Some("Succeeded") && first.status != 202
        {
            return Ok(());
        }
        let (url, by) = if let Some(link) = &first.async_operation {
            (self.followed(operation, link)?, "async")
        } else if let Some(link) = &first.location {
            (self.followed(operation, link)?, "location")
        } else {
            (resource.clone(), "resource")
        };
        let mut wait = first.retry_after.unwrap_or(POLL_DEFAULT);
        loop {
            if Instant::now() + wait >= deadline {
                return Err(ArmError::Deadline {
                    operation,
                    message: "the write was accepted; its operation had not ended by the deadline".into(),
                });
            }
            tokio::time::sleep(wait).await;
            let answer = self.call(operation, Method::Get, &url, None, None, deadline).await?;
            wait = answer.retry_after.unwrap_or(POLL_DEFAULT);
            let state = match by {
                "async" if answer.status == 200 => {
                    answer.body["status"].as_str().unwrap_or("InProgress").to_owned()
                }
                "location" if answer.status == 202 => "InProgress".to_owned(),
                "location" if answer.status == 200 || answer.status == 204 => "Succeeded".to_owned(),
                "resource" if answer.status == 200 => {
                    answer.body["properties"]["provisioningState"].as_str().unwrap_or("Succeeded").to_owned()
                }
                _ => return Err(refused(operation, &answer)),
            };
            match state.as_str() {
                "Succeeded" => return Ok(()),
                "Failed" | "Canceled" => {
                    let (code, message) = answer.error();
                    return Err(ArmError::Refused { operation, status: answer.status, code, message });
                }
                _ => {}
            }
        }
    }

    /// Every NIC in the resource group `group` (`/subscriptions/{s}/resourceGroups/{rg}`),
    /// following `nextLink`.
    ///
    /// # Errors
    ///
    /// Those of [`Arm::call`]; [`ArmError::Refused`] for an unknown group.
    pub async fn list_nics(&self, group: &str, deadline: Instant) -> Result<Vec<Nic>, ArmError> {
        let operation = "NetworkInterfaces_List";
        let mut url = self.url(&format!("{group}/providers/Microsoft.Network/networkInterfaces"))?;
        let mut nics = Vec::new();
        loop {
            let answer = self.call(operation, Method::Get, &url, None, None, deadline).await?;
            if answer.status != 200 {
                return Err(refused(operation, &answer));
            }
            let page = answer.body["value"].as_array().cloned().unwrap_or_default();
            nics.extend(page.into_iter().filter_map(|body| Nic::from_body(body, None)));
            match answer.body["nextLink"].as_str() {
                Some(next) if !next.is_empty() => url = self.followed(operation, next)?,
                _ => return Ok(nics),
            }
        }
    }

    /// Removes `address`'s ipConfiguration from `nic` (read before, maybe by a list), re-reading
    /// it after a 412; never the primary's.
    pub(crate) async fn remove_from(
        &self,
        mut nic: Nic,
        address: IpAddr,
        deadline: Instant,
    ) -> Result<Released, ArmError> {
        let mut backoff = BACKOFF_FIRST;
        loop {
            if !nic.holds(address) {
                return Ok(Released::NotThere);
            }
            if nic.is_primary(address) {
                return Err(ArmError::Refused {
                    operation: "NetworkInterfaces_CreateOrUpdate",
                    status: 0,
                    code: "PrimaryIpConfiguration".into(),
                    message: format!(
                        "{address} is the primary address of {}: never removed (take it out of the pool)",
                        nic.id
                    ),
                });
            }
            match self.put_nic(&nic, &nic.without(address), deadline).await? {
                Put::Done => return Ok(Released::Removed),
                Put::EtagMoved => {
                    pause(&mut backoff, deadline).await?;
                    nic = self.settle(&nic.id, Some(address), deadline).await?;
                }
                Put::InUse(message) => return Err(in_use(message)),
            }
        }
    }

    /// Reads `own` until it shows `address`, settled (ARM's reads may lag its writes, and an
    /// operation may still be running).
    pub(crate) async fn confirm(
        &self,
        own: &str,
        address: IpAddr,
        deadline: Instant,
    ) -> Result<(), ArmError> {
        loop {
            if self.settled(own, deadline).await?.holds(address) {
                return Ok(());
            }
            if Instant::now() + CONFIRM_INTERVAL >= deadline {
                return Err(ArmError::Deadline {
                    operation: "NetworkInterfaces_Get",
                    message: format!(
                        "{address} was added to {own}, but no read showed it before the deadline"
                    ),
                });
            }
            tokio::time::sleep(CONFIRM_INTERVAL).await;
        }
    }

    /// Removes `address` from NIC `own` if it is still there (never the primary's). A `Failed`
    /// NIC showing the address is written without it at once (that write recovers it too): its
    /// write back as read could be refused for ever, when another NIC has the address now.
    ///
    /// # Errors
    ///
    /// Those of the calls; [`ArmError::Refused`] with code `PrimaryIpConfiguration` for the
    /// primary address.
    pub async fn release(&self, own: &str, address: IpAddr, deadline: Instant) -> Result<Released, ArmError> {
        let nic = self.settle(own, Some(address), deadline).await?;
        self.remove_from(nic, address, deadline).await
    }

    /// Checks `enableIPForwarding` on NIC `own`, and turns it on when `set`.
    ///
    /// # Errors
    ///
    /// Those of the calls.
    pub async fn forwarding(&self, own: &str, set: bool, deadline: Instant) -> Result<Forwarding, ArmError> {
        let mut backoff = BACKOFF_FIRST;
        let mut nic = self.settled(own, deadline).await?;
        loop {
            if nic.ip_forwarding() {
                return Ok(Forwarding::On);
            }
            if !set {
                return Ok(Forwarding::Off);
            }
            match self.put_nic(&nic, &nic.with_forwarding(), deadline).await? {
                Put::Done => return Ok(Forwarding::TurnedOn),
                Put::EtagMoved | Put::InUse(_) => {
                    pause(&mut backoff, deadline).await?;
                    nic = self.settled(own, deadline).await?;
                }
            }
        }
    }
}

/// A refusal made of an answer.
pub(crate) fn refused(operation: &'static str, answer: &Answer) -> ArmError {
    let (code, message) = answer.error();
    ArmError::Refused { operation, status: answer.status, code, message }
}

/// ARM's `PrivateIPAddressInUse` refusal, `message` its own.
pub(crate) fn in_use(message: String) -> ArmError {
    ArmError::Refused {
        operation: "NetworkInterfaces_CreateOrUpdate",
        status: 400,
        code: "PrivateIPAddressInUse".into(),
        message,
    }
}

/// What `error`, after a write of `operation` was accepted, means: the write may have applied
/// ([`ArmError::InDoubt`]); a deadline stays one (unknown as well).
pub(crate) fn in_doubt(operation: &'static str, error: ArmError) -> ArmError {
    match error {
        ArmError::InDoubt { .. } | ArmError::Deadline { .. } => error,
        cause => ArmError::InDoubt { operation, cause: Box::new(cause) },
    }
}

/// Waits before reading again after a conflict (doubling, at most [`BACKOFF_MAX`]).
pub(crate) async fn pause(backoff: &mut Duration, deadline: Instant) -> Result<(), ArmError> {
    let wait = *backoff;
    *backoff = (*backoff * 2).min(BACKOFF_MAX);
    if Instant::now() + wait >= deadline {
        return Err(ArmError::Deadline {
            operation: "NetworkInterfaces_CreateOrUpdate",
            message: "the NIC kept changing under the write until the deadline".into(),
        });
    }
    tokio::time::sleep(wait).await;
    Ok(())
}
