//! The bridge supervisor: one bridge per leadership term.

use super::*;

/// What a [`BridgeSupervisor`] is doing, published on every change (and only then).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SupervisorState {
    /// The epoch of the running bridge, if one runs.
    pub bridge_epoch: Option<LeaderEpoch>,
    /// Bridges started so far (one per leadership term entered).
    pub bridges_started: u64,
    /// Terms refused because they were below a term already bridged (a backend going back).
    pub refused_total: u64,
    /// How the last stopped bridge ended.
    pub last_exit: Option<BridgeExit>,
}

/// Runs one bridge per leadership term: when this process starts leading under a new epoch it
/// calls `start(epoch, term_ended)` for that term's producer and bridges it, stamping that
/// epoch; when it stops leading or the epoch changes, it stops the old bridge (drain within the
/// drain timeout) before starting the next. A renewal (same state) does nothing and publishes
/// nothing. A term lower than one already bridged is refused. On cancel, the running bridge is
/// aborted at once.
///
/// `term_ended` is a [`CancellationToken`] of that term alone (a new one each term), cancelled
/// the moment the term ends: leadership lost or the epoch changed (before the old bridge's drain
/// begins), the supervisor shut down or cancelled, or the term's bridge exited on its own (its
/// pipeline closed, its producer idle past the timeout). A producer that waits for input rather
/// than sending selects on `term_ended.cancelled()` to stop at once; without it, it would learn
/// only at its next send, which fails once the bridge has closed it.
#[derive(Debug)]
pub struct BridgeSupervisor {
    cancel: CancellationToken,
    state: watch::Receiver<SupervisorState>,
    task: JoinHandle<SupervisorState>,
}

impl BridgeSupervisor {
    /// Starts supervising `leadership`. `cancel` (or [`BridgeSupervisor::shutdown`]) ends it.
    pub fn spawn<P, Pi, S, F>(
        leadership: LeadershipHandle,
        pipeline: Pi,
        options: BridgeOptions,
        stamper: S,
        start: F,
        cancel: CancellationToken,
    ) -> Result<Self, BridgeConfigError>
    where
        P: Producer,
        Pi: Pipeline<P::Message> + Clone,
        S: Stamper<P::Message>,
        F: FnMut(LeaderEpoch, CancellationToken) -> P + Send + 'static,
    {
        options.validate()?;
        let cancel = cancel.child_token();
        let (publisher, state) = watch::channel(SupervisorState::default());
        let supervision =
            Supervision { pipeline, options, stamper, start, cancel: cancel.clone(), publisher };
        let task = tokio::spawn(supervision.run(leadership));
        Ok(Self { cancel, state, task })
    }

    /// The current state.
    #[must_use]
    pub fn state(&self) -> SupervisorState {
        self.state.borrow().clone()
    }

    /// A watch of the state.
    #[must_use]
    pub fn watch(&self) -> watch::Receiver<SupervisorState> {
        self.state.clone()
    }

    /// Aborts the running bridge and ends supervision; returns the final state.
    pub async fn shutdown(self) -> SupervisorState {
        self.cancel.cancel();
        match self.task.await {
            Ok(state) => state,
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(_cancelled) => self.state.borrow().clone(),
        }
    }
}

/// The running term: its bridge, and the token its producer was given.
struct Term {
    bridge: BridgeHandle,
    ended: CancellationToken,
}

struct Supervision<Pi, S, F> {
    pipeline: Pi,
    options: BridgeOptions,
    stamper: S,
    start: F,
    cancel: CancellationToken,
    publisher: watch::Sender<SupervisorState>,
}

impl<P, Pi, S, F> Supervision<Pi, S, F>
where
    P: Producer,
    Pi: Pipeline<P::Message> + Clone,
    S: Stamper<P::Message>,
    F: FnMut(LeaderEpoch, CancellationToken) -> P + Send + 'static,
{
    async fn run(mut self, leadership: LeadershipHandle) -> SupervisorState {
        let mut changes = leadership.watch();
        let mut running: Option<Term> = None;
        let mut highest_started: Option<LeaderEpoch> = None;
        loop {
            let state = *changes.borrow_and_update();
            let wanted = if state.leader { state.epoch } else { None };
            if wanted != running.as_ref().map(|term| term.bridge.epoch()) {
                if let Some(old) = running.take() {
                    // The term is over: its producer stops now, not after the drain.
                    old.ended.cancel();
                    let exit = old.bridge.stop().await;
                    self.retired(exit);
                }
                match wanted {
                    Some(epoch) if highest_started.is_some_and(|highest| epoch < highest) => {
                        self.publish(|s| s.refused_total += 1);
                    }
                    Some(epoch) => {
                        running = Some(self.start_bridge(epoch));
                        highest_started = Some(epoch);
                    }
                    None => {}
                }
            }
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => break,
                changed = changes.changed() => if changed.is_err() { break },
            }
        }
        if let Some(old) = running.take() {
            old.ended.cancel();
            // Cancelled: abort at once. The election ended: it stepped down first, so this is
            // only reached with a bridge when the handle's publisher vanished; drain it.
            let exit =
                if self.cancel.is_cancelled() { old.bridge.abort().await } else { old.bridge.stop().await };
            self.retired(exit);
        }
        self.publisher.borrow().clone()
    }

    fn start_bridge(&mut self, epoch: LeaderEpoch) -> Term {
        // A child of the supervisor's token: a shutdown ends the term too.
        let ended = self.cancel.child_token();
        let producer = (self.start)(epoch, ended.clone());
        let pipeline = self.pipeline.clone();
        let stamper = self.stamper.clone();
        let bridge = spawn_bridge(
            producer,
            pipeline,
            epoch,
            self.options,
            stamper,
            self.cancel.clone(),
            Some(ended.clone()),
        )
        .expect("the options were validated when the supervisor was spawned");
        self.publish(|s| {
            s.bridge_epoch = Some(epoch);
            s.bridges_started += 1;
        });
        Term { bridge, ended }
    }

    /// Publishes how the running bridge ended: none runs now.
    fn retired(&self, exit: BridgeExit) {
        self.publish(|s| {
            s.bridge_epoch = None;
            s.last_exit = Some(exit);
        });
    }

    fn publish(&self, change: impl FnOnce(&mut SupervisorState)) {
        self.publisher.send_modify(change);
    }
}
