//! The one reconciler of plugin sources (issue "Revisions change hands exactly"): the config
//! file's plugins, `--plugin`, the plugins file and `WasmController` resources hand it their
//! desired sets, and every rule holds for each of them alike. Each scenario is written once and
//! run for every kind of source, against the emulator over loopback HTTP, with the `reviser`
//! test guest (its `name` setting is its manifest's name).

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kwh_plugin::{
    Applied, Change, Desired, EntryError, EntryOutcome, PluginRuntime, PluginSources, PluginSpec,
    RuntimeOptions, SourceOptions, Started, Step, UpgradeError, Want,
};
use serde_json::json;
use support::cluster::{emulator, eventually, every_line, quick_retries, runtime_with, widget_crd};

const WAIT: Duration = Duration::from_secs(60);
const GRACE: Duration = Duration::from_secs(10);

fn options() -> RuntimeOptions {
    quick_retries(every_line())
}

/// Every kind of source, with a word that keeps its plugins' names apart from the other runs'
/// (the log capture is the process's).
fn kinds() -> Vec<(&'static str, SourceOptions)> {
    vec![
        ("config", SourceOptions::config()),
        ("flags", SourceOptions::flags()),
        ("file", SourceOptions::plugins_file()),
        ("resources", SourceOptions::resources("WasmController")),
    ]
}

/// The `reviser` guest at `revision`, its manifest naming plugin `name`.
fn reviser(revision: &str, name: &str) -> PluginSpec {
    PluginSpec {
        config: Arc::new(json!({"revision": revision, "name": name})),
        ..PluginSpec::with_defaults(support::guests::guest("reviser"), &options())
    }
}

fn load(id: &str, spec: PluginSpec) -> Desired {
    Desired {
        id: id.into(),
        module: spec.path.clone(),
        want: Want::Load {
            spec,
            stamp: String::new(),
        },
    }
}

/// The one outcome of entry `id`.
fn of<'a>(outcomes: &'a [EntryOutcome], id: &str) -> &'a EntryOutcome {
    let mine: Vec<_> = outcomes.iter().filter(|o| o.id == id).collect();
    assert_eq!(mine.len(), 1, "{outcomes:?}");
    mine[0]
}

/// A runtime on a fresh emulator, and a reconciler with one source of `kind`.
async fn setup(
    kind: &SourceOptions,
) -> (
    kwh_emulator::EmulatorHandle,
    PluginRuntime,
    PluginSources,
    kwh_plugin::SourceId,
) {
    let em = emulator().await;
    let rt = runtime_with(&em, options());
    let mut sources = PluginSources::new(GRACE);
    let src = sources.add(kind.clone());
    (em, rt, sources, src)
}

/// `/statusz` of `rt`, parsed.
fn statusz(rt: &PluginRuntime) -> serde_json::Value {
    serde_json::from_str(&rt.status().render_status()).expect("statusz is JSON")
}

