//! [`HookGroups`]: a durable record of every exec hook's process group, so that the next agent
//! on a store kills the hooks a `kill -9`'d agent left running — whatever mount namespace they
//! entered (`ip netns exec …`, `unshare -m`) and whether or not their environment can be read.
//!
//! # The record (also in `docs/operations.md`, "Exec hooks")
//!
//! One file per running hook in `<store.path>/hook-groups/`, named after the group's id (the
//! leader's pid, `process_group(0)`), holding one JSON line: the leader's pid, its start time
//! (`/proc/<pid>/stat` field 22, clock ticks since boot) and the boot id
//! (`/proc/sys/kernel/random/boot_id`). It is written atomically and fsynced (the file and its
//! folder) **before the hook can act**: the agent starts the hook as `tenure hook-gate --
//! COMMAND…` (this very binary, through `/proc/self/exe`), which waits for one line on its stdin
//! before it `exec`s the operator's command in the same process (same pid, same group, same start
//! time). The agent writes that line only once the record is durable; an agent that dies before
//! closes the pipe, and the gate exits without running anything. The record is removed when the
//! leader is reaped (or its group killed because the call was dropped).
//!
//! # At the next start ([`HookGroups::kill_recorded`])
//!
//! For each record: another boot id, or a live process at that pid with another start time,
//! means the group is gone (its id was reused): the record is removed. A live leader with the
//! recorded start time is the hook: it is pinned with a pidfd (`pidfd_open`), its start time read
//! again (closing the race with a reuse between the two reads), its group killed (SIGKILL) and
//! the leader signalled through the pidfd. A dead leader whose group still has members (its
//! background children): the group id cannot be reused while they live, so the group is killed.
//! The agent waits (bounded, [`super::hook::ORPHAN_KILL_WAIT`]) until nothing of the group is left,
//! then removes the record. A record that cannot be read, a `/proc` that cannot be read, a kill
//! refused, a group that outlives the wait: the agent **refuses to start**, in one line naming
//! the record, rather than gate a call beside a hook of its predecessor.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::process::{Pid, PidfdFlags, Signal, kill_process_group, pidfd_open, pidfd_send_signal};
use serde::{Deserialize, Serialize};

use crate::store::lock::boot_id;
use crate::store::write_file_atomically;

/// The folder of the records inside the store's folder.
pub const HOOK_GROUPS_DIR_NAME: &str = "hook-groups";

/// The hidden subcommand that holds a hook until its group is recorded.
pub const HOOK_GATE_SUBCOMMAND: &str = "hook-gate";

/// Exit status of the gate when its agent went away before recording the group (nothing ran).
pub const HOOK_GATE_ABANDONED_EXIT: i32 = 125;

/// Exit status of the gate when the operator's command cannot be started.
pub const HOOK_GATE_CANNOT_START_EXIT: i32 = 127;

/// Where the records of the hooks of the agent on store folder `store_path` live, and how they
/// are written, removed and acted on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookGroups {
    dir: PathBuf,
}

/// One hook's process group, as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GroupRecord {
    /// The record's format version.
    v: u64,
    /// The leader's pid, which is the group's id.
    pid: i32,
    /// The leader's start time, clock ticks after boot.
    start_ticks: u64,
    /// The boot the pid belongs to.
    boot_id: String,
}

/// This format's version.
const GROUP_RECORD_VERSION: u64 = 1;

/// What `/proc/<pid>/stat` says of a live process: its group and its start time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ProcStat {
    group: i32,
    start_ticks: u64,
}

/// `pgrp` (field 5) and `starttime` (field 22) of a `/proc/<pid>/stat` line, `None` for a zombie
/// or dead process (state `Z`, `X`) or a line that does not parse. `comm` may hold spaces and
/// parentheses: fields are counted after its last `)`.
fn parse_stat(stat: &str) -> Option<ProcStat> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state).
    let state = *fields.first()?;
    if state == "Z" || state == "X" {
        return None;
    }
    Some(ProcStat { group: fields.get(2)?.parse().ok()?, start_ticks: fields.get(19)?.parse().ok()? })
}

/// The live process `pid` (`None`: no such process, or a zombie).
fn proc_stat(pid: i32) -> Result<Option<ProcStat>, String> {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => Ok(parse_stat(&stat)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("/proc/{pid}/stat: {e}")),
    }
}

/// The live processes of group `group`, by pid.
fn group_members(group: i32) -> Result<Vec<i32>, String> {
    let entries = std::fs::read_dir("/proc").map_err(|e| format!("/proc: {e}"))?;
    let mut members = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        // Gone since the listing, or unreadable: a process of another user is not a hook's.
        let Ok(Some(stat)) = proc_stat(pid) else { continue };
        if stat.group == group {
            members.push(pid);
        }
    }
    Ok(members)
}

