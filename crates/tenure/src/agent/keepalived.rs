//! keepalived's `notify_fifo`, read for pools with `authority: vrrp` (SPEC 3, 10): what a line
//! says about the VRRP instance this router follows ([`instance_state`]), and the follower that
//! turns the FIFO into reports for the agent loop ([`follow_fifo`]), which appends them as `vrrp`
//! events of its nodes.
//!
//! keepalived writes one line per transition: `TYPE "NAME" STATE PRIORITY`, where `TYPE` is
//! `INSTANCE` or `GROUP` (and, for its LVS checkers, `VS` or `RS` with another shape), `STATE` is
//! `MASTER`, `BACKUP`, `FAULT`, `STOP` or `DELETED`, and `PRIORITY` is the instance's priority;
//! and a line per event that is not a transition: `MASTER_RX_LOWER_PRI` (a master hears a lower
//! priority's advert), `MASTER_PRIORITY` / `BACKUP_PRIORITY` (`notify_priority_changes`), which
//! change nothing. Only `INSTANCE` lines of the followed instance count; for them every state but
//! `MASTER` means "not master", and a word this parser does not know is read as `FAULT`
//! (fail-closed).
//!
//! # The FIFO's life
//!
//! keepalived opens the FIFO read-write (`O_RDWR | O_NONBLOCK`) at start and keeps it open while
//! it runs, so it never blocks on a missing reader and its lines wait in the pipe for the next
//! reader; a reload (`SIGHUP`) closes it and opens it again. keepalived creates the FIFO when
//! missing and removes it on exit (and on a reload) only if it created it. The follower creates
//! the FIFO itself when it is missing (mode 0600, owned by the agent's user), so it outlives
//! keepalived's restarts and reloads. One follower reads a FIFO: it holds a lock beside it
//! ([`lock_file`]), and a second agent on the same path reads nothing and is not master.
//!
//! The follower opens it read-only and non-blocking, and reads at once what waits: end-of-file
//! means no writer — keepalived is not running ([`VrrpReport::Down`], not master); data or
//! "nothing yet" mean keepalived holds it: the waiting lines are reported, then
//! [`VrrpReport::Running`]. Then it reads lines as they come. When keepalived closes the FIFO
//! (its descriptor, the only writer, closes) the read ends, and the follower opens it again every
//! [`FIFO_RETRY`]: opened again within [`RELOAD_GRACE`] it was a reload (a MASTER writes nothing
//! after one) and the state stands; not, and it reports `Down`.
//!
//! keepalived writes a state line on transitions only (its event lines change no state). So a
//! state the follower has not seen change is still the state: every transition since the last
//! reader waits in the pipe, because keepalived keeps the pipe open. That is what lets an agent
//! restart beside a running keepalived keep the state its log recorded (`Running` with nothing
//! waiting), instead of dropping the address until keepalived's next transition. See `docs/operations.md` (keepalived) and
//! `docs/decisions.md` for what this rests on.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tenure_core::model::VrrpState;
use tokio::sync::mpsc;

use super::authority::LocalAuthority;

/// What one FIFO line says about `instance`: `Ok(Some(state))` for a line of that instance,
/// `Ok(None)` for a line about something else (another instance, a group, a checker), `Err`
/// (one line, naming the problem) for a line that is not keepalived's.
pub fn instance_state(line: &str, instance: &str) -> Result<Option<VrrpState>, String> {
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) =
        line.split_once(' ').ok_or_else(|| format!("not a keepalived notify line: {line:?}"))?;
    if kind != "INSTANCE" {
        return Ok(None);
    }
    let rest = rest
        .strip_prefix('"')
        .ok_or_else(|| format!("keepalived notify line without a quoted instance name: {line:?}"))?;
    let (name, rest) = rest
        .split_once('"')
        .ok_or_else(|| format!("keepalived notify line with an unclosed name: {line:?}"))?;
    if name != instance {
        return Ok(None);
    }
    let state = rest
        .split_whitespace()
        .next()
        .ok_or_else(|| format!("keepalived notify line without a state: {line:?}"))?;
    Ok(Some(match state {
        // Events, not states: a master that hears a lower priority's advert (a VRRP split
        // healing), priority changes (`notify_priority_changes`). The instance is where it was.
        "MASTER_RX_LOWER_PRI" | "MASTER_PRIORITY" | "BACKUP_PRIORITY" => return Ok(None),
        "MASTER" => VrrpState::Master,
        "BACKUP" => VrrpState::Backup,
        // STOP (keepalived stopping), DELETED (the instance removed by a reload), FAULT, and
        // anything newer: not master.
        _ => VrrpState::Fault,
    }))
}

