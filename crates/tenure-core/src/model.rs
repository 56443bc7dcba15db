//! The vocabulary of SPEC section 1: fencing tokens, nodes, providers, pools, verbs.
//!
//! Tokens are newtypes with no arithmetic beyond [`CaptureEpoch::next`] (and its siblings), so
//! that a token can never be computed from anything but its predecessor — and
//! [`CaptureEpoch::raised_by`], which only a restore's `tokens-raised` event uses.

use std::fmt;
use std::net::IpAddr;

use serde::Serialize;

mod action;
pub use action::{ActionStamp, IdempotencyKey, ParsedKey, StampedAction};

macro_rules! token {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $name(u64);

        impl $name {
            /// "Never held": the value of a key nobody has held yet.
            pub const NEVER: Self = Self(0);

            /// Wraps a value read back from durable storage or the wire.
            #[must_use]
            pub const fn from_stored(value: u64) -> Self {
                Self(value)
            }

            /// The next token on this key's line. Panics only if a key was bumped 2^64 times.
            #[must_use]
            pub fn next(self) -> Self {
                Self(self.0.checked_add(1).expect("a token line never reaches u64::MAX"))
            }

            /// The next value, or `None` at `u64::MAX`: for a counter an outside store holds
            /// (a leader term), where the maximum is a refusal to report, not a bug.
            #[must_use]
            pub fn checked_next(self) -> Option<Self> {
                self.0.checked_add(1).map(Self)
            }

            /// The raw value, for printing and storage.
            #[must_use]
            pub const fn get(self) -> u64 {
                self.0
            }

            /// This token raised by `by`, or `None` when that would pass `u64::MAX`. The one
            /// arithmetic besides [`Self::next`]: a restore's `tokens-raised` event lifts every
            /// line above anything issued since the backup (`federation/raise.rs`).
            #[must_use]
            pub const fn raised_by(self, by: u64) -> Option<Self> {
                match self.0.checked_add(by) {
                    Some(value) => Some(Self(value)),
                    None => None,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

token!(
    /// Token per (pool, address, captureDomain): +1 whenever the desired holder changes.
    CaptureEpoch
);
token!(
    /// Token per (pool, address): +1 whenever the owner changes. The canonical cluster fence token.
    OwnershipEpoch
);
token!(
    /// Token per election: +1 on every takeover, unchanged on renewal.
    LeaderEpoch
);

/// A (provider, address) pair: what a node's engine tracks per address it acts on, the provider's
/// name shared ([`crate::names`]).
pub type ProviderAddress = (crate::names::Name, IpAddr);

/// `provider:<provider>:placement:<placementGroup>`: the nodes contending for an address in one
/// domain share one capture-epoch line.
///
/// Shared text ([`crate::names`]): the many addresses and journal entries of one domain hold one
/// copy of its name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CaptureDomain(crate::names::Name);

impl CaptureDomain {
    /// The domain of `provider` and `placement_group`.
    #[must_use]
    pub fn new(provider: &str, placement_group: &str) -> Self {
        Self(crate::names::shared(&format!("provider:{provider}:placement:{placement_group}")))
    }

    /// The domain's text form.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Serialize for CaptureDomain {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl fmt::Display for CaptureDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The kinds of provider (SPEC 7). The planner only cares about the verb family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderKind {
    /// AWS EC2 secondary private IPs on ENIs.
    Aws,
    /// OCI secondary private IPs on VNICs.
    Oci,
    /// Azure ipConfigs on NICs.
    Azure,
    /// Linux proxy-ARP plus gratuitous ARP.
    Onprem,
    /// In-memory cloud provider with single assignment (tests, demos, simulation).
    SimCloud,
    /// In-memory proxy-ARP provider without single assignment (tests, demos, simulation).
    SimOnprem,
    /// An operator's command, fed the stamped action as JSON on stdin.
    Exec,
}

impl ProviderKind {
    /// Which verbs this provider's actions use.
    #[must_use]
    pub fn verb_family(self) -> VerbFamily {
        match self {
            Self::Aws | Self::Oci | Self::Azure | Self::SimCloud => VerbFamily::Cloud,
            Self::Exec => VerbFamily::Exec,
            Self::Onprem | Self::SimOnprem => VerbFamily::Onprem,
        }
    }

    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Aws => "aws",
            Self::Oci => "oci",
            Self::Azure => "azure",
            Self::Onprem => "onprem",
            Self::SimCloud => "sim-cloud",
            Self::SimOnprem => "sim-onprem",
            Self::Exec => "exec",
        }
    }
}

/// Cloud providers move secondary IPs; on-prem providers answer ARP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum VerbFamily {
    /// `assign-secondary-ip`, `enable-forwarding` / `disable-forwarding`, `unassign-secondary-ip`.
    Cloud,
    /// `proxy-arp-add`, `garp` / `proxy-arp-del`.
    Onprem,
    /// `acquire` / `release`: one call each, the operator's command does the rest (SPEC 7).
    Exec,
}

impl VerbFamily {
    /// Acquire verbs, in execution order.
    #[must_use]
    pub fn acquire_verbs(self) -> &'static [Verb] {
        match self {
            Self::Cloud => &[Verb::AssignSecondaryIp, Verb::EnableForwarding],
            Self::Onprem => &[Verb::ProxyArpAdd, Verb::Garp],
            Self::Exec => &[Verb::Acquire],
        }
    }

    /// Release verbs, in execution order.
    #[must_use]
    pub fn release_verbs(self) -> &'static [Verb] {
        match self {
            Self::Cloud => &[Verb::DisableForwarding, Verb::UnassignSecondaryIp],
            Self::Onprem => &[Verb::ProxyArpDel],
            Self::Exec => &[Verb::Release],
        }
    }

    /// The verb that announces an address this family answers for: `garp` on-prem (a gratuitous
    /// ARP or unsolicited NA), repeated outside the journal while the node holds the address
    /// ([`crate::node::NodeEngine::poll_refreshes`]). `None` for a cloud or an operator's
    /// command: the provider itself tells the network where the address is.
    #[must_use]
    pub fn announcement(self) -> Option<Verb> {
        match self {
            Self::Onprem => Some(Verb::Garp),
            Self::Cloud | Self::Exec => None,
        }
    }

    /// Whether a release waits out its pool's `deprovisionHoldDuration` (SPEC 13), and a failed
    /// release its retry backoff ([`crate::retry`]). Not on the on-prem family: it has no
    /// provider-side single assignment, so a held release is a second router answering ARP for
    /// the address through the hold (a failed one is retried at the next sweep, as before there
    /// was a backoff). Cloud providers move the address away themselves (the hold is only
    /// hysteresis against flaps); an operator's command (`exec`) keeps the hold, as its provider
    /// is unknown to tenure (docs/decisions.md).
    #[must_use]
    pub fn release_is_held(self) -> bool {
        match self {
            Self::Cloud | Self::Exec => true,
            Self::Onprem => false,
        }
    }
}

