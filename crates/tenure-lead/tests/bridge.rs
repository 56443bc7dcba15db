//! The epoch bridge and its supervisor (SPEC 8): snapshot stamping, drain, abort, timeouts, and
//! one bridge per leadership term.
//!
//! Over 600 lines: one rig (scripted producers and pipelines), many cases; a second binary would
//! cost a link.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure_lead::backend::{Attempt, BackendError, LeaseBackend};
use tenure_lead::bridge::{
    BRIDGE_CAPACITY_MAX, BridgeConfigError, BridgeExit, BridgeOptions, BridgeSupervisor, DrainReason,
    EPOCH_HEADER_DEFAULT, FallibleReceiver, Handler, PipelineClosed, Stamped, Unsigned, spawn_epoch_bridge,
    spawn_stamping_bridge,
};
use tenure_lead::config::ElectionConfig;
use tenure_lead::sink::{FencedSink, Rejected, StampKey, StampSigner, StampVerifier};
use tenure_lead::{LeaderEpoch, LeaderState, LeadershipHandle, elector};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

fn epoch(value: u64) -> LeaderEpoch {
    LeaderEpoch::from_stored(value)
}

async fn collect<T>(pipeline: &mut mpsc::Receiver<Stamped<T>>, count: usize) -> Vec<Stamped<T>> {
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        out.push(pipeline.recv().await.expect("the bridge delivers"));
    }
    out
}

#[tokio::test(start_paused = true)]
async fn every_message_is_stamped_with_the_epoch_under_the_header() {
    let (tx, rx) = mpsc::channel(16);
    let (pipe_tx, mut pipeline) = mpsc::channel(16);
    let bridge =
        spawn_epoch_bridge(rx, pipe_tx, epoch(3), BridgeOptions::default(), CancellationToken::new())
            .expect("default options are valid");
    for n in 0..5u32 {
        tx.send(n).await.expect("open");
    }
    drop(tx);
    let got = collect(&mut pipeline, 5).await;
    assert_eq!(got.iter().map(|s| s.message).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4], "order kept");
    for stamped in &got {
        assert_eq!(stamped.epoch, epoch(3));
        assert_eq!(stamped.header, EPOCH_HEADER_DEFAULT);
        assert_eq!(stamped.header, "x-tenure-leader-epoch");
        assert_eq!(stamped.header_value(), "3");
        assert_eq!(stamped.signature, None, "unsigned bridge");
    }
    assert!(pipeline.recv().await.is_none(), "the bridge dropped its pipeline sender on exit");
    assert_eq!(
        bridge.stop().await,
        BridgeExit::Drained { reason: DrainReason::ProducerClosed, forwarded: 5 }
    );
}

#[tokio::test]
async fn the_header_name_is_configurable_and_the_options_are_checked() {
    let (tx, rx) = mpsc::channel(4);
    let (pipe_tx, mut pipeline) = mpsc::channel(4);
    let options = BridgeOptions { header: "x-pipeline-term", ..BridgeOptions::default() };
    let bridge = spawn_epoch_bridge(rx, pipe_tx, epoch(8), options, CancellationToken::new()).expect("valid");
    tx.send("m").await.expect("open");
    let stamped = pipeline.recv().await.expect("delivered");
    assert_eq!((stamped.header, stamped.epoch), ("x-pipeline-term", epoch(8)));
    drop(tx);
    assert!(matches!(bridge.stop().await, BridgeExit::Drained { forwarded: 1, .. }));

    let invalid = |options: BridgeOptions| {
        let (_tx, rx) = mpsc::channel::<u8>(1);
        let (pipe_tx, _pipeline) = mpsc::channel(1);
        spawn_epoch_bridge(rx, pipe_tx, epoch(1), options, CancellationToken::new())
            .map(|_| ())
            .expect_err("invalid options")
    };
    let base = BridgeOptions::default();
    assert_eq!(
        invalid(BridgeOptions { capacity: 0, ..base }),
        BridgeConfigError::CapacityOutOfRange { capacity: 0, max: BRIDGE_CAPACITY_MAX }
    );
    assert!(matches!(
        invalid(BridgeOptions { capacity: BRIDGE_CAPACITY_MAX + 1, ..base }),
        BridgeConfigError::CapacityOutOfRange { .. }
    ));
    for header in ["", "x tenure epoch", "x-tenure:epoch", "x-ténure"] {
        assert!(
            matches!(invalid(BridgeOptions { header, ..base }), BridgeConfigError::BadHeaderName { .. }),
            "{header:?} is not an HTTP token"
        );
    }
    assert_eq!(
        invalid(BridgeOptions { producer_idle_timeout: Some(Duration::ZERO), ..base }),
        BridgeConfigError::IdleTimeoutZero
    );
}

