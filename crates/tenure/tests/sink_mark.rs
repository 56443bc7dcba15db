//! `tenure sink-mark show|reset` as an operator runs it, against a mark a real `FencedSink`
//! wrote: show prints the epoch; reset refuses without its confirmation flag and while a sink
//! holds the mark, changing nothing; with the flag it lowers a mark raised past every real term,
//! and the sink admits the real term again.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tenure_lead::LeaderEpoch;
use tenure_lead::sink::{FencedSink, Rejected, Stamp, read_mark};

const CONFIRMATION_FLAG: &str = "--yes-i-know-this-reopens-fencing";

/// Held by every test here. A sink's lock is an `flock` on an open file: a child that another
/// test thread forks inherits the descriptor and holds the lock until it execs, so a mark closed
/// and reopened in one test could read "in use" while another test starts `tenure`.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn tenure(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tenure")).args(args).output().expect("the tenure binary runs")
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tenure-sink-mark-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn epoch(value: u64) -> LeaderEpoch {
    LeaderEpoch::from_stored(value)
}

/// A mark poisoned by one stamp at `u64::MAX` (a sink without a ceiling admits it).
fn poisoned_mark(tag: &str) -> PathBuf {
    let path = scratch(tag).join("sink.mark");
    let mut sink = FencedSink::create(&path).expect("a new mark");
    sink.admit(&Stamp::unsigned(epoch(u64::MAX), b"poison")).expect("no ceiling: admitted");
    path
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Exactly one line on stderr, naming `path`; nothing on stdout.
fn assert_one_line_naming(output: &Output, path: &Path) {
    let stderr = text(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.contains(&path.display().to_string()), "names the file: {stderr:?}");
    assert!(output.stdout.is_empty(), "nothing on stdout: {:?}", text(&output.stdout));
}

#[test]
fn show_prints_the_stored_epoch() {
    let _serial = one_at_a_time();
    let path = poisoned_mark("show");
    let out = tenure(&["sink-mark", "show", path.to_str().expect("UTF-8 path")]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("{}: high-water epoch {}\n", path.display(), u64::MAX));
}

#[test]
fn show_refuses_a_missing_or_damaged_mark_in_one_line() {
    let _serial = one_at_a_time();
    let dir = scratch("show-bad");
    let missing = dir.join("none.mark");
    let out = tenure(&["sink-mark", "show", missing.to_str().expect("UTF-8 path")]);
    assert_eq!(out.status.code(), Some(2));
    assert_one_line_naming(&out, &missing);
    assert!(!missing.exists(), "show created nothing");
    let path = missing.to_str().expect("UTF-8 path");
    let out = tenure(&["sink-mark", "reset", path, "--to", "3", "--yes-i-know-this-reopens-fencing"]);
    assert_eq!(out.status.code(), Some(2), "a reset of a missing mark is refused");
    assert_one_line_naming(&out, &missing);
    assert!(!missing.exists(), "reset created no mark");
    assert!(std::fs::read_dir(&dir).expect("the folder").next().is_none(), "nor a lock file");

    let damaged = dir.join("damaged.mark");
    std::fs::write(&damaged, b"high-water-epoch 3\n").expect("write");
    let out = tenure(&["sink-mark", "show", damaged.to_str().expect("UTF-8 path")]);
    assert_eq!(out.status.code(), Some(2));
    assert_one_line_naming(&out, &damaged);
    assert!(text(&out.stderr).contains("corrupt"), "{}", text(&out.stderr));
}

#[test]
fn reset_without_the_confirmation_flag_refuses_and_changes_nothing() {
    let _serial = one_at_a_time();
    let path = poisoned_mark("unconfirmed");
    let before = std::fs::read(&path).expect("readable");
    let out = tenure(&["sink-mark", "reset", path.to_str().expect("UTF-8 path"), "--to", "41"]);
    assert_eq!(out.status.code(), Some(2));
    assert_one_line_naming(&out, &path);
    let stderr = text(&out.stderr);
    assert!(stderr.contains(CONFIRMATION_FLAG) && stderr.contains("deposed leader"), "explains: {stderr}");
    assert_eq!(std::fs::read(&path).expect("readable"), before, "the mark file is unchanged");
}

#[test]
fn reset_refuses_while_a_sink_holds_the_mark() {
    let _serial = one_at_a_time();
    let path = poisoned_mark("in-use");
    let sink = FencedSink::open_existing(&path).expect("a running sink");
    let before = std::fs::read(&path).expect("readable");
    let out =
        tenure(&["sink-mark", "reset", path.to_str().expect("UTF-8 path"), "--to", "41", CONFIRMATION_FLAG]);
    assert_eq!(out.status.code(), Some(1));
    assert_one_line_naming(&out, &path);
    assert!(text(&out.stderr).contains("stop the sink first"), "{}", text(&out.stderr));
    assert_eq!(std::fs::read(&path).expect("readable"), before, "the mark file is unchanged");
    assert_eq!(sink.high_water(), epoch(u64::MAX));
}

#[test]
fn a_confirmed_reset_lowers_a_poisoned_mark_and_the_sink_admits_the_real_term_again() {
    let _serial = one_at_a_time();
    let path = poisoned_mark("confirmed");
    {
        let mut blocked = FencedSink::open_existing(&path).expect("reopens");
        let refused = blocked.admit(&Stamp::unsigned(epoch(42), b"real")).expect_err("blocked for good");
        assert!(matches!(refused, Rejected::StaleEpoch { .. }), "{refused}");
    }
    let out =
        tenure(&["sink-mark", "reset", path.to_str().expect("UTF-8 path"), "--to", "41", CONFIRMATION_FLAG]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("{}: high-water epoch reset from {} to 41\n", path.display(), u64::MAX)
    );
    assert_eq!(read_mark(&path).expect("a valid mark"), epoch(41));
    let mut sink = FencedSink::open_existing(&path).expect("reopens");
    assert!(sink.admit(&Stamp::unsigned(epoch(42), b"real")).expect("the real term").raised);
    assert!(sink.admit(&Stamp::unsigned(epoch(40), b"old")).is_err(), "fencing holds from 41 up");
}

#[test]
fn reset_refuses_a_bad_epoch_argument() {
    let _serial = one_at_a_time();
    let path = poisoned_mark("bad-argument");
    let before = std::fs::read(&path).expect("readable");
    for bad in ["-1", "forty", "18446744073709551616"] {
        let out = tenure(&[
            "sink-mark",
            "reset",
            path.to_str().expect("UTF-8 path"),
            "--to",
            bad,
            CONFIRMATION_FLAG,
        ]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(text(&out.stderr).contains("--to"), "names the argument: {}", text(&out.stderr));
    }
    assert_eq!(std::fs::read(&path).expect("readable"), before, "the mark file is unchanged");
}
