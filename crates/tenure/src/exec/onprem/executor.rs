//! [`OnpremExecutor`]: the `onprem` provider (SPEC 7) on Linux — a proxy neighbour entry for the
//! address on the node's interface, announced by gratuitous ARP (IPv4) or unsolicited neighbour
//! advertisement (IPv6). Built with the cargo feature `onprem`.
//!
//! | verb | call | idempotent as |
//! |---|---|---|
//! | `proxy-arp-add` | sets the sysctls answering needs, then `ip neigh add proxy ADDRESS dev IF` over rtnetlink | an entry already there: the kernel accepts the add again |
//! | `garp` | `garpCount` announcements, `garpInterval` apart, the first at once | announcing twice is harmless |
//! | `proxy-arp-del` | `ip neigh del proxy ADDRESS dev IF` | no entry (`ENOENT`): success |
//!
//! The sysctls, on the provider's interface only: IPv4 `conf/IF/forwarding=1` and
//! `neigh/IF/proxy_delay=0`; IPv6 `conf/IF/forwarding=1`, `conf/IF/proxy_ndp=1` and
//! `neigh/IF/proxy_delay=0`. Each is written only when it differs. The kernel answers a request for
//! a proxied IPv4 address only if it routes that address out of *another* interface: routing the
//! address onward (to the service behind the router) is the operator's configuration, as it is
//! with keepalived (docs/operations.md).
//!
//! Needs `CAP_NET_ADMIN` (entries, sysctls) and `CAP_NET_RAW` (announcements); without them each
//! call fails with a one-line reason naming the capability.
//!
//! The fence gate ran immediately before [`Executor::execute`] is called (see [`crate::exec`]); an
//! executor never judges staleness.

use std::net::IpAddr;
use std::time::Duration;

use futures_util::TryStreamExt as _;
use netlink_packet_route::AddressFamily;
use netlink_packet_route::link::LinkAttribute;
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage,
};
use tenure_core::model::{StampedAction, Verb};
use tokio::time::Instant;

use super::frames;
use crate::exec::{
    ExecuteFuture, ExecutionOutcome, Executor, InventoryFuture, InventoryRequest, WithdrawFuture,
    WithdrawRequest,
};

/// `errno` values rtnetlink reports (negated in the netlink error message).
const ENOENT: i32 = 2;
const EPERM: i32 = 1;
const ENODEV: i32 = 19;

/// The `onprem` provider on one interface.
#[derive(Clone, Debug)]
pub struct OnpremExecutor {
    interface: String,
    garp_count: u32,
    garp_interval: Duration,
}

impl OnpremExecutor {
    /// Answers on `interface`, announcing `garp_count` times `garp_interval` apart.
    #[must_use]
    pub fn new(interface: &str, garp_count: u32, garp_interval: Duration) -> Self {
        Self { interface: interface.to_owned(), garp_count: garp_count.max(1), garp_interval }
    }

    async fn add(&self, address: IpAddr) -> Result<String, String> {
        self.sysctls(address)?;
        let (handle, connection) = netlink()?;
        let index = interface_index(&handle, &self.interface).await;
        let result = match index {
            Ok(index) => handle
                .neighbours()
                .add(index, address)
                .flags(NeighbourFlags::Proxy)
                .execute()
                .await
                .map_err(|e| self.netlink_error("add the proxy entry", &e)),
            Err(e) => Err(e),
        };
        connection.abort();
        result.map(|()| format!("proxy entry for {address} on {}", self.interface))
    }

    async fn delete(&self, address: IpAddr) -> Result<String, String> {
        let (handle, connection) = netlink()?;
        let result = async {
            let index = interface_index(&handle, &self.interface).await?;
            match handle.neighbours().del(proxy_message(index, address)).execute().await {
                Ok(()) => Ok(format!("proxy entry for {address} removed from {}", self.interface)),
                Err(e) if errno(&e) == Some(ENOENT) => {
                    Ok(format!("no proxy entry for {address} on {} (already removed)", self.interface))
                }
                Err(e) => Err(self.netlink_error("remove the proxy entry", &e)),
            }
        }
        .await;
        connection.abort();
        result
    }

    /// Sends the announcements, the first at once; stops early rather than pass `deadline`.
    async fn announce(&self, address: IpAddr, deadline: Instant) -> Result<String, String> {
        let (handle, connection) = netlink()?;
        let link = link(&handle, &self.interface).await;
        connection.abort();
        let (index, mac) = link?;
        let mut sender = Announcer::open(&self.interface, index, address)?;
        let mut sent = 0;
        loop {
            sender.send(mac, address).map_err(|e| {
                let need = if e.kind() == std::io::ErrorKind::PermissionDenied {
                    " (needs CAP_NET_RAW)"
                } else {
                    ""
                };
                format!("announce {address} on {}: {e}{need}", self.interface)
            })?;
            sent += 1;
            if sent >= self.garp_count || Instant::now() + self.garp_interval >= deadline {
                break;
            }
            tokio::time::sleep(self.garp_interval).await;
        }
        let what = if address.is_ipv4() { "gratuitous ARP" } else { "unsolicited NA" };
        Ok(format!("{sent} {what} for {address} on {}", self.interface))
    }

