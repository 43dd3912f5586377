//! The metadata scanner (`json`, SIMD and `unsafe`), the span parser and the one-allocation
//! object (`object`, `object::thin`), against serde_json as the oracle.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::Value;

use super::{oracle_parse, serde_only_limit, SerdeLimit};
use crate::json::Scanner;
use crate::object::{
    object_key, scan_object, split_key, IngestOptions, ManagedFields, Meta, Object,
};

/// A serde_json parse without its nesting limit (the cargo-fuzz build has the feature that
/// lifts it); the scanner accepts deeper nesting than serde_json's default 128.
pub type DeepParse = fn(&[u8]) -> Result<Value, serde_json::Error>;

/// [`json_object_with`] without the deep parse: inputs nested past 128 are only checked for
/// consistency, not against serde_json.
pub fn json_object(data: &[u8]) {
    json_object_with(data, None)
}

/// Takes `data` in as an object every way the client does (kept whole, with `managedFields`
/// cut, as a list item with type metadata added, from shared bytes) and checks:
/// - every input the scanner accepts, serde_json accepts too (but for numbers outside an
///   `f64`'s range), and the metadata read is the metadata serde_json reads;
/// - every object serde_json reads whose metadata has the types the scanner requires, the
///   scanner accepts;
/// - what is stored is always JSON the scanner accepts in full, with the same metadata, and
///   with `managedFields` cut is the document less `metadata.managedFields`;
/// - the object's accessors (spans into the bytes, keys, versions) agree with each other.
pub fn json_object_with(data: &[u8], deep: Option<DeepParse>) {
    let keep = IngestOptions {
        keep_managed_fields: true,
        ..Default::default()
    };
    let kept = Object::ingest(data, &keep);
    let shared = Object::from_bytes(Bytes::copy_from_slice(data));
    let dropped = Object::ingest(data, &IngestOptions::default());
    let typed = Object::ingest_typed(data, &IngestOptions::default(), Some(("Kind", "g/v1")));
    assert_eq!(
        kept.is_ok(),
        shared.is_ok(),
        "ingest {kept:?} and from_bytes {shared:?} disagree"
    );
    if let (Ok(k), Ok(s)) = (&kept, &shared) {
        assert_eq!(k.raw(), data, "an object kept whole is stored as it came");
        assert_eq!(s.raw(), data);
        assert_eq!(read(k), read(s));
        check_accessors(k);
    }
    for o in dropped.iter().chain(typed.iter()) {
        check_accessors(o);
        check_stored(o, false);
    }
    match (&dropped, &typed) {
        (Ok(d), Ok(t)) => {
            assert_eq!(read(d), read(t), "type metadata moved the spans");
            let (v, k) = t.type_meta();
            let (had_v, had_k) = d.type_meta();
            if had_v.is_empty() && had_k.is_empty() && !has_type_keys(d) {
                assert_eq!((&*v, &*k), ("g/v1", "Kind"));
            }
        }
        (Ok(_), Err(e)) | (Err(e), Ok(_)) => panic!("adding type metadata changed acceptance: {e}"),
        _ => {}
    }

    let parsed = oracle_parse(data);
    let value = match (&kept, parsed) {
        (Ok(o), Ok(v)) => {
            agree(o, &v);
            Some(v)
        }
        (Ok(o), Err(e)) => match serde_only_limit(&e) {
            SerdeLimit::Number => None,
            SerdeLimit::Depth => match deep {
                Some(parse) => {
                    let v = parse(data).unwrap_or_else(|e| {
                        panic!("accepted, and serde_json without its nesting limit refuses: {e}")
                    });
                    agree(o, &v);
                    Some(v)
                }
                None => None,
            },
            SerdeLimit::None => panic!("the scanner accepted what serde_json refuses: {e}"),
        },
        (Err(e), Ok(v)) => {
            if let Oracle::Meta(m) = expected(&v) {
                if !metadata_repeats_a_key(data) {
                    panic!("the scanner refused ({e}) an object serde_json reads as {m:?}")
                }
            }
            None
        }
        (Err(_), Err(_)) => None,
    };

    match (&kept, &dropped) {
        (Ok(k), Ok(d)) => {
            assert_eq!(read(k), read(d), "cutting managedFields moved the spans");
            if let Some(mut v) = value {
                if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("managedFields");
                }
                let stored: Value = oracle_parse(d.raw())
                    .unwrap_or_else(|e| panic!("stored text is not JSON: {e}"));
                assert_eq!(stored, v, "the cut removed more than managedFields");
            }
        }
        // Two `managedFields` (or `metadata`) members: one cut is made, so the object is
        // refused rather than stored with the other unchecked.
        (Ok(_), Err(e)) if e.to_string().contains("managedFields given twice") => {}
        (Ok(_), Err(e)) => panic!("cutting managedFields refused what keeping it accepts: {e}"),
        _ => {}
    }
}

