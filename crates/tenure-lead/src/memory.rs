//! The highest term a node has seen, per election, kept durably in its state directory (SPEC 1,
//! SPEC 10 `--state-dir`), so that a restarted node refuses a store whose term went back — a wiped
//! etcd prefix, a recreated Lease, a term file restored from a backup — instead of leading again
//! from term 1 under epochs that fenced sinks may already have seen.
//!
//! One file per (backend, scope, election), `<state-dir>/terms/<backend>-<election>-<hash>.term`,
//! where the scope is where the election lives (the embedded directory, the etcd prefix, the
//! Kubernetes namespace) and `<hash>` is the first 16 hex digits of its SHA-256: two elections of
//! one name in two places never share a floor. The file holds the term on its first line and, for
//! the operator, the backend, scope and election on a comment line. It is replaced atomically and
//! fsync'd ([`durable::replace_atomically`]) under an exclusive lock on a sidecar `.lock` file ([`durable::lock`]), and
//! only ever raised: contenders on one host may share a state directory.
//!
//! [`Remembering`] wraps any backend: it seeds the backend with the floor before the first
//! attempt ([`LeaseBackend::remember_at_least`]) and writes every higher term the backend has
//! seen *before* the attempt that saw it returns — a term is never led under before it is
//! durable here.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::backend::{Attempt, BackendError, LeaseBackend};
use crate::durable;

/// The durable floor of one election's term on this node.
#[derive(Debug)]
pub struct TermMemory {
    path: PathBuf,
    lock_path: PathBuf,
    comment: String,
    term: u64,
}

fn unavailable(message: String) -> BackendError {
    BackendError::Unavailable { backend: "state-dir", message }
}

impl TermMemory {
    /// Opens (creating the directory, not the file) the memory of `election` on `backend` at
    /// `scope`, under `state_dir`. A missing file is term 0; a file that is not a term is refused
    /// naming it (nothing is guessed: guessing low could lower the epoch).
    pub fn open(state_dir: &Path, backend: &str, scope: &str, election: &str) -> Result<Self, BackendError> {
        let dir = state_dir.join("terms");
        std::fs::create_dir_all(&dir).map_err(|e| unavailable(format!("{}: create: {e}", dir.display())))?;
        let digest = Sha256::digest(scope.as_bytes());
        let hash: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        let stem = format!("{backend}-{election}-{hash}");
        let mut memory = Self {
            path: dir.join(format!("{stem}.term")),
            lock_path: dir.join(format!("{stem}.lock")),
            comment: format!("# highest term seen: backend {backend}, scope {scope}, election {election}"),
            term: 0,
        };
        memory.term = memory.read()?;
        Ok(memory)
    }

    /// The highest term recorded.
    #[must_use]
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The file that holds it.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> Result<u64, BackendError> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => {
                let first = text.lines().next().unwrap_or_default().trim();
                first.parse().map_err(|_| {
                    unavailable(format!("{}: first line is not a term: {first:?}", self.path.display()))
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(unavailable(format!("{}: read: {e}", self.path.display()))),
        }
    }

    /// Records `term` if it is above what the file holds (re-read under the lock, so a raise by
    /// another process on this host is never lowered). Returns once it is durable.
    pub fn raise(&mut self, term: u64) -> Result<(), BackendError> {
        if term <= self.term {
            return Ok(());
        }
        let lock = durable::lock(&self.lock_path).map_err(|e| unavailable(e.to_string()))?;
        let stored = self.read()?;
        if term > stored {
            let text = format!("{term}\n{}\n", self.comment);
            durable::replace_atomically(&self.path, text.as_bytes())
                .map_err(|e| unavailable(e.to_string()))?;
        }
        drop(lock);
        self.term = self.term.max(stored).max(term);
        Ok(())
    }
}

/// A backend whose highest seen term survives restarts (see the [module documentation](self)).
#[derive(Debug)]
pub struct Remembering<B> {
    inner: B,
    memory: TermMemory,
}

impl<B: LeaseBackend> Remembering<B> {
    /// Seeds `inner` with the floor `memory` holds.
    pub fn new(mut inner: B, memory: TermMemory) -> Self {
        inner.remember_at_least(memory.term());
        Self { inner, memory }
    }

