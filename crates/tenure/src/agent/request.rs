//! What the HTTP API (and anything else outside the agent loop) may ask of the agent loop, and
//! what it answers. The loop owns the store, the drivers and the executors; everything else talks
//! to it through an [`AgentHandle`]: a bounded channel of [`Request`]s, each with a one-shot reply.
//! Reads are answered from the loop's current view; writes are appended to the log durably before
//! the reply says so.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tenure_core::log::EventKind;

use super::listing::{HistoryAnswer, HistoryQuery};
use tenure_core::rows::{ActionRow, OwnershipRow};
use tokio::sync::{mpsc, oneshot, watch};

use super::map::{AddressSeries, OwnershipQuery, RowsPage};
use super::status::{StatusQuery, StatusSnapshot};
use tenure_core::federation::history::HistorySnapshot;
use tenure_core::journal_index::JournalSnapshot;
use tenure_core::map_index::MapSnapshot;

/// Most requests waiting for the agent loop; past it a caller waits (HTTP handlers time out).
pub const REQUESTS_QUEUED_MAX: usize = 1024;

/// How long a caller waits for the agent loop before it says the agent is not answering (the
/// default of [`AgentHandle::with_timeout`]).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a caller waits for a backup of the running agent's store.
pub const BACKUP_TIMEOUT: Duration = Duration::from_secs(120);

/// Filters of `GET /v1/actions` (`?node=`, `?state=`, `?pool=`); `None` matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActionFilter {
    /// Only this node's journal.
    pub node: Option<String>,
    /// Only entries in this state (`pending`, `approved`, `executed`, `failed`, `skipped`).
    pub state: Option<String>,
    /// Only this pool's entries.
    pub pool: Option<String>,
}

/// The agent's health (`GET /v1/health`): `ok` is false exactly when the agent cannot act.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// Following the log and able to read its head.
    pub ok: bool,
    /// Why not, when not ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The nodes this agent runs.
    pub nodes: Vec<String>,
    /// The index of the last log record applied (0: none yet).
    pub log_index: u64,
    /// The log's head index (0: empty).
    pub log_head: u64,
    /// Stream time of the agent's view (ms).
    pub stream_time_ms: u64,
}

/// Counters and per-address state for `GET /metrics`, read from the loop at scrape time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricsSnapshot {
    /// Every address the map shows, when the scrape writes their series ([`AgentHandle::metrics`]
    /// fills it in from the posted map, as [`AddressSeries`] asks); `None`: left out (their
    /// families are not declared either).
    pub ownership: Option<Vec<OwnershipRow>>,
    /// Addresses the map shows, by (pool, phase): written whatever the per-address series.
    pub addresses: Vec<((String, String), u64)>,
    /// How many addresses' series the scrape left out ([`AddressSeries`]).
    pub address_series_omitted: u64,
    /// Journal entries now, by (verb, state).
    pub actions: Vec<((String, String), u64)>,
    /// Actions fenced (skipped) so far, by reason (`stale-epoch`, …), since the agent started.
    pub fenced: Vec<(String, u64)>,
    /// Log events rejected by the projection so far, by reason, since the agent started.
    pub rejected_events: Vec<(String, u64)>,
    /// Index of the last record applied (0: none).
    pub log_index: u64,
    /// Records between the head and the last one applied.
    pub log_lag: u64,
    /// Whether the agent can act (as in [`Health`]).
    pub healthy: bool,
    /// Re-captures drift repair made, as the projection counts them (from the log).
    pub drift_recaptures: u64,
    /// Inventory reads since the agent started, by (provider, `ok` | `failed`).
    pub inventory_reads: Vec<((String, String), u64)>,
    /// Repeated announcements of held addresses since the agent started, by (provider,
    /// `executed` | `refused` | `failed`).
    pub garp_refreshes: Vec<((String, String), u64)>,
    /// Stamps the clock-lead rule held back since the agent started.
    pub stamps_capped: u64,
    /// Head confirmations that failed since the agent started (it did not act then).
    pub head_unconfirmed: u64,
    /// Provider calls cancelled in flight because the view fenced their action (SPEC 9).
    pub calls_cancelled: u64,
    /// Answers of each provider that asked its executor to wait (throttling), by provider
    /// ([`crate::exec::Executor::throttled_calls`]).
    pub provider_throttled: Vec<(String, u64)>,
}