/// How often the follower opens the FIFO again while nothing writes it.
pub const FIFO_RETRY: Duration = Duration::from_millis(100);

/// How long after keepalived closed the FIFO the follower still takes it for a reload (keepalived
/// closes and opens it again, and a MASTER says nothing after a reload) rather than an exit. A
/// keepalived that exits in an orderly way writes `STOP` first, which counts at once; one that is
/// killed or crashes counts as not master this much later.
pub const RELOAD_GRACE: Duration = Duration::from_secs(1);

/// The longest unfinished line the follower keeps (keepalived's lines are under 100 bytes).
pub const LINE_BYTES_MAX: usize = 4096;

/// How much the follower reads at once of what waits in the pipe.
const READ_CHUNK_BYTES: usize = 1 << 16;

/// What the follower tells the agent loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VrrpReport {
    /// keepalived reported the followed instance's state.
    State(VrrpState),
    /// keepalived holds the FIFO open and said nothing more since the last reader (sent after
    /// each open, once the lines that waited in the pipe were reported): the state the log last
    /// recorded for this host stands.
    Running,
    /// keepalived is not there to report (not started, exited, the FIFO unreadable): not master.
    Down(String),
    /// Sent first, once: the last state an earlier follower read from this FIFO (the agent's
    /// earlier run), kept beside it ([`state_file`]). A state read but not yet in the log when
    /// that run ended is not lost: the pipe gave it away, this file did not.
    Remembered(VrrpState),
}

/// Where the follower keeps the last state it read: beside the FIFO (`….state`), so on the same
/// tmpfs as a FIFO under `/run`: it lives as long as keepalived's pipe can, across the agent's
/// restarts, not across a reboot.
#[must_use]
pub fn state_file(fifo: &Path) -> PathBuf {
    let mut name = fifo.as_os_str().to_owned();
    name.push(".state");
    PathBuf::from(name)
}

