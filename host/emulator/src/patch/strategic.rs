//! Strategic merge patch (`application/strategic-merge-patch+json`) for built-in kinds.
//!
//! Merge-patch semantics, except that lists with a merge key merge item by item, `finalizers`
//! merges as a set, and these directives are honoured (and never stored):
//! - `$patch: replace` (a map or keyed list is replaced by the patch's content),
//!   `$patch: delete` (a map is emptied, a keyed-list item removed), `$patch: merge`; a map
//!   with a `$patch` directive under a key the object lacks is dropped, as the server does;
//! - `$retainKeys: [..]` (keys not listed are cleared after merging; the patch itself may
//!   only set listed keys, else 422);
//! - `$deleteFromPrimitiveList/<field>: [..]` (values removed from a primitive list);
//! - `$setElementOrder/<field>: [..]` (what `kubectl apply` sends: the final order of the
//!   list, by value or by merge key).
//!
//! Merged lists are ordered as the server orders them: the patch's items (or the
//! `$setElementOrder` list) in their order, the object's other items in theirs, interleaved
//! so that an item that preceded a patched item still does. A new list item is stored as the
//! patch gives it minus nulls and `$` keys, which is what the server's typed decode keeps.
//! The differential tests run the same patches through kubectl's copy of the server's
//! implementation and compare results, order included.
//!
//! Gaps: merge keys come from the table in `schema` (containers, env, volumes, volumeMounts,
//! ports, imagePullSecrets, ownerReferences, conditions and a few more), not from the full
//! OpenAPI schema; every other list is replaced, which is also the real behaviour for lists
//! without a `patchStrategy` (tolerations, args, command, envFrom…). Fields unknown to the
//! kind are kept (the server's decode would drop them). Lists of lists are not rejected.

use serde_json::{Map, Value};

use super::schema::{self, ListKind};
use super::PatchError;

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";

/// Applies a strategic merge patch to `doc` in place.
pub(super) fn merge(doc: &mut Value, patch: &Value) -> Result<(), PatchError> {
    if patch.is_null() {
        // The server's implementation treats a `null` patch as empty.
        return Ok(());
    }
    let Value::Object(pm) = patch else {
        return Err(PatchError::BadRequest(
            "the strategic merge patch must be a JSON object".into(),
        ));
    };
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    if let Value::Object(om) = doc {
        if merge_map(om, pm)? {
            om.clear();
        }
    }
    Ok(())
}

/// Merges `patch` into `orig`; true when the patch asks to delete the whole map.
fn merge_map(
    orig: &mut Map<String, Value>,
    patch: &Map<String, Value>,
) -> Result<bool, PatchError> {
    match patch.get(PATCH) {
        None => {}
        Some(Value::String(s)) if s == "merge" => {}
        Some(Value::String(s)) if s == "replace" => {
            let mut rest = patch.clone();
            rest.remove(PATCH);
            let mut fresh = Map::new();
            merge_map(&mut fresh, &rest)?;
            *orig = fresh;
            return Ok(false);
        }
        Some(Value::String(s)) if s == "delete" => return Ok(true),
        Some(other) => {
            return Err(PatchError::BadRequest(format!(
                "unknown patch type {other} in the {PATCH} directive"
            )))
        }
    }

    let retain = match patch.get(RETAIN_KEYS) {
        None => None,
        Some(Value::Array(keys)) => {
            let keys: Option<Vec<&str>> = keys.iter().map(Value::as_str).collect();
            let keys = keys.ok_or_else(|| {
                PatchError::BadRequest(format!("{RETAIN_KEYS} must be a list of strings"))
            })?;
            if let Some(k) = patch
                .keys()
                .find(|k| !k.starts_with('$') && !keys.contains(&k.as_str()))
            {
                return Err(PatchError::Unprocessable(format!(
                    "doesn't match: the patch sets {k:?}, which {RETAIN_KEYS} does not list"
                )));
            }
            Some(keys)
        }
        Some(_) => {
            return Err(PatchError::BadRequest(format!(
                "{RETAIN_KEYS} must be a list of strings"
            )))
        }
    };

    for (k, v) in patch {
        if let Some(field) = k.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            let Value::Array(remove) = v else {
                return Err(PatchError::BadRequest(format!("{k} must be a list")));
            };
            if let Some(Value::Array(list)) = orig.get_mut(field) {
                list.retain(|x| !remove.contains(x));
            }
        }
    }

    // `$setElementOrder` orders a list relative to its state before this patch.
    let mut orders = Vec::new();
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix(SET_ELEMENT_ORDER) {
            let Value::Array(order) = v else {
                return Err(PatchError::BadRequest(format!("{k} must be a list")));
            };
            let before = orig
                .get(field)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            orders.push((field, order, before));
        }
    }

    for (k, v) in patch {
        if !k.starts_with('$') {
            merge_field(orig, k, v)?;
        }
    }

    for (field, order, before) in orders {
        if let Some(Value::Array(list)) = orig.get_mut(field) {
            let kind = schema::list_kind(true, Some(field), before.iter().chain(order));
            if kind != ListKind::Atomic {
                let merged = std::mem::take(list);
                *list = enforce_order(merged, order, &before, kind)?;
            }
        }
    }

    if let Some(keys) = retain {
        orig.retain(|k, _| keys.contains(&k.as_str()));
    }
    Ok(false)
}

