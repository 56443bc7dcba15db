//! The ARM fake for the azure tests and bench (`scripts/azure-fake/azure_fake.py`: a FAKE of the
//! Azure Resource Manager network interface API, written from the published REST reference; not
//! Azure), started with python3 on a free loopback port, killed on drop. A start that fails
//! panics: the tests fail, never skip.
#![allow(dead_code)]

#[path = "fake_server.rs"]
#[allow(clippy::duplicate_mod, reason = "each fake has the starter as its own submodule")]
mod fake_server;

use std::net::IpAddr;
use std::time::Duration;

use fake_server::FakeServer;

use serde_json::{Value, json};
use tenure::exec::azure::tenure_azure::Arm;
use tenure_core::model::{CaptureDomain, CaptureEpoch, OwnershipEpoch, StampedAction, Verb};

/// The server's start-up bound (python starts in well under a second; much more while cargo
/// builds beside it).
const START_MAX: Duration = Duration::from_secs(60);

/// The bearer token the fake accepts.
pub const TOKEN: &str = "fake-token";

/// The subscription of the fake's NICs.
pub const SUBSCRIPTION: &str = "00000000-0000-0000-0000-000000000001";

/// The subnet of the fake's NICs (virtual network `vnet`).
pub const SUBNET: &str = "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/default";

/// A subnet id in virtual network `vnet` of resource group `rg`.
pub fn subnet(vnet: &str, subnet: &str) -> String {
    format!(
        "/subscriptions/{SUBSCRIPTION}/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/{vnet}/subnets/{subnet}"
    )
}

/// The fake ARM server, killed on drop.
pub struct AzureFake {
    server: FakeServer,
}

impl AzureFake {
    pub fn start() -> Self {
        let mut command = fake_server::python("scripts/azure-fake/azure_fake.py");
        command.args(["--port", "0", "--token", TOKEN]);
        Self { server: FakeServer::start("the azure fake", command, "azure-fake listening on ", START_MAX) }
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    /// One plain HTTP request to the fake's admin API; the answer's JSON.
    pub fn http(&self, method: &str, path: &str, body: &Value) -> Value {
        let body = if body.is_null() { String::new() } else { body.to_string() };
        serde_json::from_str(&self.server.admin(method, path, &body)).expect("JSON")
    }

    /// Makes NIC `name` in resource group `group` with `primary` and `secondary` addresses; its id.
    pub fn nic(&self, group: &str, name: &str, primary: &str, secondary: &[&str]) -> String {
        self.nic_in(group, name, SUBNET, primary, secondary)
    }

    /// [`AzureFake::nic`] in subnet `subnet` (an ARM subnet id).
    pub fn nic_in(&self, group: &str, name: &str, subnet: &str, primary: &str, secondary: &[&str]) -> String {
        let spec = json!({"group": group, "name": name, "subnet": subnet, "primary": primary, "secondary": secondary,
                          "subscription": SUBSCRIPTION});
        self.http("POST", "/_fake/nic", &spec)["id"].as_str().expect("an id").to_owned()
    }

    /// NIC `id`'s `provisioningState` now (not lagging).
    pub fn provisioning_state(&self, id: &str) -> String {
        let state = self.http("GET", "/_fake/state", &Value::Null);
        state["nics"][id]["provisioningState"].as_str().expect("a NIC").to_owned()
    }

    pub fn config(&self, config: &Value) {
        self.http("POST", "/_fake/config", config);
    }

    pub fn fault(&self, fault: &Value) {
        self.http("POST", "/_fake/faults", fault);
    }

    /// Every call since the last reset.
    pub fn calls(&self) -> Vec<Value> {
        self.http("GET", "/_fake/calls", &Value::Null).as_array().expect("a list").clone()
    }

    /// How many calls of each op (`get`, `put`, `list`, `poll`) since the last reset.
    pub fn counts(&self) -> std::collections::BTreeMap<String, u64> {
        let mut counts = std::collections::BTreeMap::new();
        for call in self.calls() {
            *counts.entry(call["op"].as_str().expect("op").to_owned()).or_insert(0) += 1;
        }
        counts
    }

    pub fn reset_calls(&self) {
        self.http("POST", "/_fake/reset-calls", &json!({}));
    }

    /// The addresses of NIC `id` now (not lagging).
    pub fn addresses(&self, id: &str) -> Vec<String> {
        let state = self.http("GET", "/_fake/state", &Value::Null);
        let nic = &state["nics"][id];
        nic["addresses"]
            .as_array()
            .expect("a NIC")
            .iter()
            .map(|a| a.as_str().expect("text").to_owned())
            .collect()
    }

    /// Whether NIC `id` holds `address` now.
    pub fn holds(&self, id: &str, address: IpAddr) -> bool {
        self.addresses(id).contains(&address.to_string())
    }

    pub fn ip_forwarding(&self, id: &str) -> bool {
        let state = self.http("GET", "/_fake/state", &Value::Null);
        state["nics"][id]["ipForwarding"].as_bool().expect("a NIC")
    }

    /// PUTs held now.
    pub fn held(&self) -> u64 {
        self.http("GET", "/_fake/state", &Value::Null)["held"].as_u64().expect("held")
    }

    /// Sets NIC `id`'s secondary addresses by hand (drift).
    pub fn set(&self, id: &str, secondary: &[&str]) {
        self.http("POST", "/_fake/set", &json!({"id": id, "secondary": secondary}));
    }

    /// Turns `enableIPForwarding` on or off on NIC `id` by hand.
    pub fn set_forwarding(&self, id: &str, on: bool) {
        self.http("POST", "/_fake/set", &json!({"id": id, "ipForwarding": on}));
    }

    /// A client of the fake with its token.
    pub fn arm(&self) -> Arm {
        Arm::with_fixed_token(&self.url(), TOKEN).expect("a client")
    }
}

/// The floating address the azure tests and the bench move: 10.0.0.10.
pub fn address() -> IpAddr {
    "10.0.0.10".parse().expect("literal")
}

/// A stamped action of pool `edge` on provider `cloud` for [`address`], both epochs `epoch`.
pub fn action(verb: Verb, holder: &str, nic: &str, epoch: u64) -> StampedAction {
    StampedAction::new(
        "edge",
        address(),
        verb,
        holder,
        "cloud",
        nic,
        CaptureDomain::new("cloud", "vnet"),
        CaptureEpoch::from_stored(epoch),
        OwnershipEpoch::from_stored(epoch),
    )
}
