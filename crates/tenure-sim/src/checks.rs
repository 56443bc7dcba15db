//! The invariants, each its own kind, and the pieces of checking that are pure functions.

use std::collections::BTreeMap;
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};

use serde::Serialize;
use tenure_core::federation::{Federation, NodeId};

use crate::config::Mode;

/// One broken invariant's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ViolationKind {
    /// An action reached a provider while it was stale at the log head (SPEC 6 rule).
    StaleExecution,
    /// A node executed below an epoch it had executed before (its high-water mark was lost).
    BelowHighWater,
    /// A provider call came from a node cut off from the log head.
    PartitionedExecution,
    /// A token of some key went down on the head or on a node's view.
    TokenDecrease,
    /// A node's view differs from the head's state at the same log prefix.
    DivergentMaps,
    /// A cloud address was on two NICs.
    DoubleAssignment,
    /// A node owned more addresses than its capacity.
    CapacityExceeded,
    /// Two hosts answered ARP for one on-prem address.
    OnpremSplitAnswer,
    /// With faults stopped, the fleet did not converge within the bound.
    NoConvergence,
}

impl ViolationKind {
    /// Every kind, in a fixed order.
    pub const ALL: [Self; 9] = [
        Self::StaleExecution,
        Self::BelowHighWater,
        Self::PartitionedExecution,
        Self::TokenDecrease,
        Self::DivergentMaps,
        Self::DoubleAssignment,
        Self::CapacityExceeded,
        Self::OnpremSplitAnswer,
        Self::NoConvergence,
    ];

