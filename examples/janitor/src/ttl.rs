//! When an object expires: the `<prefix>/ttl` duration after its creation, or the absolute
//! `<prefix>/expires` time, whichever comes first (the prefix is `janitor` unless configured).
//! Pure functions of the object, the rules and "now", so they are unit-tested without a host.

use std::time::Duration;

use kube_guest::time::{format_rfc3339, parse_rfc3339};
use kube_guest::Object;

use crate::config::Settings;

/// The annotation and label names the janitor reads and writes, and whether it deletes at all:
/// what [`Settings`] make of its rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// Time to live, measured from `metadata.creationTimestamp`: `30s`, `5m`, `2h`, `1h30m`,
    /// `7d` (default `janitor/ttl`).
    pub ttl: String,
    /// An absolute expiry time in RFC 3339, e.g. `2030-01-01T00:00:00Z` (default
    /// `janitor/expires`).
    pub expires: String,
    /// Label that turns deletion into a report: `<label>=true` (default `janitor/dry-run`).
    pub dry_run_label: String,
    /// Annotation a dry run writes instead of deleting: the time the object expired (default
    /// `janitor/would-delete-at`).
    pub would_delete: String,
    /// Every object is a dry run: report, never delete.
    pub dry_run_all: bool,
}

impl Rules {
    /// The rules `settings` describe.
    pub fn new(settings: &Settings) -> Self {
        let p = &settings.prefix;
        Rules {
            ttl: format!("{p}/ttl"),
            expires: format!("{p}/expires"),
            dry_run_label: format!("{p}/dry-run"),
            would_delete: format!("{p}/would-delete-at"),
            dry_run_all: settings.dry_run,
        }
    }
}

impl Default for Rules {
    fn default() -> Self {
        Rules::new(&Settings::default())
    }
}

/// What the janitor should do with an object at a given moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No expiry annotation: not the janitor's business.
    Unmanaged,
    /// An annotation is malformed; the object is left alone until someone fixes it.
    Invalid(String),
    /// Not expired yet: look again after this long.
    Wait(Duration),
    /// Expired at `at` (seconds since the epoch); delete it, or only report it on a dry run.
    Expired { at: i64, dry_run: bool },
}

/// Parses a duration as Go's `time.ParseDuration` writes them (a sequence of decimal numbers,
/// each with a unit), plus `d` for days: `90s`, `1.5h`, `1h30m`, `2d`. Units: `ms`, `s`, `m`,
/// `h`, `d`. Negative durations are refused: an object cannot be meant to expire before it exists.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    if text.is_empty() {
        return Err("empty duration".into());
    }
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = text;
    let mut total_ms: f64 = 0.0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, after) = rest.split_at(num_len);
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return Err(format!("invalid duration {s:?}: expected a number"));
        }
        let value: f64 = num
            .parse()
            .map_err(|_| format!("invalid duration {s:?}: bad number {num:?}"))?;
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let ms_per_unit = match unit {
            "ms" => 1.0,
            "s" => 1_000.0,
            "m" => 60_000.0,
            "h" => 3_600_000.0,
            "d" => 86_400_000.0,
            "" => return Err(format!("invalid duration {s:?}: missing unit after {num}")),
            u => {
                return Err(format!(
                    "invalid duration {s:?}: unknown unit {u:?} (use ms, s, m, h or d)"
                ))
            }
        };
        total_ms += value * ms_per_unit;
        rest = next;
    }
    // Ten thousand years is "never" for every practical purpose and keeps the arithmetic exact.
    if !total_ms.is_finite() || total_ms > 3.2e14 {
        return Err(format!("invalid duration {s:?}: too long"));
    }
    Ok(Duration::from_millis(total_ms.round() as u64))
}

