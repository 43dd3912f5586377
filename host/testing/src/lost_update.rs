//! The lost-update oracle: a write that sets a field back to what the writer last saw,
//! undoing a newer change it never saw. On a real cluster this is what a replace without a
//! `resourceVersion` (or a patch built from a stale read) does: the server accepts it and the
//! other writer's change is gone, silently. A write carrying the `resourceVersion` it read
//! meets a 409 instead and never shows here.

use kwh_plugin::backend::shadow::{compare, Outcome};
use serde_json::Value;

/// Each field the write undid: `seen` is the object as the writer's cache held it, `current`
/// as the cluster held it before the write, `after` as the write left it. A field undone is
/// one that changed between `seen` and `current` (the changes found as shadow writes' are,
/// server-set fields aside) and that the write set back to its `seen` value (present or
/// absent). Only the writer's own fields count: labels and annotations of the metadata, and
/// the status for a status write, the rest for a write of the main resource (the server
/// ignores the other part).
pub(crate) fn undone(seen: &Value, current: &Value, after: &Value, status: bool) -> Vec<String> {
    let Outcome::Changes(patch) = compare(Some(seen), Some(current)) else {
        return Vec::new();
    };
    patch
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|op| op.get("path").and_then(Value::as_str))
        .filter(|p| relevant(p, status))
        .filter_map(|p| {
            let (was, newer, now) = (seen.pointer(p), current.pointer(p), after.pointer(p));
            (was != newer && now == was).then(|| {
                format!(
                    "{} set back to {} (the cluster had {}, a change the plugin's cache had not seen)",
                    dotted(p),
                    shown(was),
                    shown(newer)
                )
            })
        })
        .collect()
}

fn shown(v: Option<&Value>) -> String {
    v.map_or("nothing".to_owned(), Value::to_string)
}

/// Whether a field (a JSON pointer) is the writer's to set.
fn relevant(pointer: &str, status: bool) -> bool {
    if let Some(m) = pointer.strip_prefix("/metadata/") {
        return !status && (m.starts_with("labels/") || m.starts_with("annotations/"));
    }
    (pointer == "/status" || pointer.starts_with("/status/")) == status
}

/// A JSON pointer as a dotted path, as reports name fields (`data.owner`).
fn dotted(pointer: &str) -> String {
    pointer
        .trim_start_matches('/')
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(rv: &str, data: Value) -> Value {
        json!({"metadata": {"name": "x", "resourceVersion": rv, "labels": {"a": "1"}}, "data": data})
    }

    #[test]
    fn a_write_setting_back_a_change_it_never_saw_is_a_lost_update() {
        let seen = cm("1", json!({"mine": "1", "theirs": "1"}));
        let current = cm("2", json!({"mine": "1", "theirs": "2"}));
        // A replace from the stale read: `theirs` goes back to 1.
        let after = cm("3", json!({"mine": "2", "theirs": "1"}));
        let u = undone(&seen, &current, &after, false);
        assert_eq!(u.len(), 1, "{u:?}");
        assert!(u[0].starts_with("data.theirs set back to \"1\" (the cluster had \"2\""));
        // A field the newer change added, removed by the write, is lost too.
        let current = cm("2", json!({"mine": "1", "theirs": "1", "added": "x"}));
        let after = cm("3", json!({"mine": "2", "theirs": "1"}));
        assert!(
            undone(&seen, &current, &after, false)[0].starts_with("data.added set back to nothing")
        );
    }

    #[test]
    fn writes_that_keep_newer_changes_or_touch_server_fields_are_not() {
        let seen = cm("1", json!({"mine": "1", "theirs": "1"}));
        let current = cm("2", json!({"mine": "1", "theirs": "2"}));
        // A patch of its own field only keeps theirs.
        let after = cm("3", json!({"mine": "2", "theirs": "2"}));
        assert!(undone(&seen, &current, &after, false).is_empty());
        // resourceVersion moved in every version: not the writer's field.
        let after = cm("1", json!({"mine": "1", "theirs": "2"}));
        assert!(undone(&seen, &current, &after, false).is_empty());
        // A status write is judged on the status only.
        let seen = json!({"spec": {"a": 1}, "status": {"s": 1}});
        let current = json!({"spec": {"a": 2}, "status": {"s": 1}});
        let after = json!({"spec": {"a": 1}, "status": {"s": 2}});
        assert!(undone(&seen, &current, &after, true).is_empty());
        assert_eq!(undone(&seen, &current, &after, false).len(), 1);
    }
}
