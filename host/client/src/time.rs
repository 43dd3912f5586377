//! The API server's times: `metav1.Time` (RFC 3339 in UTC, whole seconds) and
//! `metav1.MicroTime` (six fractional digits) written, and either read back, with fractions
//! and offsets (an exec plugin's `expirationTimestamp` may carry one). Events, Leases, exec
//! credentials and the emulator all use these; `jiff` does the calendar.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jiff::Timestamp;

/// A `metav1.MicroTime` as the API server writes it: UTC, exactly six fractional digits, `Z`
/// (`2026-11-24T22:59:48.085870Z`); nanoseconds cut, not rounded, as Go formats it. Times
/// before 1970 are written as the epoch.
pub fn micro_time(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let t = UNIX_EPOCH + Duration::new(d.as_secs(), d.subsec_micros() * 1_000);
    format!("{:.6}", timestamp(t))
}

/// A `metav1.Time`: UTC, whole seconds, `Z` (`2026-11-22T03:04:17Z`); before 1970, the epoch.
pub fn time(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    format!("{:.0}", timestamp(UNIX_EPOCH + Duration::from_secs(secs)))
}

/// An RFC 3339 time (`2026-11-22T03:04:17Z`, fractions and offsets allowed); `None` for
/// anything else, a time without an offset included, and for times before 1970.
pub fn parse(s: &str) -> Option<SystemTime> {
    // jiff also reads forms RFC 3339 does not have (ISO 8601's basic offsets, a bracketed
    // zone); what Go's `time.RFC3339` refuses is refused here too.
    let b = s.as_bytes();
    let offset_ok = match b.last()? {
        b'Z' | b'z' => true,
        _ => b.len() >= 6 && matches!(b[b.len() - 6], b'+' | b'-') && b[b.len() - 3] == b':',
    };
    if !offset_ok || b.len() < 20 || b[4] != b'-' || !b[10].eq_ignore_ascii_case(&b'T') {
        return None;
    }
    let t = SystemTime::try_from(s.parse::<Timestamp>().ok()?).ok()?;
    t.duration_since(UNIX_EPOCH).ok().map(|_| t)
}

/// `t` as a jiff timestamp; a `SystemTime` past jiff's range (year 9999) as its end.
fn timestamp(t: SystemTime) -> Timestamp {
    Timestamp::try_from(t).unwrap_or(Timestamp::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: &str) -> Option<f64> {
        parse(s).map(|t| t.duration_since(UNIX_EPOCH).unwrap().as_secs_f64())
    }

    #[test]
    fn rfc3339_is_read_with_fractions_and_offsets_and_nothing_else() {
        assert_eq!(secs("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(secs("2026-11-22T03:04:17Z"), Some(1_795_316_657.0));
        assert_eq!(secs("2026-11-22T04:04:17+01:00"), Some(1_795_316_657.0));
        assert_eq!(secs("2026-11-22T02:04:17-01:00"), Some(1_795_316_657.0));
        assert_eq!(secs("2000-02-29T12:00:00.5Z"), Some(951_825_600.5));
        for bad in [
            "",
            "2026-11-22",
            "2026-13-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-11-22T03:04:17",
            "2026-11-22T03:04:17+0100",
            "2026-11-22T03:04:17Z[UTC]",
            "2026-11-22 03:04:17Z",
            "1969-12-31T23:59:59Z",
        ] {
            assert_eq!(secs(bad), None, "{bad}");
        }
    }

    #[test]
    fn micro_time_has_six_digits_and_round_trips() {
        let t = parse("2026-11-24T22:59:48.085870Z").unwrap();
        assert_eq!(micro_time(t), "2026-11-24T22:59:48.085870Z");
        assert_eq!(micro_time(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            micro_time(UNIX_EPOCH - Duration::from_secs(1)),
            "1970-01-01T00:00:00.000000Z"
        );
        // Nanoseconds are cut, not rounded, as Go formats MicroTime.
        let t = UNIX_EPOCH + Duration::new(951_825_600, 999_999_999);
        assert_eq!(micro_time(t), "2000-02-29T12:00:00.999999Z");
        let t = UNIX_EPOCH + Duration::new(4_107_542_399, 1_000);
        assert_eq!(micro_time(t), "2100-02-28T23:59:59.000001Z");
        for secs in (0..5_000_000_000u64).step_by(86_400 * 97 + 3_601) {
            let t = UNIX_EPOCH + Duration::new(secs, 123_456_000);
            assert_eq!(parse(&micro_time(t)), Some(t), "{secs}");
        }
    }

    #[test]
    fn time_has_whole_seconds() {
        assert_eq!(time(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::new(1_795_316_657, 999_999_999);
        assert_eq!(time(t), "2026-11-22T03:04:17Z");
        for secs in (0..5_000_000_000u64).step_by(86_400 * 89 + 7_207) {
            let t = UNIX_EPOCH + Duration::from_secs(secs);
            assert_eq!(parse(&time(t)), Some(t), "{secs}");
        }
    }
}
