//! A plugin's manifest, validated once at load, and the permission checks derived from it.

use std::time::Duration;

use super::bindings::v0_2::kube::controller::types as wit;
use kwh_client::selector::{FieldSelector, LabelSelector};

/// A write verb, as RBAC names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    /// `create`.
    Create,
    /// `update` (replace).
    Update,
    /// `patch` (including server-side apply).
    Patch,
    /// `delete`.
    Delete,
    /// Writes of the `status` subresource: `update` (replace-status) and `patch` (patch-status,
    /// apply-status).
    UpdateStatus,
}

impl Verb {
    /// The RBAC verb it is named after (the subresource is separate, see [`Verb::subresource`]).
    pub fn rbac(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Update | Verb::UpdateStatus => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }

    /// Every RBAC verb the calls it allows need, sorted: what `host rbac` grants for it.
    /// `patch` needs `create` too: it covers server-side apply, and the API server authorizes
    /// an apply of an object that does not exist yet as `create` as well as `patch` (its 403
    /// then has an empty reason). `update-status` needs two because the contract's one status
    /// verb covers replace, patch and apply of the status subresource (which never creates).
    pub fn rbac_verbs(self) -> &'static [&'static str] {
        match self {
            Verb::Create => &["create"],
            Verb::Update => &["update"],
            Verb::Patch => &["create", "patch"],
            Verb::Delete => &["delete"],
            Verb::UpdateStatus => &["patch", "update"],
        }
    }

    /// The name the contract (and so the guest's manifest) gives it.
    pub fn wit_name(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::UpdateStatus => "update-status",
        }
    }

    /// The subresource the verb applies to, if any.
    pub fn subresource(self) -> Option<&'static str> {
        match self {
            Verb::UpdateStatus => Some("status"),
            _ => None,
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl From<wit::Verb> for Verb {
    fn from(v: wit::Verb) -> Self {
        match v {
            wit::Verb::Create => Verb::Create,
            wit::Verb::Update => Verb::Update,
            wit::Verb::Patch => Verb::Patch,
            wit::Verb::Delete => Verb::Delete,
            wit::Verb::UpdateStatus => Verb::UpdateStatus,
        }
    }
}

/// One watch of the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchSpec {
    /// `group/version`.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// Restricting namespace.
    pub namespace: Option<String>,
    /// Label selector text (validated syntax).
    pub label_selector: Option<String>,
    /// Field selector text (validated syntax).
    pub field_selector: Option<String>,
    /// Custom indexes the guest queries by name (validated syntax).
    pub indexes: Vec<IndexSpec>,
}

/// A custom index on a watched kind, declared by field paths (see `index` in the WIT file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexSpec {
    /// The name the guest queries it by.
    pub name: String,
    /// Dot-separated field paths; `[*]` steps into every array element.
    pub paths: Vec<String>,
    /// Whether values are prefixed with the object's namespace and `/`.
    pub namespaced: bool,
}

/// One declared write: a kind and its verbs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteSpec {
    /// `group/version`.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// The verbs, sorted and deduplicated.
    pub verbs: Vec<Verb>,
    verb_bits: u8,
}

impl WriteSpec {
    /// A write of `verbs` (sorted and deduplicated here) on `api_version`/`kind`.
    pub fn new(api_version: &str, kind: &str, verbs: &[Verb]) -> Self {
        let mut verbs = verbs.to_vec();
        verbs.sort();
        verbs.dedup();
        let verb_bits = verbs.iter().fold(0, |acc, v| acc | v.bit());
        WriteSpec {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            verbs,
            verb_bits,
        }
    }

    /// Whether `verb` is declared.
    pub fn allows(&self, verb: Verb) -> bool {
        self.verb_bits & verb.bit() != 0
    }
}

/// A validated manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The plugin's name (a DNS label).
    pub name: String,
    /// Watches; the index is what handlers receive.
    pub watches: Vec<WatchSpec>,
    /// Declared writes.
    pub writes: Vec<WriteSpec>,
    /// Resync period; none when disabled.
    pub resync_period: Option<Duration>,
    /// Reconcile workers (at least 1).
    pub workers: u32,
    /// Whether the component imports the `events` interface (0.2.0), so may record Kubernetes
    /// Events and needs the Events rules. Set by the loader from the component's imports.
    pub records_events: bool,
}

