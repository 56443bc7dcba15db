//! Addresses as they are written: one `addresses` entry expanded, one address of a request, the
//! canonical text, and what may float (new input only).

use std::net::IpAddr;

use ipnet::IpNet;

use super::POOL_ADDRESSES_MAX;

/// Expands one `addresses` entry: a bare address, `/32`, `/128`, or a CIDR range (network and
/// broadcast included). Refuses host bits below the prefix and ranges over [`POOL_ADDRESSES_MAX`].
pub fn expand_addresses(text: &str) -> Result<Vec<IpAddr>, String> {
    if let Ok(address) = text.parse::<IpAddr>() {
        return Ok(vec![address]);
    }
    let network: IpNet = text.parse().map_err(|_| not_an_address(text))?;
    if network.trunc() != network {
        return Err(format!("`{text}` has bits set below its prefix; did you mean `{}`?", network.trunc()));
    }
    let host_bits = u32::from(network.max_prefix_len() - network.prefix_len());
    if host_bits > 16 {
        return Err(format!(
            "`{text}` expands to more than {POOL_ADDRESSES_MAX} addresses, the most one pool may hold"
        ));
    }
    let count = 1u32 << host_bits;
    let addresses: Vec<IpAddr> = match network {
        IpNet::V4(v4) => {
            let base = u32::from(v4.network());
            (0..count).map(|offset| IpAddr::from((base + offset).to_be_bytes())).collect()
        }
        IpNet::V6(v6) => {
            let base = u128::from(v6.network());
            (0..count).map(|offset| IpAddr::from((base + u128::from(offset)).to_be_bytes())).collect()
        }
    };
    Ok(addresses)
}

/// Whether `address` (from `text`) can be a floating address: not unspecified, multicast or the
/// IPv4 limited broadcast, and not an IPv4-mapped IPv6 address (`::ffff:10.1.0.1` is `10.1.0.1`
/// written another way: two pools listing both would pass the overlap check as two addresses).
/// Asked of new input only — a pool set as written ([`crate::spec::check_pool_set`]: `tenure
/// validate`, the agent's pool files) and a single address of a request or scenario
/// ([`parse_one_address`]) — never of a stored pool read back (the codec re-parses it with
/// [`expand_addresses`]: a log written before this rule stays readable).
pub fn check_floating(text: &str, address: IpAddr) -> Result<(), String> {
    let why = match address {
        IpAddr::V6(v6) if let Some(v4) = v6.to_ipv4_mapped() => {
            return Err(format!(
                "`{text}` holds the IPv4-mapped IPv6 address {v6}; write the IPv4 address `{v4}`"
            ));
        }
        a if a.is_unspecified() => "the unspecified address",
        a if a.is_multicast() => "a multicast address",
        IpAddr::V4(v4) if v4.is_broadcast() => "the IPv4 limited broadcast address",
        _ => return Ok(()),
    };
    Err(format!("`{text}` holds {address}, {why}: it cannot be a floating address"))
}

/// Why `text`, which did not parse, is not an address or a CIDR range: an address with a prefix
/// length past its family's bound says so; anything else is not an address. The one wording for
/// pool files, requests and list filters.
#[must_use]
pub fn not_an_address(text: &str) -> String {
    if let Some((address, length)) = text.split_once('/')
        && let Ok(address) = address.parse::<IpAddr>()
    {
        let (family, most) = if address.is_ipv4() { ("IPv4", 32) } else { ("IPv6", 128) };
        return match prefix_length(length) {
            Some(length) if length > most => format!("`{text}`: an {family} prefix length is at most {most}"),
            _ => format!("`{text}`: `{length}` is not a prefix length"),
        };
    }
    format!("`{text}` is not an IPv4/IPv6 address or CIDR range")
}

/// A prefix length as it is written: one to three decimal digits, no sign, no space, no leading
/// zero (`0` alone aside); whether it fits the address's family is the caller's check. Only for
/// the message: ipnet reads the ranges themselves.
fn prefix_length(text: &str) -> Option<u16> {
    let digits = !text.is_empty() && text.len() <= 3 && text.bytes().all(|b| b.is_ascii_digit());
    if !digits || (text.len() > 1 && text.starts_with('0')) {
        return None;
    }
    text.parse().ok()
}

/// The canonical text of an address: RFC 5952, no prefix length.
#[must_use]
pub fn canonical_address(address: IpAddr) -> String {
    address.to_string()
}

/// Parses a single address the way scenario events and HTTP bodies accept it (a range or a
/// list of more than one is refused).
pub fn parse_one_address(text: &str) -> Result<IpAddr, String> {
    match expand_addresses(text.trim())? {
        list if list.len() == 1 => {
            check_floating(text.trim(), list[0])?;
            Ok(list[0])
        }
        _ => Err(format!("`{text}` is a range; name one address")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_that_cannot_float_are_refused_in_one_line() {
        let refused = |text: &str| {
            let addresses = expand_addresses(text).expect("it parses");
            addresses.iter().find_map(|a| check_floating(text, *a).err()).expect(text)
        };
        assert!(refused("::ffff:10.1.0.1").contains("write the IPv4 address `10.1.0.1`"));
        assert!(refused("::ffff:10.1.0.0/120").contains("IPv4-mapped"));
        assert!(refused("0.0.0.0").contains("the unspecified address"));
        assert!(refused("0.0.0.0/30").contains("0.0.0.0, the unspecified address"));
        assert!(refused("::").contains("the unspecified address"));
        assert!(refused("255.255.255.255").contains("limited broadcast"));
        assert!(refused("224.0.0.18").contains("multicast"));
        assert!(refused("ff02::1").contains("multicast"));
        for text in ["10.1.0.1", "2001:db8::1", "10.255.255.255"] {
            assert_eq!(check_floating(text, text.parse().expect("address")), Ok(()), "{text} may float");
        }
        assert!(parse_one_address("::ffff:10.1.0.1").is_err(), "a request's address is new input");
        assert_eq!(expand_addresses("::ffff:10.1.0.1").map(|a| a.len()), Ok(1), "a stored pool reads back");
    }

    /// A prefix length past its family's bound says so, in a pool file as in a request.
    #[test]
    fn a_prefix_too_long_for_its_family_says_its_bound() {
        assert_eq!(
            expand_addresses("10.0.0.16/33"),
            Err("`10.0.0.16/33`: an IPv4 prefix length is at most 32".into())
        );
        assert_eq!(
            expand_addresses("fd00::/129"),
            Err("`fd00::/129`: an IPv6 prefix length is at most 128".into())
        );
        assert_eq!(
            parse_one_address("10.0.0.1/40"),
            Err("`10.0.0.1/40`: an IPv4 prefix length is at most 32".into())
        );
        assert_eq!(
            expand_addresses("10.0.0.0/999"),
            Err("`10.0.0.0/999`: an IPv4 prefix length is at most 32".into())
        );
        for (text, length) in [
            ("10.0.0.0/x", "x"),
            ("10.0.0.0/+5", "+5"),
            ("10.0.0.0/024", "024"),
            ("fd00::/0064", "0064"),
            ("10.0.0.0/", ""),
        ] {
            assert_eq!(
                expand_addresses(text),
                Err(format!("`{text}`: `{length}` is not a prefix length")),
                "{text}"
            );
        }
        for text in ["10.0.0.300/24", "nope", "fe80::1%eth0/64"] {
            assert_eq!(
                expand_addresses(text),
                Err(format!("`{text}` is not an IPv4/IPv6 address or CIDR range"))
            );
        }
    }
}
