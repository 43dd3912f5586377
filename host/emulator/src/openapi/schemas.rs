//! The schemas of the OpenAPI documents: every message a group-version's kinds are made of,
//! from the API's message table ([`crate::kube_types`]), and a custom resource's own schema
//! from its CRD. What `kubectl explain` walks, field by field, with each field's description.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

use crate::kube_types::{types, Field, Message};

/// A reference to another schema of the document.
fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// The schemas of the built-in kinds `kinds` ((group, version, kind)) and of every message
/// they reach, by full name.
pub(crate) fn for_kinds(kinds: &[(String, String, String)]) -> Map<String, Value> {
    let t = types();
    let mut todo: Vec<String> = Vec::new();
    let mut gvks: Vec<(String, &(String, String, String))> = Vec::new();
    for k in kinds {
        let api_version = if k.0.is_empty() {
            k.1.clone()
        } else {
            format!("{}/{}", k.0, k.1)
        };
        if let Some(name) = t.for_kind(&api_version, &k.2) {
            todo.push(name.to_owned());
            gvks.push((name.to_owned(), k));
        }
    }
    let mut seen = BTreeSet::new();
    let mut out = Map::new();
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let Some(schema) = schema(&name, &mut todo) else {
            continue;
        };
        out.insert(name, schema);
    }
    for (name, (group, version, kind)) in gvks {
        if let Some(Value::Object(s)) = out.get_mut(&name) {
            s.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": group, "version": version, "kind": kind}]),
            );
        }
    }
    out
}

/// The schema of message `name`; the messages it names are pushed on `todo`.
fn schema(name: &str, todo: &mut Vec<String>) -> Option<Value> {
    if let Some(w) = wrapper(name) {
        return Some(w);
    }
    let msg = types().message(name)?;
    let mut properties = Map::new();
    properties_of(msg, todo, &mut properties, 0);
    Some(json!({"description": msg.description, "type": "object", "properties": properties}))
}

/// A message's fields as properties, embedded structs' fields among them.
fn properties_of(
    msg: &Message,
    todo: &mut Vec<String>,
    out: &mut Map<String, Value>,
    depth: usize,
) {
    for f in &msg.fields {
        if f.inline {
            if let Some(inner) = types().message(&f.ty).filter(|_| depth < 8) {
                properties_of(inner, todo, out, depth + 1);
            }
            continue;
        }
        out.insert(f.json.clone(), field(f, todo));
    }
}

fn field(f: &Field, todo: &mut Vec<String>) -> Value {
    let one = if f.is_message() {
        todo.push(f.ty.clone());
        reference(&f.ty)
    } else {
        scalar(&f.ty)
    };
    let mut s = if f.map {
        json!({"type": "object", "additionalProperties": one})
    } else if f.repeated {
        json!({"type": "array", "items": one})
    } else if f.is_message() {
        // Siblings of a `$ref` are ignored, so the description goes beside an `allOf`.
        json!({"allOf": [one], "default": {}})
    } else {
        one
    };
    if let (Value::Object(m), false) = (&mut s, f.description.is_empty()) {
        m.insert("description".into(), f.description.clone().into());
    }
    s
}

fn scalar(ty: &str) -> Value {
    match ty {
        "string" => json!({"type": "string"}),
        "bytes" => json!({"type": "string", "format": "byte"}),
        "bool" => json!({"type": "boolean"}),
        "int32" => json!({"type": "integer", "format": "int32"}),
        "int64" => json!({"type": "integer", "format": "int64"}),
        "double" => json!({"type": "number", "format": "double"}),
        _ => json!({}),
    }
}

/// The API's wrapper types, whose JSON is not their messages' shape.
fn wrapper(name: &str) -> Option<Value> {
    if !name.starts_with("io.k8s.apimachinery.") {
        return None;
    }
    let short = name.rsplit('.').next().unwrap_or(name);
    Some(match short {
        "Time" => {
            json!({"type": "string", "format": "date-time", "description": "Time is a wrapper around time.Time which supports correct marshaling to YAML and JSON."})
        }
        "MicroTime" => {
            json!({"type": "string", "format": "date-time", "description": "MicroTime is version of Time with microsecond level precision."})
        }
        "Duration" => {
            json!({"type": "string", "description": "Duration is a wrapper around time.Duration which supports correct marshaling to YAML and JSON."})
        }
        "Quantity" => {
            json!({"type": "string", "description": "Quantity is a fixed-point representation of a number."})
        }
        "IntOrString" => {
            json!({"x-kubernetes-int-or-string": true, "format": "int-or-string", "description": "IntOrString is a type that can hold an int32 or a string."})
        }
        "RawExtension" => {
            json!({"type": "object", "description": "RawExtension is used to hold extensions in external versions."})
        }
        "FieldsV1" => {
            json!({"type": "object", "description": "FieldsV1 stores a set of fields in a data structure like a Trie, in JSON format."})
        }
        _ => return None,
    })
}

/// A custom resource's schema from its CRD's version (`openAPIV3Schema`), with the kind's
/// group-version-kind, under the name kube-apiserver gives it (`<reversed group>.<version>.<Kind>`).
pub(crate) fn custom_resource(crd: &Value, version: &str) -> Option<(String, Value)> {
    let group = crd.pointer("/spec/group")?.as_str()?;
    let kind = crd.pointer("/spec/names/kind")?.as_str()?;
    let v = crd
        .pointer("/spec/versions")?
        .as_array()?
        .iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(version))?;
    let mut schema = v
        .pointer("/schema/openAPIV3Schema")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
    if let Value::Object(s) = &mut schema {
        s.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([{"group": group, "version": version, "kind": kind}]),
        );
    }
    let reversed: Vec<&str> = group.split('.').rev().collect();
    Some((format!("{}.{version}.{kind}", reversed.join(".")), schema))
}
