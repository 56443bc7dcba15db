//! The oci executor against the OCI FAKE (`scripts/oci-fake/oci_fake.py`: a fake of the published
//! Core Services private IP API, not OCI; it verifies every request's signature). Each verb's
//! calls are counted at the fake. What is counted: Core Services calls (GetVnic, ListPrivateIps,
//! GetPrivateIp, UpdatePrivateIp, CreatePrivateIp, DeletePrivateIp, UpdateVnic); the executor
//! reads a VNIC's subnet once (GetVnic) and caches it, so a node's first acquire carries one
//! GetVnic more. Metadata and federation calls are not counted there (federations are, apart).
//!
//! Fails, never skips, when the fake cannot start.
//!
//! Over 600 lines: one rig (the OCI fake and an agent), many cases;
//! a second binary would cost a link.

#![cfg(feature = "oci")]

#[path = "support/oci_fake.rs"]
mod oci_fake;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use oci_fake::{OciFake, action, temp_dir};
use serde_json::json;
use tenure::exec::oci::{OciExecutor, SkipSourceDestCheck};
use tenure::exec::{ExecutionOutcome, Executor as _, InventoryRequest, execute_within};
use tenure_core::model::{StampedAction, Verb};
use tokio::time::Instant;

async fn run_within(executor: &OciExecutor, action: &StampedAction, within: Duration) -> ExecutionOutcome {
    execute_within(executor, action, Instant::now() + within).await
}

async fn run(executor: &OciExecutor, action: &StampedAction) -> ExecutionOutcome {
    run_within(executor, action, Duration::from_secs(20)).await
}

fn detail(outcome: ExecutionOutcome) -> String {
    match outcome {
        ExecutionOutcome::Executed { detail } => detail,
        other => panic!("not executed: {other:?}"),
    }
}

fn failed(outcome: ExecutionOutcome) -> String {
    match outcome {
        ExecutionOutcome::Failed { reason } => reason,
        other => panic!("not failed: {other:?}"),
    }
}

fn unknown(outcome: ExecutionOutcome) -> String {
    match outcome {
        ExecutionOutcome::Unknown { reason } => reason,
        other => panic!("not unknown: {other:?}"),
    }
}

/// Polls `condition` every 20 ms for at most 10 s.
async fn until(what: &str, mut condition: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < end, "not within 10 s: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn statuses(fake: &OciFake, op: &str) -> Vec<u16> {
    fake.log().into_iter().filter(|(_, o, _)| o == op).map(|(_, _, s)| s).collect()
}

