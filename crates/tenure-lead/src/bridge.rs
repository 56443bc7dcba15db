//! The epoch bridge (SPEC 8): between a leader-only producer and the pipeline, a bounded buffer
//! that stamps every message with the leader epoch **snapshot taken when the bridge was spawned**.
//!
//! Snapshot, not a live read: a bridge spawned under term 3 stamps 3 for its whole life, even
//! after this process has lost leadership or been re-elected under term 4. A stale bridge
//! therefore carries a stale term, and the [fenced sink](crate::sink) rejects it. A new term gets
//! a new bridge; [`BridgeSupervisor`] does that from a [`LeadershipHandle`].
//!
//! # Lifecycle
//!
//! - The bridge reads up to [`BridgeOptions::capacity`] messages ahead of the pipeline. Counts
//!   of messages delivered and dropped cover what the bridge read; messages still in the
//!   producer's channel when a bridge is aborted are the producer's.
//! - **Producer stops** (closed, failed, or silent for [`BridgeOptions::producer_idle_timeout`]):
//!   the bridge forwards what it holds and exits, [`BridgeExit::Drained`].
//! - **[`BridgeHandle::stop`]**: the bridge closes the producer (its further sends fail), forwards
//!   everything the producer had handed over, and exits; the owner waits at most
//!   [`BridgeOptions::drain_timeout`] for that, then aborts it, [`BridgeExit::TimedOut`].
//! - **Cancel** (the token given at spawn, or [`BridgeHandle::abort`]): it exits at once, dropping
//!   what it holds, [`BridgeExit::Aborted`]. Dropping the handle also aborts the bridge.
//! - **The producer's own stop**: under a [`BridgeSupervisor`], the producer factory receives a
//!   per-term [`CancellationToken`], cancelled the moment the term ends (leadership lost, the
//!   supervisor shut down, or the term's bridge exited), so a producer blocked awaiting its input
//!   stops at once instead of at its next send.
//!
//! # Pipelines
//!
//! A bridge delivers to a [`Pipeline`]: an `mpsc::Sender<Stamped<T>>` (a channel to the
//! pipeline's own task: a second hop after the producer's channel), or a [`Handler`], a function
//! the bridge's task calls itself with every stamped message, so that the producer's channel is
//! the only hop, as in the seed's design.
//!
//! # Stamps
//!
//! The pipeline receives [`Stamped<T>`]: the header name (default [`EPOCH_HEADER_DEFAULT`]), the
//! epoch, an optional signature ([`Stamper`]: [`Unsigned`] or a [`StampSigner`], which binds the
//! election name and its key id into the signature), and the message. An adapter that speaks
//! headers writes `header` → [`Stamped::header_value`] and, when signed,
//! [`SIGNATURE_HEADER_DEFAULT`](crate::sink::SIGNATURE_HEADER_DEFAULT) →
//! [`Stamped::signature_header_value`] (the format is in [`crate::sink`]).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinError, JoinHandle};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, DropGuard};

use tenure_core::model::LeaderEpoch;

use crate::handle::LeadershipHandle;
use crate::sink::{MessageId, Stamp, StampSignature, StampSigner};

mod supervisor;

pub use supervisor::{BridgeSupervisor, SupervisorState};

/// Default number of messages a bridge holds ahead of the pipeline (SPEC 8).
pub const BRIDGE_CAPACITY_DEFAULT: usize = 128;
/// The most messages a bridge may hold ahead of the pipeline.
pub const BRIDGE_CAPACITY_MAX: usize = 65_536;
/// Default name of the epoch header (SPEC 8).
pub const EPOCH_HEADER_DEFAULT: &str = "x-tenure-leader-epoch";
/// The longest header name accepted.
pub const EPOCH_HEADER_LENGTH_MAX: usize = 128;
/// Default time the owner waits for a stopping bridge to drain before aborting it.
pub const DRAIN_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);