    fn sysctls(&self, address: IpAddr) -> Result<(), String> {
        let family = if address.is_ipv4() { "ipv4" } else { "ipv6" };
        let mut settings = vec![
            format!("/proc/sys/net/{family}/conf/{}/forwarding", self.interface),
            format!("/proc/sys/net/{family}/neigh/{}/proxy_delay", self.interface),
        ];
        if address.is_ipv6() {
            settings.push(format!("/proc/sys/net/ipv6/conf/{}/proxy_ndp", self.interface));
        }
        for path in settings {
            let want = if path.ends_with("proxy_delay") { "0" } else { "1" };
            let now = std::fs::read_to_string(&path)
                .map_err(|e| format!("interface {}: {path}: {e}", self.interface))?;
            if now.trim() != want {
                std::fs::write(&path, want).map_err(|e| {
                    let need = if e.kind() == std::io::ErrorKind::PermissionDenied {
                        " (needs CAP_NET_ADMIN)"
                    } else {
                        ""
                    };
                    format!("set {path} to {want}: {e}{need}")
                })?;
            }
        }
        Ok(())
    }

    fn netlink_error(&self, what: &str, error: &rtnetlink::Error) -> String {
        let need = if errno(error) == Some(EPERM) { " (needs CAP_NET_ADMIN)" } else { "" };
        format!("{what} on {}: {error}{need}", self.interface)
    }
}

impl Executor for OnpremExecutor {
    fn execute<'a>(&'a self, action: &'a StampedAction, deadline: Instant) -> ExecuteFuture<'a> {
        Box::pin(async move {
            let result = match action.verb {
                Verb::ProxyArpAdd => self.add(action.address).await,
                Verb::Garp => self.announce(action.address, deadline).await,
                Verb::ProxyArpDel => self.delete(action.address).await,
                other => Err(format!("verb {} is not an onprem verb; not called", other.as_str())),
            };
            match result {
                Ok(detail) => ExecutionOutcome::Executed { detail },
                Err(reason) => ExecutionOutcome::Failed { reason },
            }
        })
    }

    /// The proxy entries on this host's interface: an asked address with an entry is held by
    /// this agent's NICs of the provider (`request.own_nics`), one without by none of them.
    /// What other routers answer for is theirs to report.
    fn inventory<'a>(&'a self, request: &'a InventoryRequest) -> Option<InventoryFuture<'a>> {
        Some(Box::pin(async move {
            let entries = proxy_entries(&self.interface).await?;
            Ok(request
                .addresses
                .iter()
                .map(|address| {
                    let holders =
                        if entries.contains(address) { request.own_nics.clone() } else { Vec::new() };
                    (*address, holders)
                })
                .collect())
        }))
    }

    fn inventory_sees_only_own_nics(&self) -> bool {
        true
    }

    /// Removes the proxy entries of the asked addresses from this host's interface (the node's
    /// NIC): one dump, then one delete per entry found (an entry gone meanwhile counts as
    /// removed).
    fn withdraw<'a>(&'a self, request: &'a WithdrawRequest) -> Option<WithdrawFuture<'a>> {
        Some(Box::pin(async move {
            let entries = proxy_entries(&self.interface).await?;
            let mut removed = Vec::new();
            for address in entries.into_iter().filter(|a| request.addresses.contains(a)) {
                self.delete(address).await?;
                removed.push(address);
            }
            Ok(removed)
        }))
    }
}

/// An rtnetlink handle and the task that drives its connection (abort it when done).
fn netlink() -> Result<(rtnetlink::Handle, tokio::task::JoinHandle<()>), String> {
    let (connection, handle, _) = rtnetlink::new_connection().map_err(|e| format!("open netlink: {e}"))?;
    Ok((handle, tokio::spawn(connection)))
}

/// The index of the interface `name`, in the calling thread's network namespace.
async fn interface_index(handle: &rtnetlink::Handle, name: &str) -> Result<u32, String> {
    link(handle, name).await.map(|(index, _)| index)
}

/// The index and MAC address of the interface `name`, from netlink (not sysfs, which shows the
/// namespace it was mounted in rather than the calling thread's).
async fn link(handle: &rtnetlink::Handle, name: &str) -> Result<(u32, frames::Mac), String> {
    let found = handle.link().get().match_name(name.to_owned()).execute().try_next().await;
    let link = match found {
        Ok(Some(link)) => link,
        Ok(None) => return Err(format!("interface {name} not found")),
        Err(e) if errno(&e) == Some(ENODEV) => return Err(format!("interface {name} not found")),
        Err(e) => return Err(format!("interface {name}: {e}")),
    };
    let mac = link
        .attributes
        .iter()
        .find_map(|a| match a {
            LinkAttribute::Address(bytes) => <frames::Mac>::try_from(bytes.as_slice()).ok(),
            _ => None,
        })
        .ok_or_else(|| format!("interface {name} has no Ethernet address"))?;
    Ok((link.header.index, mac))
}