/// Whether the object's top level has a `kind` or `apiVersion` member (of any value).
fn has_type_keys(o: &Object) -> bool {
    let mut sc = Scanner::new(o.raw());
    scan_object(&mut sc, ManagedFields::Kept)
        .map(|(_, info)| info.has_kind || info.has_api_version)
        .unwrap_or(false)
}

/// What is stored passes the full scan with the same metadata (nothing unchecked is kept),
/// and holds no `managedFields` unless they were to be kept.
pub(super) fn check_stored(o: &Object, kept: bool) {
    let mut sc = Scanner::new(o.raw());
    let scan = scan_object(&mut sc, ManagedFields::Kept).and_then(|r| {
        sc.end()?;
        Ok(r)
    });
    let (_, info) = scan.unwrap_or_else(|e| {
        panic!(
            "stored text does not scan: {e}: {:?}",
            String::from_utf8_lossy(o.raw())
        )
    });
    assert!(
        kept || info.managed_fields_cut.is_none(),
        "managedFields left in {:?}",
        String::from_utf8_lossy(o.raw())
    );
    let again = Object::ingest(
        o.raw(),
        &IngestOptions {
            keep_managed_fields: true,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("stored text is refused: {e}"));
    assert_eq!(read(o), read(&again));
}

/// The accessors agree: keys, spans into the bytes, versions, handles.
pub(super) fn check_accessors(o: &Object) {
    let m = o.meta();
    assert!(
        std::str::from_utf8(o.raw()).is_ok(),
        "stored text is not UTF-8"
    );
    assert_eq!(o.as_str().as_bytes(), o.raw());
    assert_eq!(&o.raw_bytes()[..], o.raw());
    assert_eq!(o.name(), m.name);
    assert_eq!(o.namespace(), m.namespace);
    assert_eq!(o.uid(), m.uid);
    assert_eq!(o.resource_version(), m.resource_version);
    let key = o.key();
    assert_eq!(key, object_key(m.namespace, m.name));
    assert_eq!(o.with_key(str::to_owned), key);
    if !m.name.contains('/') && !m.namespace.unwrap_or("").contains('/') {
        assert_eq!(split_key(&key), Ok((m.namespace, m.name)));
    }
    assert_eq!(o.is_version(&m), !m.resource_version.is_empty());
    assert_eq!(o.is_same_version(o), !m.resource_version.is_empty());
    let copy = o.clone();
    assert!(Object::ptr_eq(o, &copy));
    assert_eq!(&copy, o);
    assert!(o.heap_size() >= o.raw().len());
    let _ = o.type_meta();
    let mut labels = Vec::new();
    if let Some(v) = o.verbatim_meta(&mut labels) {
        let at = |s: crate::object::RawSpan| {
            let (a, n) = (s.start as usize, s.len as usize);
            std::str::from_utf8(&o.raw()[a..a + n]).expect("a span cuts a character")
        };
        assert_eq!(at(v.name), m.name);
        assert_eq!(at(v.namespace), m.namespace.unwrap_or(""));
        assert_eq!(at(v.uid), m.uid);
        assert_eq!(at(v.resource_version), m.resource_version);
        assert_eq!(v.generation, m.generation);
        assert_eq!(v.deleting, m.deletion_timestamp.is_some());
        let spans: Vec<(&str, &str)> = labels
            .chunks(4)
            .map(|q| {
                let s = |i: usize| crate::object::RawSpan {
                    start: q[i],
                    len: q[i + 1],
                };
                (at(s(0)), at(s(2)))
            })
            .collect();
        assert_eq!(spans, m.labels.iter().collect::<Vec<_>>());
    }
}

type Owner = (String, String, String, String, Option<bool>, Option<bool>);

/// Metadata as plain values, comparable between the scanner and serde_json.
#[derive(Debug, Default, PartialEq, Eq)]
struct Read {
    name: String,
    namespace: Option<String>,
    uid: String,
    resource_version: String,
    generation: i64,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    finalizers: Vec<String>,
    owners: Vec<Owner>,
    deletion_timestamp: Option<String>,
}

/// What the scanner read. Maps are read as JSON decoders read duplicate keys: the last wins,
/// and a lookup by key must say so too.
fn read(o: &Object) -> Read {
    let m: Meta<'_> = o.meta();
    let map = |pairs: crate::object::StrPairs<'_>| {
        let mut out = BTreeMap::new();
        for (k, v) in pairs.iter() {
            out.insert(k.to_owned(), v.to_owned());
        }
        for (k, v) in &out {
            assert_eq!(pairs.get(k), Some(v.as_str()), "lookup of {k:?}");
        }
        out
    };
    Read {
        name: m.name.into(),
        namespace: m.namespace.map(Into::into),
        uid: m.uid.into(),
        resource_version: m.resource_version.into(),
        generation: m.generation,
        labels: map(m.labels),
        annotations: map(m.annotations),
        finalizers: m.finalizers.iter().map(Into::into).collect(),
        owners: m
            .owner_references
            .iter()
            .map(|r| {
                (
                    r.api_version.into(),
                    r.kind.into(),
                    r.name.into(),
                    r.uid.into(),
                    r.controller,
                    r.block_owner_deletion,
                )
            })
            .collect(),
        deletion_timestamp: m.deletion_timestamp.map(Into::into),
    }
}

