//! The Lease API double answers kube's `Api<Lease>` the way the API server does: these tests pin
//! the behaviours the backend relies on (optimistic concurrency above all), through the real kube
//! client over HTTP.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use tenure_kube::{LeaseApiDouble, client_for_url};

fn lease(name: &str, holder: &str) -> Lease {
    Lease {
        metadata: ObjectMeta { name: Some(name.to_owned()), ..ObjectMeta::default() },
        spec: Some(LeaseSpec { holder_identity: Some(holder.to_owned()), ..LeaseSpec::default() }),
    }
}

fn api_status(result: Result<impl std::fmt::Debug, kube::Error>) -> (u16, String, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.reason.clone(), status.message.clone()),
        other => panic!("expected an API error Status, got {other:?}"),
    }
}

async fn start() -> (LeaseApiDouble, Api<Lease>) {
    let double = LeaseApiDouble::start().await.expect("the double listens");
    let client = client_for_url(&double.url()).expect("client");
    (double, Api::namespaced(client, "ns"))
}

#[tokio::test]
async fn create_then_create_again_is_already_exists() {
    let (double, api) = start().await;
    let created = api.create(&PostParams::default(), &lease("l", "a")).await.expect("created");
    assert_eq!(created.metadata.namespace.as_deref(), Some("ns"));
    assert_eq!(created.metadata.resource_version.as_deref(), Some("1"));
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    let (code, reason, message) = api_status(api.create(&PostParams::default(), &lease("l", "b")).await);
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));
    assert!(message.contains("already exists"), "{message}");
    assert_eq!(api.get("l").await.expect("get").spec.and_then(|s| s.holder_identity).as_deref(), Some("a"));
    assert_eq!(double.stats().already_exists, 1);
    let mut with_version = lease("m", "a");
    with_version.metadata.resource_version = Some("7".into());
    let (code, _, message) = api_status(api.create(&PostParams::default(), &with_version).await);
    assert_eq!(code, 500);
    assert!(message.contains("resourceVersion should not be set"), "{message}");
}

#[tokio::test]
async fn replace_with_a_stale_resource_version_is_a_conflict() {
    let (double, api) = start().await;
    let v1 = api.create(&PostParams::default(), &lease("l", "a")).await.expect("created");
    let mut first = v1.clone();
    first.spec.get_or_insert_default().holder_identity = Some("b".into());
    let v2 = api.replace("l", &PostParams::default(), &first).await.expect("current version accepted");
    assert_eq!(v2.metadata.resource_version.as_deref(), Some("2"), "every write moves the version");
    assert_eq!(v2.metadata.uid, v1.metadata.uid, "uid is kept on update");
    let mut second = v1.clone();
    second.spec.get_or_insert_default().holder_identity = Some("c".into());
    let (code, reason, message) = api_status(api.replace("l", &PostParams::default(), &second).await);
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert!(message.contains("the object has been modified"), "{message}");
    let stored = double.lease("ns", "l").expect("stored");
    assert_eq!(
        stored.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("b"),
        "the loser changed nothing"
    );
    assert_eq!(
        double.stats(),
        tenure_kube::double::DoubleStats { conflicts: 1, already_exists: 0, writes: 2, answers_lost: 0 }
    );
}

#[tokio::test]
async fn leases_refuse_unconditional_updates() {
    let (_double, api) = start().await;
    api.create(&PostParams::default(), &lease("l", "a")).await.expect("created");
    let (code, reason, message) =
        api_status(api.replace("l", &PostParams::default(), &lease("l", "x")).await);
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert!(message.contains("must be specified for an update"), "{message}");
}

