//! What users write: label and field selectors, kubeconfig files.

use crate::config::{Config, KubeconfigOptions};
use crate::object::{Meta, StrPairs};
use crate::selector::{FieldSelector, LabelOp, LabelSelector, GENERIC_FIELDS};
use crate::Client;

/// The first line is a selector, the second a label set (`k=v;k=v`). Checks that parsing and
/// matching never panic, that a parsed selector written back out parses to itself, and that
/// matching agrees with the requirements read one by one (a label set with a key twice reads
/// as JSON decoders read it: the last value wins).
pub fn selectors(input: &[u8]) {
    let text = String::from_utf8_lossy(input);
    let (selector, labels) = text.split_once('\n').unwrap_or((&text, ""));
    let pairs: Vec<(&str, &str)> = labels
        .split(';')
        .filter_map(|p| p.split_once('='))
        .collect();
    let get = |k: &str| pairs.iter().rev().find(|(pk, _)| *pk == k).map(|(_, v)| *v);
    if let Ok(l) = LabelSelector::parse(selector) {
        let written = write_labels(&l);
        let again = LabelSelector::parse(&written)
            .unwrap_or_else(|e| panic!("{written:?}, written from {l:?}, does not parse: {e}"));
        assert_eq!(again, l, "written as {written:?}");
        let want = l.requirements().iter().all(|r| {
            let found = get(&r.key);
            let listed = |v: &str| r.values.iter().any(|x| &**x == v);
            match r.op {
                LabelOp::Exists => found.is_some(),
                LabelOp::DoesNotExist => found.is_none(),
                LabelOp::Equals | LabelOp::In => found.is_some_and(listed),
                LabelOp::NotEquals | LabelOp::NotIn => !found.is_some_and(listed),
            }
        });
        assert_eq!(
            l.matches(&StrPairs::from(&pairs[..])),
            want,
            "{l:?} on {pairs:?}"
        );
        assert_eq!(l.matches_with(get), want);
    }
    if let Ok(f) = FieldSelector::parse(selector) {
        let written = write_fields(&f);
        let again = FieldSelector::parse(&written)
            .unwrap_or_else(|e| panic!("{written:?}, written from {f:?}, does not parse: {e}"));
        assert_eq!(again, f, "written as {written:?}");
        let _ = f.validate(GENERIC_FIELDS);
        let meta = Meta {
            name: pairs.first().map_or("", |p| p.1),
            namespace: pairs.get(1).map(|p| p.1),
            ..Default::default()
        };
        let _ = f.matches_meta(&meta);
    }
}

fn write_labels(l: &LabelSelector) -> String {
    let terms: Vec<String> = l
        .requirements()
        .iter()
        .map(|r| {
            let set = || r.values.join(",");
            match r.op {
                LabelOp::Exists => r.key.to_string(),
                LabelOp::DoesNotExist => format!("!{}", r.key),
                LabelOp::Equals => format!("{}={}", r.key, set()),
                LabelOp::NotEquals => format!("{}!={}", r.key, set()),
                LabelOp::In => format!("{} in ({})", r.key, set()),
                LabelOp::NotIn => format!("{} notin ({})", r.key, set()),
            }
        })
        .collect();
    terms.join(",")
}

fn write_fields(f: &FieldSelector) -> String {
    let terms: Vec<String> = f
        .requirements()
        .iter()
        .map(|r| {
            let mut value = String::new();
            for c in r.value.chars() {
                if matches!(c, '\\' | ',' | '=') {
                    value.push('\\');
                }
                value.push(c);
            }
            let op = if r.negated { "!=" } else { "=" };
            // A field ending in `!` (written `f! = v`, the space trimmed) needs the space back,
            // or `!=` would be read.
            let gap = if r.field.ends_with('!') { " " } else { "" };
            format!("{}{gap}{op}{value}", r.field)
        })
        .collect();
    terms.join(",")
}

/// A kubeconfig as text: loading it (with and without overrides) and building a client from
/// it (TLS material, credentials, proxy) never panics. Documents naming absolute paths are
/// skipped: a fuzzer could name a device that never ends (relative ones resolve against a
/// directory that does not exist). Exec plugins are configured, never run, at this point.
pub fn kubeconfig(input: &[u8]) {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    match yaml_serde::from_str::<yaml_serde::Value>(text) {
        Ok(v) if names_absolute_path(&v) => return,
        _ => {}
    }
    let dir = std::env::temp_dir().join("kwh-fuzz-no-such-directory");
    let overrides = KubeconfigOptions {
        context: Some("a".into()),
        cluster: None,
        user: Some("u".into()),
        namespace: Some("ns".into()),
    };
    for opts in [KubeconfigOptions::default(), overrides] {
        if let Ok(c) = Config::from_kubeconfig_str(text, &dir, &opts) {
            let _ = Client::new(c);
        }
    }
}

/// Whether a YAML document holds a string that reads as an absolute path: targets that read
/// files a document names skip those (a fuzzer could name a device that never ends).
pub fn names_absolute_path(v: &yaml_serde::Value) -> bool {
    use yaml_serde::Value as Y;
    match v {
        Y::String(s) => s.starts_with('/') || s.starts_with('\\') || s.contains(":\\"),
        Y::Sequence(items) => items.iter().any(names_absolute_path),
        Y::Mapping(m) => m
            .iter()
            .any(|(k, v)| names_absolute_path(k) || names_absolute_path(v)),
        Y::Tagged(t) => names_absolute_path(&t.value),
        _ => false,
    }
}
