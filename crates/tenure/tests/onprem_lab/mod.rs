//! The on-prem lab shared by the namespace tests and the failover comparison: two routers and
//! a client on one bridge, each in its own network namespace, veth pairs only, created and
//! removed by its user. Each router routes the floating address to a backend namespace of its
//! own that holds it (the kernel answers a proxied IPv4 address only when it routes it out
//! another interface), so the client reaches whichever backend sits behind the router that
//! answers.
//!
//! A fleet lab ([`Lab::fleet`]) adds what `tenure agent` processes need: an address on the
//! bridge for etcd (run in the switch namespace, [`Lab::ETCD_HOST`]) and a management link from
//! the root namespace to each router ([`Lab::mgmt`]), through which the test reaches each
//! agent's API.
//!
//! Needs root (CI runs as root), `ip` (iproute2), `tcpdump` and `ping` (scripts/install-deps).
//! Without them the lab fails, naming what is missing: nothing skips.

// Each user takes a part of this module.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use super::process::{mgmt_link, run, veth};

#[path = "../../../tenure-lead/tests/support/etcd_cluster.rs"]
pub mod etcd_cluster;
pub mod probes;
pub mod routers;

static FLEET_SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The lab: namespaces `<tag>-sw` (the bridge), `<tag>-cl` (the client), `<tag>-r1`/`-r2`
/// (routers) and `<tag>-b1`/`-b2` (their backends). Deleted on drop, with every process in them.
pub struct Lab {
    pub tag: String,
    pub v6: bool,
    /// Fleet labs: one at a time per process (they share the root namespace's addresses).
    _serial: Option<std::sync::MutexGuard<'static, ()>>,
}

impl Lab {
    /// etcd's address on the bridge (a fleet lab).
    pub const ETCD_HOST: &str = "10.0.0.254";

    /// A lab for executor calls made from the test process.
    pub fn new(tag: &str, v6: bool) -> Self {
        Self::build(tag, v6, false)
    }

    /// A lab for agent processes: etcd's address on the bridge and management links.
    pub fn fleet(tag: &str, v6: bool) -> Self {
        Self::build(tag, v6, true)
    }

