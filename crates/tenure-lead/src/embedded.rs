//! The `embedded` backend: contenders on one host. An exclusive OS file lock is the lease (the
//! kernel releases it when the holder dies), and a durable, fsync'd term counter file is the
//! epoch line: read, incremented, written to a temporary file, fsync'd, renamed, and the
//! directory fsync'd, before the new leader reports its term.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use tenure_core::model::LeaderEpoch;

use crate::backend::{Attempt, BackendError, LeaseBackend};
use crate::durable;

/// Contenders for one election on one host.
#[derive(Debug)]
pub struct EmbeddedBackend {
    dir: PathBuf,
    election: String,
    name: String,
    held: Option<(File, LeaderEpoch)>,
    highest_seen: u64,
}

impl EmbeddedBackend {
    /// Campaigns in `election` as `name`, with the lock and term files in `dir`.
    pub fn new(dir: &Path, election: &str, name: &str) -> Result<Self, BackendError> {
        std::fs::create_dir_all(dir).map_err(|e| unavailable(format!("{}: {e}", dir.display())))?;
        Ok(Self {
            dir: dir.to_owned(),
            election: election.to_owned(),
            name: name.to_owned(),
            held: None,
            highest_seen: 0,
        })
    }

    fn lock_path(&self) -> PathBuf {
        self.dir.join(format!("{}.lock", self.election))
    }

    fn term_path(&self) -> PathBuf {
        self.dir.join(format!("{}.term", self.election))
    }

