//! [`ShortStr`]: a string kept inline when it is short, for the names an [`Api`](crate::Api)
//! holds. Controllers build an `Api` in every reconcile (`Api::all("v1", "ConfigMap")`), and
//! two heap strings for a group/version and a kind were a measurable share of an SDK
//! reconcile's cost; API versions, kinds and namespaces are almost always short.

use std::fmt;
use std::ops::Deref;

/// Bytes kept inline; longer strings (`rbac.authorization.k8s.io/v1` is 28) go to the heap.
const INLINE: usize = 30;

/// A string, inline up to 30 bytes, on the heap beyond.
#[derive(Clone)]
pub(crate) enum ShortStr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<str>),
}

impl From<&str> for ShortStr {
    fn from(s: &str) -> Self {
        if s.len() <= INLINE {
            let mut bytes = [0u8; INLINE];
            bytes[..s.len()].copy_from_slice(s.as_bytes());
            ShortStr::Inline {
                len: s.len() as u8,
                bytes,
            }
        } else {
            ShortStr::Heap(s.into())
        }
    }
}

impl Deref for ShortStr {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            ShortStr::Inline { len, bytes } => {
                let b = &bytes[..usize::from(*len)];
                // SAFETY: the bytes are a copy of a whole `&str` (`From<&str>`), so UTF-8.
                unsafe { std::str::from_utf8_unchecked(b) }
            }
            ShortStr::Heap(s) => s,
        }
    }
}

impl PartialEq for ShortStr {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for ShortStr {}

impl fmt::Debug for ShortStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_what_it_was_made_of_inline_or_not() {
        let long = "x".repeat(INLINE + 1);
        for s in [
            "",
            "v1",
            "ConfigMap",
            "rbac.authorization.k8s.io/v1",
            "ü/ß",
            &long[1..],
            &long,
        ] {
            let t = ShortStr::from(s);
            assert_eq!(&*t, s);
            assert_eq!(format!("{t:?}"), format!("{s:?}"));
            assert_eq!(
                matches!(t, ShortStr::Inline { .. }),
                s.len() <= INLINE,
                "{s}"
            );
        }
        assert_eq!(ShortStr::from("a"), ShortStr::from("a"));
        assert_ne!(ShortStr::from("a"), ShortStr::from("b"));
        assert_eq!(ShortStr::from(&*long), ShortStr::from(&*long));
    }
}
