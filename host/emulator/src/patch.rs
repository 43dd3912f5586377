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

pub use apply::{
    server_side_apply, server_side_apply_subresource, server_side_apply_with, ApplyRequest,
    BEFORE_FIRST_APPLY,
};

use kwh_client::error::{Status, StatusCause, StatusDetails};

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

/// One invalid PATCH query option (`fieldManager`, `force`), reported as a 422 on
/// `PatchOptions` like the server's option validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionError {
    /// The cause type: `FieldValueRequired`, `FieldValueTooLong`, `FieldValueInvalid`,
    /// `FieldValueForbidden`.
    pub reason: &'static str,
    /// The option: `fieldManager` or `force`.
    pub field: &'static str,
    /// What is wrong, e.g. `Required value: is required for apply patch`.
    pub detail: String,
}

/// The longest field manager name the server accepts.
pub const FIELD_MANAGER_MAX_LENGTH: usize = 128;

/// Checks PATCH query options like the server does before it reads the body: apply needs a
/// field manager, only apply may force, and a field manager is at most 128 bytes of printable
/// characters. `force` is whether the request carried a `force` parameter at all.
pub fn validate_patch_options(
    ty: PatchType,
    field_manager: Option<&str>,
    force: bool,
) -> Result<(), PatchError> {
    let mut errs = Vec::new();
    let manager = field_manager.unwrap_or("");
    if ty == PatchType::Apply {
        if manager.is_empty() {
            errs.push(OptionError {
                reason: "FieldValueRequired",
                field: "fieldManager",
                detail: "Required value: is required for apply patch".into(),
            });
        }
    } else if force {
        errs.push(OptionError {
            reason: "FieldValueForbidden",
            field: "force",
            detail: "Forbidden: may not be specified for non-apply patch".into(),
        });
    }
    errs.extend(field_manager_errors(manager));
    if errs.is_empty() {
        Ok(())
    } else {
        Err(PatchError::InvalidOptions(errs))
    }
}

fn field_manager_errors(manager: &str) -> Vec<OptionError> {
    let mut errs = Vec::new();
    if manager.len() > FIELD_MANAGER_MAX_LENGTH {
        errs.push(OptionError {
            reason: "FieldValueTooLong",
            field: "fieldManager",
            detail: format!("Too long: must have at most {FIELD_MANAGER_MAX_LENGTH} bytes"),
        });
    }
    for (i, c) in manager.char_indices() {
        // Printable as Go defines it: no control characters and no space other than U+0020.
        if c.is_control() || (c.is_whitespace() && c != ' ') {
            errs.push(OptionError {
                reason: "FieldValueInvalid",
                field: "fieldManager",
                detail: format!(
                    "Invalid value: {manager:?}: invalid character U+{:04X} (at position {i})",
                    c as u32
                ),
            });
        }
    }
    errs
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
    /// Invalid query options (see [`validate_patch_options`]): 422 on `PatchOptions`.
    #[error("PatchOptions.meta.k8s.io \"\" is invalid: {}", option_errors_message(.0))]
    InvalidOptions(Vec<OptionError>),
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

fn option_errors_message(errs: &[OptionError]) -> String {
    let each: Vec<String> = errs
        .iter()
        .map(|e| format!("{}: {}", e.field, e.detail))
        .collect();
    match each.as_slice() {
        [one] => one.clone(),
        _ => format!("[{}]", each.join(", ")),
    }
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
            PatchError::InvalidOptions(errs) => Status {
                details: Some(StatusDetails {
                    group: "meta.k8s.io".into(),
                    kind: "PatchOptions".into(),
                    causes: errs
                        .iter()
                        .map(|e| StatusCause {
                            reason: e.reason.into(),
                            message: e.detail.clone(),
                            field: e.field.into(),
                        })
                        .collect(),
                    ..Default::default()
                }),
                ..Status::failure(422, "Invalid", self.to_string())
            },
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
            PatchError::InvalidOptions(_) => 422,
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
            // Like the server: the body must be a list of objects (else 400); an operation
            // that is malformed within (unknown op, missing path) fails when applied (422).
            // `null` is an empty patch, as on the server.
            let raw: Option<Vec<serde_json::Map<String, serde_json::Value>>> =
                serde_json::from_slice(body).map_err(|e| {
                    PatchError::BadRequest(format!(
                        "the JSON patch must be a list of operations: {e}"
                    ))
                })?;
            let raw = raw.unwrap_or_default();
            if raw.len() > MAX_JSON_PATCH_OPERATIONS {
                return Err(PatchError::TooManyOperations(raw.len()));
            }
            let ops = raw
                .into_iter()
                .enumerate()
                .map(|(i, op)| {
                    serde_json::from_value::<json_patch::PatchOperation>(op.into()).map_err(|e| {
                        PatchError::Unprocessable(format!("operation {i} is invalid: {e}"))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            // The document is a private copy, dropped on error, so no undo log is needed.
            json_patch::patch_unsafe(&mut doc, &ops)
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
            return validate_patch_options(PatchType::Apply, None, false).map(|()| doc)
        }
    }
    if !doc.is_object() {
        return Err(PatchError::BadRequest(
            "the patched object is not a JSON object".into(),
        ));
    }
    Ok(doc)
}
