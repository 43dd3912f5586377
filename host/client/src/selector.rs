//! Label and field selectors (spec 6.10), parsed once and matched without allocating.
//!
//! Why a parsed form: the emulator filters every watch event and the informer filters its cache
//! by selector; re-parsing the selector string per object would dominate those loops. Matching
//! works on the metadata the pipeline already keeps ([`Meta`]), so no object is decoded.
//!
//! Syntax accepted (the same as kube-apiserver's):
//! - labels, comma-joined requirements: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`,
//!   `k` (exists), `!k` (does not exist). `!=` and `notin` also match objects without the key.
//! - fields, comma-joined: `f=v`, `f==v`, `f!=v`.

use super::object::{Meta, StrPairs};

/// A selector string that could not be parsed or failed validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("unable to parse requirement: {0}")]
    Syntax(String),
    #[error("invalid label key {key:?}: {reason}")]
    InvalidKey { key: String, reason: &'static str },
    #[error("invalid label value: {value:?}: {reason}")]
    InvalidValue { value: String, reason: &'static str },
    #[error("invalid field selector: {0}")]
    Field(String),
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

/// The operator of one label requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelOp {
    /// `k=v` or `k==v`.
    Equals,
    /// `k!=v`; true when the key is absent.
    NotEquals,
    /// `k in (a,b)`.
    In,
    /// `k notin (a,b)`; true when the key is absent.
    NotIn,
    /// `k`.
    Exists,
    /// `!k`.
    DoesNotExist,
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelRequirement {
    pub key: Box<str>,
    pub op: LabelOp,
    /// One value for `Equals`/`NotEquals`, the set for `In`/`NotIn`, empty otherwise.
    pub values: Vec<Box<str>>,
}

impl LabelRequirement {
    fn matches<'a>(&self, get: &impl Fn(&str) -> Option<&'a str>) -> bool {
        let found = get(&self.key);
        match self.op {
            LabelOp::Exists => found.is_some(),
            LabelOp::DoesNotExist => found.is_none(),
            LabelOp::Equals | LabelOp::In => {
                found.is_some_and(|v| self.values.iter().any(|x| **x == *v))
            }
            LabelOp::NotEquals | LabelOp::NotIn => {
                found.is_none_or(|v| !self.values.iter().any(|x| **x == *v))
            }
        }
    }
}

/// A parsed label selector: all requirements must hold. The empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
}

impl LabelSelector {
    /// Parse and validate a selector string (empty or blank → matches everything).
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for term in split_top_level(s)? {
            let term = term.trim();
            if term.is_empty() {
                if s.trim().is_empty() {
                    continue;
                }
                return Err(SelectorError::Syntax(format!(
                    "found '', expected: identifier in {s:?}"
                )));
            }
            requirements.push(parse_requirement(term)?);
        }
        Ok(LabelSelector { requirements })
    }

    /// True when the selector has no requirement (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The parsed requirements, in the order written.
    pub fn requirements(&self) -> &[LabelRequirement] {
        &self.requirements
    }

    /// Whether a label set (as kept in [`Meta::labels`]) satisfies every requirement.
    pub fn matches(&self, labels: &StrPairs<'_>) -> bool {
        self.matches_with(|k| labels.get(k))
    }

    /// Match with `get(key)` reading a label's value (for label sets kept in other shapes).
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|r| r.matches(&get))
    }

    /// Whether an object's metadata matches.
    pub fn matches_meta(&self, meta: &Meta<'_>) -> bool {
        self.matches(&meta.labels)
    }
}

/// Split at commas that are not inside parentheses.
fn split_top_level(s: &str) -> Result<Vec<&str>, SelectorError> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| SelectorError::Syntax(format!("unbalanced ')' in {s:?}")))?
            }
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(SelectorError::Syntax(format!("unbalanced '(' in {s:?}")));
    }
    out.push(&s[start..]);
    Ok(out)
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')
}

