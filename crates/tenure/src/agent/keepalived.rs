//! keepalived's `notify_fifo`, read for pools with `authority: vrrp` (SPEC 3, 10): what a line
//! says about the VRRP instance this router follows ([`instance_state`]), and the follower that
//! turns the FIFO into reports for the agent loop ([`follow_fifo`]), which appends them as `vrrp`
//! events of its nodes.
//!
//! keepalived writes one line per transition: `TYPE "NAME" STATE PRIORITY`, where `TYPE` is
//! `INSTANCE` or `GROUP` (and, for its LVS checkers, `VS` or `RS` with another shape), `STATE` is
//! `MASTER`, `BACKUP`, `FAULT`, `STOP` or `DELETED`, and `PRIORITY` is the instance's priority.
//! Only `INSTANCE` lines of the followed instance count; for them every state but `MASTER` means
//! "not master", and a state this parser does not know is read as `FAULT` (fail-closed).
//!
//! # The FIFO's life
//!
//! keepalived opens the FIFO read-write (`O_RDWR | O_NONBLOCK`) for as long as it runs, so it
//! never blocks on a missing reader and its lines wait in the pipe for the next reader; it
//! creates the FIFO when missing and removes it on exit only if it created it. The follower
//! creates the FIFO itself when it is missing (mode 0600, owned by the agent's user), so it
//! outlives keepalived's restarts.
//!
//! The follower opens it read-only and non-blocking, and reads at once what waits: end-of-file
//! means no writer — keepalived is not running ([`VrrpReport::Down`], not master); data or
//! "nothing yet" mean keepalived holds it: the waiting lines are reported, then
//! [`VrrpReport::Running`]. Then it reads lines as they come; when keepalived exits (its
//! descriptor, the only writer, closes) the read ends: `Down`, and the follower opens the FIFO
//! again every [`FIFO_RETRY`] until keepalived is back.
//!
//! keepalived writes on transitions only. So a state the follower has not seen change is still
//! the state: every transition since the last reader waits in the pipe, because keepalived
//! keeps the pipe open. That is what lets an agent restart beside a running keepalived keep the
//! state its log recorded (`Running` with nothing waiting), instead of dropping the address
//! until keepalived's next transition. See `docs/operations.md` (keepalived) and
//! `docs/decisions.md` for what this rests on.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tenure_core::model::VrrpState;
use tokio::io::AsyncBufReadExt as _;
use tokio::sync::mpsc;

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
        "MASTER" => VrrpState::Master,
        "BACKUP" => VrrpState::Backup,
        // STOP (keepalived stopping), DELETED (the instance removed by a reload), FAULT, and
        // anything newer: not master.
        _ => VrrpState::Fault,
    }))
}

/// How long the follower waits before opening the FIFO again after keepalived closed it (or
/// before keepalived first opened it).
pub const FIFO_RETRY: Duration = Duration::from_millis(100);

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
}

#[cfg(unix)]
/// Follows keepalived's notify FIFO at `path` for `instance`, sending a report on every change
/// until `reports` is closed: after each open, [`VrrpReport::Running`] or [`VrrpReport::Down`]
/// at once (with the states of the lines that were waiting in the pipe first), then a
/// [`VrrpReport::State`] per line of the instance, and `Down` when keepalived closes the FIFO.
/// Lines that are not keepalived's are logged, naming the FIFO, and change nothing.
pub async fn follow_fifo(path: PathBuf, instance: String, reports: mpsc::Sender<VrrpReport>) {
    let mut last: Option<VrrpReport> = None;
    let send = async |report: VrrpReport, last: &mut Option<VrrpReport>| -> bool {
        if last.as_ref() == Some(&report) {
            return true;
        }
        *last = Some(report.clone());
        reports.send(report).await.is_ok()
    };
    let state_of = |line: &str| match instance_state(line, &instance) {
        Ok(state) => state,
        Err(e) => {
            tracing::warn!(fifo = %path.display(), "{e}; ignored");
            None
        }
    };
    loop {
        let down = match open(&path) {
            Ok(Opened::NoWriter) => {
                format!("keepalived is not running: nothing writes its notify FIFO {}", path.display())
            }
            Ok(Opened::Running { waiting, receiver }) => 'open: {
                // The lines that waited in the pipe, then "running": what the pipe held is all
                // keepalived said since the last reader.
                let complete = waiting.iter().rposition(|b| *b == b'\n').map_or(0, |at| at + 1);
                for line in String::from_utf8_lossy(&waiting[..complete]).lines() {
                    if let Some(state) = state_of(line)
                        && !send(VrrpReport::State(state), &mut last).await
                    {
                        return;
                    }
                }
                if !send(VrrpReport::Running, &mut last).await {
                    return;
                }
                let partial = std::io::Cursor::new(waiting[complete..].to_vec());
                let mut lines =
                    tokio::io::BufReader::new(tokio::io::AsyncReadExt::chain(partial, receiver)).lines();
                loop {
                    match lines.next_line().await {
                        Ok(Some(line)) => {
                            if let Some(state) = state_of(&line)
                                && !send(VrrpReport::State(state), &mut last).await
                            {
                                return;
                            }
                        }
                        Ok(None) => {
                            break 'open format!(
                                "keepalived closed its notify FIFO {} (not running)",
                                path.display()
                            );
                        }
                        Err(e) => {
                            break 'open format!("read keepalived's notify FIFO {}: {e}", path.display());
                        }
                    }
                }
            }
            Err(e) => e,
        };
        if !send(VrrpReport::Down(down), &mut last).await {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(FIFO_RETRY) => {}
            () = reports.closed() => return,
        }
    }
}

