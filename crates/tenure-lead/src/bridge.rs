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
//!
//! # Layout
//!
//! - this file — the options, [`Stamped`] and the stampers, [`BridgeHandle`], the spawn
//!   functions and the bridge's task.
//! - `bridge/ends.rs` — the two ends: [`Producer`] (and [`FallibleReceiver`]) and [`Pipeline`]
//!   (and [`Handler`]).
//! - `bridge/supervisor.rs` — [`BridgeSupervisor`]: one bridge per leadership term.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::{JoinError, JoinHandle};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, DropGuard};

use tenure_core::model::LeaderEpoch;

use crate::handle::LeadershipHandle;
use crate::sink::{MessageId, Stamp, StampSignature, StampSigner};

mod ends;
mod supervisor;

pub use ends::{FallibleReceiver, Handler, Pipeline, PipelineClosed, Producer, Received};
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