#[tokio::test(start_paused = true)]
async fn stop_drains_everything_handed_over_under_one_epoch() {
    let (tx, rx) = mpsc::channel(64);
    let (pipe_tx, mut pipeline) = mpsc::channel(4);
    let options = BridgeOptions { capacity: 8, ..BridgeOptions::default() };
    let bridge = spawn_epoch_bridge(rx, pipe_tx, epoch(5), options, CancellationToken::new()).expect("valid");
    for n in 0..40u32 {
        tx.send(n).await.expect("open");
    }
    // The pipeline holds 4 and the bridge 8; the rest waits in the producer's channel.
    let stopping = tokio::spawn(bridge.stop());
    let got = collect(&mut pipeline, 40).await;
    assert_eq!(got.iter().map(|s| s.message).collect::<Vec<_>>(), (0..40).collect::<Vec<_>>());
    assert!(got.iter().all(|s| s.epoch == epoch(5)), "one epoch for the bridge's whole life");
    assert_eq!(
        stopping.await.expect("joins"),
        BridgeExit::Drained { reason: DrainReason::StopRequested, forwarded: 40 }
    );
    assert!(tx.send(41).await.is_err(), "stop closed the producer: its further sends fail");
}

#[tokio::test(start_paused = true)]
async fn the_snapshot_stays_while_the_live_epoch_changes() {
    let (publisher, leadership) = LeadershipHandle::new();
    publisher.publish(LeaderState::leading(epoch(3)));
    let snapshot = leadership.leader_epoch().expect("leading");
    let (tx, rx) = mpsc::channel(8);
    let (pipe_tx, mut pipeline) = mpsc::channel(8);
    let bridge =
        spawn_epoch_bridge(rx, pipe_tx, snapshot, BridgeOptions::default(), CancellationToken::new())
            .expect("valid");
    tx.send(1).await.expect("open");
    assert_eq!(pipeline.recv().await.map(|s| s.epoch), Some(epoch(3)));
    publisher.publish(LeaderState::leading(epoch(4)));
    tx.send(2).await.expect("open");
    publisher.publish(LeaderState::following());
    tx.send(3).await.expect("open");
    assert_eq!(leadership.leader_epoch(), None, "the live view moved on");
    let later = collect(&mut pipeline, 2).await;
    assert!(later.iter().all(|s| s.epoch == epoch(3)), "still the spawn-time snapshot: {later:?}");
    assert_eq!(bridge.epoch(), epoch(3));
    drop(tx);
    assert!(matches!(bridge.stop().await, BridgeExit::Drained { forwarded: 3, .. }));
}

#[tokio::test(start_paused = true)]
async fn a_stale_bridge_carries_its_old_epoch_and_the_sink_rejects_it() {
    let (old_tx, old_rx) = mpsc::channel(8);
    let (new_tx, new_rx) = mpsc::channel(8);
    let (pipe_tx, mut pipeline) = mpsc::channel(8);
    let cancel = CancellationToken::new();
    let options = BridgeOptions::default();
    let old = spawn_epoch_bridge(old_rx, pipe_tx.clone(), epoch(3), options, cancel.clone()).expect("valid");
    let new = spawn_epoch_bridge(new_rx, pipe_tx, epoch(4), options, cancel.clone()).expect("valid");
    new_tx.send("new-1".to_string()).await.expect("open");
    let first = pipeline.recv().await.expect("delivered");
    old_tx.send("old-1".to_string()).await.expect("open");
    let second = pipeline.recv().await.expect("delivered");
    assert_eq!((first.epoch, second.epoch), (epoch(4), epoch(3)), "the old bridge still stamps its term");

    let dir = scratch("stale-bridge");
    let mut sink = FencedSink::create(dir.join("mark")).expect("opens");
    assert!(sink.admit(&first.stamp()).expect("newest term").raised);
    let refused = sink.admit(&second.stamp()).expect_err("a deposed leader's message");
    assert!(
        matches!(refused, Rejected::StaleEpoch { epoch: e, high_water: h } if e == epoch(3) && h == epoch(4))
    );
    cancel.cancel();
    assert!(matches!(old.stop().await, BridgeExit::Aborted { .. }));
    assert!(matches!(new.stop().await, BridgeExit::Aborted { .. }));
}

