//! The exec executor (SPEC 7's exec contract) with real scripts: what the command receives, what
//! its exit means, and that a timed-out or abandoned command leaves no process behind.
//!
//! (That a stale action never reaches the command is the gate's business, in the agent loop; its
//! test drives the agent.)

#![cfg(unix)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tenure::exec::{ExecHook, ExecutionOutcome, Executor, execute_within};
use tenure_core::model::{CaptureDomain, CaptureEpoch, OwnershipEpoch, StampedAction, Verb};
use tokio::time::Instant;

/// Longest any one test waits for a hook that should have been stopped long before: a hook that
/// is not stopped sleeps 60 s, so a test that passes this bound fails instead of hanging.
const HOOK_STOP_WAIT_MAX: Duration = Duration::from_secs(20);

/// A fresh folder for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("exec_hook-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

/// Writes an executable POSIX sh script; `$DIR` in `body` is the scratch folder.
fn script(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    let text = format!("#!/bin/sh\nDIR='{}'\n{body}\n", dir.display());
    fs::write(&path, text).expect("write script");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
    path.display().to_string()
}

fn action(verb: Verb) -> StampedAction {
    StampedAction::new(
        "edge",
        "10.0.0.10".parse().expect("literal"),
        verb,
        "router-a",
        "hook",
        "eni-a",
        CaptureDomain::new("hook", "g1"),
        CaptureEpoch::from_stored(7),
        OwnershipEpoch::from_stored(3),
    )
}

fn far_deadline() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

/// Runs `hook` on `action`, failing the test if it does not return within
/// [`HOOK_STOP_WAIT_MAX`].
async fn run(hook: &ExecHook, action: &StampedAction) -> ExecutionOutcome {
    tokio::time::timeout(HOOK_STOP_WAIT_MAX, execute_within(hook, action, far_deadline()))
        .await
        .expect("the hook returned within the bound")
}

/// Whether a process is running: it exists and is not a zombie (an orphan killed with its group
/// may stay a zombie until its new parent reaps it; it runs nothing).
fn running(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
            !matches!(state, Some('Z' | 'X'))
        }
    }
}

