//! Fuzz targets for what the emulator reads from clients: protobuf request bodies, and PATCH
//! and server-side apply bodies over arbitrary stored documents. Each panics when a property
//! fails. The cargo-fuzz binaries in `fuzz/` call them; the unit tests below run them on their
//! seeds and a few thousand mutations on stable Rust. Not part of the crate's API.

use serde_json::Value;

use crate::patch::{apply_patch, server_side_apply_with, ApplyRequest, PatchType};
use crate::protobuf;

/// A protobuf body (with and without the `k8s\0` magic in front, so that the fuzzer does not
/// have to find it): decoding never panics, and what it decodes is a JSON object naming its
/// type, which serialises.
pub fn protobuf_body(input: &[u8]) {
    let mut magic = b"k8s\0".to_vec();
    magic.extend_from_slice(input);
    for body in [input, &magic] {
        if let Ok(v) = protobuf::decode(body) {
            assert!(v["apiVersion"].is_string() && v["kind"].is_string(), "{v}");
            assert!(serde_json::to_vec(&v).is_ok());
        }
    }
}

/// The kinds a selector byte picks: built-in ones (strategic merge and keyed lists apply) and
/// a custom resource.
const KINDS: [Option<(&str, &str)>; 4] = [
    Some(("", "Pod")),
    Some(("apps", "Deployment")),
    None,
    Some(("", "ConfigMap")),
];

/// A selector byte, the stored document (JSON), a NUL byte, the body.
fn split(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&sel, rest) = input.split_first()?;
    Some(match rest.iter().position(|&b| b == 0) {
        Some(i) => (sel, &rest[..i], &rest[i + 1..]),
        None => (sel, rest, &[]),
    })
}

/// A JSON, merge or strategic merge patch (the selector byte picks it and the kind) applied to
/// a stored object: never panics, and a success is an object.
pub fn patch(input: &[u8]) {
    let Some((sel, doc, body)) = split(input) else {
        return;
    };
    let Ok(current) = serde_json::from_slice::<Value>(doc) else {
        return;
    };
    if !current.is_object() {
        return;
    }
    let ty = [PatchType::Json, PatchType::Merge, PatchType::StrategicMerge][usize::from(sel % 3)];
    let kind = KINDS[usize::from(sel / 3 % 4)];
    if let Ok(v) = apply_patch(&current, ty, body, kind) {
        assert!(v.is_object(), "{v}");
    }
}

/// Server-side apply of a configuration (YAML or JSON) to a stored object (or to none: a
/// create), to the main resource or the status subresource, forced or not: never panics, and
/// applying the same configuration again as the same manager changes nothing. Except where
/// the first apply left the manager owning nothing: its entry is dropped (as the API server
/// drops empty ones), and an object without any entry is one nobody applied to, whose fields
/// the next apply records as `before-first-apply`'s.
pub fn apply(input: &[u8]) {
    let Some((sel, doc, body)) = split(input) else {
        return;
    };
    let current = if doc.is_empty() {
        None
    } else {
        match serde_json::from_slice::<Value>(doc) {
            Ok(v) if v.is_object() => Some(v),
            _ => return,
        }
    };
    let req = ApplyRequest {
        current: current.as_ref(),
        body,
        field_manager: "fuzz",
        force: sel & 1 != 0,
        builtin: KINDS[usize::from(sel >> 1 & 3)],
        now: "2026-01-01T00:00:00Z",
        subresource: (sel & 8 != 0).then_some("status"),
        ignore_status: sel & 16 != 0,
    };
    let Ok(first) = server_side_apply_with(&req) else {
        return;
    };
    assert!(first.is_object(), "{first}");
    let recorded = first["metadata"]["managedFields"]
        .as_array()
        .is_some_and(|entries| entries.iter().any(|e| e["manager"] == "fuzz"));
    if !recorded {
        return;
    }
    let again = server_side_apply_with(&ApplyRequest {
        current: Some(&first),
        ..req
    })
    .unwrap_or_else(|e| panic!("applying the same configuration again failed: {e}"));
    assert_eq!(
        again, first,
        "applying the same configuration again changed the object"
    );
}

#[cfg(test)]
mod tests {
    use kwh_client::fuzzing::{exercise, target_seeds};

    #[test]
    fn fuzz_protobuf_body() {
        exercise(
            &target_seeds("protobuf_body"),
            6000,
            11,
            super::protobuf_body,
        );
    }

    #[test]
    fn fuzz_patch() {
        exercise(&target_seeds("patch"), 3000, 12, super::patch);
    }

    #[test]
    fn fuzz_apply() {
        exercise(&target_seeds("apply"), 2000, 13, super::apply);
    }
}