/// How a bridge behaves. Checked by [`BridgeOptions::validate`] when a bridge is spawned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BridgeOptions {
    /// Messages held ahead of the pipeline, `1..=BRIDGE_CAPACITY_MAX`.
    pub capacity: usize,
    /// The header name written on every stamp: an HTTP token of at most
    /// [`EPOCH_HEADER_LENGTH_MAX`] characters. A name read from configuration at run time can be
    /// made `'static` once with `String::leak`.
    pub header: &'static str,
    /// How long [`BridgeHandle::stop`] waits for the drain before aborting.
    pub drain_timeout: Duration,
    /// If set, a producer silent for this long counts as stopped (the bridge drains and exits).
    pub producer_idle_timeout: Option<Duration>,
}

impl Default for BridgeOptions {
    fn default() -> Self {
        Self {
            capacity: BRIDGE_CAPACITY_DEFAULT,
            header: EPOCH_HEADER_DEFAULT,
            drain_timeout: DRAIN_TIMEOUT_DEFAULT,
            producer_idle_timeout: None,
        }
    }
}

impl BridgeOptions {
    /// Checks the limits.
    pub fn validate(&self) -> Result<(), BridgeConfigError> {
        if !(1..=BRIDGE_CAPACITY_MAX).contains(&self.capacity) {
            return Err(BridgeConfigError::CapacityOutOfRange {
                capacity: self.capacity,
                max: BRIDGE_CAPACITY_MAX,
            });
        }
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        let header = self.header;
        if header.is_empty() || header.len() > EPOCH_HEADER_LENGTH_MAX || !header.chars().all(token) {
            return Err(BridgeConfigError::BadHeaderName { header, max: EPOCH_HEADER_LENGTH_MAX });
        }
        if self.producer_idle_timeout == Some(Duration::ZERO) {
            return Err(BridgeConfigError::IdleTimeoutZero);
        }
        Ok(())
    }
}

/// Options a bridge cannot run with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BridgeConfigError {
    /// The capacity is zero or above the limit.
    #[error("bridge capacity {capacity} is outside 1..={max}")]
    CapacityOutOfRange {
        /// The capacity given.
        capacity: usize,
        /// [`BRIDGE_CAPACITY_MAX`].
        max: usize,
    },
    /// The header name is empty, too long, or not an HTTP token.
    #[error("epoch header name {header:?} is not an HTTP token of 1..={max} characters")]
    BadHeaderName {
        /// The name given.
        header: &'static str,
        /// [`EPOCH_HEADER_LENGTH_MAX`].
        max: usize,
    },
    /// A zero idle timeout would stop every producer at once.
    #[error("the producer idle timeout must be above zero")]
    IdleTimeoutZero,
}

/// What followed the messages a [`Producer::recv_many`] call appended.
#[derive(Debug)]
pub enum Received<E> {
    /// Only messages (at least one); the producer may have more.
    Messages,
    /// The producer failed after the appended messages; nothing more will be read from it.
    Failed(E),
    /// The producer stopped after the appended messages (its sending side is gone, or it was
    /// closed and is empty).
    Stopped,
}

/// A leader-only producer the bridge reads from. Implemented for `mpsc::Receiver<T>` (which
/// never fails) and [`FallibleReceiver`].
pub trait Producer: Send + 'static {
    /// The messages.
    type Message: Send + 'static;
    /// The producer's failure.
    type Error: fmt::Display + Send + 'static;

    /// Waits until a message is ready or the producer ends, then appends, in order, up to
    /// `limit` (at least 1) messages that are ready to `into`, and says what followed them.
    /// Must be cancel-safe: the bridge drops this future when something else happens first, and
    /// no message may be lost by that (tokio's `recv_many` is).
    fn recv_many(
        &mut self,
        into: &mut Vec<Self::Message>,
        limit: usize,
    ) -> impl Future<Output = Received<Self::Error>> + Send;

    /// Refuses further messages while keeping those already handed over readable (what
    /// [`BridgeHandle::stop`] does). The default does nothing.
    fn close(&mut self) {}
}

