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

    /// Writes the term durably (see [`durable::replace`]), then reads it back as a restarted
    /// contender would.
    fn write_term(&self, term: u64) -> Result<(), BackendError> {
        let tmp = self.dir.join(format!("{}.term.tmp", self.election));
        durable::replace(&self.term_path(), &tmp, &self.dir, format!("{term}\n").as_bytes())
            .map_err(|e| unavailable(e.to_string()))?;
        let back = self.read_term()?;
        if back != term {
            let path = self.term_path();
            return Err(unavailable(format!("{}: wrote term {term}, read back {back}", path.display())));
        }
        Ok(())
    }

    fn take(&mut self) -> Result<Attempt, BackendError> {
        let path = self.lock_path();
        let mut lock = match durable::try_lock(&path).map_err(|e| unavailable(e.to_string()))? {
            durable::Lock::Held(lock) => lock,
            durable::Lock::Busy(mut lock) => {
                let mut holder = String::new();
                let _ = lock.read_to_string(&mut holder);
                let holder = holder.trim();
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

impl LeaseBackend for EmbeddedBackend {
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, BackendError> {
        match &self.held {
            // The OS lock stays ours while the file is open: renewal keeps the term.
            Some((_, term)) => Ok(Attempt::Leader { term: *term }),
            None => self.take(),
        }
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