#[tokio::test(start_paused = true)]
async fn cancel_aborts_at_once_dropping_what_is_held() {
    let (tx, rx) = mpsc::channel(16);
    let (pipe_tx, _pipeline) = mpsc::channel(1);
    let cancel = CancellationToken::new();
    let bridge =
        spawn_epoch_bridge(rx, pipe_tx, epoch(2), BridgeOptions::default(), cancel.clone()).expect("valid");
    for n in 0..10u32 {
        tx.send(n).await.expect("open");
    }
    // Wait until the bridge has taken all ten off the producer's channel (1 in the pipeline).
    while tx.capacity() < tx.max_capacity() {
        tokio::task::yield_now().await;
    }
    let before = Instant::now();
    cancel.cancel();
    assert_eq!(bridge.stop().await, BridgeExit::Aborted { forwarded: 1, dropped: 9 });
    assert_eq!(before.elapsed(), Duration::ZERO, "did not wait for the drain timeout");
    assert!(tx.send(11).await.is_err(), "the aborted bridge no longer reads the producer");
}

#[tokio::test(start_paused = true)]
async fn abort_and_dropping_the_handle_both_stop_the_bridge() {
    let (tx, rx) = mpsc::channel::<u8>(4);
    let (pipe_tx, _pipeline) = mpsc::channel(4);
    let bridge =
        spawn_epoch_bridge(rx, pipe_tx, epoch(1), BridgeOptions::default(), CancellationToken::new())
            .expect("valid");
    assert_eq!(bridge.abort().await, BridgeExit::Aborted { forwarded: 0, dropped: 0 });
    assert!(tx.is_closed());

    let (tx, rx) = mpsc::channel::<u8>(4);
    let (pipe_tx, _pipeline) = mpsc::channel(4);
    let bridge =
        spawn_epoch_bridge(rx, pipe_tx, epoch(1), BridgeOptions::default(), CancellationToken::new())
            .expect("valid");
    drop(bridge);
    tokio::time::timeout(Duration::from_secs(1), tx.closed()).await.expect("a dropped handle aborts");
}

#[tokio::test(start_paused = true)]
async fn a_pipeline_full_past_the_drain_timeout_is_aborted() {
    let (tx, rx) = mpsc::channel(16);
    let (pipe_tx, mut pipeline) = mpsc::channel(1);
    let drain_timeout = Duration::from_secs(2);
    let options = BridgeOptions { drain_timeout, ..BridgeOptions::default() };
    let bridge = spawn_epoch_bridge(rx, pipe_tx, epoch(6), options, CancellationToken::new()).expect("valid");
    for n in 0..10u32 {
        tx.send(n).await.expect("open");
    }
    drop(tx);
    let before = Instant::now();
    let exit = bridge.stop().await;
    assert_eq!(exit, BridgeExit::TimedOut { drain_timeout, forwarded: 1, dropped: 9 });
    assert!(before.elapsed() >= drain_timeout, "waited the drain timeout first");
    assert_eq!(pipeline.recv().await.map(|s| s.message), Some(0));
    assert!(pipeline.recv().await.is_none(), "nothing more after the abort");
}

