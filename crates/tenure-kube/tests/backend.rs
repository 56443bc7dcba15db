//! `KubernetesBackend` against the Lease API double (a test double of the API server, over real
//! HTTP): takeover, renewal, expiry, release, racing contenders, a term that went back (a Lease
//! deleted and recreated, an edited annotation, a floor from the state directory), and bad names.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams};
use tenure_kube::{
    KubernetesBackend, LeaseApiDouble, NONCE_ANNOTATION, SetupError, TERM_ANNOTATION, client_for_url,
};
use tenure_lead::LeaderEpoch;
use tenure_lead::backend::{Attempt, BackendError, LeaseBackend};

const NAMESPACE: &str = "tenure";
const LEASE: &str = "election";
/// Bounds every wait on the double, so that a bug fails instead of hanging.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);

fn contender(double: &LeaseApiDouble, identity: &str, lease_duration: Duration) -> KubernetesBackend {
    KubernetesBackend::connect(&double.url(), NAMESPACE, LEASE, identity, lease_duration)
        .expect("valid setup")
}

async fn attempt(backend: &mut KubernetesBackend) -> Attempt {
    tokio::time::timeout(STEP_TIMEOUT, backend.try_acquire_or_renew())
        .await
        .expect("an attempt does not hang")
        .expect("the double answers")
}

fn leader(term: u64) -> Attempt {
    Attempt::Leader { term: LeaderEpoch::from_stored(term) }
}

fn follower(holder: Option<&str>) -> Attempt {
    Attempt::Follower { holder: holder.map(str::to_owned) }
}

/// (holder, term annotation) as stored.
fn stored(double: &LeaseApiDouble) -> (Option<String>, Option<String>) {
    let lease = double.lease(NAMESPACE, LEASE).expect("the Lease exists");
    let term = lease.metadata.annotations.as_ref().and_then(|a| a.get(TERM_ANNOTATION)).cloned();
    (lease.spec.and_then(|s| s.holder_identity), term)
}

fn admin(double: &LeaseApiDouble) -> Api<Lease> {
    Api::namespaced(client_for_url(&double.url()).expect("client"), NAMESPACE)
}

#[tokio::test]
async fn takeover_increments_the_term_by_one_and_renewal_keeps_it() {
    let double = LeaseApiDouble::start().await.expect("listens");
    let mut a = contender(&double, "a", Duration::from_secs(15));
    let mut b = contender(&double, "b", Duration::from_secs(15));
    assert_eq!(attempt(&mut a).await, leader(1), "a missing Lease is created under term 1");
    let renewed_before = double.lease(NAMESPACE, LEASE).and_then(|l| l.spec).and_then(|s| s.renew_time);
    for _ in 0..3 {
        assert_eq!(attempt(&mut a).await, leader(1), "renewal keeps the term");
    }
    let renewed_after = double.lease(NAMESPACE, LEASE).and_then(|l| l.spec).and_then(|s| s.renew_time);
    assert!(renewed_after > renewed_before, "renewal moves renewTime");
    assert_eq!(double.resource_version(), 4, "one create, three renewals");
    assert_eq!(stored(&double), (Some("a".into()), Some("1".into())));
    assert_eq!(attempt(&mut b).await, follower(Some("a")));
    a.release().await.expect("released");
    assert_eq!(stored(&double), (None, Some("1".into())), "release clears the holder, keeps the term");
    assert_eq!(attempt(&mut b).await, leader(2));
    assert_eq!(attempt(&mut a).await, follower(Some("b")));
    b.release().await.expect("released");
    assert_eq!(attempt(&mut a).await, leader(3));
    assert_eq!(stored(&double), (Some("a".into()), Some("3".into())));
    let transitions = double.lease(NAMESPACE, LEASE).and_then(|l| l.spec).and_then(|s| s.lease_transitions);
    assert_eq!(transitions, Some(2), "leaseTransitions counts the takeovers of the existing Lease");
}