/// When `obj` expires, in milliseconds since the epoch; none without an expiry annotation.
pub fn expiry_ms(obj: &Object, rules: &Rules) -> Option<Result<i64, String>> {
    let ttl_key = rules.ttl.as_str();
    let ttl = obj.annotation(ttl_key).map(|t| {
        let d = parse_duration(t).map_err(|e| format!("{ttl_key}: {e}"))?;
        let created = obj
            .creation_timestamp()
            .and_then(parse_rfc3339)
            .ok_or_else(|| format!("{ttl_key} needs a creationTimestamp to count from"))?;
        Ok(created * 1000 + d.as_millis() as i64)
    });
    let expires_key = rules.expires.as_str();
    let expires = obj.annotation(expires_key).map(|e| {
        parse_rfc3339(e)
            .map(|secs| secs * 1000)
            .ok_or_else(|| format!("{expires_key}: {e:?} is not an RFC 3339 time"))
    });
    match (ttl, expires) {
        (None, None) => None,
        (Some(t), None) => Some(t),
        (None, Some(e)) => Some(e),
        (Some(t), Some(e)) => Some(match (t, e) {
            (Ok(a), Ok(b)) => Ok(a.min(b)),
            (Err(e), _) | (_, Err(e)) => Err(e),
        }),
    }
}

/// Whether the janitor cares about `obj` at all: it has an expiry annotation.
pub fn is_managed(obj: &Object, rules: &Rules) -> bool {
    obj.annotation(&rules.ttl).is_some() || obj.annotation(&rules.expires).is_some()
}

/// Whether `obj` is only to be reported: it asks for a dry run (`janitor/dry-run=true`), or
/// the janitor is configured to delete nothing.
pub fn is_dry_run(obj: &Object, rules: &Rules) -> bool {
    rules.dry_run_all || obj.label(&rules.dry_run_label) == Some("true")
}

/// What to do with `obj` at `now_ms` (milliseconds since the epoch).
pub fn decide(obj: &Object, now_ms: i64, rules: &Rules) -> Decision {
    match expiry_ms(obj, rules) {
        None => Decision::Unmanaged,
        Some(Err(e)) => Decision::Invalid(e),
        Some(Ok(at)) if at > now_ms => Decision::Wait(Duration::from_millis((at - now_ms) as u64)),
        Some(Ok(at)) => Decision::Expired {
            // Expiry times are kept to the millisecond but reported to the second, as
            // Kubernetes timestamps are; round up so the report never predates the expiry.
            at: at.div_euclid(1000) + i64::from(at.rem_euclid(1000) != 0),
            dry_run: is_dry_run(obj, rules),
        },
    }
}