impl HookGroups {
    /// The records of the agent whose store folder is `store_path`.
    #[must_use]
    pub fn in_store(store_path: &Path) -> Self {
        Self { dir: store_path.join(HOOK_GROUPS_DIR_NAME) }
    }

    /// The folder of the records.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, pid: i32) -> PathBuf {
        self.dir.join(pid.to_string())
    }

    /// Records the group led by `pid` (just spawned, held by the gate), durably. An error is one
    /// line; the caller kills the group and does not release the gate.
    pub fn record(&self, pid: u32) -> Result<(), String> {
        let pid = i32::try_from(pid).map_err(|_| format!("pid {pid} out of range"))?;
        let stat = proc_stat(pid)?.ok_or_else(|| format!("the hook's leader {pid} is already gone"))?;
        let record =
            GroupRecord { v: GROUP_RECORD_VERSION, pid, start_ticks: stat.start_ticks, boot_id: boot_id()? };
        std::fs::create_dir_all(&self.dir).map_err(|e| format!("create {}: {e}", self.dir.display()))?;
        let mut line = serde_json::to_vec(&record).expect("numbers and a string always serialize");
        line.push(b'\n');
        write_file_atomically(&self.path_of(pid), &line).map_err(|e| e.to_string())
    }

    /// Removes the record of the group led by `pid` (its leader was reaped, or the group
    /// killed). A failure leaves a record the next start finds stale (the pid gone or reused).
    pub fn remove(&self, pid: u32) {
        if let Ok(pid) = i32::try_from(pid) {
            let _ = std::fs::remove_file(self.path_of(pid));
        }
    }

    /// Kills every recorded group that still runs (see the module documentation) and removes
    /// the records; how many groups it killed. `Err`: one line naming the record that could not
    /// be checked or killed — the agent must not start.
    pub fn kill_recorded(&self, wait: Duration) -> Result<usize, String> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(self.refusal(&self.dir, &e.to_string())),
        };
        let boot = boot_id().map_err(|e| self.refusal(&self.dir, &e))?;
        // Every record read first: one that cannot be read refuses before anything is killed.
        let mut records = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| self.refusal(&self.dir, &e.to_string()))?;
            let path = entry.path();
            // A temporary file of a write the agent did not finish: the gate never opened.
            if entry.file_name().to_string_lossy().starts_with('.') {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let record = read_record(&path).map_err(|e| self.refusal(&path, &e))?;
            records.push((path, record));
        }
        let mut killed = 0;
        for (path, record) in records {
            if kill_group(&record, &boot, wait).map_err(|e| self.refusal(&path, &e))? {
                killed += 1;
            }
            std::fs::remove_file(&path).map_err(|e| self.refusal(&path, &e.to_string()))?;
        }
        Ok(killed)
    }

    /// The one line that refuses the start.
    fn refusal(&self, path: &Path, reason: &str) -> String {
        format!(
            "cannot check the hook process group recorded in {}: {reason}; refusing to start while a hook \
             of the previous agent on this store may still run (kill that group, then remove the record)",
            path.display()
        )
    }
}

/// The record in file `path`.
fn read_record(path: &Path) -> Result<GroupRecord, String> {
    let text = std::fs::read(path).map_err(|e| e.to_string())?;
    let record: GroupRecord =
        serde_json::from_slice(&text).map_err(|e| format!("not a hook group record: {e}"))?;
    if record.v != GROUP_RECORD_VERSION {
        return Err(format!("record format version {} is not {GROUP_RECORD_VERSION}", record.v));
    }
    Ok(record)
}

