//! A real 3-member etcd cluster on loopback for tests (Debian's etcd-server, started and stopped
//! by `scripts/etcd-cluster`; `scripts/install-deps` installs it). Shared by the tests of
//! `tenure-lead` and of the `tenure` binary (included by path); a cluster that cannot start fails
//! the test loudly, it never skips.
//!
//! One cluster at a time per test binary: [`Cluster::start`] holds a lock until the cluster is
//! dropped, because clusters started side by side on a loaded 2-core machine churn raft
//! elections, and a test must not depend on that.

// Each test binary uses a part of this module.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, MutexGuard, PoisonError};

static SERIAL: Mutex<()> = Mutex::new(());

/// A running 3-member cluster, stopped (and its directory removed) on drop, even when the test
/// panics; then the next test's cluster may start.
pub struct Cluster {
    dir: PathBuf,
    /// The client URLs of the three members.
    pub endpoints: Vec<String>,
    _serial: MutexGuard<'static, ()>,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/etcd-cluster")
}

impl Cluster {
    /// Starts members with client ports `base_port + 1..=3` and peer ports `base_port + 11..=13`.
    pub fn start(tag: &str, base_port: u16) -> Self {
        Self::start_at(tag, base_port, "127.0.0.1", None)
    }

    /// [`Cluster::start`] on address `host`, inside network namespace `netns` when given.
    pub fn start_at(tag: &str, base_port: u16, host: &str, netns: Option<&str>) -> Self {
        // A test that panicked poisons the lock; the next one may still run.
        let serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        let dir = std::env::temp_dir().join(format!("tenure-etcd-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = Command::new(script())
            .args(["start", dir.to_str().expect("utf-8"), &base_port.to_string()])
            .env("ETCD_HOST", host)
            .env("ETCD_NETNS", netns.unwrap_or(""))
            .output()
            .expect("run scripts/etcd-cluster (is bash there?)");
        assert!(
            out.status.success(),
            "etcd cluster did not start (run scripts/install-deps): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let endpoints =
            String::from_utf8(out.stdout).expect("utf-8").trim().split(',').map(str::to_owned).collect();
        Self { dir, endpoints, _serial: serial }
    }

    /// The member (`m1`..`m3`) that is the raft leader now.
    pub fn leader_member(&self) -> String {
        let out =
            Command::new(script()).args(["leader", self.dir.to_str().expect("utf-8")]).output().expect("run");
        assert!(out.status.success(), "no raft leader found");
        String::from_utf8(out.stdout).expect("utf-8").trim().to_owned()
    }

    /// SIGKILLs one member.
    pub fn kill(&self, member: &str) {
        let status = Command::new(script())
            .args(["kill", self.dir.to_str().expect("utf-8"), member])
            .status()
            .expect("run");
        assert!(status.success(), "kill {member}");
    }

    /// `etcdctl snapshot save` of the cluster (from member 1) into `file`; returns the etcd
    /// revision the snapshot holds.
    pub fn snapshot_save(&self, file: &std::path::Path) -> i64 {
        let out = self.script_output(&[
            "snapshot",
            self.dir.to_str().expect("utf-8"),
            file.to_str().expect("utf-8"),
        ]);
        out.trim().parse().unwrap_or_else(|_| panic!("a snapshot revision, not `{out}`"))
    }

    /// Stops every member, restores each from `file` (`etcdctl snapshot restore` with the same
    /// cluster token and members: the same cluster id) and starts them again; returns once the
    /// cluster answers health.
    pub fn restore(&self, file: &std::path::Path) {
        self.script_output(&["restore", self.dir.to_str().expect("utf-8"), file.to_str().expect("utf-8")]);
    }

    /// The cluster id member 1 answers with, in hex.
    pub fn cluster_id(&self) -> String {
        self.script_output(&["cluster-id", self.dir.to_str().expect("utf-8")]).trim().to_owned()
    }

    /// Runs `scripts/etcd-cluster ARGS`, panicking with its stderr when it fails; its stdout.
    fn script_output(&self, args: &[&str]) -> String {
        let out = Command::new(script()).args(args).output().expect("run scripts/etcd-cluster");
        assert!(out.status.success(), "etcd-cluster {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("utf-8")
    }

    /// Starts a killed member again on its data; returns once it answers health.
    pub fn revive(&self, member: &str) {
        let status = Command::new(script())
            .args(["revive", self.dir.to_str().expect("utf-8"), member])
            .status()
            .expect("run");
        assert!(status.success(), "revive {member}");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(script()).args(["stop", self.dir.to_str().expect("utf-8")]).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
