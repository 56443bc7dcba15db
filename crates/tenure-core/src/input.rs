//! Located input errors and the small parsers every input format shares: names, durations and
//! addresses. Parsing is separated from I/O: everything here takes text and returns values.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use serde_saphyr::{Location, Spanned};

/// Most addresses one pool may hold (SPEC 12).
pub const POOL_ADDRESSES_MAX: u64 = 65_536;

/// Longest name accepted for a pool, node or provider (a DNS subdomain's limit).
pub const NAME_LENGTH_MAX: usize = 253;

/// A position in an input file, 1-based. `line == 0` means "no position known".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    /// 1-based line.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
}

impl Position {
    /// The position a YAML location names.
    #[must_use]
    pub fn of(location: Location) -> Self {
        Self { line: location.line(), column: location.column() }
    }

    /// The position of a spanned value.
    #[must_use]
    pub fn of_spanned<T>(spanned: &Spanned<T>) -> Self {
        Self::of(spanned.referenced)
    }
}

/// One thing wrong with an input, at a place in it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct InputError {
    /// Where in the input.
    pub position: Position,
    /// What is wrong, in one line.
    pub message: String,
}

impl InputError {
    /// An error at `position`.
    #[must_use]
    pub fn at(position: Position, message: impl Into<String>) -> Self {
        Self { position, message: message.into() }
    }

    /// The error serde-saphyr reported, reduced to one line without its snippet.
    #[must_use]
    pub fn from_yaml(error: &serde_saphyr::Error) -> Self {
        let position = error.location().map(Position::of).unwrap_or_default();
        let rendered = error.without_snippet().to_string();
        let first_line = rendered.lines().next().unwrap_or("invalid YAML");
        let message = strip_location_prefix(first_line.trim_start_matches("error: "));
        Self { position, message: message.to_owned() }
    }

    /// `file:line:column: message` (or `file: message` when no position is known).
    #[must_use]
    pub fn render(&self, file: &str) -> String {
        if self.position.line == 0 {
            format!("{file}: {}", self.message)
        } else {
            format!("{file}:{}:{}: {}", self.position.line, self.position.column, self.message)
        }
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.position.line, self.position.column, self.message)
    }
}

/// Removes a leading `line N column M: ` that serde-saphyr puts before its messages.
fn strip_location_prefix(message: &str) -> &str {
    let Some(rest) = message.strip_prefix("line ") else {
        return message;
    };
    match rest.find(": ") {
        Some(index) if rest[..index].contains(" column ") => &rest[index + 2..],
        _ => message,
    }
}

/// Checks a pool, node or provider name: 1 to 253 characters of `[A-Za-z0-9._-]`. Names end up
/// inside idempotency keys separated by `/`, so nothing else is allowed.
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("{what} must not be empty"));
    }
    if name.len() > NAME_LENGTH_MAX {
        return Err(format!("{what} `{name}` is longer than {NAME_LENGTH_MAX} characters"));
    }
    if let Some(bad) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(format!(
            "{what} `{name}` contains `{}`; use letters, digits, `.`, `_` and `-`",
            bad.escape_default()
        ));
    }
    Ok(())
}

/// Parses a Go-style duration (`500ms`, `3s`, `1m30s`, `1.5s`) into whole milliseconds.
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let bad = || format!("`{text}` is not a duration; write it like `500ms`, `3s` or `1m30s`");
    if text.is_empty() {
        return Err(bad());
    }
    if text == "0" {
        return Ok(0);
    }
    let mut total_ns: u128 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        if number_len == 0 {
            return Err(bad());
        }
        let (number, tail) = rest.split_at(number_len);
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let unit_ns: u128 = match unit {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(bad()),
        };
        total_ns = total_ns.checked_add(scaled(number, unit_ns).ok_or_else(bad)?).ok_or_else(bad)?;
        rest = tail;
    }
    if total_ns % 1_000_000 != 0 {
        return Err(format!("`{text}` is not a whole number of milliseconds"));
    }
    u64::try_from(total_ns / 1_000_000).map_err(|_| bad())
}

/// `number` (decimal, maybe with a fraction) times `unit_ns`, exactly, in nanoseconds.
fn scaled(number: &str, unit_ns: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    if fraction.contains('.') || fraction.len() > 18 {
        return None;
    }
    let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().ok()? };
    let mut value = whole.checked_mul(unit_ns)?;
    if !fraction.is_empty() {
        let digits: u128 = fraction.parse().ok()?;
        let scale = 10u128.checked_pow(u32::try_from(fraction.len()).ok()?)?;
        let part = digits.checked_mul(unit_ns)?;
        if part % scale != 0 {
            return None;
        }
        value = value.checked_add(part / scale)?;
    }
    Some(value)
}

/// Expands one `addresses` entry: a bare address, `/32`, `/128`, or a CIDR range (network and
/// broadcast included). Refuses host bits below the prefix and ranges over [`POOL_ADDRESSES_MAX`].
pub fn expand_addresses(text: &str) -> Result<Vec<IpAddr>, String> {
    if let Ok(address) = text.parse::<IpAddr>() {
        return Ok(vec![address]);
    }
    let network: IpNet =
        text.parse().map_err(|_| format!("`{text}` is not an IPv4/IPv6 address or CIDR range"))?;
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
    let addresses = match network {
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

/// The canonical text of an address: RFC 5952, no prefix length.
#[must_use]
pub fn canonical_address(address: IpAddr) -> String {
    address.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_go_style_whole_milliseconds() {
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        assert_eq!(parse_duration_ms("3s"), Ok(3_000));
        assert_eq!(parse_duration_ms("1m30s"), Ok(90_000));
        assert_eq!(parse_duration_ms("1.5s"), Ok(1_500));
        assert_eq!(parse_duration_ms("1h"), Ok(3_600_000));
        assert_eq!(parse_duration_ms("0"), Ok(0));
        assert_eq!(parse_duration_ms("2000us"), Ok(2));
        for bad in ["", "3", "s", "3x", "-1s", "1.2.3s", "500us", "3 s", ".s", "99999999999999999999h"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn ranges_expand_to_every_address_including_network_and_broadcast() {
        let v = expand_addresses("10.0.0.16/29").expect("valid");
        assert_eq!(v.len(), 8);
        assert_eq!(v[0].to_string(), "10.0.0.16");
        assert_eq!(v[7].to_string(), "10.0.0.23");
        assert_eq!(expand_addresses("10.0.0.10/32").expect("valid").len(), 1);
        assert_eq!(expand_addresses("10.0.0.10").expect("valid").len(), 1);
        assert_eq!(expand_addresses("2001:DB8::1/128").expect("valid")[0].to_string(), "2001:db8::1");
        assert_eq!(expand_addresses("10.0.0.0/16").expect("valid").len(), 65_536);
        assert!(expand_addresses("10.0.0.0/15").is_err());
        assert!(expand_addresses("10.0.0.17/29").is_err());
        assert!(expand_addresses("10.0.0.300").is_err());
        assert!(expand_addresses("fe80::/64").is_err());
    }

    #[test]
    fn names_are_key_safe() {
        assert!(check_name("node name", "aws-router-a").is_ok());
        assert!(check_name("node name", "").is_err());
        assert!(check_name("node name", "a/b").is_err());
        assert!(check_name("node name", "a b").is_err());
        assert!(check_name("node name", &"x".repeat(254)).is_err());
    }

    #[test]
    fn serde_saphyr_prefix_is_stripped() {
        assert_eq!(strip_location_prefix("line 4 column 3: unknown field"), "unknown field");
        assert_eq!(strip_location_prefix("lines are fine"), "lines are fine");
    }
}