fn executor(fake: &OciFake, name: &str) -> OciExecutor {
    OciExecutor::with_client(fake.core(&temp_dir(name)), SkipSourceDestCheck::Check)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seize_is_one_list_one_update_one_read_and_a_stale_release_deletes_nothing() {
    let fake = OciFake::start();
    let vnics = fake.vnics(2);
    let (a, b) = (&vnics[0], &vnics[1]);
    let executor = executor(&fake, "seize");

    // a takes the address, held by no VNIC: its subnet (GetVnic), the list, a create, a read.
    let took = detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", a, 1)).await);
    assert_eq!(took, format!("10.0.0.10 assigned to {a} (confirmed)"));
    assert_eq!(
        fake.calls(),
        json!({"GetVnic": 1, "ListPrivateIps": 1, "CreatePrivateIp": 1, "GetPrivateIp": 1})
    );

    // b seizes (its subnet not read yet: one GetVnic more).
    fake.reset_calls();
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "b", b, 2)).await);
    assert_eq!(
        fake.calls(),
        json!({"GetVnic": 1, "ListPrivateIps": 1, "UpdatePrivateIp": 1, "GetPrivateIp": 1})
    );
    assert_eq!(fake.holder("10.0.0.10").as_deref(), Some(b.as_str()));

    // a seizes back: exactly one list, one update, one read.
    fake.reset_calls();
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", a, 3)).await);
    assert_eq!(fake.calls(), json!({"ListPrivateIps": 1, "UpdatePrivateIp": 1, "GetPrivateIp": 1}));
    assert_eq!(fake.holder("10.0.0.10").as_deref(), Some(a.as_str()));

    // b's stale release: the object is on a, so nothing is deleted; one list, one read.
    fake.reset_calls();
    let stale = detail(run(&executor, &action(Verb::UnassignSecondaryIp, "b", b, 2)).await);
    assert!(stale.contains("taken by a seize"), "{stale}");
    assert_eq!(fake.calls(), json!({"ListPrivateIps": 1, "GetPrivateIp": 1}));
    assert_eq!(fake.holder("10.0.0.10").as_deref(), Some(a.as_str()));

    // a's own release deletes it: a list, a read and a conditional delete; a second release
    // finds nothing.
    fake.reset_calls();
    detail(run(&executor, &action(Verb::UnassignSecondaryIp, "a", a, 3)).await);
    assert_eq!(fake.calls(), json!({"ListPrivateIps": 1, "GetPrivateIp": 1, "DeletePrivateIp": 1}));
    assert_eq!(fake.holder("10.0.0.10"), None);
    let again = detail(run(&executor, &action(Verb::UnassignSecondaryIp, "a", a, 3)).await);
    assert!(again.contains("released already"), "{again}");

    // Holding it already: one list, nothing written.
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", a, 4)).await);
    fake.reset_calls();
    let held = detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", a, 4)).await);
    assert!(held.contains("is on"), "{held}");
    assert_eq!(fake.calls(), json!({"ListPrivateIps": 1}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_refused_as_in_use_reads_again_and_a_primary_ip_is_never_taken() {
    let fake = OciFake::start();
    let vnics = fake.vnics(2);
    let executor = executor(&fake, "create-conflict");
    // The create is answered 409 (in use): the executor reads again instead of resending blind.
    fake.fault("CreatePrivateIp", 409, "Conflict", 1, None);
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &vnics[0], 1)).await);
    assert_eq!(
        fake.calls(),
        json!({"GetVnic": 1, "ListPrivateIps": 2, "CreatePrivateIp": 2, "GetPrivateIp": 1})
    );
    assert_eq!(executor.throttled_calls(), 0, "a create's 409 is not throttling");

    // 10.0.0.5 is the primary IP of the second VNIC: never moved, never deleted.
    let mut primary = action(Verb::AssignSecondaryIp, "a", &vnics[0], 2);
    primary.address = "10.0.0.5".parse().expect("literal");
    assert!(failed(run(&executor, &primary).await).contains("primary IP"));
    assert_eq!(fake.holder("10.0.0.5").as_deref(), Some(vnics[1].as_str()));
}

/// 429 and 409 `IncorrectState` / `Conflict` are resent after `Retry-After` — the fake sees no call
/// before it — and 429 and `IncorrectState` are counted as throttling (`Conflict` is not: OCI also
/// answers it for states that last); a 500 is resent too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_and_conflicts_are_resent_after_retry_after() {
    let fake = OciFake::start();
    let vnics = fake.vnics(2);
    let executor = executor(&fake, "throttle");
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &vnics[0], 1)).await);
    detail(run(&executor, &action(Verb::EnableForwarding, "b", &vnics[1], 1)).await);

    fake.reset_calls();
    fake.fault("UpdatePrivateIp", 429, "TooManyRequests", 1, Some(1));
    fake.fault("UpdatePrivateIp", 409, "IncorrectState", 1, Some(1));
    fake.fault("UpdatePrivateIp", 409, "Conflict", 1, Some(1));
    fake.fault("GetPrivateIp", 500, "InternalServerError", 1, None);
    let started = Instant::now();
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "b", &vnics[1], 2)).await);
    assert!(started.elapsed() >= Duration::from_secs(3), "three Retry-After: 1 waited");
    assert_eq!(executor.throttled_calls(), 2, "429 and IncorrectState, not Conflict");
    let log = fake.log();
    let updates: Vec<&(f64, String, u16)> = log.iter().filter(|(_, op, _)| op == "UpdatePrivateIp").collect();
    assert_eq!(updates.iter().map(|(_, _, s)| *s).collect::<Vec<_>>(), [429, 409, 409, 200], "{log:?}");
    for pair in updates.windows(2) {
        assert!(pair[1].0 - pair[0].0 >= 0.99, "a call came before Retry-After: {log:?}");
    }
    assert_eq!(fake.calls()["GetPrivateIp"], 2, "the 500 was resent once");
    assert_eq!(fake.holder("10.0.0.10").as_deref(), Some(vnics[1].as_str()));
}

/// A throttle that outlasts the deadline: no call is sent that would have to wait past it, and
/// the action fails by the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_is_kept_under_throttling() {
    let fake = OciFake::start();
    let vnics = fake.vnics(1);
    let executor = executor(&fake, "deadline");
    fake.fault("ListPrivateIps", 429, "TooManyRequests", 100, Some(1));
    let started = Instant::now();
    let reason = failed(
        run_within(
            &executor,
            &action(Verb::AssignSecondaryIp, "a", &vnics[0], 1),
            Duration::from_millis(2500),
        )
        .await,
    );
    assert!(started.elapsed() < Duration::from_millis(2500), "{:?}", started.elapsed());
    assert!(reason.contains("would pass the deadline"), "{reason}");
    assert_eq!(fake.calls()["ListPrivateIps"], 3, "at 0 s, 1 s and 2 s; not at 3 s");
    assert_eq!(executor.throttled_calls(), 3);
}