/// Kills the group of `record` if it still runs (this boot, `boot`); whether it did.
fn kill_group(record: &GroupRecord, boot: &str, wait: Duration) -> Result<bool, String> {
    if record.boot_id != boot {
        return Ok(false);
    }
    let leader = Pid::from_raw(record.pid).ok_or_else(|| format!("pid {} is not a pid", record.pid))?;
    let pinned = match proc_stat(record.pid)? {
        // The leader runs: pin it, then make sure the pinned process is still the hook.
        Some(stat) if stat.start_ticks == record.start_ticks => {
            let pidfd = match pidfd_open(leader, PidfdFlags::empty()) {
                Ok(fd) => Some(fd),
                Err(rustix::io::Errno::SRCH) => None,
                // No pidfd on this kernel: the start time check below stands alone.
                Err(rustix::io::Errno::NOSYS) => None,
                Err(e) => return Err(format!("pidfd_open({}): {e}", record.pid)),
            };
            match proc_stat(record.pid)? {
                Some(again) if again.start_ticks == record.start_ticks => pidfd,
                // Died and its pid reused between the two reads: the group was gone.
                Some(_) => return Ok(false),
                // Died between the two reads: its group may still have members.
                None => None,
            }
        }
        // The pid is another process now: the group's id was free, so the group is gone.
        Some(_) => return Ok(false),
        None => None,
    };
    let mut members = group_members(record.pid)?;
    if members.is_empty() {
        return Ok(false);
    }
    let deadline = std::time::Instant::now() + wait;
    loop {
        match kill_process_group(leader, Signal::KILL) {
            Ok(()) | Err(rustix::io::Errno::SRCH) => {}
            Err(e) => return Err(format!("kill -KILL -{}: {e}", record.pid)),
        }
        if let Some(pidfd) = &pinned {
            match pidfd_send_signal(pidfd, Signal::KILL) {
                Ok(()) | Err(rustix::io::Errno::SRCH) => {}
                Err(e) => return Err(format!("pidfd_send_signal({}): {e}", record.pid)),
            }
        }
        std::thread::sleep(Duration::from_millis(10));
        members = group_members(record.pid)?;
        if members.is_empty() {
            return Ok(true);
        }
        if std::time::Instant::now() >= deadline {
            let pids: Vec<String> = members.iter().map(ToString::to_string).collect();
            return Err(format!("processes {} of the group still run after SIGKILL", pids.join(", ")));
        }
    }
}

/// `tenure hook-gate -- COMMAND…`: waits for one line on stdin (the agent's word that the group
/// is recorded), then runs COMMAND in this process (`exec`: same pid, group and start time), its
/// stdin left at the byte after that line. Returns only on failure: the exit status.
#[must_use]
pub fn run_gate(command: &[std::ffi::OsString]) -> i32 {
    use std::os::fd::AsFd as _;
    use std::os::unix::process::CommandExt as _;

    let stdin = std::io::stdin();
    let mut byte = [0u8; 1];
    loop {
        // One byte at a time, unbuffered: what follows the line is the command's input.
        match rustix::io::read(stdin.as_fd(), &mut byte) {
            Ok(1) if byte[0] == b'\n' => break,
            Ok(1) => {}
            Err(rustix::io::Errno::INTR) => {}
            // The agent went away before the group was recorded: run nothing.
            Ok(_) | Err(_) => return HOOK_GATE_ABANDONED_EXIT,
        }
    }
    let Some((program, arguments)) = command.split_first() else {
        eprintln!("tenure hook-gate: no command");
        return HOOK_GATE_CANNOT_START_EXIT;
    };
    let error = std::process::Command::new(program).args(arguments).exec();
    eprintln!("cannot start `{}`: {error}", program.to_string_lossy());
    HOOK_GATE_CANNOT_START_EXIT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stat_line_gives_the_group_and_start_time_after_the_last_parenthesis() {
        let line = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 0 0";
        assert_eq!(parse_stat(line), Some(ProcStat { group: 4242, start_ticks: 987_654 }));
        let zombie = "4242 (sh) Z 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 0 0";
        assert_eq!(parse_stat(zombie), None);
        assert_eq!(parse_stat("garbage"), None);
        let own = std::fs::read_to_string("/proc/self/stat").expect("own stat");
        assert!(parse_stat(&own).is_some_and(|s| s.start_ticks > 0), "{own}");
    }

    #[test]
    fn a_record_of_another_boot_or_a_reused_pid_is_stale_and_a_corrupt_one_refuses() {
        let dir = std::env::temp_dir().join(format!("tenure-hook-groups-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let groups = HookGroups::in_store(&dir);
        // This test process: a live pid whose start time is known, recorded under another boot
        // and with another start time — neither is killed.
        groups.record(std::process::id()).expect("recorded");
        let path = groups.path_of(i32::try_from(std::process::id()).expect("pid"));
        let mut record: GroupRecord =
            serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("JSON");
        record.boot_id = "another-boot".into();
        std::fs::write(&path, serde_json::to_vec(&record).expect("JSON")).expect("write");
        assert_eq!(groups.kill_recorded(Duration::from_secs(1)), Ok(0));
        assert!(!path.exists(), "a stale record is removed");
        groups.record(std::process::id()).expect("recorded");
        let mut record: GroupRecord =
            serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("JSON");
        record.start_ticks += 1;
        std::fs::write(&path, serde_json::to_vec(&record).expect("JSON")).expect("write");
        assert_eq!(groups.kill_recorded(Duration::from_secs(1)), Ok(0), "the pid is another process now");
        std::fs::write(&path, "garbage").expect("write");
        let refused = groups.kill_recorded(Duration::from_secs(1)).expect_err("cannot be checked");
        assert!(
            refused
                .starts_with(&format!("cannot check the hook process group recorded in {}", path.display()))
        );
        assert!(path.exists(), "a record that cannot be checked stays");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
