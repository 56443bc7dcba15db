//! `etcdctl` against a test cluster, for the fleet tests that read or change etcd's keys by hand.

use std::process::{Command, Stdio};

/// `etcdctl ARGS` against `endpoints`, which must succeed: its stdout.
pub fn etcdctl(endpoints: &str, args: &[&str]) -> String {
    let out = Command::new("etcdctl")
        .args(["--endpoints", endpoints])
        .args(args)
        .env("ETCDCTL_API", "3")
        .stderr(Stdio::inherit())
        .output()
        .expect("etcdctl");
    assert!(out.status.success(), "etcdctl {args:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}
