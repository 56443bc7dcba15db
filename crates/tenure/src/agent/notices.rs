//! The maintenance notice watcher (SPEC 7, `maintenanceNotices: drain`): one task per node of
//! this agent whose provider has notices on. It polls the cloud's instance metadata service
//! ([`NoticeReader`]) every [`NoticeWatch::interval`], and when a notice names this instance:
//!
//! 1. counts and logs it (kind, what the service said, its deadline), once per notice;
//! 2. drains the node through the agent loop, as `tenure drain` / `POST /v1/drain/{node}` does
//!    ([`AgentHandle::submit`] of a `drain` event: the log records it, the history shows the
//!    moves, and the agent's log line says `node/X drained (log index N)`). One drain per
//!    episode: while any notice the node was drained for is still announced, later notices
//!    (a spot interruption after a rebalance recommendation) add none. A drain the loop could not
//!    append is tried again at the next poll;
//! 3. acknowledges a notice that waits for it (an Azure Scheduled Event), once, as soon as the
//!    node holds nothing (no address it owns or still holds, in the ownership map) or the
//!    notice's deadline has passed, whichever comes first. While an acknowledgement waits the
//!    map is read every [`ACK_CHECK_INTERVAL`].
//!
//! A notice that goes away (cancelled, or over) undrains nothing: the node stays drained until
//! the operator undrains it (`tenure undrain NODE`): a host back from maintenance is checked by
//! someone before it takes addresses again.
//!
//! A metadata service that does not answer is logged once, then at most every
//! [`FAILURE_LOG_EVERY`] while it goes on, and again when it answers; it is polled on, and never
//! stops the agent.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tenure_core::log::EventKind;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::map::OwnershipQuery;
use super::request::AgentHandle;
use crate::exec::notices::{self, Notice, NoticeReader, NoticeSource};
use crate::metrics::Metrics;

/// How often the ownership map is read while an acknowledgement waits for the node to hold
/// nothing.
pub const ACK_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// At most one line per this long about a metadata service that keeps failing.
pub const FAILURE_LOG_EVERY: Duration = Duration::from_secs(60);

/// One node's watch.
#[derive(Debug)]
pub struct NoticeWatch {
    /// The node to drain.
    pub node: String,
    /// Its cloud's metadata service.
    pub reader: NoticeReader,
    /// How often it is polled.
    pub interval: Duration,
}

/// The watches of `nodes` (each node with the metadata service its provider polls), reading
/// [`notices::METADATA_URL_ENV`] and [`notices::POLL_INTERVAL_ENV`] (test hooks) once.
///
/// # Errors
///
/// One of the variables is set to something unusable, in one line naming it.
pub fn watches(nodes: Vec<(String, NoticeSource)>) -> Result<Vec<NoticeWatch>, String> {
    let interval = match std::env::var(notices::POLL_INTERVAL_ENV) {
        Err(_) => notices::POLL_INTERVAL_DEFAULT,
        Ok(text) => match text.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Duration::from_millis(ms),
            _ => {
                return Err(format!(
                    "{}: `{text}` is not a positive number of milliseconds",
                    notices::POLL_INTERVAL_ENV
                ));
            }
        },
    };
    nodes
        .into_iter()
        .map(|(node, source)| Ok(NoticeWatch { node, reader: NoticeReader::from_env(source)?, interval }))
        .collect()
}

/// What the watch keeps between polls.
struct State {
    /// The notices of the last successful poll, by id.
    seen: BTreeMap<String, Notice>,
    /// The notices of the current episode's drain (empty: no drain for the notices now).
    drained_for: BTreeSet<String>,
    /// The notices acknowledged.
    acknowledged: BTreeSet<String>,
    /// When the service started failing, and when that was last logged.
    failing: Option<(Instant, Instant)>,
    /// No acknowledgement is tried before this (one poll interval after one failed).
    ack_not_before: Instant,
}

/// Runs `watch` until `stop`: see the module documentation.
pub async fn watch(
    mut watch: NoticeWatch,
    handle: AgentHandle,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let source = watch.reader.source();
    info!(
        node = %watch.node,
        cloud = source.as_str(),
        interval_ms = u64::try_from(watch.interval.as_millis()).unwrap_or(u64::MAX),
        "watching the instance metadata service for maintenance notices"
    );
    let mut state = State {
        seen: BTreeMap::new(),
        drained_for: BTreeSet::new(),
        acknowledged: BTreeSet::new(),
        failing: None,
        ack_not_before: Instant::now(),
    };
    let mut next_poll = Instant::now();
    loop {
        let waiting_ack = awaiting_acknowledgement(&state).next().is_some();
        let wake = if waiting_ack { next_poll.min(Instant::now() + ACK_CHECK_INTERVAL) } else { next_poll };
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep_until(wake) => {}
        }
        if Instant::now() >= next_poll {
            next_poll = Instant::now() + watch.interval;
            poll(&mut watch, &mut state, &handle, &metrics).await;
        }
        acknowledge(&watch, &mut state, &handle, &metrics).await;
    }
}

/// The notices that wait for an acknowledgement this watch owes: drained for, not yet sent.
fn awaiting_acknowledgement(state: &State) -> impl Iterator<Item = &Notice> {
    state
        .seen
        .values()
        .filter(|n| n.acknowledge && state.drained_for.contains(&n.id) && !state.acknowledged.contains(&n.id))
}