impl<T: Send + 'static> Producer for mpsc::Receiver<T> {
    type Message = T;
    type Error = Infallible;

    async fn recv_many(&mut self, into: &mut Vec<T>, limit: usize) -> Received<Infallible> {
        match mpsc::Receiver::recv_many(self, into, limit).await {
            0 => Received::Stopped,
            _ => Received::Messages,
        }
    }

    fn close(&mut self) {
        mpsc::Receiver::close(self);
    }
}

/// A producer whose channel carries its failures: the first `Err` stops it.
#[derive(Debug)]
pub struct FallibleReceiver<T, E> {
    receiver: mpsc::Receiver<Result<T, E>>,
    /// Reused between batches.
    batch: Vec<Result<T, E>>,
}

impl<T, E> FallibleReceiver<T, E> {
    /// Reads `receiver` until its first `Err`.
    #[must_use]
    pub fn new(receiver: mpsc::Receiver<Result<T, E>>) -> Self {
        Self { receiver, batch: Vec::new() }
    }
}

impl<T: Send + 'static, E: fmt::Display + Send + 'static> Producer for FallibleReceiver<T, E> {
    type Message = T;
    type Error = E;

    async fn recv_many(&mut self, into: &mut Vec<T>, limit: usize) -> Received<E> {
        self.batch.clear();
        if self.receiver.recv_many(&mut self.batch, limit).await == 0 {
            return Received::Stopped;
        }
        for item in self.batch.drain(..) {
            match item {
                Ok(message) => into.push(message),
                // Whatever the producer sent after its failure is not read.
                Err(error) => return Received::Failed(error),
            }
        }
        Received::Messages
    }

    fn close(&mut self) {
        self.receiver.close();
    }
}

/// The pipeline went away: it takes no more messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, thiserror::Error)]
#[error("the pipeline is closed")]
pub struct PipelineClosed;

/// Where a bridge delivers its stamped messages, in order. Implemented for
/// `mpsc::Sender<Stamped<T>>` and [`Handler`].
pub trait Pipeline<T>: Send + 'static {
    /// Delivers, in order, from the front of `held`, every message the pipeline takes without
    /// waiting, adding one to `delivered` for each. `Err` once the pipeline is gone.
    fn deliver_ready(
        &mut self,
        held: &mut VecDeque<Stamped<T>>,
        delivered: &mut u64,
    ) -> Result<(), PipelineClosed>;

    /// Waits until the pipeline can take the front message of `held` (called only when `held`
    /// is not empty), then delivers it and adds one to `delivered`. Must be cancel-safe: the
    /// bridge drops this future when something else happens first, and the front message must
    /// then still be in `held` or have been delivered and counted.
    fn deliver_next(
        &mut self,
        held: &mut VecDeque<Stamped<T>>,
        delivered: &mut u64,
    ) -> impl Future<Output = Result<(), PipelineClosed>> + Send;
}

impl<T: Send + 'static> Pipeline<T> for mpsc::Sender<Stamped<T>> {
    /// Reserves the channel's free slots at once and fills them.
    fn deliver_ready(
        &mut self,
        held: &mut VecDeque<Stamped<T>>,
        delivered: &mut u64,
    ) -> Result<(), PipelineClosed> {
        loop {
            let batch = self.capacity().min(held.len());
            if batch == 0 {
                return Ok(());
            }
            match self.try_reserve_many(batch) {
                Ok(permits) => {
                    for (permit, stamped) in permits.zip(held.drain(..batch)) {
                        permit.send(stamped);
                        *delivered += 1;
                    }
                }
                // Another sender of the pipeline took the slots first.
                Err(TrySendError::Full(())) => return Ok(()),
                Err(TrySendError::Closed(())) => return Err(PipelineClosed),
            }
        }
    }

    async fn deliver_next(
        &mut self,
        held: &mut VecDeque<Stamped<T>>,
        delivered: &mut u64,
    ) -> Result<(), PipelineClosed> {
        // `reserve` is cancel-safe, and the message leaves `held` only with a permit in hand.
        let permit = self.reserve().await.map_err(|_| PipelineClosed)?;
        if let Some(stamped) = held.pop_front() {
            permit.send(stamped);
            *delivered += 1;
        }
        Ok(())
    }
}

