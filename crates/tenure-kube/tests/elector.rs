//! Two electors (`tenure_lead::elector::spawn`) campaigning through `KubernetesBackend` against the
//! Lease API double (a test double of the API server): one leader at a time, failover on a clean
//! shutdown (the lease is released) and on a crash (the lease must expire first).

use std::time::Duration;

use tenure_kube::{KubernetesBackend, LeaseApiDouble, TERM_ANNOTATION};
use tenure_lead::config::ElectionConfig;
use tenure_lead::{LeaderState, LeadershipHandle, elector};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const NAMESPACE: &str = "tenure";
const LEASE: &str = "election";
/// Bounds every wait, so that a lost election fails the test instead of hanging it.
const WAIT_TIMEOUT: Duration = Duration::from_secs(15);

/// For the crash test: the follower takes over only once the lease expires, so it is short.
fn fast() -> ElectionConfig {
    ElectionConfig {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_secs(1),
        retry_period: Duration::from_millis(200),
        jitter: 0.2,
    }
}

/// For failovers by release, which need no expiry: a renew deadline that no stall of a loaded
/// machine reaches, so the leader never steps down on its own.
fn patient() -> ElectionConfig {
    ElectionConfig {
        lease_duration: Duration::from_secs(5),
        renew_deadline: Duration::from_secs(4),
        ..fast()
    }
}

struct Contender {
    handle: LeadershipHandle,
    task: tokio::task::JoinHandle<Result<(), tenure_lead::backend::BackendError>>,
    shutdown: CancellationToken,
}

fn campaign(double: &LeaseApiDouble, identity: &str, config: ElectionConfig) -> Contender {
    config.validate().expect("a safe timing");
    let backend =
        KubernetesBackend::connect(&double.url(), NAMESPACE, LEASE, identity, config.lease_duration)
            .expect("valid setup");
    let shutdown = CancellationToken::new();
    let (handle, task) = elector::spawn(backend, config, shutdown.clone());
    Contender { handle, task, shutdown }
}

async fn wait_for(
    watch: &mut watch::Receiver<LeaderState>,
    what: impl FnMut(&LeaderState) -> bool,
) -> LeaderState {
    *tokio::time::timeout(WAIT_TIMEOUT, watch.wait_for(what)).await.expect("in time").expect("elector alive")
}

/// `future`, bounded by `WAIT_TIMEOUT`: an elector or a referee that never ends fails the test.
async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT_TIMEOUT, future)
        .await
        .unwrap_or_else(|_| panic!("{what} within {WAIT_TIMEOUT:?}"))
}