fn parse_requirement(term: &str) -> Result<LabelRequirement, SelectorError> {
    let syntax = || SelectorError::Syntax(term.to_owned());
    if let Some(rest) = term.strip_prefix('!') {
        let key = rest.trim();
        validate_key(key)?;
        return Ok(LabelRequirement {
            key: key.into(),
            op: LabelOp::DoesNotExist,
            values: Vec::new(),
        });
    }
    let key_end = term.find(|c: char| !is_key_char(c)).unwrap_or(term.len());
    let key = &term[..key_end];
    if key.is_empty() {
        return Err(syntax());
    }
    validate_key(key)?;
    let rest = term[key_end..].trim_start();
    let (op, values) = if rest.is_empty() {
        (LabelOp::Exists, Vec::new())
    } else if let Some(v) = rest.strip_prefix("==").or_else(|| rest.strip_prefix('=')) {
        (LabelOp::Equals, vec![single_value(v.trim())?])
    } else if let Some(v) = rest.strip_prefix("!=") {
        (LabelOp::NotEquals, vec![single_value(v.trim())?])
    } else if let Some(v) = rest.strip_prefix("notin") {
        (LabelOp::NotIn, value_set(v.trim(), term)?)
    } else if let Some(v) = rest.strip_prefix("in") {
        (LabelOp::In, value_set(v.trim(), term)?)
    } else {
        return Err(syntax());
    };
    Ok(LabelRequirement {
        key: key.into(),
        op,
        values,
    })
}

fn single_value(v: &str) -> Result<Box<str>, SelectorError> {
    validate_value(v)?;
    Ok(v.into())
}

fn value_set(v: &str, term: &str) -> Result<Vec<Box<str>>, SelectorError> {
    let inner = v
        .strip_prefix('(')
        .and_then(|x| x.strip_suffix(')'))
        .ok_or_else(|| SelectorError::Syntax(format!("{term}: expected a '(value,...)' set")))?;
    if inner.trim().is_empty() {
        return Err(SelectorError::Syntax(format!("{term}: empty value set")));
    }
    let mut out = Vec::new();
    for part in inner.split(',') {
        let part = part.trim();
        validate_value(part)?;
        out.push(part.into());
    }
    Ok(out)
}

fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|p| {
            let b = p.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// A qualified name: optional DNS-subdomain prefix and `/`, then a 63-character name part.
fn validate_key(key: &str) -> Result<(), SelectorError> {
    let bad = |reason| SelectorError::InvalidKey {
        key: key.to_owned(),
        reason,
    };
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if !is_dns_subdomain(p) {
            return Err(bad("prefix part must be a lowercase RFC 1123 subdomain"));
        }
    }
    if !is_name_part(name) {
        return Err(bad("name part must be at most 63 alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character"));
    }
    Ok(())
}

/// A label value: empty, or a 63-character name part.
fn validate_value(v: &str) -> Result<(), SelectorError> {
    if v.is_empty() || is_name_part(v) {
        Ok(())
    } else {
        Err(SelectorError::InvalidValue {
            value: v.to_owned(),
            reason: "must be at most 63 alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character",
        })
    }
}

/// One requirement of a field selector: `field=value` or `field!=value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: Box<str>,
    pub negated: bool,
    pub value: Box<str>,
}

/// A parsed field selector. Which fields are supported depends on the resource; the generic
/// ones are `metadata.name` and `metadata.namespace` (see [`FieldSelector::validate`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

/// Fields every resource supports in field selectors.
pub const GENERIC_FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];

