//! What the list calls select (SPEC 10: filters `pool`, `node`, `address`) and the history the
//! agent keeps: the one place each list's filter rule is written — how a filter value is read
//! ([`ListFilter::set`]: the CLI's flags and arguments, the list calls' query, the status page's
//! query) and what it keeps (the ownership map's in [`super::map`], which applies it to the view
//! before any row is written) — used by the API (`api/list.rs` parses the query and pages), the
//! status page, the CLI and the loop's answers.

use std::net::IpAddr;

use ipnet::IpNet;
use tenure_core::federation::history::{HistoryEntry, HistorySnapshot};
use tenure_core::input::{canonical_address, check_name, not_an_address};

/// The filters every list call takes; `None` / empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// `pool`: only this pool's rows.
    pub pool: Option<String>,
    /// `node`: only rows about this node (ownership: it owns or holds the address; actions: its
    /// journal; history: it is the owner or desired holder before or after, the reporting node
    /// or the approved action's holder).
    pub node: Option<String>,
    /// `address` (repeatable): only these addresses, each one address or a CIDR range.
    pub addresses: Vec<IpNet>,
}

/// An address filter, as every list takes it (`tenure ownership|history ADDRESS`, `tenure
/// actions --address`, `?address=` of the list calls and of the status page): one address in any
/// form it parses from (RFC 5952 or not, with `/32` or `/128`), or a CIDR range of them of any
/// length. Bits below the prefix are dropped (`10.0.0.7/24` is `10.0.0.0/24`): a filter names
/// where to look, unlike a pool file, which names what to hold. Surrounding spaces are ignored.
pub fn address_filter(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    match text.parse::<IpAddr>() {
        Ok(address) => Ok(IpNet::from(address)),
        // ipnet's reading, as a pool file's (`tenure_core::input::expand_addresses`).
        Err(_) => text.parse::<IpNet>().map(|range| range.trunc()).map_err(|_| not_an_address(text)),
    }
}

/// The canonical text of an address filter: a single address as [`canonical_address`], a range
/// in CIDR form (`10.0.3.0/24`).
#[must_use]
pub fn address_filter_text(range: &IpNet) -> String {
    if range.prefix_len() == range.max_prefix_len() {
        canonical_address(range.addr())
    } else {
        range.to_string()
    }
}

/// Reads one address filter value, named `label` in the error (the query key `address`, or
/// the CLI's `ADDRESS` / `--address`): [`address_filter`]'s forms.
pub fn parse_address(label: &str, value: &str) -> Result<IpNet, String> {
    address_filter(value).map_err(|e| format!("{label} {e}"))
}

impl ListFilter {
    /// Sets filter `key` (`pool`, `node` or `address`, as the query names them) from `value`,
    /// naming `label` in the one-line error (the query key, or the CLI's flag). An empty value
    /// is no filter (a form's empty field, a script's empty variable: the list is read-only); a
    /// name is checked as every name is; an address is one address or a CIDR range
    /// ([`parse_address`]). `pool` and `node` at most once (`given twice`), `address` repeats.
    /// `Ok(false)`: `key` is not a filter key.
    pub fn set(&mut self, key: &str, label: &str, value: &str) -> Result<bool, String> {
        let slot = match key {
            "pool" => &mut self.pool,
            "node" => &mut self.node,
            "address" => {
                if !value.trim().is_empty() {
                    self.addresses.push(parse_address(label, value)?);
                }
                return Ok(true);
            }
            _ => return Ok(false),
        };
        if value.is_empty() {
            return Ok(true);
        }
        if slot.is_some() {
            return Err(format!("{label} given twice"));
        }
        check_name(label, value)?;
        *slot = Some(value.to_owned());
        Ok(true)
    }

    /// The filter as query pairs, canonical (what the CLI sends).
    #[must_use]
    pub fn query_pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        pairs.extend(self.pool.iter().map(|pool| ("pool", pool.clone())));
        pairs.extend(self.node.iter().map(|node| ("node", node.clone())));
        pairs.extend(self.addresses.iter().map(|range| ("address", address_filter_text(range))));
        pairs
    }

    /// Whether the address text `address` (canonical) is asked for.
    #[must_use]
    pub fn matches_address(&self, address: &str) -> bool {
        self.addresses.is_empty() || address.parse::<IpAddr>().is_ok_and(|a| self.contains(a))
    }

    /// Whether `address` is in one of the asked-for addresses or ranges (or none was asked for
    /// — see [`Self::matches_address`] for that).
    #[must_use]
    pub fn contains(&self, address: IpAddr) -> bool {
        self.addresses.iter().any(|range| range.contains(&address))
    }

    /// Whether a history entry is asked for (a `tokens-raised`, of no pool or address, only
    /// without a pool, node or address filter).
    #[must_use]
    pub fn matches_history(&self, entry: &HistoryEntry) -> bool {
        self.pool.as_ref().is_none_or(|pool| entry.pool.as_ref() == Some(pool))
            && self.node.as_ref().is_none_or(|node| entry.involves(node))
            && (self.addresses.is_empty() || entry.address.is_some_and(|a| self.contains(a)))
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
    /// The first log index whose entries are all kept ([`HistorySnapshot::reaches_back_to`]).
    pub reaches_back_to: u64,
}

