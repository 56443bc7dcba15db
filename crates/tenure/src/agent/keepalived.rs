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
//! keepalived opens the FIFO read-write (`O_RDWR | O_NONBLOCK`), so it never blocks on a missing
//! reader and its lines wait in the pipe for the next reader; it creates the FIFO when missing
//! and removes it on exit only if it created it. The follower creates the FIFO itself when it is
//! missing (mode 0600, owned by the agent's user), so it outlives keepalived's restarts. The
//! follower opens it read-only: while keepalived runs, reads wait for lines; when keepalived
//! exits (its descriptor, the only writer, closes) the read ends, and the follower reports
//! [`VrrpReport::Down`] — "not master" — then opens the FIFO again every
//! [`FIFO_RETRY`] until keepalived is back. keepalived writes on transitions only: it never
//! repeats a state, so a reader that starts while keepalived runs learns the state at its next
//! transition (or from lines still waiting in the pipe). See `docs/operations.md` (keepalived).

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
    /// keepalived is not there to report (not started, exited, the FIFO unreadable): not master.
    Down(String),
}

#[cfg(unix)]
/// Follows keepalived's notify FIFO at `path` for `instance`, sending a report on every change
/// (a state line, or keepalived gone) until `reports` is closed. Lines that are not keepalived's
/// are logged once each, naming the FIFO, and change nothing.
pub async fn follow_fifo(path: PathBuf, instance: String, reports: mpsc::Sender<VrrpReport>) {
    let mut last: Option<VrrpReport> = None;
    let send = async |report: VrrpReport, last: &mut Option<VrrpReport>| -> bool {
        if last.as_ref() == Some(&report) {
            return true;
        }
        *last = Some(report.clone());
        reports.send(report).await.is_ok()
    };
    loop {
        let down = match open(&path) {
            Ok(receiver) => {
                let mut lines = tokio::io::BufReader::new(receiver).lines();
                loop {
                    match lines.next_line().await {
                        Ok(Some(line)) => match instance_state(&line, &instance) {
                            Ok(Some(state)) => {
                                if !send(VrrpReport::State(state), &mut last).await {
                                    return;
                                }
                            }
                            Ok(None) => {}
                            Err(e) => tracing::warn!(fifo = %path.display(), "{e}; ignored"),
                        },
                        Ok(None) => {
                            break format!(
                                "keepalived closed its notify FIFO {} (not running)",
                                path.display()
                            );
                        }
                        Err(e) => break format!("read keepalived's notify FIFO {}: {e}", path.display()),
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

#[cfg(unix)]
/// Opens the FIFO for reading, creating it when missing. One-line error naming the path.
fn open(path: &Path) -> Result<tokio::net::unix::pipe::Receiver, String> {
    let options = tokio::net::unix::pipe::OpenOptions::new();
    match options.open_receiver(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                path,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
                0,
            )
            .or_else(|e| if e == rustix::io::Errno::EXIST { Ok(()) } else { Err(e) })
            .map_err(|e| format!("create keepalived's notify FIFO {}: {e}", path.display()))?;
            options
                .open_receiver(path)
                .map_err(|e| format!("open keepalived's notify FIFO {}: {e}", path.display()))
        }
        other => other.map_err(|e| format!("open keepalived's notify FIFO {}: {e}", path.display())),
    }
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
        use std::time::Instant;
        let dir = std::env::temp_dir().join(format!("tenure-fifo-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("keepalived.fifo");
        let (tx, mut rx) = mpsc::channel(16);
        let follower = tokio::spawn(follow_fifo(path.clone(), "VI_1".to_owned(), tx));
        let next = async |rx: &mut mpsc::Receiver<VrrpReport>| {
            tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("a report within 5 s")
        };
        // No writer yet: the follower created the FIFO and waits for one, reporting nothing
        // (the agent starts from "not master" anyway).
        let created = Instant::now() + Duration::from_secs(5);
        while !path.exists() {
            assert!(Instant::now() < created, "the follower creates the FIFO");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(rx.try_recv().is_err(), "no report before keepalived writes");
        let write = |lines: &'static str| {
            let path = path.clone();
            std::thread::spawn(move || {
                // Like keepalived: read-write, so the open never waits for a reader.
                let mut fifo = std::fs::OpenOptions::new().read(true).write(true).open(&path).expect("open");
                fifo.write_all(lines.as_bytes()).expect("write");
                std::thread::sleep(Duration::from_millis(300));
            })
        };
        let writer = write(
            "INSTANCE \"VI_1\" BACKUP 100\nnonsense\nINSTANCE \"VI_2\" MASTER 100\nINSTANCE \"VI_1\" MASTER 100\n",
        );
        assert_eq!(next(&mut rx).await, Some(VrrpReport::State(VrrpState::Backup)));
        assert_eq!(next(&mut rx).await, Some(VrrpReport::State(VrrpState::Master)));
        let Some(VrrpReport::Down(reason)) = next(&mut rx).await else {
            panic!("down after the writer closed")
        };
        assert!(reason.contains("closed"), "{reason}");
        writer.join().expect("writer");
        let writer = write("INSTANCE \"VI_1\" MASTER 100\n");
        assert_eq!(next(&mut rx).await, Some(VrrpReport::State(VrrpState::Master)));
        writer.join().expect("writer");
        drop(rx);
        tokio::time::timeout(Duration::from_secs(5), follower)
            .await
            .expect("stops once nobody listens")
            .expect("join");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
