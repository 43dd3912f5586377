//! `/openapi/v2` in protobuf: the Swagger document as gnostic's `openapi.v2.Document` message
//! (`openapiv2/OpenAPIv2.proto`), the form kubectl reads v2 in (`kubectl explain --output
//! plaintext-openapiv2`, and client-side validation on servers without v3). Written field by
//! field from the JSON document; values the message holds as `Any` (defaults, enums, examples,
//! `x-` extensions) are carried as YAML text, which JSON is.

use serde_json::{Map, Value};

use crate::protobuf::{put_bytes as bytes, put_key as key_of, put_varint as varint};

/// The media type the server answers with (kube-openapi's; the `@` spelling kubectl asks for
/// is not a valid media type to Go's parser, so it is never sent back).
pub(crate) const MEDIA_TYPE: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// Whether `accept` asks for the protobuf form (either spelling kube-openapi serves).
pub(crate) fn wanted(accept: &str) -> bool {
    accept.split(',').any(|r| {
        matches!(
            r.split(';').next().unwrap_or("").trim(),
            MEDIA_TYPE | "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
        )
    })
}

/// The `Document` message of a Swagger 2.0 document.
pub(crate) fn document(doc: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    string(&mut out, 1, doc.get("swagger"));
    if let Some(info) = doc.get("info") {
        let mut i = Vec::new();
        string(&mut i, 1, info.get("title"));
        string(&mut i, 2, info.get("version"));
        string(&mut i, 3, info.get("description"));
        message(&mut out, 2, &i);
    }
    if let Some(defs) = doc.get("definitions").and_then(Value::as_object) {
        let mut d = Vec::new();
        for (name, s) in defs {
            named_schema(&mut d, 1, name, s);
        }
        message(&mut out, 9, &d);
    }
    out
}

/// A `NamedSchema` (name = 1, value = 2) as field `tag`.
fn named_schema(out: &mut Vec<u8>, tag: u64, name: &str, s: &Value) {
    let mut n = Vec::new();
    bytes(&mut n, 1, name.as_bytes());
    let mut v = Vec::new();
    schema(&mut v, s);
    message(&mut n, 2, &v);
    message(out, tag, &n);
}

/// A `Schema` message's fields.
fn schema(out: &mut Vec<u8>, s: &Value) {
    let Some(m) = s.as_object() else { return };
    string(out, 1, m.get("$ref"));
    string(out, 2, m.get("format"));
    string(out, 3, m.get("title"));
    string(out, 4, m.get("description"));
    any(out, 5, m.get("default"));
    for (tag, key) in [(6, "multipleOf"), (7, "maximum"), (9, "minimum")] {
        if let Some(x) = m.get(key).and_then(Value::as_f64) {
            key_of(out, tag, 1);
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
    boolean(out, 8, m.get("exclusiveMaximum"));
    boolean(out, 10, m.get("exclusiveMinimum"));
    let ints = [
        (11, "maxLength"),
        (12, "minLength"),
        (14, "maxItems"),
        (15, "minItems"),
        (17, "maxProperties"),
        (18, "minProperties"),
    ];
    for (tag, key) in ints {
        if let Some(x) = m.get(key).and_then(Value::as_i64).filter(|x| *x != 0) {
            key_of(out, tag, 0);
            varint(out, x as u64);
        }
    }
    string(out, 13, m.get("pattern"));
    boolean(out, 16, m.get("uniqueItems"));
    for r in m
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        string(out, 19, Some(r));
    }
    for e in m
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        any(out, 20, Some(e));
    }
    match m.get("additionalProperties") {
        Some(Value::Bool(b)) => {
            let mut a = Vec::new();
            key_of(&mut a, 2, 0);
            varint(&mut a, u64::from(*b));
            message(out, 21, &a);
        }
        Some(v @ Value::Object(_)) => {
            let mut inner = Vec::new();
            schema(&mut inner, v);
            let mut a = Vec::new();
            message(&mut a, 1, &inner);
            message(out, 21, &a);
        }
        _ => {}
    }
    let types: Vec<&Value> = match m.get("type") {
        Some(Value::Array(a)) => a.iter().collect(),
        Some(t) => vec![t],
        None => Vec::new(),
    };
    if !types.is_empty() {
        let mut t = Vec::new();
        for ty in types {
            string(&mut t, 1, Some(ty));
        }
        message(out, 22, &t);
    }
    let items: Vec<&Value> = match m.get("items") {
        Some(Value::Array(a)) => a.iter().collect(),
        Some(i) => vec![i],
        None => Vec::new(),
    };
    if !items.is_empty() {
        let mut it = Vec::new();
        for i in items {
            let mut inner = Vec::new();
            schema(&mut inner, i);
            message(&mut it, 1, &inner);
        }
        message(out, 23, &it);
    }
    for a in m
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let mut inner = Vec::new();
        schema(&mut inner, a);
        message(out, 24, &inner);
    }
    if let Some(props) = m.get("properties").and_then(Value::as_object) {
        let mut p = Vec::new();
        for (name, s) in props {
            named_schema(&mut p, 1, name, s);
        }
        message(out, 25, &p);
    }
    string(out, 26, m.get("discriminator"));
    boolean(out, 27, m.get("readOnly"));
    any(out, 30, m.get("example"));
    extensions(out, 31, m);
}