/// A deadline for the log: RFC 3339 and how far away.
fn deadline_text(deadline: Option<SystemTime>) -> String {
    let Some(at) = deadline else { return "none given".to_owned() };
    let when = jiff::Timestamp::try_from(at).map_or_else(|_| "?".to_owned(), |t| t.to_string());
    match at.duration_since(SystemTime::now()) {
        Ok(left) => format!("{when} (in {} s)", left.as_secs()),
        Err(_) => format!("{when} (passed)"),
    }
}

/// One poll of the metadata service, and the drain it calls for.
async fn poll(watch: &mut NoticeWatch, state: &mut State, handle: &AgentHandle, metrics: &Metrics) {
    let source = watch.reader.source().as_str();
    let node = watch.node.as_str();
    let notices = match watch.reader.poll().await {
        Ok(notices) => notices,
        Err(e) => {
            let now = Instant::now();
            match &mut state.failing {
                None => {
                    warn!(node, cloud = source, error = %e, "the instance metadata service did not answer; polling on");
                    state.failing = Some((now, now));
                }
                Some((since, logged)) if now.duration_since(*logged) >= FAILURE_LOG_EVERY => {
                    let for_s = now.duration_since(*since).as_secs();
                    warn!(node, cloud = source, error = %e, for_s, "the instance metadata service still does not answer");
                    *logged = now;
                }
                Some(_) => {}
            }
            return;
        }
    };
    if let Some((since, _)) = state.failing.take() {
        info!(
            node,
            cloud = source,
            after_s = since.elapsed().as_secs(),
            "the instance metadata service answers again"
        );
    }
    let active: BTreeMap<String, Notice> = notices.into_iter().map(|n| (n.id.clone(), n)).collect();
    for notice in active.values().filter(|n| !state.seen.contains_key(&n.id)) {
        metrics.count_maintenance_notice(source, notice.kind);
        warn!(
            node,
            cloud = source,
            kind = notice.kind,
            deadline = %deadline_text(notice.deadline),
            "maintenance notice for this instance: {}",
            notice.detail
        );
    }
    for gone in state.seen.keys().filter(|id| !active.contains_key(*id)) {
        if state.drained_for.contains(gone) {
            info!(
                node,
                cloud = source,
                notice = %gone,
                "maintenance notice withdrawn; node/{node} stays drained: undrain it when the host is fit (tenure undrain {node})"
            );
        }
    }
    state.drained_for.retain(|id| active.contains_key(id));
    state.acknowledged.retain(|id| active.contains_key(id));
    state.seen = active;
    if state.seen.is_empty() {
        return;
    }
    if !state.drained_for.is_empty() {
        // The same episode: the drain stands.
        state.drained_for.extend(state.seen.keys().cloned());
        return;
    }
    let earliest = state.seen.values().filter_map(|n| n.deadline).min();
    match handle.submit(EventKind::Drain { node: node.to_owned() }).await {
        Ok(Ok(receipt)) => {
            state.drained_for = state.seen.keys().cloned().collect();
            metrics.count_notice_drain(source);
            let kinds: Vec<&str> = state.seen.values().map(|n| n.kind).collect();
            warn!(
                node,
                cloud = source,
                index = receipt.index,
                deadline = %deadline_text(earliest),
                "node/{node} drained for a maintenance notice ({}), log index {}",
                kinds.join(", "),
                receipt.index
            );
        }
        Ok(Err(e)) => {
            warn!(node, cloud = source, error = %e, "a maintenance notice's drain was not appended; trying again at the next poll")
        }
        Err(e) => {
            warn!(node, cloud = source, error = %e, "a maintenance notice's drain got no answer; trying again at the next poll")
        }
    }
}

/// Sends the acknowledgements owed once the node holds nothing or their deadline passed.
async fn acknowledge(watch: &NoticeWatch, state: &mut State, handle: &AgentHandle, metrics: &Metrics) {
    let owed: Vec<Notice> = awaiting_acknowledgement(state).cloned().collect();
    if owed.is_empty() || Instant::now() < state.ack_not_before {
        return;
    }
    let node = watch.node.as_str();
    let source = watch.reader.source().as_str();
    // The map's rows about this node (`tenure ownership --node NODE`: an address it owns, or one
    // its confirmed acquire still holds); one is enough to say it holds something.
    let mut query = OwnershipQuery { limit: Some(1), ..OwnershipQuery::default() };
    query.filter.list.node = Some(node.to_owned());
    let holds_nothing = match handle.ownership_page(query).await {
        Ok(page) => page.rows.is_empty(),
        Err(_) => false,
    };
    let now = SystemTime::now();
    for notice in owed {
        let why = if holds_nothing {
            "the node holds nothing"
        } else if notice.deadline.is_some_and(|d| d <= now) {
            "its deadline passed"
        } else {
            continue;
        };
        match watch.reader.acknowledge(&notice).await {
            Ok(()) => {
                state.acknowledged.insert(notice.id.clone());
                metrics.count_notice_acknowledgement(source);
                info!(node, cloud = source, notice = %notice.id, "maintenance notice acknowledged ({why})");
            }
            Err(e) => {
                state.ack_not_before = Instant::now() + watch.interval;
                warn!(node, cloud = source, notice = %notice.id, error = %e, "acknowledging a maintenance notice failed; trying again at the next poll");
            }
        }
    }
}
