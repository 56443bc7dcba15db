//! The announcements an on-prem holder sends after adding its proxy entry, byte for byte (pure):
//! a gratuitous ARP for IPv4 and an unsolicited neighbour advertisement for IPv6 — the frames
//! keepalived sends when it becomes master, so switches and neighbours treat both alike.

use std::net::{Ipv4Addr, Ipv6Addr};

/// An Ethernet (MAC) address.
pub type Mac = [u8; 6];

/// The broadcast MAC address.
pub const BROADCAST: Mac = [0xff; 6];

/// Length of a gratuitous ARP frame (Ethernet header + ARP payload, before padding).
pub const GARP_FRAME_LEN: usize = 42;

/// A gratuitous ARP as keepalived sends it (RFC 5227 §3 "ARP Announcement"): an ARP *request*
/// broadcast from `mac`, whose sender and target protocol addresses are both `address`, and whose
/// target hardware address is the broadcast address (some stacks ignore an all-zero one).
#[must_use]
pub fn garp(mac: Mac, address: Ipv4Addr) -> [u8; GARP_FRAME_LEN] {
    let mut frame = [0u8; GARP_FRAME_LEN];
    // Ethernet: destination, source, EtherType ARP.
    frame[0..6].copy_from_slice(&BROADCAST);
    frame[6..12].copy_from_slice(&mac);
    frame[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    // ARP: hardware Ethernet (1), protocol IPv4 (0x0800), lengths 6 and 4, operation request (1).
    frame[14..16].copy_from_slice(&1u16.to_be_bytes());
    frame[16..18].copy_from_slice(&0x0800u16.to_be_bytes());
    frame[18] = 6;
    frame[19] = 4;
    frame[20..22].copy_from_slice(&1u16.to_be_bytes());
    frame[22..28].copy_from_slice(&mac);
    frame[28..32].copy_from_slice(&address.octets());
    frame[32..38].copy_from_slice(&BROADCAST);
    frame[38..42].copy_from_slice(&address.octets());
    frame
}

/// Length of an unsolicited neighbour advertisement's ICMPv6 message (with the target
/// link-layer address option).
pub const NA_LEN: usize = 32;

/// The ICMPv6 message of an unsolicited neighbour advertisement (RFC 4861 §7.2.6) for
/// `target`, sent to all-nodes: override set, solicited clear, router set when this host
/// forwards (it does: it answers for an address it routes), and the target link-layer address
/// option carrying `mac`. The checksum is left 0: on a raw ICMPv6 socket the kernel computes it
/// (RFC 3542 §3.1), and builds the IPv6 and Ethernet headers.
#[must_use]
pub fn unsolicited_na(mac: Mac, target: Ipv6Addr, router: bool) -> [u8; NA_LEN] {
    const ROUTER: u8 = 0x80;
    const OVERRIDE: u8 = 0x20;
    let mut message = [0u8; NA_LEN];
    message[0] = 136; // Neighbor Advertisement
    message[1] = 0; // code
    // [2..4]: checksum, filled by the kernel.
    message[4] = OVERRIDE | if router { ROUTER } else { 0 };
    // [5..8]: reserved.
    message[8..24].copy_from_slice(&target.octets());
    message[24] = 2; // option: target link-layer address
    message[25] = 1; // length in units of 8 bytes
    message[26..32].copy_from_slice(&mac);
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: Mac = [0x02, 0x00, 0x5e, 0x10, 0x20, 0x30];

    #[test]
    fn a_garp_is_a_broadcast_arp_request_naming_the_address_twice() {
        let frame = garp(MAC, Ipv4Addr::new(10, 0, 0, 10));
        let want: [u8; GARP_FRAME_LEN] = [
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // to everyone
            0x02, 0x00, 0x5e, 0x10, 0x20, 0x30, // from us
            0x08, 0x06, // ARP
            0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x01, // Ethernet/IPv4, request
            0x02, 0x00, 0x5e, 0x10, 0x20, 0x30, 10, 0, 0, 10, // sender: our MAC, the address
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 10, 0, 0, 10, // target: broadcast, the address
        ];
        assert_eq!(frame, want);
    }

    #[test]
    fn an_unsolicited_na_overrides_is_not_solicited_and_carries_our_mac() {
        let target: Ipv6Addr = "fd00::10".parse().expect("literal");
        let message = unsolicited_na(MAC, target, true);
        assert_eq!(&message[0..4], &[136, 0, 0, 0], "type, code, checksum left to the kernel");
        assert_eq!(message[4], 0xa0, "router and override; solicited clear");
        assert_eq!(&message[5..8], &[0, 0, 0]);
        assert_eq!(&message[8..24], &target.octets());
        assert_eq!(&message[24..32], &[2, 1, 0x02, 0x00, 0x5e, 0x10, 0x20, 0x30]);
        assert_eq!(unsolicited_na(MAC, target, false)[4], 0x20, "a host that does not forward");
    }
}
