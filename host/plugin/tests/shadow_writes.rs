//! A shadow revision's writes (issue "Shadow runs"): each sent with `dryRun=All` to the
//! emulator over loopback HTTP, compared with the stored object, recorded, and never persisted:
//! no object changes, no resourceVersion moves, no watch event (the store's revision stays).

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use kwh_client::ApiResource;
use kwh_plugin::backend::shadow::{Outcome, ShadowClientBackend, ShadowLedger};
use kwh_plugin::backend::{ClientBackend, DeleteParams, PatchKind, WriteOp, WriteRequest};
use serde_json::json;
use support::cluster::{client, cm, emulator, get_cm};

fn request(op: WriteOp, name: Option<&str>, body: serde_json::Value) -> WriteRequest {
    WriteRequest {
        op,
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("default".into()),
        name: name.map(str::to_owned),
        body: if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        },
        reconciling: Some(Arc::from("default/live")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_writes_are_dry_runs_compared_with_the_stored_object_and_nothing_persists() {
    let em = emulator().await;
    em.create(cm("live", json!({"k": "v"}))).expect("create");
    let ledger = Arc::new(ShadowLedger::default());
    let resources = HashMap::from([(
        ("v1".to_owned(), "ConfigMap".to_owned()),
        ApiResource::new("v1", "ConfigMap", "configmaps", true),
    )]);
    let shadow = ShadowClientBackend::new(client(&em), "copier", resources, ledger.clone());
    let before = get_cm(&em, "live").expect("stored");
    let revision = em.current_resource_version();

    // A write that changes nothing: an agreement; the guest gets the server's answer.
    let same = shadow
        .write(request(
            WriteOp::Patch(PatchKind::Merge),
            Some("live"),
            json!({"data": {"k": "v"}}),
        ))
        .await
        .expect("dry-run answer");
    assert!(same.is_some());
    // One that would annotate it: a difference, with its patch.
    shadow
        .write(request(
            WriteOp::Patch(PatchKind::Merge),
            Some("live"),
            json!({"metadata": {"annotations": {"shadow": "yes"}}}),
        ))
        .await
        .expect("dry-run answer");
    // A create, and a delete: whole-object differences.
    shadow
        .write(request(WriteOp::Create, None, cm("new", json!({"a": "b"}))))
        .await
        .expect("dry-run create");
    shadow
        .write(request(
            WriteOp::Delete(DeleteParams::default()),
            Some("live"),
            serde_json::Value::Null,
        ))
        .await
        .expect("dry-run delete");
    // An invalid object: the server's refusal, recorded, and handed to the guest.
    let refused = shadow
        .write(request(
            WriteOp::Create,
            None,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "Not_Valid", "namespace": "default"}}),
        ))
        .await
        .expect_err("an invalid name");
    assert_eq!(refused.code, 422, "{refused}");

    assert_eq!(ledger.agreements.load(Ordering::Relaxed), 1);
    assert_eq!(ledger.differences.load(Ordering::Relaxed), 3);
    assert_eq!(ledger.refusals.load(Ordering::Relaxed), 1);
    let d = ledger.differences();
    assert_eq!(
        d.iter().map(|d| d.op).collect::<Vec<_>>(),
        ["patch", "create", "delete", "create"]
    );
    assert_eq!(
        d[0].outcome,
        Outcome::Changes(json!([
            {"op": "add", "path": "/metadata/annotations", "value": {"shadow": "yes"}}
        ]))
    );
    assert_eq!(d[0].key.as_deref(), Some("default/live"));
    assert_eq!((d[1].name.as_str(), d[2].name.as_str()), ("new", "live"));
    assert!(matches!(&d[3].outcome, Outcome::Refused(e) if e.code == 422));

    // Nothing persisted: the object as it was, no new one, the store's revision unmoved (so no
    // watch event was made either).
    assert_eq!(get_cm(&em, "live"), Some(before));
    assert_eq!(get_cm(&em, "new"), None);
    assert_eq!(em.current_resource_version(), revision);
}
