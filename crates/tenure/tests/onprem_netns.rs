//! The on-prem executor on a real L2 segment (issue 10): two routers and a client on one bridge,
//! each in its own network namespace, veth pairs only, created and removed by the test. Each
//! router routes the floating address to a backend namespace of its own that holds it (the
//! kernel answers a proxied IPv4 address only when it routes it out another interface), so the
//! client reaches whichever backend sits behind the router that answers.
//!
//! Needs root (CI runs as root), `ip` (iproute2), `tcpdump` and `ping` (scripts/install-deps).
//! Without them every test here fails, naming what is missing: none skips.
//!
//! The executor runs in the test process, on a thread moved into the router's namespace
//! (`setns`), with a runtime of its own: netlink and raw sockets opened there belong to that
//! namespace, as they would in an agent started inside it.

#![cfg(all(target_os = "linux", feature = "onprem"))]

mod process;

use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use tenure::exec::onprem::{OnpremExecutor, proxy_entries};
use tenure::exec::{ExecutionOutcome, execute_within};
use tenure_core::model::{CaptureDomain, CaptureEpoch, OwnershipEpoch, StampedAction, Verb};

use process::run;

/// The lab: namespaces `<tag>-sw` (the bridge), `<tag>-cl` (the client), `<tag>-r1`/`-r2`
/// (routers) and `<tag>-b1`/`-b2` (their backends). Deleted on drop, with every process in them.
struct Lab {
    tag: String,
    v6: bool,
}

impl Lab {
    fn new(tag: &str, v6: bool) -> Self {
        let uid = Command::new("id").arg("-u").output().expect("id");
        assert_eq!(
            String::from_utf8_lossy(&uid.stdout).trim(),
            "0",
            "the network-namespace tests need root (CI runs as root)"
        );
        let lab = Self { tag: format!("tn{}{tag}", std::process::id() % 100_000), v6 };
        lab.cleanup();
        let ns = |n: &str| lab.ns(n);
        for n in ["sw", "cl", "r1", "r2", "b1", "b2"] {
            run(&["ip", "netns", "add", &ns(n)]);
            lab.exec(n, &["ip", "link", "set", "lo", "up"]);
        }
        lab.exec("sw", &["ip", "link", "add", "br0", "type", "bridge"]);
        lab.exec("sw", &["ip", "link", "set", "br0", "up"]);
        for (n, host) in [("cl", "100"), ("r1", "1"), ("r2", "2")] {
            let port = format!("p{n}");
            run(&[
                "ip",
                "link",
                "add",
                "lan",
                "netns",
                &ns(n),
                "type",
                "veth",
                "peer",
                "name",
                &port,
                "netns",
                &ns("sw"),
            ]);
            lab.exec("sw", &["ip", "link", "set", &port, "master", "br0", "up"]);
            lab.exec(n, &["ip", "addr", "add", &format!("10.0.0.{host}/24"), "dev", "lan"]);
            lab.exec(n, &["ip", "addr", "add", &format!("fd00::{host}/64"), "dev", "lan", "nodad"]);
            lab.exec(n, &["ip", "link", "set", "lan", "up"]);
        }
        for (r, b) in [("r1", "b1"), ("r2", "b2")] {
            run(&[
                "ip",
                "link",
                "add",
                "svc",
                "netns",
                &ns(r),
                "type",
                "veth",
                "peer",
                "name",
                "wan",
                "netns",
                &ns(b),
            ]);
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
        lab
    }

    fn ns(&self, name: &str) -> String {
        format!("{}-{name}", self.tag)
    }

    fn exec(&self, ns: &str, args: &[&str]) -> String {
        let mut full = vec!["ip", "netns", "exec"];
        let name = self.ns(ns);
        full.push(&name);
        full.extend_from_slice(args);
        run(&full)
    }

    fn address(&self) -> IpAddr {
        if self.v6 { "fd00::10".parse().expect("literal") } else { "10.0.0.10".parse().expect("literal") }
    }

    fn mac(&self, ns: &str) -> String {
        let out = self.exec(ns, &["ip", "-o", "link", "show", "lan"]);
        let at = out.find("link/ether ").expect("an Ethernet link") + "link/ether ".len();
        out[at..at + 17].to_owned()
    }

    /// The MAC the client's neighbour table has for the address, if any.
    fn client_entry(&self) -> Option<String> {
        let family = if self.v6 { "-6" } else { "-4" };
        let out =
            self.exec("cl", &["ip", family, "neigh", "show", &self.address().to_string(), "dev", "lan"]);
        out.split_whitespace().skip_while(|w| *w != "lladdr").nth(1).map(str::to_owned)
    }

    /// Whether one ping from the client reaches the address (within 2 s).
    fn ping(&self) -> bool {
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
    fn inside<T: Send + 'static, F: std::future::Future<Output = T>>(
        &self,
        ns: &str,
        work: impl FnOnce() -> F + Send + 'static,
    ) -> T {
        let path = format!("/var/run/netns/{}", self.ns(ns));
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).expect("the namespace");
            rustix::thread::move_into_link_name_space(
                std::os::fd::AsFd::as_fd(&file),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .expect("setns");
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(work())
        })
        .join()
        .expect("the namespace thread")
    }

    /// Runs `verb` for the address on router `ns`'s executor, in that namespace.
    fn call(&self, ns: &str, verb: Verb) -> ExecutionOutcome {
        let action = action(self.address(), verb, ns);
        self.inside(ns, move || async move {
            let executor = OnpremExecutor::new("lan", 3, Duration::from_millis(50));
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            execute_within(&executor, &action, deadline).await
        })
    }

    /// The proxy entries on router `ns`'s `lan`, read in that namespace.
    fn entries(&self, ns: &str) -> Vec<IpAddr> {
        self.inside(ns, || async { proxy_entries("lan").await.expect("listed") })
    }

    fn cleanup(&self) {
        for n in ["sw", "cl", "r1", "r2", "b1", "b2"] {
            let name = self.ns(n);
            if let Ok(out) = Command::new("ip").args(["netns", "pids", &name]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            }
            let _ = Command::new("ip").args(["netns", "del", &name]).stderr(Stdio::null()).status();
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.cleanup();
    }
}

