//! The mark file: its encoding, reading it back, and the operator's reset.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use tenure_core::model::LeaderEpoch;

use super::{SinkError, hex};
use crate::durable;

/// The largest mark file a sink reads; anything longer is corrupt.
pub const MARK_FILE_LENGTH_MAX_BYTES: u64 = 4_096;

const MARK_FILE_HEADER: &str = "tenure-fenced-sink v1";

/// The files of a mark: the mark and its lock beside it.
#[derive(Debug)]
pub(super) struct MarkPaths {
    pub(super) mark: PathBuf,
    pub(super) lock: PathBuf,
}

impl MarkPaths {
    pub(super) fn of(path: &Path) -> Self {
        Self { mark: path.to_owned(), lock: with_suffix(path, ".lock") }
    }

    /// Takes the lock every sink of this mark holds while open; [`SinkError::InUse`] if taken.
    pub(super) fn lock(&self) -> Result<File, SinkError> {
        match durable::try_lock(&self.lock)? {
            durable::Lock::Held(lock) => Ok(lock),
            durable::Lock::Busy(_) => Err(SinkError::InUse { path: self.lock.clone() }),
        }
    }

    /// Writes `epoch` durably (temporary file, fsync, rename, fsync of the directory), then
    /// reads it back as a restarted sink would. The caller holds the lock.
    pub(super) fn write(&self, epoch: LeaderEpoch) -> Result<(), SinkError> {
        self.replace(epoch)?;
        self.check_read_back(epoch)
    }

    /// Writes `epoch` durably. The caller holds the lock.
    pub(super) fn replace(&self, epoch: LeaderEpoch) -> Result<(), SinkError> {
        Ok(durable::replace_atomically(&self.mark, encode_mark(epoch).as_bytes())?)
    }

    /// Reads the mark back and checks that it is `epoch`.
    pub(super) fn check_read_back(&self, epoch: LeaderEpoch) -> Result<(), SinkError> {
        let read = read_stored(&self.mark)?.unwrap_or(LeaderEpoch::NEVER);
        if read != epoch {
            return Err(SinkError::ReadBackMismatch {
                path: self.mark.clone(),
                wrote: epoch.get(),
                read: read.get(),
            });
        }
        Ok(())
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The high-water epoch stored at `path`, read without taking the lock (a running sink's mark
/// can be shown). A missing file is [`SinkError::Missing`]; a damaged one [`SinkError::Corrupt`].
pub fn read_mark(path: &Path) -> Result<LeaderEpoch, SinkError> {
    read_stored(path)?.ok_or_else(|| SinkError::Missing { path: path.to_owned() })
}

/// What a mark file held before [`reset_mark`] replaced it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PreviousMark {
    /// There was no mark file.
    Missing,
    /// The file was damaged; the reason.
    Corrupt {
        /// What was wrong with it.
        reason: String,
    },
    /// The epoch it held.
    Epoch(LeaderEpoch),
}

/// Replaces the mark at `path` with `to`, whatever it held (missing and damaged included): the
/// operator's recovery when a stamp raised the mark past every real term (SPEC 8, see
/// `docs/leadership.md`). It **reopens fencing**: the sink will admit any epoch from `to` up,
/// including a deposed leader's. It takes the sink's lock, so it refuses
/// ([`SinkError::InUse`]) while a sink has the mark open; other I/O errors leave the file as it
/// was (the write is a rename).
pub fn reset_mark(path: &Path, to: LeaderEpoch) -> Result<PreviousMark, SinkError> {
    let paths = MarkPaths::of(path);
    let _lock = paths.lock()?;
    let previous = match read_stored(path) {
        Ok(Some(epoch)) => PreviousMark::Epoch(epoch),
        Ok(None) => PreviousMark::Missing,
        Err(SinkError::Corrupt { reason, .. }) => PreviousMark::Corrupt { reason },
        Err(other) => return Err(other),
    };
    paths.write(to)?;
    Ok(previous)
}

fn mark_body(epoch: LeaderEpoch) -> String {
    format!("{MARK_FILE_HEADER}\nhigh-water-epoch {}\n", epoch.get())
}

pub(super) fn encode_mark(epoch: LeaderEpoch) -> String {
    let body = mark_body(epoch);
    let sum = hex(&Sha256::digest(body.as_bytes()));
    format!("{body}sha256 {sum}\n")
}

/// The stored mark; `None` if the file does not exist.
pub(super) fn read_stored(path: &Path) -> Result<Option<LeaderEpoch>, SinkError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(SinkError::Io { path: path.to_owned(), operation: "open", source }),
    };
    let mut bytes = Vec::new();
    file.take(MARK_FILE_LENGTH_MAX_BYTES + 1).read_to_end(&mut bytes).map_err(|source| SinkError::Io {
        path: path.to_owned(),
        operation: "read",
        source,
    })?;
    let corrupt = |reason: String| SinkError::Corrupt { path: path.to_owned(), reason };
    if bytes.len() as u64 > MARK_FILE_LENGTH_MAX_BYTES {
        return Err(corrupt(format!("longer than {MARK_FILE_LENGTH_MAX_BYTES} bytes")));
    }
    let text = String::from_utf8(bytes).map_err(|_| corrupt("not UTF-8".into()))?;
    decode_mark(&text).map(Some).map_err(corrupt)
}

pub(super) fn decode_mark(text: &str) -> Result<LeaderEpoch, String> {
    let Some(lines) = text.strip_suffix('\n') else {
        return Err("does not end with a newline (truncated?)".into());
    };
    let lines: Vec<&str> = lines.split('\n').collect();
    let [header, mark, sum] = lines.as_slice() else {
        return Err(format!("{} lines, expected 3", lines.len()));
    };
    if *header != MARK_FILE_HEADER {
        return Err(format!("first line {header:?}, expected {MARK_FILE_HEADER:?}"));
    }
    let digits = mark.strip_prefix("high-water-epoch ").ok_or_else(|| format!("bad mark line {mark:?}"))?;
    let epoch = digits.parse::<u64>().map_err(|_| format!("bad epoch {digits:?}"))?;
    let stored_sum = sum.strip_prefix("sha256 ").ok_or_else(|| format!("bad checksum line {sum:?}"))?;
    let epoch = LeaderEpoch::from_stored(epoch);
    // `{digits}` re-rendered must be the canonical form, or the checksum cannot match anyway.
    let expected = hex(&Sha256::digest(mark_body(epoch).as_bytes()));
    if stored_sum != expected {
        return Err("checksum mismatch".into());
    }
    Ok(epoch)
}
