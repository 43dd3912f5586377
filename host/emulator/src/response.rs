//! Response bodies and the Status answers the real server gives, in one place.
//!
//! Why centralised: the golden tests compare these bodies with captured kube-apiserver answers;
//! keeping every message template here keeps them consistent.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body::{Frame, SizeHint};
use tokio::sync::mpsc;

use kwh_client::error::{StatusCause, StatusDetails};
use kwh_client::Status;

/// The body of every emulator response: a whole buffer, or a stream of chunks (watch).
#[derive(Debug)]
pub enum Body {
    Full(Option<Bytes>),
    Stream(mpsc::Receiver<Bytes>),
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Body::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Body::Stream(rx) => rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            Body::Full(None) => SizeHint::with_exact(0),
            Body::Stream(_) => SizeHint::default(),
        }
    }
}

/// Headers every API answer carries (as kube-apiserver sends them).
pub fn base(code: StatusCode, content_type: &'static str, body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = code;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    if let Ok(v) = HeaderValue::from_str(&super::util::new_uid()) {
        h.insert("audit-id", v);
    }
    r
}

/// A JSON answer.
pub fn json(code: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    base(code, "application/json", Body::Full(Some(body.into())))
}

/// A serializable value as a JSON answer.
pub fn value<T: serde::Serialize>(code: StatusCode, v: &T) -> Response<Body> {
    match serde_json::to_vec(v) {
        Ok(b) => json(code, b),
        Err(e) => status(&internal(&e.to_string())),
    }
}

/// A Status answer with its own code.
pub fn status(s: &Status) -> Response<Body> {
    let code = StatusCode::from_u16(s.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = value_raw(code, s);
    // The server copies a positive retryAfterSeconds into Retry-After for any code (504
    // TooLargeRV included); 429 always carries one.
    let secs = s
        .details
        .as_ref()
        .and_then(|d| d.retry_after_seconds)
        .filter(|n| *n > 0)
        .or((s.code == 429).then_some(1));
    if let Some(secs) = secs {
        if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    r
}

fn value_raw(code: StatusCode, s: &Status) -> Response<Body> {
    json(code, serde_json::to_vec(s).unwrap_or_default())
}

/// A plain-text answer (health endpoints, the catch-all 404).
pub fn text(code: StatusCode, body: &'static str) -> Response<Body> {
    base(
        code,
        "text/plain; charset=utf-8",
        Body::Full(Some(Bytes::from_static(body.as_bytes()))),
    )
}

fn with_details(mut s: Status, name: &str, kind: &str) -> Status {
    s.details = Some(StatusDetails {
        name: name.into(),
        kind: kind.into(),
        ..Default::default()
    });
    s
}

/// 403 for a create in a namespace being deleted, as the NamespaceLifecycle admission plugin
/// answers it.
pub fn namespace_terminating(resource: &str, name: &str, namespace: &str) -> Status {
    let mut s = with_details(
        Status::failure(
            403,
            "Forbidden",
            format!(
                "{resource} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated"
            ),
        ),
        name,
        resource,
    );
    if let Some(d) = s.details.as_mut() {
        d.causes.push(StatusCause {
            reason: "NamespaceTerminating".into(),
            message: format!("namespace {namespace} is being terminated"),
            field: "metadata.namespace".into(),
        });
    }
    s
}

/// 404 for a missing object: `configmaps "x" not found`.
pub fn not_found(resource: &str, name: &str) -> Status {
    with_details(
        Status::failure(404, "NotFound", format!("{resource} \"{name}\" not found")),
        name,
        resource,
    )
}

/// 404 for a path the server does not serve.
pub fn no_route() -> Status {
    let mut s = Status::failure(
        404,
        "NotFound",
        "the server could not find the requested resource",
    );
    s.details = Some(StatusDetails::default());
    s
}

/// 409 AlreadyExists.
pub fn already_exists(resource: &str, name: &str) -> Status {
    with_details(
        Status::failure(
            409,
            "AlreadyExists",
            format!("{resource} \"{name}\" already exists"),
        ),
        name,
        resource,
    )
}

/// 409 Conflict (stale RV or failed precondition); `why` follows the object name.
pub fn conflict(resource: &str, name: &str, why: &str) -> Status {
    with_details(
        Status::failure(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {resource} \"{name}\": {why}"),
        ),
        name,
        resource,
    )
}

/// The Conflict reason text of a stale resourceVersion.
pub const STALE: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// One field error of a 422.
pub struct FieldError {
    pub reason: &'static str,
    pub field: String,
    pub detail: String,
}

impl FieldError {
    /// `Invalid value: "x": why`.
    pub fn invalid(field: &str, value: &str, why: &str) -> Self {
        FieldError {
            reason: "FieldValueInvalid",
            field: field.into(),
            detail: format!("Invalid value: \"{value}\": {why}"),
        }
    }
    /// `Required value: why`.
    pub fn required(field: &str, why: &str) -> Self {
        FieldError {
            reason: "FieldValueRequired",
            field: field.into(),
            detail: if why.is_empty() {
                "Required value".into()
            } else {
                format!("Required value: {why}")
            },
        }
    }
    /// `Forbidden: why`.
    pub fn forbidden(field: &str, why: &str) -> Self {
        FieldError {
            reason: "FieldValueForbidden",
            field: field.into(),
            detail: format!("Forbidden: {why}"),
        }
    }
}

/// 422 Invalid: `Kind "name" is invalid: field: detail`, one cause per field error.
pub fn invalid(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> Status {
    // The message names each distinct error once (Go's `ErrorList.ToAggregate`); the causes
    // keep them all.
    let mut list: Vec<String> = Vec::with_capacity(errors.len());
    for e in errors {
        let m = format!("{}: {}", e.field, e.detail);
        if !list.contains(&m) {
            list.push(m);
        }
    }
    let joined = if list.len() == 1 {
        list[0].clone()
    } else {
        format!("[{}]", list.join(", "))
    };
    let qualified = if group.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}.{group}")
    };
    let mut s = Status::failure(
        422,
        "Invalid",
        format!("{qualified} \"{name}\" is invalid: {joined}"),
    );
    s.details = Some(StatusDetails {
        name: name.into(),
        group: group.into(),
        kind: kind.into(),
        causes: errors
            .iter()
            .map(|e| StatusCause {
                reason: e.reason.into(),
                message: e.detail.clone(),
                field: e.field.clone(),
            })
            .collect(),
        ..Default::default()
    });
    s
}

