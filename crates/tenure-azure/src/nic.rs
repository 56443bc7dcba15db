//! [`Nic`]: a network interface as ARM answers it (`Microsoft.Network/networkInterfaces`), kept
//! as JSON so that a PUT sends back every property it was given, changed only where asked.

use std::net::IpAddr;

use serde_json::{Value, json};

/// The prefix of the ipConfigurations this crate adds (`tenure-10-0-0-10`).
pub const CONFIG_PREFIX: &str = "tenure-";

/// A network interface read from ARM.
#[derive(Clone, Debug, PartialEq)]
pub struct Nic {
    /// Its resource id, as ARM spells it.
    pub id: String,
    /// Its etag (the body's, or the answer's `ETag`).
    pub etag: Option<String>,
    /// The resource as read.
    pub body: Value,
}

impl Nic {
    /// The NIC in `body` (an ARM resource), with `etag` when the body has none.
    #[must_use]
    pub fn from_body(body: Value, etag: Option<String>) -> Option<Self> {
        let id = body["id"].as_str()?.to_owned();
        let etag = body["etag"].as_str().map(str::to_owned).or(etag);
        Some(Self { id, etag, body })
    }

    fn configs(&self) -> &[Value] {
        self.body["properties"]["ipConfigurations"].as_array().map_or(&[], Vec::as_slice)
    }

    fn address_of(config: &Value) -> Option<IpAddr> {
        config["properties"]["privateIPAddress"].as_str()?.parse().ok()
    }

    /// Every private address of its ipConfigurations, primary included.
    #[must_use]
    pub fn addresses(&self) -> Vec<IpAddr> {
        self.configs().iter().filter_map(Self::address_of).collect()
    }

    /// Whether an ipConfiguration of this NIC has `address` (whatever its subnet).
    #[must_use]
    pub fn holds(&self, address: IpAddr) -> bool {
        self.configs().iter().any(|c| Self::address_of(c) == Some(address))
    }

    /// The subnet id of the ipConfiguration that has `address`, if any.
    #[must_use]
    pub fn subnet_holding(&self, address: IpAddr) -> Option<&str> {
        self.configs()
            .iter()
            .find(|c| Self::address_of(c) == Some(address))
            .and_then(|c| c["properties"]["subnet"]["id"].as_str())
    }

    /// Whether an ipConfiguration of this NIC has `address` in virtual network `vnet` (an id as
    /// [`vnet_of`] gives it; ARM ids compare without regard to case): an address in another
    /// virtual network is another address.
    #[must_use]
    pub fn holds_in(&self, address: IpAddr, vnet: &str) -> bool {
        self.configs().iter().any(|c| {
            Self::address_of(c) == Some(address)
                && c["properties"]["subnet"]["id"]
                    .as_str()
                    .and_then(vnet_of)
                    .is_some_and(|v| v.eq_ignore_ascii_case(vnet))
        })
    }

    /// The subnet of its primary ipConfiguration (the first one when none says primary): where
    /// an added address goes.
    #[must_use]
    pub fn primary_subnet(&self) -> Option<&str> {
        self.configs()
            .iter()
            .find(|c| c["properties"]["primary"].as_bool() == Some(true))
            .or_else(|| self.configs().first())?["properties"]["subnet"]["id"]
            .as_str()
    }

    /// ARM's `provisioningState` of the NIC (`Succeeded`, `Updating`, `Failed`, …); `Succeeded`
    /// when the answer has none.
    #[must_use]
    pub fn provisioning_state(&self) -> &str {
        self.body["properties"]["provisioningState"].as_str().unwrap_or("Succeeded")
    }

    /// Whether `address` is this NIC's primary ipConfiguration's (never removed).
    #[must_use]
    pub fn is_primary(&self, address: IpAddr) -> bool {
        self.configs().iter().any(|c| {
            Self::address_of(c) == Some(address) && c["properties"]["primary"].as_bool() == Some(true)
        })
    }

    /// `enableIPForwarding`.
    #[must_use]
    pub fn ip_forwarding(&self) -> bool {
        self.body["properties"]["enableIPForwarding"].as_bool() == Some(true)
    }

    /// Whether this is the NIC `id` names (ARM ids compare without regard to case).
    #[must_use]
    pub fn is(&self, id: &str) -> bool {
        self.id.eq_ignore_ascii_case(id)
    }