/// Start, keep, upgrade, rename (the old plugin removed once the new one runs), a failed
/// rename (the old one runs on), removal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_start_upgrade_rename_and_go_alike_for_every_source() {
    let logs = support::logs::capture_global();
    for (word, kind) in kinds() {
        let (one, two, three) = (
            format!("{word}-one"),
            format!("{word}-two"),
            format!("{word}-three"),
        );
        let (_em, mut rt, mut sources, src) = setup(&kind).await;

        // Start.
        let out = sources
            .apply(&mut rt, src, vec![load("e", reviser("a", &one))])
            .await;
        let o = of(&out, "e");
        assert!(
            matches!(
                o.change,
                Change::Applied(Applied::Started(Started::Running))
            ),
            "{word}: {o:?}"
        );
        assert_eq!(o.plugin.as_deref(), Some(one.as_str()));
        assert!(rt.plugin(&one).is_some(), "{word}");
        assert_eq!(sources.plugin(src, "e"), Some(one.as_str()));

        // The same again: nothing done.
        let out = sources
            .apply(&mut rt, src, vec![load("e", reviser("a", &one))])
            .await;
        assert!(matches!(of(&out, "e").change, Change::Unchanged), "{out:?}");
        assert_eq!(rt.plugin(&one).expect("runs").revisions(), 1);

        // Upgrade: same name, another configuration.
        let out = sources
            .apply(&mut rt, src, vec![load("e", reviser("b", &one))])
            .await;
        assert!(
            matches!(of(&out, "e").change, Change::Applied(Applied::Upgraded)),
            "{word}: {out:?}"
        );
        assert_eq!(rt.plugin(&one).expect("runs").revisions(), 2);

        // Rename: the new plugin starts, then the old one is removed.
        let out = sources
            .apply(&mut rt, src, vec![load("e", reviser("c", &two))])
            .await;
        let o = of(&out, "e");
        match &o.change {
            Change::Renamed {
                from,
                how: Applied::Started(Started::Running),
                removed: Some(true),
            } => assert_eq!(*from, one),
            other => panic!("{word}: {other:?}"),
        }
        assert_eq!(o.plugin.as_deref(), Some(two.as_str()));
        assert!(rt.plugin(&one).is_none(), "{word}: the old one is gone");
        assert!(rt.plugin(&two).is_some(), "{word}: the new one runs");
        let lines = logs.lines();
        let started = lines
            .iter()
            .position(|l| {
                l.plugin.as_deref() == Some(two.as_str()) && l.message == "plugin started"
            })
            .expect("the new one started");
        let removed = lines
            .iter()
            .position(|l| {
                l.plugin.as_deref() == Some(one.as_str()) && l.message == "plugin removed"
            })
            .expect("the old one removed");
        assert!(
            started < removed,
            "{word}: removed only once the new one ran"
        );

        // A rename whose new revision fails: the old plugin runs on, the failure noted on it.
        let out = sources
            .apply(&mut rt, src, vec![load("e", reviser("bad", &three))])
            .await;
        let o = of(&out, "e");
        assert!(
            matches!(
                &o.change,
                Change::Failed(EntryError::Apply(UpgradeError::Load(_)))
            ),
            "{word}: {o:?}"
        );
        assert_eq!(o.plugin.as_deref(), Some(two.as_str()), "{word}");
        assert!(rt.plugin(&three).is_none() && rt.plugin(&two).is_some());
        let doc = statusz(&rt);
        let failed = doc["plugins"][0]["failedRevision"]["error"]
            .as_str()
            .unwrap_or_default();
        assert!(failed.contains("revision bad is refused"), "{word}: {doc}");
        // Not retried while the entry is unchanged.
        let out = sources
            .apply(&mut rt, src, vec![load("e", reviser("bad", &three))])
            .await;
        assert!(matches!(of(&out, "e").change, Change::Unchanged), "{out:?}");
        assert_eq!(sources.plugin(src, "e"), Some(two.as_str()));

        // Removed: taken out of the source.
        let out = sources.apply(&mut rt, src, vec![]).await;
        let o = of(&out, "e");
        assert!(
            matches!(o.change, Change::Removed { clean: true }),
            "{word}: {o:?}"
        );
        assert_eq!(o.plugin.as_deref(), Some(two.as_str()));
        assert!(rt.plugins().is_empty(), "{word}");
        assert!(rt.shutdown(GRACE).await, "{word}: clean shutdown");
    }
}

/// Failures are the entry's: one that fails with nothing running is listed as failed to start
/// where its source lists those, one with a running plugin is noted on it; a failure before
/// loading (a fetch) leaves the running revision, and says it was the fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_recorded_per_entry_and_leave_the_running_revision() {
    for (word, kind) in kinds() {
        let (_em, mut rt, mut sources, src) = setup(&kind).await;
        let good = format!("{word}-good");
        let bad = format!("{word}-bad");
        let out = sources
            .apply(
                &mut rt,
                src,
                vec![
                    load("good", reviser("a", &good)),
                    load("bad", reviser("bad", &bad)),
                ],
            )
            .await;
        assert!(
            matches!(
                of(&out, "good").change,
                Change::Applied(Applied::Started(_))
            ),
            "{word}: {out:?}"
        );
        let o = of(&out, "bad");
        let Change::Failed(e) = &o.change else {
            panic!("{word}: {o:?}");
        };
        assert_eq!(e.step(), Step::Load);
        assert!(o.plugin.is_none());
        let doc = statusz(&rt);
        let listed = doc["plugins"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["state"] == "failed");
        assert_eq!(listed, kind.list_start_failures, "{word}: {doc}");

        // A fetch that fails for the running entry: it runs on, the failure is the fetch's.
        let module = PathBuf::from("oci://registry.invalid/team/ctl:v2");
        let out = sources
            .apply(
                &mut rt,
                src,
                vec![
                    Desired {
                        id: "good".into(),
                        module: module.clone(),
                        want: Want::Failed {
                            step: Step::Fetch,
                            message: "registry.invalid: no answer".into(),
                        },
                    },
                    load("bad", reviser("bad", &bad)),
                ],
            )
            .await;
        let o = of(&out, "good");
        let Change::Failed(e) = &o.change else {
            panic!("{word}: {o:?}");
        };
        assert_eq!(e.step(), Step::Fetch);
        assert_eq!(o.plugin.as_deref(), Some(good.as_str()));
        assert_eq!(rt.plugin(&good).expect("runs on").revisions(), 1);
        let doc = statusz(&rt);
        let noted = doc["plugins"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == good.as_str())
            .map(|p| p["failedRevision"]["error"].clone())
            .unwrap_or_default();
        assert_eq!(noted, "registry.invalid: no answer", "{word}: {doc}");

        // Once the failing entry is taken out, it is no longer listed as failed.
        sources
            .apply(&mut rt, src, vec![load("good", reviser("a", &good))])
            .await;
        let doc = statusz(&rt);
        assert!(
            !doc["plugins"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["state"] == "failed"),
            "{word}: {doc}"
        );
        assert!(rt.shutdown(GRACE).await, "{word}: clean shutdown");
    }
}

