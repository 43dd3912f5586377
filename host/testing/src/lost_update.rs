//! The lost-update oracle: a write that sets a field back to what the writer last saw,
//! undoing a newer change it never saw. On a real cluster this is what a replace without a
//! `resourceVersion` (or a patch built from a stale read) does: the server accepts it and the
//! other writer's change is gone, silently. A write carrying the `resourceVersion` it read
//! meets a 409 instead and never shows here.

use std::collections::BTreeMap;

use serde_json::Value;

/// Each field the write undid: `seen` is the object as the writer's cache held it, `current`
/// as the cluster held it before the write, `after` as the write left it. A field undone is
/// one that changed between `seen` and `current` and that the write set back to its `seen`
/// value (present or absent). Server-set metadata is left aside, and the status for a write
/// of the main resource (the server ignores it there), the rest of the object for a status
/// write.
pub(crate) fn undone(seen: &Value, current: &Value, after: &Value, status: bool) -> Vec<String> {
    let (mut s, mut c, mut a) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    leaves(seen, "", &mut s);
    leaves(current, "", &mut c);
    leaves(after, "", &mut a);
    let mut paths: Vec<&String> = s.keys().chain(c.keys()).collect();
    paths.sort();
    paths.dedup();
    paths
        .into_iter()
        .filter(|p| relevant(p, status))
        .filter_map(|p| {
            let (was, newer, now) = (s.get(p), c.get(p), a.get(p));
            (was != newer && now == was).then(|| {
                format!(
                    "{p} set back to {} (the cluster had {}, a change the plugin's cache had not seen)",
                    shown(was),
                    shown(newer)
                )
            })
        })
        .collect()
}

fn shown(v: Option<&&Value>) -> String {
    v.map_or("nothing".to_owned(), |v| v.to_string())
}

/// Whether a field is the writer's to set: labels and annotations of the metadata, the status
/// for a status write, everything else for a write of the main resource.
fn relevant(path: &str, status: bool) -> bool {
    if let Some(m) = path.strip_prefix("metadata.") {
        return !status && (m.starts_with("labels.") || m.starts_with("annotations."));
    }
    (path == "status" || path.starts_with("status.")) == status
}

/// Every leaf of `v` by dotted path; lists are leaves (compared whole).
fn leaves<'a>(v: &'a Value, prefix: &str, out: &mut BTreeMap<String, &'a Value>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(child, &p, out);
            }
        }
        _ => {
            out.insert(prefix.to_owned(), v);
        }
    }
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