#[tokio::test]
async fn racing_contenders_exactly_one_wins_each_takeover() {
    let double = LeaseApiDouble::start().await.expect("listens");
    let mut a = contender(&double, "a", Duration::from_secs(15));
    let mut b = contender(&double, "b", Duration::from_secs(15));
    for round in 1..=6_u64 {
        // Both read the same resourceVersion, then both write.
        double.rendezvous_next_gets(2);
        let (from_a, from_b) = tokio::join!(attempt(&mut a), attempt(&mut b));
        let (winner, loser, name) = match (&from_a, &from_b) {
            (Attempt::Leader { .. }, Attempt::Follower { .. }) => (from_a.clone(), from_b.clone(), "a"),
            (Attempt::Follower { .. }, Attempt::Leader { .. }) => (from_b.clone(), from_a.clone(), "b"),
            _ => panic!("round {round}: exactly one leader, got {from_a:?} and {from_b:?}"),
        };
        assert_eq!(winner, leader(round), "round {round}: the term moves by exactly one");
        assert_eq!(loser, follower(None), "round {round}: the loser learns only that it lost");
        assert_eq!(stored(&double), (Some(name.into()), Some(round.to_string())));
        let stats = double.stats();
        // Round 1 races two creations, later rounds two guarded replaces.
        assert_eq!((stats.already_exists, stats.conflicts), (1, round - 1), "round {round}: one loser");
        let holder = if name == "a" { &mut a } else { &mut b };
        holder.release().await.expect("released");
    }
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_with_the_next_term() {
    let double = LeaseApiDouble::start().await.expect("listens");
    let mut a = contender(&double, "a", Duration::from_secs(1));
    // b judges a's Lease by the 1s stored on it; its own 10s keeps a from seeing b's Lease expire
    // however slowly the steps below run.
    let mut b = contender(&double, "b", Duration::from_secs(10));
    assert_eq!(attempt(&mut a).await, leader(1));
    assert_eq!(attempt(&mut b).await, follower(Some("a")), "a live lease is not taken");
    // a stops renewing (a crash, a partition); b keeps trying.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(attempt(&mut b).await, leader(2), "expired: taken over under the next term");
    assert_eq!(attempt(&mut a).await, follower(Some("b")), "a learns it lost the lease");
    assert_eq!(attempt(&mut a).await, follower(Some("b")), "and does not take it back while b renews");
    assert_eq!(attempt(&mut b).await, leader(2));
}

/// A Lease at `term` held by "ghost", renewed an hour ago by this clock (a dead holder, or a
/// clock far behind): expired by the wall clock alone.
fn ghost_lease(term: u64) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(LEASE.into()),
            annotations: Some(BTreeMap::from([(TERM_ANNOTATION.to_owned(), term.to_string())])),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("ghost".into()),
            renew_time: Some(MicroTime(Timestamp::now() - std::time::Duration::from_secs(3600))),
            lease_duration_seconds: Some(1),
            ..LeaseSpec::default()
        }),
    }
}

#[tokio::test]
async fn a_fresh_contender_waits_a_lease_duration_before_taking_an_expired_looking_lease() {
    let double = LeaseApiDouble::start().await.expect("listens");
    let stale = ghost_lease(41);
    admin(&double).create(&PostParams::default(), &stale).await.expect("created");
    let mut b = contender(&double, "b", Duration::from_secs(1));
    assert_eq!(attempt(&mut b).await, follower(Some("ghost")), "not yet watched unchanged for 1s");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(attempt(&mut b).await, leader(42), "the term continues from the annotation");
}

