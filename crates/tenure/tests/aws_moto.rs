//! The aws executor against moto's EC2 server (issue 11): a real implementation of the EC2 API
//! that no one here wrote, started on loopback by `scripts/moto-server` (installed by
//! scripts/install-deps), with the project's patch module (docs/moto.md) giving it the two EC2
//! behaviours stock moto lacks. One test runs stock moto to keep the patch's purpose visible.
//!
//! Fails, never skips, when the server cannot start.

#![cfg(feature = "aws")]

#[path = "support/moto.rs"]
mod moto;

use std::net::IpAddr;
use std::time::Duration;

use moto::{Moto, action, address, two_enis};
use tenure::exec::aws::AwsExecutor;
use tenure::exec::{ExecutionOutcome, execute_within};
use tenure_core::model::{StampedAction, Verb};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inventory_reports_every_eni_of_the_nodes_vpcs_and_nothing_beyond() {
    use tenure::exec::{Executor as _, InventoryRequest};

    let moto = Moto::start(false);
    let ec2 = moto.ec2().await;
    let ours = moto::enis(&ec2, 3).await;
    let (a, b, unmanaged) = (ours[0].clone(), ours[1].clone(), ours[2].clone());
    // Another VPC reusing the same private range: its 10.0.0.10 is another address.
    let elsewhere = moto::enis(&ec2, 1).await;
    let eleven: IpAddr = "10.0.0.11".parse().expect("literal");
    ec2.assign(&elsewhere[0], address()).await.expect("assign elsewhere");
    ec2.assign(&a, address()).await.expect("assign a");
    ec2.assign(&unmanaged, eleven).await.expect("assign to an ENI no node has");

    let executor = AwsExecutor::with_client(ec2.clone());
    let request = InventoryRequest {
        addresses: vec![
            address(),
            eleven,
            "10.0.0.12".parse().expect("literal"),
            "2001:db8::1".parse().expect("v6"),
        ],
        // The nodes' ENIs, one of them mistyped: it is skipped, not fatal.
        nics: vec![a.clone(), b, "eni-0000000000mistyped".to_owned()],
        own_nics: vec![a.clone()],
    };
    let found = executor.inventory(&request).expect("aws takes inventory").await.expect("read");
    assert_eq!(
        found,
        vec![
            (address(), vec![a]),
            (eleven, vec![unmanaged]),
            ("10.0.0.12".parse().expect("literal"), vec![]),
        ],
        "every ENI of the nodes' VPC, none of the other VPC; IPv6 is not this provider's"
    );
}
