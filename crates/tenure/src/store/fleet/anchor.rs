//! The rollback checks of the fleet store: how far this agent applied the log ([`Anchor`]), the
//! binding that records it in the local store ([`Binding`]), and the refusals of an etcd that
//! is not the one it was bound to or whose log went back ([`check_anchor`], the core's rule,
//! and [`check_binding`]). `docs/architecture.md`, "Fleet mode on etcd", says why.

use serde::{Deserialize, Serialize};
use tenure_core::anchor::HeadSeen;

use super::io::HeadRead;

/// What the agent was bound to: the etcd cluster, the prefix, and how far it applied the log
/// (its [`Anchor`]). Stored as
/// `{"v":1,"clusterId":…,"prefix":…,"revision":…,"newest":…,"headCreated":…}` (the last two
/// absent until known; a record without them, from an older tenure, reads as such).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Binding {
    pub(super) v: u64,
    pub(super) cluster_id: u64,
    pub(super) prefix: String,
    /// [`Anchor::revision`].
    pub(super) revision: i64,
    /// [`Anchor::newest`]: the batch's key (it starts with the prefix, so with `/`), or
    /// `snapshot`; absent: [`Newest::Unrecorded`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) newest: Option<String>,
    /// [`Anchor::head_created`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) head_created: Option<i64>,
}

impl Binding {
    pub(super) fn anchor(&self) -> Anchor {
        let newest = match self.newest.as_deref() {
            None => Newest::Unrecorded,
            Some(SNAPSHOT) => Newest::Snapshot,
            Some(key) => Newest::Batch(key.as_bytes().to_vec()),
        };
        Anchor { revision: self.revision, newest, head_created: self.head_created }
    }
}

/// [`Binding::newest`] of an anchor that came from a snapshot.
pub(super) const SNAPSHOT: &str = "snapshot";

// How far this agent applied the log, and the one rule that etcd still holds it: the core's
// (`tenure_core::anchor`), which the simulator's rolled-back logs are checked with too.
#[cfg(test)]
pub(super) use tenure_core::anchor::WENT_BACK;
pub(crate) use tenure_core::anchor::{Anchor, Newest};

/// [`tenure_core::anchor::check_anchor`] on a head read of etcd: the head is still the one this
/// agent saw, at or past the newest batch it applied, and that batch is still in etcd at its
/// revision or a snapshot covers it.
pub(crate) fn check_anchor(anchor: &Anchor, read: &HeadRead) -> Result<(), String> {
    tenure_core::anchor::check_anchor(
        anchor,
        &HeadSeen {
            head_created: read.head_created,
            head_revision: read.head_revision,
            batch_revision: read.batch_revision,
            snapshot_revision: read.snapshot_revision,
        },
    )
}

