//! Small helpers: timestamps in the emulator's seconds, UIDs and name validation.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The current time as RFC 3339 in UTC with second precision, as `metadata.creationTimestamp`.
pub fn now_rfc3339() -> String {
    kwh_client::time::time(SystemTime::now())
}

/// Format seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (the emulator's clock counts
/// seconds).
pub fn rfc3339(secs: u64) -> String {
    kwh_client::time::time(UNIX_EPOCH + Duration::from_secs(secs))
}

/// An RFC 3339 time as whole seconds since the epoch (fractions dropped).
pub fn parse_rfc3339(s: &str) -> Option<u64> {
    kwh_client::time::parse(s)?
        .duration_since(UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs())
}

/// A random version-4 UUID in its canonical text form.
pub fn new_uid() -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let mut s = String::with_capacity(36);
    for (i, x) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push(HEX[(x >> 4) as usize] as char);
        s.push(HEX[(x & 0x0f) as usize] as char);
    }
    s
}

/// Five random lowercase alphanumerics, the suffix `generateName` gets.
pub fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rand::random::<usize>() % ALPHABET.len()] as char)
        .collect()
}

/// The DNS-1123 subdomain rule object names follow; `Err` carries the server's message.
pub fn validate_dns_subdomain(name: &str) -> Result<(), String> {
    if name.len() > 253 {
        return Err("must be no more than 253 characters".into());
    }
    let ok = !name.is_empty()
        && name.split('.').all(|p| {
            let b = p.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        });
    if ok {
        Ok(())
    } else {
        Err("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into())
    }
}

/// The rule RBAC object names follow (kube-apiserver's `ValidatePathSegmentName`): anything
/// usable as one path segment, so `system:discovery` is a valid ClusterRole name.
pub fn validate_path_segment_name(name: &str) -> Result<(), String> {
    if name == "." || name == ".." {
        return Err(format!("may not be '{name}'"));
    }
    match ['/', '%'].into_iter().find(|c| name.contains(*c)) {
        Some(c) => Err(format!("may not contain '{c}'")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_316_657), "2026-11-22T03:04:17Z");
        assert_eq!(parse_rfc3339("2026-11-22T03:04:17Z"), Some(1_795_316_657));
        assert_eq!(
            parse_rfc3339("2026-11-22T04:04:17.9+01:00"),
            Some(1_795_316_657)
        );
        assert_eq!(parse_rfc3339("garbage"), None);
    }

    #[test]
    fn uid_is_v4_shaped() {
        let u = new_uid();
        assert_eq!(u.len(), 36);
        let parts: Vec<usize> = u.split('-').map(str::len).collect();
        assert_eq!(parts, [8, 4, 4, 4, 12]);
        assert!(u
            .chars()
            .all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(&u[14..15], "4");
        assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"));
        assert_ne!(u, new_uid());
    }

    #[test]
    fn dns_subdomain_rule() {
        assert!(validate_dns_subdomain("a-b.c").is_ok());
        assert!(validate_dns_subdomain("Bad_Name").is_err());
        assert!(validate_dns_subdomain("-a").is_err());
        assert!(validate_dns_subdomain("").is_err());
    }

    #[test]
    fn path_segment_rule() {
        assert!(validate_path_segment_name("system:discovery").is_ok());
        assert_eq!(
            validate_path_segment_name("a/b"),
            Err("may not contain '/'".into())
        );
        assert_eq!(
            validate_path_segment_name(".."),
            Err("may not be '..'".into())
        );
    }
}