/// The positive `errno` of a netlink error, if it is one.
fn errno(error: &rtnetlink::Error) -> Option<i32> {
    match error {
        rtnetlink::Error::NetlinkError(message) => Some(-message.raw_code()),
        _ => None,
    }
}

fn proxy_message(index: u32, address: IpAddr) -> NeighbourMessage {
    let mut message = NeighbourMessage::default();
    message.header.family = if address.is_ipv4() { AddressFamily::Inet } else { AddressFamily::Inet6 };
    message.header.ifindex = index;
    message.header.flags = NeighbourFlags::Proxy;
    message.attributes.push(NeighbourAttribute::Destination(match address {
        IpAddr::V4(a) => NeighbourAddress::Inet(a),
        IpAddr::V6(a) => NeighbourAddress::Inet6(a),
    }));
    message
}

/// The proxy entries on `interface` (inventory): every address this host answers for there.
pub async fn proxy_entries(interface: &str) -> Result<Vec<IpAddr>, String> {
    let (handle, connection) = netlink()?;
    let result = async {
        let index = interface_index(&handle, interface).await?;
        let entries: Vec<NeighbourMessage> = handle
            .neighbours()
            .get()
            .proxies()
            .execute()
            .try_collect()
            .await
            .map_err(|e| format!("list proxy entries: {e}"))?;
        let mut addresses: Vec<IpAddr> = entries
            .iter()
            .filter(|m| m.header.ifindex == index)
            .flat_map(|m| &m.attributes)
            .filter_map(|a| match a {
                NeighbourAttribute::Destination(NeighbourAddress::Inet(a)) => Some(IpAddr::V4(*a)),
                NeighbourAttribute::Destination(NeighbourAddress::Inet6(a)) => Some(IpAddr::V6(*a)),
                _ => None,
            })
            .collect();
        addresses.sort_unstable();
        Ok(addresses)
    }
    .await;
    connection.abort();
    result
}

/// Where announcements go out: a packet socket for gratuitous ARP, a raw ICMPv6 socket for
/// neighbour advertisements (the kernel adds the IPv6 and Ethernet headers and the checksum).
enum Announcer {
    V4(Box<dyn pnet_datalink::DataLinkSender>),
    V6 { socket: socket2::Socket, to: socket2::SockAddr },
}

impl Announcer {
    fn open(interface: &str, index: u32, address: IpAddr) -> Result<Self, String> {
        let raw = |e: std::io::Error| {
            let need =
                if e.kind() == std::io::ErrorKind::PermissionDenied { " (needs CAP_NET_RAW)" } else { "" };
            format!("open a raw socket on {interface}: {e}{need}")
        };
        if address.is_ipv4() {
            let device = pnet_datalink::interfaces()
                .into_iter()
                .find(|i| i.name == interface)
                .ok_or_else(|| format!("interface {interface} not found"))?;
            // Not promiscuous (pnet's default is): this socket only sends.
            let config = pnet_datalink::Config { promiscuous: false, ..pnet_datalink::Config::default() };
            match pnet_datalink::channel(&device, config).map_err(raw)? {
                pnet_datalink::Channel::Ethernet(sender, _receiver) => Ok(Self::V4(sender)),
                _ => Err(format!("interface {interface}: not an Ethernet channel")),
            }
        } else {
            use socket2::{Domain, Protocol, Socket, Type};
            let socket = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::ICMPV6)).map_err(raw)?;
            // Neighbour discovery is only accepted with a hop limit of 255 (RFC 4861 §7.1.2).
            socket.set_multicast_hops_v6(255).map_err(raw)?;
            socket.set_unicast_hops_v6(255).map_err(raw)?;
            socket.set_multicast_if_v6(index).map_err(raw)?;
            socket.bind_device(Some(interface.as_bytes())).map_err(raw)?;
            let all_nodes = std::net::SocketAddrV6::new(
                std::net::Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1),
                0,
                0,
                index,
            );
            Ok(Self::V6 { socket, to: all_nodes.into() })
        }
    }

    fn send(&mut self, mac: frames::Mac, address: IpAddr) -> std::io::Result<()> {
        match (self, address) {
            (Self::V4(sender), IpAddr::V4(a)) => sender
                .send_to(&frames::garp(mac, a), None)
                .unwrap_or_else(|| Err(std::io::ErrorKind::Other.into())),
            (Self::V6 { socket, to }, IpAddr::V6(a)) => {
                socket.send_to(&frames::unsolicited_na(mac, a, true), to).map(|_| ())
            }
            _ => Err(std::io::Error::other("address family changed between open and send")),
        }
    }
}