/// 400 BadRequest.
pub fn bad_request(message: impl Into<String>) -> Status {
    Status::failure(400, "BadRequest", message)
}

/// 500 with no reason, as the server answers errors it did not classify.
pub fn internal(message: &str) -> Status {
    let mut s = Status::failure(500, "", message);
    s.reason.clear();
    s
}

/// 405 MethodNotAllowed.
pub fn method_not_allowed() -> Status {
    let mut s = Status::failure(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
    );
    s.details = Some(StatusDetails::default());
    s
}

/// 415 for a PATCH content type the server does not take (spec 6.11).
pub fn unsupported_media(ct: &str) -> Status {
    Status::failure(
        415,
        "UnsupportedMediaType",
        format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {ct:?})"),
    )
}

/// 401 as in the sample.
pub fn unauthorized() -> Status {
    Status::failure(401, "Unauthorized", "Unauthorized")
}

/// 410 Expired with a message.
pub fn expired(message: impl Into<String>) -> Status {
    Status::failure(410, "Expired", message)
}

/// 429 TooManyRequests with Retry-After.
pub fn too_many_requests(retry_after: u32) -> Status {
    let mut s = Status::failure(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.",
    );
    s.details = Some(StatusDetails {
        retry_after_seconds: Some(retry_after),
        ..Default::default()
    });
    s
}

/// 504 Timeout with a ResourceVersionTooLarge cause (spec 6.5).
pub fn too_large_rv(requested: u64, current: u64) -> Status {
    let mut s = Status::failure(
        504,
        "Timeout",
        // The server builds it with NewTimeoutError, which prefixes "Timeout: ".
        format!("Timeout: Too large resource version: {requested}, current: {current}"),
    );
    s.details = Some(StatusDetails {
        causes: vec![StatusCause {
            reason: "ResourceVersionTooLarge".into(),
            message: "Too large resource version".into(),
            field: String::new(),
        }],
        retry_after_seconds: Some(1),
        ..Default::default()
    });
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_matches_the_sample_shape() {
        let s = invalid(
            "ConfigMap",
            "",
            "Bad_Name",
            &[FieldError::invalid("metadata.name", "Bad_Name", "why")],
        );
        assert_eq!(
            s.message,
            "ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": why"
        );
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["details"]["causes"][0]["reason"], "FieldValueInvalid");
        assert!(v["details"].get("group").is_none());
    }

    #[test]
    fn too_large_rv_has_the_servers_shape_spec_6_5() {
        let s = too_large_rv(99, 5);
        assert!(s.is_too_large_rv());
        assert_eq!((s.code, s.reason.as_str()), (504, "Timeout"));
        assert_eq!(
            s.message,
            "Timeout: Too large resource version: 99, current: 5"
        );
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v["details"]["causes"][0]["reason"],
            "ResourceVersionTooLarge"
        );
        assert_eq!(v["details"]["retryAfterSeconds"], 1);
        let r = status(&s);
        assert_eq!(r.status(), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
        // Without retryAfterSeconds only a 429 gets the header.
        assert!(!status(&internal("x"))
            .headers()
            .contains_key(header::RETRY_AFTER));
    }

    #[test]
    fn internal_has_no_reason() {
        let v = serde_json::to_value(internal("x")).unwrap();
        assert!(v.get("reason").is_none());
        assert_eq!(v["code"], 500);
    }
}
