//! The OCI FAKE for the oci tests (`oci_fake.rs`, `oci_agent.rs`, `oci_fleet.rs`) and the bench:
//! `scripts/oci-fake/oci_fake.py` (Python 3 standard library; a fake of the published Core
//! Services private IP API, not OCI) started on a free loopback port, killed on drop. Requests
//! are signed with the published test key of OCI's "Request Signatures" page, which the fake
//! verifies. A start that fails panics: the tests fail, never skip.
#![allow(dead_code)]

#[path = "fake_server.rs"]
#[allow(clippy::duplicate_mod, reason = "each fake has the starter as its own submodule")]
mod fake_server;

use std::path::{Path, PathBuf};
use std::time::Duration;

use fake_server::FakeServer;

use serde_json::{Value, json};
use tenure::exec::oci::tenure_oci::{Auth, Core, Endpoints, InstancePrincipal};
use tenure_core::model::{CaptureDomain, CaptureEpoch, OwnershipEpoch, StampedAction, Verb};

/// The fake's start-up bound (python starts in well under a second; much more while cargo
/// builds beside it).
const START_MAX: Duration = Duration::from_secs(60);

/// The API key's id the fake takes.
pub const KEY_ID: &str =
    "ocid1.tenancy.oc1..faketenancy/ocid1.user.oc1..fakeuser/20:3b:97:13:55:1c:5b:0d:d3:37:d8:50:4e:c5:3a:34";

/// The private key of the API key (the published test key).
pub fn key_file() -> PathBuf {
    fake_server::repo_path("crates/tenure-oci/tests/data/oci-doc-test-key.pem")
}

/// The OCI fake on a free loopback port, killed on drop.
pub struct OciFake {
    server: FakeServer,
}

impl OciFake {
    /// With session tokens valid an hour.
    pub fn start() -> Self {
        Self::start_with(3600.0)
    }

