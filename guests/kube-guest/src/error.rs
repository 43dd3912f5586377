//! Errors: the API's own (`ApiError`, with its HTTP code and reason) and the SDK's [`Error`],
//! which reconcile functions return so that `?` works on API calls, JSON and plain messages.

use std::fmt;

use crate::ApiError;

impl ApiError {
    /// An error shaped like the API server's, e.g. for a fake backend in a test.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.to_string(),
            message: message.into(),
        }
    }

    /// 404 `NotFound`: the object does not exist (or no longer does).
    pub fn is_not_found(&self) -> bool {
        self.code == 404 || self.reason == "NotFound"
    }

    /// 409 `Conflict`: a stale resourceVersion (someone else wrote first) or a server-side
    /// apply field conflict. Re-read and retry.
    pub fn is_conflict(&self) -> bool {
        self.reason == "Conflict" || (self.code == 409 && self.reason != "AlreadyExists")
    }

    /// 409 `AlreadyExists`: a create of a name that is taken.
    pub fn is_already_exists(&self) -> bool {
        self.reason == "AlreadyExists"
    }

    /// 403 `Forbidden`: the manifest (or the cluster's RBAC) does not allow the call.
    pub fn is_forbidden(&self) -> bool {
        self.code == 403 || self.reason == "Forbidden"
    }

    /// 422 `Invalid`: the object failed validation.
    pub fn is_invalid(&self) -> bool {
        self.code == 422 || self.reason == "Invalid"
    }
}

/// What a reconcile (or any SDK call) can fail with.
///
/// API failures keep their code and reason, so callers branch on them as client-go users do:
///
/// ```
/// use kube_guest::{ApiError, Error};
/// let e: Error = ApiError::new(404, "NotFound", "configmaps \"x\" not found").into();
/// assert!(e.is_not_found());
/// assert!(!e.is_conflict());
/// assert_eq!(e.code(), Some(404));
/// assert_eq!(e.to_string(), "404 NotFound: configmaps \"x\" not found");
/// ```
#[derive(Debug)]
pub enum Error {
    /// The API server (or the host, on its behalf) refused the call.
    Api(ApiError),
    /// An object or patch that is not the JSON expected.
    Json(serde_json::Error),
    /// Anything else, as a message.
    Message(String),
}

/// The SDK's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error with a message, e.g. `Err(Error::msg(format!("bad spec: {x}")))`.
    pub fn msg(message: impl fmt::Display) -> Self {
        Error::Message(message.to_string())
    }

    /// The API error, if this is one.
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            Error::Api(e) => Some(e),
            _ => None,
        }
    }

    /// The HTTP status code of an API error.
    pub fn code(&self) -> Option<u16> {
        self.api().map(|e| e.code)
    }

    /// The reason of an API error, e.g. `Conflict`.
    pub fn reason(&self) -> Option<&str> {
        self.api().map(|e| e.reason.as_str())
    }

    /// See [`ApiError::is_not_found`].
    pub fn is_not_found(&self) -> bool {
        self.api().is_some_and(ApiError::is_not_found)
    }

    /// See [`ApiError::is_conflict`].
    pub fn is_conflict(&self) -> bool {
        self.api().is_some_and(ApiError::is_conflict)
    }

    /// See [`ApiError::is_already_exists`].
    pub fn is_already_exists(&self) -> bool {
        self.api().is_some_and(ApiError::is_already_exists)
    }

    /// See [`ApiError::is_forbidden`].
    pub fn is_forbidden(&self) -> bool {
        self.api().is_some_and(ApiError::is_forbidden)
    }

    /// See [`ApiError::is_invalid`].
    pub fn is_invalid(&self) -> bool {
        self.api().is_some_and(ApiError::is_invalid)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Api(e) => write!(f, "{} {}: {}", e.code, e.reason, e.message),
            Error::Json(e) => write!(f, "JSON: {e}"),
            Error::Message(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Api(e) => Some(e),
            Error::Json(e) => Some(e),
            Error::Message(_) => None,
        }
    }
}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Self {
        Error::Api(e)
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Json(e)
    }
}

impl From<String> for Error {
    fn from(m: String) -> Self {
        Error::Message(m)
    }
}

impl From<&str> for Error {
    fn from(m: &str) -> Self {
        Error::Message(m.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_follows_code_and_reason() {
        let conflict = ApiError::new(409, "Conflict", "the object has been modified");
        assert!(conflict.is_conflict() && !conflict.is_already_exists());
        let exists = ApiError::new(409, "AlreadyExists", "exists");
        assert!(exists.is_already_exists() && !exists.is_conflict());
        assert!(ApiError::new(403, "Forbidden", "no").is_forbidden());
        assert!(ApiError::new(422, "Invalid", "bad").is_invalid());
        let e = Error::from(conflict);
        assert!(e.is_conflict());
        assert_eq!(e.reason(), Some("Conflict"));
        let m = Error::msg("plain");
        assert!(!m.is_not_found() && m.code().is_none());
        assert_eq!(m.to_string(), "plain");
    }
}
