//! Reading a backup file (format in `backup.rs`): the one parser, used by `tenure store restore`
//! and by `tenure replay BACKUP`.
//!
//! [`BackupReader::open`] reads and checks the header; [`BackupReader::next_record`] hands out
//! every line after it decoded (the codec's event, journal entry or high-water change, with the
//! stored bytes kept for a restore), and checks, as it goes, what a whole backup must be: log
//! indices rising, a mark that is a `raise-high-water` change, an end line counting the lines
//! before it, a last log index equal to the header's, nothing after the end line. A file cut
//! short (no end line, a last line without its newline) or a line that does not decode is a
//! [`StoreError::BadBackup`] naming the file and the 1-based line.

use std::fs::File;
use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tenure_core::codec;
use tenure_core::journal::{JournalChange, JournalEntry};
use tenure_core::log::Event;

use super::StoreError;
use super::identity::{RestoreRecord, StoreIdentity, decode_record};

/// The `format` of a backup's header.
pub(super) const BACKUP_FORMAT: &str = "tenure-store-backup";

/// Longest backup line read, in bytes: a log record (1 MiB at most) with its framing.
const BACKUP_LINE_BYTES_MAX: usize = 2 * 1024 * 1024;

/// The header line of a backup.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackupHeader {
    /// Always `tenure-store-backup`.
    pub format: String,
    /// The store's cluster id.
    pub cluster_id: String,
    /// The highest log index in the snapshot.
    pub highest_index: u64,
    /// The highest token the store had recorded at the snapshot.
    pub highest_token: u64,
    /// When the backup was taken, unix ms.
    pub created_at_ms: u64,
    /// The restores the store had applied.
    pub restores: Vec<RestoreRecord>,
    /// The fleet the agent that wrote the backup projects the log over
    /// ([`tenure_core::fleet_spec::fleet_text`] of its nodes, peers and providers); absent from a
    /// backup taken with only `--store-dir` (no config) or by an older tenure. `tenure replay`
    /// refuses a config whose fleet differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<String>,
}

impl BackupHeader {
    /// The store identity the header describes.
    #[must_use]
    pub fn identity(&self) -> StoreIdentity {
        StoreIdentity {
            cluster_id: self.cluster_id.clone(),
            highest_index: self.highest_index,
            highest_token: self.highest_token,
            restores: self.restores.clone(),
        }
    }
}

/// A line after the header, as written.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase", deny_unknown_fields)]
enum BackupLine<'a> {
    /// A log record.
    Log {
        /// Its index.
        index: u64,
        /// The codec event.
        #[serde(borrow)]
        record: &'a RawValue,
    },
    /// A journal entry.
    Entry {
        /// Its node.
        node: String,
        /// The codec journal entry.
        #[serde(borrow)]
        record: &'a RawValue,
    },
    /// A high-water row.
    Mark {
        /// Its node.
        node: String,
        /// The codec `raise-high-water` change.
        #[serde(borrow)]
        record: &'a RawValue,
    },
    /// A node's counters.
    Counters {
        /// The node.
        node: String,
        /// Its last sequence number.
        last_seq: u64,
        /// Its executions.
        executions: u64,
    },
    /// The end: how many lines came between the header and this one.
    End {
        /// The count.
        records: u64,
    },
}

/// One line of a backup after its header, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackupRecord {
    /// A log record.
    Log {
        /// Its index (rising through the file).
        index: u64,
        /// The event.
        event: Event,
        /// The stored bytes, as the backup carries them.
        stored: Vec<u8>,
    },
    /// A journal entry of `node`.
    Entry {
        /// The journaling node.
        node: String,
        /// The entry.
        entry: JournalEntry,
        /// The stored bytes.
        stored: Vec<u8>,
    },
    /// A high-water row of `node`: always a `raise-high-water` change.
    Mark {
        /// The node.
        node: String,
        /// The change.
        change: JournalChange,
        /// The stored bytes.
        stored: Vec<u8>,
    },
    /// A node's counters.
    Counters {
        /// The node.
        node: String,
        /// Its last sequence number.
        last_seq: u64,
        /// Its executions.
        executions: u64,
    },
}

/// Reads a backup file line by line, checking it (module doc).
pub struct BackupReader {
    path: PathBuf,
    reader: BufReader<File>,
    text: String,
    line: u64,
    header: BackupHeader,
    last_index: u64,
    records: u64,
    ended: bool,
}

/// Whether `first_line` is a backup's header (what `tenure replay` tells a backup from a scenario
/// by): a JSON object naming the backup format. A header cut short still counts, so that its
/// error comes from the backup reader.
#[must_use]
pub fn is_backup_header(first_line: &str) -> bool {
    let line = first_line.trim_start();
    line.starts_with('{') && line.contains(&format!("\"format\":\"{BACKUP_FORMAT}\""))
}

