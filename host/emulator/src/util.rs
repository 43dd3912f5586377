//! Small helpers: timestamps, UIDs and name validation, without pulling in a date crate.

use std::time::{SystemTime, UNIX_EPOCH};

/// The current time as RFC 3339 in UTC with second precision, as `metadata.creationTimestamp`.
pub fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339(secs)
}

/// Format seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Parse `YYYY-MM-DDTHH:MM:SSZ` (fractions ignored) back to seconds since the epoch.
pub fn parse_rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (n(0..4)?, n(5..7)?, n(8..10)?);
    let (h, mi, se) = (n(11..13)?, n(14..16)?, n(17..19)?);
    let days = days_from_civil(y, mo, d);
    u64::try_from(days * 86_400 + h * 3600 + mi * 60 + se).ok()
}

// Howard Hinnant's civil-calendar algorithms.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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