/// A change asked of the agent through the API: appended to the log as an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submit {
    /// What to append (`drain`, `undrain`, `approve`, `desire`, `undesire`).
    pub event: EventKind,
}

/// What became of a [`Submit`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    /// The log index the event was appended at.
    pub index: u64,
    /// For a drain: the addresses that had a desired holder before it and have none in the view
    /// after it (no eligible member is left to take them). Absent for other events, and when the
    /// view could not follow the log after the append.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addresses_with_no_eligible_member: Option<u64>,
    /// The view already was as the event makes it (a drain of a drained node, an undrain of a
    /// node not drained): appended all the same (the log keeps what the operator did), it
    /// changed nothing. Written only when true.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unchanged: bool,
}

impl Receipt {
    /// The receipt of an event appended at `index`, with nothing more to say.
    #[must_use]
    pub fn at(index: u64) -> Self {
        Self { index, addresses_with_no_eligible_member: None, unchanged: false }
    }
}

/// What a drain's answer and log line add when it left `count` addresses with no eligible
/// member (`; 11 addresses now have no eligible member`); empty for 0.
#[must_use]
pub fn no_eligible_member_note(count: u64) -> String {
    match count {
        0 => String::new(),
        1 => "; 1 address now has no eligible member".to_owned(),
        n => format!("; {n} addresses now have no eligible member"),
    }
}

/// Why a [`Submit`] was refused; nothing was appended.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The event names something the agent does not know (a node not in the registry, a pool
    /// not applied, an address not in the pool). HTTP 404.
    #[error("{0}")]
    NotFound(String),
    /// The event is well formed but not allowed (HTTP 409), e.g. an approve of a key that is not
    /// pending approval now (the message says why: its state, an automatic pool, stale tokens).
    #[error("{0}")]
    Refused(String),
    /// The log could not take it (store error, full); HTTP 503.
    #[error("the log is unavailable: {0}")]
    Unavailable(String),
    /// The agent is shutting down and takes no new work; HTTP 503.
    #[error("the agent is shutting down")]
    ShuttingDown,
}

impl From<tenure_core::agent::SubmitRefusal> for SubmitError {
    fn from(refusal: tenure_core::agent::SubmitRefusal) -> Self {
        match refusal {
            tenure_core::agent::SubmitRefusal::NotFound(message) => Self::NotFound(message),
            tenure_core::agent::SubmitRefusal::Refused(message) => Self::Refused(message),
        }
    }
}

/// A control of the process's own nodes, for the demo and tests (not on the HTTP API): what a
/// frozen process (a GC pause, a hung VM) does, shown on purpose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Control {
    /// `events` are appended (checked as API submits are), the node reconciles once more on
    /// them (plans and approves), then freezes before it gates or calls anything: no
    /// heartbeats, no reconcile, no calls, until resumed.
    FreezeAfterReconcile {
        /// The node.
        node: String,
        /// Events to append first, in one commit.
        events: Vec<EventKind>,
    },
    /// The frozen node wakes up: what it had approved before it froze meets the gate (a
    /// zombie), then it follows the log again.
    Resume {
        /// The node.
        node: String,
    },
}

/// One request to the agent loop.
#[derive(Debug)]
pub enum Request {
    /// The metrics snapshot (`GET /metrics`).
    Metrics {
        /// Where the answer goes.
        reply: oneshot::Sender<MetricsSnapshot>,
    },
    /// Freeze or wake one of the process's nodes (demo, tests).
    Control {
        /// What to do.
        control: Control,
        /// Where the answer goes: a one-line account, or why not.
        reply: oneshot::Sender<Result<String, String>>,
    },
    /// A consistent backup of the store, as the bytes of a backup file (`POST /v1/store/backup`).
    Backup {
        /// Where the answer goes: the backup, or why not.
        reply: oneshot::Sender<Result<Vec<u8>, crate::store::StoreError>>,
    },
    /// Append an event (the mutating `POST`s).
    Submit {
        /// What to append.
        submit: Submit,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<Receipt, SubmitError>>,
    },
}