/// A pipeline the bridge's task calls itself: the function receives every stamped message, in
/// order, and returns `Err(PipelineClosed)` once it takes no more (that message and those the
/// bridge still holds count as dropped, and the bridge ends: under a supervisor, the producer's
/// further sends fail until the next term's bridge).
///
/// It runs on the bridge's task, between reads from the producer, so it must not block: admit at
/// a [`FencedSink`](crate::sink::FencedSink) (which fsyncs only when the epoch rises, once per
/// term), hand the message to a non-blocking writer, or `try_send` into a queue. A handler that
/// sheds load (a full queue) returns `Ok` and counts its own sheds: to the bridge, a message the
/// handler took is delivered. The bridge sees a stop or an abort between batches of at most
/// [`BridgeOptions::capacity`] calls; a panic in the handler ends the bridge and resurfaces where
/// it is stopped or aborted. A pipeline that waits belongs behind an `mpsc::Sender` instead. The
/// supervisor clones the handler as given for every bridge it starts: state a closure keeps by
/// value starts afresh each term (share it through an `Arc` to keep it).
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use tenure_lead::LeaderEpoch;
/// use tenure_lead::bridge::{BridgeOptions, Handler, Stamped, spawn_epoch_bridge};
/// use tenure_lead::sink::FencedSink;
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// # let dir = std::env::temp_dir().join(format!("tenure-handler-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// let sink = Arc::new(Mutex::new(FencedSink::create(dir.join("mark")).unwrap()));
/// let admitted = Arc::new(Mutex::new(Vec::new()));
/// let pipeline = {
///     let (sink, admitted) = (sink.clone(), admitted.clone());
///     Handler(move |stamped: Stamped<String>| {
///         if sink.lock().unwrap().admit(&stamped.stamp()).is_ok() {
///             admitted.lock().unwrap().push(stamped.message);
///         }
///         Ok(())
///     })
/// };
/// let (producer, messages) = tokio::sync::mpsc::channel(128);
/// let epoch = LeaderEpoch::from_stored(7); // the leadership handle's epoch, read once
/// let bridge = spawn_epoch_bridge(messages, pipeline, epoch, BridgeOptions::default(), Default::default())
///     .unwrap();
/// producer.send("route-42 updated".to_string()).await.unwrap();
/// drop(producer); // the producer stops: the bridge drains and exits
/// bridge.stop().await;
/// assert_eq!(*admitted.lock().unwrap(), ["route-42 updated"]);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # });
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Handler<F>(pub F);

impl<T, F> Pipeline<T> for Handler<F>
where
    T: Send + 'static,
    F: FnMut(Stamped<T>) -> Result<(), PipelineClosed> + Send + 'static,
{
    fn deliver_ready(
        &mut self,
        held: &mut VecDeque<Stamped<T>>,
        delivered: &mut u64,
    ) -> Result<(), PipelineClosed> {
        while let Some(stamped) = held.pop_front() {
            (self.0)(stamped)?;
            *delivered += 1;
        }
        Ok(())
    }

    async fn deliver_next(
        &mut self,
        held: &mut VecDeque<Stamped<T>>,
        delivered: &mut u64,
    ) -> Result<(), PipelineClosed> {
        // Never waits: the future completes on its first poll, so it is cancel-safe.
        self.deliver_ready(held, delivered)
    }
}

/// A message with its epoch stamp, as the pipeline receives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stamped<T> {
    /// The header name the epoch travels under ([`BridgeOptions::header`]).
    pub header: &'static str,
    /// The epoch snapshot of the bridge that forwarded the message.
    pub epoch: LeaderEpoch,
    /// HMAC over (election, key id, epoch, message id) and the key's id, when the bridge signs
    /// (see [`crate::sink`]).
    pub signature: Option<StampSignature>,
    /// The message.
    pub message: T,
}

impl<T> Stamped<T> {
    /// The header value: the epoch in decimal.
    #[must_use]
    pub fn header_value(&self) -> String {
        self.epoch.get().to_string()
    }

