//! Decoding of whole response bodies: LIST pages (spec 6.2) and `Status` errors (spec 6.5).
//!
//! Why here and not with serde: a LIST body is the initial sync's bulk. Items are taken in
//! with the same borrowing scanner as watch events, each copied into its own allocation with
//! `managedFields` cut, and nothing else of the body is materialised.

use super::error::{Error, Status, StatusDetails};
use super::json::Scanner;
use super::object::{IngestOptions, Object};
use super::watch::ObjectList;

/// Decode a LIST response. Items get the `kind` and `apiVersion` that the server leaves out of
/// list items (the list's kind without `List`), as client-go's dynamic client does, so that
/// objects from a LIST and from a WATCH look alike.
pub fn decode_list(body: &[u8], opts: &IngestOptions) -> Result<ObjectList, Error> {
    let text = std::str::from_utf8(body).map_err(|e| {
        Error::Decode(format!(
            "list response is not UTF-8 at byte {}",
            e.valid_up_to()
        ))
    })?;
    let body = text.as_bytes();
    let mut sc = Scanner::new(body);
    let mut list = ObjectList::default();
    let mut kind: Option<&str> = None;
    let mut api_version: Option<&str> = None;
    let mut deferred: Vec<usize> = Vec::new();
    let mut item_err: Option<String> = None;
    let res = sc.object(|sc, key, _| {
        match key {
            b"kind" => kind = Some(plain_str(sc, text)?),
            b"apiVersion" => api_version = Some(plain_str(sc, text)?),
            b"metadata" => {
                let (a, b) = sc.skip_value()?;
                match serde_json::from_slice::<ListMeta>(&body[a..b]) {
                    Ok(m) => {
                        list.resource_version = m.resource_version.unwrap_or_default();
                        list.continue_token = m.continue_.filter(|c| !c.is_empty());
                        list.remaining_item_count = m.remaining_item_count;
                    }
                    Err(e) => item_err = Some(format!("list metadata: {e}")),
                }
            }
            b"items" if !sc.peek_null() => {
                let type_meta = item_type(kind, api_version);
                sc.array(|sc| {
                    if kind.is_none() {
                        // `items` before `kind`: come back once the kind is known.
                        deferred.push(sc.pos());
                        sc.skip_value()?;
                        return Ok(());
                    }
                    match Object::ingest_from(sc, opts, type_meta) {
                        Ok(o) => list.items.push(o),
                        Err(e) => {
                            if item_err.is_none() {
                                item_err = Some(format!("item {}: {e}", list.items.len()));
                            }
                            sc.skip_value()?;
                        }
                    }
                    Ok(())
                })?;
            }
            _ => {
                sc.skip_value()?;
            }
        }
        Ok(())
    });
    res.and_then(|_| sc.end())
        .map_err(|e| Error::Decode(format!("list response: {e}")))?;
    if let Some(e) = item_err {
        return Err(Error::Decode(format!("list response: {e}")));
    }
    let type_meta = item_type(kind, api_version);
    for pos in deferred {
        let mut sc = Scanner::new(body);
        sc.seek(pos);
        let o = Object::ingest_from(&mut sc, opts, type_meta)
            .map_err(|e| Error::Decode(format!("list response: item: {e}")))?;
        list.items.push(o);
    }
    Ok(list)
}

fn item_type<'a>(
    kind: Option<&'a str>,
    api_version: Option<&'a str>,
) -> Option<(&'a str, &'a str)> {
    let item_kind = kind?.strip_suffix("List").filter(|k| !k.is_empty())?;
    Some((item_kind, api_version?))
}

/// A string value without escapes (kind, apiVersion), borrowed from the body.
fn plain_str<'a>(sc: &mut Scanner<'a>, body: &'a str) -> Result<&'a str, super::json::SyntaxError> {
    let (a, b, escaped) = sc.string()?;
    if escaped {
        return Err(sc.error_at(a, "unexpected escape in kind or apiVersion"));
    }
    Ok(body.get(a..b).unwrap_or_default())
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListMeta {
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default, rename = "continue")]
    continue_: Option<String>,
    #[serde(default)]
    remaining_item_count: Option<i64>,
}