impl FieldSelector {
    /// Parse a field selector (empty or blank → matches everything), as apimachinery's
    /// `fields.ParseSelector` does: terms split at commas not escaped, each at its leftmost
    /// operator (`!=`, `==` or `=`), empty terms skipped; in a value, `\,`, `\=` and `\\` stand
    /// for those characters, and any other backslash or an unescaped `,` or `=` is an error.
    /// Unlike the API server, space around a field and a value is trimmed.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for term in split_escaped(s, ',') {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let Some((field, negated, value)) = split_term(term) else {
                return Err(SelectorError::Field(format!(
                    "invalid selector: '{s}'; can't understand '{term}'"
                )));
            };
            let field = field.trim();
            if field.is_empty() {
                return Err(SelectorError::Field(format!(
                    "invalid selector: '{s}'; empty field in '{term}'"
                )));
            }
            let value = unescape(value.trim()).map_err(|why| {
                SelectorError::Field(format!("invalid selector: '{s}'; {why} in '{term}'"))
            })?;
            requirements.push(FieldRequirement {
                field: field.into(),
                negated,
                value: value.into(),
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// True when the selector has no requirement.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The parsed requirements.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// Reject fields outside `supported` (the server answers 400 for those).
    pub fn validate(&self, supported: &[&str]) -> Result<(), SelectorError> {
        match self
            .requirements
            .iter()
            .find(|r| !supported.contains(&&*r.field))
        {
            Some(r) => Err(SelectorError::UnsupportedField(r.field.to_string())),
            None => Ok(()),
        }
    }

    /// Match using `get(field)` to read a field's value; an unknown field reads as "".
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|r| {
            let v = get(&r.field).unwrap_or("");
            (v == &*r.value) != r.negated
        })
    }

    /// Match the generic fields (`metadata.name`, `metadata.namespace`) of an object.
    pub fn matches_meta(&self, meta: &Meta<'_>) -> bool {
        self.matches_with(|f| match f {
            "metadata.name" => Some(meta.name),
            "metadata.namespace" => Some(meta.namespace.unwrap_or("")),
            _ => None,
        })
    }
}

/// A term's field, whether it is negated, and its value, split at the leftmost operator (the
/// field cannot escape one).
fn split_term(term: &str) -> Option<(&str, bool, &str)> {
    term.char_indices().find_map(|(i, _)| {
        let rest = &term[i..];
        [("!=", true), ("==", false), ("=", false)]
            .into_iter()
            .find_map(|(op, negated)| Some((&term[..i], negated, rest.strip_prefix(op)?)))
    })
}

fn split_escaped(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            out.push(&s[start..i]);
            start = i + 1;
        }
    }
    out.push(&s[start..]);
    out
}

