//! The status page's query (`?pool=&node=&address=&phase=&page=&refresh=`): parsed strictly (a
//! bad key or value is a 400 naming it), and the one filter and page window the ownership table
//! and the timeline use.

use tenure_core::federation::Phase;
use tenure_core::input::check_name;

use super::super::ApiFailure;
use super::html::REFRESH_DEFAULT_S;
use crate::agent::listing::{address_filter_text, parse_address};
use crate::agent::map::MapFilter;
use crate::agent::status::StatusQuery;

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
    /// holds the address); `address`: one address, or a CIDR range of them (`10.0.3.0/24`);
    /// `phase`: only addresses in this phase.
    pub filter: MapFilter,
    /// `page`: which page of the filtered rows, from 1.
    pub page: usize,
    /// `refresh`: seconds between reloads, 0 for none.
    pub refresh_s: u64,
}

impl Default for PageQuery {
    fn default() -> Self {
        Self { filter: MapFilter::default(), page: 1, refresh_s: REFRESH_DEFAULT_S }
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
                    let list = &mut query.filter.list;
                    let slot = if key == "pool" { &mut list.pool } else { &mut list.node };
                    *slot = Some(value);
                }
                "address" => {
                    query.filter.range = Some(
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
                    query.filter.phase = Some(phase);
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

    /// What the loop is asked for: the filters and the page, [`PAGE_ROWS`] rows a page.
    #[must_use]
    pub fn status_query(&self) -> StatusQuery {
        StatusQuery { filter: self.filter.clone(), page: self.page, page_rows: PAGE_ROWS }
    }

    /// The filters as query pairs (no page), for links that keep them.
    #[must_use]
    pub fn filter_pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        if let Some(pool) = &self.filter.list.pool {
            pairs.push(("pool", pool.clone()));
        }
        if let Some(node) = &self.filter.list.node {
            pairs.push(("node", node.clone()));
        }
        if let Some(range) = &self.filter.range {
            pairs.push(("address", address_filter_text(range)));
        }
        if let Some(phase) = self.filter.phase {
            pairs.push(("phase", phase.as_str().to_owned()));
        }
        if self.refresh_s != REFRESH_DEFAULT_S {
            pairs.push(("refresh", self.refresh_s.to_string()));
        }
        pairs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &[(&str, &str)]) -> Vec<(String, String)> {
        text.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
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