#[tokio::test]
async fn a_lease_renewed_later_than_this_clock_is_not_taken_even_when_watched_unchanged() {
    let double = LeaseApiDouble::start().await.expect("listens");
    // Written by a holder whose clock is an hour ahead of this one: by the wall-clock rule it is
    // live for an hour, however long it stays unchanged (the price of clock skew is liveness).
    let ahead = Lease {
        metadata: ObjectMeta { name: Some(LEASE.into()), ..ObjectMeta::default() },
        spec: Some(LeaseSpec {
            holder_identity: Some("ahead".into()),
            renew_time: Some(MicroTime(Timestamp::now() + std::time::Duration::from_secs(3600))),
            lease_duration_seconds: Some(1),
            ..LeaseSpec::default()
        }),
    };
    admin(&double).create(&PostParams::default(), &ahead).await.expect("created");
    let mut b = contender(&double, "b", Duration::from_secs(1));
    assert_eq!(attempt(&mut b).await, follower(Some("ahead")));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(attempt(&mut b).await, follower(Some("ahead")), "renewTime + 1s has not passed");
}

#[tokio::test]
async fn a_restarted_process_with_the_same_identity_never_shares_the_term() {
    let double = LeaseApiDouble::start().await.expect("listens");
    let mut first = contender(&double, "a", Duration::from_secs(15));
    assert_eq!(attempt(&mut first).await, leader(1));
    let mut restarted = contender(&double, "a", Duration::from_secs(15));
    assert_eq!(attempt(&mut restarted).await, follower(Some("a")), "not its lease until it expires");
    assert_eq!(attempt(&mut first).await, leader(1));
}

fn went_back(error: &BackendError) -> Option<(u64, u64)> {
    match error {
        BackendError::TermWentBack { backend: "kubernetes", seen, found } => Some((*seen, *found)),
        _ => None,
    }
}

/// An attempt that must be refused with `TermWentBack`: its (seen, found).
async fn refused(backend: &mut KubernetesBackend) -> (u64, u64) {
    let error = tokio::time::timeout(STEP_TIMEOUT, backend.try_acquire_or_renew())
        .await
        .expect("an attempt does not hang")
        .expect_err("a term below the highest seen is refused");
    went_back(&error).unwrap_or_else(|| panic!("expected TermWentBack, got {error}"))
}

#[tokio::test]
async fn a_deleted_and_recreated_lease_is_refused_until_its_term_is_restored() {
    let double = LeaseApiDouble::start().await.expect("listens");
    let mut a = contender(&double, "a", Duration::from_secs(15));
    let mut b = contender(&double, "b", Duration::from_secs(15));
    assert_eq!(attempt(&mut a).await, leader(1));
    a.release().await.expect("released");
    assert_eq!(attempt(&mut b).await, leader(2));
    b.release().await.expect("released");
    assert_eq!(attempt(&mut a).await, leader(3));
    assert_eq!(attempt(&mut b).await, follower(Some("a")), "b has now seen term 3");

    // An administrator deletes the Lease under the leader: a missing Lease is term 0.
    admin(&double).delete(LEASE, &DeleteParams::default()).await.expect("deleted");
    let version = double.resource_version();
    assert_eq!(refused(&mut a).await, (3, 0), "the leader refuses");
    assert_eq!(refused(&mut b).await, (3, 0), "so does the follower");
    assert!(double.lease(NAMESPACE, LEASE).is_none(), "neither recreated it");
    assert_eq!(double.resource_version(), version, "nothing written");

    // A newcomer that has seen nothing recreates it at 1 (no contender can prevent that); those
    // that saw term 3 refuse it, and write nothing.
    let mut newcomer = contender(&double, "c", Duration::from_secs(15));
    assert_eq!(attempt(&mut newcomer).await, leader(1));
    newcomer.release().await.expect("released");
    let version = double.resource_version();
    assert_eq!(refused(&mut b).await, (3, 1), "free, but below what b has seen");
    assert_eq!(double.resource_version(), version, "b wrote nothing");
    assert_eq!(b.highest_seen(), 3, "the recreated Lease's 1 did not lower what b has seen");

    // Recovery, as documented: the annotation set at the term named in the error.
    let api = admin(&double);
    let mut restored = api.get(LEASE).await.expect("get");
    restored.metadata.annotations.get_or_insert_default().insert(TERM_ANNOTATION.into(), "3".into());
    api.replace(LEASE, &PostParams::default(), &restored).await.expect("annotated");
    assert_eq!(attempt(&mut b).await, leader(4), "counts on from the restored term");
    assert_eq!(stored(&double), (Some("b".into()), Some("4".into())));
}

