//! What a DELETE asks: its options from the query and the body (propagation, dry run,
//! preconditions), and the propagation a kind gets when none is asked.

use serde::Deserialize;

use crate::registry::ResourceDef;
use crate::request::Query;
use crate::response::{self, FieldError};
use kwh_client::Status;

/// How dependents are treated when their owner goes (`propagationPolicy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Propagation {
    #[default]
    Background,
    Foreground,
    Orphan,
}

/// The parts of `DeleteOptions` the emulator honours.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// `None` uses the kind's default ([`default_propagation`]).
    pub propagation: Option<Propagation>,
    /// `dryRun=All`.
    pub dry_run: bool,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct DeleteOptionsBody {
    #[serde(default)]
    propagation_policy: Option<String>,
    #[serde(default)]
    orphan_dependents: Option<bool>,
    #[serde(default)]
    preconditions: Option<Preconditions>,
    /// `dryRun: ["All"]`: client-go sends a delete's dry run here, not in the query.
    #[serde(default)]
    dry_run: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Preconditions {
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
}

pub(super) fn delete_options(q: &Query, body: &[u8]) -> Result<DeleteOptions, Status> {
    let b: DeleteOptionsBody = if body.iter().all(u8::is_ascii_whitespace) {
        DeleteOptionsBody::default()
    } else {
        serde_json::from_slice(body)
            .map_err(|e| response::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    let policy = q
        .get("propagationPolicy")
        .map(str::to_owned)
        .or(b.propagation_policy);
    let orphan = q
        .get("orphanDependents")
        .map(|v| v == "true")
        .or(b.orphan_dependents);
    let propagation = match (policy.as_deref(), orphan) {
        (Some("Foreground"), _) => Some(Propagation::Foreground),
        (Some("Orphan"), _) | (None, Some(true)) => Some(Propagation::Orphan),
        (Some("Background"), _) | (None, Some(false)) => Some(Propagation::Background),
        (None, None) => None,
        (Some(p), _) => {
            return Err(response::invalid(
                "DeleteOptions",
                "meta.k8s.io",
                "",
                &[FieldError {
                    reason: "FieldValueNotSupported",
                    field: "propagationPolicy".into(),
                    detail: format!("Unsupported value: \"{p}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""),
                }],
            ))
        }
    };
    let pre = b.preconditions.unwrap_or_default();
    let query = dry_run(q.get("dryRun"), "DeleteOptions")?;
    let mut in_body = false;
    for v in &b.dry_run {
        in_body |= dry_run(Some(v), "DeleteOptions")?;
    }
    Ok(DeleteOptions {
        propagation,
        dry_run: query || in_body,
        precondition_uid: pre.uid,
        precondition_rv: pre.resource_version,
    })
}

/// Whether `value` of `dryRun` asks for a dry run: `All` does; anything else is refused as
/// kube-apiserver refuses it (422 on the request's `options` kind, e.g. `CreateOptions`).
pub(crate) fn dry_run(value: Option<&str>, options: &str) -> Result<bool, Status> {
    match value {
        None => Ok(false),
        Some("All") => Ok(true),
        Some(v) => Err(response::invalid(
            options,
            "meta.k8s.io",
            "",
            &[FieldError {
                reason: "FieldValueNotSupported",
                field: "dryRun".into(),
                detail: format!(
                    "Unsupported value: []string{{\"{v}\"}}: supported values: \"All\""
                ),
            }],
        )),
    }
}

/// The propagation a DELETE without a policy gets. Like kube-apiserver, `batch/v1` Jobs and `v1`
/// ReplicationControllers orphan their dependents by default (kept for compatibility with their
/// first versions), so a client deleting a Job must ask for `Background` to take its Pods along;
/// every other kind deletes dependents in the background.
pub fn default_propagation(def: &ResourceDef) -> Propagation {
    match (
        def.group.as_str(),
        def.version.as_str(),
        def.plural.as_str(),
    ) {
        ("batch", "v1", "jobs") | ("", "v1", "replicationcontrollers") => Propagation::Orphan,
        _ => Propagation::Background,
    }
}