    fn build(tag: &str, v6: bool, fleet: bool) -> Self {
        let uid = Command::new("id").arg("-u").output().expect("id");
        assert_eq!(
            String::from_utf8_lossy(&uid.stdout).trim(),
            "0",
            "the network-namespace tests need root (CI runs as root)"
        );
        let serial = fleet.then(|| FLEET_SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        let lab = Self { tag: format!("tn{}{tag}", std::process::id() % 100_000), v6, _serial: serial };
        lab.cleanup();
        let ns = |n: &str| lab.ns(n);
        for n in ["sw", "cl", "r1", "r2", "b1", "b2"] {
            run(&["ip", "netns", "add", &ns(n)]);
            lab.exec(n, &["ip", "link", "set", "lo", "up"]);
        }
        lab.exec("sw", &["ip", "link", "add", "br0", "type", "bridge"]);
        lab.exec("sw", &["ip", "link", "set", "br0", "up"]);
        if fleet {
            lab.exec("sw", &["ip", "addr", "add", &format!("{}/24", Self::ETCD_HOST), "dev", "br0"]);
        }
        for (n, host) in [("cl", "100"), ("r1", "1"), ("r2", "2")] {
            let port = format!("p{n}");
            veth(&ns(n), "lan", &ns("sw"), &port);
            lab.exec("sw", &["ip", "link", "set", &port, "master", "br0", "up"]);
            lab.exec(n, &["ip", "addr", "add", &format!("10.0.0.{host}/24"), "dev", "lan"]);
            lab.exec(n, &["ip", "addr", "add", &format!("fd00::{host}/64"), "dev", "lan", "nodad"]);
            lab.exec(n, &["ip", "link", "set", "lan", "up"]);
        }
        for (r, b) in [("r1", "b1"), ("r2", "b2")] {
            veth(&ns(r), "svc", &ns(b), "wan");
            lab.exec(r, &["ip", "addr", "add", "192.168.9.1/30", "dev", "svc"]);
            lab.exec(r, &["ip", "addr", "add", "fd09::1/64", "dev", "svc", "nodad"]);
            lab.exec(r, &["ip", "link", "set", "svc", "up"]);
            lab.exec(b, &["ip", "addr", "add", "192.168.9.2/30", "dev", "wan"]);
            lab.exec(b, &["ip", "addr", "add", "fd09::2/64", "dev", "wan", "nodad"]);
            lab.exec(b, &["ip", "link", "set", "wan", "up"]);
            lab.exec(b, &["ip", "addr", "add", "10.0.0.10/32", "dev", "lo"]);
            lab.exec(b, &["ip", "addr", "add", "fd00::10/128", "dev", "lo", "nodad"]);
            lab.exec(b, &["ip", "route", "add", "default", "via", "192.168.9.1"]);
            lab.exec(b, &["ip", "-6", "route", "add", "default", "via", "fd09::1"]);
            lab.exec(r, &["sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"]);
            lab.exec(r, &["ip", "route", "add", "10.0.0.10/32", "via", "192.168.9.2", "dev", "svc"]);
            lab.exec(r, &["ip", "-6", "route", "add", "fd00::10/128", "via", "fd09::2", "dev", "svc"]);
        }
        if fleet {
            for i in 1..=2 {
                let root_side = format!("{}m{i}", lab.tag);
                let (root, router) = (format!("10.214.{i}.1/30"), format!("{}/30", Self::mgmt(i)));
                mgmt_link(&root_side, &ns(&format!("r{i}")), &root, &router);
            }
        }
        lab
    }

    /// Router `i`'s (1 or 2) address on its management link, reachable from the root namespace.
    pub fn mgmt(i: usize) -> String {
        format!("10.214.{i}.2")
    }

    /// The proxy entries on router `ns`'s `lan`, as `ip neigh show proxy` lists them.
    pub fn proxies(&self, ns: &str) -> Vec<IpAddr> {
        let mut found: Vec<IpAddr> = ["-4", "-6"]
            .iter()
            .flat_map(|family| {
                self.exec(ns, &["ip", family, "neigh", "show", "proxy", "dev", "lan"])
                    .lines()
                    .filter_map(|l| l.split_whitespace().next().and_then(|a| a.parse().ok()))
                    .collect::<Vec<IpAddr>>()
            })
            .collect();
        found.sort_unstable();
        found
    }

    pub fn ns(&self, name: &str) -> String {
        format!("{}-{name}", self.tag)
    }

    pub fn exec(&self, ns: &str, args: &[&str]) -> String {
        let mut full = vec!["ip", "netns", "exec"];
        let name = self.ns(ns);
        full.push(&name);
        full.extend_from_slice(args);
        run(&full)
    }

    pub fn address(&self) -> IpAddr {
        if self.v6 { "fd00::10".parse().expect("literal") } else { "10.0.0.10".parse().expect("literal") }
    }

    pub fn mac(&self, ns: &str) -> String {
        let out = self.exec(ns, &["ip", "-o", "link", "show", "lan"]);
        let at = out.find("link/ether ").expect("an Ethernet link") + "link/ether ".len();
        out[at..at + 17].to_owned()
    }

    /// Asserts that the client's question for the address (ARP request or neighbour
    /// solicitation, asked afresh) is answered by router `ns`'s MAC alone — every answer on the
    /// wire up to the end of the capture, since a second router's would come with the first —
    /// and that a ping gets through.
    pub fn answered_by(&self, ns: &str) {
        let address = self.address();
        let mac = self.mac(ns);
        let capture = Capture::start(self);
        // The client may have resolved the address already (it retries a failed resolution):
        // forget it, so that the question is asked again while the capture runs.
        self.exec("cl", &["ip", "neigh", "flush", "dev", "lan"]);
        assert!(self.ping(), "the client reaches {address} through {ns}");
        assert_eq!(self.client_entry().as_deref(), Some(mac.as_str()), "resolved to {ns}'s MAC");
        let answer = if self.v6 { "neighbor advertisement" } else { "Reply" };
        // The address as a word of the line: 10.0.0.10 is not in the client's own 10.0.0.100.
        let text = address.to_string();
        let about =
            |l: &str| l.contains(answer) && l.split_whitespace().any(|w| w.trim_end_matches(',') == text);
        let first = capture.until(about, Duration::from_secs(5));
        let mut answers: Vec<String> = capture.finish().into_iter().filter(|l| about(l)).collect();
        answers.push(first);
        assert!(answers.iter().all(|l| l.contains(&format!(" {mac} >"))), "only {ns} answers: {answers:#?}");
    }

    /// Whether a line of the client's capture is an announcement of the address from router
    /// `ns`: a gratuitous ARP (IPv4) or an unsolicited neighbour advertisement (IPv6).
    pub fn announcement(&self, ns: &str) -> impl Fn(&str) -> bool + use<> {
        let mac = self.mac(ns);
        let address = self.address();
        let v6 = self.v6;
        move |l: &str| {
            l.contains(&format!(" {mac} >"))
                && if v6 {
                    l.contains("neighbor advertisement") && l.contains(&format!("tgt is {address}"))
                } else {
                    l.contains(&format!("Request who-has {address} (ff:ff:ff:ff:ff:ff) tell {address}"))
                }
        }
    }

    /// The MAC the client's neighbour table has for the address, if any.
    pub fn client_entry(&self) -> Option<String> {
        let family = if self.v6 { "-6" } else { "-4" };
        let out =
            self.exec("cl", &["ip", family, "neigh", "show", &self.address().to_string(), "dev", "lan"]);
        out.split_whitespace().skip_while(|w| *w != "lladdr").nth(1).map(str::to_owned)
    }

    /// Whether one ping from the client reaches the address (within 2 s).
    pub fn ping(&self) -> bool {
        let ns = self.ns("cl");
        let address = self.address().to_string();
        Command::new("ip")
            .args(["netns", "exec", &ns, "ping", "-c", "1", "-W", "2", &address])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("ping (scripts/install-deps installs iputils-ping)")
            .success()
    }

    /// Runs `work` on a thread moved into namespace `ns`, on a runtime of its own there.
    pub fn inside<T: Send + 'static, F: std::future::Future<Output = T>>(
        &self,
        ns: &str,
        work: impl FnOnce() -> F + Send + 'static,
    ) -> T {
        let enter = self.enter(ns);
        std::thread::spawn(move || {
            enter();
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(work())
        })
        .join()
        .expect("the namespace thread")
    }

