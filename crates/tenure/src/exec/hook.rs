//! [`ExecHook`]: the `exec` provider (SPEC 7) — the operator's command, run once per gated action,
//! like keepalived's `notify` scripts, but fenced: the gate ran immediately before the call, so a
//! stale action never reaches the command.
//!
//! # The contract (also in `docs/operations.md`, "Exec hooks")
//!
//! - `command` is run as an argv, **no shell**, in its own process group, with the agent's
//!   environment and working folder.
//! - stdin is one JSON object and a newline: `idempotencyKey`, `verb` (`acquire` | `release`),
//!   `pool`, `address`, `holder`, `provider`, `nic`, `captureDomain`, `ownershipEpoch`,
//!   `captureEpoch` (numbers) — SPEC 7's fields, nothing else. An exec provider's actions have
//!   just these two verbs: the command runs once per acquire and once per release, each with its
//!   own idempotency key.
//! - The same values are in the environment as `TENURE_IDEMPOTENCY_KEY`, `TENURE_VERB`,
//!   `TENURE_POOL`, `TENURE_ADDRESS`, `TENURE_HOLDER`, `TENURE_PROVIDER`, `TENURE_NIC`,
//!   `TENURE_CAPTURE_DOMAIN`, `TENURE_OWNERSHIP_EPOCH` and `TENURE_CAPTURE_EPOCH`.
//! - Exit 0: [`ExecutionOutcome::Executed`], the detail its last non-empty stdout line (or
//!   `exit 0`). Another exit status: [`ExecutionOutcome::Failed`], the reason its last non-empty
//!   stderr line (or `exit status N`). Killed by a signal: `Failed`, `killed by SIGTERM`.
//! - Past its `timeout` (or the call's deadline, whichever comes first) the whole process group
//!   is killed (SIGKILL) and the outcome is [`ExecutionOutcome::Unknown`], `timed out after 10s`:
//!   the command may have done its work before it was killed, so the outcome is not known; the
//!   journal records it as `failed` ([`ExecutionOutcome::for_journal`]), as SPEC 7 says, and the
//!   gate retries it while it is current.
//! - A command that cannot be started (not found, not executable): `Failed` with the OS error.
//! - Only the last [`HOOK_OUTPUT_BYTES_MAX`] bytes of stdout and of stderr are kept, and of the
//!   line taken from them the last [`HOOK_LINE_CHARS_MAX`] characters; output is read while the
//!   command runs, so a command that writes a lot never blocks on a full pipe. A command that
//!   exits without reading stdin is not a failure by itself.
//! - When the command exits, its background processes are left alone (as keepalived does); their
//!   output is read for at most [`HOOK_OUTPUT_GRACE_MS`] more. If the call's future is dropped
//!   while the command runs (the agent's deadline, a shutdown), the process group is killed.
//! - Every process a hook starts carries `TENURE_HOOK_OWNER` (the store's cluster id and canonical
//!   path) in its environment. An agent killed with `kill -9` cannot kill its hooks; the next agent on that
//!   store kills every process still carrying its mark ([`kill_orphans`]) before it gates
//!   anything, so a call of the dead agent never runs beside its successor's. A hook must not
//!   leave a process that should outlive an agent restart (run such a daemon under systemd).
//! - The agent also records each hook's process group durably before the hook can act
//!   ([`ExecHook::recorded_in`], [`super::hook_groups`]) and kills by that record at its next
//!   start: that catches what the environment mark cannot (a hook in another mount namespace,
//!   `ip netns exec …`; a process whose environment cannot be read).
//!
//! # Layout
//!
//! - this file — [`ExecHook`], the executor of the contract above, and [`kill_orphans`].
//! - `hook/settings.rs` — [`ExecSettings`] (`command`, `timeout`), their check, and `build()`:
//!   the `exec` kind's registration in [`super::registry`].

mod settings;

use std::os::unix::process::ExitStatusExt as _;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};
use serde::Serialize;
use tenure_core::model::StampedAction;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::process::{Child, Command};
use tokio::time::Instant;

pub use settings::{EXEC_TIMEOUT_DEFAULT_MS, ExecRaw, ExecSettings, HOOK_DEADLINE_GRACE};

use super::hook_groups::{HOOK_GATE_SUBCOMMAND, HookGroups};
use super::{ExecuteFuture, ExecutionOutcome, Executor};