/// Every `x-` member as a `NamedAny` (name = 1, value = 2) of field `tag`.
fn extensions(out: &mut Vec<u8>, tag: u64, m: &Map<String, Value>) {
    for (k, v) in m.iter().filter(|(k, _)| k.starts_with("x-")) {
        let mut n = Vec::new();
        bytes(&mut n, 1, k.as_bytes());
        let mut a = Vec::new();
        any(&mut a, 2, Some(v));
        // `any` wrote field 2 of the NamedAny already: the Any message itself.
        n.extend_from_slice(&a);
        message(out, tag, &n);
    }
}

/// An `Any` (`yaml` = 2: the value as YAML text) as field `tag`.
fn any(out: &mut Vec<u8>, tag: u64, v: Option<&Value>) {
    let Some(v) = v else { return };
    let mut a = Vec::new();
    bytes(&mut a, 2, v.to_string().as_bytes());
    message(out, tag, &a);
}

fn string(out: &mut Vec<u8>, tag: u64, v: Option<&Value>) {
    if let Some(s) = v.and_then(Value::as_str).filter(|s| !s.is_empty()) {
        bytes(out, tag, s.as_bytes());
    }
}

fn boolean(out: &mut Vec<u8>, tag: u64, v: Option<&Value>) {
    if v.and_then(Value::as_bool) == Some(true) {
        key_of(out, tag, 0);
        varint(out, 1);
    }
}

fn message(out: &mut Vec<u8>, tag: u64, m: &[u8]) {
    bytes(out, tag, m);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_schema_is_written_field_by_field() {
        let doc = json!({"swagger": "2.0", "info": {"title": "K", "version": "v"},
            "definitions": {"a": {"type": "object", "required": ["x"],
                "properties": {"x": {"type": "string", "description": "d"}},
                "x-kubernetes-group-version-kind": [{"group": "", "kind": "A", "version": "v1"}]}}});
        let b = document(&doc);
        // swagger = 1 "2.0"; info = 2 {title = 1 "K", version = 2 "v"}.
        assert_eq!(&b[..5], b"\x0a\x032.0");
        assert_eq!(&b[5..13], b"\x12\x06\x0a\x01K\x12\x01v");
        // definitions = 9, a NamedSchema named "a" holding the rest.
        assert_eq!(b[13], 9 << 3 | 2);
        let text = String::from_utf8_lossy(&b);
        assert!(text.contains("x-kubernetes-group-version-kind"));
        assert!(text.contains(r#"[{"group":"","kind":"A","version":"v1"}]"#));
        assert!(wanted(
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
        ));
        assert!(!wanted("application/json"));
    }
}
