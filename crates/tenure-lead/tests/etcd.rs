//! The etcd backend against a real 3-member etcd cluster on loopback (Debian's etcd-server,
//! started and stopped by `scripts/etcd-cluster`; `scripts/install-deps` installs it). These
//! tests fail loudly when etcd is missing: they never skip. They need the etcd backend built:
//! `cargo test -p tenure-lead --features etcd` (`scripts/test` runs with `--all-features`).
//!
//! They run one at a time (see `support/etcd_cluster.rs`). Requests whose availability is not
//! the subject are retried while etcd answers `Unavailable` ([`settled!`]); every wait has a
//! deadline.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure_lead::backend::{Attempt, BackendError, LeaseBackend};
use tenure_lead::config::ElectionConfig;
use tenure_lead::elector;
use tenure_lead::etcd::EtcdBackend;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[path = "support/etcd_cluster.rs"]
mod etcd_cluster;

use etcd_cluster::Cluster;

/// How long any wait in these tests may take before it fails the test.
const WAIT_LIMIT: Duration = Duration::from_secs(30);

/// Retries a request while etcd answers `Unavailable` (a raft election under way, a member being
/// killed), for up to [`WAIT_LIMIT`]; any other outcome is returned.
macro_rules! settled {
    ($request:expr) => {{
        let deadline = Instant::now() + WAIT_LIMIT;
        loop {
            match $request.await {
                Err(BackendError::Unavailable { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                outcome => break outcome,
            }
        }
    }};
}

/// Waits for a leadership state, failing the test after [`WAIT_LIMIT`].
async fn wait_for(
    watch: &mut tokio::sync::watch::Receiver<tenure_lead::LeaderState>,
    what: &str,
    wanted: impl FnMut(&tenure_lead::LeaderState) -> bool,
) {
    match tokio::time::timeout(WAIT_LIMIT, watch.wait_for(wanted)).await {
        Ok(Ok(_)) => {}
        Ok(Err(_closed)) => panic!("{what}: the elector ended"),
        Err(_elapsed) => panic!("{what}: not within {WAIT_LIMIT:?}"),
    }
}

async fn contender(cluster: &Cluster, election: &str, name: &str, lease_s: u64) -> EtcdBackend {
    EtcdBackend::connect(&cluster.endpoints, "/tenure-test", election, name, Duration::from_secs(lease_s))
        .await
        .expect("connect to the etcd cluster")
}

fn term(attempt: &Attempt) -> Option<u64> {
    match attempt {
        Attempt::Leader { term } => Some(term.get()),
        Attempt::Follower { .. } => None,
    }
}

/// A short renew deadline with a lease well beyond it: the 2.8 s between them absorb a stall of
/// the leader's elector on a loaded machine (a stall longer than that would be a real violation).
fn fast() -> ElectionConfig {
    ElectionConfig {
        lease_duration: Duration::from_secs(FAST_LEASE_S),
        renew_deadline: Duration::from_millis(1_200),
        retry_period: Duration::from_millis(150),
        jitter: 0.1,
    }
}

/// The lease of [`fast`], in whole seconds as etcd takes it.
const FAST_LEASE_S: u64 = 4;

/// A backend whose renewals can be cut off, as by a partition between it and etcd.
struct Cuttable {
    inner: EtcdBackend,
    cut: Arc<Mutex<bool>>,
}

impl LeaseBackend for Cuttable {
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, BackendError> {
        if *self.cut.lock().expect("lock") {
            return Err(BackendError::Unavailable { backend: "etcd", message: "cut off (test)".into() });
        }
        self.inner.try_acquire_or_renew().await
    }
    async fn release(&mut self) -> Result<(), BackendError> {
        if *self.cut.lock().expect("lock") {
            return Ok(());
        }
        self.inner.release().await
    }
    fn name(&self) -> &'static str {
        "etcd"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terms_on_a_real_cluster() {
    let cluster = Cluster::start("terms", 24200);

    // Takeover increments the term by exactly one; renewal keeps it.
    let mut a = contender(&cluster, "t1", "a", 5).await;
    let mut b = contender(&cluster, "t1", "b", 5).await;
    assert_eq!(settled!(a.stored_term()).expect("read"), 0);
    assert_eq!(term(&settled!(a.try_acquire_or_renew()).expect("a takes")), Some(1));
    assert_eq!(
        term(&settled!(a.try_acquire_or_renew()).expect("a renews")),
        Some(1),
        "renewal keeps the term"
    );
    assert_eq!(
        settled!(b.try_acquire_or_renew()).expect("b asks"),
        Attempt::Follower { holder: Some("a".into()) }
    );
    assert_eq!(settled!(b.stored_term()).expect("read"), 1);
    settled!(a.release()).expect("release");
    assert_eq!(term(&settled!(b.try_acquire_or_renew()).expect("b takes")), Some(2), "exactly one more");
    settled!(b.release()).expect("release");

    // A lease duration with a fraction of a second is rounded up in etcd, never down: the renew
    // deadline was validated against the exact duration. (Above etcd's own minimum TTL, 1.5 s
    // with the cluster's raft timing, which etcd rounds up to 2 s by itself.)
    let mut c =
        EtcdBackend::connect(&cluster.endpoints, "/tenure-test", "t3", "c", Duration::from_millis(2_500))
            .await
            .expect("connect");
    assert!(term(&settled!(c.try_acquire_or_renew()).expect("c takes")).is_some());
    let mut client = etcd_client::Client::connect(&cluster.endpoints, None).await.expect("connect");
    let leader = client.get("/tenure-test/elections/t3/leader", None).await.expect("read");
    let lease = leader.kvs().first().expect("c holds the leader key").lease();
    let granted = client.lease_time_to_live(lease, None).await.expect("ttl").granted_ttl();
    assert_eq!(granted, 3, "2.5 s is granted as 3 s");
    settled!(c.release()).expect("release");

    // Two contenders never both hold the same term: four race, round after round.
    let mut racers = Vec::new();
    for name in ["r1", "r2", "r3", "r4"] {
        racers.push(contender(&cluster, "t2", name, 5).await);
    }
    let mut terms = Vec::new();
    for _round in 0..12 {
        let attempts = futures_join_all(&mut racers).await;
        let leaders: Vec<(usize, u64)> =
            attempts.iter().enumerate().filter_map(|(i, a)| term(a).map(|t| (i, t))).collect();
        assert_eq!(leaders.len(), 1, "exactly one leader per round: {attempts:?}");
        terms.push(leaders[0].1);
        settled!(racers[leaders[0].0].release()).expect("release");
    }
    let expected: Vec<u64> = (1..=12).collect();
    assert_eq!(terms, expected, "each takeover adds exactly one, no term is held twice");

    // A term at u64::MAX has no successor: refused, never wrapped to 0.
    client.put("/tenure-test/elections/t4/term", u64::MAX.to_string(), None).await.expect("put");
    let mut d = contender(&cluster, "t4", "d", 5).await;
    let refused = settled!(d.try_acquire_or_renew()).expect_err("no term after u64::MAX");
    assert!(matches!(refused, BackendError::TermOverflow { term: u64::MAX, .. }), "{refused}");
    let stored = client.get("/tenure-test/elections/t4/term", None).await.expect("read");
    assert_eq!(stored.kvs()[0].value_str().expect("utf-8"), u64::MAX.to_string(), "left as it was");
}

/// All racers attempt at once.
async fn futures_join_all(racers: &mut [EtcdBackend]) -> Vec<Attempt> {
    let futures: Vec<_> = racers.iter_mut().map(|r| r.try_acquire_or_renew()).collect();
    let outcomes = join_all(futures).await;
    let mut attempts = Vec::with_capacity(racers.len());
    for (racer, outcome) in racers.iter_mut().zip(outcomes) {
        // An attempt whose answer was lost is asked again: it adopts its takeover if it committed.
        let attempt = match outcome {
            Err(BackendError::Unavailable { .. }) => settled!(racer.try_acquire_or_renew()),
            other => other,
        };
        attempts.push(attempt.expect("attempt"));
    }
    attempts
}

async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut pinned: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in pinned.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *output = Some(value),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending { std::task::Poll::Pending } else { std::task::Poll::Ready(()) }
    })
    .await;
    outputs.into_iter().map(|o| o.expect("every future finished")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_steps_down_before_the_next_term_is_used() {
    let cluster = Cluster::start("stepdown", 24300);
    let cut = Arc::new(Mutex::new(false));
    let shutdown = CancellationToken::new();
    let a = Cuttable { inner: contender(&cluster, "s", "a", FAST_LEASE_S).await, cut: cut.clone() };
    let (a_handle, a_task) = elector::spawn(a, fast(), shutdown.clone());
    wait_for(&mut a_handle.watch(), "a leads", |s| s.leader).await;
    let a_term = a_handle.leader_epoch().expect("term").get();
    let b = contender(&cluster, "s", "b", FAST_LEASE_S).await;
    let (b_handle, b_task) = elector::spawn(b, fast(), shutdown.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!b_handle.is_leader(), "one leader at a time");

    // Cut a off: its lease expires in etcd after FAST_LEASE_S; it must have stepped down before,
    // at its renew deadline. So when b is seen leading, a has already published its step-down.
    *cut.lock().expect("lock") = true;
    wait_for(&mut b_handle.watch(), "b takes over", |s| s.leader).await;
    assert!(!a_handle.is_leader(), "a still leads while b leads");
    assert_eq!(b_handle.leader_epoch().map(|e| e.get()), Some(a_term + 1));
    shutdown.cancel();
    a_task.await.expect("join").expect("clean");
    b_task.await.expect("join").expect("clean");
}

/// Takeovers cut off at every point (the elector's timeout drops an attempt whose answer has not
/// come yet): a takeover that committed without its contender learning it is adopted by the next
/// attempt, so the term is exactly one more however many attempts were cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_whose_answer_was_lost_is_adopted_not_repeated() {
    let cluster = Cluster::start("lost", 24500);
    let mut observer = contender(&cluster, "lost", "observer", 5).await;
    for round in 1..=6u64 {
        let before = settled!(observer.stored_term()).expect("read");
        // A long lease: a round that stays unsettled for a while must not see its lease expire
        // (release revokes it at the end of the round).
        let mut a = contender(&cluster, "lost", "a", 60).await;
        let mut cut = 0u32;
        let mut budget = Duration::from_micros(250 * round);
        let taken = loop {
            // Past 200 cuts (a slow machine), one last attempt is given all the time it needs.
            let attempt = if cut < 200 {
                tokio::time::timeout(budget, a.try_acquire_or_renew()).await
            } else {
                Ok(settled!(a.try_acquire_or_renew()))
            };
            match attempt {
                Ok(Ok(Attempt::Leader { term })) => break term.get(),
                Ok(Ok(follower)) => panic!("round {round}: nobody else contends, got {follower:?}"),
                // An answer lost to etcd itself is one more cut.
                Err(_) | Ok(Err(BackendError::Unavailable { .. })) if cut < 200 => {
                    cut += 1;
                    budget += Duration::from_micros(250);
                }
                Err(_) | Ok(Err(_)) => panic!("round {round}: {attempt:?}"),
            }
        };
        assert_eq!(taken, before + 1, "round {round}: one takeover after {cut} cut attempts");
        assert_eq!(settled!(observer.stored_term()).expect("read"), taken);
        settled!(a.release()).expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_etcd_leader_member_does_not_lower_any_term() {
    let cluster = Cluster::start("kill", 24400);
    let mut a = contender(&cluster, "k", "a", 3).await;
    let mut observer = contender(&cluster, "k", "observer", 3).await;
    for expected in 1..=3 {
        assert_eq!(term(&settled!(a.try_acquire_or_renew()).expect("take")), Some(expected));
        settled!(a.release()).expect("release");
    }
    let before = settled!(observer.stored_term()).expect("read");
    assert_eq!(before, 3);
    let victim = cluster.leader_member();
    cluster.kill(&victim);

    // The cluster elects a new raft leader; reads and takeovers go on with terms above 3.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut attempts = 0u64;
    let taken = loop {
        assert!(Instant::now() < deadline, "no takeover within 20 s after killing {victim}");
        attempts += 1;
        match a.try_acquire_or_renew().await {
            Ok(attempt) if term(&attempt).is_some() => break term(&attempt).expect("leader"),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    // Usually 4. An attempt whose answer was lost with the killed member may have committed; the
    // next attempt adopts it, but if its lease expired first, the next takeover skips a term.
    // Every attempt commits at most one takeover, so the term is at most 3 + attempts.
    assert!(
        (4..=3 + attempts).contains(&taken),
        "the term continues above 3 after killing {victim}: {taken} after {attempts} attempts"
    );
    let after = settled!(observer.stored_term()).expect("read after the kill");
    assert_eq!(after, taken);
    // Best effort: the request may go to the killed member (the lease expires anyway).
    let _ = a.release().await;
}

/// The example program (examples/competing_leaders.rs) end to end on a real cluster: it exits
/// non-zero if any of the deposed leader's in-flight messages is accepted by the sink.
#[test]
fn the_competing_leaders_example_rejects_the_deposed_leaders_messages() {
    let cluster = Cluster::start("example", 24600);
    // `cargo test` builds the examples next to the test binaries (target/<profile>/examples).
    let example = std::env::current_exe()
        .expect("test binary path")
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("examples").join("competing_leaders"))
        .expect("target layout");
    assert!(example.exists(), "{} was not built", example.display());
    let out = Command::new(&example).arg(cluster.endpoints.join(",")).output().expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "example failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.matches("sink: REJECTED A-").count(), 5, "{stdout}");
    assert!(stdout.contains("0 accepted, 5 rejected"), "{stdout}");
}