/// A provider verb (SPEC 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verb {
    /// Cloud acquire: move the secondary IP to this NIC (with reassignment).
    AssignSecondaryIp,
    /// Cloud acquire: start forwarding for the address.
    EnableForwarding,
    /// On-prem acquire: add a proxy neighbour entry.
    ProxyArpAdd,
    /// On-prem acquire: announce by gratuitous ARP (unsolicited NA for IPv6).
    Garp,
    /// Cloud release: stop forwarding for the address.
    DisableForwarding,
    /// Cloud release: unassign the secondary IP from this node's own NIC.
    UnassignSecondaryIp,
    /// On-prem release: remove the proxy neighbour entry.
    ProxyArpDel,
    /// Exec acquire: the operator's command, once (SPEC 7).
    Acquire,
    /// Exec release: the operator's command, once.
    Release,
}

impl Verb {
    /// Every verb (what a verb's name is read against; the property tests draw from it).
    pub(crate) const ALL: [Self; 9] = [
        Self::AssignSecondaryIp,
        Self::EnableForwarding,
        Self::ProxyArpAdd,
        Self::Garp,
        Self::DisableForwarding,
        Self::UnassignSecondaryIp,
        Self::ProxyArpDel,
        Self::Acquire,
        Self::Release,
    ];

    /// True for the verbs that make this host answer for the address on-prem (`proxy-arp-add`,
    /// `garp`): under `authority: vrrp` they run only while keepalived says this host is MASTER
    /// (SPEC 7), in the agent (`agent/authority.rs`) and in the simulator alike.
    #[must_use]
    pub fn needs_vrrp_master(self) -> bool {
        matches!(self, Self::ProxyArpAdd | Self::Garp)
    }

    /// The family the verb belongs to.
    #[must_use]
    pub fn family(self) -> VerbFamily {
        match self {
            Self::AssignSecondaryIp
            | Self::EnableForwarding
            | Self::DisableForwarding
            | Self::UnassignSecondaryIp => VerbFamily::Cloud,
            Self::ProxyArpAdd | Self::Garp | Self::ProxyArpDel => VerbFamily::Onprem,
            Self::Acquire | Self::Release => VerbFamily::Exec,
        }
    }