/// 401 and 404 `NotAuthorizedOrNotFound` fail at once (one call): a 404 naming the policy
/// statements, a 401 (authentication) the key, its fingerprint and the clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_errors_fail_at_once_naming_the_policy() {
    let fake = OciFake::start();
    let vnics = fake.vnics(1);
    let executor = executor(&fake, "permission");
    for (status, code, hint) in
        [(404, "NotAuthorizedOrNotFound", "use private-ips"), (401, "NotAuthenticated", "fingerprint")]
    {
        fake.reset_calls();
        fake.fault("*", status, code, 1, None);
        let reason = failed(run(&executor, &action(Verb::AssignSecondaryIp, "a", &vnics[0], 1)).await);
        assert!(reason.contains(code) && reason.contains(hint), "{reason}");
        assert_eq!(fake.log().len(), 1, "one call, not resent");
    }
    // A key the fake does not know: its own 401, at once.
    let dir = temp_dir("permission-other-key");
    let config = dir.join("config");
    std::fs::write(
        &config,
        format!(
            "[DEFAULT]\nuser=ocid1.user.oc1..other\nfingerprint=aa\ntenancy=ocid1.tenancy.oc1..other\nkey_file={}\n",
            oci_fake::key_file().display()
        ),
    )
    .expect("write");
    let auth = tenure::exec::oci::tenure_oci::Auth::config_file(&config, "DEFAULT").expect("reads");
    let core =
        tenure::exec::oci::tenure_oci::Core::new("us-ashburn-1", Some(&fake.url()), auth).expect("client");
    let stranger = OciExecutor::with_client(core, SkipSourceDestCheck::Check);
    let reason = failed(run(&stranger, &action(Verb::AssignSecondaryIp, "a", &vnics[0], 1)).await);
    assert!(reason.contains("401") && reason.contains("unknown keyId"), "{reason}");
}

/// Reads that lag the writes: the executor reads until the move shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_read_is_waited_out() {
    let fake = OciFake::start();
    let vnics = fake.vnics(2);
    let executor = executor(&fake, "lag");
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &vnics[0], 1)).await);
    detail(run(&executor, &action(Verb::EnableForwarding, "b", &vnics[1], 1)).await);
    // Let the history settle past the lag, then make reads lag by 1 s.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    fake.lag(1.0);
    fake.reset_calls();
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "b", &vnics[1], 2)).await);
    let reads = fake.calls()["GetPrivateIp"].as_u64().expect("count");
    assert!(reads >= 3, "the move showed only after the lag: {reads} reads");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_is_checked_and_set_only_when_asked() {
    let fake = OciFake::start();
    let subnet = fake.subnet("10.0.0.0/24");
    let off = fake.vnic(&subnet, "10.0.0.4", false);
    let checker = executor(&fake, "forwarding");
    let reason = failed(run(&checker, &action(Verb::EnableForwarding, "a", &off, 1)).await);
    assert!(reason.contains(&format!("skipSourceDestCheck is off for {off}")), "{reason}");
    assert!(fake.calls().get("UpdateVnic").is_none(), "checked, not set");
    let setter = OciExecutor::with_client(fake.core(&temp_dir("forwarding-set")), SkipSourceDestCheck::Set);
    detail(run(&setter, &action(Verb::EnableForwarding, "a", &off, 1)).await);
    assert_eq!(fake.calls()["UpdateVnic"], 1);
    detail(run(&checker, &action(Verb::EnableForwarding, "a", &off, 1)).await);
}