/// Why a manifest was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// The name is not a DNS label.
    #[error("invalid plugin name {0:?}: must be 1-63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit")]
    Name(String),
    /// No watches at all: the plugin would never be called.
    #[error("the manifest declares no watches")]
    NoWatches,
    /// An empty or malformed apiVersion or kind.
    #[error("{what} {index}: invalid {field} {value:?}")]
    Kind {
        /// `watch` or `write`.
        what: &'static str,
        /// Position in its list.
        index: usize,
        /// `api-version` or `kind`.
        field: &'static str,
        /// The offending value.
        value: String,
    },
    /// A selector that does not parse.
    #[error("watch {index}: unparsable {which} selector {selector:?}: {cause}")]
    Selector {
        /// Position in the watch list.
        index: usize,
        /// `label` or `field`.
        which: &'static str,
        /// The selector text.
        selector: String,
        /// What is wrong with it.
        cause: String,
    },
    /// A write with no verbs.
    #[error("write {0}: no verbs declared")]
    NoVerbs(usize),
    /// A custom index with a bad name or path.
    #[error("watch {index}: index {name:?}: {cause}")]
    Index {
        /// Position in the watch list.
        index: usize,
        /// The index's name.
        name: String,
        /// What is wrong with it.
        cause: String,
    },
    /// An absurd worker count.
    #[error("workers = {0}: at most {MAX_WORKERS} are allowed")]
    Workers(u32),
}

/// Upper bound on reconcile workers per plugin (each one is an instance with its own memory).
pub const MAX_WORKERS: u32 = 64;

impl Manifest {
    /// Validates what the guest returned.
    pub(crate) fn from_wit(m: wit::Manifest) -> Result<Self, ManifestError> {
        if !is_dns_label(&m.name) {
            return Err(ManifestError::Name(m.name));
        }
        if m.watches.is_empty() {
            return Err(ManifestError::NoWatches);
        }
        if m.workers > MAX_WORKERS {
            return Err(ManifestError::Workers(m.workers));
        }
        let mut watches = Vec::with_capacity(m.watches.len());
        for (index, w) in m.watches.into_iter().enumerate() {
            check_kind("watch", index, &w.api_version, &w.kind)?;
            for (which, sel, check) in [
                (
                    "label",
                    &w.label_selector,
                    check_label_selector as fn(&str) -> _,
                ),
                ("field", &w.field_selector, check_field_selector),
            ] {
                if let Some(s) = sel {
                    check(s).map_err(|cause| ManifestError::Selector {
                        index,
                        which,
                        selector: s.clone(),
                        cause,
                    })?;
                }
            }
            let indexes = check_indexes(index, w.indexes)?;
            watches.push(WatchSpec {
                indexes,
                api_version: w.api_version,
                kind: w.kind,
                namespace: w.namespace.filter(|n| !n.is_empty()),
                label_selector: w.label_selector.filter(|s| !s.trim().is_empty()),
                field_selector: w.field_selector.filter(|s| !s.trim().is_empty()),
            });
        }
        let mut writes = Vec::with_capacity(m.writes.len());
        for (index, w) in m.writes.into_iter().enumerate() {
            check_kind("write", index, &w.api_version, &w.kind)?;
            if w.verbs.is_empty() {
                return Err(ManifestError::NoVerbs(index));
            }
            let verbs: Vec<Verb> = w.verbs.into_iter().map(Verb::from).collect();
            writes.push(WriteSpec::new(&w.api_version, &w.kind, &verbs));
        }
        Ok(Manifest {
            name: m.name,
            watches,
            writes,
            resync_period: (m.resync_period_ms > 0)
                .then(|| Duration::from_millis(m.resync_period_ms)),
            workers: m.workers.max(1),
            records_events: false,
        })
    }

    /// Whether the guest may read `api_version`/`kind` from the lister: only watched kinds are
    /// cached, so only they are readable.
    pub fn may_read(&self, api_version: &str, kind: &str) -> bool {
        self.watches
            .iter()
            .any(|w| w.api_version == api_version && w.kind == kind)
    }

    /// Whether the guest may perform `verb` on `api_version`/`kind`.
    pub fn may_write(&self, api_version: &str, kind: &str, verb: Verb) -> bool {
        self.writes
            .iter()
            .any(|w| w.api_version == api_version && w.kind == kind && w.allows(verb))
    }
}

fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn check_kind(
    what: &'static str,
    index: usize,
    api_version: &str,
    kind: &str,
) -> Result<(), ManifestError> {
    let bad = |field, value: &str| ManifestError::Kind {
        what,
        index,
        field,
        value: value.to_string(),
    };
    let version_ok = match api_version.split_once('/') {
        Some((group, version)) => {
            !group.is_empty() && !version.is_empty() && !version.contains('/')
        }
        None => !api_version.is_empty(),
    };
    if !version_ok || api_version.contains(char::is_whitespace) {
        return Err(bad("api-version", api_version));
    }
    if kind.is_empty() || !kind.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(bad("kind", kind));
    }
    Ok(())
}