#[tokio::test(start_paused = true)]
async fn a_failing_producer_is_drained_up_to_its_error() {
    let (tx, rx) = mpsc::channel::<Result<u32, String>>(16);
    let (pipe_tx, mut pipeline) = mpsc::channel(2);
    let options = BridgeOptions { capacity: 2, ..BridgeOptions::default() };
    let bridge =
        spawn_epoch_bridge(FallibleReceiver::new(rx), pipe_tx, epoch(7), options, CancellationToken::new())
            .expect("valid");
    // `try_send` never yields, so the bridge has read nothing yet when all seven are queued.
    for n in 1..=5 {
        tx.try_send(Ok(n)).expect("room");
    }
    tx.try_send(Err("disk gone".into())).expect("room");
    tx.try_send(Ok(6)).expect("room");
    let mut got = Vec::new();
    while let Some(stamped) = pipeline.recv().await {
        assert_eq!(stamped.epoch, epoch(7));
        got.push(stamped.message);
    }
    assert_eq!(got, vec![1, 2, 3, 4, 5], "everything before the error, nothing after it");
    assert_eq!(
        bridge.stop().await,
        BridgeExit::Drained {
            reason: DrainReason::ProducerFailed { error: "disk gone".into() },
            forwarded: 5
        }
    );
    assert!(tx.send(Ok(7)).await.is_err(), "the failed producer is closed");
}