/// A plugin name runs for one entry: a module naming a plugin that another entry runs is
/// refused, naming who runs it, whether that entry is of another source or the same one, and
/// the running plugin is not touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_another_entry_runs_is_refused_whatever_the_source() {
    for (word, kind) in kinds() {
        for (other_word, other_kind) in kinds() {
            let (_em, mut rt, mut sources, src) = setup(&kind).await;
            let theirs = sources.add(other_kind.clone());
            let name = format!("{word}-{other_word}-taken");
            let out = sources
                .apply(&mut rt, theirs, vec![load("x", reviser("a", &name))])
                .await;
            assert!(
                matches!(of(&out, "x").change, Change::Applied(_)),
                "{out:?}"
            );
            let out = sources
                .apply(&mut rt, src, vec![load("y", reviser("b", &name))])
                .await;
            let o = of(&out, "y");
            let Change::Failed(EntryError::Apply(UpgradeError::Refused { reason, .. })) = &o.change
            else {
                panic!("{word} after {other_word}: {o:?}");
            };
            assert_eq!(
                *reason,
                format!("already run by {}", sources.describe(theirs, "x")),
                "{word} after {other_word}"
            );
            assert!(o.plugin.is_none());
            let running = rt.plugin(&name).expect("runs on");
            assert_eq!(running.revisions(), 1, "untouched");
            assert_eq!(running.spec().config["revision"], "a");
            assert_eq!(sources.plugin(theirs, "x"), Some(name.as_str()));
            assert!(rt.shutdown(GRACE).await, "clean shutdown");
        }
        // Two entries of one source.
        let (_em, mut rt, mut sources, src) = setup(&kind).await;
        let name = format!("{word}-twice");
        let out = sources
            .apply(
                &mut rt,
                src,
                vec![
                    load("first", reviser("a", &name)),
                    load("second", reviser("b", &name)),
                ],
            )
            .await;
        let o = of(&out, "second");
        let Change::Failed(e) = &o.change else {
            panic!("{word}: {o:?}");
        };
        assert!(
            e.to_string().ends_with(&format!(
                "already run by {}",
                sources.describe(src, "first")
            )),
            "{word}: {e}"
        );
        assert!(!e.to_string().contains('\n'), "{e}");
        assert_eq!(
            rt.plugin(&name).expect("runs").spec().config["revision"],
            "a"
        );
        assert!(rt.shutdown(GRACE).await, "clean shutdown");
    }
    // How each source is named in a refusal.
    let mut sources = PluginSources::new(GRACE);
    let named: Vec<String> = kinds()
        .into_iter()
        .map(|(_, k)| {
            let s = sources.add(k);
            sources.describe(s, "reviser")
        })
        .collect();
    assert_eq!(
        named,
        [
            "the config file's plugins",
            "--plugin",
            "the plugins file",
            "WasmController reviser"
        ]
    );
}

