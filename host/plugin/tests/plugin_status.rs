//! Status writes end to end: the `ttl` test guest's `client.patch-status` and
//! `client.apply-status` go through the plugin runtime's real API client, as PATCHes of
//! `services/<name>/status`, to the emulator over HTTP, which stores only their status. A status
//! patch of a kind the manifest writes without `update-status` is refused with a 403 the guest
//! sees, and never sent.

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use kwh_plugin::{Limits, Outcome, PluginInstance};
use serde_json::{json, Value};
use support::cluster::{emulator, runtime, start};

const T: Duration = Duration::from_secs(60);

async fn reconcile(inst: &mut PluginInstance, key: &str) -> Result<Outcome, String> {
    tokio::time::timeout(T, inst.reconcile(key))
        .await
        .expect("in time")
        .expect("no trap")
}

fn apply_entry<'a>(svc: &'a Value, manager: &str) -> Option<&'a Value> {
    svc["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == "Apply")
}

#[tokio::test]
async fn status_patch_and_apply_change_only_status_and_are_refused_without_update_status() {
    let em = emulator().await;
    for name in ["patched", "applied"] {
        em.create(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
            "spec": {"ports": [{"port": 80}]}}))
            .expect("service");
    }
    let mut rt = runtime(&em, Limits::default(), false);
    start(&mut rt, &["ttl"]).await;
    let mut inst = rt.plugins()[0].plugin().instance().expect("instance");
    let service = |name: &str| em.get("v1", "Service", Some("default"), name).expect(name);
    let patches = || em.stats().requests("patch");
    let before = patches();

    // A merge patch that also names spec and labels: the status subresource keeps only status.
    assert_eq!(
        reconcile(&mut inst, "patch-status/default/patched").await,
        Ok(Outcome::Done)
    );
    let svc = service("patched");
    assert_eq!(
        svc["status"]["loadBalancer"]["ingress"][0]["ip"],
        "10.0.0.8"
    );
    assert_ne!(svc["spec"]["sessionAffinity"], "ClientIP", "{svc}");
    assert_eq!(svc["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(svc["spec"]["ports"][0]["port"], 80);
    assert_eq!(patches(), before + 1);

    // Server-side apply of the status: the plugin's name is the field manager of the status
    // fields it stated, recorded against the status subresource.
    assert_eq!(
        reconcile(&mut inst, "apply-status/default/applied").await,
        Ok(Outcome::Done)
    );
    let svc = service("applied");
    assert_eq!(
        svc["status"]["loadBalancer"]["ingress"][0]["ip"],
        "10.0.0.9"
    );
    assert_ne!(svc["spec"]["sessionAffinity"], "ClientIP", "{svc}");
    assert!(svc["metadata"]["labels"].get("applied").is_none(), "{svc}");
    let entry = apply_entry(&svc, "ttl").unwrap_or_else(|| panic!("no apply entry: {svc}"));
    assert_eq!(entry["subresource"], "status");
    assert!(
        entry["fieldsV1"].get("f:spec").is_none(),
        "{}",
        entry["fieldsV1"]
    );
    assert_eq!(patches(), before + 2);

    // ConfigMap is declared with create/update/patch/delete but not update-status: the guest
    // gets the host's 403, and nothing reaches the API server.
    let msg = reconcile(&mut inst, "cm-patch-status/default/any")
        .await
        .expect_err("refused");
    assert!(msg.starts_with("403 Forbidden: "), "{msg}");
    assert!(
        msg.contains("may not patch ConfigMap/status (v1)") && msg.contains("update-status"),
        "{msg}"
    );
    assert_eq!(patches(), before + 2, "the refused patch was never sent");

    drop(inst);
    assert!(rt.shutdown(Duration::from_secs(5)).await);
    em.shutdown().await;
}