/// Watches two handles until `stop`; fails on any moment where both lead, and returns every
/// epoch either led under, in the order they began.
fn referee(
    a: LeadershipHandle,
    b: LeadershipHandle,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<Vec<u64>> {
    tokio::spawn(async move {
        let (mut wa, mut wb) = (a.watch(), b.watch());
        let mut epochs: Vec<u64> = Vec::new();
        let (mut a_open, mut b_open, mut stopping) = (true, true, false);
        loop {
            // The successor first: b leads only after a (a never leads again), so a read of b as
            // leader followed by a read of a as leader means both led at the moment b was read.
            // Read the other way round, a stepping down and b taking over between the two reads
            // would look like two leaders.
            let sb = *wb.borrow_and_update();
            let sa = *wa.borrow_and_update();
            assert!(!(sa.leader && sb.leader), "two leaders at once: {sa:?} and {sb:?}");
            for epoch in [sa.epoch, sb.epoch].into_iter().flatten() {
                if epochs.last() != Some(&epoch.get()) {
                    epochs.push(epoch.get());
                }
            }
            if stopping {
                return epochs;
            }
            // An elector that ended keeps its last state; keep watching the other. On `stop`, the
            // states are checked once more, so that a change published just before is counted.
            tokio::select! {
                () = stop.cancelled() => stopping = true,
                changed = wa.changed(), if a_open => a_open = changed.is_ok(),
                changed = wb.changed(), if b_open => b_open = changed.is_ok(),
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_and_failover_when_the_leader_is_cancelled() {
    let double = LeaseApiDouble::start().await.expect("listens");
    let a = campaign(&double, "a", patient());
    let first = wait_for(&mut a.handle.watch(), |s| s.leader).await;
    let b = campaign(&double, "b", patient());
    let stop = CancellationToken::new();
    let referee = referee(a.handle.clone(), b.handle.clone(), stop.clone());

    // Several renewals pass: a keeps its term, b stays a follower.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(a.handle.state(), first, "renewals keep the epoch");
    assert!(!b.handle.is_leader());

    // Clean shutdown: a steps down and releases; b takes over at once, under the next term.
    a.shutdown.cancel();
    within("a stops", a.task).await.expect("joins").expect("a clean stop");
    assert!(!a.handle.is_leader());
    let second = wait_for(&mut b.handle.watch(), |s| s.leader).await;
    let first_epoch = first.epoch.expect("a leader has an epoch");
    assert_eq!(second.epoch, Some(first_epoch.next()), "one takeover, one increment");
    let lease = double.lease(NAMESPACE, LEASE).expect("the Lease exists");
    assert_eq!(lease.spec.and_then(|s| s.holder_identity).as_deref(), Some("b"));
    assert_eq!(
        lease.metadata.annotations.and_then(|a| a.get(TERM_ANNOTATION).cloned()),
        Some(first_epoch.next().get().to_string())
    );

    stop.cancel();
    let epochs = within("the referee stops", referee).await.expect("never two leaders at once");
    assert_eq!(epochs, vec![first_epoch.get(), first_epoch.next().get()], "each epoch led by one elector");
    b.shutdown.cancel();
    within("b stops", b.task).await.expect("joins").expect("b clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_crash_the_follower_takes_over_only_once_the_lease_has_expired() {
    let double = LeaseApiDouble::start().await.expect("listens");
    let a = campaign(&double, "a", fast());
    let first = wait_for(&mut a.handle.watch(), |s| s.leader).await;
    let b = campaign(&double, "b", fast());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!b.handle.is_leader());

    // A crash: the task dies without stepping down or releasing.
    a.task.abort();
    assert!(a.task.await.expect_err("aborted").is_cancelled());
    let last_renewal =
        double.lease(NAMESPACE, LEASE).and_then(|l| l.spec).and_then(|s| s.renew_time).expect("a renewed").0;

    let second = wait_for(&mut b.handle.watch(), |s| s.leader).await;
    assert_eq!(second.epoch, first.epoch.map(|e| e.next()));
    // b stamps acquireTime after deciding the lease had expired, before writing.
    let acquired = double
        .lease(NAMESPACE, LEASE)
        .and_then(|l| l.spec)
        .and_then(|s| s.acquire_time)
        .expect("b took the Lease")
        .0;
    let lease_ms = i64::try_from(fast().lease_duration.as_millis()).expect("small");
    assert!(
        acquired.as_millisecond() >= last_renewal.as_millisecond() + lease_ms,
        "b took the lease at {acquired}, before a's (renewed at {last_renewal}) could expire"
    );
    b.shutdown.cancel();
    within("b stops", b.task).await.expect("joins").expect("b clean stop");
    let lease = double.lease(NAMESPACE, LEASE).expect("the Lease exists");
    assert_eq!(lease.spec.and_then(|s| s.holder_identity), None, "b released on shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_always_slower_than_the_retry_budget_still_leads_under_the_term_it_wrote() {
    let double = LeaseApiDouble::start().await.expect("listens");
    let config = ElectionConfig {
        lease_duration: Duration::from_secs(5),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(200),
        jitter: 0.2,
    };
    config.validate().expect("a safe timing");
    // Every write is answered 600ms after it is applied: longer than the 200ms a follower's attempt
    // may take, shorter than the 2s a leader's renewal may take. Each takeover is given up by the
    // elector after it committed.
    double.delay_write_answers(Duration::from_millis(600));
    let backend = KubernetesBackend::connect(&double.url(), NAMESPACE, LEASE, "a", config.lease_duration)
        .expect("valid setup")
        .with_renew_deadline(config.renew_deadline);
    let shutdown = CancellationToken::new();
    let (handle, task) = elector::spawn(backend, config, shutdown.clone());
    let led = wait_for(&mut handle.watch(), |s| s.leader).await;
    assert_eq!(led.epoch.map(|e| e.get()), Some(1), "the first takeover, adopted: no term skipped");
    let lease = double.lease(NAMESPACE, LEASE).expect("the Lease exists");
    assert_eq!(
        lease.metadata.annotations.and_then(|a| a.get(TERM_ANNOTATION).cloned()).as_deref(),
        Some("1")
    );
    // It keeps leading: renewals fit in the renew deadline.
    let renewed = async {
        while double.resource_version() < 3 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    within("two renewals", renewed).await;
    assert_eq!(handle.state(), led, "still leading under term 1");
    shutdown.cancel();
    within("a stops", task).await.expect("joins").expect("a clean stop");
}