/// Load-time validation uses the same parser the informer and lister match with, so a selector
/// accepted here can never fail later (and one refused here would be refused by the API server).
fn check_label_selector(s: &str) -> Result<(), String> {
    LabelSelector::parse(s).map(drop).map_err(|e| e.to_string())
}

/// Field selectors are parsed with the API's grammar; which fields a kind supports is the API
/// server's call, so that part is left to the first LIST.
fn check_field_selector(s: &str) -> Result<(), String> {
    FieldSelector::parse(s).map(drop).map_err(|e| e.to_string())
}

/// Validates a watch's custom indexes: unique names other than the built-in `namespace`, and
/// paths of non-empty field names, each optionally followed by `[*]`.
fn check_indexes(index: usize, defs: Vec<wit::Index>) -> Result<Vec<IndexSpec>, ManifestError> {
    let mut out: Vec<IndexSpec> = Vec::with_capacity(defs.len());
    for d in defs {
        let bad = |cause: String| ManifestError::Index {
            index,
            name: d.name.clone(),
            cause,
        };
        if d.name.is_empty() || d.name == "namespace" {
            return Err(bad(
                "the name must be non-empty and not the built-in \"namespace\"".into(),
            ));
        }
        if out.iter().any(|o| o.name == d.name) {
            return Err(bad("declared twice".into()));
        }
        if d.paths.is_empty() {
            return Err(bad("no paths".into()));
        }
        for p in &d.paths {
            let ok = p.split('.').all(|seg| {
                let field = seg.strip_suffix("[*]").unwrap_or(seg);
                !field.is_empty() && !field.contains(['[', ']', '*'])
            });
            if !ok {
                return Err(bad(format!("unparsable path {p:?}")));
            }
        }
        out.push(IndexSpec {
            name: d.name.clone(),
            paths: d.paths.clone(),
            namespaced: d.namespaced,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wit_manifest() -> wit::Manifest {
        wit::Manifest {
            name: "demo".into(),
            watches: vec![wit::Watch {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: None,
                label_selector: Some("app=web, tier in (a,b),!legacy".into()),
                field_selector: Some("metadata.name!=x".into()),
                indexes: vec![wit::Index {
                    name: "configmap".into(),
                    paths: vec!["spec.template.spec.volumes[*].configMap.name".into()],
                    namespaced: true,
                }],
            }],
            writes: vec![wit::Write {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                verbs: vec![wit::Verb::Patch, wit::Verb::Create, wit::Verb::Patch],
            }],
            resync_period_ms: 0,
            workers: 0,
        }
    }

    /// The cases of the contract's `verb` enum, in order, as every guest was built with.
    ///
    /// wasmtime type-checks the `manifest` export exactly (an enum must have the same cases),
    /// so one more case would make every guest built before it fail to load with "expected enum
    /// of 6 names, found 5 names". New write calls are therefore guarded by an existing verb
    /// (`update-status` covers patch-status and apply-status) until the package version moves.
    #[test]
    fn the_verb_enum_keeps_its_0_1_0_cases_so_older_guests_still_load() {
        let wit = include_str!("../../../wit/controller.wit");
        assert!(wit.contains("package kube:controller@0.2.0;"));
        let cases: Vec<String> = type_body(wit, "enum verb")
            .lines()
            .map(|l| l.trim_end_matches(',').to_string())
            .collect();
        assert_eq!(
            cases,
            ["create", "update", "patch", "delete", "update-status"]
        );
        let names: Vec<&str> = [
            Verb::Create,
            Verb::Update,
            Verb::Patch,
            Verb::Delete,
            Verb::UpdateStatus,
        ]
        .iter()
        .map(|v| v.wit_name())
        .collect();
        assert_eq!(names, cases);
    }

    /// The body of `head { ... }` in `wit` (the first `}` ends it: type bodies do not nest),
    /// without comments and blank lines.
    fn type_body(wit: &str, head: &str) -> String {
        let (_, rest) = wit
            .split_once(&format!("{head} {{"))
            .unwrap_or_else(|| panic!("{head} in the WIT"));
        let (body, _) = rest.split_once('}').expect("a closing brace");
        body.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The host maps 0.1.0's `types` onto 0.2.0's (one Rust type for both, `bindings`), which
    /// is sound only while every 0.1.0 type is unchanged in 0.2.0, field for field and case for
    /// case: wasmtime checks structure, so a drifted type would fail 0.1.0 guests at load.
    #[test]
    fn every_0_1_0_type_is_unchanged_in_0_2_0() {
        let old = include_str!("../../../wit/0.1.0/controller.wit");
        let new = include_str!("../../../wit/controller.wit");
        assert!(old.contains("package kube:controller@0.1.0;"));
        let (_, types) = old.split_once("interface types {").expect("types");
        let mut checked = 0;
        for line in types.lines().map(str::trim) {
            if line.starts_with("interface ") {
                break;
            }
            for kind in ["record", "enum", "variant"] {
                if let Some(name) = line
                    .strip_prefix(kind)
                    .and_then(|r| r.trim().strip_suffix('{'))
                {
                    let head = format!("{kind} {}", name.trim());
                    assert_eq!(type_body(new, &head), type_body(old, &head), "{head}");
                    checked += 1;
                }
            }
        }
        assert!(checked >= 12, "found only {checked} types");
    }

    #[test]
    fn update_status_grants_every_status_write() {
        assert_eq!(Verb::UpdateStatus.subresource(), Some("status"));
        assert_eq!(Verb::UpdateStatus.rbac_verbs(), ["patch", "update"]);
        // Server-side apply that creates is authorized as create as well (rbac-403-apply-that-
        // creates-with-patch-only in the recorded samples).
        assert_eq!(Verb::Patch.rbac_verbs(), ["create", "patch"]);
        assert_eq!(Verb::Patch.subresource(), None);
    }

    #[test]
    fn valid_manifest_normalises_workers_verbs_and_resync() {
        let m = Manifest::from_wit(wit_manifest()).expect("valid");
        assert_eq!(m.workers, 1);
        assert_eq!(m.resync_period, None);
        assert_eq!(m.writes[0].verbs, vec![Verb::Create, Verb::Patch]);
        assert!(m.may_write("v1", "ConfigMap", Verb::Patch));
        assert!(!m.may_write("v1", "ConfigMap", Verb::Delete));
        assert!(!m.may_write("v1", "Secret", Verb::Create));
        assert!(m.may_read("apps/v1", "Deployment"));
        assert!(!m.may_read("v1", "ConfigMap"));
        assert_eq!(m.watches[0].indexes[0].name, "configmap");
        assert!(m.watches[0].indexes[0].namespaced);
    }

    #[test]
    fn bad_selectors_name_and_kinds_are_refused() {
        let mut w = wit_manifest();
        w.watches[0].label_selector = Some("app in (a,b".into());
        let e = Manifest::from_wit(w).unwrap_err();
        assert!(
            matches!(e, ManifestError::Selector { which: "label", .. }),
            "{e}"
        );

        let mut w = wit_manifest();
        w.watches[0].label_selector = Some("app=~web".into());
        assert!(Manifest::from_wit(w).is_err());

        let mut w = wit_manifest();
        w.watches[0].field_selector = Some("metadata.name".into());
        let e = Manifest::from_wit(w).unwrap_err();
        assert!(
            matches!(e, ManifestError::Selector { which: "field", .. }),
            "{e}"
        );

        let mut w = wit_manifest();
        w.name = "Not_A_Label".into();
        assert!(matches!(Manifest::from_wit(w), Err(ManifestError::Name(_))));

        let mut w = wit_manifest();
        w.watches[0].api_version = "apps/".into();
        assert!(matches!(
            Manifest::from_wit(w),
            Err(ManifestError::Kind { .. })
        ));

        let mut w = wit_manifest();
        w.writes[0].verbs.clear();
        assert_eq!(Manifest::from_wit(w), Err(ManifestError::NoVerbs(0)));

        let mut w = wit_manifest();
        w.watches.clear();
        assert_eq!(Manifest::from_wit(w), Err(ManifestError::NoWatches));

        for (name, path) in [
            ("namespace", "a.b"),
            ("", "a.b"),
            ("refs", "a..b"),
            ("refs", "a[0].b"),
            ("refs", "a[*"),
        ] {
            let mut w = wit_manifest();
            w.watches[0].indexes[0].name = name.into();
            w.watches[0].indexes[0].paths = vec![path.into()];
            let e = Manifest::from_wit(w).unwrap_err();
            assert!(
                matches!(e, ManifestError::Index { .. }),
                "{name} {path}: {e}"
            );
        }
        let mut w = wit_manifest();
        let dup = w.watches[0].indexes[0].clone();
        w.watches[0].indexes.push(dup);
        assert!(matches!(
            Manifest::from_wit(w),
            Err(ManifestError::Index { .. })
        ));

        let mut w = wit_manifest();
        w.workers = MAX_WORKERS + 1;
        assert!(matches!(
            Manifest::from_wit(w),
            Err(ManifestError::Workers(_))
        ));
    }
}
