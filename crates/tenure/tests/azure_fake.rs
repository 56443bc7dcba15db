//! The azure executor against the ARM fake (`scripts/azure-fake/azure_fake.py`: a FAKE of the
//! Azure Resource Manager network interface API, written from the published REST reference; not
//! Azure — no emulator of ARM can run here). Each verb's calls are counted at the fake.
//!
//! What a call count counts: `get` (NetworkInterfaces_Get), `list` (NetworkInterfaces_List of the
//! resource group, one per page), `put` (NetworkInterfaces_CreateOrUpdate), `poll` (a GET of the
//! PUT's Azure-AsyncOperation). Fails, never skips, when the fake cannot start.

#![cfg(feature = "azure")]

#[path = "support/azure_fake.rs"]
mod azure_fake;

use std::time::Duration;

use azure_fake::{AzureFake, SUBNET, action, address, subnet};
use serde_json::json;
use tenure::exec::azure::{AzureExecutor, IpForwarding};
use tenure::exec::{ExecutionOutcome, Executor as _, InventoryRequest, execute_within};
use tenure_core::model::{StampedAction, Verb};
use tokio::time::Instant;

async fn run_for(executor: &AzureExecutor, action: &StampedAction, within: Duration) -> ExecutionOutcome {
    execute_within(executor, action, Instant::now() + within).await
}

async fn run(executor: &AzureExecutor, action: &StampedAction) -> ExecutionOutcome {
    run_for(executor, action, Duration::from_secs(20)).await
}

fn detail(outcome: ExecutionOutcome) -> String {
    match outcome {
        ExecutionOutcome::Executed { detail } => detail,
        other => panic!("not executed: {other:?}"),
    }
}

/// The ops of the calls since the last reset, polls left out.
fn ops_without_polls(fake: &AzureFake) -> Vec<(String, String)> {
    fake.calls()
        .iter()
        .filter(|c| c["op"] != "poll")
        .map(|c| (c["op"].as_str().expect("op").to_owned(), c["nic"].as_str().unwrap_or("").to_owned()))
        .collect()
}

fn two_nics(fake: &AzureFake) -> (String, String) {
    (fake.nic("rg", "a", "10.0.0.4", &[]), fake.nic("rg", "b", "10.0.0.5", &[]))
}

fn executor(fake: &AzureFake, forwarding: IpForwarding) -> AzureExecutor {
    AzureExecutor::with_client(fake.arm(), forwarding)
}