    /// With session tokens valid `token_lifetime` seconds.
    pub fn start_with(token_lifetime: f64) -> Self {
        let mut command = fake_server::python("scripts/oci-fake/oci_fake.py");
        command
            .args(["--port", "0", "--api-key-id", KEY_ID])
            .arg("--api-public-key")
            .arg(fake_server::repo_path("crates/tenure-oci/tests/data/oci-doc-test-public.pem"))
            .arg("--identity-dir")
            .arg(fake_server::repo_path("scripts/oci-fake/identity"))
            .args(["--token-lifetime", &token_lifetime.to_string()]);
        Self { server: FakeServer::start("the OCI fake", command, "oci-fake listening on ", START_MAX) }
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    /// One request to the fake's admin API (`/_fake/…`); its JSON answer.
    pub fn admin(&self, method: &str, path: &str, body: &Value) -> Value {
        let answer = self.server.admin(method, &format!("/_fake/{path}"), &body.to_string());
        serde_json::from_str(&answer).expect("JSON")
    }

    pub fn subnet(&self, cidr: &str) -> String {
        self.admin("POST", "subnet", &json!({"cidr": cidr}))["id"].as_str().expect("id").to_owned()
    }

    pub fn vnic(&self, subnet: &str, primary: &str, skip_source_dest_check: bool) -> String {
        let answer = self.admin(
            "POST",
            "vnic",
            &json!({"subnetId": subnet, "primaryIp": primary, "skipSourceDestCheck": skip_source_dest_check}),
        );
        answer["id"].as_str().expect("id").to_owned()
    }

    /// A subnet 10.0.0.0/24 and `count` VNICs in it (primary IPs 10.0.0.4, 10.0.0.5, …).
    pub fn vnics(&self, count: u8) -> Vec<String> {
        let subnet = self.subnet("10.0.0.0/24");
        (0..count).map(|i| self.vnic(&subnet, &format!("10.0.0.{}", 4 + i), true)).collect()
    }

    pub fn calls(&self) -> Value {
        self.admin("GET", "calls", &json!({}))
    }

    pub fn reset_calls(&self) {
        self.admin("DELETE", "calls", &json!({}));
    }

    /// `[seconds, operation, status]` of every Core Services call since the last reset.
    pub fn log(&self) -> Vec<(f64, String, u16)> {
        let log = self.admin("GET", "log", &json!({}));
        log.as_array()
            .expect("a list")
            .iter()
            .map(|e| {
                (
                    e[0].as_f64().expect("time"),
                    e[1].as_str().expect("op").to_owned(),
                    u16::try_from(e[2].as_u64().expect("status")).expect("status"),
                )
            })
            .collect()
    }

    /// The next `count` calls of `op` (or `*`) answer `status` `code`, with `Retry-After`.
    pub fn fault(&self, op: &str, status: u16, code: &str, count: u32, retry_after: Option<u32>) {
        self.admin(
            "POST",
            "faults",
            &json!({"op": op, "status": status, "code": code, "count": count, "retryAfter": retry_after}),
        );
    }

    /// Faults not yet used are dropped.
    pub fn clear_faults(&self) {
        self.admin("DELETE", "faults", &json!({}));
    }

    /// Reads show the state as it was `seconds` ago.
    pub fn lag(&self, seconds: f64) {
        self.admin("POST", "consistency", &json!({"lagSeconds": seconds}));
    }

    /// By hand: `address` moved to `vnic`, or deleted (`None`).
    pub fn drift(&self, address: &str, vnic: Option<&str>) {
        self.admin("POST", "drift", &json!({"ipAddress": address, "vnicId": vnic}));
    }

    /// The VNIC holding `address`, if any (the fake's own state, not a counted call).
    pub fn holder(&self, address: &str) -> Option<String> {
        self.object(address).and_then(|p| p["vnicId"].as_str().map(str::to_owned))
    }

    /// The private IP object of `address`, if there is one (the fake's own state).
    pub fn object(&self, address: &str) -> Option<Value> {
        let state = self.admin("GET", "state", &json!({}));
        state["privateIps"].as_array().expect("list").iter().find(|p| p["ipAddress"] == address).cloned()
    }

    /// By hand: a RESERVED private IP `address` on `vnic`, or on none (in `subnet`).
    pub fn reserved(&self, address: &str, vnic: Option<&str>, subnet: &str) -> Value {
        self.admin("POST", "reserved", &json!({"ipAddress": address, "vnicId": vnic, "subnetId": subnet}))
    }

    /// An OCI config file in `dir` whose `DEFAULT` profile is the fake's API key.
    pub fn config_file(&self, dir: &Path) -> PathBuf {
        let path = dir.join("oci-config");
        let (tenancy, rest) = KEY_ID.split_once('/').expect("key id");
        let (user, fingerprint) = rest.split_once('/').expect("key id");
        std::fs::write(
            &path,
            format!(
                "[DEFAULT]\nuser={user}\nfingerprint={fingerprint}\ntenancy={tenancy}\nregion=us-ashburn-1\nkey_file={}\n",
                key_file().display()
            ),
        )
        .expect("write the OCI config file");
        path
    }

    /// A client of the fake signing with the API key.
    pub fn core(&self, dir: &Path) -> Core {
        let auth = Auth::config_file(&self.config_file(dir), "DEFAULT").expect("the profile");
        Core::new("us-ashburn-1", Some(&self.url()), auth).expect("a client")
    }

    /// A client of the fake signing as an instance principal (the fake's metadata and
    /// federation endpoints).
    pub fn core_instance_principal(&self) -> Core {
        let endpoints = Endpoints {
            metadata: format!("{}/opc/v2", self.url()),
            federation: format!("{}/v1/x509", self.url()),
        };
        Core::new(
            "us-ashburn-1",
            Some(&self.url()),
            Auth::InstancePrincipal(InstancePrincipal::new(endpoints)),
        )
        .expect("a client")
    }
}

/// The floating address the oci tests and the bench move: 10.0.0.10.
pub fn address() -> std::net::IpAddr {
    "10.0.0.10".parse().expect("literal")
}

/// A stamped action of pool `edge` on provider `cloud` for [`address`], both epochs `epoch`.
pub fn action(verb: Verb, holder: &str, vnic: &str, epoch: u64) -> StampedAction {
    StampedAction::new(
        "edge",
        address(),
        verb,
        holder,
        "cloud",
        vnic,
        CaptureDomain::new("cloud", "vcn"),
        CaptureEpoch::from_stored(epoch),
        OwnershipEpoch::from_stored(epoch),
    )
}

/// A fresh temporary folder for a test.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tenure-oci-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}