/// Why a request got no answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandleError {
    /// The loop has stopped.
    #[error("the agent loop has stopped")]
    Stopped,
    /// The loop did not answer within the handle's timeout ([`REQUEST_TIMEOUT`] unless set with
    /// [`AgentHandle::with_timeout`]).
    #[error("the agent loop did not answer within {0:?}")]
    Timeout(Duration),
}

/// What readers that never wait for the loop read, as of one moment of the loop: the ownership
/// map ([`MapSnapshot`]) and every node's journal ([`JournalSnapshot`], in the config's order).
/// Cheap to clone (each is a persistent tree's root).
#[derive(Clone, Debug)]
pub struct Reads {
    /// The map (`GET /v1/ownership`, the metrics' per-address gauges).
    pub map: MapSnapshot,
    /// The journals (`GET /v1/actions`, the metrics' counts of entries).
    pub journals: Vec<JournalSnapshot>,
    /// The log's history (`GET /v1/history`).
    pub history: HistorySnapshot,
    /// Every node of the registry, as the status page lists them.
    pub nodes: Vec<super::status::NodeStatus>,
    /// Stream time of the view (ms).
    pub stream_time_ms: u64,
}

/// What the loop posts for readers that never wait for it: its health and when (what
/// `GET /v1/health` answers), and its [`Reads`] as of its last follow or step. Cheap to clone.
///
/// An ask sees what a freeze or a wake answered before it did: the loop counts those it answers
/// ([`HealthBoard::note_change`], before the answer goes out), and a post at the end of a step
/// says which of them it covers ([`HealthBoard::post_reads`]); a read waits for a post that covers
/// every one answered when it was asked (one step at most), as it waited for that step when the
/// loop answered reads itself.
#[derive(Clone, Debug)]
pub struct HealthBoard {
    health: Arc<watch::Sender<Option<(Health, tokio::time::Instant)>>>,
    reads: Arc<watch::Sender<Option<(Reads, u64)>>>,
    changes: Arc<std::sync::atomic::AtomicU64>,
}

impl Default for HealthBoard {
    fn default() -> Self {
        Self {
            health: Arc::new(watch::Sender::new(None)),
            reads: Arc::new(watch::Sender::new(None)),
            changes: Arc::default(),
        }
    }
}

impl HealthBoard {
    /// Posts `health` as of now.
    pub fn post(&self, health: Health) {
        self.health.send_replace(Some((health, tokio::time::Instant::now())));
    }

