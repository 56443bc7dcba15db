//! The token check: every token of a federation, read after every event, compared with the
//! highest value it ever had.

use std::collections::BTreeMap;
use std::net::IpAddr;

use tenure_core::federation::Federation;
use tenure_core::model::CaptureDomain;

/// Which token of an address a slot of a [`TokenWatch`] holds.
#[derive(Clone, Debug, PartialEq, Eq)]
enum TokenLine {
    /// The ownershipEpoch.
    Ownership,
    /// The captureEpoch of the pool's current capture domain.
    Current,
    /// The captureEpoch of a capture domain the pool used before.
    Retired(CaptureDomain),
}

/// The same, borrowed, for comparing without cloning.
#[derive(Clone, Copy)]
enum LineRef<'a> {
    Ownership,
    Current,
    Retired(&'a CaptureDomain),
}

impl LineRef<'_> {
    fn is(self, line: &TokenLine) -> bool {
        match (self, line) {
            (Self::Ownership, TokenLine::Ownership) | (Self::Current, TokenLine::Current) => true,
            (Self::Retired(a), TokenLine::Retired(b)) => a == b,
            _ => false,
        }
    }
}

/// One watched token: its pool (an index into the watch's pool list), address and line.
#[derive(Clone, Debug)]
struct TokenSlot {
    pool: usize,
    address: IpAddr,
    line: TokenLine,
}

/// A token's identity whatever the layout: pool, address, and `None` for the ownershipEpoch or
/// the capture domain of a captureEpoch line (current or retired alike).
type TokenId = (String, IpAddr, Option<CaptureDomain>);

/// Watches every token of one federation — per (pool, address) its ownershipEpoch and the
/// captureEpoch of every capture line, current and retired — and reports any that went below
/// the highest value it ever had.
///
/// Taken after every event, so the common case is cheap: the tokens are read into a flat
/// vector in canonical order and compared by position, while the read checks that every
/// position still holds the same token (pool, address, line). Only when the layout changed
/// (a pool or address added, a capture domain changed) are the slots rebuilt and the tokens
/// matched by identity; a token that left the layout is remembered in case it comes back.
#[derive(Clone, Debug, Default)]
pub struct TokenWatch {
    /// Per pool in name order: its name and current capture domain.
    pools: Vec<(String, CaptureDomain)>,
    /// Per token, in reading order: which token it is.
    slots: Vec<TokenSlot>,
    /// Per token: the highest value seen.
    highest: Vec<u64>,
    /// The values just read (kept to reuse its allocation).
    now: Vec<u64>,
    /// Tokens that left the layout, with the highest value seen.
    gone: BTreeMap<TokenId, u64>,
}

impl TokenWatch {
    /// Reads `federation`'s tokens; returns one line per token that is below the highest value
    /// it had.
    pub fn update(&mut self, federation: &Federation) -> Vec<String> {
        if self.read(federation) { self.compare() } else { self.rebuild(federation) }
    }

    /// Reads every token into `now`; returns whether each lands in the slot that holds it.
    fn read(&mut self, federation: &Federation) -> bool {
        let pools = federation.pools();
        let slots = &self.slots;
        let now = &mut self.now;
        now.clear();
        let mut same = pools.len() == self.pools.len();
        let mut at = |same: &mut bool, pool: usize, address: &IpAddr, line: LineRef<'_>, value: u64| {
            let j = now.len();
            *same = *same
                && slots.get(j).is_some_and(|s| s.pool == pool && s.address == *address && line.is(&s.line));
            now.push(value);
        };
        for (p, (name, pool)) in pools.iter().enumerate() {
            same = same && self.pools[p].0 == *name && self.pools[p].1 == pool.capture_domain;
            for (address, state) in &pool.addresses {
                at(&mut same, p, address, LineRef::Ownership, state.ownership_epoch.get());
                at(&mut same, p, address, LineRef::Current, state.line.epoch.get());
                for (domain, line) in &state.retired_lines {
                    at(&mut same, p, address, LineRef::Retired(domain), line.epoch.get());
                }
            }
        }
        same && self.now.len() == self.slots.len()
    }

    /// Same layout: compares by position.
    fn compare(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        for (j, (highest, now)) in self.highest.iter_mut().zip(&self.now).enumerate() {
            if *now < *highest {
                let slot = &self.slots[j];
                let (pool, domain) = &self.pools[slot.pool];
                let domain = match &slot.line {
                    TokenLine::Ownership => None,
                    TokenLine::Current => Some(domain),
                    TokenLine::Retired(d) => Some(d),
                };
                lines.push(went_down(pool, slot.address, domain, *highest, *now));
            }
            *highest = (*highest).max(*now);
        }
        lines
    }

    /// The layout changed: rebuilds the slots and compares each token with the highest value
    /// its identity had.
    fn rebuild(&mut self, federation: &Federation) -> Vec<String> {
        let mut earlier = std::mem::take(&mut self.gone);
        for (slot, highest) in self.slots.iter().zip(&self.highest) {
            let (pool, domain) = &self.pools[slot.pool];
            let line = match &slot.line {
                TokenLine::Ownership => None,
                TokenLine::Current => Some(domain.clone()),
                TokenLine::Retired(d) => Some(d.clone()),
            };
            let seen = earlier.entry((pool.clone(), slot.address, line)).or_default();
            *seen = (*seen).max(*highest);
        }
        self.pools.clear();
        self.slots.clear();
        self.highest.clear();
        let mut lines = Vec::new();
        for (p, (name, pool)) in federation.pools().iter().enumerate() {
            self.pools.push((name.clone(), pool.capture_domain.clone()));
            for (address, state) in &pool.addresses {
                let tokens = [
                    (TokenLine::Ownership, None, state.ownership_epoch.get()),
                    (TokenLine::Current, Some(&pool.capture_domain), state.line.epoch.get()),
                ]
                .into_iter()
                .chain(
                    state
                        .retired_lines
                        .iter()
                        .map(|(d, l)| (TokenLine::Retired(d.clone()), Some(d), l.epoch.get())),
                );
                for (line, domain, now) in tokens {
                    let seen = earlier.remove(&(name.clone(), *address, domain.cloned())).unwrap_or(0);
                    if now < seen {
                        lines.push(went_down(name, *address, domain, seen, now));
                    }
                    self.slots.push(TokenSlot { pool: p, address: *address, line });
                    self.highest.push(seen.max(now));
                }
            }
        }
        self.gone = earlier;
        lines
    }
}