    /// The memory file.
    #[must_use]
    pub fn memory(&self) -> &TermMemory {
        &self.memory
    }
}

impl<B: LeaseBackend> LeaseBackend for Remembering<B> {
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, BackendError> {
        let attempt = self.inner.try_acquire_or_renew().await;
        let led = match &attempt {
            Ok(Attempt::Leader { term }) => term.get(),
            _ => 0,
        };
        let floor = self.memory.term();
        if let Ok(Attempt::Leader { term }) = &attempt
            && term.get() < floor
        {
            // The backend ignored the floor: refuse before the term is published.
            return Err(BackendError::TermWentBack {
                backend: self.inner.name(),
                seen: floor,
                found: term.get(),
            });
        }
        let seen = self.inner.highest_seen().max(led);
        if seen > floor
            && let Err(error) = self.memory.raise(seen)
        {
            if led > 0 {
                // Not durable, so not led under; and a lease kept while every later attempt
                // fails the same way would stop the whole election: give it up.
                let _ = self.inner.release().await;
            }
            return Err(error);
        }
        attempt
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        self.inner.release().await
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn highest_seen(&self) -> u64 {
        self.inner.highest_seen().max(self.memory.term())
    }

    fn remember_at_least(&mut self, term: u64) {
        self.inner.remember_at_least(term);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tenure-memory-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_term_is_only_ever_raised_and_survives_reopening() {
        let d = dir("raise");
        let mut m = TermMemory::open(&d, "etcd", "/tenure", "vip").expect("opens");
        assert_eq!(m.term(), 0, "no file: nothing seen");
        m.raise(5).expect("durable");
        m.raise(3).expect("a lower term is not written");
        let again = TermMemory::open(&d, "etcd", "/tenure", "vip").expect("opens");
        assert_eq!(again.term(), 5);
        let text = std::fs::read_to_string(again.path()).expect("read");
        assert!(
            text.starts_with("5\n# highest term seen: backend etcd, scope /tenure, election vip"),
            "{text}"
        );
        let elsewhere = TermMemory::open(&d, "etcd", "/other", "vip").expect("opens");
        assert_eq!(elsewhere.term(), 0, "another scope has its own floor");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_raise_by_another_process_is_never_lowered() {
        let d = dir("shared");
        let mut a = TermMemory::open(&d, "embedded", "/x", "e").expect("opens");
        let mut b = TermMemory::open(&d, "embedded", "/x", "e").expect("opens");
        a.raise(9).expect("durable");
        b.raise(4).expect("durable");
        assert_eq!(b.term(), 9, "b re-read 9 under the lock");
        assert_eq!(TermMemory::open(&d, "embedded", "/x", "e").expect("opens").term(), 9);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A backend that leads under `term` (ignoring any floor) and counts its releases.
    struct Fixed {
        term: u64,
        releases: u32,
    }

    impl LeaseBackend for Fixed {
        async fn try_acquire_or_renew(&mut self) -> Result<Attempt, BackendError> {
            Ok(Attempt::Leader { term: tenure_core::model::LeaderEpoch::from_stored(self.term) })
        }
        async fn release(&mut self) -> Result<(), BackendError> {
            self.releases += 1;
            Ok(())
        }
        fn name(&self) -> &'static str {
            "fixed"
        }
    }

    #[tokio::test]
    async fn a_term_that_cannot_be_made_durable_is_not_led_under_and_the_lease_is_given_up() {
        let d = dir("not-durable");
        let memory = TermMemory::open(&d, "fixed", "/x", "e").expect("opens");
        // The temporary file's path is a directory: the replace fails, even for root.
        std::fs::create_dir_all(durable::temporary_path(memory.path())).expect("mkdir");
        let mut backend = Remembering::new(Fixed { term: 4, releases: 0 }, memory);
        let err = backend.try_acquire_or_renew().await.expect_err("not durable");
        assert!(matches!(err, BackendError::Unavailable { .. }), "{err}");
        assert_eq!(backend.inner.releases, 1, "the lease is released, not held while failing");
        assert_eq!(backend.memory().term(), 0);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[tokio::test]
    async fn a_backend_that_ignores_the_floor_is_refused_before_its_term_is_published() {
        let d = dir("backstop");
        let mut memory = TermMemory::open(&d, "fixed", "/x", "e").expect("opens");
        memory.raise(9).expect("durable");
        let mut backend = Remembering::new(Fixed { term: 3, releases: 0 }, memory);
        let err = backend.try_acquire_or_renew().await.expect_err("refused");
        assert!(matches!(err, BackendError::TermWentBack { seen: 9, found: 3, .. }), "{err}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_file_that_is_not_a_term_is_refused_naming_it() {
        let d = dir("corrupt");
        let m = TermMemory::open(&d, "etcd", "/tenure", "vip").expect("opens");
        std::fs::write(m.path(), "five\n").expect("write");
        let err = TermMemory::open(&d, "etcd", "/tenure", "vip").expect_err("refused");
        assert!(err.to_string().contains("first line is not a term"), "{err}");
        assert!(err.to_string().contains(".term"), "{err}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