    /// The loop answered a request whose effect is the next step's (a node frozen after its next
    /// plan, or woken for its zombie pass): reads asked from now on wait for a post that covers it.
    pub fn note_change(&self) {
        self.changes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Posts the map, journals and history as the loop has them now (O(1): snapshots share the
    /// indexes' trees). `step_done`: the loop is at the end of a step, which covers every change
    /// answered before it; a post after a follow within a step covers what the last one did.
    pub fn post_reads(&self, reads: Reads, step_done: bool) {
        let covers = if step_done {
            self.changes.load(std::sync::atomic::Ordering::SeqCst)
        } else {
            self.reads.borrow().as_ref().map_or(0, |(_, covers)| *covers)
        };
        self.reads.send_replace(Some((reads, covers)));
    }

    /// The last post; before the first, waits up to `bound` for it (a loop starting).
    async fn last(&self, bound: Duration) -> Option<(Health, tokio::time::Instant)> {
        let mut posts = self.health.subscribe();
        let first = tokio::time::timeout(bound, posts.wait_for(Option::is_some)).await;
        first.ok().and_then(Result::ok).and_then(|post| post.clone())
    }

    /// The reads posted last that cover every change answered by now; waits up to `bound` for
    /// them (the loop starting, or in the step after a change).
    async fn last_reads(&self, bound: Duration) -> Option<Reads> {
        let wanted = self.changes.load(std::sync::atomic::Ordering::SeqCst);
        let mut posts = self.reads.subscribe();
        let covering = posts.wait_for(|post| post.as_ref().is_some_and(|(_, covers)| *covers >= wanted));
        let post = tokio::time::timeout(bound, covering).await;
        post.ok().and_then(Result::ok).and_then(|post| post.as_ref().map(|(reads, _)| reads.clone()))
    }
}

/// The agent loop's side of the channel: the requests, and the board it posts its health on.
#[derive(Debug)]
pub struct Requests {
    receiver: mpsc::Receiver<Request>,
    board: HealthBoard,
    /// Requests taken so far ([`Requests::taken`]).
    taken: u64,
}

impl Requests {
    /// The next request (`None`: every handle is gone).
    pub async fn recv(&mut self) -> Option<Request> {
        let request = self.receiver.recv().await;
        self.taken += u64::from(request.is_some());
        request
    }

    /// A request already waiting, if any (never waits).
    pub fn try_recv(&mut self) -> Option<Request> {
        let request = self.receiver.try_recv().ok();
        self.taken += u64::from(request.is_some());
        request
    }

    /// How many requests were taken so far: the loop yields after a turn that took one, so
    /// that the task waiting for its answer runs.
    #[must_use]
    pub fn taken(&self) -> u64 {
        self.taken
    }

    /// [`Requests::recv`] outside a runtime.
    pub fn blocking_recv(&mut self) -> Option<Request> {
        self.receiver.blocking_recv()
    }

    /// Where the loop posts its health.
    #[must_use]
    pub fn board(&self) -> HealthBoard {
        self.board.clone()
    }
}

/// The API's side of the channel to the agent loop. Cheap to clone.
#[derive(Clone, Debug)]
pub struct AgentHandle {
    requests: mpsc::Sender<Request>,
    /// How long one request may wait for its answer, queueing included.
    timeout: Duration,
    board: HealthBoard,
}

impl AgentHandle {
    /// A handle and the receiving end the agent loop reads.
    #[must_use]
    pub fn channel() -> (Self, Requests) {
        let (requests, receiver) = mpsc::channel(REQUESTS_QUEUED_MAX);
        let board = HealthBoard::default();
        (
            Self { requests, timeout: REQUEST_TIMEOUT, board: board.clone() },
            Requests { receiver, board, taken: 0 },
        )
    }

    /// The same channel with another bound on how long each request waits for its answer
    /// (tests use a short one so that a loop that never answers fails them quickly).
    #[must_use]
    pub fn with_timeout(self, timeout: Duration) -> Self {
        Self { timeout, ..self }
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Request) -> Result<T, HandleError> {
        let (reply, answer) = oneshot::channel();
        let exchange = async {
            self.requests.send(make(reply)).await.map_err(|_| HandleError::Stopped)?;
            answer.await.map_err(|_| HandleError::Stopped)
        };
        tokio::time::timeout(self.timeout, exchange).await.map_err(|_| HandleError::Timeout(self.timeout))?
    }

    /// The whole ownership map.
    pub async fn ownership(&self) -> Result<Vec<OwnershipRow>, HandleError> {
        Ok(self.ownership_page(OwnershipQuery::default()).await?.rows)
    }

    /// Runs `read` on what the loop posted last ([`HealthBoard::post_reads`]: after every follow
    /// of the log and every step, and before a submitted event's answer), on a blocking thread of
    /// the runtime: never a wait on the loop, however long its step. Before the loop's first post
    /// this waits for it up to the handle's timeout; a loop that stopped says so.
    async fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Reads) -> T + Send + 'static,
    ) -> Result<T, HandleError> {
        let reads = self.reads().await?;
        tokio::task::spawn_blocking(move || read(&reads)).await.map_err(|_| HandleError::Stopped)
    }

    /// What the loop posted last ([`Self::read`]'s rules).
    async fn reads(&self) -> Result<Reads, HandleError> {
        if self.requests.is_closed() {
            return Err(HandleError::Stopped);
        }
        // A loop that has not turned for longer than the handle's timeout (health then says it
        // is busy) may be stuck before a step that would change what its last post shows: its
        // reads are not answered as if current, as when the loop answered them.
        let turned = self.board.last(self.timeout).await.map(|(_, at)| at.elapsed());
        if turned.is_none_or(|age| age > self.timeout) {
            return Err(HandleError::Timeout(self.timeout));
        }
        self.board.last_reads(self.timeout).await.ok_or(HandleError::Timeout(self.timeout))
    }

    /// A page of the ownership map, from the map the loop posted last: only the rows returned are
    /// written out.
    pub async fn ownership_page(&self, query: OwnershipQuery) -> Result<RowsPage, HandleError> {
        self.read(move |reads| super::map::rows_page(&reads.map, &query)).await
    }

