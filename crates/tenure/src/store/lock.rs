//! One process owns a store: `<dir>/LOCK`, held with an exclusive advisory lock for the store's
//! lifetime ([`tenure_lead::durable::try_lock`], the one lock file of tenure: created `0600`).
//! The lock belongs to the open file description, so a second open refuses whether it comes from
//! another process or from this one.
//! The file says who holds it (pid, host, start time) so that the refusal can name the holder;
//! it is written only once the lock is held and the store has passed its checks, so a refused
//! open leaves it as it was.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::{LOCK_FILE_NAME, StoreError};

/// Most bytes of a lock file read to name its holder.
const HOLDER_TEXT_BYTES_MAX: u64 = 1024;

/// The held lock of one store directory. Dropping it releases the lock.
#[derive(Debug)]
pub(crate) struct StoreLock {
    /// The open, locked `LOCK` file.
    file: File,
    /// Its path.
    path: PathBuf,
}

impl StoreLock {
    /// Takes the lock of `dir` (which must exist), or refuses with [`StoreError::Locked`] naming
    /// the holder. Creates `LOCK` if absent; writes nothing into it (see [`Self::write_holder`]).
    pub(crate) fn acquire(dir: &Path) -> Result<Self, StoreError> {
        let path = dir.join(LOCK_FILE_NAME);
        match tenure_lead::durable::try_lock(&path)? {
            tenure_lead::durable::Lock::Held(file) => Ok(Self { file, path }),
            tenure_lead::durable::Lock::Busy(_) => {
                Err(StoreError::Locked { dir: dir.to_owned(), holder: read_holder(&path) })
            }
        }
    }

    /// Records this process as the holder: pid, host name and start time (unix ms), one line of
    /// JSON, synced.
    pub(crate) fn write_holder(&mut self) -> Result<(), StoreError> {
        let started_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
        let holder = serde_json::json!({
            "pid": std::process::id(),
            "host": host_name(),
            "startedAtMs": u64::try_from(started_ms).unwrap_or(u64::MAX),
        });
        let io = StoreError::io;
        self.file.set_len(0).map_err(io("truncate", &self.path))?;
        self.file.seek(SeekFrom::Start(0)).map_err(io("seek", &self.path))?;
        writeln!(self.file, "{holder}").map_err(io("write", &self.path))?;
        self.file.sync_data().map_err(io("sync", &self.path))
    }
}

/// What the lock file says about its holder, as one line for an error message.
fn read_holder(path: &Path) -> String {
    let mut text = String::new();
    let read = File::open(path).and_then(|f| f.take(HOLDER_TEXT_BYTES_MAX).read_to_string(&mut text));
    let unknown = || "another process (its lock file names no holder)".to_owned();
    if read.is_err() {
        return unknown();
    }
    let Ok(holder) = serde_json::from_str::<serde_json::Value>(text.trim()) else { return unknown() };
    let field = |name: &str| holder.get(name).map(ToString::to_string).unwrap_or_else(|| "?".into());
    format!(
        "pid {} on host {} (started at unix ms {})",
        field("pid"),
        holder.get("host").and_then(|h| h.as_str()).unwrap_or("?"),
        field("startedAtMs")
    )
}

/// The identity of `dir`'s lock file, `device:inode` (`None` when it cannot be read): the same
/// for every path and mount namespace the one file is seen through, different for a copy. The
/// fleet's node claims name it.
#[cfg(feature = "etcd")]
pub(crate) fn lock_file_id(dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(dir.join(LOCK_FILE_NAME)).ok()?;
    Some(format!("{}:{}", meta.dev(), meta.ino()))
}

/// This boot's id, from the kernel (`/proc/sys/kernel/random/boot_id`): a process id means one
/// process only together with it.
pub(crate) fn boot_id() -> Result<String, String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|id| id.trim().to_owned())
        .map_err(|e| format!("/proc/sys/kernel/random/boot_id: {e}"))
}

/// This machine's host name, from the kernel (no libc call needed), or `unknown`.
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".into())
}
