//! "Contained in" for JSON: what scenario expectations on bodies and objects mean.
//!
//! Maps match by subset (keys the expectation leaves out are not checked; `null` means absent),
//! lists element by element with equal length, scalars by equality. A mismatch is reported with
//! the path to the first difference, which is what a failing test most needs.

use serde_json::Value;

/// `None` when `expected` is contained in `actual`, else where and how they differ.
pub(crate) fn contained(expected: &Value, actual: &Value) -> Option<String> {
    walk("", expected, actual)
}

fn walk(path: &str, e: &Value, a: &Value) -> Option<String> {
    let here = |p: &str| {
        if p.is_empty() {
            "(root)".to_string()
        } else {
            p.to_string()
        }
    };
    match (e, a) {
        (Value::Object(em), Value::Object(am)) => em.iter().find_map(|(k, ev)| {
            let p = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            match (ev, am.get(k)) {
                (Value::Null, None | Some(Value::Null)) => None,
                (_, None) => Some(format!("{p}: expected {}, missing", short(ev))),
                (ev, Some(av)) => walk(&p, ev, av),
            }
        }),
        (Value::Array(el), Value::Array(al)) => {
            if el.len() != al.len() {
                return Some(format!(
                    "{}: expected {} items, got {} ({})",
                    here(path),
                    el.len(),
                    al.len(),
                    short(a)
                ));
            }
            el.iter()
                .zip(al)
                .enumerate()
                .find_map(|(i, (ev, av))| walk(&format!("{path}[{i}]"), ev, av))
        }
        (Value::Number(en), Value::Number(an)) if en.as_f64() == an.as_f64() => None,
        _ if e == a => None,
        _ => Some(format!(
            "{}: expected {}, got {}",
            here(path),
            short(e),
            short(a)
        )),
    }
}

/// Compact JSON, cut to a readable length.
pub(crate) fn short(v: &Value) -> String {
    const MAX: usize = 120;
    let s = v.to_string();
    if s.len() <= MAX {
        return s;
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subset_of_maps_exact_lists_and_null_as_absent() {
        let a = json!({"data": {"v": "1", "w": 2}, "items": [1, {"x": 1, "y": 2}]});
        assert_eq!(contained(&json!({"data": {"v": "1"}}), &a), None);
        assert_eq!(contained(&json!({"items": [1, {"y": 2}]}), &a), None);
        assert_eq!(contained(&json!({"gone": null}), &a), None);
        assert_eq!(
            contained(&json!({"data": {"v": "2"}}), &a).as_deref(),
            Some("data.v: expected \"2\", got \"1\"")
        );
        assert_eq!(
            contained(&json!({"items": [1]}), &a).as_deref(),
            Some("items: expected 1 items, got 2 ([1,{\"x\":1,\"y\":2}])")
        );
        assert_eq!(
            contained(&json!({"data": {"z": 1}}), &a).as_deref(),
            Some("data.z: expected 1, missing")
        );
        assert_eq!(contained(&json!({"data": {"w": 2.0}}), &a), None);
    }
}
