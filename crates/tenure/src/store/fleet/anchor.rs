//! The rollback checks of the fleet store: how far this agent applied the log ([`Anchor`]), the
//! binding that records it in the local store ([`Binding`]), and the refusals of an etcd that
//! is not the one it was bound to or whose log went back ([`check_head`], [`check_anchor`],
//! [`check_binding`]). `docs/architecture.md`, "Fleet mode on etcd", says why.

use serde::{Deserialize, Serialize};

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

/// Where an anchor's revision came from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Newest {
    /// Nothing applied yet, or a binding written by an older tenure (which recorded no key):
    /// only the head is checked.
    #[default]
    Unrecorded,
    /// The batch under this key.
    Batch(Vec<u8>),
    /// The snapshot that started the replica (or a reload).
    Snapshot,
}

/// How far this agent applied the log, as etcd must still show it: the newest batch it applied
/// (revision and key) and the revision the log's head key was created at. The binding records
/// it; every start, reload, head read and append checks etcd against it ([`check_head`],
/// [`check_anchor`]), so that a log that went back (the prefix deleted, etcd restored from an
/// older snapshot) is refused before anything is appended to it or done on it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Anchor {
    /// The revision of the newest batch (or snapshot) applied; 0: none.
    pub(crate) revision: i64,
    /// What is at that revision.
    pub(crate) newest: Newest,
    /// The revision the log's head key was created at: the same for the log's whole life (only
    /// deleting the prefix deletes the head); `None` until this agent saw the head.
    pub(crate) head_created: Option<i64>,
}

impl Anchor {
    /// The key of the newest batch applied, when known (a head read looks for it).
    pub(crate) fn batch_key(&self) -> Option<&[u8]> {
        match &self.newest {
            Newest::Batch(key) => Some(key),
            Newest::Snapshot | Newest::Unrecorded => None,
        }
    }
}

/// The start of every refusal of a log that went back.
pub(super) const WENT_BACK: &str = "the log in etcd went back";

/// The refusal of a log that went back: one line naming what this agent applied and what etcd
/// shows (`found`).
pub(super) fn went_back(anchor: &Anchor, found: &str) -> String {
    let batch = match &anchor.newest {
        Newest::Batch(key) => String::from_utf8_lossy(key).into_owned(),
        Newest::Snapshot => "from a snapshot".to_owned(),
        Newest::Unrecorded => "as recorded by an older tenure".to_owned(),
    };
    format!(
        "{WENT_BACK}: this agent applied it up to revision {} ({batch}), but {found} (etcd wiped, or restored \
         from an older backup?); refusing to act rather than restart tokens",
        anchor.revision
    )
}

/// Whether etcd's head key (created at `head_created`, last written at `head_revision`; 0, 0:
/// absent) is still the head this agent saw: the same key, not created again, at or past the
/// newest batch it applied. An agent that saw no head yet checks nothing.
pub(crate) fn check_head(anchor: &Anchor, head_created: i64, head_revision: i64) -> Result<(), String> {
    if anchor.revision == 0 && anchor.head_created.is_none() {
        return Ok(());
    }
    if head_created == 0 {
        return Err(went_back(anchor, "etcd's log has no head any more"));
    }
    if let Some(created) = anchor.head_created
        && created != head_created
    {
        return Err(went_back(
            anchor,
            &format!(
                "etcd's log head was created again at revision {head_created} (this agent's was created at \
                 {created}): the prefix deleted and written anew"
            ),
        ));
    }
    if head_revision < anchor.revision {
        return Err(went_back(anchor, &format!("etcd's log ends at revision {head_revision}")));
    }
    Ok(())
}

/// [`check_head`] on a head read, then: the newest batch this agent applied is still in etcd at
/// its revision, or a snapshot covers it (snapshots delete the batches they hold).
pub(crate) fn check_anchor(anchor: &Anchor, read: &HeadRead) -> Result<(), String> {
    check_head(anchor, read.head_created, read.head_revision)?;
    let covered = read.snapshot_revision.is_some_and(|s| s >= anchor.revision);
    let kept = match &anchor.newest {
        // Nothing to look for: the head was checked.
        Newest::Unrecorded => true,
        Newest::Batch(_) => read.batch_revision == Some(anchor.revision) || covered,
        Newest::Snapshot => covered,
    };
    if anchor.revision == 0 || kept {
        return Ok(());
    }
    let snapshot = read
        .snapshot_revision
        .map_or_else(|| "there is no snapshot".to_owned(), |s| format!("its snapshot covers revision {s}"));
    Err(went_back(
        anchor,
        &format!("etcd's log ends at revision {} without that batch, and {snapshot}", read.head_revision),
    ))
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