/// What serde_json's reading says the scanner must read.
enum Oracle {
    Meta(Box<Read>),
    /// A metadata field of a type the scanner refuses (`name: 1`, a label value `null`).
    Mistyped,
    /// `-0` and `-0.0` both read as a negative zero float: whether the scanner accepts the
    /// generation cannot be told from serde_json's value.
    Unknown,
}

fn agree(o: &Object, v: &Value) {
    match expected(v) {
        Oracle::Meta(want) => assert_eq!(read(o), *want, "metadata differs from serde_json's"),
        Oracle::Mistyped => panic!("accepted metadata serde_json reads as mistyped: {v}"),
        Oracle::Unknown => {}
    }
}

fn expected(v: &Value) -> Oracle {
    let Some(top) = v.as_object() else {
        return Oracle::Mistyped;
    };
    let m = match top.get("metadata") {
        None | Some(Value::Null) => return Oracle::Meta(Box::default()),
        Some(Value::Object(m)) => m,
        Some(_) => return Oracle::Mistyped,
    };
    match expected_meta(m) {
        Ok(r) => Oracle::Meta(Box::new(r)),
        Err(Unread::Mistyped) => Oracle::Mistyped,
        Err(Unread::Unknown) => Oracle::Unknown,
    }
}

/// Why serde_json's metadata has no reading the scanner must match (see [`Oracle`]).
enum Unread {
    Mistyped,
    Unknown,
}

