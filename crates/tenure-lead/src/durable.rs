//! Durable small files, shared by the embedded backend's term and the fenced sink's mark: an
//! atomic, fsync'd replacement, and an exclusive lock taken without waiting.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A file operation that failed.
#[derive(Debug)]
pub(crate) struct FileError {
    pub(crate) path: PathBuf,
    pub(crate) operation: &'static str,
    pub(crate) source: std::io::Error,
}

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.path.display(), self.operation, self.source)
    }
}

fn at(path: &Path, operation: &'static str) -> impl FnOnce(std::io::Error) -> FileError {
    let path = path.to_owned();
    move |source| FileError { path, operation, source }
}

/// Replaces `path` with `bytes` so that a crash leaves the old or the new content, never a mix:
/// writes `temporary` (in the same directory), fsyncs it, renames it over `path`, and fsyncs
/// `directory`. The caller reads it back as a restarted process would.
pub(crate) fn replace(
    path: &Path,
    temporary: &Path,
    directory: &Path,
    bytes: &[u8],
) -> Result<(), FileError> {
    let mut file = File::create(temporary).map_err(at(temporary, "create"))?;
    file.write_all(bytes).map_err(at(temporary, "write"))?;
    file.sync_all().map_err(at(temporary, "fsync"))?;
    drop(file);
    std::fs::rename(temporary, path).map_err(at(temporary, "rename"))?;
    File::open(directory).and_then(|d| d.sync_all()).map_err(at(directory, "fsync directory"))
}

/// The outcome of [`try_lock`].
pub(crate) enum Lock {
    /// This process holds the exclusive lock for as long as it keeps the file open.
    Held(File),
    /// Another holds it; the file is open for reading what its holder wrote.
    Busy(File),
}

/// Opens `path` (creating it, never truncating) and takes its exclusive lock without waiting.
/// The operating system drops the lock when the holder exits, however it exits.
pub(crate) fn try_lock(path: &Path) -> Result<Lock, FileError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(at(path, "open lock"))?;
    match file.try_lock() {
        Ok(()) => Ok(Lock::Held(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(Lock::Busy(file)),
        Err(std::fs::TryLockError::Error(source)) => Err(at(path, "lock")(source)),
    }
}