/// The inventory reads every page of the nodes' subnets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inventory_reads_every_page_of_the_subnets() {
    let fake = OciFake::start();
    let vnics = fake.vnics(2);
    let executor = executor(&fake, "inventory");
    // 130 secondary addresses by hand on the second VNIC: with the primaries, two pages.
    for host in 100..230 {
        fake.drift(&format!("10.0.0.{}", host % 256), Some(&vnics[1]));
    }
    fake.drift("10.0.0.10", Some(&vnics[0]));
    fake.reset_calls();
    let request = InventoryRequest {
        addresses: vec![
            "10.0.0.10".parse().expect("ip"),
            "10.0.0.200".parse().expect("ip"),
            "10.0.0.11".parse().expect("ip"),
        ],
        nics: vnics.clone(),
        own_nics: vec![],
    };
    let found = executor.inventory(&request).expect("has an inventory").await.expect("reads");
    assert_eq!(
        found,
        vec![
            ("10.0.0.10".parse().expect("ip"), vec![vnics[0].clone()]),
            ("10.0.0.11".parse().expect("ip"), vec![]),
            ("10.0.0.200".parse().expect("ip"), vec![vnics[1].clone()]),
        ]
    );
    assert_eq!(fake.calls(), json!({"GetVnic": 2, "ListPrivateIps": 2}));
}

/// Instance principals end to end: identity from the (fake) metadata service, a session token
/// from the (fake) federation endpoint, requests signed with the session key; the token is
/// renewed in the background before a call would have to (no Core call is made meanwhile), and
/// before it expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_principals_sign_with_a_session_token_refreshed_before_expiry() {
    let fake = OciFake::start_with(12.0);
    let vnics = fake.vnics(2);
    let federations = || fake.admin("GET", "federations", &json!({}))["federations"].as_u64().expect("n");
    let executor = OciExecutor::with_client(fake.core_instance_principal(), SkipSourceDestCheck::Check);
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &vnics[0], 1)).await);
    assert_eq!(federations(), 1);
    // A 12 s token: renewed in the background 3 s into its life (a call would at 6 s).
    fake.reset_calls();
    until("the session is renewed with no call made", || federations() >= 2).await;
    assert!(fake.log().is_empty(), "renewed off the call path: {:?}", fake.log());
    // Calls keep working, and none is refused for an expired token.
    let end = Instant::now() + Duration::from_secs(7);
    let mut epoch = 3;
    while Instant::now() < end {
        let holder = if epoch % 2 == 0 { &vnics[1] } else { &vnics[0] };
        detail(run(&executor, &action(Verb::AssignSecondaryIp, "x", holder, epoch)).await);
        epoch += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(federations() >= 4, "refreshed: {} federations", federations());
    assert!(fake.log().iter().all(|(_, _, status)| *status != 401), "no call refused: {:?}", fake.log());
}

/// A background renewal whose federation hangs does not hold calls up: they sign with the
/// current token, both before the time a call would renew it and after it (a renewal is under way
/// and the token has not expired), and answer at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_made_while_a_renewal_waits_on_the_federation_answer_at_once() {
    let fake = OciFake::start_with(12.0);
    let vnics = fake.vnics(1);
    let federations = || fake.admin("GET", "federations", &json!({}));
    let executor = OciExecutor::with_client(fake.core_instance_principal(), SkipSourceDestCheck::Check);
    let issued = Instant::now();
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &vnics[0], 1)).await);
    assert_eq!(federations()["federations"], 1);
    // A 12 s token: renewed in the background about 3 s into its life (a call would at about
    // 6 s); that federation is held 6 s.
    fake.admin("POST", "federation", &json!({"delaySeconds": 6}));
    until("the background renewal waits on the federation", || federations()["federating"] == 1).await;
    for (when, at) in [("before a call would renew", issued), ("after", issued + Duration::from_millis(7000))]
    {
        tokio::time::sleep_until(at).await;
        let started = Instant::now();
        let outcome =
            run_within(&executor, &action(Verb::EnableForwarding, "a", &vnics[0], 1), Duration::from_secs(2))
                .await;
        let took = started.elapsed();
        detail(outcome);
        assert!(took < Duration::from_secs(1), "{when}: the call took {took:?}");
        assert_eq!(federations()["federating"], 1, "{when}: made while the renewal was under way");
    }
    assert_eq!(federations()["federations"], 1, "no federation finished meanwhile");
    until("the renewal ends", || federations()["federations"] == 2).await;
}

/// A session token OCI stops taking before its expiry: the 401 fetches a new one at once and the
/// call is sent again with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_session_token_is_replaced_at_once() {
    let fake = OciFake::start();
    let vnics = fake.vnics(1);
    let executor = OciExecutor::with_client(fake.core_instance_principal(), SkipSourceDestCheck::Check);
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &vnics[0], 1)).await);
    fake.admin("DELETE", "sessions", &json!({}));
    fake.reset_calls();
    detail(run(&executor, &action(Verb::EnableForwarding, "a", &vnics[0], 1)).await);
    assert_eq!(fake.admin("GET", "federations", &json!({}))["federations"], 2, "re-federated after the 401");
    let statuses: Vec<u16> = fake.log().iter().map(|(_, _, s)| *s).collect();
    assert_eq!(statuses, [401, 200], "GetVnic refused once, then sent again with the new token");
}