/// A field selector value with its escapes resolved.
fn unescape(v: &str) -> Result<String, &'static str> {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(n @ ('\\' | ',' | '=')) => out.push(n),
                Some(_) => return Err("invalid escape sequence"),
                None => return Err("a backslash ends the value"),
            },
            ',' | '=' => return Err("unescaped ',' or '=' in a value"),
            c => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels<'a>(pairs: &'a [(&'a str, &'a str)]) -> StrPairs<'a> {
        StrPairs::from(pairs)
    }

    #[test]
    fn spec_6_10_every_label_operator() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let none = labels(&[]);
        let cases: &[(&str, bool, bool)] = &[
            // (selector, matches l, matches no labels)
            ("app=web", true, false),
            ("app==web", true, false),
            ("app=db", false, false),
            ("app!=db", true, true),
            ("app!=web", false, true),
            ("app in (web,db)", true, false),
            ("app in (db)", false, false),
            ("app notin (db, cache)", true, true),
            ("app notin (web)", false, true),
            ("app", true, false),
            ("!app", false, true),
            ("!missing", true, true),
            ("app=web,tier=front", true, false),
            ("app=web,tier!=front", false, false),
            ("app in (web),!missing,tier", true, false),
            ("", true, true),
        ];
        for (sel, want_l, want_none) in cases {
            let s = LabelSelector::parse(sel).unwrap();
            assert_eq!(s.matches(&l), *want_l, "{sel} on app=web,tier=front");
            assert_eq!(s.matches(&none), *want_none, "{sel} on no labels");
        }
    }

    #[test]
    fn label_selector_parses_prefixed_keys_and_spacing() {
        let s = LabelSelector::parse(" example.com/app = web , x in(a, b)").unwrap();
        assert_eq!(s.requirements().len(), 2);
        assert_eq!(&*s.requirements()[0].key, "example.com/app");
        assert_eq!(s.requirements()[1].op, LabelOp::In);
        assert_eq!(s.requirements()[1].values.len(), 2);
        assert!(s.matches(&labels(&[("example.com/app", "web"), ("x", "b")])));
    }

    #[test]
    fn label_selector_rejects_bad_input() {
        for bad in [
            "app=web,",
            "=web",
            "app in web",
            "app in (web",
            "app) in (web",
            "app=we b",
            "-app=x",
            "Bad_Prefix.COM/app=x",
            "app=-x",
            "app ~ x",
            "app in ()",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?} should fail");
        }
        let long = "a".repeat(64);
        assert!(matches!(
            LabelSelector::parse(&long),
            Err(SelectorError::InvalidKey { .. })
        ));
    }

    #[test]
    fn label_selector_matches_meta_labels() {
        let meta = Meta {
            labels: labels(&[("a", "1")]),
            ..Default::default()
        };
        assert!(LabelSelector::parse("a in (1,2)")
            .unwrap()
            .matches_meta(&meta));
    }

    #[test]
    fn spec_6_10_field_selectors_eq_and_neq() {
        let meta = Meta {
            name: "pre-1",
            namespace: Some("samples"),
            ..Default::default()
        };
        let cluster = Meta {
            name: "n",
            ..Default::default()
        };
        let ok = |s: &str, m: &Meta| FieldSelector::parse(s).unwrap().matches_meta(m);
        assert!(ok("metadata.name=pre-1", &meta));
        assert!(ok("metadata.name==pre-1,metadata.namespace=samples", &meta));
        assert!(!ok("metadata.name!=pre-1", &meta));
        assert!(ok("metadata.namespace!=other", &meta));
        assert!(ok("metadata.namespace=", &cluster));
        assert!(ok("", &meta));
        assert!(FieldSelector::parse("metadata.name").is_err());
        assert!(FieldSelector::parse("=x").is_err());
    }

    /// Found by the fuzz target `selectors`: a term was split at a `!=` or `==` anywhere in it
    /// before a `=` further left, and a backslash before any other character (or before
    /// nothing) was dropped, so a selector written back out read as another one. Now as
    /// apimachinery's `fields.ParseSelector`: the leftmost operator, three escapes.
    #[test]
    fn field_terms_split_at_the_leftmost_operator_and_values_take_three_escapes() {
        let one = |s: &str| {
            let f = FieldSelector::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            let r = &f.requirements()[0];
            (r.field.to_string(), r.negated, r.value.to_string())
        };
        let req = |f: &str, n: bool, v: &str| (f.to_owned(), n, v.to_owned());
        assert_eq!(one("a=b!c"), req("a", false, "b!c"));
        assert_eq!(one("a!=b"), req("a", true, "b"));
        assert_eq!(one("a==b"), req("a", false, "b"));
        assert_eq!(one(r"a=x\=y\,z\\"), req("a", false, r"x=y,z\"));
        for bad in [
            "metadata.name=pre-1,metale.com/app=web;x==c\\",
            "a=b!=c",
            "a=b=c",
            r"a=x\y",
            r"a=x\",
            "a!==b",
        ] {
            assert!(FieldSelector::parse(bad).is_err(), "{bad}");
        }
        // Empty terms are skipped, as apimachinery skips them.
        assert_eq!(
            FieldSelector::parse("a=1,,b=2,")
                .unwrap()
                .requirements()
                .len(),
            2
        );
    }

    #[test]
    fn field_selector_validates_supported_fields_and_unescapes() {
        let s = FieldSelector::parse("spec.nodeName=a").unwrap();
        assert_eq!(
            s.validate(GENERIC_FIELDS),
            Err(SelectorError::UnsupportedField("spec.nodeName".into()))
        );
        let s = FieldSelector::parse(r"metadata.name=a\,b").unwrap();
        assert!(s.validate(GENERIC_FIELDS).is_ok());
        assert_eq!(&*s.requirements()[0].value, "a,b");
    }
}