    /// The name of the ipConfiguration this crate gives `address`.
    #[must_use]
    pub fn config_name(address: IpAddr) -> String {
        let text = address.to_string().replace([':', '.'], "-");
        format!("{CONFIG_PREFIX}{text}")
    }

    /// The body to PUT for this NIC without `address`'s ipConfiguration.
    #[must_use]
    pub fn without(&self, address: IpAddr) -> Value {
        self.without_all(&[address])
    }

    /// The body to PUT for this NIC without the ipConfigurations of `addresses`.
    #[must_use]
    pub fn without_all(&self, addresses: &[IpAddr]) -> Value {
        let mut body = self.body.clone();
        if let Some(configs) = body["properties"]["ipConfigurations"].as_array_mut() {
            configs.retain(|c| Self::address_of(c).is_none_or(|a| !addresses.contains(&a)));
        }
        body
    }

    /// The body to PUT for this NIC with a static ipConfiguration for `address`, in the subnet of
    /// its primary ipConfiguration; `None` when it has no primary with a subnet.
    #[must_use]
    pub fn with(&self, address: IpAddr) -> Option<Value> {
        let subnet = self.primary_subnet()?;
        let version = if address.is_ipv4() { "IPv4" } else { "IPv6" };
        let config = json!({
            "name": Self::config_name(address),
            "properties": {
                "privateIPAddress": address.to_string(),
                "privateIPAllocationMethod": "Static",
                "privateIPAddressVersion": version,
                "primary": false,
                "subnet": {"id": subnet},
            }
        });
        let mut body = self.body.clone();
        body["properties"]["ipConfigurations"].as_array_mut()?.push(config);
        Some(body)
    }

    /// The body to PUT for this NIC with `enableIPForwarding` on.
    #[must_use]
    pub fn with_forwarding(&self) -> Value {
        let mut body = self.body.clone();
        body["properties"]["enableIPForwarding"] = Value::Bool(true);
        body
    }
}

/// The virtual network id of a subnet id (`…/virtualNetworks/{name}/subnets/{subnet}` without
/// `/subnets/{subnet}`; segment names compare without regard to case), or `None`.
#[must_use]
pub fn vnet_of(subnet: &str) -> Option<&str> {
    let at = subnet.to_ascii_lowercase().rfind("/subnets/")?;
    let vnet = &subnet[..at];
    vnet.to_ascii_lowercase().contains("/virtualnetworks/").then_some(vnet)
}

/// The IP addresses written in ARM's `PrivateIPAddressInUse` message (`… referencing private IP
/// address 10.0.0.5 which is already in use …`; the exact wording is unverified), in order.
#[must_use]
pub fn addresses_in_message(message: &str) -> Vec<IpAddr> {
    message
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '\'' | '"' | '(' | ')' | '[' | ']'))
        .filter_map(|word| word.trim_end_matches('.').parse().ok())
        .collect()
}