/// `tenure validate`: a missing region, a VNIC that is not an OCID, a config file or profile that
/// does not exist: one line each, at its place, exit 2.
#[test]
fn validate_names_each_oci_mistake_in_one_line() {
    let dir = temp_dir("validate");
    let fake_config = dir.join("oci-config");
    std::fs::write(
        &fake_config,
        format!("[DEFAULT]\nuser=u\nfingerprint=f\ntenancy=t\nkey_file={}\n", oci_fake::key_file().display()),
    )
    .expect("write");
    let cases = [
        (
            "{name: o, kind: oci, auth: {configFile: ./oci-config}}",
            "ocid1.vnic.oc1.iad.aaaa",
            "3:13: oci provider `o` needs `region` (for instance `us-ashburn-1`)",
        ),
        (
            "{name: o, kind: oci, region: us-ashburn-1, auth: {configFile: ./oci-config}}",
            "eni-a",
            "1:55: node `a`: `eni-a` is not a VNIC OCID",
        ),
        (
            "{name: o, kind: oci, region: us-ashburn-1, auth: {configFile: ./missing}}",
            "ocid1.vnic.oc1.iad.aaaa",
            "3:62: auth: cannot read the OCI config file",
        ),
        (
            "{name: o, kind: oci, region: us-ashburn-1, auth: {configFile: ./oci-config, profile: NOPE}}",
            "ocid1.vnic.oc1.iad.aaaa",
            "oci-config has no profile [NOPE] (it has: DEFAULT)",
        ),
        (
            "{name: o, kind: oci, region: us-ashburn-1, auth: {configFile: ./oci-config, profil: X}}",
            "ocid1.vnic.oc1.iad.aaaa",
            "3:62: auth does not take `profil` (it takes `configFile`, `profile`)",
        ),
    ];
    for (provider, nic, want) in cases {
        let config = dir.join("agent.yaml");
        std::fs::write(
            &config,
            format!(
                "node: {{name: a, provider: o, placementGroup: g1, nic: {nic}}}\nstore: {{kind: embedded, path: ./data}}\nproviders: [{provider}]\n"
            ),
        )
        .expect("write");
        let output =
            Command::new(env!("CARGO_BIN_EXE_tenure")).arg("validate").arg(&config).output().expect("runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(output.status.code(), Some(2), "{provider}: {stderr}");
        assert_eq!(lines.len(), 1, "{provider}: {stderr}");
        assert!(lines[0].contains(want), "{provider}: want `{want}` in {stderr}");
    }
}

/// Reads that lag (1 s): b moves the object from a, and a's release runs at once. a's list and
/// read still show the object on a, but its delete carries the etag of that read: 412, read
/// again, until the read shows b — nothing is deleted from b.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_on_a_lagging_read_never_deletes_from_the_seizer() {
    let fake = OciFake::start();
    let vnics = fake.vnics(2);
    let (a, b) = (&vnics[0], &vnics[1]);
    let executor = executor(&fake, "lag-release");
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", a, 1)).await);
    fake.lag(1.0);
    let seizer = fake.core(&temp_dir("lag-release-b"));
    let subnet = fake.object("10.0.0.4").expect("primary")["subnetId"].as_str().expect("subnet").to_owned();
    let far = || Instant::now() + Duration::from_secs(10);
    // Once the lagging reads show a's object, b moves it.
    let end = far();
    loop {
        let found = seizer.private_ip_by_address(&subnet, oci_fake::address(), far()).await.expect("list");
        if found.and_then(|p| p.vnic_id).as_deref() == Some(a.as_str()) {
            break;
        }
        assert!(Instant::now() < end, "the lagging read never showed a's object");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let id = fake.object("10.0.0.10").expect("object")["id"].as_str().expect("id").to_owned();
    seizer.move_private_ip(&id, b, far()).await.expect("b's move");
    fake.reset_calls();
    let stale = detail(run(&executor, &action(Verb::UnassignSecondaryIp, "a", a, 1)).await);
    assert!(stale.contains(&format!("is on {b} (taken by a seize)")), "{stale}");
    assert_eq!(fake.holder("10.0.0.10").as_deref(), Some(b.as_str()), "b keeps the address");
    let deletes = statuses(&fake, "DeletePrivateIp");
    assert!(!deletes.is_empty() && deletes.iter().all(|s| *s == 412), "{deletes:?}");
}

/// An earlier release deleted the object, and this one's list and GetPrivateIp lag and still
/// show it: its delete is answered 404 `NotAuthorizedOrNotFound`. Not "not permitted": no delete
/// is sent again, and the release reads until a read says gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_not_found_after_a_lagging_read_is_read_again_until_gone() {
    let fake = OciFake::start();
    let vnics = fake.vnics(1);
    let executor = executor(&fake, "gone-lag");
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &vnics[0], 1)).await);
    fake.lag(1.5);
    let reader = fake.core(&temp_dir("gone-lag-reader"));
    let subnet = fake.object("10.0.0.4").expect("primary")["subnetId"].as_str().expect("subnet").to_owned();
    let end = Instant::now() + Duration::from_secs(10);
    while reader.private_ip_by_address(&subnet, oci_fake::address(), end).await.expect("list").is_none() {
        assert!(Instant::now() < end, "the lagging read never showed the object");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let first = detail(run(&executor, &action(Verb::UnassignSecondaryIp, "a", &vnics[0], 1)).await);
    assert!(first.contains("deleted from"), "{first}");
    fake.reset_calls();
    let again = detail(run(&executor, &action(Verb::UnassignSecondaryIp, "a", &vnics[0], 1)).await);
    assert!(again.contains("is gone") && again.contains("released already"), "{again}");
    assert_eq!(statuses(&fake, "DeletePrivateIp"), [404], "one delete, never sent again");
    let reads = statuses(&fake, "GetPrivateIp");
    assert!(reads.len() >= 3 && reads.last() == Some(&404), "read until gone: {reads:?}");
}

