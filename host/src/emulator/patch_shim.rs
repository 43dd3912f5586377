//! TEMPORARY stand-in for `crate::emulator::patch` and `crate::emulator::fields`, which are
//! written separately. Same signatures, reduced behaviour: JSON patch and merge patch are real
//! (json-patch crate); strategic merge is treated as a merge patch; apply merges the YAML body;
//! managedFields are not recorded. Remove this file, and the two `use patch_shim as …` lines in
//! `emulator/mod.rs`, when the real modules are merged.

use serde_json::Value;

use crate::kube::Status;

/// The PATCH content types (spec 6.11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    StrategicMerge,
    Apply,
}

impl PatchType {
    /// `None` for any other type (the caller answers 415).
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::StrategicMerge),
            "application/apply-patch+yaml" => Some(PatchType::Apply),
            _ => None,
        }
    }
}

/// Why a patch failed.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unprocessable(String),
    #[error("strategic merge patch is not supported for custom resources")]
    Unsupported,
}

impl PatchError {
    /// The Status the server answers.
    pub fn to_status(&self, _resource: &str, _name: &str) -> Status {
        match self {
            PatchError::BadRequest(m) => Status::failure(400, "BadRequest", m.clone()),
            PatchError::Unprocessable(m) => Status::failure(422, "Invalid", m.clone()),
            PatchError::Unsupported => Status::failure(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            ),
        }
    }
}

/// Apply a JSON, merge or (approximated) strategic patch.
pub fn apply_patch(
    current: &Value,
    ty: PatchType,
    body: &[u8],
    builtin: Option<(&str, &str)>,
) -> Result<Value, PatchError> {
    let mut doc = current.clone();
    match ty {
        PatchType::Json => {
            let p: json_patch::Patch =
                serde_json::from_slice(body).map_err(|e| PatchError::BadRequest(e.to_string()))?;
            json_patch::patch(&mut doc, &p)
                .map_err(|e| PatchError::Unprocessable(e.to_string()))?;
        }
        PatchType::StrategicMerge if builtin.is_none() => return Err(PatchError::Unsupported),
        PatchType::Merge | PatchType::StrategicMerge => {
            let p: Value =
                serde_json::from_slice(body).map_err(|e| PatchError::BadRequest(e.to_string()))?;
            json_patch::merge(&mut doc, &p);
        }
        PatchType::Apply => return server_side_apply(Some(current), body, "", false, builtin, ""),
    }
    Ok(doc)
}

/// Server-side apply, approximated as a merge of the applied configuration.
pub fn server_side_apply(
    current: Option<&Value>,
    body: &[u8],
    _field_manager: &str,
    _force: bool,
    _builtin: Option<(&str, &str)>,
    _now: &str,
) -> Result<Value, PatchError> {
    let p: Value =
        serde_yaml::from_slice(body).map_err(|e| PatchError::BadRequest(e.to_string()))?;
    let mut doc = current
        .cloned()
        .unwrap_or_else(|| Value::Object(Default::default()));
    json_patch::merge(&mut doc, &p);
    Ok(doc)
}

/// managedFields bookkeeping; a no-op in this stand-in.
pub fn record_update(
    _old: Option<&Value>,
    _new: &mut Value,
    _manager: &str,
    _operation: &str,
    _subresource: Option<&str>,
    _now: &str,
) {
}