/// The NIC ids in ARM's `PrivateIPAddressInUse` message, in order: it names the ipConfiguration
/// holding the address (`… already in use by … /subscriptions/…/networkInterfaces/NAME/ipConfigurations/X.`),
/// and may name the requesting one too (the caller skips its own NIC). Empty when it names none.
#[must_use]
pub fn nics_in_message(message: &str) -> Vec<String> {
    let lower = message.to_ascii_lowercase();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = lower[from..].find("/subscriptions/") {
        let start = from + at;
        let token = message[start..]
            .split(|c: char| c.is_whitespace() || c == '\'' || c == '"' || c == ',')
            .next()
            .unwrap_or_default();
        from = start + token.len().max(1);
        let parts: Vec<&str> = token.split('/').collect();
        // "", subscriptions, S, resourceGroups, G, providers, Microsoft.Network, networkInterfaces, N, …
        let Some(nic) = parts.get(..9) else { continue };
        let named = nic[1].eq_ignore_ascii_case("subscriptions")
            && nic[3].eq_ignore_ascii_case("resourceGroups")
            && nic[5].eq_ignore_ascii_case("providers")
            && nic[6].eq_ignore_ascii_case("Microsoft.Network")
            && nic[7].eq_ignore_ascii_case("networkInterfaces");
        let name = nic[8].trim_end_matches(['.', ';', ')']);
        if named && !name.is_empty() && !nic[2].is_empty() && !nic[4].is_empty() {
            found.push(format!("{}/{name}", nic[..8].join("/")));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nic() -> Nic {
        let body = json!({
            "id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/a",
            "etag": "W/\"1\"",
            "properties": {
                "enableIPForwarding": false,
                "ipConfigurations": [
                    {"name": "ipconfig1", "properties": {"primary": true, "privateIPAddress": "10.0.0.4",
                        "subnet": {"id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/default"}}},
                    {"name": "x", "properties": {"primary": false, "privateIPAddress": "10.0.0.10"}}
                ]
            }
        });
        Nic::from_body(body, None).expect("a NIC")
    }

    #[test]
    fn reads_and_changes_ip_configurations() {
        let nic = nic();
        let ten: IpAddr = "10.0.0.10".parse().expect("literal");
        let eleven: IpAddr = "10.0.0.11".parse().expect("literal");
        assert_eq!(nic.etag.as_deref(), Some("W/\"1\""));
        assert!(nic.holds(ten) && !nic.holds(eleven));
        assert!(nic.is_primary("10.0.0.4".parse().expect("literal")) && !nic.is_primary(ten));
        let without = Nic::from_body(nic.without(ten), None).expect("a NIC");
        assert_eq!(without.addresses(), vec!["10.0.0.4".parse::<IpAddr>().expect("literal")]);
        let with = nic.with(eleven).expect("a primary with a subnet");
        assert_eq!(with["properties"]["ipConfigurations"][2]["name"], "tenure-10-0-0-11");
        assert_eq!(
            with["properties"]["ipConfigurations"][2]["properties"]["subnet"]["id"],
            nic.body["properties"]["ipConfigurations"][0]["properties"]["subnet"]["id"]
        );
        assert!(Nic::from_body(nic.with_forwarding(), None).expect("a NIC").ip_forwarding());
        assert!(nic.is("/SUBSCRIPTIONS/s/resourcegroups/RG/providers/microsoft.network/networkinterfaces/A"));
        assert_eq!(nic.provisioning_state(), "Succeeded");
    }

    #[test]
    fn virtual_networks_and_holders_named_by_arm() {
        let vnet = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v";
        assert_eq!(vnet_of(&format!("{vnet}/subnets/default")), Some(vnet));
        assert_eq!(vnet_of(&format!("{vnet}/SUBNETS/default")), Some(vnet));
        assert_eq!(vnet_of("/subscriptions/s/subnets/x"), None);
        let nic = nic();
        let ten: IpAddr = "10.0.0.10".parse().expect("literal");
        let four: IpAddr = "10.0.0.4".parse().expect("literal");
        assert!(nic.holds_in(four, &vnet.to_ascii_uppercase()));
        assert!(!nic.holds_in(
            four,
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/w"
        ));
        assert!(!nic.holds_in(ten, vnet), "an ipConfiguration without a subnet is in no virtual network");
        assert_eq!(nic.primary_subnet(), Some(format!("{vnet}/subnets/default").as_str()));
        let id = "/subscriptions/s/resourceGroups/rg2/providers/Microsoft.Network/networkInterfaces/z";
        let message = format!(
            "Private static IP address 10.0.0.10 is already in use by ipconfiguration {id}/ipConfigurations/extra0."
        );
        assert_eq!(nics_in_message(&message), vec![id.to_owned()]);
        assert_eq!(nics_in_message(&format!("in use by {id}.")), vec![id.to_owned()]);
        let own = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/b";
        let both = format!(
            "IP configuration {own}/ipConfigurations/tenure-10-0-0-10 is referencing private IP address 10.0.0.10 which is already in use by another resource {id}/ipConfigurations/x."
        );
        assert_eq!(nics_in_message(&both), vec![own.to_owned(), id.to_owned()]);
        assert!(nics_in_message("IP address 10.0.0.10 is in use").is_empty());
        assert!(nics_in_message("in use by /subscriptions/s/resourceGroups/rg/providers/x").is_empty());
        assert_eq!(addresses_in_message(&both), vec![ten]);
        assert_eq!(addresses_in_message(&message), vec![ten]);
        assert_eq!(
            addresses_in_message("Private IP address 'fd00::5' is in use."),
            vec!["fd00::5".parse::<IpAddr>().expect("literal")]
        );
        assert!(addresses_in_message("no address here, 10.0.0 either.").is_empty());
        let without = Nic::from_body(nic.without_all(&[ten, four]), None).expect("a NIC");
        assert!(without.addresses().is_empty());
    }
}