/// A delete answered 404 while GetPrivateIp keeps showing the object on the VNIC (the policy
/// allows reading but not deleting; or reads that lag): unknown at the deadline, naming both, and
/// no delete sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_not_found_while_the_object_still_reads_as_ours_is_unknown_naming_the_policy() {
    let fake = OciFake::start();
    let vnics = fake.vnics(1);
    let executor = executor(&fake, "gone-denied");
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &vnics[0], 1)).await);
    fake.fault("DeletePrivateIp", 404, "NotAuthorizedOrNotFound", 100, None);
    fake.reset_calls();
    let outcome =
        run_within(&executor, &action(Verb::UnassignSecondaryIp, "a", &vnics[0], 1), Duration::from_secs(2))
            .await;
    let reason = unknown(outcome);
    assert!(reason.contains("policy does not allow the delete") && reason.contains("HTTP 404"), "{reason}");
    assert_eq!(statuses(&fake, "DeletePrivateIp"), [404], "one delete, never sent again");
    assert_eq!(fake.holder("10.0.0.10").as_deref(), Some(vnics[0].as_str()), "still there");
}

/// A GetPrivateIp answered without its `etag`: the release sends no delete (one without
/// `if-match` could remove the address from a VNIC that seized it meanwhile) and fails saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_without_an_etag_sends_no_delete() {
    let fake = OciFake::start();
    let vnics = fake.vnics(1);
    let executor = executor(&fake, "no-etag");
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &vnics[0], 1)).await);
    fake.admin("POST", "etags", &json!({"omit": true}));
    fake.reset_calls();
    let reason = failed(run(&executor, &action(Verb::UnassignSecondaryIp, "a", &vnics[0], 1)).await);
    assert!(reason.contains("answered no etag") && reason.contains("not called"), "{reason}");
    assert!(statuses(&fake, "DeletePrivateIp").is_empty(), "no delete sent");
    assert_eq!(fake.holder("10.0.0.10").as_deref(), Some(vnics[0].as_str()), "still on a");
    fake.admin("POST", "etags", &json!({"omit": false}));
    detail(run(&executor, &action(Verb::UnassignSecondaryIp, "a", &vnics[0], 1)).await);
    assert_eq!(fake.holder("10.0.0.10"), None, "released once the etag is there");
}

