//! Durable small files, the one implementation every part of tenure uses: an atomic, fsync'd
//! replacement of a file ([`replace_atomically`], [`AtomicFile`] to stream one), and an exclusive
//! lock file ([`try_lock`], [`lock`]). The embedded election backend's term and lock, the fenced
//! sink's mark and lock, the term memory, and in the `tenure` binary the store's identity file,
//! `LOCK` and backups, the hook records and keepalived's remembered state all go through here.
//!
//! # Atomic replace
//!
//! The new content goes to a temporary file beside the target ([`temporary_path`]: `.<name>.tmp-<pid>`,
//! in the same directory so that the rename cannot cross file systems), which is fsynced, renamed
//! over the target, and the directory fsynced: a crash or power loss leaves the old content or the
//! new, never a mix and never nothing. A failed write removes the temporary file and leaves the
//! target as it was. One process writes one path at a time (every caller holds a lock or owns the
//! path): two writers of one path in one process would share the temporary file.
//!
//! # Lock files
//!
//! An exclusive advisory lock ([`std::fs::File::try_lock`], `flock` on Linux) on a file opened
//! read-write, created if missing (never truncated) with mode `0600` on unix: `flock` needs only
//! an open file, so a lock file others could open is a lock others could hold. The lock belongs to
//! the open file description: a second open refuses whether it comes from another process or from
//! this one, and the kernel drops it when its holder exits, however it exits.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A file operation that failed: `path: operation: source` (the operation is one of `create`,
/// `write`, `fsync`, `rename`, `fsync directory`, `open`, `lock`).
#[derive(Debug)]
pub struct FileError {
    /// The file or directory.
    pub path: PathBuf,
    /// What was being done.
    pub operation: &'static str,
    /// The operating system's error.
    pub source: std::io::Error,
}

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.path.display(), self.operation, self.source)
    }
}

impl std::error::Error for FileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

fn at(path: &Path, operation: &'static str) -> impl FnOnce(std::io::Error) -> FileError {
    let path = path.to_owned();
    move |source| FileError { path, operation, source }
}

/// The temporary file [`replace_atomically`] and [`AtomicFile`] write before renaming it over
/// `path`: `.<name>.tmp-<pid>` in `path`'s directory.
#[must_use]
pub fn temporary_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// Replaces `path` with `bytes` so that a crash leaves the old or the new content, never a mix
/// (see the [module documentation](self)). On error the target is as it was and no temporary
/// file is left.
pub fn replace_atomically(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    let mut file = AtomicFile::create(path)?;
    let temporary = file.temporary.clone();
    file.file().write_all(bytes).map_err(at(&temporary, "write"))?;
    file.commit()
}

/// A file being written beside its final path (at [`temporary_path`]), renamed over it by
/// [`AtomicFile::commit`]. Dropped without a commit, the temporary file is removed and the final
/// path is untouched.
#[derive(Debug)]
pub struct AtomicFile {
    /// The temporary file, until the commit takes it.
    file: Option<File>,
    /// Its path.
    temporary: PathBuf,
    /// The final path.
    path: PathBuf,
}

impl AtomicFile {
    /// Creates (truncating) the temporary file of `path`.
    pub fn create(path: &Path) -> Result<Self, FileError> {
        let temporary = temporary_path(path);
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temporary)
            .map_err(at(&temporary, "create"))?;
        Ok(Self { file: Some(file), temporary, path: path.to_owned() })
    }

    /// The temporary file, to write into.
    pub fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("the file is taken only by commit, which consumes self")
    }

    /// Fsyncs the temporary file, renames it over the final path, fsyncs the directory. On an
    /// error before the rename the temporary file is removed.
    pub fn commit(mut self) -> Result<(), FileError> {
        let file = self.file.as_ref().expect("commit runs once");
        file.sync_all().map_err(at(&self.temporary, "fsync"))?;
        std::fs::rename(&self.temporary, &self.path).map_err(at(&self.temporary, "rename"))?;
        // Renamed: nothing left to remove.
        self.file = None;
        sync_parent_dir(&self.path)
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            // Not committed: leave the final path as it was. A failure to remove only leaves a
            // hidden temporary file behind.
            let _ = std::fs::remove_file(&self.temporary);
        }
    }
}