    /// Whether a failed call of this verb waits out the retry backoff ([`crate::retry`]): a
    /// cloud's or an operator's command (a remote API that throttles, a hook that may be broken),
    /// never the on-prem family's. Its calls are this host's own kernel, a release there is
    /// never held back ([`VerbFamily::release_is_held`]), and an add refused while keepalived
    /// said BACKUP for a moment must run at the next reconcile once it says MASTER again (a
    /// backoff of `requeueInterval` left the address unanswered that long after a flap).
    #[must_use]
    pub fn backs_off(self) -> bool {
        self.family() != VerbFamily::Onprem
    }

    /// True for verbs of the acquire set.
    #[must_use]
    pub fn is_acquire(self) -> bool {
        matches!(
            self,
            Self::AssignSecondaryIp | Self::EnableForwarding | Self::ProxyArpAdd | Self::Garp | Self::Acquire
        )
    }

    /// True for the verbs that put the address on or take it off a NIC (the ones inventory
    /// can see): assign/unassign and proxy-ARP add/del.
    #[must_use]
    pub fn changes_holding(self) -> bool {
        matches!(
            self,
            Self::AssignSecondaryIp
                | Self::UnassignSecondaryIp
                | Self::ProxyArpAdd
                | Self::ProxyArpDel
                | Self::Acquire
                | Self::Release
        )
    }

    /// The verb that must have executed, in the same epoch, before this one may run (SPEC 5:
    /// an address's verbs are a sequence), from the verb lists of [`VerbFamily`].
    #[must_use]
    pub fn predecessor(self) -> Option<Self> {
        [VerbFamily::Cloud, VerbFamily::Onprem, VerbFamily::Exec]
            .into_iter()
            .flat_map(|f| [f.acquire_verbs(), f.release_verbs()])
            .find_map(|verbs| verbs.windows(2).find(|w| w[1] == self).map(|w| w[0]))
    }

    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AssignSecondaryIp => "assign-secondary-ip",
            Self::EnableForwarding => "enable-forwarding",
            Self::ProxyArpAdd => "proxy-arp-add",
            Self::Garp => "garp",
            Self::DisableForwarding => "disable-forwarding",
            Self::UnassignSecondaryIp => "unassign-secondary-ip",
            Self::ProxyArpDel => "proxy-arp-del",
            Self::Acquire => "acquire",
            Self::Release => "release",
        }
    }
}

impl std::str::FromStr for Verb {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|v| v.as_str() == text).ok_or_else(|| format!("unknown verb `{text}`"))
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A node (one `tenure agent`, a router), as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    /// Unique node name.
    pub name: String,
    /// Name of the provider this node's NIC lives in.
    pub provider: String,
    /// Placement group (with the provider, the capture domain).
    pub placement_group: String,
    /// Higher is better; default 0.
    pub priority: i64,
    /// ENI / NIC / VNIC id, or a Linux interface.
    pub nic: String,
    /// Most addresses the node may hold, across all pools; `None` is unlimited.
    pub capacity: Option<u64>,
}

impl NodeSpec {
    /// The capture domain this node contends in.
    #[must_use]
    pub fn capture_domain(&self) -> CaptureDomain {
        CaptureDomain::new(&self.provider, &self.placement_group)
    }
}

/// A provider instance, as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderSpec {
    /// Unique provider name, referenced by nodes and pools.
    pub name: String,
    /// What kind of provider it is.
    pub kind: ProviderKind,
}

/// Who may capture an address besides arbitration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Authority {
    /// Arbitration alone decides.
    #[default]
    None,
    /// Only a node whose latest VRRP state is `master` is eligible (fail-closed).
    Vrrp,
}

/// Whether planned actions wait for an operator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Approval {
    /// Actions are imported `approved`.
    #[default]
    Auto,
    /// Actions are imported `pending` until an `approve` event names their key.
    Manual,
}

/// A node's VRRP state as keepalived reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VrrpState {
    /// This node is the VRRP master.
    Master,
    /// This node is a backup.
    Backup,
    /// VRRP reports a fault.
    Fault,
}