    /// Journal entries matching `filter`, from the journals the loop posted last.
    pub async fn actions(&self, filter: ActionFilter) -> Result<Vec<ActionRow>, HandleError> {
        self.read(move |reads| super::answers::actions(&reads.journals, &filter)).await
    }

    /// A page of journal entries, from the journals the loop posted last: only the entries
    /// returned are written out.
    pub async fn actions_page(
        &self,
        query: super::answers::ActionsQuery,
    ) -> Result<super::answers::ActionsPage, HandleError> {
        self.read(move |reads| super::answers::actions_page(&reads.journals, &query)).await
    }

    /// A page of the history, from the history the loop posted last.
    pub async fn history(&self, query: HistoryQuery) -> Result<HistoryAnswer, HandleError> {
        self.read(move |reads| super::listing::history_page(&reads.history, &query)).await
    }

    /// Health, from what the loop posted last ([`HealthBoard`]): never a wait on the loop, which
    /// may be in a long step or waiting on its log. The loop posts before every wait, so a post
    /// is at most one step old; one older than the handle's timeout says the loop is busy,
    /// with what it said then, and is never healthy. Before the loop's first post (it is
    /// starting) this waits for it up to the handle's timeout, then says the loop is not
    /// answering; a loop that stopped says so.
    pub async fn health(&self) -> Result<Health, HandleError> {
        if self.requests.is_closed() {
            return Err(HandleError::Stopped);
        }
        let Some((mut health, at)) = self.board.last(self.timeout).await else {
            return Err(HandleError::Timeout(self.timeout));
        };
        let age = at.elapsed();
        if age > self.timeout {
            let last = health.reason.take().unwrap_or_else(|| "ok".to_owned());
            health.ok = false;
            health.reason = Some(format!(
                "the agent loop is busy (no answer for {} ms); then it said: {last}",
                age.as_millis()
            ));
        }
        Ok(health)
    }

    /// What the status page shows, for `query`.
    pub async fn status(&self, query: StatusQuery) -> Result<StatusSnapshot, HandleError> {
        // The reads first (at start: once the first step posted them), then the health posted
        // by then: the page's heading is never older than its map.
        let reads = self.reads().await?;
        let health = self.health().await?;
        tokio::task::spawn_blocking(move || super::status::status(health, &reads, &query))
            .await
            .map_err(|_| HandleError::Stopped)
    }

    /// [`Self::metrics_with`] as a scrape without `?addresses=` asks (`auto`).
    pub async fn metrics(&self) -> Result<MetricsSnapshot, HandleError> {
        self.metrics_with(AddressSeries::Auto(super::map::ADDRESS_SERIES_AUTO_MAX)).await
    }

    /// The metrics snapshot: the loop's counters; the per-address gauges (as `series` asks), the
    /// addresses by pool and phase and the counts of journal entries from the map and journals it
    /// posted, on a blocking thread, not by the loop.
    pub async fn metrics_with(&self, series: AddressSeries) -> Result<MetricsSnapshot, HandleError> {
        let mut snapshot = self.ask(|reply| Request::Metrics { reply }).await?;
        let (addresses, actions) = self
            .read(move |reads| {
                let addresses = super::map::address_metrics(&reads.map, series);
                (addresses, super::answers::action_counts(&reads.journals))
            })
            .await?;
        snapshot.ownership = addresses.rows;
        snapshot.addresses = addresses.counts;
        snapshot.address_series_omitted = addresses.omitted;
        snapshot.actions = actions;
        Ok(snapshot)
    }

    /// A consistent backup of the running agent's store (waits up to [`BACKUP_TIMEOUT`]).
    pub async fn backup(&self) -> Result<Result<Vec<u8>, crate::store::StoreError>, HandleError> {
        self.clone().with_timeout(BACKUP_TIMEOUT).ask(|reply| Request::Backup { reply }).await
    }

    /// Freezes or wakes one of the process's nodes.
    pub async fn control(&self, control: Control) -> Result<Result<String, String>, HandleError> {
        self.ask(|reply| Request::Control { control, reply }).await
    }

