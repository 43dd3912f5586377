//! The checks kube-apiserver makes of every object's metadata whatever its kind
//! (`ValidateObjectMeta`): label keys and values, annotation keys and their total size. A
//! write that breaks one is refused 422 `Invalid`, as a controller tested here must see it
//! refused on a real cluster (a shadow revision's invalid write is a refusal of its own kind).

use serde_json::Value;

use super::response::FieldError;
use super::util::validate_dns_subdomain;

/// `TotalAnnotationSizeLimitB`: the keys and values of one object's annotations together.
const ANNOTATIONS_LIMIT: usize = 256 * 1024;

/// `ValidateLabels` and `ValidateAnnotations` of `metadata` (the object's, as stored).
pub(crate) fn meta_errors(object: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(meta) = object.get("metadata") else {
        return errs;
    };
    if let Some(labels) = meta.get("labels").and_then(Value::as_object) {
        for (k, v) in labels {
            for why in qualified_name_errors(k) {
                errs.push(FieldError::invalid("metadata.labels", k, &why));
            }
            let v = v.as_str().unwrap_or_default();
            for why in label_value_errors(v) {
                errs.push(FieldError::invalid("metadata.labels", v, &why));
            }
        }
    }
    if let Some(annotations) = meta.get("annotations").and_then(Value::as_object) {
        let mut total = 0;
        for (k, v) in annotations {
            // As the API server checks them: lowercased (upper case is allowed in keys).
            for why in qualified_name_errors(&k.to_lowercase()) {
                errs.push(FieldError::invalid("metadata.annotations", k, &why));
            }
            total += k.len() + v.as_str().map_or(0, str::len);
        }
        if total > ANNOTATIONS_LIMIT {
            errs.push(FieldError {
                reason: "FieldValueTooLong",
                field: "metadata.annotations".into(),
                detail: format!("Too long: must have at most {ANNOTATIONS_LIMIT} bytes"),
            });
        }
    }
    errs
}

/// `validation.IsQualifiedName`'s messages for `value`.
pub(crate) fn qualified_name_errors(value: &str) -> Vec<String> {
    const NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
    let regex_error = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else if let Err(why) = validate_dns_subdomain(prefix) {
                errs.push(format!("prefix part {why}"));
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '{NAME_FMT}') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_owned());
    }
    let b = name.as_bytes();
    let matches = !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
    if !matches {
        errs.push(format!("name part {regex_error}"));
    }
    errs
}

/// `validation.IsValidLabelValue`'s messages for `value`.
fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    let b = value.as_bytes();
    let matches = b.is_empty()
        || (b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')));
    if !matches {
        errs.push("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".to_owned());
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn qualified_names() {
        assert!(qualified_name_errors("janitor").is_empty());
        assert!(qualified_name_errors("example.com/my-controller").is_empty());
        assert_eq!(qualified_name_errors("").len(), 2);
        assert_eq!(
            qualified_name_errors("-x"),
            ["name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"]
        );
        assert_eq!(qualified_name_errors("a/b/c").len(), 1);
        assert_eq!(
            qualified_name_errors("/x"),
            ["prefix part must be non-empty"]
        );
    }

    #[test]
    fn labels_and_annotations_are_checked_as_the_api_server_checks_them() {
        let ok = json!({"metadata": {"labels": {"app": "web", "example.com/tier": ""},
            "annotations": {"Example.com/Mixed_Case": "anything at all: ./!"}}});
        assert!(meta_errors(&ok).is_empty());
        let bad = json!({"metadata": {"labels": {"app": "no spaces"},
            "annotations": {"bad key!/x": "v"}}});
        let errs = meta_errors(&bad);
        let fields: Vec<(&str, &str)> = errs
            .iter()
            .map(|e| (e.field.as_str(), e.detail.as_str()))
            .collect();
        assert_eq!(errs.len(), 2, "{fields:?}");
        assert!(
            fields[0]
                .1
                .starts_with("Invalid value: \"no spaces\": a valid label"),
            "{fields:?}"
        );
        assert_eq!(fields[1].0, "metadata.annotations");
        assert!(
            fields[1]
                .1
                .starts_with("Invalid value: \"bad key!/x\": prefix part"),
            "{fields:?}"
        );
        let big = json!({"metadata": {"annotations": {"a": "x".repeat(ANNOTATIONS_LIMIT)}}});
        assert_eq!(meta_errors(&big)[0].reason, "FieldValueTooLong");
    }
}
