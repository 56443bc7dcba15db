//! `tenure demo` runs end to end on a temporary embedded store, narrates the fenced zombie, and
//! leaves nothing behind.

use std::process::Command;

#[test]
fn the_demo_fences_the_zombie_and_leaves_no_files() {
    let out = Command::new(env!("CARGO_BIN_EXE_tenure")).arg("demo").output().expect("tenure demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let store_line = stdout.lines().next().expect("first line names the store");
    let dir = store_line
        .strip_prefix("store: ")
        .and_then(|rest| rest.split(' ').next())
        .expect("store: DIR (embedded, redb), temporary");
    assert!(!std::path::Path::new(dir).exists(), "the temporary store {dir} is removed");
    let fenced: Vec<&str> = stdout.lines().filter(|l| l.trim_start().starts_with("fenced: ")).collect();
    assert_eq!(fenced.len(), 2, "the zombie's two planned verbs are fenced:\n{stdout}");
    assert!(fenced.iter().all(|l| l.ends_with("[stale-epoch]")), "{stdout}");
    assert!(stdout.contains("b seized every address"), "{stdout}");
    assert!(stdout.contains("violations 0"), "{stdout}");
}

#[test]
fn the_demo_refuses_a_directory_that_already_holds_a_store() {
    let dir = std::env::temp_dir().join(format!("tenure-demo-test-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("store")).expect("dir");
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["demo", "--dir"])
        .arg(&dir)
        .output()
        .expect("tenure demo runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already holds a demo store"));
}
