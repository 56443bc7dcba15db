//! What the list calls select (SPEC 10: filters `pool`, `node`, `address`) and the history the
//! agent keeps: the one place each list's filter rule is written (the ownership map's in
//! [`super::map`], which applies it to the view before any row is written), used by the API
//! (`api/list.rs` parses the query and pages) and by the loop's answers.

use std::net::IpAddr;

use tenure_core::federation::history::{History, HistoryEntry};

/// The filters every list call takes; `None` / empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// `pool`: only this pool's rows.
    pub pool: Option<String>,
    /// `node`: only rows about this node (ownership: it owns or holds the address; actions: its
    /// journal; history: it is the owner or desired holder before or after, the reporting node
    /// or the approved action's holder).
    pub node: Option<String>,
    /// `address` (repeatable): only these addresses.
    pub addresses: Vec<IpAddr>,
}

impl ListFilter {
    /// Whether the address text `address` (canonical) is asked for.
    #[must_use]
    pub fn matches_address(&self, address: &str) -> bool {
        self.addresses.is_empty() || address.parse::<IpAddr>().is_ok_and(|a| self.addresses.contains(&a))
    }

    /// Whether a history entry is asked for (a `tokens-raised`, of no pool or address, only
    /// without a pool, node or address filter).
    #[must_use]
    pub fn matches_history(&self, entry: &HistoryEntry) -> bool {
        self.pool.as_ref().is_none_or(|pool| entry.pool.as_ref() == Some(pool))
            && self.node.as_ref().is_none_or(|node| entry.involves(node))
            && (self.addresses.is_empty() || entry.address.is_some_and(|a| self.addresses.contains(&a)))
    }
}

/// Where an entry is in the history: its record's log index and its place among that record's
/// entries (0-based). Entries are in this order.
pub type HistoryPosition = (u64, u32);

/// A history query the loop answers: the filter, and the page (after a position, at most a
/// number of entries).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistoryQuery {
    /// Which entries.
    pub filter: ListFilter,
    /// Only entries after this position.
    pub after: Option<HistoryPosition>,
    /// At most this many (`None`: all).
    pub limit: Option<usize>,
}

/// The loop's answer to a [`HistoryQuery`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistoryAnswer {
    /// The entries asked for, with their positions, oldest first.
    pub entries: Vec<(HistoryPosition, HistoryEntry)>,
    /// Whether more entries match after the last one.
    pub more: bool,
    /// The first log index whose entries are all kept ([`History::reaches_back_to`]).
    pub reaches_back_to: u64,
}

/// Answers `query` from `history`.
#[must_use]
pub fn history_page(history: &History, query: &HistoryQuery) -> HistoryAnswer {
    let mut entries = Vec::new();
    let mut more = false;
    let mut record = None;
    let mut place = 0_u32;
    for entry in history.entries() {
        if record == Some(entry.log_index) {
            place += 1;
        } else {
            record = Some(entry.log_index);
            place = 0;
        }
        let position = (entry.log_index, place);
        if query.after.is_some_and(|after| position <= after) || !query.filter.matches_history(entry) {
            continue;
        }
        if query.limit.is_some_and(|limit| entries.len() >= limit) {
            more = true;
            break;
        }
        entries.push((position, entry.clone()));
    }
    HistoryAnswer { entries, more, reaches_back_to: history.reaches_back_to() }
}