/// How much of a command's stdout, and of its stderr, is kept (the tail), in bytes.
pub const HOOK_OUTPUT_BYTES_MAX: usize = 4 * 1024;
/// Longest detail or reason taken from the command's output (its last line's end), in characters:
/// it goes into the journal and the `action-result` event.
pub const HOOK_LINE_CHARS_MAX: usize = 512;
/// How long output is still read after the command exited (a background process it started may
/// hold its stdout or stderr open), in milliseconds.
pub const HOOK_OUTPUT_GRACE_MS: u64 = 100;
/// How long to wait for a killed command to be reaped before giving up on it, in milliseconds
/// (tokio reaps it later in any case).
pub const HOOK_REAP_WAIT_MS: u64 = 1_000;
/// The environment variable that marks a hook's processes with their agent's store folder.
pub const HOOK_OWNER_VARIABLE: &str = "TENURE_HOOK_OWNER";
/// How long [`kill_orphans`] waits for the processes it killed to be gone.
pub const ORPHAN_KILL_WAIT: Duration = Duration::from_secs(5);

/// Kills (SIGKILL, each process and its process group) every process on this host, in this
/// agent's mount namespace, whose environment carries `TENURE_HOOK_OWNER=<owner>` (the store's
/// cluster id and its canonical path: no other agent's), this process's own group excepted (an
/// agent started from a hook must not kill itself): the hooks of an agent on the same store that died without killing them. Kills what
/// it finds again on every rescan, for at most [`ORPHAN_KILL_WAIT`]. Returns how many it found,
/// or an error when `/proc` cannot be read or a marked process still runs at the end.
pub fn kill_orphans(owner: &str) -> Result<usize, String> {
    let mut found = std::collections::BTreeSet::new();
    let deadline = std::time::Instant::now() + ORPHAN_KILL_WAIT;
    loop {
        let left = marked_processes(owner)?;
        if left.is_empty() {
            return Ok(found.len());
        }
        for (pid, group) in &left {
            found.insert(*pid);
            if let Some(group) = Pid::from_raw(*group) {
                let _ = kill_process_group(group, Signal::KILL);
            }
            if let Some(pid) = Pid::from_raw(*pid) {
                let _ = rustix::process::kill_process(pid, Signal::KILL);
            }
        }
        if std::time::Instant::now() >= deadline {
            let pids: Vec<String> = left.iter().map(|(pid, _)| pid.to_string()).collect();
            return Err(format!(
                "hook processes of a previous agent on this store still run after SIGKILL: pid {}",
                pids.join(", ")
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `state` and `pgrp` from `/proc/<pid>/stat`: `pid (comm) state ppid pgrp …`, where comm may
/// hold spaces and parentheses.
fn stat_fields(stat: &str) -> Option<(String, i32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.to_owned();
    let group = fields.nth(1)?.parse().ok()?;
    Some((state, group))
}

/// (pid, process group) of every live process (not a zombie) marked with `owner` in this mount
/// namespace, outside this process's own group. A process whose files cannot be
/// read (gone, another user's) is not counted; `/proc` itself unreadable is an error.
fn marked_processes(owner: &str) -> Result<Vec<(i32, i32)>, String> {
    let mark = format!("{HOOK_OWNER_VARIABLE}={owner}");
    let unreadable = |e: std::io::Error| format!("cannot look for hooks a previous agent left: /proc: {e}");
    let own_namespace = std::fs::read_link("/proc/self/ns/mnt").map_err(unreadable)?;
    let own_stat = std::fs::read_to_string("/proc/self/stat").map_err(unreadable)?;
    let (_, own_group) = stat_fields(&own_stat).ok_or_else(|| "cannot parse /proc/self/stat".to_owned())?;
    let entries = std::fs::read_dir("/proc").map_err(unreadable)?;
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else { continue };
        if !environ.split(|b| *b == 0).any(|var| var == mark.as_bytes()) {
            continue;
        }
        if std::fs::read_link(entry.path().join("ns/mnt")).ok().as_ref() != Some(&own_namespace) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some((state, group)) = stat_fields(&stat) else { continue };
        if group == own_group || state == "Z" || state == "X" {
            continue;
        }
        found.push((pid, group));
    }
    Ok(found)
}

/// Size of one read from the command's stdout or stderr, in bytes.
const HOOK_READ_CHUNK_BYTES: usize = 1024;

/// Runs the operator's command for each gated action (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecHook {
    command: Vec<String>,
    timeout: Duration,
    /// `TENURE_HOOK_OWNER` for every process the hook starts (empty: not set).
    owner: String,
    /// Where each run's process group is recorded before it may act (`None`: not recorded).
    groups: Option<HookGroups>,
}

impl ExecHook {
    /// A hook running `command` (program, then arguments; no shell) for at most `timeout` per
    /// action. An empty `command` fails every action (the config refuses one).
    #[must_use]
    pub fn new(command: Vec<String>, timeout: Duration) -> Self {
        Self { command, timeout, owner: String::new(), groups: None }
    }

    /// The same hook, its processes marked as `owner`'s (the agent's store folder), so that a
    /// later agent on the same store finds them with [`kill_orphans`].
    #[must_use]
    pub fn owned_by(mut self, owner: &str) -> Self {
        owner.clone_into(&mut self.owner);
        self
    }

    /// The same hook, each run started through `tenure hook-gate` (this binary) and held there
    /// until its process group is recorded in `groups` (see [`super::hook_groups`]). Only for a
    /// process whose executable is the `tenure` binary (the agent).
    #[must_use]
    pub fn recorded_in(mut self, groups: HookGroups) -> Self {
        self.groups = Some(groups);
        self
    }

    /// The program and its arguments.
    #[must_use]
    pub fn command(&self) -> &[String] {
        &self.command
    }

    /// The longest one run may take.
    #[must_use]
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn run(&self, action: &StampedAction, deadline: Instant) -> ExecutionOutcome {
        let started = Instant::now();
        let limit = deadline.min(started + self.timeout);
        if limit <= started {
            return ExecutionOutcome::Failed {
                reason: "deadline passed before the command started; not started".to_owned(),
            };
        }
        let Some((program, arguments)) = self.command.split_first() else {
            return ExecutionOutcome::Failed { reason: "the exec provider has no command".to_owned() };
        };
        let mut command = match &self.groups {
            Some(_) => {
                // This binary, whatever became of its file since it started.
                let mut gate = Command::new("/proc/self/exe");
                gate.args([HOOK_GATE_SUBCOMMAND, "--"]).arg(program);
                gate
            }
            None => Command::new(program),
        };
        command
            .args(arguments)
            .envs(hook_environment(action))
            .envs((!self.owner.is_empty()).then_some((HOOK_OWNER_VARIABLE, self.owner.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => return ExecutionOutcome::Failed { reason: format!("cannot start `{program}`: {e}") },
        };
        // Declared after `child`, so dropped before it: a dropped call kills the whole group.
        let mut group = GroupKill::of(&child);
        let mut input = hook_input(action);
        if let Some(groups) = &self.groups {
            // The gate holds the command until the group is recorded; the line that opens it
            // goes first on stdin. A group that cannot be recorded never runs the command.
            let recorded =
                child.id().ok_or_else(|| "exited at once".to_owned()).and_then(|pid| groups.record(pid));
            if let Err(e) = recorded {
                group.kill_and_reap(&mut child).await;
                return ExecutionOutcome::Failed {
                    reason: format!("cannot record the hook's process group: {e}; not started"),
                };
            }
            group.recorded = child.id().map(|pid| (groups.clone(), pid));
            input.insert(0, '\n');
        }
        let mut stdout = Tail::default();
        let mut stderr = Tail::default();
        let (stdin_pipe, stdout_pipe, stderr_pipe) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let mut io = Box::pin(async {
            tokio::join!(
                feed(stdin_pipe, input.as_bytes()),
                drain(stdout_pipe, &mut stdout),
                drain(stderr_pipe, &mut stderr)
            );
        });
        let mut io_done = false;
        let exited = loop {
            tokio::select! {
                status = child.wait() => break Some(status),
                () = &mut io, if !io_done => io_done = true,
                () = tokio::time::sleep_until(limit) => break None,
            }
        };
        let status = match exited {
            Some(Ok(status)) => status,
            Some(Err(e)) => {
                drop(io);
                group.kill_and_reap(&mut child).await;
                return ExecutionOutcome::Unknown { reason: format!("lost track of the command: {e}") };
            }
            None => {
                drop(io);
                group.kill_and_reap(&mut child).await;
                return ExecutionOutcome::Unknown {
                    reason: format!(
                        "timed out after {}; the command's process group was killed",
                        format_duration(limit - started)
                    ),
                };
            }
        };
        // The leader is reaped: its id may be reused, so the group is never signalled again.
        group.disarm();
        if !io_done {
            let _ = tokio::time::timeout(Duration::from_millis(HOOK_OUTPUT_GRACE_MS), &mut io).await;
        }
        drop(io);
        outcome_of(status, &stdout, &stderr)
    }
}

impl Executor for ExecHook {
    /// Runs the command (see the module documentation); gives up at the earlier of `deadline` and
    /// the hook's own timeout.
    fn execute<'a>(&'a self, action: &'a StampedAction, deadline: Instant) -> ExecuteFuture<'a> {
        Box::pin(self.run(action, deadline))
    }
}

/// The stamped action as the command's stdin: SPEC 7's fields.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct HookInput<'a> {
    idempotency_key: &'a str,
    verb: &'static str,
    pool: &'a str,
    address: String,
    holder: &'a str,
    provider: &'a str,
    nic: &'a str,
    capture_domain: &'a str,
    ownership_epoch: u64,
    capture_epoch: u64,
}

/// `acquire` or `release`: the verb of SPEC 7's exec contract (an exec provider's actions have
/// just these two verbs, one call each).
fn contract_verb(action: &StampedAction) -> &'static str {
    if action.verb.is_acquire() { "acquire" } else { "release" }
}

/// One JSON object and a newline.
fn hook_input(action: &StampedAction) -> String {
    let input = HookInput {
        idempotency_key: &action.idempotency_key(),
        verb: contract_verb(action),
        pool: &action.pool,
        address: action.address.to_string(),
        holder: &action.holder,
        provider: &action.provider,
        nic: &action.nic,
        capture_domain: action.capture_domain.as_str(),
        ownership_epoch: action.ownership_epoch.get(),
        capture_epoch: action.capture_epoch.get(),
    };
    let mut json = serde_json::to_string(&input).expect("strings and numbers always serialize");
    json.push('\n');
    json
}

/// The same values as `TENURE_*` environment variables.
fn hook_environment(action: &StampedAction) -> [(&'static str, String); 10] {
    [
        ("TENURE_IDEMPOTENCY_KEY", action.idempotency_key().to_string()),
        ("TENURE_VERB", contract_verb(action).to_owned()),
        ("TENURE_POOL", action.pool.to_string()),
        ("TENURE_ADDRESS", action.address.to_string()),
        ("TENURE_HOLDER", action.holder.to_string()),
        ("TENURE_PROVIDER", action.provider.to_string()),
        ("TENURE_NIC", action.nic.to_string()),
        ("TENURE_CAPTURE_DOMAIN", action.capture_domain.as_str().to_owned()),
        ("TENURE_OWNERSHIP_EPOCH", action.ownership_epoch.get().to_string()),
        ("TENURE_CAPTURE_EPOCH", action.capture_epoch.get().to_string()),
    ]
}

/// Writes the input and closes stdin. A command that exits without reading makes the write fail
/// (broken pipe); that is not a failure by itself, its exit status says what happened.
async fn feed(pipe: Option<impl AsyncWrite + Unpin>, input: &[u8]) {
    if let Some(mut pipe) = pipe {
        let _ = pipe.write_all(input).await;
        let _ = pipe.shutdown().await;
    }
}

/// Reads a pipe to its end, keeping its tail.
async fn drain(pipe: Option<impl AsyncRead + Unpin>, tail: &mut Tail) {
    let Some(mut pipe) = pipe else { return };
    let mut chunk = [0u8; HOOK_READ_CHUNK_BYTES];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(read) => tail.push(&chunk[..read]),
        }
    }
}

/// The last [`HOOK_OUTPUT_BYTES_MAX`] bytes of a stream.
#[derive(Debug, Default)]
struct Tail {
    bytes: Vec<u8>,
}

impl Tail {
    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > HOOK_OUTPUT_BYTES_MAX {
            let excess = self.bytes.len() - HOOK_OUTPUT_BYTES_MAX;
            self.bytes.drain(..excess);
        }
        debug_assert!(self.bytes.len() <= HOOK_OUTPUT_BYTES_MAX);
    }

    /// The last line with something on it, trimmed, control characters escaped (one line), and
    /// at most its last [`HOOK_LINE_CHARS_MAX`] characters (after a `…`).
    fn last_line(&self) -> Option<String> {
        let text = String::from_utf8_lossy(&self.bytes);
        let line = text.lines().map(str::trim).rev().find(|line| !line.is_empty())?;
        let chars = line.chars().count();
        let line = match line.char_indices().nth(chars.saturating_sub(HOOK_LINE_CHARS_MAX)) {
            Some((start, _)) if start > 0 => format!("…{}", &line[start..]),
            _ => line.to_owned(),
        };
        let mut one_line = String::with_capacity(line.len());
        for c in line.chars() {
            if c.is_control() {
                one_line.extend(c.escape_default());
            } else {
                one_line.push(c);
            }
        }
        Some(one_line)
    }
}

/// What an exit status means for the action.
fn outcome_of(status: ExitStatus, stdout: &Tail, stderr: &Tail) -> ExecutionOutcome {
    if status.success() {
        return ExecutionOutcome::Executed {
            detail: stdout.last_line().unwrap_or_else(|| "exit 0".to_owned()),
        };
    }
    if let Some(code) = status.code() {
        return ExecutionOutcome::Failed {
            reason: stderr.last_line().unwrap_or_else(|| format!("exit status {code}")),
        };
    }
    let reason = match status.signal() {
        Some(signal) => format!("killed by {}", signal_name(signal)),
        None => format!("ended without an exit status ({status})"),
    };
    ExecutionOutcome::Failed { reason }
}

/// `SIGTERM` for 15, and so on; `signal N` for the rest.
fn signal_name(raw: i32) -> String {
    const NAMES: [(Signal, &str); 15] = [
        (Signal::HUP, "SIGHUP"),
        (Signal::INT, "SIGINT"),
        (Signal::QUIT, "SIGQUIT"),
        (Signal::ILL, "SIGILL"),
        (Signal::TRAP, "SIGTRAP"),
        (Signal::ABORT, "SIGABRT"),
        (Signal::BUS, "SIGBUS"),
        (Signal::FPE, "SIGFPE"),
        (Signal::KILL, "SIGKILL"),
        (Signal::USR1, "SIGUSR1"),
        (Signal::SEGV, "SIGSEGV"),
        (Signal::USR2, "SIGUSR2"),
        (Signal::PIPE, "SIGPIPE"),
        (Signal::ALARM, "SIGALRM"),
        (Signal::TERM, "SIGTERM"),
    ];
    NAMES
        .iter()
        .find(|(signal, _)| signal.as_raw() == raw)
        .map_or_else(|| format!("signal {raw}"), |(_, name)| (*name).to_owned())
}

/// `10s`, `300ms`, `1500ms`: the config's notation.
fn format_duration(duration: Duration) -> String {
    crate::config::format_ms(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

/// The command's process group (its id is the leader's pid, `process_group(0)`), killed with
/// SIGKILL when this is dropped while armed: a dropped call leaves nothing running. Its record
/// ([`HookGroups`]), if any, is removed once the group is killed or its leader reaped.
struct GroupKill {
    group: Option<Pid>,
    recorded: Option<(HookGroups, u32)>,
}

impl GroupKill {
    fn of(child: &Child) -> Self {
        let group = child.id().and_then(|id| i32::try_from(id).ok()).and_then(Pid::from_raw);
        Self { group, recorded: None }
    }

    fn forget_record(&mut self) {
        if let Some((groups, pid)) = self.recorded.take() {
            groups.remove(pid);
        }
    }

    /// Kills the group now and waits (bounded) for the leader, so that it is gone, not a zombie.
    async fn kill_and_reap(&mut self, child: &mut Child) {
        self.kill();
        let _ = child.start_kill();
        let _ = tokio::time::timeout(Duration::from_millis(HOOK_REAP_WAIT_MS), child.wait()).await;
    }

    fn kill(&mut self) {
        if let Some(group) = self.group.take() {
            // ESRCH (the group is gone already) is fine: there is nothing left to kill.
            let _ = kill_process_group(group, Signal::KILL);
        }
        self.forget_record();
    }

    /// The leader was reaped: never signal its group id again.
    fn disarm(&mut self) {
        self.group = None;
        self.forget_record();
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_bytes_and_the_last_non_empty_line() {
        let mut tail = Tail::default();
        for _ in 0..10_000 {
            tail.push(b"noise noise noise\n");
        }
        tail.push(b"the reason\n\n  \n");
        assert_eq!(tail.bytes.len(), HOOK_OUTPUT_BYTES_MAX);
        assert_eq!(tail.last_line().as_deref(), Some("the reason"));
        let mut controls = Tail::default();
        controls.push(b"a\tb\rc \"quoted\" it's\n");
        assert_eq!(controls.last_line().as_deref(), Some("a\\tb\\rc \"quoted\" it's"));
        assert_eq!(Tail::default().last_line(), None);
        let mut long = Tail::default();
        long.push("é".repeat(3 * HOOK_LINE_CHARS_MAX).as_bytes());
        long.push(b" the end\n");
        let line = long.last_line().expect("a line");
        assert_eq!(line.chars().count(), HOOK_LINE_CHARS_MAX + 1, "the end of a long line, after `…`");
        assert!(line.starts_with("…éé") && line.ends_with("é the end"), "{line}");
    }

    #[test]
    fn signals_and_durations_are_named() {
        assert_eq!(signal_name(Signal::TERM.as_raw()), "SIGTERM");
        assert_eq!(signal_name(Signal::KILL.as_raw()), "SIGKILL");
        assert_eq!(signal_name(64), "signal 64");
        assert_eq!(format_duration(Duration::from_secs(10)), "10s");
        assert_eq!(format_duration(Duration::from_millis(300)), "300ms");
    }
}