    /// What moves the calling thread into namespace `ns` (setns), to be called on a thread of
    /// its own.
    pub fn enter(&self, ns: &str) -> impl FnOnce() + Send + 'static + use<> {
        let path = format!("/var/run/netns/{}", self.ns(ns));
        move || {
            let file = std::fs::File::open(&path).expect("the namespace");
            rustix::thread::move_into_link_name_space(
                std::os::fd::AsFd::as_fd(&file),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .expect("setns");
        }
    }

    pub fn cleanup(&self) {
        let namespaces: Vec<String> =
            ["sw", "cl", "r1", "r2", "b1", "b2"].iter().map(|n| self.ns(n)).collect();
        let links: Vec<String> = (1..=2).map(|i| format!("{}m{i}", self.tag)).collect();
        super::process::remove_lab(&namespaces, &links);
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// `tcpdump` on the client's `lan`, line by line: ARP, or ICMPv6 neighbour discovery.
pub struct Capture {
    child: Child,
    lines: Receiver<String>,
}

impl Capture {
    pub fn start(lab: &Lab) -> Self {
        let filter = if lab.v6 { "icmp6 and (ip6[40] == 135 or ip6[40] == 136)" } else { "arp" };
        let ns = lab.ns("cl");
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                "tcpdump",
                "-i",
                "lan",
                "-n",
                "-e",
                "-l",
                "--immediate-mode",
                "-tt",
                filter,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump (scripts/install-deps installs it)");
        let (send, lines) = channel();
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let ready = send.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        // tcpdump says "listening on" on stderr once its socket is open.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("listening on") && ready.send("<listening>".into()).is_err() {
                    break;
                }
            }
        });
        let capture = Self { child, lines };
        capture.until(|l| l == "<listening>", Duration::from_secs(10));
        capture
    }

    /// The first line satisfying `want`, within `timeout`.
    pub fn until(&self, want: impl Fn(&str) -> bool, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if want(&line) => return line,
                Ok(_) => {}
                Err(_) => panic!("no such line on the client's wire within {timeout:?}"),
            }
        }
    }

    /// Stops the capture (SIGINT: tcpdump prints what it holds and exits) and returns every line
    /// not read yet, up to the end of its output (bounded).
    pub fn finish(self) -> Vec<String> {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-INT", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut rest = Vec::new();
        loop {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => rest.push(line),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return rest,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("tcpdump did not stop within 10 s"),
            }
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What keepalived manages in the lab.
#[derive(Clone, Copy, Debug)]
pub enum Vrrp<'a> {
    /// keepalived elects, tenure acts (`authority: vrrp`): a VRRP instance whose only address is
    /// a placeholder on `lo` (keepalived 2.2 never becomes master of an instance without one),
    /// its transitions written to `fifo`.
    Authority { fifo: &'a std::path::Path },
    /// keepalived alone: it holds `vip` on `lan` itself and announces it.
    Alone { vip: &'a str },
}

/// keepalived beside a router, in its own process group (`-n`: no daemon; `-P`: VRRP only).
pub struct Keepalived {
    child: Child,
}

impl Keepalived {
    /// The VRRP instance every router runs.
    pub const INSTANCE: &str = "VI_1";

    /// Starts keepalived in router `ns` with `priority`, `advert_int` (seconds, VRRPv3), its
    /// files under `dir`. Both routers start as BACKUP with `nopreempt`: a router that comes
    /// back does not take the address back.
    pub fn start(
        lab: &Lab,
        ns: &str,
        dir: &std::path::Path,
        priority: u8,
        advert_int: &str,
        vrrp: Vrrp<'_>,
    ) -> Self {
        use std::os::unix::process::CommandExt as _;
        let (fifo, vip) = match vrrp {
            Vrrp::Authority { fifo } => {
                (format!("  vrrp_notify_fifo {}\n", fifo.display()), "192.0.2.251/32 dev lo".to_owned())
            }
            Vrrp::Alone { vip } => (String::new(), format!("{vip}/24 dev lan")),
        };
        let config = dir.join(format!("keepalived-{ns}.conf"));
        // A tracked file: a non-zero number in it puts the instance in FAULT ([`Self::fault_file`]).
        let track = Self::fault_file(dir, ns);
        if !track.exists() {
            std::fs::write(&track, "0\n").expect("write keepalived's tracked file");
        }
        std::fs::write(
            &config,
            format!(
                "global_defs {{\n  router_id {ns}\n  vrrp_version 3\n{fifo}}}\n\
                 vrrp_track_file fault {{\n  file {}\n}}\n\
                 vrrp_instance {} {{\n  state BACKUP\n  nopreempt\n  interface lan\n  virtual_router_id 51\n  \
                 priority {priority}\n  advert_int {advert_int}\n  virtual_ipaddress {{\n    {vip}\n  }}\n  \
                 track_file {{\n    fault weight 0\n  }}\n}}\n",
                track.display(),
                Self::INSTANCE
            ),
        )
        .expect("write keepalived's config");
        // Fresh pid files each start: a killed keepalived leaves its own behind, naming a VRRP
        // child that may linger as a zombie (nothing reaps it in a container), and keepalived
        // would take that for an instance still running and exit.
        static STARTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let file = |name: &str| dir.join(format!("keepalived-{ns}-{n}.{name}"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("keepalived-{ns}.log")))
            .expect("keepalived's log");
        let child = Command::new("ip")
            .args(["netns", "exec", &lab.ns(ns), "keepalived", "-n", "-l", "-D", "-P", "-f"])
            .arg(&config)
            .arg("-p")
            .arg(file("pid"))
            .arg("-r")
            .arg(file("vrrp.pid"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("keepalived (scripts/install-deps installs it)");
        Self { child }
    }

    /// The file keepalived in router `ns` tracks (`vrrp_track_file`, weight 0): `1` in it puts
    /// the instance in FAULT, `0` takes it out.
    pub fn fault_file(dir: &std::path::Path, ns: &str) -> std::path::PathBuf {
        dir.join(format!("keepalived-{ns}.track"))
    }

    /// SIGHUP to keepalived: it reloads its configuration (and closes and reopens its FIFO).
    pub fn reload(&self) {
        let _ = Command::new("kill").args(["-HUP", &self.child.id().to_string()]).status();
    }

    /// SIGKILL to keepalived's whole process group: no priority-0 advert, no cleanup.
    pub fn kill(mut self) {
        self.signal("KILL");
        let _ = self.child.wait();
    }

    /// SIGTERM: keepalived says goodbye (a priority-0 advert) and leaves; waited for (bounded).
    pub fn stop(mut self) {
        self.request_stop();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().expect("wait").is_none() {
            assert!(Instant::now() < deadline, "keepalived did not stop within 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, not waited for ([`Keepalived::stop`] waits): keepalived leaves as it does on
    /// `stop`, while the caller watches.
    pub fn request_stop(&self) {
        self.signal("TERM");
    }

    fn signal(&self, name: &str) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args([&format!("-{name}"), "--", &group]).status();
    }
}

impl Drop for Keepalived {
    fn drop(&mut self) {
        self.signal("KILL");
        let _ = self.child.wait();
    }
}
