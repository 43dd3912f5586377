//! Two revisions of a plugin over the same scenario (`host test --compare`): what the new one
//! would leave different, in the form shadow runs report it (the kind of change, the objects,
//! the JSON patch), so the check runs in a guest crate's CI before anything is deployed.

use std::collections::BTreeMap;

use kwh_plugin::backend::shadow::{compare, kind_of, Outcome};

use super::run::Trace;

/// One kind of difference: the objects it concerns and one example (a patch from what the
/// old revision left to what the new one does, or the new one's refusal).
#[derive(Debug, Clone, PartialEq)]
pub struct KindOfDifference {
    pub kind: String,
    pub objects: Vec<String>,
    pub example: serde_json::Value,
}

/// The differences between `old`'s and `new`'s traces of one scenario, grouped by kind: the
/// final state of every object either wrote (compared as shadow writes are: server-set fields
/// and condition times aside), and the writes the server refused to the new revision only.
pub fn differences(old: &Trace, new: &Trace) -> Vec<KindOfDifference> {
    grouped(old, new, true)
}

/// [`differences`] in the final states only: what a perturbed run must not change, where a
/// write refused on the way (a create meeting `AlreadyExists` after a restart, a 409 after a
/// stale read) is the cluster doing its job.
pub fn state_differences(old: &Trace, new: &Trace) -> Vec<KindOfDifference> {
    grouped(old, new, false)
}

fn grouped(old: &Trace, new: &Trace, refusals: bool) -> Vec<KindOfDifference> {
    let mut groups: BTreeMap<String, KindOfDifference> = BTreeMap::new();
    let mut add = |kind: String, object: String, example: serde_json::Value| {
        let g = groups.entry(kind.clone()).or_insert(KindOfDifference {
            kind,
            objects: Vec::new(),
            example,
        });
        if !g.objects.contains(&object) {
            g.objects.push(object);
        }
    };
    let mut keys: Vec<_> = old.finals.keys().chain(new.finals.keys()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        let (_, kind, ns, name) = key;
        let a = old.finals.get(key).cloned().flatten().map(without_uid);
        let b = new.finals.get(key).cloned().flatten().map(without_uid);
        if let Outcome::Changes(patch) = compare(a.as_ref(), b.as_ref()) {
            let object = ns
                .as_ref()
                .map_or(name.clone(), |ns| format!("{ns}/{name}"));
            add(
                kind_of("state", kind, &Outcome::Changes(patch.clone())),
                object,
                patch,
            );
        }
    }
    if !refusals {
        return groups.into_values().collect();
    }
    let refused = |t: &Trace| -> Vec<(String, String, kwh_plugin::ApiError)> {
        t.writes
            .iter()
            .filter_map(|w| {
                let e = w.result.as_ref().err()?;
                Some((w.verb.as_str().to_owned(), w.key(), e.clone()))
            })
            .collect()
    };
    let before = refused(old);
    for (verb, object, e) in refused(new) {
        if before.iter().any(|(v, o, _)| *v == verb && *o == object) {
            continue;
        }
        let kind = new
            .writes
            .iter()
            .find(|w| w.key() == object)
            .map_or("?".to_owned(), |w| w.request.kind.clone());
        let example = serde_json::json!({"code": e.code, "reason": e.reason, "message": e.message});
        add(kind_of(&verb, &kind, &Outcome::Refused(e)), object, example);
    }
    groups.into_values().collect()
}

/// The report of one scenario's differences, as `host shadow report` prints a shadow's.
pub fn render(scenario: &str, diffs: &[KindOfDifference]) -> String {
    let mut out = format!("{scenario}: {} kind(s) of difference\n", diffs.len());
    for d in diffs {
        out.push_str(&format!(
            "  {}: {} object(s): {}\n    {}\n",
            d.kind,
            d.objects.len(),
            d.objects.join(", "),
            d.example
        ));
    }
    out
}

/// The object with its uid, wherever it appears (a Job's generated selector copies it), made
/// one placeholder: two runs create the same object with different uids.
fn without_uid(v: serde_json::Value) -> serde_json::Value {
    let Some(uid) = v
        .pointer("/metadata/uid")
        .and_then(serde_json::Value::as_str)
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
    else {
        return v;
    };
    let text = v.to_string().replace(&uid, "<uid>");
    serde_json::from_str(&text).unwrap_or(v)
}