/// Fsyncs the directory holding `path` (`.` for a bare name), so that a rename or a creation in
/// it is durable.
pub fn sync_parent_dir(path: &Path) -> Result<(), FileError> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    File::open(&dir).and_then(|d| d.sync_all()).map_err(at(&dir, "fsync directory"))
}

/// The outcome of [`try_lock`].
#[derive(Debug)]
pub enum Lock {
    /// This process holds the exclusive lock for as long as it keeps the file open.
    Held(File),
    /// Another holds it; the file is open for reading what its holder wrote.
    Busy(File),
}

/// Opens the lock file `path` as the [module documentation](self) says.
fn open_lock(path: &Path) -> Result<File, FileError> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path).map_err(at(path, "open"))
}

/// Opens `path` (creating it, never truncating) and takes its exclusive lock without waiting.
pub fn try_lock(path: &Path) -> Result<Lock, FileError> {
    let file = open_lock(path)?;
    match file.try_lock() {
        Ok(()) => Ok(Lock::Held(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(Lock::Busy(file)),
        Err(std::fs::TryLockError::Error(source)) => Err(at(path, "lock")(source)),
    }
}

/// Opens `path` (creating it, never truncating) and takes its exclusive lock, waiting for a
/// holder to let it go.
pub fn lock(path: &Path) -> Result<File, FileError> {
    let file = open_lock(path)?;
    file.lock().map_err(at(path, "lock"))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tenure-durable-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        d
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("read dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_replace_writes_the_new_content_and_leaves_no_temporary_file() {
        let d = dir("replace");
        let path = d.join("state");
        replace_atomically(&path, b"old\n").expect("first write");
        assert_eq!(std::fs::read(&path).expect("read"), b"old\n");
        replace_atomically(&path, b"new, and longer\n").expect("replace");
        assert_eq!(std::fs::read(&path).expect("read"), b"new, and longer\n");
        replace_atomically(&path, b"s\n").expect("replace with less");
        assert_eq!(std::fs::read(&path).expect("read"), b"s\n", "no tail of the longer content");
        assert_eq!(names(&d), ["state"], "only the target is left");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_failed_replace_leaves_the_old_file_and_no_temporary_file() {
        let d = dir("fail");
        let path = d.join("state");
        replace_atomically(&path, b"old\n").expect("first write");
        // The rename fails, even for root: the target is a non-empty directory.
        let blocked = d.join("blocked");
        std::fs::create_dir_all(blocked.join("inside")).expect("mkdir");
        let err = replace_atomically(&blocked, b"new\n").expect_err("rename over a non-empty directory");
        assert_eq!(err.operation, "rename", "{err}");
        assert!(blocked.join("inside").is_dir(), "the target is as it was");
        // The temporary file's path is a directory: the create fails, the old file stays.
        std::fs::create_dir_all(temporary_path(&path)).expect("mkdir");
        let err = replace_atomically(&path, b"new\n").expect_err("create over a directory");
        assert_eq!(err.operation, "create", "{err}");
        assert_eq!(std::fs::read(&path).expect("read"), b"old\n", "the old content stays");
        std::fs::remove_dir(temporary_path(&path)).expect("rmdir");
        assert_eq!(names(&d), ["blocked", "state"], "no temporary file is left behind");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn an_uncommitted_atomic_file_leaves_the_target_untouched() {
        let d = dir("drop");
        let path = d.join("backup");
        replace_atomically(&path, b"old\n").expect("first write");
        let mut file = AtomicFile::create(&path).expect("create");
        file.file().write_all(b"half of a new").expect("write");
        drop(file);
        assert_eq!(std::fs::read(&path).expect("read"), b"old\n");
        assert_eq!(names(&d), ["backup"]);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_lock_is_exclusive_per_open_and_released_on_close() {
        let d = dir("lock");
        let path = d.join("x.lock");
        let held = match try_lock(&path).expect("lock") {
            Lock::Held(file) => file,
            Lock::Busy(_) => panic!("a fresh lock file is free"),
        };
        assert!(matches!(try_lock(&path).expect("open"), Lock::Busy(_)), "a second open refuses");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "only its owner may open it");
        }
        drop(held);
        assert!(matches!(try_lock(&path).expect("open"), Lock::Held(_)), "free once closed");
        let _ = std::fs::remove_dir_all(&d);
    }
}