/// A delete answered 429 (`Retry-After: 2`) while b moves the object: a reads it again after the
/// wait, finds it on b, and sends no second delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_throttled_while_the_address_moves_reads_again_and_deletes_nothing() {
    let fake = OciFake::start();
    let vnics = fake.vnics(2);
    let (a, b) = (vnics[0].clone(), vnics[1].clone());
    let executor = Arc::new(executor(&fake, "throttled-release"));
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &a, 1)).await);
    fake.reset_calls();
    fake.fault("DeletePrivateIp", 429, "TooManyRequests", 1, Some(2));
    let releasing = {
        let executor = Arc::clone(&executor);
        let release = action(Verb::UnassignSecondaryIp, "a", &a, 1);
        tokio::spawn(async move { run(&executor, &release).await })
    };
    until("a's delete is throttled", || statuses(&fake, "DeletePrivateIp") == [429]).await;
    let id = fake.object("10.0.0.10").expect("object")["id"].as_str().expect("id").to_owned();
    let seizer = fake.core(&temp_dir("throttled-release-b"));
    seizer.move_private_ip(&id, &b, Instant::now() + Duration::from_secs(5)).await.expect("b's move");
    let stale = detail(releasing.await.expect("joins"));
    assert!(stale.contains("taken by a seize"), "{stale}");
    assert_eq!(fake.holder("10.0.0.10").as_deref(), Some(b.as_str()), "b keeps the address");
    assert_eq!(statuses(&fake, "DeletePrivateIp"), [429], "no second delete");
    assert_eq!(executor.throttled_calls(), 1);
}

/// A write answered 5xx may have been applied: given up at the deadline it is `unknown`, not
/// `failed`. One that was only throttled (429: not applied) stays `failed`. A delete answered
/// 503 is read again before it is sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_given_up_after_a_5xx_is_in_doubt() {
    let fake = OciFake::start();
    let vnics = fake.vnics(2);
    let executor = executor(&fake, "in-doubt");
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &vnics[0], 1)).await);
    let seize = action(Verb::AssignSecondaryIp, "b", &vnics[1], 2);
    fake.fault("UpdatePrivateIp", 500, "InternalServerError", 100, None);
    let reason = unknown(run_within(&executor, &seize, Duration::from_millis(1500)).await);
    assert!(reason.contains("UpdatePrivateIp: HTTP 500") && reason.contains("in doubt"), "{reason}");
    fake.clear_faults();
    fake.fault("UpdatePrivateIp", 429, "TooManyRequests", 100, Some(1));
    let reason = failed(run_within(&executor, &seize, Duration::from_millis(1500)).await);
    assert!(reason.contains("429") && reason.contains("would pass the deadline"), "{reason}");
    fake.clear_faults();
    // A 5xx, then a refusal of the resend (a session that expired meanwhile): still in doubt.
    fake.fault("UpdatePrivateIp", 500, "InternalServerError", 1, None);
    fake.fault("UpdatePrivateIp", 401, "NotAuthenticated", 1, None);
    let reason = unknown(run_within(&executor, &seize, Duration::from_millis(3000)).await);
    assert!(
        reason.contains("HTTP 401") && reason.contains("in doubt: an earlier try was answered 500"),
        "{reason}"
    );
    fake.clear_faults();

    fake.reset_calls();
    fake.fault("DeletePrivateIp", 503, "ServiceUnavailable", 1, None);
    detail(run(&executor, &action(Verb::UnassignSecondaryIp, "a", &vnics[0], 1)).await);
    let calls: Vec<(String, u16)> = fake.log().into_iter().map(|(_, op, s)| (op, s)).collect();
    let want = [("ListPrivateIps", 200), ("GetPrivateIp", 200), ("DeletePrivateIp", 503)]
        .into_iter()
        .chain([("GetPrivateIp", 200), ("DeletePrivateIp", 204)])
        .map(|(op, s)| (op.to_owned(), s))
        .collect::<Vec<_>>();
    assert_eq!(calls, want);
    assert_eq!(fake.holder("10.0.0.10"), None);

    // Always answered 503: the delete is in doubt at the deadline.
    detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &vnics[0], 3)).await);
    fake.fault("DeletePrivateIp", 503, "ServiceUnavailable", 100, None);
    let release = action(Verb::UnassignSecondaryIp, "a", &vnics[0], 3);
    let reason = unknown(run_within(&executor, &release, Duration::from_millis(1500)).await);
    assert!(reason.contains("503") && reason.contains("in doubt"), "{reason}");
}

