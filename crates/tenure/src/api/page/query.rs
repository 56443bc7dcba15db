//! The status page's query (`?pool=&node=&address=&phase=&page=&refresh=`): parsed strictly (a
//! bad key or value is a 400 naming it), and the one filter and page window the ownership table
//! and the timeline use.

use std::net::IpAddr;

use ipnet::IpNet;
use tenure_core::federation::Phase;
use tenure_core::input::check_name;
use tenure_sim::replay::OwnershipRow;

use super::super::ApiFailure;
use super::html::REFRESH_DEFAULT_S;
use crate::agent::listing::{ListFilter, parse_address};

/// Rows of the ownership table per page: a 100k-address map is shown 200 rows at a time.
pub const PAGE_ROWS: usize = 200;

/// Longest reload interval `?refresh=` accepts, in seconds (one hour).
pub const REFRESH_MAX_S: u64 = 3_600;

/// Every phase `?phase=` accepts, in hand-over order.
pub const PHASES: [Phase; 5] =
    [Phase::PendingApproval, Phase::Acquiring, Phase::Held, Phase::Releasing, Phase::Released];

/// What the page is asked to show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageQuery {
    /// `pool` and `node`, with the meaning they have on `GET /v1/ownership` (a node owns or
    /// holds the address).
    pub filter: ListFilter,
    /// `address`: one address, or a CIDR range of them (`10.0.3.0/24`).
    pub addresses: Option<IpNet>,
    /// `phase`: only addresses in this phase.
    pub phase: Option<Phase>,
    /// `page`: which page of the filtered rows, from 1.
    pub page: usize,
    /// `refresh`: seconds between reloads, 0 for none.
    pub refresh_s: u64,
}

impl Default for PageQuery {
    fn default() -> Self {
        Self {
            filter: ListFilter::default(),
            addresses: None,
            phase: None,
            page: 1,
            refresh_s: REFRESH_DEFAULT_S,
        }
    }
}

impl PageQuery {
    /// Parses the query's pairs: each key at most once; an unknown key, an empty or bad value is
    /// a 400 naming the key.
    pub fn parse(pairs: Vec<(String, String)>) -> Result<Self, ApiFailure> {
        let mut query = Self::default();
        let mut seen: Vec<String> = Vec::new();
        for (key, value) in pairs {
            if seen.contains(&key) {
                return Err(ApiFailure::bad_field(&key, "given twice"));
            }
            seen.push(key.clone());
            // An empty field of the filter form means "any".
            if value.is_empty() && matches!(key.as_str(), "pool" | "node" | "address" | "phase") {
                continue;
            }
            match key.as_str() {
                "pool" | "node" => {
                    check_name(&key, &value).map_err(|e| ApiFailure::bad_field(&key, e))?;
                    let slot = if key == "pool" { &mut query.filter.pool } else { &mut query.filter.node };
                    *slot = Some(value);
                }
                "address" => {
                    query.addresses = Some(
                        parse_address("address", &value).map_err(|e| ApiFailure::bad_field("address", e))?,
                    );
                }
                "phase" => {
                    let phase = PHASES.into_iter().find(|p| p.as_str() == value).ok_or_else(|| {
                        let names: Vec<&str> = PHASES.iter().map(|p| p.as_str()).collect();
                        ApiFailure::bad_field(
                            "phase",
                            format!("unknown phase `{value}`; expected one of {}", names.join(", ")),
                        )
                    })?;
                    query.phase = Some(phase);
                }
                "page" => {
                    query.page = value.parse::<usize>().ok().filter(|page| *page >= 1).ok_or_else(|| {
                        ApiFailure::bad_field("page", format!("`{value}` is not a page number (1, 2, …)"))
                    })?;
                }
                "refresh" => {
                    query.refresh_s =
                        value.parse::<u64>().ok().filter(|s| *s <= REFRESH_MAX_S).ok_or_else(|| {
                            ApiFailure::bad_field(
                                "refresh",
                                format!(
                                    "`{value}` is not a number of seconds from 0 (never) to {REFRESH_MAX_S}"
                                ),
                            )
                        })?;
                }
                _ => {
                    return Err(ApiFailure::bad_field(
                        &key,
                        "unknown query parameter; expected `pool`, `node`, `address`, `phase`, `page` or `refresh`",
                    ));
                }
            }
        }
        Ok(query)
    }

    /// Whether `row` is asked for (every filter but the page).
    #[must_use]
    pub fn matches(&self, row: &OwnershipRow) -> bool {
        self.filter.matches_ownership(row)
            && self.phase.is_none_or(|phase| row.phase.as_deref() == Some(phase.as_str()))
            && self.addresses.is_none_or(|range| {
                row.address.parse::<IpAddr>().is_ok_and(|address| range.contains(&address))
            })
    }

    /// The filters as query pairs (no page), for links that keep them.
    #[must_use]
    pub fn filter_pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        if let Some(pool) = &self.filter.pool {
            pairs.push(("pool", pool.clone()));
        }
        if let Some(node) = &self.filter.node {
            pairs.push(("node", node.clone()));
        }
        if let Some(range) = &self.addresses {
            pairs.push(("address", range_text(range)));
        }
        if let Some(phase) = self.phase {
            pairs.push(("phase", phase.as_str().to_owned()));
        }
        if self.refresh_s != REFRESH_DEFAULT_S {
            pairs.push(("refresh", self.refresh_s.to_string()));
        }
        pairs
    }
}

