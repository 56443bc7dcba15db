//! moto's EC2 server for the aws tests (`aws_moto.rs`, `aws_agent.rs`): started on a free
//! loopback port by `scripts/moto-server` (installed by scripts/install-deps), with the project's
//! patch module (docs/moto.md), killed on drop; and EC2 fixtures made with the SDK. A start that
//! fails panics: the tests fail, never skip.

#[path = "fake_server.rs"]
#[allow(clippy::duplicate_mod, reason = "each fake has the starter as its own submodule")]
mod fake_server;

use std::process::Command;
use std::time::Duration;

use fake_server::FakeServer;

use serde_json::Value;
use tenure::exec::aws::Ec2;
use tenure_core::model::{CaptureDomain, CaptureEpoch, OwnershipEpoch, StampedAction, Verb};

/// The server's start-up bound: about 2 s idle, much more while cargo builds beside it.
const START_MAX: Duration = Duration::from_secs(90);

/// A moto EC2 server on a free loopback port, killed on drop.
pub struct Moto {
    server: FakeServer,
}

impl Moto {
    pub fn start(plain: bool) -> Self {
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").expect("a port").local_addr().expect("addr").port();
        let mut command = Command::new(fake_server::repo_path("scripts/moto-server"));
        command.args(["start", &port.to_string()]);
        if plain {
            command.arg("--plain");
        }
        Self { server: FakeServer::start("moto", command, "moto listening on http://127.0.0.1:", START_MAX) }
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    /// One plain HTTP request to the server (its `/_tenure` endpoints); the body of the answer.
    pub fn http(&self, method: &str, path: &str, body: &str) -> String {
        self.server.admin(method, path, body)
    }

    pub fn calls(&self) -> Value {
        serde_json::from_str(&self.http("GET", "/_tenure/calls", "")).expect("JSON")
    }

    pub fn fault(&self, fault: &Value) {
        self.http("POST", "/_tenure/faults", &fault.to_string());
    }

    pub async fn ec2(&self) -> Ec2 {
        Ec2::connect_with_credentials("us-east-1", &self.url(), "testing", "testing").await
    }
}

/// A VPC, a subnet and two ENIs in it: (eni-a, eni-b).
pub async fn two_enis(ec2: &Ec2) -> (String, String) {
    let enis = enis(ec2, 2).await;
    (enis[0].clone(), enis[1].clone())
}

/// A VPC (10.0.0.0/16), a subnet (10.0.0.0/24) and `count` ENIs in it, their primary addresses
/// 10.0.0.4, 10.0.0.5, …
pub async fn enis(ec2: &Ec2, count: u8) -> Vec<String> {
    let client = ec2.client();
    let vpc = client.create_vpc().cidr_block("10.0.0.0/16").send().await.expect("vpc");
    let vpc_id = vpc.vpc().and_then(|v| v.vpc_id()).expect("vpc id");
    let subnet =
        client.create_subnet().vpc_id(vpc_id).cidr_block("10.0.0.0/24").send().await.expect("subnet");
    let subnet_id = subnet.subnet().and_then(|s| s.subnet_id()).expect("subnet id").to_owned();
    let mut enis = Vec::new();
    for index in 0..count {
        let eni = client
            .create_network_interface()
            .subnet_id(&subnet_id)
            .private_ip_address(format!("10.0.0.{}", 4 + index))
            .send()
            .await
            .expect("eni");
        enis.push(eni.network_interface().and_then(|n| n.network_interface_id()).expect("eni id").to_owned());
    }
    enis
}

/// The floating address the aws tests and the bench move: 10.0.0.10.
pub fn address() -> std::net::IpAddr {
    "10.0.0.10".parse().expect("literal")
}

/// A stamped action of pool `edge` on provider `cloud` for [`address`], both epochs `epoch`.
pub fn action(verb: Verb, holder: &str, eni: &str, epoch: u64) -> StampedAction {
    StampedAction::new(
        "edge",
        address(),
        verb,
        holder,
        "cloud",
        eni,
        CaptureDomain::new("cloud", "vpc"),
        CaptureEpoch::from_stored(epoch),
        OwnershipEpoch::from_stored(epoch),
    )
}
