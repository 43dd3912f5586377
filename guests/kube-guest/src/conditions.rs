//! Status conditions (`status.conditions[]`, metav1.Condition) with Kubernetes' transition rule:
//! `lastTransitionTime` changes only when a condition's `status` changes, so it tells when the
//! state was entered, not when a controller last looked.
//!
//! [`merge_patch`] turns one condition change into a patch of the `status` subresource, which
//! [`Api::set_condition`](crate::Api::set_condition) sends.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::api::Patch;
use crate::object::Object;

/// One condition, as metav1.Condition serialises it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The condition's type, e.g. `Ready`, in CamelCase.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// A CamelCase machine-readable reason for the last change.
    #[serde(default)]
    pub reason: String,
    /// A human-readable message.
    #[serde(default)]
    pub message: String,
    /// The `metadata.generation` the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When `status` last changed (RFC 3339); filled by [`set`].
    #[serde(default)]
    pub last_transition_time: String,
}

impl Condition {
    /// A condition of `type_` with `status` (`True`, `False`, `Unknown`), reason and message.
    pub fn new(type_: &str, status: &str, reason: &str, message: &str) -> Self {
        Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: reason.to_string(),
            message: message.to_string(),
            observed_generation: None,
            last_transition_time: String::new(),
        }
    }

    /// The same with `observedGeneration` set (usually the object's `metadata.generation`).
    pub fn observed_generation(mut self, generation: i64) -> Self {
        self.observed_generation = Some(generation);
        self
    }

    /// Whether `status` is `True`.
    pub fn is_true(&self) -> bool {
        self.status == "True"
    }
}