    /// The kebab-case name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::StaleExecution => "stale-execution",
            Self::BelowHighWater => "below-high-water",
            Self::PartitionedExecution => "partitioned-execution",
            Self::TokenDecrease => "token-decrease",
            Self::DivergentMaps => "divergent-maps",
            Self::DoubleAssignment => "double-assignment",
            Self::CapacityExceeded => "capacity-exceeded",
            Self::OnpremSplitAnswer => "onprem-split-answer",
            Self::NoConvergence => "no-convergence",
        }
    }

    /// Whether `mode` predicts this violation (a documented limit, SPEC 9).
    #[must_use]
    pub fn predicted_in(self, mode: Mode) -> bool {
        match mode {
            Mode::Cloud | Mode::Onprem => false,
            Mode::OnpremNoAuthority => self == Self::OnpremSplitAnswer,
            Mode::PausedCall => matches!(self, Self::StaleExecution | Self::PartitionedExecution),
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for ViolationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One broken invariant, where it was seen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Safety step (or liveness round, after the safety steps) at which it was seen.
    pub step: u64,
    /// Its kind.
    pub kind: ViolationKind,
    /// What exactly.
    pub detail: String,
}

/// Every violation counted per kind, and the first `kept_per_kind_max` of each kind kept, in
/// the order seen.
#[derive(Clone, Debug)]
pub struct Violations {
    counts: [u64; ViolationKind::ALL.len()],
    kept: Vec<Violation>,
    kept_per_kind_max: u64,
}

impl Violations {
    /// No violation yet; keeps at most `kept_per_kind_max` of each kind.
    #[must_use]
    pub fn new(kept_per_kind_max: u64) -> Self {
        Self { counts: [0; ViolationKind::ALL.len()], kept: Vec::new(), kept_per_kind_max }
    }

    /// Counts one violation, and keeps it if fewer than the bound of its kind are kept.
    pub fn record(&mut self, step: u64, kind: ViolationKind, detail: String) {
        let count = &mut self.counts[kind.index()];
        *count += 1;
        if *count <= self.kept_per_kind_max {
            self.kept.push(Violation { step, kind, detail });
        }
    }

    /// How many violations of `kind` were seen.
    #[must_use]
    pub fn count(&self, kind: ViolationKind) -> u64 {
        self.counts[kind.index()]
    }

    /// How many violations were seen in all.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The kinds seen, each with its count.
    #[must_use]
    pub fn counts(&self) -> BTreeMap<ViolationKind, u64> {
        ViolationKind::ALL.into_iter().map(|k| (k, self.count(k))).filter(|(_, n)| *n > 0).collect()
    }

    /// The violations kept, in the order seen.
    #[must_use]
    pub fn kept(&self) -> &[Violation] {
        &self.kept
    }

    /// The violations kept, in the order seen.
    #[must_use]
    pub fn into_kept(self) -> Vec<Violation> {
        self.kept
    }
}

pub use crate::checker::staleness;

/// A fingerprint of everything a node's map consists of: owners, desired flags and tokens.
#[must_use]
pub fn fingerprint(federation: &Federation) -> u64 {
    let mut hasher = DefaultHasher::new();
    federation.stream_time_ms().hash(&mut hasher);
    for (name, pool) in federation.pools() {
        name.hash(&mut hasher);
        pool.deleted.hash(&mut hasher);
        for (address, state) in &pool.addresses {
            (address, state.active, state.desired, state.owner).hash(&mut hasher);
            (state.ownership_epoch.get(), state.line.epoch.get(), state.line.desired_holder)
                .hash(&mut hasher);
        }
    }
    hasher.finish()
}

/// Watches every token of one federation — (ownershipEpoch, captureEpoch) per (pool, address)
/// in canonical order — and reports any that went down. Taken after every event, so it keeps a
/// flat vector and rebuilds its keys only when the layout grows (pools and addresses are only
/// ever added, so an equal length means an equal layout).
#[derive(Clone, Debug, Default)]
pub struct TokenWatch {
    values: Vec<(u64, u64)>,
    keys: Vec<(String, std::net::IpAddr)>,
}

impl TokenWatch {
    /// Reads `federation`'s tokens; returns one line per key whose token went down since the
    /// last call.
    pub fn update(&mut self, federation: &Federation) -> Vec<String> {
        let now: Vec<(u64, u64)> = federation
            .pools()
            .values()
            .flat_map(|pool| pool.addresses.values())
            .map(|state| (state.ownership_epoch.get(), state.line.epoch.get()))
            .collect();
        let went_down = |b: &(u64, u64), n: &(u64, u64)| n.0 < b.0 || n.1 < b.1;
        let mut lines = Vec::new();
        if now.len() == self.values.len() {
            for (i, (b, n)) in self.values.iter().zip(&now).enumerate() {
                if went_down(b, n) {
                    lines.push(format!("{}/{} went from {b:?} to {n:?}", self.keys[i].0, self.keys[i].1));
                }
            }
        } else {
            let keys: Vec<(String, std::net::IpAddr)> = federation
                .pools()
                .iter()
                .flat_map(|(name, pool)| pool.addresses.keys().map(move |a| (name.clone(), *a)))
                .collect();
            let earlier: BTreeMap<&(String, std::net::IpAddr), &(u64, u64)> =
                self.keys.iter().zip(&self.values).collect();
            for (key, n) in keys.iter().zip(&now) {
                if let Some(b) = earlier.get(key).filter(|b| went_down(b, n)) {
                    lines.push(format!("{}/{} went from {b:?} to {n:?}", key.0, key.1));
                }
            }
            self.keys = keys;
        }
        self.values = now;
        lines
    }
}

/// Owners per node at the head, against capacity.
#[must_use]
pub fn capacity_excess(federation: &Federation) -> Option<String> {
    let mut held: BTreeMap<NodeId, u64> = BTreeMap::new();
    for pool in federation.pools().values().filter(|p| !p.deleted) {
        for state in pool.addresses.values().filter(|a| a.active) {
            if let Some(owner) = state.owner {
                *held.entry(owner).or_default() += 1;
            }
        }
    }
    held.into_iter().find_map(|(node, count)| {
        let spec = &federation.nodes()[node].spec;
        spec.capacity
            .filter(|cap| count > *cap)
            .map(|cap| format!("{} owns {count} addresses, capacity {cap}", spec.name))
    })
}