impl BackupReader {
    /// Opens `path` and reads its header: a file that is not a backup of this format is refused
    /// with line 1.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let file = File::open(path).map_err(StoreError::io("open", path))?;
        let mut reader = Self {
            path: path.to_owned(),
            reader: BufReader::new(file),
            text: String::new(),
            line: 0,
            header: BackupHeader {
                format: String::new(),
                cluster_id: String::new(),
                highest_index: 0,
                highest_token: 0,
                created_at_ms: 0,
                restores: Vec::new(),
                fleet: None,
            },
            last_index: 0,
            records: 0,
            ended: false,
        };
        if !reader.read_line()? {
            return Err(reader.bad(1, "empty file: no header".into()));
        }
        let header: BackupHeader = decode_record(reader.text.trim_end().as_bytes())
            .map_err(|e| reader.bad(1, format!("header: {e}")))?;
        if header.format != BACKUP_FORMAT {
            return Err(reader.bad(1, format!("header: format `{}`, not `{BACKUP_FORMAT}`", header.format)));
        }
        header.identity().check().map_err(|reason| reader.bad(1, format!("header: {reason}")))?;
        reader.header = header;
        Ok(reader)
    }

    /// The header.
    #[must_use]
    pub fn header(&self) -> &BackupHeader {
        &self.header
    }

    /// The 1-based number of the line read last.
    #[must_use]
    pub fn line(&self) -> u64 {
        self.line
    }

    /// The file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A [`StoreError::BadBackup`] at `line`.
    #[must_use]
    pub fn bad(&self, line: u64, reason: String) -> StoreError {
        StoreError::BadBackup { path: self.path.clone(), line, reason }
    }

    /// Reads the next line into `text`; false at the end of the file.
    fn read_line(&mut self) -> Result<bool, StoreError> {
        self.text.clear();
        self.line += 1;
        let limit = u64::try_from(BACKUP_LINE_BYTES_MAX).unwrap_or(u64::MAX) + 1;
        let read = (&mut self.reader)
            .take(limit)
            .read_line(&mut self.text)
            .map_err(|e| self.bad(self.line, e.to_string()))?;
        if read > BACKUP_LINE_BYTES_MAX {
            return Err(self.bad(self.line, format!("a line longer than {BACKUP_LINE_BYTES_MAX} bytes")));
        }
        if read > 0 && !self.text.ends_with('\n') {
            return Err(
                self.bad(self.line, "the last line is cut short (no newline): the file is truncated".into())
            );
        }
        Ok(read > 0)
    }

    /// The next record, or `None` after the end line (once the whole file checked out).
    pub fn next_record(&mut self) -> Result<Option<BackupRecord>, StoreError> {
        if self.ended {
            return Ok(None);
        }
        if !self.read_line()? {
            return Err(self.bad(self.line, "the file ends without its end line: it is truncated".into()));
        }
        let here = self.line;
        let parsed: BackupLine<'_> =
            serde_json::from_str(self.text.trim_end()).map_err(|e| self.bad(here, e.to_string()))?;
        let record = match parsed {
            BackupLine::Log { index, record } => {
                if index <= self.last_index {
                    let reason = format!("log index {index} does not follow {}", self.last_index);
                    return Err(self.bad(here, reason));
                }
                let stored = record.get().as_bytes().to_vec();
                let event = codec::decode_event(&stored).map_err(|e| self.bad(here, e.to_string()))?;
                self.last_index = index;
                BackupRecord::Log { index, event, stored }
            }
            BackupLine::Entry { node, record } => {
                let stored = record.get().as_bytes().to_vec();
                let entry =
                    codec::decode_journal_entry(&stored).map_err(|e| self.bad(here, e.to_string()))?;
                BackupRecord::Entry { node, entry, stored }
            }
            BackupLine::Mark { node, record } => {
                let stored = record.get().as_bytes().to_vec();
                let change =
                    codec::decode_journal_change(&stored).map_err(|e| self.bad(here, e.to_string()))?;
                if !matches!(change, JournalChange::RaiseHighWater { .. }) {
                    return Err(self.bad(here, "a mark that is not a raise-high-water change".into()));
                }
                BackupRecord::Mark { node, change, stored }
            }
            BackupLine::Counters { node, last_seq, executions } => {
                BackupRecord::Counters { node, last_seq, executions }
            }
            BackupLine::End { records: counted } => {
                self.finish(here, counted)?;
                return Ok(None);
            }
        };
        self.records += 1;
        Ok(Some(record))
    }

    /// The end line at `here` counts `counted` records: checks the count, the header's highest
    /// index and that nothing follows.
    fn finish(&mut self, here: u64, counted: u64) -> Result<(), StoreError> {
        if counted != self.records {
            let reason = format!("the end line counts {counted} records, the file holds {}", self.records);
            return Err(self.bad(here, reason));
        }
        if self.last_index != self.header.highest_index {
            let reason = format!(
                "the header says highest index {}, the last log record is at {}",
                self.header.highest_index, self.last_index
            );
            return Err(self.bad(here, reason));
        }
        if self.read_line()? {
            return Err(self.bad(self.line, "lines after the end line".into()));
        }
        self.ended = true;
        Ok(())
    }
}