/// One page of a list: its rows, and whether more rows match after the last one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page<T> {
    /// The rows, in the list's order.
    pub rows: Vec<T>,
    /// Whether more rows match after the last one.
    pub more: bool,
}

/// At most `limit` of `items` (all of them with `None`), each made a row by `row`, and whether
/// more followed: the one rule of a page for every list (`/v1/ownership`, `/v1/actions`,
/// `/v1/history`). The item after the page is looked at, never made a row.
pub fn take_page<I: Iterator, T>(items: I, limit: Option<usize>, row: impl FnMut(I::Item) -> T) -> Page<T> {
    let mut items = items.peekable();
    let rows = items.by_ref().take(limit.unwrap_or(usize::MAX)).map(row).collect();
    Page { rows, more: items.peek().is_some() }
}

/// Answers `query` from `history`.
#[must_use]
pub fn history_page(history: &HistorySnapshot, query: &HistoryQuery) -> HistoryAnswer {
    // An entry's position: its record's log index and its place among that record's entries.
    let (mut record, mut place) = (None, 0_u32);
    let positioned = history.entries().map(|entry| {
        if record == Some(entry.log_index) {
            place += 1;
        } else {
            record = Some(entry.log_index);
            place = 0;
        }
        ((entry.log_index, place), entry)
    });
    let matching = positioned.filter(|(position, entry)| {
        query.after.is_none_or(|after| *position > after) && query.filter.matches_history(entry)
    });
    let Page { rows, more } = take_page(matching, query.limit, |(position, entry)| (position, entry.clone()));
    HistoryAnswer { entries: rows, more, reaches_back_to: history.reaches_back_to() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_filters_take_any_form_of_an_address_or_a_range() {
        let text = |t: &str| address_filter(t).map(|r| address_filter_text(&r));
        assert_eq!(text("10.0.0.1").as_deref(), Ok("10.0.0.1"));
        assert_eq!(text(" 10.0.0.1/32 ").as_deref(), Ok("10.0.0.1"));
        assert_eq!(text("2001:DB8:0:0::10").as_deref(), Ok("2001:db8::10"));
        assert_eq!(text("2001:db8::10/128").as_deref(), Ok("2001:db8::10"));
        assert_eq!(text("10.0.0.7/24").as_deref(), Ok("10.0.0.0/24"));
        assert_eq!(text("10.0.0.0/8").as_deref(), Ok("10.0.0.0/8"), "a filter is not bounded as a pool is");
        assert_eq!(text("2001:DB8::/64").as_deref(), Ok("2001:db8::/64"));
        for bad in [
            "",
            "10.0.0.300",
            "10.0.0.0/33",
            "10.0.0.0/x",
            "nope",
            "10.0.0.1/",
            "/24",
            "10.0.0.0/+5",
            "10.0.0.0/024",
        ] {
            let error = address_filter(bad).expect_err(bad);
            assert!(
                error.contains(&format!("`{}`", bad.trim())) && !error.contains('\n'),
                "{bad:?}: {error}"
            );
        }
        assert_eq!(
            address_filter("10.0.0.0/33"),
            Err("`10.0.0.0/33`: an IPv4 prefix length is at most 32".into())
        );
        assert_eq!(
            address_filter("fd00::/129"),
            Err("`fd00::/129`: an IPv6 prefix length is at most 128".into())
        );
    }

    #[test]
    fn filters_read_empty_as_none_and_name_their_label() {
        let mut filter = ListFilter::default();
        for (key, value) in [("pool", ""), ("node", ""), ("address", ""), ("address", " ")] {
            assert_eq!(filter.set(key, key, value), Ok(true), "{key}={value:?}");
        }
        assert_eq!(filter, ListFilter::default(), "empty values filter nothing");
        assert_eq!(filter.set("state", "state", "x"), Ok(false));
        filter.set("address", "ADDRESS", "2001:DB8:0::10").expect("non-canonical IPv6");
        filter.set("address", "ADDRESS", "10.0.3.7/24").expect("a range");
        filter.set("pool", "--pool", "edge").expect("a name");
        assert_eq!(filter.set("pool", "--pool", "core"), Err("--pool given twice".to_owned()));
        assert!(filter.matches_address("2001:db8::10") && filter.matches_address("10.0.3.200"));
        assert!(!filter.matches_address("10.0.4.1"));
        assert_eq!(
            filter.query_pairs(),
            [
                ("pool", "edge".to_owned()),
                ("address", "2001:db8::10".to_owned()),
                ("address", "10.0.3.0/24".to_owned())
            ]
        );
        let error = filter.set("address", "--address", "10.0.0.300").expect_err("refused");
        assert!(error.starts_with("--address `10.0.0.300`"), "{error}");
        let error = filter.set("node", "--node", "a b").expect_err("refused");
        assert!(error.starts_with("--node `a b`"), "{error}");
    }
}