/// The conditions in `status` (entries that do not parse are skipped).
pub fn list(status: &Value) -> Vec<Condition> {
    status
        .get("conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| Condition::deserialize(c).ok())
        .collect()
}

/// The condition of `type_` in `status`.
pub fn get(status: &Value, type_: &str) -> Option<Condition> {
    list(status).into_iter().find(|c| c.type_ == type_)
}

/// Whether `status` has condition `type_` with status `True`.
pub fn is_true(status: &Value, type_: &str) -> bool {
    get(status, type_).is_some_and(|c| c.is_true())
}

/// Sets `cond` in `status` (an object; made one if it is not) with metav1's semantics: a new
/// condition, or one whose `status` changed, gets `lastTransitionTime = now` (unless `cond`
/// carries one); otherwise the old transition time is kept while reason, message and
/// observedGeneration are updated. Returns whether anything changed, so a reconcile can skip a
/// status write that would change nothing.
///
/// ```
/// use kube_guest::conditions::{self, Condition};
/// let mut status = serde_json::json!({});
/// let ready = Condition::new("Ready", "False", "Waiting", "0/1 ready");
/// assert!(conditions::set(&mut status, ready, "2024-01-01T00:00:00Z"));
/// // Same status later, new message: the transition time stays.
/// let ready = Condition::new("Ready", "False", "Waiting", "0/2 ready");
/// assert!(conditions::set(&mut status, ready.clone(), "2024-01-01T00:05:00Z"));
/// assert!(!conditions::set(&mut status, ready, "2024-01-01T00:06:00Z"));
/// assert_eq!(status["conditions"][0]["lastTransitionTime"], "2024-01-01T00:00:00Z");
/// // A new status is a transition.
/// let ready = Condition::new("Ready", "True", "Available", "");
/// conditions::set(&mut status, ready, "2024-01-01T00:10:00Z");
/// assert_eq!(status["conditions"][0]["lastTransitionTime"], "2024-01-01T00:10:00Z");
/// ```
pub fn set(status: &mut Value, mut cond: Condition, now: &str) -> bool {
    if !status.is_object() {
        *status = Value::Object(Map::new());
    }
    let Some(root) = status.as_object_mut() else {
        return false;
    };
    let list = root
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    let Some(list) = list.as_array_mut() else {
        return false;
    };
    let pos = list
        .iter()
        .position(|c| c.get("type").and_then(Value::as_str) == Some(cond.type_.as_str()));
    let old = pos.and_then(|i| Condition::deserialize(&list[i]).ok());
    match &old {
        Some(o) if o.status == cond.status => {
            cond.last_transition_time = o.last_transition_time.clone();
        }
        _ if cond.last_transition_time.is_empty() => cond.last_transition_time = now.to_string(),
        _ => {}
    }
    if old.as_ref() == Some(&cond) {
        return false;
    }
    let v = serde_json::to_value(&cond).unwrap_or(Value::Null);
    match pos {
        Some(i) => list[i] = v,
        None => list.push(v),
    }
    true
}

/// The merge patch of `obj`'s `status` subresource that sets `cond` (with [`set`]'s transition
/// rule, `now` being the time of a transition), or none when it would change nothing.
///
/// Why the patch carries every condition and `obj`'s resourceVersion: a JSON merge patch
/// replaces a list whole, so it must state the others too, and the resourceVersion makes the API
/// server refuse it with 409 `Conflict` when the object changed since `obj` was read, rather
/// than silently drop a condition another writer set meanwhile (client-go's
/// `MergeFromWithOptimisticLock`, as [`crate::finalizer`] does). Other status fields are left
/// as they are. On conflict, reconcile again from the fresher cached object.
///
/// ```
/// use kube_guest::conditions::{self, Condition};
/// use kube_guest::{Object, Patch};
/// let obj = Object::from_slice(br#"{"metadata":{"name":"w","resourceVersion":"7"},
///     "status":{"phase":"Running","conditions":[{"type":"Synced","status":"True",
///     "reason":"Ok","message":"","lastTransitionTime":"2024-01-01T00:00:00Z"}]}}"#).unwrap();
/// let ready = Condition::new("Ready", "True", "Available", "");
/// let Some(Patch::Merge(p)) = conditions::merge_patch(&obj, ready, "2024-01-02T00:00:00Z")
/// else { panic!() };
/// assert_eq!(p["metadata"]["resourceVersion"], "7");
/// assert_eq!(p["status"]["conditions"][0]["type"], "Synced");
/// assert_eq!(p["status"]["conditions"][1]["lastTransitionTime"], "2024-01-02T00:00:00Z");
/// assert!(p["status"].get("phase").is_none(), "other status fields are not touched");
/// ```
pub fn merge_patch(obj: &Object, cond: Condition, now: &str) -> Option<Patch> {
    let mut status = obj.get("status").cloned().unwrap_or(Value::Null);
    if !set(&mut status, cond, now) {
        return None;
    }
    let mut patch = json!({ "status": { "conditions": status["conditions"].take() } });
    if let Some(rv) = obj.resource_version() {
        patch["metadata"] = json!({ "resourceVersion": rv });
    }
    Some(Patch::Merge(patch))
}

/// Removes the condition of `type_`; returns whether there was one.
pub fn remove(status: &mut Value, type_: &str) -> bool {
    let Some(list) = status.get_mut("conditions").and_then(Value::as_array_mut) else {
        return false;
    };
    let before = list.len();
    list.retain(|c| c.get("type").and_then(Value::as_str) != Some(type_));
    list.len() != before
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_states_every_condition_and_nothing_when_unchanged() {
        let obj = Object::from_slice(
            br#"{"metadata":{"name":"w","resourceVersion":"3"},
                "status":{"conditions":[{"type":"Ready","status":"False","reason":"Wait",
                "message":"","lastTransitionTime":"t1"}]}}"#,
        )
        .unwrap();
        let same = Condition::new("Ready", "False", "Wait", "");
        assert_eq!(merge_patch(&obj, same, "t2"), None, "no change, no write");
        let Some(Patch::Merge(p)) =
            merge_patch(&obj, Condition::new("Ready", "True", "Ok", ""), "t2")
        else {
            panic!("a merge patch")
        };
        assert_eq!(
            p,
            json!({"metadata": {"resourceVersion": "3"}, "status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "Ok", "message": "",
                 "lastTransitionTime": "t2"}]}})
        );
        // An object with no status (or no resourceVersion yet) gets a list of one, unlocked.
        let bare = Object::new("example.com/v1", "Widget", None, "w");
        let Some(Patch::Merge(p)) =
            merge_patch(&bare, Condition::new("Ready", "True", "Ok", ""), "t3")
        else {
            panic!("a merge patch")
        };
        assert!(p.get("metadata").is_none(), "{p}");
        assert_eq!(p["status"]["conditions"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn transition_time_moves_only_with_status() {
        let mut s = json!(null);
        assert!(set(
            &mut s,
            Condition::new("A", "True", "R", "m").observed_generation(1),
            "t1"
        ));
        assert!(set(&mut s, Condition::new("B", "False", "R", "m"), "t1"));
        assert!(set(
            &mut s,
            Condition::new("A", "True", "R", "m").observed_generation(2),
            "t2"
        ));
        let a = get(&s, "A").unwrap();
        assert_eq!(
            (a.last_transition_time.as_str(), a.observed_generation),
            ("t1", Some(2))
        );
        assert!(set(&mut s, Condition::new("A", "False", "R", "m"), "t3"));
        assert_eq!(get(&s, "A").unwrap().last_transition_time, "t3");
        assert!(!is_true(&s, "A") && !is_true(&s, "B") && !is_true(&s, "C"));
        assert_eq!(list(&s).len(), 2);
        assert!(remove(&mut s, "B") && !remove(&mut s, "B"));
        assert_eq!(list(&s).len(), 1);
        // An explicit transition time on a new condition is kept.
        let mut c = Condition::new("C", "True", "", "");
        c.last_transition_time = "t0".into();
        set(&mut s, c, "t9");
        assert_eq!(get(&s, "C").unwrap().last_transition_time, "t0");
    }
}