#[tokio::test]
async fn a_put_carrying_the_uid_of_a_deleted_lease_is_a_conflict_and_without_it_creates() {
    let (double, api) = start().await;
    let old = api.create(&PostParams::default(), &lease("l", "a")).await.expect("created");
    let deleted = api.delete("l", &DeleteParams::default()).await.expect("deleted");
    assert!(deleted.is_right(), "a Lease is deleted at once: a Success Status, not the object");
    let (code, reason, _) = api_status(api.get("l").await);
    assert_eq!((code, reason.as_str()), (404, "NotFound"));
    let (code, reason, message) = api_status(api.replace("l", &PostParams::default(), &old).await);
    assert_eq!((code, reason.as_str()), (409, "Conflict"), "the uid is a precondition");
    assert!(message.contains("Precondition failed: UID"), "{message}");
    assert!(double.lease("ns", "l").is_none(), "nothing was created");
    let recreated =
        api.replace("l", &PostParams::default(), &lease("l", "b")).await.expect("create on update");
    assert_ne!(recreated.metadata.uid, old.metadata.uid);
    assert_eq!(recreated.metadata.resource_version.as_deref(), Some("3"), "create, delete, create");
    let (code, reason, _) = api_status(api.delete("gone", &DeleteParams::default()).await);
    assert_eq!((code, reason.as_str()), (404, "NotFound"));
}

#[tokio::test]
async fn namespaces_are_separate() {
    let (double, api) = start().await;
    let other: Api<Lease> = Api::namespaced(client_for_url(&double.url()).expect("client"), "other");
    api.create(&PostParams::default(), &lease("l", "a")).await.expect("created in ns");
    other.create(&PostParams::default(), &lease("l", "b")).await.expect("created in other");
    assert_eq!(other.get("l").await.expect("get").spec.and_then(|s| s.holder_identity).as_deref(), Some("b"));
    assert_eq!(
        double.lease("ns", "l").and_then(|l| l.spec).and_then(|s| s.holder_identity).as_deref(),
        Some("a")
    );
}

#[tokio::test]
async fn names_the_api_server_refuses_are_422_invalid() {
    let (double, api) = start().await;
    let (code, reason, message) = api_status(api.create(&PostParams::default(), &lease("Vip_1", "a")).await);
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert!(message.contains("metadata.name: Invalid value: \"Vip_1\""), "{message}");
    let (code, _, message) =
        api_status(api.replace("Vip_1", &PostParams::default(), &lease("Vip_1", "a")).await);
    assert_eq!(code, 422, "create on update is validated too: {message}");
    let bad_namespace: Api<Lease> = Api::namespaced(client_for_url(&double.url()).expect("client"), "Ops");
    let (code, reason, message) =
        api_status(bad_namespace.create(&PostParams::default(), &lease("vip", "a")).await);
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert!(message.contains("metadata.namespace: Invalid value: \"Ops\""), "{message}");
    assert_eq!(double.resource_version(), 0, "nothing stored");
    api.create(&PostParams::default(), &lease("tenure.dev.vip-1", "a"))
        .await
        .expect("a dotted name is valid");
}

#[tokio::test]
async fn a_cut_answer_hides_a_committed_write() {
    let (double, api) = start().await;
    double.cut_next_write_answers(1);
    let cut = api.create(&PostParams::default(), &lease("l", "a")).await;
    assert!(matches!(cut, Err(ref e) if !matches!(e, kube::Error::Api(_))), "a connection error: {cut:?}");
    assert!(double.lease("ns", "l").is_some(), "the write was applied");
    assert_eq!(double.stats().answers_lost, 1);
    let mut next = api.get("l").await.expect("the next request is answered");
    next.spec.get_or_insert_default().holder_identity = Some("b".into());
    api.replace("l", &PostParams::default(), &next).await.expect("answered: the fault was for one write");
}

#[tokio::test]
async fn a_delayed_answer_comes_after_the_write_was_applied() {
    let (double, api) = start().await;
    double.delay_write_answers(Duration::from_secs(30));
    let creating = api.clone();
    let pending =
        tokio::spawn(async move { creating.create(&PostParams::default(), &lease("l", "a")).await });
    let held_back = async {
        while double.stats().answers_lost == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), held_back).await.expect("the write arrives");
    assert!(double.lease("ns", "l").is_some(), "the write was applied before its answer was held back");
    assert!(!pending.is_finished(), "the caller is still waiting for the answer");
    pending.abort();
    double.delay_write_answers(Duration::ZERO);
    api.create(&PostParams::default(), &lease("m", "a")).await.expect("answered at once again");
}