fn action(address: IpAddr, verb: Verb, holder: &str) -> StampedAction {
    StampedAction::new(
        "edge",
        address,
        verb,
        holder,
        "lan",
        "lan",
        CaptureDomain::new("lan", "g1"),
        CaptureEpoch::from_stored(1),
        OwnershipEpoch::from_stored(1),
    )
}

/// `tcpdump` on the client's `lan`, line by line: ARP, or ICMPv6 neighbour discovery.
struct Capture {
    child: Child,
    lines: Receiver<String>,
}

impl Capture {
    fn start(lab: &Lab) -> Self {
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
    fn until(&self, want: impl Fn(&str) -> bool, timeout: Duration) -> String {
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
    fn finish(self) -> Vec<String> {
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

fn executed(outcome: ExecutionOutcome) -> String {
    match outcome {
        ExecutionOutcome::Executed { detail } => detail,
        other => panic!("not executed: {other:?}"),
    }
}

/// The whole hand-over on one family: only the holder answers; the new holder's announcements
/// reach the client's wire, move its neighbour entry, and its pings follow.
fn hand_over(lab: &Lab) {
    let address = lab.address();
    let (r1, r2) = (lab.mac("r1"), lab.mac("r2"));
    assert!(!lab.ping(), "nobody answers for {address} before an acquire");

    // r1 acquires: its entry, then its announcements.
    let added = executed(lab.call("r1", Verb::ProxyArpAdd));
    assert!(added.contains("proxy entry"), "{added}");
    assert_eq!(lab.entries("r1"), vec![address], "inventory shows the entry");
    assert!(lab.entries("r2").is_empty());
    let capture = Capture::start(lab);
    // The client may have resolved the address already (it retries a failed resolution): forget
    // it, so that the question is asked again while the capture runs.
    lab.exec("cl", &["ip", "neigh", "flush", "dev", "lan"]);
    assert!(lab.ping(), "the client reaches {address} through r1");
    assert_eq!(lab.client_entry().as_deref(), Some(r1.as_str()), "resolved to r1's MAC");
    // Only the holder answered the client's question: every answer on the wire, up to the end of
    // the capture (a second router's answer would have been sent with the first).
    let answer = if lab.v6 { "neighbor advertisement" } else { "Reply" };
    let first = capture.until(|l| l.contains(answer), Duration::from_secs(5));
    let mut answers: Vec<String> = capture.finish().into_iter().filter(|l| l.contains(answer)).collect();
    answers.push(first);
    assert!(answers.iter().all(|l| l.contains(&format!(" {r1} >"))), "only r1 answers: {answers:#?}");

    // r1 releases (idempotent), r2 acquires and announces: the client's entry moves at once.
    executed(lab.call("r1", Verb::ProxyArpDel));
    let again = executed(lab.call("r1", Verb::ProxyArpDel));
    assert!(again.contains("already removed"), "a missing entry is success: {again}");
    assert!(lab.entries("r1").is_empty());
    executed(lab.call("r2", Verb::ProxyArpAdd));
    executed(lab.call("r2", Verb::ProxyArpAdd)); // an entry already there is success
    let capture = Capture::start(lab);
    let announced = executed(lab.call("r2", Verb::Garp));
    assert!(announced.starts_with("3 "), "three announcements: {announced}");
    let from_r2 = |l: &str| {
        l.contains(&format!(" {r2} >"))
            && if lab.v6 {
                l.contains("neighbor advertisement") && l.contains(&format!("tgt is {address}"))
            } else {
                l.contains(&format!("Request who-has {address} (ff:ff:ff:ff:ff:ff) tell {address}"))
            }
    };
    capture.until(from_r2, Duration::from_secs(5));
    assert_eq!(lab.client_entry().as_deref(), Some(r2.as_str()), "the announcement moved the client's entry");
    assert!(lab.ping(), "the client reaches {address} through r2");
}

#[test]
fn ipv4_proxy_arp_and_gratuitous_arp_move_the_address_between_routers() {
    let lab = Lab::new("a4", false);
    hand_over(&lab);
}

#[test]
fn ipv6_proxy_ndp_and_unsolicited_na_move_the_address_between_routers() {
    let lab = Lab::new("a6", true);
    hand_over(&lab);
}
