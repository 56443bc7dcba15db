//! The seize and the inventory of the `azure` provider: where an address is held, and moving it
//! onto a node's NIC. A holder counts only in the virtual network of the node's NIC's primary
//! subnet (the id prefix up to `/subnets/`, compared without regard to case as ARM does): one
//! resource group may hold several virtual networks with overlapping ranges, and the same
//! address there is another address.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use tokio::time::Instant;

use crate::client::{BACKOFF_FIRST, not_past};
use crate::nic::{Nic, nics_in_message, vnet_of};
use crate::ops::{Put, Released, in_doubt, in_use, pause};
use crate::{Arm, ArmError};

/// How many `PrivateIPAddressInUse` answers one seize handles before it fails: each names a
/// holder it removes the address from; more means someone keeps putting it back.
pub const IN_USE_MAX: u32 = 3;

/// What a seize did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seized {
    /// The address was on the NIC already: nothing written.
    Already,
    /// The address was added to the NIC (and confirmed by a read), after being removed from
    /// these NICs.
    Added {
        /// The NICs it was removed from first.
        moved_from: Vec<String>,
    },
}

/// Where `own` would add an address: its primary subnet and that subnet's virtual network.
struct Target {
    subnet: String,
    vnet: String,
}

impl Target {
    fn of(nic: &Nic) -> Result<Self, ArmError> {
        let refuse = |message: String| ArmError::Refused {
            operation: "NetworkInterfaces_CreateOrUpdate",
            status: 0,
            code: "NoPrimarySubnet".into(),
            message,
        };
        let subnet = nic
            .primary_subnet()
            .ok_or_else(|| refuse(format!("{} has no primary ipConfiguration with a subnet", nic.id)))?;
        let vnet = vnet_of(subnet).ok_or_else(|| {
            refuse(format!("{}'s primary subnet `{subnet}` is not a virtual network's subnet", nic.id))
        })?;
        Ok(Self { subnet: subnet.to_owned(), vnet: vnet.to_owned() })
    }

    /// A holder in the virtual network but another subnet: the address cannot go into ours
    /// (Azure would refuse it, after the removal), so nothing is written.
    fn check(&self, own: &str, holder: &Nic, address: IpAddr) -> Result<(), ArmError> {
        let theirs = holder.subnet_holding(address).unwrap_or_default();
        if theirs.eq_ignore_ascii_case(&self.subnet) {
            return Ok(());
        }
        Err(ArmError::Refused {
            operation: "NetworkInterfaces_CreateOrUpdate",
            status: 0,
            code: "OtherSubnet".into(),
            message: format!(
                "{address} is on {} in subnet {theirs}, not in subnet {} of {own} where it would be added: nothing written",
                holder.id, self.subnet
            ),
        })
    }
}

