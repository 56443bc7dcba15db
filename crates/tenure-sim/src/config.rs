//! What a simulation run is asked to do: sizes, the fault mix and the mode.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

/// Most nodes one seed may simulate.
pub const NODES_MAX: usize = 64;
/// Most addresses one seed may simulate.
pub const ADDRESSES_MAX: usize = 4_096;
/// Steps of the safety phase per seed.
pub const SAFETY_STEPS_DEFAULT: u32 = 400;
/// Rounds the liveness phase may take before convergence counts as failed.
pub const LIVENESS_ROUNDS_MAX: u32 = 400;

/// One kind of fault the simulator can inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// A node crashes and restarts: memory lost, durable journal kept.
    Crash,
    /// A crash that also loses the store's unsynced writes (proves the fsync ordering).
    CrashLossy,
    /// A node freezes (GC pause, hung VM) and resumes later as a zombie.
    Pause,
    /// A node is cut off from the log head, then heals.
    Partition,
    /// Heartbeats are lost.
    HeartbeatLoss,
    /// Heartbeats arrive late.
    HeartbeatDelay,
    /// Each node's clock is skewed: its events carry a skewed `at`.
    ClockSkew,
    /// `action-result` events arrive late and out of order.
    ResultDelay,
    /// `action-result` events arrive twice.
    ResultDuplicate,
    /// Provider calls fail.
    ProviderFail,
    /// Provider calls take long to complete.
    ProviderSlow,
    /// Cloud reassignment lands asynchronously (the executor confirms later).
    AsyncAssign,
    /// Azure-style move: remove from the old NIC now, add to the new one later.
    AzureTwoStep,
    /// Operators drain and undrain nodes.
    Drain,
    /// Health checks flap.
    Health,
    /// VRRP mastership moves.
    Vrrp,
    /// Pools are re-applied with other addresses, deleted and re-created.
    PoolChurn,
    /// Addresses are undesired and desired in bursts.
    DesireBurst,
    /// Inventory observations are appended late.
    InventoryDelay,
    /// A step's append to the shared log is not heard to land (the store's request timed out):
    /// it was lost, or it landed anyway, at once or late. The node keeps the batch and appends it
    /// again, alone and unchanged, before anything else; it lands once (the fleet store's batch
    /// key).
    AppendInDoubt,
    /// A node's loop is stuck in a slow store call (an fsync, an etcd request) for longer than the
    /// heartbeat TTL, part way through a step; its heartbeat thread goes on.
    SlowStep,
    /// Operators move addresses from one pool to another in the pool files and reload: the
    /// events the agent plans for it (`tenure_core::pool_changes`), in its order.
    PoolMove,
    /// A node's agent is killed and started again on a new, empty `store.path` (a router
    /// rebuilt, its store lost): journal and high-water marks gone, its node name kept, what its
    /// NIC holds at the provider left as it was.
    Rebuild,
    /// The log goes back under the running fleet: etcd's prefix wiped, or etcd restored from a
    /// snapshot older than what every node applied. Not in `all` (every node refuses it and the
    /// fleet stops until the operator's recovery): asked for by name, `all,store-rollback`.
    StoreRollback,
}

impl Fault {
    /// Every fault, in a fixed order.
    pub const ALL: [Fault; 23] = [
        Fault::Crash,
        Fault::CrashLossy,
        Fault::Pause,
        Fault::Partition,
        Fault::HeartbeatLoss,
        Fault::HeartbeatDelay,
        Fault::ClockSkew,
        Fault::ResultDelay,
        Fault::ResultDuplicate,
        Fault::ProviderFail,
        Fault::ProviderSlow,
        Fault::AsyncAssign,
        Fault::AzureTwoStep,
        Fault::Drain,
        Fault::Health,
        Fault::Vrrp,
        Fault::PoolChurn,
        Fault::DesireBurst,
        Fault::InventoryDelay,
        Fault::AppendInDoubt,
        Fault::SlowStep,
        Fault::PoolMove,
        Fault::Rebuild,
    ];

    /// Faults that `all` leaves out, asked for by name.
    pub const OPT_IN: [Fault; 1] = [Fault::StoreRollback];

    /// The name used on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Fault::Crash => "crash",
            Fault::CrashLossy => "crash-lossy",
            Fault::Pause => "pause",
            Fault::Partition => "partition",
            Fault::HeartbeatLoss => "heartbeat-loss",
            Fault::HeartbeatDelay => "heartbeat-delay",
            Fault::ClockSkew => "clock-skew",
            Fault::ResultDelay => "result-delay",
            Fault::ResultDuplicate => "result-duplicate",
            Fault::ProviderFail => "provider-fail",
            Fault::ProviderSlow => "provider-slow",
            Fault::AsyncAssign => "async-assign",
            Fault::AzureTwoStep => "azure-two-step",
            Fault::Drain => "drain",
            Fault::Health => "health",
            Fault::Vrrp => "vrrp",
            Fault::PoolChurn => "pool-churn",
            Fault::DesireBurst => "desire-burst",
            Fault::InventoryDelay => "inventory-delay",
            Fault::AppendInDoubt => "append-in-doubt",
            Fault::SlowStep => "slow-step",
            Fault::PoolMove => "pool-move",
            Fault::Rebuild => "rebuild",
            Fault::StoreRollback => "store-rollback",
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of faults parsed from `all`, `none` or a comma-separated list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultSet(pub BTreeSet<Fault>);

impl FaultSet {
    /// Every fault.
    #[must_use]
    pub fn all() -> Self {
        Self(Fault::ALL.into_iter().collect())
    }