/// Turn a non-2xx response into the error callers branch on: the server's own Status when the
/// body is one, otherwise a Status synthesised from the HTTP code (as client-go does for
/// proxies and load balancers that answer with HTML or plain text).
pub fn error_from_response(code: u16, retry_after: Option<&str>, body: &[u8]) -> Error {
    Error::Api(Box::new(status_from_response(code, retry_after, body)))
}

/// See [`error_from_response`].
pub fn status_from_response(code: u16, retry_after: Option<&str>, body: &[u8]) -> Status {
    if let Ok(mut s) = serde_json::from_slice::<Status>(body) {
        if s.kind == "Status" {
            if s.code == 0 {
                s.code = code;
            }
            return s;
        }
    }
    let reason = reason_for_code(code);
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let message = if text.is_empty() {
        format!(
            "the server responded with the status code {code} but did not return more information"
        )
    } else {
        let mut t: String = text.chars().take(512).collect();
        if t.len() < text.len() {
            t.push('…');
        }
        format!("the server responded with the status code {code}: {t}")
    };
    let mut s = Status::failure(code, reason, message);
    let retry = retry_after.and_then(|r| r.trim().parse::<u32>().ok());
    if retry.is_some() && matches!(code, 429 | 503 | 504) {
        s.details = Some(StatusDetails {
            retry_after_seconds: retry,
            ..Default::default()
        });
    }
    s
}