fn merge_field(orig: &mut Map<String, Value>, key: &str, pv: &Value) -> Result<(), PatchError> {
    match pv {
        Value::Null => {
            orig.remove(key);
        }
        Value::Object(pm) => match orig.get_mut(key) {
            Some(Value::Object(om)) => {
                // `$patch: delete` of a map field leaves it empty, as the server does.
                if merge_map(om, pm)? {
                    om.clear();
                }
            }
            // The server's implementation drops a map carrying a `$patch` directive when the
            // object has nothing under that key yet (kubectl's patch code, the same library,
            // shows it); keep that.
            None if pm.contains_key(PATCH) => {}
            _ => {
                let mut fresh = Map::new();
                if merge_map(&mut fresh, pm)? {
                    fresh.clear();
                }
                orig.insert(key.to_owned(), Value::Object(fresh));
            }
        },
        Value::Array(pa) => {
            let existing = orig.get(key).and_then(Value::as_array);
            let kind = schema::list_kind(true, Some(key), existing.into_iter().flatten().chain(pa));
            match orig.get_mut(key) {
                Some(Value::Array(oa)) => merge_list(oa, pa, kind)?,
                _ => {
                    let mut fresh = Vec::new();
                    merge_list(&mut fresh, pa, kind)?;
                    orig.insert(key.to_owned(), Value::Array(fresh));
                }
            }
        }
        scalar => {
            orig.insert(key.to_owned(), scalar.clone());
        }
    }
    Ok(())
}

fn directive(item: &Value) -> Option<&str> {
    item.get(PATCH).and_then(Value::as_str)
}