#[tokio::test]
async fn a_lower_annotation_under_a_leader_is_refused_and_nothing_is_written() {
    let double = LeaseApiDouble::start().await.expect("listens");
    let mut a = contender(&double, "a", Duration::from_secs(15));
    let mut b = contender(&double, "b", Duration::from_secs(15));
    assert_eq!(attempt(&mut a).await, leader(1));
    a.release().await.expect("released");
    assert_eq!(attempt(&mut b).await, leader(2));
    assert_eq!(attempt(&mut a).await, follower(Some("b")), "a has now seen term 2");
    let api = admin(&double);
    let mut edited = api.get(LEASE).await.expect("get");
    edited.metadata.annotations.get_or_insert_default().insert(TERM_ANNOTATION.into(), "1".into());
    api.replace(LEASE, &PostParams::default(), &edited).await.expect("edited");
    let version = double.resource_version();
    assert_eq!(refused(&mut b).await, (2, 1), "the holder's renewal refuses");
    assert_eq!(refused(&mut a).await, (2, 1), "a follower that saw 2 refuses");
    assert_eq!(double.resource_version(), version, "nothing written");
}

#[tokio::test]
async fn a_floor_from_the_state_directory_is_refused_before_anything_is_written() {
    let double = LeaseApiDouble::start().await.expect("listens");
    // A restarted node whose state directory says it saw term 7; the cluster has no Lease.
    let mut a = contender(&double, "a", Duration::from_secs(15));
    a.remember_at_least(7);
    assert_eq!(a.highest_seen(), 7);
    assert_eq!(refused(&mut a).await, (7, 0), "a missing Lease after term 7");
    assert!(double.lease(NAMESPACE, LEASE).is_none(), "not created at term 1 (nor 8)");

    // The Lease is recreated below the floor: still refused, and not taken.
    let mut c = contender(&double, "c", Duration::from_secs(15));
    assert_eq!(attempt(&mut c).await, leader(1));
    c.release().await.expect("released");
    let version = double.resource_version();
    assert_eq!(refused(&mut a).await, (7, 1));
    assert_eq!(double.resource_version(), version, "nothing written");
    a.remember_at_least(3);
    assert_eq!(a.highest_seen(), 7, "a floor is only ever raised");

    // At or above the floor, it goes on: a Lease at 7 is taken at 8.
    let api = admin(&double);
    let mut restored = api.get(LEASE).await.expect("get");
    restored.metadata.annotations.get_or_insert_default().insert(TERM_ANNOTATION.into(), "7".into());
    api.replace(LEASE, &PostParams::default(), &restored).await.expect("annotated");
    assert_eq!(attempt(&mut a).await, leader(8));
}

#[tokio::test]
async fn a_renewal_that_finds_another_term_is_a_lost_lease() {
    let double = LeaseApiDouble::start().await.expect("listens");
    let mut a = contender(&double, "a", Duration::from_secs(15));
    assert_eq!(attempt(&mut a).await, leader(1));
    let api = admin(&double);
    let mut edited = api.get(LEASE).await.expect("get");
    edited.metadata.annotations.get_or_insert_default().insert(TERM_ANNOTATION.into(), "9".into());
    api.replace(LEASE, &PostParams::default(), &edited).await.expect("edited");
    assert_eq!(attempt(&mut a).await, follower(Some("a")), "not the term a took: a does not lead");
    assert_eq!(a.highest_seen(), 9);
}