/// The value a dry run writes into [`Rules::would_delete`].
pub fn report_value(at: i64) -> String {
    format_rfc3339(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TTL: &str = "janitor/ttl";
    const EXPIRES: &str = "janitor/expires";
    const DRY_RUN: &str = "janitor/dry-run";

    /// The rules without configuration.
    fn d() -> Rules {
        Rules::default()
    }

    fn obj(annotations: serde_json::Value, labels: serde_json::Value) -> Object {
        Object::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "d",
                "creationTimestamp": "2030-01-01T00:00:00Z",
                "annotations": annotations, "labels": labels}}))
        .unwrap()
    }

    const CREATED_MS: i64 = 1_893_456_000_000; // 2030-01-01T00:00:00Z

    #[test]
    fn durations_in_go_syntax_with_days() {
        for (s, ms) in [
            ("30s", 30_000),
            ("5m", 300_000),
            ("2h", 7_200_000),
            ("1h30m", 5_400_000),
            ("1.5h", 5_400_000),
            ("250ms", 250),
            ("2d", 172_800_000),
            ("0", 0),
            (" 10s ", 10_000),
        ] {
            assert_eq!(parse_duration(s), Ok(Duration::from_millis(ms)), "{s}");
        }
        for bad in [
            "",
            "10",
            "s",
            "-5m",
            "5 m",
            "1.2.3s",
            "3w",
            "1e3s",
            "9999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn ttl_counts_from_creation_and_waits_until_then() {
        let o = obj(json!({TTL: "5m"}), json!({}));
        assert_eq!(expiry_ms(&o, &d()), Some(Ok(CREATED_MS + 300_000)));
        assert_eq!(
            decide(&o, CREATED_MS + 60_000, &d()),
            Decision::Wait(Duration::from_secs(240))
        );
        assert_eq!(
            decide(&o, CREATED_MS + 300_000, &d()),
            Decision::Expired {
                at: CREATED_MS / 1000 + 300,
                dry_run: false
            }
        );
    }

    #[test]
    fn the_earlier_of_ttl_and_expires_wins() {
        let o = obj(
            json!({TTL: "1h", EXPIRES: "2030-01-01T00:10:00Z"}),
            json!({}),
        );
        assert_eq!(expiry_ms(&o, &d()), Some(Ok(CREATED_MS + 600_000)));
        let o = obj(json!({EXPIRES: "2030-01-01T01:00:00+01:00"}), json!({}));
        assert_eq!(expiry_ms(&o, &d()), Some(Ok(CREATED_MS)));
    }

    #[test]
    fn dry_run_label_and_malformed_annotations() {
        let o = obj(json!({TTL: "1s"}), json!({DRY_RUN: "true"}));
        assert_eq!(
            decide(&o, CREATED_MS + 1_500, &d()),
            Decision::Expired {
                at: CREATED_MS / 1000 + 1,
                dry_run: true
            }
        );
        let o = obj(json!({TTL: "1s"}), json!({DRY_RUN: "false"}));
        assert!(matches!(
            decide(&o, CREATED_MS + 1_500, &d()),
            Decision::Expired { dry_run: false, .. }
        ));
        assert!(matches!(
            decide(&obj(json!({TTL: "soon"}), json!({})), 0, &d()),
            Decision::Invalid(e) if e.contains("janitor/ttl")
        ));
        assert!(matches!(
            decide(&obj(json!({TTL: "1h", EXPIRES: "tomorrow"}), json!({})), 0, &d()),
            Decision::Invalid(e) if e.contains("janitor/expires")
        ));
        assert_eq!(
            decide(&obj(json!({}), json!({})), 0, &d()),
            Decision::Unmanaged
        );
        let mut no_created = obj(json!({TTL: "1s"}), json!({}));
        no_created["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("creationTimestamp");
        assert!(matches!(decide(&no_created, 0, &d()), Decision::Invalid(_)));
    }

    #[test]
    fn reports_round_sub_second_expiry_up() {
        let o = obj(json!({TTL: "1500ms"}), json!({}));
        assert_eq!(
            decide(&o, CREATED_MS + 2_000, &d()),
            Decision::Expired {
                at: CREATED_MS / 1000 + 2,
                dry_run: false
            }
        );
        assert_eq!(report_value(CREATED_MS / 1000), "2030-01-01T00:00:00Z");
    }

    #[test]
    fn a_configured_prefix_renames_every_key_and_dry_run_spares_everything() {
        let rules = Rules::new(&Settings {
            prefix: "cleanup.example.com".into(),
            dry_run: false,
        });
        assert_eq!(rules.ttl, "cleanup.example.com/ttl");
        assert_eq!(rules.expires, "cleanup.example.com/expires");
        assert_eq!(rules.dry_run_label, "cleanup.example.com/dry-run");
        assert_eq!(rules.would_delete, "cleanup.example.com/would-delete-at");
        // The default names mean nothing under another prefix.
        let old = obj(json!({TTL: "1s"}), json!({}));
        assert!(!is_managed(&old, &rules));
        assert_eq!(
            decide(&old, CREATED_MS + 5_000, &rules),
            Decision::Unmanaged
        );
        let new = obj(
            json!({"cleanup.example.com/ttl": "1s"}),
            json!({"cleanup.example.com/dry-run": "true"}),
        );
        assert!(is_managed(&new, &rules));
        assert_eq!(
            decide(&new, CREATED_MS + 1_000, &rules),
            Decision::Expired {
                at: CREATED_MS / 1000 + 1,
                dry_run: true
            }
        );
        let bad = obj(json!({"cleanup.example.com/ttl": "soon"}), json!({}));
        assert!(matches!(
            decide(&bad, 0, &rules),
            Decision::Invalid(e) if e.starts_with("cleanup.example.com/ttl: ")
        ));

        // dryRun: everything expired is only reported, labelled or not.
        let all = Rules::new(&Settings {
            dry_run: true,
            ..Settings::default()
        });
        assert_eq!(
            decide(
                &obj(json!({TTL: "1s"}), json!({})),
                CREATED_MS + 1_000,
                &all
            ),
            Decision::Expired {
                at: CREATED_MS / 1000 + 1,
                dry_run: true
            }
        );
        assert_eq!(Rules::default(), Rules::new(&Settings::default()));
        assert_eq!(Rules::default().ttl, TTL);
    }
}