/// The lock beside the FIFO (`….lock`) that the follower holds while it follows it: a FIFO has
/// one pipe, and two readers split its lines between them, so a second agent on the same path (two
/// routers in network namespaces of one host share the file system) would read the other
/// router's transitions as its own. The kernel releases the lock when its holder exits.
#[must_use]
pub fn lock_file(fifo: &Path) -> PathBuf {
    let mut name = fifo.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Takes [`lock_file`] for `fifo` without waiting: `Ok(Some(lock))` held, `Err` (one line naming
/// both paths) when another follower holds it. A lock file that cannot be made (a folder the
/// agent may not write) is logged and the FIFO followed without it (`Ok(None)`), as before the
/// lock: it guards against a second reader, and must not stop the only one. The lock is tenure's
/// one lock file ([`tenure_lead::durable::try_lock`]).
#[cfg(unix)]
fn lock(fifo: &Path) -> Result<Option<std::fs::File>, String> {
    let file = lock_file(fifo);
    match tenure_lead::durable::try_lock(&file) {
        Ok(tenure_lead::durable::Lock::Held(handle)) => Ok(Some(handle)),
        Ok(tenure_lead::durable::Lock::Busy(_)) => Err(format!(
            "another tenure agent follows keepalived's notify FIFO {} (it holds {}): readers of one FIFO \
             split its lines, so give each router's keepalived and agent a FIFO of their own",
            fifo.display(),
            file.display()
        )),
        Err(e) => {
            tracing::warn!(fifo = %fifo.display(), "cannot lock keepalived's notify FIFO ({}: {}): following it without the lock", file.display(), e.source);
            Ok(None)
        }
    }
}

/// Writes `state` to `file` in the log's wire form (`"master"`), atomically and durably (the
/// store's one atomic replace: fsynced, renamed over it, the directory fsynced), so that a power
/// loss leaves the old state or the new one. One-line error.
fn remember(file: &Path, state: VrrpState) -> Result<(), String> {
    let bytes = serde_json::to_vec(&state).expect("a state serializes");
    crate::store::write_file_atomically(file, &bytes)
        .map_err(|e| format!("keep keepalived's last state in {}: {e}", file.display()))
}

/// The state `file` holds, if it holds one.
fn remembered(file: &Path) -> Option<VrrpState> {
    serde_json::from_slice(&std::fs::read(file).ok()?).ok()
}

/// Follows keepalived's notify FIFO at `path` for `instance`, sending a report on every change
/// until `reports` is closed: after each open, the state of the lines that waited in the pipe,
/// then [`VrrpReport::Running`] (keepalived holds the FIFO) or [`VrrpReport::Down`] (nothing
/// writes it); then a [`VrrpReport::State`] per read that brought lines of the instance (the
/// last state among them). When keepalived closes the FIFO, the follower waits up to
/// [`RELOAD_GRACE`] for it to open the FIFO again (a reload does that, and a MASTER says nothing
/// after it) before it reports `Down`. Lines that are not keepalived's are logged, naming the
/// FIFO, and change nothing. While another follower holds the FIFO's [`lock_file`], it reads
/// nothing and reports `Down`, naming it. Every report is shown to `authority` before it is sent
/// ([`LocalAuthority::observe`]): a demotion is acted on without waiting for the loop.
#[cfg(unix)]
pub async fn follow_fifo(
    path: PathBuf,
    instance: String,
    reports: mpsc::Sender<VrrpReport>,
    authority: Arc<LocalAuthority>,
) {
    let mut last: Option<VrrpReport> = None;
    let kept = state_file(&path);
    let send = async |report: VrrpReport, last: &mut Option<VrrpReport>| -> bool {
        // Acted on at once (calls refused, entries withdrawn), whatever the loop is doing.
        authority.observe(&report);
        if last.as_ref() == Some(&report) {
            return true;
        }
        // A state is kept before anyone hears of it: read from the pipe, it is nowhere else.
        if let VrrpReport::State(state) = &report
            && let Err(e) = remember(&kept, *state)
        {
            tracing::warn!("{e}");
        }
        *last = Some(report.clone());
        reports.send(report).await.is_ok()
    };
    // Only the holder of the lock reads (a second reader would take the holder's lines): until
    // this follower has it, not master, tried again every FIFO_RETRY.
    let _lock = loop {
        match lock(&path) {
            Ok(lock) => break lock,
            Err(e) => {
                if !send(VrrpReport::Down(e), &mut last).await {
                    return;
                }
                tokio::select! {
                    () = tokio::time::sleep(FIFO_RETRY) => {}
                    () = reports.closed() => return,
                }
            }
        }
    };
    if let Some(state) = remembered(&kept)
        && reports.send(VrrpReport::Remembered(state)).await.is_err()
    {
        return;
    }
    // The last state among the complete lines at the front of `pending`, which it drains: lines
    // that left the pipe together make one report, so the state kept beside the FIFO is never
    // behind what was read, and a step never acts on a state that a later line already undid.
    // An unfinished line longer than any keepalived writes is dropped (memory stays bounded).
    let last_state = |pending: &mut Vec<u8>| -> Option<VrrpState> {
        let complete = pending.iter().rposition(|b| *b == b'\n').map_or(0, |at| at + 1);
        let mut state = None;
        for line in pending[..complete].split(|b| *b == b'\n').map(<[u8]>::trim_ascii_end) {
            if line.is_empty() {
                continue;
            }
            match instance_state(&String::from_utf8_lossy(line), &instance) {
                Ok(Some(found)) => state = Some(found),
                Ok(None) => {}
                Err(e) => tracing::warn!(fifo = %path.display(), "{e}; ignored"),
            }
        }
        pending.drain(..complete);
        if pending.len() > LINE_BYTES_MAX {
            tracing::warn!(fifo = %path.display(), bytes = pending.len(), "a line longer than any keepalived writes; ignored");
            pending.clear();
        }
        state
    };
    // Until when a FIFO that keepalived closed may be opened again without "down" (a reload).
    let mut reopen_until: Option<tokio::time::Instant> = None;
    loop {
        let opened = match open(&path) {
            Ok(opened) => opened,
            Err(e) => {
                reopen_until = None;
                if !send(VrrpReport::Down(e), &mut last).await {
                    return;
                }
                Opened { waiting: Vec::new(), receiver: None }
            }
        };
        // The lines that waited in the pipe (a partial last line is completed by what follows).
        let mut pending = opened.waiting;
        if let Some(state) = last_state(&mut pending)
            && !send(VrrpReport::State(state), &mut last).await
        {
            return;
        }
        let Some(mut receiver) = opened.receiver else {
            // Nothing writes the FIFO: keepalived is not running, unless it is reloading.
            if reopen_until.is_none_or(|until| tokio::time::Instant::now() >= until) {
                reopen_until = None;
                let down =
                    format!("keepalived is not running: nothing writes its notify FIFO {}", path.display());
                if !send(VrrpReport::Down(down), &mut last).await {
                    return;
                }
            }
            tokio::select! {
                () = tokio::time::sleep(FIFO_RETRY) => {}
                () = reports.closed() => return,
            }
            continue;
        };
        reopen_until = None;
        if !send(VrrpReport::Running, &mut last).await {
            return;
        }
        let mut chunk = vec![0; READ_CHUNK_BYTES];
        let closed = loop {
            let read = tokio::select! {
                read = tokio::io::AsyncReadExt::read(&mut receiver, &mut chunk) => read,
                () = reports.closed() => return,
            };
            match read {
                Ok(0) => break None,
                Ok(n) => {
                    pending.extend_from_slice(&chunk[..n]);
                    if let Some(state) = last_state(&mut pending)
                        && !send(VrrpReport::State(state), &mut last).await
                    {
                        return;
                    }
                }
                Err(e) => break Some(format!("read keepalived's notify FIFO {}: {e}", path.display())),
            }
        };
        match closed {
            // keepalived closed its end: a reload opens it again at once; an exit does not.
            None => reopen_until = Some(tokio::time::Instant::now() + RELOAD_GRACE),
            Some(error) => {
                if !send(VrrpReport::Down(error), &mut last).await {
                    return;
                }
            }
        }
    }
}

/// The FIFO just opened: what waited in it, and the pipe to read on while something writes it
/// (`None`: nothing does).
#[cfg(unix)]
struct Opened {
    waiting: Vec<u8>,
    receiver: Option<tokio::net::unix::pipe::Receiver>,
}

/// Opens the FIFO for reading without waiting for a writer, creating it when missing, and reads
/// what waits in it: on a non-blocking FIFO, "no data" (`EAGAIN`) means a writer has it open
/// and end-of-file means none has. One-line errors naming the path.
#[cfg(unix)]
fn open(path: &Path) -> Result<Opened, String> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let name = path.display();
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits().cast_signed())
            .open(path)
    };
    let mut file = match open() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                path,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
                0,
            )
            .or_else(|e| if e == rustix::io::Errno::EXIST { Ok(()) } else { Err(e) })
            .map_err(|e| format!("create keepalived's notify FIFO {name}: {e}"))?;
            open()
        }
        other => other,
    }
    .map_err(|e| format!("open keepalived's notify FIFO {name}: {e}"))?;
    let kind = file.metadata().map_err(|e| format!("keepalived's notify FIFO {name}: {e}"))?.file_type();
    if !std::os::unix::fs::FileTypeExt::is_fifo(&kind) {
        return Err(format!("keepalived's notify FIFO {name} is not a FIFO (remove it; tenure creates it)"));
    }
    let mut waiting = Vec::new();
    let mut chunk = vec![0; READ_CHUNK_BYTES];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => return Ok(Opened { waiting, receiver: None }),
            Ok(n) => waiting.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read keepalived's notify FIFO {name}: {e}")),
        }
    }
    let receiver = tokio::net::unix::pipe::Receiver::from_file(file)
        .map_err(|e| format!("keepalived's notify FIFO {name}: {e}"))?;
    Ok(Opened { waiting, receiver: Some(receiver) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty folder of this process for `tag`.
    #[cfg(unix)]
    fn fresh_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tenure-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    /// The follower's next report, within 5 s.
    #[cfg(unix)]
    async fn next(rx: &mut mpsc::Receiver<VrrpReport>) -> Option<VrrpReport> {
        tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("a report within 5 s")
    }

    #[test]
    fn lines_of_the_followed_instance_give_its_state_and_others_nothing() {
        let cases = [
            ("INSTANCE \"VI_1\" MASTER 100\n", Ok(Some(VrrpState::Master))),
            ("INSTANCE \"VI_1\" BACKUP 100", Ok(Some(VrrpState::Backup))),
            ("INSTANCE \"VI_1\" FAULT 0", Ok(Some(VrrpState::Fault))),
            ("INSTANCE \"VI_1\" STOP 100", Ok(Some(VrrpState::Fault))),
            ("INSTANCE \"VI_1\" DELETED 100", Ok(Some(VrrpState::Fault))),
            ("INSTANCE \"VI_1\" MASTER_RX_LOWER_PRI 100", Ok(None)),
            ("INSTANCE \"VI_1\" MASTER_PRIORITY 110", Ok(None)),
            ("INSTANCE \"VI_1\" BACKUP_PRIORITY 90", Ok(None)),
            ("INSTANCE \"VI_1\" MASTER_SOMETHING_NEW 100", Ok(Some(VrrpState::Fault))),
            ("INSTANCE \"VI_10\" MASTER 100", Ok(None)),
            ("GROUP \"VI_1\" MASTER 0", Ok(None)),
            ("VS [10.0.0.1]:tcp:80 UP", Ok(None)),
        ];
        for (line, want) in cases {
            assert_eq!(instance_state(line, "VI_1"), want, "{line:?}");
        }
    }

    #[test]
    fn a_line_that_is_not_keepalived_s_is_named() {
        for line in ["garbage", "INSTANCE VI_1 MASTER 100", "INSTANCE \"VI_1 MASTER 100", "INSTANCE \"VI_1\""]
        {
            let error = instance_state(line, "VI_1").expect_err("must fail");
            assert!(error.contains(&format!("{line:?}")), "{error}");
        }
    }

    /// The follower against a real FIFO: lines become reports, a writer that closes is
    /// `Down`, a writer that comes back is followed again, a missing FIFO is created.
    #[cfg(unix)]
    #[tokio::test]
    async fn the_follower_reports_states_and_a_writer_that_goes_away() {
        use std::io::Write as _;
        let dir = fresh_dir("fifo-test");
        let path = dir.join("keepalived.fifo");
        let (tx, mut rx) = mpsc::channel(16);
        let follower = tokio::spawn(follow_fifo(path.clone(), "VI_1".to_owned(), tx, LocalAuthority::new()));
        // No writer: keepalived is not running (and the follower created the FIFO).
        assert!(matches!(next(&mut rx).await, Some(VrrpReport::Down(r)) if r.contains("not running")));
        assert!(path.exists(), "the follower creates the FIFO");
        // A writer like keepalived: read-write (the open never waits for a reader), holding the
        // FIFO until told to close it.
        let write = |lines: &'static str| {
            let path = path.clone();
            let (close, closing) = std::sync::mpsc::channel::<()>();
            let thread = std::thread::spawn(move || {
                let mut fifo = std::fs::OpenOptions::new().read(true).write(true).open(&path).expect("open");
                fifo.write_all(lines.as_bytes()).expect("write");
                let _ = closing.recv();
            });
            move || {
                let _ = close.send(());
                thread.join().expect("writer");
            }
        };
        // keepalived starts: the lines waiting in the pipe, then "running", then what comes
        // (a partial line is left for what follows).
        let close = write(
            "INSTANCE \"VI_1\" BACKUP 100\nnonsense\nINSTANCE \"VI_2\" MASTER 100\nINSTANCE \"VI_1\" MASTER 100\nINSTANCE \"VI",
        );
        // Lines read together are one report: their last state (BACKUP then MASTER: MASTER).
        assert_eq!(next(&mut rx).await, Some(VrrpReport::State(VrrpState::Master)));
        assert_eq!(next(&mut rx).await, Some(VrrpReport::Running));
        assert_eq!(remembered(&state_file(&path)), Some(VrrpState::Master), "kept before it was sent");
        close();
        // Closed and not opened again within the grace: keepalived is gone. The partial line
        // left in the pipe is no state.
        let started = std::time::Instant::now();
        let Some(VrrpReport::Down(reason)) = next(&mut rx).await else {
            panic!("down after the writer closed")
        };
        assert!(reason.contains("not running"), "{reason}");
        assert!(started.elapsed() >= RELOAD_GRACE - Duration::from_millis(200), "down only after the grace");
        // keepalived holds the FIFO and says nothing: running, no state.
        let close = write("");
        assert_eq!(next(&mut rx).await, Some(VrrpReport::Running));
        // A reload: closed, then opened again within the grace, saying nothing: no report at all.
        close();
        let close = write("");
        assert!(
            tokio::time::timeout(RELOAD_GRACE + Duration::from_millis(500), rx.recv()).await.is_err(),
            "a reload is no report"
        );
        close();
        assert!(matches!(next(&mut rx).await, Some(VrrpReport::Down(_))));
        drop(rx);
        tokio::time::timeout(Duration::from_secs(5), follower)
            .await
            .expect("stops once nobody listens")
            .expect("join");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_path_that_is_not_a_fifo_is_down_naming_it() {
        let file = std::env::temp_dir().join(format!("tenure-not-a-fifo-{}", std::process::id()));
        std::fs::write(&file, "INSTANCE \"VI_1\" MASTER 100\n").expect("write");
        let (tx, mut rx) = mpsc::channel(4);
        let follower = tokio::spawn(follow_fifo(file.clone(), "VI_1".to_owned(), tx, LocalAuthority::new()));
        let report = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("a report");
        let Some(VrrpReport::Down(reason)) = report else { panic!("down: {report:?}") };
        assert!(reason.contains("is not a FIFO") && reason.contains(&file.display().to_string()), "{reason}");
        drop(rx);
        follower.await.expect("join");
        let _ = std::fs::remove_file(&file);
    }

    /// Two followers of one FIFO (two routers' agents given one path in namespaces of one host):
    /// the second reads nothing — its reads would take the first one's lines — and is not master,
    /// naming the FIFO; once the first stops, it follows.
    #[cfg(unix)]
    #[tokio::test]
    async fn a_second_follower_of_one_fifo_reads_nothing_and_is_not_master() {
        use std::io::Write as _;
        let dir = fresh_dir("fifo-two");
        let path = dir.join("keepalived.fifo");
        let (tx, mut rx) = mpsc::channel(16);
        let first = tokio::spawn(follow_fifo(path.clone(), "VI_1".to_owned(), tx, LocalAuthority::new()));
        assert!(matches!(next(&mut rx).await, Some(VrrpReport::Down(_))), "no writer yet");
        let mut writer = std::fs::OpenOptions::new().read(true).write(true).open(&path).expect("open");
        writer.write_all(b"INSTANCE \"VI_1\" MASTER 100\n").expect("write");
        assert_eq!(next(&mut rx).await, Some(VrrpReport::State(VrrpState::Master)));
        assert_eq!(next(&mut rx).await, Some(VrrpReport::Running));
        let (tx2, mut rx2) = mpsc::channel(16);
        let second = tokio::spawn(follow_fifo(path.clone(), "VI_1".to_owned(), tx2, LocalAuthority::new()));
        let report = next(&mut rx2).await;
        let Some(VrrpReport::Down(reason)) = &report else {
            panic!("the second follower is down: {report:?}")
        };
        assert!(
            reason.contains("another tenure agent follows") && reason.contains(&path.display().to_string()),
            "{reason}"
        );
        // The next line is the first follower's, whole.
        writer.write_all(b"INSTANCE \"VI_1\" BACKUP 100\n").expect("write");
        assert_eq!(next(&mut rx).await, Some(VrrpReport::State(VrrpState::Backup)));
        assert!(
            tokio::time::timeout(FIFO_RETRY * 3, rx2.recv()).await.is_err(),
            "the second follower read nothing"
        );
        // The first stops (its agent exits): the second takes the FIFO over.
        drop(rx);
        first.abort();
        let _ = first.await;
        assert_eq!(next(&mut rx2).await, Some(VrrpReport::Remembered(VrrpState::Backup)));
        assert_eq!(next(&mut rx2).await, Some(VrrpReport::Running));
        drop(writer);
        drop(rx2);
        second.abort();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The last state read is kept beside the FIFO, and a follower started later says it first.
    #[cfg(unix)]
    #[tokio::test]
    async fn the_last_state_read_is_remembered_across_followers() {
        use std::io::Write as _;
        let dir = fresh_dir("fifo-kept");
        let path = dir.join("keepalived.fifo");
        let (tx, mut rx) = mpsc::channel(16);
        let first = tokio::spawn(follow_fifo(path.clone(), "VI_1".to_owned(), tx, LocalAuthority::new()));
        assert!(matches!(next(&mut rx).await, Some(VrrpReport::Down(_))), "nothing remembered, no writer");
        let mut writer = std::fs::OpenOptions::new().read(true).write(true).open(&path).expect("open");
        writer.write_all(b"INSTANCE \"VI_1\" MASTER 100\n").expect("write");
        assert_eq!(next(&mut rx).await, Some(VrrpReport::State(VrrpState::Master)));
        assert_eq!(remembered(&state_file(&path)), Some(VrrpState::Master));
        drop(rx);
        first.abort();
        let _ = first.await;
        // The agent restarts while keepalived holds the FIFO and says nothing.
        let (tx, mut rx) = mpsc::channel(16);
        let second = tokio::spawn(follow_fifo(path.clone(), "VI_1".to_owned(), tx, LocalAuthority::new()));
        assert_eq!(next(&mut rx).await, Some(VrrpReport::Remembered(VrrpState::Master)));
        assert_eq!(next(&mut rx).await, Some(VrrpReport::Running));
        drop(writer);
        drop(rx);
        second.abort();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
