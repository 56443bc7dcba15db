//! [`Probes`]: the client asks "who has the address?" every [`PROBE_INTERVAL`] (an ARP request
//! from its own MAC and address, broadcast) and records, per question, every router MAC that
//! answered — the measure of issue 21 item 1: during a hand-over, no question may get two
//! answers. IPv4 only (ARP). Shared by `tests/onprem_withdrawal.rs` and
//! `benches/onprem_failover.rs`.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Lab;

/// How often the client asks.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// The client's address on `lan` (the lab's `10.0.0.100`).
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 100);

/// One question and the MACs (as `ip link` prints them) that answered it before the next one.
#[derive(Clone, Debug)]
pub struct Probe {
    pub sent: Instant,
    pub answered_by: BTreeSet<String>,
}

/// The client's questions, asked from a thread in its namespace on a packet socket until
/// [`Probes::finish`].
pub struct Probes {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<Probe>>>,
}

impl Probes {
    /// Starts asking for the lab's (IPv4) address; returns once the socket is open.
    pub fn start(lab: &Lab) -> Self {
        let std::net::IpAddr::V4(address) = lab.address() else { panic!("ARP probes are IPv4") };
        let mac = parse_mac(&lab.mac("cl"));
        let enter = lab.enter("cl");
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let (ready, opened) = channel();
        let thread = std::thread::spawn(move || {
            enter();
            let device =
                pnet_datalink::interfaces().into_iter().find(|i| i.name == "lan").expect("the client's lan");
            let config = pnet_datalink::Config {
                promiscuous: false,
                read_timeout: Some(Duration::from_millis(5)),
                ..pnet_datalink::Config::default()
            };
            let (mut tx, mut rx) = match pnet_datalink::channel(&device, config).expect("a packet socket") {
                pnet_datalink::Channel::Ethernet(tx, rx) => (tx, rx),
                _ => panic!("not an Ethernet channel"),
            };
            ready.send(()).expect("the test waits");
            let request = arp_request(mac, address);
            let mut probes = Vec::new();
            while !stopping.load(Ordering::SeqCst) {
                let sent = Instant::now();
                tx.send_to(&request, None).expect("a frame").expect("sent");
                let mut answered_by = BTreeSet::new();
                while sent.elapsed() < PROBE_INTERVAL {
                    // A timeout (no frame within 5 ms) is an error here: keep listening.
                    if let Ok(frame) = rx.next()
                        && let Some(answer) = arp_answer(frame, address)
                    {
                        answered_by.insert(answer);
                    }
                }
                probes.push(Probe { sent, answered_by });
            }
            probes
        });
        opened.recv_timeout(Duration::from_secs(10)).expect("the probe socket opened");
        Self { stop, thread: Some(thread) }
    }

    /// Stops asking; every question asked, in order.
    pub fn finish(mut self) -> Vec<Probe> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().expect("running").join().expect("the probe thread")
    }
}

impl Drop for Probes {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// What a run of probes saw.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Questions asked.
    pub asked: usize,
    /// Questions two or more MACs answered.
    pub two_answerers: usize,
    /// The longest run of unanswered questions, in milliseconds (questions × interval).
    pub longest_silence_ms: u128,
}

/// Sums `probes` up.
pub fn summary(probes: &[Probe]) -> Summary {
    let mut longest = 0;
    let mut run = 0;
    for p in probes {
        run = if p.answered_by.is_empty() { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    Summary {
        asked: probes.len(),
        two_answerers: probes.iter().filter(|p| p.answered_by.len() > 1).count(),
        longest_silence_ms: longest * PROBE_INTERVAL.as_millis(),
    }
}

fn parse_mac(text: &str) -> [u8; 6] {
    let mut mac = [0u8; 6];
    for (byte, part) in mac.iter_mut().zip(text.split(':')) {
        *byte = u8::from_str_radix(part, 16).expect("a MAC as ip prints it");
    }
    mac
}

/// An ARP request from the client: who has `address`? tell the client.
fn arp_request(mac: [u8; 6], address: Ipv4Addr) -> [u8; 42] {
    let mut frame = [0u8; 42];
    frame[0..6].copy_from_slice(&[0xff; 6]);
    frame[6..12].copy_from_slice(&mac);
    frame[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    frame[14..16].copy_from_slice(&1u16.to_be_bytes());
    frame[16..18].copy_from_slice(&0x0800u16.to_be_bytes());
    frame[18] = 6;
    frame[19] = 4;
    frame[20..22].copy_from_slice(&1u16.to_be_bytes());
    frame[22..28].copy_from_slice(&mac);
    frame[28..32].copy_from_slice(&CLIENT.octets());
    frame[38..42].copy_from_slice(&address.octets());
    frame
}

/// The MAC an ARP reply for `address` says it is at, if `frame` is one.
fn arp_answer(frame: &[u8], address: Ipv4Addr) -> Option<String> {
    let reply = frame.len() >= 42
        && frame[12..14] == 0x0806u16.to_be_bytes()
        && frame[20..22] == 2u16.to_be_bytes()
        && frame[28..32] == address.octets();
    reply.then(|| frame[22..28].iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":"))
}