fn merge_list(orig: &mut Vec<Value>, patch: &[Value], kind: ListKind) -> Result<(), PatchError> {
    let replace = patch.iter().any(|i| directive(i) == Some("replace"));
    match kind {
        ListKind::Atomic => {
            *orig = patch.to_vec();
        }
        ListKind::Set => {
            if replace {
                orig.clear();
            }
            let items: Vec<Value> = patch
                .iter()
                .filter(|v| directive(v).is_none())
                .cloned()
                .collect();
            let before = std::mem::take(orig);
            let mut merged = before.clone();
            for v in &items {
                if !merged.contains(v) {
                    merged.push(v.clone());
                }
            }
            *orig = enforce_order(merged, &items, &before, kind)?;
        }
        ListKind::Keyed(keys) => {
            // The strategic merge key is the first key field (`patchMergeKey`).
            let merge_key = &keys[..1];
            if replace {
                orig.clear();
            }
            let mut items = Vec::with_capacity(patch.len());
            for item in patch {
                if directive(item) == Some("replace") {
                    continue;
                }
                let Value::Object(pm) = item else {
                    return Err(PatchError::Internal(format!(
                        "unable to merge the list item {item}: a list with merge key {:?} holds only maps",
                        merge_key[0].name
                    )));
                };
                let id = merge_key_of(merge_key, item)?;
                if directive(item) == Some("delete") {
                    orig.retain(|o| !schema::item_matches(merge_key, o, &id));
                } else {
                    items.push((id, pm));
                }
            }
            let before = orig.clone();
            for (id, pm) in &items {
                match orig
                    .iter()
                    .position(|o| schema::item_matches(merge_key, o, id))
                {
                    Some(i) => {
                        let delete = match &mut orig[i] {
                            Value::Object(om) => merge_map(om, pm)?,
                            other => {
                                let mut fresh = Map::new();
                                let delete = merge_map(&mut fresh, pm)?;
                                *other = Value::Object(fresh);
                                delete
                            }
                        };
                        if delete {
                            orig.remove(i);
                        }
                    }
                    None => orig.push(as_decoded(Value::Object((*pm).clone()))),
                }
            }
            let patch_order: Vec<Value> = items
                .iter()
                .map(|(_, pm)| Value::Object((*pm).clone()))
                .collect();
            let merged = std::mem::take(orig);
            *orig = enforce_order(merged, &patch_order, &before, kind)?;
        }
    }
    Ok(())
}

/// A new list item is appended as the patch gives it, and the server's typed decode then drops
/// its nulls and unknown (`$`-prefixed) keys; this does the same in one step. (So a
/// `{"name": "x", "$patch": "delete"}` for an item that does not exist adds `{"name": "x"}`,
/// exactly as on a real server.)
fn as_decoded(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(k, v)| !k.starts_with('$') && !v.is_null())
                .map(|(k, v)| (k, as_decoded(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(as_decoded).collect()),
        other => other,
    }
}

fn merge_key_of(
    merge_key: &[schema::KeyField],
    item: &Value,
) -> Result<Vec<(&'static str, Value)>, PatchError> {
    schema::item_key(merge_key, item).ok_or_else(|| {
        PatchError::Internal(format!(
            "map: {item} does not contain declared merge key: {}",
            merge_key[0].name
        ))
    })
}

/// Orders a merged list the way the server does: the items `order` names (the patch's items,
/// or a `$setElementOrder` list) in that order, the other items in their order in `before`
/// (the list as it was), interleaved so that an item that came before a named item in
/// `before` still does.
fn enforce_order(
    merged: Vec<Value>,
    order: &[Value],
    before: &[Value],
    kind: ListKind,
) -> Result<Vec<Value>, PatchError> {
    let merge_key = match kind {
        ListKind::Keyed(keys) => Some(&keys[..1]),
        _ => None,
    };
    let position = |list: &[Value], item: &Value| -> Option<usize> {
        match merge_key {
            Some(k) => {
                let id = schema::item_key(k, item)?;
                list.iter().position(|o| schema::item_matches(k, o, &id))
            }
            None => list.iter().position(|o| o == item),
        }
    };
    if let Some(k) = merge_key {
        for item in order {
            merge_key_of(k, item)?;
        }
    }
    let (mut named, mut rest): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|item| position(order, item).is_some());
    named.sort_by_key(|item| position(order, item));
    rest.sort_by_key(|item| position(before, item).unwrap_or(usize::MAX));

    let mut out = Vec::with_capacity(named.len() + rest.len());
    let mut rest = rest.into_iter().peekable();
    for item in named {
        // Server-only items that preceded this item before go first.
        let here = position(before, &item);
        while let Some(r) = rest.peek() {
            match (position(before, r), here) {
                (Some(ri), Some(hi)) if ri < hi => out.extend(rest.next()),
                _ => break,
            }
        }
        out.push(item);
    }
    out.extend(rest);
    Ok(out)
}