/// The FIFO just opened.
#[cfg(unix)]
enum Opened {
    /// Nobody has it open for writing: keepalived is not running.
    NoWriter,
    /// keepalived has it open; `waiting` is what was in the pipe.
    Running { waiting: Vec<u8>, receiver: tokio::net::unix::pipe::Receiver },
}

#[cfg(unix)]
/// Opens the FIFO for reading without waiting for a writer, creating it when missing, and reads
/// what waits in it: on a non-blocking FIFO, "no data" (`EAGAIN`) means a writer has it open
/// and end-of-file means none has. One-line errors naming the path.
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
    // A pipe holds at most 64 KiB by default: one read takes what waits.
    let mut waiting = vec![0; 1 << 16];
    let read = match file.read(&mut waiting) {
        Ok(0) => return Ok(Opened::NoWriter),
        Ok(n) => n,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
        Err(e) => return Err(format!("read keepalived's notify FIFO {name}: {e}")),
    };
    waiting.truncate(read);
    let receiver = tokio::net::unix::pipe::Receiver::from_file(file)
        .map_err(|e| format!("keepalived's notify FIFO {name}: {e}"))?;
    Ok(Opened::Running { waiting, receiver })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_the_followed_instance_give_its_state_and_others_nothing() {
        let cases = [
            ("INSTANCE \"VI_1\" MASTER 100\n", Ok(Some(VrrpState::Master))),
            ("INSTANCE \"VI_1\" BACKUP 100", Ok(Some(VrrpState::Backup))),
            ("INSTANCE \"VI_1\" FAULT 0", Ok(Some(VrrpState::Fault))),
            ("INSTANCE \"VI_1\" STOP 100", Ok(Some(VrrpState::Fault))),
            ("INSTANCE \"VI_1\" DELETED 100", Ok(Some(VrrpState::Fault))),
            ("INSTANCE \"VI_1\" MASTER_RX_LOWER_PRI 100", Ok(Some(VrrpState::Fault))),
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
        let dir = std::env::temp_dir().join(format!("tenure-fifo-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("keepalived.fifo");
        let (tx, mut rx) = mpsc::channel(16);
        let follower = tokio::spawn(follow_fifo(path.clone(), "VI_1".to_owned(), tx));
        let next = async |rx: &mut mpsc::Receiver<VrrpReport>| {
            tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("a report within 5 s")
        };
        // No writer: keepalived is not running (and the follower created the FIFO).
        assert!(matches!(next(&mut rx).await, Some(VrrpReport::Down(r)) if r.contains("not running")));
        assert!(path.exists(), "the follower creates the FIFO");
        let write = |lines: &'static str, hold: Duration| {
            let path = path.clone();
            std::thread::spawn(move || {
                // Like keepalived: read-write, so the open never waits for a reader.
                let mut fifo = std::fs::OpenOptions::new().read(true).write(true).open(&path).expect("open");
                fifo.write_all(lines.as_bytes()).expect("write");
                std::thread::sleep(hold);
            })
        };
        // keepalived starts: the lines waiting in the pipe, then "running", then what comes.
        let writer = write(
            "INSTANCE \"VI_1\" BACKUP 100\nnonsense\nINSTANCE \"VI_2\" MASTER 100\nINSTANCE \"VI_1\" MASTER 100\n",
            Duration::from_millis(500),
        );
        assert_eq!(next(&mut rx).await, Some(VrrpReport::State(VrrpState::Backup)));
        assert_eq!(next(&mut rx).await, Some(VrrpReport::State(VrrpState::Master)));
        assert_eq!(next(&mut rx).await, Some(VrrpReport::Running));
        let Some(VrrpReport::Down(reason)) = next(&mut rx).await else {
            panic!("down after the writer closed")
        };
        assert!(reason.contains("closed"), "{reason}");
        writer.join().expect("writer");
        // keepalived holds the FIFO and says nothing: running, no state.
        let writer = write("", Duration::from_millis(500));
        assert_eq!(next(&mut rx).await, Some(VrrpReport::Running));
        assert!(matches!(next(&mut rx).await, Some(VrrpReport::Down(_))));
        writer.join().expect("writer");
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
        let follower = tokio::spawn(follow_fifo(file.clone(), "VI_1".to_owned(), tx));
        let report = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("a report");
        let Some(VrrpReport::Down(reason)) = report else { panic!("down: {report:?}") };
        assert!(reason.contains("is not a FIFO") && reason.contains(&file.display().to_string()), "{reason}");
        drop(rx);
        follower.await.expect("join");
        let _ = std::fs::remove_file(&file);
    }
}