    /// The signature header value, `<key id>:<64 hex digits>` (sent under
    /// [`SIGNATURE_HEADER_DEFAULT`](crate::sink::SIGNATURE_HEADER_DEFAULT)), if signed.
    #[must_use]
    pub fn signature_header_value(&self) -> Option<String> {
        self.signature.as_ref().map(StampSignature::to_header_value)
    }

    /// The stamp a [`FencedSink`](crate::sink::FencedSink) judges.
    #[must_use]
    pub fn stamp(&self) -> Stamp<'_>
    where
        T: MessageId,
    {
        Stamp {
            epoch: self.epoch,
            message_id: self.message.message_id(),
            signature: self.signature.as_ref().map(StampSignature::received),
        }
    }
}

/// Whether and how a bridge signs its stamps.
pub trait Stamper<T>: Clone + Send + 'static {
    /// The signature of `message` under `epoch`, or `None` for unsigned stamps.
    fn signature(&self, epoch: LeaderEpoch, message: &T) -> Option<StampSignature>;
}

/// Stamps without signing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unsigned;

impl<T> Stamper<T> for Unsigned {
    fn signature(&self, _: LeaderEpoch, _: &T) -> Option<StampSignature> {
        None
    }
}

impl<T: MessageId> Stamper<T> for StampSigner {
    fn signature(&self, epoch: LeaderEpoch, message: &T) -> Option<StampSignature> {
        Some(self.sign(epoch, message.message_id()))
    }
}

/// Why a bridge stopped reading its producer before draining.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DrainReason {
    /// The producer's sending side went away.
    ProducerClosed,
    /// [`BridgeHandle::stop`] closed the producer.
    StopRequested,
    /// The producer failed (its error, rendered).
    ProducerFailed {
        /// The error.
        error: String,
    },
    /// The producer sent nothing for [`BridgeOptions::producer_idle_timeout`].
    ProducerIdle {
        /// The timeout.
        idle_timeout: Duration,
    },
}

/// How a bridge ended. `forwarded` counts messages delivered to the pipeline; `dropped` counts
/// messages the bridge had taken from the producer but never delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BridgeExit {
    /// Everything read from the producer reached the pipeline.
    Drained {
        /// Why reading stopped.
        reason: DrainReason,
        /// Messages delivered.
        forwarded: u64,
    },
    /// Cancelled: stopped at once.
    Aborted {
        /// Messages delivered.
        forwarded: u64,
        /// Messages held and dropped.
        dropped: u64,
    },
    /// The drain did not finish within the drain timeout (the pipeline stayed full); aborted.
    TimedOut {
        /// The timeout that passed.
        drain_timeout: Duration,
        /// Messages delivered.
        forwarded: u64,
        /// Messages held and dropped.
        dropped: u64,
    },
    /// The pipeline's receiver is gone; nothing more can be delivered.
    PipelineClosed {
        /// Messages delivered.
        forwarded: u64,
        /// Messages held and dropped.
        dropped: u64,
    },
    /// The runtime shut down under the bridge; its counts are lost.
    RuntimeShutdown,
}

/// The owner's side of a running bridge.
#[derive(Debug)]
pub struct BridgeHandle {
    epoch: LeaderEpoch,
    drain_timeout: Duration,
    stop: CancellationToken,
    /// Aborts the bridge when the handle is dropped without `stop` or `abort`.
    abort_on_drop: DropGuard,
    task: JoinHandle<BridgeExit>,
}

impl BridgeHandle {
    /// The epoch this bridge stamps.
    #[must_use]
    pub fn epoch(&self) -> LeaderEpoch {
        self.epoch
    }

    /// Whether the bridge has exited on its own (drained, or its pipeline closed).
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Closes the producer and waits up to the drain timeout for the bridge to forward what the
    /// producer had handed over; past it, aborts ([`BridgeExit::TimedOut`]). Returns at once if
    /// the bridge had already exited.
    pub async fn stop(self) -> BridgeExit {
        let Self { drain_timeout, stop, abort_on_drop, mut task, .. } = self;
        stop.cancel();
        match tokio::time::timeout(drain_timeout, &mut task).await {
            Ok(joined) => exit_of(joined),
            Err(_elapsed) => {
                abort_on_drop.disarm().cancel();
                match exit_of(task.await) {
                    BridgeExit::Aborted { forwarded, dropped } => {
                        BridgeExit::TimedOut { drain_timeout, forwarded, dropped }
                    }
                    finished_meanwhile => finished_meanwhile,
                }
            }
        }
    }

