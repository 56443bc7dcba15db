//! The bridge's two ends: the [`Producer`] it reads from (a channel, or a [`FallibleReceiver`]
//! whose source can fail) and the [`Pipeline`] it delivers stamped messages to (a channel, or a
//! [`Handler`] the bridge's task calls itself).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;

use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use super::Stamped;

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
    /// [`super::BridgeHandle::stop`] does). The default does nothing.
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
/// [`super::BridgeOptions::capacity`] calls; a panic in the handler ends the bridge and resurfaces where
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