/// A validated MobilityPool (SPEC 10), with defaults filled in and addresses expanded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSpec {
    /// `metadata.name`.
    pub name: String,
    /// Every address, expanded from ranges, sorted canonically, without duplicates.
    pub addresses: Vec<IpAddr>,
    /// Provider name.
    pub provider: String,
    /// Placement group.
    pub placement_group: String,
    /// Member node names, in declaration order.
    pub members: Vec<String>,
    /// `none` or `vrrp`.
    pub authority: Authority,
    /// `auto` or `manual`.
    pub approval: Approval,
    /// Hysteresis before a release is planned, in stream-time milliseconds.
    pub deprovision_hold_ms: u64,
    /// How long a heartbeat keeps a node alive, in milliseconds.
    pub heartbeat_ttl_ms: u64,
    /// Extra grace after the TTL before a node counts as dead, in milliseconds.
    pub promotion_hold_ms: u64,
    /// Fence on ownershipEpoch too.
    pub epoch_locking: bool,
    /// Nodes ranked first, in this order.
    pub prefer_nodes: Vec<String>,
    /// `true`: the owner is always the best eligible member; `false`: owners are sticky.
    pub preempt: bool,
    /// `false`: liveness never moves ownership, only drain, health and VRRP do.
    pub auto_failover: bool,
}