fn went_down(pool: &str, address: IpAddr, domain: Option<&CaptureDomain>, seen: u64, now: u64) -> String {
    match domain {
        None => format!("ownershipEpoch of {pool}/{address} went from {seen} to {now}"),
        Some(domain) => format!("captureEpoch of {pool}/{address} on {domain} went from {seen} to {now}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::Checker;
    use tenure_core::log::{Event, EventKind};
    use tenure_core::model::{Approval, Authority, NodeSpec, PoolSpec, ProviderKind, ProviderSpec};

    fn node(name: &str, group: &str) -> NodeSpec {
        NodeSpec {
            name: name.into(),
            provider: "sim".into(),
            placement_group: group.into(),
            priority: 0,
            nic: format!("eni-{name}"),
            capacity: None,
        }
    }

    fn pool(group: &str) -> PoolSpec {
        PoolSpec {
            name: "p".into(),
            addresses: vec!["10.0.0.1".parse().expect("literal")],
            provider: "sim".into(),
            placement_group: group.into(),
            members: vec!["a".into(), "b".into()],
            authority: Authority::None,
            approval: Approval::Auto,
            deprovision_hold_ms: 0,
            heartbeat_ttl_ms: 3_000,
            promotion_hold_ms: 0,
            epoch_locking: true,
            prefer_nodes: Vec::new(),
            preempt: false,
            auto_failover: true,
        }
    }

    /// A federation after `kinds`, with nodes `a` (group g1) and `b` (group g2) alive.
    fn federation(kinds: &[EventKind]) -> Federation {
        let providers = [ProviderSpec { name: "sim".into(), kind: ProviderKind::SimCloud }];
        let mut federation = Federation::new(&[node("a", "g1"), node("b", "g2")], &providers);
        let alive = [EventKind::Heartbeat { node: "a".into() }, EventKind::Heartbeat { node: "b".into() }];
        for kind in alive.iter().chain(kinds) {
            federation.apply(&Event { at_ms: 0, kind: kind.clone() }).expect("well formed");
        }
        federation
    }

    fn applied(group: &str) -> EventKind {
        EventKind::PoolApplied { spec: Box::new(pool(group)) }
    }

    fn flap() -> [EventKind; 2] {
        let address = "10.0.0.1".parse().expect("literal");
        [EventKind::Undesire { pool: "p".into(), address }, EventKind::Desire { pool: "p".into(), address }]
    }

    #[test]
    fn the_token_watch_follows_a_pool_across_capture_domains_and_sees_retired_lines() {
        let on_g1 = federation(&[applied("g1")]);
        let moved = federation(&[applied("g1"), applied("g2")]);
        let back = federation(&[applied("g1"), applied("g2"), applied("g1")]);
        let mut watch = TokenWatch::default();
        for step in [&on_g1, &moved, &back, &back] {
            assert_eq!(watch.update(step), Vec::<String>::new(), "moving between lines lowers no token");
        }
        // The g1 line retired at a higher epoch (flapped before the move), then an earlier state:
        // only a retired line is lower.
        let [undesire, desire] = flap();
        let flapped = federation(&[applied("g1"), undesire, desire, applied("g2")]);
        let plain = federation(&[applied("g1"), applied("g2")]);
        let mut watch = TokenWatch::default();
        assert!(watch.update(&flapped).is_empty());
        let lines = watch.update(&plain);
        assert_eq!(lines, vec!["captureEpoch of p/10.0.0.1 on provider:sim:placement:g1 went from 4 to 2"]);
        // Below the highest value ever seen, not just the last: reported again.
        assert_eq!(watch.update(&plain).len(), 1);
    }

    #[test]
    fn the_checker_reports_lowered_tokens_on_the_head_and_per_view() {
        let [undesire, desire] = flap();
        let later = federation(&[applied("g1"), undesire, desire]);
        let earlier = federation(&[applied("g1")]);
        let mut checker = Checker::new(8);
        checker.after_event(&later);
        checker.after_catch_up("a", &later);
        checker.after_event(&earlier);
        checker.after_catch_up("a", &earlier);
        checker.after_restart("b");
        checker.after_catch_up("b", &earlier);
        let details: Vec<&str> = checker.violations().kept().iter().map(|v| v.detail.as_str()).collect();
        assert_eq!(
            details,
            vec![
                "head: captureEpoch of p/10.0.0.1 on provider:sim:placement:g1 went from 3 to 1",
                "a: captureEpoch of p/10.0.0.1 on provider:sim:placement:g1 went from 3 to 1",
            ]
        );
        checker.after_restart("a");
        checker.after_catch_up("a", &earlier);
        assert_eq!(checker.violations().total(), 2, "a restarted view starts afresh");
    }
}