impl Arm {
    /// Moves `address` onto NIC `own`: nothing when it is there already (settled); else removes
    /// it from every other NIC of `group` that has it in `own`'s virtual network, adds it to `own`
    /// (a static ipConfiguration in the primary's subnet), and reads `own` until the address
    /// shows, settled. A holder in another subnet of the virtual network is refused before any
    /// write. When ARM answers `PrivateIPAddressInUse` (a holder the list did not show: it lags,
    /// or the NIC is in another resource group), the NIC its message names (the first NIC id in it
    /// other than `own`) is read and the address removed there; a message naming none is looked again once, then refused. A crash between
    /// the removal and the addition leaves the address on no NIC; the next seize then only adds it.
    ///
    /// # Errors
    ///
    /// Those of the calls; [`ArmError::Deadline`] when the address is not confirmed in time;
    /// [`ArmError::InDoubt`] when a write was accepted and what followed failed.
    pub async fn seize(
        &self,
        own: &str,
        group: &str,
        address: IpAddr,
        deadline: Instant,
    ) -> Result<Seized, ArmError> {
        let step = "NetworkInterfaces_CreateOrUpdate";
        let mut backoff = BACKOFF_FIRST;
        let mut moved_from = Vec::new();
        let mut in_use_seen = 0;
        let mut looked_again = false;
        let mut nic = self.settled(own, deadline).await?;
        loop {
            if nic.holds(address) {
                return Ok(if moved_from.is_empty() {
                    Seized::Already
                } else {
                    Seized::Added { moved_from }
                });
            }
            let target = Target::of(&nic)?;
            let holders: Vec<Nic> = self
                .list_nics(group, deadline)
                .await?
                .into_iter()
                .filter(|other| !other.is(own) && other.holds_in(address, &target.vnet))
                .collect();
            for holder in &holders {
                target.check(own, holder, address)?;
            }
            for holder in holders {
                not_past(step, deadline)?;
                let id = holder.id.clone();
                if self.remove_from(holder, address, deadline).await? == Released::Removed {
                    moved_from.push(id);
                }
            }
            let Some(body) = nic.with(address) else {
                return Err(ArmError::Refused {
                    operation: step,
                    status: 0,
                    code: "NoPrimarySubnet".into(),
                    message: format!("{own} has no ipConfigurations to add to"),
                });
            };
            not_past(step, deadline)?;
            match self.put_nic(&nic, &body, deadline).await? {
                Put::Done => {
                    self.confirm(own, address, deadline).await.map_err(|e| in_doubt(step, e))?;
                    return Ok(Seized::Added { moved_from });
                }
                // Someone wrote the NIC since it was read: read again, and look again.
                Put::EtagMoved => pause(&mut backoff, deadline).await?,
                Put::InUse(message) => {
                    in_use_seen += 1;
                    if in_use_seen > IN_USE_MAX {
                        return Err(in_use(message));
                    }
                    let named = match nics_in_message(&message).into_iter().find(|h| !nic.is(h)) {
                        Some(holder) => match self.get_nic(&holder, deadline).await {
                            Ok(holder) => Some(holder),
                            Err(ArmError::Refused { status: 404, .. }) => None,
                            Err(e) => return Err(e),
                        },
                        None => None,
                    };
                    match named.filter(|h| h.holds_in(address, &target.vnet)) {
                        Some(holder) => {
                            target.check(own, &holder, address)?;
                            let id = holder.id.clone();
                            if self.remove_from(holder, address, deadline).await? == Released::Removed {
                                moved_from.push(id);
                            }
                        }
                        // No holder to be had: one more look (a list that lagged), then refused.
                        None if looked_again => return Err(in_use(message)),
                        None => {
                            looked_again = true;
                            pause(&mut backoff, deadline).await?;
                        }
                    }
                }
            }
            nic = self.settled(own, deadline).await?;
        }
    }

    /// Where each of `addresses` is held among the NICs of resource `groups`
    /// (`/subscriptions/{s}/resourceGroups/{rg}`, those of the nodes' NICs): for every address
    /// asked, the ids of the NICs holding it in a virtual network of the nodes' NICs (their
    /// primary subnets'), sorted (a NIC of `nics` spelled as given there); held nowhere maps to
    /// an empty list. One list per resource group, paged.
    ///
    /// # Errors
    ///
    /// Those of [`Arm::list_nics`]; [`ArmError::Refused`] when `groups` is empty.
    pub async fn holders(
        &self,
        groups: &[String],
        nics: &[String],
        addresses: &[IpAddr],
        deadline: Instant,
    ) -> Result<BTreeMap<IpAddr, Vec<String>>, ArmError> {
        let mut found: BTreeMap<IpAddr, BTreeSet<String>> =
            addresses.iter().map(|a| (*a, BTreeSet::new())).collect();
        if nics.is_empty() || addresses.is_empty() {
            return Ok(found.into_keys().map(|a| (a, Vec::new())).collect());
        }
        if groups.is_empty() {
            return Err(ArmError::Refused {
                operation: "NetworkInterfaces_List",
                status: 0,
                code: "NoNodeNic".into(),
                message: "no NIC of the nodes is an ARM resource id: nothing to list".into(),
            });
        }
        let mut listed = Vec::new();
        for group in groups {
            listed.extend(self.list_nics(group, deadline).await?);
        }
        // The virtual networks of the nodes' NICs: an address elsewhere is another address.
        let vnets: Vec<String> = listed
            .iter()
            .filter(|nic| nics.iter().any(|n| nic.is(n)))
            .filter_map(|nic| nic.primary_subnet().and_then(vnet_of).map(str::to_owned))
            .collect();
        for nic in &listed {
            let name = nics.iter().find(|n| nic.is(n)).cloned().unwrap_or_else(|| nic.id.clone());
            for (address, holders) in &mut found {
                if vnets.iter().any(|vnet| nic.holds_in(*address, vnet)) {
                    holders.insert(name.clone());
                }
            }
        }
        Ok(found.into_iter().map(|(a, holders)| (a, holders.into_iter().collect())).collect())
    }
}