/// Reads a pid a script wrote, waiting for the file to appear.
async fn read_pid(path: &Path) -> u32 {
    let started = Instant::now();
    loop {
        if let Ok(text) = fs::read_to_string(path)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        assert!(started.elapsed() < HOOK_STOP_WAIT_MAX, "{} never written", path.display());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits (bounded) until `pid` no longer runs; false if it still does at the bound.
async fn gone(pid: u32) -> bool {
    let started = Instant::now();
    while running(pid) {
        if started.elapsed() > Duration::from_secs(5) {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

#[tokio::test]
async fn the_command_gets_the_stamped_action_on_stdin_and_in_its_environment() {
    let dir = scratch("success");
    let hook = script(
        &dir,
        "hook.sh",
        r#"cat > "$DIR/stdin.json"
env | grep '^TENURE_' | sort > "$DIR/env.txt"
echo "first line"
echo "assigned $TENURE_ADDRESS to $TENURE_NIC"
echo"#,
    );
    let hook = ExecHook::new(vec![hook], Duration::from_secs(10));
    let acquire = action(Verb::Acquire);
    let outcome = run(&hook, &acquire).await;
    assert_eq!(outcome, ExecutionOutcome::Executed { detail: "assigned 10.0.0.10 to eni-a".to_owned() });

    let stdin = fs::read_to_string(dir.join("stdin.json")).expect("the script saved its stdin");
    assert_eq!(stdin.lines().count(), 1, "one JSON object on one line: {stdin:?}");
    let json: serde_json::Value = serde_json::from_str(&stdin).expect("stdin is JSON");
    let expected = serde_json::json!({
        "idempotencyKey": acquire.idempotency_key().as_str(),
        "verb": "acquire",
        "pool": "edge",
        "address": "10.0.0.10",
        "holder": "router-a",
        "provider": "hook",
        "nic": "eni-a",
        "captureDomain": "provider:hook:placement:g1",
        "ownershipEpoch": 3,
        "captureEpoch": 7,
    });
    assert_eq!(json, expected);

    let expected_env: BTreeMap<String, String> = [
        ("TENURE_IDEMPOTENCY_KEY", acquire.idempotency_key().as_str()),
        ("TENURE_VERB", "acquire"),
        ("TENURE_POOL", "edge"),
        ("TENURE_ADDRESS", "10.0.0.10"),
        ("TENURE_HOLDER", "router-a"),
        ("TENURE_PROVIDER", "hook"),
        ("TENURE_NIC", "eni-a"),
        ("TENURE_CAPTURE_DOMAIN", "provider:hook:placement:g1"),
        ("TENURE_OWNERSHIP_EPOCH", "3"),
        ("TENURE_CAPTURE_EPOCH", "7"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    // Everything else of the agent's environment is inherited; leave out what this test process
    // itself has (a `TENURE_ENDPOINT` of the developer's shell, say).
    let env: BTreeMap<String, String> = fs::read_to_string(dir.join("env.txt"))
        .expect("the script saved its environment")
        .lines()
        .filter_map(|line| line.split_once('='))
        .filter(|(k, _)| expected_env.contains_key(*k) || std::env::var_os(k).is_none())
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    assert_eq!(env, expected_env);

    // A release says `release`; stdin holds SPEC 7's fields and nothing else.
    let release = action(Verb::Release);
    let outcome = run(&hook, &release).await;
    assert!(matches!(outcome, ExecutionOutcome::Executed { .. }), "{outcome:?}");
    let json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.join("stdin.json")).expect("saved")).expect("JSON");
    assert_eq!(json["verb"].as_str(), Some("release"));
    assert_eq!(json.as_object().map(serde_json::Map::len), Some(10), "{json}");
    let _ = fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_silent_success_says_exit_0_and_arguments_are_passed_without_a_shell() {
    let dir = scratch("args");
    let hook = script(&dir, "hook.sh", r#"printf '%s|' "$@" > "$DIR/args.txt""#);
    let hook =
        ExecHook::new(vec![hook, "two words".to_owned(), "$HOME;*".to_owned()], Duration::from_secs(10));
    let outcome = run(&hook, &action(Verb::Acquire)).await;
    assert_eq!(outcome, ExecutionOutcome::Executed { detail: "exit 0".to_owned() });
    assert_eq!(fs::read_to_string(dir.join("args.txt")).expect("saved"), "two words|$HOME;*|");
    let _ = fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_failure_gives_the_last_stderr_line_as_the_reason() {
    let dir = scratch("failure");
    let hook = script(
        &dir,
        "hook.sh",
        r#"echo "not this one" >&2
echo "on stdout"
echo "AssignPrivateIpAddresses: UnauthorizedOperation" >&2
echo "   " >&2
exit 3"#,
    );
    let outcome = run(&ExecHook::new(vec![hook], Duration::from_secs(10)), &action(Verb::Acquire)).await;
    assert_eq!(
        outcome,
        ExecutionOutcome::Failed { reason: "AssignPrivateIpAddresses: UnauthorizedOperation".to_owned() }
    );
    let (journal, detail) = outcome.for_journal();
    assert_eq!(journal, tenure_core::log::ActionOutcome::Failed);
    assert_eq!(detail, "AssignPrivateIpAddresses: UnauthorizedOperation");

    let silent = script(&dir, "silent.sh", "exit 42");
    let outcome = run(&ExecHook::new(vec![silent], Duration::from_secs(10)), &action(Verb::Acquire)).await;
    assert_eq!(outcome, ExecutionOutcome::Failed { reason: "exit status 42".to_owned() });

    let signalled = script(&dir, "signalled.sh", "echo dying >&2\nkill -TERM $$\nsleep 5");
    let outcome = run(&ExecHook::new(vec![signalled], Duration::from_secs(10)), &action(Verb::Acquire)).await;
    assert_eq!(outcome, ExecutionOutcome::Failed { reason: "killed by SIGTERM".to_owned() });
    let _ = fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_command_past_its_timeout_is_killed_and_its_outcome_unknown() {
    let dir = scratch("timeout");
    let hook = script(&dir, "hook.sh", "echo $$ > \"$DIR/pid\"\nsleep 60");
    let hook = ExecHook::new(vec![hook], Duration::from_millis(300));
    let outcome = run(&hook, &action(Verb::Acquire)).await;
    assert_eq!(
        outcome,
        ExecutionOutcome::Unknown {
            reason: "timed out after 300ms; the command's process group was killed".to_owned()
        }
    );
    let (journal, _) = outcome.for_journal();
    assert_eq!(journal, tenure_core::log::ActionOutcome::Failed, "journaled failed, as SPEC 7 says");
    let pid = read_pid(&dir.join("pid")).await;
    assert!(!running(pid), "the command (pid {pid}) was killed and reaped before the call returned");
    let _ = fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_calls_deadline_bounds_the_command_too() {
    let dir = scratch("deadline");
    let hook = script(&dir, "hook.sh", "sleep 60");
    let hook = ExecHook::new(vec![hook], Duration::from_secs(60));
    let deadline = Instant::now() + Duration::from_millis(300);
    let outcome = tokio::time::timeout(HOOK_STOP_WAIT_MAX, hook.execute(&action(Verb::Acquire), deadline))
        .await
        .expect("returned within the bound");
    assert!(
        matches!(&outcome, ExecutionOutcome::Unknown { reason } if reason.starts_with("timed out after ")),
        "{outcome:?}"
    );
    let _ = fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_timeout_kills_the_children_of_the_command_too() {
    let dir = scratch("group");
    let hook = script(
        &dir,
        "hook.sh",
        r#"sleep 60 &
echo $! > "$DIR/child.pid"
echo $$ > "$DIR/pid"
wait"#,
    );
    let hook = ExecHook::new(vec![hook], Duration::from_millis(300));
    let outcome = run(&hook, &action(Verb::Acquire)).await;
    assert!(matches!(outcome, ExecutionOutcome::Unknown { .. }), "{outcome:?}");
    let leader = read_pid(&dir.join("pid")).await;
    let child = read_pid(&dir.join("child.pid")).await;
    assert!(!running(leader), "the command was killed");
    assert!(gone(child).await, "its child (pid {child}) was killed with its process group");
    let _ = fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_dropped_call_kills_the_command_and_its_group() {
    let dir = scratch("dropped");
    let hook = script(
        &dir,
        "hook.sh",
        r#"sleep 60 &
echo $! > "$DIR/child.pid"
echo $$ > "$DIR/pid"
wait"#,
    );
    let hook = ExecHook::new(vec![hook], Duration::from_secs(60));
    let acquire = action(Verb::Acquire);
    let abandoned =
        tokio::time::timeout(Duration::from_millis(500), hook.execute(&acquire, far_deadline())).await;
    assert!(abandoned.is_err(), "the call was still running when it was dropped");
    let leader = read_pid(&dir.join("pid")).await;
    let child = read_pid(&dir.join("child.pid")).await;
    assert!(gone(leader).await, "the command (pid {leader}) was killed when its call was dropped");
    assert!(gone(child).await, "and so was its child (pid {child})");
    let _ = fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_background_child_holding_stdout_does_not_hold_the_call() {
    let dir = scratch("background");
    let hook = script(
        &dir,
        "hook.sh",
        r#"sleep 60 &
echo $! > "$DIR/child.pid"
echo "started the helper"
exit 0"#,
    );
    let hook = ExecHook::new(vec![hook], Duration::from_secs(30));
    let outcome = run(&hook, &action(Verb::Acquire)).await;
    assert_eq!(outcome, ExecutionOutcome::Executed { detail: "started the helper".to_owned() });
    let child = read_pid(&dir.join("child.pid")).await;
    assert!(running(child), "a command's background process is left alone when the command exits");
    let _ = std::process::Command::new("kill").arg(child.to_string()).status();
    let _ = fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_command_that_cannot_start_fails_with_the_os_error() {
    let dir = scratch("cannot-start");
    let missing = dir.join("no-such-hook").display().to_string();
    let outcome =
        run(&ExecHook::new(vec![missing.clone()], Duration::from_secs(10)), &action(Verb::Garp)).await;
    match outcome {
        ExecutionOutcome::Failed { reason } => {
            assert!(reason.starts_with(&format!("cannot start `{missing}`: ")), "{reason}");
            assert!(reason.contains("No such file"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let not_executable = dir.join("plain.sh");
    fs::write(&not_executable, "#!/bin/sh\nexit 0\n").expect("write");
    fs::set_permissions(&not_executable, fs::Permissions::from_mode(0o644)).expect("chmod");
    let outcome = run(
        &ExecHook::new(vec![not_executable.display().to_string()], Duration::from_secs(10)),
        &action(Verb::Garp),
    )
    .await;
    assert!(
        matches!(&outcome, ExecutionOutcome::Failed { reason } if reason.contains("Permission denied")),
        "{outcome:?}"
    );
    let outcome = run(&ExecHook::new(Vec::new(), Duration::from_secs(10)), &action(Verb::Garp)).await;
    assert!(matches!(outcome, ExecutionOutcome::Failed { .. }), "{outcome:?}");
    let _ = fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_command_writing_a_lot_does_not_hang_and_only_the_tail_is_kept() {
    let dir = scratch("big");
    let hook = script(
        &dir,
        "hook.sh",
        r#"head -c 20000000 /dev/zero | tr '\0' 'x' >&2
echo >&2
head -c 20000000 /dev/zero | tr '\0' 'y'
echo
echo "the end"
echo "the reason" >&2
exit 1"#,
    );
    let outcome = run(&ExecHook::new(vec![hook], Duration::from_secs(15)), &action(Verb::Acquire)).await;
    assert_eq!(outcome, ExecutionOutcome::Failed { reason: "the reason".to_owned() });

    // A command that never stops writing, and never reads its stdin, is stopped at its timeout.
    let endless = script(&dir, "endless.sh", "exec yes");
    let outcome =
        run(&ExecHook::new(vec![endless], Duration::from_millis(500)), &action(Verb::Acquire)).await;
    assert!(matches!(outcome, ExecutionOutcome::Unknown { .. }), "{outcome:?}");
    let _ = fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_command_that_ignores_its_stdin_still_succeeds() {
    let dir = scratch("ignores-stdin");
    let hook = script(&dir, "hook.sh", "exec 0<&-\necho ok");
    let outcome = run(&ExecHook::new(vec![hook], Duration::from_secs(10)), &action(Verb::Acquire)).await;
    assert_eq!(outcome, ExecutionOutcome::Executed { detail: "ok".to_owned() });
    let _ = fs::remove_dir_all(dir);
}