    /// Appends an event through the loop.
    pub async fn submit(&self, event: EventKind) -> Result<Result<Receipt, SubmitError>, HandleError> {
        self.ask(|reply| Request::Submit { submit: Submit { event }, reply }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(reason: Option<&str>) -> Health {
        Health {
            ok: reason.is_none(),
            reason: reason.map(str::to_owned),
            nodes: vec!["a".into()],
            log_index: 7,
            log_head: 9,
            stream_time_ms: 1_000,
        }
    }

    // Paused time: any wait would show as elapsed time; none may.
    #[tokio::test(start_paused = true)]
    async fn health_is_answered_from_what_the_loop_posted_last_without_waiting_for_it() {
        let (handle, requests) = AgentHandle::channel();
        // Never posted (a loop still starting, or hung before its first post): waits for the
        // first post up to the handle's timeout, then says the loop is not answering (the API's
        // 503 "agent loop not answering").
        assert!(matches!(handle.health().await, Err(HandleError::Timeout(_))));
        let asked = tokio::time::Instant::now();
        // A recent post stands for the busy loop, as it was: healthy or not.
        requests.board().post(health(None));
        assert_eq!(handle.health().await.expect("answered from the board"), health(None));
        let failing = health(Some("fail-closed: cannot confirm the log head"));
        requests.board().post(failing.clone());
        assert_eq!(handle.health().await.expect("answered from the board"), failing);
        assert_eq!(asked.elapsed(), Duration::ZERO, "health never waits for the loop");
        // An old one says the loop is busy, and what it said then; never healthy.
        requests.board().post(health(None));
        tokio::time::advance(REQUEST_TIMEOUT + Duration::from_secs(1)).await;
        let busy = handle.health().await.expect("answered from the board");
        assert!(!busy.ok);
        let reason = busy.reason.expect("a reason");
        assert!(
            reason.starts_with("the agent loop is busy (no answer for 6000 ms)")
                && reason.ends_with("then it said: ok"),
            "{reason}"
        );
        assert_eq!((busy.log_index, busy.log_head), (7, 9));
        // A loop that stopped says so.
        drop(requests);
        assert_eq!(handle.health().await, Err(HandleError::Stopped));
    }

    // The loop never takes a request here (a step that lasts): a page is answered from the map
    // it posted, on the handle's side.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ownership_pages_are_answered_from_the_posted_map_without_the_loop() {
        let (handle, requests) = AgentHandle::channel();
        let handle = handle.with_timeout(Duration::from_millis(200));
        // Nothing posted yet (a loop starting): the caller waits up to its timeout, then is told
        // the loop is not answering.
        let query = OwnershipQuery { limit: Some(2), ..OwnershipQuery::default() };
        assert!(matches!(handle.ownership_page(query.clone()).await, Err(HandleError::Timeout(_))));
        let (view, _) = crate::agent::map::tests::fleet();
        requests.board().post(health(None));
        let reads = Reads {
            map: crate::agent::map::tests::snapshot(&view),
            journals: Vec::new(),
            history: HistorySnapshot::default(),
            nodes: Vec::new(),
            stream_time_ms: 0,
        };
        requests.board().post_reads(reads.clone(), true);
        let page = handle.ownership_page(query).await.expect("answered from the board");
        assert_eq!(
            page.rows.iter().map(|row| format!("{}/{}", row.pool, row.address)).collect::<Vec<_>>(),
            ["core/10.0.0.11", "edge/10.0.0.10"]
        );
        assert!(page.more);
        assert_eq!(requests.taken(), 0, "the loop was asked nothing");
        // After a change the loop answered, a read waits for the post of the step that follows
        // it; a post within that step (after a follow) does not cover it.
        requests.board().note_change();
        requests.board().post_reads(reads.clone(), false);
        let query = OwnershipQuery { limit: Some(2), ..OwnershipQuery::default() };
        assert!(matches!(handle.ownership_page(query.clone()).await, Err(HandleError::Timeout(_))));
        requests.board().post_reads(reads, true);
        // The loop has not turned (posted its health) for longer than the timeout: it may be
        // stuck before a step that changes what it posted, and reads say it does not answer.
        assert!(matches!(handle.ownership_page(query.clone()).await, Err(HandleError::Timeout(_))));
        requests.board().post(health(None));
        assert_eq!(handle.ownership_page(query).await.expect("covered").rows.len(), 2);
        drop(requests);
        let stopped = handle.ownership_page(OwnershipQuery::default()).await;
        assert_eq!(stopped, Err(HandleError::Stopped));
    }
}
