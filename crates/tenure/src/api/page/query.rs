//! The status page's query (`?pool=&node=&address=&phase=&page=&refresh=`): parsed strictly (a
//! bad key or value is a 400 naming it), the list calls' filter keys read by their one rule
//! (`ListFilter::set`), and the one filter and page window the ownership table and the timeline
//! use.

use tenure_core::federation::Phase;

use super::super::ApiFailure;
use super::html::REFRESH_DEFAULT_S;
use crate::agent::map::MapFilter;
use crate::agent::status::StatusQuery;

/// Rows of the ownership table per page: a 100k-address map is shown 200 rows at a time.
pub const PAGE_ROWS: usize = 200;

/// Longest reload interval `?refresh=` accepts, in seconds (one hour).
pub const REFRESH_MAX_S: u64 = 3_600;

/// Every phase `?phase=` accepts, in hand-over order.
pub const PHASES: [Phase; 5] = Phase::ALL;

/// What the page is asked to show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageQuery {
    /// `pool`, `node` and `address` (repeatable: each one address, or a CIDR range of them),
    /// read and meant as on `GET /v1/ownership` (a node owns or holds the address); `phase`:
    /// only addresses in this phase.
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
    /// Parses the query's pairs. `pool`, `node` and `address` are read as on the list calls
    /// ([`ListFilter::set`](crate::agent::listing::ListFilter::set): an empty value is no filter,
    /// `address` repeats); `phase` likewise (empty: any); `page` and `refresh` at most once. An
    /// unknown key, a bad value or a key given twice is a 400 naming the key.
    pub fn parse(pairs: Vec<(String, String)>) -> Result<Self, ApiFailure> {
        let mut query = Self::default();
        let mut seen: Vec<String> = Vec::new();
        for (key, value) in pairs {
            // `pool`, `node`, `address`: the one reading of a filter (`agent/listing.rs`).
            if query.filter.list.set(&key, &key, &value).map_err(|e| ApiFailure::bad_field(&key, e))? {
                continue;
            }
            if key == "phase" && value.is_empty() {
                // An empty field of the filter form means "any".
                continue;
            }
            if seen.contains(&key) {
                return Err(ApiFailure::bad_field(&key, "given twice"));
            }
            seen.push(key.clone());
            match key.as_str() {
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
        let mut pairs = self.filter.list.query_pairs();
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
            (&[("pool", "a"), ("pool", ""), ("pool", "b")], "pool"),
            (&[("phase", "held"), ("phase", "held")], "phase"),
            (&[("page", "2"), ("page", "2")], "page"),
            (&[("address", "10.0.0.1"), ("address", "10.0.0.300")], "address"),
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

    /// Empty values filter nothing and `address` repeats, as on the list calls.
    #[test]
    fn filters_read_as_the_list_calls_read_them() {
        let query = PageQuery::parse(pairs(&[
            ("pool", ""),
            ("pool", "edge"),
            ("node", ""),
            ("phase", ""),
            ("address", ""),
            ("address", "10.0.0.10"),
            ("address", "2001:DB8::/64"),
        ]))
        .expect("a good query");
        let mut list = crate::agent::listing::ListFilter::default();
        for (key, value) in [("pool", "edge"), ("address", "10.0.0.10"), ("address", "2001:db8::/64")] {
            list.set(key, key, value).expect("a good filter");
        }
        assert_eq!(query.filter, MapFilter { list, phase: None });
        let links: Vec<(&str, String)> = query.filter_pairs();
        assert_eq!(
            links,
            [
                ("pool", "edge".to_owned()),
                ("address", "10.0.0.10".to_owned()),
                ("address", "2001:db8::/64".to_owned())
            ]
        );
    }

    #[test]
    fn filter_pairs_round_trip() {
        let query = PageQuery::parse(pairs(&[
            ("pool", "edge"),
            ("node", "b"),
            ("address", "10.0.0.7/24"),
            ("address", "10.0.1.9"),
            ("phase", "held"),
            ("refresh", "0"),
            ("page", "3"),
        ]))
        .expect("a good query");
        let again: Vec<(String, String)> =
            query.filter_pairs().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        let addresses: Vec<&str> =
            again.iter().filter(|(k, _)| k == "address").map(|(_, v)| v.as_str()).collect();
        assert_eq!(addresses, ["10.0.0.0/24", "10.0.1.9"]);
        let reparsed = PageQuery::parse(again).expect("round trip");
        assert_eq!(reparsed, PageQuery { page: 1, ..query });
    }
}
