//! Declarative custom indexes end to end: a guest declares an index by field path in its
//! manifest, the host keeps it on the shared informer's store, and the guest's `by-index` and
//! `keys-by-index` calls find objects by it (test guest `indexer`).

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use kwh_emulator::EmulatorHandle;
use serde_json::{json, Value};
use support::cluster::{cm, emulator, eventually, running};
use support::guests::guest;

const T: Duration = Duration::from_secs(120);
const WAIT: Duration = Duration::from_secs(20);

fn report(em: &EmulatorHandle, target: &str) -> Option<Value> {
    em.get(
        "v1",
        "ConfigMap",
        Some("default"),
        &format!("{target}-refs"),
    )
    .map(|c| c["data"].clone())
}

#[tokio::test]
async fn guest_queries_its_declared_index_and_the_host_keeps_it_current() {
    let em = emulator().await;
    let rt = running(&em, &[guest("indexer")]).await;

    em.create(cm("a", json!({"ref": "t"}))).expect("create a");
    em.create(cm("b", json!({"ref": "t"}))).expect("create b");
    em.create(cm("c", json!({"ref": "elsewhere"})))
        .expect("create c");
    let want = json!({"keys": "default/a,default/b", "objects": "2", "unknown": "400 BadRequest"});
    assert!(
        eventually(WAIT, || report(&em, "t").as_ref() == Some(&want)).await,
        "t is referenced by a and b: {:?}",
        report(&em, "t")
    );

    // Moving b's reference updates both indexes entries: t loses b, elsewhere gains it.
    let mut b = em.get("v1", "ConfigMap", Some("default"), "b").expect("b");
    b["data"]["ref"] = "elsewhere".into();
    em.update(b).expect("update b");
    assert!(
        eventually(WAIT, || report(&em, "t")
            .is_some_and(|d| d["keys"] == "default/a" && d["objects"] == "1"))
        .await,
        "b no longer references t: {:?}",
        report(&em, "t")
    );
    assert!(
        eventually(WAIT, || report(&em, "elsewhere")
            .is_some_and(|d| d["keys"] == "default/b,default/c"))
        .await,
        "b and c reference elsewhere: {:?}",
        report(&em, "elsewhere")
    );

    // A deleted referrer leaves the index.
    em.delete("v1", "ConfigMap", Some("default"), "a")
        .expect("delete a");
    assert!(
        eventually(WAIT, || report(&em, "t")
            .is_some_and(|d| d["keys"] == "" && d["objects"] == "0"))
        .await,
        "nothing references t: {:?}",
        report(&em, "t")
    );
    assert!(tokio::time::timeout(T, rt.shutdown(Duration::from_secs(5)))
        .await
        .expect("in time"));
}
