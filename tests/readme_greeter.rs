//! The README's "Write your first controller" guide, kept true: its controller and scenario are
//! the test guest `greeter` byte for byte, the scenario passes under the real `host test`, and the
//! controller does in the real host against the emulator what step 4 says it does. The greeter
//! writes no handlers, so this also covers the SDK's default `on_add`/`on_update`/`on_delete`
//! (each enqueues the object's key), both in the scenario and in the host.

mod support;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{json, Value};
use support::cluster::{cm, emulator, eventually, get_cm, running};
use support::guests::guest;

const WAIT: Duration = Duration::from_secs(20);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn greeter_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/guests/greeter")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The body of the first ```` ```lang ```` block after `marker` in `text`.
fn code_block<'a>(text: &'a str, marker: &str, lang: &str) -> &'a str {
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("README has no {marker:?}"));
    let fence = format!("```{lang}\n");
    let start = text[at..]
        .find(&fence)
        .map(|i| at + i + fence.len())
        .unwrap_or_else(|| panic!("no ```{lang} block after {marker:?}"));
    let len = text[start..]
        .find("```\n")
        .unwrap_or_else(|| panic!("unterminated ```{lang} block after {marker:?}"));
    &text[start..start + len]
}

#[test]
fn the_readme_code_blocks_are_the_greeter_test_guest() {
    let readme = read(&repo().join("README.md"));
    let guide = &readme[readme
        .find("## Write your first controller")
        .expect("the guide's section")..];
    let lib = code_block(guide, "**2. Write the controller**", "rust");
    assert_eq!(
        lib,
        read(&greeter_dir().join("src/lib.rs")),
        "README step 2 and tests/guests/greeter/src/lib.rs differ"
    );
    let scenario = code_block(guide, "**5. Test it without a cluster.**", "yaml");
    assert_eq!(
        scenario,
        read(&greeter_dir().join("tests/greets.yaml")),
        "README step 5 and tests/guests/greeter/tests/greets.yaml differ"
    );
    // Step 1's addition to Cargo.toml is what makes the crate a component.
    let toml = code_block(guide, "**1. Create the crate**", "toml");
    assert!(
        read(&greeter_dir().join("Cargo.toml")).contains(toml),
        "README step 1's Cargo.toml lines are not in the greeter's Cargo.toml"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_scenario_passes_under_host_test() {
    support::scenarios::assert_scenarios_pass(
        &guest("greeter"),
        &greeter_dir().join("tests"),
        None,
    )
    .await;
}

fn managers(obj: &Value) -> Vec<&str> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|m| m.iter().filter_map(|e| e["manager"].as_str()).collect())
        .unwrap_or_default()
}

/// README step 4 in code: a ConfigMap labelled `greet=yes` gets `<name>-greeting` holding
/// `hello, <name>`, owned by it; one not labelled is never seen. Then an update and a delete each
/// bring a reconcile (the default handlers enqueue), and the delete takes the greeting with it
/// through its owner reference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_greeter_greets_a_labelled_configmap_in_the_host() {
    let em = emulator().await;
    let rt = running(&em, &[guest("greeter")]).await;
    assert!(em.wait_for_open_watches("/configmaps", 1, WAIT).await);
    let greeter = rt.plugins()[0].clone();
    let stats = greeter.reconcile_stats();
    let reconciles = || stats.total.load(Ordering::Relaxed);

    // Unlabelled: outside the watch. It is created first, so with the one worker its greeting
    // would exist before team's if the selector let it through.
    em.create(cm("quiet", json!({"owner": "them"})))
        .expect("create");
    em.create(cm("team", json!({"owner": "me"})))
        .expect("create");
    let mut team = get_cm(&em, "team").expect("team");
    team["metadata"]["labels"] = json!({"greet": "yes"});
    em.update(team).expect("label");

    assert!(
        eventually(WAIT, || get_cm(&em, "team-greeting")
            .is_some_and(|g| g["data"]["message"] == "hello, team"))
        .await,
        "team-greeting appears with message \"hello, team\""
    );
    let team = get_cm(&em, "team").expect("team");
    let greeting = get_cm(&em, "team-greeting").expect("greeting");
    let owner = &greeting["metadata"]["ownerReferences"][0];
    assert_eq!(owner["uid"], team["metadata"]["uid"]);
    assert_eq!(owner["kind"], "ConfigMap");
    assert_eq!(owner["controller"], true);
    assert_eq!(
        managers(&greeting),
        ["greeter"],
        "server-side apply as \"greeter\""
    );
    assert!(get_cm(&em, "quiet-greeting").is_none());
    assert!(
        eventually(WAIT, || reconciles() == 1).await,
        "one reconcile so far: {}",
        reconciles()
    );

    // The default on_update enqueues.
    let mut team = team;
    team["data"]["owner"] = json!("us");
    em.update(team).expect("update");
    assert!(
        eventually(WAIT, || reconciles() == 2).await,
        "the update brings a reconcile: {}",
        reconciles()
    );

    // The default on_delete enqueues; the reconcile finds the ConfigMap gone and does nothing,
    // and the greeting goes with its owner.
    em.delete("v1", "ConfigMap", Some("default"), "team")
        .expect("delete");
    assert!(
        eventually(WAIT, || reconciles() == 3).await,
        "the delete brings a reconcile: {}",
        reconciles()
    );
    assert!(
        eventually(WAIT, || get_cm(&em, "team-greeting").is_none()).await,
        "the greeting is collected with its owner"
    );
    assert_eq!(stats.errors.load(Ordering::Relaxed), 0);
    assert!(get_cm(&em, "quiet-greeting").is_none());
    assert!(rt.shutdown(Duration::from_secs(5)).await);
    em.shutdown().await;
}
