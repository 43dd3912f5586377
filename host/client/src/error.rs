//! The API's `Status` object and the error type every API call returns.
//!
//! Why one type: callers (the reflector, the plugin client import) branch on the HTTP code and
//! the `reason` (Expired, Conflict, TooLarge…), whichever transport produced them.

use serde::{Deserialize, Serialize};

/// A `meta.k8s.io/v1` Status, as the server sends it (spec 6.5). Serialising it yields the
/// same field order and omissions as kube-apiserver.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    #[serde(default = "status_kind")]
    pub kind: String,
    #[serde(default = "status_api_version")]
    pub api_version: String,
    #[serde(default)]
    pub metadata: StatusListMeta,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<StatusDetails>,
    #[serde(default)]
    pub code: u16,
}

fn status_kind() -> String {
    "Status".into()
}
fn status_api_version() -> String {
    "v1".into()
}

/// The list metadata a Status may carry (an inconsistent `continue` token on 410, spec 6.6).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusListMeta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    #[serde(default, rename = "continue", skip_serializing_if = "Option::is_none")]
    pub continue_: Option<String>,
}

/// `details` of a Status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusDetails {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<StatusCause>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u32>,
}

/// One cause; in JSON the cause type sits under `reason` (spec 6.5).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCause {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field: String,
}

impl Status {
    /// A Failure status with the given code, reason and message.
    pub fn failure(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Status {
            kind: status_kind(),
            api_version: status_api_version(),
            status: "Failure".into(),
            message: message.into(),
            reason: reason.into(),
            code,
            ..Default::default()
        }
    }

    /// 410 Expired or Gone.
    pub fn is_expired(&self) -> bool {
        self.code == 410 || self.reason == "Expired" || self.reason == "Gone"
    }

    /// TooLargeResourceVersion (spec 1.10): a `ResourceVersionTooLarge` cause, or a 504 Timeout
    /// whose message contains "Too large resource version".
    pub fn is_too_large_rv(&self) -> bool {
        let cause = self.details.as_ref().is_some_and(|d| {
            d.causes
                .iter()
                .any(|c| c.reason == "ResourceVersionTooLarge")
        });
        cause || (self.code == 504 && self.message.contains("Too large resource version"))
    }
}

/// Every failure of an API call, classified the way the reflector and plugins branch on it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with a Status (non-2xx, or an ERROR watch event).
    #[error("{} ({}): {}", .0.code, if .0.reason.is_empty() { "no reason" } else { .0.reason.as_str() }, .0.message)]
    Api(Box<Status>),
    /// Could not connect (refused, DNS, TLS handshake, proxy). `refused` = the server's
    /// address answered with a reset: what a restarting API server looks like, and the only
    /// connect failure the reflector retries in place (spec 1.8).
    #[error("cannot connect to {url}: {message}")]
    Connect {
        url: String,
        message: String,
        refused: bool,
    },
    /// The connection broke or the HTTP exchange failed after connecting.
    #[error("HTTP error: {0}")]
    Http(String),
    /// The response body could not be decoded (malformed or truncated JSON).
    #[error("decode error: {0}")]
    Decode(String),
    /// A per-request timeout elapsed.
    #[error("request timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// Bad configuration (kubeconfig, in-cluster environment, credentials).
    #[error("configuration error: {0}")]
    Config(String),
}

impl Error {
    /// The Status, when the server sent one.
    pub fn status(&self) -> Option<&Status> {
        match self {
            Error::Api(s) => Some(s),
            _ => None,
        }
    }
    /// HTTP code of the Status, when there is one.
    pub fn code(&self) -> Option<u16> {
        self.status().map(|s| s.code)
    }
    /// 410 Expired/Gone.
    pub fn is_expired(&self) -> bool {
        self.status().is_some_and(Status::is_expired)
    }
    /// TooLargeResourceVersion (spec 1.10).
    pub fn is_too_large_rv(&self) -> bool {
        self.status().is_some_and(Status::is_too_large_rv)
    }
    /// 429 TooManyRequests.
    pub fn is_too_many_requests(&self) -> bool {
        self.code() == Some(429)
    }
    /// Any failure to connect: the server is not reachable (yet).
    pub fn is_connect(&self) -> bool {
        matches!(self, Error::Connect { .. })
    }
    /// The connection was refused (client-go's `IsConnectionRefused`), as opposed to a DNS,
    /// TLS or proxy failure, which a retry in place would not fix.
    pub fn is_connection_refused(&self) -> bool {
        matches!(self, Error::Connect { refused: true, .. })
    }
}

impl From<Status> for Error {
    fn from(s: Status) -> Self {
        Error::Api(Box::new(s))
    }
}