fn expected_meta(m: &serde_json::Map<String, Value>) -> Result<Read, Unread> {
    let text = |k: &str| -> Result<Option<String>, Unread> {
        match m.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(Unread::Mistyped),
        }
    };
    let strings = |v: Option<&Value>| -> Result<BTreeMap<String, String>, Unread> {
        match v {
            None | Some(Value::Null) => Ok(BTreeMap::new()),
            Some(Value::Object(o)) => o
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    _ => Err(Unread::Mistyped),
                })
                .collect(),
            Some(_) => Err(Unread::Mistyped),
        }
    };
    let generation = match m.get("generation") {
        None | Some(Value::Null) => 0,
        Some(Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i,
            (None, Some(f)) if f == 0.0 && f.is_sign_negative() => return Err(Unread::Unknown),
            _ => return Err(Unread::Mistyped),
        },
        Some(_) => return Err(Unread::Mistyped),
    };
    let finalizers = match m.get("finalizers") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|f| f.as_str().map(str::to_owned).ok_or(Unread::Mistyped))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(Unread::Mistyped),
    };
    let owners = match m.get("ownerReferences") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.iter().map(owner).collect::<Result<_, _>>()?,
        Some(_) => return Err(Unread::Mistyped),
    };
    Ok(Read {
        name: text("name")?.unwrap_or_default(),
        namespace: text("namespace")?.filter(|n| !n.is_empty()),
        uid: text("uid")?.unwrap_or_default(),
        resource_version: text("resourceVersion")?.unwrap_or_default(),
        generation,
        labels: strings(m.get("labels"))?,
        annotations: strings(m.get("annotations"))?,
        finalizers,
        owners,
        deletion_timestamp: text("deletionTimestamp")?,
    })
}

fn owner(v: &Value) -> Result<Owner, Unread> {
    let o = v.as_object().ok_or(Unread::Mistyped)?;
    // The scanner reads the four names as strings (`null` refused) and the flags as
    // booleans or `null`.
    let s = |k: &str| match o.get(k) {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(Unread::Mistyped),
    };
    let b = |k: &str| match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(Unread::Mistyped),
    };
    Ok((
        s("apiVersion")?,
        s("kind")?,
        s("name")?,
        s("uid")?,
        b("controller")?,
        b("blockOwnerDeletion")?,
    ))
}

/// Whether the document repeats `metadata`, or any object inside `metadata` repeats a key.
/// serde_json's value keeps the last of each, so it cannot say whether an earlier one had a
/// type the scanner refuses (`"labels": "", …, "labels": null`); Go's encoding/json refuses
/// such a document too, so the scanner's refusal is right and the value is no oracle for it.
fn metadata_repeats_a_key(data: &[u8]) -> bool {
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use std::collections::HashSet;
    use std::fmt;

    /// Any value; yields whether an object in it repeats a key.
    struct Repeats;
    impl<'de> DeserializeSeed<'de> for Repeats {
        type Value = bool;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Repeats {
        type Value = bool;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_i64<E>(self, _: i64) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_u64<E>(self, _: u64) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_f64<E>(self, _: f64) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_str<E>(self, _: &str) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_unit<E>(self) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<bool, A::Error> {
            let mut any = false;
            while let Some(r) = a.next_element_seed(Repeats)? {
                any |= r;
            }
            Ok(any)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<bool, A::Error> {
            let mut keys = HashSet::new();
            let mut any = false;
            while let Some(k) = a.next_key::<String>()? {
                any |= !keys.insert(k);
                any |= a.next_value_seed(Repeats)?;
            }
            Ok(any)
        }
    }

    /// The document: only `metadata` is looked into.
    struct Top;
    impl<'de> Visitor<'de> for Top {
        type Value = bool;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<bool, A::Error> {
            let mut metadata = 0;
            let mut any = false;
            while let Some(k) = a.next_key::<String>()? {
                if k == "metadata" {
                    metadata += 1;
                    any |= a.next_value_seed(Repeats)?;
                } else {
                    a.next_value::<IgnoredAny>()?;
                }
            }
            Ok(any || metadata > 1)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(data);
    de.deserialize_map(Top).unwrap_or(false)
}