/// Why a fleet agent refuses its etcd at start: the binding's cluster and prefix against what
/// etcd says (how far it applied: [`check_anchor`]).
pub(super) fn check_binding(binding: &Binding, prefix: &str, head: &HeadRead) -> Result<(), String> {
    // `/tenure` and `/tenure/` name the same keys ([`Keys::new`]).
    if binding.prefix.trim_end_matches('/') != prefix.trim_end_matches('/') {
        return Err(format!(
            "this agent's store was bound to etcd prefix `{}`, not `{prefix}`: use the prefix it ran with, or a new store.path",
            binding.prefix
        ));
    }
    if binding.cluster_id != head.cluster_id {
        return Err(format!(
            "etcd cluster {:x} is not the cluster {:x} this agent applied the log of (wiped, replaced or restored \
             from a backup?); refusing to act rather than restart tokens",
            head.cluster_id, binding.cluster_id
        ));
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use tenure_core::anchor::check_head;

    use super::*;

    /// A head read of cluster `cluster_id` whose log ends at `head_revision`.
    pub(in crate::store::fleet) fn head(cluster_id: u64, head_revision: i64) -> HeadRead {
        HeadRead {
            cluster_id,
            revision: head_revision + 5,
            head_revision,
            head_created: 2,
            batch_revision: None,
            snapshot_revision: None,
        }
    }

    #[test]
    fn the_binding_refuses_another_cluster_and_another_prefix() {
        let binding = Binding {
            v: 1,
            cluster_id: 7,
            prefix: "/tenure".into(),
            revision: 100,
            newest: None,
            head_created: None,
        };
        assert_eq!(check_binding(&binding, "/tenure", &head(7, 100)), Ok(()));
        assert_eq!(check_binding(&binding, "/tenure/", &head(7, 100)), Ok(()), "the same keys");
        let other = check_binding(&binding, "/tenure", &head(8, 250)).expect_err("must fail");
        assert!(other.contains("etcd cluster 8 is not the cluster 7"), "{other}");
        let prefix = check_binding(&binding, "/other", &head(7, 100)).expect_err("must fail");
        assert!(prefix.contains("prefix `/tenure`, not `/other`"), "{prefix}");
        // A record of an older tenure (no batch key, no head creation) reads; a new one round-trips.
        let old: Binding = serde_json::from_str(r#"{"v":1,"clusterId":7,"prefix":"/tenure","revision":100}"#)
            .expect("must hold");
        assert_eq!(old, binding);
        assert_eq!(old.anchor().newest, Newest::Unrecorded);
        let new = Binding { newest: Some("/tenure/log/x".into()), head_created: Some(2), ..binding.clone() };
        let back: Binding =
            serde_json::from_slice(&serde_json::to_vec(&new).expect("must hold")).expect("must hold");
        assert_eq!(back, new);
        assert_eq!(back.anchor().batch_key(), Some(&b"/tenure/log/x"[..]));
        let snapshot = Binding { newest: Some(SNAPSHOT.into()), ..binding };
        assert_eq!(snapshot.anchor().newest, Newest::Snapshot);
    }

    #[test]
    fn a_log_below_what_the_agent_applied_is_refused_naming_both_positions() {
        let anchor =
            Anchor { revision: 100, newest: Newest::Batch(b"/t/log/k".to_vec()), head_created: Some(2) };
        let read = |head_created, head_revision, batch_revision, snapshot_revision| HeadRead {
            head_created,
            batch_revision,
            snapshot_revision,
            ..head(7, head_revision)
        };
        // Its batch still there, or covered by a snapshot (which deleted it): the log is the same.
        assert_eq!(check_anchor(&anchor, &read(2, 100, Some(100), None)), Ok(()));
        assert_eq!(check_anchor(&anchor, &read(2, 250, None, Some(180))), Ok(()));
        assert_eq!(check_anchor(&anchor, &read(2, 250, None, Some(100))), Ok(()));
        // Nothing applied yet: nothing to lose.
        assert_eq!(check_anchor(&Anchor::default(), &read(0, 0, None, None)), Ok(()));
        let refused_with = |anchor: &Anchor, read: HeadRead| {
            let reason = check_anchor(anchor, &read).expect_err("must fail");
            assert!(reason.starts_with(WENT_BACK), "{reason}");
            assert!(reason.contains("this agent applied it up to revision 100 ("), "{reason}");
            assert_eq!(reason.lines().count(), 1, "{reason}");
            reason
        };
        let refused = |read: HeadRead| {
            let reason = refused_with(&anchor, read);
            assert!(reason.contains("up to revision 100 (/t/log/k)"), "{reason}");
            reason
        };
        // The prefix deleted; deleted and written again by an agent that saw none of it.
        assert!(refused(read(0, 0, None, None)).contains("etcd's log has no head any more"));
        assert!(refused(read(300, 301, None, None)).contains("created again at revision 300"));
        // Restored from a snapshot taken before revision 100.
        assert!(refused(read(2, 90, None, Some(50))).contains("etcd's log ends at revision 90"));
        // Restored, and written past revision 100 since (by agents that had not seen it): the
        // batch is gone and no snapshot covers it.
        let past = refused(read(2, 140, None, Some(60)));
        assert!(
            past.contains("ends at revision 140 without that batch, and its snapshot covers revision 60"),
            "{past}"
        );
        let other = refused(read(2, 140, Some(101), None));
        assert!(other.contains("there is no snapshot"), "{other}");
        // The append's compare is the head part of the same rule.
        // From a snapshot: only a snapshot covers it; recorded by an older tenure: the head only.
        let from_snapshot = Anchor { newest: Newest::Snapshot, ..anchor.clone() };
        assert_eq!(check_anchor(&from_snapshot, &read(2, 150, None, Some(120))), Ok(()));
        assert!(refused_with(&from_snapshot, read(2, 150, None, None)).contains("(from a snapshot)"));
        let unrecorded = Anchor { newest: Newest::Unrecorded, head_created: None, ..anchor.clone() };
        assert_eq!(check_anchor(&unrecorded, &read(2, 150, None, None)), Ok(()));
        assert!(refused_with(&unrecorded, read(2, 90, None, None)).contains("ends at revision 90"));
        assert_eq!(check_head(&anchor, 2, 100), Ok(()));
        assert!(check_head(&anchor, 2, 99).is_err());
        assert!(check_head(&Anchor { head_created: None, ..anchor.clone() }, 0, 0).is_err());
        assert_eq!(check_head(&Anchor::default(), 0, 0), Ok(()));
    }
}
