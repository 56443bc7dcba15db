//! The API server's rules for the names this crate writes (pure): a Lease name is a DNS-1123
//! subdomain, a namespace a DNS-1123 label (Kubernetes `apimachinery` `IsDNS1123Subdomain` and
//! `IsDNS1123Label`). Checked before the first request, so that a bad name is one clear setup
//! error instead of a `422 Invalid` on every attempt.

/// The longest DNS-1123 subdomain (a Lease name), in characters.
pub const SUBDOMAIN_CHARS_MAX: usize = 253;
/// The longest DNS-1123 label (a namespace), in characters.
pub const LABEL_CHARS_MAX: usize = 63;

/// What a DNS-1123 subdomain must be, as an error message ends.
pub const SUBDOMAIN_RULE: &str = "must be a DNS-1123 subdomain: at most 253 characters, lowercase \
    letters, digits, '-' and '.', starting and ending with a letter or digit";
/// What a DNS-1123 label must be, as an error message ends.
pub const LABEL_RULE: &str = "must be a DNS-1123 label: at most 63 characters, lowercase letters, \
    digits and '-', starting and ending with a letter or digit";

fn alphanumeric(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// Whether `name` is a DNS-1123 label: 1 to 63 characters of `[a-z0-9-]`, starting and ending
/// with `[a-z0-9]`.
#[must_use]
pub fn is_dns1123_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(&first), Some(&last)) => {
            bytes.len() <= LABEL_CHARS_MAX
                && alphanumeric(first)
                && alphanumeric(last)
                && bytes.iter().all(|&c| alphanumeric(c) || c == b'-')
        }
        _ => false,
    }
}

/// Whether `name` is a DNS-1123 subdomain: at most 253 characters, dot-separated parts each
/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` (the API server's regular expression; a part may be longer
/// than a label).
#[must_use]
pub fn is_dns1123_subdomain(name: &str) -> bool {
    name.len() <= SUBDOMAIN_CHARS_MAX
        && name.split('.').all(|part| {
            let bytes = part.as_bytes();
            match (bytes.first(), bytes.last()) {
                (Some(&first), Some(&last)) => {
                    alphanumeric(first)
                        && alphanumeric(last)
                        && bytes.iter().all(|&c| alphanumeric(c) || c == b'-')
                }
                _ => false,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_lowercase_alphanumerics_and_dashes_inside() {
        for good in ["a", "default", "kube-system", "a1", "0", &"a".repeat(63)] {
            assert!(is_dns1123_label(good), "{good:?}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", "é", &"a".repeat(64)] {
            assert!(!is_dns1123_label(bad), "{bad:?}");
        }
    }

    #[test]
    fn subdomains_are_dot_separated_parts_of_at_most_253_characters() {
        let long_part = "a".repeat(100);
        let at_max = format!("{}.{}.{}", "a".repeat(100), "b".repeat(100), "c".repeat(51));
        assert_eq!(at_max.len(), 253);
        for good in ["a", "my-election", "tenure.dev", "a.b-c.d", long_part.as_str(), at_max.as_str()] {
            assert!(is_dns1123_subdomain(good), "{good:?}");
        }
        let over = format!("{at_max}a");
        for bad in ["", ".", "a.", ".a", "a..b", "-a", "a-.b", "Vip", "a_b", "a/b", over.as_str()] {
            assert!(!is_dns1123_subdomain(bad), "{bad:?}");
        }
    }
}