/// A rename whose new plugin waits for a kind no server serves yet leaves the old one running
/// (neither would run otherwise); once the new one starts, settling removes the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_to_a_waiting_plugin_keeps_the_old_one_until_the_new_one_runs() {
    for (word, kind) in kinds() {
        let (em, mut rt, mut sources, src) = setup(&kind).await;
        let old = format!("{word}-before-badkind");
        sources
            .apply(&mut rt, src, vec![load("e", reviser("a", &old))])
            .await;
        let waits = PluginSpec::with_defaults(support::guests::guest("badkind"), &options());
        let out = sources.apply(&mut rt, src, vec![load("e", waits)]).await;
        let o = of(&out, "e");
        assert!(
            matches!(
                &o.change,
                Change::Renamed {
                    how: Applied::Started(Started::Waiting(_)),
                    removed: None,
                    ..
                }
            ),
            "{word}: {o:?}"
        );
        assert!(rt.plugin(&old).is_some(), "{word}: the old one runs on");
        assert!(sources.has_retiring());
        assert!(
            sources.settle(&rt).await.is_empty(),
            "nothing to settle yet"
        );
        assert!(rt.plugin(&old).is_some());

        em.create(widget_crd()).expect("CRD created");
        assert!(
            eventually(WAIT, || rt.plugin("badkind").is_some()).await,
            "{word}: the new one starts once its kind is served"
        );
        let settled = sources.settle(&rt).await;
        assert_eq!(settled.len(), 1, "{settled:?}");
        let (s, o) = &settled[0];
        assert_eq!(*s, src);
        assert!(
            matches!(&o.change, Change::Retired { from, clean: true } if *from == old),
            "{word}: {o:?}"
        );
        assert!(rt.plugin(&old).is_none(), "{word}: the old one is gone");
        assert!(!sources.has_retiring());
        assert!(rt.shutdown(GRACE).await, "clean shutdown");
    }
}

/// The plugins file's entries are known by module path, so a new path may be a plugin's next
/// revision: while an entry failed before its plugin's name was known, an entry taken out keeps
/// its plugin; a new path that loads as the same plugin takes it over as an upgrade. Sources
/// whose entries are named (resources) remove at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removals_wait_for_unnamed_failures_only_where_the_source_asks() {
    for (word, kind) in kinds() {
        let (_em, mut rt, mut sources, src) = setup(&kind).await;
        let name = format!("{word}-moved");
        sources
            .apply(&mut rt, src, vec![load("old.wasm", reviser("a", &name))])
            .await;
        // The entry's module moved, and the new one does not load: it may be the same plugin.
        let out = sources
            .apply(&mut rt, src, vec![load("new.wasm", reviser("bad", &name))])
            .await;
        assert!(
            matches!(of(&out, "new.wasm").change, Change::Failed(_)),
            "{out:?}"
        );
        let o = of(&out, "old.wasm");
        if kind.hold_removals {
            assert!(
                matches!(&o.change, Change::Held { waiting_for } if waiting_for == &["new.wasm"]),
                "{word}: {o:?}"
            );
            assert!(rt.plugin(&name).is_some(), "{word}: kept");
            // Fixed: the new entry takes the plugin over, an upgrade; nothing is removed.
            let out = sources
                .apply(&mut rt, src, vec![load("new.wasm", reviser("b", &name))])
                .await;
            assert!(
                matches!(
                    of(&out, "new.wasm").change,
                    Change::Applied(Applied::Upgraded)
                ),
                "{word}: {out:?}"
            );
            assert!(
                matches!(of(&out, "old.wasm").change, Change::Removed { .. }),
                "{out:?}"
            );
            assert_eq!(of(&out, "old.wasm").plugin, None, "handed over");
            let running = rt.plugin(&name).expect("runs");
            assert_eq!(running.revisions(), 2, "{word}");
            assert_eq!(sources.plugin(src, "new.wasm"), Some(name.as_str()));
        } else {
            assert!(
                matches!(o.change, Change::Removed { clean: true }),
                "{word}: {o:?}"
            );
            assert!(rt.plugin(&name).is_none(), "{word}: removed");
        }
        assert!(rt.shutdown(GRACE).await, "clean shutdown");
    }
}

#[test]
fn entries_named_by_module_path_are_told_apart_by_occurrence() {
    let paths = [
        PathBuf::from("/p/a.wasm"),
        PathBuf::from("/p/b.wasm"),
        PathBuf::from("/p/a.wasm"),
    ];
    assert_eq!(
        kwh_plugin::sources::ids_by_module(paths.iter().map(PathBuf::as_path)),
        ["/p/a.wasm", "/p/b.wasm", "/p/a.wasm#2"]
    );
}