#[tokio::test]
async fn an_unreadable_term_is_refused_and_nothing_is_written() {
    let double = LeaseApiDouble::start().await.expect("listens");
    let corrupt = Lease {
        metadata: ObjectMeta {
            name: Some(LEASE.into()),
            annotations: Some(BTreeMap::from([(TERM_ANNOTATION.to_owned(), "seven".to_owned())])),
            ..ObjectMeta::default()
        },
        spec: None,
    };
    admin(&double).create(&PostParams::default(), &corrupt).await.expect("created");
    let version = double.resource_version();
    let mut a = contender(&double, "a", Duration::from_secs(15));
    let error = a.try_acquire_or_renew().await.expect_err("refused");
    assert!(matches!(error, BackendError::Unavailable { .. }), "{error}");
    assert!(error.to_string().contains(TERM_ANNOTATION), "{error}");
    assert_eq!(double.resource_version(), version, "nothing written");
}

#[tokio::test]
async fn an_unreachable_api_server_is_unavailable() {
    // Port 1: nothing listens there (a freed ephemeral port could be taken by a concurrent test).
    let url = "http://127.0.0.1:1";
    let mut a =
        KubernetesBackend::connect(url, NAMESPACE, LEASE, "a", Duration::from_secs(15)).expect("valid");
    let error = tokio::time::timeout(STEP_TIMEOUT, a.try_acquire_or_renew())
        .await
        .expect("an attempt does not hang")
        .expect_err("nobody listens");
    assert!(matches!(error, BackendError::Unavailable { backend: "kubernetes", .. }), "{error}");
    assert_eq!(a.name(), "kubernetes");
}

#[tokio::test]
async fn bad_setups_are_refused() {
    let url = "http://127.0.0.1:1";
    let second = Duration::from_secs(1);
    let empty = KubernetesBackend::connect(url, NAMESPACE, LEASE, "", second).expect_err("empty identity");
    assert!(matches!(empty, SetupError::Empty { field: "identity" }), "{empty}");
    let short = KubernetesBackend::connect(url, NAMESPACE, LEASE, "a", Duration::from_millis(500));
    assert!(matches!(short, Err(SetupError::LeaseTooShort(_))));
    let url_error =
        KubernetesBackend::connect("not a url", NAMESPACE, LEASE, "a", second).expect_err("bad url");
    assert!(matches!(url_error, SetupError::Url { .. }), "{url_error}");
}

#[tokio::test]
async fn names_the_api_server_would_refuse_are_refused_at_setup_naming_the_field() {
    let url = "http://127.0.0.1:1";
    let second = Duration::from_secs(1);
    let too_long = format!("{}.{}.{}", "a".repeat(100), "b".repeat(100), "c".repeat(52));
    for name in ["Election", "my_election", "-e", "e-", "a..b", too_long.as_str()] {
        let error = KubernetesBackend::connect(url, NAMESPACE, name, "a", second).expect_err("bad name");
        assert!(matches!(error, SetupError::BadName { field: "lease name", .. }), "{name}: {error}");
        let text = error.to_string();
        assert!(text.starts_with("lease name ") && text.contains("DNS-1123 subdomain"), "{text}");
    }
    for namespace in ["Ops", "ops.prod", "ops_prod", &"n".repeat(64)] {
        let error =
            KubernetesBackend::connect(url, namespace, LEASE, "a", second).expect_err("bad namespace");
        assert!(matches!(error, SetupError::BadName { field: "namespace", .. }), "{namespace}: {error}");
        assert!(error.to_string().contains("DNS-1123 label"), "{error}");
    }
    let dotted = KubernetesBackend::connect(url, &"n".repeat(63), "tenure.dev.vip-1", "A_b", second);
    assert!(dotted.is_ok(), "a 63-character namespace and a dotted name are valid; identities are free");
}

#[tokio::test]
async fn a_term_at_u64_max_is_refused_never_wrapped_or_panicking() {
    let double = LeaseApiDouble::start().await.expect("listens");
    let at_max = ghost_lease(u64::MAX);
    admin(&double).create(&PostParams::default(), &at_max).await.expect("created");
    let mut b = contender(&double, "b", Duration::from_secs(1));
    assert_eq!(attempt(&mut b).await, follower(Some("ghost")), "not yet watched unchanged for 1s");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let refused = b.try_acquire_or_renew().await.expect_err("no term after u64::MAX");
    assert!(
        matches!(refused, tenure_lead::backend::BackendError::TermOverflow { term: u64::MAX, .. }),
        "{refused}"
    );
}