/// A range as the filter form shows it: a single address bare, else in CIDR form.
#[must_use]
pub fn range_text(range: &IpNet) -> String {
    if range.prefix_len() == range.max_prefix_len() { range.addr().to_string() } else { range.to_string() }
}

/// The rows of page `page` (from 1) of `rows`, `page_rows` a page; a page past the last is the
/// last (a bookmarked page of a map that shrank). Returns the rows, the page shown and the
/// number of pages (at least 1).
#[must_use]
pub fn page_window<T>(rows: &[T], page: usize, page_rows: usize) -> (&[T], usize, usize) {
    let pages = rows.len().div_ceil(page_rows).max(1);
    let shown = page.clamp(1, pages);
    let start = (shown - 1) * page_rows;
    let end = (start + page_rows).min(rows.len());
    (&rows[start.min(rows.len())..end], shown, pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &[(&str, &str)]) -> Vec<(String, String)> {
        text.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn row(pool: &str, address: &str, owner: &str, phase: &str) -> OwnershipRow {
        OwnershipRow {
            pool: pool.into(),
            address: address.into(),
            owner: Some(owner.into()),
            ownership_epoch: 1,
            capture_epoch: 1,
            desired: true,
            phase: Some(phase.into()),
            held_by: Some(vec![owner.into()]),
            nics: Some(vec![format!("eni-{owner}")]),
        }
    }

    #[test]
    fn filters_narrow_by_pool_node_range_and_phase() {
        let rows = [
            row("edge", "10.0.0.10", "a", "held"),
            row("edge", "10.0.1.10", "b", "acquiring"),
            row("core", "10.0.0.11", "b", "held"),
        ];
        let shown = |q: &[(&str, &str)]| -> Vec<&str> {
            let query = PageQuery::parse(pairs(q)).expect("a good query");
            rows.iter().filter(|r| query.matches(r)).map(|r| r.address.as_str()).collect()
        };
        assert_eq!(shown(&[]), ["10.0.0.10", "10.0.1.10", "10.0.0.11"]);
        assert_eq!(shown(&[("pool", "edge")]), ["10.0.0.10", "10.0.1.10"]);
        assert_eq!(shown(&[("node", "b")]), ["10.0.1.10", "10.0.0.11"]);
        assert_eq!(shown(&[("address", "10.0.0.0/24")]), ["10.0.0.10", "10.0.0.11"]);
        assert_eq!(shown(&[("address", "10.0.1.10")]), ["10.0.1.10"]);
        assert_eq!(shown(&[("phase", "acquiring")]), ["10.0.1.10"]);
        assert_eq!(shown(&[("pool", ""), ("node", "b"), ("phase", "held")]), ["10.0.0.11"]);
    }

    #[test]
    fn bad_input_is_one_line_naming_the_key() {
        let refused = |q: &[(&str, &str)]| PageQuery::parse(pairs(q)).expect_err("refused");
        for (query, field) in [
            (&[("colour", "red")][..], "colour"),
            (&[("pool", "a"), ("pool", "b")], "pool"),
            (&[("address", "10.0.0.300")], "address"),
            (&[("address", "10.0.0.0/33")], "address"),
            (&[("address", "10.0.0.0/x")], "address"),
            (&[("phase", "gone")], "phase"),
            (&[("page", "0")], "page"),
            (&[("page", "two")], "page"),
            (&[("refresh", "99999")], "refresh"),
            (&[("node", "a b")], "node"),
        ] {
            let failure = refused(query);
            assert_eq!(failure.field.as_deref(), Some(field), "{query:?}: {}", failure.message);
            assert!(!failure.message.contains('\n'), "{}", failure.message);
        }
    }

    #[test]
    fn a_page_past_the_last_shows_the_last() {
        let rows: Vec<u32> = (0..450).collect();
        let (window, shown, pages) = page_window(&rows, 1, 200);
        assert_eq!((window.len(), window[0], shown, pages), (200, 0, 1, 3));
        let (window, shown, pages) = page_window(&rows, 3, 200);
        assert_eq!((window.len(), window[0], shown, pages), (50, 400, 3, 3));
        let (window, shown, _) = page_window(&rows, 9, 200);
        assert_eq!((window.len(), shown), (50, 3));
        let (window, shown, pages) = page_window::<u32>(&[], 4, 200);
        assert_eq!((window.len(), shown, pages), (0, 1, 1));
    }

    #[test]
    fn filter_pairs_round_trip() {
        let query = PageQuery::parse(pairs(&[
            ("pool", "edge"),
            ("node", "b"),
            ("address", "10.0.0.7/24"),
            ("phase", "held"),
            ("refresh", "0"),
            ("page", "3"),
        ]))
        .expect("a good query");
        let again: Vec<(String, String)> =
            query.filter_pairs().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        assert_eq!(again.iter().find(|(k, _)| k == "address").map(|(_, v)| v.as_str()), Some("10.0.0.0/24"));
        let reparsed = PageQuery::parse(again).expect("round trip");
        assert_eq!(reparsed, PageQuery { page: 1, ..query });
    }
}
