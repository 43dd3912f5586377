//! The one error type of registry work; its message is the one line a user reads.

/// Why a reference could not be pulled or pushed.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error("bad OCI reference {0}")]
    Reference(String),
    #[error("registry credentials: {0}")]
    Credentials(String),
    /// The registry refused the credentials, or asked for some and none were found.
    #[error("{reference}: unauthorized ({message})")]
    Unauthorized { reference: String, message: String },
    #[error("{reference}: not found in the registry ({what})")]
    NotFound { reference: String, what: String },
    /// A blob or manifest whose bytes do not hash to the digest it was asked by.
    #[error("{reference}: {what} has digest {actual}, expected {expected}")]
    DigestMismatch {
        reference: String,
        what: String,
        expected: String,
        actual: String,
    },
    /// The artifact is not a Wasm component in one of the accepted layouts.
    #[error("{reference}: {message}")]
    Layout { reference: String, message: String },
    #[error("{reference}: the registry answered {status}: {message}")]
    Registry {
        reference: String,
        status: u16,
        message: String,
    },
    /// A signing or public key that cannot be used.
    #[error("signature: {0}")]
    Signature(String),
    /// A module required to be signed that is not, or not by the keys given.
    #[error("{reference}: not signed by the required key: {message}")]
    Unsigned { reference: String, message: String },
    #[error("{reference}: {source}")]
    Http {
        reference: String,
        source: kwh_client::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

impl OciError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> OciError {
        let what = what.into();
        move |source| OciError::Io { what, source }
    }
}
