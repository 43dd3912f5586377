//! Durations as people write them in flags, config and scenario files: `90s`, `1m30s`,
//! `250ms`, `2h`, `1.5s` (Go's `time.ParseDuration` units, as kube-controller-manager's flags
//! take them), or a bare number of milliseconds.

use std::time::Duration;

/// Parses a duration; the error says what is accepted.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let bad =
        || format!("invalid duration {s:?}: use e.g. 250ms, 90s, 1m30s, 2h (or milliseconds)");
    if t.is_empty() {
        return Err(bad());
    }
    if let Ok(ms) = t.parse::<u64>() {
        return Ok(Duration::from_millis(ms));
    }
    let mut total = Duration::ZERO;
    let mut rest = t;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        if num_end == 0 {
            return Err(bad());
        }
        let n: f64 = rest[..num_end].parse().map_err(|_| bad())?;
        let after = &rest[num_end..];
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let scale = match &after[..unit_end] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += Duration::try_from_secs_f64(n * scale).map_err(|_| bad())?;
        rest = &after[unit_end..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_units_and_compounds_and_rejects_the_rest() {
        assert_eq!(parse_duration("250"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        for bad in ["", "s", "10x", "1m30", "-1s", "abc"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