fn pair(op: &str, nic: &str) -> (String, String) {
    (op.to_owned(), nic.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seize_is_two_gets_a_list_and_two_puts_with_their_polls_and_release_only_touches_its_own_nic() {
    let fake = AzureFake::start();
    let (a, b) = two_nics(&fake);
    let executor = executor(&fake, IpForwarding::Check);

    let took = detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &a, 1)).await);
    assert_eq!(took, format!("10.0.0.10 added to {a} (confirmed)"));
    assert!(fake.holds(&a, address()));

    // b seizes: GET own, list the group, PUT a without it, PUT b with it, GET b to confirm; each
    // PUT's operation polled until Succeeded (the fake runs it 200 ms, polled every 100 ms).
    fake.reset_calls();
    let seized = detail(run(&executor, &action(Verb::AssignSecondaryIp, "b", &b, 2)).await);
    assert_eq!(seized, format!("10.0.0.10 moved to {b} from {a} (confirmed)"));
    assert_eq!(
        ops_without_polls(&fake),
        vec![pair("get", "b"), pair("list", ""), pair("put", "a"), pair("put", "b"), pair("get", "b")]
    );
    let counts = fake.counts();
    let polls = counts.get("poll").copied().unwrap_or(0);
    assert!((2..=8).contains(&polls), "each of the two operations polled until done: {counts:?}");
    assert!(!fake.holds(&a, address()) && fake.holds(&b, address()), "on b only");

    // The same acquire again: one read, nothing written.
    fake.reset_calls();
    let again = detail(run(&executor, &action(Verb::AssignSecondaryIp, "b", &b, 2)).await);
    assert_eq!(again, format!("10.0.0.10 is on {b} already (confirmed by a read)"));
    assert_eq!(ops_without_polls(&fake), vec![pair("get", "b")]);

    // a's stale release: a read of a's own NIC, nothing taken from b.
    fake.reset_calls();
    let stale = detail(run(&executor, &action(Verb::UnassignSecondaryIp, "a", &a, 1)).await);
    assert!(stale.contains("was not on"), "{stale}");
    assert_eq!(ops_without_polls(&fake), vec![pair("get", "a")]);
    assert!(fake.holds(&b, address()));

    // b's release: read, write, polled.
    fake.reset_calls();
    let released = detail(run(&executor, &action(Verb::UnassignSecondaryIp, "b", &b, 2)).await);
    assert_eq!(released, format!("10.0.0.10 removed from {b}"));
    assert_eq!(ops_without_polls(&fake), vec![pair("get", "b"), pair("put", "b")]);
    assert!(!fake.holds(&b, address()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_on_no_nic_is_only_added_and_a_moved_etag_is_read_again() {
    let fake = AzureFake::start();
    let (a, b) = two_nics(&fake);
    let executor = executor(&fake, IpForwarding::Check);
    // As after a crash between the two writes: on no NIC. The next acquire only adds.
    fake.fault(&json!({"op": "put", "nic": "b", "status": 412, "code": "PreconditionFailed", "count": 1}));
    let took = detail(run(&executor, &action(Verb::AssignSecondaryIp, "b", &b, 1)).await);
    assert_eq!(took, format!("10.0.0.10 added to {b} (confirmed)"));
    assert_eq!(
        ops_without_polls(&fake),
        vec![
            pair("get", "b"),
            pair("list", ""),
            pair("put", "b"),
            pair("get", "b"),
            pair("list", ""),
            pair("put", "b"),
            pair("get", "b")
        ],
        "the 412 made it read b again and look for a holder again"
    );
    assert!(fake.holds(&b, address()) && !fake.holds(&a, address()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_honoured_and_counted_server_errors_retried_and_the_deadline_kept() {
    let fake = AzureFake::start();
    let (a, _b) = two_nics(&fake);
    let executor = executor(&fake, IpForwarding::Check);

    fake.fault(&json!({"op": "get", "status": 429, "retryAfter": 1, "count": 1}));
    fake.fault(&json!({"op": "list", "status": 409, "code": "RetryableErrorDueToAnotherOperation", "retryAfter": 1, "count": 1}));
    fake.fault(&json!({"op": "put", "status": 500, "count": 1}));
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &a, 1)).await);
    let calls = fake.calls();
    let t = |i: usize| calls[i]["t"].as_f64().expect("t");
    assert_eq!((calls[0]["status"].as_u64(), calls[1]["op"].as_str()), (Some(429), Some("get")));
    assert!(t(1) - t(0) >= 1.0, "no call before Retry-After: {} s", t(1) - t(0));
    assert_eq!((calls[2]["status"].as_u64(), calls[3]["op"].as_str()), (Some(409), Some("list")));
    assert!(t(3) - t(2) >= 1.0, "a busy NIC waits its Retry-After too: {} s", t(3) - t(2));
    assert_eq!((calls[4]["status"].as_u64(), calls[5]["op"].as_str()), (Some(500), Some("put")));
    assert_eq!(executor.throttled_calls(), 2, "the 429 and the busy answer, not the 500");
    assert!(fake.holds(&a, address()));

    // A Retry-After past the deadline: given up at once, no second call, inside the deadline.
    fake.reset_calls();
    fake.fault(&json!({"op": "get", "status": 429, "retryAfter": 30, "count": 1}));
    let started = std::time::Instant::now();
    let outcome =
        run_for(&executor, &action(Verb::UnassignSecondaryIp, "a", &a, 1), Duration::from_secs(3)).await;
    assert!(started.elapsed() < Duration::from_secs(3), "kept the deadline: {:?}", started.elapsed());
    assert!(
        matches!(&outcome, ExecutionOutcome::Unknown { reason } if reason.contains("past the deadline")),
        "{outcome:?}"
    );
    assert_eq!(fake.calls().len(), 1, "no call after the 429");
    assert_eq!(executor.throttled_calls(), 3);
    let ExecutionOutcome::Unknown { reason } = &outcome else { unreachable!() };
    assert!(reason.contains("(last answer: HTTP 429"), "the cause is said: {reason}");

    // The next attempt (the sweep's retry, another action) within those 30 s sends nothing
    // either: throttling is the subscription's, not the call's.
    let outcome =
        run_for(&executor, &action(Verb::AssignSecondaryIp, "a", &a, 2), Duration::from_secs(3)).await;
    assert!(
        matches!(&outcome, ExecutionOutcome::Unknown { reason } if reason.contains("not sent: ARM asked (HTTP 429) to wait")),
        "{outcome:?}"
    );
    assert_eq!(fake.calls().len(), 1, "nothing sent before the Retry-After");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_error_fails_at_once_naming_the_role() {
    let fake = AzureFake::start();
    let (a, _b) = two_nics(&fake);
    let executor = executor(&fake, IpForwarding::Check);
    fake.fault(&json!({"op": "any", "status": 403, "code": "AuthorizationFailed", "count": 5}));
    let outcome = run(&executor, &action(Verb::AssignSecondaryIp, "a", &a, 1)).await;
    let ExecutionOutcome::Failed { reason } = outcome else { panic!("failed: {outcome:?}") };
    assert!(reason.contains("HTTP 403 AuthorizationFailed"), "{reason}");
    assert!(reason.contains("Network Contributor"), "{reason}");
    assert!(reason.contains("Microsoft.Network/virtualNetworks/subnets/join/action"), "{reason}");
    assert_eq!(fake.calls().len(), 1, "not retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_is_checked_or_set_and_the_primary_is_never_removed() {
    let fake = AzureFake::start();
    let (a, _b) = two_nics(&fake);
    let check = executor(&fake, IpForwarding::Check);
    let outcome = run(&check, &action(Verb::EnableForwarding, "a", &a, 1)).await;
    let ExecutionOutcome::Failed { reason } = outcome else { panic!("failed: {outcome:?}") };
    assert!(reason.starts_with("enableIPForwarding is off on"), "{reason}");
    assert_eq!(ops_without_polls(&fake), vec![pair("get", "a")], "checked, not written");

    fake.reset_calls();
    let set = executor(&fake, IpForwarding::Set);
    let done = detail(run(&set, &action(Verb::EnableForwarding, "a", &a, 1)).await);
    assert_eq!(done, format!("enableIPForwarding turned on on {a}"));
    assert!(fake.ip_forwarding(&a));
    detail(run(&check, &action(Verb::EnableForwarding, "a", &a, 1)).await);

    // The primary address of a NIC, in a pool by mistake: never removed.
    fake.reset_calls();
    let mut primary = action(Verb::UnassignSecondaryIp, "a", &a, 1);
    primary.address = "10.0.0.4".parse().expect("literal");
    let outcome = run(&check, &primary).await;
    let ExecutionOutcome::Failed { reason } = outcome else { panic!("failed: {outcome:?}") };
    assert!(reason.contains("PrimaryIpConfiguration") && reason.contains("never removed"), "{reason}");
    assert_eq!(ops_without_polls(&fake), vec![pair("get", "a")]);
    assert!(fake.holds(&a, "10.0.0.4".parse().expect("literal")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_read_is_confirmed_by_reading_again() {
    let fake = AzureFake::start();
    let (a, _b) = two_nics(&fake);
    let executor = executor(&fake, IpForwarding::Check);
    fake.config(&json!({"staleGetMs": 700}));
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &a, 1)).await);
    let gets = fake.calls().iter().filter(|c| c["op"] == "get").count();
    assert!(gets >= 3, "the write was confirmed only once a read showed it: {gets} reads");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inventory_lists_the_nodes_resource_groups_paged() {
    let fake = AzureFake::start();
    fake.config(&json!({"pageSize": 2}));
    let a = fake.nic("rg", "a", "10.0.0.4", &["10.0.0.10"]);
    let b = fake.nic("rg", "b", "10.0.0.5", &[]);
    let unmanaged = fake.nic("rg", "c", "10.0.0.6", &["10.0.0.11"]);
    let _other_group = fake.nic("rg2", "d", "10.0.0.7", &["10.0.0.12"]);
    let executor = executor(&fake, IpForwarding::Check);
    // The node's NIC spelled in another case: reported as the config spells it.
    let a_upper = a.replace("networkInterfaces/a", "networkInterfaces/A");
    let request = InventoryRequest {
        addresses: vec![address(), "10.0.0.11".parse().expect("v4"), "10.0.0.12".parse().expect("v4")],
        nics: vec![a_upper.clone(), b],
        own_nics: vec![a_upper.clone()],
    };
    let found = executor.inventory(&request).expect("azure takes inventory").await.expect("read");
    assert_eq!(
        found,
        vec![
            (address(), vec![a_upper]),
            ("10.0.0.11".parse().expect("v4"), vec![unmanaged]),
            ("10.0.0.12".parse().expect("v4"), vec![]),
        ],
        "every NIC of the nodes' resource group, none of another group"
    );
    assert_eq!(fake.counts().get("list"), Some(&2), "three NICs in pages of two");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_that_lags_is_caught_by_azure_refusing_the_address_in_use_never_two_holders() {
    let fake = AzureFake::start();
    let (a, b) = two_nics(&fake);
    let executor = executor(&fake, IpForwarding::Check);
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &a, 1)).await);
    // The list shows NICs as they were 800 ms ago: it does not show a holding the address yet.
    fake.config(&json!({"staleListMs": 800}));
    fake.reset_calls();
    let seized = detail(run(&executor, &action(Verb::AssignSecondaryIp, "b", &b, 2)).await);
    assert_eq!(seized, format!("10.0.0.10 moved to {b} from {a} (confirmed)"));
    let refused = fake.calls().iter().filter(|c| c["op"] == "put" && c["status"] == 400).count();
    assert!(refused >= 1, "b's first write was refused: the address was in use on a");
    assert!(!fake.holds(&a, address()) && fake.holds(&b, address()), "on b only");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nic_of_another_virtual_network_with_the_same_address_is_left_alone_and_not_counted() {
    let fake = AzureFake::start();
    let (a, b) = two_nics(&fake);
    // A staging copy in the same resource group: another VNet, the same range, the same address.
    let x = fake.nic_in("rg", "x", &subnet("staging", "default"), "10.0.0.4", &["10.0.0.10"]);
    let executor = executor(&fake, IpForwarding::Check);
    let took = detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &a, 1)).await);
    assert_eq!(took, format!("10.0.0.10 added to {a} (confirmed)"), "nothing moved from x");
    assert_eq!(
        ops_without_polls(&fake),
        vec![pair("get", "a"), pair("list", ""), pair("put", "a"), pair("get", "a")]
    );
    assert!(fake.holds(&x, address()) && fake.holds(&a, address()), "x keeps its own 10.0.0.10");
    let request =
        InventoryRequest { addresses: vec![address()], nics: vec![a.clone(), b], own_nics: vec![a.clone()] };
    let found = executor.inventory(&request).expect("azure takes inventory").await.expect("read");
    assert_eq!(found, vec![(address(), vec![a])], "x's address is in another virtual network");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_in_another_subnet_of_the_virtual_network_fails_the_seize_before_any_write() {
    let fake = AzureFake::start();
    let (a, _b) = two_nics(&fake);
    let other = subnet("vnet", "other");
    let y = fake.nic_in("rg", "y", &other, "10.0.1.4", &["10.0.0.10"]);
    let executor = executor(&fake, IpForwarding::Check);
    let outcome = run(&executor, &action(Verb::AssignSecondaryIp, "a", &a, 1)).await;
    let ExecutionOutcome::Failed { reason } = outcome else { panic!("failed: {outcome:?}") };
    assert!(!reason.contains('\n'), "one line: {reason}");
    assert!(reason.contains(&format!("on {y} in subnet {other}")) && reason.contains(SUBNET), "{reason}");
    assert!(reason.contains("nothing written"), "{reason}");
    assert_eq!(ops_without_polls(&fake), vec![pair("get", "a"), pair("list", "")], "no write");
    assert!(fake.holds(&y, address()) && !fake.holds(&a, address()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_write_whose_operation_failed_is_unknown_and_the_failed_nic_is_written_back_before_it_counts()
 {
    let fake = AzureFake::start();
    let (a, _b) = two_nics(&fake);
    let executor = executor(&fake, IpForwarding::Check);
    fake.config(&json!({"lroFail": 1}));
    let outcome = run(&executor, &action(Verb::AssignSecondaryIp, "a", &a, 1)).await;
    let ExecutionOutcome::Unknown { reason } = outcome else { panic!("unknown: {outcome:?}") };
    assert!(
        reason.contains("the write was accepted") && reason.contains("NetworkInterfaceOperationFailed"),
        "{reason}"
    );
    // As ARM leaves it: Failed, the requested configuration visible.
    assert_eq!(fake.provisioning_state(&a), "Failed");
    assert!(fake.holds(&a, address()));

    // The retry writes the NIC back as read (ARM's recovery) and counts the address only then.
    fake.reset_calls();
    let again = detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &a, 1)).await);
    assert_eq!(again, format!("10.0.0.10 is on {a} already (confirmed by a read)"));
    assert_eq!(ops_without_polls(&fake), vec![pair("get", "a"), pair("put", "a"), pair("get", "a")]);
    assert_eq!(fake.provisioning_state(&a), "Succeeded");
}

/// a's add of the address was accepted and its operation failed; b has the address meanwhile
/// (drift, as if b's seize came between): a's NIC is Failed and shows the address, and writing it
/// back as read is refused with `PrivateIPAddressInUse` for ever.
async fn a_failed_with_the_address_b_holds(fake: &AzureFake, executor: &AzureExecutor, a: &str, b: &str) {
    fake.config(&json!({"lroFail": 1}));
    let outcome = run(executor, &action(Verb::AssignSecondaryIp, "a", a, 1)).await;
    assert!(matches!(outcome, ExecutionOutcome::Unknown { .. }), "{outcome:?}");
    fake.set(b, &["10.0.0.10"]);
    assert_eq!(fake.provisioning_state(a), "Failed");
    assert!(fake.holds(a, address()) && fake.holds(b, address()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_on_a_failed_nic_whose_address_another_took_writes_it_without_the_address() {
    let fake = AzureFake::start();
    let (a, b) = two_nics(&fake);
    let executor = executor(&fake, IpForwarding::Check);
    a_failed_with_the_address_b_holds(&fake, &executor, &a, &b).await;

    fake.reset_calls();
    let released = detail(run(&executor, &action(Verb::UnassignSecondaryIp, "a", &a, 1)).await);
    assert_eq!(released, format!("10.0.0.10 removed from {a}"));
    assert_eq!(ops_without_polls(&fake), vec![pair("get", "a"), pair("put", "a")], "no write back first");
    assert_eq!(fake.provisioning_state(&a), "Succeeded", "the write recovered the NIC");
    assert!(!fake.holds(&a, address()) && fake.holds(&b, address()), "b keeps it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_nic_written_back_is_refused_for_an_address_another_took_and_written_without_it() {
    let fake = AzureFake::start();
    let (a, b) = two_nics(&fake);
    let executor = executor(&fake, IpForwarding::Check);
    a_failed_with_the_address_b_holds(&fake, &executor, &a, &b).await;

    // Any other action on a's NIC (here the forwarding check) settles it first.
    fake.reset_calls();
    let arm = fake.arm();
    let forwarding = arm.forwarding(&a, false, Instant::now() + Duration::from_secs(20)).await;
    assert_eq!(forwarding.expect("a's NIC recovered"), tenure::exec::azure::tenure_azure::Forwarding::Off);
    assert_eq!(
        ops_without_polls(&fake),
        vec![pair("get", "a"), pair("put", "a"), pair("put", "a"), pair("get", "a")],
        "written back as read (refused: b has the address), then without it"
    );
    assert_eq!(fake.provisioning_state(&a), "Succeeded");
    assert!(!fake.holds(&a, address()) && fake.holds(&b, address()), "b keeps it");
}

/// A write answered 5xx may have taken effect: whatever refusal its resend gets (a 403, a 404),
/// it is unknown, not failed. A 5xx then a 403 to a read is still a permission failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_answered_5xx_then_refused_on_its_resend_is_unknown() {
    let fake = AzureFake::start();
    let (a, _b) = two_nics(&fake);
    let executor = executor(&fake, IpForwarding::Check);
    fake.fault(&json!({"op": "put", "status": 500, "count": 1}));
    fake.fault(&json!({"op": "put", "status": 403, "count": 1}));
    let outcome = run(&executor, &action(Verb::AssignSecondaryIp, "a", &a, 1)).await;
    let ExecutionOutcome::Unknown { reason } = outcome else { panic!("unknown: {outcome:?}") };
    assert!(
        reason.contains("HTTP 403") && reason.contains("an earlier try of the write was answered HTTP 500"),
        "{reason}"
    );

    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &a, 1)).await);
    fake.fault(&json!({"op": "put", "status": 503, "count": 1}));
    fake.fault(&json!({"op": "put", "status": 404, "code": "NotFound", "count": 1}));
    let outcome = run(&executor, &action(Verb::UnassignSecondaryIp, "a", &a, 1)).await;
    let ExecutionOutcome::Unknown { reason } = outcome else { panic!("unknown: {outcome:?}") };
    assert!(reason.contains("HTTP 404 NotFound"), "{reason}");

    fake.fault(&json!({"op": "get", "status": 500, "count": 1}));
    fake.fault(&json!({"op": "get", "status": 403, "count": 1}));
    let outcome = run(&executor, &action(Verb::UnassignSecondaryIp, "a", &a, 1)).await;
    assert!(matches!(outcome, ExecutionOutcome::Failed { .. }), "a read is never in doubt: {outcome:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_poll_after_an_accepted_write_is_unknown_naming_the_role() {
    let fake = AzureFake::start();
    let (a, _b) = two_nics(&fake);
    let executor = executor(&fake, IpForwarding::Check);
    fake.fault(&json!({"op": "poll", "status": 403, "code": "AuthorizationFailed", "count": 1}));
    let outcome = run(&executor, &action(Verb::AssignSecondaryIp, "a", &a, 1)).await;
    let ExecutionOutcome::Unknown { reason } = outcome else { panic!("unknown: {outcome:?}") };
    assert!(reason.contains("the write was accepted") && reason.contains("HTTP 403"), "{reason}");
    assert!(reason.contains("Microsoft.Network/locations/operations/read"), "{reason}");
    assert!(fake.holds(&a, address()), "it did apply");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_shown_on_a_nic_still_updating_counts_only_once_the_operation_succeeded() {
    let fake = AzureFake::start();
    let (a, _b) = two_nics(&fake);
    let executor = executor(&fake, IpForwarding::Check);
    // The first attempt's deadline comes while its write's operation runs (1.5 s, no more polls).
    fake.config(&json!({"lroDelayMs": 1500}));
    let outcome =
        run_for(&executor, &action(Verb::AssignSecondaryIp, "a", &a, 1), Duration::from_millis(600)).await;
    assert!(matches!(outcome, ExecutionOutcome::Unknown { .. }), "{outcome:?}");
    assert_eq!(fake.provisioning_state(&a), "Updating");
    assert!(fake.holds(&a, address()), "the requested configuration shows already");
    let again = detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &a, 1)).await);
    assert_eq!(again, format!("10.0.0.10 is on {a} already (confirmed by a read)"));
    assert_eq!(fake.provisioning_state(&a), "Succeeded", "not counted while Updating");
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_ends_past_the_deadline_sends_nothing_more() {
    let fake = AzureFake::start();
    let (a, _b) = two_nics(&fake);
    let arm = fake.arm();
    fake.fault(&json!({"op": "get", "status": 429, "retryAfter": 1, "count": 1}));
    // The clock is tokio's, paused: it moves only when advanced (the runtime is kept busy here,
    // so it never advances by itself). The 1 s Retry-After fits in the 1.5 s left; the process
    // then stalls 2 s in that wait (as a starved or stopped one does).
    let deadline = Instant::now() + Duration::from_millis(1500);
    let control = async {
        while !fake.calls().iter().any(|c| c["status"] == 429) {
            std::thread::sleep(Duration::from_millis(10));
            tokio::task::yield_now().await;
        }
        // A second of real time for the 429 to reach the client and its wait to begin (the
        // paused clock does not move meanwhile: the runtime is never idle).
        for _ in 0..200 {
            std::thread::sleep(Duration::from_millis(5));
            tokio::task::yield_now().await;
        }
        tokio::time::advance(Duration::from_secs(2)).await;
    };
    let (result, ()) = tokio::join!(arm.get_nic(&a, deadline), control);
    let error = result.expect_err("past the deadline");
    assert_eq!(error.to_string(), "NetworkInterfaces_Get: not sent: the deadline had passed");
    assert_eq!(fake.calls().len(), 1, "nothing sent after the wait: {:?}", fake.calls());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_arm_names_in_another_resource_group_is_read_and_the_address_removed_there() {
    let fake = AzureFake::start();
    let (_a, b) = two_nics(&fake);
    let z = fake.nic("rg2", "z", "10.0.0.9", &["10.0.0.10"]);
    let executor = executor(&fake, IpForwarding::Check);
    let seized = detail(
        run_for(&executor, &action(Verb::AssignSecondaryIp, "b", &b, 1), Duration::from_secs(5)).await,
    );
    assert_eq!(seized, format!("10.0.0.10 moved to {b} from {z} (confirmed)"));
    assert_eq!(
        ops_without_polls(&fake),
        vec![
            pair("get", "b"),
            pair("list", ""),
            pair("put", "b"),
            pair("get", "z"),
            pair("put", "z"),
            pair("get", "b"),
            pair("list", ""),
            pair("put", "b"),
            pair("get", "b")
        ]
    );
    assert!(!fake.holds(&z, address()) && fake.holds(&b, address()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_in_use_by_a_holder_arm_does_not_name_is_looked_for_once_then_failed() {
    let fake = AzureFake::start();
    let (_a, b) = two_nics(&fake);
    let z = fake.nic("rg2", "z", "10.0.0.9", &["10.0.0.10"]);
    fake.config(&json!({"inUseNamesHolder": false}));
    let executor = executor(&fake, IpForwarding::Check);
    let outcome = run(&executor, &action(Verb::AssignSecondaryIp, "b", &b, 1)).await;
    let ExecutionOutcome::Failed { reason } = outcome else { panic!("failed: {outcome:?}") };
    assert!(
        reason.contains("HTTP 400 PrivateIPAddressInUse: Private IP address 10.0.0.10 is already in use"),
        "{reason}"
    );
    assert_eq!(fake.counts().get("put"), Some(&2), "one more look, no spin until the deadline");
    assert!(fake.holds(&z, address()) && !fake.holds(&b, address()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_followed_by_location_and_its_failure_there() {
    let fake = AzureFake::start();
    let (a, b) = two_nics(&fake);
    let executor = executor(&fake, IpForwarding::Check);

    // 202 + Location, polled until not 202.
    fake.config(&json!({"lroMode": "location"}));
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &a, 1)).await);
    let calls = fake.calls();
    let results = calls
        .iter()
        .filter(|c| c["op"] == "poll" && c["path"].as_str().expect("path").contains("/operationResults/"));
    assert!(results.count() >= 2, "polled while 202: {calls:?}");
    assert!(calls.iter().any(|c| c["op"] == "put" && c["status"] == 202), "{calls:?}");
    // Its failure (an error status on the Location) after the accepted write: unknown.
    fake.config(&json!({"lroFail": 1}));
    let outcome = run(&executor, &action(Verb::AssignSecondaryIp, "b", &b, 2)).await;
    assert!(
        matches!(&outcome, ExecutionOutcome::Unknown { reason } if reason.contains("NetworkInterfaceOperationFailed")),
        "{outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_followed_by_the_resource_itself() {
    let fake = AzureFake::start();
    let executor = executor(&fake, IpForwarding::Check);
    // 201 Updating with no link: the NIC itself is read until Succeeded.
    let c = fake.nic("rg", "c", "10.0.0.6", &[]);
    fake.config(&json!({"lroMode": "resource"}));
    fake.reset_calls();
    let mut other = action(Verb::AssignSecondaryIp, "c", &c, 3);
    other.address = "10.0.0.11".parse().expect("literal");
    detail(run(&executor, &other).await);
    let calls = fake.calls();
    assert!(calls.iter().any(|x| x["op"] == "put" && x["status"] == 201), "{calls:?}");
    assert!(!calls.iter().any(|x| x["op"] == "poll"), "no operation to poll: {calls:?}");
    let gets = calls.iter().filter(|x| x["op"] == "get" && x["nic"] == "c").count();
    assert!(gets >= 3, "own NIC read, polled while Updating, confirmed: {calls:?}");
}