    /// Aborts the bridge at once and waits for it to exit.
    pub async fn abort(self) -> BridgeExit {
        let Self { abort_on_drop, task, .. } = self;
        abort_on_drop.disarm().cancel();
        exit_of(task.await)
    }
}

fn exit_of(joined: Result<BridgeExit, JoinError>) -> BridgeExit {
    match joined {
        Ok(exit) => exit,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(_cancelled) => BridgeExit::RuntimeShutdown,
    }
}

/// Spawns an unsigned bridge stamping `epoch` (the snapshot: read it from the leadership handle
/// *before* starting the producer). `cancel` aborts the bridge at once.
pub fn spawn_epoch_bridge<P: Producer>(
    producer: P,
    pipeline: impl Pipeline<P::Message>,
    epoch: LeaderEpoch,
    options: BridgeOptions,
    cancel: CancellationToken,
) -> Result<BridgeHandle, BridgeConfigError> {
    spawn_stamping_bridge(producer, pipeline, epoch, options, Unsigned, cancel)
}

/// Spawns a bridge whose stamps are signed (or not) by `stamper`.
pub fn spawn_stamping_bridge<P: Producer, S: Stamper<P::Message>>(
    producer: P,
    pipeline: impl Pipeline<P::Message>,
    epoch: LeaderEpoch,
    options: BridgeOptions,
    stamper: S,
    cancel: CancellationToken,
) -> Result<BridgeHandle, BridgeConfigError> {
    spawn_bridge(producer, pipeline, epoch, options, stamper, cancel, None)
}

/// Spawns a bridge; `term_ended`, if given, is cancelled when the bridge's task ends, however it
/// ends (drained, pipeline closed, aborted, dropped).
fn spawn_bridge<P: Producer, S: Stamper<P::Message>>(
    producer: P,
    pipeline: impl Pipeline<P::Message>,
    epoch: LeaderEpoch,
    options: BridgeOptions,
    stamper: S,
    cancel: CancellationToken,
    term_ended: Option<CancellationToken>,
) -> Result<BridgeHandle, BridgeConfigError> {
    options.validate()?;
    let stop = CancellationToken::new();
    let abort = cancel.child_token();
    let bridge = Bridge {
        producer,
        pipeline,
        stamper,
        epoch,
        header: options.header,
        capacity: options.capacity,
        idle_timeout: options.producer_idle_timeout,
        staged: Vec::with_capacity(options.capacity),
        buffer: VecDeque::with_capacity(options.capacity),
        taken: 0,
        forwarded: 0,
    };
    let run = bridge.run(stop.clone(), abort.clone());
    let task = tokio::spawn(async move {
        let _term_ends_with_the_bridge = term_ended.map(CancellationToken::drop_guard);
        run.await
    });
    Ok(BridgeHandle {
        epoch,
        drain_timeout: options.drain_timeout,
        stop,
        abort_on_drop: abort.drop_guard(),
        task,
    })
}

struct Bridge<P: Producer, Pi, S> {
    producer: P,
    pipeline: Pi,
    stamper: S,
    epoch: LeaderEpoch,
    header: &'static str,
    capacity: usize,
    idle_timeout: Option<Duration>,
    /// What the last `recv_many` handed over, before stamping.
    staged: Vec<P::Message>,
    buffer: VecDeque<Stamped<P::Message>>,
    /// Messages read from the producer.
    taken: u64,
    /// Messages delivered to the pipeline.
    forwarded: u64,
}

/// What woke the bridge while it waited.
enum Wake<E> {
    Aborted,
    StopRequested,
    Sent,
    PipelineClosed,
    Received(Received<E>),
    Idle,
}

