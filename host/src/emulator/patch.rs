//! PATCH for the emulator: JSON patch, JSON merge patch, strategic merge patch and
//! server-side apply (spec 6.11), as pure functions over `serde_json::Value`.
//!
//! Why pure: the store decides preconditions, status-subresource rules and revisions; this
//! module only computes the next object (and, for apply, its `managedFields`), so it is
//! tested without a server.
//!
//! Errors map to the Status kube-apiserver sends ([`PatchError::to_status`]): a malformed
//! body is 400 BadRequest, a JSON patch operation that cannot be applied is 422, an unsupported
//! content type (or strategic merge on a custom resource) is 415, an apply conflict is 409 with
//! one cause per field. See `strategic` and `apply` for what each engine does and its gaps.

pub(crate) mod schema;

mod apply;
mod strategic;

#[cfg(test)]
mod tests;

pub use apply::{server_side_apply, server_side_apply_subresource, BEFORE_FIRST_APPLY};

use crate::kube::error::{Status, StatusCause, StatusDetails};

/// The PATCH body formats the server accepts (spec 6.11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json`, RFC 6902.
    Json,
    /// `application/merge-patch+json`, RFC 7396.
    Merge,
    /// `application/strategic-merge-patch+json`, built-in kinds only.
    StrategicMerge,
    /// `application/apply-patch+yaml`, server-side apply.
    Apply,
}

impl PatchType {
    /// The patch type of a request's Content-Type, ignoring parameters and case; `None` means
    /// the server answers 415.
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        let mime = ct.split(';').next().unwrap_or("").trim();
        let ty = [
            ("application/json-patch+json", PatchType::Json),
            ("application/merge-patch+json", PatchType::Merge),
            (
                "application/strategic-merge-patch+json",
                PatchType::StrategicMerge,
            ),
            ("application/apply-patch+yaml", PatchType::Apply),
        ]
        .into_iter()
        .find(|(m, _)| mime.eq_ignore_ascii_case(m))?;
        Some(ty.1)
    }

    /// The media type naming this patch type.
    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Json => "application/json-patch+json",
            PatchType::Merge => "application/merge-patch+json",
            PatchType::StrategicMerge => "application/strategic-merge-patch+json",
            PatchType::Apply => "application/apply-patch+yaml",
        }
    }
}

/// The most operations one JSON patch may carry, as on the real server (bounds the work one
/// request can cause).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// The media types a PATCH to a built-in kind (or a custom resource) accepts, in the order the
/// server lists them in its 415 message.
pub fn accepted_patch_types(builtin: bool) -> &'static str {
    if builtin {
        "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml"
    } else {
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    }
}

/// One field an apply would take from another manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The other manager as the server names it: `"m"` or `"m" using v1`.
    pub manager: String,
    /// The field, rendered like `.spec.containers[name="a"].image`.
    pub field: String,
}

/// Why a patch could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The Content-Type is not a patch type this resource accepts (spec 6.11): 415.
    #[error("the body of the request was in an unknown format - accepted media types include: {}", accepted_patch_types(*.builtin))]
    UnsupportedMediaType { builtin: bool },
    /// The body is malformed or the request is incomplete: 400 BadRequest.
    #[error("{0}")]
    BadRequest(String),
    /// The body is well-formed but cannot be applied to this object (a failing JSON patch
    /// `test`, a missing path, a `$retainKeys` mismatch): 422.
    #[error("{0}")]
    Unprocessable(String),
    /// A strategic merge patch that breaks the list schema (an item without its merge key);
    /// the real server reports these as a 500 without reason.
    #[error("{0}")]
    Internal(String),
    /// A JSON patch with more operations than the server allows: 413.
    #[error(
        "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {0}"
    )]
    TooManyOperations(usize),
    /// Server-side apply would change fields other managers own: 409.
    #[error("{}", conflict_message(.0))]
    Conflicts(Vec<Conflict>),
    /// The applied configuration names a resourceVersion the object no longer has: 409.
    #[error("the object has been modified; please apply your changes to the latest version and try again")]
    StaleResourceVersion,
}

fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [one] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            one.manager, one.field
        );
    }
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for c in conflicts {
        match groups.iter_mut().find(|(m, _)| *m == c.manager) {
            Some((_, fields)) => fields.push(&c.field),
            None => groups.push((&c.manager, vec![&c.field])),
        }
    }
    // The server lists managers in sorted order.
    groups.sort_by(|a, b| a.0.cmp(b.0));
    let mut lines = Vec::new();
    for (manager, fields) in groups {
        lines.push(format!("conflicts with {manager}:"));
        lines.extend(fields.into_iter().map(|f| format!("- {f}")));
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

impl PatchError {
    /// The Status kube-apiserver answers with; `resource` is the plural resource name
    /// (`configmaps`) and `name` the object's name, used where the real server names them.
    pub fn to_status(&self, resource: &str, name: &str) -> Status {
        match self {
            PatchError::UnsupportedMediaType { .. } => {
                Status::failure(415, "UnsupportedMediaType", self.to_string())
            }
            PatchError::BadRequest(m) => Status::failure(400, "BadRequest", m.clone()),
            PatchError::Unprocessable(m) => Status {
                details: Some(StatusDetails {
                    causes: vec![StatusCause {
                        reason: "UnexpectedServerResponse".into(),
                        message: m.clone(),
                        field: String::new(),
                    }],
                    ..Default::default()
                }),
                ..Status::failure(
                    422,
                    "Invalid",
                    "the server rejected our request due to an error in our request",
                )
            },
            PatchError::Internal(m) => Status::failure(500, "", m.clone()),
            PatchError::TooManyOperations(_) => {
                Status::failure(413, "RequestEntityTooLarge", self.to_string())
            }
            PatchError::Conflicts(conflicts) => Status {
                details: Some(StatusDetails {
                    causes: conflicts
                        .iter()
                        .map(|c| StatusCause {
                            reason: "FieldManagerConflict".into(),
                            message: format!("conflict with {}", c.manager),
                            field: c.field.clone(),
                        })
                        .collect(),
                    ..Default::default()
                }),
                ..Status::failure(409, "Conflict", self.to_string())
            },
            PatchError::StaleResourceVersion => Status {
                details: Some(StatusDetails {
                    name: name.to_owned(),
                    kind: resource.to_owned(),
                    ..Default::default()
                }),
                ..Status::failure(
                    409,
                    "Conflict",
                    format!("Operation cannot be fulfilled on {resource} {name:?}: {self}"),
                )
            },
        }
    }

    /// The HTTP status code of [`Self::to_status`].
    pub fn code(&self) -> u16 {
        match self {
            PatchError::UnsupportedMediaType { .. } => 415,
            PatchError::BadRequest(_) => 400,
            PatchError::Unprocessable(_) => 422,
            PatchError::Internal(_) => 500,
            PatchError::TooManyOperations(_) => 413,
            PatchError::Conflicts(_) | PatchError::StaleResourceVersion => 409,
        }
    }
}

/// Applies a JSON, merge or strategic merge patch to `current` and returns the patched object.
/// `builtin` is `Some((group, kind))` for built-in kinds and `None` for custom resources, which
/// refuse strategic merge with 415 (spec 6.11). Apply patches go through
/// [`server_side_apply`], which needs a field manager.
pub fn apply_patch(
    current: &serde_json::Value,
    ty: PatchType,
    body: &[u8],
    builtin: Option<(&str, &str)>,
) -> Result<serde_json::Value, PatchError> {
    let _span = tracing::debug_span!("apply_patch", ?ty).entered();
    let mut doc = current.clone();
    match ty {
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| PatchError::BadRequest(format!("the JSON patch is malformed: {e}")))?;
            if ops.0.len() > MAX_JSON_PATCH_OPERATIONS {
                return Err(PatchError::TooManyOperations(ops.0.len()));
            }
            // The document is a private copy, dropped on error, so no undo log is needed.
            json_patch::patch_unsafe(&mut doc, &ops.0)
                .map_err(|e| PatchError::Unprocessable(e.to_string()))?;
        }
        PatchType::Merge => {
            let patch: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
                PatchError::BadRequest(format!("the merge patch is not valid JSON: {e}"))
            })?;
            json_patch::merge(&mut doc, &patch);
        }
        PatchType::StrategicMerge => {
            if builtin.is_none() {
                return Err(PatchError::UnsupportedMediaType { builtin: false });
            }
            let patch: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
                PatchError::BadRequest(format!("the strategic merge patch is not valid JSON: {e}"))
            })?;
            strategic::merge(&mut doc, &patch)?;
        }
        PatchType::Apply => {
            return Err(PatchError::BadRequest(
                "fieldManager is required for apply requests".into(),
            ))
        }
    }
    if !doc.is_object() {
        return Err(PatchError::BadRequest(
            "the patched object is not a JSON object".into(),
        ));
    }
    Ok(doc)
}