#[tokio::test(start_paused = true)]
async fn a_silent_producer_times_out_and_is_drained() {
    let (tx, rx) = mpsc::channel(16);
    let (pipe_tx, mut pipeline) = mpsc::channel(16);
    let idle_timeout = Duration::from_secs(1);
    let options = BridgeOptions { producer_idle_timeout: Some(idle_timeout), ..BridgeOptions::default() };
    let bridge = spawn_epoch_bridge(rx, pipe_tx, epoch(9), options, CancellationToken::new()).expect("valid");
    let started = Instant::now();
    // Each message within the timeout of the last one resets it.
    for n in 0..4u32 {
        tx.send(n).await.expect("open: the producer is not idle yet");
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    assert!(!bridge.is_finished(), "2.4 s of a producer never silent for 1 s");
    let mut got = Vec::new();
    while let Some(stamped) = pipeline.recv().await {
        got.push(stamped.message);
    }
    assert_eq!(got, vec![0, 1, 2, 3]);
    assert!(started.elapsed() >= Duration::from_millis(1_800) + idle_timeout);
    assert_eq!(
        bridge.stop().await,
        BridgeExit::Drained { reason: DrainReason::ProducerIdle { idle_timeout }, forwarded: 4 }
    );
    assert!(tx.send(5).await.is_err(), "the idle producer was closed, though its sender lives");
}

#[tokio::test(start_paused = true)]
async fn a_closed_pipeline_ends_the_bridge() {
    let (tx, rx) = mpsc::channel(8);
    let (pipe_tx, pipeline) = mpsc::channel(8);
    let bridge =
        spawn_epoch_bridge(rx, pipe_tx, epoch(1), BridgeOptions::default(), CancellationToken::new())
            .expect("valid");
    drop(pipeline);
    tx.send(1u8).await.expect("open");
    assert_eq!(bridge.stop().await, BridgeExit::PipelineClosed { forwarded: 0, dropped: 1 });
}

/// A [`Handler`] pipeline: the bridge's task calls it with every stamped message, in order.
#[tokio::test(start_paused = true)]
async fn a_handler_pipeline_receives_every_message_stamped_in_order() {
    let (tx, rx) = mpsc::channel(4);
    let got = Arc::new(Mutex::new(Vec::new()));
    let seen = got.clone();
    let handler = Handler(move |stamped: Stamped<u32>| {
        seen.lock().expect("lock").push((stamped.epoch, stamped.header, stamped.message));
        Ok(())
    });
    let options = BridgeOptions { capacity: 4, ..BridgeOptions::default() };
    let bridge =
        spawn_epoch_bridge(rx, handler, epoch(12), options, CancellationToken::new()).expect("valid");
    for n in 0..50u32 {
        tx.send(n).await.expect("open");
    }
    drop(tx);
    let exit = bridge.stop().await;
    assert!(matches!(exit, BridgeExit::Drained { forwarded: 50, .. }), "{exit:?}");
    let got = got.lock().expect("lock").clone();
    assert_eq!(got, (0..50).map(|n| (epoch(12), EPOCH_HEADER_DEFAULT, n)).collect::<Vec<_>>());
}

/// A handler that refuses ends the bridge; the refused message and those held count as dropped.
#[tokio::test(start_paused = true)]
async fn a_handler_that_refuses_ends_the_bridge_and_counts_the_rest_dropped() {
    let (tx, rx) = mpsc::channel(16);
    for n in 0..10u32 {
        tx.send(n).await.expect("open");
    }
    let handler =
        Handler(|stamped: Stamped<u32>| if stamped.message < 3 { Ok(()) } else { Err(PipelineClosed) });
    let bridge =
        spawn_epoch_bridge(rx, handler, epoch(1), BridgeOptions::default(), CancellationToken::new())
            .expect("valid");
    // The bridge read all ten at once: three delivered, the refused fourth and six held dropped.
    assert_eq!(bridge.stop().await, BridgeExit::PipelineClosed { forwarded: 3, dropped: 7 });
}

/// Two bridges, a deposed term's and the new one's, admitting straight into one fenced sink:
/// once the new term is admitted, the old bridge's messages are rejected.
#[tokio::test(start_paused = true)]
async fn handler_bridges_of_two_terms_into_one_sink_reject_the_deposed_term() {
    let dir = scratch("handler-sink");
    let sink = Arc::new(Mutex::new(FencedSink::create(dir.join("mark")).expect("opens")));
    let verdicts = Arc::new(Mutex::new(Vec::new()));
    let admit = {
        let (sink, verdicts) = (sink.clone(), verdicts.clone());
        Handler(move |stamped: Stamped<String>| {
            let verdict = sink.lock().expect("lock").admit(&stamped.stamp()).map(|_| ());
            verdicts.lock().expect("lock").push((stamped.message, verdict));
            Ok(())
        })
    };
    let (old_tx, old_rx) = mpsc::channel(8);
    let (new_tx, new_rx) = mpsc::channel(8);
    let cancel = CancellationToken::new();
    let options = BridgeOptions::default();
    let old = spawn_epoch_bridge(old_rx, admit.clone(), epoch(3), options, cancel.clone()).expect("valid");
    let new = spawn_epoch_bridge(new_rx, admit, epoch(4), options, cancel.clone()).expect("valid");
    let delivered = |count: usize| {
        let verdicts = verdicts.clone();
        async move {
            while verdicts.lock().expect("lock").len() < count {
                tokio::task::yield_now().await;
            }
        }
    };
    old_tx.send("old-1".to_string()).await.expect("open");
    delivered(1).await;
    new_tx.send("new-1".to_string()).await.expect("open");
    delivered(2).await;
    old_tx.send("old-2".to_string()).await.expect("open");
    drop((old_tx, new_tx));
    assert!(matches!(old.stop().await, BridgeExit::Drained { forwarded: 2, .. }));
    assert!(matches!(new.stop().await, BridgeExit::Drained { forwarded: 1, .. }));
    let verdicts = std::mem::take(&mut *verdicts.lock().expect("lock"));
    let names: Vec<&str> = verdicts.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(names, ["old-1", "new-1", "old-2"], "delivered in the order sent");
    assert!(verdicts[0].1.is_ok() && verdicts[1].1.is_ok(), "term 3, then term 4: {verdicts:?}");
    assert!(
        matches!(verdicts[2].1, Err(Rejected::StaleEpoch { epoch: e, .. }) if e == epoch(3)),
        "the deposed term after the new one: {verdicts:?}"
    );
    assert_eq!(sink.lock().expect("lock").rejected_total(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_signing_bridge_is_admitted_by_a_sink_with_the_key_after_a_restart() {
    let key = StampKey::new("k1", b"a shared key of at least 32 bytes!").expect("long enough");
    let signer = StampSigner::new("orders", key).expect("a good election name");
    let (tx, rx) = mpsc::channel(8);
    let (pipe_tx, mut pipeline) = mpsc::channel(8);
    let bridge = spawn_stamping_bridge(
        rx,
        pipe_tx,
        epoch(12),
        BridgeOptions::default(),
        signer.clone(),
        CancellationToken::new(),
    )
    .expect("valid");
    tx.send("order-1".to_string()).await.expect("open");
    tx.send("order-2".to_string()).await.expect("open");
    let got = collect(&mut pipeline, 2).await;
    let path = scratch("signed-bridge").join("mark");
    {
        let verifier = StampVerifier::of(&signer);
        let mut sink = FencedSink::create(&path).expect("opens").requiring_signatures(verifier);
        assert!(sink.admit(&got[0].stamp()).expect("signed by the key").raised);
    }
    let header = got[1].signature_header_value().expect("signed");
    assert!(header.starts_with("k1:") && header.len() == 3 + 64, "<key id>:<hex MAC>: {header}");
    let verifier = StampVerifier::of(&signer);
    let mut sink = FencedSink::open_existing(&path).expect("reopens").requiring_signatures(verifier);
    assert!(!sink.admit(&got[1].stamp()).expect("same term, signed").raised);
    let mut altered = got[1].clone();
    altered.message = "order-3".into();
    assert!(matches!(sink.admit(&altered.stamp()), Err(Rejected::BadSignature { .. })));
    drop(tx);
    assert!(matches!(bridge.stop().await, BridgeExit::Drained { forwarded: 2, .. }));
}

/// One producer a supervisor started: its term, and the sending side the test uses.
type StartedProducer = (LeaderEpoch, mpsc::Sender<u64>);

/// Producers started by a supervisor, in order.
#[derive(Clone, Default)]
struct Started(Arc<Mutex<Vec<StartedProducer>>>);

impl Started {
    fn factory(&self) -> impl FnMut(LeaderEpoch, CancellationToken) -> mpsc::Receiver<u64> + Send + 'static {
        let started = self.clone();
        move |term, _term_ended| {
            let (tx, rx) = mpsc::channel(8);
            started.0.lock().expect("not poisoned").push((term, tx));
            rx
        }
    }

    fn terms(&self) -> Vec<u64> {
        self.0.lock().expect("not poisoned").iter().map(|(term, _)| term.get()).collect()
    }

    fn sender(&self, index: usize) -> mpsc::Sender<u64> {
        self.0.lock().expect("not poisoned")[index].1.clone()
    }
}

/// A backend that leads under whatever term the test sets (0: follower), renewing every attempt.
struct Scripted {
    term: Arc<AtomicU64>,
    attempts: Arc<AtomicU64>,
}

impl LeaseBackend for Scripted {
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, BackendError> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        match self.term.load(Ordering::SeqCst) {
            0 => Ok(Attempt::Follower { holder: Some("someone else".into()) }),
            term => Ok(Attempt::Leader { term: epoch(term) }),
        }
    }
    async fn release(&mut self) -> Result<(), BackendError> {
        Ok(())
    }
    fn name(&self) -> &'static str {
        "scripted"
    }
}

#[tokio::test(start_paused = true)]
async fn a_new_term_gets_a_new_bridge_exactly_once_and_renewals_re_emit_nothing() {
    let term = Arc::new(AtomicU64::new(3));
    let attempts = Arc::new(AtomicU64::new(0));
    let shutdown = CancellationToken::new();
    let timing = ElectionConfig {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_millis(400),
        retry_period: Duration::from_millis(50),
        jitter: 0.0,
    };
    let backend = Scripted { term: term.clone(), attempts: attempts.clone() };
    let (leadership, election) = elector::spawn(backend, timing, shutdown.clone());
    let (started, supervisor, mut pipeline) = supervise(leadership, shutdown.clone());
    let mut state = supervisor.watch();
    state.wait_for(|s| s.bridge_epoch == Some(epoch(3))).await.expect("open");
    started.sender(0).send(30).await.expect("the term-3 bridge reads");
    assert_eq!(pipeline.recv().await.map(|s| (s.epoch, s.message)), Some((epoch(3), 30)));

    state.mark_unchanged();
    let renewals_before = attempts.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(attempts.load(Ordering::SeqCst) >= renewals_before + 30, "many renewals happened");
    assert!(!state.has_changed().expect("open"), "renewals re-emit no transition");
    assert_eq!(started.terms(), vec![3], "and start no second bridge");

    term.store(4, Ordering::SeqCst);
    state.wait_for(|s| s.bridge_epoch == Some(epoch(4))).await.expect("open");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let now = supervisor.state();
    assert_eq!(started.terms(), vec![3, 4], "exactly one bridge per term");
    assert_eq!(now.bridges_started, 2);
    assert_eq!(
        now.last_exit,
        Some(BridgeExit::Drained { reason: DrainReason::StopRequested, forwarded: 1 }),
        "the term-3 bridge was stopped and drained"
    );
    assert!(started.sender(0).send(31).await.is_err(), "the old term's producer is closed");
    started.sender(1).send(40).await.expect("the term-4 bridge reads");
    assert_eq!(pipeline.recv().await.map(|s| (s.epoch, s.message)), Some((epoch(4), 40)));

    shutdown.cancel();
    election.await.expect("joins").expect("clean");
    let last = supervisor.shutdown().await;
    assert_eq!(last.bridge_epoch, None);
    assert_eq!(last.bridges_started, 2);
}

#[tokio::test(start_paused = true)]
async fn losing_leadership_stops_the_bridge_and_a_lower_term_is_refused() {
    let (publisher, leadership) = LeadershipHandle::new();
    let (started, supervisor, mut pipeline) = supervise(leadership, CancellationToken::new());
    let mut state = supervisor.watch();
    assert_eq!(supervisor.state().bridges_started, 0, "not leading: no bridge");

    publisher.publish(LeaderState::leading(epoch(5)));
    state.wait_for(|s| s.bridge_epoch == Some(epoch(5))).await.expect("open");
    started.sender(0).send(1).await.expect("open");
    assert_eq!(pipeline.recv().await.map(|s| s.epoch), Some(epoch(5)));

    publisher.publish(LeaderState::following());
    state.wait_for(|s| s.bridge_epoch.is_none()).await.expect("open");
    assert!(matches!(supervisor.state().last_exit, Some(BridgeExit::Drained { forwarded: 1, .. })));
    assert!(started.sender(0).is_closed(), "the deposed term's producer is closed");

    publisher.publish(LeaderState::leading(epoch(4)));
    state.wait_for(|s| s.refused_total == 1).await.expect("open");
    assert_eq!(supervisor.state().bridge_epoch, None, "never lead under a lower term");
    assert_eq!(started.terms(), vec![5]);

    publisher.publish(LeaderState::leading(epoch(6)));
    state.wait_for(|s| s.bridge_epoch == Some(epoch(6))).await.expect("open");
    assert_eq!(started.terms(), vec![5, 6]);
    let last = supervisor.shutdown().await;
    assert!(matches!(last.last_exit, Some(BridgeExit::Aborted { .. })), "shutdown aborts: {last:?}");
    assert!(started.sender(1).is_closed());
}

/// Producers that stand for one blocked awaiting its input: each sends `preload` messages, then
/// only awaits its term's token, and reports its term on `ended` when it stops.
struct IdleProducers {
    tokens: Arc<Mutex<Vec<(LeaderEpoch, CancellationToken)>>>,
    ended: mpsc::UnboundedReceiver<LeaderEpoch>,
}

impl IdleProducers {
    fn factory(
        preload: u64,
    ) -> (Self, impl FnMut(LeaderEpoch, CancellationToken) -> mpsc::Receiver<u64> + Send) {
        let tokens = Arc::new(Mutex::new(Vec::new()));
        let (ended_tx, ended) = mpsc::unbounded_channel();
        let recorded = tokens.clone();
        let factory = move |term: LeaderEpoch, term_ended: CancellationToken| {
            recorded.lock().expect("not poisoned").push((term, term_ended.clone()));
            let (tx, rx) = mpsc::channel(8);
            let ended_tx = ended_tx.clone();
            tokio::spawn(async move {
                for n in 0..preload {
                    if tx.send(n).await.is_err() {
                        break;
                    }
                }
                term_ended.cancelled().await;
                drop(tx);
                let _ = ended_tx.send(term);
            });
            rx
        };
        (Self { tokens, ended }, factory)
    }

    fn token(&self, index: usize) -> (LeaderEpoch, CancellationToken) {
        self.tokens.lock().expect("not poisoned")[index].clone()
    }

    /// The term of the next producer to stop, waiting at most `bound` (paused time).
    async fn next_ended(&mut self, bound: Duration) -> Option<LeaderEpoch> {
        tokio::time::timeout(bound, self.ended.recv()).await.ok().flatten()
    }
}

/// An idle producer (it only awaits its token) stops the moment its term ends — not at its next
/// send, and not after the old bridge's drain, which here takes the whole drain timeout because
/// the pipeline is full — and every term gets a token of its own.
#[tokio::test(start_paused = true)]
async fn an_idle_producer_stops_the_moment_its_term_ends_and_each_term_has_its_own_token() {
    let (publisher, leadership) = LeadershipHandle::new();
    let (mut producers, factory) = IdleProducers::factory(20);
    let (pipe_tx, mut pipeline) = mpsc::channel(1);
    let options = BridgeOptions::default();
    let supervisor =
        BridgeSupervisor::spawn(leadership, pipe_tx, options, Unsigned, factory, CancellationToken::new())
            .expect("valid");
    let mut state = supervisor.watch();
    publisher.publish(LeaderState::leading(epoch(5)));
    state.wait_for(|s| s.bridge_epoch == Some(epoch(5))).await.expect("open");
    let (term, token_5) = producers.token(0);
    assert_eq!(term, epoch(5));
    assert!(!token_5.is_cancelled(), "the term is running");
    assert_eq!(
        producers.next_ended(Duration::from_secs(1)).await,
        None,
        "an idle producer waits while leading"
    );

    publisher.publish(LeaderState::following());
    let lost_at = Instant::now();
    let bound = Duration::from_millis(100);
    assert_eq!(
        producers.next_ended(bound).await,
        Some(epoch(5)),
        "stopped within {bound:?} of losing the term"
    );
    assert!(lost_at.elapsed() < options.drain_timeout, "before the drain timeout");
    assert!(token_5.is_cancelled());

    // The old bridge cannot drain (the pipeline holds one message and nobody reads it): the next
    // term starts once it has been aborted past the drain timeout.
    publisher.publish(LeaderState::leading(epoch(6)));
    state.wait_for(|s| s.bridge_epoch == Some(epoch(6))).await.expect("open");
    let (term, token_6) = producers.token(1);
    assert_eq!(term, epoch(6));
    assert!(!token_6.is_cancelled(), "term 6 has its own token, not term 5's cancelled one");
    assert!(token_5.is_cancelled());
    assert_eq!(pipeline.recv().await.map(|s| s.epoch), Some(epoch(5)));

    let last = supervisor.shutdown().await;
    assert_eq!(last.bridges_started, 2);
    assert!(token_6.is_cancelled(), "shutting down ends the term");
    assert_eq!(producers.next_ended(bound).await, Some(epoch(6)));
}

/// A term's bridge that ends on its own (here its pipeline closed) ends its producer's term too,
/// though this process still leads.
#[tokio::test(start_paused = true)]
async fn a_bridge_that_exits_on_its_own_cancels_its_terms_token() {
    let (publisher, leadership) = LeadershipHandle::new();
    let (mut producers, factory) = IdleProducers::factory(1);
    let (pipe_tx, pipeline) = mpsc::channel(1);
    drop(pipeline);
    let supervisor = BridgeSupervisor::spawn(
        leadership.clone(),
        pipe_tx,
        BridgeOptions::default(),
        Unsigned,
        factory,
        CancellationToken::new(),
    )
    .expect("valid");
    publisher.publish(LeaderState::leading(epoch(2)));
    assert_eq!(producers.next_ended(Duration::from_secs(1)).await, Some(epoch(2)));
    assert!(producers.token(0).1.is_cancelled());
    assert!(leadership.is_leader(), "still leading: the bridge's exit ended the term's producer");
    supervisor.shutdown().await;
}

/// A supervisor over `leadership`, unsigned, default options, recording every producer it starts,
/// delivering into a channel of 16.
fn supervise(
    leadership: LeadershipHandle,
    cancel: CancellationToken,
) -> (Started, BridgeSupervisor, mpsc::Receiver<Stamped<u64>>) {
    let started = Started::default();
    let (pipe_tx, pipeline) = mpsc::channel(16);
    let supervisor = BridgeSupervisor::spawn(
        leadership,
        pipe_tx,
        BridgeOptions::default(),
        Unsigned,
        started.factory(),
        cancel,
    )
    .expect("valid");
    (started, supervisor, pipeline)
}

fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tenure-bridge-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}
