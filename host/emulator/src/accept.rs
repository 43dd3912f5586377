//! Which representation a read asks for in its `Accept` header: the objects themselves, a
//! server-side Table (kubectl), or metadata only (`PartialObjectMetadata`, what client-go's
//! metadata informers and kube-rs's `metadata_watcher` ask for).
//!
//! Why parse it instead of looking for a substring: a client lists the forms it takes in order
//! of preference (`…;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json`) and the
//! server answers with the first it can produce for that verb, as kube-apiserver's content
//! negotiation does. A metadata list answered with whole objects decodes in a client that
//! ignores unknown fields, so the mistake only shows as a peer doing several times the work it
//! would against a real server.

/// The form a LIST, GET or WATCH answers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Representation {
    /// The objects as stored (`application/json`, or no preference).
    Object,
    /// A `meta.k8s.io` Table of Name and Age.
    Table,
    /// `PartialObjectMetadata` (one object, or each watch event's) or
    /// `PartialObjectMetadataList` (a list): kind, apiVersion and the whole `metadata`.
    Metadata(MetaVersion),
}

/// The `meta.k8s.io` version a metadata-only answer is written in (the `v=` parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaVersion {
    V1,
    V1beta1,
}

impl MetaVersion {
    /// The `apiVersion` of the answer's objects.
    pub fn api_version(self) -> &'static str {
        match self {
            MetaVersion::V1 => "meta.k8s.io/v1",
            MetaVersion::V1beta1 => "meta.k8s.io/v1beta1",
        }
    }
}

/// Whether the read is a LIST (whose metadata form is `PartialObjectMetadataList`) or a GET or
/// WATCH (`PartialObjectMetadata`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    List,
    Single,
}

/// The first representation in `accept` this server can give for `read`; `Object` when none
/// is named (no header, `*/*`, plain JSON, or only forms it cannot produce).
pub fn negotiate(accept: &str, read: Read) -> Representation {
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("");
        let (mut as_, mut g, mut v) = ("", "", "");
        for p in parts {
            match p.split_once('=') {
                Some(("as", x)) => as_ = x,
                Some(("g", x)) => g = x,
                Some(("v", x)) => v = x,
                _ => {}
            }
        }
        // The server writes JSON only; protobuf ranges are skipped so that a client's JSON
        // alternative (client-go lists protobuf first) is the one answered.
        if !matches!(media, "application/json" | "application/*" | "*/*" | "") {
            continue;
        }
        if as_.is_empty() {
            return Representation::Object;
        }
        if g != "meta.k8s.io" {
            continue;
        }
        let version = match v {
            "v1" => MetaVersion::V1,
            "v1beta1" => MetaVersion::V1beta1,
            _ => continue,
        };
        match (as_, read) {
            ("Table", _) => return Representation::Table,
            ("PartialObjectMetadataList", Read::List) | ("PartialObjectMetadata", Read::Single) => {
                return Representation::Metadata(version)
            }
            _ => {}
        }
    }
    Representation::Object
}

/// Whether the client asks for protobuf before any form the server writes in JSON
/// (client-go and kubectl's typed clients send `application/vnd.kubernetes.protobuf,
/// application/json`): a built-in object is then answered in protobuf.
pub fn prefers_protobuf(accept: &str) -> bool {
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("");
        if media == "application/vnd.kubernetes.protobuf" {
            // A Table or metadata form in protobuf is not written here: the next range answers.
            if parts.any(|p| p.starts_with("as=")) {
                continue;
            }
            return true;
        }
        if matches!(media, "application/json" | "application/*" | "*/*" | "") {
            return false;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    const META_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    const META: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

    #[test]
    fn protobuf_is_answered_only_when_asked_for_first() {
        assert!(prefers_protobuf(
            "application/vnd.kubernetes.protobuf,application/json"
        ));
        assert!(!prefers_protobuf("application/json, */*"));
        assert!(!prefers_protobuf(""));
        assert!(!prefers_protobuf(
            "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json"
        ));
    }

    #[test]
    fn plain_json_and_no_header_are_objects() {
        for a in ["", "application/json", "*/*", "application/json, */*"] {
            assert_eq!(negotiate(a, Read::List), Representation::Object, "{a:?}");
        }
    }

    #[test]
    fn kubectl_tables_for_every_read() {
        let a = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(negotiate(a, Read::List), Representation::Table);
        assert_eq!(negotiate(a, Read::Single), Representation::Table);
    }

    #[test]
    fn metadata_lists_for_lists_and_single_objects_for_gets_and_watches() {
        assert_eq!(
            negotiate(META_LIST, Read::List),
            Representation::Metadata(MetaVersion::V1)
        );
        assert_eq!(
            negotiate(META, Read::Single),
            Representation::Metadata(MetaVersion::V1)
        );
        // The list form is not a single object's and the other way round: the next range, or
        // the objects, answer.
        assert_eq!(negotiate(META, Read::List), Representation::Object);
        assert_eq!(
            negotiate(&format!("{META},{META_LIST}"), Read::List),
            Representation::Metadata(MetaVersion::V1)
        );
        assert_eq!(
            negotiate(
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1",
                Read::Single
            ),
            Representation::Metadata(MetaVersion::V1beta1)
        );
    }

    #[test]
    fn client_go_protobuf_first_gets_the_json_alternative() {
        let a = format!("application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,{META_LIST},application/json");
        assert_eq!(
            negotiate(&a, Read::List),
            Representation::Metadata(MetaVersion::V1)
        );
    }

    #[test]
    fn unknown_groups_versions_and_forms_are_skipped() {
        for a in [
            "application/json;as=PartialObjectMetadataList;g=example.com;v=v1",
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v9",
            "application/json;as=Something;g=meta.k8s.io;v=v1",
        ] {
            assert_eq!(negotiate(a, Read::List), Representation::Object, "{a:?}");
        }
    }
}