    fn read_term(&self) -> Result<u64, BackendError> {
        match std::fs::read_to_string(self.term_path()) {
            Ok(text) => text.trim().parse().map_err(|_| {
                unavailable(format!("{}: not a term counter: {text:?}", self.term_path().display()))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(unavailable(format!("{}: {e}", self.term_path().display()))),
        }
    }

    /// Writes the term durably (see [`durable::replace_atomically`]), then reads it back as a
    /// restarted contender would.
    fn write_term(&self, term: u64) -> Result<(), BackendError> {
        durable::replace_atomically(&self.term_path(), format!("{term}\n").as_bytes())
            .map_err(|e| unavailable(e.to_string()))?;
        let back = self.read_term()?;
        if back != term {
            let path = self.term_path();
            return Err(unavailable(format!("{}: wrote term {term}, read back {back}", path.display())));
        }
        Ok(())
    }

    /// Counts the term file's current term as seen (best effort: a follower does not fail on a
    /// term file it cannot read; the takeover that needs it will).
    fn note_current_term(&mut self) {
        if let Ok(current) = self.read_term() {
            self.highest_seen = self.highest_seen.max(current);
        }
    }

    fn take(&mut self) -> Result<Attempt, BackendError> {
        let path = self.lock_path();
        let mut lock = match durable::try_lock(&path).map_err(|e| unavailable(e.to_string()))? {
            durable::Lock::Held(lock) => lock,
            durable::Lock::Busy(mut lock) => {
                let mut holder = String::new();
                let _ = lock.read_to_string(&mut holder);
                let holder = holder.trim();
                self.note_current_term();
                return Ok(Attempt::Follower { holder: (!holder.is_empty()).then(|| holder.to_owned()) });
            }
        };
        let current = self.read_term()?;
        if current < self.highest_seen {
            return Err(BackendError::TermWentBack {
                backend: "embedded",
                seen: self.highest_seen,
                found: current,
            });
        }
        let term = crate::backend::next_term("embedded", current)?;
        self.write_term(term)?;
        self.highest_seen = term;
        lock.set_len(0)
            .and_then(|()| lock.write_all(self.name.as_bytes()))
            .and_then(|()| lock.sync_all())
            .map_err(|e| unavailable(format!("{}: {e}", path.display())))?;
        let epoch = LeaderEpoch::from_stored(term);
        self.held = Some((lock, epoch));
        Ok(Attempt::Leader { term: epoch })
    }
}

fn unavailable(message: String) -> BackendError {
    BackendError::Unavailable { backend: "embedded", message }
}

impl EmbeddedBackend {
    /// Whether the lease is still this contender's: the OS lock stays ours while the file is
    /// open, but the lock file can be deleted or replaced under it (an operator's `rm`, a cleanup
    /// job), after which another contender locks a new file and takes the next term. So renewal
    /// checks that the path still names the locked file and that the term file still holds our
    /// term.
    fn still_held(&self, lock: &File, term: LeaderEpoch) -> Result<bool, BackendError> {
        use std::os::unix::fs::MetadataExt as _;
        let path = self.lock_path();
        let ours = lock.metadata().map_err(|e| unavailable(format!("{}: {e}", path.display())))?;
        let named = match std::fs::metadata(&path) {
            Ok(named) => named,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(unavailable(format!("{}: {e}", path.display()))),
        };
        if (named.dev(), named.ino()) != (ours.dev(), ours.ino()) {
            return Ok(false);
        }
        Ok(self.read_term()? == term.get())
    }
}

impl LeaseBackend for EmbeddedBackend {
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, BackendError> {
        let Some((lock, term)) = &self.held else { return self.take() };
        if self.still_held(lock, *term)? {
            return Ok(Attempt::Leader { term: *term });
        }
        // Lost: another contender may lead under a new term already. Let the old lock go.
        self.note_current_term();
        self.held = None;
        Ok(Attempt::Follower { holder: None })
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        if let Some((lock, _)) = self.held.take() {
            let _ = lock.set_len(0);
            drop(lock);
        }
        Ok(())
    }

    fn name(&self) -> &'static str {
        "embedded"
    }

    fn highest_seen(&self) -> u64 {
        self.highest_seen
    }

    fn remember_at_least(&mut self, term: u64) {
        self.highest_seen = self.highest_seen.max(term);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tenure-embedded-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[tokio::test]
    async fn one_holder_at_a_time_and_every_takeover_increments_by_one() {
        let d = dir("takeover");
        let mut a = EmbeddedBackend::new(&d, "e", "a").expect("dir");
        let mut b = EmbeddedBackend::new(&d, "e", "b").expect("dir");
        assert_eq!(
            a.try_acquire_or_renew().await.expect("ok"),
            Attempt::Leader { term: LeaderEpoch::from_stored(1) }
        );
        assert_eq!(
            a.try_acquire_or_renew().await.expect("ok"),
            Attempt::Leader { term: LeaderEpoch::from_stored(1) }
        );
        assert_eq!(
            b.try_acquire_or_renew().await.expect("ok"),
            Attempt::Follower { holder: Some("a".into()) }
        );
        a.release().await.expect("ok");
        assert_eq!(
            b.try_acquire_or_renew().await.expect("ok"),
            Attempt::Leader { term: LeaderEpoch::from_stored(2) }
        );
        b.release().await.expect("ok");
        assert_eq!(
            a.try_acquire_or_renew().await.expect("ok"),
            Attempt::Leader { term: LeaderEpoch::from_stored(3) }
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[tokio::test]
    async fn a_term_file_restored_from_an_old_backup_is_refused() {
        let d = dir("backup");
        let mut a = EmbeddedBackend::new(&d, "e", "a").expect("dir");
        a.try_acquire_or_renew().await.expect("term 1");
        a.release().await.expect("ok");
        a.try_acquire_or_renew().await.expect("term 2");
        a.release().await.expect("ok");
        std::fs::write(d.join("e.term"), "1\n").expect("write");
        let err = a.try_acquire_or_renew().await.expect_err("refused");
        assert!(matches!(err, BackendError::TermWentBack { seen: 2, found: 1, .. }), "{err}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[tokio::test]
    async fn a_deleted_lock_file_makes_the_holder_step_down_before_a_second_leader_renews() {
        let d = dir("deleted-lock");
        let mut a = EmbeddedBackend::new(&d, "e", "a").expect("dir");
        let mut b = EmbeddedBackend::new(&d, "e", "b").expect("dir");
        assert!(matches!(a.try_acquire_or_renew().await.expect("ok"), Attempt::Leader { .. }));
        std::fs::remove_file(d.join("e.lock")).expect("rm");
        // b locks a new file under the same name and takes the next term …
        assert_eq!(
            b.try_acquire_or_renew().await.expect("ok"),
            Attempt::Leader { term: LeaderEpoch::from_stored(2) }
        );
        // … and a's next renewal sees its lock file gone: it steps down instead of renewing.
        assert_eq!(a.try_acquire_or_renew().await.expect("ok"), Attempt::Follower { holder: None });
        assert_eq!(
            a.try_acquire_or_renew().await.expect("ok"),
            Attempt::Follower { holder: Some("b".into()) }
        );
        assert_eq!(a.highest_seen(), 2);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[tokio::test]
    async fn a_lock_file_deleted_with_nobody_taking_over_still_ends_the_lead() {
        let d = dir("deleted-lock-alone");
        let mut a = EmbeddedBackend::new(&d, "e", "a").expect("dir");
        assert!(matches!(a.try_acquire_or_renew().await.expect("ok"), Attempt::Leader { .. }));
        std::fs::remove_file(d.join("e.lock")).expect("rm");
        assert_eq!(a.try_acquire_or_renew().await.expect("ok"), Attempt::Follower { holder: None });
        assert_eq!(
            a.try_acquire_or_renew().await.expect("ok"),
            Attempt::Leader { term: LeaderEpoch::from_stored(2) },
            "it takes the new file under a new term"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[tokio::test]
    async fn a_floor_from_the_state_directory_refuses_a_lower_term_before_writing() {
        let d = dir("floor");
        let mut a = EmbeddedBackend::new(&d, "e", "a").expect("dir");
        a.remember_at_least(7);
        std::fs::write(d.join("e.term"), "3\n").expect("write");
        let err = a.try_acquire_or_renew().await.expect_err("refused");
        assert!(matches!(err, BackendError::TermWentBack { seen: 7, found: 3, .. }), "{err}");
        assert_eq!(std::fs::read_to_string(d.join("e.term")).expect("read"), "3\n", "nothing written");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[tokio::test]
    async fn a_term_at_u64_max_is_refused_never_wrapped_to_zero() {
        let d = dir("overflow");
        let mut a = EmbeddedBackend::new(&d, "e", "a").expect("dir");
        std::fs::write(d.join("e.term"), format!("{}\n", u64::MAX)).expect("write");
        let err = a.try_acquire_or_renew().await.expect_err("refused");
        assert!(matches!(err, BackendError::TermOverflow { term: u64::MAX, .. }), "{err}");
        assert!(err.to_string().contains("no successor"), "{err}");
        let text = std::fs::read_to_string(d.join("e.term")).expect("read");
        assert_eq!(text.trim(), u64::MAX.to_string(), "the term file is left as it was");
        let _ = std::fs::remove_dir_all(&d);
    }
}