impl<P: Producer, Pi: Pipeline<P::Message>, S: Stamper<P::Message>> Bridge<P, Pi, S> {
    async fn run(mut self, stop: CancellationToken, abort: CancellationToken) -> BridgeExit {
        let aborted = abort.cancelled();
        let stop_requested = stop.cancelled();
        tokio::pin!(aborted, stop_requested);
        let mut idle = self.idle_timeout.map(|timeout| Box::pin(tokio::time::sleep(timeout)));
        let mut stop_seen = false;
        // `Some` once the producer is no longer read: from then on the bridge only drains.
        let mut reason: Option<DrainReason> = None;
        loop {
            if self.pipeline.deliver_ready(&mut self.buffer, &mut self.forwarded).is_err() {
                return self.pipeline_closed();
            }
            if let (Some(reason), true) = (&reason, self.buffer.is_empty()) {
                return BridgeExit::Drained { reason: reason.clone(), forwarded: self.forwarded };
            }
            let reading = reason.is_none();
            let room = self.capacity.saturating_sub(self.buffer.len());
            let wake = tokio::select! {
                biased;
                () = &mut aborted => Wake::Aborted,
                () = &mut stop_requested, if reading && !stop_seen => Wake::StopRequested,
                delivered = self.pipeline.deliver_next(&mut self.buffer, &mut self.forwarded),
                    if !self.buffer.is_empty() => match delivered {
                    Ok(()) => Wake::Sent,
                    Err(PipelineClosed) => Wake::PipelineClosed,
                },
                received = self.producer.recv_many(&mut self.staged, room), if reading && room > 0 => {
                    Wake::Received(received)
                }
                () = idle_elapsed(&mut idle), if reading => Wake::Idle,
            };
            match wake {
                Wake::Aborted => return self.aborted(),
                Wake::PipelineClosed => return self.pipeline_closed(),
                Wake::Sent => {}
                Wake::StopRequested => {
                    stop_seen = true;
                    self.producer.close();
                }
                Wake::Received(received) => {
                    if !self.staged.is_empty() {
                        self.stamp_staged();
                        reset_idle(&mut idle, self.idle_timeout);
                    }
                    reason = match received {
                        Received::Messages => None,
                        Received::Failed(error) => {
                            self.producer.close();
                            Some(DrainReason::ProducerFailed { error: error.to_string() })
                        }
                        Received::Stopped if stop_seen => Some(DrainReason::StopRequested),
                        Received::Stopped => Some(DrainReason::ProducerClosed),
                    };
                }
                Wake::Idle => {
                    self.producer.close();
                    let idle_timeout = self.idle_timeout.unwrap_or_default();
                    reason = Some(DrainReason::ProducerIdle { idle_timeout });
                }
            }
        }
    }

    /// Stamps what the producer handed over and holds it for the pipeline.
    fn stamp_staged(&mut self) {
        self.taken += u64::try_from(self.staged.len()).unwrap_or(u64::MAX);
        for message in self.staged.drain(..) {
            let signature = self.stamper.signature(self.epoch, &message);
            self.buffer.push_back(Stamped { header: self.header, epoch: self.epoch, signature, message });
        }
    }

    /// Messages taken from the producer and not delivered: those held, and one a [`Handler`]
    /// refused.
    fn dropped(&self) -> u64 {
        self.taken - self.forwarded
    }

    fn aborted(&self) -> BridgeExit {
        BridgeExit::Aborted { forwarded: self.forwarded, dropped: self.dropped() }
    }

    fn pipeline_closed(&self) -> BridgeExit {
        BridgeExit::PipelineClosed { forwarded: self.forwarded, dropped: self.dropped() }
    }
}

fn reset_idle(idle: &mut Option<Pin<Box<Sleep>>>, timeout: Option<Duration>) {
    if let (Some(sleep), Some(timeout)) = (idle.as_mut(), timeout) {
        sleep.as_mut().reset(Instant::now() + timeout);
    }
}

async fn idle_elapsed(idle: &mut Option<Pin<Box<Sleep>>>) {
    match idle {
        Some(sleep) => sleep.as_mut().await,
        None => std::future::pending().await,
    }
}
