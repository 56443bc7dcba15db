//! The aws executor against moto's EC2 server (issue 11): a real implementation of the EC2 API
//! that no one here wrote, started on loopback by `scripts/moto-server` (installed by
//! scripts/install-deps), with the project's patch module (docs/moto.md) giving it the two EC2
//! behaviours stock moto lacks. One test runs stock moto to keep the patch's purpose visible.
//!
//! Fails, never skips, when the server cannot start.

#![cfg(feature = "aws")]

use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::channel;
use std::time::Duration;

use serde_json::Value;
use tenure::exec::aws::{AwsExecutor, Ec2};
use tenure::exec::{ExecutionOutcome, execute_within};
use tenure_core::model::{CaptureDomain, CaptureEpoch, OwnershipEpoch, StampedAction, Verb};

/// The server's start-up bound: about 2 s idle, much more while cargo builds beside it.
const START_MAX: Duration = Duration::from_secs(90);

/// A moto EC2 server on a free loopback port, killed on drop.
struct Moto {
    child: Child,
    port: u16,
}

impl Moto {
    fn start(plain: bool) -> Self {
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").expect("a port").local_addr().expect("addr").port();
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/moto-server");
        let mut command = Command::new(script);
        command.args(["start", &port.to_string()]);
        if plain {
            command.arg("--plain");
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("scripts/moto-server (scripts/install-deps installs moto)");
        let stdout = child.stdout.take().expect("piped");
        let (send, ready) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("moto listening on") {
                    let _ = send.send(());
                }
            }
        });
        if ready.recv_timeout(START_MAX).is_err() {
            let _ = child.kill();
            panic!("moto did not start within {START_MAX:?} (see its stderr above)");
        }
        Self { child, port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// One plain HTTP request to the server (its `/_tenure` endpoints); the body of the answer.
    fn http(&self, method: &str, path: &str, body: &str) -> String {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("moto answers");
        let request = format!(
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).expect("request");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("answer");
        assert!(answer.starts_with("HTTP/1.") && answer.contains(" 200 "), "{method} {path}: {answer}");
        answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default()
    }

    fn calls(&self) -> Value {
        serde_json::from_str(&self.http("GET", "/_tenure/calls", "")).expect("JSON")
    }

    fn fault(&self, fault: &Value) {
        self.http("POST", "/_tenure/faults", &fault.to_string());
    }

    async fn ec2(&self) -> Ec2 {
        Ec2::connect_with_credentials("us-east-1", &self.url(), "testing", "testing").await
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A VPC, a subnet and two ENIs in it: (eni-a, eni-b).
async fn two_enis(ec2: &Ec2) -> (String, String) {
    let client = ec2.client();
    let vpc = client.create_vpc().cidr_block("10.0.0.0/16").send().await.expect("vpc");
    let vpc_id = vpc.vpc().and_then(|v| v.vpc_id()).expect("vpc id");
    let subnet =
        client.create_subnet().vpc_id(vpc_id).cidr_block("10.0.0.0/24").send().await.expect("subnet");
    let subnet_id = subnet.subnet().and_then(|s| s.subnet_id()).expect("subnet id").to_owned();
    let mut enis = Vec::new();
    for primary in ["10.0.0.4", "10.0.0.5"] {
        let eni = client
            .create_network_interface()
            .subnet_id(&subnet_id)
            .private_ip_address(primary)
            .send()
            .await
            .expect("eni");
        enis.push(eni.network_interface().and_then(|n| n.network_interface_id()).expect("eni id").to_owned());
    }
    (enis[0].clone(), enis[1].clone())
}

fn action(verb: Verb, holder: &str, eni: &str, epoch: u64) -> StampedAction {
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

fn address() -> IpAddr {
    "10.0.0.10".parse().expect("literal")
}

async fn run(executor: &AwsExecutor, action: &StampedAction) -> ExecutionOutcome {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    execute_within(executor, action, deadline).await
}

fn detail(outcome: ExecutionOutcome) -> String {
    match outcome {
        ExecutionOutcome::Executed { detail } => detail,
        other => panic!("not executed: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seize_moves_the_address_and_the_old_holders_stale_release_removes_nothing() {
    let moto = Moto::start(false);
    let ec2 = moto.ec2().await;
    let (a, b) = two_enis(&ec2).await;
    let executor = AwsExecutor::with_client(ec2.clone());

    let took = detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &a, 1)).await);
    assert_eq!(took, format!("10.0.0.10 assigned to {a} (confirmed)"));
    detail(run(&executor, &action(Verb::EnableForwarding, "a", &a, 1)).await);

    // b seizes: one assign and one confirming describe, nothing else.
    moto.http("DELETE", "/_tenure/calls", "");
    let seized = detail(run(&executor, &action(Verb::AssignSecondaryIp, "b", &b, 2)).await);
    assert_eq!(seized, format!("10.0.0.10 assigned to {b} (confirmed)"));
    assert_eq!(
        moto.calls(),
        serde_json::json!({"AssignPrivateIpAddresses": 1, "DescribeNetworkInterfaces": 1})
    );
    assert!(!ec2.addresses(&a).await.expect("a").contains(&address()), "moved off a");
    assert!(ec2.addresses(&b).await.expect("b").contains(&address()));

    // a comes back and releases on its own ENI: the address is not there, nothing is removed
    // from b; one call.
    moto.http("DELETE", "/_tenure/calls", "");
    // (moto accepts an unassign of an address the ENI does not hold; EC2 refuses it, and then
    // one describe tells "not there": either way nothing is taken from b.)
    detail(run(&executor, &action(Verb::UnassignSecondaryIp, "a", &a, 1)).await);
    assert_eq!(moto.calls(), serde_json::json!({"UnassignPrivateIpAddresses": 1}));
    assert!(ec2.addresses(&b).await.expect("b").contains(&address()), "b still holds it");
    // b's own release removes it.
    let removed = detail(run(&executor, &action(Verb::UnassignSecondaryIp, "b", &b, 2)).await);
    assert_eq!(removed, format!("10.0.0.10 is not on {b} (unassign accepted)"));
    assert!(!ec2.addresses(&b).await.expect("b").contains(&address()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_is_retried_and_a_permission_error_is_not() {
    let moto = Moto::start(false);
    let ec2 = moto.ec2().await;
    let (a, _) = two_enis(&ec2).await;
    let executor = AwsExecutor::with_client(ec2.clone());

    moto.http("DELETE", "/_tenure/calls", "");
    moto.fault(&serde_json::json!({"action": "AssignPrivateIpAddresses", "throttle": 2}));
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &a, 1)).await);
    assert_eq!(moto.calls()["AssignPrivateIpAddresses"], 3, "two throttled, then one accepted");

    moto.http("DELETE", "/_tenure/calls", "");
    moto.fault(&serde_json::json!({"action": "UnassignPrivateIpAddresses", "unauthorized": true}));
    let refused = run(&executor, &action(Verb::UnassignSecondaryIp, "a", &a, 1)).await;
    let ExecutionOutcome::Failed { reason } = refused else { panic!("not failed: {refused:?}") };
    assert!(reason.starts_with("UnassignPrivateIpAddresses: UnauthorizedOperation:"), "{reason}");
    assert!(reason.contains("IAM"), "says where to look: {reason}");
    assert_eq!(moto.calls()["UnassignPrivateIpAddresses"], 1, "not retried");
    assert!(ec2.addresses(&a).await.expect("a").contains(&address()), "nothing changed");
}

/// Stock moto leaves a reassigned address on both ENIs: the reason the patch module exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_moto_keeps_a_reassigned_address_on_both_enis() {
    let moto = Moto::start(true);
    let ec2 = moto.ec2().await;
    let (a, b) = two_enis(&ec2).await;
    let executor = AwsExecutor::with_client(ec2.clone());
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &a, 1)).await);
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "b", &b, 2)).await);
    assert!(ec2.addresses(&a).await.expect("a").contains(&address()), "stock moto: still on a");
    assert!(ec2.addresses(&b).await.expect("b").contains(&address()));
}