/// Nothing is sent once the deadline has passed, a resend included (here the signer is slow, as
/// a federation or an overrun sleep would be): the fake sees the first try only. A write that
/// was answered 5xx is then in doubt; a read is not sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_sent_once_the_deadline_has_passed() {
    use tenure::exec::oci::tenure_oci::OciError;
    use tenure::exec::oci::tenure_oci::http::{Call, Http};
    let fake = OciFake::start();
    let vnics = fake.vnics(1);
    let key =
        tenure::exec::oci::tenure_oci::profile::api_key(&fake.config_file(&temp_dir("not-sent")), "DEFAULT")
            .expect("the key");
    let http = Http::new().expect("client");
    let url = format!("{}/20160918/vnics/{}", fake.url(), vnics[0]);
    for (method, body) in [(http::Method::GET, None), (http::Method::PUT, Some(&b"{}"[..]))] {
        fake.reset_calls();
        fake.fault("*", 503, "ServiceUnavailable", 1, Some(0));
        let deadline = Instant::now() + Duration::from_millis(400);
        let signs = AtomicU32::new(0);
        let call = Call {
            operation: "Op",
            method: method.clone(),
            url: &url,
            body,
            deadline,
            retry_conflict: true,
            if_match: None,
            resend: true,
        };
        let result = http
            .signed(call, || {
                let slow = signs.fetch_add(1, Ordering::SeqCst) > 0;
                let signer = (key.key_id.clone(), key.key.clone());
                async move {
                    if slow {
                        tokio::time::sleep_until(deadline + Duration::from_millis(100)).await;
                    }
                    Ok(signer)
                }
            })
            .await;
        assert_eq!(fake.log().len(), 1, "{method}: one try only: {:?}", fake.log());
        match (method.as_str(), result) {
            ("GET", Err(OciError::NotSent { message, .. })) => {
                assert!(message.contains("deadline"), "{message}")
            }
            ("PUT", Err(e @ OciError::InDoubt { .. })) => assert!(e.to_string().contains("503"), "{e}"),
            (m, other) => panic!("{m}: {other:?}"),
        }
    }
}

/// RESERVED private IPs: one on no VNIC is "held nowhere" (lists and inventory still read), an
/// acquire assigns it (UpdatePrivateIp, no create), and a release detaches it
/// (PrivateIpVnicDetach) and keeps it — same OCID, so route rules targeting it stay valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reserved_private_ip_is_assigned_and_detached_never_deleted() {
    let fake = OciFake::start();
    let vnics = fake.vnics(2);
    let subnet = fake.object("10.0.0.4").expect("primary")["subnetId"].as_str().expect("subnet").to_owned();
    let id = fake.reserved("10.0.0.10", None, &subnet)["id"].as_str().expect("id").to_owned();
    fake.reserved("10.0.0.20", None, &subnet);
    let executor = executor(&fake, "reserved");
    let request = InventoryRequest {
        addresses: vec!["10.0.0.10".parse().expect("ip"), "fd00::10".parse().expect("ip")],
        nics: vnics.clone(),
        own_nics: vec![],
    };
    let found = executor.inventory(&request).expect("has an inventory").await.expect("reads");
    assert_eq!(found, vec![("10.0.0.10".parse().expect("ip"), vec![])], "held nowhere; no IPv6");

    fake.reset_calls();
    let took = detail(run(&executor, &action(Verb::AssignSecondaryIp, "a", &vnics[0], 1)).await);
    assert_eq!(took, format!("10.0.0.10 assigned to {} (confirmed)", vnics[0]));
    assert_eq!(fake.calls(), json!({"ListPrivateIps": 1, "UpdatePrivateIp": 1, "GetPrivateIp": 1}));

    fake.reset_calls();
    let released = detail(run(&executor, &action(Verb::UnassignSecondaryIp, "a", &vnics[0], 1)).await);
    assert!(released.contains("detached") && released.contains("reserved: kept"), "{released}");
    assert_eq!(fake.calls(), json!({"ListPrivateIps": 1, "GetPrivateIp": 1, "PrivateIpVnicDetach": 1}));
    let kept = fake.object("10.0.0.10").expect("kept");
    assert_eq!((kept["id"].as_str(), kept["lifetime"].as_str()), (Some(id.as_str()), Some("RESERVED")));
    assert!(kept["vnicId"].is_null(), "{kept}");
    let again = detail(run(&executor, &action(Verb::UnassignSecondaryIp, "a", &vnics[0], 1)).await);
    assert!(again.contains("on no VNIC") && again.contains("released already"), "{again}");
}

/// IPv6 on an `oci` provider: refused before any call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_is_refused_before_any_call() {
    let fake = OciFake::start();
    let vnics = fake.vnics(1);
    let executor = executor(&fake, "ipv6");
    for verb in [Verb::AssignSecondaryIp, Verb::UnassignSecondaryIp] {
        let mut ipv6 = action(verb, "a", &vnics[0], 1);
        ipv6.address = "fd00::10".parse().expect("literal");
        let reason = failed(run(&executor, &ipv6).await);
        assert!(
            reason.contains("IPv4 secondary private IPs only") && reason.ends_with("not called"),
            "{reason}"
        );
    }
    assert_eq!(fake.calls(), json!({}));
}