/// The nonce annotation as stored.
fn stored_nonce(double: &LeaseApiDouble) -> Option<String> {
    let lease = double.lease(NAMESPACE, LEASE).expect("the Lease exists");
    lease.metadata.annotations.and_then(|a| a.get(NONCE_ANNOTATION).cloned())
}

#[tokio::test]
async fn a_takeover_whose_answer_was_lost_is_adopted_at_the_same_term() {
    let double = LeaseApiDouble::start().await.expect("listens");
    // A 15s lease: an adoption that waited the lease out would not fit in STEP_TIMEOUT.
    let mut a = contender(&double, "a", Duration::from_secs(15));
    double.cut_next_write_answers(1);
    let lost = a.try_acquire_or_renew().await.expect_err("the answer to the creation was cut");
    assert!(matches!(lost, BackendError::Unavailable { .. }), "{lost}");
    assert_eq!(stored(&double), (Some("a".into()), Some("1".into())), "the creation committed");
    assert_eq!(stored_nonce(&double).as_deref(), Some(a.nonce()));
    let version = double.resource_version();
    assert_eq!(attempt(&mut a).await, leader(1), "adopted: no term skipped, no lease waited out");
    // Not told the renew deadline: the adoption renews before it leads.
    assert_eq!(double.resource_version(), version + 1, "one renewing write");
    assert_eq!(attempt(&mut a).await, leader(1), "then renews as usual");
    a.release().await.expect("released");

    // A takeover by replace (PUT), by a backend that knows the renew deadline: adopted at once.
    let mut b = contender(&double, "b", Duration::from_secs(15)).with_renew_deadline(Duration::from_secs(10));
    double.cut_next_write_answers(1);
    b.try_acquire_or_renew().await.expect_err("the answer to the takeover was cut");
    assert_eq!(stored(&double), (Some("b".into()), Some("2".into())), "the takeover committed");
    let version = double.resource_version();
    assert_eq!(attempt(&mut b).await, leader(2), "adopted under the term it wrote");
    assert_eq!(double.resource_version(), version, "adopted without another write");
    assert_eq!(attempt(&mut b).await, leader(2));
    assert_eq!(attempt(&mut a).await, follower(Some("b")));
    assert_eq!(double.stats().answers_lost, 2);
}

#[tokio::test]
async fn a_lost_takeover_is_adopted_only_by_the_process_that_wrote_it_not_by_one_of_the_same_identity() {
    let double = LeaseApiDouble::start().await.expect("listens");
    let mut first = contender(&double, "a", Duration::from_secs(15));
    let mut second = contender(&double, "a", Duration::from_secs(15));
    assert_ne!(first.nonce(), second.nonce(), "one nonce per process");
    // Both read no Lease, both create it under term 1: one creation commits, the other is
    // refused, and neither learns which.
    double.rendezvous_next_gets(2);
    double.cut_next_write_answers(2);
    let (one, two) = tokio::join!(
        tokio::time::timeout(STEP_TIMEOUT, first.try_acquire_or_renew()),
        tokio::time::timeout(STEP_TIMEOUT, second.try_acquire_or_renew()),
    );
    assert!(one.expect("in time").is_err() && two.expect("in time").is_err(), "both answers lost");
    assert_eq!(double.stats().already_exists, 1, "one creation committed");
    assert_eq!(stored(&double), (Some("a".into()), Some("1".into())));
    let from_first = attempt(&mut first).await;
    let from_second = attempt(&mut second).await;
    let (winner, loser) = if stored_nonce(&double).as_deref() == Some(first.nonce()) {
        (from_first, from_second)
    } else {
        (from_second, from_first)
    };
    assert_eq!(winner, leader(1), "the writer adopts its takeover");
    assert_eq!(loser, follower(Some("a")), "same identity, same term, other nonce: not adopted");
}
