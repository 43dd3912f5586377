//! Timestamps as Kubernetes writes them: RFC 3339 in UTC with second precision
//! (`2024-05-01T12:00:00Z`, metav1.Time's format), without a date-time dependency.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch, from the host's wall clock (WASI `wall-clock`).
pub fn now_unix() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

/// The current time as metav1.Time text.
pub fn now() -> String {
    format_rfc3339(now_unix())
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// (year, month, day) → days since 1970-01-01.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Formats seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
///
/// ```
/// assert_eq!(kube_guest::time::format_rfc3339(0), "1970-01-01T00:00:00Z");
/// assert_eq!(kube_guest::time::format_rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
/// ```
pub fn format_rfc3339(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Parses RFC 3339 (`Z` or a `±HH:MM` offset, optional fractional seconds, which are dropped)
/// into seconds since the epoch; none if it is not that format.
///
/// ```
/// use kube_guest::time::parse_rfc3339;
/// assert_eq!(parse_rfc3339("2023-11-14T22:13:20Z"), Some(1_700_000_000));
/// assert_eq!(parse_rfc3339("2023-11-14T23:13:20.5+01:00"), Some(1_700_000_000));
/// assert_eq!(parse_rfc3339("yesterday"), None);
/// ```
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let rb = rest.as_bytes();
            if rb.len() != 6 || rb[3] != b':' || !matches!(rb[0], b'+' | b'-') {
                return None;
            }
            let oh: i64 = rest[1..3].parse().ok()?;
            let om: i64 = rest[4..6].parse().ok()?;
            let o = oh * 3600 + om * 60;
            if rb[0] == b'-' {
                -o
            } else {
                o
            }
        }
    };
    let days = days_from_civil(y, mo as u32, d as u32);
    Some(days * 86_400 + h * 3600 + mi * 60 + se - offset)
}

/// The time from now until `deadline` (seconds since the epoch); zero if it has passed.
pub fn until(deadline: i64) -> Duration {
    Duration::from_secs(deadline.saturating_sub(now_unix()).max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_and_parse_round_trip_across_eras_and_leap_days() {
        for secs in [
            0,
            951_782_400,   // 2000-02-29
            1_709_164_800, // 2024-02-29
            4_107_542_399, // 2100-02-28T23:59:59
            -86_400,
        ] {
            let s = format_rfc3339(secs);
            assert_eq!(parse_rfc3339(&s), Some(secs), "{s}");
        }
        assert_eq!(format_rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(
            parse_rfc3339("2024-01-01T00:00:00-00:30"),
            Some(1_704_069_000)
        );
        for bad in [
            "2024-13-01T00:00:00Z",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00.Z",
            "2024-01-01T0a:00:00Z",
            "2024-01-01T00:00:00+1:00",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        assert!(now_unix() > 1_600_000_000);
    }
}