impl PoolSpec {
    /// The capture domain of this pool.
    #[must_use]
    pub fn capture_domain(&self) -> CaptureDomain {
        CaptureDomain::new(&self.provider, &self.placement_group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failed_call_backs_off_but_the_on_prem_familys() {
        for family in [VerbFamily::Cloud, VerbFamily::Onprem, VerbFamily::Exec] {
            for verb in family.acquire_verbs().iter().chain(family.release_verbs()) {
                assert_eq!(verb.family(), family, "{verb:?}");
                let expected = family != VerbFamily::Onprem;
                assert_eq!(verb.backs_off(), expected, "{verb:?}");
            }
        }
    }

    #[test]
    fn tokens_only_step_forward() {
        let e = CaptureEpoch::NEVER;
        assert_eq!(e.get(), 0);
        assert_eq!(e.next().get(), 1);
        assert!(e.next() > e);
        assert_eq!(OwnershipEpoch::from_stored(41).next(), OwnershipEpoch::from_stored(42));
    }

    #[test]
    fn idempotency_key_has_the_spec_format() {
        let a = StampedAction::new(
            "p",
            "10.0.0.10".parse().expect("literal"),
            Verb::AssignSecondaryIp,
            "a",
            "sim1",
            "eni-a",
            CaptureDomain::new("sim1", "g1"),
            CaptureEpoch::from_stored(3),
            OwnershipEpoch::from_stored(2),
        );
        assert_eq!(a.idempotency_key(), "p/10.0.0.10/assign-secondary-ip/a/sim1/eni-a/owner:2:epoch:3");
        assert_eq!(a.capture_domain.as_str(), "provider:sim1:placement:g1");
        let parsed = ParsedKey::parse(&a.idempotency_key()).expect("parses");
        assert_eq!(parsed.verb, Verb::AssignSecondaryIp);
        assert_eq!(parsed.capture_epoch.get(), 3);
        assert_eq!(parsed.ownership_epoch.get(), 2);
        assert_eq!(parsed.nic, "eni-a");
        let v6 = StampedAction::new(
            "p",
            "2001:db8::1".parse().expect("literal"),
            Verb::ProxyArpDel,
            "b",
            "lan",
            "eth0",
            CaptureDomain::new("lan", "r1"),
            CaptureEpoch::from_stored(9),
            OwnershipEpoch::from_stored(8),
        );
        assert_eq!(ParsedKey::parse(&v6.idempotency_key()).map(|k| k.address), Some(v6.address));
        // An Azure NIC is an ARM resource id, full of `/`: it is everything between the provider
        // and the epochs' tail.
        let arm = "/subscriptions/s1/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/nic-a";
        let azure = StampedAction::new(
            "p",
            "10.0.0.11".parse().expect("literal"),
            Verb::AssignSecondaryIp,
            "a",
            "az",
            arm,
            CaptureDomain::new("az", "g1"),
            CaptureEpoch::from_stored(4),
            OwnershipEpoch::from_stored(5),
        );
        let parsed = ParsedKey::parse(&azure.idempotency_key()).expect("an ARM id NIC parses");
        assert_eq!((parsed.nic.as_str(), parsed.provider.as_str(), parsed.holder.as_str()), (arm, "az", "a"));
        assert_eq!((parsed.ownership_epoch.get(), parsed.capture_epoch.get()), (5, 4));
        for bad in [
            "",
            "a/b",
            "p/10.0.0.1/nope/a/s/n/owner:1:epoch:1",
            "p/10.0.0.1/garp/a/s/n/owner:x:epoch:1",
            "p/10.0.0.1/garp/a/s//owner:1:epoch:1",
            "p/10.0.0.1/garp/a/s/owner:1:epoch:1",
        ] {
            assert_eq!(ParsedKey::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn verb_families_match_the_spec() {
        assert_eq!(VerbFamily::Cloud.acquire_verbs(), &[Verb::AssignSecondaryIp, Verb::EnableForwarding]);
        assert_eq!(VerbFamily::Onprem.release_verbs(), &[Verb::ProxyArpDel]);
        assert!(Verb::Garp.is_acquire());
        assert!(!Verb::UnassignSecondaryIp.is_acquire());
        assert_eq!(ProviderKind::SimOnprem.verb_family(), VerbFamily::Onprem);
        assert_eq!(Verb::EnableForwarding.predecessor(), Some(Verb::AssignSecondaryIp));
        assert_eq!(Verb::UnassignSecondaryIp.predecessor(), Some(Verb::DisableForwarding));
        assert_eq!(Verb::Garp.predecessor(), Some(Verb::ProxyArpAdd));
        for first in [
            Verb::AssignSecondaryIp,
            Verb::DisableForwarding,
            Verb::ProxyArpAdd,
            Verb::ProxyArpDel,
            Verb::Acquire,
            Verb::Release,
        ] {
            assert_eq!(first.predecessor(), None, "{first}");
        }
        // SPEC 7: an exec provider's actions are `acquire` and `release`, one call each.
        assert_eq!(ProviderKind::Exec.verb_family(), VerbFamily::Exec);
        assert_eq!(VerbFamily::Exec.acquire_verbs(), &[Verb::Acquire]);
        assert_eq!(VerbFamily::Exec.release_verbs(), &[Verb::Release]);
        assert!(Verb::Acquire.is_acquire() && Verb::Acquire.changes_holding());
        assert!(!Verb::Release.is_acquire() && Verb::Release.changes_holding());
        assert_eq!("acquire".parse::<Verb>(), Ok(Verb::Acquire));
        assert_eq!("release".parse::<Verb>(), Ok(Verb::Release));
    }

    proptest::proptest! {
        /// An action keeps no text of its key: what the journal's key index compares is the key
        /// as it is written ([`StampedAction::key_is`]), and it must be the key's text byte for
        /// byte (an Azure NIC has `/` in it; names may be long or empty).
        #[test]
        fn a_key_compared_as_written_is_its_text(
            pool in "[a-z0-9-]{1,12}",
            holder in "[a-z0-9-]{0,40}",
            nic in "[a-z0-9/-]{1,200}",
            owner in 0u64..u64::MAX,
            epoch in 0u64..u64::MAX,
            cut in 0usize..400,
        ) {
            let action = StampedAction::new(
                &pool,
                "fd00::1".parse().expect("literal"),
                Verb::AssignSecondaryIp,
                &holder,
                "azure-west",
                &nic,
                CaptureDomain::new("azure-west", "g"),
                CaptureEpoch::from_stored(epoch),
                OwnershipEpoch::from_stored(owner),
            );
            let key = action.idempotency_key();
            proptest::prop_assert!(action.key_is(&key));
            let cut = cut.min(key.len() - 1);
            proptest::prop_assert!(!action.key_is(&key[..cut]), "a prefix of the key is not it");
            proptest::prop_assert!(!action.key_is(&format!("{key}0")), "nor the key and more");
            let mut other = key.to_string();
            let last = other.pop().expect("a key is not empty");
            other.push(if last == '0' { '1' } else { '0' });
            proptest::prop_assert!(!action.key_is(&other), "nor a key one byte apart");
        }

        /// The key is written piece by piece; it is the format SPEC 5 gives, with the address
        /// as `Display` writes it, for IPv4 and IPv6 addresses alike.
        #[test]
        fn a_key_is_written_in_its_format(
            v4 in proptest::prelude::any::<u32>(),
            v6 in proptest::prelude::any::<u128>(),
            six in proptest::prelude::any::<bool>(),
            owner in proptest::prelude::any::<u64>(),
            epoch in proptest::prelude::any::<u64>(),
            verb in proptest::sample::select(Verb::ALL.to_vec()),
        ) {
            let address: std::net::IpAddr = if six {
                std::net::Ipv6Addr::from(v6).into()
            } else {
                std::net::Ipv4Addr::from(v4).into()
            };
            let action = StampedAction::new(
                "edge",
                address,
                verb,
                "r1",
                "aws-west",
                "eni-0abc",
                CaptureDomain::new("aws-west", "g"),
                CaptureEpoch::from_stored(epoch),
                OwnershipEpoch::from_stored(owner),
            );
            let expected = format!("edge/{address}/{verb}/r1/aws-west/eni-0abc/owner:{owner}:epoch:{epoch}");
            proptest::prop_assert_eq!(&*action.idempotency_key(), expected.as_str());
            proptest::prop_assert!(action.key_is(&expected));
        }
    }
}