/// The `reason` the API server would use for an HTTP code.
pub fn reason_for_code(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/apiserver-samples"
    );

    fn read(name: &str) -> Vec<u8> {
        std::fs::read(format!("{DIR}/{name}")).unwrap()
    }

    #[test]
    fn decodes_paginated_list_samples_spec_6_2() {
        let p1 = decode_list(&read("list-page1.json"), &IngestOptions::default()).unwrap();
        assert_eq!(p1.resource_version, "50478");
        assert_eq!(p1.remaining_item_count, Some(3));
        assert!(p1
            .continue_token
            .as_deref()
            .unwrap()
            .starts_with("eyJ2Ijoi"));
        let names: Vec<_> = p1.items.iter().map(|o| o.name().to_owned()).collect();
        assert_eq!(names, ["pre-1", "pre-2"]);
        let first = p1.items[0].to_value().unwrap();
        assert_eq!(first["kind"], "ConfigMap");
        assert_eq!(first["apiVersion"], "v1");
        assert!(first["metadata"].get("managedFields").is_none());
        assert_eq!(first["data"]["k"], "v1");
        assert_eq!(p1.items[0].namespace(), Some("samples"));

        let p3 = decode_list(&read("list-page3.json"), &IngestOptions::default()).unwrap();
        assert_eq!(p3.continue_token, None);
        assert_eq!(p3.remaining_item_count, None);
        assert_eq!(p3.items.len(), 1);
        let all = decode_list(
            &read("list-rv0-from-watch-cache.json"),
            &IngestOptions::default(),
        )
        .unwrap();
        assert_eq!(all.items.len(), 5);
    }

    #[test]
    fn every_list_sample_decodes_like_serde() {
        for name in [
            "list-page1.json",
            "list-page2.json",
            "list-page3.json",
            "list-before-compaction-page1.json",
            "list-rv0-from-watch-cache.json",
        ] {
            let raw = read(name);
            let v: serde_json::Value = serde_json::from_slice(&raw).unwrap();
            let keep = IngestOptions {
                keep_managed_fields: true,
            };
            let list = decode_list(&raw, &keep).unwrap();
            let items = v["items"].as_array().unwrap();
            assert_eq!(list.items.len(), items.len(), "{name}");
            for (o, want) in list.items.iter().zip(items) {
                let mut got = o.to_value().unwrap();
                let obj = got.as_object_mut().unwrap();
                assert_eq!(obj.remove("kind").unwrap(), "ConfigMap");
                assert_eq!(obj.remove("apiVersion").unwrap(), "v1");
                assert_eq!(&got, want, "{name}");
            }
        }
    }

    #[test]
    fn items_before_kind_and_bad_items() {
        let body = br#"{"items":[{"metadata":{"name":"a"}}],"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"}}"#;
        let l = decode_list(body, &IngestOptions::default()).unwrap();
        assert_eq!(l.resource_version, "7");
        assert_eq!(l.items[0].to_value().unwrap()["kind"], "Pod");
        for bad in [
            &br#"{"kind":"PodList","items":[{"metadata":{"name":1}}]}"#[..],
            br#"{"kind":"PodList","items":[{"metadata":{"name":"a"}}"#,
            br#"{"kind":"PodList","items":[1]}"#,
            b"<html>",
        ] {
            let e = decode_list(bad, &IngestOptions::default()).unwrap_err();
            assert!(matches!(e, Error::Decode(_)), "{e}");
        }
    }

    #[test]
    fn every_error_sample_becomes_a_status_spec_6_5() {
        let cases: &[(&str, u16, &str)] = &[
            ("error-401-unauthorized.json", 401, "Unauthorized"),
            ("error-403-forbidden.json", 403, "Forbidden"),
            ("error-404-no-namespace.json", 404, "NotFound"),
            ("error-404-notfound.json", 404, "NotFound"),
            ("error-409-alreadyexists.json", 409, "AlreadyExists"),
            ("error-409-conflict-stale-rv.json", 409, "Conflict"),
            ("error-422-invalid.json", 422, "Invalid"),
            ("error-500-bad-rv-watch.json", 500, ""),
            ("list-410-exact-rv.json", 410, "Expired"),
            ("list-410-expired-continue.json", 410, "Expired"),
        ];
        let mut seen = 0;
        for entry in std::fs::read_dir(DIR).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if (name.starts_with("error-") || name.starts_with("list-410-"))
                && name.ends_with(".json")
            {
                assert!(
                    cases.iter().any(|c| c.0 == name),
                    "no golden case for {name}"
                );
            }
        }
        for (name, code, reason) in cases {
            let raw = read(name);
            let want: serde_json::Value = serde_json::from_slice(&raw).unwrap();
            let e = error_from_response(*code, None, &raw);
            let s = e.status().unwrap();
            assert_eq!(s.code, *code, "{name}");
            assert_eq!(s.reason, *reason, "{name}");
            assert_eq!(s.message, want["message"].as_str().unwrap(), "{name}");
            assert_eq!(s.status, "Failure");
            // Serialising the decoded Status reproduces the sample exactly.
            assert_eq!(serde_json::to_value(s).unwrap(), want, "{name}");
            seen += 1;
        }
        assert_eq!(seen, cases.len());

        let invalid = error_from_response(422, None, &read("error-422-invalid.json"));
        let d = invalid.status().unwrap().details.as_ref().unwrap();
        assert_eq!(d.causes[0].reason, "FieldValueInvalid");
        assert_eq!(d.causes[0].field, "metadata.name");
        let cont = error_from_response(410, None, &read("list-410-expired-continue.json"));
        assert!(cont.is_expired());
        assert!(cont
            .status()
            .unwrap()
            .metadata
            .continue_
            .as_deref()
            .unwrap()
            .starts_with("eyJ2"));
    }

    #[test]
    fn too_large_rv_with_retry_after_spec_6_5() {
        let body = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Too large resource version: 99, current: 5","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}"#;
        let e = error_from_response(504, None, body);
        assert!(e.is_too_large_rv());
        assert_eq!(
            e.status()
                .unwrap()
                .details
                .as_ref()
                .unwrap()
                .retry_after_seconds,
            Some(1)
        );
    }

    #[test]
    fn non_status_bodies_get_a_synthesised_status() {
        let e = error_from_response(503, Some("7"), b"<html>upstream down</html>");
        let s = e.status().unwrap();
        assert_eq!((s.code, s.reason.as_str()), (503, "ServiceUnavailable"));
        assert!(s.message.contains("upstream down"));
        assert_eq!(s.details.as_ref().unwrap().retry_after_seconds, Some(7));
        let e = error_from_response(429, None, b"");
        assert!(e.is_too_many_requests());
        assert!(e.to_string().contains("TooManyRequests"));
        let e = error_from_response(418, None, br#"{"kind":"Pod"}"#);
        assert_eq!(e.status().unwrap().reason, "Unknown");
    }
}
