//! How far a follower applied a shared log, and the one check that the log still holds it
//! (docs/safety.md, "Fleet mode: a log that went back").
//!
//! Tokens are a projection of the log, so a log that lost its end (etcd's prefix deleted, etcd
//! restored from an older snapshot) would hand out again the tokens of what it lost. A follower
//! keeps an [`Anchor`] — the position of the newest record it applied, what is there, and the
//! log's incarnation (when its head was created) — and checks every view of the log against it
//! before it appends to it or acts on it: [`check_head`] for what an append's transaction can
//! compare, [`check_anchor`] for a head read. The fleet store (etcd revisions and batch keys)
//! and the simulator's rolled-back logs (log indices and record serials) both call these.

/// The start of every refusal of a log that went back.
pub const WENT_BACK: &str = "the log in etcd went back";

/// Where an anchor's position came from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Newest {
    /// Nothing applied yet, or an anchor recorded by an older tenure (which recorded no key):
    /// only the head is checked.
    #[default]
    Unrecorded,
    /// The record under this key (etcd: the batch key; the simulator: the record's serial).
    Batch(Vec<u8>),
    /// The snapshot that started the replica (or a reload).
    Snapshot,
}

/// How far a follower applied the log, as the log must still show it: the position of the newest
/// record it applied (an etcd revision, or a log index), what is there, and the position the
/// log's head was created at (its incarnation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Anchor {
    /// The position of the newest record (or snapshot) applied; 0: none.
    pub revision: i64,
    /// What is at that position.
    pub newest: Newest,
    /// The position the log's head was created at: the same for the log's whole life (only
    /// deleting the log deletes the head); `None` until the follower saw the head.
    pub head_created: Option<i64>,
}

impl Anchor {
    /// The key of the newest record applied, when known (a head read looks for it).
    #[must_use]
    pub fn batch_key(&self) -> Option<&[u8]> {
        match &self.newest {
            Newest::Batch(key) => Some(key),
            Newest::Snapshot | Newest::Unrecorded => None,
        }
    }
}

/// What a head read saw of the log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeadSeen {
    /// The position the head was created at (0: no head).
    pub head_created: i64,
    /// The position of the newest record (0: none yet).
    pub head_revision: i64,
    /// The position of the anchor's record ([`Anchor::batch_key`]), when it is there.
    pub batch_revision: Option<i64>,
    /// The position the newest snapshot covers, when there is one.
    pub snapshot_revision: Option<i64>,
}

/// The refusal of a log that went back: one line naming what the follower applied and what the
/// log shows (`found`).
fn went_back(anchor: &Anchor, found: &str) -> String {
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

/// Whether the log's head (created at `head_created`, last written at `head_revision`; 0, 0:
/// absent) is still the head the follower saw: the same head, not created again, at or past the
/// newest record it applied. A follower that saw no head yet checks nothing.
///
/// # Errors
///
/// The one-line refusal naming both positions.
pub fn check_head(anchor: &Anchor, head_created: i64, head_revision: i64) -> Result<(), String> {
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

/// [`check_head`] on a head read, then: the newest record the follower applied is still in the
/// log at its position, or a snapshot covers it (snapshots delete the records they hold).
///
/// # Errors
///
/// The one-line refusal naming both positions.
pub fn check_anchor(anchor: &Anchor, read: &HeadSeen) -> Result<(), String> {
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
