//! What the core's unit tests build again and again: node `a` on the simulated cloud `sim1`
//! (placement group `g1`, NIC `eni-a`), the view that registers it alone, and an action of it.

use std::net::IpAddr;

use crate::federation::Federation;
use crate::model::{
    CaptureDomain, CaptureEpoch, NodeSpec, OwnershipEpoch, ProviderKind, ProviderSpec, StampedAction, Verb,
};

/// Node `a`: provider `sim1`, placement group `g1`, NIC `eni-a`, priority 0.
pub(crate) fn node_a() -> NodeSpec {
    NodeSpec {
        name: "a".into(),
        provider: "sim1".into(),
        placement_group: "g1".into(),
        priority: 0,
        nic: "eni-a".into(),
        capacity: None,
    }
}

/// A view registering node `a` on `sim1` (a `sim-cloud`) and nothing else.
pub(crate) fn view_of_a() -> Federation {
    Federation::new(&[node_a()], &[ProviderSpec { name: "sim1".into(), kind: ProviderKind::SimCloud }])
}

/// `a`'s `verb` of `address` in `pool`, on line `sim1`/`g1`, both epochs 1.
pub(crate) fn action_of_a(pool: &str, address: IpAddr, verb: Verb) -> StampedAction {
    StampedAction::new(
        pool,
        address,
        verb,
        "a",
        "sim1",
        "eni-a",
        CaptureDomain::new("sim1", "g1"),
        CaptureEpoch::from_stored(1),
        OwnershipEpoch::from_stored(1),
    )
}