    /// Whether `fault` is in the set.
    #[must_use]
    pub fn has(&self, fault: Fault) -> bool {
        self.0.contains(&fault)
    }
}

impl FromStr for FaultSet {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.trim() == "none" {
            return Ok(Self(BTreeSet::new()));
        }
        let mut set = BTreeSet::new();
        for name in text.split(',').map(str::trim) {
            if name == "all" {
                set.extend(Fault::ALL);
                continue;
            }
            let known = || Fault::ALL.iter().chain(&Fault::OPT_IN).map(|f| f.name());
            let fault =
                Fault::ALL.into_iter().chain(Fault::OPT_IN).find(|f| f.name() == name).ok_or_else(|| {
                    let known: Vec<&str> = known().collect();
                    format!("unknown fault `{name}`; use all, none, or a list of: {}", known.join(", "))
                })?;
            set.insert(fault);
        }
        Ok(Self(set))
    }
}

impl fmt::Display for FaultSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        let every = Self::all().0.is_subset(&self.0);
        let names: Vec<&str> = every
            .then_some("all")
            .into_iter()
            .chain(self.0.iter().filter(|x| !every || Fault::OPT_IN.contains(x)).map(|x| x.name()))
            .collect();
        f.write_str(&names.join(","))
    }
}

/// What the simulated fleet is, and which documented limit (SPEC 9), if any, it demonstrates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    /// Cloud providers (single assignment). Every invariant must hold.
    Cloud,
    /// On-prem proxy-ARP with VRRP as the capture authority. Every invariant must hold.
    Onprem,
    /// Documented limit: on-prem without VRRP authority answers from two hosts.
    OnpremNoAuthority,
    /// Documented limit: a node paused between its gate check and its cloud call fires one stale
    /// call; drift repair puts the address back.
    PausedCall,
}

impl Mode {
    /// Every mode.
    pub const ALL: [Mode; 4] = [Mode::Cloud, Mode::Onprem, Mode::OnpremNoAuthority, Mode::PausedCall];

    /// The name used on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Mode::Cloud => "cloud",
            Mode::Onprem => "onprem",
            Mode::OnpremNoAuthority => "onprem-no-authority",
            Mode::PausedCall => "paused-call",
        }
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Mode::ALL.into_iter().find(|m| m.name() == text).ok_or_else(|| {
            let known: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
            format!("unknown mode `{text}`; use one of: {}", known.join(", "))
        })
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The parameters of a run; every seed of a run shares them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// Nodes per seed.
    pub nodes: usize,
    /// Addresses per seed, spread over 1–3 pools.
    pub addresses: usize,
    /// The fault mix.
    pub faults: FaultSet,
    /// The fleet's kind and the limit it demonstrates.
    pub mode: Mode,
    /// Steps of the safety phase.
    pub safety_steps: u32,
    /// Whether each node's store checks the log against its anchor (`tenure_core::anchor`), as
    /// the fleet store does. `false` only to show that the simulator finds a fleet that does not
    /// (`tests/seeds.rs`); the command line has no switch for it.
    pub check_anchor: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            nodes: 5,
            addresses: 100,
            faults: FaultSet::all(),
            mode: Mode::Cloud,
            safety_steps: SAFETY_STEPS_DEFAULT,
            check_anchor: true,
        }
    }
}

impl SimConfig {
    /// Checks the limits; one line naming the bad value.
    pub fn validate(&self) -> Result<(), String> {
        if self.nodes == 0 || self.nodes > NODES_MAX {
            return Err(format!("--nodes must be between 1 and {NODES_MAX} (got {})", self.nodes));
        }
        if self.addresses == 0 || self.addresses > ADDRESSES_MAX {
            return Err(format!(
                "--addresses must be between 1 and {ADDRESSES_MAX} (got {})",
                self.addresses
            ));
        }
        Ok(())
    }

    /// The command line that reproduces `seed` under this configuration.
    #[must_use]
    pub fn reproduce_command(&self, seed: u64) -> String {
        format!(
            "tenure sim --seed {seed} --nodes {} --addresses {} --faults {} --mode {}",
            self.nodes, self.addresses, self.faults, self.mode
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_sets_parse_and_print_back() {
        assert_eq!("all".parse::<FaultSet>(), Ok(FaultSet::all()));
        assert!("none".parse::<FaultSet>().is_ok_and(|s| s.0.is_empty()));
        let some: FaultSet = "crash, pause".parse().expect("valid");
        assert_eq!(some.to_string(), "crash,pause");
        assert!("crash,nope".parse::<FaultSet>().is_err());
        for fault in Fault::ALL.into_iter().chain(Fault::OPT_IN) {
            assert_eq!(fault.name().parse::<FaultSet>().map(|s| s.has(fault)), Ok(true));
        }
        // `all` leaves the opt-in faults out; a list adds them, and prints back the same.
        assert!(!FaultSet::all().has(Fault::StoreRollback));
        let more: FaultSet = "all,store-rollback".parse().expect("valid");
        assert!(more.has(Fault::StoreRollback) && more.has(Fault::Crash));
        assert_eq!(more.to_string(), "all,store-rollback");
        assert_eq!(more.to_string().parse::<FaultSet>(), Ok(more));
        for mode in Mode::ALL {
            assert_eq!(mode.name().parse::<Mode>(), Ok(mode));
        }
    }
}
